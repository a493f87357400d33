//! Layer entry names: normalised into the image root, held to Linux's limits, and told apart
//! (a whiteout, an opaque marker, aufs bookkeeping, a real entry).

pub const WHITEOUT_PREFIX: &str = ".wh.";
pub const OPAQUE_MARKER: &str = ".wh..wh..opq";

/// A path made relative to the image root, with `.` and `..` resolved without leaving it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    /// `a/b/c`; empty for the root itself.
    pub path: String,
    /// True when the entry was absolute or its `..` tried to climb above the root.
    pub escaped: bool,
}

/// Normalise a tar entry name or hard-link target lexically (a tar stream has no symlinks to
/// follow, and clamping `..` at the root is what chroot-style resolution does).
pub fn normalize(raw: &str) -> Normalized {
    // An absolute name escapes, but for the root itself ("/"), which umoci and podman write.
    let mut escaped = raw.starts_with('/') && raw.split('/').any(|c| !c.is_empty() && c != ".");
    let mut parts: Vec<&str> = Vec::new();
    for comp in raw.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    escaped = true;
                }
            }
            c => parts.push(c),
        }
    }
    Normalized {
        path: parts.join("/"),
        escaped,
    }
}

/// Linux's NAME_MAX: squashfs stores longer names (tar2sqfs writes them) but the kernel, unsquashfs
/// and every tool reading the image then call it corrupt.
const NAME_MAX: usize = 255;
/// Linux's PATH_MAX less the leading '/': a deeper path cannot be opened by one path anywhere.
const PATH_MAX: usize = 4095;

/// Why a normalised path (or a symlink target) cannot go into an image, if it cannot.
pub fn over_limits(path: &str) -> Option<String> {
    if path.len() > PATH_MAX {
        return Some(format!(
            "it is {} bytes long, more than {PATH_MAX}",
            path.len()
        ));
    }
    path.split('/').find(|c| c.len() > NAME_MAX).map(|c| {
        format!(
            "a name in it is {} bytes long, more than {NAME_MAX}",
            c.len()
        )
    })
}

/// What a (normalised) layer entry means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// `.wh.NAME`: NAME (this path) is deleted from the layers below.
    Whiteout(String),
    /// `DIR/.wh..wh..opq`: DIR's contents in the layers below are hidden.
    Opaque(String),
    /// Other `.wh..wh.*` names (aufs bookkeeping such as `.wh..wh.plnk`): never part of the image.
    Internal,
    /// A real entry.
    Entry,
}

pub fn classify(path: &str) -> Kind {
    let (dir, name) = match path.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => ("", path),
    };
    if name == OPAQUE_MARKER {
        return Kind::Opaque(dir.to_string());
    }
    if name.starts_with(".wh..wh.") {
        return Kind::Internal;
    }
    match name.strip_prefix(WHITEOUT_PREFIX) {
        Some("") | None => Kind::Entry,
        Some(hidden) if dir.is_empty() => Kind::Whiteout(hidden.to_string()),
        Some(hidden) => Kind::Whiteout(format!("{dir}/{hidden}")),
    }
}

/// Strict ancestors of `path`, nearest first: `a/b/c` → `a/b`, `a`.
pub(super) fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut cur = path;
    std::iter::from_fn(move || {
        let (parent, _) = cur.rsplit_once('/')?;
        cur = parent;
        Some(parent)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_paths() {
        let cases = [
            ("a/b", "a/b", false),
            ("./a/b/", "a/b", false),
            ("a//b/./c", "a/b/c", false),
            ("/etc/passwd", "etc/passwd", true),
            ("a/../b", "b", false),
            ("../../etc/shadow", "etc/shadow", true),
            ("a/../../b", "b", true),
            ("./", "", false),
            ("/", "", false),
            ("/./", "", false),
            ("/..", "", true),
            ("..", "", true),
            ("a/b/..", "a", false),
        ];
        for (raw, path, escaped) in cases {
            assert_eq!(
                normalize(raw),
                Normalized {
                    path: path.into(),
                    escaped
                },
                "{raw}"
            );
        }
    }

    #[test]
    fn classify_names() {
        let cases = [
            ("etc/.wh.motd", Kind::Whiteout("etc/motd".into())),
            (".wh.opt", Kind::Whiteout("opt".into())),
            (
                "usr/share/doc/.wh..wh..opq",
                Kind::Opaque("usr/share/doc".into()),
            ),
            (".wh..wh..opq", Kind::Opaque("".into())),
            ("x/.wh..wh.plnk", Kind::Internal),
            ("x/.wh.", Kind::Entry),
            ("x/a.wh.b", Kind::Entry),
            ("etc/motd", Kind::Entry),
        ];
        for (p, k) in cases {
            assert_eq!(classify(p), k, "{p}");
        }
    }

    #[test]
    fn over_limits_bounds() {
        assert!(over_limits(&"n".repeat(256))
            .unwrap()
            .contains("256 bytes long"));
        assert!(over_limits(&"n".repeat(255)).is_none());
        let deep = vec!["d".repeat(200); 21].join("/");
        assert!(over_limits(&deep).unwrap().contains("more than 4095"));
        assert!(over_limits(&deep[..4095]).is_none());
    }
}

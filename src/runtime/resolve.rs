//! What the image alone decides about a path in the container, read from the image before the
//! container exists: where a mount would land (runtime/provide.rs) and which of the command's
//! PATH candidates cannot exist there (the exec's search skips them).
//!
//! Only the image decides where no mount of the plan covers the path, a directory on the way or
//! anything below it, and every directory on the way is the image's own (a symlinked directory
//! could lead into a mount).

use std::path::{Path, PathBuf};

use crate::image::sqfs::{Archive, Kind};

/// What the image has at a path, its last component not followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Missing,
    Dir,
    File,
    Symlink(PathBuf),
    Other,
}

/// What `ar` has at `p`.
pub fn found_in(ar: &Archive, p: &Path) -> Found {
    use std::os::unix::ffi::OsStrExt;
    let Some(s) = p.to_str() else {
        return Found::Other;
    };
    match ar.lookup(s, false) {
        Ok(None) => Found::Missing,
        Ok(Some(i)) => match i.kind {
            Kind::Dir => Found::Dir,
            Kind::File => Found::File,
            Kind::Symlink => Found::Symlink(PathBuf::from(std::ffi::OsStr::from_bytes(
                i.symlink_target().unwrap_or_default(),
            ))),
            _ => Found::Other,
        },
        Err(_) => Found::Other,
    }
}

/// Whether `path` (absolute and normal) cannot exist in the container: no mount in `mounts`
/// (their destinations) is at, above or below it, and the image lacks it or a directory on the
/// way, every one before that being a real directory of the image's.
pub fn absent(path: &Path, mounts: &[&Path], found: &impl Fn(&Path) -> Found) -> bool {
    if mounts
        .iter()
        .any(|m| path.starts_with(m) || m.starts_with(path))
    {
        return false;
    }
    let mut ancestors: Vec<&Path> = path.ancestors().collect();
    ancestors.reverse();
    for p in ancestors {
        match found(p) {
            Found::Missing => return true,
            Found::Dir => {}
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn image() -> impl Fn(&Path) -> Found {
        let t: HashMap<&str, Found> = [
            ("/", Found::Dir),
            ("/usr", Found::Dir),
            ("/usr/bin", Found::Dir),
            ("/usr/bin/true", Found::File),
            ("/usr/local", Found::Dir),
            ("/usr/local/bin", Found::Dir),
            ("/bin", Found::Symlink("usr/bin".into())),
            ("/dev", Found::Dir),
            ("/dev/null", Found::Other),
        ]
        .into_iter()
        .collect();
        move |p: &Path| {
            t.get(p.to_str().unwrap())
                .cloned()
                .unwrap_or(Found::Missing)
        }
    }

    #[test]
    fn which_paths_the_image_alone_rules_out() {
        let cases: [(&str, &[&str], bool); 11] = [
            ("/usr/local/bin/true", &[], true),
            ("/usr/local/sbin/true", &[], true),
            ("/opt/tool/bin/x", &[], true),
            ("/usr/bin/true", &[], false),
            ("/bin/true", &[], false),
            ("/bin/nothing", &[], false),
            ("/dev/null/x", &[], false),
            ("/usr/local/bin/true", &["/usr/local"], false),
            ("/usr/local/bin/true", &["/usr/local/bin/true"], false),
            ("/usr/local/bin/true", &["/usr/local/bin/true/sub"], false),
            ("/usr/local/bin/true", &["/usr/local/binx", "/home/u"], true),
        ];
        let found = image();
        for (path, mounts, want) in cases {
            let mounts: Vec<&Path> = mounts.iter().map(Path::new).collect();
            assert_eq!(
                absent(Path::new(path), &mounts, &found),
                want,
                "{path} {mounts:?}"
            );
        }
    }
}

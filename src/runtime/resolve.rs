//! What the image alone decides about a path in the container, read from the image before the
//! container exists: where a mount would land (runtime/provide.rs) and which of the command's
//! PATH candidates cannot exist there (the exec's search skips them).
//!
//! Only the image decides where no mount of the plan covers the path, a directory on the way or
//! anything below it, and every directory on the way is the image's own (a symlinked directory
//! could lead into a mount).

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use super::plan::normalize;
use crate::image::sqfs::{Archive, Kind};

/// Symlinks followed at most from a destination to the file a mount would land on.
const MAX_LINKS: usize = 8;

/// What the image has at a path, its last component not followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Missing,
    Dir,
    File,
    Symlink(PathBuf),
    Other,
}

/// What `ar` has at a path, each path looked up once: a start asks about the same directories
/// for every mount and PATH candidate.
pub fn found_in(ar: &Archive) -> impl Fn(&Path) -> Found + '_ {
    let seen = std::cell::RefCell::new(std::collections::HashMap::new());
    move |p: &Path| {
        if let Some(f) = seen.borrow().get(p) {
            return Found::clone(f);
        }
        let f = look_up(ar, p);
        seen.borrow_mut().insert(p.to_path_buf(), f.clone());
        f
    }
}

/// What `ar` has at `p`.
fn look_up(ar: &Archive, p: &Path) -> Found {
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

/// Where a mount at `dst` lands in the image when the image alone decides it: the directory and
/// name of a regular file, or of a name the directory lacks, after the image's symlinks at the
/// last component. None when the way passes through anything else (a missing directory, a
/// symlinked directory, a directory or device at the end) or through `covered`, the
/// destinations of the mounts made before this one.
pub fn landing(
    dst: &Path,
    covered: &[&Path],
    found: &impl Fn(&Path) -> Found,
) -> Option<(PathBuf, OsString)> {
    let mut path = normalize(dst);
    for _ in 0..=MAX_LINKS {
        if covered.iter().any(|c| path.starts_with(c)) {
            return None;
        }
        let (dir, name) = (path.parent()?.to_path_buf(), path.file_name()?.to_owned());
        if first_non_dir(&dir, found).is_some() {
            return None;
        }
        match found(&path) {
            Found::Missing | Found::File => return Some((dir, name)),
            Found::Symlink(target) => path = follow(&dir, &target, found)?,
            Found::Dir | Found::Other => return None,
        }
    }
    None
}

/// `target`, a symlink's in the image directory `dir`, as a path in the image. A component
/// with more after it must be a real directory: the kernel takes `..` after the directory it
/// resolved, so behind a symlinked one a textual `..` would go elsewhere.
fn follow(dir: &Path, target: &Path, found: &impl Fn(&Path) -> Found) -> Option<PathBuf> {
    let mut out = if target.is_absolute() {
        PathBuf::from("/")
    } else {
        dir.to_path_buf()
    };
    let parts: Vec<Component> = target.components().collect();
    for (i, c) in parts.iter().enumerate() {
        match c {
            Component::Normal(n) => {
                out.push(n);
                if i + 1 < parts.len() && found(&out) != Found::Dir {
                    return None;
                }
            }
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    Some(out)
}

/// Whether a mount at one of `dsts` could land where its path does not say: the path, or a
/// directory on the way, is a symlink (or anything but a directory) in the image. Directories
/// the image lacks are made as they are named. Then neither `landing` nor `absent` may judge by
/// the paths alone.
pub fn crosses_symlink(dsts: &[&Path], found: &impl Fn(&Path) -> Found) -> bool {
    dsts.iter().any(|d| {
        let d = normalize(d);
        match first_non_dir(&d, found) {
            None | Some((_, Found::Missing)) => false,
            Some((a, Found::File)) => a != d,
            Some(_) => true,
        }
    })
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
    matches!(first_non_dir(path, found), Some((_, Found::Missing)))
}

/// The first path on the way to `path` (from the root, `path` itself last) that is not a
/// directory in the image, and what the image has there; None when every one is.
fn first_non_dir<'a>(path: &'a Path, found: &impl Fn(&Path) -> Found) -> Option<(&'a Path, Found)> {
    let ancestors: Vec<&Path> = path.ancestors().collect();
    ancestors.into_iter().rev().find_map(|a| match found(a) {
        Found::Dir => None,
        f => Some((a, f)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A small image: /etc (with passwd, a symlinked localtime, a dangling resolv.conf), the
    /// zoneinfo it points into, /usr/bin, a symlinked directory and a device.
    fn image() -> impl Fn(&Path) -> Found {
        let t: HashMap<&str, Found> = [
            ("/", Found::Dir),
            ("/etc", Found::Dir),
            ("/etc/passwd", Found::File),
            (
                "/etc/localtime",
                Found::Symlink("../usr/share/zoneinfo/UTC".into()),
            ),
            (
                "/etc/resolv.conf",
                Found::Symlink("/run/resolv.conf".into()),
            ),
            ("/etc/loop", Found::Symlink("loop".into())),
            ("/etc/abs", Found::Symlink("/etc/passwd".into())),
            ("/etc/updown", Found::Symlink("dir/../passwd".into())),
            ("/etc/behind", Found::Symlink("link/../hosts".into())),
            ("/etc/link", Found::Symlink("/opt".into())),
            ("/etc/dir", Found::Dir),
            ("/dev", Found::Dir),
            ("/dev/null", Found::Other),
            ("/usr", Found::Dir),
            ("/usr/bin", Found::Dir),
            ("/usr/bin/true", Found::File),
            ("/usr/local", Found::Dir),
            ("/usr/local/bin", Found::Dir),
            ("/usr/share", Found::Dir),
            ("/usr/share/zoneinfo", Found::Dir),
            ("/usr/share/zoneinfo/UTC", Found::File),
            ("/bin", Found::Symlink("usr/bin".into())),
            ("/lib", Found::Symlink("usr/lib".into())),
            ("/usr/lib", Found::Dir),
        ]
        .into_iter()
        .collect();
        move |p: &Path| {
            t.get(p.to_str().unwrap())
                .cloned()
                .unwrap_or(Found::Missing)
        }
    }

    fn paths<'a>(v: &[&'a str]) -> Vec<&'a Path> {
        v.iter().map(|s| Path::new(*s)).collect()
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
            let mounts = paths(mounts);
            assert_eq!(
                absent(Path::new(path), &mounts, &found),
                want,
                "{path} {mounts:?}"
            );
        }
    }

    #[test]
    fn mounts_that_cross_a_symlink() {
        let cases: [(&[&str], bool); 7] = [
            (&[], false),
            (
                &["/proc", "/dev/nvidia0", "/home/u/x", "/.gpurun/lib/a"],
                false,
            ),
            (&["/etc/passwd", "/usr/bin/tool"], false),
            (&["/bin/tool"], true),
            (&["/etc/link/x"], true),
            (&["/etc/localtime"], true),
            (&["/dev/null/x"], true),
        ];
        let found = image();
        for (dsts, want) in cases {
            let dsts = paths(dsts);
            assert_eq!(crosses_symlink(&dsts, &found), want, "{dsts:?}");
        }
    }

    #[test]
    fn where_a_mount_lands_when_the_image_alone_decides() {
        type Landing = Option<(PathBuf, OsString)>;
        let at = |d: &str, n: &str| Some((PathBuf::from(d), OsString::from(n)));
        let cases: Vec<(&str, Vec<&str>, Landing)> = vec![
            ("/etc/passwd", vec![], at("/etc", "passwd")),
            ("/etc/hosts", vec![], at("/etc", "hosts")),
            ("/etc/localtime", vec![], at("/usr/share/zoneinfo", "UTC")),
            ("/etc/abs", vec![], at("/etc", "passwd")),
            ("/etc/./x/../group", vec![], at("/etc", "group")),
            ("/etc/resolv.conf", vec![], None),
            ("/etc/loop", vec![], None),
            ("/etc/dir", vec![], None),
            ("/dev/null", vec![], None),
            ("/lib/libfoo.so", vec![], None),
            ("/opt/missing/file", vec![], None),
            ("/etc/passwd", vec!["/etc"], None),
            ("/etc/localtime", vec!["/usr/share"], None),
            ("/etc/localtime", vec!["/usr/share/zoneinfo/UTC"], None),
            (
                "/etc/passwd",
                vec!["/tmp", "/etc/hosts", "/etcetera"],
                at("/etc", "passwd"),
            ),
            ("/etc/updown", vec![], at("/etc", "passwd")),
            ("/etc/behind", vec![], None),
        ];
        let found = image();
        for (dst, covered, want) in cases {
            let covered = paths(&covered);
            assert_eq!(
                landing(Path::new(dst), &covered, &found),
                want,
                "{dst} {covered:?}"
            );
        }
    }
}

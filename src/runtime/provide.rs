//! Files the image server provides in place of mounts.
//!
//! A container gets a few files of gpurun's: /etc/hosts, /etc/resolv.conf and /etc/localtime
//! from the host, and /etc/passwd and /etc/group with the caller's entries. As bind mounts they
//! cost the container process a detached copy of each source, the lookups of each destination,
//! a mount point where the image has none, and a mount: 0.8 ms of an `exec true` on the 2-vCPU
//! VM (benches/README.md, stop 17). Copies taken at start do as well (Apptainer gives copies of
//! hosts and resolv.conf too), and the image server can provide those from memory at no cost
//! until they are read (runtime/points.rs).
//!
//! A mount is provided only where the copy gives the container what the mount would (`resolve`):
//! its destination, after the image's symlinks, is a regular file or a missing name in a
//! directory of the image, every directory on the way is the image's own, and no mount made before
//! it covers any path on the way. Otherwise, and when the root is not the image server's mount
//! (--writable-tmpfs, an extracted image), it stays a mount.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::plan::{normalize, Mount, MountSource};
use super::resolve::{found_in, Found};
use crate::image::sqfs::Archive;

/// A file the image server provides: the plan's mount number `mount`, as `name` in the image's
/// directory `dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provided {
    pub mount: usize,
    pub dir: PathBuf,
    pub name: OsString,
    pub contents: Arc<[u8]>,
}

/// Symlinks followed at most from a destination to the file a mount would land on.
const MAX_LINKS: usize = 8;
/// Host files larger than this stay mounts (the defaults are a few KiB at most).
const MAX_COPY: u64 = 1 << 20;

/// Where a mount at `dst` lands in the image when the image alone decides it: the directory and
/// name of a regular file, or of a name the directory lacks, after the image's symlinks at the
/// last component. None when the way passes through anything else (a missing directory, a
/// symlinked directory, a directory or device at the end) or through `covered`, the
/// destinations of the mounts made before this one.
pub fn resolve(
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
        if !dir.ancestors().all(|a| found(a) == Found::Dir) {
            return None;
        }
        match found(&path) {
            Found::Missing | Found::File => return Some((dir, name)),
            Found::Symlink(target) => path = normalize(&dir.join(target)),
            Found::Dir | Found::Other => return None,
        }
    }
    None
}

/// The mounts of `mounts` the image server provides instead, with their contents: read-only
/// mounts a copy will do for (`Mount::copy`) that `resolve` places in the image `ar`. A generated
/// file's contents are its own; a host file's are read now (`read_host`: None keeps the mount).
/// Of two onto one file the later stays a mount, over the first.
pub fn provided(
    ar: &Archive,
    mounts: &[Mount],
    read_host: impl Fn(&Path) -> Option<Vec<u8>>,
) -> Vec<Provided> {
    let found = |p: &Path| found_in(ar, p);
    let mut out: Vec<Provided> = Vec::new();
    for (i, m) in mounts.iter().enumerate() {
        if !(m.copy && m.readonly) {
            continue;
        }
        let covered: Vec<&Path> = (mounts[..i].iter().enumerate())
            .filter(|(j, _)| !out.iter().any(|p| p.mount == *j))
            .map(|(_, m)| m.dst.as_path())
            .collect();
        let Some((dir, name)) = resolve(&m.dst, &covered, &found) else {
            continue;
        };
        if out.iter().any(|p| p.dir == dir && p.name == name) {
            continue;
        }
        let contents = match &m.source {
            MountSource::File { contents } => contents.as_bytes().to_vec(),
            MountSource::Bind { src } => match read_host(src) {
                Some(c) => c,
                None => continue,
            },
            _ => continue,
        };
        out.push(Provided {
            mount: i,
            dir,
            name,
            contents: contents.into(),
        });
    }
    out
}

/// A host file's contents for a copy: a regular file (after symlinks, as a bind takes it) of at
/// most `MAX_COPY` bytes.
pub fn read_host_file(src: &Path) -> Option<Vec<u8>> {
    let m = std::fs::metadata(src).ok()?;
    if !m.is_file() || m.len() > MAX_COPY {
        return None;
    }
    std::fs::read(src).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A small image: /etc (with passwd, a symlinked localtime, a dangling resolv.conf), the
    /// zoneinfo it points into, a symlinked directory and a device.
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
            ("/etc/dir", Found::Dir),
            ("/etc/null", Found::Other),
            ("/usr", Found::Dir),
            ("/usr/share", Found::Dir),
            ("/usr/share/zoneinfo", Found::Dir),
            ("/usr/share/zoneinfo/UTC", Found::File),
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
            ("/etc/null", vec![], None),
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
        ];
        let found = image();
        for (dst, covered, want) in cases {
            let covered: Vec<&Path> = covered.iter().map(Path::new).collect();
            assert_eq!(
                resolve(Path::new(dst), &covered, &found),
                want,
                "{dst} {covered:?}"
            );
        }
    }
}

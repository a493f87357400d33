//! Files the image server provides in place of mounts.
//!
//! A container gets a few files of gpurun's: /etc/hosts, /etc/resolv.conf and /etc/localtime
//! from the host, and /etc/passwd and /etc/group with the caller's entries. As bind mounts they
//! cost the container process a detached copy of each source, the lookups of each destination,
//! a mount point where the image has none, and a mount: 0.8 ms of an `exec true` on a 2-CPU
//! machine. Copies taken at start do as well (Apptainer gives copies of
//! hosts and resolv.conf too), and the image server can provide those from memory at no cost
//! until they are read (runtime/points.rs).
//!
//! A mount is provided only where the copy gives the container what the mount would
//! (`resolve::landing`): its destination, after the image's symlinks, is a regular file or a
//! missing name in a directory of the image, every directory on the way is the image's own, and
//! no mount made before it covers any path on the way. Otherwise, and when the root is not the
//! image server's mount (--writable-tmpfs, an extracted image), it stays a mount.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use super::plan::{Mount, MountSource};
use super::resolve::{landing, Found};
use crate::image::sqfs::{Archive, Kind};

/// A file the image server provides: the plan's mount number `mount`, as `name` in the image
/// directory whose inode reference is `dir` (found here, so the server has nothing to look up
/// and no way to miss what C then leaves unmounted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provided {
    pub mount: usize,
    pub dir: u64,
    pub name: OsString,
    pub contents: Arc<[u8]>,
}

/// Host files larger than this stay mounts (the defaults are a few KiB at most).
const MAX_COPY: u64 = 1 << 20;

/// The mounts of `mounts` the image server provides instead, with their contents: read-only
/// mounts a copy will do for (`Mount::copy`) that `resolve::landing` places in the image `ar`
/// (what it has at a path: `found`).
/// A generated file's contents are its own; a host file's are read now (`read_host_file`: a
/// file it refuses stays a mount). Of two onto one file the later stays a mount, over the first.
pub fn provided(ar: &Archive, mounts: &[Mount], found: &impl Fn(&Path) -> Found) -> Vec<Provided> {
    let mut out: Vec<Provided> = Vec::new();
    for (i, m) in mounts.iter().enumerate() {
        if !(m.copy && m.readonly) {
            continue;
        }
        let covered: Vec<&Path> = (mounts[..i].iter().enumerate())
            .filter(|(j, _)| !out.iter().any(|p| p.mount == *j))
            .map(|(_, m)| m.dst.as_path())
            .collect();
        let Some((dir, name)) = landing(&m.dst, &covered, found) else {
            continue;
        };
        let dir = dir
            .to_str()
            .and_then(|d| ar.lookup(d, false).ok().flatten());
        let Some(dir) = dir.filter(|d| d.kind == Kind::Dir).map(|d| d.r) else {
            continue;
        };
        if out.iter().any(|p| p.dir == dir && p.name == name) {
            continue;
        }
        let contents = match &m.source {
            MountSource::File { contents } => contents.as_bytes().to_vec(),
            MountSource::Bind { src } => match read_host_file(src) {
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
fn read_host_file(src: &Path) -> Option<Vec<u8>> {
    let m = std::fs::metadata(src).ok()?;
    if !m.is_file() || m.len() > MAX_COPY {
        return None;
    }
    std::fs::read(src).ok()
}

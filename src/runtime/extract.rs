//! The fallback when /dev/fuse cannot be used: extract the image once into a per-user cache
//! directory keyed by the image's content, and run from there.
//!
//! The tree is written into a temporary directory beside its final place and renamed into place
//! only when complete, so a half-extracted tree is never used and concurrent callers are safe:
//! the first rename wins, the others see ENOTEMPTY/EEXIST and drop their copy.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::image::sqfs::{Archive, Inode, Kind, SqfsError};
use crate::store::tree::remove_tree;
use crate::sys;

#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    #[error(transparent)]
    Image(#[from] SqfsError),
    #[error("cannot extract image {image} into {path}: {source} (free some space or set another cache directory)")]
    Io {
        image: PathBuf,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The extracted root filesystem of `image` under `base/<content key>`, extracting it first if
/// no complete copy is there yet. `base` is a private directory of the caller's (the cache's
/// `rootfs/`, checked by its opener): nobody else can have put a tree there.
pub fn cached_rootfs(
    image: &Path,
    archive: &Archive,
    base: &Path,
) -> Result<PathBuf, ExtractError> {
    let io = |path: &Path| io_error(image, path);
    let key = archive.content_key()?;
    let dest = base.join(&key);
    // Only complete trees are ever renamed to this name.
    if dest.is_dir() {
        return Ok(dest);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    remove_stale(base, nanos);
    let tmp = base.join(format!(".tmp-{key}-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&tmp).map_err(io(&tmp))?;
    if let Err(e) = extract_tree(image, archive, &tmp) {
        remove_tree(&tmp);
        return Err(e);
    }
    match std::fs::rename(&tmp, &dest) {
        Ok(()) => Ok(dest),
        // Another caller finished first: use theirs.
        Err(_) if dest.is_dir() => {
            remove_tree(&tmp);
            Ok(dest)
        }
        Err(e) => {
            remove_tree(&tmp);
            Err(io(&dest)(e))
        }
    }
}

/// Temporary trees left by extractions that died (killed, node crash) are removed once a day
/// old. Their age comes from the start time in their name: their mtime is not a clue, since a
/// finished tree gets the image's own root mtime just before it is renamed.
const STALE_NANOS: u128 = 24 * 3600 * 1_000_000_000;

fn tmp_started(name: &str) -> Option<u128> {
    name.strip_prefix(".tmp-")?.rsplit('-').next()?.parse().ok()
}

fn remove_stale(base: &Path, now: u128) {
    let Ok(rd) = std::fs::read_dir(base) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let started = name.to_str().and_then(tmp_started);
        if started.is_some_and(|t| now.saturating_sub(t) > STALE_NANOS) {
            remove_tree(&e.path());
        }
    }
}

/// user.* xattrs only: the others need privileges we do not have and mean nothing here.
fn copy_xattrs(ar: &Archive, ino: &Inode, p: &Path) {
    if !ino.has_xattrs() {
        return;
    }
    let Ok(xs) = ar.xattrs(ino) else { return };
    for (name, value) in xs.iter().filter(|(n, _)| n.starts_with(b"user.")) {
        let _ = sys::set_xattr_nofollow(p, name, value);
    }
}

/// Modes without setuid/setgid (they would be meaningless or dangerous in a user's cache).
fn safe_mode(ino: &Inode) -> u32 {
    ino.perm as u32 & 0o1777
}

/// Maps an I/O error at `path` while extracting `image`.
fn io_error(image: &Path, path: &Path) -> impl FnOnce(std::io::Error) -> ExtractError {
    let (image, path) = (image.to_owned(), path.to_owned());
    move |source| ExtractError::Io {
        image,
        path,
        source,
    }
}

fn extract_tree(image: &Path, ar: &Archive, dst: &Path) -> Result<(), ExtractError> {
    let io = |path: &Path| io_error(image, path);
    let root = ar.root()?;
    let mut dirs: Vec<(PathBuf, Arc<Inode>)> = vec![(dst.to_owned(), root.clone())];
    let mut todo = vec![(dst.to_owned(), root.clone())];
    let mut seen_dirs = HashSet::from([root.r]);
    let mut links: HashMap<u64, PathBuf> = HashMap::new();
    let mut buf = vec![0u8; (ar.block_size() as usize).max(1 << 20)];
    while let Some((dir_path, dir)) = todo.pop() {
        for e in ar.readdir(&dir)?.iter() {
            let p = dir_path.join(OsStr::from_bytes(&e.name));
            let ino = ar.inode(e.inode)?;
            if ino.kind == Kind::Dir {
                // Directories cannot be hard linked: seeing one twice means a corrupt image (a loop).
                if !seen_dirs.insert(ino.r) {
                    return Err(SqfsError::Corrupt {
                        path: ar.path().to_owned(),
                        what: format!("directory {} appears twice", p.display()),
                    }
                    .into());
                }
                std::fs::create_dir(&p).map_err(io(&p))?;
                dirs.push((p.clone(), ino.clone()));
                todo.push((p, ino));
                continue;
            }
            if ino.nlink > 1 {
                if let Some(first) = links.get(&ino.r) {
                    std::fs::hard_link(first, &p).map_err(io(&p))?;
                    continue;
                }
            }
            let made = match ino.kind {
                Kind::File => {
                    write_file(ar, &ino, &p, &mut buf).map_err(|e| e.into_extract(image, &p))?;
                    true
                }
                Kind::Symlink => {
                    let t = OsStr::from_bytes(ino.symlink_target().unwrap_or_default());
                    std::os::unix::fs::symlink(t, &p).map_err(io(&p))?;
                    true
                }
                Kind::Fifo => {
                    sys::mkfifo(&p, safe_mode(&ino)).map_err(io(&p))?;
                    true
                }
                // Device nodes cannot be made without privilege (and the mount is nodev anyway);
                // sockets are meaningless in an image.
                _ => false,
            };
            if !made {
                continue;
            }
            if ino.kind == Kind::Fifo {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(safe_mode(&ino)))
                    .map_err(io(&p))?;
            }
            sys::set_mtime_nofollow(&p, ino.mtime).map_err(io(&p))?;
            if ino.nlink > 1 {
                links.insert(ino.r, p);
            }
        }
    }
    // Directory modes and times last, children before parents (so writing into them still
    // worked, and their mtimes are not bumped afterwards). The owner keeps rwx so the cache
    // can be cleaned up with rm -rf.
    for (p, ino) in dirs.iter().rev() {
        copy_xattrs(ar, ino, p);
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(safe_mode(ino) | 0o700))
            .map_err(io(p))?;
        sys::set_mtime_nofollow(p, ino.mtime).map_err(io(p))?;
    }
    Ok(())
}

enum WriteError {
    Image(SqfsError),
    Io(std::io::Error),
}

impl WriteError {
    fn into_extract(self, image: &Path, p: &Path) -> ExtractError {
        match self {
            WriteError::Image(e) => e.into(),
            WriteError::Io(source) => ExtractError::Io {
                image: image.to_owned(),
                path: p.to_owned(),
                source,
            },
        }
    }
}

/// Write a regular file; runs of zeros become holes (sparse files stay sparse).
fn write_file(ar: &Archive, ino: &Inode, p: &Path, buf: &mut [u8]) -> Result<(), WriteError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(p)
        .map_err(WriteError::Io)?;
    let mut off = 0u64;
    loop {
        let n = ar.read_at(ino, off, buf).map_err(WriteError::Image)?;
        if n == 0 {
            break;
        }
        for chunk in buf[..n].chunks(4096) {
            if chunk.iter().all(|&b| b == 0) {
                f.seek(SeekFrom::Current(chunk.len() as i64))
                    .map_err(WriteError::Io)?;
            } else {
                f.write_all(chunk).map_err(WriteError::Io)?;
            }
        }
        off += n as u64;
    }
    f.set_len(ino.size).map_err(WriteError::Io)?;
    // Before the mode: setting user.* xattrs needs write permission.
    copy_xattrs(ar, ino, p);
    f.set_permissions(std::fs::Permissions::from_mode(safe_mode(ino)))
        .map_err(WriteError::Io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_temporary_trees() {
        assert_eq!(
            tmp_started(".tmp-abc123-42-1700000000000000000"),
            Some(1_700_000_000_000_000_000)
        );
        assert_eq!(tmp_started("abc123"), None);
        assert_eq!(tmp_started(".tmp-x-1-notanumber"), None);
        let d = tempfile::tempdir().unwrap();
        let now = 10 * STALE_NANOS;
        let old = d.path().join(format!(".tmp-k-1-{}", now - STALE_NANOS - 1));
        let young = d.path().join(format!(".tmp-k-2-{}", now - 1000));
        let done = d.path().join("k");
        for p in [&old, &young, &done] {
            std::fs::create_dir_all(p.join("sub")).unwrap();
        }
        std::fs::set_permissions(old.join("sub"), std::fs::Permissions::from_mode(0o500)).unwrap();
        remove_stale(d.path(), now);
        assert!(!old.exists() && young.exists() && done.exists());
    }
}

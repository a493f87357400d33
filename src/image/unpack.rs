//! A flattened image's tar stream unpacked into a directory as it is written: the tree a first
//! start runs from while the image's .sqsh is still being compressed (image/pull/for_start.rs).

use std::fs::Permissions;
use std::io::{self, BufReader, PipeWriter, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Set when the process gives its pull up: every unpacking stops at its next entry.
static STOP: AtomicBool = AtomicBool::new(false);
/// Unpacking threads running now.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// Stop every unpacking of this process and wait (a few seconds at most: one entry being
/// written) until none writes any more, so that its tree can be removed for good.
pub fn stop_all() {
    STOP.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    while RUNNING.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot unpack the image into {path}: {source} (free some space or set another cache directory)")]
pub struct UnpackError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// A writer of a tar stream whose entries a thread of its own unpacks into `dir` (modes and
/// times kept; owners are the caller's, as a rootless user's files are; no xattrs).
pub struct Unpacker {
    dir: PathBuf,
    pipe: Option<PipeWriter>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Unpacker {
    pub fn new(dir: &Path) -> Result<Unpacker, UnpackError> {
        let err = |source| UnpackError {
            path: dir.to_owned(),
            source,
        };
        std::fs::create_dir(dir).map_err(err)?;
        let (r, w) = io::pipe().map_err(err)?;
        let to = dir.to_owned();
        RUNNING.fetch_add(1, Ordering::SeqCst);
        let thread = std::thread::Builder::new()
            .name("unpack".into())
            .spawn(move || {
                let r = unpack_all(BufReader::with_capacity(1 << 20, r), &to);
                RUNNING.fetch_sub(1, Ordering::SeqCst);
                r
            })
            .map_err(|e| {
                RUNNING.fetch_sub(1, Ordering::SeqCst);
                err(e)
            })?;
        Ok(Unpacker {
            dir: dir.to_owned(),
            pipe: Some(w),
            thread: Some(thread),
        })
    }

    /// Wait for the last entry to be unpacked. After a failed write, this is the real reason.
    pub fn finish(mut self) -> Result<(), UnpackError> {
        self.pipe.take();
        let joined = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(io::Error::other("the unpacking thread panicked")),
            None => Ok(()),
        };
        joined.map_err(|source| UnpackError {
            path: self.dir.clone(),
            source,
        })
    }
}

/// Every entry of `from` into `to`. tar's `unpack_in` keeps each inside `to` (no `..`, no write
/// through a link); directories get their own mode and time only at the end, as the .sqsh has
/// them: a read-only one must still take its entries, and each entry changes its time.
fn unpack_all(from: impl io::Read, to: &Path) -> io::Result<()> {
    let mut a = tar::Archive::new(from);
    a.set_preserve_permissions(true);
    a.set_preserve_mtime(true);
    a.set_unpack_xattrs(false);
    let mut dirs = Vec::new();
    for e in a.entries()? {
        if STOP.load(Ordering::SeqCst) {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let mut e = e?;
        let path = to.join(&*e.path()?);
        let mtime = e.header().mtime()?;
        if !e.unpack_in(to)? {
            continue;
        }
        let time = filetime::FileTime::from_unix_time(mtime as i64, 0);
        if e.header().entry_type().is_dir() {
            let mode = e.header().mode()?;
            std::fs::set_permissions(&path, Permissions::from_mode((mode & 0o7777) | 0o700))?;
            dirs.push((path, mode, time));
        } else if mtime == 0 && !e.header().entry_type().is_hard_link() {
            // tar's unpack stores a time of 0 as 1 (a hard link has its target's).
            filetime::set_symlink_file_times(&path, time, time)?;
        }
    }
    for (path, mode, time) in dirs.iter().rev() {
        std::fs::set_permissions(path, Permissions::from_mode(mode & 0o7777))?;
        filetime::set_file_times(path, *time, *time)?;
    }
    Ok(())
}

impl Write for Unpacker {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.pipe {
            Some(p) => p.write(buf),
            None => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Unpacker {
    fn drop(&mut self) {
        // The reader sees the end of its stream and stops.
        self.pipe.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn entry(
        b: &mut tar::Builder<&mut Unpacker>,
        path: &str,
        kind: tar::EntryType,
        mode: u32,
        data: &[u8],
    ) {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_mtime(1_000_000);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, path, data).unwrap();
    }

    #[test]
    fn modes_times_links_and_read_only_directories() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("root");
        let mut u = Unpacker::new(&dir).unwrap();
        {
            let mut b = tar::Builder::new(&mut u);
            entry(&mut b, "ro", tar::EntryType::Directory, 0o555, b"");
            entry(&mut b, "ro/file", tar::EntryType::Regular, 0o640, b"hello");
            let mut h = tar::Header::new_ustar();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, "ro/link", "file").unwrap();
            let mut h = tar::Header::new_ustar();
            h.set_entry_type(tar::EntryType::Link);
            h.set_size(0);
            b.append_link(&mut h, "hard", "ro/file").unwrap();
            b.finish().unwrap();
        }
        u.finish().unwrap();
        let f = std::fs::metadata(dir.join("ro/file")).unwrap();
        assert_eq!(f.permissions().mode() & 0o7777, 0o640);
        assert_eq!(f.mtime(), 1_000_000);
        assert_eq!(f.nlink(), 2);
        assert_eq!(std::fs::read(dir.join("hard")).unwrap(), b"hello");
        assert_eq!(
            std::fs::read_link(dir.join("ro/link")).unwrap(),
            Path::new("file")
        );
        let d = std::fs::metadata(dir.join("ro")).unwrap();
        assert_eq!(d.permissions().mode() & 0o7777, 0o555);
        assert_eq!(d.mtime(), 1_000_000, "a directory's time is the image's");
        crate::store::tree::remove_tree(&dir);
    }

    #[test]
    fn an_entry_out_of_the_tree_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("root");
        let mut u = Unpacker::new(&dir).unwrap();
        {
            let mut b = tar::Builder::new(&mut u);
            let mut h = tar::Header::new_ustar();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, "esc", t.path()).unwrap();
            entry(&mut b, "esc/owned", tar::EntryType::Regular, 0o644, b"x");
            let _ = b.finish();
        }
        assert!(u.finish().is_err());
        assert!(!t.path().join("owned").exists());
    }

    #[test]
    fn a_stream_cut_short_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        let mut u = Unpacker::new(&t.path().join("root")).unwrap();
        let mut h = tar::Header::new_ustar();
        h.set_path("f").unwrap();
        h.set_size(1000);
        h.set_cksum();
        u.write_all(h.as_bytes()).unwrap();
        u.write_all(b"only a part").unwrap();
        assert!(u.finish().is_err());
    }
}

//! A flattened image written into a directory as its entries come (a flatten [`Sink`]): the tree
//! a first start runs from while the image's .sqsh is still being compressed
//! (image/pull/for_start.rs). Entries are made in stream order on the flattening thread, each
//! inside the tree and never through a link (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS);
//! file data goes to a pool of writer threads, a large file in pieces written in parallel, so
//! the copy into the page cache runs on the cores the inflating leaves.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{Mode, SFlag, UtimensatFlags};
use nix::sys::time::TimeSpec;
use tar::{EntryType, Header};

use crate::image::flatten::Sink;
use crate::sys::{open_beneath, set_xattr_fd};

/// Set when the process gives its pull up: every unpacking stops at its next entry or piece.
static STOP: AtomicBool = AtomicBool::new(false);
/// Unpackers and writer threads alive now.
static RUNNING: AtomicUsize = AtomicUsize::new(0);

/// A file's data is handed to the writers in pieces of at most this many bytes.
const PIECE: u64 = 1 << 20;
/// Buffers per writer.
const BUFFERS: usize = 4;

/// Stop every unpacking of this process and wait (a few seconds at most: one piece being
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

/// Writes the entries of a flattened image into `dir` (modes, times and `user.` xattrs kept;
/// owners are the caller's, as a rootless user's files are).
pub struct Unpacker {
    dir: PathBuf,
    root: OwnedFd,
    /// The directory of the last entry, kept open: a layer's entries come grouped by directory.
    parent: Option<(String, OwnedFd)>,
    /// Directories and their mode and time, set at the end: a read-only one must still take its
    /// entries, and each entry made in it changes its time.
    dirs: Vec<(String, u32, u64)>,
    seen_dirs: HashMap<String, usize>,
    writers: Writers,
}

impl Unpacker {
    /// Make `dir` and start `threads` writers.
    pub fn new(dir: &Path, threads: usize) -> Result<Unpacker, UnpackError> {
        let err = |source| UnpackError {
            path: dir.to_owned(),
            source,
        };
        std::fs::create_dir(dir).map_err(err)?;
        let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
        let root = nix::fcntl::open(dir, flags, Mode::empty()).map_err(|e| err(e.into()))?;
        let writers = Writers::start(threads.clamp(1, 8)).map_err(err)?;
        RUNNING.fetch_add(1, Ordering::SeqCst);
        Ok(Unpacker {
            dir: dir.to_owned(),
            root,
            parent: None,
            dirs: Vec::new(),
            seen_dirs: HashMap::new(),
            writers,
        })
    }

    /// Wait for the last piece to be written and give the directories their modes and times.
    /// After a failed entry, this is the real reason, with its path.
    pub fn finish(mut self) -> Result<(), UnpackError> {
        let written = self.writers.stop();
        if let Some(e) = self.writers.failed() {
            return Err(e);
        }
        written.map_err(|source| self.error("", source))?;
        for (path, mode, mtime) in self.dirs.iter().rev() {
            // An abandoning pull removes the tree meanwhile: a directory made read-only after
            // the removal passed it would stay.
            if STOP.load(Ordering::SeqCst) {
                return Err(self.error("", io::ErrorKind::Interrupted.into()));
            }
            let set = || -> nix::Result<()> {
                let fd = open_beneath(&self.root, path, OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
                let t = TimeSpec::new(*mtime as i64, 0);
                nix::sys::stat::futimens(&fd, &t, &t)?;
                nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(*mode))
            };
            set().map_err(|e| self.error(path, e.into()))?;
        }
        Ok(())
    }

    fn error(&self, path: &str, source: io::Error) -> UnpackError {
        UnpackError {
            path: self.dir.join(path),
            source,
        }
    }

    /// Note `e` as the reason (the first one stays) and hand it to flatten.
    fn failed(&self, path: &str, e: io::Error) -> io::Error {
        let kind = e.kind();
        self.writers.fail(self.error(path, e));
        kind.into()
    }

    /// The directory `path` is in, opened inside the tree (made, as tar2sqfs makes a directory
    /// no entry names, where missing), and `path`'s last name.
    fn parent_of<'p>(&mut self, path: &'p str) -> io::Result<(&OwnedFd, &'p str)> {
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        if self.parent.as_ref().is_none_or(|(p, _)| p != parent) {
            let fd = match open_beneath(&self.root, parent, OFlag::O_PATH | OFlag::O_DIRECTORY) {
                Err(Errno::ENOENT) => self.make_parents(parent)?,
                r => r?,
            };
            self.parent = Some((parent.to_string(), fd));
        }
        let (_, fd) = self.parent.as_ref().expect("set above");
        Ok((fd, name))
    }

    fn make_parents(&mut self, parent: &str) -> io::Result<OwnedFd> {
        let mut at = 0;
        for part in parent.split('/') {
            let upto = &parent[..at + part.len()];
            at += part.len() + 1;
            let (above, name) = upto.rsplit_once('/').unwrap_or(("", upto));
            let fd = open_beneath(&self.root, above, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
            match nix::sys::stat::mkdirat(&fd, name, Mode::from_bits_truncate(0o700)) {
                Ok(()) => self.directory(upto, 0o755, 0),
                Err(Errno::EEXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(open_beneath(
            &self.root,
            parent,
            OFlag::O_PATH | OFlag::O_DIRECTORY,
        )?)
    }

    /// Note a directory's mode and time for the end; a later entry of the same path decides.
    fn directory(&mut self, path: &str, mode: u32, mtime: u64) {
        match self.seen_dirs.get(path) {
            Some(&i) => self.dirs[i] = (path.to_string(), mode, mtime),
            None => {
                self.seen_dirs.insert(path.to_string(), self.dirs.len());
                self.dirs.push((path.to_string(), mode, mtime));
            }
        }
    }

    fn entry(
        &mut self,
        h: &Header,
        path: &str,
        xattrs: &[(String, Vec<u8>)],
        data: &mut dyn Read,
    ) -> io::Result<()> {
        let (mode, mtime) = (h.mode()? & 0o7777, h.mtime()?);
        let kind = h.entry_type();
        let (dir, name) = self.parent_of(path)?;
        let private = Mode::from_bits_truncate(0o700);
        match kind {
            EntryType::Directory => {
                match nix::sys::stat::mkdirat(dir, name, private) {
                    Ok(()) | Err(Errno::EEXIST) => self.directory(path, mode, mtime),
                    Err(e) => return Err(e.into()),
                }
                if !xattrs.is_empty() {
                    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
                    set_xattrs(&open_beneath(&self.root, path, flags)?, xattrs)?;
                }
                return Ok(());
            }
            EntryType::Regular => {
                let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW;
                let fd = nix::fcntl::openat(dir, name, flags | OFlag::O_CLOEXEC, private)?;
                nix::sys::stat::fchmod(&fd, Mode::from_bits_truncate(mode))?;
                set_xattrs(&fd, xattrs)?;
                return self.writers.send(File::from(fd), h.size()?, mtime, data);
            }
            EntryType::Fifo => {
                nix::sys::stat::mknodat(dir, name, SFlag::S_IFIFO, private, 0)?;
                // The fifo just made (mknodat would have failed on anything there) in the
                // caller's private tree: its mode as the image has it, past the umask.
                let m = Mode::from_bits_truncate(mode);
                nix::sys::stat::fchmodat(
                    dir,
                    name,
                    m,
                    nix::sys::stat::FchmodatFlags::FollowSymlink,
                )?;
            }
            _ => {
                return Err(io::Error::other(format!(
                    "a {kind:?} entry cannot be unpacked"
                )))
            }
        }
        set_link_time(dir, name, mtime)
    }

    fn link(&mut self, h: &Header, path: &str, target: &str) -> io::Result<()> {
        let mtime = h.mtime()?;
        if h.entry_type().is_hard_link() {
            let (tdir, tname) = target.rsplit_once('/').unwrap_or(("", target));
            let tfd = open_beneath(&self.root, tdir, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
            let (dir, name) = self.parent_of(path)?;
            nix::unistd::linkat(&tfd, tname, dir, name, nix::fcntl::AtFlags::empty())?;
            return Ok(());
        }
        let (dir, name) = self.parent_of(path)?;
        nix::unistd::symlinkat(target, dir, name)?;
        set_link_time(dir, name, mtime)
    }

    fn check(&self) -> io::Result<()> {
        if STOP.load(Ordering::SeqCst) {
            return Err(io::ErrorKind::Interrupted.into());
        }
        match self.writers.has_failed() {
            true => Err(io::Error::other("a file's data could not be written")),
            false => Ok(()),
        }
    }
}

/// The entry's `user.` xattrs, what a rootless user may set (the .sqsh alone keeps the others);
/// none on a file system without them.
fn set_xattrs(fd: &OwnedFd, xattrs: &[(String, Vec<u8>)]) -> io::Result<()> {
    for (key, value) in xattrs {
        let Some(name) = key.strip_prefix("SCHILY.xattr.") else {
            continue;
        };
        if !name.starts_with("user.") {
            continue;
        }
        match set_xattr_fd(fd, name.as_bytes(), value) {
            Err(e) if e.raw_os_error() != Some(libc::ENOTSUP) => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

fn set_link_time(dir: &OwnedFd, name: &str, mtime: u64) -> io::Result<()> {
    let t = TimeSpec::new(mtime as i64, 0);
    nix::sys::stat::utimensat(dir, name, &t, &t, UtimensatFlags::NoFollowSymlink)?;
    Ok(())
}

impl Sink for Unpacker {
    fn append(
        &mut self,
        header: &mut Header,
        path: &str,
        xattrs: &[(String, Vec<u8>)],
        data: &mut dyn Read,
    ) -> io::Result<()> {
        self.check()?;
        self.entry(header, path, xattrs, data)
            .map_err(|e| self.failed(path, e))
    }

    fn append_link(
        &mut self,
        header: &mut Header,
        path: &str,
        target: &str,
        _xattrs: &[(String, Vec<u8>)],
    ) -> io::Result<()> {
        self.check()?;
        self.link(header, path, target)
            .map_err(|e| self.failed(path, e))
    }

    fn finish(&mut self) -> io::Result<()> {
        self.check()
    }
}

impl Drop for Unpacker {
    fn drop(&mut self) {
        let _ = self.writers.stop();
        RUNNING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A file being written: its time is set by whoever finishes it last.
struct Open {
    file: File,
    mtime: u64,
    /// Pieces not yet written, plus one while the flattening thread still sends.
    left: AtomicUsize,
}

impl Open {
    fn one_done(&self) -> io::Result<()> {
        if self.left.fetch_sub(1, Ordering::AcqRel) != 1 {
            return Ok(());
        }
        let t = TimeSpec::new(self.mtime as i64, 0);
        Ok(nix::sys::stat::futimens(self.file.as_fd(), &t, &t)?)
    }
}

struct Piece {
    open: Arc<Open>,
    at: u64,
    data: Vec<u8>,
}

/// The writer threads, the buffers they hand back, and the first error one of them met.
struct Writers {
    /// One queue per writer: a file's pieces all go to one, in order (two writers of one file
    /// would take turns on its lock, out of order).
    queues: Vec<SyncSender<Piece>>,
    next: usize,
    /// Buffers of [`PIECE`] bytes, reused: a fixed amount of memory, no page faults per piece.
    free: Receiver<Vec<u8>>,
    threads: Vec<JoinHandle<io::Result<()>>>,
    failure: Arc<Mutex<Option<UnpackError>>>,
    failing: Arc<AtomicBool>,
}

impl Writers {
    fn start(n: usize) -> io::Result<Writers> {
        let (free_tx, free) = sync_channel::<Vec<u8>>(BUFFERS * n);
        for _ in 0..BUFFERS * n {
            let _ = free_tx.send(Vec::with_capacity(PIECE as usize));
        }
        let failing = Arc::new(AtomicBool::new(false));
        let (mut queues, mut threads) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let (tx, rx) = sync_channel::<Piece>(BUFFERS);
            let (free_tx, failing) = (free_tx.clone(), failing.clone());
            RUNNING.fetch_add(1, Ordering::SeqCst);
            let t = std::thread::Builder::new()
                .name("unpack".into())
                .spawn(move || {
                    let r = write_pieces(rx, &free_tx, &failing);
                    RUNNING.fetch_sub(1, Ordering::SeqCst);
                    r
                })
                .inspect_err(|_| {
                    RUNNING.fetch_sub(1, Ordering::SeqCst);
                })?;
            queues.push(tx);
            threads.push(t);
        }
        Ok(Writers {
            queues,
            next: 0,
            free,
            threads,
            failure: Arc::default(),
            failing,
        })
    }

    /// `size` bytes of `data` into `file`, in pieces one writer takes.
    fn send(&mut self, file: File, size: u64, mtime: u64, data: &mut dyn Read) -> io::Result<()> {
        let open = Arc::new(Open {
            file,
            mtime,
            left: AtomicUsize::new(1),
        });
        self.next = (self.next + 1) % self.queues.len().max(1);
        let queue = self
            .queues
            .get(self.next)
            .ok_or(io::ErrorKind::BrokenPipe)?;
        let mut at = 0;
        while at < size {
            let want = (size - at).min(PIECE);
            let mut buf = self.free.recv().map_err(|_| io::ErrorKind::BrokenPipe)?;
            buf.clear();
            data.take(want).read_to_end(&mut buf)?;
            if (buf.len() as u64) < want {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            open.left.fetch_add(1, Ordering::AcqRel);
            let piece = Piece {
                open: open.clone(),
                at,
                data: buf,
            };
            queue.send(piece).map_err(|_| io::ErrorKind::BrokenPipe)?;
            at += want;
        }
        open.one_done()
    }

    /// No more pieces: wait for the writers; the first one's error, if any.
    fn stop(&mut self) -> io::Result<()> {
        self.queues.clear();
        let mut first = Ok(());
        for t in self.threads.drain(..) {
            let r = t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a writer thread panicked")));
            first = first.and(r);
        }
        first
    }

    fn fail(&self, e: UnpackError) {
        self.failing.store(true, Ordering::SeqCst);
        crate::lock(&self.failure).get_or_insert(e);
    }

    fn failed(&self) -> Option<UnpackError> {
        crate::lock(&self.failure).take()
    }

    fn has_failed(&self) -> bool {
        self.failing.load(Ordering::SeqCst)
    }
}

/// A writer thread: pieces until the sender is gone, each buffer handed back; after an error
/// (its own or another's) the rest are dropped unwritten.
fn write_pieces(
    rx: Receiver<Piece>,
    free: &SyncSender<Vec<u8>>,
    failing: &AtomicBool,
) -> io::Result<()> {
    let mut result = Ok(());
    for p in rx {
        if !STOP.load(Ordering::SeqCst) && !failing.load(Ordering::SeqCst) {
            let written = p
                .open
                .file
                .write_all_at(&p.data, p.at)
                .and_then(|_| p.open.one_done());
            if let Err(e) = written {
                failing.store(true, Ordering::SeqCst);
                result = result.and(Err(e));
            }
        }
        let _ = free.try_send(p.data);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::flatten::{flatten_into, Layer};
    use std::ffi::CString;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn header(kind: EntryType, mode: u32, size: u64) -> Header {
        let mut h = Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_mtime(1_000_000);
        h.set_size(size);
        h
    }

    /// The flattened stream of one layer of `entries` (path, kind, mode, data, link target).
    fn unpack(dir: &Path, entries: &[(&str, EntryType, u32, Vec<u8>, &str)]) -> Result<(), String> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, mode, data, link) in entries {
            let mut h = header(*kind, *mode, data.len() as u64);
            if !link.is_empty() {
                h.set_link_name(link).unwrap();
            }
            b.append_data(&mut h, path, &data[..]).unwrap();
        }
        let tar = b.into_inner().unwrap();
        let layer = Layer {
            name: "l".into(),
            size: 0,
            open: Box::new(move || {
                Ok(Box::new(io::Cursor::new(tar.clone())) as Box<dyn Read + Send>)
            }),
            span: None,
        };
        let mut u = Unpacker::new(dir, 3).map_err(|e| e.to_string())?;
        let flattened = flatten_into(&[layer], &[], &mut u, 1, &|_| {});
        let finished = u.finish().map_err(|e| e.to_string());
        flattened.map_err(|e| e.to_string())?;
        finished
    }

    #[test]
    fn modes_times_links_and_read_only_directories() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("root");
        use EntryType::*;
        unpack(
            &dir,
            &[
                ("ro", Directory, 0o555, vec![], ""),
                ("ro/file", Regular, 0o640, b"hello".to_vec(), ""),
                ("ro/link", Symlink, 0o777, vec![], "file"),
                ("ro/fifo", Fifo, 0o600, vec![], ""),
                ("hard", Link, 0o640, vec![], "ro/file"),
            ],
        )
        .unwrap();
        let f = std::fs::metadata(dir.join("ro/file")).unwrap();
        assert_eq!(f.permissions().mode() & 0o7777, 0o640);
        assert_eq!(f.mtime(), 1_000_000);
        assert_eq!(f.nlink(), 2);
        assert_eq!(std::fs::read(dir.join("hard")).unwrap(), b"hello");
        let l = std::fs::symlink_metadata(dir.join("ro/link")).unwrap();
        assert_eq!(
            std::fs::read_link(dir.join("ro/link")).unwrap(),
            Path::new("file")
        );
        assert_eq!(l.mtime(), 1_000_000);
        let p = std::fs::symlink_metadata(dir.join("ro/fifo")).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&p.file_type()));
        assert_eq!(
            (p.permissions().mode() & 0o7777, p.mtime()),
            (0o600, 1_000_000)
        );
        let d = std::fs::metadata(dir.join("ro")).unwrap();
        assert_eq!(d.permissions().mode() & 0o7777, 0o555);
        assert_eq!(d.mtime(), 1_000_000, "a directory's time is the image's");
        crate::store::tree::remove_tree(&dir);
    }

    #[test]
    fn large_files_in_pieces_and_many_small_ones() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("root");
        let big: Vec<u8> = (0..(3 * PIECE + 12345))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut entries = vec![("d", EntryType::Directory, 0o755, vec![], "")];
        entries.push(("d/big", EntryType::Regular, 0o444, big.clone(), ""));
        let names: Vec<String> = (0..300).map(|i| format!("d/f{i}")).collect();
        for (i, n) in names.iter().enumerate() {
            entries.push((n, EntryType::Regular, 0o644, vec![i as u8; i], ""));
        }
        unpack(&dir, &entries).unwrap();
        assert!(std::fs::read(dir.join("d/big")).unwrap() == big);
        let m = std::fs::metadata(dir.join("d/big")).unwrap();
        assert_eq!(
            (m.mtime(), m.permissions().mode() & 0o7777),
            (1_000_000, 0o444)
        );
        for (i, n) in names.iter().enumerate() {
            assert_eq!(std::fs::read(dir.join(n)).unwrap(), vec![i as u8; i], "{n}");
            assert_eq!(std::fs::metadata(dir.join(n)).unwrap().mtime(), 1_000_000);
        }
    }

    #[test]
    fn directories_no_entry_names_are_made_as_tar2sqfs_makes_them() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("root");
        use EntryType::*;
        unpack(
            &dir,
            &[
                ("a/b/c", Regular, 0o644, b"c".to_vec(), ""),
                ("a", Directory, 0o711, vec![], ""),
            ],
        )
        .unwrap();
        let a = std::fs::metadata(dir.join("a")).unwrap();
        assert_eq!(
            (a.permissions().mode() & 0o7777, a.mtime()),
            (0o711, 1_000_000)
        );
        let b = std::fs::metadata(dir.join("a/b")).unwrap();
        assert_eq!((b.permissions().mode() & 0o7777, b.mtime()), (0o755, 0));
    }

    #[test]
    fn nothing_is_written_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("root");
        let mut u = Unpacker::new(&dir, 2).unwrap();
        let mut h = header(EntryType::Symlink, 0o777, 0);
        u.append_link(&mut h, "esc", t.path().to_str().unwrap(), &[])
            .unwrap();
        u.append_link(&mut h, "in", ".", &[]).unwrap();
        for path in ["esc/owned", "in/owned"] {
            let mut h = header(EntryType::Regular, 0o644, 1);
            assert!(
                u.append(&mut h, path, &[], &mut &b"x"[..]).is_err(),
                "{path}"
            );
        }
        let mut h = header(EntryType::Link, 0o644, 0);
        assert!(u.append_link(&mut h, "hard", "esc/secret", &[]).is_err());
        let e = u.finish().unwrap_err().to_string();
        assert!(e.contains("root/esc/owned"), "{e}");
        assert!(!t.path().join("owned").exists() && !dir.join("owned").exists());
    }

    #[test]
    fn user_xattrs_are_kept_the_others_left_to_the_sqsh() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("root");
        let mut u = Unpacker::new(&dir, 1).unwrap();
        let xattrs = [
            ("SCHILY.xattr.user.gpurun".to_string(), b"hello".to_vec()),
            ("SCHILY.xattr.trusted.gpurun".to_string(), b"x".to_vec()),
            ("SCHILY.xattr.security.capability".to_string(), vec![1, 2]),
        ];
        let mut h = header(EntryType::Directory, 0o755, 0);
        u.append(&mut h, "d", &xattrs, &mut io::empty()).unwrap();
        let mut h = header(EntryType::Regular, 0o644, 1);
        u.append(&mut h, "d/f", &xattrs, &mut &b"x"[..]).unwrap();
        u.finish().unwrap();
        for p in ["d", "d/f"] {
            let c = CString::new(dir.join(p).to_str().unwrap()).unwrap();
            let get = |name: &str| {
                let n = CString::new(name).unwrap();
                let mut buf = [0u8; 16];
                // SAFETY: C strings and a buffer of its length, alive during the call.
                let r = unsafe {
                    libc::getxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
                };
                (r >= 0).then(|| buf[..r as usize].to_vec())
            };
            assert_eq!(get("user.gpurun").as_deref(), Some(&b"hello"[..]), "{p}");
            assert_eq!(get("trusted.gpurun"), None, "{p}");
            assert_eq!(get("security.capability"), None, "{p}");
        }
    }

    #[test]
    fn data_cut_short_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        let mut u = Unpacker::new(&t.path().join("root"), 1).unwrap();
        let mut h = header(EntryType::Regular, 0o644, 1000);
        let e = u
            .append(&mut h, "f", &[], &mut &b"only a part"[..])
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(u.finish().is_err());
    }

    type Entry<'a> = (EntryType, &'a str, u32, &'a [u8], &'a str);

    /// `setup` unpacked into `dir` (each entry taken), then `attempt` handed to the Unpacker
    /// as flatten would, whatever flatten lets through: whether it and then the finish passed.
    fn attempt(dir: &Path, setup: &[Entry], attempt: Entry) -> (bool, bool) {
        let mut u = Unpacker::new(dir, 2).unwrap();
        let mut put = |(kind, path, mode, data, link): Entry| {
            let mut h = header(kind, mode, data.len() as u64);
            match kind {
                EntryType::Link | EntryType::Symlink => u.append_link(&mut h, path, link, &[]),
                _ => u.append(&mut h, path, &[], &mut &data[..]),
            }
            .is_ok()
        };
        for e in setup {
            assert!(put(*e), "{}", e.1);
        }
        let taken = put(attempt);
        (taken, u.finish().is_ok())
    }

    #[test]
    fn an_entry_never_replaces_retypes_or_reaches_through_what_is_there() {
        let t = tempfile::tempdir().unwrap();
        let (dir, outside) = (t.path().join("root"), t.path().join("outside"));
        std::fs::create_dir(&outside).unwrap();
        std::fs::set_permissions(&outside, PermissionsExt::from_mode(0o700)).unwrap();
        use EntryType::*;
        let out = outside.to_str().unwrap();
        let setup: &[Entry] = &[
            (Symlink, "s", 0o777, b"", out),
            (Regular, "f", 0o644, b"first", ""),
            (Directory, "d", 0o755, b"", ""),
        ];
        let tries: &[Entry] = &[
            (Regular, "f", 0o644, b"second", ""),
            (Regular, "s", 0o644, b"through", ""),
            (Regular, "s/in", 0o644, b"through", ""),
            (Fifo, "f", 0o644, b"", ""),
            (Regular, "d", 0o644, b"over", ""),
            (Symlink, "d", 0o777, b"", out),
            (Link, "f", 0o644, b"", "d"),
            // Taken as already there: the mode set at the end must not reach through the link.
            (Directory, "s", 0o777, b"", ""),
            (Directory, "f", 0o777, b"", ""),
        ];
        for e in tries {
            assert!(!attempt(&dir, setup, *e).1, "{} {:?}", e.1, e.0);
            // After a failure, pieces not yet written are dropped: the tree is given up.
            assert!(b"first".starts_with(&std::fs::read(dir.join("f")).unwrap()));
            assert!(std::fs::symlink_metadata(dir.join("d")).unwrap().is_dir());
            let m = std::fs::metadata(&outside).unwrap().permissions().mode();
            assert_eq!(m & 0o7777, 0o700, "a mode was set through the link");
            assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
            crate::store::tree::remove_tree(&dir);
        }
    }

    #[test]
    fn hard_links_to_directories_links_fifos_and_read_only_places() {
        let t = tempfile::tempdir().unwrap();
        let (dir, outside) = (t.path().join("root"), t.path().join("outside"));
        std::fs::write(&outside, "host").unwrap();
        use EntryType::*;
        let setup: &[Entry] = &[
            (Directory, "ro", 0o555, b"", ""),
            (Regular, "ro/f", 0o444, b"data", ""),
            (Fifo, "p", 0o600, b"", ""),
            (Symlink, "s", 0o777, b"", "ro"),
            (Symlink, "out", 0o777, b"", outside.to_str().unwrap()),
            (Link, "ro/f2", 0o444, b"", "ro/f"),
            (Link, "hp", 0o600, b"", "p"),
            // The link itself, never what it points at.
            (Link, "hout", 0o777, b"", "out"),
        ];
        for e in [
            (Link, "hd", 0o755, &b""[..], "ro"),
            (Link, "hs", 0o444, b"", "s/f"),
            (Link, "s/h", 0o444, b"", "ro/f"),
            (Link, "hr", 0o755, b"", ""),
            (Link, "hup", 0o755, b"", ".."),
        ] {
            assert_eq!(attempt(&dir, setup, e), (false, false), "{}", e.1);
            assert_eq!(std::fs::read_dir(dir.join("ro")).unwrap().count(), 2);
            crate::store::tree::remove_tree(&dir);
        }
        assert_eq!(attempt(&dir, setup, setup[0]), (true, true));
        assert_eq!(std::fs::metadata(dir.join("ro/f")).unwrap().nlink(), 2);
        let p = std::fs::symlink_metadata(dir.join("hp")).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&p.file_type()) && p.nlink() == 2);
        let l = std::fs::symlink_metadata(dir.join("hout")).unwrap();
        assert!(l.file_type().is_symlink() && l.nlink() == 2);
        assert_eq!(std::fs::metadata(&outside).unwrap().nlink(), 1);
        crate::store::tree::remove_tree(&dir);
    }

    #[test]
    fn closed_directories_above_others_get_every_mode() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("root");
        use EntryType::*;
        unpack(
            &dir,
            &[
                ("a", Directory, 0o000, vec![], ""),
                ("a/b", Directory, 0o500, vec![], ""),
                ("a/b/f", Regular, 0o000, b"f".to_vec(), ""),
                ("a/w", Directory, 0o200, vec![], ""),
                ("a/w/deep/g", Regular, 0o644, b"g".to_vec(), ""),
                ("a/w/x", Directory, 0o000, vec![], ""),
            ],
        )
        .unwrap();
        for (path, mode) in [("a", 0), ("a/b", 0o500), ("a/b/f", 0), ("a/w", 0o200)] {
            let m = std::fs::symlink_metadata(dir.join(path)).unwrap();
            assert_eq!(
                (m.permissions().mode() & 0o7777, m.mtime()),
                (mode, 1_000_000),
                "{path}"
            );
        }
        let m = std::fs::metadata(dir.join("a/w/deep")).unwrap();
        assert_eq!((m.permissions().mode() & 0o7777, m.mtime()), (0o755, 0));
        crate::store::tree::remove_tree(&dir);
    }

    /// Data that counts this process's open files each time it is read.
    struct Counting<'a>(&'a [u8], &'a AtomicUsize);

    impl Read for Counting<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let open = std::fs::read_dir("/proc/self/fd").unwrap().count();
            self.1.fetch_max(open, Ordering::Relaxed);
            self.0.read(buf)
        }
    }

    #[test]
    fn many_files_in_deep_directories_hold_no_handles() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("root");
        let open = || std::fs::read_dir("/proc/self/fd").unwrap().count();
        let (before, most) = (open(), AtomicUsize::new(0));
        let mut u = Unpacker::new(&dir, 4).unwrap();
        let deep = ["d"; 200].join("/");
        for i in 0..4000 {
            let path = format!("{deep}/{}/new\nline\u{fffd}{i}", i % 40);
            let mut h = header(EntryType::Regular, 0o644, 3);
            u.append(&mut h, &path, &[], &mut Counting(b"abc", &most))
                .unwrap();
        }
        u.finish().unwrap();
        let most = most.into_inner();
        // Other tests of this process open files meanwhile: a leak would be thousands.
        assert!(
            most < before + 100,
            "{most} open files during, {before} before"
        );
        let names = std::fs::read_dir(dir.join(&deep).join("7"))
            .unwrap()
            .count();
        assert_eq!(names, 100);
        crate::store::tree::remove_tree(&dir);
    }
}

//! The in-process, read-only FUSE server that serves a squashfs image (DESIGN decision 4).
//!
//! The image server process (runtime/image_server/serve.rs) opens /dev/fuse and mounts it read-only
//! (fd=N,rootmode=40000,...) inside its user and mount namespace; `serve` does the INIT
//! handshake on that fd and answers requests on its own threads. FUSE inode numbers come from
//! squashfs inode references, so hard links share one number and `st_ino` is stable. The image
//! is immutable, so every reply is cached by the kernel for a long time: the containers that
//! share the server share those caches.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyXattr, Request, Session, SessionACL,
};

use crate::image::sqfs::{Archive, Inode, Kind, SqfsError, Xattr};
use crate::lock;

#[derive(Debug, thiserror::Error)]
pub enum FuseError {
    #[error("FUSE handshake on /dev/fuse failed for image {image}: {source} (was the fd mounted first?)")]
    Handshake {
        image: String,
        source: std::io::Error,
    },
    #[error("cannot start the FUSE server threads for image {image}: {source}")]
    Spawn {
        image: String,
        source: std::io::Error,
    },
}

/// Immutable image: the kernel may keep entries and attributes for a day.
const TTL: Duration = Duration::from_secs(24 * 3600);
const MAX_READAHEAD: u32 = 1 << 20;
/// Distinct image errors said at most, in the whole life of a server.
const MAX_REPORTED: usize = 64;

thread_local! {
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Serve `archive` on an already mounted /dev/fuse fd, on `server_threads(cpus)` threads of
/// its own; it serves until the connection ends (its mount gone everywhere, or this process).
///
/// Every file is reported as owned by `owner` (the user's uid and gid): a rootless user owns
/// all of their container, as with enroot and Charliecloud. Image owners such as root are not
/// mapped in the user namespace, and the kernel would otherwise refuse mount points under
/// root-owned directories or let nobody change a --writable-tmpfs root. A container's user
/// namespace maps those ids to its own (0 with --fakeroot).
pub fn serve(
    archive: Arc<Archive>,
    fuse_fd: OwnedFd,
    cpus: usize,
    owner: (u32, u32),
) -> Result<BackgroundSession, FuseError> {
    let image = archive.path().display().to_string();
    let threads = server_threads(cpus);
    let mut config = Config::default();
    config.acl = SessionACL::All;
    config.n_threads = Some(threads);
    // One fd per worker thread (FUSE_DEV_IOC_CLONE) so they do not contend on one queue.
    config.clone_fd = threads > 1;
    let session = Session::from_fd(
        SquashFs::new(archive, owner),
        fuse_fd,
        SessionACL::All,
        config,
    )
    .map_err(|source| FuseError::Handshake {
        image: image.clone(),
        source,
    })?;
    session
        .spawn()
        .map_err(|source| FuseError::Spawn { image, source })
}

/// Server threads for `cpus` CPUs: one per two CPUs, four at most, and two at least: one server
/// answers every container of an image, a sleeping thread costs nothing, and a long
/// decompression (or, on a network file system, a cold read) then holds up no other request.
fn server_threads(cpus: usize) -> usize {
    (cpus / 2).clamp(2, 4)
}

struct SquashFs {
    ar: Arc<Archive>,
    root: u64,
    /// Directory FUSE inode -> its parent's, learnt on lookup (only for `..` in readdir: the
    /// image stores parents as inode numbers, which map to references only via the optional
    /// export table).
    parents: Mutex<HashMap<u64, u64>>,
    /// The kernel takes ENOSYS to open/opendir as "no open or release messages from now on,
    /// keep the page cache": two round trips fewer per file (zero-message open, Linux 4.19+).
    zero_message_open: bool,
    zero_message_opendir: bool,
    /// uid and gid every file is reported with (see `serve`).
    owner: (u32, u32),
    /// The image errors said so far (a corrupt block is read again and again).
    reported: Mutex<std::collections::HashSet<String>>,
}

impl SquashFs {
    fn new(ar: Arc<Archive>, owner: (u32, u32)) -> SquashFs {
        let root = ar.root_ref();
        SquashFs {
            ar,
            root,
            parents: Mutex::new(HashMap::new()),
            zero_message_open: false,
            zero_message_opendir: false,
            owner,
            reported: Mutex::default(),
        }
    }

    fn ino_of(&self, r: u64) -> u64 {
        ino_of(self.root, r)
    }

    fn ref_of(&self, ino: INodeNo) -> Option<u64> {
        ref_of(self.root, ino.0)
    }

    /// An image error: said once on the server's stderr, which it passes on to its containers
    /// (runtime/image_server/serve.rs), and the reader gets its errno.
    fn errno(&self, e: SqfsError) -> Errno {
        let said = e.to_string();
        let mut reported = lock(&self.reported);
        if reported.len() < MAX_REPORTED && reported.insert(said.clone()) {
            eprintln!("gpurun: {said}");
        }
        Errno::from_i32(e.errno())
    }

    fn inode(&self, ino: INodeNo) -> Result<Arc<Inode>, Errno> {
        let r = self.ref_of(ino).ok_or(Errno::EINVAL)?;
        self.ar.inode(r).map_err(|e| self.errno(e))
    }

    fn attr(&self, ino: &Inode) -> FileAttr {
        let t = UNIX_EPOCH + Duration::from_secs(ino.mtime as u64);
        FileAttr {
            ino: INodeNo(self.ino_of(ino.r)),
            size: ino.size,
            blocks: ino.size.div_ceil(512),
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind: file_type(ino.kind),
            perm: ino.perm,
            nlink: ino.nlink,
            uid: self.owner.0,
            gid: self.owner.1,
            rdev: ino.rdev,
            blksize: self.ar.block_size(),
            flags: 0,
        }
    }

    fn dir(&self, ino: INodeNo) -> Result<Arc<Inode>, Errno> {
        let d = self.inode(ino)?;
        if d.kind != Kind::Dir {
            return Err(Errno::ENOTDIR);
        }
        Ok(d)
    }

    fn xattrs(&self, ino: INodeNo) -> Result<Vec<Xattr>, Errno> {
        let i = self.inode(ino)?;
        self.ar.xattrs(&i).map_err(|e| self.errno(e))
    }

    fn parent_of(&self, ino: INodeNo) -> u64 {
        *lock(&self.parents).get(&ino.0).unwrap_or(&ino.0)
    }

    /// readdir and readdirplus share this: entry i of the stream is ".", "..", then the
    /// image's listing.
    fn list(
        &self,
        ino: INodeNo,
        offset: u64,
        mut add: impl FnMut(u64, u64, &OsStr, FileType) -> bool,
    ) -> Result<(), Errno> {
        let d = self.dir(ino)?;
        let entries = self.ar.readdir(&d).map_err(|e| self.errno(e))?;
        let parent = self.parent_of(ino);
        for i in offset..entries.len() as u64 + 2 {
            let full = match i {
                0 => add(ino.0, i + 1, OsStr::new("."), FileType::Directory),
                1 => add(parent, i + 1, OsStr::new(".."), FileType::Directory),
                _ => {
                    let e = &entries[(i - 2) as usize];
                    let name = OsStr::from_bytes(&e.name);
                    add(self.ino_of(e.inode), i + 1, name, file_type(e.kind))
                }
            };
            if full {
                break;
            }
        }
        Ok(())
    }
}

/// Root is 1; every other inode reference r is r + 2 (never 0 or 1, and reversible).
fn ino_of(root: u64, r: u64) -> u64 {
    if r == root {
        1
    } else {
        r + 2
    }
}

fn ref_of(root: u64, ino: u64) -> Option<u64> {
    match ino {
        1 => Some(root),
        n => n.checked_sub(2).filter(|&r| r != root),
    }
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
        Kind::BlockDev => FileType::BlockDevice,
        Kind::CharDev => FileType::CharDevice,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
    }
}

/// The attributes of a name that does not exist: nodeid 0 tells the kernel to cache the
/// negative lookup for the entry TTL (PATH and library searches miss a lot).
fn negative() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

impl Filesystem for SquashFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let want = InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO;
        // Ask only for what this kernel offers; an older one just goes without.
        let _ = config.add_capabilities(want & config.capabilities());
        self.zero_message_open = config
            .capabilities()
            .contains(InitFlags::FUSE_NO_OPEN_SUPPORT);
        self.zero_message_opendir = config
            .capabilities()
            .contains(InitFlags::FUSE_NO_OPENDIR_SUPPORT);
        if let Err(max) = config.set_max_readahead(MAX_READAHEAD) {
            let _ = config.set_max_readahead(max);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let run = || -> Result<Option<FileAttr>, Errno> {
            let d = self.dir(parent)?;
            let Some(e) = self
                .ar
                .lookup_in(&d, name.as_bytes())
                .map_err(|e| self.errno(e))?
            else {
                return Ok(None);
            };
            let ino = self.ar.inode(e.inode).map_err(|e| self.errno(e))?;
            let attr = self.attr(&ino);
            if ino.kind == Kind::Dir {
                lock(&self.parents).insert(attr.ino.0, parent.0);
            }
            Ok(Some(attr))
        };
        match run() {
            Ok(Some(attr)) => reply.entry(&TTL, &attr, Generation(0)),
            Ok(None) => reply.entry(&TTL, &negative(), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.inode(ino) {
            Ok(i) => reply.attr(&TTL, &self.attr(&i)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.inode(ino) {
            Ok(i) => match i.symlink_target() {
                Some(t) => reply.data(t),
                None => reply.error(Errno::EINVAL),
            },
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.inode(ino) {
            Ok(i) if i.kind == Kind::Dir => reply.error(Errno::EISDIR),
            Ok(_) if flags.acc_mode() != OpenAccMode::O_RDONLY => reply.error(Errno::EROFS),
            Ok(_) if self.zero_message_open => reply.error(Errno::ENOSYS),
            // The image never changes: keep page-cache contents across opens.
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let i = match self.inode(ino) {
            Ok(i) => i,
            Err(e) => return reply.error(e),
        };
        let want = (size as u64).min(i.size.saturating_sub(offset));
        // A read within one block (a readahead window, a small file) is answered from the block
        // itself: no copy (128 KiB, from a kept block's mapping) before the kernel's own.
        match self.ar.bytes_in_block(&i, offset, size as usize) {
            Ok(Some((block, range))) => return reply.data(&block[range]),
            Ok(None) => {}
            Err(e) => return reply.error(self.errno(e)),
        }
        let want = want as usize;
        // A buffer per thread, reused: fresh ones cost page faults on every read.
        READ_BUF.with(|b| {
            let mut buf = b.borrow_mut();
            if buf.len() < want {
                buf.resize(want, 0);
            }
            match self.ar.read_at(&i, offset, &mut buf[..want]) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(self.errno(e)),
            }
        })
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.inode(ino) {
            Ok(i) if i.kind != Kind::Dir => reply.error(Errno::ENOTDIR),
            Ok(_) if self.zero_message_opendir => reply.error(Errno::ENOSYS),
            // Listings never change: let the kernel cache them.
            Ok(_) => reply.opened(
                FileHandle(0),
                FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.list(ino, offset, |i, next, name, kind| {
            reply.add(INodeNo(i), next, kind, name)
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let mut err = None;
        let r = self.list(ino, offset, |i, next, name, _| {
            let attr = match self.inode(INodeNo(i)) {
                Ok(a) => self.attr(&a),
                Err(e) => {
                    err = Some(e);
                    return true;
                }
            };
            reply.add(INodeNo(i), next, name, &TTL, &attr, Generation(0))
        });
        match r.and(err.map_or(Ok(()), Err)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let bs = self.ar.block_size();
        let blocks = self.ar.bytes_used().div_ceil(bs as u64);
        reply.statfs(blocks, 0, 0, self.ar.inode_count() as u64, 0, bs, 256, bs);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        // An image without xattrs: ENOSYS once and the kernel never asks again (an overlay
        // above, with --writable-tmpfs, asks for its user.overlay.* xattrs on every lookup).
        if !self.ar.any_xattrs() {
            return reply.error(Errno::ENOSYS);
        }
        let x = match self.xattrs(ino) {
            Ok(x) => x,
            Err(e) => return reply.error(e),
        };
        match x.iter().find(|(n, _)| n.as_slice() == name.as_bytes()) {
            None => reply.error(Errno::ENODATA),
            Some((_, v)) => xattr_reply(v, size, reply),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if !self.ar.any_xattrs() {
            return reply.error(Errno::ENOSYS);
        }
        match self.xattrs(ino) {
            Ok(x) => {
                let mut names = Vec::new();
                for (n, _) in &x {
                    names.extend_from_slice(n);
                    names.push(0);
                }
                xattr_reply(&names, size, reply)
            }
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // No permission checks inside an immutable image the caller can read anyway (see
        // DESIGN 4); writes are refused by the read-only mount before they get here.
        match self.inode(ino) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum XattrAnswer {
    Size(u32),
    Range,
    Data,
}

/// size 0 asks for the length; a buffer too small is ERANGE.
fn xattr_answer(len: usize, size: u32) -> XattrAnswer {
    if size == 0 {
        XattrAnswer::Size(len as u32)
    } else if len > size as usize {
        XattrAnswer::Range
    } else {
        XattrAnswer::Data
    }
}

fn xattr_reply(data: &[u8], size: u32, reply: ReplyXattr) {
    match xattr_answer(data.len(), size) {
        XattrAnswer::Size(n) => reply.size(n),
        XattrAnswer::Range => reply.error(Errno::ERANGE),
        XattrAnswer::Data => reply.data(data),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xattr_sizes() {
        assert_eq!(xattr_answer(5, 0), XattrAnswer::Size(5));
        assert_eq!(xattr_answer(0, 0), XattrAnswer::Size(0));
        assert_eq!(xattr_answer(5, 4), XattrAnswer::Range);
        assert_eq!(xattr_answer(5, 5), XattrAnswer::Data);
    }

    #[test]
    fn thread_counts() {
        for (cpus, want) in [(1, 2), (2, 2), (4, 2), (6, 3), (8, 4), (64, 4)] {
            assert_eq!(server_threads(cpus), want, "{cpus} CPUs");
        }
    }

    #[test]
    fn inode_numbers() {
        let root = 0x1234_0056;
        assert_eq!(ino_of(root, root), 1);
        assert_eq!(ref_of(root, 1), Some(root));
        for r in [0u64, 1, 0x20, 0xffff_ffff_ffff] {
            let ino = ino_of(root, r);
            assert!(ino > 1);
            assert_eq!(ref_of(root, ino), Some(r));
        }
        assert_eq!(ref_of(root, 0), None);
        assert_eq!(ref_of(root, root + 2), None, "root has only one number");
    }
}

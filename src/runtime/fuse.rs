//! The in-process, read-only FUSE server that serves a squashfs image (DESIGN decision 4).
//!
//! The caller opens /dev/fuse and mounts it (fd=N,rootmode=40000,...) inside its user and mount
//! namespace; `serve` does the INIT handshake on that fd and answers requests on up to four
//! threads, which poll for the next request for a moment after each reply (`linger`). FUSE
//! inode numbers come from squashfs inode references, so hard links share one number and
//! `st_ino` is stable across mounts of the same image. The image is immutable, so every reply
//! is cached by the kernel for a long time. While the container's root is built, the server
//! also makes the mount points the image lacks (`points`), then seals: the image is read-only.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, Filesystem,
    FopenFlags, Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyXattr, Request, Session, SessionACL,
};

use crate::image::sqfs::{Archive, Inode, Kind, SqfsError, Xattr};
use crate::lock;
use crate::runtime::kept_reads::KeptReads;
use crate::runtime::launch::Served;
use crate::runtime::linger::{self, Linger, STORE_MAX};
use crate::runtime::points::{self, Point, PointKind, Points, Refused};
use crate::runtime::prefetch::{self, Job, Part, ScanTracker};
use crate::runtime::provide::Provided;
use crate::runtime::sys;

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
/// Files whose place in a listing is remembered for scan detection (about 50 bytes each).
const MAX_PLACES: usize = 1 << 18;

thread_local! {
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A running server: it serves until the mount goes away (unmounted, or its mount namespace
/// gone), whether or not this is kept.
pub struct Server {
    pub session: BackgroundSession,
    points: Arc<Mutex<Points>>,
}

impl Served for Server {
    fn seal(&self) {
        lock(&self.points).seal();
    }
}

/// Serve `archive` on an already mounted /dev/fuse fd, in background threads (`server_threads`
/// for `cpus`). Until the returned server is sealed, the mkdir and create of the container's
/// set-up make mount points (`points`) where the image has nothing.
///
/// Every file is reported as owned by `owner` (the container user's uid and gid): a rootless
/// user owns all of their container, as with enroot and Charliecloud. Image owners such as root
/// are not mapped in the user namespace, and the kernel would otherwise refuse to create mount
/// points under root-owned directories or let the user change their own --writable-tmpfs root.
///
/// `reads`: what earlier starts read, to push, and where this one's reads are noted.
///
/// `abortable`: whether the container process can abort the connection should gpurun die
/// (runtime/launch.rs, `gpurun_died`). A page-cache store waits, unkillably, for a page a READ
/// holds; the serving threads store a small file after its LOOKUP (runtime/linger.rs) only where
/// that abort can end such a wait. The pusher stores in any case: it holds descriptors of its
/// own, and a READ a dead serving thread took ends with that thread (runtime/prefetch.rs).
pub fn serve(
    archive: Arc<Archive>,
    fuse_fd: OwnedFd,
    cpus: usize,
    owner: (u32, u32),
    provided: Vec<Provided>,
    reads: Arc<KeptReads>,
    abortable: bool,
) -> Result<Server, FuseError> {
    let image = archive.path().display().to_string();
    // Where pollers store, one more than poll: it sleeps in read(2), to answer while a poller
    // waits on a store (runtime/linger.rs). On one CPU nobody polls.
    let pollers = server_threads(cpus, sys::on_network_fs(archive.path()));
    let threads = if cpus >= 2 && abortable {
        pollers + 1
    } else {
        pollers
    };
    // Without a second fd the threads just sleep between requests.
    let linger = sys::dup(&fuse_fd)
        .ok()
        .and_then(|fd| Linger::new(fd, cpus, threads, abortable));
    let mut config = Config::default();
    config.acl = SessionACL::All;
    config.n_threads = Some(threads);
    // One fd per worker thread (FUSE_DEV_IOC_CLONE) so they do not contend on one queue.
    config.clone_fd = threads > 1;
    // Bounded: when the pusher falls behind, scans just read the normal way.
    let (jobs, queue) = sync_channel(4 * prefetch::WINDOW as usize);
    let points = Arc::new(Mutex::new(provided_points(&archive, provided)));
    let session_fd = fuse_fd.as_raw_fd();
    let session = Session::from_fd(
        SquashFs::new(archive.clone(), owner, jobs, reads, linger, points.clone()),
        fuse_fd,
        SessionACL::All,
        config,
    )
    .map_err(|source| FuseError::Handshake {
        image: image.clone(),
        source,
    })?;
    // The serving threads first: the container process waits for their first reply.
    let session = session
        .spawn()
        .map_err(|source| FuseError::Spawn { image, source })?;
    // Without the thread, the queue's receiver is gone and scans read the normal way.
    let _ = std::thread::Builder::new()
        .name("gpurun-prefetch".into())
        .spawn(move || prefetch::run(archive, session_fd, queue));
    Ok(Server { session, points })
}

/// The points of the files provided in place of mounts (runtime/provide.rs).
fn provided_points(ar: &Archive, provided: Vec<Provided>) -> Points {
    let mut points = Points::default();
    for p in provided {
        // `provide` made each name once per directory.
        let _ = points.provide(ino_of(ar.root_ref(), p.dir), &p.name, p.contents);
    }
    points
}

/// Server threads for `cpus` CPUs. Each polls for a moment after its replies (`linger`): one per
/// CPU left the command (and the scan pusher) a CPU shared with a poller (2 vCPUs, interleaved
/// medians of 6-10: 4,000 random files 581 -> 532 ms, tar of /usr 559 -> 485 ms with one thread
/// instead of two). An image on a network or parallel file system keeps two at least: there a
/// cold read waits on I/O, and one thread would make every other request wait behind it.
fn server_threads(cpus: usize, on_network_fs: bool) -> usize {
    let n = (cpus / 2).clamp(1, 4);
    if on_network_fs {
        n.max(2)
    } else {
        n
    }
}

struct SquashFs {
    ar: Arc<Archive>,
    root: u64,
    /// Directory FUSE inode -> its parent's, learnt on lookup (only for `..` in readdir: the
    /// image stores parents as inode numbers, which map to references only via the optional
    /// export table).
    parents: Mutex<HashMap<u64, u64>>,
    /// Report the first image error on stderr; the rest only as EIO.
    reported: AtomicBool,
    /// The kernel takes ENOSYS to open/opendir as "no open or release messages from now on,
    /// keep the page cache": two round trips fewer per file (zero-message open, Linux 4.19+).
    zero_message_open: bool,
    zero_message_opendir: bool,
    /// uid and gid every file is reported with (see `serve`).
    owner: (u32, u32),
    /// Directory scans in progress, and the pusher they feed (see `prefetch`).
    scans: Mutex<Scans>,
    prefetch: SyncSender<Job>,
    /// What earlier starts read, pushed on each file's first read; what this one reads.
    reads: Arc<KeptReads>,
    /// Polling between back-to-back requests (see `linger`); `None` on one CPU.
    linger: Option<Linger>,
    /// The mount points made in the image during set-up, and their time stamp (the root's).
    points: Arc<Mutex<Points>>,
    points_mtime: u32,
}

/// A job for the pusher, handed over when this is dropped: after the reply, so that waking the
/// pusher is not on the way of the read being answered.
struct PushAfterReply<'a>(&'a SyncSender<Job>, Option<Job>);

impl Drop for PushAfterReply<'_> {
    fn drop(&mut self) {
        if let Some(job) = self.1.take() {
            // Full: the pusher is behind, the reader will ask for these itself.
            let _ = self.0.try_send(job);
        }
    }
}

/// What a FUSE inode number stands for.
enum Node {
    Image(Arc<Inode>),
    Point(Point),
}

impl Node {
    fn is_dir(&self) -> bool {
        match self {
            Node::Image(i) => i.kind == Kind::Dir,
            Node::Point(p) => p.kind == PointKind::Dir,
        }
    }
}

#[derive(Default)]
struct Scans {
    tracker: ScanTracker,
    /// Regular file's FUSE inode -> where it is listed, for the files of every directory listed.
    place: HashMap<u64, Place>,
}

/// A file's place in its directory's listing.
#[derive(Clone, Copy)]
struct Place {
    /// The directory's FUSE inode.
    dir: u64,
    idx: u32,
    /// Entries in the listing: what the tracker needs, so that a read looks up nothing else.
    len: u32,
}

impl SquashFs {
    fn new(
        ar: Arc<Archive>,
        owner: (u32, u32),
        prefetch: SyncSender<Job>,
        reads: Arc<KeptReads>,
        linger: Option<Linger>,
        points: Arc<Mutex<Points>>,
    ) -> SquashFs {
        let root = ar.root_ref();
        let points_mtime = ar.inode(root).map_or(0, |i| i.mtime);
        SquashFs {
            ar,
            root,
            parents: Mutex::new(HashMap::new()),
            reported: AtomicBool::new(false),
            zero_message_open: false,
            zero_message_opendir: false,
            owner,
            scans: Mutex::new(Scans::default()),
            prefetch,
            reads,
            linger,
            points,
            points_mtime,
        }
    }

    /// Held by every request handler: dropped after the reply, it may poll for the next request.
    fn poll(&self) -> Option<linger::Poll<'_>> {
        self.linger.as_ref().map(Linger::request)
    }

    fn ino_of(&self, r: u64) -> u64 {
        ino_of(self.root, r)
    }

    fn ref_of(&self, ino: INodeNo) -> Option<u64> {
        ref_of(self.root, ino.0)
    }

    fn errno(&self, e: SqfsError) -> Errno {
        if !self.reported.swap(true, Ordering::Relaxed) {
            eprintln!("gpurun: {e}");
        }
        Errno::from_i32(e.errno())
    }

    fn inode(&self, ino: INodeNo) -> Result<Arc<Inode>, Errno> {
        if points::is_point(ino.0) {
            return Err(Errno::EINVAL);
        }
        let r = self.ref_of(ino).ok_or(Errno::EINVAL)?;
        self.ar.inode(r).map_err(|e| self.errno(e))
    }

    fn node(&self, ino: INodeNo) -> Result<Node, Errno> {
        if points::is_point(ino.0) {
            return lock(&self.points)
                .get(ino.0)
                .map(Node::Point)
                .ok_or(Errno::ENOENT);
        }
        self.inode(ino).map(Node::Image)
    }

    fn node_attr(&self, ino: INodeNo) -> Result<FileAttr, Errno> {
        Ok(match self.node(ino)? {
            Node::Image(i) => self.attr(&i),
            Node::Point(p) => self.point_attr(p),
        })
    }

    /// A point is an empty directory or file of the user's, as mkdir or touch would make it, or
    /// a provided file with its contents.
    fn point_attr(&self, p: Point) -> FileAttr {
        let t = UNIX_EPOCH + Duration::from_secs(self.points_mtime as u64);
        let dir = p.kind == PointKind::Dir;
        FileAttr {
            ino: INodeNo(p.ino),
            size: p.size,
            blocks: p.size.div_ceil(512),
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind: point_type(p.kind),
            perm: if dir { 0o755 } else { 0o644 },
            nlink: if dir { 2 } else { 1 },
            uid: self.owner.0,
            gid: self.owner.1,
            rdev: 0,
            blksize: self.ar.block_size(),
            flags: 0,
        }
    }

    /// The point called `name` in `parent`: where the image has no such entry, or a provided
    /// file in its place.
    fn point_in(&self, parent: INodeNo, name: &OsStr) -> Option<FileAttr> {
        let p = lock(&self.points).lookup(parent.0, name)?;
        Some(self.point_attr(p))
    }

    /// mkdir and create during set-up: a new point, where the image has nothing of that name.
    fn make_point(
        &self,
        parent: INodeNo,
        name: &OsStr,
        kind: PointKind,
    ) -> Result<FileAttr, Errno> {
        if let Node::Image(d) = self.node(parent)? {
            if d.kind != Kind::Dir {
                return Err(Errno::ENOTDIR);
            }
            let found = self.ar.lookup_in(&d, name.as_bytes());
            if found.map_err(|e| self.errno(e))?.is_some() {
                return Err(Errno::EEXIST);
            }
        }
        let p = lock(&self.points)
            .add(parent.0, name, kind)
            .map_err(|r| match r {
                Refused::Sealed => Errno::EROFS,
                Refused::Exists => Errno::EEXIST,
                Refused::NotDir => Errno::ENOTDIR,
            })?;
        Ok(self.point_attr(p))
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

    /// A point has none.
    fn xattrs(&self, ino: INodeNo) -> Result<Vec<Xattr>, Errno> {
        match self.node(ino)? {
            Node::Image(i) => self.ar.xattrs(&i).map_err(|e| self.errno(e)),
            Node::Point(_) => Ok(Vec::new()),
        }
    }

    fn parent_of(&self, ino: INodeNo) -> u64 {
        *lock(&self.parents).get(&ino.0).unwrap_or(&ino.0)
    }

    /// readdir and readdirplus share this: entry i of the stream is ".", "..", the image's
    /// listing (a provided file in the place of the entry it replaces), then the other points
    /// made in the directory.
    fn list(
        &self,
        ino: INodeNo,
        offset: u64,
        mut add: impl FnMut(u64, u64, &OsStr, FileType) -> bool,
    ) -> Result<(), Errno> {
        let (entries, parent) = match self.node(ino)? {
            Node::Image(d) if d.kind == Kind::Dir => (
                self.ar.readdir(&d).map_err(|e| self.errno(e))?,
                self.parent_of(ino),
            ),
            Node::Point(p) if p.kind == PointKind::Dir => (Arc::default(), p.parent),
            _ => return Err(Errno::ENOTDIR),
        };
        let mut made: Vec<(Point, OsString)> = lock(&self.points)
            .children(ino.0)
            .map(|(p, n)| (p, n.to_owned()))
            .collect();
        // Replaced entries keep their place in the stream (offsets stay stable).
        let mut replaced = HashMap::new();
        made.retain(|(p, n)| {
            let at = entries.iter().position(|e| e.name == n.as_bytes());
            at.map(|i| replaced.insert(i, *p)).is_none()
        });
        let n = entries.len() as u64;
        let mut files = Vec::new();
        for i in offset..n + 2 + made.len() as u64 {
            let full = match i {
                0 => add(ino.0, i + 1, OsStr::new("."), FileType::Directory),
                1 => add(parent, i + 1, OsStr::new(".."), FileType::Directory),
                _ if i - 2 < n => {
                    let e = &entries[(i - 2) as usize];
                    let name = OsStr::from_bytes(&e.name);
                    if let Some(p) = replaced.get(&((i - 2) as usize)) {
                        add(p.ino, i + 1, name, point_type(p.kind))
                    } else {
                        if e.kind == Kind::File {
                            let place = Place {
                                dir: ino.0,
                                idx: (i - 2) as u32,
                                len: n as u32,
                            };
                            files.push((self.ino_of(e.inode), place));
                        }
                        add(self.ino_of(e.inode), i + 1, name, file_type(e.kind))
                    }
                }
                _ => {
                    let (p, name) = &made[(i - 2 - n) as usize];
                    add(p.ino, i + 1, name, point_type(p.kind))
                }
            };
            if full {
                break;
            }
        }
        let mut scans = lock(&self.scans);
        // Bounded (a `find` over millions of files): start afresh, recent listings matter.
        if scans.place.len() + files.len() > MAX_PLACES {
            *scans = Scans::default();
        }
        scans.place.extend(files);
        Ok(())
    }

    /// Note a read (runtime/kept_reads.rs); on a file's first one, what earlier starts read of
    /// it, to push once the read is answered.
    fn kept_reads(&self, ino: INodeNo, i: &Inode, offset: u64, len: u64) -> PushAfterReply<'_> {
        let ranges = self.reads.on_read(i.r, offset, len);
        let job = (!ranges.is_empty()).then_some(Job {
            ino: ino.0,
            inode_ref: i.r,
            part: Part::Ranges(ranges),
        });
        PushAfterReply(&self.prefetch, job)
    }

    /// A read from the start of a file: when it continues a scan of its directory in listing
    /// order, queue the next files for the pusher.
    fn scan_read(&self, ino: INodeNo) {
        // One lock and one map lookup for every read from a file's start; the listing is
        // fetched (from the archive's cache: it was just listed) only when there is a push.
        let next = {
            let mut scans = lock(&self.scans);
            let Some(p) = scans.place.get(&ino.0).copied() else {
                return;
            };
            scans
                .tracker
                .on_read(p.dir, p.idx, p.len)
                .map(|r| (p.dir, r))
        };
        let Some((dir, next)) = next else {
            return;
        };
        let Ok(entries) = self
            .dir(INodeNo(dir))
            .and_then(|d| self.ar.readdir(&d).map_err(|e| self.errno(e)))
        else {
            return;
        };
        let files = entries[next.start as usize..next.end as usize]
            .iter()
            .filter(|e| e.kind == Kind::File);
        for e in files {
            let job = Job {
                ino: self.ino_of(e.inode),
                inode_ref: e.inode,
                part: Part::Whole,
            };
            // Full: the pusher is behind, the reader will ask for these itself.
            if self.prefetch.try_send(job).is_err() {
                return;
            }
        }
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

fn point_type(k: PointKind) -> FileType {
    match k {
        PointKind::Dir => FileType::Directory,
        PointKind::File => FileType::RegularFile,
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
        let mut poll = self.poll();
        // The entry, and the image's inode when it is one.
        type Entry = (FileAttr, Option<Arc<Inode>>);
        let run = || -> Result<Option<Entry>, Errno> {
            // Points first: a provided file takes the place of the image's entry.
            if let Some(attr) = self.point_in(parent, name) {
                return Ok(Some((attr, None)));
            }
            if points::is_point(parent.0) {
                return Ok(None);
            }
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
            Ok(Some((attr, Some(ino))))
        };
        match run() {
            Ok(Some((attr, inode))) => {
                reply.entry(&TTL, &attr, Generation(0));
                // A small file is most likely read next: stored while polling (linger.rs).
                let small = |i: &Inode| i.kind == Kind::File && (1..=STORE_MAX).contains(&i.size);
                if let (Some(p), Some(i)) = (poll.as_mut(), inode.filter(|i| small(i))) {
                    p.store(attr.ino.0, move || {
                        let mut data = vec![0; i.size as usize];
                        let n = self.ar.read_at(&i, 0, &mut data).ok()?;
                        data.truncate(n);
                        Some(data)
                    });
                }
            }
            Ok(None) => reply.entry(&TTL, &negative(), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _poll = self.poll();
        match self.node_attr(ino) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _poll = self.poll();
        match self.inode(ino) {
            Ok(i) => match i.symlink_target() {
                Some(t) => reply.data(t),
                None => reply.error(Errno::EINVAL),
            },
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _poll = self.poll();
        match self.node(ino) {
            Ok(n) if n.is_dir() => reply.error(Errno::EISDIR),
            Ok(Node::Image(_)) if flags.acc_mode() != OpenAccMode::O_RDONLY => {
                reply.error(Errno::EROFS)
            }
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
        let _poll = self.poll();
        let i = match self.node(ino) {
            Ok(Node::Image(i)) => i,
            Ok(Node::Point(p)) => {
                let contents = lock(&self.points).contents(p.ino).unwrap_or_default();
                let from = (offset as usize).min(contents.len());
                let to = from.saturating_add(size as usize).min(contents.len());
                return reply.data(&contents[from..to]);
            }
            Err(e) => return reply.error(e),
        };
        if offset == 0 {
            self.scan_read(ino);
        }
        let want = (size as u64).min(i.size.saturating_sub(offset));
        // Dropped before `_poll`: right after the reply, before any polling.
        let _push = self.kept_reads(ino, &i, offset, want);
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
        let _poll = self.poll();
        match self.node(ino) {
            Ok(n) if !n.is_dir() => reply.error(Errno::ENOTDIR),
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
        let _poll = self.poll();
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
        let _poll = self.poll();
        let mut err = None;
        let r = self.list(ino, offset, |i, next, name, _| {
            let attr = match self.node_attr(INodeNo(i)) {
                Ok(a) => a,
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
        let _poll = self.poll();
        let bs = self.ar.block_size();
        let blocks = self.ar.bytes_used().div_ceil(bs as u64);
        reply.statfs(blocks, 0, 0, self.ar.inode_count() as u64, 0, bs, 256, bs);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _poll = self.poll();
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
        let _poll = self.poll();
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
        let _poll = self.poll();
        // No permission checks inside an immutable image the caller can read anyway (see
        // DESIGN 4); writes are refused by the read-only mount before they get here.
        match self.node(ino) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        match self.make_point(parent, name, PointKind::Dir) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.make_point(parent, name, PointKind::File) {
            Ok(attr) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                FopenFlags::empty(),
            ),
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
        let table = [
            (1, false, 1),
            (2, false, 1),
            (3, false, 1),
            (4, false, 2),
            (8, false, 4),
            (64, false, 4),
            (1, true, 2),
            (2, true, 2),
            (6, true, 3),
            (64, true, 4),
        ];
        for (cpus, network, want) in table {
            assert_eq!(
                server_threads(cpus, network),
                want,
                "{cpus} CPUs, network {network}"
            );
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

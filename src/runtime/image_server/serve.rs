//! The image server: one process per user and image file (per Slurm job or step under Slurm)
//! that holds the image's FUSE mount and lends it to every container of that image.
//!
//! It runs in a user and mount namespace of its own (its ids mapped to themselves), mounts the
//! image read-only and serves it (runtime/image_server/fuse_fs.rs). A container's gpurun connects to it
//! (runtime/image_server/attach.rs), and the server sends back a detached copy of its mount (open_tree):
//! the container attaches that copy in a mount namespace of its own, so every container reads
//! through the one FUSE superblock, whose dentries, inodes and pages the kernel keeps from one
//! container to the next. Nothing of a container's lives here: its binds, files, uid map and
//! writes are in its own namespaces.
//!
//! The server answers its own user only (SO_PEERCRED). It exits when no container has been
//! attached for its idle time, when its image file changes, when it is stopped, when the Slurm
//! step or job it belongs to ends (`anchor`), or, started for one container alone (`private`),
//! when that container ends. Its exit ends the FUSE connection: a container still attached
//! then gets ENOTCONN from its image, never a wait.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::fuse_fs;
use crate::image::sqfs::{kept_id, Archive};
use crate::sys;
use crate::sys::seam::{Linux, Mounts, Namespaces};

/// How long a send to a container's gpurun may wait.
const SEND: Duration = Duration::from_secs(2);

/// Where the server mounts the image, in its own mount namespace.
pub(super) const MOUNT: &str = "/tmp";

/// A request to a server, one message each.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Lend the mount to a container; the connection stays open while the container lives.
    Attach,
    Status,
    /// Take no more containers; exit once those attached have ended.
    Stop,
}

/// A server's answer: to `Attach` (with the mount attached), to `Stop`, or an error.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Reply {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A line of the server's stderr (an image error), passed on to its containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub say: Option<String>,
    /// The server's pid, with a lent mount.
    #[serde(default)]
    pub pid: u32,
}

/// What `gpurun ps` shows of a server.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    pub image: PathBuf,
    /// Seconds since the epoch.
    pub started: u64,
    /// Where it belongs: "node", "slurm-job N", or "slurm-step (slurmstepd PID)".
    pub scope: String,
    pub idle_timeout_seconds: u64,
    /// The gpurun process of each attached container.
    pub containers: Vec<u32>,
    pub rss_bytes: u64,
    pub cpu_seconds: f64,
    pub stopping: bool,
}

/// How a server was started (`gpurun serve`, hidden, run only by gpurun itself). Its
/// descriptors: 3 the socket (listening, or with `private` connected to its one container),
/// 4 the pipe it says "ok" or its error on, 5 the image file.
pub struct Args {
    pub image: PathBuf,
    /// The image's identity as the starting gpurun read it (`Archive::identity`).
    pub id: String,
    pub idle: Duration,
    pub scope: String,
    /// A process (slurmstepd, or the job's keeper) whose end ends the server.
    pub anchor: Option<i32>,
    /// Where the server keeps the blocks its first containers needed decompressed, for the
    /// next server of the image (image/sqfs/kept.rs): a file in the user's cache that the
    /// starting gpurun, or the job's keeper, found itself; never one a request names.
    pub kept: Option<PathBuf>,
    pub private: bool,
}

impl Args {
    /// The command line of `gpurun serve` with these settings.
    pub fn command_line(&self) -> Vec<String> {
        let mut a = vec![
            "serve".to_string(),
            "--image".into(),
            self.image.display().to_string(),
            "--id".into(),
            self.id.clone(),
            "--idle".into(),
            self.idle.as_secs().max(1).to_string(),
            "--scope".into(),
            self.scope.clone(),
        ];
        if let Some(p) = self.anchor {
            a.extend(["--anchor".into(), p.to_string()]);
        }
        if let Some(k) = &self.kept {
            a.extend(["--kept".into(), k.display().to_string()]);
        }
        if self.private {
            a.push("--private".into());
        }
        a
    }
}

/// The descriptors a server is started with (`Args`).
pub const FDS: [i32; 3] = [3, 4, 5];

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("image {path}: {source}")]
    Image {
        path: PathBuf,
        source: crate::image::sif::OpenError,
    },
    #[error("image {0} changed while its server started; run again")]
    Changed(PathBuf),
    #[error(
        "cannot create a user namespace for the image server ({0}); `gpurun doctor` checks this"
    )]
    UserNamespace(sys::SysError),
    #[error("cannot mount image {path}: {source}")]
    Mount {
        path: PathBuf,
        source: sys::SysError,
    },
    /// /dev/fuse could not be opened or mounted here: the start falls back to an extracted copy.
    #[error("{0}")]
    NoFuse(sys::SysError),
    #[error(transparent)]
    Fuse(#[from] fuse_fs::FuseError),
}

/// The server process: returns its exit status.
pub fn run(args: Args) -> i32 {
    sys::set_process_name(c"gpurun-serve");
    // SAFETY: descriptors 3-5 are this process's, given by the gpurun that started it.
    let [sock, ready, image] = FDS.map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    let mut ready = File::from(ready);
    let started = prepare(&args, File::from(image));
    let (archive, session, mount, kept) = match started {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.write_all(&Ready::from(e).to_json());
            return 1;
        }
    };
    // The FUSE threads' messages reach the containers (`Server::say`), not a terminal.
    let said = sys::stderr_to_pipe().ok();
    if ready.write_all(&Ready::Serving.to_json()).is_err() {
        return 1;
    }
    drop(ready);
    // An anchor gone already: its step or job is over.
    let anchor = match args.anchor.map(sys::pidfd) {
        Some(Err(_)) => return 0,
        a => a.and_then(Result::ok),
    };
    let mut s = Server::new(args, sock, mount, archive, said, anchor);
    s.kept = kept;
    s.serve();
    drop(session);
    0
}

/// Open the image, enter a user and mount namespace of its own, mount the image read-only and
/// start serving it. Single-threaded until the serving starts, as unshare needs.
#[allow(clippy::type_complexity)]
fn prepare(
    args: &Args,
    image: File,
) -> Result<
    (
        Arc<Archive>,
        fuser::BackgroundSession,
        OwnedFd,
        Option<PathBuf>,
    ),
    ServerError,
> {
    let fd_path = sys::fd_path(&image);
    let archive = crate::image::sif::open_archive(&fd_path)
        .map_err(|source| ServerError::Image {
            path: args.image.clone(),
            source,
        })?
        .named(&args.image);
    drop(image);
    let id = archive.identity().map(|(_, id)| id).unwrap_or_default();
    if id != args.id {
        return Err(ServerError::Changed(args.image.clone()));
    }
    let kept = args.kept.clone();
    if let Some(f) = &kept {
        archive.use_kept(f, &kept_id(&id));
        archive.record_blocks();
    }
    let ids = (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    );
    let fuse = mount_image(&Linux, &args.image, ids)?;
    let _ = nix::unistd::chdir("/");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let archive = Arc::new(archive);
    let session = fuse_fs::serve(archive.clone(), fuse, cpus, ids)?;
    let root = Linux.open_path(Path::new(MOUNT));
    let root = root.map_err(mount_error(&args.image))?;
    Ok((archive, session, root, kept))
}

/// Enter a user namespace (`ids` mapped to themselves) and a mount namespace that receives the
/// host's mount events, and mount `image` read-only at `MOUNT` there: the FUSE connection.
pub(super) fn mount_image<S: Mounts + Namespaces>(
    os: &S,
    image: &Path,
    ids: (u32, u32),
) -> Result<OwnedFd, ServerError> {
    os.enter_user_namespace(ids.0, ids.1)
        .map_err(ServerError::UserNamespace)?;
    let entered = os.enter_mount_namespace_then(sys::Propagation::Receive, || ());
    entered.map_err(mount_error(image))?;
    let fuse = os.open_fuse().map_err(|e| {
        ServerError::NoFuse(sys::SysError::Call {
            what: "open /dev/fuse",
            errno: sys::io_errno(&e),
        })
    })?;
    let mounted = os.mount_fuse(&fuse, image, Path::new(MOUNT), ids);
    mounted.map_err(ServerError::NoFuse)?;
    Ok(fuse)
}

/// A mount step's error, naming the image.
fn mount_error(image: &Path) -> impl Fn(sys::SysError) -> ServerError + '_ {
    |source| ServerError::Mount {
        path: image.to_path_buf(),
        source,
    }
}

/// What an Attach lends: a detached copy of the mount whose root is `root`.
pub(super) fn copy_of_mount(os: &impl Mounts, root: &OwnedFd) -> sys::Result<OwnedFd> {
    os.clone_tree(&sys::fd_path(root))
}

/// A connection to the server, and whether a container is attached through it.
struct Conn {
    sock: OwnedFd,
    pid: u32,
    attached: bool,
}

struct Server {
    args: Args,
    /// The listening socket, until the server takes no more containers.
    listener: Option<OwnedFd>,
    conns: Vec<Conn>,
    /// The root of the image's mount, for the copies lent to containers.
    mount: OwnedFd,
    archive: Arc<Archive>,
    /// Where it keeps the blocks its first containers needed (image/sqfs/kept.rs), until then.
    kept: Option<PathBuf>,
    /// The read end of this process's stderr.
    said: Option<OwnedFd>,
    /// Changes in the image's directory, and the process whose end ends the server.
    watch: Option<OwnedFd>,
    anchor: Option<OwnedFd>,
    started: SystemTime,
    /// Since when no container has been attached.
    idle_since: Instant,
    stopping: bool,
}

/// What woke the server.
enum Event {
    Accept,
    Said,
    Watch,
    Anchor,
    Conn(usize),
    Timeout,
}

impl Server {
    fn new(
        args: Args,
        sock: OwnedFd,
        mount: OwnedFd,
        archive: Arc<Archive>,
        said: Option<OwnedFd>,
        anchor: Option<OwnedFd>,
    ) -> Server {
        let (listener, conns) = if args.private {
            let conn = Conn {
                sock,
                pid: 0,
                attached: false,
            };
            (None, vec![conn])
        } else {
            (Some(sock), Vec::new())
        };
        let watch = args
            .image
            .parent()
            .filter(|_| !args.private)
            .and_then(|d| sys::watch_dir(d).ok());
        Server {
            listener,
            conns,
            mount,
            archive,
            kept: None,
            said,
            watch,
            anchor,
            started: SystemTime::now(),
            idle_since: Instant::now(),
            stopping: false,
            args,
        }
    }

    /// Serve requests until it is time to go.
    fn serve(&mut self) {
        loop {
            match self.next_event() {
                Event::Accept => self.accept(),
                Event::Said => self.pass_on_stderr(),
                Event::Watch => self.check_image(),
                Event::Anchor => return,
                Event::Conn(i) => self.request(i),
                Event::Timeout => {}
            }
            if self.done() {
                return;
            }
        }
    }

    fn attached(&self) -> usize {
        self.conns.iter().filter(|c| c.attached).count()
    }

    /// Whether the server has no more to do: nothing attached, and stopped, stale, alone in
    /// the first place (`private`), or idle for its idle time.
    fn done(&self) -> bool {
        if self.attached() > 0 {
            return false;
        }
        if self.args.private {
            return self.conns.is_empty();
        }
        self.stopping || self.idle_since.elapsed() >= self.args.idle
    }

    fn next_event(&self) -> Event {
        let timeout = match (self.attached(), self.args.private) {
            (0, false) => Some(self.args.idle.saturating_sub(self.idle_since.elapsed())),
            _ => None,
        };
        let fixed = [&self.listener, &self.said, &self.watch, &self.anchor];
        let mut fds: Vec<BorrowedFd> = fixed
            .iter()
            .filter_map(|f| f.as_ref())
            .map(|f| f.as_fd())
            .collect();
        let first_conn = fds.len();
        fds.extend(self.conns.iter().map(|c| c.sock.as_fd()));
        let Ok(ready) = sys::wait_readable(&fds, timeout) else {
            return Event::Timeout;
        };
        let mut slot = 0;
        for (f, e) in fixed
            .iter()
            .zip([Event::Accept, Event::Said, Event::Watch, Event::Anchor])
        {
            if f.is_some() {
                if ready[slot] {
                    return e;
                }
                slot += 1;
            }
        }
        match ready[first_conn..].iter().position(|r| *r) {
            Some(i) => Event::Conn(i),
            None => Event::Timeout,
        }
    }

    /// A new connection, from this user only: another user's is closed unanswered.
    fn accept(&mut self) {
        let Some(l) = &self.listener else { return };
        let Ok(sock) = sys::accept(l) else { return };
        let me = nix::unistd::getuid().as_raw();
        // a container's gpurun that stops reading must not stop the server's sends
        if sys::set_timeouts(&sock, SEND).is_err() {
            return;
        }
        match sys::peer(&sock) {
            Ok((uid, pid)) if uid == me => self.conns.push(Conn {
                sock,
                pid: pid.max(0) as u32,
                attached: false,
            }),
            _ => {}
        }
    }

    /// One request on connection `i`, or its end.
    fn request(&mut self, i: usize) {
        let msg = sys::receive(&self.conns[i].sock).map(|(m, _)| m);
        let req = match msg {
            Ok(m) if !m.is_empty() => serde_json::from_slice::<Request>(&m).ok(),
            _ => None,
        };
        let keep = match req {
            Some(Request::Attach) if !self.stopping => self.lend(i),
            Some(Request::Status) => {
                let s = serde_json::to_vec(&self.status()).unwrap_or_default();
                let _ = sys::send(&self.conns[i].sock, &s, &[]);
                false
            }
            Some(Request::Stop) => {
                self.retire();
                let _ = sys::send(&self.conns[i].sock, b"{}", &[]);
                false
            }
            _ => false,
        };
        if !keep {
            let c = self.conns.remove(i);
            if c.attached && self.attached() == 0 {
                self.idle_since = Instant::now();
                self.keep_blocks();
            }
        }
    }

    /// Send connection `i` a detached copy of the image's mount; it is attached from then on.
    fn lend(&mut self, i: usize) -> bool {
        let c = &mut self.conns[i];
        let reply = |error: Option<String>| {
            let pid = std::process::id();
            let r = Reply {
                error,
                say: None,
                pid,
            };
            serde_json::to_vec(&r).unwrap_or_default()
        };
        match copy_of_mount(&Linux, &self.mount) {
            Ok(tree) => {
                use std::os::fd::AsRawFd;
                c.attached = sys::send(&c.sock, &reply(None), &[tree.as_raw_fd()]).is_ok();
                c.attached
            }
            Err(e) => {
                let _ = sys::send(&c.sock, &reply(Some(e.to_string())), &[]);
                false
            }
        }
    }

    fn status(&self) -> Status {
        let (rss_bytes, cpu_seconds) = sys::own_usage();
        Status {
            pid: std::process::id(),
            image: self.args.image.clone(),
            started: (self
                .started
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())),
            scope: self.args.scope.clone(),
            idle_timeout_seconds: self.args.idle.as_secs(),
            containers: (self.conns.iter().filter(|c| c.attached))
                .map(|c| c.pid)
                .collect(),
            rss_bytes,
            cpu_seconds,
            stopping: self.stopping,
        }
    }

    /// Once its first containers have gone: the blocks they needed decompressed, for the next
    /// server of the image, which then decompresses none of them (written whole, at most once).
    fn keep_blocks(&mut self) {
        let Some(file) = self.kept.take() else {
            return;
        };
        let written = self.archive.keep_blocks(&file, &kept_id(&self.args.id));
        if let (Ok(true), Some(dir)) = (written, file.parent()) {
            crate::store::kept_facts::prune(dir, KEPT_FILES, KEPT_BYTES);
        }
    }

    /// Lines the FUSE threads wrote to stderr, to every attached container.
    fn pass_on_stderr(&mut self) {
        let Some(fd) = &self.said else { return };
        let mut buf = [0u8; 4096];
        let n = match nix::unistd::read(fd, &mut buf) {
            Ok(n) if n > 0 => n,
            _ => {
                self.said = None;
                return;
            }
        };
        let text = String::from_utf8_lossy(&buf[..n]);
        for line in text.lines().filter(|l| !l.is_empty()) {
            let m = Reply {
                say: Some(line.to_string()),
                ..Reply::default()
            };
            let m = serde_json::to_vec(&m).unwrap_or_default();
            for c in self.conns.iter().filter(|c| c.attached) {
                let _ = sys::send(&c.sock, &m, &[]);
            }
        }
    }

    /// The image's directory changed: a server never serves an image file that changed, so if
    /// this one did (or is gone), it takes no more containers.
    fn check_image(&mut self) {
        if let Some(w) = &self.watch {
            sys::drain(w);
        }
        if !same_file(&self.archive, &self.args.image) {
            self.retire();
            self.watch = None;
        }
    }

    /// Take no more containers: the server's name is free for a new server at once, and this
    /// one answers `gpurun ps` under another until its containers have ended.
    fn retire(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        let me = nix::unistd::getuid().as_raw();
        let name = super::socket_names::retired_name(me, std::process::id());
        self.listener = (!self.args.private)
            .then(|| sys::listen_abstract(&name).ok())
            .flatten();
    }
}

/// Image files' kept blocks at most (a file is 32 MiB at most, most are a few MiB): every
/// image file has its own, and images are replaced and removed.
const KEPT_FILES: usize = 32;
const KEPT_BYTES: u64 = 512 << 20;

/// Whether the file at `path` is still the one `archive` has open, unchanged.
fn same_file(archive: &Archive, path: &Path) -> bool {
    let (Ok(now), Ok(open)) = (std::fs::metadata(path), archive.metadata()) else {
        return false;
    };
    let key = |m: &std::fs::Metadata| {
        (
            m.dev(),
            m.ino(),
            m.size(),
            (m.mtime(), m.mtime_nsec()),
            (m.ctime(), m.ctime_nsec()),
        )
    };
    key(&now) == key(&open)
}

/// What a starting server says on its ready pipe, once.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ready {
    Serving,
    /// FUSE cannot be opened or mounted on this node (the start extracts the image instead).
    NoFuse(String),
    Failed(String),
}

impl Ready {
    fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("ready messages serialise")
    }
}

impl From<ServerError> for Ready {
    fn from(e: ServerError) -> Ready {
        match e {
            ServerError::NoFuse(why) => Ready::NoFuse(why.to_string()),
            e => Ready::Failed(e.to_string()),
        }
    }
}

/// Read what a starting server says on its pipe: `Serving`, or why it does not.
pub fn wait_ready(pipe: OwnedFd, timeout: Duration) -> Ready {
    let ready = match sys::wait_readable(&[pipe.as_fd()], Some(timeout)) {
        Ok(r) => r,
        Err(e) => return Ready::Failed(e.to_string()),
    };
    if !ready[0] {
        let s = format!(
            "the image server did not start within {} s",
            timeout.as_secs()
        );
        return Ready::Failed(s);
    }
    let mut said = Vec::new();
    let _ = File::from(pipe).read_to_end(&mut said);
    serde_json::from_slice(&said)
        .unwrap_or_else(|_| Ready::Failed("the image server exited while starting".into()))
}

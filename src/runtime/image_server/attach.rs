//! A start's side of the image server (runtime/image_server/serve.rs): find the user's server for an image
//! file, or start it, and get a copy of its mount.
//!
//! The rendezvous is an abstract unix socket, `gpurun-UID-HASH`, the hash over the image file's
//! identity (device, inode, size, times), the user's gid, gpurun's build and the scope: no file
//! or directory anywhere (under Slurm `$XDG_RUNTIME_DIR` is often unset), the name is gone with
//! its server, and only one socket can hold it, so of many first starts at once exactly one
//! binds it and starts the server while the others connect and wait. Both ends check who is
//! at the other (SO_PEERCRED): a name another user holds means no sharing (one warning, and
//! the container gets a server of its own), never a failed start.
//!
//! Scope: a node's server is shared by every container of the user there. Under Slurm a server
//! belongs to the step that started it (it ends with the step's slurmstepd), or, where the job
//! has a keeper (runtime/image_server/job_keeper.rs, started by the SPANK plugin in the job's extern step), to
//! the job: the keeper starts it, and it ends with the job.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;

use super::job_keeper::{self, KeeperError};
use super::serve::{self, Ready, Reply, Request, Status};
use super::socket_names::{keeper_name, server_name, server_prefix};
use crate::image::sqfs::Archive;
use crate::sys::{self, Spawn};

/// How long a start waits for a server to answer, or to start.
const ANSWER: Duration = Duration::from_secs(30);
/// How long after its extern step starts a job's keeper may still be starting.
const KEEPER_START: Duration = Duration::from_secs(3);
/// Tries to reach or start the shared server before a start goes its own way.
const TRIES: usize = 4;

/// How long a start tries a name whose listener takes no connection (a full backlog) before it
/// takes it for another user's that never accepts.
const CONNECT: Duration = Duration::from_secs(1);

/// A container's copy of its image server's mount, and the connection that keeps it attached:
/// the server lives at least as long as that is open, and its end closes it.
pub struct Attached {
    pub mount: OwnedFd,
    pub conn: OwnedFd,
    pub server: u32,
}

/// Where a server belongs (module comment).
pub struct Scope {
    /// In the server's name.
    key: String,
    /// For `gpurun ps`.
    label: String,
    /// The process whose end ends the server.
    anchor: Option<i32>,
    /// A connection to the job's keeper, which starts the job's servers: checked to be the
    /// user's when it was made, and the one the request goes on.
    keeper: Option<OwnedFd>,
}

/// Why no server lends its mount.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// FUSE cannot be opened or mounted on this node (the caller extracts the image instead):
    /// the server's line, from its ready pipe.
    #[error("/dev/fuse cannot be mounted ({0})")]
    NoFuse(String),
    /// The server's line for why it does not serve (from its ready pipe or its reply).
    #[error("{0}")]
    Failed(String),
    #[error("it did not answer within {} s", ANSWER.as_secs())]
    NoAnswer,
    #[error("it exited before answering")]
    Exited,
    #[error("it lent no mount")]
    NoMount,
    /// The pipe the server says it is ready on.
    #[error("{0}")]
    ReadyPipe(Errno),
    /// The image file's identity, which names its server.
    #[error("{0}")]
    Identity(std::io::Error),
    #[error(transparent)]
    Keeper(#[from] KeeperError),
    #[error(transparent)]
    Sys(#[from] sys::SysError),
}

/// What a server is started with besides its image.
#[derive(Clone, Copy)]
struct Start<'a> {
    image: &'a Path,
    idle: Duration,
    /// Where it keeps its decompressed blocks for the next server (image/sqfs/kept.rs).
    kept: Option<&'a Path>,
}

/// Reach the user's server for `archive` (at `image`), starting it where there is none, and
/// attach to it. With `idle` zero the container gets a server of its own, ending with it.
pub fn attach(
    archive: &Archive,
    image: &Path,
    idle: Duration,
    kept: Option<&Path>,
) -> Result<Attached, AttachError> {
    let start = Start { image, idle, kept };
    if idle.is_zero() {
        return private(archive, &start);
    }
    let scope = scope();
    let Ok((_, id)) = archive.identity() else {
        return private(archive, &start);
    };
    let name = server_name(uid(), &id, nix::unistd::getgid().as_raw(), &scope.key);
    let mut why = String::new();
    for _ in 0..TRIES {
        let conn = match connect_busy(&name) {
            Ok(c) => c,
            Err(e) if e.errno() == Errno::ECONNREFUSED => {
                match bind_and_start(archive, &start, &name, &scope) {
                    Ok(()) => continue,
                    Err(e @ AttachError::NoFuse(_)) => return Err(e),
                    Err(e) => why = e.to_string(),
                }
                continue;
            }
            Err(e) => {
                not_mine(image, &e);
                return private(archive, &start);
            }
        };
        match request(conn) {
            Ok(a) => return Ok(a),
            Err(e) => why = e.to_string(),
        }
    }
    eprintln!(
        "gpurun: warning: no shared image server for {} ({}); this container gets a server of its own",
        image.display(),
        if why.is_empty() { "it kept exiting" } else { &why }
    );
    private(archive, &start)
}

/// A connection to the user's server `name`: a full backlog (a burst of starts) is tried again
/// for up to `CONNECT`, after which the listener is taken for one that never accepts.
fn connect_busy(name: &str) -> sys::Result<OwnedFd> {
    let started = std::time::Instant::now();
    loop {
        match sys::connect_own(name, uid(), ANSWER) {
            Err(e) if e.errno() == Errno::EAGAIN && started.elapsed() < CONNECT => {
                std::thread::sleep(Duration::from_millis(10))
            }
            r => return r.map(|(c, _)| c),
        }
    }
}

/// The one line for a server name that is not the user's to use: another user holds it, or
/// its listener takes no connection.
fn not_mine(image: &Path, e: &sys::SysError) {
    let who = match e {
        sys::SysError::Foreign { uid } => format!("is held by another user (uid {uid})"),
        e if e.errno() == Errno::EAGAIN => "is held by a process that does not answer".into(),
        e => format!("cannot be reached ({e})"),
    };
    eprintln!(
        "gpurun: warning: the name of your image server for {} {who}; this container gets a server of its own",
        image.display()
    );
}

/// A server for one container, ending with it.
fn private(archive: &Archive, start: &Start) -> Result<Attached, AttachError> {
    let (mine, theirs) = sys::socket_pair()?;
    let node = Scope {
        key: String::new(),
        label: "container".into(),
        anchor: None,
        keeper: None,
    };
    let own = Start {
        idle: Duration::ZERO,
        ..*start
    };
    spawn(archive, &own, &node, theirs)?;
    request(mine)
}

/// Bind the server's name and start it there; Ok also when another start bound it first.
fn bind_and_start(
    archive: &Archive,
    start: &Start,
    name: &str,
    scope: &Scope,
) -> Result<(), AttachError> {
    let listener = match sys::listen_abstract(name) {
        Ok(l) => l,
        Err(e) if e.errno() == Errno::EADDRINUSE => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    spawn(archive, start, scope, listener)
}

/// Start a server on `sock` (listening, or the private one's end), through the job's keeper
/// where there is one, and wait until it serves.
fn spawn(
    archive: &Archive,
    start: &Start,
    scope: &Scope,
    sock: OwnedFd,
) -> Result<(), AttachError> {
    let (r, w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(AttachError::ReadyPipe)?;
    let id = archive.identity().map_err(AttachError::Identity)?.1;
    let fds = [sock.as_raw_fd(), w.as_raw_fd(), archive.raw_fd()];
    match &scope.keeper {
        Some(k) => {
            let ask = job_keeper::Ask {
                build: format!(
                    "{} {}",
                    crate::version::BUILD.version,
                    crate::version::BUILD.commit
                ),
                image: start.image.to_path_buf(),
                id,
                idle_seconds: start.idle.as_secs().max(1),
                keep_blocks: start.kept.is_some(),
            };
            job_keeper::ask(k, &ask, &fds)?
        }
        None => {
            let args = serve_args(start, id, scope);
            sys::spawn(
                Path::new("/proc/self/exe"),
                &args.command_line(),
                &fds,
                Spawn::Detached,
            )?
        }
    }
    drop((sock, w));
    match serve::wait_ready(r, ANSWER) {
        Ready::Serving => Ok(()),
        Ready::NoFuse(why) => Err(AttachError::NoFuse(why)),
        Ready::Failed(e) => Err(AttachError::Failed(e)),
    }
}

/// The settings of a server this start spawns itself.
fn serve_args(start: &Start, id: String, scope: &Scope) -> serve::Args {
    serve::Args {
        image: start.image.to_path_buf(),
        id,
        idle: start.idle,
        scope: scope.label.clone(),
        anchor: scope.anchor,
        kept: start.kept.map(Path::to_path_buf),
        private: start.idle.is_zero(),
    }
}

/// Ask the server at the other end of `conn` (the user's: checked when it was made, or a pair
/// of this process's) for its mount.
fn request(conn: OwnedFd) -> Result<Attached, AttachError> {
    sys::set_timeouts(&conn, ANSWER)?;
    let ask = serde_json::to_vec(&Request::Attach).expect("requests serialise");
    sys::send(&conn, &ask, &[])?;
    let (msg, mut fds) = match sys::receive(&conn) {
        Err(e) if e.errno() == Errno::EAGAIN => return Err(AttachError::NoAnswer),
        r => r?,
    };
    let reply: Reply = serde_json::from_slice(&msg).map_err(|_| AttachError::Exited)?;
    if let Some(e) = reply.error {
        return Err(AttachError::Failed(e));
    }
    let mount = fds.pop().ok_or(AttachError::NoMount)?;
    sys::set_receive_timeout(&conn, Duration::ZERO)?;
    Ok(Attached {
        mount,
        conn,
        server: reply.pid,
    })
}

fn uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// Where a server started here belongs (module comment). Under Slurm only in a job step
/// (below a slurmstepd): `salloc`'s shell on a login node is the node's.
fn scope() -> Scope {
    let node = Scope {
        key: String::new(),
        label: "node".into(),
        anchor: None,
        keeper: None,
    };
    let Some(job) = std::env::var("SLURM_JOB_ID").ok().filter(|j| !j.is_empty()) else {
        return node;
    };
    let Some((stepd, started)) = ancestor("slurmstepd") else {
        return node;
    };
    if let Some((pid, conn)) = job_keeper(&keeper_name(uid(), &job), &job) {
        return Scope {
            key: format!("job {job}"),
            label: job_keeper::scope_label(&job),
            anchor: Some(pid),
            keeper: Some(conn),
        };
    }
    Scope {
        key: format!("step {stepd} {started}"),
        label: format!("slurm-step (slurmstepd {stepd})"),
        anchor: Some(stepd),
        keeper: None,
    }
}

/// The user's keeper of `job` (named `keeper`): its pid and a connection to it, checked to be
/// the user's. slurmd starts a job's steps without waiting for its extern step to start the
/// keeper, and all tasks of a step must agree on the scope (else they start two servers):
/// while that extern step on this node is young, wait. A name another user holds is not the
/// user's keeper: servers then belong to the step, with one warning.
fn job_keeper(keeper: &str, job: &str) -> Option<(i32, OwnedFd)> {
    let mut deadline = None;
    loop {
        match sys::connect_own(keeper, uid(), CONNECT) {
            Ok((conn, pid)) => return Some((pid, conn)),
            Err(e) if e.errno() != Errno::ECONNREFUSED => {
                eprintln!(
                    "gpurun: warning: the name of your job's keeper ({keeper}) {}; image servers belong to this step",
                    match e {
                        sys::SysError::Foreign { uid } => format!("is held by another user (uid {uid})"),
                        e => format!("cannot be used ({e})"),
                    }
                );
                return None;
            }
            Err(_) => {}
        }
        let until = *deadline.get_or_insert_with(|| {
            sys::process_titled(&format!("slurmstepd: [{job}.extern]"))
                .and_then(sys::started)
                .map_or(Duration::ZERO, |t| t + KEEPER_START)
        });
        if sys::since_boot() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The nearest ancestor of this process called `comm`: its pid and start time.
fn ancestor(comm: &str) -> Option<(i32, u64)> {
    let mut pid = nix::unistd::getppid().as_raw();
    for _ in 0..64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (name, ppid, started) = parse_stat(&stat)?;
        if name == comm {
            return Some((pid, started));
        }
        if ppid <= 1 {
            return None;
        }
        pid = ppid;
    }
    None
}

/// Command name, parent pid and start time from /proc/PID/stat (the name may hold spaces and
/// parentheses: the fields are counted after its last ')').
fn parse_stat(stat: &str) -> Option<(&str, i32, u64)> {
    let (head, rest) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((name, f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// The user's servers on this node (`gpurun ps`), as each says.
pub fn servers() -> Vec<Status> {
    statuses().into_iter().map(|(_, s)| s).collect()
}

/// Stop the user's servers whose image is `image` (all of them for None): they take no more
/// containers and exit once theirs have ended (the idle ones before this returns). Returns what
/// each said before it stopped.
pub fn stop(image: Option<&Path>) -> Vec<Status> {
    let ask = serde_json::to_vec(&Request::Stop).expect("requests serialise");
    let mut stopped = Vec::new();
    for (name, s) in statuses() {
        if image.is_some_and(|i| !same_image(i, &s.image)) {
            continue;
        }
        let Some(c) = own_server(&name) else { continue };
        let gone = sys::pidfd(s.pid as i32).ok();
        if sys::send(&c, &ask, &[]).is_ok() && sys::receive(&c).is_ok() {
            if let (Some(g), true) = (gone, s.containers.is_empty()) {
                let _ = sys::wait_readable(&[g.as_fd()], Some(Duration::from_secs(2)));
            }
            stopped.push(s);
        }
    }
    stopped
}

fn same_image(a: &Path, b: &Path) -> bool {
    let key = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
    };
    a == b || key(a).is_some_and(|k| Some(k) == key(b))
}

/// A connection to the server called `name`, if it is the user's (a name another user holds
/// is skipped, never waited on).
fn own_server(name: &str) -> Option<OwnedFd> {
    sys::connect_own(name, uid(), Duration::from_secs(2))
        .ok()
        .map(|(c, _)| c)
}

/// Each of the user's servers: its name and status.
fn statuses() -> Vec<(String, Status)> {
    let ask = serde_json::to_vec(&Request::Status).expect("requests serialise");
    let mut out = Vec::new();
    for name in own_names() {
        let Some(c) = own_server(&name) else { continue };
        if sys::send(&c, &ask, &[]).is_err() {
            continue;
        }
        if let Some(s) = sys::receive(&c)
            .ok()
            .and_then(|(m, _)| serde_json::from_slice(&m).ok())
        {
            out.push((name, s));
        }
    }
    out
}

/// The names of the listening sockets that look like the user's servers (another user may
/// have made one: each is checked when connected to).
fn own_names() -> Vec<String> {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    listening_names(&table, &server_prefix(uid()))
}

/// The abstract names starting with `prefix` of the listening sockets in a /proc/net/unix
/// table, each once.
fn listening_names(table: &str, prefix: &str) -> Vec<String> {
    const ACCEPTING: u32 = 0x10000;
    let mut out: Vec<String> = Vec::new();
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(flags), Some(path)) = (f.get(3), f.get(7)) else {
            continue;
        };
        let listening = u32::from_str_radix(flags, 16).is_ok_and(|v| v & ACCEPTING != 0);
        let name = path.strip_prefix('@').filter(|n| n.starts_with(prefix));
        if let (true, Some(n)) = (listening, name) {
            if !out.iter().any(|o| o == n) {
                out.push(n.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_from_the_table() {
        let table = "\
Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0005 01 100 @gpurun-1000-abc
0000000000000000: 00000003 00000000 00000000 0005 03 101 @gpurun-1000-abc
0000000000000000: 00000002 00000000 00010000 0005 01 102 @gpurun-1001-def
0000000000000000: 00000002 00000000 00010000 0005 01 103 @gpurun-keep-1000-5
0000000000000000: 00000002 00000000 00010000 0001 01 104 /run/x.sock
0000000000000000: 00000002 00000000 00010000 0005 01 105
garbage
";
        assert_eq!(listening_names(table, "gpurun-1000-"), ["gpurun-1000-abc"]);
        assert_eq!(
            listening_names(table, "gpurun-keep-1000-"),
            ["gpurun-keep-1000-5"]
        );
    }

    #[test]
    fn stat_lines() {
        let s = "42 (slurm stepd) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 1 2";
        assert_eq!(parse_stat(s), Some(("slurm stepd", 7, 12345)));
        assert_eq!(parse_stat("42 (x) S"), None);
    }
}

//! Fork, apply the plan, exec; forward signals; pass the exit status back.
//!
//! Process model: gpurun (P) holds a copy of its image server's mount (runtime/image_server/attach.rs),
//! enters a new user namespace (single-threaded, so unshare is allowed) and forks the container
//! process (C). C makes a private mount namespace, attaches the image's mount, applies the
//! plan's mounts, pivots into the root and execs. P forwards signals to C, returns C's status,
//! and kills whatever C left behind; should the image server end first, P ends the container.
//! C dies with P (PDEATHSIG), and the mounts die with C's mount namespace: nothing of a
//! container outlives it.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};

use super::image_server::attach::Attached;
use super::image_server::serve::Reply;
use super::plan::{Changes, Plan};
use crate::exit;
use crate::mount::{Mount, MountSource};
use crate::sys::{self, Create, SysError};

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot create a user namespace ({0}); ask the admin to allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0) — `gpurun doctor` checks this")]
    UserNamespace(SysError),
    #[error("{0}")]
    Setup(String),
    #[error("{message}")]
    Child { code: i32, message: String },
    #[error("gpurun is installed setuid or setgid; it needs no privilege: chmod u-s,g-s {0}")]
    Setuid(PathBuf),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Sys(#[from] SysError),
}

impl LaunchError {
    pub fn exit_code(&self) -> i32 {
        match self {
            LaunchError::Child { code, .. } => *code,
            _ => exit::GPURUN_FAILED,
        }
    }
}

/// The signals gpurun passes on to the container.
const FORWARDED: [Signal; 7] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// How the image's root gets into the container.
pub enum Lower {
    /// A directory on the host (a sandbox or an extracted image).
    Dir(PathBuf),
    /// The image, as its server lends it (runtime/image_server/serve.rs): C attaches the mount.
    Served { image: PathBuf, attached: Attached },
}

/// Where the container's pieces live inside C's private mount namespace. A tmpfs mounted over /tmp
/// holds them: nothing is created on the host, and host /tmp is pinned by an fd beforehand.
const STAGE: &str = "/tmp";

/// For the Slurm holder: where to write the state once the container is ready.
pub struct HoldState {
    pub path: PathBuf,
}

/// Run a plan. Returns the exit code gpurun should exit with (the command's own).
pub fn run(plan: &Plan, lower: &Lower, hold: Option<HoldState>) -> Result<i32, LaunchError> {
    if sys::is_setuid() {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("gpurun"));
        return Err(LaunchError::Setuid(exe));
    }
    // Everything C needs is made before fork, so C allocates little and P stays simple.
    let prepared = Prepared::new(plan)?;
    let pipe = || {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| LaunchError::Setup(format!("pipe: {e}")))
    };
    let (ready_r, ready_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let state_tmp = hold.as_ref().map(state_file).transpose()?;

    let mut mask = SigSet::empty();
    for s in FORWARDED {
        mask.add(s);
    }
    mask.add(Signal::SIGCHLD);
    let old_mask = mask
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .map_err(|e| LaunchError::Setup(format!("sigprocmask: {e}")))?;

    // Blocked too, so C can wait for it; the command gets the caller's original mask back.
    sys::block_signal(parent_death_signal(), true);
    sys::enter_user_namespace(plan.uid.inside, plan.gid.inside)
        .map_err(LaunchError::UserNamespace)?;
    if plan.own_pid_ipc {
        // C, forked next, is the PID namespace's init: it already reaps and supervises.
        sys::enter_pid_ipc_namespaces()?;
    }
    sys::become_subreaper()?;
    if hold.is_some() {
        sys::die_with_parent(libc::SIGKILL)?;
    }
    let parent = nix::unistd::getpid();

    // SAFETY: P is single-threaded here. C never reads an image's data blocks: their region is
    // not in forks (image/sqfs/blocks.rs, MADV_DONTFORK).
    match unsafe { fork() }.map_err(|e| LaunchError::Setup(format!("fork: {e}")))? {
        ForkResult::Child => {
            drop((ready_r, err_r));
            let state = state_tmp.map(|(f, _)| f);
            let (code, msg) = child(plan, &prepared, lower, ready_w, parent, state, old_mask);
            let mut w = File::from(err_w);
            let _ = write!(w, "{code} {msg}");
            sys::exit_now(code);
        }
        ForkResult::Parent { child } => {
            drop((ready_w, err_w));
            let state = state_tmp.map(|(_, p)| p);
            parent_loop(child, lower, ready_r, err_r, hold, state)
        }
    }
}

/// The holder's state file, made new beside its place (never through a link: the state may be
/// asked for in a shared directory), and its temporary name.
fn state_file(h: &HoldState) -> Result<(File, PathBuf), LaunchError> {
    let mut s = h.path.as_os_str().to_owned();
    s.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(s);
    let f = crate::store::private_dir::create_new(&tmp, 0o600).map_err(|e| LaunchError::Io {
        what: format!("create {}", tmp.display()),
        source: e,
    })?;
    Ok((f, tmp))
}

/// Pre-computed C strings for the exec, so the child does no planning.
struct Prepared {
    argv: Vec<CString>,
    envp: Vec<CString>,
    path_dirs: Vec<PathBuf>,
}

impl Prepared {
    fn new(plan: &Plan) -> Result<Prepared, LaunchError> {
        let c = |s: &[u8]| {
            CString::new(s).map_err(|_| LaunchError::Setup("argument contains a NUL byte".into()))
        };
        let argv = plan
            .argv
            .iter()
            .map(|a| c(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let envp = plan
            .env
            .iter()
            .map(|(k, v)| c(format!("{k}={v}").as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Prepared {
            argv,
            envp,
            path_dirs: super::env::path_dirs(&plan.env),
        })
    }
}

/// The container process. Returns only on failure: (exit code, message for P to print).
fn child(
    plan: &Plan,
    prep: &Prepared,
    lower: &Lower,
    ready: OwnedFd,
    parent: Pid,
    state: Option<File>,
    old_mask: SigSet,
) -> (i32, String) {
    // P gone before the death signal was set? In a PID namespace of C's own P has no pid
    // there (getppid is 0): its end of the ready pipe tells.
    let orphaned = if plan.own_pid_ipc {
        sys::reader_gone(ready.as_fd())
    } else {
        nix::unistd::getppid() != parent
    };
    if sys::die_with_parent(parent_death_signal()).is_err() || orphaned {
        return (exit::GPURUN_FAILED, "gpurun exited during start-up".into());
    }
    let mut ready = File::from(ready);
    // During set-up the death signal kills C outright; from then on C handles it itself
    // (`supervise` waits for it), ending the command's whole tree.
    sys::block_signal(parent_death_signal(), false);
    let root = setup_root(plan, lower);
    sys::block_signal(parent_death_signal(), true);
    let root = match root {
        Ok(r) => r,
        Err(e) => return (exit::GPURUN_FAILED, e),
    };
    if let Err(e) = sys::pivot_root(&root) {
        return (
            exit::GPURUN_FAILED,
            format!("cannot enter the container root: {e}"),
        );
    }
    if let Some(mut f) = state {
        // The holder's mount namespace is now the container as its tasks see it ("root": "/"):
        // a task joins with two setns calls. Copying the mount tree, pivoting and unmounting the
        // host's tree in each task took a lock global to the node, one task after the other.
        let mut st = hold_state::State {
            pid: std::process::id() as i32,
            root: PathBuf::from("/"),
            env: plan.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            cwd: plan.cwd.clone(),
        };
        if !prep.argv.is_empty() {
            match run_entrypoint(prep, &old_mask, &plan.cwd) {
                Ok((env, cwd)) => (st.env, st.cwd) = (env, cwd),
                Err(e) => return e,
            }
        }
        if f.write_all(st.to_line().as_bytes()).is_err() || ready.write_all(b"R").is_err() {
            return (exit::GPURUN_FAILED, "cannot write the holder state".into());
        }
        drop(ready);
        // A signal P forwards (SIGTERM from the SPANK plugin) ends the holder.
        hold();
    }
    drop(ready);
    if nix::unistd::chdir(&plan.cwd).is_err() {
        eprintln!(
            "gpurun: warning: working directory {} does not exist in the container; using /",
            plan.cwd.display()
        );
    }
    if let Err(e) = sys::set_no_new_privs().and_then(|_| sys::become_subreaper()) {
        return (exit::GPURUN_FAILED, e.to_string());
    }
    // C stays as a small init: it reaps, forwards signals, and takes the command's whole process
    // tree down with it, also when gpurun itself is killed (PDEATHSIG reaches C, which can act).
    match spawn_command(prep, &old_mask) {
        Ok(cmd) => supervise(cmd),
        Err(e) => e,
    }
}

/// pyxis's --container-entrypoint for the holder, whose argv is the image's entrypoint followed
/// by `plan::HOLD_STOP`: run it in the container, once, and take the environment and working
/// directory of the shell it execs, which stops itself; then end that shell.
fn run_entrypoint(
    prep: &Prepared,
    mask: &SigSet,
    cwd: &Path,
) -> Result<(Vec<String>, PathBuf), (i32, String)> {
    let in_cwd = nix::unistd::chdir(cwd).is_ok();
    // as for any command gpurun starts: nothing it execs gains privileges
    sys::set_no_new_privs().map_err(|e| (exit::GPURUN_FAILED, e.to_string()))?;
    let pid = spawn_command(prep, mask)?;
    let status = waitpid(pid, Some(WaitPidFlag::WUNTRACED));
    let entry = prep.argv[..prep.argv.len() - super::plan::HOLD_STOP.len()]
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let ended = |how: String| {
        Err((
            exit::GPURUN_FAILED,
            format!("the image's entrypoint ({entry}) {how} instead of starting the command; without it: srun --no-container-entrypoint"),
        ))
    };
    match status {
        Ok(WaitStatus::Stopped(..)) => {}
        Ok(WaitStatus::Exited(_, code)) => return ended(format!("exited with status {code}")),
        Ok(WaitStatus::Signaled(_, sig, _)) => return ended(format!("was killed by {sig}")),
        other => return ended(format!("ended ({other:?})")),
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ"));
    let dir = std::fs::read_link(format!("/proc/{pid}/cwd"));
    let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
    let _ = waitpid(pid, None);
    let environ = environ.map_err(|e| {
        (
            exit::GPURUN_FAILED,
            format!("cannot read the environment the entrypoint left: {e}"),
        )
    })?;
    let env = environ
        .split(|&b| b == 0)
        .filter(|e| !e.is_empty())
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .filter(|e| e.split_once('=').is_some_and(|(k, _)| !k.is_empty()))
        .collect();
    // where the working directory was missing the plugin says so, as without an entrypoint
    let dir = match dir {
        Ok(d) if in_cwd => d,
        _ => cwd.to_path_buf(),
    };
    Ok((env, dir))
}

/// The holder's C keeps the namespace until P forwards a signal (SIGTERM from the SPANK plugin),
/// which ends it as it would a command, or until gpurun dies.
fn hold() -> ! {
    let waited = forwarded_and(&[parent_death_signal()]);
    loop {
        match sys::wait_signal(&waited) {
            Some((signo, _)) if signo == parent_death_signal() => gpurun_died(),
            Some((signo, _)) if signo != libc::SIGWINCH => {
                if let Ok(sig) = Signal::try_from(signo) {
                    die_by(sig, false);
                }
            }
            _ => {}
        }
    }
}

/// gpurun is gone: the command's tree ends with it.
fn gpurun_died() -> ! {
    kill_descendants();
    sys::exit_now(exit::GPURUN_FAILED)
}

/// C's loop once the command runs: forward, reap, and on the end of either the command or
/// gpurun, kill everything left and leave with the command's status.
fn supervise(cmd: Pid) -> ! {
    let waited = forwarded_and(&[libc::SIGCHLD, parent_death_signal()]);
    loop {
        let Some((signo, from_kernel)) = sys::wait_signal(&waited) else {
            continue;
        };
        if signo == parent_death_signal() {
            gpurun_died();
        }
        if signo != libc::SIGCHLD {
            if !from_kernel {
                let _ = nix::sys::signal::kill(cmd, Signal::try_from(signo).ok());
            }
            continue;
        }
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == cmd => {
                    kill_descendants();
                    sys::exit_now(code);
                }
                Ok(WaitStatus::Signaled(pid, sig, core)) if pid == cmd => {
                    kill_descendants();
                    die_by(sig, core);
                }
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
}

/// The signals C forwards or acts on, and `also`.
fn forwarded_and(also: &[i32]) -> Vec<i32> {
    FORWARDED
        .iter()
        .map(|&s| s as i32)
        .chain(also.iter().copied())
        .collect()
}

/// Sent to C when gpurun dies: a real-time signal, so it never collides with one a user sends.
fn parent_death_signal() -> i32 {
    libc::SIGRTMIN()
}

/// Leave by `sig`, as the command did, so callers see a signal and not a number.
fn die_by(sig: Signal, core: bool) -> ! {
    if !core {
        sys::default_action(sig as i32);
        let mut m = SigSet::empty();
        m.add(sig);
        let _ = m.thread_unblock();
        let _ = nix::sys::signal::raise(sig);
    }
    sys::exit_now(128 + sig as i32)
}

/// Build the container root in C's private mount namespace; returns its path.
fn setup_root(plan: &Plan, lower: &Lower) -> Result<PathBuf, String> {
    sys::enter_mount_namespace(sys::Propagation::Private).map_err(|e| e.to_string())?;
    if let Some(h) = &plan.hostname {
        sys::enter_uts_namespace(h).map_err(|e| e.to_string())?;
    }
    // Every host source is captured before STAGE is mounted over /tmp.
    let srcs = capture_sources(plan)?;
    let kept = match &plan.changes {
        Changes::Overlay { dir, .. } => {
            Some(sys::clone_tree(dir).map_err(|e| format!("--overlay {}: {e}", dir.display()))?)
        }
        _ => None,
    };
    // Only P holds the server's connection (dropped here): the container ends with P.
    let (tree, what, dir) = match lower {
        Lower::Dir(d) => {
            let t = sys::clone_tree(d).map_err(|e| format!("cannot use image directory: {e}"))?;
            (
                t,
                format!("image directory {}", d.display()),
                Some(d.as_path()),
            )
        }
        Lower::Served { image, attached } => {
            let t = attached.mount.try_clone().map_err(|e| e.to_string())?;
            (t, format!("image {}", image.display()), None)
        }
    };
    let served = dir.is_none();
    let mut stage = Stage::new()?;
    let lower_p = stage.dir("lower")?;
    let dst = sys::open_path(&lower_p).map_err(|e| e.to_string())?;
    sys::attach_tree(&tree, &dst, &lower_p).map_err(|e| format!("cannot mount {what}: {e}"))?;
    if !served && plan.changes != Changes::InPlace {
        sys::remount_readonly(&lower_p).map_err(|e| e.to_string())?;
    }
    let kept = kept.map(|t| stage.attach("overlay", &t)).transpose()?;
    let root = stage.root(lower_p, served, &plan.changes, kept)?;
    let mut root = Root::open(&root).map_err(|e| e.to_string())?;
    let files = stage.dir("files")?;
    // Every mount point first: an overlay made for one would hide the mounts made below its
    // directory before it.
    for (i, (m, src)) in plan.mounts.iter().zip(srcs.iter()).enumerate() {
        let covered = plan.mounts[..i].iter().any(|e| m.dst.starts_with(&e.dst));
        let Some(kind) = point_kind(m, src.as_ref()).filter(|_| !covered) else {
            continue;
        };
        let made = stage.mount_point(&mut root, &m.dst, kind);
        made.map(drop).or_else(|e| refused(m, e, dir))?;
    }
    for (i, (m, src)) in plan.mounts.iter().zip(srcs.iter()).enumerate() {
        let applied = apply_mount(&mut root, &mut stage, m, src.as_ref(), &files, i);
        applied.or_else(|e| refused(m, e, dir))?;
    }
    if !plan.changes.writable() {
        let tops = stage.overlays.iter().map(sys::fd_path);
        for p in std::iter::once(root.path.clone())
            .filter(|_| !served)
            .chain(tops)
        {
            sys::remount_readonly(&p).map_err(|e| e.to_string())?;
        }
    }
    Ok(root.path)
}

/// Detached copies of the plan's bind sources, in plan order (None for other mounts, and for an
/// optional source that is missing).
fn capture_sources(plan: &Plan) -> Result<Vec<Option<OwnedFd>>, String> {
    let mut srcs = Vec::with_capacity(plan.mounts.len());
    for m in &plan.mounts {
        srcs.push(match &m.source {
            MountSource::Bind { src } => match sys::clone_tree(src) {
                Ok(fd) => Some(fd),
                Err(_) if m.optional => None,
                Err(e) => return Err(format!("cannot bind {}: {e}", src.display())),
            },
            _ => None,
        });
    }
    Ok(srcs)
}

/// A mount that failed: fine when optional, else the one line, with a hint for a mount point
/// refused in a directory image (`dir`).
fn refused(m: &Mount, e: SysError, dir: Option<&Path>) -> Result<(), String> {
    if m.optional {
        return Ok(());
    }
    let hint = match dir {
        Some(d) if mount_point_refused(e.errno()) => format!(
            " (if this is in the image directory {}: gpurun makes mount points only in a \
             directory image that is yours and has no mounts below it; chown it, or use a \
             .sqsh image)",
            d.display()
        ),
        _ => String::new(),
    };
    Err(format!("cannot mount {}: {e}{hint}", m.dst.display()))
}

/// The tmpfs where the container's pieces live inside C's private mount namespace, mounted over
/// /tmp (STAGE): nothing is created on the host. And the overlays made with it.
struct Stage {
    /// The overlays made for mount points: remounted read-only once the root is built.
    overlays: Vec<OwnedFd>,
    made: usize,
}

impl Stage {
    fn new() -> Result<Stage, String> {
        sys::mount_tmpfs(Path::new(STAGE), 0o755).map_err(|e| e.to_string())?;
        Ok(Stage {
            overlays: Vec::new(),
            made: 0,
        })
    }

    fn dir(&self, name: &str) -> Result<PathBuf, String> {
        let d = Path::new(STAGE).join(name);
        std::fs::create_dir(&d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
        Ok(d)
    }

    /// A captured tree attached at a new directory `name` of the stage.
    fn attach(&self, name: &str, tree: &OwnedFd) -> Result<PathBuf, String> {
        let d = self.dir(name)?;
        let dst = sys::open_path(&d).map_err(|e| e.to_string())?;
        sys::attach_tree(tree, &dst, &d).map_err(|e| e.to_string())?;
        Ok(d)
    }

    /// The container's root, with the image attached at `lower`: a read-only root is the
    /// server's read-only mount itself, and a mount point it lacks gets an overlay on its
    /// directory only (`mount_point`), not one over the whole image, whose every lookup and
    /// open that would cost. A directory image, or a writable root, gets one as a whole;
    /// `--writable` writes to the directory itself; `--overlay` (attached at `kept`) keeps
    /// the changes in its directory.
    fn root(
        &mut self,
        lower: PathBuf,
        served: bool,
        changes: &Changes,
        kept: Option<PathBuf>,
    ) -> Result<PathBuf, String> {
        let top = match changes {
            Changes::InPlace => return Ok(lower),
            Changes::None if served => return Ok(lower),
            Changes::Overlay { dir, readonly } => {
                let kept = kept.ok_or("--overlay: its directory was not captured")?;
                return self.persistent(&lower, &kept, dir, *readonly);
            }
            _ => self.dir("root")?,
        };
        match self.overlay(&lower, &top) {
            Ok(()) => Ok(top),
            Err(e) if changes.writable() => Err(format!(
                "--writable-tmpfs needs overlayfs in a user namespace (Linux ≥ 5.11): {e}"
            )),
            Err(_) => Ok(lower),
        }
    }

    /// `--overlay DIR` (attached at `at`): DIR/upper over the image, DIR/work its work
    /// directory (both made when missing); with `readonly`, DIR/upper as one more lower layer.
    fn persistent(
        &mut self,
        lower: &Path,
        at: &Path,
        dir: &Path,
        readonly: bool,
    ) -> Result<PathBuf, String> {
        let top = self.dir("root")?;
        let (upper, work) = (at.join("upper"), at.join("work"));
        let why = |e: String| format!("--overlay {}: {e}", dir.display());
        if readonly {
            if !upper.is_dir() {
                return Err(why(
                    "has no upper/ (a writable --overlay run makes it)".into()
                ));
            }
            sys::mount_overlay_ro(&[&upper, lower], &top).map_err(|e| why(e.to_string()))?;
            return Ok(top);
        }
        for d in ["upper", "work"] {
            match std::fs::create_dir(at.join(d)) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    let e = format!("cannot create {d}/ in it ({e}); give a directory you can write, or add :ro");
                    return Err(why(e));
                }
                _ => {}
            }
        }
        sys::mount_overlay(lower, &upper, &work, &top).map_err(|e| {
            why(format!(
                "{e} (overlayfs in a user namespace needs Linux ≥ 5.11 and a local file system for DIR)"
            ))
        })?;
        Ok(top)
    }

    /// A tmpfs overlay on `lower`, where new entries go, mounted at `at`.
    fn overlay(&mut self, lower: &Path, at: &Path) -> Result<(), String> {
        self.made += 1;
        let n = self.made;
        let (upper, work) = (
            self.dir(&format!("upper{n}"))?,
            self.dir(&format!("work{n}"))?,
        );
        sys::mount_overlay(lower, &upper, &work, at).map_err(|e| e.to_string())
    }

    /// Open the mount point at `dst` in `root`, made as `kind` where the root lacks it. Where
    /// the image is read-only there, or its directory cannot be copied up (a directory image
    /// whose group is one outside the user namespace: EOVERFLOW), its nearest directory gets a
    /// tmpfs overlay of this container's own, whose top takes the new entry without a copy-up:
    /// no other container sees the mount point, and the image stays as it is.
    fn mount_point(
        &mut self,
        root: &mut Root,
        dst: &Path,
        kind: Create,
    ) -> Result<OwnedFd, SysError> {
        let refused = match sys::open_in_root(&root.fd, dst, kind) {
            Err(e)
                if kind != Create::No && matches!(e.errno(), Errno::EROFS | Errno::EOVERFLOW) =>
            {
                e
            }
            r => return r,
        };
        let found = dst.ancestors().skip(1).find_map(|a| {
            let fd = sys::open_in_root(&root.fd, a, Create::No).ok()?;
            Some((a.to_path_buf(), fd))
        });
        let Some((at, dir)) = found else {
            return Err(refused);
        };
        let on = sys::fd_path(&dir);
        self.overlay(&on, &on).map_err(|_| refused)?;
        // The root's own handle is under the overlay now: from the path again, it is on top.
        if at == Path::new("/") {
            *root = Root::open(&root.path)?;
        }
        self.overlays
            .push(sys::open_in_root(&root.fd, &at, Create::No)?);
        sys::open_in_root(&root.fd, dst, kind)
    }
}

/// How the kernel refuses a mount point in a directory image it cannot overlay or write: owned
/// by ids outside the user namespace (EACCES, EPERM; EOVERFLOW on copy-up), or left read-only
/// because overlayfs refuses a lower with mounts below it (EROFS).
fn mount_point_refused(e: Errno) -> bool {
    matches!(
        e,
        Errno::EACCES | Errno::EPERM | Errno::EOVERFLOW | Errno::EROFS
    )
}

/// What a mount needs at its destination: a directory or a file (None for a symlink, and for an
/// optional bind whose source is missing).
fn point_kind(m: &Mount, src: Option<&OwnedFd>) -> Option<Create> {
    match &m.source {
        MountSource::Bind { .. } => Some(match sys::is_dir(src?) {
            Ok(true) => Create::Dir,
            _ => Create::File,
        }),
        MountSource::Tmpfs { .. } | MountSource::Proc => Some(Create::Dir),
        MountSource::File { .. } => Some(Create::File),
        MountSource::Symlink { .. } => None,
    }
}

fn apply_mount(
    root: &mut Root,
    stage: &mut Stage,
    m: &Mount,
    src: Option<&OwnedFd>,
    files: &Path,
    i: usize,
) -> Result<(), SysError> {
    match &m.source {
        MountSource::Bind { .. } => {
            let (Some(tree), Some(kind)) = (src, point_kind(m, src)) else {
                return Ok(());
            };
            attach(root, stage, m, tree, kind)
        }
        MountSource::Tmpfs { mode } => {
            let dst = stage.mount_point(root, &m.dst, Create::Dir)?;
            root.not_the_root(&dst, &m.dst)?;
            sys::mount_tmpfs(&sys::fd_path(&dst), *mode)
        }
        MountSource::File { contents } => {
            let f = files.join(i.to_string());
            std::fs::write(&f, contents).map_err(|e| SysError::Path {
                what: "write",
                path: f.clone(),
                errno: sys::io_errno(&e),
            })?;
            let _ = std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644));
            attach(root, stage, m, &sys::clone_tree(&f)?, Create::File)
        }
        MountSource::Symlink { target } => sys::symlink_in_root(&root.fd, &m.dst, target),
        MountSource::Proc => {
            let dst = stage.mount_point(root, &m.dst, Create::Dir)?;
            root.not_the_root(&dst, &m.dst)?;
            sys::mount_proc(&sys::fd_path(&dst))
        }
    }
}

/// Attach a detached tree at the mount's destination, read-only first where asked (so the tree
/// is never writable in the container, not even for a moment).
fn attach(
    root: &mut Root,
    stage: &mut Stage,
    m: &Mount,
    tree: &OwnedFd,
    kind: Create,
) -> Result<(), SysError> {
    let readonly_later = m.readonly && !sys::set_tree_readonly(tree, &m.dst)?;
    let dst = stage.mount_point(root, &m.dst, kind)?;
    root.not_the_root(&dst, &m.dst)?;
    sys::attach_tree(tree, &dst, &m.dst)?;
    if readonly_later {
        // Kernels before 5.12: the new mount (its submounts stay writable) is reached through
        // a fresh handle; an fd opened before it was attached still points under it.
        let top = sys::open_in_root(&root.fd, &m.dst, Create::No)?;
        sys::remount_readonly(&sys::fd_path(&top))?;
    }
    Ok(())
}

/// The container's root directory, and its identity to compare mount points with.
struct Root {
    path: PathBuf,
    fd: OwnedFd,
    id: (u64, u64),
}

impl Root {
    fn open(path: &Path) -> Result<Root, SysError> {
        let fd = sys::open_path(path)?;
        let st = sys::fstat(&fd)?;
        Ok(Root {
            path: path.to_path_buf(),
            fd,
            id: (st.st_dev, st.st_ino),
        })
    }

    /// An image whose /tmp (say) is a symlink to `/` would have a bind hide the whole image,
    /// and put the host's world-writable /tmp where the container looks for
    /// /etc/ld.so.preload: refused.
    fn not_the_root(&self, dst: &OwnedFd, path: &Path) -> Result<(), SysError> {
        let d = sys::fstat(dst)?;
        if path != Path::new("/") && self.id == (d.st_dev, d.st_ino) {
            return Err(SysError::Path {
                what: "the image's symlinks resolve it to the container's root:",
                path: path.to_path_buf(),
                errno: nix::errno::Errno::ELOOP,
            });
        }
        Ok(())
    }
}

/// Start the command through the container's PATH (glibc's execvpe would search the host's
/// PATH), in a process that shares C's memory until it execs (`sys::spawn_shared`). Its signals
/// are as the caller left them: dispositions (`sys::caller_dispositions`) and mask.
fn spawn_command(prep: &Prepared, mask: &SigSet) -> Result<Pid, (i32, String)> {
    let Some(arg0) = prep.argv.first() else {
        return Err((exit::GPURUN_FAILED, "no command given".into()));
    };
    let name = arg0.to_string_lossy().into_owned();
    let candidates: Vec<(PathBuf, CString)> =
        super::env::command_candidates(&name, &prep.path_dirs)
            .into_iter()
            .filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok().map(|c| (p, c)))
            .collect();
    let pointers = |v: &[CString]| -> Vec<*const libc::c_char> {
        v.iter()
            .map(|c| c.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let (argv, envp) = (pointers(&prep.argv), pointers(&prep.envp));
    let mask: libc::sigset_t = *mask.as_ref();
    // What each candidate's execve said (0: not tried), and whether none was exec'd: written by
    // the child, which shares this memory.
    let mut errnos = vec![0i32; candidates.len()];
    let mut failed = false;
    let mut stack = vec![0u8; 64 << 10];
    let mut child = || {
        // gpurun has no handlers on this path, but a pull's runtime installs some.
        sys::caller_dispositions(&FORWARDED);
        sys::set_signal_mask(&mask);
        for ((_, c), e) in candidates.iter().zip(errnos.iter_mut()) {
            // SAFETY: null-terminated arrays of the strings prepared above, alive meanwhile.
            *e = unsafe { sys::exec_raw(c, &argv, &envp) };
            if !next_candidate(Errno::from_raw(*e)) {
                break;
            }
        }
        failed = true;
        exit::NOT_FOUND
    };
    // SAFETY: a 64 KiB stack for a closure that only makes the async-signal-safe calls above
    // (a few frames), allocates nothing and cannot panic.
    let pid = unsafe { sys::spawn_shared(&mut stack, &mut child) }.map_err(|e| {
        (
            exit::GPURUN_FAILED,
            format!("cannot start the command: {e}"),
        )
    })?;
    if !failed {
        return Ok(pid);
    }
    let _ = waitpid(pid, None);
    let attempts: Vec<(PathBuf, Errno)> = candidates
        .into_iter()
        .map(|(p, _)| p)
        .zip(
            errnos
                .iter()
                .take_while(|&&e| e != 0)
                .map(|&e| Errno::from_raw(e)),
        )
        .collect();
    Err(exec_failure(&name, &prep.path_dirs, &attempts, &head_of))
}

/// The first bytes of a file, for `interpreter::missing`.
fn head_of(p: &Path) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(super::interpreter::HEAD_BYTES);
    let f = File::open(p).ok()?;
    f.take(super::interpreter::HEAD_BYTES as u64)
        .read_to_end(&mut head)
        .ok()?;
    Some(head)
}

/// Whether a PATH search goes on after execve failed so: the name is not there, or is there but
/// cannot be run (a later directory may hold one that can, as execvp does).
fn next_candidate(e: Errno) -> bool {
    matches!(
        e,
        Errno::ENOENT | Errno::ENOTDIR | Errno::EACCES | Errno::ENOEXEC | Errno::EISDIR
    )
}

/// The exit status and the one line for a command that could not be exec'd, from what each
/// candidate's execve said (in order; the search stops at an error `next_candidate` refuses).
/// An ENOENT from a file that is there (`head` reads it) is its interpreter's or loader's.
fn exec_failure(
    name: &str,
    path_dirs: &[PathBuf],
    attempts: &[(PathBuf, Errno)],
    head: &dyn Fn(&Path) -> Option<Vec<u8>>,
) -> (i32, String) {
    if let Some((p, e)) = attempts.iter().find(|(_, e)| !next_candidate(*e)) {
        return (
            exit::NOT_EXECUTABLE,
            format!("cannot execute {}: {e}", p.display()),
        );
    }
    let missing = (attempts.iter().filter(|(_, e)| *e == Errno::ENOENT))
        .find_map(|(p, _)| super::interpreter::missing(p, &head(p)?));
    if let Some(line) = missing {
        return (exit::NOT_EXECUTABLE, line);
    }
    let denied = attempts
        .iter()
        .rfind(|(_, e)| matches!(e, Errno::EACCES | Errno::ENOEXEC | Errno::EISDIR));
    match denied {
        Some((p, Errno::ENOEXEC)) => (
            exit::NOT_EXECUTABLE,
            format!(
                "cannot execute {}: not a program for this machine, and no #! line; check the file or the image's platform",
                p.display()
            ),
        ),
        Some((p, e)) => (
            exit::NOT_EXECUTABLE,
            format!(
                "cannot execute {}: {e}; make it executable (chmod +x) or run it through its interpreter",
                p.display()
            ),
        ),
        None if name.contains('/') => (
            exit::NOT_FOUND,
            format!("{name}: no such file in the container; check the path (the image's files, and binds)"),
        ),
        None => (
            exit::NOT_FOUND,
            format!(
                "{name}: command not found in the container's PATH ({}); check the name, or give its full path",
                path_dirs
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            ),
        ),
    }
}

/// P after fork: wait for C, forwarding signals, and end it should the image server end first.
fn parent_loop(
    child: Pid,
    lower: &Lower,
    ready: OwnedFd,
    err_r: OwnedFd,
    hold: Option<HoldState>,
    state_tmp: Option<PathBuf>,
) -> Result<i32, LaunchError> {
    // C has its copy of the mount; P keeps the connection to the server.
    let server = match lower {
        Lower::Served { image, attached } => {
            Some((&attached.conn, attached.server, image.as_path()))
        }
        Lower::Dir(_) => None,
    };
    // C says R once the holder's root is built, and closes `ready` when its command starts.
    let mut b = [0u8; 1];
    let built = matches!(File::from(ready).read(&mut b), Ok(1));
    if let (Some(h), Some(tmp), true) = (&hold, &state_tmp, built) {
        std::fs::rename(tmp, &h.path).map_err(|e| LaunchError::Io {
            what: format!("rename {} to {}", tmp.display(), h.path.display()),
            source: e,
        })?;
    }
    let (status, lost) = wait_child(child, server)?;
    kill_descendants();
    if let Some(tmp) = &state_tmp {
        let _ = std::fs::remove_file(tmp);
    }
    if let Some(h) = &hold {
        let _ = std::fs::remove_file(&h.path);
    }
    if let Some(lost) = lost {
        return Err(LaunchError::Setup(lost));
    }
    let mut msg = String::new();
    let _ = File::from(err_r).read_to_string(&mut msg);
    if let Some((code, text)) = msg.split_once(' ') {
        let code = code.parse().unwrap_or(exit::GPURUN_FAILED);
        return Err(LaunchError::Child {
            code,
            message: text.to_string(),
        });
    }
    Ok(match status {
        WaitStatus::Exited(_, code) => code,
        WaitStatus::Signaled(_, sig, _) if hold.is_some() && sig == Signal::SIGTERM => 0,
        WaitStatus::Signaled(_, sig, core) => die_by(sig, core),
        _ => exit::GPURUN_FAILED,
    })
}

/// Wait for C to end, passing on the signals sent to gpurun and what the image server says.
/// Should the server end first, C is killed: its image is gone (the second value says so).
fn wait_child(
    child: Pid,
    mut server: Option<(&OwnedFd, u32, &Path)>,
) -> Result<(WaitStatus, Option<String>), LaunchError> {
    use std::os::fd::AsFd;
    let mut mask = SigSet::empty();
    for s in FORWARDED {
        mask.add(s);
    }
    mask.add(Signal::SIGCHLD);
    let sfd = SignalFd::new(&mask).map_err(|e| LaunchError::Setup(format!("signalfd: {e}")))?;
    let mut lost = None;
    loop {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(st @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => return Ok((st, lost)),
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(LaunchError::Setup(format!("waitpid: {e}"))),
        }
        let mut fds = vec![sfd.as_fd()];
        fds.extend(server.as_ref().map(|s| s.0.as_fd()));
        let ready = sys::wait_readable(&fds, None).map_err(LaunchError::Sys)?;
        if ready.get(1) == Some(&true) {
            if let Some((conn, pid, image)) = &server {
                match server_says(conn) {
                    Some(say) if say.is_empty() => {}
                    Some(say) => eprintln!("{say}"),
                    None => {
                        lost = Some(format!(
                            "the image server of {} (pid {pid}) exited; the container could no longer read its image",
                            image.display()
                        ));
                        let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
                        server = None;
                    }
                }
            }
        }
        if !ready[0] {
            continue;
        }
        let Ok(Some(info)) = sfd.read_signal() else {
            continue;
        };
        let signo = info.ssi_signo as i32;
        // A signal from the terminal already reached C (same process group); pass on only the
        // ones sent to gpurun by a process (kill, scancel, timeout).
        if signo != libc::SIGCHLD && info.ssi_code != libc::SI_KERNEL {
            if let Ok(s) = Signal::try_from(signo) {
                let _ = nix::sys::signal::kill(child, s);
            }
        }
    }
}

/// A line the image server passes on (an image error), or None once it has gone.
fn server_says(conn: &OwnedFd) -> Option<String> {
    let (msg, _) = sys::receive(conn).ok()?;
    let reply: Reply = serde_json::from_slice(&msg).ok()?;
    Some(reply.say.unwrap_or_default())
}

/// Kill and reap every descendant of this process (we are a subreaper, so orphans are ours too).
fn kill_descendants() {
    loop {
        // No child at all means no descendant either (orphans are re-parented to us): the usual
        // case, and it spares looking further on every exit.
        if waitpid(None, Some(WaitPidFlag::WNOHANG)) == Err(Errno::ECHILD) {
            return;
        }
        let any = sigkill_descendants();
        while let Ok(st) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            if st == WaitStatus::StillAlive {
                break;
            }
        }
        if !any {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// SIGKILL every descendant found now; whether there was any.
fn sigkill_descendants() -> bool {
    let found = descendants_from_children_files().unwrap_or_else(descendants_from_scan);
    for &p in &found {
        let _ = nix::sys::signal::kill(Pid::from_raw(p), Signal::SIGKILL);
    }
    !found.is_empty()
}

/// Our descendants through /proc/PID/task/TID/children: reads only our own subtree, where a
/// scan of /proc reads every process on the node (costly on the exit path of every run). None
/// when the kernel has no such files (CONFIG_PROC_CHILDREN) or our own cannot be read.
fn descendants_from_children_files() -> Option<Vec<i32>> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    let mut todo = vec![me];
    while let Some(p) = todo.pop() {
        let tasks = match std::fs::read_dir(format!("/proc/{p}/task")) {
            Ok(rd) => rd,
            Err(_) if p == me => return None,
            Err(_) => continue, // exited meanwhile
        };
        for t in tasks.flatten() {
            match std::fs::read_to_string(t.path().join("children")) {
                Ok(list) => {
                    for c in list
                        .split_whitespace()
                        .filter_map(|x| x.parse::<i32>().ok())
                    {
                        out.push(c);
                        todo.push(c);
                    }
                }
                Err(_) if p == me => return None,
                Err(_) => {}
            }
        }
    }
    Some(out)
}

/// Our descendants by reading every /proc/PID/stat (for kernels without the children files).
fn descendants_from_scan() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut children: std::collections::HashMap<i32, Vec<i32>> = Default::default();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // After the command name (which may hold spaces and parens): state, then ppid.
            if let Some(ppid) = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok())
            {
                children.entry(ppid).or_default().push(pid);
            }
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![me];
    while let Some(p) = todo.pop() {
        for &c in children.get(&p).map(|v| v.as_slice()).unwrap_or(&[]) {
            out.push(c);
            todo.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_failure_table() {
        let dirs = [PathBuf::from("/a"), PathBuf::from("/b")];
        let at = |p: &str, e| (PathBuf::from(p), e);
        for (name, attempts, code, says) in [
            // Nowhere on PATH: 127, and the PATH searched.
            (
                "x",
                vec![at("/a/x", Errno::ENOENT), at("/b/x", Errno::ENOTDIR)],
                127,
                "not found in the container's PATH (/a:/b)",
            ),
            ("x", vec![], 127, "not found in the container's PATH"),
            (
                "/opt/x",
                vec![at("/opt/x", Errno::ENOENT)],
                127,
                "/opt/x: no such file",
            ),
            // Found but not runnable: 126 for the last such candidate.
            (
                "x",
                vec![at("/a/x", Errno::EACCES), at("/b/x", Errno::ENOENT)],
                126,
                "cannot execute /a/x: EACCES",
            ),
            (
                "x",
                vec![at("/a/x", Errno::EACCES), at("/b/x", Errno::EISDIR)],
                126,
                "cannot execute /b/x: EISDIR",
            ),
            (
                "/opt/x",
                vec![at("/opt/x", Errno::ENOEXEC)],
                126,
                "not a program for this machine",
            ),
            // Another error stops the search there.
            (
                "x",
                vec![at("/a/x", Errno::EACCES), at("/b/x", Errno::E2BIG)],
                126,
                "cannot execute /b/x: E2BIG",
            ),
            // There, but what its #! line names is not (the file exists: `head` reads it).
            (
                "/opt/script",
                vec![at("/opt/script", Errno::ENOENT)],
                126,
                "its #! line names \"/bin/sh\\r\", with a carriage return",
            ),
            (
                "script",
                vec![
                    at("/a/script", Errno::ENOENT),
                    at("/b/script", Errno::ENOENT),
                ],
                126,
                "cannot execute /a/script: its #! line",
            ),
        ] {
            let head = |p: &Path| {
                p.ends_with("script")
                    .then(|| b"#!/bin/sh\r\necho hi\r\n".to_vec())
            };
            let (c, msg) = exec_failure(name, &dirs, &attempts, &head);
            assert_eq!(c, code, "{attempts:?}: {msg}");
            assert!(msg.contains(says), "{attempts:?}: {msg}");
            assert!(!msg.contains('\n'), "one line: {msg}");
        }
    }

    #[test]
    fn spawn_command_finds_runs_and_reports() {
        let dirs = ["/nonexistent", "/usr/bin", "/bin"];
        let prep = |cmd: &str| Prepared {
            argv: vec![CString::new(cmd).unwrap()],
            envp: vec![],
            path_dirs: dirs.iter().map(PathBuf::from).collect(),
        };
        let pid = spawn_command(&prep("true"), &SigSet::empty()).unwrap();
        assert_eq!(waitpid(pid, None), Ok(WaitStatus::Exited(pid, 0)));
        let (code, msg) =
            spawn_command(&prep("no-such-command-here"), &SigSet::empty()).unwrap_err();
        assert_eq!(code, 127, "{msg}");
        assert!(msg.contains("/nonexistent:/usr/bin:/bin"), "{msg}");
        let (code, msg) = spawn_command(&prep("/etc/hostname"), &SigSet::empty()).unwrap_err();
        assert_eq!(code, 126, "{msg}");
        // No child is left: the failed ones were reaped. Looked up in /proc rather than by
        // waitpid(-1), which could reap another test's child in this process.
        assert_eq!(
            zombie_children(),
            0,
            "a failed command's process was not reaped"
        );
    }

    /// Zombies among this process's children that this thread started (a child that did not
    /// exec keeps its parent thread's name).
    fn zombie_children() -> usize {
        let me = std::process::id().to_string();
        let name = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|stat| {
                let Some((head, rest)) = stat.rsplit_once(')') else {
                    return false;
                };
                let fields: Vec<&str> = rest.split_whitespace().collect();
                head.split_once('(').map(|(_, c)| c) == Some(name.trim_end())
                    && fields.first() == Some(&"Z")
                    && fields.get(1) == Some(&me.as_str())
            })
            .count()
    }

    #[test]
    fn the_search_goes_on_only_past_a_missing_or_unrunnable_name() {
        for e in [
            Errno::ENOENT,
            Errno::ENOTDIR,
            Errno::EACCES,
            Errno::ENOEXEC,
            Errno::EISDIR,
        ] {
            assert!(next_candidate(e), "{e}");
        }
        for e in [Errno::E2BIG, Errno::ENOMEM, Errno::ELOOP, Errno::ETXTBSY] {
            assert!(!next_candidate(e), "{e}");
        }
    }
}

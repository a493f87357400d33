//! The calls of `join` and `holder`, as two traits with one Linux implementation.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A namespace a task joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ns {
    User,
    Mnt,
    Uts,
    Net,
    Ipc,
}

impl Ns {
    /// Its name under /proc/PID/ns.
    pub fn name(self) -> &'static str {
        match self {
            Ns::User => "user",
            Ns::Mnt => "mnt",
            Ns::Uts => "uts",
            Ns::Net => "net",
            Ns::Ipc => "ipc",
        }
    }

    pub fn from_name(name: &str) -> Option<Ns> {
        let all = [Ns::User, Ns::Mnt, Ns::Uts, Ns::Net, Ns::Ipc];
        all.into_iter().find(|n| n.name() == name)
    }

    fn flag(self) -> libc::c_int {
        match self {
            Ns::User => libc::CLONE_NEWUSER,
            Ns::Mnt => libc::CLONE_NEWNS,
            Ns::Uts => libc::CLONE_NEWUTS,
            Ns::Net => libc::CLONE_NEWNET,
            Ns::Ipc => libc::CLONE_NEWIPC,
        }
    }
}

/// What a task does to enter a holder's container (join.rs), in the forked task as the user.
pub trait Enter {
    /// `/proc/PID` as a directory handle: each namespace is opened through it, so that all come
    /// from that one process, even if the pid is reused meanwhile.
    fn open_process(&self, pid: i32) -> io::Result<OwnedFd>;
    fn open_ns(&self, process: &OwnedFd, ns: Ns) -> io::Result<OwnedFd>;
    /// Whether the namespace `fd` is another than this process's `ns`.
    fn is_other(&self, fd: &OwnedFd, ns: Ns) -> io::Result<bool>;
    fn setns(&self, fd: &OwnedFd, ns: Ns) -> io::Result<()>;
    fn unshare_mount(&self) -> io::Result<()>;
    /// `/` and what is under it made slave mounts (pivot_root refuses shared ones).
    fn make_root_rslave(&self) -> io::Result<()>;
    fn chdir(&self, dir: &Path) -> io::Result<()>;
    /// pivot_root(".", "."): the old root ends up on top of the new one.
    fn pivot_root_here(&self) -> io::Result<()>;
    /// umount2(".", MNT_DETACH): the old root, after `pivot_root_here`.
    fn detach_old_root(&self) -> io::Result<()>;
    fn no_new_privs(&self) -> io::Result<()>;
    /// The fake-ids seccomp filter (crate gpurun-fake-ids).
    fn fake_ids(&self) -> io::Result<()>;
}

/// Who a program the plugin starts runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Creds {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub groups: Vec<libc::gid_t>,
}

/// A program to start as the job's user, with nothing of slurmstepd's environment.
pub struct UserCommand<'a> {
    pub program: &'a Path,
    pub args: &'a [String],
    pub env: Vec<(String, String)>,
    /// Entered as the user, after the id change: root enters no directory the job names.
    pub cwd: &'a Path,
    pub creds: &'a Creds,
    /// Where its stdout and stderr go (None: /dev/null); stdin is /dev/null.
    pub stdout: Option<File>,
    pub stderr: Option<File>,
}

/// What slurmstepd does to a holder (holder.rs): start it as the user, watch it, stop it.
pub trait Procs {
    /// Start `c`; its pid.
    fn spawn_as(&self, c: UserCommand) -> io::Result<u32>;
    /// None where the kernel has no pidfds (< 5.3).
    fn pidfd_open(&self, pid: u32) -> Option<OwnedFd>;
    /// How our child `pid` ended (`exit status: N`), None while it runs; an error where it is
    /// no child of ours (a forked task) or was reaped by another (slurmstepd's wait3).
    fn try_wait(&self, pid: u32) -> io::Result<Option<String>>;
    /// Whether the process of `pidfd` exits within `within` (at once with zero).
    fn poll_exit(&self, pidfd: &OwnedFd, within: Duration) -> bool;
    /// A failure means the process is gone already: nothing to say.
    fn pidfd_signal(&self, pidfd: &OwnedFd, sig: libc::c_int);
    /// kill(2), only where there is no pidfd (`sig` 0: whether `pid` is there).
    fn kill(&self, pid: u32, sig: libc::c_int) -> io::Result<()>;
    fn sleep(&self, d: Duration);
}

/// The kernel's.
pub struct Linux;

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn check(r: libc::c_int) -> io::Result<()> {
    match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The (device, inode) of a namespace.
fn ns_id(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

impl Enter for Linux {
    fn open_process(&self, pid: i32) -> io::Result<OwnedFd> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = File::options()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(format!("/proc/{pid}"))?;
        Ok(dir.into())
    }
    fn open_ns(&self, process: &OwnedFd, ns: Ns) -> io::Result<OwnedFd> {
        let name = cpath(&Path::new("ns").join(ns.name()))?;
        let flags = libc::O_RDONLY | libc::O_CLOEXEC;
        // SAFETY: a valid directory fd and a NUL-terminated relative path.
        let fd = unsafe { libc::openat(process.as_raw_fd(), name.as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a non-negative result is a new fd that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
    fn is_other(&self, fd: &OwnedFd, ns: Ns) -> io::Result<bool> {
        let theirs = File::from(fd.try_clone()?).metadata()?;
        let mine = std::fs::metadata(format!("/proc/self/ns/{}", ns.name()))?;
        Ok(ns_id(&theirs) != ns_id(&mine))
    }
    fn setns(&self, fd: &OwnedFd, ns: Ns) -> io::Result<()> {
        // SAFETY: a valid namespace fd; the task is single-threaded, as setns(user) requires.
        check(unsafe { libc::setns(fd.as_raw_fd(), ns.flag()) })
    }
    fn unshare_mount(&self) -> io::Result<()> {
        // SAFETY: plain syscall; the task is single-threaded.
        check(unsafe { libc::unshare(libc::CLONE_NEWNS) })
    }
    fn make_root_rslave(&self) -> io::Result<()> {
        let (null, flags) = (std::ptr::null(), libc::MS_REC | libc::MS_SLAVE);
        // SAFETY: a NUL-terminated target; the other pointers may be null for a propagation change.
        check(unsafe { libc::mount(null, c"/".as_ptr(), null, flags, null.cast()) })
    }
    fn chdir(&self, dir: &Path) -> io::Result<()> {
        let c = cpath(dir)?;
        // SAFETY: a NUL-terminated path.
        check(unsafe { libc::chdir(c.as_ptr()) })
    }
    fn pivot_root_here(&self) -> io::Result<()> {
        let dot = c".".as_ptr();
        // SAFETY: two NUL-terminated paths.
        check(unsafe { libc::syscall(libc::SYS_pivot_root, dot, dot) } as libc::c_int)
    }
    fn detach_old_root(&self) -> io::Result<()> {
        // SAFETY: a NUL-terminated path.
        check(unsafe { libc::umount2(c".".as_ptr(), libc::MNT_DETACH) })
    }
    fn no_new_privs(&self) -> io::Result<()> {
        // SAFETY: plain prctl with integer arguments.
        check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })
    }
    fn fake_ids(&self) -> io::Result<()> {
        fake_ids::install()
    }
}

impl Procs for Linux {
    fn spawn_as(&self, c: UserCommand) -> io::Result<u32> {
        let mut cmd = Command::new(c.program);
        let out = |f: Option<File>| f.map_or(Stdio::null(), Stdio::from);
        cmd.args(c.args)
            .env_clear()
            .envs(c.env)
            .stdin(Stdio::null())
            .stdout(out(c.stdout))
            .stderr(out(c.stderr));
        as_user(&mut cmd, c.creds);
        let cwd = cpath(c.cwd)?;
        // SAFETY: between fork and exec, after `as_user`'s closure (the user's ids): one
        // async-signal-safe chdir on a string made before the fork.
        unsafe { cmd.pre_exec(move || check(libc::chdir(cwd.as_ptr()))) };
        // not waited for here: `try_wait` reaps it (std's Child does nothing when dropped)
        Ok(cmd.spawn()?.id())
    }
    fn pidfd_open(&self, pid: u32) -> Option<OwnedFd> {
        // SAFETY: plain syscall; a non-negative result is a new fd (close-on-exec by default).
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        // SAFETY: a non-negative result is a new fd that nothing else owns.
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }
    fn try_wait(&self, pid: u32) -> io::Result<Option<String>> {
        let mut status = 0;
        // SAFETY: `status` outlives the call; WNOHANG never blocks.
        match unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) } {
            0 => Ok(None),
            r if r > 0 => Ok(Some(std::process::ExitStatus::from_raw(status).to_string())),
            _ => Err(io::Error::last_os_error()),
        }
    }
    fn poll_exit(&self, pidfd: &OwnedFd, within: Duration) -> bool {
        let mut p = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: within.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: within.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one valid pollfd and a valid timeout; no signal mask change.
        unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) == 1 }
    }
    fn pidfd_signal(&self, pidfd: &OwnedFd, sig: libc::c_int) {
        let (fd, none) = (pidfd.as_raw_fd(), 0usize);
        // SAFETY: a valid pidfd, no siginfo, no flags.
        unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd, sig, none, 0u32) };
    }
    fn kill(&self, pid: u32, sig: libc::c_int) -> io::Result<()> {
        // SAFETY: plain syscall; the callers name their own unreaped child.
        check(unsafe { libc::kill(pid as libc::pid_t, sig) })
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }
}

/// Make `cmd` run as the user of `creds`, with default signal handling, dying with
/// slurmstepd: what every program the plugin starts from slurmstepd needs.
pub fn as_user(cmd: &mut Command, creds: &Creds) {
    let (uid, gid, groups) = (creds.uid, creds.gid, creds.groups.clone());
    // SAFETY: the closure runs between fork and exec in a copy of a multi-threaded process, so
    // it only makes async-signal-safe syscalls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // slurmstepd runs user_init with ruid 0 and euid = user: regain euid 0 to be able to
            // drop every id (real, effective, saved) and the supplementary groups for good.
            if libc::getuid() == 0 {
                check(libc::seteuid(0))?;
                check(libc::setgroups(groups.len(), groups.as_ptr()))?;
                check(libc::setresgid(gid, gid, gid))?;
                check(libc::setresuid(uid, uid, uid))?;
            } else if libc::getuid() != uid || libc::geteuid() != uid {
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
            // slurmstepd's threads block SIGTERM, SIGINT, SIGHUP…; the mask and ignored
            // dispositions survive exec and would make the process deaf to the stop signal
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            let mask = libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            check(mask)?;
            for sig in 1..32 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            // after the id change (which clears it): it dies with slurmstepd
            let term = libc::SIGTERM as libc::c_ulong;
            check(libc::prctl(libc::PR_SET_PDEATHSIG, term, 0, 0, 0))
        });
    }
}

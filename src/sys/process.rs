//! Processes: fork, spawn and exec, prctl settings, exit, and what /proc says of a process.

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::errno::Errno;

use super::error::*;
use super::signals::sigset;

/// Run `f` in a forked child and return the bytes it produced (empty if it panicked). For work
/// that leaves threads behind, such as NVML's initialisation: a multi-threaded process can no
/// longer enter a user namespace (unshare(CLONE_NEWUSER) answers EINVAL). Call it while this
/// process is single-threaded. `f` must not read an image's data blocks: their region is not
/// in forks (image/sqfs/blocks.rs, MADV_DONTFORK).
pub fn in_child(f: impl FnOnce() -> Vec<u8>) -> Result<Vec<u8>> {
    use std::io::Read;
    let (r, w) = nix::unistd::pipe().map_err(call("pipe"))?;
    // SAFETY: the child only runs `f`, writes to the pipe and leaves with _exit.
    match unsafe { nix::unistd::fork() }.map_err(call("fork"))? {
        nix::unistd::ForkResult::Child => {
            drop(r);
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_default();
            let _ = File::from(w).write_all(&out);
            // SAFETY: leave without running the parent's atexit handlers or destructors.
            unsafe { libc::_exit(0) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(w);
            let mut out = Vec::new();
            let read = File::from(r).read_to_end(&mut out);
            let _ = nix::sys::wait::waitpid(child, None);
            read.map_err(|e| SysError::Call {
                what: "read from child",
                errno: io_errno(&e),
            })?;
            Ok(out)
        }
    }
}

/// Make this process's stderr the write end of a new pipe; returns the read end.
pub fn stderr_to_pipe() -> Result<OwnedFd> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(call("pipe"))?;
    // SAFETY: dup2 onto descriptor 2, which this process owns.
    if unsafe { libc::dup2(w.as_raw_fd(), 2) } < 0 {
        return Err(call("dup2")(Errno::last()));
    }
    Ok(r)
}

/// Leave this process now with `code`: no destructors or atexit handlers, which in a forked
/// child are the parent's. Async-signal-safe.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit only ends the process.
    unsafe { libc::_exit(code) }
}

/// Exec `path` with `argv` and `envp` (null-terminated pointer arrays); returns the errno when
/// it fails. Async-signal-safe: for a child that shares its parent's memory (`spawn_shared`).
///
/// # Safety
/// `argv` and `envp` must end in a null pointer, and every other pointer in them must point
/// to a NUL-terminated string that outlives the call.
pub unsafe fn exec_raw(
    path: &std::ffi::CStr,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> i32 {
    libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
    Errno::last_raw()
}

/// Run `child` in a new process that shares this one's memory, on its own `stack`, while the
/// calling thread waits until that process has exec'd or exited (clone with CLONE_VM |
/// CLONE_VFORK, as posix_spawn does). Nothing of this process's memory is copied, and exec has
/// nothing to tear down, as it would after fork. What `child` returns is the process's exit
/// status when it does not exec.
///
/// # Safety
/// `child` runs in a process that shares this one's memory, and its thread-local state, with
/// the calling thread: it must only make async-signal-safe calls, allocate nothing, never panic,
/// and fit in `stack` (which has no guard page).
pub unsafe fn spawn_shared(
    stack: &mut [u8],
    child: &mut dyn FnMut() -> i32,
) -> Result<nix::unistd::Pid> {
    extern "C" fn entry(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `&mut dyn FnMut` below, alive until clone returns, which is
        // after this process has exec'd or exited.
        let child = unsafe { &mut *(arg as *mut &mut dyn FnMut() -> i32) };
        child()
    }
    let mut child = child;
    // Stacks grow down on the architectures gpurun builds for; keep the top 16-byte aligned.
    let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
    // SAFETY: `top` is the aligned end of a live stack that outlives the child's use of it (the
    // caller waits, CLONE_VFORK); `entry` only calls `child`.
    let pid = unsafe {
        libc::clone(
            entry,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &mut child as *mut &mut dyn FnMut() -> i32 as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(call("clone")(Errno::last()));
    }
    Ok(nix::unistd::Pid::from_raw(pid))
}

/// One setting of malloc's, for every gpurun process.
pub fn process_start() {
    // SAFETY: mallopt only changes malloc's parameters.
    unsafe {
        // A fixed threshold for glibc's mmap'd allocations. Its default moves up to the size of
        // any mmap'd block freed, to 32 MiB at most; past 16 MiB, a FUSE server thread's
        // zeroed 16 MiB request buffer came from memory malloc had used before, which calloc
        // must clear (9 ms). Mapped afresh it comes zeroed by the kernel.
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        // Fixing it also fixes the trim threshold at its 128 KiB default, where the dynamic
        // rule would have moved it to twice the mmap threshold: keep that, so a thread's
        // arena is not shrunk and faulted in again at every free of a block-sized buffer.
        libc::mallopt(libc::M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD);
    }
}

/// Allocations this large or larger are mapped on their own (`process_start`): below the FUSE
/// server's 16 MiB request buffers, above everything gpurun allocates often.
const MMAP_THRESHOLD: i32 = 8 << 20;

pub fn set_no_new_privs() -> Result<()> {
    nix::sys::prctl::set_no_new_privs().map_err(call("PR_SET_NO_NEW_PRIVS"))
}

/// From now on this process's chown and id-changing calls, and those of what it starts, succeed
/// and do nothing (the fake-ids crate's seccomp filter). After `set_no_new_privs`.
pub fn fake_id_changes() -> Result<()> {
    fake_ids::install().map_err(|e| call("seccomp (fake ids)")(io_errno(&e)))
}

/// Get `signal` when the parent dies: a container must not outlive gpurun (its image server).
pub fn die_with_parent(signal: i32) -> Result<()> {
    // SAFETY: prctl with an integer argument: no memory is touched.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong) } < 0 {
        return Err(SysError::Call {
            what: "PR_SET_PDEATHSIG",
            errno: Errno::last(),
        });
    }
    Ok(())
}

/// Orphans of the container are re-parented to us, so we can reap and kill them on exit.
pub fn become_subreaper() -> Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(call("PR_SET_CHILD_SUBREAPER"))
}

/// Whether this process is running with a setuid/setgid bit (installed wrongly).
pub fn is_setuid() -> bool {
    let (r, e) = (nix::unistd::getuid(), nix::unistd::geteuid());
    let (rg, eg) = (nix::unistd::getgid(), nix::unistd::getegid());
    r != e || rg != eg
}

/// The resident memory and CPU time of this process, in bytes and seconds, from /proc.
pub fn own_usage() -> (u64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let rss_kib: u64 = (status.lines())
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0);
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // After the command name: utime and stime are fields 14 and 15.
    let ticks: u64 = (stat.rsplit_once(')').map(|(_, r)| r).unwrap_or(""))
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse::<u64>().ok())
        .sum();
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)
        .unwrap_or(100);
    (rss_kib * 1024, ticks as f64 / hz as f64)
}

/// How a process that `spawn` starts stands to this one.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Spawn {
    /// A child of this process.
    Child,
    /// In a session of its own and nobody's child here (its first parent exits at once): this
    /// process's exit, and its killing of its descendants, leave it alone.
    Detached,
}

/// Start gpurun's `exe` with `args` (its name `gpurun`), an empty environment, /dev/null as 0-2,
/// `fds` as 3, 4… and nothing else open, and the default signal mask and dispositions.
pub fn spawn(exe: &Path, args: &[String], fds: &[RawFd], how: Spawn) -> Result<()> {
    let prog = cstr(exe);
    let argv: Vec<CString> = std::iter::once(c"gpurun".to_owned())
        .chain(
            args.iter()
                .map(|a| CString::new(a.as_str()).expect("no NUL in arguments")),
        )
        .collect();
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let envp = [std::ptr::null::<libc::c_char>()];
    // SAFETY: the child only makes async-signal-safe calls on what was prepared above, then
    // execs or leaves with _exit.
    match unsafe { nix::unistd::fork() }.map_err(call("fork"))? {
        nix::unistd::ForkResult::Parent { child } => {
            if how == Spawn::Detached {
                let _ = nix::sys::wait::waitpid(child, None);
            }
            Ok(())
        }
        // SAFETY: in the forked child: only async-signal-safe calls on data prepared before the fork, then exec or _exit.
        nix::unistd::ForkResult::Child => unsafe {
            if how == Spawn::Detached {
                libc::setsid();
                if libc::fork() != 0 {
                    libc::_exit(0);
                }
            }
            exec_with(&prog, &ptrs, &envp, fds, Stderr::Null)
        },
    }
}

/// Start `prog` with `args` (its name `name`) as a daemon that lives and dies with this process:
/// a child that gets SIGKILL when this process ends, in a session of its own (a terminal's ^C
/// is not for it) and in a copy of this mount namespace (this one's later mounts and
/// pivot_root leave its view alone). An empty environment, /dev/null as 0 and 1, this
/// process's stderr as 2 (its errors are the user's to read), `fd` as 3.
pub fn spawn_daemon(
    prog: &Path,
    name: &str,
    args: &[String],
    fd: RawFd,
) -> Result<nix::unistd::Pid> {
    let prog = cstr(prog);
    let argv: Vec<CString> = std::iter::once(name)
        .chain(args.iter().map(String::as_str))
        .map(|a| CString::new(a).expect("no NUL in arguments"))
        .collect();
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let envp = [std::ptr::null::<libc::c_char>()];
    let parent = nix::unistd::getpid();
    // SAFETY: the child only makes async-signal-safe calls on what was prepared above, then
    // execs or leaves with _exit.
    match unsafe { nix::unistd::fork() }.map_err(call("fork"))? {
        nix::unistd::ForkResult::Parent { child } => Ok(child),
        // SAFETY: in the forked child: only async-signal-safe calls on data prepared before the fork, then exec or _exit.
        nix::unistd::ForkResult::Child => unsafe {
            let dies = libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if dies < 0 || libc::getppid() != parent.as_raw() {
                libc::_exit(126);
            }
            if libc::setsid() < 0 || libc::unshare(libc::CLONE_NEWNS) < 0 {
                libc::_exit(126);
            }
            exec_with(&prog, &ptrs, &envp, &[fd], Stderr::Kept)
        },
    }
}

/// Where a process `exec_with` starts writes its errors.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stderr {
    Null,
    Kept,
}

/// The end of `spawn` in the new process: its descriptors and signals, then the exec.
///
/// # Safety
/// Only in a freshly forked child: `argv` and `envp` end in a null pointer.
unsafe fn exec_with(
    prog: &CString,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    fds: &[RawFd],
    stderr: Stderr,
) -> ! {
    // Out of the way of 3, 4… first, then into place, without close-on-exec.
    let high: Vec<RawFd> = (fds.iter())
        .map(|&fd| libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 64))
        .collect();
    let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
    let err = match stderr {
        Stderr::Null => null,
        Stderr::Kept => 2,
    };
    let std = [(0, null), (1, null), (2, err)];
    let given = high.iter().enumerate().map(|(i, &fd)| (3 + i as RawFd, fd));
    for (to, from) in std.into_iter().chain(given) {
        if from < 0 || libc::dup2(from, to) < 0 {
            libc::_exit(127);
        }
    }
    libc::syscall(libc::SYS_close_range, 3 + fds.len() as u32, u32::MAX, 0);
    let empty = sigset(&[]);
    libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    for sig in 1..32 {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    libc::execve(prog.as_ptr(), argv.as_ptr(), envp.as_ptr());
    libc::_exit(127)
}

/// Children of this process are reaped by the kernel as they exit (SIGCHLD ignored).
pub fn reap_children_automatically() {
    // SAFETY: SIG_IGN installs no handler.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
}

/// Name this process `name` in ps and top (its comm), which exec from /proc/self/exe set to
/// "exe".
pub fn set_process_name(name: &std::ffi::CStr) {
    // SAFETY: PR_SET_NAME copies at most 16 bytes of a NUL-terminated string.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
}

/// A process whose command line (as setproctitle leaves it) starts with `title`.
pub fn process_titled(title: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        cmdline.starts_with(title.as_bytes()).then_some(pid)
    })
}

/// When process `pid` started, on the boot clock (`since_boot`).
pub fn started(pid: i32) -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // starttime is field 22, the 20th after the command name
    let ticks: u64 = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    Some(std::time::Duration::from_millis(
        ticks * 1000 / hz.max(1) as u64,
    ))
}

/// Time since boot, the clock of /proc/PID/stat's start times.
pub fn since_boot() -> std::time::Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map_or(std::time::Duration::ZERO, |t| {
            std::time::Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
        })
}

/// Run this thread, and the threads and processes it starts from now on, only on CPU time
/// nothing else wants (SCHED_IDLE): background work beside the user's container.
pub fn idle_priority() -> Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: a valid sched_param for the calling thread (0); lowering a policy needs no privilege.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    Errno::result(r)
        .map(drop)
        .map_err(call("sched_setscheduler(SCHED_IDLE)"))
}

/// Leave the caller's process group for one of this process's own: the terminal's Ctrl-C meant
/// for a container no longer reaches it.
pub fn own_process_group() -> Result<()> {
    let me = nix::unistd::Pid::from_raw(0);
    nix::unistd::setpgid(me, me).map_err(call("setpgid"))
}

/// Go on in a child of this process, which exits at once: what runs on is no descendant of the
/// caller's parent (a launcher that kills its descendants when its container ends). Call it
/// while this process is single-threaded.
pub fn detach() -> Result<()> {
    // SAFETY: single-threaded (the caller's promise); the parent side only calls _exit.
    match unsafe { nix::unistd::fork() }.map_err(call("fork"))? {
        nix::unistd::ForkResult::Parent { .. } => exit_now(0),
        nix::unistd::ForkResult::Child => Ok(()),
    }
}

/// Send `sig` to process `pid` (None: only check that it exists).
pub fn kill(
    pid: nix::unistd::Pid,
    sig: impl Into<Option<nix::sys::signal::Signal>>,
) -> std::result::Result<(), Errno> {
    nix::sys::signal::kill(pid, sig)
}

/// Wait for a change of state of the child `pid` (None: any child; `flags`: WNOHANG,
/// WUNTRACED…), and reap it once it has ended.
pub fn wait_for(
    pid: Option<nix::unistd::Pid>,
    flags: Option<nix::sys::wait::WaitPidFlag>,
) -> std::result::Result<nix::sys::wait::WaitStatus, Errno> {
    nix::sys::wait::waitpid(pid, flags)
}

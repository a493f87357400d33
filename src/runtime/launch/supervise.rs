//! The supervising side: P waits for C, forwards signals and watches the image server; C, as
//! the command's init, reaps, forwards and ends the command's whole tree.

use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::interface::{HoldState, LaunchError, Lower};
use super::signals::{die_by, forwarded_and, parent_death_signal, FORWARDED};
use crate::exit;
use crate::runtime::image_server::serve::Reply;
use crate::sys;

/// gpurun is gone: the command's tree ends with it.
pub(super) fn gpurun_died() -> ! {
    kill_descendants();
    sys::exit_now(exit::GPURUN_FAILED)
}

/// C's loop once the command runs: forward, reap, and on the end of either the command or
/// gpurun, kill everything left and leave with the command's status.
pub(super) fn supervise(cmd: Pid) -> ! {
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
                let _ = sys::kill(cmd, Signal::try_from(signo).ok());
            }
            continue;
        }
        loop {
            match sys::wait_for(None, Some(WaitPidFlag::WNOHANG)) {
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

/// P after fork: wait for C, forwarding signals, and end it should the image server end first.
pub(super) fn parent_loop(
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
        return Err(lost);
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
) -> Result<(WaitStatus, Option<LaunchError>), LaunchError> {
    use std::os::fd::AsFd;
    let mut mask = SigSet::empty();
    for s in FORWARDED {
        mask.add(s);
    }
    mask.add(Signal::SIGCHLD);
    let sfd = SignalFd::new(&mask).map_err(|errno| LaunchError::Call {
        what: "signalfd",
        errno,
    })?;
    let mut lost = None;
    loop {
        match sys::wait_for(Some(child), Some(WaitPidFlag::WNOHANG)) {
            Ok(st @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => return Ok((st, lost)),
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(errno) => {
                return Err(LaunchError::Call {
                    what: "waitpid",
                    errno,
                })
            }
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
                        lost = Some(LaunchError::ServerLost {
                            image: image.to_path_buf(),
                            pid: *pid,
                        });
                        let _ = sys::kill(child, Signal::SIGKILL);
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
                let _ = sys::kill(child, s);
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
        if sys::wait_for(None, Some(WaitPidFlag::WNOHANG)) == Err(Errno::ECHILD) {
            return;
        }
        let any = sigkill_descendants();
        while let Ok(st) = sys::wait_for(None, Some(WaitPidFlag::WNOHANG)) {
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
        let _ = sys::kill(Pid::from_raw(p), Signal::SIGKILL);
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

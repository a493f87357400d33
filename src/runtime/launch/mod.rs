//! Fork, apply the plan, exec; forward signals; pass the exit status back.
//!
//! Process model: gpurun (P) holds a copy of its image server's mount
//! (runtime/image_server/attach.rs), enters a new user namespace (single-threaded, so unshare is allowed) and forks the container
//! process (C). C makes a private mount namespace, attaches the image's mount, applies the
//! plan's mounts, pivots into the root and execs. P forwards signals to C, returns C's status,
//! and kills whatever C left behind; should the image server end first, P ends the container.
//! C dies with P (PDEATHSIG), and the mounts die with C's mount namespace: nothing of a
//! container outlives it.
//!
//! P's side is supervise.rs (`parent_loop`); C's is container.rs (`child`), which builds the
//! root (root.rs), then holds (hold.rs) or starts the command (exec.rs) and supervises it.

#[cfg(test)]
mod apply_tests;
mod container;
mod exec;
mod failure;
mod hold;
mod interface;
mod overlay;
mod root;
mod signals;
mod supervise;

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::unistd::{fork, ForkResult};

use crate::runtime::plan::Plan;
use crate::sys;
use crate::sys::seam::Namespaces;
use container::child;
use exec::Prepared;
use hold::state_file;
use signals::{parent_death_signal, FORWARDED};
use supervise::parent_loop;

pub use interface::{HoldState, LaunchError, Lower};

/// Run a plan. Returns the exit code gpurun should exit with (the command's own).
pub fn run(plan: &Plan, lower: &Lower, hold: Option<HoldState>) -> Result<i32, LaunchError> {
    if sys::is_setuid() {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("gpurun"));
        return Err(LaunchError::Setuid(exe));
    }
    // Everything C needs is made before fork, so C allocates little and P stays simple.
    let prepared = Prepared::new(plan)?;
    let pipe = || {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|errno| LaunchError::Call {
            what: "pipe",
            errno,
        })
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
        .map_err(|errno| LaunchError::Call {
            what: "sigprocmask",
            errno,
        })?;

    // Blocked too, so C can wait for it; the command gets the caller's original mask back.
    sys::block_signal(parent_death_signal(), true);
    enter_namespaces(&sys::seam::Linux, plan)?;
    sys::become_subreaper()?;
    if hold.is_some() {
        sys::die_with_parent(libc::SIGKILL)?;
    }
    let parent = nix::unistd::getpid();

    // SAFETY: P is single-threaded here. C never reads an image's data blocks: their region is
    // not in forks (image/sqfs/blocks.rs, MADV_DONTFORK).
    match unsafe { fork() }.map_err(|errno| LaunchError::Call {
        what: "fork",
        errno,
    })? {
        ForkResult::Child => {
            drop((ready_r, err_r));
            let state = state_tmp.map(|(f, _)| f);
            let failure = child(plan, &prepared, lower, ready_w, parent, state, old_mask);
            let code = failure.exit_code();
            let mut w = File::from(err_w);
            let _ = write!(w, "{code} {failure}");
            sys::exit_now(code);
        }
        ForkResult::Parent { child } => {
            drop((ready_w, err_w));
            let state = state_tmp.map(|(_, p)| p);
            parent_loop(child, lower, ready_r, err_r, hold, state)
        }
    }
}

/// P's namespaces, which C inherits: the user namespace with the plan's one-line id maps, and
/// the PID and IPC namespaces where the plan asks for them.
fn enter_namespaces(os: &impl Namespaces, plan: &Plan) -> Result<(), LaunchError> {
    os.enter_user_namespace(plan.uid.inside, plan.gid.inside)
        .map_err(LaunchError::UserNamespace)?;
    if plan.own_pid || plan.own_ipc {
        // C, forked next, is the PID namespace's init: it already reaps and supervises.
        os.enter_pid_ipc_namespaces(plan.own_pid, plan.own_ipc)?;
    }
    Ok(())
}

//! The container process (C) from fork to exec: enter the root, then start the holder or the
//! command and stay as its init.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use nix::sys::signal::SigSet;
use nix::unistd::Pid;

use super::exec::{no_privileges, spawn_command, Prepared};
use super::failure::Failure;
use super::hold::{hold, run_entrypoint};
use super::interface::Lower;
use super::root::setup_root;
use super::signals::parent_death_signal;
use super::supervise::supervise;
use crate::runtime::plan::Plan;
use crate::sys;
use crate::sys::seam::Mounts;

/// The container process. Returns only on failure, which P prints.
pub(super) fn child(
    plan: &Plan,
    prep: &Prepared,
    lower: &Lower,
    ready: OwnedFd,
    parent: Pid,
    state: Option<File>,
    old_mask: SigSet,
) -> Failure {
    // P gone before the death signal was set? In a PID namespace of C's own P has no pid
    // there (getppid is 0): its end of the ready pipe tells.
    let orphaned = if plan.own_pid {
        sys::reader_gone(ready.as_fd())
    } else {
        nix::unistd::getppid() != parent
    };
    if sys::die_with_parent(parent_death_signal()).is_err() || orphaned {
        return Failure::Orphaned;
    }
    let mut ready = File::from(ready);
    // During set-up the death signal kills C outright; from then on C handles it itself
    // (`supervise` waits for it), ending the command's whole tree.
    sys::block_signal(parent_death_signal(), false);
    let os = sys::seam::Linux;
    let root = setup_root(&os, plan, lower);
    sys::block_signal(parent_death_signal(), true);
    let root = match root {
        Ok(r) => r,
        Err(e) => return Failure::Root(e),
    };
    if let Err(e) = os.pivot_root(&root) {
        return Failure::PivotRoot(e);
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
                Ok((env, cwd)) => {
                    let given = plan.entry_env.as_deref().unwrap_or(&plan.env);
                    let env = crate::runtime::env::after_entrypoint(&plan.env, given, &env);
                    st.env = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    st.cwd = cwd;
                }
                Err(e) => return e,
            }
        }
        if f.write_all(st.to_line().as_bytes()).is_err() || ready.write_all(b"R").is_err() {
            return Failure::HoldState;
        }
        drop(ready);
        // A signal P forwards (SIGTERM from the SPANK plugin) ends the holder.
        hold();
    }
    drop(ready);
    if let Err(errno) = nix::unistd::chdir(&plan.cwd) {
        if plan.cwd_asked {
            let cwd = plan.cwd.clone();
            return Failure::Pwd { cwd, errno };
        }
        eprintln!(
            "gpurun: warning: working directory {} does not exist in the container; using /",
            plan.cwd.display()
        );
    }
    if let Err(e) = sys::become_subreaper() {
        return Failure::Call(e);
    }
    if let Err(e) = no_privileges(prep) {
        return e;
    }
    // C stays as a small init: it reaps, forwards signals, and takes the command's whole process
    // tree down with it, also when gpurun itself is killed (PDEATHSIG reaches C, which can act).
    match spawn_command(prep, &old_mask) {
        Ok(cmd) => supervise(cmd),
        Err(e) => e,
    }
}

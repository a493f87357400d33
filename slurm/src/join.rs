//! Moving a task into the holder's container: the only syscalls that change a task's view of the
//! system (through `sys::seam::Enter`). Runs in slurm_spank_task_init, in the forked task
//! (single-threaded, already the user), just before slurmstepd execs the command — which it
//! then looks up in the container's PATH.

use std::io;
use std::path::{Path, PathBuf};

use crate::state::Holder;
use crate::sys::seam::{Enter, Ns};

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    /// The holder's process, or one of its namespaces, cannot be opened.
    #[error("open {}: {source} (did the container's holder exit?)", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("setns({} namespace): {source}", ns.name())]
    Setns { ns: Ns, source: io::Error },
    /// A step of the join that names no path: `op` says which.
    #[error("{op}: {source}")]
    Step { op: &'static str, source: io::Error },
    #[error("chdir {}: {source}", path.display())]
    Chdir { path: PathBuf, source: io::Error },
    #[error("seccomp filter (fake ids): {0}")]
    FakeIds(io::Error),
}

fn step(op: &'static str) -> impl FnOnce(io::Error) -> JoinError {
    move |source| JoinError::Step { op, source }
}

/// Whether the holder's namespace `ns` (by its name in /proc/PID/ns) is another than this
/// process's; one that cannot be read counts as another (the join then says why).
pub fn own_ns(sys: &impl Enter, pid: i32, ns: &str) -> bool {
    let Some(ns) = Ns::from_name(ns) else {
        return false;
    };
    let fd = sys.open_process(pid).and_then(|p| sys.open_ns(&p, ns));
    fd.and_then(|fd| sys.is_other(&fd, ns)).unwrap_or(true)
}

/// The namespaces a container may have of its own besides its user and mount namespaces
/// (`--container-unshare`, a holder's `--hostname`, `--net`, `--ipc`): joined where they differ.
const OWN: [Ns; 3] = [Ns::Uts, Ns::Net, Ns::Ipc];

/// Join the holder's user and mount namespaces, and those of [`OWN`] it has. A holder whose
/// mount namespace is already the container ("root": "/") is joined as it is: the container's
/// root becomes this task's root.
/// An older gpurun's holder ("root": its path) is joined through a private copy, pivoted here.
/// Then no_new_privs and the fake-ids seccomp filter, which the command inherits.
/// Returns a warning for the user when the working directory had to change.
pub fn enter(sys: &impl Enter, h: &Holder) -> Result<Option<String>, JoinError> {
    let proc_dir = PathBuf::from(format!("/proc/{}", h.pid));
    let open = |path: PathBuf| move |source| JoinError::Open { path, source };
    let process = sys.open_process(h.pid).map_err(open(proc_dir.clone()))?;
    // all opened before joining anything (after setns(user) /proc/PID may look different),
    // through the one handle on the holder's process
    let mut joined = Vec::new();
    for ns in [Ns::User, Ns::Mnt].into_iter().chain(OWN) {
        let path = proc_dir.join("ns").join(ns.name());
        let fd = sys.open_ns(&process, ns).map_err(open(path.clone()))?;
        let other = OWN.contains(&ns).then(|| sys.is_other(&fd, ns));
        if other.transpose().map_err(open(path))? != Some(false) {
            joined.push((ns, fd));
        }
    }
    // the user namespace first: the holder's belongs to this same user, and joining it gives
    // the capabilities the others (and pivot_root) need, inside it only
    for (ns, fd) in &joined {
        let setns = |source| JoinError::Setns { ns: *ns, source };
        sys.setns(fd, *ns).map_err(setns)?;
    }
    if h.root != Path::new("/") {
        pivot_into(sys, &h.root)?;
    }
    let mut warning = None;
    // as `gpurun exec` does: a working directory missing in the image is not fatal
    if sys.chdir(&h.cwd).is_err() {
        sys.chdir(Path::new("/"))
            .map_err(step("chdir / in the container"))?;
        warning = Some(format!(
            "warning: working directory {} does not exist in the container; using /",
            h.cwd.display()
        ));
    }
    // as for `gpurun exec`: nothing in the container gains privileges through exec
    sys.no_new_privs().map_err(step("PR_SET_NO_NEW_PRIVS"))?;
    // as pyxis's tasks (enroot's filter), with and without --container-remap-root: chown and
    // id changes succeed and do nothing, so a package install runs in a namespace of one uid
    sys.fake_ids().map_err(JoinError::FakeIds)?;
    Ok(warning)
}

/// An older gpurun's holder: make a private copy of its mount namespace and pivot to the
/// container root in it.
fn pivot_into(sys: &impl Enter, root: &Path) -> Result<(), JoinError> {
    // a private copy, so pivot_root here changes neither the holder nor the other tasks
    sys.unshare_mount().map_err(step("unshare(CLONE_NEWNS)"))?;
    // pivot_root refuses shared mounts; slave keeps receiving the holder's later unmounts
    sys.make_root_rslave().map_err(step("make / rslave"))?;
    let chdir = |source| JoinError::Chdir {
        path: root.to_path_buf(),
        source,
    };
    sys.chdir(root).map_err(chdir)?;
    sys.pivot_root_here().map_err(step("pivot_root"))?;
    sys.detach_old_root().map_err(step("unmount the old root"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fake::Recorder;

    fn holder(root: &str) -> Holder {
        Holder {
            pid: 42,
            root: root.into(),
            env: Vec::new(),
            cwd: "/w".into(),
        }
    }

    /// Every namespace is opened first, through the one handle on /proc/42.
    const OPENS: [&str; 6] = [
        "open /proc/42",
        "open /proc/42/ns/user",
        "open /proc/42/ns/mnt",
        "open /proc/42/ns/uts",
        "open /proc/42/ns/net",
        "open /proc/42/ns/ipc",
    ];

    const SETNS_ALL: [&str; 5] = [
        "setns /proc/42/ns/user user",
        "setns /proc/42/ns/mnt mnt",
        "setns /proc/42/ns/uts uts",
        "setns /proc/42/ns/net net",
        "setns /proc/42/ns/ipc ipc",
    ];

    const THEN_RUN: [&str; 3] = ["chdir /w", "no_new_privs", "seccomp fake-ids"];

    /// The exact sequence of a join: the opens, the namespaces (user first), the pivot of an
    /// older holder's root, the working directory, then no_new_privs and the seccomp filter.
    #[test]
    fn a_task_joins_a_running_holder() {
        let pivot = [
            "unshare mnt",
            "propagation / rslave",
            "chdir /old/root",
            "pivot_root . .",
            "umount2 . detach",
        ];
        let cat = |parts: &[&[&str]]| -> Vec<String> {
            parts.concat().iter().map(|s| s.to_string()).collect()
        };
        // (what, the fake, the holder's root, the calls after the opens, the warning)
        type Case<'a> = (&'a str, Recorder, &'a str, Vec<String>, Option<&'a str>);
        let table: [Case; 5] = [
            (
                "own namespaces",
                Recorder::new(),
                "/",
                cat(&[&SETNS_ALL, &THEN_RUN]),
                None,
            ),
            (
                "uts and ipc are the task's: not joined",
                Recorder::new().sharing(Ns::Uts).sharing(Ns::Ipc),
                "/",
                cat(&[&SETNS_ALL[..2], &SETNS_ALL[3..4], &THEN_RUN]),
                None,
            ),
            (
                "none of its own but user and mount",
                (Recorder::new().sharing(Ns::Uts).sharing(Ns::Net)).sharing(Ns::Ipc),
                "/",
                cat(&[&SETNS_ALL[..2], &THEN_RUN]),
                None,
            ),
            (
                "an older holder's root, pivoted to in a private copy",
                Recorder::new(),
                "/old/root",
                cat(&[&SETNS_ALL, &pivot, &THEN_RUN]),
                None,
            ),
            (
                "a working directory the image lacks: / and a warning",
                Recorder::new().failing("chdir /w", libc::ENOENT),
                "/",
                cat(&[&SETNS_ALL, &["chdir /w", "chdir /"], &THEN_RUN[1..]]),
                Some("warning: working directory /w does not exist in the container; using /"),
            ),
        ];
        for (what, sys, root, after, warning) in table {
            let got = enter(&sys, &holder(root)).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(got.as_deref(), warning, "{what}");
            assert_eq!(
                sys.lines(),
                cat(&[
                    &OPENS,
                    &after.iter().map(String::as_str).collect::<Vec<_>>()
                ]),
                "{what}"
            );
        }
    }

    /// A holder gone (or a pid now another's, whose namespaces the user may not open): one
    /// clear error, and not one namespace joined.
    #[test]
    fn a_holder_that_exited_is_one_error_and_nothing_joined() {
        let table = [
            (
                Recorder::new().failing("open_process", libc::ENOENT),
                1,
                "open /proc/42: No such file or directory (os error 2) (did the container's holder exit?)",
            ),
            (
                Recorder::new().failing("open_ns", libc::EACCES),
                2,
                "open /proc/42/ns/user: Permission denied (os error 13) (did the container's holder exit?)",
            ),
            (
                Recorder::new().failing("setns", libc::EPERM),
                7,
                "setns(user namespace): Operation not permitted (os error 1)",
            ),
        ];
        for (sys, calls, want) in table {
            let e = enter(&sys, &holder("/")).unwrap_err().to_string();
            assert_eq!(e, want);
            assert_eq!(
                sys.lines(),
                OPENS
                    .iter()
                    .chain(&SETNS_ALL)
                    .take(calls)
                    .copied()
                    .collect::<Vec<_>>(),
                "{want}"
            );
        }
    }

    /// A state file or running record (the user's to write) naming another user's process
    /// (pid 1, root's): the kernel refuses its namespaces to the task, which stops before
    /// joining any. Run as root, the test runs itself again as nobody, as a task would be.
    #[test]
    fn another_users_process_is_not_joined() {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::process::CommandExt;
        // SAFETY: geteuid only reads the process's id.
        let me = unsafe { libc::geteuid() };
        if me == 0 {
            let name = "join::tests::another_users_process_is_not_joined";
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", name])
                .uid(65534)
                .gid(65534)
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(said.contains("test result: ok. 1 passed"), "{said}");
            return;
        }
        if std::fs::metadata("/proc/1").map(|m| m.uid()).ok() == Some(me) {
            return;
        }
        let h = Holder {
            pid: 1,
            ..holder("/")
        };
        let e = enter(&crate::sys::seam::Linux, &h).unwrap_err().to_string();
        assert!(
            e.starts_with("open /proc/1/ns/user: Permission denied"),
            "{e}"
        );
    }
}

//! Moving a task into the holder's container: the only syscalls that change a task's view of the
//! system. Runs in slurm_spank_task_init, in the forked task (single-threaded, already the user),
//! just before slurmstepd execs the command — which it then looks up in the container's PATH.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::state::Holder;

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn check(what: &str, r: libc::c_int) -> Result<(), String> {
    if r == 0 {
        Ok(())
    } else {
        Err(format!("{what}: {}", io::Error::last_os_error()))
    }
}

fn open_ns(pid: i32, ns: &str) -> Result<OwnedFd, String> {
    let p = format!("/proc/{pid}/ns/{ns}");
    std::fs::File::open(&p)
        .map(OwnedFd::from)
        .map_err(|e| format!("open {p}: {e} (did the container's holder exit?)"))
}

/// Whether the holder's namespace `ns` is another than this process's.
pub fn own_ns(pid: i32, ns: &str) -> bool {
    let link = |p: String| std::fs::read_link(p).ok();
    link(format!("/proc/{pid}/ns/{ns}")) != link(format!("/proc/self/ns/{ns}"))
}

/// The namespaces a container may have of its own besides its user and mount namespaces
/// (`--container-unshare`, a holder's `--hostname`, `--net`, `--ipc`): joined where they differ.
const OWN: [(&str, libc::c_int); 3] = [
    ("uts", libc::CLONE_NEWUTS),
    ("net", libc::CLONE_NEWNET),
    ("ipc", libc::CLONE_NEWIPC),
];

/// Join the holder's user and mount namespaces, and those of [`OWN`] it has. A holder whose
/// mount namespace is already the container ("root": "/") is joined as it is: the container's
/// root becomes this task's root.
/// An older gpurun's holder ("root": its path) is joined through a private copy, pivoted here.
/// Then no_new_privs and the fake-ids seccomp filter, which the command inherits.
/// Returns a warning for the user when the working directory had to change.
pub fn enter(h: &Holder) -> Result<Option<String>, String> {
    // all opened before joining anything: after setns(user) /proc/PID may look different
    let user = open_ns(h.pid, "user")?;
    let mnt = open_ns(h.pid, "mnt")?;
    let mut own = Vec::new();
    for (ns, flag) in OWN {
        if own_ns(h.pid, ns) {
            own.push((ns, flag, open_ns(h.pid, ns)?));
        }
    }
    let cwd = cpath(&h.cwd).map_err(|e| format!("{}: {e}", h.cwd.display()))?;
    let mut warning = None;
    // SAFETY: plain syscalls on valid fds and NUL-terminated paths; the task is single-threaded,
    // which setns(CLONE_NEWUSER) requires.
    unsafe {
        // the holder's user namespace belongs to this same user: joining it gives the
        // capabilities needed for the mount namespace (and pivot_root), inside it only
        check(
            "setns(user namespace)",
            libc::setns(user.as_raw_fd(), libc::CLONE_NEWUSER),
        )?;
        check(
            "setns(mount namespace)",
            libc::setns(mnt.as_raw_fd(), libc::CLONE_NEWNS),
        )?;
        for (ns, flag, fd) in &own {
            check(
                &format!("setns({ns} namespace)"),
                libc::setns(fd.as_raw_fd(), *flag),
            )?;
        }
    }
    if h.root != Path::new("/") {
        pivot_into(&h.root)?;
    }
    // SAFETY: plain syscalls on NUL-terminated paths.
    unsafe {
        // as `gpurun exec` does: a working directory missing in the image is not fatal
        if libc::chdir(cwd.as_ptr()) != 0 {
            check("chdir / in the container", libc::chdir(c"/".as_ptr()))?;
            warning = Some(format!(
                "warning: working directory {} does not exist in the container; using /",
                h.cwd.display()
            ));
        }
        // as for `gpurun exec`: nothing in the container gains privileges through exec
        check(
            "PR_SET_NO_NEW_PRIVS",
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
        )?;
    }
    // as pyxis's tasks (enroot's filter), with and without --container-remap-root: chown and
    // id changes succeed and do nothing, so a package install runs in a namespace of one uid
    fake_ids::install().map_err(|e| format!("seccomp filter (fake ids): {e}"))?;
    Ok(warning)
}

/// An older gpurun's holder: make a private copy of its mount namespace and pivot to the
/// container root in it.
fn pivot_into(root: &Path) -> Result<(), String> {
    let root_c = cpath(root).map_err(|e| format!("{}: {e}", root.display()))?;
    // SAFETY: plain syscalls on NUL-terminated paths; the task is single-threaded.
    unsafe {
        // a private copy, so pivot_root here changes neither the holder nor the other tasks
        check("unshare(CLONE_NEWNS)", libc::unshare(libc::CLONE_NEWNS))?;
        // pivot_root refuses shared mounts; slave keeps receiving the holder's later unmounts
        check(
            "make / rslave",
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_SLAVE,
                std::ptr::null(),
            ),
        )?;
        check(
            &format!("chdir {}", root.display()),
            libc::chdir(root_c.as_ptr()),
        )?;
        // pivot_root(".", "."): the old root ends up on top of the new one, then goes away
        check(
            "pivot_root",
            libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as libc::c_int,
        )?;
        check(
            "unmount the old root",
            libc::umount2(c".".as_ptr(), libc::MNT_DETACH),
        )?;
    }
    Ok(())
}

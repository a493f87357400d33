//! Entering namespaces: user (with its one-line id maps), mount, UTS, PID, IPC, network.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::MsFlags;
use nix::sched::CloneFlags;

use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

use super::error::*;

/// Enter a new user namespace and map `inside_uid/gid` to the caller's own ids (one line each:
/// what an unprivileged process may write itself, so no newuidmap and no /etc/subuid).
pub fn enter_user_namespace(inside_uid: u32, inside_gid: u32) -> Result<()> {
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER).map_err(call("unshare(CLONE_NEWUSER)"))?;
    let write = |path: &'static str, text: String| -> Result<()> {
        let p = Path::new(path);
        let mut f = File::options()
            .write(true)
            .open(p)
            .map_err(|e| at("open", p)(io_errno(&e)))?;
        f.write_all(text.as_bytes())
            .map_err(|e| at("write", p)(io_errno(&e)))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{inside_uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{inside_gid} {gid} 1\n"))?;
    Ok(())
}

/// What a new mount namespace keeps of the host's mount events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Nothing, either way: a container's own tree.
    Private,
    /// The host's unmounts (and mounts) still reach it, nothing goes back: a long-lived process
    /// then pins no file system the host lets go of.
    Receive,
}

/// A copy of the mount tree, with nothing propagating back to the host.
pub fn enter_mount_namespace(p: Propagation) -> Result<()> {
    enter_mount_namespace_then(p, || ())
}

/// `enter_mount_namespace`, running `first` in the new namespace before its propagation is
/// set: a tree it captures (`clone_tree`) stays a slave of the host's where the host's is
/// shared, so that the host's mount events under it still reach it.
pub fn enter_mount_namespace_then<T>(p: Propagation, first: impl FnOnce() -> T) -> Result<T> {
    nix::sched::unshare(CloneFlags::CLONE_NEWNS).map_err(call("unshare(CLONE_NEWNS)"))?;
    let done = first();
    let kind = match p {
        Propagation::Private => MsFlags::MS_PRIVATE,
        Propagation::Receive => MsFlags::MS_SLAVE,
    };
    let flags = MsFlags::MS_REC | kind;
    nix::mount::mount(None::<&str>, "/", None::<&str>, flags, None::<&str>)
        .map_err(call("set the propagation of /"))?;
    Ok(done)
}

/// A UTS namespace of its own, with this host name (`--hostname`).
pub fn enter_uts_namespace(hostname: &str) -> Result<()> {
    nix::sched::unshare(CloneFlags::CLONE_NEWUTS).map_err(call("unshare(CLONE_NEWUTS)"))?;
    nix::unistd::sethostname(hostname).map_err(call("sethostname"))
}

/// Join the user and mount namespaces of `pid` (the SPANK holder).
pub fn join_namespaces(pid: i32) -> Result<()> {
    for (ns, flag) in [
        ("user", CloneFlags::CLONE_NEWUSER),
        ("mnt", CloneFlags::CLONE_NEWNS),
    ] {
        let p = PathBuf::from(format!("/proc/{pid}/ns/{ns}"));
        let f = File::open(&p).map_err(|e| at("open", &p)(io_errno(&e)))?;
        nix::sched::setns(&f, flag).map_err(at("setns", &p))?;
    }
    Ok(())
}

/// A new PID namespace (the next child forked is its init) and a new IPC namespace, as asked.
pub fn enter_pid_ipc_namespaces(pid: bool, ipc: bool) -> Result<()> {
    let mut flags = CloneFlags::empty();
    if pid {
        flags |= CloneFlags::CLONE_NEWPID;
    }
    if ipc {
        flags |= CloneFlags::CLONE_NEWIPC;
    }
    nix::sched::unshare(flags).map_err(call("unshare(CLONE_NEWPID|CLONE_NEWIPC)"))
}

/// A network namespace of its own whose only interface, loopback, is up (`--net`).
pub fn enter_net_namespace() -> Result<()> {
    nix::sched::unshare(CloneFlags::CLONE_NEWNET).map_err(call("unshare(CLONE_NEWNET)"))?;
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(call("socket"))?;
    // SAFETY: a zeroed ifreq holding the name "lo", which the two ioctls read and write.
    unsafe {
        let mut req = std::mem::zeroed::<libc::ifreq>();
        for (d, c) in req.ifr_name.iter_mut().zip(b"lo") {
            *d = *c as libc::c_char;
        }
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(call("SIOCGIFFLAGS lo")(Errno::last()));
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(call("bring up lo")(Errno::last()));
        }
    }
    Ok(())
}

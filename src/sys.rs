//! The only place that makes namespace, mount and process-control syscalls. Thin on purpose:
//! every decision is made in `plan`; these functions just do what they are told and report errno
//! with the path they were working on.

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::socket::{
    accept4, bind, connect, getsockopt, listen, recvmsg, sendmsg, setsockopt, socket, socketpair,
    sockopt, AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag,
    SockType, UnixAddr,
};

#[derive(Debug, thiserror::Error)]
pub enum SysError {
    #[error("{what} {path}: {errno}")]
    Path {
        what: &'static str,
        path: PathBuf,
        errno: Errno,
    },
    #[error("{what}: {errno}")]
    Call { what: &'static str, errno: Errno },
    /// A socket name held by another user's process.
    #[error("held by another user (uid {uid})")]
    Foreign { uid: u32 },
}

impl SysError {
    pub fn errno(&self) -> Errno {
        match self {
            SysError::Path { errno, .. } | SysError::Call { errno, .. } => *errno,
            SysError::Foreign { .. } => Errno::EACCES,
        }
    }
}

pub type Result<T> = std::result::Result<T, SysError>;

fn at<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(Errno) -> SysError + 'a {
    move |errno| SysError::Path {
        what,
        path: path.to_path_buf(),
        errno,
    }
}

fn call(what: &'static str) -> impl FnOnce(Errno) -> SysError {
    move |errno| SysError::Call { what, errno }
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("paths from the plan contain no NUL")
}

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

pub fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

/// What a new mount namespace keeps of the host's mount events.
#[derive(Clone, Copy, PartialEq, Eq)]
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

/// Set the propagation of the mount at `path` (its submounts' too where `p.recursive`).
pub fn set_propagation(path: &Path, p: crate::mount::Propagation) -> Result<()> {
    use crate::mount::PropagationKind as K;
    let kind = match p.kind {
        K::Private => MsFlags::MS_PRIVATE,
        K::Slave => MsFlags::MS_SLAVE,
        K::Shared => MsFlags::MS_SHARED,
        K::Unbindable => MsFlags::MS_UNBINDABLE,
    };
    let flags = match p.recursive {
        true => kind | MsFlags::MS_REC,
        false => kind,
    };
    nix::mount::mount(None::<&str>, path, None::<&str>, flags, None::<&str>)
        .map_err(at("set the propagation of", path))
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

/// A mount's attributes beyond what the kernel locks on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attrs {
    pub readonly: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
}

impl Attrs {
    fn ms_flags(&self) -> MsFlags {
        let mut f = MsFlags::empty();
        for (on, flag) in [
            (self.readonly, MsFlags::MS_RDONLY),
            (self.nosuid, MsFlags::MS_NOSUID),
            (self.nodev, MsFlags::MS_NODEV),
            (self.noexec, MsFlags::MS_NOEXEC),
        ] {
            if on {
                f |= flag;
            }
        }
        f
    }

    fn mount_attr(&self) -> u64 {
        let mut a = 0;
        for (on, bit) in [
            (self.readonly, MOUNT_ATTR_RDONLY),
            (self.nosuid, MOUNT_ATTR_NOSUID),
            (self.nodev, MOUNT_ATTR_NODEV),
            (self.noexec, MOUNT_ATTR_NOEXEC),
        ] {
            if on {
                a |= bit;
            }
        }
        a
    }
}

/// A tmpfs at `target`, its root of `mode`, of at most `size` bytes (None: the kernel's
/// default), with the huge page policy `huge` (None: the kernel's); nosuid and nodev always.
pub fn mount_tmpfs(
    target: &Path,
    mode: u32,
    size: Option<u64>,
    huge: Option<&str>,
    attrs: Attrs,
) -> Result<()> {
    let mut opts = format!("mode={mode:o}");
    if let Some(n) = size {
        opts.push_str(&format!(",size={n}"));
    }
    if let Some(h) = huge {
        opts.push_str(&format!(",huge={h}"));
    }
    nix::mount::mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | attrs.ms_flags(),
        Some(opts.as_str()),
    )
    .map_err(at("mount tmpfs on", target))
}

/// A devpts of this mount namespace's own at `target` (a user namespace may mount one since
/// Linux 4.7): its ptmx opens ptys for any user (ptmxmode=0666), as enroot's and Apptainer's.
/// No gid=5 (tty): that group is not mapped in gpurun's user namespace, and the kernel would
/// refuse the mount.
pub fn mount_devpts(target: &Path) -> Result<()> {
    nix::mount::mount(
        Some("devpts"),
        target,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    )
    .map_err(at("mount devpts on", target))
}

/// A detached copy of the mount tree at `path` (open_tree(OPEN_TREE_CLONE|AT_RECURSIVE)), to be
/// attached later with `attach_tree`: the source is captured now, so whatever is mounted over its
/// path afterwards (gpurun's own staging tmpfs over /tmp) cannot change what gets bound.
pub fn clone_tree(path: &Path) -> Result<OwnedFd> {
    let c = cstr(path);
    let flags =
        OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint;
    // SAFETY: a C string alive during the call; a non-negative result is a new fd.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, c.as_ptr(), flags) };
    if fd < 0 {
        return Err(at("bind source", path)(Errno::last()));
    }
    // SAFETY: open_tree returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Attach a tree from `clone_tree` on the object `dst` (an O_PATH fd) refers to.
pub fn attach_tree(tree: &OwnedFd, dst: &OwnedFd, what: &Path) -> Result<()> {
    let empty = c"";
    // SAFETY: fds owned by the caller and empty C strings, alive during the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            dst.as_raw_fd(),
            empty.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if r < 0 {
        return Err(at("bind onto", what)(Errno::last()));
    }
    Ok(())
}

/// Give a detached tree from `clone_tree` `attrs` (read-only, nodev…), its submounts too, before
/// it is attached (mount_setattr, Linux 5.12): one call, and the flags the kernel locked on it
/// stay as they are. `Ok(false)` where the kernel has no mount_setattr: then `remount` after
/// attaching.
pub fn set_tree_attrs(tree: &OwnedFd, attrs: Attrs, what: &Path) -> Result<bool> {
    // struct mount_attr from <linux/mount.h>
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    let attr = MountAttr {
        attr_set: attrs.mount_attr(),
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: an fd, an empty C string and `attr` with its true size, alive during the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    match Errno::result(r) {
        Ok(_) => Ok(true),
        Err(Errno::ENOSYS) => Ok(false),
        Err(e) => Err(at("set the mount attributes of", what)(e)),
    }
}

// From <linux/mount.h>; not exported by the libc crate for every target.
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x04;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// Open a path without reading it (O_PATH): a handle for the mount calls.
pub fn open_path(path: &Path) -> Result<OwnedFd> {
    let fd = nix::fcntl::open(
        path,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(at("open", path))?;
    Ok(fd)
}

pub fn is_dir(fd: &OwnedFd) -> Result<bool> {
    let st = nix::sys::stat::fstat(fd).map_err(call("fstat"))?;
    Ok(st.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// The `/proc/self/fd/N` path of an fd: mount(2) follows it to the object itself.
pub fn fd_path(fd: &impl AsRawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Make the mount at `dst` read-only (`remount`).
pub fn remount_readonly(dst: &Path) -> Result<()> {
    let attrs = Attrs {
        readonly: true,
        ..Attrs::default()
    };
    remount(dst, attrs)
}

/// Give the mount at `dst` `attrs` too, keeping the flags the kernel locked on it (nosuid,
/// nodev… from the host must be repeated or an unprivileged remount is refused).
pub fn remount(dst: &Path, attrs: Attrs) -> Result<()> {
    let st = nix::sys::statvfs::statvfs(dst).map_err(at("statvfs", dst))?;
    let f = st.flags();
    use nix::sys::statvfs::FsFlags;
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | attrs.ms_flags();
    for (have, want) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if f.contains(have) {
            flags |= want;
        }
    }
    nix::mount::mount(None::<&str>, dst, None::<&str>, flags, None::<&str>)
        .map_err(at("remount", dst))
}

pub fn mount_overlay(lower: &Path, upper: &Path, work: &Path, target: &Path) -> Result<()> {
    let opts = format!(
        "lowerdir={},upperdir={},workdir={},userxattr",
        lower.display(),
        upper.display(),
        work.display()
    );
    nix::mount::mount(
        Some("overlay"),
        target,
        Some("overlay"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(opts.as_str()),
    )
    .map_err(at("mount overlay on", target))
}

/// A read-only overlay of `lowers` (the first on top) at `target`.
pub fn mount_overlay_ro(lowers: &[&Path], target: &Path) -> Result<()> {
    let dirs: Vec<String> = lowers.iter().map(|l| l.display().to_string()).collect();
    let opts = format!("lowerdir={},userxattr", dirs.join(":"));
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_RDONLY;
    nix::mount::mount(
        Some("overlay"),
        target,
        Some("overlay"),
        flags,
        Some(opts.as_str()),
    )
    .map_err(at("mount overlay on", target))
}

/// A proc file system of this process's PID namespace at `target`.
pub fn mount_proc(target: &Path) -> Result<()> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    nix::mount::mount(Some("proc"), target, Some("proc"), flags, None::<&str>)
        .map_err(at("mount proc on", target))
}

/// The message queue file system of this process's IPC namespace at `target`.
pub fn mount_mqueue(target: &Path) -> Result<()> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    nix::mount::mount(Some("mqueue"), target, Some("mqueue"), flags, None::<&str>)
        .map_err(at("mount mqueue on", target))
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

/// Open /dev/fuse (close-on-exec: the container's command must not hold the connection open).
pub fn open_fuse() -> std::io::Result<OwnedFd> {
    let fd = nix::fcntl::open(
        "/dev/fuse",
        nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    Ok(fd)
}

/// Mount a FUSE connection whose server is gpurun itself, read-only (no fusermount: we are root
/// in our own user namespace). No `default_permissions`: the image is immutable and already
/// readable by the user as a file, so kernel permission checks would only hide root-owned 0700
/// dirs. No `allow_other` either: it admits only processes inside the server's user namespace,
/// where no container is. Without it the kernel admits processes with the user's uid and gid,
/// in any container of theirs or outside, and no one else; host root is refused either way
/// (docs/security.md). Read-only as a whole from the start: a read-only mount of a writable
/// file system has the kernel drop a file's attributes after its first read.
pub fn mount_fuse(fd: &OwnedFd, source: &Path, target: &Path, uid: u32, gid: u32) -> Result<()> {
    let opts = format!(
        "fd={},rootmode=40000,user_id={uid},group_id={gid}",
        fd.as_raw_fd()
    );
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_RDONLY;
    nix::mount::mount(
        Some(source),
        target,
        Some("fuse.gpurun"),
        flags,
        Some(opts.as_str()),
    )
    .map_err(at("mount FUSE on", target))
}

/// Mount the FUSE connection `fd`, whose server is fuse-overlayfs (started on its other end),
/// at `target`: the kernel checks permissions (default_permissions), as fuse-overlayfs expects.
pub fn mount_fuse_overlay(
    fd: &OwnedFd,
    target: &Path,
    uid: u32,
    gid: u32,
    readonly: bool,
) -> Result<()> {
    let opts = format!(
        "fd={},rootmode=40000,user_id={uid},group_id={gid},default_permissions",
        fd.as_raw_fd()
    );
    let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if readonly {
        flags |= MsFlags::MS_RDONLY;
    }
    nix::mount::mount(
        Some("fuse-overlayfs"),
        target,
        Some("fuse.fuse-overlayfs"),
        flags,
        Some(opts.as_str()),
    )
    .map_err(at("mount fuse-overlayfs on", target))
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

/// Make `root` the root of this mount namespace (runc's trick: no put_old directory needed, so it
/// works on a read-only root).
pub fn pivot_root(root: &Path) -> Result<()> {
    nix::unistd::chdir(root).map_err(at("chdir", root))?;
    nix::unistd::pivot_root(".", ".").map_err(at("pivot_root to", root))?;
    nix::mount::umount2(".", MntFlags::MNT_DETACH).map_err(call("detach old root"))?;
    nix::unistd::chdir("/").map_err(call("chdir /"))
}

/// How to open a path inside the container root.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Create {
    Dir,
    File,
    /// Open only; do not create.
    No,
}

/// Open `path` inside the directory `root` as if `root` were `/` (openat2 RESOLVE_IN_ROOT), creating
/// missing parents as directories and the last component as `create` says. A hostile image's
/// symlinks and `..` can then never make a mount point land outside the container.
pub fn open_in_root(root: &OwnedFd, path: &Path, create: Create) -> Result<OwnedFd> {
    let rel: PathBuf = path
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    // Most targets exist (or only their last component is missing): one lookup from the root,
    // not one per component.
    let err = match openat2_in_root(root, &rel) {
        Ok(fd) => return Ok(fd),
        Err(e) => e,
    };
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(at("open", path)(err));
    };
    if err != Errno::ENOENT || create == Create::No {
        return Err(at("open", path)(err));
    }
    let dir = open_in_root(root, &Path::new("/").join(parent), Create::Dir)?;
    let c = CString::new(name.as_bytes()).expect("no NUL");
    // An O_PATH directory fd is enough for the *at calls.
    let r = if create == Create::Dir {
        // SAFETY: an O_PATH directory fd and a C string, alive during the call.
        unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) }
    } else {
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC;
        // SAFETY: an O_PATH directory fd and a C string, alive during the call.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags, 0o644) };
        if fd >= 0 {
            // SAFETY: the fd openat just returned, closed once.
            unsafe { libc::close(fd) };
        }
        fd.min(0)
    };
    if r < 0 && Errno::last() != Errno::EEXIST {
        return Err(at("create", path)(Errno::last()));
    }
    openat2_in_root(root, &rel).map_err(at("open", path))
}

fn openat2_in_root(root: &OwnedFd, rel: &Path) -> std::result::Result<OwnedFd, Errno> {
    // SAFETY: open_how is plain integers; all zeroes is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    let c = cstr(if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    });
    // EAGAIN: a path with ".." met a mount or rename made meanwhile anywhere on the machine (the
    // kernel cannot tell it from an escape); openat2(2) says to try again. Seen in CI, where
    // other tests mount in parallel.
    for _ in 0..64 {
        // SAFETY: the fd, the C string and `how` outlive the call.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        match Errno::last() {
            // SAFETY: openat2 returned a new fd that nothing else owns.
            _ if fd >= 0 => return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }),
            Errno::EAGAIN => yield_cpu(),
            e => return Err(e),
        }
    }
    Err(Errno::EAGAIN)
}

/// Create a symlink at `path` inside `root` (parents created), unless something is already there.
pub fn symlink_in_root(root: &OwnedFd, path: &Path, target: &Path) -> Result<()> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    let dir = open_in_root(root, parent, Create::Dir)?;
    let name = CString::new(path.file_name().unwrap_or_default().as_bytes()).expect("no NUL");
    let t = cstr(target);
    // SAFETY: C strings and an O_PATH directory fd, alive during the call.
    if unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), name.as_ptr()) } < 0
        && Errno::last() != Errno::EEXIST
    {
        return Err(at("symlink", path)(Errno::last()));
    }
    Ok(())
}

/// Remove the file or symlink at `path` inside `root`, if there is one.
pub fn unlink_in_root(root: &OwnedFd, path: &Path) -> Result<()> {
    let dir = open_in_root(root, path.parent().unwrap_or(Path::new("/")), Create::No)?;
    let name = CString::new(path.file_name().unwrap_or_default().as_bytes()).expect("no NUL");
    // SAFETY: a C string and an O_PATH directory fd, alive meanwhile.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } < 0
        && Errno::last() != Errno::ENOENT
    {
        return Err(at("remove", path)(Errno::last()));
    }
    Ok(())
}

/// Write `contents` as the file at `path` inside `root` (parents created), mode 0644, over what
/// is there; a symlink there is refused (ELOOP), so the write never lands outside the root.
pub fn write_in_root(root: &OwnedFd, path: &Path, contents: &[u8]) -> Result<()> {
    let dir = open_in_root(root, path.parent().unwrap_or(Path::new("/")), Create::Dir)?;
    let name = CString::new(path.file_name().unwrap_or_default().as_bytes()).expect("no NUL");
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a C string and an O_PATH directory fd, alive meanwhile; the fd returned is owned.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, 0o644) };
    if fd < 0 {
        return Err(at("create", path)(Errno::last()));
    }
    // SAFETY: openat returned a new fd that nothing else owns.
    let mut f = unsafe { File::from_raw_fd(fd) };
    let written = f.write_all(contents).and_then(|_| {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))
    });
    written.map_err(|e| at("write", path)(io_errno(&e)))
}

pub fn fstat(fd: &OwnedFd) -> Result<nix::sys::stat::FileStat> {
    nix::sys::stat::fstat(fd).map_err(call("fstat"))
}

/// The set of `signals`, by number: real-time ones have no name in nix. Async-signal-safe.
fn sigset(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: a local sigset_t, initialised by sigemptyset before use.
    unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Block or unblock one signal (any number, real-time ones too) for the calling thread.
pub fn block_signal(sig: i32, blocked: bool) {
    let how = if blocked {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    // SAFETY: a valid set; the old mask is not asked for.
    unsafe { libc::pthread_sigmask(how, &sigset(&[sig]), std::ptr::null_mut()) };
}

/// Set the calling thread's signal mask to `mask`. Async-signal-safe.
pub fn set_signal_mask(mask: &libc::sigset_t) {
    // SAFETY: a valid set; the old mask is not asked for.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
}

/// Wait for one of `signals`, which the caller has blocked: its number, and whether the kernel
/// raised it itself (SI_KERNEL: a terminal's SIGINT or SIGWINCH) rather than a process sending
/// it. None when the wait was interrupted.
pub fn wait_signal(signals: &[i32]) -> Option<(i32, bool)> {
    // SAFETY: a valid set, and a zeroed siginfo_t for the kernel to fill.
    unsafe {
        let mut info = std::mem::zeroed::<libc::siginfo_t>();
        let signo = libc::sigwaitinfo(&sigset(signals), &mut info);
        (signo >= 0).then_some((signo, info.si_code == libc::SI_KERNEL))
    }
}

/// Give `sig` its default action back.
pub fn default_action(sig: i32) {
    // SAFETY: SIG_DFL installs no handler.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
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

/// Whether gpurun's caller left SIGPIPE ignored (`note_caller_sigpipe`).
static CALLER_IGNORED_SIGPIPE: AtomicBool = AtomicBool::new(false);

/// This process's variables whose names start with `prefix`: each name, and whether its value is
/// empty or blank. A walk of `environ` that copies only those: `std::env::vars_os` copies every
/// variable, ~0.15 µs apiece, and a cluster login's environment holds a hundred or more. gpurun
/// changes no variable of its own environment, so nothing writes `environ` meanwhile.
pub fn env_with_prefix(prefix: &str) -> Vec<(String, bool)> {
    extern "C" {
        static environ: *const *const libc::c_char;
    }
    let mut out = Vec::new();
    // SAFETY: `environ` is a null-terminated array of NUL-terminated strings, which nothing
    // changes while it is read (above).
    unsafe {
        let mut p = environ;
        while !p.is_null() && !(*p).is_null() {
            let var = std::ffi::CStr::from_ptr(*p).to_bytes();
            if let (true, Some(eq)) = (
                var.starts_with(prefix.as_bytes()),
                var.iter().position(|&b| b == b'='),
            ) {
                let name = String::from_utf8_lossy(&var[..eq]).into_owned();
                out.push((name, var[eq + 1..].trim_ascii().is_empty()));
            }
            p = p.add(1);
        }
    }
    out
}

/// Runs before std's start-up, which ignores SIGPIPE in gpurun itself (a write to a pipe whose
/// reader is gone is an error it handles): the caller's disposition is noted first, for the
/// command (`caller_dispositions`).
#[used]
#[link_section = ".init_array"]
static NOTE_CALLER_SIGPIPE: extern "C" fn() = note_caller_sigpipe;

extern "C" fn note_caller_sigpipe() {
    // SAFETY: sigaction only reads the disposition into a zeroed struct.
    let ignored = unsafe {
        let mut old = std::mem::zeroed::<libc::sigaction>();
        libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    };
    CALLER_IGNORED_SIGPIPE.store(ignored, Ordering::Relaxed);
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

/// For the command about to be exec'd: `signals`, and SIGPIPE, as gpurun's caller left them.
/// A handler of gpurun's is dropped (exec would reset it to the default; done before the
/// signal mask is lifted in a child that shares gpurun's memory, it keeps the handler from
/// running there), an ignored signal stays ignored (`nohup`), and SIGPIPE, which gpurun itself
/// ignores, gets the caller's disposition back: with gpurun's SIG_IGN inherited, `yes | head -1`
/// in the container printed "Broken pipe". Async-signal-safe.
pub fn caller_dispositions(signals: &[nix::sys::signal::Signal]) {
    // SAFETY: sigaction reads into a zeroed struct; signal() sets a default disposition.
    unsafe {
        for &sig in signals {
            let mut old = std::mem::zeroed::<libc::sigaction>();
            if libc::sigaction(sig as i32, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction != libc::SIG_IGN
                && old.sa_sigaction != libc::SIG_DFL
            {
                libc::signal(sig as i32, libc::SIG_DFL);
            }
        }
        if !CALLER_IGNORED_SIGPIPE.load(Ordering::Relaxed) {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}

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

/// Whether `path` is on a network or parallel file system (or another FUSE one, such as CVMFS),
/// where reads wait on I/O rather than on a CPU. False when it cannot be told.
pub fn on_network_fs(path: &Path) -> bool {
    // statfs(2) f_type magic numbers: NFS, SMB2, CIFS, Lustre, GPFS, BeeGFS, CephFS, FUSE, AFS,
    // 9p, OrangeFS/PVFS2.
    const NETWORK: [i64; 11] = [
        0x6969, 0xFE534D42, 0xFF534D42, 0x0BD00BD0, 0x47504653, 0x19830326, 0x00C36400, 0x65735546,
        0x5346414F, 0x01021997, 0x20030528,
    ];
    nix::sys::statfs::statfs(path)
        .map(|st| NETWORK.contains(&st.filesystem_type().0))
        .unwrap_or(false)
}

/// Whether `path` is on a file system mounted noexec (where execve says EACCES).
pub fn on_noexec_mount(path: &Path) -> bool {
    nix::sys::statvfs::statvfs(path)
        .is_ok_and(|st| st.flags().contains(nix::sys::statvfs::FsFlags::ST_NOEXEC))
}

/// How many CPUs this process's affinity mask allows (a Slurm step's own cores); `None` when
/// the kernel will not say.
pub fn affinity_cpus() -> Option<usize> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
    let n = (0..nix::sched::CpuSet::count())
        .filter(|&i| set.is_set(i).unwrap_or(false))
        .count();
    (n > 0).then_some(n)
}

/// Give the CPU to any other runnable thread; returns at once when there is none.
fn yield_cpu() {
    let _ = nix::sched::sched_yield();
}

/// The address of the abstract unix socket `name`: no file anywhere, gone with the socket, and
/// bound by one socket at a time.
fn abstract_addr(name: &str) -> Result<UnixAddr> {
    UnixAddr::new_abstract(name.as_bytes()).map_err(call("socket name"))
}

fn seqpacket() -> Result<OwnedFd> {
    let flags = SockFlag::SOCK_CLOEXEC;
    socket(AddressFamily::Unix, SockType::SeqPacket, flags, None).map_err(call("socket"))
}

/// A socket listening on the abstract name `name`; EADDRINUSE when another socket holds it.
pub fn listen_abstract(name: &str) -> Result<OwnedFd> {
    let fd = seqpacket()?;
    bind(fd.as_raw_fd(), &abstract_addr(name)?).map_err(call("bind"))?;
    listen(&fd, Backlog::MAXCONN).map_err(call("listen"))?;
    Ok(fd)
}

/// A connection to the abstract name `name` whose other end is `uid`'s, and that end's pid.
/// Abstract names are open to every user, so the kernel's record of who listens (SO_PEERCRED)
/// is checked on this very connection before anything crosses it. The connect never waits: a
/// listener whose backlog is full (another user's that never accepts) is EAGAIN at once, so
/// many such names cost nothing. Each later send and receive waits at most `wait`.
/// ECONNREFUSED where nothing listens, `SysError::Foreign` where another user does.
pub fn connect_own(name: &str, uid: u32, wait: std::time::Duration) -> Result<(OwnedFd, i32)> {
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let fd =
        socket(AddressFamily::Unix, SockType::SeqPacket, flags, None).map_err(call("socket"))?;
    connect(fd.as_raw_fd(), &abstract_addr(name)?).map_err(call("connect"))?;
    let (owner, pid) = peer(&fd)?;
    if owner != uid {
        return Err(SysError::Foreign { uid: owner });
    }
    nix::fcntl::fcntl(
        &fd,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
    )
    .map_err(call("fcntl"))?;
    set_timeouts(&fd, wait)?;
    Ok((fd, pid))
}

/// Two connected sockets of the kind `listen_abstract` makes.
pub fn socket_pair() -> Result<(OwnedFd, OwnedFd)> {
    let flags = SockFlag::SOCK_CLOEXEC;
    socketpair(AddressFamily::Unix, SockType::SeqPacket, None, flags).map_err(call("socketpair"))
}

pub fn accept(listener: &OwnedFd) -> Result<OwnedFd> {
    let fd = accept4(listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC).map_err(call("accept"))?;
    // SAFETY: accept4 returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The uid and pid of the process at the other end of `sock`, as the kernel recorded them when
/// it connected or listened: no process can claim another's.
pub fn peer(sock: &OwnedFd) -> Result<(u32, i32)> {
    let c = getsockopt(sock, sockopt::PeerCredentials).map_err(call("SO_PEERCRED"))?;
    Ok((c.uid(), c.pid()))
}

/// How long a receive on `sock` waits at most.
pub fn set_receive_timeout(sock: &OwnedFd, t: std::time::Duration) -> Result<()> {
    setsockopt(sock, sockopt::ReceiveTimeout, &timeval(t)).map_err(call("SO_RCVTIMEO"))
}

/// How long a connect, send or receive on `sock` waits at most.
pub fn set_timeouts(sock: &OwnedFd, t: std::time::Duration) -> Result<()> {
    setsockopt(sock, sockopt::SendTimeout, &timeval(t)).map_err(call("SO_SNDTIMEO"))?;
    set_receive_timeout(sock, t)
}

fn timeval(t: std::time::Duration) -> nix::sys::time::TimeVal {
    nix::sys::time::TimeVal::new(t.as_secs() as _, t.subsec_micros() as _)
}

/// The largest message `receive` takes whole.
const MAX_MESSAGE: usize = 64 << 10;

/// Send one message, with `fds` attached.
pub fn send(sock: &OwnedFd, data: &[u8], fds: &[RawFd]) -> Result<()> {
    let iov = [std::io::IoSlice::new(data)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None)
        .map(|_| ())
        .map_err(call("sendmsg"))
}

/// Receive one message and the descriptors attached to it; empty when the other end closed.
pub fn receive(sock: &OwnedFd) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(call("recvmsg"))?;
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(call("recvmsg"))? {
        if let ControlMessageOwned::ScmRights(got) = c {
            // SAFETY: the kernel made these descriptors for this process just now.
            fds.extend(
                got.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    let n = msg.bytes;
    buf.truncate(n);
    Ok((buf, fds))
}

/// Which of `fds` are readable or hung up, waiting up to `timeout` (None: for ever). All false
/// when a signal interrupted the wait.
pub fn wait_readable(
    fds: &[BorrowedFd],
    timeout: Option<std::time::Duration>,
) -> Result<Vec<bool>> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut p: Vec<PollFd> = (fds.iter())
        .map(|f| PollFd::new(*f, PollFlags::POLLIN))
        .collect();
    let t = match timeout {
        None => PollTimeout::NONE,
        Some(d) => PollTimeout::try_from(d.as_millis().min(i32::MAX as u128) as i32)
            .unwrap_or(PollTimeout::MAX),
    };
    match poll(&mut p, t) {
        Ok(_) => Ok(p.iter().map(|p| p.any().unwrap_or(true)).collect()),
        Err(Errno::EINTR) => Ok(vec![false; fds.len()]),
        Err(e) => Err(call("poll")(e)),
    }
}

/// Whether the reader of the pipe whose write end is `w` is gone (the read end closed).
pub fn reader_gone(w: BorrowedFd) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut p = [PollFd::new(w, PollFlags::POLLOUT)];
    poll(&mut p, PollTimeout::ZERO).is_ok()
        && p[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLERR))
}

/// A descriptor of process `pid` that becomes readable when it exits (pidfd_open).
pub fn pidfd(pid: i32) -> Result<OwnedFd> {
    // SAFETY: a plain syscall; a non-negative result is a new descriptor (close-on-exec).
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(call("pidfd_open")(Errno::last()));
    }
    // SAFETY: the descriptor is this process's and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A descriptor that becomes readable when an entry of the directory `dir` is created, removed,
/// renamed, written or has its attributes changed (inotify).
pub fn watch_dir(dir: &Path) -> Result<OwnedFd> {
    use nix::sys::inotify::{AddWatchFlags as W, InitFlags, Inotify};
    let i =
        Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).map_err(call("inotify"))?;
    let mask = W::IN_ATTRIB
        | W::IN_CLOSE_WRITE
        | W::IN_CREATE
        | W::IN_DELETE
        | W::IN_MODIFY
        | W::IN_MOVED_FROM
        | W::IN_MOVED_TO
        | W::IN_DELETE_SELF
        | W::IN_MOVE_SELF;
    i.add_watch(dir, mask).map_err(at("watch", dir))?;
    Ok(OwnedFd::from(i))
}

/// Read and drop what is waiting on a descriptor that `watch_dir` made.
pub fn drain(fd: &OwnedFd) {
    let mut buf = [0u8; 4096];
    while matches!(nix::unistd::read(fd, &mut buf), Ok(n) if n > 0) {}
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_with_a_prefix() {
        // The test binary's environment, as std reads it.
        let want: Vec<(String, bool)> = std::env::vars_os()
            .filter(|(k, _)| k.as_encoded_bytes().starts_with(b"CARGO_"))
            .map(|(k, v)| {
                let blank = v.as_encoded_bytes().trim_ascii().is_empty();
                (k.to_string_lossy().into_owned(), blank)
            })
            .collect();
        assert!(!want.is_empty());
        assert_eq!(env_with_prefix("CARGO_"), want);
        assert!(env_with_prefix("GPURUN_NO_SUCH_VARIABLE_").is_empty());
    }
}

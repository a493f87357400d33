//! Mounts: file systems, detached trees (open_tree, move_mount, mount_setattr), remounts,
//! propagation, pivot_root.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};

use super::error::*;

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
    let flags = CLONE_TREE;
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

/// The open_tree flags of `clone_tree`.
pub const CLONE_TREE: libc::c_uint =
    OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint;

const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x04;

const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

const MOUNT_ATTR_RDONLY: u64 = 0x1;

const MOUNT_ATTR_NOSUID: u64 = 0x2;

const MOUNT_ATTR_NODEV: u64 = 0x4;

const MOUNT_ATTR_NOEXEC: u64 = 0x8;

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
    let m = FuseMount::image(fd, source, uid, gid);
    nix::mount::mount(
        Some(m.source.as_path()),
        target,
        Some(m.fstype),
        m.flags,
        Some(m.options.as_str()),
    )
    .map_err(at("mount FUSE on", target))
}

/// What `mount_fuse` passes to mount(2) besides the target, apart so that a test can check it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuseMount {
    pub source: PathBuf,
    pub fstype: &'static str,
    pub flags: MsFlags,
    pub options: String,
}

impl FuseMount {
    /// The image's mount, served by gpurun on connection `fd` for `uid`/`gid`.
    pub fn image(fd: &OwnedFd, source: &Path, uid: u32, gid: u32) -> FuseMount {
        let fd = fd.as_raw_fd();
        FuseMount {
            source: source.to_path_buf(),
            fstype: "fuse.gpurun",
            flags: MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_RDONLY,
            options: format!("fd={fd},rootmode=40000,user_id={uid},group_id={gid}"),
        }
    }
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

/// Make `root` the root of this mount namespace (runc's trick: no put_old directory needed, so it
/// works on a read-only root).
pub fn pivot_root(root: &Path) -> Result<()> {
    nix::unistd::chdir(root).map_err(at("chdir", root))?;
    nix::unistd::pivot_root(".", ".").map_err(at("pivot_root to", root))?;
    nix::mount::umount2(".", MntFlags::MNT_DETACH).map_err(call("detach old root"))?;
    nix::unistd::chdir("/").map_err(call("chdir /"))
}

//! The calls that apply a launch plan and set up the image server, behind two small traits (as
//! youki's `Syscall`): `Linux` makes them, and in tests `fake::Recorder` notes them, so that the
//! exact mount and namespace sequence is checked without root.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use super::error::*;
use super::files::{self, Create};
use super::mount::{self, Attrs};
use super::namespaces::{self, Propagation};

/// Mounts, and the handles and files a container's root (or the image server's FUSE mount) is
/// built with.
pub trait Mounts {
    /// A detached copy of the mount tree at `path` (`mount::clone_tree`).
    fn clone_tree(&self, path: &Path) -> Result<OwnedFd>;
    fn attach_tree(&self, tree: &OwnedFd, dst: &OwnedFd, what: &Path) -> Result<()>;
    /// `Ok(false)` where the kernel cannot (`mount::set_tree_attrs`).
    fn set_tree_attrs(&self, tree: &OwnedFd, attrs: Attrs, what: &Path) -> Result<bool>;
    fn set_propagation(&self, path: &Path, p: crate::mount::Propagation) -> Result<()>;
    fn mount_tmpfs(
        &self,
        target: &Path,
        mode: u32,
        size: Option<u64>,
        huge: Option<&str>,
        attrs: Attrs,
    ) -> Result<()>;
    fn mount_overlay(&self, lower: &Path, upper: &Path, work: &Path, target: &Path) -> Result<()>;
    fn mount_overlay_ro(&self, lowers: &[&Path], target: &Path) -> Result<()>;
    fn mount_proc(&self, target: &Path) -> Result<()>;
    fn mount_devpts(&self, target: &Path) -> Result<()>;
    fn mount_mqueue(&self, target: &Path) -> Result<()>;
    fn remount(&self, dst: &Path, attrs: Attrs) -> Result<()>;
    fn remount_readonly(&self, dst: &Path) -> Result<()> {
        let attrs = Attrs {
            readonly: true,
            ..Attrs::default()
        };
        self.remount(dst, attrs)
    }
    fn pivot_root(&self, root: &Path) -> Result<()>;
    fn open_fuse(&self) -> std::io::Result<OwnedFd>;
    /// The image's FUSE mount (`mount::FuseMount::image`), served on `fd`.
    fn mount_fuse(&self, fd: &OwnedFd, source: &Path, target: &Path, ids: (u32, u32))
        -> Result<()>;
    fn open_path(&self, path: &Path) -> Result<OwnedFd>;
    fn is_dir(&self, fd: &OwnedFd) -> Result<bool>;
    /// The (device, inode) of what `fd` refers to.
    fn identity(&self, fd: &OwnedFd) -> Result<(u64, u64)>;
    fn open_in_root(&self, root: &OwnedFd, path: &Path, create: Create) -> Result<OwnedFd>;
    fn symlink_in_root(&self, root: &OwnedFd, path: &Path, target: &Path) -> Result<()>;
    fn unlink_in_root(&self, root: &OwnedFd, path: &Path) -> Result<()>;
    fn write_in_root(&self, root: &OwnedFd, path: &Path, contents: &[u8]) -> Result<()>;
    /// A new directory (the stage's, outside any root).
    fn mkdir(&self, path: &Path) -> std::io::Result<()>;
    /// A file of the stage, mode 0644.
    fn write_file(&self, path: &Path, contents: &[u8]) -> std::io::Result<()>;
    /// A host file's contents, and where a host symlink points.
    fn read_host(&self, path: &Path) -> std::io::Result<Vec<u8>>;
    fn read_link(&self, path: &Path) -> Option<PathBuf>;
}

/// The namespaces a container (and the image server) enters.
pub trait Namespaces {
    fn enter_user_namespace(&self, inside_uid: u32, inside_gid: u32) -> Result<()>;
    fn enter_pid_ipc_namespaces(&self, pid: bool, ipc: bool) -> Result<()>;
    /// `namespaces::enter_mount_namespace_then`.
    fn enter_mount_namespace_then<T>(&self, p: Propagation, first: impl FnOnce() -> T)
        -> Result<T>;
    fn enter_uts_namespace(&self, hostname: &str) -> Result<()>;
    fn enter_net_namespace(&self) -> Result<()>;
}

/// The kernel's: each method is the free function of the same name.
pub struct Linux;

impl Mounts for Linux {
    fn clone_tree(&self, path: &Path) -> Result<OwnedFd> {
        mount::clone_tree(path)
    }
    fn attach_tree(&self, tree: &OwnedFd, dst: &OwnedFd, what: &Path) -> Result<()> {
        mount::attach_tree(tree, dst, what)
    }
    fn set_tree_attrs(&self, tree: &OwnedFd, attrs: Attrs, what: &Path) -> Result<bool> {
        mount::set_tree_attrs(tree, attrs, what)
    }
    fn set_propagation(&self, path: &Path, p: crate::mount::Propagation) -> Result<()> {
        mount::set_propagation(path, p)
    }
    fn mount_tmpfs(
        &self,
        target: &Path,
        mode: u32,
        size: Option<u64>,
        huge: Option<&str>,
        attrs: Attrs,
    ) -> Result<()> {
        mount::mount_tmpfs(target, mode, size, huge, attrs)
    }
    fn mount_overlay(&self, lower: &Path, upper: &Path, work: &Path, target: &Path) -> Result<()> {
        mount::mount_overlay(lower, upper, work, target)
    }
    fn mount_overlay_ro(&self, lowers: &[&Path], target: &Path) -> Result<()> {
        mount::mount_overlay_ro(lowers, target)
    }
    fn mount_proc(&self, target: &Path) -> Result<()> {
        mount::mount_proc(target)
    }
    fn mount_devpts(&self, target: &Path) -> Result<()> {
        mount::mount_devpts(target)
    }
    fn mount_mqueue(&self, target: &Path) -> Result<()> {
        mount::mount_mqueue(target)
    }
    fn remount(&self, dst: &Path, attrs: Attrs) -> Result<()> {
        mount::remount(dst, attrs)
    }
    fn pivot_root(&self, root: &Path) -> Result<()> {
        mount::pivot_root(root)
    }
    fn open_fuse(&self) -> std::io::Result<OwnedFd> {
        mount::open_fuse()
    }
    fn mount_fuse(
        &self,
        fd: &OwnedFd,
        source: &Path,
        target: &Path,
        (uid, gid): (u32, u32),
    ) -> Result<()> {
        mount::mount_fuse(fd, source, target, uid, gid)
    }
    fn open_path(&self, path: &Path) -> Result<OwnedFd> {
        files::open_path(path)
    }
    fn is_dir(&self, fd: &OwnedFd) -> Result<bool> {
        files::is_dir(fd)
    }
    fn identity(&self, fd: &OwnedFd) -> Result<(u64, u64)> {
        let st = files::fstat(fd)?;
        Ok((st.st_dev, st.st_ino))
    }
    fn open_in_root(&self, root: &OwnedFd, path: &Path, create: Create) -> Result<OwnedFd> {
        files::open_in_root(root, path, create)
    }
    fn symlink_in_root(&self, root: &OwnedFd, path: &Path, target: &Path) -> Result<()> {
        files::symlink_in_root(root, path, target)
    }
    fn unlink_in_root(&self, root: &OwnedFd, path: &Path) -> Result<()> {
        files::unlink_in_root(root, path)
    }
    fn write_in_root(&self, root: &OwnedFd, path: &Path, contents: &[u8]) -> Result<()> {
        files::write_in_root(root, path, contents)
    }
    fn mkdir(&self, path: &Path) -> std::io::Result<()> {
        std::fs::create_dir(path)
    }
    fn write_file(&self, path: &Path, contents: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, contents)?;
        // as the stage's tmpfs and the umask leave it otherwise: readable in the container
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644));
        Ok(())
    }
    fn read_host(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        std::fs::read_link(path).ok()
    }
}

impl Namespaces for Linux {
    fn enter_user_namespace(&self, inside_uid: u32, inside_gid: u32) -> Result<()> {
        namespaces::enter_user_namespace(inside_uid, inside_gid)
    }
    fn enter_pid_ipc_namespaces(&self, pid: bool, ipc: bool) -> Result<()> {
        namespaces::enter_pid_ipc_namespaces(pid, ipc)
    }
    fn enter_mount_namespace_then<T>(
        &self,
        p: Propagation,
        first: impl FnOnce() -> T,
    ) -> Result<T> {
        namespaces::enter_mount_namespace_then(p, first)
    }
    fn enter_uts_namespace(&self, hostname: &str) -> Result<()> {
        namespaces::enter_uts_namespace(hostname)
    }
    fn enter_net_namespace(&self) -> Result<()> {
        namespaces::enter_net_namespace()
    }
}

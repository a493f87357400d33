//! The root's overlay (`--overlay`, `--writable-tmpfs`): the kernel's overlayfs in gpurun's
//! user namespace, or fuse-overlayfs where the kernel refuses that (before Linux 5.11; an upper
//! directory on a file system it does not take) or the site asks for it (`overlay_driver`).
//!
//! C mounts the FUSE connection itself (fuse-overlayfs, exec'd as a user, could not: it would
//! hold no capability) and hands it to fuse-overlayfs as /dev/fd/3. fuse-overlayfs is C's child,
//! in C's namespaces but a mount namespace copied from C's (C's pivot_root leaves it its view
//! of the layers), in a session of its own, and gets SIGKILL when C ends: nothing of it
//! outlives the container.

use std::fs::Permissions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;

use crate::mount::OverlayDriver;
use crate::sys::seam::Mounts;
use crate::sys::{self, SysError};

/// An overlay's layers.
pub(super) struct Layers<'a> {
    /// Read-only layers, the top one first.
    pub(super) lowers: Vec<&'a Path>,
    /// Where changes go and the work directory beside it; None: a read-only overlay.
    pub(super) upper: Option<(&'a Path, &'a Path)>,
}

/// What the kernel's overlayfs needs in a user namespace.
const KERNEL_NEEDS: &str =
    "overlayfs in a user namespace needs Linux ≥ 5.11 and a local file system";

/// Why the root's overlay could not be made: each driver's reason, with the call, the path
/// and the errno where a call refused.
#[derive(Debug, thiserror::Error)]
pub(super) enum OverlayError {
    #[error("{0} ({KERNEL_NEEDS})")]
    Kernel(SysError),
    #[error("{0} ({KERNEL_NEEDS}; or install fuse-overlayfs, which gpurun uses instead)")]
    KernelNoFallback(SysError),
    #[error("overlay_driver is fuse-overlayfs, but there is no fuse-overlayfs here ({WHERE})")]
    NoProgram,
    #[error("fuse-overlayfs: {0}")]
    Fuse(Box<OverlayError>),
    #[error("{kernel}; fuse-overlayfs: {fuse}")]
    Both {
        kernel: SysError,
        fuse: Box<OverlayError>,
    },
    #[error("/dev/fuse: {0}")]
    DevFuse(std::io::Error),
    /// The FUSE mount, or the start of fuse-overlayfs.
    #[error("{0}")]
    Call(SysError),
    #[error("{how} before serving the root ({source})")]
    Ended { how: String, source: std::io::Error },
}

/// Mount the overlay of `layers` at `at`, as `driver` says.
pub(super) fn mount(
    os: &impl Mounts,
    driver: OverlayDriver,
    layers: &Layers,
    at: &Path,
) -> Result<(), OverlayError> {
    let fuse = |p: PathBuf| fuse(&p, layers, at).map_err(Box::new);
    match driver {
        OverlayDriver::Kernel => kernel(os, layers, at).map_err(OverlayError::Kernel),
        OverlayDriver::FuseOverlayfs => match program() {
            Some(p) => fuse(p).map_err(OverlayError::Fuse),
            None => Err(OverlayError::NoProgram),
        },
        OverlayDriver::Auto => kernel(os, layers, at).or_else(|kernel| match program() {
            Some(p) => fuse(p).map_err(|fuse| OverlayError::Both { kernel, fuse }),
            None => Err(OverlayError::KernelNoFallback(kernel)),
        }),
    }
}

fn kernel(os: &impl Mounts, layers: &Layers, at: &Path) -> Result<(), SysError> {
    match (layers.upper, layers.lowers.as_slice()) {
        (Some((upper, work)), [lower]) => os.mount_overlay(lower, upper, work, at),
        (_, lowers) => os.mount_overlay_ro(lowers, at),
    }
}

/// Where fuse-overlayfs is looked for, after PATH.
const WHERE: &str = "PATH, /usr/bin, /usr/local/bin";

/// The fuse-overlayfs program: in PATH, else where distributions install it.
fn program() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(["/usr/bin".into(), "/usr/local/bin".into()]);
    dirs.map(|d| d.join("fuse-overlayfs"))
        .find(|p| p.is_absolute() && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok())
}

/// fuse-overlayfs's options for `layers` (gpurun's stage paths: no ',' nor ':' in them).
fn options(layers: &Layers) -> String {
    let lowers: Vec<String> = (layers.lowers.iter())
        .map(|l| l.display().to_string())
        .collect();
    let mut o = format!("lowerdir={}", lowers.join(":"));
    if let Some((upper, work)) = layers.upper {
        o.push_str(&format!(
            ",upperdir={},workdir={}",
            upper.display(),
            work.display()
        ));
    }
    o
}

/// The overlay at `at`, served by fuse-overlayfs (`prog`) on a connection C mounted.
fn fuse(prog: &Path, layers: &Layers, at: &Path) -> Result<(), OverlayError> {
    let dev = sys::open_fuse().map_err(OverlayError::DevFuse)?;
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let readonly = layers.upper.is_none();
    sys::mount_fuse_overlay(&dev, at, uid.as_raw(), gid.as_raw(), readonly)
        .map_err(OverlayError::Call)?;
    if let Some((_, work)) = layers.upper {
        // The kernel's overlayfs leaves its work/work at mode 000, which fuse-overlayfs (no
        // capability) could not open: an overlay directory may have been used by either.
        let _ = std::fs::set_permissions(work.join("work"), Permissions::from_mode(0o700));
    }
    let args = ["-f", "-o", &options(layers), "/dev/fd/3"].map(String::from);
    let daemon = sys::spawn_daemon(prog, "fuse-overlayfs", &args, dev.as_raw_fd());
    // Its copy of the connection is the only one left: when it exits, the mount fails.
    drop(dev);
    let pid = daemon.map_err(OverlayError::Call)?;
    // The first look waits until fuse-overlayfs answers.
    if let Err(e) = std::fs::metadata(at) {
        let _ = sys::kill(pid, Signal::SIGKILL);
        let how = match sys::wait_for(Some(pid), None) {
            Ok(WaitStatus::Exited(_, code)) => format!("it exited with status {code}"),
            _ => "it ended".to_string(),
        };
        return Err(OverlayError::Ended { how, source: e });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_overlayfs_options() {
        let (l, u, w, k) = (
            Path::new("/tmp/lower"),
            Path::new("/tmp/overlay/upper"),
            Path::new("/tmp/overlay/work"),
            Path::new("/tmp/kept"),
        );
        let rw = Layers {
            lowers: vec![l],
            upper: Some((u, w)),
        };
        assert_eq!(
            options(&rw),
            "lowerdir=/tmp/lower,upperdir=/tmp/overlay/upper,workdir=/tmp/overlay/work"
        );
        let ro = Layers {
            lowers: vec![k, l],
            upper: None,
        };
        assert_eq!(options(&ro), "lowerdir=/tmp/kept:/tmp/lower");
    }
}

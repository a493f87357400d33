//! What a container's mounts are made of: plain data that gpu/ decides and runtime/ plans and
//! applies (runtime/launch/root.rs).

use std::path::PathBuf;

use serde::Serialize;

/// A mount's flags, as `--bind` and `--tmpfs` give them: the grammar's types, shared with the
/// plugin.
pub use mount_grammar::{MountFlags, PointKind, Propagation, PropagationKind};

/// What a mount inside the container is made from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MountSource {
    /// A host file or directory (recursive bind).
    Bind { src: PathBuf },
    /// A fresh tmpfs with this mode for its root, and at most this many bytes (the kernel's
    /// default, half the memory, when None).
    Tmpfs {
        mode: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
        /// Its transparent huge page policy (`huge=`: never, always, within_size, advise).
        #[serde(skip_serializing_if = "Option::is_none")]
        huge: Option<String>,
    },
    /// A file whose contents gpurun generates (passwd, group, driver params…).
    File { contents: String },
    /// A generated file written into the container's writable root, where the container may
    /// replace it (rename); bound read-only as a `File` where the root refuses the write.
    RootFile { contents: String },
    /// A host file copied into the container's writable root (a symlink as a symlink where the
    /// image has its target), which the container may replace (tzdata's postinst renames over
    /// /etc/localtime; a mount refuses that); bound read-only where the root refuses the copy.
    HostCopy { src: PathBuf },
    /// A symlink created in the container's writable scratch (e.g. /dev/fd → /proc/self/fd).
    Symlink { target: PathBuf },
    /// A proc file system of the container's own PID namespace (`--pid`, `--containall`).
    Proc,
    /// A devpts of the container's own, whose ptmx any user may open (/dev/ptmx points to it).
    Devpts,
    /// The POSIX message queues of the container's own IPC namespace (`--ipc`).
    Mqueue,
}

impl MountSource {
    /// A tmpfs of the kernel's default size.
    pub fn tmpfs(mode: u32) -> MountSource {
        MountSource::Tmpfs {
            mode,
            size: None,
            huge: None,
        }
    }
}

/// One mount (or symlink) in the container, applied in plan order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mount {
    /// Absolute path inside the container.
    pub dst: PathBuf,
    #[serde(flatten)]
    pub source: MountSource,
    pub readonly: bool,
    /// Skip silently when the host source does not exist (host files that are only sometimes there).
    pub optional: bool,
    /// What `--bind SRC:DST:FLAGS` and `--tmpfs DST:OPTS` ask for beyond `readonly`.
    #[serde(skip_serializing_if = "MountFlags::is_plain")]
    pub flags: MountFlags,
}

impl Mount {
    pub fn bind(src: impl Into<PathBuf>, dst: impl Into<PathBuf>, readonly: bool) -> Mount {
        Mount {
            dst: dst.into(),
            source: MountSource::Bind { src: src.into() },
            readonly,
            optional: false,
            flags: MountFlags::default(),
        }
    }

    pub fn optional(mut self) -> Mount {
        self.optional = true;
        self
    }
}

/// What makes the root's overlay (`--overlay`, `--writable-tmpfs`): the kernel's overlayfs in
/// the user namespace, or fuse-overlayfs (the site's `overlay_driver`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OverlayDriver {
    /// The kernel's, and fuse-overlayfs where the kernel refuses it.
    #[default]
    Auto,
    Kernel,
    FuseOverlayfs,
}

impl OverlayDriver {
    /// The names a setting takes.
    pub const NAMES: [&'static str; 3] = ["auto", "kernel", "fuse-overlayfs"];

    pub fn from_name(name: &str) -> Option<OverlayDriver> {
        match name {
            "auto" => Some(OverlayDriver::Auto),
            "kernel" => Some(OverlayDriver::Kernel),
            "fuse-overlayfs" => Some(OverlayDriver::FuseOverlayfs),
            _ => None,
        }
    }

    pub fn is_auto(&self) -> bool {
        *self == OverlayDriver::Auto
    }
}

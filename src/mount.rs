//! What a container's mounts are made of: plain data that gpu/ decides and runtime/ plans and
//! applies (runtime/launch/root.rs).

use std::path::PathBuf;

use serde::Serialize;

/// What a mount inside the container is made from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MountSource {
    /// A host file or directory (recursive bind).
    Bind { src: PathBuf },
    /// A fresh tmpfs with this mode for its root.
    Tmpfs { mode: u32 },
    /// A file whose contents gpurun generates (passwd, group, driver params…).
    File { contents: String },
    /// A generated file written into the container's writable root, where the container may
    /// replace it (rename); bound read-only as a `File` where the root refuses the write.
    RootFile { contents: String },
    /// A symlink created in the container's writable scratch (e.g. /dev/fd → /proc/self/fd).
    Symlink { target: PathBuf },
    /// A proc file system of the container's own PID namespace (`--containall`).
    Proc,
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
}

impl Mount {
    pub fn bind(src: impl Into<PathBuf>, dst: impl Into<PathBuf>, readonly: bool) -> Mount {
        Mount {
            dst: dst.into(),
            source: MountSource::Bind { src: src.into() },
            readonly,
            optional: false,
        }
    }

    pub fn optional(mut self) -> Mount {
        self.optional = true;
        self
    }
}

//! The launch plan: everything decided before touching the system, as plain data.
//!
//! `plan()` is a pure function of the request and a snapshot of the host (`HostView`), so every rule
//! (which binds, which /dev entries, which env, which uid map) is tested with tables, no root needed.

use std::path::PathBuf;

use serde::Serialize;

/// What a mount inside the container is made from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MountSource {
    /// A host file or directory (recursive bind).
    Bind { src: PathBuf },
    /// A fresh tmpfs.
    Tmpfs,
    /// A file whose contents gpurun generates (passwd, group, driver params…).
    File { contents: String },
    /// A symlink created in the container's writable scratch (e.g. /dev/fd → /proc/self/fd).
    Symlink { target: PathBuf },
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

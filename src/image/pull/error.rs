//! What can go wrong in a pull, and the exit status each failure gives.

use std::io;
use std::path::{Path, PathBuf};

use crate::image::cache::CacheError;
use crate::image::flatten::FlattenError;
use crate::image::reference::ReferenceError;
use crate::image::registry::RegistryError;
use crate::image::squash::{full_disk_fix, SquashError};
use crate::image::unpack::UnpackError;
use crate::store::cache_dir::{cache_root, CACHE_FIX};

/// Exit codes of `gpurun pull` (and of commands that pull through [`super::ensure_local`]). Other
/// failures exit with [`crate::exit::GPURUN_FAILED`] (125).
pub mod exit {
    /// The image, tag, platform or blob does not exist.
    pub const NOT_FOUND: i32 = 20;
    /// The registry refused the credentials, or there were none and it wants some.
    pub const AUTH: i32 = 21;
    /// The registry could not be reached or kept failing (connection errors, 5xx, 429).
    pub const NETWORK: i32 = 22;
    /// The image is malformed: bad manifest, config or layer, digest mismatch.
    pub const BAD_IMAGE: i32 = 23;
    /// No space left for the cache or the output.
    pub const DISK_FULL: i32 = 24;
    /// `podman://`: podman could not be run (not installed, not on PATH) or failed.
    pub const PODMAN: i32 = 25;
    /// Interrupted by SIGINT / SIGTERM (128 + SIGINT, as shells report it).
    pub const INTERRUPTED: i32 = 130;
}

#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Flatten(#[from] FlattenError),
    #[error(transparent)]
    Squash(#[from] SquashError),
    #[error(transparent)]
    Unpack(#[from] UnpackError),
    #[error("{0}")]
    Platform(String),
    #[error("{0} already exists; remove it or pass --force to replace it")]
    Exists(PathBuf),
    #[error("cannot write {path} ({source}); {}", output_fix(path, source))]
    Output { path: PathBuf, source: io::Error },
    #[error("{path}: the disk is full; {}", full_disk_fix(path))]
    DiskFull { path: PathBuf },
    #[error("source {source_ref}: {detail}")]
    Source { source_ref: String, detail: String },
    #[error("image {image}: {detail}")]
    BadImage { image: String, detail: String },
    #[error("ensure_local needs a docker:// or podman:// reference, not '{0}'")]
    NotRegistry(String),
    #[error(
        "{source_ref}: cannot run podman ({reason}); install podman or add its directory to PATH"
    )]
    NoPodman { source_ref: String, reason: String },
    #[error("{0}: no such image in your podman store (podman images lists what it holds); podman pull or podman load it first")]
    NotInPodman(String),
    #[error("{source_ref}: podman failed: {detail}")]
    Podman { source_ref: String, detail: String },
    #[error("cannot run the pull in a process of its own: {0}")]
    Detach(crate::sys::SysError),
    #[error("cannot start the async runtime ({0})")]
    Runtime(io::Error),
}

/// The fix for an output that cannot be written: pull's -o, or the cache, where `exec
/// docker://` writes its images.
fn output_fix(path: &Path, source: &io::Error) -> &'static str {
    match source.raw_os_error() {
        Some(libc::ENOSPC) => full_disk_fix(path),
        _ if path.starts_with(cache_root()) => CACHE_FIX,
        _ => "choose another -o",
    }
}

impl PullError {
    /// The process exit status for this error (see [`exit`]).
    pub fn exit_code(&self) -> i32 {
        match self {
            PullError::Registry(e) => match e {
                RegistryError::NotFound { .. } | RegistryError::NoPlatform { .. } => {
                    exit::NOT_FOUND
                }
                RegistryError::Auth { .. }
                | RegistryError::Refused { .. }
                | RegistryError::Credentials { .. } => exit::AUTH,
                RegistryError::Network { .. } | RegistryError::RateLimited { .. } => exit::NETWORK,
                RegistryError::BadImage { .. } | RegistryError::Digest { .. } => exit::BAD_IMAGE,
                RegistryError::DiskFull { .. } => exit::DISK_FULL,
                RegistryError::Io { .. } | RegistryError::Cache(_) => crate::exit::GPURUN_FAILED,
            },
            PullError::Flatten(FlattenError::Read { source, .. })
                if source.kind() == io::ErrorKind::PermissionDenied =>
            {
                crate::exit::GPURUN_FAILED
            }
            PullError::Flatten(FlattenError::Read { .. } | FlattenError::Entry { .. })
            | PullError::BadImage { .. } => exit::BAD_IMAGE,
            PullError::Squash(SquashError::DiskFull { .. }) | PullError::DiskFull { .. } => {
                exit::DISK_FULL
            }
            PullError::Output { source, .. } if source.raw_os_error() == Some(libc::ENOSPC) => {
                exit::DISK_FULL
            }
            PullError::Source { .. } | PullError::NotInPodman(_) => exit::NOT_FOUND,
            PullError::NoPodman { .. } | PullError::Podman { .. } => exit::PODMAN,
            _ => crate::exit::GPURUN_FAILED,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_distinct() {
        let codes = [
            exit::NOT_FOUND,
            exit::AUTH,
            exit::NETWORK,
            exit::BAD_IMAGE,
            exit::DISK_FULL,
            exit::PODMAN,
            exit::INTERRUPTED,
        ];
        for (i, a) in codes.iter().enumerate() {
            assert!(![0, 1, 2, 125, 126, 127].contains(a));
            assert!(codes[i + 1..].iter().all(|b| a != b));
        }
    }
}

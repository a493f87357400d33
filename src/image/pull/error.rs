//! What can go wrong in a pull, and the exit status each failure gives.

use std::io;
use std::path::{Path, PathBuf};

use crate::image::cache::CacheError;
use crate::image::flatten::FlattenError;
use crate::image::reference::ReferenceError;
use crate::image::registry::{ManifestError, RegistryError};
use crate::image::squash::{full_disk_fix, SquashError};
use crate::image::unpack::UnpackError;

use super::image_config::ConfigError;
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
    #[error(transparent)]
    Platform(ManifestError),
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
    #[error("image {image}: {source}")]
    Manifest {
        image: String,
        source: ManifestError,
    },
    #[error("image {image}: {source}")]
    Config { image: String, source: ConfigError },
    /// A local layout's manifest or index.
    #[error("source {source_ref}: {source}")]
    LayoutManifest {
        source_ref: String,
        source: ManifestError,
    },
    #[error(
        "source {source_ref}: '{digest}' is not a sha256 digest (the only kind gpurun checks)"
    )]
    NotSha256 { source_ref: String, digest: String },
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
    /// The config `podman image inspect` gave.
    #[error("{source_ref}: podman failed: {source}")]
    PodmanConfig {
        source_ref: String,
        source: ConfigError,
    },
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
                | RegistryError::Credentials { .. }
                | RegistryError::AuthFile { .. } => exit::AUTH,
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
            | PullError::BadImage { .. }
            | PullError::Manifest { .. }
            | PullError::Config { .. } => exit::BAD_IMAGE,
            PullError::Squash(SquashError::DiskFull { .. }) | PullError::DiskFull { .. } => {
                exit::DISK_FULL
            }
            PullError::Output { source, .. } if source.raw_os_error() == Some(libc::ENOSPC) => {
                exit::DISK_FULL
            }
            PullError::Source { .. }
            | PullError::LayoutManifest { .. }
            | PullError::NotSha256 { .. }
            | PullError::NotInPodman(_) => exit::NOT_FOUND,
            PullError::NoPodman { .. }
            | PullError::Podman { .. }
            | PullError::PodmanConfig { .. } => exit::PODMAN,
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

    /// A manifest, platform or auth file error keeps its parser's error, and the words and
    /// exit code of the kind of failure it was told as before.
    #[test]
    fn parser_errors_keep_their_words_and_exit_codes() {
        use crate::image::registry::{parse_auth_file, AuthFileError, Manifest, Platform};
        let json = || Manifest::parse(b"[").unwrap_err();
        let json_words = json().to_string();
        assert!(
            json_words.starts_with("manifest is not valid JSON ("),
            "{json_words}"
        );
        let auth = parse_auth_file(b"{", "r").unwrap_err();
        assert!(
            matches!(&auth, AuthFileError::Json(j) if j.is_eof()),
            "{auth:?}"
        );
        let cases: Vec<(PullError, String, i32)> = vec![
            (
                RegistryError::AuthFile {
                    registry: "r".into(),
                    file: "/h/.docker/config.json".into(),
                    source: auth,
                }
                .into(),
                "credentials for r: /h/.docker/config.json is not a valid auth file (EOF while parsing an object at line 1 column 1); fix or remove it".into(),
                exit::AUTH,
            ),
            (
                PullError::Manifest {
                    image: "x/y:z".into(),
                    source: json(),
                },
                format!("image x/y:z: {json_words}"),
                exit::BAD_IMAGE,
            ),
            (
                PullError::LayoutManifest {
                    source_ref: "oci:/l".into(),
                    source: json(),
                },
                format!("source oci:/l: {json_words}"),
                exit::NOT_FOUND,
            ),
            (
                PullError::Platform(Platform::parse("linux").unwrap_err()),
                "platform 'linux' is not os/arch[/variant], e.g. linux/amd64 or linux/arm64/v8".into(),
                crate::exit::GPURUN_FAILED,
            ),
            (
                RegistryError::NoPlatform {
                    image: "x/y:z".into(),
                    wanted: "linux/s390x".into(),
                    available: vec![],
                }
                .into(),
                "no platform linux/s390x in x/y:z; available: none; choose one with --platform".into(),
                exit::NOT_FOUND,
            ),
        ];
        for (e, words, code) in cases {
            assert_eq!(e.to_string(), words);
            assert_eq!(e.exit_code(), code, "{words}");
        }
    }
}

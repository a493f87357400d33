//! How talking to a registry fails, each with what the user can do about it.

use std::io;
use std::path::{Path, PathBuf};

use crate::image::cache::CacheError;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{what} not found on {registry} ({detail}); check the name, tag and platform")]
    NotFound {
        what: String,
        registry: String,
        detail: String,
    },
    #[error("{registry} refused access to {image} ({detail}); log in (docker login / podman login) or set GPURUN_DOCKER_USERNAME and GPURUN_DOCKER_PASSWORD")]
    Auth {
        registry: String,
        image: String,
        detail: String,
    },
    #[error("{registry} refused the credentials {from} for {image} ({detail}); check the user name and password (or token), or log in again")]
    Refused {
        registry: String,
        image: String,
        /// Where they were found (`Found::from`).
        from: String,
        detail: String,
    },
    #[error("cannot reach {registry} ({detail}); check the network, proxy and registry name, then run the pull again (it resumes)")]
    Network { registry: String, detail: String },
    #[error("{registry} refuses more requests for now (HTTP 429, a rate limit{asked}); wait and run the pull again (it resumes), or log in for a higher limit (docker login, GPURUN_DOCKER_USERNAME/GPURUN_DOCKER_PASSWORD)")]
    RateLimited {
        registry: String,
        /// ", it asks to wait N s" once its Retry-After is known.
        asked: String,
        /// The URL that answered 429, to ask for its Retry-After.
        url: Option<String>,
    },
    #[error("image {image} is unusable: {detail}")]
    BadImage { image: String, detail: String },
    #[error("blob {digest} from {registry} does not match its digest (got {actual}); the download was discarded, run the pull again")]
    Digest {
        registry: String,
        digest: String,
        actual: String,
    },
    #[error(
        "no platform {wanted} in {image}; available: {}; choose one with --platform",
        offered(available)
    )]
    NoPlatform {
        image: String,
        wanted: String,
        available: Vec<String>,
    },
    #[error("credentials for {registry}: {detail}")]
    Credentials { registry: String, detail: String },
    #[error("credentials for {registry}: {} is not a valid auth file ({source}); fix or remove it", file.display())]
    AuthFile {
        registry: String,
        file: PathBuf,
        source: AuthFileError,
    },
    #[error("writing {path}: the disk is full; free space or set GPURUN_CACHEDIR elsewhere")]
    DiskFull { path: PathBuf },
    #[error("writing {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// What a manifest, an index or a platform name says wrong; the caller names the image.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("manifest is not valid JSON ({0})")]
    Json(#[source] serde_json::Error),
    #[error("platform '{0}' is not os/arch[/variant], e.g. linux/amd64 or linux/arm64/v8")]
    Platform(String),
}

/// What is wrong in a docker config.json or a containers auth.json.
#[derive(Debug, thiserror::Error)]
pub enum AuthFileError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("an 'auth' value is not valid base64")]
    NotBase64,
    #[error("an 'auth' value is not UTF-8")]
    NotUtf8,
    #[error("an 'auth' value is not base64 of user:password")]
    NoColon,
}

/// The platforms an image offers, in words.
fn offered(platforms: &[String]) -> String {
    match platforms {
        [] => "none".into(),
        _ => platforms.join(", "),
    }
}

/// An I/O error on `path`; a full disk is told apart, with its fix.
pub(super) fn io_err(path: &Path, source: io::Error) -> RegistryError {
    if source.raw_os_error() == Some(libc::ENOSPC) {
        RegistryError::DiskFull {
            path: path.to_path_buf(),
        }
    } else {
        RegistryError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

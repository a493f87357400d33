//! What a caller asks of a pull.

use std::path::PathBuf;

use super::error::PullError;
use crate::image::registry::Platform;

#[derive(Debug, Clone, Default)]
pub struct PullOptions {
    /// `os/arch[/variant]`; the host's when `None`.
    pub platform: Option<String>,
    /// Allow plain http to a registry that is not on loopback.
    pub insecure: bool,
    /// Print only errors.
    pub quiet: bool,
    /// Replace an existing output file.
    pub force: bool,
    /// Threads for inflating a layer and for tar2sqfs's compressors (when `None`, the CPUs this
    /// process may use: [`crate::cpus::usable`]).
    pub jobs: Option<usize>,
    /// Cache root; [`crate::store::cache_dir::cache_root`] when `None`.
    pub cache: Option<PathBuf>,
    /// The squashfs compressor (`zstd` when `None`).
    pub compression: Option<String>,
    /// Clean up and exit with [`super::exit::INTERRUPTED`] on SIGINT/SIGTERM (the CLI sets this; a
    /// library caller with its own signal handling leaves it off).
    pub handle_signals: bool,
}

pub(super) fn wanted_platform(opts: &PullOptions) -> Result<Platform, PullError> {
    match &opts.platform {
        Some(p) => Platform::parse(p).map_err(PullError::Platform),
        None => Ok(Platform::host()),
    }
}

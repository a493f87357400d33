//! What this binary is: version, git commit, compiler and target (set by build.rs).

use serde::Serialize;

/// `gpurun --version` and `gpurun version`.
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("GPURUN_GIT_COMMIT"),
    ", ",
    env!("GPURUN_RUSTC"),
    ", ",
    env!("GPURUN_TARGET"),
    ")"
);

#[derive(Debug, Serialize)]
pub struct BuildInfo {
    pub version: &'static str,
    pub commit: &'static str,
    pub rustc: &'static str,
    pub target: &'static str,
}

pub const BUILD: BuildInfo = BuildInfo {
    version: env!("CARGO_PKG_VERSION"),
    commit: env!("GPURUN_GIT_COMMIT"),
    rustc: env!("GPURUN_RUSTC"),
    target: env!("GPURUN_TARGET"),
};

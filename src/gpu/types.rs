//! What GPU support is asked for and what it decides, as plain data; where the driver's files
//! go in the container; the errors.

use std::path::PathBuf;

use serde::Serialize;

use super::{cdi, devices, driver, require};
use crate::mount::Mount;

/// gpurun's directory for the driver in the container (a tmpfs of its own).
pub const NV_DIR: &str = "/.gpurun/nvidia";

/// Where the driver's libraries appear in the container (on the loader path, after the image's).
pub const LIB_DIR: &str = "/.gpurun/nvidia/lib";

/// Where the driver's binaries appear in the container (on PATH, last).
pub const BIN_DIR: &str = "/.gpurun/nvidia/bin";

/// Where the host directories holding the libraries are bound (read-only), for the links in
/// LIB_DIR to point into.
pub const HOST_DIR: &str = "/.gpurun/nvidia/host";

/// CUDA forward-compatibility libraries in an image.
pub const COMPAT_DIR: &str = "/usr/local/cuda/compat";

/// GPU options of exec, run and shell (cli/ fills them from the command line and the config).
#[derive(Debug, Clone, Default, Serialize)]
pub struct GpuOpts {
    /// `--nv`: the NVIDIA driver and the allowed GPUs, also where `GPURUN_NV` says no.
    pub nv: bool,
    /// `--no-nv`: no GPU support, even when a driver is present.
    pub no_nv: bool,
    /// `--gpus`: indices, GPU-/MIG- UUIDs or PCI bus ids, comma-separated, or all, none.
    pub gpus: Option<String>,
    /// `--nv-caps`: driver capabilities beyond compute and utility.
    pub nv_caps: Vec<String>,
    /// `--device`: devices as the site's CDI specs define them (VENDOR/CLASS=NAME).
    pub devices: Vec<String>,
    /// Where the CDI specs are (the configuration's cdi_spec_dirs)
    pub cdi_spec_dirs: Vec<PathBuf>,
    #[serde(flatten)]
    pub driver: DriverPaths,
    /// Where facts about the driver and GPUs are kept between starts (the user's cache); none:
    /// nothing is kept.
    #[serde(skip)]
    pub kept_facts: Option<PathBuf>,
}

/// Extra ld.so.cache files or directories holding the driver's libraries, searched before
/// /usr/local/nvidia and /etc/ld.so.cache (`--nv-driver-path`, else the configuration's).
#[derive(Debug, Clone, Default, Serialize)]
pub struct DriverPaths {
    #[serde(rename = "driver_paths")]
    pub paths: Vec<PathBuf>,
}

/// A GPU in the container (for --dry-run and ps).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuDevice {
    /// Device node, the same path inside and outside.
    pub path: PathBuf,
    pub minor: u32,
    pub uuid: Option<String>,
    pub name: Option<String>,
    /// The MIG device, when one was asked for.
    pub mig_uuid: Option<String>,
}

/// Everything GPU support adds to a launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuPlan {
    pub driver_version: String,
    pub cuda_version: Option<String>,
    /// Where the GPU choice came from (`--gpus`, `CUDA_VISIBLE_DEVICES`, …, `default`).
    pub selected_by: devices::Source,
    pub mounts: Vec<Mount>,
    /// Set inside; wins over every other source.
    pub env: Vec<(String, String)>,
    pub ld_library_path_prepend: Vec<PathBuf>,
    pub ld_library_path_append: Vec<PathBuf>,
    pub path_append: Vec<PathBuf>,
    pub devices: Vec<GpuDevice>,
    /// Said once on stderr by the caller (non-fatal findings).
    pub warnings: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(transparent)]
    Device(#[from] devices::DeviceError),
    #[error(transparent)]
    Require(#[from] require::RequireError),
    #[error(transparent)]
    Driver(#[from] driver::DriverError),
    #[error(transparent)]
    Cdi(#[from] cdi::CdiError),
    #[error("{asked} asks for GPUs, but this node has no NVIDIA driver ({missing} is missing); run on a GPU node, or drop {asked}")]
    NoDriver { asked: String, missing: PathBuf },
    #[error("--gpus {gpus} and --device {device} both choose GPUs; give one of them")]
    GpusAndDevice { gpus: String, device: String },
    #[error("the NVIDIA driver {version} is present but none of its libraries (libcuda.so.{version}, libnvidia-ml.so.{version}) was found in {searched}; name their ld.so.cache or directory with --nv-driver-path")]
    NoLibraries { version: String, searched: String },
}

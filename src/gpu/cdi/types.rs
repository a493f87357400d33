//! What a spec says once read and checked, what a selection applies, and the errors.

use std::path::{Path, PathBuf};

use serde::Serialize;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CdiError {
    #[error("--device {given:?} is not a CDI device name ({why}); write VENDOR/CLASS=NAME, e.g. nvidia.com/gpu=0")]
    Name { given: String, why: String },
    #[error("CDI spec {path}: {detail}; fix or regenerate it (nvidia-ctk cdi generate), or leave its directory out of cdi_spec_dirs")]
    Spec { path: PathBuf, detail: String },
    #[error(
        "CDI spec directory {path}: {detail}; make it readable or leave it out of cdi_spec_dirs"
    )]
    Dir { path: PathBuf, detail: String },
    #[error("CDI device {device}: no spec in {dirs} has kind {kind}; generate one (nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml) or name its directory in cdi_spec_dirs / GPURUN_CDI_SPEC_DIRS")]
    UnknownKind {
        device: String,
        kind: String,
        dirs: String,
    },
    #[error("CDI device {device} is not defined in {specs}; it defines {known} (nvidia-ctk cdi list shows them)")]
    UnknownDevice {
        device: String,
        specs: String,
        known: String,
    },
    #[error("CDI device {device} is defined by both {first} and {second}; remove one of them")]
    Conflict {
        device: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error("CDI device {device}: {path} does not exist on this host; regenerate the spec (nvidia-ctk cdi generate)")]
    Missing { device: String, path: PathBuf },
    #[error("CDI device {device}: this job may not open {path} (its device cgroup or the node's mode refuses it); ask for a device of the job's allocation (gpurun gpus lists them)")]
    NotAllowed { device: String, path: PathBuf },
}

/// A device node for the container: the host's node bound at `path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceNode {
    /// Inside the container.
    pub path: PathBuf,
    pub host_path: PathBuf,
    /// The device (`VENDOR/CLASS=NAME`) or spec (`VENDOR/CLASS`) whose edits name it.
    pub from: String,
}

/// A bind mount for the container, with the spec's options (of which `ro` is applied).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CdiMount {
    pub src: PathBuf,
    pub dst: PathBuf,
    pub options: Vec<String>,
    pub from: String,
}

impl CdiMount {
    pub fn readonly(&self) -> bool {
        self.options.iter().any(|o| o == "ro")
    }
}

/// An edit gpurun does not make, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub from: String,
    pub edit: String,
    pub why: &'static str,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CDI {}: {} skipped: {}", self.from, self.edit, self.why)
    }
}

/// One container-edits block of a spec, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edits {
    pub env: Vec<(String, String)>,
    pub nodes: Vec<DeviceNode>,
    pub mounts: Vec<CdiMount>,
    pub skipped: Vec<Skipped>,
}

impl Edits {
    pub(super) fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.nodes.is_empty()
            && self.mounts.is_empty()
            && self.skipped.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub name: String,
    pub edits: Edits,
}

/// A valid spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub path: PathBuf,
    /// The index of its directory: a later directory overrides an earlier one.
    pub priority: usize,
    /// `VENDOR/CLASS`.
    pub kind: String,
    pub devices: Vec<Device>,
    /// Applied once when any of its devices is.
    pub edits: Edits,
}

/// A device asked for, and the spec that defines it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chosen {
    pub name: String,
    pub spec: PathBuf,
}

/// What the devices asked for add to the container, in the order the CDI library applies it: a
/// later node or mount at the same place replaces an earlier one; mounts go parents first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Applied {
    pub devices: Vec<Chosen>,
    pub nodes: Vec<DeviceNode>,
    pub mounts: Vec<CdiMount>,
    pub env: Vec<(String, String)>,
    pub skipped: Vec<Skipped>,
}

impl Applied {
    /// Do the devices bring NVIDIA GPUs (a /dev/nvidiaN node)? Then they, not gpurun's own
    /// selection, decide which GPUs the container has.
    pub fn gives_gpus(&self) -> bool {
        self.nodes.iter().any(|n| {
            n.path.parent() == Some(Path::new("/dev"))
                && n.path
                    .file_name()
                    .and_then(|f| crate::gpu::devices::gpu_minor_of(&f.to_string_lossy()))
                    .is_some()
        })
    }
}

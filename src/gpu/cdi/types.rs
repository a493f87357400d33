//! What a spec says once read and checked, what a selection applies, and the errors.

use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// The spec versions gpurun reads, oldest first: 0.3.0 is the first of today's format, and
/// nvidia-ctk writes the lowest one its spec needs (0.3.0 to 0.8.0). 0.8.0 and 1.0.0 changed
/// only the reference library, not the format.
pub(super) const VERSIONS: [&str; 7] = [
    "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0",
];

/// OCI hook names a spec may use.
pub(super) const HOOK_NAMES: [&str; 6] = [
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    #[error("--device {given:?} is not a CDI device name ({why}); write VENDOR/CLASS=NAME, e.g. nvidia.com/gpu=0")]
    Name { given: String, why: SpecError },
    #[error("CDI spec {path}: {source}; fix or regenerate it (nvidia-ctk cdi generate), or leave its directory out of cdi_spec_dirs")]
    Spec { path: PathBuf, source: SpecError },
    #[error("CDI spec {path}: {source}; fix or regenerate it (nvidia-ctk cdi generate), or leave its directory out of cdi_spec_dirs")]
    Read { path: PathBuf, source: io::Error },
    #[error(
        "CDI spec directory {path}: {source}; make it readable or leave it out of cdi_spec_dirs"
    )]
    Dir { path: PathBuf, source: io::Error },
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

/// What a spec file, or a device name, breaks of the CDI rules: the detail of
/// [`CdiError::Spec`] and [`CdiError::Name`].
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// A YAML parser's message can span several lines: told as one.
    #[error("{}", one_line(&.0.to_string()))]
    Yaml(#[source] Box<serde_saphyr::Error>),
    #[error("kind {kind:?} is not VENDOR/CLASS (e.g. nvidia.com/gpu)")]
    NotKind { kind: String },
    #[error("{what} {word:?} must be letters, digits, '_', '-' or '.', starting with a letter and ending with a letter or digit")]
    VendorOrClass { what: &'static str, word: String },
    #[error("{what} {word:?} is longer than {max} characters")]
    TooLong {
        what: &'static str,
        word: String,
        max: usize,
    },
    #[error("device name {name:?} must be letters, digits, '_', '-', '.' or ':', starting and ending with a letter or digit")]
    DeviceName { name: String },
    #[error("no '='")]
    NoEquals,
    #[error(
        "cdiVersion {declared:?} is not one gpurun reads ({} to {})",
        VERSIONS[0],
        VERSIONS[VERSIONS.len() - 1]
    )]
    Version { declared: String },
    #[error(
        "it uses {feature}, which needs cdiVersion {needed} or later, but declares {declared}"
    )]
    TooOld {
        feature: &'static str,
        needed: &'static str,
        declared: String,
    },
    #[error("it defines no devices")]
    NoDevices,
    #[error("device {name:?} is defined twice")]
    Twice { name: String },
    #[error("device {name:?}: {source}")]
    Device {
        name: String,
        source: Box<SpecError>,
    },
    #[error("device {name:?} has no containerEdits")]
    NoEdits { name: String },
    #[error("{what} {entry:?} is not NAME=VALUE")]
    NotEnv { what: &'static str, entry: String },
    #[error("{what} {path:?} is not an absolute path")]
    NotAbsolute { what: &'static str, path: String },
    #[error("device {path:?} has type {kind:?}; use b, c, u or p")]
    NodeType { path: String, kind: String },
    #[error("device {path:?} has permissions {permissions:?}; use r, w and m, or none")]
    NodePermissions { path: String, permissions: String },
    #[error("mount at {container_path:?} has no hostPath")]
    NoHostPath { container_path: String },
    #[error("hook name {name:?} is not one of {}", HOOK_NAMES.join(", "))]
    HookName { name: String },
    #[error("hook {path:?} has a timeout that is not positive")]
    HookTimeout { path: String },
}

/// One line of a parser's message (YAML errors can span several).
fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
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

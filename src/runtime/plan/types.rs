//! The plan and what it is made from, as plain data: the request, the views of the host and
//! the image, the GPU module's extras, and the errors.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::gpu::cdi::Applied;
use crate::gpu::GpuPlan;
use crate::image::meta::ImageMeta;
use crate::mount::{Mount, MountSource, OverlayDriver};
use crate::runtime::env::EnvError;
use crate::runtime::mount_spec::SpecError;

impl Mount {
    pub(super) fn new(dst: impl Into<PathBuf>, source: MountSource) -> Mount {
        Mount {
            dst: dst.into(),
            source,
            readonly: false,
            optional: false,
            flags: Default::default(),
        }
    }

    pub(super) fn ro(mut self) -> Mount {
        self.readonly = true;
        self
    }
}

/// One id of the caller as seen inside the container, and its host value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IdMap {
    pub inside: u32,
    pub outside: u32,
}

/// What the container's root filesystem is made from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "path", rename_all = "snake_case")]
pub enum RootSource {
    /// A squashfs file served by gpurun's FUSE server.
    Squashfs(PathBuf),
    /// A directory tree (a sandbox, or an extracted image when FUSE is unavailable).
    Dir(PathBuf),
}

/// Where the root's changes go.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Changes {
    /// Nowhere: the root is read-only.
    #[default]
    None,
    /// A tmpfs overlay, gone when the container ends (`--writable-tmpfs`).
    Tmpfs,
    /// The directory image itself (`--writable`).
    InPlace,
    /// A persistent overlay directory (`--overlay DIR[:ro]`): DIR/upper over the image, its
    /// work directory DIR/work; read-only, DIR/upper is one more lower layer.
    Overlay { dir: PathBuf, readonly: bool },
}

impl Changes {
    pub fn writable(&self) -> bool {
        !matches!(
            self,
            Changes::None | Changes::Overlay { readonly: true, .. }
        )
    }
}

/// The whole launch, as data. `--dry-run` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub root: RootSource,
    pub uid: IdMap,
    pub gid: IdMap,
    /// Applied in order, after the root is in place.
    pub mounts: Vec<Mount>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// `cwd` was asked for (--pwd): where the container lacks it, the start fails, as pyxis's
    /// --container-workdir does, rather than running somewhere else.
    pub cwd_asked: bool,
    pub argv: Vec<String>,
    /// Where the root's changes go (`Changes::None`: it is read-only).
    pub changes: Changes,
    /// What makes the root's overlay, where it has one.
    #[serde(skip_serializing_if = "OverlayDriver::is_auto")]
    pub overlay_driver: OverlayDriver,
    /// A PID namespace of the container's own (`--pid`, `--containall`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub own_pid: bool,
    /// An IPC namespace of the container's own (`--ipc`, `--containall`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub own_ipc: bool,
    /// A network namespace of the container's own, with only loopback (`--net`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub own_net: bool,
    /// chown and id changes succeed and do nothing (`--fakeroot`: package installs).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fake_ids: bool,
    /// The container's host name, in a UTS namespace of its own (`--hostname`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// What the CDI devices asked for contributed (their nodes, mounts and env are in the lists
    /// above too), and the edits gpurun skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cdi: Option<Applied>,
    /// The holder's entrypoint runs with the image's environment, the `GPURUNENV_` names and
    /// gpurun's own, not the host's (as pyxis's through enroot); what it changes is applied to
    /// `env` (`env::after_entrypoint`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry_env: Option<Vec<(String, String)>>,
}

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Exec(Vec<String>),
    /// Image entrypoint + (these args, or else the image cmd).
    Run(Vec<String>),
    /// An interactive shell (Some: the user's choice) and the arguments it is given.
    Shell(Option<String>, Vec<String>),
    /// Prepare the container and run nothing (the Slurm holder); with `entrypoint`, the
    /// image's entrypoint runs first, once, and stops in front of [`HOLD_STOP`]. With
    /// `image_workdir` and no --pwd, the container starts in the image's WorkingDir where it
    /// has one (pyxis's default; NGC images: /workspace).
    Hold {
        entrypoint: bool,
        image_workdir: bool,
    },
}

/// What the holder gives the image's entrypoint as its command, as pyxis does: a shell that
/// stops itself, so that the environment the entrypoint exec'd it with can be read.
pub const HOLD_STOP: [&str; 3] = ["sh", "-c", "kill -STOP $$"];

/// The user's request: the command line's options with the configuration's defaults, complete
/// once the command line is read (cli/launch.rs makes it; `start` passes it on unchanged).
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `GPURUN_BIND` and `--bind`.
    pub binds: Vec<String>,
    /// `hold --bind-json`: the plugin's binds, parsed already (their paths may hold ':' or ',').
    pub parsed_binds: Vec<mount_grammar::Bind>,
    /// `--tmpfs DST[:OPTS]`.
    pub tmpfs: Vec<String>,
    /// `hold --tmpfs-json`: the plugin's tmpfs, parsed already.
    pub parsed_tmpfs: Vec<mount_grammar::handover::Tmpfs>,
    /// The config files' binds (Apptainer's "bind path" entries: `--no-mount bind-paths`).
    pub site_binds: Vec<String>,
    pub contain: bool,
    pub no_home: bool,
    /// `--home SRC[:DST]`.
    pub home: Option<String>,
    /// `hold --home-json`: the job's home, parsed already (in place of `home`).
    pub parsed_home: Option<mount_grammar::handover::Home>,
    /// `--no-mount` names.
    pub no_mount: Vec<String>,
    pub hostname: Option<String>,
    pub pwd: Option<PathBuf>,
    pub cleanenv: bool,
    pub env: Vec<String>,
    pub writable_tmpfs: bool,
    /// `--read-only`: no changes, whatever the site's default.
    pub read_only: bool,
    /// The site's `writable_root`: a root with a tmpfs overlay unless the request says
    /// otherwise.
    pub writable_by_default: bool,
    /// `--writable`: changes go to the directory image itself.
    pub writable: bool,
    /// `--overlay DIR[:ro]`.
    pub overlay: Option<String>,
    /// The site's `overlay_driver`.
    pub overlay_driver: OverlayDriver,
    /// `--pid` (or `--containall`).
    pub own_pid: bool,
    /// `--ipc` (or `--containall`).
    pub own_ipc: bool,
    /// `--net`.
    pub net: bool,
    /// `--network TYPE`: only `none` (implies `--net`).
    pub network: Option<String>,
    pub fakeroot: bool,
}

/// A top-level entry of the host's /dev that the caller could use (see `start::dev_entries`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DevEntry {
    Symlink { name: String, target: PathBuf },
    Other { name: String },
}

impl DevEntry {
    pub(super) fn name(&self) -> &str {
        match self {
            DevEntry::Symlink { name, .. } | DevEntry::Other { name } => name,
        }
    }
}

/// What the planner needs to know about the host, gathered once by `start`, with what the start
/// read and made there for the request.
pub struct HostView<'a> {
    pub uid: u32,
    pub gid: u32,
    pub user: String,
    pub group: String,
    pub home: PathBuf,
    pub shell: Option<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    /// Top-level entries of /dev (used only when /dev must be filtered).
    pub dev: Vec<DevEntry>,
    /// The caller's terminal (the device of its first standard stream that is one).
    pub tty: Option<PathBuf>,
    /// The `--env-file` files' variables, in order.
    pub env_files: Vec<(String, String)>,
    /// `--save`: the overlay directory made to collect the changes to save.
    pub save_changes: Option<PathBuf>,
    pub exists: &'a dyn Fn(&Path) -> HostPath,
}

/// What the host has at a path, as the caller can see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPath {
    Exists,
    Missing,
    /// A directory on the way cannot be searched by the caller.
    Denied,
}

impl HostPath {
    /// What the caller sees at `p` on this host.
    pub fn of(p: &Path) -> HostPath {
        match std::fs::symlink_metadata(p).and_then(|_| std::fs::metadata(p)) {
            Ok(_) => HostPath::Exists,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => HostPath::Denied,
            Err(_) => HostPath::Missing,
        }
    }
}

/// What the planner needs to know about the image.
pub struct ImageView<'a> {
    pub root: RootSource,
    pub meta: ImageMeta,
    pub passwd: Option<String>,
    pub group: Option<String>,
    pub exists: &'a dyn Fn(&str) -> bool,
}

/// Extra mounts and environment from the GPU module.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    pub mounts: Vec<Mount>,
    pub env: Vec<(String, String)>,
    pub ld_library_path_prepend: Vec<PathBuf>,
    pub ld_library_path_append: Vec<PathBuf>,
    pub path_append: Vec<PathBuf>,
    /// Hide the host's /dev/nvidia* nodes (only those in `mounts` appear).
    pub filter_nvidia_dev: bool,
    /// Host variables not passed in: they describe the host's GPUs where CDI devices bring the
    /// container's.
    pub host_env_drop: Vec<String>,
    /// The CDI devices' contribution, for the plan.
    pub cdi: Option<Applied>,
}

impl Extras {
    /// What the launch plan takes from GPU support.
    pub fn from_gpu(g: GpuPlan) -> Extras {
        Extras {
            mounts: g.mounts,
            env: g.env,
            ld_library_path_prepend: g.ld_library_path_prepend,
            ld_library_path_append: g.ld_library_path_append,
            path_append: g.path_append,
            filter_nvidia_dev: true,
            ..Default::default()
        }
    }

    /// Add the CDI devices' edits (`gpu::cdi`): their device nodes and mounts as binds, after
    /// GPU support's and in place of any of those at the same destination, and their environment,
    /// set as GPU support's is. Where they bring GPUs, the host's CUDA_VISIBLE_DEVICES and
    /// NVIDIA_VISIBLE_DEVICES, which count the host's GPUs, are not passed in: inside, every GPU
    /// node is one the devices gave.
    pub fn add_cdi(&mut self, a: Applied) {
        let binds: Vec<Mount> = (a.nodes.iter())
            .map(|n| Mount::bind(&n.host_path, &n.path, false))
            .chain(
                a.mounts
                    .iter()
                    .map(|m| Mount::bind(&m.src, &m.dst, m.readonly())),
            )
            .collect();
        self.mounts
            .retain(|m| !binds.iter().any(|b| b.dst == m.dst));
        self.mounts.extend(binds);
        self.env.retain(|(k, _)| !a.env.iter().any(|(n, _)| n == k));
        self.env.extend(a.env.iter().cloned());
        if a.gives_gpus() {
            for k in ["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"] {
                self.host_env_drop.push(k.to_string());
            }
        }
        // A /dev of gpurun's own, where the nodes' mount points can be made.
        self.filter_nvidia_dev |= !a.nodes.is_empty();
        self.cdi = Some(a);
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("--bind: source path does not exist: {0}; create it or fix the path")]
    BindSourceMissing(PathBuf),
    #[error("--bind source {0}: permission denied; you need search access to every directory on its way")]
    BindSourceDenied(PathBuf),
    #[error("--pwd {0:?} must be an absolute path inside the container")]
    RelativePwd(PathBuf),
    #[error("--home {0:?}: {1}")]
    Home(String, &'static str),
    #[error("--home source {0} does not exist; create it or fix the path")]
    HomeMissing(PathBuf),
    #[error("--no-mount {0}: {1}")]
    NoMount(String, String),
    #[error("--hostname {0:?}: use 1 to 64 letters, digits, '-' and '.'")]
    Hostname(String),
    #[error("the image has no entrypoint, no command and no /bin/sh; give a command: gpurun exec IMAGE CMD")]
    NothingToRun,
    #[error("image {0}: not a root filesystem (it has no /bin, /usr, /lib or /etc, nor the command); give the directory that holds bin/, usr/ and etc/, or a .sqsh or .sif file")]
    NotARoot(PathBuf),
    #[error("--writable needs a sandbox directory image; {0} is read-only: use --writable-tmpfs (changes vanish) or --overlay DIR (changes kept in DIR)")]
    NotWritable(PathBuf),
    #[error("--writable, --writable-tmpfs and --overlay each say where changes go: give one")]
    Changes,
    #[error("--read-only keeps the root as the image has it: leave out --writable, --writable-tmpfs, --overlay (or add :ro to it) and --save")]
    ReadOnly,
    #[error("--network {0}: gpurun has only none (a network namespace of the container's own, loopback only); leave out --net and --network for the host's network")]
    Network(String),
    #[error("--save keeps the changes of a container whose root is the image's: leave out --writable and --overlay")]
    SaveWith,
    #[error("--overlay {0:?}: {1}")]
    Overlay(String, &'static str),
    #[error("--overlay {0}: no such directory; create it (mkdir -p) or fix the path")]
    OverlayMissing(PathBuf),
    #[error(transparent)]
    Env(#[from] EnvError),
}

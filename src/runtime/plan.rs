//! The launch plan: everything decided before touching the system, as plain data.
//!
//! `plan()` is a pure function of the request and a snapshot of the host (`HostView`), so every rule
//! (which binds, which /dev entries, which env, which uid map) is tested with tables, no root needed.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::env::{compose, EnvError, EnvInputs};
use super::mount_spec::{normalize, parse_bind, parse_tmpfs, SpecError};
use crate::gpu::cdi::Applied;
use crate::gpu::GpuPlan;
use crate::image::meta::ImageMeta;
use crate::mount::{Mount, MountSource, OverlayDriver};

impl Mount {
    fn new(dst: impl Into<PathBuf>, source: MountSource) -> Mount {
        Mount {
            dst: dst.into(),
            source,
            readonly: false,
            optional: false,
            flags: Default::default(),
        }
    }

    fn ro(mut self) -> Mount {
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

/// The user's request (from the command line).
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `GPURUN_BIND` and `--bind`.
    pub binds: Vec<String>,
    /// `--tmpfs DST[:OPTS]`.
    pub tmpfs: Vec<String>,
    /// The config files' binds (Apptainer's "bind path" entries: `--no-mount bind-paths`).
    pub site_binds: Vec<String>,
    pub contain: bool,
    pub no_home: bool,
    /// `--home SRC[:DST]`.
    pub home: Option<String>,
    /// `--no-mount` names.
    pub no_mount: Vec<String>,
    pub hostname: Option<String>,
    pub pwd: Option<PathBuf>,
    pub cleanenv: bool,
    pub env: Vec<String>,
    /// Parsed --env-file contents.
    pub env_files: Vec<(String, String)>,
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
    /// `--save`: the overlay directory that collects the changes to save.
    pub save_changes: Option<PathBuf>,
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
    fn name(&self) -> &str {
        match self {
            DevEntry::Symlink { name, .. } | DevEntry::Other { name } => name,
        }
    }
}

/// What the planner needs to know about the host, gathered once by `launch`.
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

/// Where the root's changes go, from `--writable`, `--writable-tmpfs` and `--overlay`.
fn changes(req: &Request, host: &HostView, root: &RootSource) -> Result<Changes, PlanError> {
    let given = [req.writable, req.writable_tmpfs, req.overlay.is_some()];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err(PlanError::Changes);
    }
    let overlay_ro = req.overlay.as_deref().is_some_and(|o| o.ends_with(":ro"));
    let writes = req.writable || req.writable_tmpfs || req.save_changes.is_some();
    if req.read_only && (writes || req.overlay.is_some() && !overlay_ro) {
        return Err(PlanError::ReadOnly);
    }
    if let Some(dir) = &req.save_changes {
        if req.writable || req.overlay.is_some() {
            return Err(PlanError::SaveWith);
        }
        let dir = dir.clone();
        return Ok(Changes::Overlay {
            dir,
            readonly: false,
        });
    }
    if req.writable_tmpfs {
        return Ok(Changes::Tmpfs);
    }
    if req.writable {
        return match root {
            RootSource::Dir(_) => Ok(Changes::InPlace),
            RootSource::Squashfs(p) => Err(PlanError::NotWritable(p.clone())),
        };
    }
    let Some(spec) = &req.overlay else {
        return Ok(match req.writable_by_default && !req.read_only {
            true => Changes::Tmpfs,
            false => Changes::None,
        });
    };
    let (dir, readonly) = match spec.rsplit_once(':') {
        Some((d, "ro")) => (d, true),
        Some((d, "rw")) => (d, false),
        Some(_) => return Err(PlanError::Overlay(spec.clone(), "use DIR or DIR:ro")),
        None => (spec.as_str(), false),
    };
    if dir.is_empty() {
        return Err(PlanError::Overlay(
            spec.clone(),
            "give a directory: DIR or DIR:ro",
        ));
    }
    let dir = host.cwd.join(dir);
    if (host.exists)(&dir) != HostPath::Exists {
        return Err(PlanError::OverlayMissing(dir));
    }
    Ok(Changes::Overlay { dir, readonly })
}

/// With a PID namespace of its own, the container gets a /proc of it; with an IPC namespace of
/// its own, a /dev/shm of its own instead of the host's and, where /dev has a place for it (the
/// host's has one, or /dev is gpurun's), its own /dev/mqueue (as enroot's and docker's).
fn own_pid_ipc(req: &Request, own_dev: bool, host: &HostView, mounts: &mut Vec<Mount>) {
    if req.own_pid {
        for m in mounts.iter_mut().filter(|m| m.dst == Path::new("/proc")) {
            m.source = MountSource::Proc;
        }
    }
    if req.own_ipc {
        mounts.push(Mount::new("/dev/shm", MountSource::tmpfs(0o1777)));
        if own_dev || (host.exists)(Path::new("/dev/mqueue")) == HostPath::Exists {
            mounts.push(Mount::new("/dev/mqueue", MountSource::Mqueue));
        }
    }
}

/// Host directories that are never bound as the working directory: binding them would hide the
/// image's own copy (Apptainer skips them too).
const SYSTEM_DIRS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/root", "/run",
    "/sbin", "/sys", "/usr", "/var", "/opt", "/srv",
];

fn is_system_dir(p: &Path) -> bool {
    SYSTEM_DIRS.iter().any(|d| Path::new(d) == p)
        || ["/usr", "/etc", "/proc", "/sys", "/dev", "/boot"]
            .iter()
            .any(|d| p.starts_with(d))
}

/// Parse `--home SRC[:DST]` (DST: SRC): the source on the host, the home directory inside.
pub fn parse_home(spec: &str, cwd: &Path) -> Result<(PathBuf, PathBuf), PlanError> {
    let err = |why| PlanError::Home(spec.to_string(), why);
    let (src, dst) = match spec.split(':').collect::<Vec<_>>().as_slice() {
        [s] => (*s, None),
        [s, d] => (*s, Some(*d)),
        _ => return Err(err("too many ':'; use SRC[:DST]")),
    };
    if src.is_empty() || dst == Some("") {
        return Err(err("empty path; use SRC[:DST]"));
    }
    let src = normalize(&cwd.join(src));
    let dst = match dst {
        Some(d) if !d.starts_with('/') => {
            return Err(err("DST must be an absolute path inside the container"))
        }
        Some(d) => normalize(Path::new(d)),
        None => src.clone(),
    };
    Ok((src, dst))
}

/// The default mounts `--no-mount` leaves out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Skips {
    pub home: bool,
    pub cwd: bool,
    pub tmp: bool,
    /// The config files' binds.
    pub bind_paths: bool,
    /// Destinations: of config-file binds, or of the host files bound by default.
    pub dsts: Vec<PathBuf>,
}

/// `--no-mount`'s names, as Apptainer's (`mount home`, `mount tmp`… of apptainer.conf).
pub const NO_MOUNT_NAMES: &[&str] = &["home", "cwd", "tmp", "hostfs", "bind-paths"];

/// The host files gpurun copies in, which `--no-mount DST` may leave out.
const HOST_FILES: [&str; 3] = ["/etc/hosts", "/etc/resolv.conf", "/etc/localtime"];

/// Parse `--no-mount` (comma lists allowed).
pub fn parse_no_mount(names: &[String]) -> Result<Skips, PlanError> {
    let mut s = Skips::default();
    for n in names.iter().flat_map(|n| n.split(',')).map(str::trim) {
        match n {
            "" => {}
            "home" => s.home = true,
            "cwd" => s.cwd = true,
            "tmp" => s.tmp = true,
            // gpurun never binds the host's file systems (Apptainer's "mount hostfs").
            "hostfs" => {}
            "bind-paths" => s.bind_paths = true,
            "proc" | "sys" | "dev" | "devpts" => {
                let why = "gpurun always mounts /proc, /sys and /dev: the container needs them";
                return Err(PlanError::NoMount(n.into(), why.into()));
            }
            p if normalize(Path::new(p)) == Path::new("/tmp") => s.tmp = true,
            p if p.starts_with('/') => s.dsts.push(normalize(Path::new(p))),
            _ => {
                let why = format!(
                    "unknown name; use {}, or the destination of a config-file bind or of {}",
                    NO_MOUNT_NAMES.join(", "),
                    HOST_FILES.join(", ")
                );
                return Err(PlanError::NoMount(n.into(), why));
            }
        }
    }
    Ok(s)
}

/// A host name the kernel and resolvers take: 1 to 64 letters, digits, '-' and '.'.
fn valid_hostname(h: &str) -> bool {
    (1..=64).contains(&h.len())
        && !h.starts_with('-')
        && h.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
}

/// Whether a passwd or group text has an entry of `id`.
fn has_id(text: &str, id: u32) -> bool {
    text.lines()
        .any(|l| l.split(':').nth(2).and_then(|u| u.parse::<u32>().ok()) == Some(id))
}

fn passwd_with(image: Option<&str>, line: &str, id: u32) -> String {
    let mut text = image.unwrap_or("").to_string();
    if !has_id(&text, id) {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// The command line to run.
fn argv_for(action: &Action, image: &ImageView, host: &HostView) -> Result<Vec<String>, PlanError> {
    let sh = || -> Result<String, PlanError> {
        if (image.exists)("/bin/sh") {
            Ok("/bin/sh".into())
        } else {
            Err(PlanError::NothingToRun)
        }
    };
    Ok(match action {
        Action::Exec(argv) => argv.clone(),
        Action::Hold { entrypoint, .. } if *entrypoint && !image.meta.entrypoint.is_empty() => {
            let stop = HOLD_STOP.iter().map(|a| a.to_string());
            image.meta.entrypoint.iter().cloned().chain(stop).collect()
        }
        Action::Hold { .. } => Vec::new(),
        Action::Run(args) => {
            let mut argv = image.meta.entrypoint.clone();
            argv.extend(if args.is_empty() {
                image.meta.cmd.clone()
            } else {
                args.clone()
            });
            if argv.is_empty() {
                argv.push(sh()?);
            }
            argv
        }
        Action::Shell(choice, args) => {
            let shell = match (choice, &host.shell) {
                (Some(s), _) => s.clone(),
                (None, Some(s)) if (image.exists)(s) => s.clone(),
                _ => sh()?,
            };
            std::iter::once(shell).chain(args.iter().cloned()).collect()
        }
    })
}

/// The top directories of a root filesystem; a directory image with none of them is not one.
const ROOT_DIRS: &[&str] = &["/bin", "/usr", "/sbin", "/lib", "/etc"];

/// Is a directory image a root filesystem? Either it has one of `ROOT_DIRS`, or what runs is
/// there (a static program in a bare directory), in the image or in a mount.
fn root_like(
    image: &ImageView,
    argv: Option<&[String]>,
    env: &[(String, String)],
    mounts: &[Mount],
) -> bool {
    if ROOT_DIRS.iter().any(|d| (image.exists)(d)) {
        return true;
    }
    let Some(name) = argv.and_then(|a| a.first()) else {
        return false;
    };
    let dirs = super::env::path_dirs(env);
    super::env::command_candidates(name, &dirs)
        .iter()
        .filter(|c| c.is_absolute())
        .any(|c| {
            (image.exists)(&c.to_string_lossy())
                || mounts
                    .iter()
                    .any(|m| m.dst != Path::new("/") && c.starts_with(&m.dst))
        })
}

/// Build the launch plan. Pure: everything about the host and the image comes in as data.
pub fn plan(
    req: &Request,
    action: &Action,
    host: &HostView,
    image: &ImageView,
    extras: &Extras,
) -> Result<Plan, PlanError> {
    let mut mounts = base_mounts(req, host, extras);
    let mut skips = parse_no_mount(&req.no_mount)?;
    check_namespaces(req)?;
    let changes = changes(req, host, &image.root)?;
    tmp_and_host_files(req, &skips, &changes, &mut mounts);
    let (uid, gid, home) = user_and_home(req, host, image, &mut skips, &changes, &mut mounts)?;
    apt_sandbox(req, image, &mut mounts);
    binds(req, host, &skips, &mut mounts)?;
    pmix_dir(host, &mut mounts);
    let cwd = working_dir(req, action, host, image, &skips, &mut mounts)?;

    mounts.extend(extras.mounts.iter().cloned());

    let forced = forced_env(req, action, host, image, extras, &home);
    let inputs = EnvInputs {
        host: &host.env,
        host_drop: &extras.host_env_drop,
        cleanenv: req.cleanenv,
        image: &image.meta.env,
        files: &req.env_files,
        cli: &req.env,
        forced: &forced,
        ld_library_path_prepend: &extras.ld_library_path_prepend,
        ld_library_path_append: &extras.ld_library_path_append,
        path_append: &extras.path_append,
    };
    let env = compose(&inputs)?;
    let entry_env = match action {
        Action::Hold {
            entrypoint: true, ..
        } if !image.meta.entrypoint.is_empty() => Some(compose(&EnvInputs {
            cleanenv: true,
            ..inputs
        })?),
        _ => None,
    };

    let argv = argv_for(action, image, host);
    if let RootSource::Dir(d) = &image.root {
        if !root_like(image, argv.as_deref().ok(), &env, &mounts) {
            return Err(PlanError::NotARoot(d.clone()));
        }
    }
    Ok(Plan {
        root: image.root.clone(),
        uid: IdMap {
            inside: uid,
            outside: host.uid,
        },
        gid: IdMap {
            inside: gid,
            outside: host.gid,
        },
        mounts,
        env,
        cwd,
        cwd_asked: req.pwd.is_some(),
        argv: argv?,
        changes,
        overlay_driver: req.overlay_driver,
        own_pid: req.own_pid,
        own_ipc: req.own_ipc,
        own_net: req.net || req.network.is_some(),
        fake_ids: req.fakeroot,
        hostname: req.hostname.clone(),
        cdi: extras.cdi.clone(),
        entry_env,
    })
}

/// The namespaces' names: a host name the kernel and resolvers take, and a network type
/// gpurun has.
fn check_namespaces(req: &Request) -> Result<(), PlanError> {
    if let Some(h) = req.hostname.as_deref().filter(|h| !valid_hostname(h)) {
        return Err(PlanError::Hostname(h.to_string()));
    }
    match req.network.as_deref() {
        None | Some("none") => Ok(()),
        Some(other) => Err(PlanError::Network(other.to_string())),
    }
}

/// /proc, /sys and /dev (only its non-NVIDIA entries where the GPU plan filters them, and a
/// devpts of its own), and a PID namespace's own /proc, an IPC namespace's own /dev/shm.
fn base_mounts(req: &Request, host: &HostView, extras: &Extras) -> Vec<Mount> {
    let mut mounts = vec![
        Mount::bind("/proc", "/proc", false),
        Mount::bind("/sys", "/sys", false),
    ];
    if extras.filter_nvidia_dev {
        mounts.push(Mount::new("/dev", MountSource::tmpfs(0o755)));
        // The host's /dev/ptmx opens ptys of the devpts beside it only: a pty needs both.
        mounts.push(Mount::new("/dev/pts", MountSource::Devpts));
        let ptmx = MountSource::Symlink {
            target: "pts/ptmx".into(),
        };
        mounts.push(Mount::new("/dev/ptmx", ptmx));
        // The caller's pty is not in that devpts: bound at /dev/console, as Apptainer does, so
        // that ttyname() finds it by its device (tty, GPG_TTY, password prompts).
        if let Some(tty) = &host.tty {
            mounts.push(Mount::bind(tty, "/dev/console", false).optional());
        }
        let taken = |n: &str| matches!(n, "pts" | "ptmx") || (n == "console" && host.tty.is_some());
        for e in host.dev.iter().filter(|e| !taken(e.name())) {
            match e {
                DevEntry::Symlink { name, target } => mounts.push(Mount::new(
                    Path::new("/dev").join(name),
                    MountSource::Symlink {
                        target: target.clone(),
                    },
                )),
                DevEntry::Other { name } if !name.starts_with("nvidia") => {
                    let p = Path::new("/dev").join(name);
                    mounts.push(Mount::bind(&p, &p, false).optional());
                }
                DevEntry::Other { .. } => {}
            }
        }
    } else {
        mounts.push(Mount::bind("/dev", "/dev", false));
    }
    own_pid_ipc(req, extras.filter_nvidia_dev, host, &mut mounts);
    mounts
}

/// /tmp and /var/tmp (the host's, or fresh ones with --contain), and the host files: bound
/// read-only, or copied into a writable root whose changes are gpurun's (tmpfs) or the
/// container's (--overlay), where packages may replace them (enroot copies them too).
fn tmp_and_host_files(req: &Request, skips: &Skips, changes: &Changes, mounts: &mut Vec<Mount>) {
    match (skips.tmp, req.contain) {
        (true, _) => {}
        (false, true) => {
            mounts.push(Mount::new("/tmp", MountSource::tmpfs(0o1777)));
            mounts.push(Mount::new("/var/tmp", MountSource::tmpfs(0o1777)));
        }
        (false, false) => {
            mounts.push(Mount::bind("/tmp", "/tmp", false));
            mounts.push(Mount::bind("/var/tmp", "/var/tmp", false).optional());
        }
    }
    // not into what --save keeps: the host's files are not the image's
    let copied = req.save_changes.is_none()
        && matches!(
            changes,
            Changes::Tmpfs
                | Changes::Overlay {
                    readonly: false,
                    ..
                }
        );
    for f in HOST_FILES
        .iter()
        .filter(|f| !skips.dsts.iter().any(|d| d == Path::new(f)))
    {
        mounts.push(match copied {
            true => Mount::new(f, MountSource::HostCopy { src: f.into() }).optional(),
            false => Mount::bind(f, f, true).optional(),
        });
    }
}

/// The ids inside, the home directory (bound; an empty tmpfs when contained) and /etc/passwd
/// and /etc/group naming the user.
fn user_and_home(
    req: &Request,
    host: &HostView,
    image: &ImageView,
    skips: &mut Skips,
    changes: &Changes,
    mounts: &mut Vec<Mount>,
) -> Result<(u32, u32, PathBuf), PlanError> {
    let (uid, gid) = match req.fakeroot {
        true => (0, 0),
        false => (host.uid, host.gid),
    };
    // --home is bound even with --contain, as in Apptainer; --no-home wins over it.
    let (home_src, home, custom) = match &req.home {
        Some(spec) => {
            let (src, dst) = parse_home(spec, &host.cwd)?;
            (src, dst, true)
        }
        None if req.fakeroot => (host.home.clone(), PathBuf::from("/root"), false),
        None => (host.home.clone(), host.home.clone(), false),
    };
    // the home's destination names it, as `home` does (pyxis's `umount:/root`)
    if skips.dsts.contains(&home) {
        skips.dsts.retain(|d| *d != home);
        skips.home = true;
    }
    if !req.no_home && !skips.home {
        if custom || !req.contain {
            if custom && (host.exists)(&home_src) != HostPath::Exists {
                return Err(PlanError::HomeMissing(home_src));
            }
            mounts.push(Mount::bind(&home_src, &home, false));
        } else {
            // contained: an empty home of the container's own, as Apptainer's, so $HOME exists
            mounts.push(Mount::new(&home, MountSource::tmpfs(0o700)));
        }
    }
    let passwd_line = format!(
        "{}:x:{}:{}:{}:{}:{}",
        host.user,
        uid,
        gid,
        host.user,
        home.display(),
        host.shell
            .as_deref()
            .filter(|s| (image.exists)(s))
            .unwrap_or("/bin/sh")
    );
    let (passwd_line, group_line) = match req.fakeroot {
        true => ("root:x:0:0:root:/root:/bin/sh".into(), "root:x:0:".into()),
        false => (passwd_line, format!("{}:x:{gid}:", host.group)),
    };
    let passwd = id_file(
        "/etc/passwd",
        image.passwd.as_deref(),
        &passwd_line,
        uid,
        changes,
    );
    let group = id_file(
        "/etc/group",
        image.group.as_deref(),
        &group_line,
        gid,
        changes,
    );
    mounts.extend(passwd.into_iter().chain(group));
    Ok((uid, gid, home))
}

/// /etc/passwd or /etc/group with the user's entry (`line`, of `id`). In a writable root whose
/// file has the entry, that file itself: a package's postinst may change it (groupadd and
/// useradd replace it by rename, which a mount refuses). Else the image's text with the entry
/// added: in a root whose changes vanish (tmpfs), written into it; else bound read-only, as the
/// changes of --writable and --overlay DIR are the user's, which gpurun never rewrites.
fn id_file(
    dst: &str,
    image: Option<&str>,
    line: &str,
    id: u32,
    changes: &Changes,
) -> Option<Mount> {
    if changes.writable() && image.is_some_and(|t| has_id(t, id)) {
        return None;
    }
    let contents = passwd_with(image, line, id);
    Some(match changes {
        Changes::Tmpfs => Mount::new(dst, MountSource::RootFile { contents }),
        _ => Mount::new(dst, MountSource::File { contents }).ro(),
    })
}

/// apt's sandbox user where --fakeroot runs an image that has apt: root, as enroot sets it.
/// apt would drop to `_apt`, and the drop, faked (fake-ids), fails apt's check of its ids.
const APT_SANDBOX: (&str, &str) = (
    "/etc/apt/apt.conf.d/99gpurun-fakeroot",
    "APT::Sandbox::User \"root\";\n",
);

fn apt_sandbox(req: &Request, image: &ImageView, mounts: &mut Vec<Mount>) {
    if req.fakeroot && (image.exists)("/etc/apt/apt.conf.d") {
        let contents = APT_SANDBOX.1.to_string();
        mounts.push(Mount::new(APT_SANDBOX.0, MountSource::File { contents }).ro());
    }
}

/// The config file's site binds, then the user's --bind and --tmpfs, shallower destinations
/// first (a tmpfs at /work, then a bind in it at /work/data), as docker orders its mounts; each
/// bind's source is checked on the host.
fn binds(
    req: &Request,
    host: &HostView,
    skips: &Skips,
    mounts: &mut Vec<Mount>,
) -> Result<(), PlanError> {
    let site = req.site_binds.iter().filter(|_| !skips.bind_paths);
    let site = site.flat_map(|b| b.split(',')).map(|b| (b, true));
    let user = req
        .binds
        .iter()
        .flat_map(|b| b.split(','))
        .map(|b| (b, false));
    let mut skipped = Vec::new();
    let mut mine = Vec::new();
    for (spec, from_site) in site.chain(user).filter(|(s, _)| !s.is_empty()) {
        let m = parse_bind(spec, &host.cwd)?;
        if from_site && skips.dsts.contains(&m.dst) {
            skipped.push(m.dst);
            continue;
        }
        if let MountSource::Bind { src } = &m.source {
            match (host.exists)(src) {
                HostPath::Exists => {}
                HostPath::Missing => return Err(PlanError::BindSourceMissing(src.clone())),
                HostPath::Denied => return Err(PlanError::BindSourceDenied(src.clone())),
            }
        }
        match from_site {
            true => mounts.push(m),
            false => mine.push(m),
        }
    }
    for t in &req.tmpfs {
        mine.push(parse_tmpfs(t)?);
    }
    mine.sort_by_key(|m| m.dst.components().count());
    mounts.extend(mine);
    let named = |d: &PathBuf| skipped.contains(d) || HOST_FILES.iter().any(|f| d == Path::new(f));
    if let Some(d) = skips.dsts.iter().find(|d| !named(d)) {
        let why = format!(
            "no config-file bind nor default host file ({}) has this destination",
            HOST_FILES.join(", ")
        );
        return Err(PlanError::NoMount(d.display().to_string(), why));
    }
    Ok(())
}

/// `srun --mpi=pmix`: Slurm's PMIx server keeps the socket and shared-memory files its ranks
/// open in PMIX_SERVER_TMPDIR, under slurmd's spool directory (/var/spool/slurmd/pmix.J.S):
/// the ranks in the container must find it at the same path.
fn pmix_dir(host: &HostView, mounts: &mut Vec<Mount>) {
    if let Some(dir) = crate::env_vars::var(&host.env, "PMIX_SERVER_TMPDIR") {
        let dir = normalize(Path::new(dir));
        let covered = mounts.iter().any(|m| {
            matches!(m.source, MountSource::Bind { .. })
                && dir.starts_with(&m.dst)
                && m.dst != Path::new("/")
        });
        if dir.is_absolute() && !covered && (host.exists)(&dir) == HostPath::Exists {
            mounts.push(Mount::bind(&dir, &dir, false));
        }
    }
}

/// The working directory: kept from the host, bound when nothing else brings it in.
fn working_dir(
    req: &Request,
    action: &Action,
    host: &HostView,
    image: &ImageView,
    skips: &Skips,
    mounts: &mut Vec<Mount>,
) -> Result<PathBuf, PlanError> {
    let workdir = || match image.meta.working_dir.as_str() {
        "" => PathBuf::from("/"),
        w => PathBuf::from(w),
    };
    Ok(match &req.pwd {
        Some(p) if !p.is_absolute() => return Err(PlanError::RelativePwd(p.clone())),
        Some(p) => p.clone(),
        None if req.contain => workdir(),
        None if matches!(
            action,
            Action::Hold {
                image_workdir: true,
                ..
            }
        ) && !image.meta.working_dir.is_empty() =>
        {
            workdir()
        }
        None => {
            let covered = mounts.iter().any(|m| {
                matches!(m.source, MountSource::Bind { .. }) && host.cwd.starts_with(&m.dst)
            }) && !is_system_dir(&host.cwd);
            let in_image = || (image.exists)(&host.cwd.to_string_lossy());
            if covered || ((is_system_dir(&host.cwd) || skips.cwd) && in_image()) {
                host.cwd.clone()
            } else if skips.cwd {
                workdir()
            } else if is_system_dir(&host.cwd) {
                PathBuf::from("/")
            } else {
                mounts.push(Mount::bind(&host.cwd, &host.cwd, false));
                host.cwd.clone()
            }
        }
    })
}

/// The variables gpurun sets whatever the host and image say.
fn forced_env(
    req: &Request,
    action: &Action,
    host: &HostView,
    image: &ImageView,
    extras: &Extras,
    home: &Path,
) -> Vec<(String, String)> {
    let mut forced = vec![
        ("HOME".to_string(), home.display().to_string()),
        (
            "USER".to_string(),
            if req.fakeroot {
                "root".into()
            } else {
                host.user.clone()
            },
        ),
        (
            "GPURUN_CONTAINER".to_string(),
            match &image.root {
                RootSource::Squashfs(p) | RootSource::Dir(p) => p.display().to_string(),
            },
        ),
    ];
    forced.extend(extras.env.iter().cloned());
    if matches!(action, Action::Shell(..)) {
        forced.push(("PS1".into(), "gpurun> ".into()));
    }
    forced
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        cwd: &'static str,
        dev: Vec<DevEntry>,
    }

    fn host_exists(p: &Path) -> HostPath {
        match () {
            _ if p.starts_with("/missing") => HostPath::Missing,
            _ if p.starts_with("/root-only") => HostPath::Denied,
            _ => HostPath::Exists,
        }
    }

    fn image_exists(p: &str) -> bool {
        ["/bin/sh", "/bin/bash", "/opt"].contains(&p)
    }

    /// `exec` of nothing in particular, with the home-directory fixture and no extras.
    fn exec_plan(req: &Request) -> Result<Plan, PlanError> {
        run_plan(
            &HOMEDIR,
            req,
            Action::Exec(vec![]),
            ImageMeta::default(),
            &Extras::default(),
        )
    }

    /// alice, in `cwd` with this environment and /dev.
    fn alice(cwd: &str, env: Vec<(String, String)>, dev: Vec<DevEntry>) -> HostView<'static> {
        HostView {
            uid: 1000,
            gid: 100,
            user: "alice".into(),
            group: "users".into(),
            home: "/home/alice".into(),
            shell: Some("/bin/bash".into()),
            cwd: cwd.into(),
            env,
            dev,
            tty: None,
            exists: &host_exists,
        }
    }

    fn image_of(meta: ImageMeta) -> ImageView<'static> {
        ImageView {
            root: RootSource::Squashfs("/img.sqsh".into()),
            meta,
            passwd: Some("root:x:0:0:root:/root:/bin/sh\n".into()),
            group: None,
            exists: &image_exists,
        }
    }

    fn run_plan(
        f: &Fixture,
        req: &Request,
        action: Action,
        meta: ImageMeta,
        extras: &Extras,
    ) -> Result<Plan, PlanError> {
        let host = alice(f.cwd, vec![("FOO".into(), "1".into())], f.dev.clone());
        plan(req, &action, &host, &image_of(meta), extras)
    }

    /// `exec true` from alice's home with this host environment.
    fn plan_in_env(env: Vec<(String, String)>, req: &Request, extras: &Extras) -> Plan {
        let host = alice("/home/alice", env, Vec::new());
        let image = image_of(ImageMeta::default());
        plan(
            req,
            &Action::Exec(vec!["true".into()]),
            &host,
            &image,
            extras,
        )
        .unwrap()
    }

    // One CDI scenario end to end: its devices, mounts and environment beside the GPU plan.
    #[test]
    fn cdi_devices_join_the_plan() {
        use crate::gpu::cdi::{Applied, CdiMount, DeviceNode};
        let node = |p: &str, host: &str| DeviceNode {
            path: p.into(),
            host_path: host.into(),
            from: "x.com/y=0".into(),
        };
        let applied = |nodes: Vec<DeviceNode>| Applied {
            nodes,
            mounts: vec![CdiMount {
                src: "/opt/drv/lib".into(),
                dst: "/usr/lib/drv".into(),
                options: vec!["ro".into(), "nosuid".into(), "bind".into()],
                from: "x.com/y".into(),
            }],
            env: vec![("A".into(), "cdi".into()), ("B".into(), "cdi".into())],
            ..Applied::default()
        };
        let gpu = || Extras {
            mounts: vec![
                Mount::bind("/dev/nvidia0", "/dev/nvidia0", false),
                Mount::bind("/srv/fw", "/lib/firmware/x", true),
            ],
            env: vec![("A".into(), "gpu".into()), ("C".into(), "gpu".into())],
            ..Extras::default()
        };
        let host = vec![
            ("CUDA_VISIBLE_DEVICES".to_string(), "3".to_string()),
            ("NVIDIA_VISIBLE_DEVICES".to_string(), "3".to_string()),
        ];
        // (the CDI nodes, whether the host's GPU variables pass in)
        let cases = [
            (vec![node("/dev/nvidia1", "/srv/dev/nvidia1")], false),
            (vec![node("/dev/fpga0", "/dev/fpga0")], true),
            (vec![], true),
        ];
        for (nodes, passed) in cases {
            let mut x = gpu();
            x.add_cdi(applied(nodes.clone()));
            assert_eq!(x.filter_nvidia_dev, !nodes.is_empty(), "{nodes:?}");
            let p = plan_in_env(host.clone(), &Request::default(), &x);
            assert_eq!(env(&p, "A"), Some("cdi"));
            assert_eq!((env(&p, "B"), env(&p, "C")), (Some("cdi"), Some("gpu")));
            let cvd = env(&p, "CUDA_VISIBLE_DEVICES");
            assert_eq!(cvd.is_some(), passed, "{nodes:?}");
            assert_eq!(env(&p, "NVIDIA_VISIBLE_DEVICES").is_some(), passed);
            let lib = find(&p, "/usr/lib/drv").unwrap();
            assert!(
                lib.readonly
                    && lib.source
                        == MountSource::Bind {
                            src: "/opt/drv/lib".into()
                        }
            );
            for n in &nodes {
                let m = find(&p, &n.path.display().to_string()).unwrap();
                assert_eq!(
                    m.source,
                    MountSource::Bind {
                        src: n.host_path.clone()
                    }
                );
                assert!(!m.readonly);
            }
            assert_eq!(p.cdi.as_ref().unwrap().nodes, nodes);
        }
        // a CDI node or mount where GPU support had one replaces it
        let mut x = gpu();
        x.add_cdi(applied(vec![node("/dev/nvidia0", "/srv/dev/nvidia0")]));
        let at = |d: &str| x.mounts.iter().filter(|m| m.dst == Path::new(d)).count();
        assert_eq!((at("/dev/nvidia0"), at("/lib/firmware/x")), (1, 1));
        assert_eq!(
            x.mounts[1].source,
            MountSource::Bind {
                src: "/srv/dev/nvidia0".into()
            }
        );
        // without CDI devices the plan says nothing of them
        let p = plan_in_env(host, &Request::default(), &gpu());
        assert!(p.cdi.is_none() && env(&p, "CUDA_VISIBLE_DEVICES") == Some("3"));
    }

    #[test]
    fn pmix_server_directory_is_bound() {
        let plan_with =
            |env: Vec<(String, String)>, req: &Request| plan_in_env(env, req, &Extras::default());
        let pmix = |d: &str| vec![("PMIX_SERVER_TMPDIR".to_string(), d.to_string())];
        let spool = "/var/spool/slurmd/pmix.7.0";
        let p = plan_with(pmix("/var/spool/slurmd/pmix.7.0/"), &Request::default());
        let m = find(&p, spool).expect("PMIx directory bound");
        assert!(matches!(&m.source, MountSource::Bind { src, .. } if src == Path::new(spool)));
        let contain = Request {
            contain: true,
            ..Default::default()
        };
        assert!(find(&plan_with(pmix(spool), &contain), spool).is_some());
        // already visible through the /tmp bind; missing on the host; relative; unset
        for env in [
            pmix("/tmp/pmix.7.0"),
            pmix("/missing/pmix"),
            pmix("rel"),
            vec![],
        ] {
            let p = plan_with(env.clone(), &Request::default());
            assert_eq!(
                p.mounts
                    .iter()
                    .filter(|m| m.dst.starts_with("/tmp/pmix.7.0")
                        || m.dst.starts_with("/missing")
                        || m.dst == Path::new("rel"))
                    .count(),
                0,
                "{env:?}"
            );
        }
    }

    fn dsts(p: &Plan) -> Vec<String> {
        p.mounts
            .iter()
            .map(|m| m.dst.display().to_string())
            .collect()
    }

    fn find<'a>(p: &'a Plan, dst: &str) -> Option<&'a Mount> {
        p.mounts.iter().find(|m| m.dst == Path::new(dst))
    }

    fn env<'a>(p: &'a Plan, k: &str) -> Option<&'a str> {
        p.env
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    const HOMEDIR: Fixture = Fixture {
        cwd: "/home/alice/work",
        dev: Vec::new(),
    };

    #[test]
    fn default_mounts_and_identity() {
        let p = run_plan(
            &HOMEDIR,
            &Request::default(),
            Action::Exec(vec!["id".into()]),
            ImageMeta::default(),
            &Extras::default(),
        )
        .unwrap();
        for d in [
            "/proc",
            "/sys",
            "/dev",
            "/tmp",
            "/var/tmp",
            "/etc/hosts",
            "/home/alice",
            "/etc/passwd",
        ] {
            assert!(find(&p, d).is_some(), "missing {d} in {:?}", dsts(&p));
        }
        // cwd is under the bound home: no extra bind, kept as is.
        assert_eq!(p.cwd, Path::new("/home/alice/work"));
        assert!(find(&p, "/home/alice/work").is_none());
        assert_eq!(
            (p.uid.inside, p.uid.outside, p.gid.inside),
            (1000, 1000, 100)
        );
        let MountSource::File { contents } = &find(&p, "/etc/passwd").unwrap().source else {
            panic!()
        };
        assert!(contents.starts_with("root:x:0:0"));
        assert!(contents.contains("alice:x:1000:100:alice:/home/alice:/bin/bash\n"));
        let MountSource::File { contents } = &find(&p, "/etc/group").unwrap().source else {
            panic!()
        };
        assert_eq!(contents, "users:x:100:\n");
        assert_eq!(env(&p, "HOME"), Some("/home/alice"));
        assert_eq!(env(&p, "FOO"), Some("1"));
        assert_eq!(env(&p, "GPURUN_CONTAINER"), Some("/img.sqsh"));
        assert_eq!(p.changes, Changes::None);
    }

    #[test]
    fn cwd_rules() {
        // (cwd, request, expected cwd, cwd bound?)
        let contain = Request {
            contain: true,
            ..Default::default()
        };
        let pwd = Request {
            pwd: Some("/opt".into()),
            ..Default::default()
        };
        let cases: Vec<(&'static str, Request, &str, bool)> = vec![
            ("/data/proj", Request::default(), "/data/proj", true),
            ("/tmp/x", Request::default(), "/tmp/x", false),
            ("/usr/lib", Request::default(), "/", false),
            ("/opt", Request::default(), "/opt", false),
            ("/", Request::default(), "/", false),
            ("/data/proj", contain.clone(), "/", false),
            ("/data/proj", pwd, "/opt", false),
        ];
        for (cwd, req, want, bound) in cases {
            let f = Fixture { cwd, dev: vec![] };
            let p = run_plan(
                &f,
                &req,
                Action::Exec(vec!["true".into()]),
                ImageMeta::default(),
                &Extras::default(),
            )
            .unwrap();
            assert_eq!(p.cwd, Path::new(want), "cwd {cwd}");
            assert_eq!(
                p.mounts.iter().any(|m| m.dst == Path::new(cwd)
                    && cwd != "/tmp/x"
                    && matches!(m.source, MountSource::Bind { .. })
                    && m.dst != Path::new("/")),
                bound,
                "cwd {cwd} bound"
            );
        }
        let meta = ImageMeta {
            working_dir: "/workspace".into(),
            ..Default::default()
        };
        let p = run_plan(
            &HOMEDIR,
            &contain,
            Action::Exec(vec!["true".into()]),
            meta,
            &Extras::default(),
        )
        .unwrap();
        assert_eq!(p.cwd, Path::new("/workspace"));
        // the Slurm plugin's holder: the image's WorkingDir where it has one, else the cwd
        for (working_dir, want) in [("/workspace", "/workspace"), ("", "/data/proj")] {
            let meta = ImageMeta {
                working_dir: working_dir.into(),
                ..Default::default()
            };
            let f = Fixture {
                cwd: "/data/proj",
                dev: vec![],
            };
            let hold = Action::Hold {
                entrypoint: false,
                image_workdir: true,
            };
            let p = run_plan(&f, &Request::default(), hold, meta, &Extras::default()).unwrap();
            assert_eq!(p.cwd, Path::new(want), "WorkingDir {working_dir:?}");
        }
        let rel = Request {
            pwd: Some("rel".into()),
            ..Default::default()
        };
        assert!(matches!(exec_plan(&rel), Err(PlanError::RelativePwd(_))));
    }

    #[test]
    fn contain_no_home_and_fakeroot() {
        let contain = Request {
            contain: true,
            ..Default::default()
        };
        let p = exec_plan(&contain).unwrap();
        // an empty home of its own, not the host's
        assert_eq!(
            find(&p, "/home/alice").unwrap().source,
            MountSource::tmpfs(0o700)
        );
        assert_eq!(find(&p, "/tmp").unwrap().source, MountSource::tmpfs(0o1777));
        let no_home = Request {
            no_home: true,
            ..Default::default()
        };
        let p = run_plan(
            &Fixture {
                cwd: "/data",
                dev: vec![],
            },
            &no_home,
            Action::Exec(vec![]),
            ImageMeta::default(),
            &Extras::default(),
        )
        .unwrap();
        assert!(find(&p, "/home/alice").is_none());
        assert!(matches!(
            find(&p, "/tmp").unwrap().source,
            MountSource::Bind { .. }
        ));
        let fr = Request {
            fakeroot: true,
            ..Default::default()
        };
        let p = exec_plan(&fr).unwrap();
        assert_eq!((p.uid.inside, p.uid.outside, p.gid.inside), (0, 1000, 0));
        assert_eq!(
            find(&p, "/root").unwrap().source,
            MountSource::Bind {
                src: "/home/alice".into()
            }
        );
        assert_eq!(env(&p, "HOME"), Some("/root"));
        assert_eq!(env(&p, "USER"), Some("root"));
    }

    // Long as a table is: one case of --home (and its interplay with --contain, --no-home) each.
    #[test]
    fn home_option() {
        let home = |spec: &str, extra: Request| Request {
            home: Some(spec.into()),
            ..extra
        };
        // (request, where the home is bound from, HOME inside)
        let cases: Vec<(Request, Option<&str>, &str)> = vec![
            (
                home("/data/me", Request::default()),
                Some("/data/me"),
                "/data/me",
            ),
            (
                home("/data/me:/home/me", Request::default()),
                Some("/data/me"),
                "/home/me",
            ),
            (
                home("rel:/h", Request::default()),
                Some("/data/proj/rel"),
                "/h",
            ),
            // --home is bound with --contain too, and wins over --fakeroot's /root
            (
                home(
                    "/data/me",
                    Request {
                        contain: true,
                        ..Default::default()
                    },
                ),
                Some("/data/me"),
                "/data/me",
            ),
            (
                home(
                    "/data/me:/h",
                    Request {
                        fakeroot: true,
                        ..Default::default()
                    },
                ),
                Some("/data/me"),
                "/h",
            ),
            // --no-home and --no-mount home leave it out; HOME is still DST
            (
                home(
                    "/data/me:/h",
                    Request {
                        no_home: true,
                        ..Default::default()
                    },
                ),
                None,
                "/h",
            ),
            (
                home(
                    "/data/me:/h",
                    Request {
                        no_mount: vec!["home".into()],
                        ..Default::default()
                    },
                ),
                None,
                "/h",
            ),
        ];
        let data = Fixture {
            cwd: "/data/proj",
            dev: vec![],
        };
        for (req, src, want) in cases {
            let p = run_plan(
                &data,
                &req,
                Action::Exec(vec![]),
                ImageMeta::default(),
                &Extras::default(),
            )
            .unwrap();
            let bound = p.mounts.iter().find(|m| m.dst == Path::new(want));
            match (src, bound) {
                (Some(s), Some(m)) => assert_eq!(m.source, MountSource::Bind { src: s.into() }),
                (None, None) => {}
                (s, b) => panic!("{req:?}: {s:?} {b:?}"),
            }
            assert!(find(&p, "/home/alice").is_none(), "{req:?}");
            assert_eq!(env(&p, "HOME"), Some(want), "{req:?}");
            let MountSource::File { contents } = &find(&p, "/etc/passwd").unwrap().source else {
                panic!()
            };
            assert!(
                req.fakeroot || contents.contains(&format!(":{want}:")),
                "{contents}"
            );
        }
        for bad in ["/a:rel", "/a:/b:/c", ":/b", "/a:"] {
            let req = home(bad, Request::default());
            assert!(matches!(exec_plan(&req), Err(PlanError::Home(..))), "{bad}");
        }
        let req = home("/missing/home", Request::default());
        assert_eq!(
            exec_plan(&req).unwrap_err(),
            PlanError::HomeMissing("/missing/home".into())
        );
    }

    // Long as a table is: one case of --no-mount names, accepted or refused, each.
    #[test]
    fn no_mount_names() {
        let parsed =
            |v: &[&str]| parse_no_mount(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            parsed(&["home,cwd", "tmp", "hostfs", " bind-paths ", "/etc/hosts/"]).unwrap(),
            Skips {
                home: true,
                cwd: true,
                tmp: true,
                bind_paths: true,
                dsts: vec!["/etc/hosts".into()],
            }
        );
        assert_eq!(parsed(&[]).unwrap(), Skips::default());
        for (bad, says) in [
            ("proc", "always mounts /proc"),
            ("dev", "always mounts"),
            (
                "homes",
                "unknown name; use home, cwd, tmp, hostfs, bind-paths",
            ),
        ] {
            let e = parsed(&[bad]).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("--no-mount {bad}: ")) && e.contains(says),
                "{e}"
            );
        }
        let req = |names: &[&str]| Request {
            no_mount: names.iter().map(|s| s.to_string()).collect(),
            site_binds: vec!["/site:/site".into(), "/apps:/opt/apps:ro".into()],
            binds: vec!["/mine".into()],
            ..Default::default()
        };
        let p = |names: &[&str]| {
            run_plan(
                &Fixture {
                    cwd: "/data/proj",
                    dev: vec![],
                },
                &req(names),
                Action::Exec(vec![]),
                ImageMeta {
                    working_dir: "/w".into(),
                    ..Default::default()
                },
                &Extras::default(),
            )
        };
        let all = dsts(&p(&[]).unwrap());
        for d in [
            "/home/alice",
            "/tmp",
            "/var/tmp",
            "/data/proj",
            "/site",
            "/opt/apps",
            "/mine",
            "/etc/hosts",
        ] {
            assert!(all.iter().any(|x| x == d), "{d} not in {all:?}");
        }
        // (names, destinations gone, cwd)
        let cases: &[(&[&str], &[&str], &str)] = &[
            (&["home"], &["/home/alice"], "/data/proj"),
            // the home's and /tmp's destinations name them
            (&["/home/alice/"], &["/home/alice"], "/data/proj"),
            (&["tmp"], &["/tmp", "/var/tmp"], "/data/proj"),
            (&["/tmp"], &["/tmp", "/var/tmp"], "/data/proj"),
            (&["cwd"], &["/data/proj"], "/w"),
            (&["bind-paths"], &["/site", "/opt/apps"], "/data/proj"),
            (&["/opt/apps"], &["/opt/apps"], "/data/proj"),
            (
                &["/etc/hosts", "/etc/localtime"],
                &["/etc/hosts", "/etc/localtime"],
                "/data/proj",
            ),
            (&["hostfs"], &[], "/data/proj"),
        ];
        for (names, gone, cwd) in cases {
            let plan = p(names).unwrap();
            let have = dsts(&plan);
            for g in *gone {
                assert!(!have.iter().any(|x| x == g), "{names:?}: {g} in {have:?}");
            }
            assert_eq!(have.len() + gone.len(), all.len(), "{names:?}: {have:?}");
            assert_eq!(plan.cwd, Path::new(cwd), "{names:?}");
        }
        // --bind's own binds are not "bind paths"; a destination nobody binds is an error
        assert!(dsts(&p(&["bind-paths"]).unwrap())
            .iter()
            .any(|x| x == "/mine"));
        let e = p(&["/mine"]).unwrap_err().to_string();
        assert!(
            e.starts_with("--no-mount /mine: no config-file bind"),
            "{e}"
        );
    }

    #[test]
    fn a_directory_that_is_not_a_root() {
        let exists_in = |have: &'static [&'static str]| move |p: &str| have.contains(&p);
        let dir = |exists: &'static dyn Fn(&str) -> bool| ImageView {
            root: RootSource::Dir("/data/pkg".into()),
            meta: ImageMeta::default(),
            passwd: None,
            group: None,
            exists,
        };
        let host = alice("/home/alice", vec![], vec![]);
        let exec = |cmd: &str| Action::Exec(vec![cmd.into()]);
        let bare: &'static dyn Fn(&str) -> bool = Box::leak(Box::new(exists_in(&[])));
        let usr: &'static dyn Fn(&str) -> bool = Box::leak(Box::new(exists_in(&["/usr"])));
        let app: &'static dyn Fn(&str) -> bool = Box::leak(Box::new(exists_in(&["/app"])));
        // (what the directory has, what runs, a root?)
        type Exists = &'static dyn Fn(&str) -> bool;
        let cases: Vec<(Exists, Action, bool)> = vec![
            (bare, exec("ls"), false),
            (bare, Action::Run(vec![]), false),
            (bare, Action::Shell(None, vec![]), false),
            (usr, exec("ls"), true),
            // a static program in a bare directory, or one the binds bring
            (app, exec("/app"), true),
            (bare, exec("/home/alice/tool"), true),
        ];
        for (exists, action, root) in cases {
            let r = plan(
                &Request::default(),
                &action,
                &host,
                &dir(exists),
                &Extras::default(),
            );
            match r {
                Err(PlanError::NotARoot(d)) => {
                    assert!(!root, "{action:?}");
                    assert_eq!(d, Path::new("/data/pkg"));
                }
                Ok(_) => assert!(root, "{action:?}"),
                Err(e) => panic!("{action:?}: {e}"),
            }
        }
        let e = PlanError::NotARoot("/data/pkg".into()).to_string();
        assert!(
            e.contains("not a root filesystem (it has no /bin, /usr"),
            "{e}"
        );
    }

    #[test]
    fn hostname() {
        let req = |h: &str| Request {
            hostname: Some(h.into()),
            ..Default::default()
        };
        let p = exec_plan(&req("node-1.example")).unwrap();
        assert_eq!(p.hostname.as_deref(), Some("node-1.example"));
        assert!(exec_plan(&Request::default()).unwrap().hostname.is_none());
        for bad in ["", "-x", "a b", "a/b", &"x".repeat(65)] {
            assert_eq!(
                exec_plan(&req(bad)).unwrap_err(),
                PlanError::Hostname(bad.to_string()),
                "{bad}"
            );
        }
    }

    #[test]
    fn binds_and_tmpfs() {
        let req = Request {
            binds: vec!["/x:/y:ro,/z".into()],
            ..Default::default()
        };
        let p = exec_plan(&req).unwrap();
        assert!(find(&p, "/y").unwrap().readonly);
        assert!(!find(&p, "/z").unwrap().readonly);
        // flags come with the bind; the user's binds and tmpfs go shallower first, in order
        let req = Request {
            binds: vec!["/x:/w/a/b:nodev+rslave,/x:/w".into(), "/z:/w/a/b".into()],
            tmpfs: vec!["/w/a:size=1M".into()],
            ..Default::default()
        };
        let p = exec_plan(&req).unwrap();
        let d = dsts(&p);
        let at = |x: &str| d.iter().position(|y| y == x).unwrap();
        assert!(at("/w") < at("/w/a") && at("/w/a") < at("/w/a/b"), "{d:?}");
        let ab: Vec<&Mount> = p
            .mounts
            .iter()
            .filter(|m| m.dst == Path::new("/w/a/b"))
            .collect();
        assert!(
            ab[0].flags.nodev && ab[0].flags.propagation.is_some(),
            "{ab:?}"
        );
        assert!(ab[1].flags.is_plain() && ab[1].source == MountSource::Bind { src: "/z".into() });
        assert_eq!(
            find(&p, "/w/a").unwrap().source,
            MountSource::Tmpfs {
                mode: 0o1777,
                size: Some(1 << 20),
                huge: None,
            }
        );
        for (req, says) in [
            (
                Request {
                    binds: vec!["/x:/y:ro+bogus".into()],
                    ..Default::default()
                },
                "--bind \"/x:/y:ro+bogus\": unknown flag \"bogus\"",
            ),
            (
                Request {
                    tmpfs: vec!["/t:size=1M,bogus".into()],
                    ..Default::default()
                },
                "--tmpfs \"/t:size=1M,bogus\": unknown option \"bogus\"",
            ),
        ] {
            let e = exec_plan(&req).unwrap_err().to_string();
            assert!(e.starts_with(says), "{e}");
        }
        let req = Request {
            binds: vec!["/missing/dir:/m".into()],
            ..Default::default()
        };
        assert!(matches!(
            exec_plan(&req),
            Err(PlanError::BindSourceMissing(_))
        ));
        let req = Request {
            binds: vec!["/root-only/dir:/m".into()],
            ..Default::default()
        };
        let e = exec_plan(&req).unwrap_err();
        assert_eq!(e, PlanError::BindSourceDenied("/root-only/dir".into()));
        assert!(e.to_string().contains("permission denied"), "{e}");
    }

    #[test]
    fn filtered_dev() {
        let f = Fixture {
            cwd: "/home/alice",
            dev: vec![
                DevEntry::Other {
                    name: "null".into(),
                },
                DevEntry::Other {
                    name: "nvidia0".into(),
                },
                DevEntry::Other {
                    name: "nvidiactl".into(),
                },
                DevEntry::Other {
                    name: "nvidia-caps".into(),
                },
                DevEntry::Other { name: "shm".into() },
                DevEntry::Symlink {
                    name: "fd".into(),
                    target: "/proc/self/fd".into(),
                },
                DevEntry::Other { name: "pts".into() },
                DevEntry::Other {
                    name: "ptmx".into(),
                },
            ],
        };
        let extras = Extras {
            filter_nvidia_dev: true,
            mounts: vec![Mount::bind("/dev/nvidia0", "/dev/nvidia0", false)],
            ..Default::default()
        };
        let p = run_plan(
            &f,
            &Request::default(),
            Action::Exec(vec![]),
            ImageMeta::default(),
            &extras,
        )
        .unwrap();
        let d = dsts(&p);
        assert_eq!(find(&p, "/dev").unwrap().source, MountSource::tmpfs(0o755));
        assert!(d.contains(&"/dev/null".to_string()) && d.contains(&"/dev/shm".to_string()));
        assert!(
            !d.contains(&"/dev/nvidiactl".to_string())
                && !d.contains(&"/dev/nvidia-caps".to_string())
        );
        assert_eq!(
            d.iter().filter(|x| *x == "/dev/nvidia0").count(),
            1,
            "only the GPU module's own bind"
        );
        assert_eq!(
            find(&p, "/dev/fd").unwrap().source,
            MountSource::Symlink {
                target: "/proc/self/fd".into()
            }
        );
        // The GPU binds come after /dev's tmpfs, or they would be hidden by it.
        let pos = |x: &str| d.iter().position(|y| y == x).unwrap();
        assert!(pos("/dev/nvidia0") > pos("/dev"));
        // a devpts of its own, and /dev/ptmx into it, not the host's
        assert_eq!(find(&p, "/dev/pts").unwrap().source, MountSource::Devpts);
        assert_eq!(
            find(&p, "/dev/ptmx").unwrap().source,
            MountSource::Symlink {
                target: "pts/ptmx".into()
            }
        );
        let one = |x: &str| d.iter().filter(|y| *y == x).count() == 1;
        assert!(one("/dev/pts") && one("/dev/ptmx"), "{d:?}");
        assert!(pos("/dev/pts") > pos("/dev"));
        // with the host's whole /dev, its own
        let p = exec_plan(&Request::default()).unwrap();
        assert!(find(&p, "/dev/pts").is_none() && find(&p, "/dev/ptmx").is_none());
    }

    #[test]
    fn callers_terminal_in_filtered_dev() {
        let extras = Extras {
            filter_nvidia_dev: true,
            ..Default::default()
        };
        let console = vec![DevEntry::Other {
            name: "console".into(),
        }];
        let mut host = alice("/", Vec::new(), console);
        let image = image_of(ImageMeta::default());
        let exec = |host: &HostView| {
            plan(
                &Request::default(),
                &Action::Exec(vec![]),
                host,
                &image,
                &extras,
            )
            .unwrap()
        };
        host.tty = Some("/dev/pts/7".into());
        let p = exec(&host);
        let c: Vec<&Mount> = (p.mounts.iter())
            .filter(|m| m.dst == Path::new("/dev/console"))
            .collect();
        assert_eq!(
            c,
            [&Mount::bind("/dev/pts/7", "/dev/console", false).optional()]
        );
        // without a terminal, the host's console entry as any other
        host.tty = None;
        let p = exec(&host);
        assert_eq!(
            find(&p, "/dev/console").unwrap().source,
            MountSource::Bind {
                src: "/dev/console".into()
            }
        );
    }

    #[test]
    fn what_runs() {
        let meta = ImageMeta {
            entrypoint: vec!["/entry".into()],
            cmd: vec!["default".into()],
            ..Default::default()
        };
        let hold = |entrypoint| Action::Hold {
            entrypoint,
            image_workdir: false,
        };
        let argv = |action: Action, meta: ImageMeta| {
            run_plan(
                &HOMEDIR,
                &Request::default(),
                action,
                meta,
                &Extras::default(),
            )
            .map(|p| p.argv)
        };
        let cases: Vec<(Action, ImageMeta, Vec<&str>)> = vec![
            (Action::Run(vec![]), meta.clone(), vec!["/entry", "default"]),
            (
                Action::Run(vec!["x".into()]),
                meta.clone(),
                vec!["/entry", "x"],
            ),
            (
                Action::Run(vec![]),
                ImageMeta {
                    cmd: vec!["python3".into()],
                    ..Default::default()
                },
                vec!["python3"],
            ),
            (Action::Run(vec![]), ImageMeta::default(), vec!["/bin/sh"]),
            (
                Action::Shell(None, vec![]),
                ImageMeta::default(),
                vec!["/bin/bash"],
            ),
            (
                Action::Shell(Some("/bin/zsh".into()), vec![]),
                ImageMeta::default(),
                vec!["/bin/zsh"],
            ),
            (
                Action::Shell(None, vec!["-c".into(), "echo hi".into()]),
                ImageMeta::default(),
                vec!["/bin/bash", "-c", "echo hi"],
            ),
            (
                Action::Exec(vec!["ls".into(), "-l".into()]),
                meta.clone(),
                vec!["ls", "-l"],
            ),
            (hold(false), meta.clone(), vec![]),
            (
                hold(true),
                meta,
                vec!["/entry", "sh", "-c", "kill -STOP $$"],
            ),
            (hold(true), ImageMeta::default(), vec![]),
        ];
        for (action, meta, want) in cases {
            assert_eq!(argv(action.clone(), meta).unwrap(), want, "{action:?}");
        }
        let p = run_plan(
            &HOMEDIR,
            &Request::default(),
            Action::Shell(None, vec![]),
            ImageMeta::default(),
            &Extras::default(),
        )
        .unwrap();
        assert_eq!(env(&p, "PS1"), Some("gpurun> "));
    }

    #[test]
    fn where_changes_go() {
        let host = alice("/home/alice/work", Vec::new(), Vec::new());
        let sqsh = RootSource::Squashfs("/img.sqsh".into());
        let dir = RootSource::Dir("/sb".into());
        let ov = |dir: &str, readonly| Changes::Overlay {
            dir: dir.into(),
            readonly,
        };
        let req = |writable, tmpfs, overlay: Option<&str>| Request {
            writable,
            writable_tmpfs: tmpfs,
            overlay: overlay.map(String::from),
            ..Request::default()
        };
        // (request, root, what comes of it: Ok changes, or Err with the error's text)
        let cases: Vec<(Request, &RootSource, Result<Changes, &str>)> = vec![
            (req(false, false, None), &sqsh, Ok(Changes::None)),
            (req(false, true, None), &sqsh, Ok(Changes::Tmpfs)),
            (req(true, false, None), &dir, Ok(Changes::InPlace)),
            (
                req(true, false, None),
                &sqsh,
                Err("--writable needs a sandbox directory image; /img.sqsh is read-only"),
            ),
            (req(true, true, None), &dir, Err("give one")),
            (req(false, true, Some("o")), &sqsh, Err("give one")),
            (
                req(false, false, Some("o")),
                &sqsh,
                Ok(ov("/home/alice/work/o", false)),
            ),
            (req(false, false, Some("/o:ro")), &dir, Ok(ov("/o", true))),
            (req(false, false, Some("/o:rw")), &dir, Ok(ov("/o", false))),
            (
                req(false, false, Some("/o:x")),
                &dir,
                Err("use DIR or DIR:ro"),
            ),
            (
                req(false, false, Some(":ro")),
                &dir,
                Err("give a directory"),
            ),
            (
                req(false, false, Some("/missing/o")),
                &dir,
                Err("/missing/o: no such directory"),
            ),
        ];
        // --read-only, and the site's writable_root
        let ro = |r: Request| Request {
            read_only: true,
            ..r
        };
        let by_default = |r: Request| Request {
            writable_by_default: true,
            ..r
        };
        let mut cases = cases;
        cases.extend([
            (
                by_default(req(false, false, None)),
                &sqsh,
                Ok(Changes::Tmpfs),
            ),
            (
                ro(by_default(req(false, false, None))),
                &sqsh,
                Ok(Changes::None),
            ),
            (ro(req(false, false, None)), &sqsh, Ok(Changes::None)),
            (
                by_default(req(true, false, None)),
                &dir,
                Ok(Changes::InPlace),
            ),
            (
                by_default(req(false, false, Some("/o"))),
                &dir,
                Ok(ov("/o", false)),
            ),
            (
                ro(req(false, false, Some("/o:ro"))),
                &dir,
                Ok(ov("/o", true)),
            ),
            (ro(req(false, true, None)), &sqsh, Err("--read-only keeps")),
            (ro(req(true, false, None)), &dir, Err("--read-only keeps")),
            (
                ro(req(false, false, Some("/o"))),
                &dir,
                Err("--read-only keeps"),
            ),
            (
                Request {
                    save_changes: Some("/cache/save".into()),
                    ..ro(req(false, false, None))
                },
                &sqsh,
                Err("--read-only keeps"),
            ),
        ]);
        for (r, root, want) in cases {
            let got = changes(&r, &host, root);
            match (&got, want) {
                (Ok(c), Ok(w)) => assert_eq!(*c, w, "{r:?}"),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{r:?}: {e}"),
                _ => panic!("{r:?}: {got:?}"),
            }
        }
        assert!(Changes::Tmpfs.writable() && Changes::InPlace.writable());
        assert!(
            !Changes::None.writable() && !ov("/o", true).writable() && ov("/o", false).writable()
        );
    }

    /// The host's /etc files: bound read-only, or copied into a root whose changes are gpurun's
    /// or the container's, never into a directory image or what --save keeps.
    #[test]
    fn host_files_in_writable_roots() {
        let bound = MountSource::Bind {
            src: "/etc/localtime".into(),
        };
        let copied = MountSource::HostCopy {
            src: "/etc/localtime".into(),
        };
        let req = |set: fn(&mut Request)| {
            let mut r = Request::default();
            set(&mut r);
            r
        };
        let cases = [
            (req(|_| {}), &bound),
            (req(|r| r.writable_tmpfs = true), &copied),
            (req(|r| r.overlay = Some("/o".into())), &copied),
            (req(|r| r.overlay = Some("/o:ro".into())), &bound),
            (req(|r| r.save_changes = Some("/s".into())), &bound),
        ];
        for (req, want) in cases {
            let p = exec_plan(&req).unwrap();
            assert_eq!(at_of(&p, "/etc/localtime").as_ref(), Some(want), "{req:?}");
        }
    }

    #[test]
    fn namespaces_of_its_own() {
        let req = |own_pid, own_ipc| Request {
            own_pid,
            own_ipc,
            ..Request::default()
        };
        // (pid, ipc) -> /proc of its own, /dev/shm of its own
        for (pid, ipc) in [(true, true), (true, false), (false, true), (false, false)] {
            let p = exec_plan(&req(pid, ipc)).unwrap();
            assert_eq!((p.own_pid, p.own_ipc), (pid, ipc));
            let proc = at_of(&p, "/proc").unwrap();
            assert_eq!(proc == MountSource::Proc, pid, "{proc:?}");
            let shm = at_of(&p, "/dev/shm");
            assert_eq!(shm == Some(MountSource::tmpfs(0o1777)), ipc, "{shm:?}");
            assert_eq!(shm.is_none(), !ipc);
            // its own message queues (the fixture's host has a /dev/mqueue)
            let mq = at_of(&p, "/dev/mqueue");
            assert_eq!(mq.is_some(), ipc, "{mq:?}");
            assert!(mq.is_none() || mq == Some(MountSource::Mqueue));
        }
        // --net, --network none; no other network
        let net = |net, network: Option<&str>| Request {
            net,
            network: network.map(String::from),
            ..Request::default()
        };
        assert!(!exec_plan(&net(false, None)).unwrap().own_net);
        assert!(exec_plan(&net(true, None)).unwrap().own_net);
        assert!(exec_plan(&net(true, Some("none"))).unwrap().own_net);
        assert!(exec_plan(&net(false, Some("none"))).unwrap().own_net);
        let e = exec_plan(&net(true, Some("bridge"))).unwrap_err();
        assert_eq!(e, PlanError::Network("bridge".into()));
        assert!(
            e.to_string()
                .starts_with("--network bridge: gpurun has only none"),
            "{e}"
        );
    }

    fn at_of(p: &Plan, d: &str) -> Option<MountSource> {
        p.mounts
            .iter()
            .find(|m| m.dst == Path::new(d))
            .map(|m| m.source.clone())
    }

    /// /etc/passwd and /etc/group by where the root's changes go: in a writable root the
    /// image's own where they have the user's entry (a postinst may rewrite them), else the
    /// entry added, written into a tmpfs root, or bound read-only (a read-only root, and the
    /// user's own --writable directory and --overlay DIR, which gpurun never rewrites).
    #[test]
    fn passwd_and_group_by_where_changes_go() {
        let exists = |p: &str| ["/bin/sh", "/etc"].contains(&p);
        let (with_root, without_root) =
            ("root:x:0:0:root:/root:/bin/sh\n", "bin:x:2:2::/:/bin/sh\n");
        let req = |changes: &str, fakeroot| Request {
            writable_tmpfs: changes == "tmpfs",
            writable: changes == "in-place",
            overlay: (changes.starts_with("/o")).then(|| changes.to_string()),
            fakeroot,
            ..Request::default()
        };
        // (changes, fakeroot, image passwd) → (/etc/passwd, /etc/group): "own" (not mounted),
        // "written" (RootFile), "bound" (read-only File)
        for (changes, fakeroot, passwd, want) in [
            ("none", true, with_root, ("bound", "bound")),
            ("none", false, with_root, ("bound", "bound")),
            ("tmpfs", true, with_root, ("own", "own")),
            ("tmpfs", true, without_root, ("written", "own")),
            ("tmpfs", false, with_root, ("written", "written")),
            ("/o", true, with_root, ("own", "own")),
            ("/o", true, without_root, ("bound", "own")),
            ("/o", false, with_root, ("bound", "bound")),
            ("/o:ro", true, with_root, ("bound", "bound")),
            ("in-place", true, with_root, ("own", "own")),
            ("in-place", true, without_root, ("bound", "own")),
            ("in-place", false, with_root, ("bound", "bound")),
        ] {
            let image = ImageView {
                root: RootSource::Dir("/img".into()),
                meta: ImageMeta::default(),
                passwd: Some(passwd.into()),
                group: Some("root:x:0:\n".into()),
                exists: &exists,
            };
            let host = alice("/home/alice", vec![], vec![]);
            let r = req(changes, fakeroot);
            let p = plan(
                &r,
                &Action::Exec(vec!["id".into()]),
                &host,
                &image,
                &Extras::default(),
            );
            let p = p.unwrap();
            let (line, grp) = match fakeroot {
                true => ("root:x:0:0:", "root:x:0:"),
                false => ("alice:x:1000:100:", "users:x:100:"),
            };
            let how = |dst: &str, entry: &str| match find(&p, dst) {
                None => "own",
                Some(m) => {
                    let (MountSource::File { contents } | MountSource::RootFile { contents }) =
                        &m.source
                    else {
                        panic!("{dst}: {m:?}")
                    };
                    assert!(contents.contains(entry), "{dst}: {contents}");
                    match m.source {
                        MountSource::File { .. } if m.readonly => "bound",
                        MountSource::RootFile { .. } if !m.readonly => "written",
                        _ => panic!("{dst}: {m:?}"),
                    }
                }
            };
            let got = (how("/etc/passwd", line), how("/etc/group", grp));
            assert_eq!(got, want, "{changes} fakeroot={fakeroot} {passwd}");
        }
    }

    /// --fakeroot fakes chown and id changes, and where the image has apt sets its sandbox
    /// user to root.
    #[test]
    fn fakeroot_fakes_ids_and_keeps_apt_as_root() {
        let with_apt = |p: &str| ["/bin/sh", "/etc/apt/apt.conf.d"].contains(&p);
        let without_apt = |p: &str| p == "/bin/sh";
        for (fakeroot, exists, apt) in [
            (true, &with_apt as &dyn Fn(&str) -> bool, true),
            (false, &with_apt, false),
            (true, &without_apt, false),
        ] {
            let image = ImageView {
                exists,
                ..image_of(ImageMeta::default())
            };
            let host = alice("/home/alice", vec![], vec![]);
            let req = Request {
                fakeroot,
                ..Request::default()
            };
            let p = plan(
                &req,
                &Action::Exec(vec!["id".into()]),
                &host,
                &image,
                &Extras::default(),
            );
            let p = p.unwrap();
            assert_eq!(p.fake_ids, fakeroot);
            let conf = find(&p, "/etc/apt/apt.conf.d/99gpurun-fakeroot");
            assert_eq!(conf.is_some(), apt, "fakeroot={fakeroot}");
            if let Some(m) = conf {
                let contents = "APT::Sandbox::User \"root\";\n".to_string();
                assert_eq!(m.source, MountSource::File { contents });
                assert!(m.readonly);
            }
        }
    }
}

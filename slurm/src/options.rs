//! The plugin's command-line options (pyxis-compatible names) and plugstack.conf arguments, and
//! how they become a `gpurun hold` command line. Pure: no Slurm, no syscalls.

use std::collections::HashMap;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use mount_grammar::pyxis::{parse_mounts, Mount};
use mount_grammar::{normalize, Bind};

use crate::jobimage;

/// One option as registered with Slurm; `val` in `struct spank_option` is the index in [`OPTIONS`].
pub struct OptSpec {
    pub name: &'static CStr,
    /// None: a flag without argument.
    pub arginfo: Option<&'static CStr>,
    pub usage: &'static CStr,
}

/// Same names and meanings as pyxis, so job scripts written for pyxis run unchanged.
pub const OPTIONS: [OptSpec; 16] = [
    OptSpec {
        name: c"container-image",
        arginfo: Some(c"IMAGE"),
        usage:
            c"[gpurun] run the step's tasks in this image: a squashfs file (absolute or ./relative \
                 path) or a registry reference (docker://REF, REGISTRY#IMAGE, IMAGE[:TAG])",
    },
    OptSpec {
        name: c"container-mounts",
        arginfo: Some(c"SRC[:DST[:FLAGS]][,...]"),
        usage: c"[gpurun] bind host paths into the container; FLAGS joined with +: ro, rw, \
                 nosuid, nodev, noexec, [r]private|slave|shared|unbindable, \
                 x-create=dir|file|auto; tmpfs:DST[:size=N+mode=M] a tmpfs; umount:DST leaves \
                 out a default mount",
    },
    OptSpec {
        name: c"container-workdir",
        arginfo: Some(c"DIR"),
        usage: c"[gpurun] working directory inside the container (default: the image's \
                 WorkingDir, else the job's directory)",
    },
    OptSpec {
        name: c"container-env",
        arginfo: Some(c"NAME[,NAME...]"),
        usage: c"[gpurun] these variables keep the host's value even where the image sets them \
                 (and the entrypoint sees it)",
    },
    OptSpec {
        name: c"container-writable",
        arginfo: None,
        usage: c"[gpurun] make the container root writable (tmpfs overlay, dropped at step end)",
    },
    OptSpec {
        name: c"container-readonly",
        arginfo: None,
        usage: c"[gpurun] keep the container root read-only (the default)",
    },
    OptSpec {
        name: c"container-remap-root",
        arginfo: None,
        usage: c"[gpurun] be root inside the container (no privilege outside)",
    },
    OptSpec {
        name: c"no-container-remap-root",
        arginfo: None,
        usage: c"[gpurun] keep your own uid inside the container (the default)",
    },
    OptSpec {
        name: c"container-mount-home",
        arginfo: None,
        usage: c"[gpurun] bind the home directory into the container (the default)",
    },
    OptSpec {
        name: c"no-container-mount-home",
        arginfo: None,
        usage: c"[gpurun] do not bind the home directory into the container",
    },
    OptSpec {
        name: c"container-entrypoint",
        arginfo: None,
        usage: c"[gpurun] run the image's entrypoint once per node before the tasks; the \
                 environment it sets is theirs",
    },
    OptSpec {
        name: c"no-container-entrypoint",
        arginfo: None,
        usage: c"[gpurun] do not run the image's entrypoint (the default, unless plugstack.conf \
                 says execute_entrypoint=1)",
    },
    OptSpec {
        name: c"container-unshare",
        arginfo: Some(c"NS[,NS...]"),
        usage: c"[gpurun] new namespaces for the container, shared by the step's tasks and \
                 joined by later steps naming it: uts, net (loopback only), ipc",
    },
    OptSpec {
        name: c"container-save",
        arginfo: Some(c"PATH"),
        usage: c"[gpurun] at the step's end, save the container's root with its changes as a \
                 new squashfs image PATH (on each node's file system; a file there is replaced \
                 once the new image is whole)",
    },
    OptSpec {
        name: c"container-name",
        arginfo: Some(c"NAME[:FLAGS]"),
        usage: c"[gpurun] keep the container's changes on the node for later steps of the job \
                 with this name (they may leave out --container-image), and join it while a \
                 step runs in it; FLAGS: auto (the default), create, exec (join, which must be \
                 possible), no_exec (never join)",
    },
    OptSpec {
        name: c"container-entrypoint-log",
        arginfo: None,
        usage: c"[gpurun] print what the image's entrypoint wrote (with --container-entrypoint)",
    },
];

const IMAGE: usize = 0;
const MOUNTS: usize = 1;
const WORKDIR: usize = 2;
const ENV: usize = 3;
const WRITABLE: usize = 4;
const READONLY: usize = 5;
const REMAP_ROOT: usize = 6;
const NO_REMAP_ROOT: usize = 7;
const MOUNT_HOME: usize = 8;
const NO_HOME: usize = 9;
const ENTRYPOINT: usize = 10;
const NO_ENTRYPOINT: usize = 11;
const UNSHARE: usize = 12;
const SAVE: usize = 13;
const NAME: usize = 14;
const ENTRYPOINT_LOG: usize = 15;

/// Where the image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// A squashfs file; relative paths are taken from the job's working directory.
    File(PathBuf),
    /// A registry reference, always written `docker://…` for gpurun.
    Registry(String),
    /// `podman://IMAGE`: an image in the user's podman store on the node, which the holder's
    /// gpurun converts there (as pyxis has enroot import it on each node).
    Podman(String),
}

/// The namespaces of `--container-unshare`, as pyxis's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unshare {
    /// Its own host name (the node's).
    Uts,
    /// Its own network, loopback only.
    Net,
    /// Its own System V IPC and POSIX message queues, and /dev/shm.
    Ipc,
}

/// `--container-name=NAME[:FLAGS]`: the container's changes are kept on the node by that name
/// for the job's later steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub name: String,
    /// `:create`: a container of that name must not exist yet.
    pub create: bool,
    /// Whether a step joins the container while another step runs in it.
    pub join: Join,
}

/// pyxis's flags for a running named container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// `auto`, `create`: join it where it runs, else start it.
    IfRunning,
    /// `exec`: join it; an error where no step runs in it.
    Must,
    /// `no_exec`: start it anew from its kept state, never join.
    Never,
}

/// Everything the user asked for with the plugin's options. A switch and its `no-`/opposite
/// form set one `Option<bool>`: None where neither was given (gpurun's default then).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerOpts {
    pub image: Option<Image>,
    pub mounts: Vec<Mount>,
    pub workdir: Option<PathBuf>,
    pub env_from_host: Vec<String>,
    pub writable: Option<bool>,
    pub remap_root: Option<bool>,
    pub mount_home: Option<bool>,
    pub entrypoint: Option<bool>,
    pub unshare: Vec<Unshare>,
    /// `--container-save`: relative to the job's working directory.
    pub save: Option<PathBuf>,
    pub name: Option<Named>,
    /// `--container-entrypoint-log`: the entrypoint's output is shown.
    pub entrypoint_log: bool,
}

/// Set a switch that has two options; giving both is an error, as in pyxis.
fn switch(slot: &mut Option<bool>, value: bool, (on, off): (usize, usize)) -> Result<(), String> {
    match *slot {
        Some(v) if v != value => Err(format!(
            "both --{} and --{} were given",
            OPTIONS[on].name.to_string_lossy(),
            OPTIONS[off].name.to_string_lossy()
        )),
        _ => {
            *slot = Some(value);
            Ok(())
        }
    }
}

impl ContainerOpts {
    /// Apply option number `idx` of [`OPTIONS`]. Slurm may call this several times for the same
    /// option (twice per step in slurmstepd), so setting is idempotent: values replace.
    pub fn set(&mut self, idx: usize, arg: Option<&str>) -> Result<(), String> {
        let spec = OPTIONS
            .get(idx)
            .ok_or_else(|| format!("unknown option number {idx}"))?;
        let name = spec.name.to_string_lossy();
        let need = |arg: Option<&str>| match arg {
            Some(a) if !a.trim().is_empty() => Ok(a.trim().to_string()),
            _ => Err(format!("--{name} needs a value")),
        };
        match idx {
            IMAGE => self.image = Some(parse_image(&need(arg)?)?),
            MOUNTS => self.mounts = parse_mounts(&need(arg)?).map_err(|e| e.to_string())?,
            WORKDIR => self.workdir = Some(normalize(Path::new(&need(arg)?))),
            ENV => self.env_from_host = parse_env_names(&need(arg)?)?,
            UNSHARE => self.unshare = parse_unshare(&need(arg)?)?,
            WRITABLE | READONLY => {
                switch(&mut self.writable, idx == WRITABLE, (WRITABLE, READONLY))?
            }
            REMAP_ROOT | NO_REMAP_ROOT => switch(
                &mut self.remap_root,
                idx == REMAP_ROOT,
                (REMAP_ROOT, NO_REMAP_ROOT),
            )?,
            MOUNT_HOME | NO_HOME => switch(
                &mut self.mount_home,
                idx == MOUNT_HOME,
                (MOUNT_HOME, NO_HOME),
            )?,
            ENTRYPOINT | NO_ENTRYPOINT => switch(
                &mut self.entrypoint,
                idx == ENTRYPOINT,
                (ENTRYPOINT, NO_ENTRYPOINT),
            )?,
            SAVE => self.save = Some(PathBuf::from(need(arg)?)),
            NAME => self.name = Some(parse_name(&need(arg)?)?),
            ENTRYPOINT_LOG => self.entrypoint_log = true,
            _ => unreachable!("OPTIONS has {} entries", OPTIONS.len()),
        }
        Ok(())
    }

    /// Whether any option other than the image was given (they mean nothing without one).
    pub fn has_container_settings(&self) -> bool {
        *self
            != ContainerOpts {
                image: self.image.clone(),
                ..Default::default()
            }
    }
}

impl Image {
    /// The registry reference, for a registry image.
    pub fn registry(&self) -> Option<&str> {
        match self {
            Image::Registry(r) => Some(r),
            Image::File(_) | Image::Podman(_) => None,
        }
    }
}

/// pyxis's rules: a path starts with `/` or `.`; `REGISTRY#IMAGE` is enroot's registry form;
/// anything else is a registry reference.
pub fn parse_image(s: &str) -> Result<Image, String> {
    if s.starts_with('/') || s.starts_with('.') {
        return Ok(Image::File(PathBuf::from(s)));
    }
    if s.contains(char::is_whitespace) {
        return Err(format!("--container-image={s:?}: contains white space"));
    }
    if let Some((scheme, rest)) = s.split_once("://") {
        return match scheme {
            // enroot's URI form, docker://[REGISTRY#]IMAGE, as pyxis users write it too
            "docker" if rest.contains('#') => parse_image(rest),
            "docker" => Ok(Image::Registry(s.to_string())),
            "podman" if !rest.is_empty() => Ok(Image::Podman(s.to_string())),
            "podman" => Err(format!("--container-image={s}: expected podman://IMAGE")),
            "dockerd" => Err(format!(
                "--container-image={s}: gpurun cannot read the Docker daemon's images (its \
                 socket is root's, and gpurun runs as you); docker save -o FILE.tar IMAGE, \
                 gpurun pull docker-archive:FILE.tar, and give the .sqsh file"
            )),
            _ => Err(format!(
                "--container-image={s}: only docker://, podman:// references and squashfs paths"
            )),
        };
    }
    match s.split_once('#') {
        Some((reg, _)) if reg.contains('@') => Err(format!(
            "--container-image={s}: credentials in the reference (USER@) are not supported; \
             gpurun reads registry logins from ~/.docker/config.json"
        )),
        Some((reg, img)) if !reg.is_empty() && !img.is_empty() => {
            Ok(Image::Registry(format!("docker://{reg}/{img}")))
        }
        Some(_) => Err(format!("--container-image={s}: expected REGISTRY#IMAGE")),
        None => Ok(Image::Registry(format!("docker://{s}"))),
    }
}

/// pyxis's `NAME[:FLAGS]`.
pub fn parse_name(s: &str) -> Result<Named, String> {
    let (name, flag) = s.split_once(':').unwrap_or((s, "auto"));
    if name.is_empty() || name.contains('/') || name.contains("..") || name == "." {
        return Err(format!(
            "--container-name={s}: a name with '/', '..' or nothing in it; use letters, \
             digits, '-', '_' or '.'"
        ));
    }
    let (create, join) = match flag {
        "auto" => (false, Join::IfRunning),
        "create" => (true, Join::IfRunning),
        "exec" => (false, Join::Must),
        "no_exec" => (false, Join::Never),
        f => {
            return Err(format!(
                "--container-name={s}: unknown flag {f:?} (auto, create, exec, no_exec)"
            ))
        }
    };
    Ok(Named {
        name: name.to_string(),
        create,
        join,
    })
}

/// Variable names, comma separated; an empty one (`FOO,`) is an error, as in pyxis.
pub fn parse_env_names(s: &str) -> Result<Vec<String>, String> {
    s.split(',')
        .map(str::trim)
        .map(|n| {
            let ok = !n.is_empty()
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !n.starts_with(|c: char| c.is_ascii_digit());
            if ok {
                Ok(n.to_string())
            } else if n.is_empty() {
                Err(format!(
                    "--container-env={s}: an empty name (a comma too many?)"
                ))
            } else {
                Err(format!("--container-env: {n:?} is not a variable name"))
            }
        })
        .collect()
}

/// `--container-unshare`'s namespaces: pyxis takes net, ipc and uts.
pub fn parse_unshare(s: &str) -> Result<Vec<Unshare>, String> {
    let mut out = Vec::new();
    for ns in s.split(',').map(str::trim) {
        let one = match ns {
            "uts" => Unshare::Uts,
            "net" => Unshare::Net,
            "ipc" => Unshare::Ipc,
            "" => return Err(format!("--container-unshare={s}: an empty namespace")),
            _ => {
                return Err(format!(
                    "--container-unshare={s}: unknown namespace {ns:?} (net, ipc, uts)"
                ))
            }
        };
        if !out.contains(&one) {
            out.push(one);
        }
    }
    Ok(out)
}

impl Unshare {
    /// The namespace's name under /proc/PID/ns.
    pub fn proc_name(self) -> &'static str {
        match self {
            Unshare::Uts => "uts",
            Unshare::Net => "net",
            Unshare::Ipc => "ipc",
        }
    }

    /// The namespace's name in a sentence, as pyxis says it.
    pub fn title(self) -> &'static str {
        match self {
            Unshare::Uts => "UTS",
            Unshare::Net => "network",
            Unshare::Ipc => "IPC",
        }
    }
}

/// pyxis's booleans (its variables and plugstack.conf arguments).
pub fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "true" | "yes" | "y" => Some(true),
        "0" | "false" | "no" | "n" => Some(false),
        _ => None,
    }
}

/// `PYXIS_CONTAINER_*` variables naming a value, and their option.
const VALUE_VARS: [(&str, usize); 7] = [
    ("PYXIS_CONTAINER_IMAGE", IMAGE),
    ("PYXIS_CONTAINER_MOUNTS", MOUNTS),
    ("PYXIS_CONTAINER_WORKDIR", WORKDIR),
    ("PYXIS_CONTAINER_ENV", ENV),
    ("PYXIS_CONTAINER_UNSHARE", UNSHARE),
    ("PYXIS_CONTAINER_SAVE", SAVE),
    ("PYXIS_CONTAINER_NAME", NAME),
];

/// `PYXIS_CONTAINER_*` switches: the option a true value means, and a false one.
const SWITCH_VARS: [(&str, usize, usize); 5] = [
    ("PYXIS_CONTAINER_MOUNT_HOME", MOUNT_HOME, NO_HOME),
    ("PYXIS_CONTAINER_REMAP_ROOT", REMAP_ROOT, NO_REMAP_ROOT),
    ("PYXIS_CONTAINER_ENTRYPOINT", ENTRYPOINT, NO_ENTRYPOINT),
    ("PYXIS_CONTAINER_WRITABLE", WRITABLE, READONLY),
    ("PYXIS_CONTAINER_READONLY", READONLY, WRITABLE),
];

impl ContainerOpts {
    /// Whether option `idx` (or its opposite) was given.
    fn given(&self, idx: usize) -> bool {
        match idx {
            IMAGE => self.image.is_some(),
            MOUNTS => !self.mounts.is_empty(),
            WORKDIR => self.workdir.is_some(),
            ENV => !self.env_from_host.is_empty(),
            UNSHARE => !self.unshare.is_empty(),
            SAVE => self.save.is_some(),
            NAME => self.name.is_some(),
            WRITABLE | READONLY => self.writable.is_some(),
            REMAP_ROOT | NO_REMAP_ROOT => self.remap_root.is_some(),
            MOUNT_HOME | NO_HOME => self.mount_home.is_some(),
            ENTRYPOINT_LOG => self.entrypoint_log,
            _ => self.entrypoint.is_some(),
        }
    }

    /// The `PYXIS_CONTAINER_*` variables, each acting as its option where that was not given,
    /// as pyxis reads them after the options (srun's and sbatch's environment, the job's in
    /// slurmstepd). An empty value is unset; a switch's value that is not one of pyxis's
    /// booleans is left aside, as pyxis does, with a warning. Returns the warnings.
    pub fn apply_env_vars(
        &mut self,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<String>, String> {
        let get = |name: &str| var(name).filter(|v| !v.is_empty());
        let mut warnings = Vec::new();
        for (name, idx) in VALUE_VARS {
            if let Some(v) = get(name).filter(|_| !self.given(idx)) {
                self.set(idx, Some(&v))
                    .map_err(|e| format!("{name}={v}: {e}"))?;
            }
        }
        // a switch without an opposite option: false is its default
        let log = get("PYXIS_CONTAINER_ENTRYPOINT_LOG").filter(|_| !self.entrypoint_log);
        if let Some(v) = log {
            match parse_bool(&v) {
                Some(b) => self.entrypoint_log = b,
                None => warnings.push(format!(
                    "PYXIS_CONTAINER_ENTRYPOINT_LOG={v}: not 1, 0, true, false, yes, no, y or n; left aside"
                )),
            }
        }
        for (name, on, off) in SWITCH_VARS {
            let Some(v) = get(name).filter(|_| !self.given(on)) else {
                continue;
            };
            match parse_bool(&v) {
                Some(b) => self.set(if b { on } else { off }, None)?,
                None => warnings.push(format!(
                    "{name}={v}: not 1, 0, true, false, yes, no, y or n; left aside"
                )),
            }
        }
        Ok(warnings)
    }
}

/// The host's locale variables, which pyxis keeps from the container unless --container-env
/// names them (the image may not have the locale: perl and apt then warn).
const LOCALE_VARS: [&str; 3] = ["LANG", "LANGUAGE", "LC_ALL"];

/// The step's environment without the host's locale variables not named in `from_host`: what
/// the container's environment is composed from.
pub fn without_host_locale(env: Vec<String>, from_host: &[String]) -> Vec<String> {
    env.into_iter()
        .filter(|e| {
            let name = e.split_once('=').map_or(e.as_str(), |(k, _)| k);
            !LOCALE_VARS.contains(&name) || from_host.iter().any(|k| k == name)
        })
        .collect()
}

fn absolute(cwd: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// Where and how the holder starts, besides the options.
pub struct HoldCtx<'a> {
    /// The job's working directory: relative paths are taken from it.
    pub cwd: &'a Path,
    /// The holder's state file.
    pub state: &'a Path,
    /// Whether the image's entrypoint runs (the option, else plugstack.conf's
    /// execute_entrypoint).
    pub entrypoint: bool,
    /// The node's host name, the container's in a UTS namespace of its own.
    pub hostname: &'a str,
    /// The job's id: a named container is the job's.
    pub job: u32,
    /// The job's `$HOME` where it is a directory: bound as the container's home, at `/root`
    /// with remap-root (enroot's home hook binds `$HOME`, not the user database's home).
    pub home: Option<&'a Path>,
    /// The user's directory of named containers on this node (named.rs `prepare`).
    pub containers: &'a Path,
}

/// The arguments after the gpurun binary: `hold [launch options] IMAGE --state FILE`.
pub fn holder_args(o: &ContainerOpts, at: &HoldCtx) -> Result<Vec<String>, String> {
    let image = match o.image.as_ref() {
        Some(Image::File(p)) => absolute(at.cwd, p).display().to_string(),
        Some(Image::Registry(r) | Image::Podman(r)) => r.clone(),
        None if o.name.is_some() => String::new(),
        None => return Err("no --container-image".into()),
    };
    let mut a = vec!["hold".to_string()];
    for m in &o.mounts {
        let (flag, value) = match m {
            // the grammar gpurun's --bind reads writes it back, SRC from the job's directory
            Mount::Bind(b) => {
                let src = absolute(at.cwd, &b.src);
                ("--bind", Bind { src, ..b.clone() }.to_string())
            }
            Mount::Tmpfs { dst, opts } => {
                let dst = dst.display().to_string();
                match opts.is_empty() {
                    true => ("--tmpfs", dst),
                    false => ("--tmpfs", format!("{dst}:{}", opts.join(","))),
                }
            }
            Mount::Umount(dst) => ("--no-mount", dst.display().to_string()),
        };
        a.extend([flag.to_string(), value]);
    }
    match &o.workdir {
        Some(w) => a.extend(["--pwd".to_string(), w.display().to_string()]),
        None => a.push("--image-workdir".into()),
    }
    for ns in &o.unshare {
        match ns {
            Unshare::Uts => a.extend(["--hostname".to_string(), at.hostname.to_string()]),
            Unshare::Net => a.push("--net".into()),
            Unshare::Ipc => a.push("--ipc".into()),
        }
    }
    // gpurun's defaults are pyxis's usual ones: read-only root, own uid, home bound
    let flags = [
        // a named container's root is writable: its changes are what it keeps
        (
            o.writable == Some(true) && o.name.is_none(),
            "--writable-tmpfs",
        ),
        // neither: the site's default (gpurun's writable_root, pyxis's ENROOT_ROOTFS_WRITABLE)
        (o.writable == Some(false) && o.name.is_none(), "--read-only"),
        (o.remap_root == Some(true), "--fakeroot"),
        (o.mount_home == Some(false), "--no-home"),
        (at.entrypoint, "--entrypoint"),
    ];
    a.extend(
        flags
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, f)| f.to_string()),
    );
    if let (Some(h), false) = (at.home, o.mount_home == Some(false)) {
        let dst = match o.remap_root == Some(true) {
            true => Path::new("/root"),
            false => h,
        };
        a.extend([
            "--home".into(),
            format!("{}:{}", h.display(), dst.display()),
        ]);
    }
    if let Some(s) = &o.save {
        a.push("--save".into());
        a.push(absolute(at.cwd, s).display().to_string());
    }
    if let Some(n) = &o.name {
        a.extend(["--name".to_string(), format!("{}.{}", at.job, n.name)]);
        a.extend(["--containers".into(), at.containers.display().to_string()]);
        if n.create {
            a.push("--name-create".into());
        }
    }
    if !image.is_empty() {
        a.push(image);
    }
    a.push("--state".into());
    a.push(at.state.display().to_string());
    Ok(a)
}

/// What the holder's environment gets in addition for the entrypoint: as in pyxis, the host's
/// value of each `--container-env` name is set before the entrypoint runs (`GPURUNENV_K` is
/// gpurun's "K inside" variable, which wins over the image's value).
pub fn entrypoint_env(from_host: &[String], step: &HashMap<String, String>) -> Vec<String> {
    from_host
        .iter()
        .filter_map(|k| step.get(k).map(|v| format!("GPURUNENV_{k}={v}")))
        .collect()
}

/// Arguments from the plugin's plugstack.conf line, e.g.
/// `required /usr/lib/slurm/spank_gpurun.so gpurun=/usr/bin/gpurun timeout=600`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginArgs {
    /// The gpurun binary slurmstepd starts (as the user) to mount the image.
    pub gpurun: PathBuf,
    /// How long a step waits for its container (an image pulled from a registry takes longer).
    pub timeout: Duration,
    /// Whether the image's entrypoint runs when neither --container-entrypoint nor
    /// --no-container-entrypoint is given (pyxis's `execute_entrypoint=`, default no).
    pub execute_entrypoint: bool,
    /// Whether tasks in a PyTorch image get RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
    /// MASTER_PORT from Slurm's variables (`pytorch_env=`, default yes), as with pyxis + enroot's
    /// PyTorch hook.
    pub pytorch_env: bool,
    /// Whether the user is root inside when neither --container-remap-root nor
    /// --no-container-remap-root is given (`remap_root=`, default no): a site's default, as
    /// enroot's ENROOT_REMAP_ROOT is pyxis's.
    pub remap_root: bool,
    /// Who pulls a registry image and how the nodes get it (`pull=`, `pull_cache=`,
    /// `sbcast_dir=`).
    pub job_image: jobimage::Settings,
    /// Where named containers are kept on a node (`containers_dir=`): root's, a directory per
    /// user in it made by the plugin.
    pub containers_dir: PathBuf,
}

impl Default for PluginArgs {
    fn default() -> Self {
        PluginArgs {
            gpurun: PathBuf::from("/usr/local/bin/gpurun"),
            timeout: Duration::from_secs(300),
            execute_entrypoint: false,
            pytorch_env: true,
            remap_root: false,
            job_image: jobimage::Settings::default(),
            containers_dir: PathBuf::from(hold_state::CONTAINERS_DIR),
        }
    }
}

pub fn parse_plugin_args<'a>(
    args: impl IntoIterator<Item = &'a str>,
) -> Result<PluginArgs, String> {
    let unknown = |a: &str| {
        format!(
            "unknown plugstack.conf argument {a:?} (gpurun=PATH, timeout=SECONDS, \
             execute_entrypoint=0|1, pytorch_env=0|1, remap_root=0|1, containers_dir=DIR, {})",
            jobimage::ARGS
        )
    };
    let mut p = PluginArgs::default();
    for a in args {
        match a.split_once('=') {
            Some(("gpurun", v)) if v.starts_with('/') => p.gpurun = PathBuf::from(v),
            Some(("gpurun", v)) => return Err(format!("gpurun={v}: needs an absolute path")),
            Some(("containers_dir", v)) if v.starts_with('/') => {
                p.containers_dir = PathBuf::from(v)
            }
            Some(("containers_dir", v)) => {
                return Err(format!("containers_dir={v}: needs an absolute path"))
            }
            Some(("timeout", v)) => match v.parse::<u64>() {
                Ok(s) if s > 0 => p.timeout = Duration::from_secs(s),
                _ => return Err(format!("timeout={v}: needs a positive number of seconds")),
            },
            Some(("execute_entrypoint", v)) => {
                p.execute_entrypoint = parse_bool(v)
                    .ok_or_else(|| format!("execute_entrypoint={v}: needs 1 or 0 (yes, no)"))?
            }
            Some(("pytorch_env", v)) => {
                p.pytorch_env = parse_bool(v)
                    .ok_or_else(|| format!("pytorch_env={v}: needs 1 or 0 (yes, no)"))?
            }
            Some(("remap_root", v)) => {
                p.remap_root = parse_bool(v)
                    .ok_or_else(|| format!("remap_root={v}: needs 1 or 0 (yes, no)"))?
            }
            Some((k, v)) => match p.job_image.parse_arg(k, v) {
                Some(r) => r?,
                None => return Err(unknown(a)),
            },
            None => return Err(unknown(a)),
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(s: &str) -> Result<Image, String> {
        Ok(Image::Registry(s.into()))
    }
    fn file(s: &str) -> Result<Image, String> {
        Ok(Image::File(s.into()))
    }
    fn podman(s: &str) -> Result<Image, String> {
        Ok(Image::Podman(s.into()))
    }

    #[test]
    fn images() {
        let table: &[(&str, Result<Image, String>)] = &[
            ("/scratch/pytorch.sqsh", file("/scratch/pytorch.sqsh")),
            ("./img.sqsh", file("./img.sqsh")),
            ("../img.sqsh", file("../img.sqsh")),
            ("ubuntu:22.04", reg("docker://ubuntu:22.04")),
            (
                "nvcr.io#nvidia/pytorch:24.05-py3",
                reg("docker://nvcr.io/nvidia/pytorch:24.05-py3"),
            ),
            (
                "docker://127.0.0.1:5000#nvidia/cuda:12.5",
                reg("docker://127.0.0.1:5000/nvidia/cuda:12.5"),
            ),
            (
                "docker://nvcr.io/nvidia/pytorch:24.05-py3",
                reg("docker://nvcr.io/nvidia/pytorch:24.05-py3"),
            ),
            ("alpine@sha256:abcd", reg("docker://alpine@sha256:abcd")),
            // As written: the node's gpurun converts it from the user's podman store there.
            (
                "podman://localhost/app:v1",
                podman("podman://localhost/app:v1"),
            ),
            ("podman://ubuntu", podman("podman://ubuntu")),
        ];
        for (input, want) in table {
            assert_eq!(&parse_image(input), want, "{input}");
        }
        for bad in [
            "user@nvcr.io#nvidia/pytorch",
            "#x",
            "nvcr.io#",
            "http://x/y",
            "a b",
            "podman://",
            "podman://a b",
        ] {
            assert!(parse_image(bad).is_err(), "{bad} accepted");
        }
        let e = parse_image("dockerd://ubuntu").unwrap_err();
        assert!(
            e.contains("Docker daemon") && e.contains("docker save"),
            "{e}"
        );
        let registry = |s: &str| parse_image(s).unwrap().registry().map(String::from);
        assert_eq!(registry("ubuntu"), Some("docker://ubuntu".into()));
        assert_eq!(registry("/x.sqsh"), None);
        // Not pulled by srun for the job: the store it is in is the node's.
        assert_eq!(registry("podman://localhost/app:v1"), None);
    }

    fn m(src: &str, dst: &str, readonly: bool) -> Mount {
        Mount::Bind(Bind::new(src, dst, readonly))
    }

    /// The option reaches the grammar (whose table is mount-grammar/src/pyxis.rs), its errors
    /// one line each.
    #[test]
    fn mounts() {
        let mut o = ContainerOpts::default();
        o.set(MOUNTS, Some("/a:/b:rw, ./c:./d:ro,")).unwrap();
        assert_eq!(o.mounts, [m("/a", "/b", false), m("./c", "/d", true)]);
        refused(
            |v| ContainerOpts::default().set(MOUNTS, Some(v)),
            &[
                (
                    "/a:/b:sync",
                    "--container-mounts: \"/a:/b:sync\": unknown flag sync",
                ),
                ("/tmp:mnt:ro", "the destination mnt is not a path"),
            ],
        );
    }

    /// Each input is refused with one line that contains its text.
    fn refused<T: std::fmt::Debug>(parse: fn(&str) -> Result<T, String>, table: &[(&str, &str)]) {
        for (input, want) in table {
            let e = parse(input).unwrap_err();
            assert!(e.contains(want) && !e.contains('\n'), "{input}: {e}");
        }
    }

    #[test]
    fn env_names() {
        assert_eq!(
            parse_env_names("PATH, LD_LIBRARY_PATH").unwrap(),
            ["PATH", "LD_LIBRARY_PATH"]
        );
        refused(
            parse_env_names,
            &[
                ("A-B", "not a variable name"),
                ("1X", "not a variable name"),
                ("A=B", "not a variable name"),
                ("FOO,", "an empty name"),
                (",FOO", "an empty name"),
                ("A,,B", "an empty name"),
            ],
        );
    }

    #[test]
    fn unshare() {
        assert_eq!(parse_unshare("uts").unwrap(), [Unshare::Uts]);
        assert_eq!(parse_unshare("uts,uts").unwrap(), [Unshare::Uts]);
        assert_eq!(
            parse_unshare("net, ipc,uts,net").unwrap(),
            [Unshare::Net, Unshare::Ipc, Unshare::Uts]
        );
        refused(
            parse_unshare,
            &[
                ("pid", "unknown namespace \"pid\""),
                ("uts,", "an empty namespace"),
            ],
        );
    }

    #[test]
    fn locale_of_the_host_is_dropped() {
        let env: Vec<String> = [
            "LANG=en_US.UTF-8",
            "LC_ALL=C",
            "LANGUAGE=en",
            "LC_TIME=C",
            "A=1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(without_host_locale(env.clone(), &[]), ["LC_TIME=C", "A=1"]);
        assert_eq!(
            without_host_locale(env, &["LANG".into()]),
            ["LANG=en_US.UTF-8", "LC_TIME=C", "A=1"]
        );
    }

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    /// Each `PYXIS_CONTAINER_*` variable acts as its option; the option wins.
    #[test]
    fn pyxis_variables() {
        let from = |pairs: &[(&str, &str)], opts: &[(usize, Option<&str>)]| {
            let mut o = ContainerOpts::default();
            for (i, a) in opts {
                o.set(*i, *a).unwrap();
            }
            o.apply_env_vars(&vars(pairs)).map(|w| (o, w))
        };
        let (o, w) = from(
            &[
                ("PYXIS_CONTAINER_IMAGE", "ubuntu:24.04"),
                ("PYXIS_CONTAINER_MOUNTS", "/a:/b:ro"),
                ("PYXIS_CONTAINER_WORKDIR", "/w"),
                ("PYXIS_CONTAINER_ENV", "FOO,BAR"),
                ("PYXIS_CONTAINER_UNSHARE", "uts"),
                ("PYXIS_CONTAINER_MOUNT_HOME", "0"),
                ("PYXIS_CONTAINER_REMAP_ROOT", "yes"),
                ("PYXIS_CONTAINER_ENTRYPOINT", "true"),
                ("PYXIS_CONTAINER_WRITABLE", "1"),
                ("PYXIS_CONTAINER_READONLY", "1"),
            ],
            &[],
        )
        .unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            o.image,
            Some(Image::Registry("docker://ubuntu:24.04".into()))
        );
        assert_eq!(o.mounts, [m("/a", "/b", true)]);
        assert_eq!(o.workdir, Some("/w".into()));
        assert_eq!(o.env_from_host, ["FOO", "BAR"]);
        assert_eq!(o.unshare, [Unshare::Uts]);
        // WRITABLE is read before READONLY, as in pyxis
        let got = (o.mount_home, o.remap_root, o.entrypoint, o.writable);
        assert_eq!(got, (Some(false), Some(true), Some(true), Some(true)));

        // the options win, each over its variable
        let (o, _) = from(
            &[
                ("PYXIS_CONTAINER_IMAGE", "ubuntu:22.04"),
                ("PYXIS_CONTAINER_MOUNTS", "/e:/e"),
                ("PYXIS_CONTAINER_WORKDIR", "/e"),
                ("PYXIS_CONTAINER_WRITABLE", "1"),
                ("PYXIS_CONTAINER_REMAP_ROOT", "1"),
            ],
            &[
                (IMAGE, Some("/i.sqsh")),
                (MOUNTS, Some("/c:/c")),
                (WORKDIR, Some("/c")),
                (READONLY, None),
                (NO_REMAP_ROOT, None),
            ],
        )
        .unwrap();
        assert_eq!(o.image, Some(Image::File("/i.sqsh".into())));
        assert_eq!(o.mounts, [m("/c", "/c", false)]);
        assert_eq!(
            (o.workdir, o.writable, o.remap_root),
            (Some("/c".into()), Some(false), Some(false))
        );

        // READONLY=0 is writable; empty values are unset
        let (o, w) = from(
            &[
                ("PYXIS_CONTAINER_READONLY", "0"),
                ("PYXIS_CONTAINER_IMAGE", ""),
            ],
            &[],
        )
        .unwrap();
        assert_eq!((o.writable, o.image, w.len()), (Some(true), None, 0));

        // not a boolean: left aside with a warning; a name is the option's
        let (o, w) = from(
            &[
                ("PYXIS_CONTAINER_WRITABLE", "on"),
                ("PYXIS_CONTAINER_NAME", "c1:create"),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(o.writable, None);
        assert!(
            w[0].starts_with("PYXIS_CONTAINER_WRITABLE=on: not 1, 0"),
            "{w:?}"
        );
        assert_eq!(w.len(), 1, "{w:?}");
        let named = |n: &str, create| Named {
            name: n.into(),
            create,
            join: Join::IfRunning,
        };
        assert_eq!(o.name, Some(named("c1", true)));
        // the option wins over the variable
        let (o, _) = from(&[("PYXIS_CONTAINER_NAME", "c1")], &[(NAME, Some("c2"))]).unwrap();
        assert_eq!(o.name, Some(named("c2", false)));

        // a bad value is the option's error, naming the variable
        let e = from(&[("PYXIS_CONTAINER_ENV", "FOO,")], &[]).unwrap_err();
        assert!(
            e.starts_with("PYXIS_CONTAINER_ENV=FOO,: --container-env"),
            "{e}"
        );
    }

    #[test]
    fn set_options() {
        let mut o = ContainerOpts::default();
        assert!(!o.has_container_settings());
        o.set(IMAGE, Some("./x.sqsh")).unwrap();
        assert!(!o.has_container_settings());
        o.set(MOUNTS, Some("/a:/b")).unwrap();
        o.set(MOUNTS, Some("/a:/b")).unwrap(); // called twice by slurmstepd: same result
        assert_eq!(o.mounts.len(), 1);
        o.set(WRITABLE, None).unwrap();
        assert!(o.has_container_settings());
        assert!(o.set(IMAGE, Some("  ")).is_err());
        assert!(o.set(IMAGE, None).is_err());
        o.set(WORKDIR, Some("rel")).unwrap();
        assert_eq!(o.workdir, Some("/rel".into()));
        assert!(o.set(SAVE, None).is_err());
        assert!(o.set(OPTIONS.len(), None).is_err());
    }

    /// Each switch and its opposite, as pyxis: the same one twice is fine (slurmstepd calls
    /// again), both is an error that names them.
    #[test]
    fn switches() {
        let table = [
            (
                WRITABLE,
                READONLY,
                "container-writable",
                "container-readonly",
            ),
            (
                REMAP_ROOT,
                NO_REMAP_ROOT,
                "container-remap-root",
                "no-container-remap-root",
            ),
            (
                MOUNT_HOME,
                NO_HOME,
                "container-mount-home",
                "no-container-mount-home",
            ),
            (
                ENTRYPOINT,
                NO_ENTRYPOINT,
                "container-entrypoint",
                "no-container-entrypoint",
            ),
        ];
        let slot = |o: &ContainerOpts, on: usize| match on {
            WRITABLE => o.writable,
            REMAP_ROOT => o.remap_root,
            MOUNT_HOME => o.mount_home,
            _ => o.entrypoint,
        };
        for (on, off, on_name, off_name) in table {
            for (first, value) in [(on, true), (off, false)] {
                let mut o = ContainerOpts::default();
                assert_eq!(slot(&o, on), None);
                o.set(first, None).unwrap();
                o.set(first, None).unwrap();
                assert_eq!(slot(&o, on), Some(value), "{on_name}");
                assert!(o.has_container_settings());
                let other = if first == on { off } else { on };
                let e = o.set(other, None).unwrap_err();
                assert!(e.contains(&format!("--{on_name} and --{off_name}")), "{e}");
            }
        }
    }

    #[test]
    fn table_matches_indices() {
        let names: Vec<_> = OPTIONS.iter().map(|o| o.name.to_str().unwrap()).collect();
        let want = [
            (IMAGE, "container-image"),
            (MOUNTS, "container-mounts"),
            (WORKDIR, "container-workdir"),
            (ENV, "container-env"),
            (WRITABLE, "container-writable"),
            (READONLY, "container-readonly"),
            (REMAP_ROOT, "container-remap-root"),
            (NO_REMAP_ROOT, "no-container-remap-root"),
            (MOUNT_HOME, "container-mount-home"),
            (NO_HOME, "no-container-mount-home"),
            (ENTRYPOINT, "container-entrypoint"),
            (NO_ENTRYPOINT, "no-container-entrypoint"),
            (UNSHARE, "container-unshare"),
            (SAVE, "container-save"),
            (NAME, "container-name"),
            (ENTRYPOINT_LOG, "container-entrypoint-log"),
        ];
        assert_eq!(want.len(), OPTIONS.len());
        for (i, name) in want {
            assert_eq!(names[i], name);
            assert_eq!(
                OPTIONS[i].arginfo.is_some(),
                i <= ENV || i == UNSHARE || i == SAVE || i == NAME,
                "{name}"
            );
        }
    }

    fn at<'a>(cwd: &'a str, state: &'a str, entrypoint: bool) -> HoldCtx<'a> {
        HoldCtx {
            cwd: Path::new(cwd),
            state: Path::new(state),
            entrypoint,
            hostname: "node1",
            job: 42,
            home: None,
            containers: Path::new("/c/1000"),
        }
    }

    #[test]
    fn container_names() {
        let ok = |s: &str| parse_name(s).map(|n| (n.name, n.create, n.join));
        for (s, (name, create, join)) in [
            ("c1", ("c1", false, Join::IfRunning)),
            ("c1:auto", ("c1", false, Join::IfRunning)),
            ("c1:exec", ("c1", false, Join::Must)),
            ("c1:no_exec", ("c1", false, Join::Never)),
            ("c1:create", ("c1", true, Join::IfRunning)),
            ("my.box-2", ("my.box-2", false, Join::IfRunning)),
        ] {
            assert_eq!(ok(s), Ok((name.to_string(), create, join)), "{s}");
        }
        for (s, why) in [
            ("a/b", "a name with '/'"),
            ("..", "a name with '/'"),
            ("x..y", "a name with '/'"),
            (":create", "a name with '/'"),
            ("c1:bogus", "unknown flag \"bogus\""),
        ] {
            let e = ok(s).unwrap_err();
            assert!(e.starts_with(&format!("--container-name={s}: ")), "{e}");
            assert!(e.contains(why), "{s}: {e}");
        }
        let mut o = ContainerOpts::default();
        assert!(o.set(NAME, None).is_err());
        o.set(NAME, Some("c1")).unwrap();
        assert!(o.has_container_settings());
    }

    #[test]
    fn named_holder_command_line() {
        type Case<'a> = (&'a [(usize, Option<&'a str>)], &'a str);
        let cases: [Case; 2] = [
            // no image: the holder runs the one the container was made from
            (
                &[(NAME, Some("c1:create"))],
                "hold --image-workdir --name 42.c1 --containers /c/1000 --name-create --state /s",
            ),
            // writable anyway: no tmpfs over the kept changes
            (
                &[
                    (NAME, Some("c1")),
                    (IMAGE, Some("/i.sqsh")),
                    (WRITABLE, None),
                ],
                "hold --image-workdir --name 42.c1 --containers /c/1000 /i.sqsh --state /s",
            ),
        ];
        for (set, want) in cases {
            let mut o = ContainerOpts::default();
            for (i, arg) in set {
                o.set(*i, *arg).unwrap();
            }
            let args = holder_args(&o, &at("/w", "/s", false)).unwrap();
            assert_eq!(args.join(" "), want);
        }
    }

    #[test]
    fn holder_command_line() {
        let mut o = ContainerOpts::default();
        assert!(holder_args(&o, &at("/w", "/s", false)).is_err());
        o.set(IMAGE, Some("./img.sqsh")).unwrap();
        assert_eq!(
            holder_args(&o, &at("/home/u/job", "/tmp/d/state.json", false)).unwrap(),
            [
                "hold",
                "--image-workdir",
                "/home/u/job/./img.sqsh",
                "--state",
                "/tmp/d/state.json"
            ]
        );
        // podman://: as given, for the node's gpurun to convert from the user's store there.
        o.set(IMAGE, Some("podman://localhost/app:v1")).unwrap();
        assert_eq!(
            holder_args(&o, &at("/w", "/s", false)).unwrap().join(" "),
            "hold --image-workdir podman://localhost/app:v1 --state /s"
        );
        o.set(IMAGE, Some("ubuntu")).unwrap();
        o.set(
            MOUNTS,
            Some("data:/data:ro+nodev,/scratch,umount:/etc/hosts,tmpfs:/t:size=1G+mode=700"),
        )
        .unwrap();
        o.set(WORKDIR, Some("/data")).unwrap();
        o.set(UNSHARE, Some("uts,net,ipc")).unwrap();
        for f in [WRITABLE, REMAP_ROOT, NO_HOME] {
            o.set(f, None).unwrap();
        }
        o.set(SAVE, Some("out/saved.sqsh")).unwrap();
        assert_eq!(
            holder_args(&o, &at("/w", "/s", true)).unwrap(),
            [
                "hold",
                "--bind",
                "/w/data:/data:ro+nodev",
                "--bind",
                "/scratch:/scratch",
                "--no-mount",
                "/etc/hosts",
                "--tmpfs",
                "/t:size=1G,mode=700",
                "--pwd",
                "/data",
                "--hostname",
                "node1",
                "--net",
                "--ipc",
                "--writable-tmpfs",
                "--fakeroot",
                "--no-home",
                "--entrypoint",
                "--save",
                "/w/out/saved.sqsh",
                "docker://ubuntu",
                "--state",
                "/s"
            ]
        );
        // the defaults spelled out change nothing: own uid, home bound; the root is the
        // site's default (writable_root) unless --container-readonly says read-only
        let mut d = ContainerOpts::default();
        d.set(IMAGE, Some("/i.sqsh")).unwrap();
        for f in [NO_REMAP_ROOT, MOUNT_HOME] {
            d.set(f, None).unwrap();
        }
        let plain = ["hold", "--image-workdir", "/i.sqsh", "--state", "/s"];
        assert_eq!(holder_args(&d, &at("/w", "/s", false)).unwrap(), plain);
        d.set(READONLY, None).unwrap();
        assert_eq!(
            holder_args(&d, &at("/w", "/s", false)).unwrap(),
            [
                "hold",
                "--image-workdir",
                "--read-only",
                "/i.sqsh",
                "--state",
                "/s"
            ]
        );
    }

    /// The job's `$HOME` is the container's home, at `/root` with remap-root (enroot's home
    /// hook), and nowhere with --no-container-mount-home.
    #[test]
    fn home_from_the_job() {
        let home = Path::new("/tmp");
        for (flags, want) in [
            (&[][..], Some("/tmp:/tmp")),
            (&[MOUNT_HOME][..], Some("/tmp:/tmp")),
            (&[REMAP_ROOT, MOUNT_HOME][..], Some("/tmp:/root")),
            (&[REMAP_ROOT, NO_HOME][..], None),
        ] {
            let mut o = ContainerOpts::default();
            o.set(IMAGE, Some("/i.sqsh")).unwrap();
            for f in flags {
                o.set(*f, None).unwrap();
            }
            let at = HoldCtx {
                home: Some(home),
                ..at("/w", "/s", false)
            };
            let args = holder_args(&o, &at).unwrap();
            let got = args
                .iter()
                .position(|a| a == "--home")
                .map(|i| args[i + 1].as_str());
            assert_eq!(got, want, "{flags:?}");
        }
    }

    #[test]
    fn entrypoint_gets_the_named_host_values() {
        let step: HashMap<String, String> = [("A", "1"), ("B", "x=y"), ("C", "3")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let names = ["B".to_string(), "MISSING".into(), "A".into()];
        assert_eq!(
            entrypoint_env(&names, &step),
            ["GPURUNENV_B=x=y", "GPURUNENV_A=1"]
        );
        assert!(entrypoint_env(&[], &step).is_empty());
    }

    #[test]
    fn plugin_args() {
        assert_eq!(parse_plugin_args([]).unwrap(), PluginArgs::default());
        let p = parse_plugin_args(["gpurun=/opt/gpurun/bin/gpurun", "timeout=20"]).unwrap();
        assert_eq!(p.gpurun, Path::new("/opt/gpurun/bin/gpurun"));
        assert_eq!(p.timeout, Duration::from_secs(20));
        assert!(!PluginArgs::default().execute_entrypoint);
        for (v, want) in [
            ("1", true),
            ("yes", true),
            ("y", true),
            ("0", false),
            ("no", false),
        ] {
            let arg = format!("execute_entrypoint={v}");
            assert_eq!(
                parse_plugin_args([arg.as_str()])
                    .unwrap()
                    .execute_entrypoint,
                want
            );
        }
        assert!(PluginArgs::default().pytorch_env);
        assert!(!parse_plugin_args(["pytorch_env=0"]).unwrap().pytorch_env);
        assert!(!PluginArgs::default().remap_root);
        assert!(parse_plugin_args(["remap_root=yes"]).unwrap().remap_root);
        let p = parse_plugin_args(["pull=shared", "pull_cache=%h/.cache/gpurun"]).unwrap();
        assert_eq!(p.job_image.mode, jobimage::Mode::Shared);
        for bad in [
            "gpurun=gpurun",
            "timeout=0",
            "timeout=x",
            "verbose",
            "pull=x",
            "execute_entrypoint=maybe",
            "pytorch_env=x",
            "remap_root=2",
        ] {
            assert!(parse_plugin_args([bad]).is_err(), "{bad} accepted");
        }
    }
}

//! The plugin's command-line options (pyxis-compatible names) and plugstack.conf arguments, and
//! how they become a `gpurun hold` command line. Pure: no Slurm, no syscalls.

use std::collections::HashMap;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::jobimage;

/// One option as registered with Slurm; `val` in `struct spank_option` is the index in [`OPTIONS`].
pub struct OptSpec {
    pub name: &'static CStr,
    /// None: a flag without argument.
    pub arginfo: Option<&'static CStr>,
    pub usage: &'static CStr,
}

/// Same names and meanings as pyxis, so job scripts written for pyxis run unchanged.
pub const OPTIONS: [OptSpec; 12] = [
    OptSpec {
        name: c"container-image",
        arginfo: Some(c"IMAGE"),
        usage:
            c"[gpurun] run the step's tasks in this image: a squashfs file (absolute or ./relative \
                 path) or a registry reference (docker://REF, REGISTRY#IMAGE, IMAGE[:TAG])",
    },
    OptSpec {
        name: c"container-mounts",
        arginfo: Some(c"SRC[:DST[:ro|rw]][,...]"),
        usage: c"[gpurun] bind host paths into the container",
    },
    OptSpec {
        name: c"container-workdir",
        arginfo: Some(c"DIR"),
        usage: c"[gpurun] working directory inside the container",
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

/// Where the image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// A squashfs file; relative paths are taken from the job's working directory.
    File(PathBuf),
    /// A registry reference, always written `docker://…` for gpurun.
    Registry(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub src: PathBuf,
    pub dst: PathBuf,
    pub ro: bool,
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
            MOUNTS => self.mounts = parse_mounts(&need(arg)?)?,
            WORKDIR => {
                let d = need(arg)?;
                if !d.starts_with('/') {
                    return Err(format!("--container-workdir={d}: must be an absolute path"));
                }
                self.workdir = Some(PathBuf::from(d));
            }
            ENV => self.env_from_host = parse_env_names(&need(arg)?)?,
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
            Image::File(_) => None,
        }
    }
}

/// pyxis's rules: a path starts with `/` or `.`; `REGISTRY#IMAGE` is enroot's registry form;
/// anything else is a registry reference.
pub fn parse_image(s: &str) -> Result<Image, String> {
    if s.starts_with('/') || s.starts_with('.') {
        return Ok(Image::File(PathBuf::from(s)));
    }
    if s.contains("://") {
        return if s.starts_with("docker://") {
            Ok(Image::Registry(s.to_string()))
        } else {
            Err(format!(
                "--container-image={s}: only docker:// references and squashfs paths"
            ))
        };
    }
    if s.contains(char::is_whitespace) {
        return Err(format!("--container-image={s:?}: contains white space"));
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

/// `SRC[:DST[:FLAGS]]` separated by commas; FLAGS is `ro` or `rw` (pyxis's other flags have no
/// gpurun equivalent and are refused rather than silently ignored).
pub fn parse_mounts(s: &str) -> Result<Vec<Mount>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(|m| {
            let parts: Vec<&str> = m.split(':').collect();
            let (src, dst, flags) = match parts[..] {
                [src] => (src, src, None),
                [src, dst] => (src, dst, None),
                [src, dst, flags] => (src, dst, Some(flags)),
                _ => {
                    return Err(format!(
                        "--container-mounts: {m:?} is not SRC[:DST[:ro|rw]]"
                    ))
                }
            };
            if src.is_empty() || dst.is_empty() {
                return Err(format!("--container-mounts: {m:?} has an empty path"));
            }
            if !dst.starts_with('/') {
                return Err(format!(
                    "--container-mounts: destination {dst:?} must be absolute"
                ));
            }
            let ro = match flags {
                None | Some("rw") => false,
                Some("ro") => true,
                Some(f) => {
                    return Err(format!(
                        "--container-mounts: flag {f:?} in {m:?}: only ro or rw"
                    ))
                }
            };
            Ok(Mount {
                src: PathBuf::from(src),
                dst: PathBuf::from(dst),
                ro,
            })
        })
        .collect()
}

/// Variable names, comma separated.
pub fn parse_env_names(s: &str) -> Result<Vec<String>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            let ok = n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !n.starts_with(|c: char| c.is_ascii_digit());
            if ok {
                Ok(n.to_string())
            } else {
                Err(format!("--container-env: {n:?} is not a variable name"))
            }
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

/// The arguments after the gpurun binary: `hold [launch options] IMAGE --state FILE`.
/// Relative paths are resolved against `cwd`, the job's working directory; `entrypoint` is
/// whether the image's entrypoint runs (the option, else plugstack.conf's execute_entrypoint).
pub fn holder_args(
    o: &ContainerOpts,
    cwd: &Path,
    state: &Path,
    entrypoint: bool,
) -> Result<Vec<String>, String> {
    let image = match o.image.as_ref() {
        Some(Image::File(p)) => absolute(cwd, p).display().to_string(),
        Some(Image::Registry(r)) => r.clone(),
        None => return Err("no --container-image".into()),
    };
    let mut a = vec!["hold".to_string()];
    for m in &o.mounts {
        let mode = if m.ro { ":ro" } else { "" };
        a.push("--bind".into());
        a.push(format!(
            "{}:{}{mode}",
            absolute(cwd, &m.src).display(),
            m.dst.display()
        ));
    }
    if let Some(w) = &o.workdir {
        a.push("--pwd".into());
        a.push(w.display().to_string());
    }
    // gpurun's defaults are pyxis's usual ones: read-only root, own uid, home bound
    let flags = [
        (o.writable == Some(true), "--writable-tmpfs"),
        (o.remap_root == Some(true), "--fakeroot"),
        (o.mount_home == Some(false), "--no-home"),
        (entrypoint, "--entrypoint"),
    ];
    a.extend(
        flags
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, f)| f.to_string()),
    );
    a.push(image);
    a.push("--state".into());
    a.push(state.display().to_string());
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
    /// Who pulls a registry image and how the nodes get it (`pull=`, `pull_cache=`,
    /// `sbcast_dir=`).
    pub job_image: jobimage::Settings,
}

impl Default for PluginArgs {
    fn default() -> Self {
        PluginArgs {
            gpurun: PathBuf::from("/usr/local/bin/gpurun"),
            timeout: Duration::from_secs(300),
            execute_entrypoint: false,
            job_image: jobimage::Settings::default(),
        }
    }
}

pub fn parse_plugin_args<'a>(
    args: impl IntoIterator<Item = &'a str>,
) -> Result<PluginArgs, String> {
    let unknown = |a: &str| {
        format!(
            "unknown plugstack.conf argument {a:?} (gpurun=PATH, timeout=SECONDS, \
             execute_entrypoint=0|1, {})",
            jobimage::ARGS
        )
    };
    let mut p = PluginArgs::default();
    for a in args {
        match a.split_once('=') {
            Some(("gpurun", v)) if v.starts_with('/') => p.gpurun = PathBuf::from(v),
            Some(("gpurun", v)) => return Err(format!("gpurun={v}: needs an absolute path")),
            Some(("timeout", v)) => match v.parse::<u64>() {
                Ok(s) if s > 0 => p.timeout = Duration::from_secs(s),
                _ => return Err(format!("timeout={v}: needs a positive number of seconds")),
            },
            Some(("execute_entrypoint", v)) => {
                p.execute_entrypoint = match v {
                    "1" | "true" | "yes" | "y" => true,
                    "0" | "false" | "no" | "n" => false,
                    _ => return Err(format!("execute_entrypoint={v}: needs 1 or 0 (yes, no)")),
                }
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
                "docker://nvcr.io/nvidia/pytorch:24.05-py3",
                reg("docker://nvcr.io/nvidia/pytorch:24.05-py3"),
            ),
            ("alpine@sha256:abcd", reg("docker://alpine@sha256:abcd")),
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
        ] {
            assert!(parse_image(bad).is_err(), "{bad} accepted");
        }
        let registry = |s: &str| parse_image(s).unwrap().registry().map(String::from);
        assert_eq!(registry("ubuntu"), Some("docker://ubuntu".into()));
        assert_eq!(registry("/x.sqsh"), None);
    }

    fn m(src: &str, dst: &str, ro: bool) -> Mount {
        Mount {
            src: src.into(),
            dst: dst.into(),
            ro,
        }
    }

    #[test]
    fn mounts() {
        let ok: &[(&str, Vec<Mount>)] = &[
            ("/data", vec![m("/data", "/data", false)]),
            ("/data:/in", vec![m("/data", "/in", false)]),
            ("/data:/in:ro", vec![m("/data", "/in", true)]),
            (
                "/a:/b:rw, /c:/d:ro,",
                vec![m("/a", "/b", false), m("/c", "/d", true)],
            ),
            ("./rel:/x", vec![m("./rel", "/x", false)]),
        ];
        for (input, want) in ok {
            assert_eq!(&parse_mounts(input).unwrap(), want, "{input}");
        }
        for bad in ["/a:rel", "/a:/b:nosuid", "/a:/b:ro:x", ":/b", "/a::ro"] {
            assert!(parse_mounts(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn env_names() {
        assert_eq!(
            parse_env_names("PATH, LD_LIBRARY_PATH,").unwrap(),
            ["PATH", "LD_LIBRARY_PATH"]
        );
        for bad in ["A-B", "1X", "A=B"] {
            assert!(parse_env_names(bad).is_err(), "{bad} accepted");
        }
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
        assert!(o.set(WORKDIR, Some("rel")).is_err());
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
        ];
        assert_eq!(want.len(), OPTIONS.len());
        for (i, name) in want {
            assert_eq!(names[i], name);
            assert_eq!(OPTIONS[i].arginfo.is_some(), i <= ENV, "{name}");
        }
    }

    #[test]
    fn holder_command_line() {
        let mut o = ContainerOpts::default();
        assert!(holder_args(&o, Path::new("/w"), Path::new("/s"), false).is_err());
        o.set(IMAGE, Some("./img.sqsh")).unwrap();
        assert_eq!(
            holder_args(
                &o,
                Path::new("/home/u/job"),
                Path::new("/tmp/d/state.json"),
                false
            )
            .unwrap(),
            [
                "hold",
                "/home/u/job/./img.sqsh",
                "--state",
                "/tmp/d/state.json"
            ]
        );
        o.set(IMAGE, Some("ubuntu")).unwrap();
        o.set(MOUNTS, Some("data:/data:ro,/scratch")).unwrap();
        o.set(WORKDIR, Some("/data")).unwrap();
        for f in [WRITABLE, REMAP_ROOT, NO_HOME] {
            o.set(f, None).unwrap();
        }
        assert_eq!(
            holder_args(&o, Path::new("/w"), Path::new("/s"), true).unwrap(),
            [
                "hold",
                "--bind",
                "/w/data:/data:ro",
                "--bind",
                "/scratch:/scratch",
                "--pwd",
                "/data",
                "--writable-tmpfs",
                "--fakeroot",
                "--no-home",
                "--entrypoint",
                "docker://ubuntu",
                "--state",
                "/s"
            ]
        );
        // the defaults spelled out change nothing: read-only, own uid, home bound
        let mut d = ContainerOpts::default();
        d.set(IMAGE, Some("/i.sqsh")).unwrap();
        for f in [READONLY, NO_REMAP_ROOT, MOUNT_HOME] {
            d.set(f, None).unwrap();
        }
        assert_eq!(
            holder_args(&d, Path::new("/w"), Path::new("/s"), false).unwrap(),
            ["hold", "/i.sqsh", "--state", "/s"]
        );
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
        let p = parse_plugin_args(["pull=shared", "pull_cache=%h/.cache/gpurun"]).unwrap();
        assert_eq!(p.job_image.mode, jobimage::Mode::Shared);
        for bad in [
            "gpurun=gpurun",
            "timeout=0",
            "timeout=x",
            "verbose",
            "pull=x",
            "execute_entrypoint=maybe",
        ] {
            assert!(parse_plugin_args([bad]).is_err(), "{bad} accepted");
        }
    }
}

//! Settings: the site file `/etc/gpurun/gpurun.toml`, the user file
//! `~/.config/gpurun/config.toml` (`$XDG_CONFIG_HOME` respected), `GPURUN_*` environment
//! variables, then command-line flags — later wins. Lists are replaced by a later layer, except
//! binds: like Apptainer's `bind path` + `APPTAINER_BIND` + `--bind`, the site's default binds,
//! the user's, `GPURUN_BIND` and `--bind` all apply. Flags are applied by each command on top of
//! [`Config`]; `gpurun config show` prints the file and environment layers with their origins.
//!
//! There is no tmp_dir / GPURUN_TMPDIR: gpurun writes no temporary files of its own (pull writes
//! next to its output, the extraction fallback into the cache).
//!
//! Site file example:
//!
//! ```toml
//! binds = ["/scratch", "/apps:/apps:ro"]
//! nv_driver_paths = ["/opt/nvidia/lib64"]
//! cache_dir = "/local/gpurun-cache"
//! allowed_registries = ["nvcr.io", "docker.io", "registry.example.org"]
//! compression = "zstd"
//! pull_threads = 8
//! cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
//! writable_root = true
//! overlay_driver = "fuse-overlayfs"
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::mount::OverlayDriver;
use crate::units::parse_idle;

pub const SITE_FILE: &str = "/etc/gpurun/gpurun.toml";

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind", content = "name")]
pub enum Origin {
    Default,
    Site(PathBuf),
    User(PathBuf),
    Env(String),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::Site(p) => write!(f, "site file {}", p.display()),
            Origin::User(p) => write!(f, "user file {}", p.display()),
            Origin::Env(v) => write!(f, "environment {v}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sourced<T> {
    pub value: T,
    pub from: Origin,
}

impl<T: Default> Default for Sourced<T> {
    fn default() -> Self {
        Sourced {
            value: T::default(),
            from: Origin::Default,
        }
    }
}

/// One file's settings; every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileLayer {
    pub binds: Option<Vec<String>>,
    pub nv_driver_paths: Option<Vec<PathBuf>>,
    pub cache_dir: Option<PathBuf>,
    /// Site file only: a cache a site account fills and every user reads (image/cache.rs).
    pub shared_cache: Option<PathBuf>,
    pub allowed_registries: Option<Vec<String>>,
    pub compression: Option<String>,
    pub pull_threads: Option<usize>,
    pub cdi_spec_dirs: Option<Vec<PathBuf>>,
    pub server_idle: Option<String>,
    pub writable_root: Option<bool>,
    pub overlay_driver: Option<String>,
}

/// The merged settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Config {
    /// Every bind, with where it came from (they accumulate).
    pub binds: Vec<Sourced<String>>,
    pub nv_driver_paths: Sourced<Vec<PathBuf>>,
    pub cache_dir: Sourced<Option<PathBuf>>,
    pub shared_cache: Sourced<Option<PathBuf>>,
    /// Empty: every registry is allowed.
    pub allowed_registries: Sourced<Vec<String>>,
    pub compression: Sourced<Option<String>>,
    /// Threads a pull inflates a layer and compresses the squashfs on; `None`: the CPUs this
    /// process may use (`crate::cpus::usable`), so a Slurm step keeps to its own cores.
    pub pull_threads: Sourced<Option<usize>>,
    /// Where `--device` finds CDI specs; `None`: podman's and the CDI library's defaults.
    pub cdi_spec_dirs: Sourced<Option<Vec<PathBuf>>>,
    /// How long an image server waits for another container (`parse_idle`); `None`:
    /// `DEFAULT_SERVER_IDLE`.
    pub server_idle: Sourced<Option<String>>,
    /// A writable root (a tmpfs overlay, as --writable-tmpfs) unless --read-only: enroot's
    /// ENROOT_ROOTFS_WRITABLE, which pyxis sites set.
    pub writable_root: Sourced<bool>,
    /// What makes the root's overlay (`OverlayDriver::NAMES`); `None`: auto.
    pub overlay_driver: Sourced<Option<String>>,
}

/// An image server's idle time when none is set: long enough for the next start of an
/// interactive session or a job's next step, short enough not to hold memory for long.
pub const DEFAULT_SERVER_IDLE: &str = "10m";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config {path}: {detail}; fix the file (see gpurun help config)")]
    File { path: PathBuf, detail: String },
    #[error("{var}={value}: {detail}")]
    Env {
        var: String,
        value: String,
        detail: String,
    },
    #[error("registry {registry} is not allowed on this site (allowed: {}; set by {from}); use an image from an allowed registry", allowed.join(", "))]
    RegistryNotAllowed {
        registry: String,
        allowed: Vec<String>,
        from: Origin,
    },
}

const PULL_THREADS: &str = "GPURUN_PULL_THREADS";

/// Compressors `pull` offers: tar2sqfs writes them and gpurun's squashfs reader reads them
/// (lzo, enroot's default, is read but not offered: larger and no faster to read than zstd).
pub const COMPRESSORS: &[&str] = &["zstd", "gzip", "xz", "lz4"];

impl Config {
    fn apply_file(&mut self, layer: FileLayer, from: &Origin) {
        let s = |from: &Origin| from.clone();
        if let Some(b) = layer.binds {
            self.binds.extend(b.into_iter().map(|value| Sourced {
                value,
                from: s(from),
            }));
        }
        if let Some(v) = layer.nv_driver_paths {
            self.nv_driver_paths = Sourced {
                value: v,
                from: s(from),
            };
        }
        if let Some(v) = layer.cache_dir {
            self.cache_dir = Sourced {
                value: Some(v),
                from: s(from),
            };
        }
        if let Some(v) = layer.shared_cache {
            self.shared_cache = Sourced {
                value: Some(v),
                from: s(from),
            };
        }
        if let Some(v) = layer.allowed_registries {
            self.allowed_registries = Sourced {
                value: v,
                from: s(from),
            };
        }
        if let Some(v) = layer.compression {
            self.compression = Sourced {
                value: Some(v),
                from: s(from),
            };
        }
        if let Some(v) = layer.pull_threads {
            self.pull_threads = Sourced {
                value: Some(v),
                from: s(from),
            };
        }
        if let Some(v) = layer.cdi_spec_dirs {
            self.cdi_spec_dirs = Sourced {
                value: Some(v),
                from: s(from),
            };
        }
        if let Some(v) = layer.server_idle {
            self.server_idle = Sourced {
                value: Some(v),
                from: s(from),
            };
        }
        if let Some(v) = layer.writable_root {
            self.writable_root = Sourced {
                value: v,
                from: s(from),
            };
        }
        if let Some(v) = layer.overlay_driver {
            self.overlay_driver = Sourced {
                value: Some(v),
                from: s(from),
            };
        }
    }

    fn apply_env(&mut self, env: &[(String, String)]) -> Result<(), ConfigError> {
        let get = |k: &str| {
            env.iter()
                .rev()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        };
        let origin = |k: &str| Origin::Env(k.to_string());
        if let Some(v) = get("GPURUN_BIND") {
            // Comma-separated, as APPTAINER_BIND.
            self.binds.extend(
                v.split(',')
                    .filter(|b| !b.trim().is_empty())
                    .map(|b| Sourced {
                        value: b.trim().to_string(),
                        from: origin("GPURUN_BIND"),
                    }),
            );
        }
        if let Some(v) = get("GPURUN_NV_DRIVER_PATH") {
            self.nv_driver_paths = Sourced {
                value: v
                    .split(':')
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from)
                    .collect(),
                from: origin("GPURUN_NV_DRIVER_PATH"),
            };
        }
        if let Some(v) = get("GPURUN_CACHEDIR") {
            self.cache_dir = Sourced {
                value: Some(absolute("GPURUN_CACHEDIR", &v)?),
                from: origin("GPURUN_CACHEDIR"),
            };
        }
        if let Some(v) = get("GPURUN_ALLOWED_REGISTRIES") {
            self.allowed_registries = Sourced {
                value: v
                    .split(',')
                    .map(|r| r.trim().to_string())
                    .filter(|r| !r.is_empty())
                    .collect(),
                from: origin("GPURUN_ALLOWED_REGISTRIES"),
            };
        }
        if let Some(v) = get("GPURUN_COMPRESSION") {
            self.compression = Sourced {
                value: Some(v),
                from: origin("GPURUN_COMPRESSION"),
            };
        }
        if let Some(v) = get(PULL_THREADS) {
            let n = v.trim().parse().map_err(|_| ConfigError::Env {
                var: PULL_THREADS.into(),
                value: v.clone(),
                detail: "not a number of threads; use e.g. 8".into(),
            })?;
            self.pull_threads = Sourced {
                value: Some(n),
                from: origin(PULL_THREADS),
            };
        }
        // Colon-separated, as GPURUN_NV_DRIVER_PATH.
        if let Some(v) = get("GPURUN_CDI_SPEC_DIRS") {
            self.cdi_spec_dirs = Sourced {
                value: Some(
                    v.split(':')
                        .filter(|d| !d.is_empty())
                        .map(PathBuf::from)
                        .collect(),
                ),
                from: origin("GPURUN_CDI_SPEC_DIRS"),
            };
        }
        if let Some(v) = get("GPURUN_SERVER_IDLE") {
            self.server_idle = Sourced {
                value: Some(v),
                from: origin("GPURUN_SERVER_IDLE"),
            };
        }
        self.apply_env_root(&get)
    }

    /// GPURUN_WRITABLE_ROOT (a yes/no word) and GPURUN_OVERLAY_DRIVER.
    fn apply_env_root(&mut self, get: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        const WRITABLE: &str = "GPURUN_WRITABLE_ROOT";
        if let Some(v) = get(WRITABLE) {
            let value = crate::env_vars::switch_value(&v).ok_or_else(|| ConfigError::Env {
                var: WRITABLE.into(),
                value: v.clone(),
                detail: "not a yes/no value; use 1 or 0 (true/false, yes/no, on/off)".into(),
            })?;
            self.writable_root = Sourced {
                value,
                from: Origin::Env(WRITABLE.into()),
            };
        }
        if let Some(v) = get("GPURUN_OVERLAY_DRIVER") {
            self.overlay_driver = Sourced {
                value: Some(v),
                from: Origin::Env("GPURUN_OVERLAY_DRIVER".into()),
            };
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(v) = &self.server_idle.value {
            let detail = |e| format!("server_idle: {e}");
            parse_idle(v).map_err(|e| invalid(&self.server_idle.from, v, detail(e)))?;
        }
        if let Some(d) = &self.overlay_driver.value {
            if OverlayDriver::from_name(d).is_none() {
                let detail = format!(
                    "overlay_driver: unknown driver '{d}'; use one of {}",
                    OverlayDriver::NAMES.join(", ")
                );
                return Err(invalid(&self.overlay_driver.from, d, detail));
            }
        }
        if self.pull_threads.value == Some(0) {
            let detail = "pull_threads: 0 threads cannot pull; use 1 or more".into();
            return Err(invalid(&self.pull_threads.from, "0", detail));
        }
        if let Some(c) = &self.compression.value {
            if !COMPRESSORS.contains(&c.as_str()) {
                let detail = format!(
                    "unknown compressor '{c}'; use one of {}",
                    COMPRESSORS.join(", ")
                );
                return Err(invalid(&self.compression.from, c, detail));
            }
        }
        let dirs = self.cdi_spec_dirs.value.iter().flatten();
        if let Some(d) = dirs.clone().find(|d| !d.is_absolute()) {
            let value = dirs.map(|d| d.display().to_string()).collect::<Vec<_>>();
            let detail = format!(
                "cdi_spec_dirs: {} is not an absolute path; give the full path",
                d.display()
            );
            return Err(invalid(&self.cdi_spec_dirs.from, &value.join(":"), detail));
        }
        Ok(())
    }

    /// How long an image server waits for another container before it exits (zero: every
    /// container gets a server of its own).
    pub fn server_idle(&self) -> std::time::Duration {
        let v = self.server_idle.value.as_deref();
        parse_idle(v.unwrap_or(DEFAULT_SERVER_IDLE)).unwrap_or_default()
    }

    /// What makes the root's overlay.
    pub fn overlay_driver(&self) -> OverlayDriver {
        let name = self.overlay_driver.value.as_deref();
        name.and_then(OverlayDriver::from_name).unwrap_or_default()
    }

    /// The CDI spec directories, lowest priority first.
    pub fn cdi_spec_dirs(&self) -> Vec<PathBuf> {
        match &self.cdi_spec_dirs.value {
            Some(d) => d.clone(),
            None => crate::gpu::cdi::DEFAULT_SPEC_DIRS
                .iter()
                .map(PathBuf::from)
                .collect(),
        }
    }

    /// Merge the layers: `files` in order (site, then user; a missing file is skipped), then `env`.
    pub fn merge(
        files: &[(Origin, Option<String>)],
        env: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        for (origin, text) in files {
            let Some(text) = text else { continue };
            let path = match origin {
                Origin::Site(p) | Origin::User(p) => p.clone(),
                _ => PathBuf::new(),
            };
            let layer: FileLayer = toml::from_str(text).map_err(|e| ConfigError::File {
                path: path.clone(),
                detail: e.message().to_string(),
            })?;
            // Only the site may name a cache that every user trusts.
            if matches!(origin, Origin::User(_)) && layer.shared_cache.is_some() {
                let detail = format!("shared_cache is a site setting; set it in {SITE_FILE}");
                return Err(ConfigError::File { path, detail });
            }
            c.apply_file(layer, origin);
        }
        c.apply_env(env)?;
        c.validate()?;
        Ok(c)
    }

    /// The settings of this process: the site and user files and the environment.
    pub fn load() -> Result<Config, ConfigError> {
        let env = crate::env_vars::host_env();
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| PathBuf::from(v))
        };
        let site = get("GPURUN_SITE_CONFIG").unwrap_or_else(|| PathBuf::from(SITE_FILE));
        let user = get("XDG_CONFIG_HOME")
            .filter(|p| p.is_absolute())
            .or_else(|| get("HOME").map(|h| h.join(".config")))
            .map(|d| d.join("gpurun/config.toml"));
        let read = |p: &Path| -> Result<Option<String>, ConfigError> {
            match std::fs::read_to_string(p) {
                Ok(t) => Ok(Some(t)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(ConfigError::File {
                    path: p.to_path_buf(),
                    detail: e.to_string(),
                }),
            }
        };
        let mut files = vec![(Origin::Site(site.clone()), read(&site)?)];
        if let Some(u) = user {
            // A HOME we cannot read (another user's, inherited through su or a test harness) holds
            // no config of ours: skipped, where an unreadable site file is an error.
            let text = match read(&u) {
                Err(_)
                    if std::fs::File::open(&u)
                        .is_err_and(|e| e.kind() == std::io::ErrorKind::PermissionDenied) =>
                {
                    None
                }
                r => r?,
            };
            files.push((Origin::User(u.clone()), text));
        }
        Config::merge(&files, &env)
    }

    /// Is `registry` allowed (by the site's list, when there is one)?
    pub fn registry_allowed(&self, registry: &str) -> bool {
        let list = &self.allowed_registries.value;
        list.is_empty() || list.iter().any(|r| r == registry)
    }

    /// Refuse a docker:// `source` from a registry the site does not allow, before anything is
    /// fetched.
    pub fn check_registry(&self, source: &str) -> Result<(), ConfigError> {
        use crate::image::reference::Source;
        match Source::parse(source) {
            Ok(Source::Docker(r)) if !self.registry_allowed(&r.registry) => {
                Err(ConfigError::RegistryNotAllowed {
                    registry: r.registry,
                    allowed: self.allowed_registries.value.clone(),
                    from: self.allowed_registries.from.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// `config show` as text.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mut row = |k: &str, v: String, from: &Origin| {
            s.push_str(&format!("{k:<20} {v:<40} ({from})\n"));
        };
        if self.binds.is_empty() {
            row("binds", "[]".into(), &Origin::Default);
        }
        for b in &self.binds {
            row("binds", b.value.clone(), &b.from);
        }
        let list = |v: &[String]| format!("[{}]", v.join(", "));
        let paths = |v: &[PathBuf]| {
            list(
                &v.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>(),
            )
        };
        let opt = |v: &Option<PathBuf>, default: String| {
            v.as_ref().map_or(default, |p| p.display().to_string())
        };
        row(
            "nv_driver_paths",
            paths(&self.nv_driver_paths.value),
            &self.nv_driver_paths.from,
        );
        row(
            "cache_dir",
            opt(
                &self.cache_dir.value,
                crate::store::cache_dir::cache_root().display().to_string(),
            ),
            &self.cache_dir.from,
        );
        row(
            "shared_cache",
            opt(&self.shared_cache.value, "(none)".into()),
            &self.shared_cache.from,
        );
        row(
            "allowed_registries",
            if self.allowed_registries.value.is_empty() {
                "(any)".into()
            } else {
                list(&self.allowed_registries.value)
            },
            &self.allowed_registries.from,
        );
        row(
            "compression",
            self.compression
                .value
                .clone()
                .unwrap_or_else(|| "zstd".into()),
            &self.compression.from,
        );
        row(
            "pull_threads",
            (self.pull_threads.value).map_or_else(
                || format!("{} (usable CPUs)", crate::cpus::usable()),
                |n| n.to_string(),
            ),
            &self.pull_threads.from,
        );
        row(
            "cdi_spec_dirs",
            paths(&self.cdi_spec_dirs()),
            &self.cdi_spec_dirs.from,
        );
        row(
            "server_idle",
            (self.server_idle.value.clone()).unwrap_or_else(|| DEFAULT_SERVER_IDLE.into()),
            &self.server_idle.from,
        );
        row(
            "writable_root",
            self.writable_root.value.to_string(),
            &self.writable_root.from,
        );
        row(
            "overlay_driver",
            (self.overlay_driver.value.clone()).unwrap_or_else(|| "auto".into()),
            &self.overlay_driver.from,
        );
        s
    }
}

/// The error for a bad `value` from `from`, naming the file or variable.
fn invalid(from: &Origin, value: &str, detail: String) -> ConfigError {
    match from {
        Origin::Env(var) => ConfigError::Env {
            var: var.clone(),
            value: value.to_string(),
            detail,
        },
        Origin::Site(p) | Origin::User(p) => ConfigError::File {
            path: p.clone(),
            detail,
        },
        Origin::Default => unreachable!("the defaults are valid"),
    }
}

fn absolute(var: &str, v: &str) -> Result<PathBuf, ConfigError> {
    let p = PathBuf::from(v);
    if p.is_absolute() {
        Ok(p)
    } else {
        Err(ConfigError::Env {
            var: var.to_string(),
            value: v.to_string(),
            detail: "not an absolute path; give the full path".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn site(t: &str) -> (Origin, Option<String>) {
        (
            Origin::Site("/etc/gpurun/gpurun.toml".into()),
            Some(t.into()),
        )
    }

    fn user(t: &str) -> (Origin, Option<String>) {
        (
            Origin::User("/home/u/.config/gpurun/config.toml".into()),
            Some(t.into()),
        )
    }

    /// files, env -> binds, cache_dir, the kind of its origin, compression
    type Case = (
        Vec<(Origin, Option<String>)>,
        Vec<(String, String)>,
        Vec<&'static str>,
        Option<&'static str>,
        &'static str,
        Option<&'static str>,
    );

    #[test]
    fn precedence() {
        let s = site("binds=[\"/scratch\"]\ncache_dir=\"/site\"\ncompression=\"xz\"\nallowed_registries=[\"nvcr.io\"]\n");
        let u = user("binds=[\"/home/u/data\"]\ncache_dir=\"/user\"\n");
        let cases: Vec<Case> = vec![
            (vec![], vec![], vec![], None, "default", None),
            (
                vec![s.clone()],
                vec![],
                vec!["/scratch"],
                Some("/site"),
                "site",
                Some("xz"),
            ),
            (
                vec![s.clone(), u.clone()],
                vec![],
                vec!["/scratch", "/home/u/data"],
                Some("/user"),
                "user",
                Some("xz"),
            ),
            (
                vec![s.clone(), u.clone()],
                env(&[
                    ("GPURUN_CACHEDIR", "/env"),
                    ("GPURUN_BIND", "/a,/b:/c:ro"),
                    ("GPURUN_COMPRESSION", "lz4"),
                ]),
                vec!["/scratch", "/home/u/data", "/a", "/b:/c:ro"],
                Some("/env"),
                "env",
                Some("lz4"),
            ),
            // GPURUN_CACHEDIR is the one name.
            (
                vec![],
                env(&[("GPURUN_CACHE", "/old")]),
                vec![],
                None,
                "default",
                None,
            ),
            // Empty variables are unset.
            (
                vec![u.clone()],
                env(&[("GPURUN_CACHEDIR", "")]),
                vec!["/home/u/data"],
                Some("/user"),
                "user",
                None,
            ),
            // A missing file is skipped.
            (
                vec![(Origin::Site("/nope".into()), None)],
                vec![],
                vec![],
                None,
                "default",
                None,
            ),
        ];
        for (files, e, binds, cache, from, comp) in cases {
            let c = Config::merge(&files, &e).unwrap();
            assert_eq!(
                c.binds.iter().map(|b| b.value.as_str()).collect::<Vec<_>>(),
                binds
            );
            assert_eq!(c.cache_dir.value.as_deref(), cache.map(Path::new));
            let kind = match c.cache_dir.from {
                Origin::Default => "default",
                Origin::Site(_) => "site",
                Origin::User(_) => "user",
                Origin::Env(_) => "env",
            };
            assert_eq!(kind, from);
            assert_eq!(c.compression.value.as_deref(), comp);
        }
    }

    #[test]
    fn cdi_spec_dirs() {
        let dirs = |c: &Config| {
            let d = c.cdi_spec_dirs();
            d.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
        };
        let c = Config::merge(&[], &[]).unwrap();
        assert_eq!(dirs(&c), ["/etc/cdi", "/var/run/cdi"]);
        assert_eq!(c.cdi_spec_dirs.from, Origin::Default);
        let s = site("cdi_spec_dirs = [\"/site/cdi\"]");
        let c = Config::merge(std::slice::from_ref(&s), &[]).unwrap();
        assert_eq!(dirs(&c), ["/site/cdi"]);
        let c = Config::merge(&[s], &env(&[("GPURUN_CDI_SPEC_DIRS", "/a::/b")])).unwrap();
        assert_eq!(dirs(&c), ["/a", "/b"]);
        assert_eq!(
            c.cdi_spec_dirs.from,
            Origin::Env("GPURUN_CDI_SPEC_DIRS".into())
        );
        assert!(
            c.render().contains("cdi_spec_dirs        [/a, /b]"),
            "{}",
            c.render()
        );
        let e = Config::merge(&[], &env(&[("GPURUN_CDI_SPEC_DIRS", "/a:rel")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "GPURUN_CDI_SPEC_DIRS=/a:rel: cdi_spec_dirs: rel is not an absolute path"
            ),
            "{e}"
        );
        let e = Config::merge(&[user("cdi_spec_dirs = [\"cdi\"]")], &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("config.toml") && e.contains("cdi is not an absolute path"),
            "{e}"
        );
    }

    #[test]
    fn registries() {
        let c = Config::merge(&[site("allowed_registries=[\"nvcr.io\"]")], &[]).unwrap();
        assert!(c.registry_allowed("nvcr.io"));
        assert!(!c.registry_allowed("docker.io"));
        let c = Config::merge(
            &[site("allowed_registries=[\"nvcr.io\"]")],
            &env(&[("GPURUN_ALLOWED_REGISTRIES", "a.org, b.org")]),
        )
        .unwrap();
        assert!(c.registry_allowed("b.org") && !c.registry_allowed("nvcr.io"));
        assert!(Config::default().registry_allowed("anything"));
        assert!(c.check_registry("docker://b.org/x:1").is_ok());
        assert!(c.check_registry("podman://nvcr.io/x").is_ok());
        let e = c
            .check_registry("docker://nvcr.io/nvidia/cuda:12")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "registry nvcr.io is not allowed on this site (allowed: a.org, b.org; set by environment GPURUN_ALLOWED_REGISTRIES); use an image from an allowed registry"
        );
        assert!(
            matches!(e, ConfigError::RegistryNotAllowed { from: Origin::Env(v), .. } if v == "GPURUN_ALLOWED_REGISTRIES")
        );
    }

    #[test]
    fn errors_name_the_file_or_variable() {
        let e = Config::merge(&[site("bindz = []")], &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/etc/gpurun/gpurun.toml") && e.contains("bindz"),
            "{e}"
        );
        let e = Config::merge(&[user("compression = \"brotli\"")], &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("config.toml") && e.contains("brotli") && e.contains("zstd"),
            "{e}"
        );
        let e = Config::merge(&[], &env(&[("GPURUN_CACHEDIR", "rel")]))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("GPURUN_CACHEDIR=rel"), "{e}");
    }

    #[test]
    fn pull_threads() {
        let threads = |files: &[(Origin, Option<String>)], e: &[(&str, &str)]| {
            Config::merge(files, &env(e)).map(|c| c.pull_threads)
        };
        assert_eq!(threads(&[], &[]).unwrap().value, None);
        let s = site("pull_threads = 8");
        assert_eq!(
            threads(std::slice::from_ref(&s), &[]).unwrap().value,
            Some(8)
        );
        let e = [("GPURUN_PULL_THREADS", "3")];
        let c = threads(&[s], &e).unwrap();
        assert_eq!(
            (c.value, c.from),
            (Some(3), Origin::Env("GPURUN_PULL_THREADS".into()))
        );
        let bad = |files: &[(Origin, Option<String>)], e: &[(&str, &str)]| {
            threads(files, e).unwrap_err().to_string()
        };
        let e = bad(&[], &[("GPURUN_PULL_THREADS", "many")]);
        assert!(
            e.starts_with("GPURUN_PULL_THREADS=many: not a number"),
            "{e}"
        );
        let e = bad(&[], &[("GPURUN_PULL_THREADS", "0")]);
        assert!(
            e.starts_with("GPURUN_PULL_THREADS=0: pull_threads: 0"),
            "{e}"
        );
        let e = bad(&[user("pull_threads = 0")], &[]);
        assert!(e.contains("config.toml") && e.contains("1 or more"), "{e}");
    }

    #[test]
    fn server_idle_times() {
        use std::time::Duration;
        let idle = |files: &[(Origin, Option<String>)], e: &[(&str, &str)]| {
            Config::merge(files, &env(e)).map(|c| c.server_idle())
        };
        assert_eq!(idle(&[], &[]).unwrap(), Duration::from_secs(600));
        let s = site("server_idle = \"2h\"");
        assert_eq!(
            idle(std::slice::from_ref(&s), &[]).unwrap(),
            Duration::from_secs(7200)
        );
        let e = [("GPURUN_SERVER_IDLE", "0")];
        assert_eq!(idle(std::slice::from_ref(&s), &e).unwrap(), Duration::ZERO);
        let e = [("GPURUN_SERVER_IDLE", "90s")];
        assert_eq!(idle(&[s], &e).unwrap(), Duration::from_secs(90));
        let bad = idle(&[], &[("GPURUN_SERVER_IDLE", "soon")])
            .unwrap_err()
            .to_string();
        assert!(
            bad.starts_with("GPURUN_SERVER_IDLE=soon") && bad.contains("10m"),
            "{bad}"
        );
        let bad = idle(&[user("server_idle = \"5\"")], &[])
            .unwrap_err()
            .to_string();
        assert!(
            bad.contains("config.toml") && bad.contains("server_idle"),
            "{bad}"
        );
    }

    #[test]
    fn writable_root_and_overlay_driver() {
        let c = Config::merge(&[], &[]).unwrap();
        assert!(!c.writable_root.value);
        assert_eq!(c.overlay_driver(), OverlayDriver::Auto);
        let s = site("writable_root = true\noverlay_driver = \"fuse-overlayfs\"");
        let c = Config::merge(std::slice::from_ref(&s), &[]).unwrap();
        assert!(c.writable_root.value);
        assert_eq!(c.overlay_driver(), OverlayDriver::FuseOverlayfs);
        let e = env(&[
            ("GPURUN_WRITABLE_ROOT", "off"),
            ("GPURUN_OVERLAY_DRIVER", "kernel"),
        ]);
        let c = Config::merge(&[s], &e).unwrap();
        assert!(!c.writable_root.value);
        assert_eq!(
            c.writable_root.from,
            Origin::Env("GPURUN_WRITABLE_ROOT".into())
        );
        assert_eq!(c.overlay_driver(), OverlayDriver::Kernel);
        let r = c.render();
        assert!(
            r.contains("writable_root        false") && r.contains("overlay_driver       kernel"),
            "{r}"
        );
        let bad = |files: &[(Origin, Option<String>)], e: &[(&str, &str)]| {
            Config::merge(files, &env(e)).unwrap_err().to_string()
        };
        let e = bad(&[], &[("GPURUN_WRITABLE_ROOT", "maybe")]);
        assert!(
            e.starts_with("GPURUN_WRITABLE_ROOT=maybe: not a yes/no value"),
            "{e}"
        );
        let e = bad(&[], &[("GPURUN_OVERLAY_DRIVER", "fuse")]);
        assert!(e.starts_with("GPURUN_OVERLAY_DRIVER=fuse: overlay_driver: unknown driver 'fuse'; use one of auto, kernel, fuse-overlayfs"), "{e}");
        let e = bad(&[user("writable_root = \"yes\"")], &[]);
        assert!(
            e.contains("config.toml") && e.contains("expected a boolean"),
            "{e}"
        );
    }

    #[test]
    fn only_the_site_names_a_shared_cache() {
        let c = Config::merge(&[site("shared_cache = \"/sw/cache\"")], &[]).unwrap();
        assert_eq!(c.shared_cache.value, Some(PathBuf::from("/sw/cache")));
        let e = Config::merge(&[user("shared_cache = \"/tmp/x\"")], &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("site setting"), "{e}");
    }
}

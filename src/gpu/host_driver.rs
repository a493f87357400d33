//! The host's NVIDIA driver: where its nodes and /proc files are, its version (from /proc, else
//! NVML), the libraries of the capability groups asked for, and the facts kept between starts.

use std::path::{Path, PathBuf};

use super::types::{GpuError, GpuOpts, COMPAT_DIR};
use super::{driver, nvml, require};
use crate::env_vars::var;

/// The directories standing for /dev and /proc/driver/nvidia.
pub(super) fn roots(host_env: &[(String, String)]) -> (PathBuf, PathBuf) {
    (
        PathBuf::from(var(host_env, "GPURUN_NV_DEV").unwrap_or("/dev")),
        PathBuf::from(var(host_env, "GPURUN_NV_PROC").unwrap_or("/proc/driver/nvidia")),
    )
}

/// The driver version, when a driver is loaded.
pub(super) fn driver_version(proc_dir: &Path) -> Option<String> {
    driver::parse_proc_version(&std::fs::read_to_string(proc_dir.join("version")).ok()?)
}

/// Is nvidia-modprobe (which NVML runs where the driver is loaded on first use, to load it and
/// make its nodes) in one of the directories of `path`, or of `also`?
fn loads_on_demand(path: Option<&str>, also: &[&str]) -> bool {
    path.unwrap_or("")
        .split(':')
        .chain(also.iter().copied())
        .filter(|d| !d.is_empty())
        .any(|d| Path::new(d).join("nvidia-modprobe").exists())
}

/// Without /proc/driver/nvidia/version (some sandboxes hide it), ask NVML for the version: load
/// the first libnvidia-ml.so.1 the library sources offer. Not without a control node and nothing
/// to make one: there is no GPU to use, and a machine without a driver would pay the library
/// search on every start.
pub(super) fn version_from_nvml(
    dev: &Path,
    host_env: &[(String, String)],
    sources: &[PathBuf],
    detail: bool,
) -> Option<(String, nvml::NvmlInfo)> {
    if !dev.join("nvidiactl").exists() && !loads_on_demand(var(host_env, "PATH"), &["/usr/bin"]) {
        return None;
    }
    let cands = driver::candidates(sources, None).ok()?;
    let lib = cands.iter().find(|c| c.name == "libnvidia-ml.so.1")?;
    let info = nvml::query_in_child(&lib.file, detail).ok()?;
    Some((info.driver_version.clone()?, info))
}

/// Where facts about the GPUs and the driver are kept between starts: the user's gpurun cache
/// (`FactsDir`), one file per boot, driver version and set of GPUs or sources (`file`). Opened
/// once per start; `None` unless the cache directory is the caller's own and private.
pub(super) struct Facts {
    dir: crate::store::kept_facts::FactsDir,
    boot: String,
}

impl Facts {
    pub(super) fn open(root: Option<&Path>) -> Option<Facts> {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        Some(Facts {
            dir: crate::store::kept_facts::FactsDir::open(root?.to_path_buf())?,
            boot: boot.trim().to_string(),
        })
    }

    /// The file for facts of `kind` (`nvml` for NVML's answers, `gpu-proc` for the driver's /proc
    /// files, `driver-libs` for its libraries) about `driver_version` and `ids` (jobs on one node
    /// may see different GPUs).
    pub(super) fn file(&self, kind: &str, driver_version: &str, ids: &[String]) -> Option<PathBuf> {
        let mut sorted = ids.to_vec();
        sorted.sort();
        let set = crate::store::short_hash(&sorted.join(","));
        self.dir
            .file(kind, &format!("{}-{driver_version}-{set}.json", self.boot))
    }
}

/// `driver::candidates` for driver `version`, kept (`Facts`) while its sources are as they
/// were: the path, inode, size and change time of each are the key, so ldconfig, a driver
/// installed or a library directory changed finds them anew. Finding them reads the host's
/// ld.so.cache and looks at each of the driver's files, which every `--nv` start would pay.
fn candidates_kept(
    facts: Option<&Facts>,
    sources: &[PathBuf],
    version: &str,
) -> Result<Vec<driver::Candidate>, GpuError> {
    use std::os::unix::fs::MetadataExt;
    let key: Vec<String> = sources
        .iter()
        .map(|s| match std::fs::metadata(s) {
            Ok(m) => format!(
                "{}:{}:{}:{}:{}.{}",
                s.display(),
                m.dev(),
                m.ino(),
                m.size(),
                m.ctime(),
                m.ctime_nsec()
            ),
            Err(_) => format!("{}:-", s.display()),
        })
        .collect();
    let file = facts.and_then(|f| f.file("driver-libs", version, &key));
    crate::store::kept_facts::kept(
        file.as_deref(),
        |_| true,
        || driver::candidates(sources, Some(version)).map_err(GpuError::from),
    )
}

/// The host's driver as [`prepare`] found it.
pub(super) struct HostDriver {
    pub(super) dev: PathBuf,
    pub(super) proc_dir: PathBuf,
    /// The directories its libraries are sought in.
    pub(super) sources: Vec<PathBuf>,
    pub(super) version: String,
    /// NVML's answer, when only NVML knew the version (taken by [`query_gpus`]).
    pub(super) early_nvml: Option<nvml::NvmlInfo>,
}

/// The host's driver and its version (from /proc, else from NVML). None found: `Ok(None)`,
/// or an error when GPUs were asked for (`explicit`).
pub(super) fn find_driver(
    opts: &GpuOpts,
    host_env: &[(String, String)],
    explicit: Option<String>,
) -> Result<Option<HostDriver>, GpuError> {
    let (dev, proc_dir) = roots(host_env);
    let sources = driver::library_sources(&opts.driver.paths);
    let (version, early_nvml) = match driver_version(&proc_dir) {
        Some(v) => (v, None),
        None => match version_from_nvml(&dev, host_env, &sources, false) {
            Some((v, n)) => (v, Some(n)),
            None => {
                return match explicit {
                    Some(asked) => Err(GpuError::NoDriver {
                        asked,
                        missing: proc_dir.join("version"),
                    }),
                    None => Ok(None),
                }
            }
        },
    };
    Ok(Some(HostDriver {
        dev,
        proc_dir,
        sources,
        version,
        early_nvml,
    }))
}

/// The driver capability groups: `--nv-caps`, else NVIDIA_DRIVER_CAPABILITIES of the host,
/// else of the image; unknown names are a warning.
pub(super) fn capability_groups(
    opts: &GpuOpts,
    host_env: &[(String, String)],
    image_env: &[(String, String)],
    warnings: &mut Vec<String>,
) -> Vec<driver::Group> {
    let caps: Vec<String> = if !opts.nv_caps.is_empty() {
        opts.nv_caps.clone()
    } else {
        var(host_env, "NVIDIA_DRIVER_CAPABILITIES")
            .or_else(|| var(image_env, "NVIDIA_DRIVER_CAPABILITIES"))
            .unwrap_or("")
            .split(',')
            .map(str::to_string)
            .collect()
    };
    let (groups, unknown) = driver::groups_from_caps(caps.iter().map(String::as_str));
    if !unknown.is_empty() {
        warnings.push(format!(
            "unknown driver capabilities ignored: {}",
            unknown.join(", ")
        ));
    }
    groups
}

/// The driver libraries of `groups`; none at all is an error that names where they were sought.
pub(super) fn libraries(
    facts: Option<&Facts>,
    host: &HostDriver,
    groups: &[driver::Group],
) -> Result<Vec<driver::Library>, GpuError> {
    let cands = candidates_kept(facts, &host.sources, &host.version)?;
    let libs = driver::choose_libraries(&cands, &host.version, groups);
    if libs.is_empty() {
        return Err(GpuError::NoLibraries {
            version: host.version.clone(),
            searched: host
                .sources
                .iter()
                .map(|s| s.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Ok(libs)
}

/// CUDA forward compatibility: the version of the image's libcuda in COMPAT_DIR when it is
/// newer than the driver's; it then goes first on the loader path.
pub(super) fn compat_version(
    image_dir_list: &dyn Fn(&str) -> Option<Vec<String>>,
    driver_version: &str,
) -> Option<String> {
    image_dir_list(COMPAT_DIR)
        .and_then(|e| driver::compat_version(&e))
        .filter(|v| {
            require::compare_versions(v, driver_version) == Some(std::cmp::Ordering::Greater)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_modprobe_in_path_means_a_driver_may_load_on_demand() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        std::fs::write(b.join("nvidia-modprobe"), "").unwrap();
        let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
        let path = |dirs: &[&str]| dirs.join(":");
        assert!(!loads_on_demand(None, &[]));
        assert!(!loads_on_demand(Some(&path(&["", a, "/nonexistent"])), &[]));
        assert!(loads_on_demand(Some(&path(&[a, b])), &[]));
        assert!(
            loads_on_demand(Some(a), &[b]),
            "the fixed directories count too"
        );
    }
}

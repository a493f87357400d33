//! NVIDIA GPU support: the host's driver files and exactly the allowed GPUs, as a plan.
//!
//! [`prepare`] decides everything (which files to bind where, which device nodes, which
//! environment) and returns plain data; the runtime applies it. No syscalls here other than
//! reading and opening files.
//!
//! Two environment variables point gpurun at another place for tests and unusual sites:
//! `GPURUN_NV_DEV` (directory holding the nvidia* device nodes, default `/dev`) and
//! `GPURUN_NV_PROC` (directory standing for `/proc/driver/nvidia`). Sites with the driver's
//! libraries in an unusual place name extra ld.so.cache files or directories with
//! `--nv-driver-path` / `GPURUN_NV_DRIVER_PATH` (or the config file, through
//! [`DriverPaths`]).
//!
//! `--device VENDOR/CLASS=NAME` adds devices as the site's CDI specs describe them ([`cdi`],
//! [`cdi_devices`]); when those bring NVIDIA GPUs, they replace gpurun's own choice of GPUs and
//! device nodes, and gpurun still provides the driver's libraries and tools (docs/gpu.md says why).

pub mod cdi;
pub mod devices;
pub mod driver;
pub mod nvml;
pub mod require;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::env_vars::var;
use crate::mount::{Mount, MountSource};
use devices::{GpuNode, Request};

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

/// The directories standing for /dev and /proc/driver/nvidia.
fn roots(host_env: &[(String, String)]) -> (PathBuf, PathBuf) {
    (
        PathBuf::from(var(host_env, "GPURUN_NV_DEV").unwrap_or("/dev")),
        PathBuf::from(var(host_env, "GPURUN_NV_PROC").unwrap_or("/proc/driver/nvidia")),
    )
}

/// The driver version, when a driver is loaded.
fn driver_version(proc_dir: &Path) -> Option<String> {
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
fn version_from_nvml(
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

/// Is GPU support asked for? None = off; Some(None) = on by default, where there is a driver;
/// Some(Some(words)) = explicitly, by these words (`--nv`, `GPURUN_NV=1`, `--gpus 1,2`): an
/// explicit request no driver can meet is an error.
fn wanted(opts: &GpuOpts, host_env: &[(String, String)]) -> Option<Option<String>> {
    if opts.no_nv {
        return None;
    }
    let gpus = opts.gpus.as_deref().map(str::trim);
    // --gpus none: no GPUs asked for, whatever else says so.
    let no_gpus = gpus.is_some_and(|g| g.eq_ignore_ascii_case("none"));
    if opts.nv {
        return Some((!no_gpus).then(|| "--nv".to_string()));
    }
    let env = var(host_env, "GPURUN_NV")
        .map(str::trim)
        .filter(|v| !v.is_empty());
    if env.is_some_and(|v| {
        matches!(
            v.to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        )
    }) {
        return None;
    }
    let asked = match (env, gpus) {
        _ if no_gpus => None,
        (Some(v), _) => Some(format!("GPURUN_NV={v}")),
        (None, Some(g)) if !g.is_empty() => Some(format!("--gpus {g}")),
        _ => None,
    };
    Some(asked)
}

#[derive(Debug, PartialEq, Eq)]
enum NvmlUse {
    /// /proc has all that is needed.
    No,
    /// The brand, architecture and CUDA version NVIDIA_REQUIRE_* rules test: fixed for a boot
    /// and driver, so NVML's answers are kept (`nvml::query_cached`).
    Kept,
    /// A MIG device is named: MIG devices are not in /proc, and their layout changes at run time.
    Fresh,
}

fn nvml_use(asked: &Request, requirements: bool) -> NvmlUse {
    let mig = matches!(asked, Request::List(l)
        if l.iter().any(|e| e.to_ascii_lowercase().starts_with("mig-")));
    match (mig, requirements) {
        (true, _) => NvmlUse::Fresh,
        (false, true) => NvmlUse::Kept,
        (false, false) => NvmlUse::No,
    }
}

/// Where facts about the GPUs and the driver are kept between starts: the user's gpurun cache
/// (`FactsDir`), one file per boot, driver version and set of GPUs or sources (`file`). Opened
/// once per start; `None` unless the cache directory is the caller's own and private.
struct Facts {
    dir: crate::store::kept_facts::FactsDir,
    boot: String,
}

impl Facts {
    fn open(root: Option<&Path>) -> Option<Facts> {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        Some(Facts {
            dir: crate::store::kept_facts::FactsDir::open(root?.to_path_buf())?,
            boot: boot.trim().to_string(),
        })
    }

    /// The file for facts of `kind` (`nvml` for NVML's answers, `gpu-proc` for the driver's /proc
    /// files, `driver-libs` for its libraries) about `driver_version` and `ids` (jobs on one node
    /// may see different GPUs).
    fn file(&self, kind: &str, driver_version: &str, ids: &[String]) -> Option<PathBuf> {
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
/// ld.so.cache and looks at each of the driver's files: 0.64 ms of every `--nv` start on the
/// H200 node.
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

/// `gpus_from_proc`, kept per boot (`Facts`) for the GPUs listed in `proc_dir` now: the
/// driver makes up each GPU's information file when it is read, ~0.18 ms per GPU on an H200
/// node, and what it says does not change while the same GPUs sit in the same load of the
/// driver. A GPU added again (hot plug, PCI remove and rescan) and a reloaded module get new
/// sysfs inodes, which are part of the key.
fn gpus_from_proc_kept(
    facts: Option<&Facts>,
    proc_dir: &Path,
    driver_version: &str,
) -> Option<nvml::NvmlInfo> {
    // Each GPU's directory is named for its bus id.
    let mut buses: Vec<String> = std::fs::read_dir(proc_dir.join("gpus"))
        .ok()?
        .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
        .collect();
    buses.sort();
    let ino = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).map_or(0, |m| m.ino())
    };
    let pci = Path::new("/sys/bus/pci/devices");
    let mut key: Vec<String> = buses
        .iter()
        .map(|b| format!("{b}:{}", ino(&pci.join(b))))
        .collect();
    key.push(format!("module:{}", ino(Path::new("/sys/module/nvidia"))));
    // The directory too: the test suite's drivers share the boot and the version.
    key.push(proc_dir.display().to_string());
    let file = facts.and_then(|f| f.file("gpu-proc", driver_version, &key));
    let listed_now = |i: &nvml::NvmlInfo| {
        let mut listed: Vec<&str> = i
            .gpus
            .iter()
            .filter_map(|g| g.pci_bus_id.as_deref())
            .collect();
        listed.sort_unstable();
        listed == buses
    };
    crate::store::kept_facts::kept(file.as_deref(), listed_now, || {
        gpus_from_proc(proc_dir).ok_or(())
    })
    .ok()
}

/// The GPUs as /proc/driver/nvidia/gpus/*/information lists them, numbered as NVML does (by PCI
/// bus id): minor, UUID, bus id and model, which is all device selection needs. `None` when the
/// directory is missing or an entry lacks one of them.
fn gpus_from_proc(proc_dir: &Path) -> Option<nvml::NvmlInfo> {
    let mut gpus = vec![];
    for e in std::fs::read_dir(proc_dir.join("gpus")).ok()? {
        let text = std::fs::read_to_string(e.ok()?.path().join("information")).ok()?;
        gpus.push(driver::parse_gpu_information(&text)?);
    }
    if gpus.is_empty() {
        return None;
    }
    gpus.sort_by_key(|g| devices::normalize_bus_id(&g.bus_id));
    Some(nvml::NvmlInfo {
        driver_version: None,
        cuda_version: None,
        gpus: gpus
            .into_iter()
            .enumerate()
            .map(|(i, g)| nvml::NvmlGpu {
                index: i as u32,
                minor: Some(g.minor),
                uuid: Some(g.uuid),
                name: g.model,
                pci_bus_id: Some(g.bus_id),
                ..Default::default()
            })
            .collect(),
    })
}

/// The GPUs the caller may use: the minors of every /dev/nvidiaN it may open (a device cgroup
/// refuses the others), and those it may not.
fn openable(dev: &Path) -> (Vec<u32>, Vec<u32>) {
    devices::gpu_minors(dev)
        .into_iter()
        .partition(|m| devices::open_allows(&devices::probe(&dev.join(format!("nvidia{m}")))))
}

/// The allowed GPUs (`minors`, from [`openable`]) with NVML's facts when present, in NVML order.
fn with_facts(minors: &[u32], nvml: Option<&nvml::NvmlInfo>) -> Vec<GpuNode> {
    let mut allowed: Vec<GpuNode> = minors
        .iter()
        .map(|&minor| {
            let n = nvml.and_then(|n| n.gpus.iter().find(|g| g.minor == Some(minor)));
            GpuNode {
                minor,
                nvml_index: n.map(|g| g.index),
                uuid: n.and_then(|g| g.uuid.clone()),
                pci_bus_id: n.and_then(|g| g.pci_bus_id.clone()),
                mig: n.map(|g| g.mig.clone()).unwrap_or_default(),
            }
        })
        .collect();
    devices::sort_allowed(&mut allowed);
    allowed
}

/// The device nodes a MIG device needs besides its GPU: the nvidia-caps of its GPU and compute
/// instance, found through /proc/driver/nvidia/capabilities.
fn mig_caps(proc_dir: &Path, dev: &Path, minor: u32, m: &devices::MigInfo) -> Vec<PathBuf> {
    let (Some(gi), Some(ci)) = (m.gi, m.ci) else {
        return vec![];
    };
    let base = proc_dir.join(format!("capabilities/gpu{minor}/mig/gi{gi}"));
    [base.join("access"), base.join(format!("ci{ci}/access"))]
        .iter()
        .filter_map(|p| devices::cap_minor(&std::fs::read_to_string(p).ok()?))
        .map(|c| dev.join(format!("nvidia-caps/nvidia-cap{c}")))
        .collect()
}

/// Find the libnvidia-ml to load: the one among the chosen libraries, else the loader's.
fn nvml_lib(libs: &[driver::Library]) -> PathBuf {
    libs.iter()
        .find(|l| l.name == "libnvidia-ml.so.1")
        .map(|l| l.src.clone())
        .unwrap_or_else(|| PathBuf::from("libnvidia-ml.so.1"))
}

/// Are the GPUs the CDI devices' (`--device` bringing a GPU node) rather than gpurun's choice
/// (`--gpus`, else the environment)? Both explicit is an error: neither would be what was asked.
fn gpus_by_cdi(gpus: Option<&str>, applied: &cdi::Applied) -> Result<bool, GpuError> {
    match (applied.gives_gpus(), gpus) {
        (true, Some(g)) => Err(GpuError::GpusAndDevice {
            gpus: g.to_string(),
            device: applied
                .devices
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(","),
        }),
        (by_cdi, _) => Ok(by_cdi),
    }
}

/// The CDI devices `--device` asks for, from the specs in `cdi_spec_dirs`, each node checked
/// against what this process may open (a Slurm job's device cgroup limits them as it limits
/// `--gpus`). `None` without `--device`.
pub fn cdi_devices(opts: &GpuOpts) -> Result<Option<cdi::Applied>, GpuError> {
    if opts.devices.is_empty() {
        return Ok(None);
    }
    let defaults: Vec<PathBuf> = cdi::DEFAULT_SPEC_DIRS.iter().map(PathBuf::from).collect();
    let dirs = match opts.cdi_spec_dirs.as_slice() {
        [] => &defaults,
        d => d,
    };
    let applied = cdi::resolve(&opts.devices, dirs)?;
    cdi::check_host(&applied, &devices::probe, &|p| p.exists())?;
    gpus_by_cdi(opts.gpus.as_deref(), &applied)?;
    Ok(Some(applied))
}

/// Decide GPU support for one launch. `None`: GPU support is off, or there is no driver and
/// none was asked for explicitly (`wanted`; when one was, that is an error). `image_dir_list` lists a directory of the image. When the
/// CDI devices (`cdi`, from [`cdi_devices`]) bring GPUs, their nodes are the container's: the
/// plan then has the driver's files only.
pub fn prepare(
    opts: &GpuOpts,
    cdi: Option<&cdi::Applied>,
    host_env: &[(String, String)],
    image_env: &[(String, String)],
    image_dir_list: &dyn Fn(&str) -> Option<Vec<String>>,
) -> Result<Option<GpuPlan>, GpuError> {
    let Some(explicit) = wanted(opts, host_env) else {
        return Ok(None);
    };
    let Some(mut host) = find_driver(opts, host_env, explicit)? else {
        return Ok(None);
    };
    let mut warnings = vec![];

    // Which GPUs (decided first: `void` turns everything off). CDI devices are explicit: the
    // environment does not narrow them.
    let by_cdi = cdi.is_some_and(cdi::Applied::gives_gpus);
    let (open, _denied) = openable(&host.dev);
    let (asked, source) = if by_cdi {
        (Request::All, devices::Source::Cdi)
    } else {
        devices::request_from(opts.gpus.as_deref(), host_env, open.len())
    };
    if asked == Request::Void {
        return Ok(None);
    }

    let groups = capability_groups(opts, host_env, image_env, &mut warnings);
    let facts = Facts::open(opts.kept_facts.as_deref());
    let libs = libraries(facts.as_ref(), &host, &groups)?;

    // NVIDIA_DISABLE_REQUIRE on either side turns the image's rules off.
    let enforced = !require::disabled(host_env) && !require::disabled(image_env);
    let requirements = enforced && !require::constraints(image_env).is_empty();
    let query = GpuQuery {
        facts: facts.as_ref(),
        open: &open,
        asked: &asked,
        requirements,
        libs: &libs,
    };
    let nvml = query_gpus(&mut host, &query)
        .map_err(|e| warnings.push(format!("{e}; GPUs are matched by device minor number")))
        .ok();
    let sel = match by_cdi {
        true => devices::Selection {
            chosen: vec![],
            cuda_visible_devices: None,
        },
        // One node per openable GPU: the request counted the same GPUs.
        false => devices::select(&with_facts(&open, nvml.as_ref()), &asked, source)?,
    };
    let compat = compat_version(image_dir_list, &host.version);
    let cuda_version = nvml.as_ref().and_then(|n| n.cuda_version.clone());
    if enforced {
        // A newer compat libcuda answers for CUDA itself.
        let cuda = cuda_version.clone().filter(|_| compat.is_none());
        check_requirements(image_env, &sel, nvml.as_ref(), &host.version, cuda)?;
    }

    // Mounts: device nodes first, then files.
    let (mut mounts, gpu_devices) = device_mounts(&sel, nvml.as_ref(), &host);
    // The CDI spec names every node its GPUs need.
    if !by_cdi {
        mounts.extend(control_mounts(&host.dev));
    }
    mounts.extend(driver_file_mounts(&libs, &host, opts, host_env));

    Ok(Some(GpuPlan {
        driver_version: host.version,
        cuda_version,
        selected_by: source,
        mounts,
        env: visible_env(&sel),
        ld_library_path_prepend: compat
            .map(|_| PathBuf::from(COMPAT_DIR))
            .into_iter()
            .collect(),
        ld_library_path_append: vec![PathBuf::from(LIB_DIR)],
        path_append: vec![PathBuf::from(BIN_DIR)],
        devices: gpu_devices,
        warnings,
    }))
}

/// The control nodes (nvidiactl, nvidia-uvm…) bound into /dev.
fn control_mounts(dev: &Path) -> Vec<Mount> {
    devices::control_nodes(dev)
        .into_iter()
        .map(|p| {
            let name = p.file_name().map(PathBuf::from).unwrap_or_default();
            Mount::bind(p, Path::new("/dev").join(name), false)
        })
        .collect()
}

/// CUDA forward compatibility: the version of the image's libcuda in COMPAT_DIR when it is
/// newer than the driver's; it then goes first on the loader path.
fn compat_version(
    image_dir_list: &dyn Fn(&str) -> Option<Vec<String>>,
    driver_version: &str,
) -> Option<String> {
    image_dir_list(COMPAT_DIR)
        .and_then(|e| driver::compat_version(&e))
        .filter(|v| {
            require::compare_versions(v, driver_version) == Some(std::cmp::Ordering::Greater)
        })
}

/// The host's driver as [`prepare`] found it.
struct HostDriver {
    dev: PathBuf,
    proc_dir: PathBuf,
    /// The directories its libraries are sought in.
    sources: Vec<PathBuf>,
    version: String,
    /// NVML's answer, when only NVML knew the version (taken by [`query_gpus`]).
    early_nvml: Option<nvml::NvmlInfo>,
}

/// The host's driver and its version (from /proc, else from NVML). None found: `Ok(None)`,
/// or an error when GPUs were asked for (`explicit`).
fn find_driver(
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
fn capability_groups(
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
fn libraries(
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

/// What [`query_gpus`] decides from.
struct GpuQuery<'a> {
    facts: Option<&'a Facts>,
    /// The minors of the GPUs this process may open.
    open: &'a [u32],
    asked: &'a Request,
    /// The image has NVIDIA_REQUIRE_* rules to check.
    requirements: bool,
    libs: &'a [driver::Library],
}

/// The allowed GPUs' facts: from /proc unless only NVML has what is needed (loading NVML
/// costs ~40 ms per start on a 2×H200 node, where the whole start takes 13 ms without it).
fn query_gpus(host: &mut HostDriver, q: &GpuQuery) -> Result<nvml::NvmlInfo, String> {
    let fresh = || nvml::query_in_child(&nvml_lib(q.libs), false);
    if let Some(n) = host.early_nvml.take() {
        return Ok(n);
    }
    // /proc has them, unless the driver hides it; NVML is asked only for what /proc lacks.
    let Some(info) = gpus_from_proc_kept(q.facts, &host.proc_dir, &host.version) else {
        return fresh();
    };
    match nvml_use(q.asked, q.requirements) {
        NvmlUse::No => Ok(info),
        NvmlUse::Kept => {
            // NVML sees the GPUs this process may open (a device cgroup hides the others).
            let uuids: Vec<String> = info
                .gpus
                .into_iter()
                .filter(|g| g.minor.is_some_and(|m| q.open.contains(&m)))
                .filter_map(|g| g.uuid)
                .collect();
            match q.facts.and_then(|f| f.file("nvml", &host.version, &uuids)) {
                Some(file) => nvml::query_cached(&nvml_lib(q.libs), &file, &uuids),
                None => fresh(),
            }
        }
        NvmlUse::Fresh => fresh(),
    }
}

/// What NVML knows of the GPU with device minor `minor`.
fn nvml_gpu(nvml: Option<&nvml::NvmlInfo>, minor: u32) -> Option<&nvml::NvmlGpu> {
    nvml.and_then(|n| n.gpus.iter().find(|g| g.minor == Some(minor)))
}

/// NVIDIA_REQUIRE_* against the driver, `cuda` and each chosen GPU.
fn check_requirements(
    image_env: &[(String, String)],
    sel: &devices::Selection,
    nvml: Option<&nvml::NvmlInfo>,
    version: &str,
    cuda: Option<String>,
) -> Result<(), GpuError> {
    let base = require::Facts {
        cuda,
        driver: Some(version.to_string()),
        arch: None,
        brand: None,
    };
    let per_gpu: Vec<require::Facts> = sel
        .chosen
        .iter()
        .map(|c| {
            let n = nvml_gpu(nvml, c.minor);
            require::Facts {
                arch: n.and_then(|g| g.arch.clone()),
                brand: n.and_then(|g| g.brand.clone()),
                ..base.clone()
            }
        })
        .collect();
    require::check(image_env, &per_gpu, &base)?;
    Ok(())
}

/// Each chosen GPU's node (and a MIG device's caps) bound into /dev, and what the plan
/// reports of each GPU.
fn device_mounts(
    sel: &devices::Selection,
    nvml: Option<&nvml::NvmlInfo>,
    host: &HostDriver,
) -> (Vec<Mount>, Vec<GpuDevice>) {
    let mut mounts = vec![];
    let mut gpu_devices = vec![];
    for c in &sel.chosen {
        let name = format!("nvidia{}", c.minor);
        mounts.push(Mount::bind(
            host.dev.join(&name),
            Path::new("/dev").join(&name),
            false,
        ));
        let n = nvml_gpu(nvml, c.minor);
        if let Some(m) = &c.mig {
            for cap in mig_caps(&host.proc_dir, &host.dev, c.minor, m) {
                let rel = cap.strip_prefix(&host.dev).unwrap_or(&cap).to_path_buf();
                mounts.push(Mount::bind(cap, Path::new("/dev").join(rel), false));
            }
        }
        gpu_devices.push(GpuDevice {
            path: Path::new("/dev").join(&name),
            minor: c.minor,
            uuid: n.and_then(|g| g.uuid.clone()),
            name: n.and_then(|g| g.name.clone()),
            mig_uuid: c.mig.as_ref().map(|m| m.uuid.clone()),
        });
    }
    (mounts, gpu_devices)
}

/// The driver's files: gpurun's tmpfs at NV_DIR, the libraries, binaries, firmware, IPC
/// sockets, and the params file without ModifyDeviceFiles.
fn driver_file_mounts(
    libs: &[driver::Library],
    host: &HostDriver,
    opts: &GpuOpts,
    host_env: &[(String, String)],
) -> Vec<Mount> {
    // gpurun's own tmpfs: what an image has there (or a container left there) never shows.
    let mut mounts = vec![Mount {
        dst: PathBuf::from(NV_DIR),
        source: MountSource::tmpfs(0o755),
        readonly: false,
        optional: false,
        flags: Default::default(),
    }];
    mounts.extend(linked(libs));
    // A few files, found through PATH: bound one by one, not their whole directory.
    for (name, src) in driver::find_binaries(var(host_env, "PATH"), &opts.driver.paths) {
        mounts.push(Mount::bind(src, Path::new(BIN_DIR).join(name), true));
    }
    if let Some(fw) = driver::find_firmware(&host.version, &opts.driver.paths) {
        mounts.push(Mount::bind(
            fw,
            Path::new("/lib/firmware/nvidia").join(&host.version),
            true,
        ));
    }
    for p in driver::find_ipc(var(host_env, "CUDA_MPS_PIPE_DIRECTORY")) {
        mounts.push(Mount::bind(&p, &p, false));
    }
    let params_dst = Path::new("/proc/driver/nvidia/params");
    if params_dst.exists() {
        if let Ok(p) = std::fs::read_to_string(host.proc_dir.join("params")) {
            mounts.push(Mount {
                dst: params_dst.to_path_buf(),
                source: MountSource::File {
                    contents: driver::params_without_modify(&p),
                },
                readonly: true,
                optional: false,
                flags: Default::default(),
            });
        }
    }
    mounts
}

/// CUDA_VISIBLE_DEVICES as the selection renumbered it, and NVIDIA_VISIBLE_DEVICES to match.
fn visible_env(sel: &devices::Selection) -> Vec<(String, String)> {
    let Some(v) = &sel.cuda_visible_devices else {
        return vec![];
    };
    let nvidia = if v.is_empty() { "none" } else { v };
    vec![
        ("CUDA_VISIBLE_DEVICES".to_string(), v.clone()),
        ("NVIDIA_VISIBLE_DEVICES".to_string(), nvidia.to_string()),
    ]
}

/// Driver libraries as symlinks in LIB_DIR into one read-only bind of each host directory
/// holding them (HOST_DIR/0, /1, … in order of first use): a driver has dozens of libraries (28
/// in one directory on a 2×H200 node), and each bind is a mount made at start-up and torn down
/// at exit. Their files come resolved (a link on the host could point where the container has
/// nothing).
fn linked(libs: &[driver::Library]) -> Vec<Mount> {
    let mut dirs: Vec<&Path> = vec![];
    let mut links = vec![];
    for l in libs {
        let (Some(dir), Some(file)) = (l.src.parent(), l.src.file_name()) else {
            continue;
        };
        let k = match dirs.iter().position(|d| *d == dir) {
            Some(k) => k,
            None => {
                dirs.push(dir);
                dirs.len() - 1
            }
        };
        links.push(Mount {
            dst: Path::new(LIB_DIR).join(&l.name),
            source: MountSource::Symlink {
                target: Path::new(HOST_DIR).join(k.to_string()).join(file),
            },
            readonly: false,
            optional: false,
            flags: Default::default(),
        });
    }
    let binds = dirs
        .iter()
        .enumerate()
        .map(|(k, d)| Mount::bind(*d, Path::new(HOST_DIR).join(k.to_string()), true));
    binds.chain(links).collect()
}

/// Does the host's /dev hold nvidia entries (which the container must then not see unless GPU
/// support binds them)?
pub fn host_has_nvidia_dev() -> bool {
    std::fs::read_dir("/dev")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("nvidia"))
}

/// One GPU in `gpurun gpus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuListEntry {
    /// Index among the allowed GPUs (what CUDA_VISIBLE_DEVICES counts).
    pub index: usize,
    pub path: PathBuf,
    pub minor: u32,
    /// What NVML says about it (its own `index` counts the GPUs NVML sees).
    pub nvml: Option<nvml::NvmlGpu>,
}

/// What `gpurun gpus` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuList {
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    /// Why NVML is not used, when it is not.
    pub nvml_error: Option<String>,
    pub gpus: Vec<GpuListEntry>,
    /// Device nodes that exist but this process may not open (device cgroup).
    pub denied: Vec<PathBuf>,
    /// Device nodes that exist on a node without a driver: no GPU of a container.
    pub without_driver: Vec<PathBuf>,
}

impl GpuList {
    /// `gpurun gpus`'s exit status: 0 when it lists a GPU a container here can be given, 1 when
    /// none (no driver, no device node, or none this process may open).
    pub fn exit_code(&self) -> i32 {
        i32::from(self.gpus.is_empty())
    }
}

/// The GPUs this process may use, with NVML's details where NVML works.
pub fn list(driver_paths: &[PathBuf], host_env: &[(String, String)]) -> Result<GpuList, GpuError> {
    let (dev, proc_dir) = roots(host_env);
    let sources = driver::library_sources(driver_paths);
    let (mut nvml, mut nvml_error) = (None, None);
    let version = driver_version(&proc_dir).or_else(|| {
        let (v, n) = version_from_nvml(&dev, host_env, &sources, true)?;
        nvml = Some(n);
        Some(v)
    });
    match &version {
        Some(_) if nvml.is_some() => {}
        Some(v) => {
            let libs = driver::choose_libraries(
                &driver::candidates(&sources, Some(v))?,
                v,
                &[driver::Group::Utility],
            );
            match nvml::query(&nvml_lib(&libs), true) {
                Ok(n) => nvml = Some(n),
                Err(e) => nvml_error = Some(e.to_string()),
            }
        }
        None => {
            nvml_error = Some(format!(
                "no NVIDIA driver on this node ({} is missing)",
                proc_dir.join("version").display()
            ))
        }
    }
    let (mut open, denied) = openable(&dev);
    // Without a driver no container gets a GPU (--gpus fails): its nodes are no GPUs to list.
    let without_driver = match version {
        None => std::mem::take(&mut open),
        Some(_) => Vec::new(),
    };
    let allowed = with_facts(&open, nvml.as_ref());
    let gpus = allowed
        .iter()
        .enumerate()
        .map(|(index, g)| GpuListEntry {
            index,
            path: node_path(g.minor),
            minor: g.minor,
            nvml: nvml
                .as_ref()
                .and_then(|n| n.gpus.iter().find(|x| x.minor == Some(g.minor)).cloned()),
        })
        .collect();
    Ok(GpuList {
        driver_version: version.or_else(|| nvml.as_ref().and_then(|n| n.driver_version.clone())),
        cuda_version: nvml.as_ref().and_then(|n| n.cuda_version.clone()),
        nvml_error,
        gpus,
        denied: denied.iter().map(|&m| node_path(m)).collect(),
        without_driver: without_driver.iter().map(|&m| node_path(m)).collect(),
    })
}

fn node_path(minor: u32) -> PathBuf {
    Path::new("/dev").join(format!("nvidia{minor}"))
}

/// `gpurun gpus` as text.
pub fn render(l: &GpuList) -> String {
    let mut s = String::new();
    match &l.driver_version {
        Some(v) => {
            s.push_str(&format!("NVIDIA driver {v}"));
            if let Some(c) = &l.cuda_version {
                s.push_str(&format!(", CUDA {c}"));
            }
            s.push('\n');
        }
        None => s.push_str("no NVIDIA driver on this node\n"),
    }
    if let Some(e) = &l.nvml_error {
        if l.driver_version.is_some() {
            s.push_str(&format!("({e}: showing device nodes only)\n"));
        }
    }
    if !l.without_driver.is_empty() {
        let nodes: Vec<String> = l
            .without_driver
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        s.push_str(&format!(
            "{} exist, but without a driver no container gets them (--gpus fails); load the NVIDIA driver, or run on a GPU node\n",
            nodes.join(", ")
        ));
    }
    if l.gpus.is_empty() {
        s.push_str("no GPU this process may use\n");
    }
    let mib = |b: Option<u64>| {
        b.map(|b| format!("{}", b / (1 << 20)))
            .unwrap_or_else(|| "?".into())
    };
    for g in &l.gpus {
        s.push_str(&format!(
            "GPU {}: {} (minor {})",
            g.index,
            g.path.display(),
            g.minor
        ));
        if let Some(n) = &g.nvml {
            s.push_str(&format!(
                " {} {} memory {}/{} MiB, utilisation {}%",
                n.name.as_deref().unwrap_or("?"),
                n.uuid.as_deref().unwrap_or("?"),
                mib(n.memory_used_bytes),
                mib(n.memory_total_bytes),
                n.utilization_percent
                    .map(|u| u.to_string())
                    .unwrap_or_else(|| "?".into())
            ));
            s.push('\n');
            for m in &n.mig {
                s.push_str(&format!("  MIG {}\n", m.uuid));
            }
            for p in &n.processes {
                s.push_str(&format!(
                    "  process {} using {} MiB\n",
                    p.pid,
                    mib(p.used_memory_bytes)
                ));
            }
        } else {
            s.push('\n');
        }
    }
    for d in &l.denied {
        s.push_str(&format!("not allowed here: {}\n", d.display()));
    }
    s
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

    #[test]
    fn driver_files_link_into_one_bind_per_host_directory() {
        let libs = |pairs: &[(&str, &str)]| -> Vec<driver::Library> {
            pairs
                .iter()
                .map(|(name, src)| driver::Library {
                    name: name.to_string(),
                    src: src.into(),
                    group: None,
                })
                .collect()
        };
        let bind = |src: &str, k: &str| Mount::bind(src, format!("{HOST_DIR}/{k}"), true);
        let link = |name: &str, target: &str| Mount {
            dst: format!("{LIB_DIR}/{name}").into(),
            source: MountSource::Symlink {
                target: format!("{HOST_DIR}/{target}").into(),
            },
            readonly: false,
            optional: false,
            flags: Default::default(),
        };
        let cases: [(&str, Vec<driver::Library>, Vec<Mount>); 3] = [
            ("nothing", vec![], vec![]),
            (
                "two directories: a bind each, numbered in order of first use, the binds first",
                libs(&[
                    ("libcuda.so.1", "/usr/lib64/libcuda.so.580.1"),
                    ("libcuda.so", "/usr/lib64/libcuda.so.580.1"),
                    ("libnvidia-nvvm.so.4", "/opt/nv/libnvidia-nvvm.so.580.1"),
                    ("libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.580.1"),
                ]),
                vec![
                    bind("/usr/lib64", "0"),
                    bind("/opt/nv", "1"),
                    link("libcuda.so.1", "0/libcuda.so.580.1"),
                    link("libcuda.so", "0/libcuda.so.580.1"),
                    link("libnvidia-nvvm.so.4", "1/libnvidia-nvvm.so.580.1"),
                    link("libnvidia-ml.so.1", "0/libnvidia-ml.so.580.1"),
                ],
            ),
            (
                "a file with no directory is left out",
                libs(&[("x", "/")]),
                vec![],
            ),
        ];
        for (name, libs, want) in cases {
            assert_eq!(linked(&libs), want, "{name}");
        }
    }

    #[test]
    fn nvml_only_for_mig_devices_and_requirements() {
        let list = |v: &[&str]| Request::List(v.iter().map(|s| s.to_string()).collect());
        let cases = [
            (Request::All, false, NvmlUse::No),
            (Request::None, false, NvmlUse::No),
            (list(&["0", "GPU-fa4e", "0000:3b:00.0"]), false, NvmlUse::No),
            (Request::All, true, NvmlUse::Kept),
            (list(&["1"]), true, NvmlUse::Kept),
            (list(&["0", "mig-f00d0001-0000"]), false, NvmlUse::Fresh),
            (list(&["MIG-GPU-fa4e/1/0"]), true, NvmlUse::Fresh),
        ];
        for (asked, requirements, want) in cases {
            assert_eq!(
                nvml_use(&asked, requirements),
                want,
                "{asked:?} {requirements}"
            );
        }
    }

    fn env(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn wanted_table() {
        let o = |nv, no_nv| GpuOpts {
            nv,
            no_nv,
            ..Default::default()
        };
        let gpus = |g: &str| GpuOpts {
            gpus: Some(g.into()),
            ..Default::default()
        };
        let by = |w: &str| Some(Some(w.to_string()));
        let cases = [
            (o(false, false), vec![], Some(None)),
            (o(true, false), vec![], by("--nv")),
            (o(false, true), vec![], None),
            (o(false, true), vec![("GPURUN_NV", "1")], None),
            (o(false, false), vec![("GPURUN_NV", "1")], by("GPURUN_NV=1")),
            (o(false, false), vec![("GPURUN_NV", "0")], None),
            (o(false, false), vec![("GPURUN_NV", "off")], None),
            (o(true, false), vec![("GPURUN_NV", "0")], by("--nv")),
            (o(false, false), vec![("GPURUN_NV", "")], Some(None)),
            (gpus("1,2"), vec![], by("--gpus 1,2")),
            (gpus("all"), vec![], by("--gpus all")),
            (gpus("none"), vec![], Some(None)),
            (gpus("none"), vec![("GPURUN_NV", "1")], Some(None)),
            (gpus("1"), vec![("GPURUN_NV", "1")], by("GPURUN_NV=1")),
            (gpus("1"), vec![("GPURUN_NV", "0")], None),
        ];
        for (opts, e, want) in cases {
            assert_eq!(wanted(&opts, &env(&e)), want, "{opts:?} {e:?}");
        }
    }

    #[test]
    fn who_chooses_the_gpus() {
        let applied = |nodes: &[&str]| cdi::Applied {
            devices: vec![cdi::Chosen {
                name: "x.com/y=0".into(),
                spec: "/etc/cdi/x.yaml".into(),
            }],
            nodes: (nodes.iter())
                .map(|p| cdi::DeviceNode {
                    path: p.into(),
                    host_path: p.into(),
                    from: "x.com/y=0".into(),
                })
                .collect(),
            ..Default::default()
        };
        // (--gpus, the CDI devices' nodes, Some(the CDI devices choose) or None: refused)
        let cases: [(Option<&str>, &[&str], Option<bool>); 7] = [
            (None, &[], Some(false)),
            (Some("0"), &["/dev/fpga0"], Some(false)),
            (None, &["/dev/nvidiactl", "/dev/nvidia3"], Some(true)),
            (None, &["/dev/nvidiactl", "/dev/nvidia-uvm"], Some(false)),
            (None, &["/dev/dri/nvidia0"], Some(false)),
            (Some("1"), &["/dev/nvidia3"], None),
            (Some("none"), &["/dev/nvidia0"], None),
        ];
        for (gpus, nodes, want) in cases {
            let got = gpus_by_cdi(gpus, &applied(nodes));
            match want {
                Some(w) => assert_eq!(got.unwrap(), w, "{gpus:?} {nodes:?}"),
                None => assert_eq!(
                    got.unwrap_err().to_string(),
                    format!(
                        "--gpus {} and --device x.com/y=0 both choose GPUs; give one of them",
                        gpus.unwrap()
                    )
                ),
            }
        }
    }

    #[test]
    fn mig_devices_need_their_caps() {
        let dir = tempfile::tempdir().unwrap();
        let gi = dir.path().join("capabilities/gpu1/mig/gi2");
        std::fs::create_dir_all(gi.join("ci0")).unwrap();
        std::fs::write(
            gi.join("access"),
            "DeviceFileMinor: 21\nDeviceFileMode: 292\n",
        )
        .unwrap();
        std::fs::write(gi.join("ci0/access"), "DeviceFileMinor: 22\n").unwrap();
        let m = |gi, ci| devices::MigInfo {
            uuid: "MIG-x".into(),
            gi,
            ci,
        };
        let dev = Path::new("/dev");
        assert_eq!(
            mig_caps(dir.path(), dev, 1, &m(Some(2), Some(0))),
            vec![
                PathBuf::from("/dev/nvidia-caps/nvidia-cap21"),
                PathBuf::from("/dev/nvidia-caps/nvidia-cap22")
            ]
        );
        assert!(mig_caps(dir.path(), dev, 0, &m(Some(2), Some(0))).is_empty());
        assert!(mig_caps(dir.path(), dev, 1, &m(None, None)).is_empty());
    }

    #[test]
    fn no_driver_means_no_plan() {
        let dir = tempfile::tempdir().unwrap();
        let e = env(&[
            ("GPURUN_NV_PROC", dir.path().to_str().unwrap()),
            ("GPURUN_NV_DEV", dir.path().to_str().unwrap()),
        ]);
        // asked for by default: none; explicitly: an error naming the request
        assert!(prepare(&GpuOpts::default(), None, &e, &[], &|_| None)
            .unwrap()
            .is_none());
        let nv = GpuOpts {
            nv: true,
            ..Default::default()
        };
        let gpus = GpuOpts {
            gpus: Some("1,2".into()),
            ..Default::default()
        };
        for (opts, asked) in [(nv, "--nv"), (gpus, "--gpus 1,2")] {
            let err = prepare(&opts, None, &e, &[], &|_| None)
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with(&format!(
                    "{asked} asks for GPUs, but this node has no NVIDIA driver"
                )) && err.contains("version is missing"),
                "{err}"
            );
        }
        let l = list(&[], &e).unwrap();
        assert!(l.driver_version.is_none() && l.gpus.is_empty());
        assert!(render(&l).contains("no NVIDIA driver"));
    }
}

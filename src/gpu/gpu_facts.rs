//! What the GPUs this process may open are: minors, UUIDs and bus ids from /proc (kept per
//! boot), NVML's answers only where a MIG device or NVIDIA_REQUIRE_* rules need them; a MIG
//! device's caps; the image's requirements checked against them.

use std::path::{Path, PathBuf};

use super::devices::{GpuNode, Request};
use super::host_driver::{Facts, HostDriver};
use super::types::GpuError;
use super::{devices, driver, nvml, require};

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

/// `gpus_from_proc`, kept per boot (`Facts`) for the GPUs listed in `proc_dir` now: the
/// driver makes up each GPU's information file when it is read, a cost per GPU on every start,
/// and what it says does not change while the same GPUs sit in the same load of the driver. A GPU added again (hot plug, PCI remove and rescan) and a reloaded module get new
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
pub(super) fn openable(dev: &Path) -> (Vec<u32>, Vec<u32>) {
    devices::gpu_minors(dev)
        .into_iter()
        .partition(|m| devices::open_allows(&devices::probe(&dev.join(format!("nvidia{m}")))))
}

/// The allowed GPUs (`minors`, from [`openable`]) with NVML's facts when present, in NVML order.
pub(super) fn with_facts(minors: &[u32], nvml: Option<&nvml::NvmlInfo>) -> Vec<GpuNode> {
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
pub(super) fn mig_caps(
    proc_dir: &Path,
    dev: &Path,
    minor: u32,
    m: &devices::MigInfo,
) -> Vec<PathBuf> {
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
pub(super) fn nvml_lib(libs: &[driver::Library]) -> PathBuf {
    libs.iter()
        .find(|l| l.name == "libnvidia-ml.so.1")
        .map(|l| l.src.clone())
        .unwrap_or_else(|| PathBuf::from("libnvidia-ml.so.1"))
}

/// What [`query_gpus`] decides from.
pub(super) struct GpuQuery<'a> {
    pub(super) facts: Option<&'a Facts>,
    /// The minors of the GPUs this process may open.
    pub(super) open: &'a [u32],
    pub(super) asked: &'a Request,
    /// The image has NVIDIA_REQUIRE_* rules to check.
    pub(super) requirements: bool,
    pub(super) libs: &'a [driver::Library],
}

/// The allowed GPUs' facts: from /proc unless only NVML has what is needed (loading NVML
/// costs more than the whole start without it).
pub(super) fn query_gpus(
    host: &mut HostDriver,
    q: &GpuQuery,
) -> Result<nvml::NvmlInfo, nvml::NvmlError> {
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
pub(super) fn nvml_gpu(nvml: Option<&nvml::NvmlInfo>, minor: u32) -> Option<&nvml::NvmlGpu> {
    nvml.and_then(|n| n.gpus.iter().find(|g| g.minor == Some(minor)))
}

/// NVIDIA_REQUIRE_* against the driver, `cuda` and each chosen GPU.
pub(super) fn check_requirements(
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

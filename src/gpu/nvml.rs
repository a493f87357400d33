//! What NVML says about the GPUs, as plain data. libnvidia-ml is loaded at run time (nvml-wrapper
//! uses libloading), so gpurun starts and works on a machine without a driver: loading fails
//! cleanly and the caller goes on without NVML.

use std::path::{Path, PathBuf};

use nvml_wrapper::enum_wrappers::device::Brand;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::Nvml;
use serde::{Deserialize, Serialize};

use super::devices::MigInfo;

#[derive(Debug, thiserror::Error)]
pub enum NvmlError {
    #[error("NVML is not usable ({lib}): {source}")]
    Init {
        lib: String,
        #[source]
        source: nvml_wrapper::error::NvmlError,
    },
    /// [`query`]'s error in the child of [`query_in_child`], told as the child told it: its
    /// cause crossed a pipe as text.
    #[error("{message}")]
    InChild { lib: PathBuf, message: String },
    #[error("NVML query: {source}")]
    Fork { source: crate::sys::SysError },
    #[error("NVML query ({}) died", lib.display())]
    Died { lib: PathBuf },
}

/// A process on a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub used_memory_bytes: Option<u64>,
}

/// One GPU as NVML sees it. Fields NVML could not answer are `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct NvmlGpu {
    pub index: u32,
    pub minor: Option<u32>,
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub pci_bus_id: Option<String>,
    /// libnvidia-container's brand word (`tesla`, `nvidia`, `geforce`…).
    pub brand: Option<String>,
    /// Compute capability, `9.0`.
    pub arch: Option<String>,
    pub memory_total_bytes: Option<u64>,
    pub memory_used_bytes: Option<u64>,
    pub utilization_percent: Option<u32>,
    pub processes: Vec<GpuProcess>,
    pub mig: Vec<MigInfo>,
}

/// The driver and its GPUs as NVML sees them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct NvmlInfo {
    pub driver_version: Option<String>,
    /// CUDA version the driver supports, `13.0`.
    pub cuda_version: Option<String>,
    pub gpus: Vec<NvmlGpu>,
}

/// `12040` (NVML's CUDA driver version) → `12.4`.
pub fn cuda_version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn brand_word(b: Brand) -> String {
    format!("{b:?}").to_ascii_lowercase()
}

/// Load NVML from `lib` (a path, or a name the dynamic loader finds) and read everything;
/// `detail` adds memory, utilisation and processes (for `gpurun gpus`).
pub fn query(lib: &Path, detail: bool) -> Result<NvmlInfo, NvmlError> {
    let nvml = Nvml::builder()
        .lib_path(lib.as_os_str())
        .init()
        .map_err(|source| NvmlError::Init {
            lib: lib.display().to_string(),
            source,
        })?;
    // Instance ids of MIG devices are not wrapped by nvml-wrapper: ask the raw bindings.
    // SAFETY: loading the same libnvidia-ml again only bumps its reference count.
    let raw = unsafe { nvml_wrapper_sys::bindings::NvmlLib::new(lib.as_os_str()) }.ok();
    let mut info = NvmlInfo {
        driver_version: nvml.sys_driver_version().ok(),
        cuda_version: nvml.sys_cuda_driver_version().ok().map(cuda_version_string),
        gpus: vec![],
    };
    let count = nvml.device_count().unwrap_or(0);
    for index in 0..count {
        let Ok(d) = nvml.device_by_index(index) else {
            continue;
        };
        let mut g = NvmlGpu {
            index,
            minor: d.minor_number().ok(),
            uuid: d.uuid().ok(),
            name: d.name().ok(),
            pci_bus_id: d.pci_info().ok().map(|p| p.bus_id),
            brand: d.brand().ok().map(brand_word),
            arch: d
                .cuda_compute_capability()
                .ok()
                .map(|c| format!("{}.{}", c.major, c.minor)),
            ..Default::default()
        };
        if detail {
            if let Ok(m) = d.memory_info() {
                g.memory_total_bytes = Some(m.total);
                g.memory_used_bytes = Some(m.used);
            }
            g.utilization_percent = d.utilization_rates().ok().map(|u| u.gpu);
            g.processes = gpu_processes(&d);
        }
        g.mig = mig_devices(&d, raw.as_ref());
        info.gpus.push(g);
    }
    Ok(info)
}

/// The compute and graphics processes on `d`, each once, by pid.
fn gpu_processes(d: &nvml_wrapper::Device) -> Vec<GpuProcess> {
    let mut procs = d.running_compute_processes().unwrap_or_default();
    procs.extend(d.running_graphics_processes().unwrap_or_default());
    let mut out: Vec<GpuProcess> = procs
        .into_iter()
        .map(|p| GpuProcess {
            pid: p.pid,
            used_memory_bytes: match p.used_gpu_memory {
                UsedGpuMemory::Used(b) => Some(b),
                UsedGpuMemory::Unavailable => None,
            },
        })
        .collect();
    out.sort_by_key(|p| p.pid);
    out.dedup_by_key(|p| p.pid);
    out
}

/// The MIG devices of `d` when MIG is on, with their GPU and compute instance ids (from
/// `raw`: nvml-wrapper does not wrap those).
fn mig_devices(
    d: &nvml_wrapper::Device,
    raw: Option<&nvml_wrapper_sys::bindings::NvmlLib>,
) -> Vec<MigInfo> {
    let mut out = vec![];
    if !d.mig_mode().is_ok_and(|m| m.current == 1) {
        return out;
    }
    for i in 0..d.mig_device_count().unwrap_or(0) {
        let Ok(m) = d.mig_device_by_index(i) else {
            continue;
        };
        let Ok(uuid) = m.uuid() else { continue };
        let id = |f: Option<unsafe extern "C" fn(_, *mut u32) -> u32>| -> Option<u32> {
            let f = f?;
            let mut v = 0u32;
            // SAFETY: a valid MIG device handle of this NVML session and a valid out pointer.
            (unsafe { f(m.handle(), &mut v) } == 0).then_some(v)
        };
        let (gi, ci) = match raw {
            Some(r) => (
                id(r.nvmlDeviceGetGpuInstanceId.as_ref().ok().copied()),
                id(r.nvmlDeviceGetComputeInstanceId.as_ref().ok().copied()),
            ),
            None => (None, None),
        };
        out.push(MigInfo { uuid, gi, ci });
    }
    out
}

/// [`query`] in a forked child, so that NVML's threads never live in this process (which must stay
/// single-threaded to enter a user namespace). The child's errors come back as text.
pub fn query_in_child(lib: &Path, detail: bool) -> Result<NvmlInfo, NvmlError> {
    let out = crate::sys::in_child(|| {
        let r: Result<NvmlInfo, String> = query(lib, detail).map_err(|e| e.to_string());
        serde_json::to_vec(&r).unwrap_or_default()
    })
    .map_err(|source| NvmlError::Fork { source })?;
    let died = |_| NvmlError::Died {
        lib: lib.to_path_buf(),
    };
    serde_json::from_slice::<Result<NvmlInfo, String>>(&out)
        .map_err(died)?
        .map_err(|message| NvmlError::InChild {
            lib: lib.to_path_buf(),
            message,
        })
}

/// NVML's answers kept in `file`, so that an image's NVIDIA_REQUIRE_* rules cost one NVML load
/// per node, boot and set of GPUs instead of one per start (a load costs more than the rest of
/// a start). Used only
/// while NVML's GPUs are the ones expected (`proc_uuids`: the GPUs this process may open, by
/// /proc); a missing, unreadable or stale file is asked anew and rewritten (atomically:
/// concurrent starts race harmlessly). MIG layouts change at run time: callers ask NVML afresh
/// for MIG devices.
pub fn query_cached(lib: &Path, file: &Path, proc_uuids: &[String]) -> Result<NvmlInfo, NvmlError> {
    crate::store::kept_facts::kept(
        Some(file),
        |i| same_gpus(i, proc_uuids),
        || query_in_child(lib, false),
    )
}

/// Whether NVML's GPUs are exactly these UUIDs.
fn same_gpus(info: &NvmlInfo, uuids: &[String]) -> bool {
    let mut have: Vec<&str> = info.gpus.iter().filter_map(|g| g.uuid.as_deref()).collect();
    let mut want: Vec<&str> = uuids.iter().map(String::as_str).collect();
    have.sort_unstable();
    want.sort_unstable();
    have.len() == info.gpus.len() && have == want
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_answers_only_for_the_same_gpus() {
        let info = |uuids: &[Option<&str>]| NvmlInfo {
            gpus: uuids
                .iter()
                .map(|u| NvmlGpu {
                    uuid: u.map(str::to_string),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let proc = vec!["GPU-b".to_string(), "GPU-a".to_string()];
        let cases = [
            (info(&[Some("GPU-a"), Some("GPU-b")]), true),
            (info(&[Some("GPU-a")]), false),
            (info(&[Some("GPU-a"), Some("GPU-c")]), false),
            (info(&[Some("GPU-a"), Some("GPU-b"), None]), false),
        ];
        for (i, want) in cases {
            assert_eq!(same_gpus(&i, &proc), want, "{i:?}");
        }
    }

    #[test]
    fn cuda_versions() {
        for (v, s) in [
            (12040, "12.4"),
            (13000, "13.0"),
            (11080, "11.8"),
            (12090, "12.9"),
            (10010, "10.1"),
        ] {
            assert_eq!(cuda_version_string(v), s);
        }
    }

    #[test]
    fn brands() {
        assert_eq!(brand_word(Brand::Tesla), "tesla");
        assert_eq!(brand_word(Brand::GeForce), "geforce");
        assert_eq!(brand_word(Brand::Nvidia), "nvidia");
    }

    #[test]
    fn no_driver_fails_cleanly() {
        // CI machines have no driver: loading must fail with an error, not crash.
        if !Path::new("/proc/driver/nvidia/version").exists() {
            assert!(query(Path::new("/nonexistent/libnvidia-ml.so.1"), true).is_err());
            let lib = Path::new("/nonexistent/libnvidia-ml.so.1");
            let e = query_in_child(lib, false).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with("NVML is not usable (/nonexistent/libnvidia-ml.so.1): "),
                "{e}"
            );
            assert!(
                matches!(&e, NvmlError::InChild { lib: l, .. } if l == lib),
                "{e:?}"
            );
        }
    }
}

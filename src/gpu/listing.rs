//! `gpurun gpus`: the GPUs this process may use, with NVML's details where NVML works.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::gpu_facts::{nvml_lib, openable, with_facts};
use super::host_driver::{driver_version, roots, version_from_nvml};
use super::types::GpuError;
use super::{driver, nvml};

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

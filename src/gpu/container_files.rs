//! What the container gets of the driver: the chosen GPUs' nodes, the control nodes, the
//! driver's libraries (linked into one bind per host directory), binaries, firmware and IPC
//! sockets, and the variables that name the GPUs.

use std::path::{Path, PathBuf};

use super::gpu_facts::{mig_caps, nvml_gpu};
use super::host_driver::HostDriver;
use super::types::{GpuDevice, GpuOpts, BIN_DIR, HOST_DIR, LIB_DIR, NV_DIR};
use super::{devices, driver, nvml};
use crate::env_vars::var;
use crate::mount::{Mount, MountSource};

/// The control nodes (nvidiactl, nvidia-uvm…) bound into /dev.
pub(super) fn control_mounts(dev: &Path) -> Vec<Mount> {
    devices::control_nodes(dev)
        .into_iter()
        .map(|p| {
            let name = p.file_name().map(PathBuf::from).unwrap_or_default();
            Mount::bind(p, Path::new("/dev").join(name), false)
        })
        .collect()
}

/// Each chosen GPU's node (and a MIG device's caps) bound into /dev, and what the plan
/// reports of each GPU.
pub(super) fn device_mounts(
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
pub(super) fn driver_file_mounts(
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
pub(super) fn visible_env(sel: &devices::Selection) -> Vec<(String, String)> {
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
/// holding them (HOST_DIR/0, /1, … in order of first use): a driver has dozens of libraries,
/// most in one directory, and each bind is a mount made at start-up and torn down
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

#[cfg(test)]
mod tests {
    use super::*;

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
}

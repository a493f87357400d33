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
//!
//! types.rs holds what is asked and decided; host_driver.rs finds the driver, gpu_facts.rs
//! what the GPUs are, container_files.rs what the container gets; listing.rs is `gpurun gpus`.

pub mod cdi;
mod container_files;
pub mod devices;
pub mod driver;
mod gpu_facts;
mod host_driver;
mod listing;
pub mod nvml;
pub mod require;
mod types;

use std::path::PathBuf;

use crate::env_vars::var;
use container_files::{control_mounts, device_mounts, driver_file_mounts, visible_env};
use devices::Request;
use gpu_facts::{check_requirements, openable, query_gpus, with_facts, GpuQuery};
use host_driver::{capability_groups, compat_version, find_driver, libraries, Facts};
pub use listing::{list, render, GpuList, GpuListEntry};
pub use types::{
    DriverPaths, GpuDevice, GpuError, GpuOpts, GpuPlan, BIN_DIR, COMPAT_DIR, HOST_DIR, LIB_DIR,
    NV_DIR,
};

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

/// Does the host's /dev hold nvidia entries (which the container must then not see unless GPU
/// support binds them)?
pub fn host_has_nvidia_dev() -> bool {
    std::fs::read_dir("/dev")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("nvidia"))
}

#[cfg(test)]
mod tests {
    use super::*;

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

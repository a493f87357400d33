//! GPU support without a GPU: a fake driver (tiny shared objects with the real sonames and a
//! driver version suffix, ld.so.caches written by the real ldconfig in all three formats, fake
//! device nodes, a fake /proc/driver/nvidia) checked through `gpurun::gpu::prepare` and through
//! `gpurun gpus` run as the unprivileged test user.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use gpurun::gpu::{self, GpuOpts};
use gpurun::mount::{Mount, MountSource};

const VERSION: &str = "550.54.14";

struct FakeDriver {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl FakeDriver {
    fn lib(&self) -> PathBuf {
        self.root.join("lib")
    }
    fn dev(&self) -> PathBuf {
        self.root.join("dev")
    }
    fn proc_dir(&self) -> PathBuf {
        self.root.join("proc")
    }
    fn cache(&self, format: &str) -> PathBuf {
        self.root.join(format!("{format}.cache"))
    }
    /// Options for `gpu::prepare` in this process: what it keeps about the fake GPUs stays with
    /// them, in a cache of the fake driver's own (unless `cache` names one).
    fn kept_in(&self, mut opts: GpuOpts, cache: Option<&str>) -> GpuOpts {
        let own = self.root.join("cache");
        opts.kept_facts = Some(cache.map_or(own, PathBuf::from));
        opts
    }
    /// The host environment gpurun sees: hooks to the fake driver, PATH to its binaries.
    fn env(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut e = vec![
            (
                "GPURUN_NV_DEV".to_string(),
                self.dev().display().to_string(),
            ),
            (
                "GPURUN_NV_PROC".to_string(),
                self.proc_dir().display().to_string(),
            ),
            (
                "PATH".to_string(),
                format!("{}:/usr/bin:/bin", self.root.join("bin").display()),
            ),
        ];
        e.extend(extra.iter().map(|(a, b)| (a.to_string(), b.to_string())));
        e
    }
}

/// The files in `dir`.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect()
}

fn sh(cmd: &mut Command) {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Build the fake driver. `gpus` device nodes nvidia0.. (needs root for mknod; None without).
fn fake_driver(gpus: u32) -> Option<FakeDriver> {
    if !common::root_or_skip("for mknod of the fake GPUs") {
        return None;
    }
    common::setup();
    let dir = tempfile::Builder::new()
        .prefix("gpurun-fakenv.")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = dir.path().to_path_buf();
    let f = FakeDriver { _dir: dir, root };
    for d in ["lib", "dev", "proc", "bin"] {
        std::fs::create_dir_all(f.root.join(d)).unwrap();
    }
    let src = f.root.join("x.c");
    std::fs::write(&src, "int gpurun_fake(void) { return 42; }\n").unwrap();
    // (soname, real file)
    let libs = [
        ("libcuda.so.1", format!("libcuda.so.{VERSION}")),
        ("libnvidia-ml.so.1", format!("libnvidia-ml.so.{VERSION}")),
        (
            "libnvidia-ptxjitcompiler.so.1",
            format!("libnvidia-ptxjitcompiler.so.{VERSION}"),
        ),
        (
            "libnvidia-nvvm.so.4",
            format!("libnvidia-nvvm.so.{VERSION}"),
        ),
        (
            "libcudadebugger.so.1",
            format!("libcudadebugger.so.{VERSION}"),
        ),
        (
            "libnvidia-sandboxutils.so.1",
            format!("libnvidia-sandboxutils.so.{VERSION}"),
        ),
        ("libnvcuvid.so.1", format!("libnvcuvid.so.{VERSION}")),
        (
            &*Box::leak(format!("libnvidia-glcore.so.{VERSION}").into_boxed_str()),
            format!("libnvidia-glcore.so.{VERSION}"),
        ),
        (
            "libnvidia-oldthing.so.1",
            "libnvidia-oldthing.so.470.82.01".to_string(),
        ),
    ];
    let fake_nvml = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gpu/fake-nvml.c");
    for (soname, file) in &libs {
        let c = if *soname == "libnvidia-ml.so.1" {
            &fake_nvml
        } else {
            &src
        };
        sh(Command::new("cc")
            .args(["-shared", "-fPIC", &format!("-Wl,-soname,{soname}"), "-o"])
            .arg(f.lib().join(file))
            .arg(c));
        if soname != file {
            std::os::unix::fs::symlink(file, f.lib().join(soname)).unwrap();
        }
    }
    let conf = f.root.join("ld.so.conf");
    std::fs::write(&conf, format!("{}\n", f.lib().display())).unwrap();
    for format in ["new", "old", "compat"] {
        sh(Command::new("ldconfig")
            .args(["-X", "-c", format, "-C"])
            .arg(f.cache(format))
            .arg("-f")
            .arg(&conf));
    }
    std::fs::write(
        f.proc_dir().join("version"),
        format!("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {VERSION}  Release Build  (fake)\nGCC version:  gcc version 12.2.0\n"),
    )
    .unwrap();
    std::fs::write(
        f.proc_dir().join("params"),
        "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n",
    )
    .unwrap();
    // a real (static) program: gpurun takes only programs of this architecture, no scripts
    let smi_c = f.root.join("smi.c");
    std::fs::write(
        &smi_c,
        "#include <stdio.h>\nint main(void) { puts(\"fake nvidia-smi\"); return 0; }\n",
    )
    .unwrap();
    sh(Command::new("cc")
        .args(["-static", "-o"])
        .arg(f.root.join("bin/nvidia-smi"))
        .arg(&smi_c));
    let mknod = |name: &str, minor: u32, mode: &str| {
        sh(Command::new("mknod")
            .args(["-m", mode])
            .arg(f.dev().join(name))
            .args(["c", "195", &minor.to_string()]));
    };
    for i in 0..gpus {
        mknod(&format!("nvidia{i}"), i, "0666");
    }
    mknod("nvidiactl", 255, "0666");
    sh(Command::new("mknod")
        .args(["-m", "0666"])
        .arg(f.dev().join("nvidia-uvm"))
        .args(["c", "511", "0"]));
    Some(f)
}

fn prepare(
    f: &FakeDriver,
    opts: GpuOpts,
    host: &[(&str, &str)],
    image: &[(&str, &str)],
) -> Result<Option<gpu::GpuPlan>, gpu::GpuError> {
    let image: Vec<(String, String)> = image
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    // The cache a test names, as GPURUN_CACHEDIR would, keeps the facts.
    let (cache, host): (Vec<_>, Vec<_>) = host.iter().partition(|(k, _)| *k == "GPURUN_CACHEDIR");
    let opts = f.kept_in(opts, cache.first().map(|(_, v)| *v));
    gpu::prepare(&opts, None, &f.env(&host), &image, &|_| None)
}

fn opts(f: &FakeDriver, format: &str) -> GpuOpts {
    GpuOpts {
        driver: gpurun::gpu::DriverPaths {
            paths: vec![f.cache(format)],
        },
        ..Default::default()
    }
}

/// (host file, container path) of every driver file and device node: a bind directly, or a
/// symlink into one of the plan's binds of a host directory (gpu::HOST_DIR/k).
fn binds(p: &gpu::GpuPlan) -> Vec<(String, String)> {
    let bound = |target: &Path| {
        p.mounts.iter().find_map(|m| match &m.source {
            MountSource::Bind { src } => Some(src.join(target.strip_prefix(&m.dst).ok()?)),
            _ => None,
        })
    };
    p.mounts
        .iter()
        .filter_map(|m: &Mount| {
            let src = match &m.source {
                MountSource::Bind { src } => src.clone(),
                MountSource::Symlink { target } => bound(target)?,
                _ => return None,
            };
            Some((src.display().to_string(), m.dst.display().to_string()))
        })
        .collect()
}

fn dsts(p: &gpu::GpuPlan) -> Vec<String> {
    p.mounts
        .iter()
        .map(|m| m.dst.display().to_string())
        .collect()
}

fn get<'a>(p: &'a gpu::GpuPlan, k: &str) -> Option<&'a str> {
    p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

#[test]
fn driver_libraries_from_every_cache_format() {
    let Some(f) = fake_driver(2) else { return };
    for format in ["new", "old", "compat"] {
        let p = prepare(&f, opts(&f, format), &[], &[])
            .unwrap()
            .expect("plan");
        let b = binds(&p);
        let lib = |name: &str, file: &str| {
            (
                f.lib().join(file).display().to_string(),
                format!("/.gpurun/nvidia/lib/{name}"),
            )
        };
        for (name, file) in [
            ("libcuda.so.1", format!("libcuda.so.{VERSION}")),
            ("libcuda.so", format!("libcuda.so.{VERSION}")),
            ("libnvidia-ml.so.1", format!("libnvidia-ml.so.{VERSION}")),
            (
                "libnvidia-nvvm.so.4",
                format!("libnvidia-nvvm.so.{VERSION}"),
            ),
            (
                "libnvidia-sandboxutils.so.1",
                format!("libnvidia-sandboxutils.so.{VERSION}"),
            ),
            (
                "libcudadebugger.so.1",
                format!("libcudadebugger.so.{VERSION}"),
            ),
        ] {
            assert!(
                b.contains(&lib(name, &file)),
                "{format}: {name} missing in {b:#?}"
            );
        }
        let d = dsts(&p);
        assert!(
            !d.iter()
                .any(|d| d.contains("libnvcuvid") || d.contains("glcore")),
            "{format}: video/graphics without caps: {d:#?}"
        );
        assert!(
            !d.iter().any(|d| d.contains("oldthing")),
            "{format}: another driver's library: {d:#?}"
        );
        // gpurun's own tmpfs first; in it the libraries' host directories bound read-only with
        // the libraries linked into them, and the binaries bound read-only.
        let ours: Vec<&Mount> = p
            .mounts
            .iter()
            .filter(|m| m.dst.starts_with(gpu::NV_DIR))
            .collect();
        assert_eq!(ours[0].dst, Path::new(gpu::NV_DIR));
        assert_eq!(ours[0].source, MountSource::tmpfs(0o755));
        for m in &ours[1..] {
            match &m.source {
                MountSource::Bind { .. } => assert!(
                    m.readonly
                        && (m.dst.starts_with(gpu::HOST_DIR) || m.dst.starts_with(gpu::BIN_DIR)),
                    "{m:?}"
                ),
                MountSource::Symlink { target } => assert!(
                    m.dst.starts_with(gpu::LIB_DIR) && target.starts_with(gpu::HOST_DIR),
                    "{m:?}"
                ),
                _ => panic!("{m:?}"),
            }
        }
        assert_eq!(
            p.ld_library_path_append,
            vec![PathBuf::from("/.gpurun/nvidia/lib")]
        );
        assert_eq!(p.path_append, vec![PathBuf::from("/.gpurun/nvidia/bin")]);
        assert!(b.contains(&(
            f.root.join("bin/nvidia-smi").display().to_string(),
            "/.gpurun/nvidia/bin/nvidia-smi".into()
        )));
        assert_eq!(p.driver_version, VERSION);
    }
    // a directory works as well as a cache; video and graphics on request
    let mut o = GpuOpts {
        driver: gpurun::gpu::DriverPaths {
            paths: vec![f.lib()],
        },
        ..Default::default()
    };
    o.nv_caps = vec!["video".into(), "graphics".into()];
    let d = dsts(&prepare(&f, o, &[], &[]).unwrap().unwrap());
    assert!(
        d.contains(&"/.gpurun/nvidia/lib/libnvcuvid.so.1".to_string()),
        "{d:#?}"
    );
    assert!(
        d.contains(&format!(
            "/.gpurun/nvidia/lib/libnvidia-glcore.so.{VERSION}"
        )),
        "{d:#?}"
    );
    assert!(
        d.contains(&"/.gpurun/nvidia/lib/libnvidia-nvvm.so.4".to_string()),
        "{d:#?}"
    );
    let d = dsts(
        &prepare(
            &f,
            opts(&f, "new"),
            &[("NVIDIA_DRIVER_CAPABILITIES", "all")],
            &[],
        )
        .unwrap()
        .unwrap(),
    );
    assert!(
        d.contains(&"/.gpurun/nvidia/lib/libnvcuvid.so.1".to_string()),
        "{d:#?}"
    );
}

#[test]
fn devices_and_cuda_visible_devices() {
    let Some(f) = fake_driver(12) else { return };
    let nodes = |p: &gpu::GpuPlan| -> Vec<String> {
        dsts(p)
            .into_iter()
            .filter(|d| d.starts_with("/dev/"))
            .collect()
    };
    // everything allowed by default, plus the control nodes; CUDA_VISIBLE_DEVICES left alone
    let p = prepare(&f, opts(&f, "new"), &[], &[]).unwrap().unwrap();
    let mut want: Vec<String> = (0..12).map(|i| format!("/dev/nvidia{i}")).collect();
    want.extend(["/dev/nvidiactl".to_string(), "/dev/nvidia-uvm".to_string()]);
    assert_eq!(nodes(&p), want);
    assert_eq!(get(&p, "CUDA_VISIBLE_DEVICES"), None);
    assert!(binds(&p).contains(&(
        f.dev().join("nvidia11").display().to_string(),
        "/dev/nvidia11".into()
    )));
    // caller's order kept, numeric sort with 10+ GPUs
    let p = prepare(
        &f,
        opts(&f, "new"),
        &[("CUDA_VISIBLE_DEVICES", "11,2,10")],
        &[],
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        nodes(&p),
        vec![
            "/dev/nvidia2",
            "/dev/nvidia10",
            "/dev/nvidia11",
            "/dev/nvidiactl",
            "/dev/nvidia-uvm"
        ]
    );
    assert_eq!(get(&p, "CUDA_VISIBLE_DEVICES"), Some("2,0,1"));
    // `all` named by the caller becomes an explicit list (CUDA itself does not know `all`)
    let p = prepare(&f, opts(&f, "new"), &[("CUDA_VISIBLE_DEVICES", "all")], &[])
        .unwrap()
        .unwrap();
    assert_eq!(
        get(&p, "CUDA_VISIBLE_DEVICES"),
        Some("0,1,2,3,4,5,6,7,8,9,10,11")
    );
    // --gpus wins; none keeps the driver but no GPU
    let mut o = opts(&f, "new");
    o.gpus = Some("none".into());
    let p = prepare(&f, o, &[("CUDA_VISIBLE_DEVICES", "1")], &[])
        .unwrap()
        .unwrap();
    assert_eq!(nodes(&p), vec!["/dev/nvidiactl", "/dev/nvidia-uvm"]);
    assert_eq!(get(&p, "CUDA_VISIBLE_DEVICES"), Some(""));
    // empty CUDA_VISIBLE_DEVICES = no GPU; void = no GPU support at all
    let p = prepare(&f, opts(&f, "new"), &[("CUDA_VISIBLE_DEVICES", "")], &[])
        .unwrap()
        .unwrap();
    assert!(p.devices.is_empty());
    assert!(prepare(
        &f,
        opts(&f, "new"),
        &[("NVIDIA_VISIBLE_DEVICES", "void")],
        &[]
    )
    .unwrap()
    .is_none());
    // Slurm without CUDA_VISIBLE_DEVICES: positions
    let p = prepare(&f, opts(&f, "new"), &[("SLURM_STEP_GPUS", "3")], &[])
        .unwrap()
        .unwrap();
    assert_eq!(
        p.devices.iter().map(|d| d.minor).collect::<Vec<_>>(),
        vec![3]
    );
    // a GPU that does not exist: error names it and lists what is allowed
    let e = prepare(&f, opts(&f, "new"), &[("CUDA_VISIBLE_DEVICES", "12")], &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"12\"")
            && e.contains("CUDA_VISIBLE_DEVICES")
            && e.contains("11 (/dev/nvidia11)"),
        "{e}"
    );
    // --no-nv and GPURUN_NV=0 turn it off
    let mut o = opts(&f, "new");
    o.no_nv = true;
    assert!(prepare(&f, o, &[], &[]).unwrap().is_none());
    assert!(prepare(&f, opts(&f, "new"), &[("GPURUN_NV", "0")], &[])
        .unwrap()
        .is_none());
}

#[test]
fn require_against_the_fake_driver() {
    let Some(f) = fake_driver(1) else { return };
    let o = || opts(&f, "new");
    assert!(
        prepare(&f, o(), &[], &[("NVIDIA_REQUIRE_DRIVER", "driver>=550")])
            .unwrap()
            .is_some()
    );
    let e = prepare(&f, o(), &[], &[("NVIDIA_REQUIRE_DRIVER", "driver>=560")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("driver {VERSION}")) && e.contains("NVIDIA_DISABLE_REQUIRE"),
        "{e}"
    );
    // alternatives: one holds
    assert!(prepare(
        &f,
        o(),
        &[],
        &[(
            "NVIDIA_REQUIRE_CUDA",
            "brand=tesla,driver>=560 driver>=550,driver<551"
        )]
    )
    .unwrap()
    .is_some());
    // disabled from the image or the caller
    assert!(prepare(
        &f,
        o(),
        &[],
        &[
            ("NVIDIA_REQUIRE_DRIVER", "driver>=560"),
            ("NVIDIA_DISABLE_REQUIRE", "1")
        ]
    )
    .unwrap()
    .is_some());
    assert!(prepare(
        &f,
        o(),
        &[("NVIDIA_DISABLE_REQUIRE", "true")],
        &[("NVIDIA_REQUIRE_DRIVER", "driver>=560")]
    )
    .unwrap()
    .is_some());
    let e = prepare(&f, o(), &[], &[("NVIDIA_REQUIRE_CUDA", "cuda>>12")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("invalid expression"), "{e}");
}

#[test]
fn compat_libraries_and_params() {
    let Some(f) = fake_driver(1) else { return };
    let list_newer = |d: &str| {
        (d == "/usr/local/cuda/compat").then(|| {
            vec![
                "libcuda.so.1".to_string(),
                "libcuda.so.575.57.08".to_string(),
            ]
        })
    };
    let list_older =
        |d: &str| (d == "/usr/local/cuda/compat").then(|| vec!["libcuda.so.535.1.1".to_string()]);
    let image = vec![("NVIDIA_REQUIRE_CUDA".to_string(), "cuda>=12.9".to_string())];
    let p = gpu::prepare(
        &f.kept_in(opts(&f, "new"), None),
        None,
        &f.env(&[]),
        &image,
        &list_newer,
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        p.ld_library_path_prepend,
        vec![PathBuf::from("/usr/local/cuda/compat")]
    );
    let p = gpu::prepare(
        &f.kept_in(opts(&f, "new"), None),
        None,
        &f.env(&[]),
        &[],
        &list_older,
    )
    .unwrap()
    .unwrap();
    assert!(p.ld_library_path_prepend.is_empty());
    // the params file is only replaced where the host has one (this machine has no driver)
    let has = p
        .mounts
        .iter()
        .any(|m| m.dst == Path::new("/proc/driver/nvidia/params"));
    assert_eq!(has, Path::new("/proc/driver/nvidia/params").exists());
}

#[test]
fn gpus_command_as_user() {
    let Some(f) = fake_driver(3) else { return };
    // nvidia1 is closed to the test user (as a device cgroup would do, EACCES here)
    std::fs::set_permissions(
        f.dev().join("nvidia1"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let mut c = common::gpurun(&["gpus", "--json", "--nv-driver-path"]);
    c.arg(f.cache("new"));
    for (k, v) in f.env(&[]) {
        if k != "PATH" {
            c.env(k, v);
        }
    }
    let o = common::run_ok(&mut c);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["driver_version"], VERSION);
    let minors: Vec<u64> = j["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["minor"].as_u64().unwrap())
        .collect();
    assert_eq!(minors, vec![0, 2]);
    assert_eq!(j["gpus"][1]["index"], 1);
    assert_eq!(j["denied"][0], "/dev/nvidia1");
    // NVML (the fake one) names nvidia0; nvidia2 is unknown to it
    assert!(j["nvml_error"].is_null(), "{j}");
    assert_eq!(j["cuda_version"], "12.4");
    assert_eq!(
        j["gpus"][0]["nvml"]["uuid"],
        "GPU-fa4e1111-1111-1111-1111-111111111111"
    );
    assert_eq!(j["gpus"][0]["nvml"]["name"], "Fake H200");
    assert_eq!(j["gpus"][0]["nvml"]["index"], 1);
    assert!(j["gpus"][1]["nvml"].is_null(), "{j}");
    // text form, and device nodes without a driver: no GPU a container could get, exit 1
    let o = common::gpurun(&["gpus"])
        .env("GPURUN_NV_PROC", "/nonexistent")
        .env("GPURUN_NV_DEV", f.dev())
        .output()
        .unwrap();
    let s = common::stdout(&o);
    assert!(
        s.contains("no NVIDIA driver on this node")
            && s.contains("/dev/nvidia0, /dev/nvidia2 exist, but without a driver")
            && s.contains("no GPU this process may use")
            && !s.contains("GPU 0:"),
        "{s}"
    );
    assert_eq!(o.status.code(), Some(1), "{s}");
}

/// A busybox image with this Env, and stale driver files where gpurun puts the host's (as an
/// image made from a running container's files could have): the host's must be what shows.
fn image(s: &common::Scratch, env: &[&str]) -> PathBuf {
    let meta = serde_json::json!({ "env": env }).to_string();
    common::busybox_image(s, "img", |root| {
        std::fs::create_dir_all(root.join(".gpurun/nvidia/lib")).unwrap();
        std::fs::create_dir_all(root.join(".gpurun/nvidia/bin")).unwrap();
        std::fs::write(root.join(".gpurun/meta.json"), meta).unwrap();
        std::fs::write(root.join(".gpurun/nvidia/lib/libcuda.so.1"), "stale").unwrap();
        std::os::unix::fs::symlink(
            "/nowhere",
            root.join(".gpurun/nvidia/lib/libnvidia-ml.so.1"),
        )
        .unwrap();
        std::fs::write(
            root.join(".gpurun/nvidia/bin/nvidia-smi"),
            "#!/bin/sh\necho stale nvidia-smi\n",
        )
        .unwrap();
    })
}

/// `gpurun ARGS` as the test user, pointed at the fake driver.
fn gpurun_nv(f: &FakeDriver, host: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut c = common::gpurun(args);
    c.current_dir("/");
    for (k, v) in f.env(host) {
        c.env(k, v);
    }
    c.env("GPURUN_NV_DRIVER_PATH", f.cache("new"));
    c.output().unwrap()
}

const INSIDE: &str =
    "ls /dev | grep -i nvidia | tr '\\n' ' '; echo; echo CVD=$CUDA_VISIBLE_DEVICES; \
     echo LD=$LD_LIBRARY_PATH; ls /.gpurun/nvidia/lib | tr '\\n' ' '; echo; \
     head -c 4 /.gpurun/nvidia/lib/libcuda.so.1 | tail -c 3; \
     head -c 4 /.gpurun/nvidia/lib/libnvidia-ml.so.1 | tail -c 3; echo; nvidia-smi";

/// Under a real terminal (script's pty), where GPU nodes make /dev gpurun's own tmpfs with a
/// devpts of the container's own, the caller's terminal is still there by its device: `tty`
/// names it (/dev/console, where Apptainer binds it) and a shell can read from it.
#[test]
fn callers_terminal_beside_the_gpus() {
    let Some(f) = fake_driver(1) else { return };
    let s = common::Scratch::new();
    let img = image(&s, &["PATH=/bin"]);
    let inside = "tty; test -c /dev/pts/ptmx && echo own devpts; ls /dev | grep -c nvidia0";
    let cmd = format!(
        "{} exec {} sh -c '{inside}'",
        common::gpurun_bin().display(),
        img.display()
    );
    let mut c = common::as_user("script");
    c.args(["-qec", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::null());
    for (k, v) in f.env(&[]) {
        c.env(k, v);
    }
    c.env("GPURUN_NV_DRIVER_PATH", f.cache("new"));
    let o = c.output().unwrap();
    let out = common::stdout(&o).replace('\r', "");
    assert!(o.status.success(), "{out}\n{}", common::stderr(&o));
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["/dev/console", "own devpts", "1"],
        "{out}"
    );
}

#[test]
fn exec_sees_exactly_the_chosen_gpus() {
    let Some(f) = fake_driver(4) else { return };
    let s = common::Scratch::new();
    let img = image(&s, &["PATH=/bin:/usr/bin"]);
    let img = img.to_str().unwrap();
    let o = gpurun_nv(
        &f,
        &[("CUDA_VISIBLE_DEVICES", "3,1")],
        &["exec", img, "sh", "-c", INSIDE],
    );
    let out = common::stdout(&o);
    assert!(o.status.success(), "{out}\n{}", common::stderr(&o));
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("nvidia-uvm nvidia1 nvidia3 nvidiactl "),
        "{out}"
    );
    assert_eq!(lines.next(), Some("CVD=1,0"), "{out}");
    assert_eq!(lines.next(), Some("LD=/.gpurun/nvidia/lib"), "{out}");
    let libs = lines.next().unwrap();
    for l in [
        "libcuda.so.1",
        "libnvidia-ml.so.1",
        "libnvidia-nvvm.so.4",
        "libnvidia-ptxjitcompiler.so.1",
    ] {
        assert!(libs.contains(l), "{l} not in {libs}");
    }
    assert!(
        !libs.contains("nvcuvid") && !libs.contains("oldthing"),
        "{libs}"
    );
    assert_eq!(
        lines.next(),
        Some("ELFELF"),
        "libcuda and libnvidia-ml through their links, not the image's stale files: {out}"
    );
    assert_eq!(lines.next(), Some("fake nvidia-smi"), "{out}");

    // all of them by default, in numeric order; none with --no-nv or CUDA_VISIBLE_DEVICES=""
    let o = gpurun_nv(
        &f,
        &[],
        &[
            "exec",
            img,
            "sh",
            "-c",
            "ls /dev | grep nvidia | tr '\\n' ' '",
        ],
    );
    assert_eq!(
        common::stdout(&o),
        "nvidia-uvm nvidia0 nvidia1 nvidia2 nvidia3 nvidiactl "
    );
    let o = gpurun_nv(
        &f,
        &[("CUDA_VISIBLE_DEVICES", "")],
        &[
            "exec",
            img,
            "sh",
            "-c",
            "ls /dev | grep nvidia | tr '\\n' ' '",
        ],
    );
    assert_eq!(common::stdout(&o), "nvidia-uvm nvidiactl ");
    let o = gpurun_nv(
        &f,
        &[],
        &[
            "exec",
            "--no-nv",
            img,
            "sh",
            "-c",
            "ls /dev | grep -c nvidia; ls /.gpurun/nvidia 2>&1 | head -1",
        ],
    );
    assert!(
        common::stdout(&o).starts_with("0\n"),
        "{}",
        common::stdout(&o)
    );

    // a GPU that is not there: error, names it and what is allowed
    let o = gpurun_nv(&f, &[("CUDA_VISIBLE_DEVICES", "7")], &["exec", img, "true"]);
    assert_eq!(o.status.code(), Some(125));
    let e = common::stderr(&o);
    assert!(
        e.contains("\"7\"")
            && e.contains("1 (/dev/nvidia1, GPU-fa4e0000-0000-0000-0000-000000000000), 2 (/dev/nvidia2), 3 (/dev/nvidia3)"),
        "{e}"
    );

    // --dry-run shows the GPU part of the plan
    let o = gpurun_nv(&f, &[], &["exec", "--dry-run", "--gpus", "2", img, "true"]);
    let plan = common::stdout(&o);
    assert!(
        plan.contains("\"/dev/nvidia2\"") && !plan.contains("\"/dev/nvidia1\""),
        "{plan}"
    );
    assert!(plan.contains("/.gpurun/nvidia/lib/libcuda.so.1"), "{plan}");
}

#[test]
fn exec_checks_the_image_requirements() {
    let Some(f) = fake_driver(1) else { return };
    let s = common::Scratch::new();
    let img = image(
        &s,
        &[
            "PATH=/bin",
            "NVIDIA_REQUIRE_CUDA=driver>=560 brand=tesla,driver>=999",
        ],
    );
    let img = img.to_str().unwrap();
    let o = gpurun_nv(&f, &[], &["exec", img, "true"]);
    assert_eq!(o.status.code(), Some(125));
    let e = common::stderr(&o);
    assert!(
        e.contains(&format!("driver {VERSION}")) && e.contains("driver>=560"),
        "{e}"
    );
    let o = gpurun_nv(
        &f,
        &[("NVIDIA_DISABLE_REQUIRE", "1")],
        &["exec", img, "true"],
    );
    assert!(o.status.success(), "{}", common::stderr(&o));
    // no GPU support, no check
    let o = gpurun_nv(&f, &[], &["exec", "--no-nv", img, "true"]);
    assert!(o.status.success(), "{}", common::stderr(&o));
}

/// Opens a terminal pair as python's pty, script and tmux do, and passes a line through it.
const PTY_C: &str = r#"
#define _XOPEN_SOURCE 600
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(void) {
  int m = posix_openpt(O_RDWR | O_NOCTTY);
  if (m < 0) { perror("posix_openpt"); return 1; }
  if (grantpt(m) || unlockpt(m)) { perror("grantpt"); return 1; }
  char *name = ptsname(m);
  int s = name ? open(name, O_RDWR | O_NOCTTY) : -1;
  if (s < 0) { perror("open the other end"); return 1; }
  if (write(m, "ping\n", 5) != 5) { perror("write"); return 1; }
  char b[16] = {0};
  if (read(s, b, sizeof b - 1) <= 0) { perror("read"); return 1; }
  printf("%s %s", name, b);
  return 0;
}
"#;

/// Where /dev is gpurun's own (the host's entries bound one by one beside the GPUs'), the
/// container gets a devpts of its own with /dev/ptmx pointing into it: the host's /dev/ptmx,
/// bound alone, finds no devpts beside it and every pty open fails.
#[test]
fn a_terminal_opens_where_dev_is_gpuruns_own() {
    let Some(f) = fake_driver(1) else { return };
    let s = common::Scratch::new();
    let src = s.join("pty.c");
    std::fs::write(&src, PTY_C).unwrap();
    let bin = s.join("pty");
    sh(Command::new("cc")
        .args(["-static", "-o"])
        .arg(&bin)
        .arg(&src));
    let img = common::busybox_image(&s, "pty", |root| {
        std::fs::copy(&bin, root.join("bin/pty")).unwrap();
    });
    let img = img.to_str().unwrap();
    let script = "pty; readlink /dev/ptmx; grep ' /dev/pts ' /proc/self/mountinfo";
    let o = gpurun_nv(&f, &[], &["exec", img, "sh", "-c", script]);
    let out = common::stdout(&o);
    assert!(o.status.success(), "{out}\n{}", common::stderr(&o));
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("/dev/pts/0 ping"), "{out}");
    assert_eq!(lines.next(), Some("pts/ptmx"), "{out}");
    let pts = lines.next().unwrap_or_default();
    assert!(
        pts.contains(" - devpts ") && pts.contains("ptmxmode=666"),
        "a devpts of the container's own: {out}"
    );
    // with the host's whole /dev, its own ptmx and devpts serve
    let o = gpurun_nv(&f, &[], &["exec", "--no-nv", img, "pty"]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert!(
        common::stdout(&o).ends_with(" ping\n"),
        "{}",
        common::stdout(&o)
    );
}

/// An explicit request for GPUs (--nv, GPURUN_NV=1, --gpus LIST) on a node without a driver is an
/// error: one line, exit 125, nothing run. Without one, the command runs without GPUs.
#[test]
fn explicit_gpus_without_a_driver_are_an_error() {
    let s = common::Scratch::new();
    let img = image(&s, &["PATH=/bin"]);
    let nodev = s.join("nodev");
    std::fs::create_dir(&nodev).unwrap();
    let run = |flags: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["exec"];
        args.extend_from_slice(flags);
        args.extend([img.to_str().unwrap(), "sh", "-c", "echo ran"]);
        let mut c = common::gpurun(&args);
        c.current_dir("/")
            .env("GPURUN_NV_PROC", "/nonexistent")
            .env("GPURUN_NV_DEV", &nodev)
            .envs(env.iter().copied());
        c.output().unwrap()
    };
    for (flags, env, asked) in [
        (&["--nv"][..], &[][..], "--nv"),
        (&[], &[("GPURUN_NV", "1")], "GPURUN_NV=1"),
        (&["--gpus", "1,2"], &[], "--gpus 1,2"),
        (&["--gpus=all"], &[], "--gpus all"),
        (&[], &[("GPURUN_GPUS", "0")], "--gpus 0"),
    ] {
        let o = run(flags, env);
        let e = common::stderr(&o);
        assert_eq!(o.status.code(), Some(125), "{flags:?} {env:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(
            e.starts_with(&format!(
                "gpurun: {asked} asks for GPUs, but this node has no NVIDIA driver"
            )),
            "{e}"
        );
        assert!(common::stdout(&o).is_empty());
    }
    for (flags, env) in [
        (&[][..], &[][..]),
        (&["--gpus", "none"], &[]),
        (&["--no-nv", "--gpus", "1"], &[]),
        (&[], &[("GPURUN_NV", "0")]),
    ] {
        let o = run(flags, env);
        assert!(
            o.status.success(),
            "{flags:?} {env:?}: {}",
            common::stderr(&o)
        );
        assert_eq!(common::stdout(&o), "ran\n");
        assert!(common::stderr(&o).is_empty(), "{}", common::stderr(&o));
    }
}

/// Is a Slurm cluster with the fake GPUs of recipes/slurm up (gres gpu on /dev/nvidia0..)?
fn slurm_with_gpus() -> bool {
    let up = Command::new("timeout")
        .args(["5", "sinfo", "-h", "-o", "%G"])
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("gpu"));
    up && Path::new("/dev/nvidia0").exists() && Path::new("/dev/nvidia1").exists()
}

/// Under Slurm with ConstrainDevices the step may open only its own GPUs (EPERM for the others):
/// a 1-GPU step beside a running 2-GPU job gets another GPU than nvidia0, and CUDA_VISIBLE_DEVICES
/// is 0 all the same. The container must show exactly the nodes the step can open.
#[test]
fn slurm_step_sees_exactly_its_gpus() {
    if !common::is_root() || !slurm_with_gpus() {
        common::skip(
            "needs root, a running Slurm with gres gpu and /dev/nvidia0-1 (recipes/slurm)",
        );
        return;
    }
    let Some(f) = fake_driver(0) else { return };
    let s = common::Scratch::new();
    let img = image(&s, &["PATH=/bin"]);
    let bin = s.join("gpurun");
    std::fs::copy(common::gpurun_bin(), &bin).unwrap();
    s.chown_all();
    // job A holds two GPUs while the step below runs
    let mut a = common::as_user("srun")
        .args(["-t", "1", "--gres=gpu:2", "sleep", "20"])
        .current_dir("/")
        .spawn()
        .unwrap();
    let running = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(200));
        Command::new("squeue")
            .args(["-h", "-t", "R", "-u", common::TEST_USER, "-o", "%b"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("gpu"))
    });
    let script = format!(
        "echo CVD=$CUDA_VISIBLE_DEVICES; {bin} gpus --json; {bin} exec {img} sh -c 'ls /dev | grep -E \"^nvidia[0-9]+$\" | tr \"\\n\" \" \"; echo; echo CVD=$CUDA_VISIBLE_DEVICES'",
        bin = bin.display(),
        img = img.display()
    );
    let mut b = common::as_user("srun");
    b.args(["-t", "1", "--gres=gpu:1", "sh", "-c", &script])
        .current_dir("/");
    for (k, v) in f.env(&[]) {
        if k != "GPURUN_NV_DEV" && k != "PATH" {
            b.env(k, v);
        }
    }
    b.env("GPURUN_NV_DRIVER_PATH", f.cache("new"));
    let o = b.output().unwrap();
    let _ = a.kill();
    let _ = a.wait();
    let out = common::stdout(&o);
    eprintln!("job A running: {running}\n{out}");
    assert!(o.status.success(), "{out}\n{}", common::stderr(&o));
    let json_start = out.find('{').unwrap();
    let json_end = out.rfind('}').unwrap();
    let j: serde_json::Value = serde_json::from_str(&out[json_start..=json_end]).unwrap();
    let allowed: Vec<String> = j["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| format!("nvidia{}", g["minor"]))
        .collect();
    let host_cvd = out
        .lines()
        .next()
        .unwrap()
        .trim_start_matches("CVD=")
        .to_string();
    let tail: Vec<&str> = out[json_end + 1..]
        .lines()
        .filter(|l| !l.is_empty())
        .collect();
    if j["denied"].as_array().unwrap().is_empty() {
        // Slurm without device confinement (cgroup plugin off): every GPU opens and
        // CUDA_VISIBLE_DEVICES holds node-wide indices, which are minors on this fake cluster.
        assert_eq!(
            tail,
            vec![format!("nvidia{host_cvd} ").as_str(), "CVD=0"],
            "{out}"
        );
        return;
    }
    // ConstrainDevices: the step opens one GPU and Slurm renumbers it to 0
    assert_eq!(allowed.len(), 1, "a 1-GPU step opens one GPU: {out}");
    assert_eq!(host_cvd, "0", "{out}");
    assert_eq!(
        tail,
        vec![format!("{} ", allowed[0]).as_str(), "CVD=0"],
        "{out}"
    );
    if running {
        assert_ne!(allowed[0], "nvidia0", "job A holds nvidia0: {out}");
    }
}

/// With NVML (the fake one: NVML index 0 is /dev/nvidia1), indices count in NVML's order, UUIDs
/// and unique UUID prefixes name GPUs, and NVIDIA_REQUIRE sees CUDA, brand and arch.
#[test]
fn nvml_names_and_orders_the_gpus() {
    let Some(f) = fake_driver(2) else { return };
    let o = || opts(&f, "new");
    let minors = |p: &gpu::GpuPlan| p.devices.iter().map(|d| d.minor).collect::<Vec<_>>();
    let p = prepare(&f, o(), &[("CUDA_VISIBLE_DEVICES", "0")], &[])
        .unwrap()
        .unwrap();
    assert_eq!(minors(&p), vec![1]);
    assert_eq!(get(&p, "CUDA_VISIBLE_DEVICES"), Some("0"));
    assert_eq!(p.cuda_version.as_deref(), Some("12.4"));
    assert_eq!(
        p.devices[0].uuid.as_deref(),
        Some("GPU-fa4e0000-0000-0000-0000-000000000000")
    );
    let p = prepare(&f, o(), &[("CUDA_VISIBLE_DEVICES", "1,0")], &[])
        .unwrap()
        .unwrap();
    assert_eq!(minors(&p), vec![1, 0]);
    assert_eq!(get(&p, "CUDA_VISIBLE_DEVICES"), Some("1,0"));
    let p = prepare(&f, o(), &[("NVIDIA_VISIBLE_DEVICES", "GPU-fa4e1111")], &[])
        .unwrap()
        .unwrap();
    assert_eq!(minors(&p), vec![0]);
    assert_eq!(
        get(&p, "CUDA_VISIBLE_DEVICES"),
        Some("GPU-fa4e1111-1111-1111-1111-111111111111")
    );
    let e = prepare(&f, o(), &[("CUDA_VISIBLE_DEVICES", "GPU-fa4e")], &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("several GPUs"), "{e}");
    // the image's requirements against CUDA 12.4, brand tesla, arch 9.0
    assert!(prepare(
        &f,
        o(),
        &[],
        &[(
            "NVIDIA_REQUIRE_CUDA",
            "cuda>=12.4 brand=tesla,driver>=550,driver<551"
        )]
    )
    .unwrap()
    .is_some());
    assert!(prepare(
        &f,
        o(),
        &[],
        &[
            ("NVIDIA_REQUIRE_ARCH", "arch>=9.0"),
            ("NVIDIA_REQUIRE_BRAND", "brand=tesla")
        ]
    )
    .unwrap()
    .is_some());
    let e = prepare(&f, o(), &[], &[("NVIDIA_REQUIRE_CUDA", "cuda>=12.8")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("CUDA >= 12.8") && e.contains("driver 550.54.14 supporting CUDA 12.4"),
        "{e}"
    );
    let e = prepare(&f, o(), &[], &[("NVIDIA_REQUIRE_ARCH", "arch>=10.0")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("arch 9.0"), "{e}");
    // a newer forward-compat libcuda in the image answers for CUDA
    let image = vec![("NVIDIA_REQUIRE_CUDA".to_string(), "cuda>=12.8".to_string())];
    let compat =
        |d: &str| (d == "/usr/local/cuda/compat").then(|| vec!["libcuda.so.570.86.10".to_string()]);
    let p = gpu::prepare(&f.kept_in(o(), None), None, &f.env(&[]), &image, &compat)
        .unwrap()
        .unwrap();
    assert_eq!(
        p.ld_library_path_prepend,
        vec![PathBuf::from("/usr/local/cuda/compat")]
    );
    // no /proc/driver/nvidia/version (some sandboxes): the version comes from NVML
    let p = prepare(&f, o(), &[("GPURUN_NV_PROC", "/nonexistent")], &[])
        .unwrap()
        .unwrap();
    assert_eq!(p.driver_version, VERSION);
    assert_eq!(minors(&p), vec![1, 0]);
}

/// A MIG device (fake NVML: GPU index 0 = /dev/nvidia1 has GPU instances 1 and 2): its GPU node
/// and the nvidia-caps nodes of its GPU and compute instance go in, named by its MIG UUID.
#[test]
fn mig_device_gets_its_caps() {
    let Some(f) = fake_driver(2) else { return };
    for (gi, cap) in [(1, 11), (2, 21)] {
        let d = f
            .proc_dir()
            .join(format!("capabilities/gpu1/mig/gi{gi}/ci0"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.parent().unwrap().join("access"),
            format!("DeviceFileMinor: {cap}\nDeviceFileMode: 292\n"),
        )
        .unwrap();
        std::fs::write(d.join("access"), format!("DeviceFileMinor: {}\n", cap + 1)).unwrap();
    }
    let caps = f.dev().join("nvidia-caps");
    std::fs::create_dir_all(&caps).unwrap();
    for m in [11, 12, 21, 22] {
        sh(Command::new("mknod")
            .arg(caps.join(format!("nvidia-cap{m}")))
            .args(["c", "241", &m.to_string()]));
    }
    let mig = "MIG-f00d0002-0000-0000-0000-000000000000";
    let p = prepare(&f, opts(&f, "new"), &[("CUDA_VISIBLE_DEVICES", mig)], &[])
        .unwrap()
        .unwrap();
    let nodes: Vec<String> = dsts(&p)
        .into_iter()
        .filter(|d| d.starts_with("/dev/"))
        .collect();
    assert_eq!(
        nodes,
        vec![
            "/dev/nvidia1",
            "/dev/nvidia-caps/nvidia-cap21",
            "/dev/nvidia-caps/nvidia-cap22",
            "/dev/nvidiactl",
            "/dev/nvidia-uvm"
        ]
    );
    assert!(binds(&p).contains(&(
        caps.join("nvidia-cap21").display().to_string(),
        "/dev/nvidia-caps/nvidia-cap21".into()
    )));
    assert_eq!(get(&p, "CUDA_VISIBLE_DEVICES"), Some(mig));
    assert_eq!(p.devices[0].mig_uuid.as_deref(), Some(mig));
    // the old MIG-GPU-<uuid>/<gi>/<ci> form names the same device
    let old = "MIG-GPU-fa4e0000-0000-0000-0000-000000000000/1/0";
    let p = prepare(&f, opts(&f, "new"), &[("CUDA_VISIBLE_DEVICES", old)], &[])
        .unwrap()
        .unwrap();
    assert!(dsts(&p).contains(&"/dev/nvidia-caps/nvidia-cap12".to_string()));
    assert_eq!(
        get(&p, "CUDA_VISIBLE_DEVICES"),
        Some("MIG-f00d0001-0000-0000-0000-000000000000")
    );
    let e = prepare(
        &f,
        opts(&f, "new"),
        &[("CUDA_VISIBLE_DEVICES", "MIG-beef")],
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("MIG-beef"), "{e}");
}

/// Without a MIG device named or NVIDIA_REQUIRE_* rules, the GPUs' facts come from
/// /proc/driver/nvidia/gpus/*/information instead of NVML, whose loading costs ~40 ms a start on
/// a 2×H200 node. The fake /proc calls its GPUs "Proc H200", the fake NVML "Fake H200", so the
/// name says which one answered; both number the GPUs alike (NVML's order is PCI bus order).
#[test]
fn gpu_facts_from_proc_unless_nvml_is_needed() {
    let Some(f) = fake_driver(2) else { return };
    for (bus, minor, uuid) in [
        (
            "0000:02:00.0",
            1,
            "GPU-fa4e0000-0000-0000-0000-000000000000",
        ),
        (
            "0000:03:00.0",
            0,
            "GPU-fa4e1111-1111-1111-1111-111111111111",
        ),
    ] {
        let d = f.proc_dir().join("gpus").join(bus);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("information"),
            format!("Model: \t\t Proc H200\nGPU UUID: \t {uuid}\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n"),
        )
        .unwrap();
    }
    let o = || opts(&f, "new");
    let chosen = |p: &gpu::GpuPlan| {
        p.devices
            .iter()
            .map(|d| (d.minor, d.name.clone().unwrap_or_default()))
            .collect::<Vec<_>>()
    };
    // indices in NVML's (bus) order, UUIDs and bus ids: /proc answers
    let p = prepare(&f, o(), &[("CUDA_VISIBLE_DEVICES", "0")], &[])
        .unwrap()
        .unwrap();
    assert_eq!(chosen(&p), vec![(1, "Proc H200".to_string())]);
    assert_eq!(p.cuda_version, None);
    let p = prepare(&f, o(), &[("NVIDIA_VISIBLE_DEVICES", "GPU-fa4e1111")], &[])
        .unwrap()
        .unwrap();
    assert_eq!(chosen(&p), vec![(0, "Proc H200".to_string())]);
    let p = prepare(&f, o(), &[("CUDA_VISIBLE_DEVICES", "0000:03:00.0")], &[])
        .unwrap()
        .unwrap();
    assert_eq!(chosen(&p), vec![(0, "Proc H200".to_string())]);
    // what /proc says is kept for the boot (the driver makes it up at each read, ~0.18 ms a GPU):
    // an edited model shows the kept file answered; a GPU more or less asks /proc again
    let cache = tempfile::tempdir().unwrap();
    let at = cache.path().to_str().unwrap();
    let kept_proc = || {
        prepare(
            &f,
            o(),
            &[("GPURUN_CACHEDIR", at), ("CUDA_VISIBLE_DEVICES", "1")],
            &[],
        )
        .unwrap()
        .unwrap()
    };
    assert_eq!(chosen(&kept_proc()), vec![(0, "Proc H200".to_string())]);
    let files = files_in(&cache.path().join("gpu-proc"));
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    std::fs::write(&files[0], text.replace("Proc H200", "Kept H200")).unwrap();
    assert_eq!(chosen(&kept_proc()), vec![(0, "Kept H200".to_string())]);
    let third = f.proc_dir().join("gpus/0000:04:00.0");
    std::fs::create_dir_all(&third).unwrap();
    std::fs::write(
        third.join("information"),
        "Model: \t\t Proc H200\nGPU UUID: \t GPU-fa4e2222-2222-2222-2222-222222222222\nBus Location: \t 0000:04:00.0\nDevice Minor: \t 7\n",
    )
    .unwrap();
    assert_eq!(chosen(&kept_proc()), vec![(0, "Proc H200".to_string())]);
    std::fs::remove_dir_all(&third).unwrap();
    assert_eq!(chosen(&kept_proc()), vec![(0, "Kept H200".to_string())]);
    drop(cache);
    // the image's requirements need NVML's CUDA version, brand and arch, kept for the boot
    let cache = tempfile::tempdir().unwrap();
    let at = cache.path().to_str().unwrap();
    let require = |host: &[(&str, &str)], cuda: &str| {
        let mut h = vec![("GPURUN_CACHEDIR", at)];
        h.extend_from_slice(host);
        prepare(&f, o(), &h, &[("NVIDIA_REQUIRE_CUDA", cuda)])
    };
    // another boot's (or GPU set's) file is neither used nor touched
    let stale = cache
        .path()
        .join("nvml/an-earlier-boot-550.54.14-000000000000.json");
    std::fs::create_dir_all(stale.parent().unwrap()).unwrap();
    std::fs::write(&stale, "{}").unwrap();
    let p = require(&[("CUDA_VISIBLE_DEVICES", "0")], "cuda>=12.4 brand=tesla")
        .unwrap()
        .unwrap();
    assert_eq!(chosen(&p), vec![(1, "Fake H200".to_string())]);
    assert_eq!(p.cuda_version.as_deref(), Some("12.4"));
    assert_eq!(std::fs::read_to_string(&stale).unwrap(), "{}");
    let kept: Vec<_> = files_in(&cache.path().join("nvml"))
        .into_iter()
        .filter(|p| *p != stale)
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let text = std::fs::read_to_string(&kept[0]).unwrap();
    assert!(text.contains("\"12.4\""), "{text}");
    // the next start takes the kept answers: an edited CUDA version shows they were used
    std::fs::write(&kept[0], text.replace("\"12.4\"", "\"99.9\"")).unwrap();
    let p = require(&[], "cuda>=50").unwrap().unwrap();
    assert_eq!(p.cuda_version.as_deref(), Some("99.9"));
    // a damaged file is asked anew and rewritten
    std::fs::write(&kept[0], "{not json").unwrap();
    let p = require(&[], "cuda>=12.4").unwrap().unwrap();
    assert_eq!(p.cuda_version.as_deref(), Some("12.4"));
    assert!(std::fs::read_to_string(&kept[0])
        .unwrap()
        .contains("\"12.4\""));
    // ... unless the check is off
    let p = prepare(
        &f,
        o(),
        &[("NVIDIA_DISABLE_REQUIRE", "1")],
        &[("NVIDIA_REQUIRE_CUDA", "cuda>=99.0")],
    )
    .unwrap()
    .unwrap();
    assert_eq!(p.devices[0].name.as_deref(), Some("Proc H200"));
    // a MIG device is known to NVML only
    let mig = "MIG-f00d0002-0000-0000-0000-000000000000";
    let p = prepare(&f, o(), &[("CUDA_VISIBLE_DEVICES", mig)], &[])
        .unwrap()
        .unwrap();
    assert_eq!(chosen(&p), vec![(1, "Fake H200".to_string())]);
    assert_eq!(p.devices[0].mig_uuid.as_deref(), Some(mig));
}

/// The driver's libraries are kept in the cache while their sources are as they were: an emptied
/// kept list answers (no libraries: the clear error), and an ld.so.cache replaced as ldconfig
/// does (a new file renamed over it) is read anew.
#[test]
fn driver_libraries_are_kept_until_their_sources_change() {
    let Some(f) = fake_driver(1) else { return };
    let cache = tempfile::tempdir().unwrap();
    let at = cache.path().to_str().unwrap();
    let run = || prepare(&f, opts(&f, "new"), &[("GPURUN_CACHEDIR", at)], &[]);
    let mounts = run().unwrap().unwrap().mounts.len();
    let kept = files_in(&cache.path().join("driver-libs"));
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(run().unwrap().unwrap().mounts.len(), mounts);
    std::fs::write(&kept[0], "[]").unwrap();
    let e = run().unwrap_err().to_string();
    assert!(e.contains("none of its libraries"), "{e}");
    let ldcache = f.cache("new");
    let fresh = ldcache.with_extension("tmp");
    std::fs::copy(&ldcache, &fresh).unwrap();
    std::fs::rename(&fresh, &ldcache).unwrap();
    assert_eq!(run().unwrap().unwrap().mounts.len(), mounts);
}

/// A CDI spec directory for the fake driver, as `nvidia-ctk cdi generate` would write it (YAML;
/// the nodes by hostPath, since the fake ones are not in /dev), and another vendor's spec in
/// JSON with a node of its own (a fake FPGA: the null device's numbers).
fn cdi_specs(f: &FakeDriver) -> PathBuf {
    let dir = f.root.join("cdi");
    std::fs::create_dir_all(&dir).unwrap();
    let dev = f.dev().display().to_string();
    let node = |n: &str| format!("{{path: /dev/{n}, hostPath: {dev}/{n}}}");
    let nodes = |ns: &[&str]| ns.iter().map(|n| node(n)).collect::<Vec<_>>().join(", ");
    let yaml = format!(
        "---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n\
         - name: \"0\"\n  containerEdits:\n    deviceNodes: [{}]\n\
         - name: \"1\"\n  containerEdits:\n    deviceNodes: [{}]\n    env: [CDI_DEVICE=1]\n\
         - name: GPU-fa4e0000-0000-0000-0000-000000000000\n  containerEdits:\n    deviceNodes: [{}]\n\
         - name: \"3\"\n  containerEdits:\n    deviceNodes: [{}]\n\
         - name: all\n  containerEdits:\n    deviceNodes: [{}]\n\
         containerEdits:\n  env:\n  - NVIDIA_VISIBLE_DEVICES=void\n  deviceNodes: [{}]\n\
         \x20 hooks:\n  - hookName: createContainer\n    path: /usr/bin/nvidia-cdi-hook\n    \
         args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]\n  \
         mounts:\n  - hostPath: {lib}/libcuda.so.{VERSION}\n    \
         containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.{VERSION}\n    \
         options: [ro, nosuid, nodev, bind]\n",
        nodes(&["nvidia0"]),
        nodes(&["nvidia1"]),
        nodes(&["nvidia1"]),
        nodes(&["nvidia3"]),
        nodes(&["nvidia0", "nvidia1", "nvidia2", "nvidia3"]),
        nodes(&["nvidiactl", "nvidia-uvm"]),
        lib = f.lib().display(),
    );
    std::fs::write(dir.join("nvidia.yaml"), yaml).unwrap();
    sh(Command::new("mknod")
        .args(["-m", "0666"])
        .arg(f.dev().join("fpga0"))
        .args(["c", "1", "3"]));
    let json = serde_json::json!({
        "cdiVersion": "0.6.0",
        "kind": "example.com/fpga",
        "annotations": {"made-by": "gpurun tests"},
        "devices": [{"name": "a", "containerEdits": {
            "deviceNodes": [{"path": "/dev/fpga0", "hostPath": format!("{dev}/fpga0")}],
            "mounts": [{"hostPath": f.root.join("bin"), "containerPath": "/opt/fpga/bin",
                        "options": ["ro", "rbind"]}],
            "env": ["FPGA=a"]}}]
    });
    std::fs::write(dir.join("fpga.json"), json.to_string()).unwrap();
    dir
}

/// `gpurun exec` of `script` as the test user with the fake driver, the specs in `dirs`, and
/// CUDA_VISIBLE_DEVICES=3 from the environment (which an explicit --device overrides).
fn cdi_exec(f: &FakeDriver, dirs: &str, args: &[&str], script: &str) -> std::process::Output {
    let s = common::Scratch::new();
    let img = image(&s, &["PATH=/bin"]);
    let img = img.to_str().unwrap();
    let mut all = vec!["exec"];
    all.extend(args);
    all.extend([img, "sh", "-c", script]);
    let host = [
        ("GPURUN_CDI_SPEC_DIRS", dirs),
        ("CUDA_VISIBLE_DEVICES", "3"),
        ("NVIDIA_VISIBLE_DEVICES", "3"),
    ];
    gpurun_nv(f, &host, &all)
}

const CDI_INSIDE: &str = "ls /dev | grep -E 'nvidia|fpga' | tr '\\n' ' '; echo; \
    echo CVD=${CUDA_VISIBLE_DEVICES-unset} NVD=$NVIDIA_VISIBLE_DEVICES CDI=$CDI_DEVICE FPGA=$FPGA; \
    test -c /dev/nvidia1 && test -c /dev/fpga0 && echo nodes; \
    lib=/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14; head -c 4 $lib | tail -c 3; echo; \
    touch $lib 2>/dev/null || echo read-only; ls /opt/fpga/bin; \
    ls /.gpurun/nvidia/lib | grep -x libcuda.so.1";

/// `--device` picks devices from the site's CDI specs as podman does: exactly their nodes,
/// mounts and environment appear in the container (run as the test user), over the
/// environment's CUDA_VISIBLE_DEVICES; the spec's hook is reported once and skipped; gpurun
/// still provides the driver's libraries. Without --device, gpurun's own choice stays.
#[test]
fn cdi_devices_in_a_container() {
    let Some(f) = fake_driver(4) else { return };
    let dir = cdi_specs(&f);
    let dirs = format!("/nonexistent:{}", dir.display());
    let dev = [
        "--device",
        "nvidia.com/gpu=1",
        "--device",
        "example.com/fpga=a",
    ];
    let o = cdi_exec(&f, &dirs, &dev, CDI_INSIDE);
    let (out, err) = (common::stdout(&o), common::stderr(&o));
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "fpga0 nvidia-uvm nvidia1 nvidiactl ",
            "CVD=unset NVD=void CDI=1 FPGA=a",
            "nodes",
            "ELF",
            "read-only",
            "nvidia-smi",
            "libcuda.so.1",
        ],
        "{err}"
    );
    assert_eq!(
        err,
        "gpurun: CDI nvidia.com/gpu: createContainer hook /usr/bin/nvidia-cdi-hook update-ldcache \
         --folder /usr/lib/x86_64-linux-gnu skipped: a hook runs with an OCI runtime's privileges \
         on a writable root; gpurun runs none\n"
    );

    // --dry-run lists what the specs contributed; the GPU UUID names the same node as index 1
    let uuid = "nvidia.com/gpu=GPU-fa4e0000-0000-0000-0000-000000000000";
    let o = cdi_exec(&f, &dirs, &["--dry-run", "--device", uuid], "true");
    assert!(o.status.success(), "{}", common::stderr(&o));
    let plan: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(plan["cdi"]["devices"][0]["name"], uuid);
    assert_eq!(
        plan["cdi"]["devices"][0]["spec"],
        dir.join("nvidia.yaml").to_str().unwrap()
    );
    assert!(plan["cdi"]["skipped"][0]["edit"]
        .as_str()
        .unwrap()
        .contains("update-ldcache"));
    let nodes: Vec<(String, String)> = plan["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["dst"].as_str().unwrap().starts_with("/dev/nvidia"))
        .map(|m| {
            (
                m["src"].as_str().unwrap().into(),
                m["dst"].as_str().unwrap().into(),
            )
        })
        .collect();
    let from = |n: &str| (f.dev().join(n).display().to_string(), format!("/dev/{n}"));
    assert_eq!(
        nodes,
        [from("nvidiactl"), from("nvidia-uvm"), from("nvidia1")]
    );
    let lib = plan["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["dst"] == format!("/usr/lib/x86_64-linux-gnu/libcuda.so.{VERSION}"))
        .unwrap();
    assert_eq!(lib["readonly"], true);
    assert!(plan["env"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!(["NVIDIA_VISIBLE_DEVICES", "void"])));

    // no --device: gpurun's own discovery, narrowed by CUDA_VISIBLE_DEVICES
    let o = cdi_exec(
        &f,
        &dirs,
        &[],
        "ls /dev | grep nvidia | tr '\\n' ' '; echo $CUDA_VISIBLE_DEVICES",
    );
    assert_eq!(
        common::stdout(&o),
        "nvidia-uvm nvidia3 nvidiactl 0\n",
        "{}",
        common::stderr(&o)
    );

    // in the library: with CDI GPUs, GPU support brings the driver's files and no node
    let opts = GpuOpts {
        devices: vec!["nvidia.com/gpu=all".into()],
        cdi_spec_dirs: vec![dir.clone()],
        ..opts(&f, "new")
    };
    let cdi = gpu::cdi_devices(&opts).unwrap().unwrap();
    assert_eq!(cdi.nodes.len(), 6);
    let p = gpu::prepare(
        &f.kept_in(opts, None),
        Some(&cdi),
        &f.env(&[("CUDA_VISIBLE_DEVICES", "2")]),
        &[],
        &|_| None,
    )
    .unwrap()
    .unwrap();
    assert!(
        !dsts(&p).iter().any(|d| d.starts_with("/dev/")),
        "{:?}",
        dsts(&p)
    );
    assert!(dsts(&p).contains(&"/.gpurun/nvidia/lib/libcuda.so.1".to_string()));
    assert_eq!(get(&p, "CUDA_VISIBLE_DEVICES"), None);
    assert_eq!(p.selected_by, gpurun::gpu::devices::Source::Cdi);
}

/// Unknown devices, bad names, a bad spec, two specs of one directory defining a device, a node
/// the job may not open or that is gone, and --gpus with a CDI GPU: one line each, exit 125.
#[test]
fn cdi_errors_are_one_line() {
    let Some(f) = fake_driver(4) else { return };
    let dir = cdi_specs(&f).display().to_string();
    // another spec directory, after the fake driver's
    let extra = |name: &str, files: &[(&str, String)]| {
        let d = f.root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        for (file, text) in files {
            std::fs::write(d.join(file), text).unwrap();
        }
        format!("{dir}:{}", d.display())
    };
    let spec = |kind: &str, name: &str, node: &str, host: &str| {
        serde_json::json!({"cdiVersion": "0.5.0", "kind": kind, "devices": [{"name": name,
            "containerEdits": {"deviceNodes": [{"path": node, "hostPath": host}]}}]})
        .to_string()
    };
    let bad = extra(
        "bad",
        &[(
            "bad.json",
            spec("nvidia.com/gpu", "9", "dev/nvidia9", "/dev/null"),
        )],
    );
    let dup = extra(
        "dup",
        &[
            (
                "a.json",
                spec("nvidia.com/gpu", "x", "/dev/nvidia2", "/dev/null"),
            ),
            (
                "b.json",
                spec("nvidia.com/gpu", "x", "/dev/nvidia1", "/dev/null"),
            ),
        ],
    );
    let gone = extra(
        "gone",
        &[(
            "g.json",
            spec("example.com/gone", "x", "/dev/x", "/dev/no-such-node"),
        )],
    );
    std::fs::set_permissions(
        f.dev().join("nvidia3"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let bad_file = f.root.join("bad/bad.json").display().to_string();
    let both = format!(
        "CDI device nvidia.com/gpu=x is defined by both {root}/dup/a.json and {root}/dup/b.json; \
         remove one of them",
        root = f.root.display()
    );
    let cases: Vec<(&str, Vec<&str>, String)> = vec![
        (&dir, vec!["--device", "nvidia.com/gpu=7"], "CDI device nvidia.com/gpu=7 is not defined in".into()),
        (&dir, vec!["--device", "amd.com/gpu=0"], "CDI device amd.com/gpu=0: no spec in".into()),
        (&dir, vec!["--device", "gpu0"], "--device \"gpu0\" is not a CDI device name".into()),
        (&dir, vec!["--gpus", "0", "--device", "nvidia.com/gpu=1"], "--gpus 0 and --device nvidia.com/gpu=1 both choose GPUs".into()),
        (&dir, vec!["--device", "nvidia.com/gpu=3"], format!("CDI device nvidia.com/gpu=3: this job may not open {}/nvidia3", f.dev().display())),
        (&bad, vec!["--device", "nvidia.com/gpu=0"], format!("CDI spec {bad_file}: device \"9\": deviceNodes path \"dev/nvidia9\" is not an absolute path")),
        (&dup, vec!["--device", "nvidia.com/gpu=x"], both),
        (&gone, vec!["--device", "example.com/gone=x"], "CDI device example.com/gone=x: /dev/no-such-node does not exist on this host".into()),
    ];
    for (dirs, args, want) in cases {
        let o = cdi_exec(&f, dirs, &args, "echo ran");
        let e = common::stderr(&o);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {e}");
        assert!(e.starts_with(&format!("gpurun: {want}")), "{args:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert_eq!(common::stdout(&o), "");
    }
}

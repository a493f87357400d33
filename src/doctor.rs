//! `gpurun doctor`: can this node run containers? Each check is tried for real where it can be
//! (a forked child enters a user namespace and mounts an overlay and a FUSE file system there;
//! the GPU device nodes are opened) and says how to fix what fails.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::sys;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Works, but with a cost or a limit the user should know.
    Warn,
    /// gpurun cannot do this here.
    Fail,
    /// Not applicable on this node (no GPU, not in a Slurm job).
    Skip,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    /// What to do about it (empty when all is well).
    pub fix: String,
}

fn check(
    name: &'static str,
    status: Status,
    detail: impl Into<String>,
    fix: impl Into<String>,
) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
        fix: fix.into(),
    }
}

fn sysctl(name: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/sys/{}", name.replace('.', "/")))
        .ok()
        .map(|s| s.trim().to_string())
}

/// What the forked child found: user namespace, then an overlay with a tmpfs upper in it, and
/// a FUSE mount as an image server makes it.
#[derive(Debug, Default, Serialize, serde::Deserialize)]
struct NsProbe {
    userns: Option<String>,
    mountns: Option<String>,
    overlay: Option<String>,
    fuse: Option<String>,
}

fn probe_namespaces() -> NsProbe {
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let out = sys::in_child(|| {
        let mut p = NsProbe::default();
        let err = |e: sys::SysError| Some(e.to_string());
        let fin = |p: &NsProbe| serde_json::to_vec(p).unwrap_or_default();
        if let Err(e) = sys::enter_user_namespace(uid, gid) {
            p.userns = err(e);
            p.mountns = Some("not tried".into());
            p.overlay = Some("not tried".into());
            p.fuse = Some("no user namespace".into());
            return fin(&p);
        }
        if let Err(e) = sys::enter_mount_namespace(sys::Propagation::Private) {
            p.mountns = err(e);
            p.overlay = Some("not tried".into());
            p.fuse = Some("no mount namespace".into());
            return fin(&p);
        }
        // Scratch on a tmpfs of its own: nothing outside the child's namespace is touched.
        let base = Path::new("/tmp");
        let said = |r: Result<(), ProbeError>| r.err().map(|e| e.to_string());
        match sys::mount_tmpfs(base, 0o700, None, None, sys::Attrs::default()) {
            Ok(()) => {
                p.overlay = said(overlay_probe(base));
                p.fuse = said(fuse_probe(base, uid, gid));
            }
            Err(e) => {
                p.overlay = err(e);
                p.fuse = p.overlay.clone();
            }
        }
        fin(&p)
    });
    match out {
        Ok(b) => serde_json::from_slice(&b).unwrap_or(NsProbe {
            userns: Some("the probe process died".into()),
            ..Default::default()
        }),
        Err(e) => NsProbe {
            userns: Some(format!("cannot fork a probe: {e}")),
            ..Default::default()
        },
    }
}

/// Why a probe of the mounts failed, in the probe's child; it reaches the report as its
/// message (the child's answer crosses a pipe as JSON).
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error("mkdir {dir}: {source}")]
    Mkdir {
        dir: &'static str,
        source: std::io::Error,
    },
    #[error("open /dev/fuse: {0}")]
    OpenFuse(#[source] std::io::Error),
    #[error(transparent)]
    Mount(#[from] sys::SysError),
}

fn mkdir(base: &Path, dir: &'static str) -> Result<(), ProbeError> {
    std::fs::create_dir(base.join(dir)).map_err(|source| ProbeError::Mkdir { dir, source })
}

/// An overlay with a tmpfs upper, under `base`.
fn overlay_probe(base: &Path) -> Result<(), ProbeError> {
    for d in ["lower", "upper", "work", "merged"] {
        mkdir(base, d)?;
    }
    Ok(sys::mount_overlay(
        &base.join("lower"),
        &base.join("upper"),
        &base.join("work"),
        &base.join("merged"),
    )?)
}

/// /dev/fuse opened and mounted under `base` as an image server mounts it (no one serves it:
/// the mount ends with the probe's namespace, unused).
fn fuse_probe(base: &Path, uid: u32, gid: u32) -> Result<(), ProbeError> {
    mkdir(base, "fuse")?;
    let fd = sys::open_fuse().map_err(ProbeError::OpenFuse)?;
    let at = base.join("fuse");
    Ok(sys::mount_fuse(
        &fd,
        Path::new("gpurun-doctor"),
        &at,
        uid,
        gid,
    )?)
}

fn userns_checks(p: &NsProbe) -> Vec<Check> {
    let mut out = Vec::new();
    match &p.userns {
        None => out.push(check(
            "user namespaces",
            Status::Ok,
            "an unprivileged user namespace was created",
            "",
        )),
        Some(e) => {
            // Say which knob is responsible, when one is.
            let mut why = Vec::new();
            let mut fix = Vec::new();
            if sysctl("kernel.unprivileged_userns_clone").as_deref() == Some("0") {
                why.push("kernel.unprivileged_userns_clone = 0");
                fix.push("sysctl -w kernel.unprivileged_userns_clone=1 (and in /etc/sysctl.d/)");
            }
            if sysctl("user.max_user_namespaces").as_deref() == Some("0") {
                why.push("user.max_user_namespaces = 0");
                fix.push("sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d/)");
            }
            if sysctl("kernel.apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
                why.push("AppArmor restricts unprivileged user namespaces");
                fix.push("give gpurun an AppArmor profile with 'userns,' (/etc/apparmor.d/gpurun) or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0");
            }
            let detail = if why.is_empty() {
                format!("unshare(CLONE_NEWUSER) failed: {e}")
            } else {
                format!("unshare(CLONE_NEWUSER) failed: {e} ({})", why.join("; "))
            };
            let fix = if fix.is_empty() {
                "ask the administrators to allow unprivileged user namespaces (kernel ≥ 3.8 with CONFIG_USER_NS; on RHEL 7: user_namespace.enable=1 on the kernel command line)".to_string()
            } else {
                fix.join("; ")
            };
            out.push(check("user namespaces", Status::Fail, detail, fix));
        }
    }
    match (&p.userns, &p.mountns) {
        (None, None) => out.push(check(
            "mount namespaces",
            Status::Ok,
            "a mount namespace was created inside it",
            "",
        )),
        (None, Some(e)) => out.push(check(
            "mount namespaces",
            Status::Fail,
            format!("unshare(CLONE_NEWNS) in the user namespace failed: {e}"),
            "check user.max_mnt_namespaces (sysctl) and seccomp filters of the job launcher",
        )),
        _ => {}
    }
    match (&p.userns, &p.mountns, &p.overlay) {
        (None, None, None) => out.push(check(
            "overlay in user namespaces",
            Status::Ok,
            "an overlay was mounted in the user namespace (--writable-tmpfs works)",
            "",
        )),
        (None, None, Some(e)) => out.push(check(
            "overlay in user namespaces",
            Status::Warn,
            format!("mounting an overlay in the user namespace failed: {e}"),
            "--writable-tmpfs needs Linux ≥ 5.11 (unprivileged overlayfs); everything else works",
        )),
        _ => {}
    }
    out
}

fn fuse_check(p: &NsProbe) -> Check {
    const EXTRACTED: &str =
        "images are extracted once into the cache instead (slower first start, more disk)";
    if let Err(e) = sys::open_fuse() {
        return check(
            "/dev/fuse",
            Status::Warn,
            format!("cannot open /dev/fuse ({e}): {EXTRACTED}"),
            "modprobe fuse and make /dev/fuse mode 0666 (the distributions' default), or allow it in the job's device cgroup",
        );
    }
    match &p.fuse {
        None => check(
            "/dev/fuse",
            Status::Ok,
            "opened and mounted in a user namespace: images are served over FUSE",
            "",
        ),
        Some(e) => check(
            "/dev/fuse",
            Status::Warn,
            format!("/dev/fuse opens, but mounting FUSE in a user namespace failed ({e}): {EXTRACTED}"),
            "make /dev/fuse the FUSE device (character 10,229: modprobe fuse), and allow FUSE mounts in user namespaces (Linux ≥ 4.18; AppArmor, SELinux or seccomp policy)",
        ),
    }
}

fn gpu_checks(driver_paths: &[PathBuf]) -> Vec<Check> {
    let env = crate::env_vars::host_env();
    let l = match crate::gpu::list(driver_paths, &env) {
        Ok(l) => l,
        Err(e) => {
            return vec![check(
            "NVIDIA driver",
            Status::Fail,
            e.to_string(),
            "name the driver's libraries with --nv-driver-path or nv_driver_paths in the config",
        )]
        }
    };
    let mut out = Vec::new();
    let Some(v) = &l.driver_version else {
        return vec![check(
            "NVIDIA driver",
            Status::Skip,
            "no NVIDIA driver on this node (/proc/driver/nvidia/version is missing)",
            "",
        )];
    };
    let cuda = l
        .cuda_version
        .as_deref()
        .map(|c| format!(", CUDA {c}"))
        .unwrap_or_default();
    out.push(check(
        "NVIDIA driver",
        Status::Ok,
        format!("driver {v}{cuda}"),
        "",
    ));
    match &l.nvml_error {
        None => out.push(check("NVML", Status::Ok, "libnvidia-ml loaded", "")),
        Some(e) => out.push(check(
            "NVML",
            Status::Warn,
            e.clone(),
            "GPU names, UUIDs and MIG selection need libnvidia-ml.so.1: install the driver's utility libraries or pass --nv-driver-path",
        )),
    }
    let opened: Vec<String> = l
        .gpus
        .iter()
        .map(|g| g.path.display().to_string())
        .collect();
    let denied: Vec<String> = l.denied.iter().map(|p| p.display().to_string()).collect();
    if opened.is_empty() {
        out.push(check(
            "GPU devices",
            Status::Fail,
            format!(
                "no /dev/nvidiaN this process may open (denied: {})",
                denied.join(", ")
            ),
            "run inside a job that was given GPUs (srun --gpus=1 …, sbatch --gres=gpu:1)",
        ));
    } else {
        let extra = if denied.is_empty() {
            String::new()
        } else {
            format!("; not allowed (device cgroup): {}", denied.join(", "))
        };
        out.push(check(
            "GPU devices",
            Status::Ok,
            format!("may open {}{extra}", opened.join(", ")),
            "",
        ));
    }
    out
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

fn tools_check() -> Check {
    match on_path("tar2sqfs") {
        Some(p) => check("tar2sqfs", Status::Ok, format!("{} (gpurun pull writes images with it)", p.display()), ""),
        None => check(
            "tar2sqfs",
            Status::Warn,
            "tar2sqfs is not on PATH: gpurun pull cannot write images (running existing .sqsh files works)",
            "install squashfs-tools-ng (apt install squashfs-tools-ng / dnf install squashfs-tools-ng)",
        ),
    }
}

/// Free bytes and total bytes of the filesystem holding `p` (or its nearest existing parent).
fn space(p: &Path) -> Option<(PathBuf, u64, u64)> {
    let mut at = p.to_path_buf();
    while !at.exists() {
        at = at.parent()?.to_path_buf();
    }
    let s = nix::sys::statvfs::statvfs(&at).ok()?;
    let frag = s.fragment_size() as u64;
    Some((
        at,
        s.blocks_available() as u64 * frag,
        s.blocks() as u64 * frag,
    ))
}

/// Under this much free space the cache is a warning: one large CUDA image is 10-20 GB.
const LOW_SPACE: u64 = 20 << 30;

fn cache_check(root: &Path) -> Check {
    use crate::store::private_dir::{own_dir, Visibility};
    use crate::units::human_size;
    // One that is there already must be the caller's own and private (made by nobody else).
    if root.symlink_metadata().is_ok() {
        let fix = crate::store::cache_dir::CACHE_FIX;
        if let Err(e) = own_dir(root, Visibility::Private, fix) {
            let detail = format!("{}: {}", e.path.display(), e.problem);
            return check("cache", Status::Fail, detail, fix);
        }
    }
    let Some((at, free, total)) = space(root) else {
        return check(
            "cache",
            Status::Fail,
            format!("{}: no parent directory exists", root.display()),
            "set GPURUN_CACHEDIR or cache_dir to a writable directory",
        );
    };
    let writable = nix::unistd::access(&at, nix::unistd::AccessFlags::W_OK).is_ok();
    let detail = format!(
        "{} ({} free of {})",
        root.display(),
        human_size(free),
        human_size(total)
    );
    if !writable {
        return check(
            "cache",
            Status::Fail,
            format!("{detail}: {} is not writable", at.display()),
            "set GPURUN_CACHEDIR or cache_dir to a writable directory",
        );
    }
    if free < LOW_SPACE {
        return check(
            "cache",
            Status::Warn,
            format!("{detail}: little space for image pulls"),
            "gpurun cache gc --max-size 10G, or point GPURUN_CACHEDIR at a larger node-local disk",
        );
    }
    check("cache", Status::Ok, detail, "")
}

fn slurm_check(env: &[(String, String)]) -> Check {
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    match get("SLURM_JOB_ID") {
        None => {
            let srun = on_path("srun")
                .map(|p| format!("; srun at {}", p.display()))
                .unwrap_or_default();
            check(
                "Slurm",
                Status::Skip,
                format!("not inside a Slurm job{srun}"),
                "",
            )
        }
        Some(job) => {
            let step = get("SLURM_STEP_ID")
                .map(|s| format!(", step {s}"))
                .unwrap_or_default();
            let gpus = get("SLURM_STEP_GPUS")
                .or(get("SLURM_JOB_GPUS"))
                .map(|g| format!(", GPUs {g}"))
                .unwrap_or_default();
            let cvd = get("CUDA_VISIBLE_DEVICES")
                .map(|c| format!(", CUDA_VISIBLE_DEVICES={c}"))
                .unwrap_or_default();
            check(
                "Slurm",
                Status::Ok,
                format!("job {job}{step}{gpus}{cvd}"),
                "",
            )
        }
    }
}

/// The plugstack.conf file that loads gpurun's SPANK plugin, and how long ago it changed: the
/// site's slurm.conf's `PlugStackConfig` (else plugstack.conf beside it), and the files it
/// includes.
fn plugin_line() -> Option<(PathBuf, std::time::Duration)> {
    let conf = std::env::var_os("SLURM_CONF").map_or("/etc/slurm/slurm.conf".into(), PathBuf::from);
    let text = std::fs::read_to_string(&conf).unwrap_or_default();
    let stack = text
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            k.trim()
                .eq_ignore_ascii_case("PlugStackConfig")
                .then(|| PathBuf::from(v.trim()))
        })
        .unwrap_or_else(|| conf.with_file_name("plugstack.conf"));
    let mut todo = vec![stack];
    for _ in 0..64 {
        let file = todo.pop()?;
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let (loads, includes) = plugstack_entries(&text);
        if loads {
            let age = std::fs::metadata(&file)
                .ok()?
                .modified()
                .ok()?
                .elapsed()
                .ok()?;
            return Some((file, age));
        }
        todo.extend(includes.iter().flat_map(|g| glob_files(g)));
    }
    None
}

/// Whether a plugstack.conf text loads gpurun's plugin, and the patterns it includes.
fn plugstack_entries(text: &str) -> (bool, Vec<String>) {
    let mut includes = Vec::new();
    let mut loads = false;
    for l in text.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        let mut f = l.split_whitespace();
        match (f.next(), f.next()) {
            (Some("include"), Some(p)) => includes.push(p.to_string()),
            (Some("required" | "optional"), Some(so)) => {
                loads |= Path::new(so)
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().contains("gpurun"))
            }
            _ => {}
        }
    }
    (loads, includes)
}

/// The files a plugstack.conf `include` names: a path, or a directory's files matching one `*`.
fn glob_files(pattern: &str) -> Vec<PathBuf> {
    let p = Path::new(pattern);
    let (Some(dir), Some(name)) = (p.parent(), p.file_name().and_then(|n| n.to_str())) else {
        return Vec::new();
    };
    let Some((pre, post)) = name.split_once('*') else {
        return vec![p.to_path_buf()];
    };
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|f| {
            f.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(pre) && n.ends_with(post))
        })
        .collect();
    out.sort();
    out
}

/// slurmd reads plugstack.conf only when it starts: a gpurun line newer than slurmd means its
/// job epilog (which removes what jobs leave on the node) does not run.
fn slurmd_check(
    line: Option<(PathBuf, std::time::Duration)>,
    slurmd: Option<(i32, std::time::Duration)>,
) -> Check {
    const NAME: &str = "Slurm plugin";
    let Some((file, changed)) = line else {
        return check(
            NAME,
            Status::Skip,
            "plugstack.conf does not load gpurun's plugin",
            "",
        );
    };
    let Some((pid, running)) = slurmd else {
        return check(
            NAME,
            Status::Skip,
            format!("{} loads it; no slurmd on this node", file.display()),
            "",
        );
    };
    if changed < running {
        let detail = format!(
            "{} changed after slurmd (pid {pid}) started: slurmd has not loaded the plugin, so the job epilog does not remove named containers and image copies",
            file.display()
        );
        return check(
            NAME,
            Status::Warn,
            detail,
            "restart slurmd on this node (systemctl restart slurmd)",
        );
    }
    check(
        NAME,
        Status::Ok,
        format!(
            "{} loads it, and slurmd (pid {pid}) started after it changed",
            file.display()
        ),
        "",
    )
}

/// This node's slurmd and how long it has run.
fn slurmd_running() -> Option<(i32, std::time::Duration)> {
    let pid = std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == "slurmd").then_some(pid)
    })?;
    Some((pid, sys::since_boot().saturating_sub(sys::started(pid)?)))
}

/// Every check, in the order a user should fix them.
pub fn run(driver_paths: &[PathBuf], cache_root: &Path) -> Vec<Check> {
    let env = crate::env_vars::host_env();
    let probe = probe_namespaces();
    let mut out = userns_checks(&probe);
    out.push(fuse_check(&probe));
    out.extend(gpu_checks(driver_paths));
    out.push(tools_check());
    out.push(cache_check(cache_root));
    out.push(slurm_check(&env));
    out.push(slurmd_check(plugin_line(), slurmd_running()));
    out
}

/// All well: no check failed.
pub fn healthy(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.status != Status::Fail)
}

pub fn render(checks: &[Check]) -> String {
    let mut s = String::new();
    for c in checks {
        let mark = match c.status {
            Status::Ok => "ok  ",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skip => "--  ",
        };
        s.push_str(&format!("[{mark}] {:<28} {}\n", c.name, c.detail));
        if !c.fix.is_empty() {
            s.push_str(&format!("       {:<28} fix: {}\n", "", c.fix));
        }
    }
    s.push_str(if healthy(checks) {
        "This node can run gpurun containers.\n"
    } else {
        "This node cannot run gpurun containers yet: see FAIL above.\n"
    });
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe's step that fails keeps its errno; the report says what it said before.
    #[test]
    fn a_failed_step_keeps_its_errno() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("fuse")).unwrap();
        let e = mkdir(t.path(), "fuse").unwrap_err();
        assert_eq!(e.to_string(), "mkdir fuse: File exists (os error 17)");
        assert!(
            matches!(&e, ProbeError::Mkdir { dir: "fuse", source } if source.raw_os_error() == Some(libc::EEXIST)),
            "{e:?}"
        );
    }

    #[test]
    fn slurmd_and_its_plugin() {
        use std::time::Duration as D;
        let line = |age| {
            Some((
                PathBuf::from("/etc/slurm/plugstack.conf.d/gpurun.conf"),
                D::from_secs(age),
            ))
        };
        for (l, d, want) in [
            (None, Some((7, D::from_secs(10))), Status::Skip),
            (line(5), None, Status::Skip),
            (line(5), Some((7, D::from_secs(10))), Status::Warn),
            (line(50), Some((7, D::from_secs(10))), Status::Ok),
        ] {
            let c = slurmd_check(l.clone(), d);
            assert_eq!(c.status, want, "{c:?}");
            assert_eq!(
                c.fix.contains("restart slurmd"),
                want == Status::Warn,
                "{c:?}"
            );
        }
        let (loads, inc) = plugstack_entries(
            "# required /x/spank_gpurun.so\ninclude /etc/slurm/plugstack.conf.d/*.conf\noptional /usr/lib/spank_other.so\n",
        );
        assert!(!loads);
        assert_eq!(inc, ["/etc/slurm/plugstack.conf.d/*.conf"]);
        assert!(
            plugstack_entries("required /usr/lib/slurm/spank_gpurun.so gpurun=/usr/bin/gpurun").0
        );
    }

    #[test]
    fn slurm_environment() {
        let env = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        let c = slurm_check(&env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_STEP_GPUS", "2,3"),
        ]));
        assert_eq!(c.status, Status::Ok);
        assert_eq!(c.detail, "job 42, step 0, GPUs 2,3");
        assert_eq!(slurm_check(&[]).status, Status::Skip);
    }

    #[test]
    fn failed_namespace_names_the_knob() {
        let p = NsProbe {
            userns: Some("EPERM".into()),
            ..Default::default()
        };
        let c = userns_checks(&p);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].status, Status::Fail);
        assert!(c[0].detail.contains("EPERM") && !c[0].fix.is_empty());
        assert!(!healthy(&c));
        let ok = userns_checks(&NsProbe::default());
        assert_eq!(
            ok.iter().map(|c| c.status).collect::<Vec<_>>(),
            vec![Status::Ok; 3]
        );
    }
}

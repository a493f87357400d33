//! `gpurun ps`: this user's running containers and image servers on this node. Containers are
//! found from /proc (gpurun keeps no state files): a container is a `gpurun exec|run|shell|hold`
//! process (P) whose parent is not gpurun; its first gpurun child is the container's init (C),
//! whose root is the container's root: the GPUs bound are the /dev/nvidiaN nodes seen there.
//! Servers say themselves what they serve and to whom (runtime/image_server/attach.rs).

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cli::{split_target, Command};
use crate::store::processes::{own_processes, Proc};

#[derive(Debug, Clone, Serialize)]
pub struct GpuUse {
    pub device: PathBuf,
    pub minor: u32,
    pub uuid: Option<String>,
    /// GPU memory used by this container's processes (NVML).
    pub memory_used_bytes: Option<u64>,
    /// The GPU's utilisation, all users together (NVML reports it per GPU, not per process).
    pub utilization_percent: Option<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Container {
    pub pid: u32,
    /// The container's init, whose root is the container's (None while it is being set up).
    pub init_pid: Option<u32>,
    pub action: String,
    pub image: String,
    pub command: Vec<String>,
    /// Seconds since the epoch.
    pub started: u64,
    pub gpus: Vec<GpuUse>,
    /// The pid of the image server it is attached to, where it shares one.
    pub server: Option<u32>,
}

/// What `gpurun ps` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub containers: Vec<Container>,
    pub servers: Vec<crate::runtime::image_server::serve::Status>,
}

/// This user's containers and image servers on this node.
pub fn report(driver_paths: &[PathBuf]) -> Report {
    let servers = crate::runtime::image_server::attach::servers();
    let mut containers = containers(driver_paths);
    for c in &mut containers {
        c.server = (servers.iter())
            .find(|s| s.containers.contains(&c.pid))
            .map(|s| s.pid);
    }
    Report {
        containers,
        servers,
    }
}

fn boot_time() -> u64 {
    fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Image, action and command of a gpurun command line (None when it is not a launch).
fn launch_of(cmdline: &[String]) -> Option<(String, String, Vec<String>)> {
    let cli = crate::cli::parse_other(cmdline)?;
    let (action, shell, target) = match cli.command {
        Command::Exec(a) => ("exec", None, a.target),
        Command::Run(a) => ("run", None, a.image.target),
        Command::Shell(a) => ("shell", a.shell, a.image.target),
        // a named container without an image: its name, which says where the image is
        Command::Hold(a) => {
            let image = a.image.or(a.name.map(|n| format!("named:{n}")));
            return Some(("hold".into(), image.unwrap_or_default(), Vec::new()));
        }
        _ => return None,
    };
    let (image, args) = split_target(&target);
    Some((
        action.into(),
        image,
        shell.into_iter().chain(args).collect(),
    ))
}

/// Has process `pid` a root of its own (not the host's)?
fn in_own_root(pid: u32) -> bool {
    let id = |p: &Path| fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    match (
        id(Path::new(&format!("/proc/{pid}/root/"))),
        id(Path::new("/")),
    ) {
        (Some(a), Some(b)) => a != b,
        _ => false,
    }
}

/// The GPU minors a container's root shows under /dev.
fn gpu_minors(init: u32) -> Vec<u32> {
    let mut v = crate::gpu::devices::gpu_minors(&PathBuf::from(format!("/proc/{init}/root/dev")));
    v.sort();
    v
}

/// This user's containers on this node; NVML details when `driver_paths` lead to a driver.
pub fn containers(driver_paths: &[PathBuf]) -> Vec<Container> {
    let uid = nix::unistd::getuid().as_raw();
    let procs = own_processes(uid);
    let by_pid: HashMap<u32, &Proc> = procs.iter().map(|p| (p.pid, p)).collect();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for p in &procs {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let tick = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)
        .unwrap_or(100) as u64;
    let btime = boot_time();
    let mut out = Vec::new();
    for p in &procs {
        let parent_is_gpurun = by_pid.get(&p.ppid).is_some_and(|q| q.is_gpurun);
        if !p.is_gpurun || parent_is_gpurun {
            continue;
        }
        let Some((action, image, command)) = launch_of(&p.cmdline) else {
            continue;
        };
        // Until the init has switched to the container's root, its root is the host's (and so
        // would be its /dev): it counts only once it has.
        let init = children
            .get(&p.pid)
            .into_iter()
            .flatten()
            .find(|c| by_pid.get(c).is_some_and(|q| q.is_gpurun) && in_own_root(**c))
            .copied();
        let gpus = init
            .map(gpu_minors)
            .unwrap_or_default()
            .into_iter()
            .map(|minor| GpuUse {
                device: PathBuf::from(format!("/dev/nvidia{minor}")),
                minor,
                uuid: None,
                memory_used_bytes: None,
                utilization_percent: None,
            })
            .collect();
        out.push(Container {
            pid: p.pid,
            init_pid: init,
            action,
            image,
            command,
            started: btime + p.start_ticks / tick,
            gpus,
            server: None,
        });
    }
    if out.iter().any(|c| !c.gpus.is_empty()) {
        add_nvml(&mut out, driver_paths, &children);
    }
    out.sort_by_key(|c| c.pid);
    out
}

/// Fill memory and utilisation from NVML: a container's memory is what NVML lists for the
/// processes under its gpurun process.
fn add_nvml(out: &mut [Container], driver_paths: &[PathBuf], children: &HashMap<u32, Vec<u32>>) {
    let env = crate::env_vars::host_env();
    let Ok(list) = crate::gpu::list(driver_paths, &env) else {
        return;
    };
    for c in out {
        let mut tree = vec![c.pid];
        let mut i = 0;
        while i < tree.len() {
            tree.extend(children.get(&tree[i]).into_iter().flatten());
            i += 1;
        }
        for g in &mut c.gpus {
            let Some(n) = list
                .gpus
                .iter()
                .find(|e| e.minor == g.minor)
                .and_then(|e| e.nvml.as_ref())
            else {
                continue;
            };
            g.uuid = n.uuid.clone();
            g.utilization_percent = n.utilization_percent;
            g.memory_used_bytes = Some(
                n.processes
                    .iter()
                    .filter(|p| tree.contains(&p.pid))
                    .filter_map(|p| p.used_memory_bytes)
                    .sum(),
            );
        }
    }
}

/// The report as two tables.
pub fn render(r: &Report) -> String {
    let mut s = render_containers(&r.containers);
    if r.servers.is_empty() {
        return s;
    }
    s.push_str(&format!(
        "\n{:<8} {:<32} {:<24} {:>9} {:>8} {:>6}  {}\n",
        "SERVER", "IMAGE", "SCOPE", "RSS", "CPU", "IDLE", "CONTAINERS"
    ));
    for v in &r.servers {
        let pids: Vec<String> = v.containers.iter().map(u32::to_string).collect();
        s.push_str(&format!(
            "{:<8} {:<32} {:<24} {:>9} {:>7.2}s {:>5}s  {}{}\n",
            v.pid,
            v.image.display(),
            v.scope,
            crate::units::human_size(v.rss_bytes),
            v.cpu_seconds,
            v.idle_timeout_seconds,
            if pids.is_empty() {
                "-".into()
            } else {
                pids.join(",")
            },
            if v.stopping { " (stopping)" } else { "" },
        ));
    }
    s
}

/// The containers as a table.
fn render_containers(v: &[Container]) -> String {
    let mut s = format!(
        "{:<8} {:<6} {:<20} {:<32} {:<24} {}\n",
        "PID", "ACTION", "STARTED", "IMAGE", "GPUS", "COMMAND"
    );
    for c in v {
        let gpus: Vec<String> = c
            .gpus
            .iter()
            .map(|g| {
                let mut t = g.minor.to_string();
                if let Some(m) = g.memory_used_bytes {
                    t.push_str(&format!("({}", crate::units::human_size(m)));
                    if let Some(u) = g.utilization_percent {
                        t.push_str(&format!(" {u}%"));
                    }
                    t.push(')');
                }
                t
            })
            .collect();
        s.push_str(&format!(
            "{:<8} {:<6} {:<20} {:<32} {:<24} {}\n",
            c.pid,
            c.action,
            utc(c.started),
            c.image,
            if gpus.is_empty() {
                "-".into()
            } else {
                gpus.join(",")
            },
            c.command.join(" ")
        ));
    }
    s
}

/// `2026-11-29 21:04:05` (UTC), without a date library: civil-from-days.
pub fn utc(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951782400), "2000-02-29 00:00:00");
        assert_eq!(utc(1796000645), "2026-11-30 01:04:05");
    }

    #[test]
    fn launches() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            launch_of(&v(&[
                "gpurun", "-v", "exec", "--nv", "-B", "/a", "i.sqsh", "python", "-c", "1"
            ])),
            Some(("exec".into(), "i.sqsh".into(), v(&["python", "-c", "1"])))
        );
        assert_eq!(launch_of(&v(&["gpurun", "ps"])), None);
    }
}

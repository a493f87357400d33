//! Which GPUs go into the container and how they are named there.
//!
//! The allowed GPUs are the /dev/nvidiaN the job may open (a device cgroup answers EPERM for the
//! others); what the user asked for (`--gpus`, CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES,
//! SLURM_STEP_GPUS/SLURM_JOB_GPUS) then picks some of those. Numeric indices count the allowed
//! GPUs in NVML order, which is PCI bus order (from /proc/driver/nvidia/gpus or NVML; minor order
//! without either): that is what CUDA and NVML number inside a Slurm job with ConstrainDevices
//! (only the allowed GPUs are seen) and without (all are allowed).
//! Everything here is pure except [`probe`], which only asks access(2).

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One MIG device of a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInfo {
    pub uuid: String,
    /// GPU instance and compute instance ids (for the nvidia-caps nodes).
    pub gi: Option<u32>,
    pub ci: Option<u32>,
}

/// An allowed GPU, with what NVML says about it (when it is there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct GpuNode {
    pub minor: u32,
    pub nvml_index: Option<u32>,
    pub uuid: Option<String>,
    pub pci_bus_id: Option<String>,
    pub mig: Vec<MigInfo>,
}

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Every allowed GPU.
    All,
    /// Driver files, but no GPU.
    None,
    /// No GPU support at all (NVIDIA_VISIBLE_DEVICES=void or empty).
    Void,
    /// These entries, in this order.
    List(Vec<String>),
}

/// Where a request came from (for messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Source {
    #[serde(rename = "--gpus")]
    Flag,
    #[serde(rename = "CUDA_VISIBLE_DEVICES")]
    Cuda,
    #[serde(rename = "NVIDIA_VISIBLE_DEVICES")]
    Nvidia,
    #[serde(rename = "SLURM_STEP_GPUS")]
    SlurmStep,
    #[serde(rename = "SLURM_JOB_GPUS")]
    SlurmJob,
    #[serde(rename = "default")]
    Default,
    /// CDI devices (`--device`) brought the GPUs.
    #[serde(rename = "--device")]
    Cdi,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Source::Flag => "--gpus",
            Source::Cuda => "CUDA_VISIBLE_DEVICES",
            Source::Nvidia => "NVIDIA_VISIBLE_DEVICES",
            Source::SlurmStep => "SLURM_STEP_GPUS",
            Source::SlurmJob => "SLURM_JOB_GPUS",
            Source::Default => "default",
            Source::Cdi => "--device",
        })
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeviceError {
    #[error("GPU {entry:?} from {from} is not one this job may use; allowed: {allowed} (see `gpurun gpus`)")]
    NotAllowed {
        entry: String,
        from: Source,
        allowed: String,
    },
    #[error("GPU {entry:?} from {from} matches several GPUs ({matches}); give more of the UUID")]
    Ambiguous {
        entry: String,
        from: Source,
        matches: String,
    },
}

/// Parse a list value: `all`, `none`/`NoDevFiles`, `void`, or comma-separated entries.
pub fn parse_request(value: &str, source: Source) -> Request {
    let v = value.trim();
    match v.to_ascii_lowercase().as_str() {
        "all" => Request::All,
        "none" | "nodevfiles" => Request::None,
        "void" => Request::Void,
        // NVIDIA tools: empty NVIDIA_VISIBLE_DEVICES = no GPU support; CUDA: empty = no GPU.
        "" if source == Source::Nvidia => Request::Void,
        "" => Request::None,
        _ => Request::List(
            v.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        ),
    }
}

/// The request in force: `--gpus`, else CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, then
/// Slurm's lists. Slurm lists are gres.conf positions: when the job can open exactly as many GPUs
/// as the list names (device confinement), they are the allowed ones; else they count as indices.
pub fn request_from(
    flag: Option<&str>,
    env: &[(String, String)],
    allowed: usize,
) -> (Request, Source) {
    let get = |k: &str| {
        env.iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    };
    if let Some(f) = flag {
        return (parse_request(f, Source::Flag), Source::Flag);
    }
    for (k, s) in [
        ("CUDA_VISIBLE_DEVICES", Source::Cuda),
        ("NVIDIA_VISIBLE_DEVICES", Source::Nvidia),
    ] {
        if let Some(v) = get(k) {
            return (parse_request(v, s), s);
        }
    }
    for (k, s) in [
        ("SLURM_STEP_GPUS", Source::SlurmStep),
        ("SLURM_JOB_GPUS", Source::SlurmJob),
    ] {
        if let Some(v) = get(k) {
            let r = parse_request(v, s);
            if let Request::List(l) = &r {
                if l.len() == allowed {
                    return (Request::All, s);
                }
            }
            return (r, s);
        }
    }
    (Request::All, Source::Default)
}

/// A GPU chosen for the container: the node, and the MIG device when one was named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chosen {
    pub minor: u32,
    pub mig: Option<MigInfo>,
}

/// The outcome: GPUs to bind (in allowed order, no duplicates), and CUDA_VISIBLE_DEVICES inside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Selection {
    pub chosen: Vec<Chosen>,
    /// `None`: leave it as it is (everything allowed is visible).
    pub cuda_visible_devices: Option<String>,
}

/// Sort the allowed GPUs the way CUDA and NVML number them: NVML index when every GPU has one,
/// else minor number. Numeric, so 10 GPUs sort 0,1,…,9,10.
pub fn sort_allowed(gpus: &mut [GpuNode]) {
    if gpus.iter().all(|g| g.nvml_index.is_some()) {
        gpus.sort_by_key(|g| (g.nvml_index, g.minor));
    } else {
        gpus.sort_by_key(|g| g.minor);
    }
}

/// `0000:3B:00.0` and `00000000:3b:00.0` are the same bus id.
pub(crate) fn normalize_bus_id(s: &str) -> Option<(u64, u64, u64, u64)> {
    let parts: Vec<&str> = s.split(':').collect();
    let (dom, bus, devfn) = match parts.as_slice() {
        [d, b, df] => (*d, *b, *df),
        [b, df] => ("0", *b, *df),
        _ => return None,
    };
    let (dev, func) = devfn.split_once('.')?;
    let h = |x: &str| u64::from_str_radix(x, 16).ok();
    Some((h(dom)?, h(bus)?, h(dev)?, h(func)?))
}

enum Resolved {
    Gpu(usize),
    Mig(usize, MigInfo),
}

fn resolve(entry: &str, source: Source, allowed: &[GpuNode]) -> Result<Resolved, DeviceError> {
    let not_allowed = || DeviceError::NotAllowed {
        entry: entry.to_string(),
        from: source,
        allowed: describe_allowed(allowed),
    };
    if let Ok(i) = entry.parse::<usize>() {
        return if i < allowed.len() {
            Ok(Resolved::Gpu(i))
        } else {
            Err(not_allowed())
        };
    }
    let lower = entry.to_ascii_lowercase();
    if lower.starts_with("mig-") {
        // MIG-<uuid>, or the old MIG-GPU-<uuid>/<gi>/<ci>
        let mut hits = Vec::new();
        for (i, g) in allowed.iter().enumerate() {
            for m in &g.mig {
                let old = g.uuid.as_ref().and_then(|u| {
                    let (gi, ci) = (m.gi?, m.ci?);
                    Some(format!("mig-{}/{gi}/{ci}", u.to_ascii_lowercase()))
                });
                if m.uuid.to_ascii_lowercase() == lower || old.as_deref() == Some(lower.as_str()) {
                    hits.push((i, m.clone()));
                }
            }
        }
        return match hits.len() {
            1 => {
                let (i, m) = hits.remove(0);
                Ok(Resolved::Mig(i, m))
            }
            _ => Err(not_allowed()),
        };
    }
    if lower.starts_with("gpu-") {
        // A unique prefix of a UUID, as CUDA accepts.
        let hits: Vec<usize> = allowed
            .iter()
            .enumerate()
            .filter(|(_, g)| {
                g.uuid
                    .as_ref()
                    .is_some_and(|u| u.to_ascii_lowercase().starts_with(&lower))
            })
            .map(|(i, _)| i)
            .collect();
        return match hits.as_slice() {
            [i] => Ok(Resolved::Gpu(*i)),
            [] => Err(not_allowed()),
            _ => Err(DeviceError::Ambiguous {
                entry: entry.to_string(),
                from: source,
                matches: hits
                    .iter()
                    .map(|i| allowed[*i].uuid.clone().unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        };
    }
    if let Some(want) = normalize_bus_id(entry) {
        if let Some(i) = allowed
            .iter()
            .position(|g| g.pci_bus_id.as_deref().and_then(normalize_bus_id) == Some(want))
        {
            return Ok(Resolved::Gpu(i));
        }
    }
    Err(not_allowed())
}

/// Human list of the allowed GPUs: `0 (/dev/nvidia2, GPU-…), 1 (/dev/nvidia3)` or `none`.
pub fn describe_allowed(allowed: &[GpuNode]) -> String {
    if allowed.is_empty() {
        return "none".into();
    }
    allowed
        .iter()
        .enumerate()
        .map(|(i, g)| match &g.uuid {
            Some(u) => format!("{i} (/dev/nvidia{}, {u})", g.minor),
            None => format!("{i} (/dev/nvidia{})", g.minor),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Pick the GPUs for `request` among `allowed` (sorted with [`sort_allowed`]) and say how
/// CUDA_VISIBLE_DEVICES must read inside, where only the chosen GPUs exist: indices are renumbered
/// from 0 in allowed order and written in the caller's order; UUIDs stay UUIDs; MIG devices are
/// named by their MIG UUID. `-1` ends the list, as in CUDA; duplicates count once. `all` asked
/// for explicitly names every GPU (a caller's CUDA_VISIBLE_DEVICES=all would hide them all from
/// CUDA); by default it is left alone.
pub fn select(
    allowed: &[GpuNode],
    request: &Request,
    source: Source,
) -> Result<Selection, DeviceError> {
    let list = match request {
        Request::All => {
            return Ok(Selection {
                chosen: allowed
                    .iter()
                    .map(|g| Chosen {
                        minor: g.minor,
                        mig: None,
                    })
                    .collect(),
                cuda_visible_devices: (source != Source::Default).then(|| {
                    (0..allowed.len())
                        .map(|i| i.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                }),
            })
        }
        Request::None | Request::Void => {
            return Ok(Selection {
                chosen: vec![],
                cuda_visible_devices: Some(String::new()),
            })
        }
        Request::List(l) => l,
    };
    // (entry as given, resolved) in the caller's order
    let mut picked: Vec<(String, Resolved)> = Vec::new();
    for entry in list {
        if entry == "-1" {
            break;
        }
        let r = resolve(entry, source, allowed)?;
        let dup = picked.iter().any(|(_, p)| match (p, &r) {
            (Resolved::Gpu(a), Resolved::Gpu(b)) => a == b,
            (Resolved::Mig(a, m), Resolved::Mig(b, n)) => a == b && m.uuid == n.uuid,
            _ => false,
        });
        if !dup {
            picked.push((entry.clone(), r));
        }
    }
    let mut nodes: Vec<usize> = picked
        .iter()
        .map(|(_, r)| match r {
            Resolved::Gpu(i) | Resolved::Mig(i, _) => *i,
        })
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    let names: Vec<String> = picked
        .iter()
        .map(|(entry, r)| match r {
            Resolved::Mig(_, m) => m.uuid.clone(),
            Resolved::Gpu(i) if entry.to_ascii_lowercase().starts_with("gpu-") => {
                allowed[*i].uuid.clone().unwrap_or_else(|| entry.clone())
            }
            Resolved::Gpu(i) => nodes.iter().position(|n| n == i).unwrap_or(0).to_string(),
        })
        .collect();
    let chosen = nodes
        .iter()
        .map(|&i| Chosen {
            minor: allowed[i].minor,
            mig: picked.iter().find_map(|(_, r)| match r {
                Resolved::Mig(j, m) if *j == i => Some(m.clone()),
                _ => None,
            }),
        })
        .collect();
    Ok(Selection {
        chosen,
        cuda_visible_devices: Some(names.join(",")),
    })
}

/// Minor numbers of the /dev/nvidiaN nodes in `dev` (numeric order).
pub fn gpu_minors(dev: &Path) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(dev)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| gpu_minor_of(&e.file_name().to_string_lossy()))
        .collect();
    v.sort_unstable();
    v
}

/// `nvidia12` → 12; anything else (nvidiactl, nvidia-uvm, nvidia01) → None.
pub fn gpu_minor_of(name: &str) -> Option<u32> {
    let n = name.strip_prefix("nvidia")?;
    if n.is_empty() || !n.bytes().all(|c| c.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0'))
    {
        return None;
    }
    n.parse().ok()
}

/// Does a probe's outcome mean the job may use the device? EPERM (device cgroup) and EACCES
/// (file mode) say no; success and anything else (ENOENT of a node gone meanwhile, say) say
/// yes, and the node's own open inside the container has the last word.
pub fn open_allows(r: &io::Result<()>) -> bool {
    match r {
        Ok(()) => true,
        Err(e) => !matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)),
    }
}

/// May this process open the device node for reading and writing? access(2) asks the same
/// permission check open(2) does, device cgroup included, without the driver's open, which is
/// slow and would be paid on every start for each GPU.
pub fn probe(path: &Path) -> io::Result<()> {
    use nix::unistd::{access, AccessFlags};
    access(path, AccessFlags::R_OK | AccessFlags::W_OK).map_err(io::Error::from)
}

/// The control nodes every GPU container needs, when present in `dev`.
pub fn control_nodes(dev: &Path) -> Vec<PathBuf> {
    [
        "nvidiactl",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia-modeset",
    ]
    .iter()
    .map(|n| dev.join(n))
    .filter(|p| p.exists())
    .collect()
}

/// `DeviceFileMinor: N` of a /proc/driver/nvidia/capabilities/…/access file.
pub fn cap_minor(access: &str) -> Option<u32> {
    access
        .lines()
        .find_map(|l| l.strip_prefix("DeviceFileMinor:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: u32) -> Vec<GpuNode> {
        (0..n)
            .map(|i| GpuNode {
                minor: i,
                nvml_index: Some(i),
                uuid: Some(format!("GPU-{i:02}aaaaaa-0000-0000-0000-00000000000{i}")),
                pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x10 + i)),
                mig: vec![],
            })
            .collect()
    }

    fn list(s: &str) -> Request {
        parse_request(s, Source::Cuda)
    }

    type Outcome = (Vec<u32>, Option<String>);

    fn cvd(allowed: &[GpuNode], req: &str) -> Result<Outcome, DeviceError> {
        select(allowed, &list(req), Source::Cuda).map(|s| {
            (
                s.chosen.iter().map(|c| c.minor).collect(),
                s.cuda_visible_devices,
            )
        })
    }

    #[test]
    fn parse_table() {
        let l = |v: &[&str]| Request::List(v.iter().map(|s| s.to_string()).collect());
        let cases = [
            ("all", Source::Flag, Request::All),
            ("ALL", Source::Nvidia, Request::All),
            ("none", Source::Flag, Request::None),
            ("NoDevFiles", Source::Cuda, Request::None),
            ("void", Source::Nvidia, Request::Void),
            ("", Source::Nvidia, Request::Void),
            ("", Source::Cuda, Request::None),
            ("  ", Source::Cuda, Request::None),
            ("0", Source::Cuda, l(&["0"])),
            ("1, 0,", Source::Cuda, l(&["1", "0"])),
            (
                "GPU-abc,MIG-def",
                Source::Nvidia,
                l(&["GPU-abc", "MIG-def"]),
            ),
        ];
        for (v, s, want) in cases {
            assert_eq!(parse_request(v, s), want, "{v:?}");
        }
    }

    #[test]
    fn select_table() {
        let four = gpus(4);
        let ok = |m: &[u32], c: &str| Ok((m.to_vec(), Some(c.to_string())));
        let u = |i: usize| four[i].uuid.clone().unwrap();
        let cases: Vec<(&str, Result<Outcome, ()>)> = vec![
            ("0", ok(&[0], "0")),
            ("1", ok(&[1], "0")),
            ("3,1", ok(&[1, 3], "1,0")),
            ("1,3", ok(&[1, 3], "0,1")),
            ("2,2,0", ok(&[0, 2], "1,0")),
            ("0,-1,1", ok(&[0], "0")),
            ("-1", ok(&[], "")),
            ("none", ok(&[], "")),
            ("", ok(&[], "")),
            ("4", Err(())),
            ("x", Err(())),
            ("GPU-02", ok(&[2], &u(2))),
            ("gpu-02aa", ok(&[2], &u(2))),
            ("GPU-0", Err(())), // ambiguous
            ("GPU-ff", Err(())),
            ("00000000:12:00.0", ok(&[2], "0")),
            ("0000:13:00.0", ok(&[3], "0")),
            ("13:00.0", ok(&[3], "0")),
            ("0000:14:00.0", Err(())),
        ];
        for (req, want) in cases {
            let got = cvd(&four, req).map_err(|_| ());
            assert_eq!(got, want, "{req:?}");
        }
        assert_eq!(
            cvd(&four, "all").unwrap(),
            (vec![0, 1, 2, 3], Some("0,1,2,3".into()))
        );
        let all = select(&four, &Request::All, Source::Default).unwrap();
        assert_eq!(all.cuda_visible_devices, None);
        let all = select(&four, &Request::All, Source::Flag).unwrap();
        assert_eq!(all.cuda_visible_devices.as_deref(), Some("0,1,2,3"));
        // UUIDs and indices mixed: the index counts among the chosen GPUs
        assert_eq!(
            cvd(&four, &format!("3,{}", u(1))).unwrap(),
            (vec![1, 3], Some(format!("1,{}", u(1))))
        );
    }

    #[test]
    fn ten_gpus_sort_numerically() {
        let mut g = gpus(12);
        g.reverse();
        sort_allowed(&mut g);
        assert_eq!(
            g.iter().map(|g| g.minor).collect::<Vec<_>>(),
            (0..12).collect::<Vec<_>>()
        );
        assert_eq!(
            cvd(&g, "10,2,11").unwrap(),
            (vec![2, 10, 11], Some("1,0,2".into()))
        );
        assert_eq!(cvd(&g, "9,10").unwrap(), (vec![9, 10], Some("0,1".into())));
        let mut no_nvml: Vec<GpuNode> = [10, 2, 1, 0]
            .iter()
            .map(|&m| GpuNode {
                minor: m,
                ..Default::default()
            })
            .collect();
        sort_allowed(&mut no_nvml);
        assert_eq!(
            no_nvml.iter().map(|g| g.minor).collect::<Vec<_>>(),
            vec![0, 1, 2, 10]
        );
        assert_eq!(cvd(&no_nvml, "3").unwrap(), (vec![10], Some("0".into())));
    }

    #[test]
    fn confined_job_counts_allowed_only() {
        // Slurm job B with ConstrainDevices: it may open nvidia2 and nvidia3, CUDA_VISIBLE_DEVICES=0,1
        let allowed: Vec<GpuNode> = [2, 3]
            .iter()
            .map(|&m| GpuNode {
                minor: m,
                ..Default::default()
            })
            .collect();
        assert_eq!(cvd(&allowed, "1").unwrap(), (vec![3], Some("0".into())));
        let e = cvd(&allowed, "2").unwrap_err().to_string();
        assert!(
            e.contains("\"2\"") && e.contains("0 (/dev/nvidia2), 1 (/dev/nvidia3)"),
            "{e}"
        );
    }

    #[test]
    fn nvml_order_beats_minor_order() {
        let mut g = vec![
            GpuNode {
                minor: 0,
                nvml_index: Some(1),
                ..Default::default()
            },
            GpuNode {
                minor: 1,
                nvml_index: Some(0),
                ..Default::default()
            },
        ];
        sort_allowed(&mut g);
        assert_eq!(cvd(&g, "0").unwrap().0, vec![1]);
    }

    #[test]
    fn mig_devices() {
        let mut g = gpus(2);
        g[1].mig = vec![
            MigInfo {
                uuid: "MIG-aaaa".into(),
                gi: Some(1),
                ci: Some(0),
            },
            MigInfo {
                uuid: "MIG-bbbb".into(),
                gi: Some(2),
                ci: Some(0),
            },
        ];
        let s = select(&g, &list("MIG-bbbb"), Source::Cuda).unwrap();
        assert_eq!(
            s.chosen,
            vec![Chosen {
                minor: 1,
                mig: Some(g[1].mig[1].clone())
            }]
        );
        assert_eq!(s.cuda_visible_devices.as_deref(), Some("MIG-bbbb"));
        let old = format!("MIG-{}/1/0", g[1].uuid.clone().unwrap());
        let s = select(&g, &list(&old), Source::Cuda).unwrap();
        assert_eq!(s.cuda_visible_devices.as_deref(), Some("MIG-aaaa"));
        assert!(select(&g, &list("MIG-cccc"), Source::Cuda).is_err());
    }

    #[test]
    fn request_sources() {
        let env = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let l = |v: &[&str]| Request::List(v.iter().map(|s| s.to_string()).collect());
        let e = env(&[
            ("NVIDIA_VISIBLE_DEVICES", "1"),
            ("CUDA_VISIBLE_DEVICES", "0"),
            ("SLURM_STEP_GPUS", "2"),
        ]);
        assert_eq!(
            request_from(Some("all"), &e, 4),
            (Request::All, Source::Flag)
        );
        assert_eq!(request_from(None, &e, 4), (l(&["0"]), Source::Cuda));
        assert_eq!(request_from(None, &e[..1], 4), (l(&["1"]), Source::Nvidia));
        assert_eq!(
            request_from(None, &env(&[("SLURM_STEP_GPUS", "2,3")]), 2),
            (Request::All, Source::SlurmStep)
        );
        assert_eq!(
            request_from(None, &env(&[("SLURM_STEP_GPUS", "2,3")]), 4),
            (l(&["2", "3"]), Source::SlurmStep)
        );
        assert_eq!(
            request_from(None, &env(&[("SLURM_JOB_GPUS", "1")]), 4),
            (l(&["1"]), Source::SlurmJob)
        );
        assert_eq!(request_from(None, &[], 4), (Request::All, Source::Default));
        assert_eq!(
            request_from(None, &env(&[("CUDA_VISIBLE_DEVICES", "")]), 4),
            (Request::None, Source::Cuda)
        );
    }

    #[test]
    fn node_names_and_probe_outcomes() {
        for (n, want) in [
            ("nvidia0", Some(0)),
            ("nvidia12", Some(12)),
            ("nvidiactl", None),
            ("nvidia-uvm", None),
            ("nvidia", None),
            ("nvidia01", None),
            ("nvidia-caps", None),
        ] {
            assert_eq!(gpu_minor_of(n), want, "{n}");
        }
        let e = |c| Err(io::Error::from_raw_os_error(c));
        assert!(open_allows(&Ok(())));
        assert!(open_allows(&e(libc::ENXIO)));
        assert!(open_allows(&e(libc::ENODEV)));
        assert!(!open_allows(&e(libc::EPERM)));
        assert!(!open_allows(&e(libc::EACCES)));
        assert_eq!(
            cap_minor("DeviceFileMinor: 12\nDeviceFileMode: 292\n"),
            Some(12)
        );
        assert_eq!(cap_minor("nothing"), None);
    }
}

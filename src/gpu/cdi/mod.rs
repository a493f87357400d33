//! CDI (Container Device Interface) specs: the convention podman, containerd and Apptainer follow
//! for devices a vendor describes. `nvidia-ctk cdi generate` writes one for the NVIDIA driver.
//!
//! A spec (JSON or YAML, in one of the spec directories) names a kind `VENDOR/CLASS` and its
//! devices; the spec and each device carry container edits (device nodes, mounts, environment,
//! hooks). `--device VENDOR/CLASS=NAME` picks devices as podman does; what a rootless launcher
//! can apply comes back as plain data ([`Applied`]) for the runtime's plan, and the rest is listed
//! as skipped. Pure functions, except [`load`] (reads the spec directories) and the probe the
//! caller hands to [`check_host`].
//!
//! types.rs holds what a spec says once checked and what a selection applies; spec.rs reads
//! and checks one spec file; this file finds the specs, selects devices and checks the host.

mod spec;
#[cfg(test)]
mod test_specs;
mod types;

use std::io;
use std::path::{Path, PathBuf};

use spec::{is_spec_file, kind_of, parse, parse_name};
pub use types::{
    Applied, CdiError, CdiMount, Chosen, Device, DeviceNode, Edits, Skipped, Spec, SpecError,
};

/// Where podman and the CDI library look, lowest priority first.
pub const DEFAULT_SPEC_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];

/// The specs of `kinds` in `dirs` (a missing directory is skipped; a later one has the higher
/// priority; files in name order). Every spec file's kind is read; only those of `kinds` are
/// validated, so a broken spec of another vendor does not stop these devices.
pub fn load(dirs: &[PathBuf], kinds: &[&str]) -> Result<Vec<Spec>, CdiError> {
    let mut specs = vec![];
    for (priority, dir) in dirs.iter().enumerate() {
        let dir_err = |source| CdiError::Dir {
            path: dir.clone(),
            source,
        };
        let entries = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(dir_err(e)),
        };
        let mut files: Vec<PathBuf> = entries
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(dir_err)?;
        files.retain(|p| {
            p.file_name()
                .is_some_and(|n| is_spec_file(&n.to_string_lossy()))
                && !p.is_dir()
        });
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path).map_err(|source| CdiError::Read {
                path: path.clone(),
                source,
            })?;
            if kinds.contains(&kind_of(&path, &text)?.as_str()) {
                specs.push(parse(&path, &text, priority)?);
            }
        }
    }
    Ok(specs)
}

/// Where `qualified` is defined: the spec and device index of the highest-priority definition.
/// Two at that priority (one directory) are a conflict, as in the CDI library.
fn find(
    specs: &[Spec],
    qualified: &str,
    kind: &str,
    name: &str,
) -> Result<Option<(usize, usize)>, CdiError> {
    let defs: Vec<(usize, usize)> = specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind == kind)
        .filter_map(|(i, s)| Some((i, s.devices.iter().position(|d| d.name == name)?)))
        .collect();
    let Some(top) = defs.iter().map(|(i, _)| specs[*i].priority).max() else {
        return Ok(None);
    };
    let best: Vec<&(usize, usize)> = defs
        .iter()
        .filter(|(i, _)| specs[*i].priority == top)
        .collect();
    match best.as_slice() {
        [one] => Ok(Some(**one)),
        [a, b, ..] => Err(CdiError::Conflict {
            device: qualified.to_string(),
            first: specs[a.0].path.clone(),
            second: specs[b.0].path.clone(),
        }),
        [] => Ok(None),
    }
}

fn unknown(specs: &[Spec], qualified: &str, kind: &str, dirs: &[PathBuf]) -> CdiError {
    let of_kind: Vec<&Spec> = specs.iter().filter(|s| s.kind == kind).collect();
    if of_kind.is_empty() {
        return CdiError::UnknownKind {
            device: qualified.to_string(),
            kind: kind.to_string(),
            dirs: join(dirs.iter().map(|d| d.display().to_string())),
        };
    }
    let mut known: Vec<&str> = of_kind
        .iter()
        .flat_map(|s| s.devices.iter().map(|d| d.name.as_str()))
        .collect();
    known.sort_unstable();
    known.dedup();
    CdiError::UnknownDevice {
        device: qualified.to_string(),
        specs: join(of_kind.iter().map(|s| s.path.display().to_string())),
        known: join(known.iter().map(|s| s.to_string())),
    }
}

fn join(items: impl Iterator<Item = String>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

/// Append `e` to what is applied: a node or mount at a place already taken replaces the earlier
/// one; a variable set again takes the later value.
fn append(a: &mut Applied, e: &Edits) {
    for (k, v) in &e.env {
        match a.env.iter_mut().find(|(n, _)| n == k) {
            Some(slot) => slot.1 = v.clone(),
            None => a.env.push((k.clone(), v.clone())),
        }
    }
    for n in &e.nodes {
        a.nodes.retain(|o| o.path != n.path);
        a.nodes.push(n.clone());
    }
    for m in &e.mounts {
        a.mounts.retain(|o| o.dst != m.dst);
        a.mounts.push(m.clone());
    }
    a.skipped.extend(e.skipped.iter().cloned());
}

/// The edits of the devices `requested` (`VENDOR/CLASS=NAME`, each once): a spec's own edits
/// come with the first of its devices, then each device's.
pub fn select(specs: &[Spec], requested: &[String], dirs: &[PathBuf]) -> Result<Applied, CdiError> {
    let mut a = Applied::default();
    let mut used: Vec<usize> = vec![];
    for q in requested {
        if a.devices.iter().any(|c| &c.name == q) {
            continue;
        }
        let (kind, name) = parse_name(q)?;
        let (si, di) =
            find(specs, q, &kind, &name)?.ok_or_else(|| unknown(specs, q, &kind, dirs))?;
        if !used.contains(&si) {
            used.push(si);
            append(&mut a, &specs[si].edits);
        }
        append(&mut a, &specs[si].devices[di].edits);
        a.devices.push(Chosen {
            name: q.clone(),
            spec: specs[si].path.clone(),
        });
    }
    // Parents before what is mounted inside them (stable: the spec's order otherwise).
    a.mounts.sort_by_key(|m| m.dst.components().count());
    Ok(a)
}

/// The devices `requested`, from the specs in `dirs`.
pub fn resolve(requested: &[String], dirs: &[PathBuf]) -> Result<Applied, CdiError> {
    let mut kinds: Vec<String> = vec![];
    for q in requested {
        let (kind, _) = parse_name(q)?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
    select(&load(dirs, &kinds)?, requested, dirs)
}

/// Can the container have what `a` names? Each host node must exist and be one this process may
/// open (`probe` answers as `devices::probe`: a Slurm job's device cgroup refuses the others with
/// EPERM; `devices::open_allows` judges), each mount's source must exist.
pub fn check_host(
    a: &Applied,
    probe: &dyn Fn(&Path) -> io::Result<()>,
    exists: &dyn Fn(&Path) -> bool,
) -> Result<(), CdiError> {
    for n in &a.nodes {
        let r = probe(&n.host_path);
        if r.as_ref()
            .is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
        {
            return Err(CdiError::Missing {
                device: n.from.clone(),
                path: n.host_path.clone(),
            });
        }
        if !super::devices::open_allows(&r) {
            return Err(CdiError::NotAllowed {
                device: n.from.clone(),
                path: n.host_path.clone(),
            });
        }
    }
    match a.mounts.iter().find(|m| !exists(&m.src)) {
        Some(m) => Err(CdiError::Missing {
            device: m.from.clone(),
            path: m.src.clone(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::test_specs::*;
    use super::*;

    fn names_of(a: &Applied) -> (Vec<String>, Vec<String>, Vec<String>) {
        let p = |p: &Path| p.display().to_string();
        (
            a.nodes.iter().map(|n| p(&n.path)).collect(),
            a.mounts.iter().map(|m| p(&m.dst)).collect(),
            a.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        )
    }

    // Over 80 lines: the two specs are shared by every case below them.
    #[test]
    fn selection() {
        let nv = spec_at("/etc/cdi/nvidia.yaml", 0, NVIDIA_YAML);
        let other = spec_at(
            "/etc/cdi/fpga.yaml",
            0,
            &spec_with(
                "0.6.0",
                "vendor.com/fpga",
                "a",
                "    env: [NVIDIA_VISIBLE_DEVICES=fpga, FPGA=a]\n    deviceNodes:\n    - path: /dev/fpga0\n    mounts:\n    - {hostPath: /opt/fpga, containerPath: /opt/fpga/x/y}\n    - {hostPath: /opt, containerPath: /opt/fpga}\n",
            ),
        );
        let specs = [nv, other];
        let dirs = [PathBuf::from("/etc/cdi")];
        let sel = |r: &[&str]| {
            let r: Vec<String> = r.iter().map(|s| s.to_string()).collect();
            select(&specs, &r, &dirs)
        };
        let lib = "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14";
        let ctl = ["/dev/nvidiactl", "/dev/nvidia-uvm"];
        let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
            (
                vec!["nvidia.com/gpu=1"],
                [&ctl[..], &["/dev/nvidia1"]].concat(),
            ),
            (
                vec!["nvidia.com/gpu=all"],
                [&ctl[..], &["/dev/nvidia0", "/dev/nvidia1"]].concat(),
            ),
            // the UUID and the index name one GPU: one node
            (
                vec![
                    "nvidia.com/gpu=GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c",
                    "nvidia.com/gpu=0",
                    "nvidia.com/gpu=0",
                ],
                [&ctl[..], &["/dev/nvidia0"]].concat(),
            ),
            (
                vec!["nvidia.com/gpu=1", "nvidia.com/gpu=0"],
                [&ctl[..], &["/dev/nvidia1", "/dev/nvidia0"]].concat(),
            ),
        ];
        for (req, nodes) in cases {
            let a = sel(&req).unwrap();
            let (n, m, e) = names_of(&a);
            assert_eq!(n, nodes, "{req:?}");
            assert_eq!(m, [lib], "{req:?}");
            assert_eq!(e, ["NVIDIA_VISIBLE_DEVICES=void"], "{req:?}");
            assert_eq!(a.skipped.len(), 1, "the spec's hook, once: {req:?}");
            assert!(a.gives_gpus());
        }
        // two kinds: each spec's edits once; a later variable wins; parents mounted first
        let a = sel(&["nvidia.com/gpu=0", "vendor.com/fpga=a"]).unwrap();
        let (n, m, e) = names_of(&a);
        assert_eq!(n, [&ctl[..], &["/dev/nvidia0", "/dev/fpga0"]].concat());
        assert_eq!(m, ["/opt/fpga", lib, "/opt/fpga/x/y"]);
        assert_eq!(e, ["NVIDIA_VISIBLE_DEVICES=fpga", "FPGA=a"]);
        assert_eq!(
            a.devices,
            [
                Chosen {
                    name: "nvidia.com/gpu=0".into(),
                    spec: "/etc/cdi/nvidia.yaml".into()
                },
                Chosen {
                    name: "vendor.com/fpga=a".into(),
                    spec: "/etc/cdi/fpga.yaml".into()
                },
            ]
        );
        assert!(!sel(&["vendor.com/fpga=a"]).unwrap().gives_gpus());
        // what is not there
        let e = sel(&["nvidia.com/gpu=7"]).unwrap_err().to_string();
        assert_eq!(e, "CDI device nvidia.com/gpu=7 is not defined in /etc/cdi/nvidia.yaml; it defines 0, 1, GPU-4cf8db2d-06c0-7d70-1a51-e59b25b2c16c, all (nvidia-ctk cdi list shows them)");
        let e = sel(&["amd.com/gpu=0"]).unwrap_err();
        assert!(matches!(e, CdiError::UnknownKind { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("no spec in /etc/cdi has kind amd.com/gpu"),
            "{e}"
        );
        assert!(matches!(sel(&["gpu0"]).unwrap_err(), CdiError::Name { .. }));
    }

    #[test]
    fn a_later_directory_wins_and_one_directory_may_not_say_it_twice() {
        let dev = |node: &str| {
            spec_with(
                "0.5.0",
                "a.com/b",
                "x",
                &format!("    deviceNodes:\n    - path: {node}\n"),
            )
        };
        let req = ["a.com/b=x".to_string()];
        let dirs = [PathBuf::from("/etc/cdi"), PathBuf::from("/var/run/cdi")];
        let s1 = spec_at("/etc/cdi/1.yaml", 0, &dev("/dev/one"));
        let s2 = spec_at("/var/run/cdi/2.yaml", 1, &dev("/dev/two"));
        let s3 = spec_at("/var/run/cdi/3.yaml", 1, &dev("/dev/three"));
        let a = select(&[s1.clone(), s2.clone()], &req, &dirs).unwrap();
        assert_eq!(names_of(&a).0, ["/dev/two"]);
        assert_eq!(a.devices[0].spec, Path::new("/var/run/cdi/2.yaml"));
        let e = select(&[s1.clone(), s2, s3], &req, &dirs).unwrap_err();
        assert_eq!(
            e.to_string(),
            "CDI device a.com/b=x is defined by both /var/run/cdi/2.yaml and /var/run/cdi/3.yaml; remove one of them"
        );
        // a conflict below the highest priority does not matter
        let s0 = spec_at("/etc/cdi/0.yaml", 0, &dev("/dev/zero"));
        let s2 = spec_at("/var/run/cdi/2.yaml", 1, &dev("/dev/two"));
        assert!(select(&[s0, s1, s2], &req, &dirs).is_ok());
    }

    #[test]
    fn host_checks() {
        let a = select(
            &[spec_at("/etc/cdi/nvidia.yaml", 0, NVIDIA_YAML)],
            &["nvidia.com/gpu=1".to_string()],
            &[],
        )
        .unwrap();
        let answer = |refused: &'static str, errno: i32| {
            move |p: &Path| {
                if p == Path::new(refused) {
                    Err(io::Error::from_raw_os_error(errno))
                } else {
                    Ok(())
                }
            }
        };
        let all = |_: &Path| true;
        // (refused node, errno, the outcome)
        let cases: [(&str, i32, Option<&str>); 5] = [
            (
                "/dev/nvidia1",
                libc::EPERM,
                Some("CDI device nvidia.com/gpu=1: this job may not open /dev/nvidia1"),
            ),
            (
                "/dev/nvidiactl",
                libc::EACCES,
                Some("CDI device nvidia.com/gpu: this job may not open /dev/nvidiactl"),
            ),
            (
                "/dev/nvidia1",
                libc::ENOENT,
                Some("CDI device nvidia.com/gpu=1: /dev/nvidia1 does not exist on this host"),
            ),
            // a fake node without a driver, allowed by the device cgroup
            ("/dev/nvidia1", libc::ENXIO, None),
            ("/dev/nvidia0", libc::EPERM, None),
        ];
        for (node, errno, want) in cases {
            let r = check_host(&a, &answer(node, errno), &all);
            match want {
                None => assert!(r.is_ok(), "{node} {errno}: {r:?}"),
                Some(w) => {
                    let e = r.unwrap_err().to_string();
                    assert!(e.starts_with(w), "{node} {errno}: {e}");
                }
            }
        }
        let e = check_host(&a, &|_| Ok(()), &|p| !p.ends_with("libcuda.so.550.54.14")).unwrap_err();
        assert!(
            e.to_string().starts_with("CDI device nvidia.com/gpu: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14 does not exist on this host"),
            "{e}"
        );
    }

    #[test]
    fn loading_reads_only_spec_files_of_the_kinds_asked_for() {
        let t = tempfile::tempdir().unwrap();
        let (d1, d2) = (t.path().join("etc"), t.path().join("run"));
        std::fs::create_dir_all(d1.join("sub.yaml")).unwrap();
        std::fs::create_dir_all(&d2).unwrap();
        std::fs::write(d1.join("nvidia.yaml"), NVIDIA_YAML).unwrap();
        std::fs::write(d2.join("nvidia.json"), NVIDIA_JSON).unwrap();
        std::fs::write(d1.join("notes.yml"), "not a spec").unwrap();
        // another vendor's spec that gpurun cannot validate does not matter
        std::fs::write(
            d1.join("net.yaml"),
            "cdiVersion: 1.1.0\nkind: net.com/nic\ndevices: []\n",
        )
        .unwrap();
        let dirs = [d1.clone(), t.path().join("missing"), d2.clone()];
        let specs = load(&dirs, &["nvidia.com/gpu"]).unwrap();
        let got: Vec<(PathBuf, usize)> =
            specs.iter().map(|s| (s.path.clone(), s.priority)).collect();
        assert_eq!(
            got,
            [(d1.join("nvidia.yaml"), 0), (d2.join("nvidia.json"), 2)]
        );
        assert!(load(&dirs, &["vendor.com/x"]).unwrap().is_empty());
        let n = load(&dirs, &["net.com/nic"]).unwrap_err().to_string();
        assert!(
            n.contains("net.yaml") && n.contains("cdiVersion \"1.1.0\""),
            "{n}"
        );
        // a file that is no spec at all could define anything: an error, naming it
        std::fs::write(d2.join("broken.yaml"), "kind: [\n").unwrap();
        let e = load(&dirs, &["nvidia.com/gpu"]).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("CDI spec {}: ", d2.join("broken.yaml").display())),
            "{e}"
        );
        assert!(e.ends_with("fix or regenerate it (nvidia-ctk cdi generate), or leave its directory out of cdi_spec_dirs"), "{e}");
    }

    #[test]
    fn an_unreadable_directory_keeps_its_errno() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("cdi");
        std::fs::write(&file, "").unwrap();
        let e = load(std::slice::from_ref(&file), &["nvidia.com/gpu"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "CDI spec directory {}: Not a directory (os error 20); make it readable or leave it out of cdi_spec_dirs",
                file.display()
            )
        );
        match e {
            CdiError::Dir { path, source } => {
                assert_eq!(path, file);
                assert_eq!(source.raw_os_error(), Some(libc::ENOTDIR));
            }
            other => panic!("not a directory error: {other:?}"),
        }
    }
}

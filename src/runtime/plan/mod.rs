//! The launch plan: everything decided before touching the system, as plain data.
//!
//! `plan()` is a pure function of the request and a snapshot of the host (`HostView`), so every rule
//! (which binds, which /dev entries, which env, which uid map) is tested with tables, no root needed.
//!
//! types.rs holds the plan and its inputs; each step of `plan()` is in the file of its concern:
//! system_mounts.rs, changes.rs, binds.rs, identity.rs, command.rs.

mod binds;
mod changes;
mod command;
#[cfg(test)]
mod fixtures;
mod identity;
mod system_mounts;
mod types;

use binds::{binds, parse_no_mount, pmix_dir, tmp_and_host_files};
use changes::changes;
use command::{argv_for, forced_env, root_like, working_dir};
use identity::{apt_sandbox, user_and_home};
use system_mounts::base_mounts;
pub use types::{
    Action, Changes, DevEntry, Extras, HostPath, HostView, IdMap, ImageView, Plan, PlanError,
    Request, RootSource, HOLD_STOP,
};

use super::env::{compose, EnvInputs};

/// Build the launch plan. Pure: everything about the host and the image comes in as data.
pub fn plan(
    req: &Request,
    action: &Action,
    host: &HostView,
    image: &ImageView,
    extras: &Extras,
) -> Result<Plan, PlanError> {
    let mut mounts = base_mounts(req, host, extras);
    let mut skips = parse_no_mount(&req.no_mount)?;
    check_namespaces(req)?;
    let changes = changes(req, host, &image.root)?;
    tmp_and_host_files(req, host, &skips, &changes, &mut mounts);
    let (uid, gid, home) = user_and_home(req, host, image, &mut skips, &changes, &mut mounts)?;
    apt_sandbox(req, image, &mut mounts);
    binds(req, host, &skips, &mut mounts)?;
    pmix_dir(host, &mut mounts);
    let cwd = working_dir(req, action, host, image, &skips, &mut mounts)?;

    mounts.extend(extras.mounts.iter().cloned());

    let forced = forced_env(req, action, host, image, extras, &home);
    let inputs = EnvInputs {
        host: &host.env,
        host_drop: &extras.host_env_drop,
        cleanenv: req.cleanenv,
        image: &image.meta.env,
        files: &host.env_files,
        cli: &req.env,
        forced: &forced,
        ld_library_path_prepend: &extras.ld_library_path_prepend,
        ld_library_path_append: &extras.ld_library_path_append,
        path_append: &extras.path_append,
    };
    let env = compose(&inputs)?;
    let entry_env = match action {
        Action::Hold {
            entrypoint: true, ..
        } if !image.meta.entrypoint.is_empty() => Some(compose(&EnvInputs {
            cleanenv: true,
            ..inputs
        })?),
        _ => None,
    };

    let argv = argv_for(action, image, host);
    if let RootSource::Dir(d) = &image.root {
        if !root_like(image, argv.as_deref().ok(), &env, &mounts) {
            return Err(PlanError::NotARoot(d.clone()));
        }
    }
    Ok(Plan {
        root: image.root.clone(),
        uid: IdMap {
            inside: uid,
            outside: host.uid,
        },
        gid: IdMap {
            inside: gid,
            outside: host.gid,
        },
        mounts,
        env,
        cwd,
        cwd_asked: req.pwd.is_some(),
        argv: argv?,
        changes,
        overlay_driver: req.overlay_driver,
        own_pid: req.own_pid,
        own_ipc: req.own_ipc,
        own_net: req.net || req.network.is_some(),
        fake_ids: req.fakeroot,
        hostname: req.hostname.clone(),
        cdi: extras.cdi.clone(),
        entry_env,
    })
}

/// The namespaces' names: a host name the kernel and resolvers take, and a network type
/// gpurun has.
fn check_namespaces(req: &Request) -> Result<(), PlanError> {
    if let Some(h) = req.hostname.as_deref().filter(|h| !valid_hostname(h)) {
        return Err(PlanError::Hostname(h.to_string()));
    }
    match req.network.as_deref() {
        None | Some("none") => Ok(()),
        Some(other) => Err(PlanError::Network(other.to_string())),
    }
}

/// A host name the kernel and resolvers take: 1 to 64 letters, digits, '-' and '.'.
fn valid_hostname(h: &str) -> bool {
    (1..=64).contains(&h.len())
        && !h.starts_with('-')
        && h.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;

    // One CDI scenario end to end: its devices, mounts and environment beside the GPU plan.
    #[test]
    fn cdi_devices_join_the_plan() {
        use crate::gpu::cdi::{Applied, CdiMount, DeviceNode};
        let node = |p: &str, host: &str| DeviceNode {
            path: p.into(),
            host_path: host.into(),
            from: "x.com/y=0".into(),
        };
        let applied = |nodes: Vec<DeviceNode>| Applied {
            nodes,
            mounts: vec![CdiMount {
                src: "/opt/drv/lib".into(),
                dst: "/usr/lib/drv".into(),
                options: vec!["ro".into(), "nosuid".into(), "bind".into()],
                from: "x.com/y".into(),
            }],
            env: vec![("A".into(), "cdi".into()), ("B".into(), "cdi".into())],
            ..Applied::default()
        };
        let gpu = || Extras {
            mounts: vec![
                Mount::bind("/dev/nvidia0", "/dev/nvidia0", false),
                Mount::bind("/srv/fw", "/lib/firmware/x", true),
            ],
            env: vec![("A".into(), "gpu".into()), ("C".into(), "gpu".into())],
            ..Extras::default()
        };
        let host = vec![
            ("CUDA_VISIBLE_DEVICES".to_string(), "3".to_string()),
            ("NVIDIA_VISIBLE_DEVICES".to_string(), "3".to_string()),
        ];
        // (the CDI nodes, whether the host's GPU variables pass in)
        let cases = [
            (vec![node("/dev/nvidia1", "/srv/dev/nvidia1")], false),
            (vec![node("/dev/fpga0", "/dev/fpga0")], true),
            (vec![], true),
        ];
        for (nodes, passed) in cases {
            let mut x = gpu();
            x.add_cdi(applied(nodes.clone()));
            assert_eq!(x.filter_nvidia_dev, !nodes.is_empty(), "{nodes:?}");
            let p = plan_in_env(host.clone(), &Request::default(), &x);
            assert_eq!(env(&p, "A"), Some("cdi"));
            assert_eq!((env(&p, "B"), env(&p, "C")), (Some("cdi"), Some("gpu")));
            let cvd = env(&p, "CUDA_VISIBLE_DEVICES");
            assert_eq!(cvd.is_some(), passed, "{nodes:?}");
            assert_eq!(env(&p, "NVIDIA_VISIBLE_DEVICES").is_some(), passed);
            let lib = find(&p, "/usr/lib/drv").unwrap();
            assert!(
                lib.readonly
                    && lib.source
                        == MountSource::Bind {
                            src: "/opt/drv/lib".into()
                        }
            );
            for n in &nodes {
                let m = find(&p, &n.path.display().to_string()).unwrap();
                assert_eq!(
                    m.source,
                    MountSource::Bind {
                        src: n.host_path.clone()
                    }
                );
                assert!(!m.readonly);
            }
            assert_eq!(p.cdi.as_ref().unwrap().nodes, nodes);
        }
        // a CDI node or mount where GPU support had one replaces it
        let mut x = gpu();
        x.add_cdi(applied(vec![node("/dev/nvidia0", "/srv/dev/nvidia0")]));
        let at = |d: &str| x.mounts.iter().filter(|m| m.dst == Path::new(d)).count();
        assert_eq!((at("/dev/nvidia0"), at("/lib/firmware/x")), (1, 1));
        assert_eq!(
            x.mounts[1].source,
            MountSource::Bind {
                src: "/srv/dev/nvidia0".into()
            }
        );
        // without CDI devices the plan says nothing of them
        let p = plan_in_env(host, &Request::default(), &gpu());
        assert!(p.cdi.is_none() && env(&p, "CUDA_VISIBLE_DEVICES") == Some("3"));
    }

    #[test]
    fn default_mounts_and_identity() {
        let p = run_plan(
            &HOMEDIR,
            &Request::default(),
            Action::Exec(vec!["id".into()]),
            ImageMeta::default(),
            &Extras::default(),
        )
        .unwrap();
        for d in [
            "/proc",
            "/sys",
            "/dev",
            "/tmp",
            "/var/tmp",
            "/etc/hosts",
            "/home/alice",
            "/etc/passwd",
        ] {
            assert!(find(&p, d).is_some(), "missing {d} in {:?}", dsts(&p));
        }
        // cwd is under the bound home: no extra bind, kept as is.
        assert_eq!(p.cwd, Path::new("/home/alice/work"));
        assert!(find(&p, "/home/alice/work").is_none());
        assert_eq!(
            (p.uid.inside, p.uid.outside, p.gid.inside),
            (1000, 1000, 100)
        );
        let MountSource::File { contents } = &find(&p, "/etc/passwd").unwrap().source else {
            panic!()
        };
        assert!(contents.starts_with("root:x:0:0"));
        assert!(contents.contains("alice:x:1000:100:alice:/home/alice:/bin/bash\n"));
        let MountSource::File { contents } = &find(&p, "/etc/group").unwrap().source else {
            panic!()
        };
        assert_eq!(contents, "users:x:100:\n");
        assert_eq!(env(&p, "HOME"), Some("/home/alice"));
        assert_eq!(env(&p, "FOO"), Some("1"));
        assert_eq!(env(&p, "GPURUN_CONTAINER"), Some("/img.sqsh"));
        assert_eq!(p.changes, Changes::None);
    }

    #[test]
    fn hostname() {
        let req = |h: &str| Request {
            hostname: Some(h.into()),
            ..Default::default()
        };
        let p = exec_plan(&req("node-1.example")).unwrap();
        assert_eq!(p.hostname.as_deref(), Some("node-1.example"));
        assert!(exec_plan(&Request::default()).unwrap().hostname.is_none());
        for bad in ["", "-x", "a b", "a/b", &"x".repeat(65)] {
            assert_eq!(
                exec_plan(&req(bad)).unwrap_err(),
                PlanError::Hostname(bad.to_string()),
                "{bad}"
            );
        }
    }
}

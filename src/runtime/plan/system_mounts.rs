//! What every container gets from the kernel: /proc, /sys and /dev (filtered where the GPU plan
//! says), a devpts of its own, and a PID or IPC namespace's own /proc, /dev/shm, /dev/mqueue.

use std::path::Path;

use super::types::{DevEntry, Extras, HostPath, HostView, Request};
use crate::mount::{Mount, MountSource};

/// With a PID namespace of its own, the container gets a /proc of it; with an IPC namespace of
/// its own, a /dev/shm of its own instead of the host's and, where /dev has a place for it (the
/// host's has one, or /dev is gpurun's), its own /dev/mqueue (as enroot's and docker's).
fn own_pid_ipc(req: &Request, own_dev: bool, host: &HostView, mounts: &mut Vec<Mount>) {
    if req.own_pid {
        for m in mounts.iter_mut().filter(|m| m.dst == Path::new("/proc")) {
            m.source = MountSource::Proc;
        }
    }
    if req.own_ipc {
        mounts.push(Mount::new("/dev/shm", MountSource::tmpfs(0o1777)));
        if own_dev || (host.exists)(Path::new("/dev/mqueue")) == HostPath::Exists {
            mounts.push(Mount::new("/dev/mqueue", MountSource::Mqueue));
        }
    }
}

/// /proc, /sys and /dev (only its non-NVIDIA entries where the GPU plan filters them, and a
/// devpts of its own), and a PID namespace's own /proc, an IPC namespace's own /dev/shm.
pub(super) fn base_mounts(req: &Request, host: &HostView, extras: &Extras) -> Vec<Mount> {
    let mut mounts = vec![
        Mount::bind("/proc", "/proc", false),
        Mount::bind("/sys", "/sys", false),
    ];
    if extras.filter_nvidia_dev {
        mounts.push(Mount::new("/dev", MountSource::tmpfs(0o755)));
        // The host's /dev/ptmx opens ptys of the devpts beside it only: a pty needs both.
        mounts.push(Mount::new("/dev/pts", MountSource::Devpts));
        let ptmx = MountSource::Symlink {
            target: "pts/ptmx".into(),
        };
        mounts.push(Mount::new("/dev/ptmx", ptmx));
        // The caller's pty is not in that devpts: bound at /dev/console, as Apptainer does, so
        // that ttyname() finds it by its device (tty, GPG_TTY, password prompts).
        if let Some(tty) = &host.tty {
            mounts.push(Mount::bind(tty, "/dev/console", false).optional());
        }
        let taken = |n: &str| matches!(n, "pts" | "ptmx") || (n == "console" && host.tty.is_some());
        for e in host.dev.iter().filter(|e| !taken(e.name())) {
            match e {
                DevEntry::Symlink { name, target } => mounts.push(Mount::new(
                    Path::new("/dev").join(name),
                    MountSource::Symlink {
                        target: target.clone(),
                    },
                )),
                DevEntry::Other { name } if !name.starts_with("nvidia") => {
                    let p = Path::new("/dev").join(name);
                    mounts.push(Mount::bind(&p, &p, false).optional());
                }
                DevEntry::Other { .. } => {}
            }
        }
    } else {
        mounts.push(Mount::bind("/dev", "/dev", false));
    }
    own_pid_ipc(req, extras.filter_nvidia_dev, host, &mut mounts);
    mounts
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;

    #[test]
    fn filtered_dev() {
        let f = Fixture {
            cwd: "/home/alice",
            dev: vec![
                DevEntry::Other {
                    name: "null".into(),
                },
                DevEntry::Other {
                    name: "nvidia0".into(),
                },
                DevEntry::Other {
                    name: "nvidiactl".into(),
                },
                DevEntry::Other {
                    name: "nvidia-caps".into(),
                },
                DevEntry::Other { name: "shm".into() },
                DevEntry::Symlink {
                    name: "fd".into(),
                    target: "/proc/self/fd".into(),
                },
                DevEntry::Other { name: "pts".into() },
                DevEntry::Other {
                    name: "ptmx".into(),
                },
            ],
        };
        let extras = Extras {
            filter_nvidia_dev: true,
            mounts: vec![Mount::bind("/dev/nvidia0", "/dev/nvidia0", false)],
            ..Default::default()
        };
        let p = run_plan(
            &f,
            &Request::default(),
            Action::Exec(vec![]),
            ImageMeta::default(),
            &extras,
        )
        .unwrap();
        let d = dsts(&p);
        assert_eq!(find(&p, "/dev").unwrap().source, MountSource::tmpfs(0o755));
        assert!(d.contains(&"/dev/null".to_string()) && d.contains(&"/dev/shm".to_string()));
        assert!(
            !d.contains(&"/dev/nvidiactl".to_string())
                && !d.contains(&"/dev/nvidia-caps".to_string())
        );
        assert_eq!(
            d.iter().filter(|x| *x == "/dev/nvidia0").count(),
            1,
            "only the GPU module's own bind"
        );
        assert_eq!(
            find(&p, "/dev/fd").unwrap().source,
            MountSource::Symlink {
                target: "/proc/self/fd".into()
            }
        );
        // The GPU binds come after /dev's tmpfs, or they would be hidden by it.
        let pos = |x: &str| d.iter().position(|y| y == x).unwrap();
        assert!(pos("/dev/nvidia0") > pos("/dev"));
        // a devpts of its own, and /dev/ptmx into it, not the host's
        assert_eq!(find(&p, "/dev/pts").unwrap().source, MountSource::Devpts);
        assert_eq!(
            find(&p, "/dev/ptmx").unwrap().source,
            MountSource::Symlink {
                target: "pts/ptmx".into()
            }
        );
        let one = |x: &str| d.iter().filter(|y| *y == x).count() == 1;
        assert!(one("/dev/pts") && one("/dev/ptmx"), "{d:?}");
        assert!(pos("/dev/pts") > pos("/dev"));
        // with the host's whole /dev, its own
        let p = exec_plan(&Request::default()).unwrap();
        assert!(find(&p, "/dev/pts").is_none() && find(&p, "/dev/ptmx").is_none());
    }

    #[test]
    fn callers_terminal_in_filtered_dev() {
        let extras = Extras {
            filter_nvidia_dev: true,
            ..Default::default()
        };
        let console = vec![DevEntry::Other {
            name: "console".into(),
        }];
        let mut host = alice("/", Vec::new(), console);
        let image = image_of(ImageMeta::default());
        let exec = |host: &HostView| {
            plan(
                &Request::default(),
                &Action::Exec(vec![]),
                host,
                &image,
                &extras,
            )
            .unwrap()
        };
        host.tty = Some("/dev/pts/7".into());
        let p = exec(&host);
        let c: Vec<&Mount> = (p.mounts.iter())
            .filter(|m| m.dst == Path::new("/dev/console"))
            .collect();
        assert_eq!(
            c,
            [&Mount::bind("/dev/pts/7", "/dev/console", false).optional()]
        );
        // without a terminal, the host's console entry as any other
        host.tty = None;
        let p = exec(&host);
        assert_eq!(
            find(&p, "/dev/console").unwrap().source,
            MountSource::Bind {
                src: "/dev/console".into()
            }
        );
    }

    #[test]
    fn namespaces_of_its_own() {
        let req = |own_pid, own_ipc| Request {
            own_pid,
            own_ipc,
            ..Request::default()
        };
        // (pid, ipc) -> /proc of its own, /dev/shm of its own
        for (pid, ipc) in [(true, true), (true, false), (false, true), (false, false)] {
            let p = exec_plan(&req(pid, ipc)).unwrap();
            assert_eq!((p.own_pid, p.own_ipc), (pid, ipc));
            let proc = at_of(&p, "/proc").unwrap();
            assert_eq!(proc == MountSource::Proc, pid, "{proc:?}");
            let shm = at_of(&p, "/dev/shm");
            assert_eq!(shm == Some(MountSource::tmpfs(0o1777)), ipc, "{shm:?}");
            assert_eq!(shm.is_none(), !ipc);
            // its own message queues (the fixture's host has a /dev/mqueue)
            let mq = at_of(&p, "/dev/mqueue");
            assert_eq!(mq.is_some(), ipc, "{mq:?}");
            assert!(mq.is_none() || mq == Some(MountSource::Mqueue));
        }
        // --net, --network none; no other network
        let net = |net, network: Option<&str>| Request {
            net,
            network: network.map(String::from),
            ..Request::default()
        };
        assert!(!exec_plan(&net(false, None)).unwrap().own_net);
        assert!(exec_plan(&net(true, None)).unwrap().own_net);
        assert!(exec_plan(&net(true, Some("none"))).unwrap().own_net);
        assert!(exec_plan(&net(false, Some("none"))).unwrap().own_net);
        let e = exec_plan(&net(true, Some("bridge"))).unwrap_err();
        assert_eq!(e, PlanError::Network("bridge".into()));
        assert!(
            e.to_string()
                .starts_with("--network bridge: gpurun has only none"),
            "{e}"
        );
    }
}

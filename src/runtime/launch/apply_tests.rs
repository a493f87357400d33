//! The exact mount and namespace sequence that representative plans apply, on the recording
//! fake of `sys::seam` (no root needed): what C does in root.rs `setup_root`, and what P
//! enters before the fork (mod.rs `enter_namespaces`).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use super::enter_namespaces;
use super::interface::Lower;
use super::root::{setup_root, RootError};
use crate::mount::{Mount, MountFlags, MountSource, OverlayDriver, Propagation, PropagationKind};
use crate::runtime::plan::{Changes, IdMap, Plan, RootSource};
use crate::sys::fake::Recorder;
use crate::sys::seam::Mounts;
use nix::errno::Errno;

/// alice's plan of `mounts` and `changes` on the directory image /img, otherwise plain.
fn plan(mounts: Vec<Mount>, changes: Changes) -> Plan {
    Plan {
        root: RootSource::Dir("/img".into()),
        uid: IdMap {
            inside: 1000,
            outside: 1000,
        },
        gid: IdMap {
            inside: 100,
            outside: 100,
        },
        mounts,
        env: Vec::new(),
        cwd: "/".into(),
        cwd_asked: false,
        argv: vec!["true".into()],
        changes,
        overlay_driver: OverlayDriver::Kernel,
        own_pid: false,
        own_ipc: false,
        own_net: false,
        fake_ids: false,
        hostname: None,
        cdi: None,
        entry_env: None,
    }
}

fn at(dst: &str, source: MountSource) -> Mount {
    Mount {
        dst: dst.into(),
        source,
        readonly: false,
        optional: false,
        flags: MountFlags::default(),
    }
}

fn tmpfs(dst: &str, mode: u32) -> Mount {
    at(dst, MountSource::tmpfs(mode))
}

fn symlink(dst: &str, target: &str) -> Mount {
    let target = PathBuf::from(target);
    at(dst, MountSource::Symlink { target })
}

fn rslave(mut m: Mount) -> Mount {
    let p = Propagation {
        kind: PropagationKind::Slave,
        recursive: true,
    };
    m.flags.propagation = Some(p);
    m
}

/// C's mount namespace, made private.
const PRIVATE_NS: [&str; 2] = ["unshare mnt", "propagation / Private"];

/// The directory image attached read-only on the stage.
const IMAGE: [&str; 5] = [
    "open_tree /img",
    "tmpfs /tmp mode=755 -",
    "mkdir /tmp/lower",
    "move_mount /img /tmp/lower",
    "remount /tmp/lower ro",
];

/// A read-only root: a tmpfs overlay on the image, for the mount points it lacks.
const RO_ROOT: [&str; 5] = [
    "mkdir /tmp/root",
    "mkdir /tmp/upper1",
    "mkdir /tmp/work1",
    "overlay /tmp/root lower=/tmp/lower upper=/tmp/upper1 work=/tmp/work1",
    "mkdir /tmp/files",
];

/// The sequence `setup_root` makes for `plan` on `os`, and the root it returns.
fn applied(os: &Recorder, plan: &Plan) -> Result<(Vec<String>, PathBuf), RootError> {
    let root = setup_root(os, plan, &Lower::Dir("/img".into()))?;
    Ok((os.lines(), root))
}

#[test]
fn binds_contain_and_namespaces() {
    let slave = rslave(Mount::bind("/scratch", "/scratch", false));
    let net = Plan {
        own_net: true,
        hostname: Some("box".into()),
        ..plan(vec![], Changes::None)
    };
    let contain = vec![
        tmpfs("/tmp", 0o1777),
        tmpfs("/var/tmp", 0o1777),
        at("/proc", MountSource::Proc),
        tmpfs("/dev/shm", 0o1777),
        at("/dev/mqueue", MountSource::Mqueue),
    ];
    let table: Vec<(&str, Plan, Vec<&str>)> = vec![
        (
            // a bind read-only, and one whose source is captured before the namespace is
            // made private (rslave), so that the host's mounts under it still arrive
            "bind ro, bind rslave",
            plan(
                vec![Mount::bind("/srv/data", "/data", true), slave],
                Changes::None,
            ),
            [
                &["unshare mnt", "open_tree /scratch", "propagation / Private"][..],
                &["open_tree /srv/data"],
                &IMAGE,
                &RO_ROOT,
                &[
                    "setattr /srv/data ro",
                    "move_mount /srv/data /tmp/root/data",
                    "move_mount /scratch /tmp/root/scratch",
                    "propagation /tmp/root/scratch rSlave",
                    "remount /tmp/root ro",
                ],
            ]
            .concat(),
        ),
        (
            "--contain --containall",
            plan(contain, Changes::None),
            [
                &PRIVATE_NS[..],
                &IMAGE,
                &RO_ROOT,
                &[
                    "tmpfs /tmp/root/tmp mode=1777 -",
                    "tmpfs /tmp/root/var/tmp mode=1777 -",
                    "proc /tmp/root/proc",
                    "tmpfs /tmp/root/dev/shm mode=1777 -",
                    "mqueue /tmp/root/dev/mqueue",
                    "remount /tmp/root ro",
                ],
            ]
            .concat(),
        ),
        (
            "--net --hostname box",
            net,
            [
                &PRIVATE_NS[..],
                &["unshare uts, hostname box", "unshare net, lo up"],
                &IMAGE,
                &RO_ROOT,
                &["remount /tmp/root ro"],
            ]
            .concat(),
        ),
    ];
    for (name, plan, want) in table {
        let os = Recorder::new();
        let (got, root) = applied(&os, &plan).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, want, "{name}");
        assert_eq!(root, Path::new("/tmp/root"), "{name}");
    }
}

/// The image as its server lends it (a .sqsh): the server's read-only mount is the root itself,
/// and a mount point it lacks (EROFS) gets an overlay on its nearest directory, the root here,
/// made read-only again once the mounts are in.
#[test]
fn served_image_and_a_mount_point_it_lacks() {
    use crate::runtime::image_server::attach::Attached;
    let os = Recorder::new().failing_once("open_in_root", "/data", Errno::EROFS);
    let devnull = || OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
    let attached = Attached {
        mount: os.open_path(Path::new("/served")).unwrap(),
        conn: devnull(),
        server: 1,
    };
    let lower = Lower::Served {
        image: "/img.sqsh".into(),
        attached,
    };
    let plan = plan(vec![Mount::bind("/srv/data", "/data", true)], Changes::None);
    let root = setup_root(&os, &plan, &lower).unwrap();
    let want = [
        "unshare mnt",
        "propagation / Private",
        "open_tree /srv/data",
        "tmpfs /tmp mode=755 -",
        "mkdir /tmp/lower",
        "move_mount /served /tmp/lower",
        "mkdir /tmp/files",
        "mkdir /tmp/upper1",
        "mkdir /tmp/work1",
        "overlay /tmp/lower lower=/tmp/lower upper=/tmp/upper1 work=/tmp/work1",
        "setattr /srv/data ro",
        "move_mount /srv/data /tmp/lower/data",
        "remount /tmp/lower ro",
    ];
    assert_eq!(os.lines(), want);
    assert_eq!(root, Path::new("/tmp/lower"));
}

/// GPU devices in gpurun's own /dev, and driver files as gpu::prepare plans them.
#[test]
fn gpu_devices_and_driver_files() {
    let params = MountSource::File {
        contents: "ModifyDeviceFiles: 0\n".into(),
    };
    let mounts = vec![
        tmpfs("/dev", 0o755),
        at("/dev/pts", MountSource::Devpts),
        symlink("/dev/ptmx", "pts/ptmx"),
        Mount::bind("/dev/nvidia0", "/dev/nvidia0", false),
        Mount::bind("/dev/nvidiactl", "/dev/nvidiactl", false),
        tmpfs("/.gpurun/nvidia", 0o755),
        Mount::bind("/usr/lib64", "/.gpurun/nvidia/host/0", true),
        symlink(
            "/.gpurun/nvidia/lib/libcuda.so.1",
            "/.gpurun/nvidia/host/0/libcuda.so.550.54.14",
        ),
        Mount::bind(
            "/usr/bin/nvidia-smi",
            "/.gpurun/nvidia/bin/nvidia-smi",
            true,
        ),
        Mount {
            readonly: true,
            ..at("/proc/driver/nvidia/params", params)
        },
    ];
    let os = Recorder::new()
        .with_file("/dev/nvidia0")
        .with_file("/dev/nvidiactl")
        .with_file("/usr/bin/nvidia-smi")
        .with_file("/tmp/files/9");
    let (got, _) = applied(&os, &plan(mounts, Changes::None)).unwrap();
    let want = [
        &PRIVATE_NS[..],
        &[
            "open_tree /dev/nvidia0",
            "open_tree /dev/nvidiactl",
            "open_tree /usr/lib64",
            "open_tree /usr/bin/nvidia-smi",
        ],
        &IMAGE,
        &RO_ROOT,
        &[
            "tmpfs /tmp/root/dev mode=755 -",
            "devpts /tmp/root/dev/pts",
            "symlink in root /dev/ptmx -> pts/ptmx",
            "move_mount /dev/nvidia0 /tmp/root/dev/nvidia0",
            "move_mount /dev/nvidiactl /tmp/root/dev/nvidiactl",
            "tmpfs /tmp/root/.gpurun/nvidia mode=755 -",
            "setattr /usr/lib64 ro",
            "move_mount /usr/lib64 /tmp/root/.gpurun/nvidia/host/0",
            "symlink in root /.gpurun/nvidia/lib/libcuda.so.1 -> /.gpurun/nvidia/host/0/libcuda.so.550.54.14",
            "setattr /usr/bin/nvidia-smi ro",
            "move_mount /usr/bin/nvidia-smi /tmp/root/.gpurun/nvidia/bin/nvidia-smi",
            "write /tmp/files/9",
            "open_tree /tmp/files/9",
            "setattr /tmp/files/9 ro",
            "move_mount /tmp/files/9 /tmp/root/proc/driver/nvidia/params",
            "remount /tmp/root ro",
        ],
    ]
    .concat();
    assert_eq!(got, want);
}

/// The root's changes: `--overlay DIR` (and `:ro`), `--writable-tmpfs` with `--fakeroot`'s
/// id files written into it, and the read-only bind where the root refuses that write.
#[test]
fn writable_roots() {
    let overlay = |readonly| Changes::Overlay {
        dir: "/work/ov".into(),
        readonly,
    };
    let kept = [
        "open_tree /work/ov",
        "open_tree /img",
        "tmpfs /tmp mode=755 -",
        "mkdir /tmp/lower",
        "move_mount /img /tmp/lower",
        "remount /tmp/lower ro",
        "mkdir /tmp/overlay",
        "move_mount /work/ov /tmp/overlay",
        "mkdir /tmp/root",
    ];
    let passwd = MountSource::RootFile {
        contents: "root:x:0:0::/root:/bin/sh\n".into(),
    };
    let resolv = MountSource::HostCopy {
        src: "/etc/resolv.conf".into(),
    };
    let localtime = MountSource::HostCopy {
        src: "/etc/localtime".into(),
    };
    let fakeroot = || {
        let ids = vec![
            at("/etc/passwd", passwd.clone()),
            at("/etc/resolv.conf", resolv.clone()),
            at("/etc/localtime", localtime.clone()),
        ];
        plan(ids, Changes::Tmpfs)
    };
    let tmpfs_root = [
        &PRIVATE_NS[..],
        &["open_tree /etc/resolv.conf", "open_tree /etc/localtime"],
        &IMAGE,
        &[
            "mkdir /tmp/root",
            "mkdir /tmp/upper1",
            "mkdir /tmp/work1",
            "overlay /tmp/root lower=/tmp/lower upper=/tmp/upper1 work=/tmp/work1",
            "mkdir /tmp/files",
        ],
    ]
    .concat();
    // a host symlink stays one where the image has its target (enroot's /etc/localtime)
    let host = || {
        let zone = "/usr/share/zoneinfo/UTC";
        Recorder::new()
            .with_file("/etc/resolv.conf")
            .with_link("/etc/localtime", zone)
    };
    let localtime_copied = [
        "unlink in root /etc/localtime",
        "symlink in root /etc/localtime -> /usr/share/zoneinfo/UTC",
    ];
    let refusing = host().failing("write_in_root", "/etc/passwd", Errno::EROFS);
    let table: Vec<(&str, Plan, Recorder, Vec<&str>)> = vec![
        (
            "--overlay DIR",
            plan(vec![], overlay(false)),
            Recorder::new(),
            [
                &PRIVATE_NS[..],
                &kept,
                &[
                    "mkdir /tmp/overlay/upper",
                    "mkdir /tmp/overlay/work",
                    "overlay /tmp/root lower=/tmp/lower upper=/tmp/overlay/upper work=/tmp/overlay/work",
                    "mkdir /tmp/files",
                ],
            ]
            .concat(),
        ),
        (
            "--overlay DIR:ro",
            plan(vec![], overlay(true)),
            Recorder::new(),
            [
                &PRIVATE_NS[..],
                &kept,
                &[
                    "overlay /tmp/root lower=/tmp/overlay/upper:/tmp/lower ro",
                    "mkdir /tmp/files",
                    "remount /tmp/root ro",
                ],
            ]
            .concat(),
        ),
        (
            "--writable-tmpfs --fakeroot",
            fakeroot(),
            host(),
            [
                &tmpfs_root[..],
                &[
                    "write in root /etc/passwd",
                    "unlink in root /etc/resolv.conf",
                    "write in root /etc/resolv.conf",
                ],
                &localtime_copied,
            ]
            .concat(),
        ),
        (
            "--fakeroot, the root refuses /etc/passwd",
            fakeroot(),
            refusing,
            [
                &tmpfs_root[..],
                &[
                    "write /tmp/files/0",
                    "open_tree /tmp/files/0",
                    "setattr /tmp/files/0 ro",
                    "move_mount /tmp/files/0 /tmp/root/etc/passwd",
                    "unlink in root /etc/resolv.conf",
                    "write in root /etc/resolv.conf",
                ],
                &localtime_copied,
            ]
            .concat(),
        ),
    ];
    for (name, plan, os, want) in table {
        let (got, _) = applied(&os, &plan).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got, want, "{name}");
    }
}

/// A mount the kernel refuses ends the start with its one line (in a directory image, with the
/// hint), unless it is optional.
#[test]
fn refused_mounts() {
    let bind = Mount::bind("/srv/data", "/data", false);
    let os = Recorder::new().failing("attach_tree", "/data", Errno::EACCES);
    let e = applied(&os, &plan(vec![bind.clone()], Changes::None)).unwrap_err();
    let hint = " (if this is in the image directory /img: gpurun makes mount points only in a \
                directory image that is yours and has no mounts below it; chown it, or use a \
                .sqsh image)";
    let want = "cannot mount /data: attach_tree /data: EACCES: Permission denied";
    assert_eq!(e.to_string(), format!("{want}{hint}"));
    let RootError::Mount { dst, source, .. } = e else {
        panic!("{e:?}")
    };
    assert_eq!(
        (dst.as_path(), source.errno()),
        (Path::new("/data"), Errno::EACCES)
    );
    let os = Recorder::new().failing("attach_tree", "/data", Errno::EACCES);
    let later = tmpfs("/scratch", 0o1777);
    let (got, _) = applied(&os, &plan(vec![bind.optional(), later], Changes::None)).unwrap();
    let tail = [
        "tmpfs /tmp/root/scratch mode=1777 -",
        "remount /tmp/root ro",
    ];
    assert_eq!(got[got.len() - 2..], tail);
    // a missing optional source: nothing is captured, nothing attached
    let os = Recorder::new().failing("clone_tree", "/missing", Errno::ENOENT);
    let gone = Mount::bind("/missing", "/m", true).optional();
    let (got, _) = applied(&os, &plan(vec![gone], Changes::None)).unwrap();
    let want = [&PRIVATE_NS[..], &IMAGE, &RO_ROOT, &["remount /tmp/root ro"]].concat();
    assert_eq!(got, want);
}

/// A root's overlay the kernel refuses: the option, the call, the path and the errno, and what
/// the driver needs.
#[test]
fn refused_overlays() {
    let os = Recorder::new().failing("mount_overlay", "/tmp/root", Errno::EINVAL);
    let e = applied(&os, &plan(vec![], Changes::Tmpfs)).unwrap_err();
    let want = "--writable-tmpfs: mount_overlay /tmp/root: EINVAL: Invalid argument (overlayfs in \
                a user namespace needs Linux ≥ 5.11 and a local file system)";
    assert_eq!(e.to_string(), want);
    let os = Recorder::new().failing("open_path", "/tmp/overlay/upper", Errno::ENOENT);
    let ro = Changes::Overlay {
        dir: "/work/ov".into(),
        readonly: true,
    };
    let e = applied(&os, &plan(vec![], ro)).unwrap_err();
    let want = "--overlay /work/ov: has no upper/ (a writable --overlay run makes it)";
    assert_eq!(e.to_string(), want);
}

/// What P enters before the fork: the user namespace maps the caller to the plan's ids (0 with
/// --fakeroot), and --containall adds the PID and IPC namespaces.
#[test]
fn user_pid_and_ipc_namespaces() {
    let fakeroot = Plan {
        uid: IdMap {
            inside: 0,
            outside: 1000,
        },
        gid: IdMap {
            inside: 0,
            outside: 100,
        },
        ..plan(vec![], Changes::None)
    };
    let containall = Plan {
        own_pid: true,
        own_ipc: true,
        ..plan(vec![], Changes::None)
    };
    let table = [
        (
            "plain",
            plan(vec![], Changes::None),
            vec!["unshare user, map 1000:100"],
        ),
        ("--fakeroot", fakeroot, vec!["unshare user, map 0:0"]),
        (
            "--containall",
            containall,
            vec!["unshare user, map 1000:100", "unshare pid=true ipc=true"],
        ),
    ];
    for (name, plan, want) in table {
        let os = Recorder::new();
        enter_namespaces(&os, &plan).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(os.lines(), want, "{name}");
    }
}

//! The image server's own namespaces, its FUSE mount and what an Attach lends, on the recording
//! fake of `sys::seam` (no root, no /dev/fuse needed).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;

use super::serve::{copy_of_mount, mount_image, ServerError, MOUNT};
use crate::sys::fake::{Call, Recorder};
use crate::sys::seam::Mounts;

const IMAGE: &str = "/home/alice/pytorch.sif";

/// The server's setup for alice (uid 1000, gid 100): the connection it serves, and its calls.
fn setup(os: &Recorder) -> Result<OwnedFd, ServerError> {
    mount_image(os, Path::new(IMAGE), (1000, 100))
}

#[test]
fn the_server_maps_its_own_ids_and_mounts_the_image_read_only_at_tmp() {
    let os = Recorder::new();
    let fuse = setup(&os).expect("set up");
    let fd = fuse.as_raw_fd();
    let fuse_mount = format!(
        "mount fuse.gpurun {IMAGE} on /tmp MsFlags(MS_RDONLY | MS_NOSUID | MS_NODEV) \
         fd={fd},rootmode=40000,user_id=1000,group_id=100"
    );
    let want = [
        "unshare user, map 1000:100",
        "unshare mnt",
        "propagation / Receive",
        "open /dev/fuse",
        &fuse_mount,
    ];
    assert_eq!(os.lines(), want);
}

#[test]
fn an_attach_lends_a_recursive_detached_copy_of_the_mount() {
    let os = Recorder::new();
    let _fuse = setup(&os).expect("set up");
    let root = os.open_path(Path::new(MOUNT)).expect("root");
    let _copy = copy_of_mount(&os, &root).expect("copy");
    // OPEN_TREE_CLONE is 1: a copy, not the server's own mount; close-on-exec; submounts too
    let flags = 1 | libc::O_CLOEXEC as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint;
    let lent = Call::CloneTree {
        path: "/tmp".into(),
        flags,
    };
    assert_eq!(os.calls().last(), Some(&lent));
    assert_eq!(
        os.lines().last().map(String::as_str),
        Some("open_tree /tmp")
    );
}

/// Whether an error is of the kind a step's failure must give.
type Kind = fn(&ServerError) -> bool;

/// What a failing step gives: no further step, and an error that says which; `NoFuse` has the
/// start fall back to an extracted image.
#[test]
fn a_failing_step_stops_the_setup_with_its_own_error() {
    use ServerError as E;
    let user = |e: &E| matches!(e, E::UserNamespace(_));
    let mount = |e: &E| matches!(e, E::Mount { path, .. } if path == Path::new(IMAGE));
    let no_fuse = |e: &E| matches!(e, E::NoFuse(_));
    // the method that fails, at which path, the error it must give, the calls made before
    let table: [(&str, &str, Kind, usize); 4] = [
        ("enter_user_namespace", "-", user, 0),
        ("enter_mount_namespace_then", "-", mount, 1),
        ("open_fuse", "/dev/fuse", no_fuse, 3),
        ("mount_fuse", MOUNT, no_fuse, 4),
    ];
    for (method, path, kind, made) in table {
        let os = Recorder::new().failing(method, path, Errno::ENODEV);
        let e = setup(&os).expect_err(method);
        assert!(kind(&e), "{method}: {e}");
        assert_eq!(os.lines().len(), made, "{method}: {:?}", os.lines());
    }
}

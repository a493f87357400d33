//! Named containers (`--container-name`) at the job's end: their directories, which gpurun keeps
//! as `JOB.NAME` in `hold_state::named_containers_dir` (gpurun's src/runtime/named.rs),
//! are the job's and go with it.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::state::Holder;

/// Whether `name` in the base directory is one of job `job`'s containers.
pub fn is_jobs(name: &str, job: u32) -> bool {
    name.strip_prefix(&format!("{job}."))
        .is_some_and(|n| !n.is_empty() && n != "." && n != "..")
}

/// Remove job `job`'s named containers of user `uid` (as root, in the job's epilog). The base
/// directory is opened without following a link and checked to be the user's, and entries are
/// reached through that open directory: the user cannot steer the removal elsewhere.
pub fn remove_job_containers(base: &Path, job: u32, uid: u32) -> usize {
    let Ok(dir) = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(base)
    else {
        return 0;
    };
    if dir.metadata().map(|m| m.uid()).ok() != Some(uid) {
        return 0;
    }
    let held = PathBuf::from(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&dir)
    ));
    let Ok(entries) = std::fs::read_dir(&held) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if is_jobs(&name, job) {
            // remove_dir_all follows no link inside
            removed += usize::from(std::fs::remove_dir_all(held.join(&name)).is_ok());
        }
    }
    removed
}

/// The inode numbers of process `pid`'s user and mount namespaces.
fn ns_inodes(pid: i32) -> Option<(u64, u64)> {
    let ino = |ns: &str| std::fs::metadata(format!("/proc/{pid}/ns/{ns}")).map(|m| m.ino());
    Some((ino("user").ok()?, ino("mnt").ok()?))
}

/// In the first task of a step, as the user: say that its holder runs, for later steps of the
/// job to join. Written whole beside its place, in the container's directory, which `gpurun
/// hold --name` made private (an unnamed step's, `JOB.JOB.STEP` as pyxis names it, is made
/// here, private too).
pub fn record_running(uid: u32, name: &str, h: &Holder) -> Result<(), String> {
    let (user_ns, mnt_ns) = ns_inodes(h.pid).ok_or("its holder is gone")?;
    let base = hold_state::named_containers_dir(uid);
    for dir in [base.clone(), base.join(name)] {
        private_dir(&dir, uid)?;
    }
    let state = hold_state::State {
        pid: h.pid,
        root: h.root.clone(),
        env: h.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        cwd: h.cwd.clone(),
    };
    let text = hold_state::Running {
        state,
        user_ns,
        mnt_ns,
    }
    .to_line();
    let path = hold_state::running_record(uid, name);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!(
            "cannot record the running container in {}: {e}",
            path.display()
        )
    })
}

/// Whether user `uid`'s named container `JOB.NAME` exists and the image it was made from is
/// still there (its record, `image`, is the user's own, in directories closed to others).
pub fn image_kept(uid: u32, name: &str) -> bool {
    let dir = hold_state::named_containers_dir(uid).join(name);
    let record = dir.join("image");
    let trusted = [hold_state::named_containers_dir(uid), dir, record.clone()]
        .iter()
        .all(|p| owned(p, uid));
    trusted
        && std::fs::read_to_string(&record)
            .is_ok_and(|image| std::fs::metadata(image.trim_end()).is_ok_and(|m| m.is_file()))
}

/// `dir` made private to `uid` where it is missing; one already there must be `uid`'s, closed
/// to others. gpurun's `store::private_dir` is the same rule for gpurun's places; the plugin, a
/// crate apart, uses nothing of gpurun's.
fn private_dir(dir: &Path, uid: u32) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(format!("cannot create {}: {e}", dir.display()))
        }
        _ if owned(dir, uid) => Ok(()),
        _ => Err(format!(
            "{} is not a directory of yours closed to others; remove it",
            dir.display()
        )),
    }
}

/// `path` is a directory or file of `uid`'s, no link, that nobody else may write.
fn owned(path: &Path, uid: u32) -> bool {
    std::fs::symlink_metadata(path)
        .is_ok_and(|m| !m.file_type().is_symlink() && m.uid() == uid && m.mode() & 0o022 == 0)
}

/// The holder of user `uid`'s named container `JOB.NAME` if a step runs in it now: its record
/// is trusted only where the directories and the file are the user's own, closed to others,
/// and the recorded process still has the recorded namespaces.
pub fn find_running(uid: u32, name: &str) -> Option<Holder> {
    let path = hold_state::running_record(uid, name);
    let dir = path.parent()?;
    if !owned(&hold_state::named_containers_dir(uid), uid) || !owned(dir, uid) {
        return None;
    }
    let mut f = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .ok()?;
    let md = f.metadata().ok()?;
    if !md.is_file() || md.uid() != uid || md.mode() & 0o022 != 0 {
        return None;
    }
    let mut text = String::new();
    f.read_to_string(&mut text).ok()?;
    let r = hold_state::Running::parse(&text).ok()?;
    if ns_inodes(r.state.pid) != Some((r.user_ns, r.mnt_ns)) {
        return None;
    }
    Some(Holder {
        pid: r.state.pid,
        env: r.state.env_pairs(),
        root: r.state.root,
        cwd: r.state.cwd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_entries() {
        for (n, want) in [
            ("7.c1", true),
            ("7.a.b", true),
            ("70.c1", false),
            ("8.c1", false),
            ("7.", false),
            ("7..", false),
            ("c1", false),
        ] {
            assert_eq!(is_jobs(n, 7), want, "{n}");
        }
    }

    /// A record is found while its process has the recorded namespaces, and not through a
    /// directory others may write or once the namespaces differ.
    #[test]
    fn running_records() {
        let uid = unsafe { libc::getuid() };
        let name = format!("4294967000.rec{}", std::process::id());
        let base = hold_state::named_containers_dir(uid);
        let dir = base.join(&name);
        let h = Holder {
            pid: std::process::id() as i32,
            root: "/".into(),
            env: vec![("A".into(), "b=c".into())],
            cwd: "/w".into(),
        };
        // an unnamed step's directory is made here, private
        record_running(uid, &name, &h).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(find_running(uid, &name), Some(h.clone()));
        let mode = |m| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(0o777);
        assert_eq!(find_running(uid, &name), None);
        let e = record_running(uid, &name, &h).unwrap_err();
        assert!(
            e.contains("not a directory of yours closed to others"),
            "{e}"
        );
        mode(0o700);
        // pid 1 is in other namespaces than this test only in a container: forge the inodes
        let path = hold_state::running_record(uid, &name);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut r = hold_state::Running::parse(&text).unwrap();
        r.mnt_ns += 1;
        std::fs::write(&path, r.to_line()).unwrap();
        assert_eq!(find_running(uid, &name), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn kept_images() {
        let uid = unsafe { libc::getuid() };
        let name = format!("4294967000.img{}", std::process::id());
        let dir = hold_state::named_containers_dir(uid).join(&name);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(!image_kept(uid, &name), "no record");
        let image = dir.join("copy.sqsh");
        std::fs::write(dir.join("image"), image.to_str().unwrap()).unwrap();
        assert!(!image_kept(uid, &name), "the recorded image is gone");
        std::fs::write(&image, b"x").unwrap();
        assert!(image_kept(uid, &name));
        let mode = |m| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.join("image"), std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(0o666);
        assert!(!image_kept(uid, &name), "a record others may write");
        mode(0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn removes_only_the_jobs() {
        let t = std::env::temp_dir().join(format!("gpurun-named-test-{}", std::process::id()));
        for d in ["7.c1/overlay/upper", "7.c2", "8.c1"] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        let uid = std::fs::metadata(&t).unwrap().uid();
        assert_eq!(remove_job_containers(&t, 7, uid + 1), 0);
        assert_eq!(remove_job_containers(&t, 7, uid), 2);
        let left: Vec<_> = std::fs::read_dir(&t)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, ["8.c1"]);
        std::fs::remove_dir_all(&t).unwrap();
    }
}

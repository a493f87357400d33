//! Named containers (`--container-name`): their directories, which gpurun keeps as `JOB.NAME`
//! in `hold_state::named_containers_dir` (gpurun's src/runtime/named.rs), are the job's and go
//! with it (step_end.rs says which). The user's directory there is made by the plugin as root
//! (`prepare`), in the site's `containers_dir=`, which only root may change: no user can make
//! it, or squat it, first.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use crate::state::Holder;

#[derive(Debug, thiserror::Error)]
pub enum NamedError {
    /// The site's `containers_dir=` (root's), or the user's directory in it.
    #[error("containers_dir={}: {source}", base.display())]
    OpenBase { base: PathBuf, source: io::Error },
    #[error("containers_dir={}: owned by uid {uid} with mode {mode:04o}; it must be root's and closed to others (remove it, or name another in plugstack.conf)", base.display())]
    UnsafeBase { base: PathBuf, uid: u32, mode: u32 },
    #[error("containers_dir={}: cannot make {name}: {source}", base.display())]
    MakeUsers {
        base: PathBuf,
        name: String,
        source: Errno,
    },
    #[error("containers_dir={}: {name}: {source}", base.display())]
    OpenUsers {
        base: PathBuf,
        name: String,
        source: io::Error,
    },
    /// Giving the user's directory to the user (fchown, fchmod).
    #[error("containers_dir={}: {name}: {source}", base.display())]
    GiveUsers {
        base: PathBuf,
        name: String,
        source: Errno,
    },
    #[error("its holder is gone")]
    Gone,
    #[error("cannot create {}: {source}", dir.display())]
    Create { dir: PathBuf, source: io::Error },
    #[error("{} is not a directory of yours closed to others; remove it", dir.display())]
    NotPrivate { dir: PathBuf },
    #[error("cannot record the running container in {}: {source}", path.display())]
    Record { path: PathBuf, source: io::Error },
}

/// Whether `name` in the base directory is one of job `job`'s containers.
pub fn is_jobs(name: &str, job: u32) -> bool {
    name.strip_prefix(&format!("{job}."))
        .is_some_and(|n| !n.is_empty() && n != "." && n != "..")
}

/// As root, before the step's holder starts: user `uid`'s directory in `base` (made if
/// missing, with `base`), the user's and private. `base` must be root's and closed to others;
/// the user's directory is reached through a handle on it, never by a path the user could
/// change.
pub fn prepare(base: &Path, uid: u32, gid: u32) -> Result<PathBuf, NamedError> {
    use std::os::unix::fs::DirBuilderExt;
    let path = || base.to_path_buf();
    let open = |source| NamedError::OpenBase {
        base: path(),
        source,
    };
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(base);
    let b = open_dir(base).map_err(open)?;
    let m = b.metadata().map_err(open)?;
    if m.uid() != 0 || m.mode() & 0o022 != 0 {
        let (uid, mode) = (m.uid(), m.mode() & 0o7777);
        return Err(NamedError::UnsafeBase {
            base: path(),
            uid,
            mode,
        });
    }
    let name = uid.to_string();
    let mode = nix::sys::stat::Mode::from_bits_truncate(0o700);
    match nix::sys::stat::mkdirat(&b, name.as_str(), mode) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(source) => {
            return Err(NamedError::MakeUsers {
                base: path(),
                name,
                source,
            })
        }
    }
    let held = PathBuf::from(format!("/proc/self/fd/{}/{name}", b.as_raw_fd()));
    let d = open_dir(&held).map_err(|source| NamedError::OpenUsers {
        base: path(),
        name: name.clone(),
        source,
    })?;
    // only root can have made it: give it to the user, closed to others
    nix::unistd::fchown(&d, Some(uid.into()), Some(gid.into()))
        .and_then(|()| nix::sys::stat::fchmod(&d, mode))
        .map_err(|source| NamedError::GiveUsers {
            base: path(),
            name,
            source,
        })?;
    Ok(hold_state::named_containers_dir(base, uid))
}

fn open_dir(p: &Path) -> std::io::Result<File> {
    File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(p)
}

/// The record directory of an unnamed step's container: `JOB.JOB.STEP`, pyxis's name for it.
pub fn step_record(job: u32, step: u32) -> String {
    format!("{job}.{job}.{step}")
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
pub fn record_running(base: &Path, uid: u32, name: &str, h: &Holder) -> Result<(), NamedError> {
    let (user_ns, mnt_ns) = ns_inodes(h.pid).ok_or(NamedError::Gone)?;
    let base = hold_state::named_containers_dir(base, uid);
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
    let path = base.join(name).join("running");
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let written = File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    written.map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        NamedError::Record { path, source }
    })
}

/// Whether user `uid`'s named container `JOB.NAME` exists and the image it was made from is
/// still there (its record, `image`, is the user's own, in directories closed to others).
pub fn image_kept(base: &Path, uid: u32, name: &str) -> bool {
    let dir = hold_state::named_containers_dir(base, uid).join(name);
    let record = dir.join("image");
    let trusted = [
        hold_state::named_containers_dir(base, uid),
        dir,
        record.clone(),
    ]
    .iter()
    .all(|p| owned(p, uid));
    trusted
        && std::fs::read_to_string(&record)
            .is_ok_and(|image| std::fs::metadata(image.trim_end()).is_ok_and(|m| m.is_file()))
}

/// `dir` made private to `uid` where it is missing; one already there must be `uid`'s, closed
/// to others. gpurun's `store::private_dir` is the same rule for gpurun's places; the plugin, a
/// crate apart, uses nothing of gpurun's.
fn private_dir(dir: &Path, uid: u32) -> Result<(), NamedError> {
    use std::os::unix::fs::DirBuilderExt;
    let dir_ = || dir.to_path_buf();
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(source) if source.kind() != io::ErrorKind::AlreadyExists => Err(NamedError::Create {
            dir: dir_(),
            source,
        }),
        _ if owned(dir, uid) => Ok(()),
        _ => Err(NamedError::NotPrivate { dir: dir_() }),
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
pub fn find_running(base: &Path, uid: u32, name: &str) -> Option<Holder> {
    let path = hold_state::running_record(base, uid, name);
    let dir = path.parent()?;
    if !owned(&hold_state::named_containers_dir(base, uid), uid) || !owned(dir, uid) {
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

    /// A base directory of the test's, with the user's directory in it as `prepare` leaves it.
    fn base(uid: u32) -> tempfile::TempDir {
        use std::os::unix::fs::DirBuilderExt;
        let t = tempfile::tempdir().unwrap();
        let d = hold_state::named_containers_dir(t.path(), uid);
        std::fs::DirBuilder::new().mode(0o700).create(d).unwrap();
        t
    }

    /// A record is found while its process has the recorded namespaces, and not through a
    /// directory others may write or once the namespaces differ.
    #[test]
    fn running_records() {
        // SAFETY: getuid only reads the process's id.
        let uid = unsafe { libc::getuid() };
        let t = base(uid);
        let b = t.path();
        let name = "4294967000.rec".to_string();
        let dir = hold_state::named_containers_dir(b, uid).join(&name);
        let h = Holder {
            pid: std::process::id() as i32,
            root: "/".into(),
            env: vec![("A".into(), "b=c".into())],
            cwd: "/w".into(),
        };
        // an unnamed step's directory is made here, private
        record_running(b, uid, &name, &h).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(find_running(b, uid, &name), Some(h.clone()));
        let mode = |m| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(0o777);
        assert_eq!(find_running(b, uid, &name), None);
        let e = record_running(b, uid, &name, &h).unwrap_err().to_string();
        assert!(
            e.contains("not a directory of yours closed to others"),
            "{e}"
        );
        mode(0o700);
        // pid 1 is in other namespaces than this test only in a container: forge the inodes
        let path = hold_state::running_record(b, uid, &name);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut r = hold_state::Running::parse(&text).unwrap();
        r.mnt_ns += 1;
        std::fs::write(&path, r.to_line()).unwrap();
        assert_eq!(find_running(b, uid, &name), None);
    }

    #[test]
    fn kept_images() {
        // SAFETY: getuid only reads the process's id.
        let uid = unsafe { libc::getuid() };
        let t = base(uid);
        let b = t.path();
        let name = "4294967000.img";
        let dir = hold_state::named_containers_dir(b, uid).join(name);
        std::fs::create_dir_all(&dir).unwrap();
        assert!(!image_kept(b, uid, name), "no record");
        let image = dir.join("copy.sqsh");
        std::fs::write(dir.join("image"), image.to_str().unwrap()).unwrap();
        assert!(!image_kept(b, uid, name), "the recorded image is gone");
        std::fs::write(&image, b"x").unwrap();
        assert!(image_kept(b, uid, name));
        let mode = |m| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.join("image"), std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(0o666);
        assert!(!image_kept(b, uid, name), "a record others may write");
    }

    /// As root: the user's directory is made theirs and private in a base of root's; a base
    /// another user owns, or may write, is refused.
    #[test]
    fn the_users_directory_is_made_by_root() {
        // SAFETY: geteuid only reads the process's id.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let b = t.path().join("containers");
        let d = prepare(&b, 4242, 4343).unwrap();
        let m = std::fs::metadata(&d).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (4242, 4343, 0o700));
        assert_eq!(prepare(&b, 4242, 4343).unwrap(), d, "again: the same");
        std::os::unix::fs::chown(&b, Some(4242), None).unwrap();
        let e = prepare(&b, 4343, 4343).unwrap_err().to_string();
        assert!(e.contains("must be root's"), "{e}");
        std::os::unix::fs::chown(&b, Some(0), None).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&b, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(prepare(&b, 4343, 4343).is_err(), "others may write it");
    }
}

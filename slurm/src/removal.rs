//! What the plugin removes as root, at a step's end (slurmstepd) and a job's end (slurmd's
//! epilog): the job's image copies sbcast made and the job's named containers. Root acts on
//! nothing the job names: the directory comes from plugstack.conf, the names from the job and
//! step ids and the owner from the job's uid, all three from Slurm. The directory is opened
//! without following a link, each entry checked on that handle (type, owner) and removed
//! relative to it, and all of it runs in a thread whose file-system identity is the job's user
//! (setfsuid): what it removes the user could have removed, nothing more.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use nix::unistd::UnlinkatFlags;

/// Run `f` in a thread of its own whose file-system uid and gid are `uid` and `gid` and which
/// has no supplementary groups; None where that identity cannot be taken (nothing then runs).
pub fn as_user<T: Send>(uid: u32, gid: u32, f: impl FnOnce() -> T + Send) -> Option<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: raw syscalls change only this thread's credentials (glibc's wrappers
            // would change every thread's); the thread ends with them.
            unsafe {
                if libc::geteuid() == 0 && libc::syscall(libc::SYS_setgroups, 0, 0) != 0 {
                    return None;
                }
                libc::syscall(libc::SYS_setfsgid, gid);
                libc::syscall(libc::SYS_setfsuid, uid);
                // setfsuid says only the previous value: ask again to know it took
                let fsuid = libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32;
                let fsgid = libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32;
                if (fsuid, fsgid) != (uid, gid) {
                    return None;
                }
            }
            Some(f())
        })
        .join()
        .ok()
        .flatten()
    })
}

/// `dir`, opened without following a link at its end, when it is a directory of `owner`'s
/// (root's for a shared place) that nobody else may write unless it is sticky.
fn open_dir(dir: &Path, owner: u32) -> Option<File> {
    let d = File::options()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .ok()?;
    let m = d.metadata().ok()?;
    let closed = m.mode() & 0o022 == 0 || m.mode() & libc::S_ISVTX != 0;
    (m.is_dir() && m.uid() == owner && closed).then_some(d)
}

/// The names in the open directory `dir` that `wanted` accepts (`.` and `..` never).
fn names(dir: impl AsFd, wanted: impl Fn(&str) -> bool) -> Vec<CString> {
    let Ok(fd) = dir.as_fd().try_clone_to_owned() else {
        return Vec::new();
    };
    let Ok(mut d) = nix::dir::Dir::from_fd(fd) else {
        return Vec::new();
    };
    d.iter()
        .flatten()
        .map(|e| e.file_name().to_owned())
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .filter(|n| n.to_str().is_ok_and(&wanted))
        .collect()
}

/// Remove the directory `name` of `parent` with all it holds, never through a link. Run as
/// the user: a directory they closed to themselves (overlayfs's work directory is mode 0) is
/// opened to them first, as they could do.
fn remove_tree(parent: BorrowedFd, name: &CStr) -> nix::Result<()> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{fchmodat, FchmodatFlags, Mode};
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = match openat(parent, name, flags, Mode::empty()) {
        Err(nix::errno::Errno::EACCES) => {
            let rwx = Mode::from_bits_truncate(0o700);
            fchmodat(parent, name, rwx, FchmodatFlags::NoFollowSymlink)
                .or_else(|_| fchmodat(parent, name, rwx, FchmodatFlags::FollowSymlink))?;
            openat(parent, name, flags, Mode::empty())?
        }
        r => r?,
    };
    for n in names(&fd, |_| true) {
        match entry(&fd, &n) {
            Some((libc::S_IFDIR, _)) => remove_tree(fd.as_fd(), &n)?,
            _ => nix::unistd::unlinkat(&fd, n.as_c_str(), UnlinkatFlags::NoRemoveDir)?,
        }
    }
    nix::unistd::unlinkat(parent, name, UnlinkatFlags::RemoveDir)
}

/// The entry `name` of `dir`, not followed if it is a link: its type bits and owner.
fn entry(dir: impl AsFd, name: &CStr) -> Option<(u32, u32)> {
    nix::sys::stat::fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .ok()
        .map(|st| (st.st_mode & libc::S_IFMT, st.st_uid))
}

/// Remove, as user `uid`, the regular files of theirs in `dir` (a directory of root's) whose
/// names `wanted` accepts. Returns how many went.
pub fn remove_files(dir: &Path, uid: u32, gid: u32, wanted: impl Fn(&str) -> bool + Send) -> usize {
    as_user(uid, gid, || {
        let Some(d) = open_dir(dir, 0) else { return 0 };
        names(&d, wanted)
            .iter()
            .filter(|n| entry(&d, n) == Some((libc::S_IFREG, uid)))
            .filter(|n| {
                nix::unistd::unlinkat(&d, n.as_c_str(), nix::unistd::UnlinkatFlags::NoRemoveDir)
                    .is_ok()
            })
            .count()
    })
    .unwrap_or(0)
}

/// Remove, as user `uid`, the directories of theirs in `dir` (a directory of `dir_owner`'s:
/// theirs, or root's) whose names `wanted` accepts, with all they hold. Returns how many went.
pub fn remove_dirs(
    dir: &Path,
    dir_owner: u32,
    (uid, gid): (u32, u32),
    wanted: impl Fn(&str) -> bool + Send,
) -> usize {
    as_user(uid, gid, || {
        let Some(d) = open_dir(dir, dir_owner) else {
            return 0;
        };
        names(&d, wanted)
            .iter()
            .filter(|n| entry(&d, n) == Some((libc::S_IFDIR, uid)))
            .filter(|n| remove_tree(d.as_fd(), n).is_ok())
            .count()
    })
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> (u32, u32) {
        // SAFETY: plain getters.
        unsafe { (libc::getuid(), libc::getgid()) }
    }

    #[test]
    fn the_thread_has_the_users_identity_and_the_process_keeps_its_own() {
        let (uid, gid) = ids();
        // SAFETY: setfsuid and setfsgid with -1 change nothing and return the thread's ids.
        let got = as_user(uid, gid, || unsafe {
            (
                libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32,
                libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32,
            )
        });
        assert_eq!(got, Some((uid, gid)));
        if uid != 0 {
            // an identity this process may not take: nothing runs
            assert_eq!(as_user(uid + 1, gid, || ()), None);
        }
    }

    #[test]
    fn only_own_regular_files_by_name_never_through_links() {
        let (uid, gid) = ids();
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim.sqsh");
        std::fs::write(&victim, "x").unwrap();
        for n in [
            "gpurun-job.7.1.a.sqsh",
            "gpurun-job.7.1.b.sqsh",
            "gpurun-job.8.1.a.sqsh",
        ] {
            std::fs::write(t.path().join(n), "x").unwrap();
        }
        std::os::unix::fs::symlink(&victim, t.path().join("gpurun-job.7.1.link.sqsh")).unwrap();
        std::fs::create_dir(t.path().join("gpurun-job.7.1.dir.sqsh")).unwrap();
        let wanted = |n: &str| n.starts_with("gpurun-job.7.1.");
        if uid != 0 {
            // the directory must be root's: a user's own is not where sbcast copies go
            assert_eq!(remove_files(t.path(), uid, gid, wanted), 0);
            return;
        }
        assert_eq!(
            remove_files(t.path(), uid + 1, gid, wanted),
            0,
            "not theirs"
        );
        assert_eq!(remove_files(t.path(), uid, gid, wanted), 2);
        assert!(victim.exists(), "a link is never followed");
        assert!(t.path().join("gpurun-job.8.1.a.sqsh").exists());
        assert!(t.path().join("gpurun-job.7.1.dir.sqsh").exists());
    }

    #[test]
    fn only_own_directories_by_name() {
        // as root, a user's tree: the removal then runs without root's overrides
        let (uid, gid) = match ids() {
            (0, _) => (4242, 4242),
            ids => ids,
        };
        let t = tempfile::tempdir().unwrap();
        for d in [
            "7.c1/overlay/upper",
            "7.c1/overlay/work/work",
            "7.c2",
            "8.c1",
        ] {
            std::fs::create_dir_all(t.path().join(d)).unwrap();
        }
        std::fs::write(t.path().join("7.c1/overlay/upper/f"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", t.path().join("7.c1/overlay/upper/l")).unwrap();
        std::fs::write(t.path().join("7.file"), "x").unwrap();
        if ids().0 == 0 {
            let st = std::process::Command::new("chown")
                .args(["-hR", &format!("{uid}:{gid}")])
                .arg(t.path())
                .status()
                .unwrap();
            assert!(st.success());
        }
        // as overlayfs leaves its work directory: closed even to its owner
        use std::os::unix::fs::PermissionsExt;
        let closed = std::fs::Permissions::from_mode(0o000);
        std::fs::set_permissions(t.path().join("7.c1/overlay/work/work"), closed).unwrap();
        let wanted = |n: &str| n.starts_with("7.");
        assert_eq!(remove_dirs(t.path(), uid, (uid + 1, gid), wanted), 0);
        assert_eq!(remove_dirs(t.path(), uid + 1, (uid, gid), wanted), 0);
        assert_eq!(remove_dirs(t.path(), uid, (uid, gid), wanted), 2);
        let mut left: Vec<_> = std::fs::read_dir(t.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["7.file", "8.c1"]);
        assert!(std::path::Path::new("/etc/passwd").exists());
    }
}

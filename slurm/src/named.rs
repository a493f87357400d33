//! Named containers (`--container-name`) at the job's end: their directories, which gpurun keeps
//! as `JOB.NAME` in `hold_state::named_containers_dir` (gpurun's src/runtime/named.rs),
//! are the job's and go with it.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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

//! The user's processes as /proc describes them (for `gpurun ps` and `gpurun cache gc`).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use procfs::process::{all_processes, FDTarget, Process};

/// A process of this user, as /proc describes it.
#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    pub cmdline: Vec<String>,
    /// Start time in clock ticks since boot.
    pub start_ticks: u64,
    pub is_gpurun: bool,
}

impl Proc {
    /// `exec`, `pull`…: the first argument that is not an option.
    pub fn subcommand(&self) -> Option<String> {
        self.cmdline
            .iter()
            .skip(1)
            .find(|a| !a.starts_with('-'))
            .cloned()
    }
}

/// This user's processes.
pub fn own_processes(uid: u32) -> Vec<Proc> {
    let Ok(all) = all_processes() else {
        return Vec::new();
    };
    let me = file_id("/proc/self/exe");
    all.flatten()
        .filter_map(|p| own_process(&p, uid, me))
        .collect()
}

/// The (device, inode) of the file at `path`.
fn file_id(path: &str) -> Option<(u64, u64)> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// `p`, when it is `uid`'s and still there. It is gpurun's when it runs this very binary
/// (`me`), whatever its file's name (a site's gpurun-1.2, a wrapper's exec), or one named gpurun.
fn own_process(p: &Process, uid: u32, me: Option<(u64, u64)>) -> Option<Proc> {
    if p.uid().ok()? != uid {
        return None;
    }
    let stat = p.stat().ok()?;
    let pid = u32::try_from(p.pid()).ok()?;
    let cmdline = cmdline(pid);
    let base = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let exe = p.exe().ok();
    let is_gpurun = (me.is_some() && file_id(&format!("/proc/{pid}/exe")) == me)
        || exe.as_deref().and_then(base).as_deref() == Some("gpurun")
        || cmdline
            .first()
            .map(|c| base(Path::new(c)).as_deref() == Some("gpurun"))
            == Some(true);
    Some(Proc {
        pid,
        ppid: u32::try_from(stat.ppid).unwrap_or(0),
        cmdline,
        start_ticks: stat.starttime,
        is_gpurun,
    })
}

/// The arguments, decoded lossily: procfs's `cmdline` refuses a process with a non-UTF-8 one.
fn cmdline(pid: u32) -> Vec<String> {
    fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// What process `pid` has open (the paths of its file descriptors).
pub fn open_files(pid: u32) -> Vec<PathBuf> {
    let Ok(fds) = Process::new(pid as i32).and_then(|p| p.fd()) else {
        return Vec::new();
    };
    fds.flatten()
        .filter_map(|fd| match fd.target {
            FDTarget::Path(p) => Some(p),
            _ => None,
        })
        .collect()
}

/// Process `pid`'s environment; `None` where it cannot be read.
pub fn environ(pid: u32) -> Option<Vec<(String, String)>> {
    let env = Process::new(pid as i32).ok()?.environ().ok()?;
    Some(
        env.into_iter()
            .map(|(k, v)| {
                let s = |o: std::ffi::OsString| o.to_string_lossy().into_owned();
                (s(k), s(v))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_listed() {
        let me = std::process::id();
        let uid = nix::unistd::getuid().as_raw();
        let mine = own_processes(uid);
        let p = mine.iter().find(|p| p.pid == me).expect("listed");
        assert_eq!(p.ppid, nix::unistd::getppid().as_raw() as u32);
        assert!(p.start_ticks > 0);
        assert_eq!(p.cmdline, std::env::args().collect::<Vec<_>>());
        assert!(!own_processes(uid.wrapping_add(1))
            .iter()
            .any(|p| p.pid == me));
        let path = std::env::current_exe().unwrap();
        let _open = fs::File::open(&path).unwrap();
        assert!(open_files(me).contains(&path));
        // /proc/PID/environ is the environment the process started with: cargo's, with PATH.
        let env = environ(me).unwrap();
        assert!(env.iter().any(|(k, v)| k == "PATH" && !v.is_empty()));
        assert_eq!(environ(u32::MAX), None);
    }
}

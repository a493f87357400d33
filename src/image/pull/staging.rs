//! Where a pull writes before the image is whole, and what a signal cleans up.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::error::{exit, PullError};
use super::options::PullOptions;
use super::registry_source::runtime;
use crate::store::tree::remove_tree;

/// Staging directories and the tar2sqfs child, removed / killed when a signal arrives.
pub(super) static IN_FLIGHT: Mutex<(Vec<PathBuf>, Vec<u32>)> = Mutex::new((Vec::new(), Vec::new()));

pub(super) async fn cleanup_on_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    abandon()
}

/// The runtime a pull runs on, which also cleans up on SIGINT/SIGTERM when `opts` asks for it.
pub(super) fn signal_runtime(opts: &PullOptions) -> Result<tokio::runtime::Runtime, PullError> {
    let rt = runtime()?;
    if opts.handle_signals {
        rt.spawn(cleanup_on_signal());
    }
    Ok(rt)
}

/// Kill the tar2sqfs child, remove every staging directory, say so and exit: the pull was
/// interrupted (a signal, or the gpurun it pulled for died).
pub(super) fn abandon() -> ! {
    let guard = crate::lock(&IN_FLIGHT);
    // An unpacking still writing would put entries back into a tree being removed.
    crate::image::unpack::stop_all();
    for pid in &guard.1 {
        // Our own child, reaped before the staging goes, so a create it was still making
        // cannot land after its removal.
        let pid = nix::unistd::Pid::from_raw(*pid as libc::pid_t);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(pid, None);
    }
    for p in &guard.0 {
        remove_tree(p);
    }
    eprintln!("gpurun: interrupted; nothing was written (downloads resume on the next pull)");
    std::process::exit(exit::INTERRUPTED);
}

/// Where a pull writes its image before it is whole: a directory of its own made beside the
/// output (random name, mode 0700), so that nothing another user put there in advance can be
/// written through, and a directory gpurun cannot write to is found before any download. Removed
/// with what is left in it, unless the image was moved to its place.
pub(super) struct Staging {
    dir: PathBuf,
    pub(super) out: PathBuf,
}

impl Staging {
    pub(super) fn beside(out: &Path) -> Result<Staging, PullError> {
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let prefix = staging_prefix(out);
        remove_stale_staging(&dir, &prefix);
        // Made and registered under the lock: a cleanup that holds it finds it, or it is not made.
        let mut in_flight = crate::lock(&IN_FLIGHT);
        let made = tempfile::Builder::new()
            .prefix(&format!("{prefix}{}-", std::process::id()))
            .tempdir_in(&dir)
            .map_err(|source| PullError::Output {
                path: dir.clone(),
                source,
            })?;
        let staging = Staging {
            dir: made.keep(),
            out: out.to_path_buf(),
        };
        in_flight.0.push(staging.dir.clone());
        Ok(staging)
    }

    /// The file the writer makes (in the staging directory: nobody else can put anything there).
    pub(super) fn file(&self) -> PathBuf {
        self.dir.join("image.sqsh")
    }

    /// A path for what a source needs while the image is written (removed with the staging).
    pub(super) fn scratch(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Move the finished image to its place (replacing what is there, never writing through it).
    pub(super) fn commit(self) -> Result<(), PullError> {
        fs::rename(self.file(), &self.out).map_err(|source| PullError::Output {
            path: self.out.clone(),
            source,
        })
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        remove_tree(&self.dir);
        crate::lock(&IN_FLIGHT).0.retain(|p| p != &self.dir);
    }
}

/// `.NAME.gpurun-HOST-`: staging directories of pulls to `out` from this host (the output may be
/// on a file system other hosts write to; their pids mean nothing here).
fn staging_prefix(out: &Path) -> String {
    let name = out
        .file_name()
        .map_or("image.sqsh".into(), |n| n.to_string_lossy());
    let host = nix::unistd::gethostname().unwrap_or_default();
    format!(".{name}.gpurun-{}-", host.to_string_lossy())
}

/// Staging directories of pulls from this host that were killed (SIGKILL, power loss) before
/// they could clean up: the caller's own directories whose pid is gone (with a first start's
/// tree, whose read-only directories would keep their entries from a plain removal).
fn remove_stale_staging(dir: &Path, prefix: &str) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let me = nix::unistd::geteuid().as_raw();
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = n.strip_prefix(prefix).and_then(|r| r.split('-').next()) else {
            continue;
        };
        let ours = e.metadata().is_ok_and(|m| m.is_dir() && m.uid() == me);
        if ours && !Path::new("/proc").join(pid).exists() {
            remove_tree(&e.path());
        }
    }
}

//! The Slurm holder: its state file, pyxis's entrypoint run once, and the wait until the
//! SPANK plugin ends it.

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus};

use super::exec::{no_privileges, spawn_command, Prepared};
use super::failure::Failure;
use super::interface::{HoldState, LaunchError};
use super::signals::{die_by, forwarded_and, parent_death_signal};
use super::supervise::gpurun_died;
use crate::sys;

/// The holder's state file, made new beside its place (never through a link: the state may be
/// asked for in a shared directory), and its temporary name.
pub(super) fn state_file(h: &HoldState) -> Result<(File, PathBuf), LaunchError> {
    let mut s = h.path.as_os_str().to_owned();
    s.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(s);
    let f = crate::store::private_dir::create_new(&tmp, 0o600).map_err(|e| LaunchError::Io {
        what: format!("create {}", tmp.display()),
        source: e,
    })?;
    Ok((f, tmp))
}

/// Environment variables as (name, value).
type EnvPairs = Vec<(String, String)>;

/// pyxis's --container-entrypoint for the holder, whose argv is the image's entrypoint followed
/// by `plan::HOLD_STOP`: run it in the container, once, and take the environment and working
/// directory of the shell it execs, which stops itself; then end that shell.
pub(super) fn run_entrypoint(
    prep: &Prepared,
    mask: &SigSet,
    cwd: &Path,
) -> Result<(EnvPairs, PathBuf), Failure> {
    let in_cwd = nix::unistd::chdir(cwd).is_ok();
    // as for any command gpurun starts
    no_privileges(prep)?;
    let pid = spawn_command(prep, mask)?;
    let status = sys::wait_for(Some(pid), Some(WaitPidFlag::WUNTRACED));
    let entry = prep.argv[..prep.argv.len() - crate::runtime::plan::HOLD_STOP.len()]
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let ended = |how: String| Err(Failure::Entrypoint { entry, how });
    match status {
        Ok(WaitStatus::Stopped(..)) => {}
        Ok(WaitStatus::Exited(_, code)) => return ended(format!("exited with status {code}")),
        Ok(WaitStatus::Signaled(_, sig, _)) => return ended(format!("was killed by {sig}")),
        other => return ended(format!("ended ({other:?})")),
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ"));
    let dir = std::fs::read_link(format!("/proc/{pid}/cwd"));
    let _ = sys::kill(pid, Signal::SIGKILL);
    let _ = sys::wait_for(Some(pid), None);
    let environ = environ.map_err(Failure::EntrypointEnv)?;
    let env = environ
        .split(|&b| b == 0)
        .filter_map(|e| crate::runtime::env::parse_kv(&String::from_utf8_lossy(e)))
        .collect();
    // where the working directory was missing the plugin says so, as without an entrypoint
    let dir = match dir {
        Ok(d) if in_cwd => d,
        _ => cwd.to_path_buf(),
    };
    Ok((env, dir))
}

/// The holder's C keeps the namespace until P forwards a signal (SIGTERM from the SPANK plugin),
/// which ends it as it would a command, or until gpurun dies.
pub(super) fn hold() -> ! {
    let waited = forwarded_and(&[parent_death_signal()]);
    loop {
        match sys::wait_signal(&waited) {
            Some((signo, _)) if signo == parent_death_signal() => gpurun_died(),
            Some((signo, _)) if signo != libc::SIGWINCH => {
                if let Ok(sig) = Signal::try_from(signo) {
                    die_by(sig, false);
                }
            }
            _ => {}
        }
    }
}

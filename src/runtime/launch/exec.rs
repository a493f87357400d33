//! Start the command in the container: through the container's PATH, with the caller's signal
//! mask, and say why an exec failed.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::signal::SigSet;
use nix::unistd::Pid;

use super::failure::Failure;
use super::interface::LaunchError;
use super::signals::FORWARDED;
use crate::exit;
use crate::runtime::plan::Plan;
use crate::sys;

/// Pre-computed C strings for the exec, so the child does no planning.
pub(super) struct Prepared {
    pub(super) argv: Vec<CString>,
    pub(super) envp: Vec<CString>,
    pub(super) path_dirs: Vec<PathBuf>,
    /// chown and id changes faked (`--fakeroot`).
    pub(super) fake_ids: bool,
}

impl Prepared {
    pub(super) fn new(plan: &Plan) -> Result<Prepared, LaunchError> {
        let c = |s: &[u8]| CString::new(s).map_err(|_| LaunchError::ArgumentNul);
        let argv = plan
            .argv
            .iter()
            .map(|a| c(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        // the holder's entrypoint runs with its own environment (Plan::entry_env)
        let env = plan.entry_env.as_ref().unwrap_or(&plan.env);
        let envp = env
            .iter()
            .map(|(k, v)| c(format!("{k}={v}").as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Prepared {
            argv,
            envp,
            path_dirs: crate::runtime::env::path_dirs(env),
            fake_ids: plan.fake_ids,
        })
    }
}

/// What C and every command it starts run under: nothing they exec gains privileges, and with
/// --fakeroot their chown and id changes succeed and do nothing (a package's files owned by
/// other ids, apt's and groupadd's id changes, in a namespace that maps one uid).
pub(super) fn no_privileges(prep: &Prepared) -> Result<(), Failure> {
    sys::set_no_new_privs().map_err(Failure::Call)?;
    if prep.fake_ids {
        sys::fake_id_changes().map_err(Failure::FakeIds)?;
    }
    Ok(())
}

/// Start the command through the container's PATH (glibc's execvpe would search the host's
/// PATH), in a process that shares C's memory until it execs (`sys::spawn_shared`). Its signals
/// are as the caller left them: dispositions (`sys::caller_dispositions`) and mask.
pub(super) fn spawn_command(prep: &Prepared, mask: &SigSet) -> Result<Pid, Failure> {
    let Some(arg0) = prep.argv.first() else {
        return Err(Failure::NoCommand);
    };
    let name = arg0.to_string_lossy().into_owned();
    let candidates: Vec<(PathBuf, CString)> =
        crate::runtime::env::command_candidates(&name, &prep.path_dirs)
            .into_iter()
            .filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok().map(|c| (p, c)))
            .collect();
    let pointers = |v: &[CString]| -> Vec<*const libc::c_char> {
        v.iter()
            .map(|c| c.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let (argv, envp) = (pointers(&prep.argv), pointers(&prep.envp));
    let mask: libc::sigset_t = *mask.as_ref();
    // What each candidate's execve said (0: not tried), and whether none was exec'd: written by
    // the child, which shares this memory.
    let mut errnos = vec![0i32; candidates.len()];
    let mut failed = false;
    let mut stack = vec![0u8; 64 << 10];
    let mut child = || {
        // gpurun has no handlers on this path, but a pull's runtime installs some.
        sys::caller_dispositions(&FORWARDED);
        sys::set_signal_mask(&mask);
        for ((_, c), e) in candidates.iter().zip(errnos.iter_mut()) {
            // SAFETY: null-terminated arrays of the strings prepared above, alive meanwhile.
            *e = unsafe { sys::exec_raw(c, &argv, &envp) };
            if !next_candidate(Errno::from_raw(*e)) {
                break;
            }
        }
        failed = true;
        exit::NOT_FOUND
    };
    // SAFETY: a 64 KiB stack for a closure that only makes the async-signal-safe calls above
    // (a few frames), allocates nothing and cannot panic.
    let pid = unsafe { sys::spawn_shared(&mut stack, &mut child) }.map_err(Failure::Spawn)?;
    if !failed {
        return Ok(pid);
    }
    let _ = sys::wait_for(Some(pid), None);
    let attempts: Vec<(PathBuf, Errno)> = candidates
        .into_iter()
        .map(|(p, _)| p)
        .zip(
            errnos
                .iter()
                .take_while(|&&e| e != 0)
                .map(|&e| Errno::from_raw(e)),
        )
        .collect();
    let (code, message) = exec_failure(&name, &prep.path_dirs, &attempts, &head_of, &denied_why);
    Err(Failure::Exec { code, message })
}

/// Why execve said EACCES for `p`: each has its own fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Denied {
    Directory,
    NoExecMount,
    /// No execute bit, or it cannot be told.
    Other,
}

fn denied_why(p: &Path) -> Denied {
    match std::fs::metadata(p) {
        Ok(md) if md.is_dir() => Denied::Directory,
        Ok(_) if sys::on_noexec_mount(p) => Denied::NoExecMount,
        _ => Denied::Other,
    }
}

/// The first bytes of a file, for `interpreter::missing`.
fn head_of(p: &Path) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(crate::runtime::interpreter::HEAD_BYTES);
    let f = File::open(p).ok()?;
    f.take(crate::runtime::interpreter::HEAD_BYTES as u64)
        .read_to_end(&mut head)
        .ok()?;
    Some(head)
}

/// Whether a PATH search goes on after execve failed so: the name is not there, or is there but
/// cannot be run (a later directory may hold one that can, as execvp does).
fn next_candidate(e: Errno) -> bool {
    matches!(
        e,
        Errno::ENOENT | Errno::ENOTDIR | Errno::EACCES | Errno::ENOEXEC | Errno::EISDIR
    )
}

/// The exit status and the one line for a command that could not be exec'd, from what each
/// candidate's execve said (in order; the search stops at an error `next_candidate` refuses).
/// An ENOENT from a file that is there (`head` reads it) is its interpreter's or loader's.
fn exec_failure(
    name: &str,
    path_dirs: &[PathBuf],
    attempts: &[(PathBuf, Errno)],
    head: &dyn Fn(&Path) -> Option<Vec<u8>>,
    denied_why: &dyn Fn(&Path) -> Denied,
) -> (i32, String) {
    if let Some((p, e)) = attempts.iter().find(|(_, e)| !next_candidate(*e)) {
        return (
            exit::NOT_EXECUTABLE,
            format!("cannot execute {}: {e}", p.display()),
        );
    }
    let missing = (attempts.iter().filter(|(_, e)| *e == Errno::ENOENT))
        .find_map(|(p, _)| crate::runtime::interpreter::missing(p, &head(p)?));
    if let Some(line) = missing {
        return (exit::NOT_EXECUTABLE, line);
    }
    let denied = attempts
        .iter()
        .rfind(|(_, e)| matches!(e, Errno::EACCES | Errno::ENOEXEC | Errno::EISDIR));
    match denied {
        Some((p, Errno::ENOEXEC)) => (
            exit::NOT_EXECUTABLE,
            format!(
                "cannot execute {}: not a program for this machine, and no #! line; check the file or the image's platform",
                p.display()
            ),
        ),
        Some((p, e)) => (exit::NOT_EXECUTABLE, not_executable(p, *e, denied_why(p))),
        None if name.contains('/') => (
            exit::NOT_FOUND,
            format!("{name}: no such file in the container; check the path (the image's files, and binds)"),
        ),
        None => (
            exit::NOT_FOUND,
            format!(
                "{name}: command not found in the container's PATH ({}); check the name, or give its full path",
                path_dirs
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(":")
            ),
        ),
    }
}

/// The line for a candidate execve refused with `e` (EACCES, EISDIR).
fn not_executable(p: &Path, e: Errno, why: Denied) -> String {
    let p = p.display();
    match why {
        Denied::Directory => {
            format!("cannot execute {p}: it is a directory; give the program to run in it")
        }
        Denied::NoExecMount => format!(
            "cannot execute {p}: its file system is mounted noexec; bind it without noexec, or run it through its interpreter (sh FILE, python3 FILE)"
        ),
        Denied::Other => format!(
            "cannot execute {p}: {e}; make it executable (chmod +x) or run it through its interpreter"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::wait::WaitStatus;

    #[test]
    fn exec_failure_table() {
        let dirs = [PathBuf::from("/a"), PathBuf::from("/b")];
        let at = |p: &str, e| (PathBuf::from(p), e);
        for (name, attempts, code, says) in [
            // Nowhere on PATH: 127, and the PATH searched.
            (
                "x",
                vec![at("/a/x", Errno::ENOENT), at("/b/x", Errno::ENOTDIR)],
                127,
                "not found in the container's PATH (/a:/b)",
            ),
            ("x", vec![], 127, "not found in the container's PATH"),
            (
                "/opt/x",
                vec![at("/opt/x", Errno::ENOENT)],
                127,
                "/opt/x: no such file",
            ),
            // Found but not runnable: 126 for the last such candidate.
            (
                "x",
                vec![at("/a/x", Errno::EACCES), at("/b/x", Errno::ENOENT)],
                126,
                "cannot execute /a/x: EACCES",
            ),
            (
                "x",
                vec![at("/a/x", Errno::EACCES), at("/b/x", Errno::EISDIR)],
                126,
                "cannot execute /b/x: EISDIR",
            ),
            (
                "/opt/x",
                vec![at("/opt/x", Errno::ENOEXEC)],
                126,
                "not a program for this machine",
            ),
            // What EACCES meant, as the file tells.
            (
                "/data",
                vec![at("/data", Errno::EACCES)],
                126,
                "/data: it is a directory; give the program",
            ),
            (
                "/mnt/tool",
                vec![at("/mnt/tool", Errno::EACCES)],
                126,
                "/mnt/tool: its file system is mounted noexec; bind it without noexec",
            ),
            // Another error stops the search there.
            (
                "x",
                vec![at("/a/x", Errno::EACCES), at("/b/x", Errno::E2BIG)],
                126,
                "cannot execute /b/x: E2BIG",
            ),
            // There, but what its #! line names is not (the file exists: `head` reads it).
            (
                "/opt/script",
                vec![at("/opt/script", Errno::ENOENT)],
                126,
                "its #! line names \"/bin/sh\\r\", with a carriage return",
            ),
            (
                "script",
                vec![
                    at("/a/script", Errno::ENOENT),
                    at("/b/script", Errno::ENOENT),
                ],
                126,
                "cannot execute /a/script: its #! line",
            ),
        ] {
            let head = |p: &Path| {
                p.ends_with("script")
                    .then(|| b"#!/bin/sh\r\necho hi\r\n".to_vec())
            };
            let why = |p: &Path| match p.to_str() {
                Some("/data") => Denied::Directory,
                Some("/mnt/tool") => Denied::NoExecMount,
                _ => Denied::Other,
            };
            let (c, msg) = exec_failure(name, &dirs, &attempts, &head, &why);
            assert_eq!(c, code, "{attempts:?}: {msg}");
            assert!(msg.contains(says), "{attempts:?}: {msg}");
            assert!(!msg.contains('\n'), "one line: {msg}");
        }
    }

    #[test]
    fn spawn_command_finds_runs_and_reports() {
        let dirs = ["/nonexistent", "/usr/bin", "/bin"];
        let prep = |cmd: &str| Prepared {
            argv: vec![CString::new(cmd).unwrap()],
            envp: vec![],
            path_dirs: dirs.iter().map(PathBuf::from).collect(),
            fake_ids: false,
        };
        let pid = spawn_command(&prep("true"), &SigSet::empty()).unwrap();
        assert_eq!(
            sys::wait_for(Some(pid), None),
            Ok(WaitStatus::Exited(pid, 0))
        );
        let e = spawn_command(&prep("no-such-command-here"), &SigSet::empty()).unwrap_err();
        assert_eq!(e.exit_code(), 127, "{e}");
        assert!(e.to_string().contains("/nonexistent:/usr/bin:/bin"), "{e}");
        let e = spawn_command(&prep("/etc/hostname"), &SigSet::empty()).unwrap_err();
        assert_eq!(e.exit_code(), 126, "{e}");
        // No child is left: the failed ones were reaped. Looked up in /proc rather than by
        // waitpid(-1), which could reap another test's child in this process.
        assert_eq!(
            zombie_children(),
            0,
            "a failed command's process was not reaped"
        );
    }

    /// Zombies among this process's children that this thread started (a child that did not
    /// exec keeps its parent thread's name).
    fn zombie_children() -> usize {
        let me = std::process::id().to_string();
        let name = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|stat| {
                let Some((head, rest)) = stat.rsplit_once(')') else {
                    return false;
                };
                let fields: Vec<&str> = rest.split_whitespace().collect();
                head.split_once('(').map(|(_, c)| c) == Some(name.trim_end())
                    && fields.first() == Some(&"Z")
                    && fields.get(1) == Some(&me.as_str())
            })
            .count()
    }

    #[test]
    fn the_search_goes_on_only_past_a_missing_or_unrunnable_name() {
        for e in [
            Errno::ENOENT,
            Errno::ENOTDIR,
            Errno::EACCES,
            Errno::ENOEXEC,
            Errno::EISDIR,
        ] {
            assert!(next_candidate(e), "{e}");
        }
        for e in [Errno::E2BIG, Errno::ENOMEM, Errno::ELOOP, Errno::ETXTBSY] {
            assert!(!next_candidate(e), "{e}");
        }
    }
}

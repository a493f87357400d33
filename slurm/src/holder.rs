//! Starting and stopping `gpurun hold`: one per node per step, run as the job's user, holding the
//! mounted image that the step's tasks join. Its syscalls go through `sys::seam::Procs`.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::state::{parse_state, Holder};
pub use crate::sys::seam::Creds;
use crate::sys::seam::{as_user, Procs, UserCommand};

#[derive(Debug, thiserror::Error)]
pub enum HolderError {
    #[error("cannot create {}: {source}", path.display())]
    Create { path: PathBuf, source: io::Error },
    #[error("cannot start {}: {source}", program.display())]
    Start { program: PathBuf, source: io::Error },
    /// The holder ended before its container was ready: how, and its last lines.
    #[error("{}", match log.as_str() {
        "" => format!("gpurun hold failed ({status})"),
        why => format!("{why} (gpurun hold {status})"),
    })]
    Exited { status: String, log: String },
    #[error("gpurun hold: container not ready after {}s (plugstack.conf timeout=){}",
        timeout.as_secs(),
        if log.is_empty() { String::new() } else { format!(": {log}") })]
    NotReady { timeout: Duration, log: String },
}

/// What to start.
pub struct Spec<'a> {
    pub gpurun: &'a Path,
    pub args: &'a [String],
    /// The step's environment, `K=V` (the holder composes the container's env from it).
    pub env: &'a [String],
    pub cwd: &'a Path,
    pub creds: &'a Creds,
    /// A private directory for the state file and the holder's log.
    pub dir: &'a Path,
    pub timeout: Duration,
    /// Whether the holder's stdout (the entrypoint's) goes to its log too, to be shown.
    pub log_stdout: bool,
}

/// A started holder. `ready` waits for its container, in slurmstepd or in a forked task.
pub struct Running {
    pub dir: PathBuf,
    pid: u32,
    /// Signals go through a pidfd: once the tasks run, slurmstepd reaps every child it has
    /// (wait3(-1)), so the holder's pid could be reused by the time the step ends. A forked
    /// task, to which the holder is no child, also learns through it that the holder exited.
    pidfd: Option<OwnedFd>,
    started: Instant,
    timeout: Duration,
    /// Stopped already (at the last task's exit, to save the container).
    stopped: bool,
    /// Whose `dir` is (the job's user): removed as them.
    owner: (u32, u32),
}

pub fn state_path(dir: &Path) -> PathBuf {
    dir.join("state.json")
}

fn log_path(dir: &Path) -> PathBuf {
    dir.join("holder.log")
}

/// A fresh private directory `BASE/gpurun-spank.TAG.XXXXXX`, created with the caller's
/// effective ids (the job's user in slurmstepd's user_init).
pub fn make_dir(base: &Path, tag: &str) -> io::Result<PathBuf> {
    let template = base.join(format!("gpurun-spank.{tag}.XXXXXX"));
    let mut buf = template.into_os_string().into_vec();
    buf.push(0);
    // SAFETY: buf is NUL-terminated and writable; mkdtemp only replaces the X's.
    if unsafe { libc::mkdtemp(buf.as_mut_ptr().cast()) }.is_null() {
        return Err(io::Error::last_os_error());
    }
    buf.pop();
    Ok(PathBuf::from(OsString::from_vec(buf)))
}

/// A plain file of the holder's directory, which the user may change: never through a link,
/// and a FIFO or device there is not waited on (no open blocks, nothing but a file is read).
fn read_file(path: &Path) -> Option<String> {
    let mut f = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let mut text = String::new();
    f.metadata().ok()?.is_file().then_some(())?;
    f.read_to_string(&mut text).ok()?;
    Some(text)
}

/// The last non-empty lines of the holder's stderr, for the one line the user sees (which
/// says "gpurun: " once, in front).
fn log_tail(dir: &Path) -> String {
    let text = read_file(&log_path(dir)).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.trim().trim_start_matches("gpurun: "))
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(2)..].join(" / ")
}

/// Start the holder as the user; it builds the container while slurmstepd goes on (see
/// `Running::ready`).
pub fn start(sys: &impl Procs, spec: &Spec) -> Result<Running, HolderError> {
    let path = log_path(spec.dir);
    let create = |source| HolderError::Create {
        path: path.clone(),
        source,
    };
    let log = File::create(&path).map_err(create)?;
    let stdout = match spec.log_stdout {
        true => log.try_clone().ok(),
        false => None,
    };
    let env = spec.env.iter().filter_map(|e| e.split_once('='));
    let cmd = UserCommand {
        program: spec.gpurun,
        args: spec.args,
        env: env.map(|(k, v)| (k.into(), v.into())).collect(),
        cwd: spec.cwd,
        creds: spec.creds,
        stdout,
        stderr: Some(log),
    };
    let pid = sys.spawn_as(cmd).map_err(|source| HolderError::Start {
        program: spec.gpurun.into(),
        source,
    })?;
    Ok(Running {
        dir: spec.dir.to_path_buf(),
        pid,
        pidfd: sys.pidfd_open(pid),
        started: Instant::now(),
        timeout: spec.timeout,
        stopped: false,
        owner: (spec.creds.uid, spec.creds.gid),
    })
}

/// Start the keeper of job `job`'s image servers (`gpurun keep`), as the job's user, in the
/// job's extern step: the servers it starts for the job's steps then live as long as the job.
pub fn start_keeper(gpurun: &Path, job: u32, creds: &Creds) -> Result<Child, HolderError> {
    let mut cmd = Command::new(gpurun);
    cmd.args(["keep", "--job", &job.to_string()])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    as_user(&mut cmd, creds);
    cmd.spawn().map_err(|source| HolderError::Start {
        program: gpurun.into(),
        source,
    })
}

impl Running {
    /// What the holder has written (its stderr, and stdout where `log_stdout`).
    pub fn output(&self) -> String {
        read_file(&log_path(&self.dir)).unwrap_or_default()
    }

    /// Wait until the state file says the container is ready, the holder has exited, or the
    /// timeout (counted from the start) has passed. Called in each task (task_init), so the
    /// holder builds the container while slurmstepd prepares the tasks instead of before.
    pub fn ready(&mut self, sys: &impl Procs) -> Result<Holder, HolderError> {
        let state = state_path(&self.dir);
        let mut pause = Duration::from_micros(250);
        loop {
            // the holder may write the file in place: a partial file does not parse yet
            if let Some(h) = read_file(&state).and_then(|t| parse_state(&t).ok()) {
                return Ok(h);
            }
            if let Some(status) = self.exited(sys) {
                let log = log_tail(&self.dir);
                return Err(HolderError::Exited { status, log });
            }
            if self.started.elapsed() > self.timeout {
                let (timeout, log) = (self.timeout, log_tail(&self.dir));
                return Err(HolderError::NotReady { timeout, log });
            }
            // A short poll while a container usually gets ready (tens of ms), then backing off
            // for a pull. Not inotify: closing an inotify instance waits for an SRCU grace
            // period, milliseconds on every task's way to its command.
            match &self.pidfd {
                // woken early when the holder exits
                Some(fd) => {
                    sys.poll_exit(fd, pause);
                }
                None => sys.sleep(pause),
            }
            if self.started.elapsed() > Duration::from_millis(200) {
                pause = (pause * 2).min(Duration::from_millis(20));
            }
        }
    }

    /// How the holder ended, if it has. In slurmstepd it is a child (its status is known); in
    /// a forked task it is not, and the pidfd (else the pid) tells whether it is still there.
    fn exited(&self, sys: &impl Procs) -> Option<String> {
        match sys.try_wait(self.pid) {
            Ok(Some(st)) => return Some(st),
            Ok(None) => return None,
            Err(_) => {}
        }
        let gone = match &self.pidfd {
            Some(fd) => sys.poll_exit(fd, Duration::ZERO),
            None => sys.kill(self.pid, 0).is_err(),
        };
        gone.then(|| "exited".to_string())
    }

    /// SIGTERM, wait up to `grace` for the holder to unmount and exit, then SIGKILL and up to
    /// 5 s more; remove the state directory.
    pub fn stop(&mut self, sys: &impl Procs, grace: Duration) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        self.signal(sys, libc::SIGTERM);
        if !self.wait_exit(sys, grace) {
            self.signal(sys, libc::SIGKILL);
            self.wait_exit(sys, Duration::from_secs(5));
        }
        // reap it if slurmstepd has not already (then this returns an error we do not need)
        let _ = sys.try_wait(self.pid);
        // as root at the step's end: removed as the user it belongs to (removal.rs)
        if let (Some(parent), Some(name)) = (self.dir.parent(), self.dir.file_name()) {
            let name = name.to_string_lossy().into_owned();
            crate::removal::remove_dirs(parent, 0, self.owner, |n| n == name);
        }
    }

    fn signal(&self, sys: &impl Procs, sig: libc::c_int) {
        match &self.pidfd {
            Some(fd) => sys.pidfd_signal(fd, sig),
            // no pidfd (kernel < 5.3): the child is unreaped until we wait for it, so the pid
            // still names it
            None => {
                let _ = sys.kill(self.pid, sig);
            }
        }
    }

    fn wait_exit(&self, sys: &impl Procs, grace: Duration) -> bool {
        if let Some(fd) = &self.pidfd {
            return sys.poll_exit(fd, grace);
        }
        let t0 = Instant::now();
        while t0.elapsed() < grace {
            if !matches!(sys.try_wait(self.pid), Ok(None)) {
                return true;
            }
            sys.sleep(Duration::from_millis(10));
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::fake::Recorder;
    use crate::sys::seam::Linux;
    use std::os::unix::fs::PermissionsExt;

    fn me() -> Creds {
        // SAFETY: getuid and getgid only read the process's ids.
        unsafe {
            Creds {
                uid: libc::getuid(),
                gid: libc::getgid(),
                groups: vec![libc::getgid()],
            }
        }
    }

    /// A stand-in for `gpurun hold` that behaves like the interface says: writes the state file
    /// given after --state, then waits for SIGTERM.
    fn fake_gpurun(dir: &Path, body: &str) -> PathBuf {
        let p = dir.join("fake-gpurun");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn run(body: &str, timeout: Duration) -> (Result<Running, HolderError>, PathBuf) {
        let base = std::env::temp_dir();
        let bin_dir = make_dir(&base, "test-bin").unwrap();
        let gpurun = fake_gpurun(&bin_dir, body);
        let dir = make_dir(&base, "test").unwrap();
        let args = vec![
            "hold".to_string(),
            "img".into(),
            "--state".into(),
            state_path(&dir).display().to_string(),
        ];
        let env = vec!["FOO=bar".to_string()];
        let creds = me();
        let spec = Spec {
            gpurun: &gpurun,
            args: &args,
            env: &env,
            cwd: &base,
            creds: &creds,
            dir: &dir,
            timeout,
            log_stdout: false,
        };
        // Another test's fork (tests run on several threads) can hold the script open for
        // writing until its exec: the kernel then refuses to run it (ETXTBSY) for a moment.
        let mut r = start(&Linux, &spec);
        for _ in 0..20 {
            match &r {
                Err(e) if e.to_string().contains("Text file busy") => {
                    std::thread::sleep(Duration::from_millis(50));
                    r = start(&Linux, &spec);
                }
                _ => break,
            }
        }
        (r, bin_dir)
    }

    #[test]
    fn ready_then_stopped() {
        let (r, bin) = run(
            r#"printf '{"pid": %d, "root": "/", "env": ["FOO=%s"], "cwd": "%s"}' $$ "$FOO" "$PWD" > "$4.tmp"
               mv "$4.tmp" "$4"; trap 'exit 0' TERM; while :; do sleep 0.05; done"#,
            Duration::from_secs(10),
        );
        let mut r = r.unwrap();
        let h = r.ready(&Linux).unwrap();
        assert_eq!(h.env, [("FOO".to_string(), "bar".to_string())]);
        assert_eq!(h.cwd, std::env::temp_dir());
        let dir = r.dir.clone();
        r.stop(&Linux, Duration::from_secs(5));
        assert!(!dir.exists());
        assert!(matches!(Linux.try_wait(r.pid), Ok(Some(_)) | Err(_)));
        std::fs::remove_dir_all(bin).unwrap();
    }

    #[test]
    fn failure_reports_the_holder_error() {
        let (r, bin) = run(
            "echo 'gpurun: noise' >&2; echo 'gpurun: img: no such file' >&2; exit 125",
            Duration::from_secs(10),
        );
        let e = r.unwrap().ready(&Linux).err().unwrap().to_string();
        assert_eq!(
            e,
            "noise / img: no such file (gpurun hold exit status: 125)"
        );
        std::fs::remove_dir_all(bin).unwrap();
    }

    /// In a task the holder is no child (and in slurmstepd it may be reaped by Slurm's own
    /// wait3): its exit is then known only through the pidfd, without a status.
    #[test]
    fn failure_is_seen_when_the_holder_is_not_our_child() {
        let (r, bin) = run(
            "echo 'gpurun: img: no such file' >&2; exit 125",
            Duration::from_secs(10),
        );
        let mut r = r.unwrap();
        let mut status = 0;
        // reaped behind the Child's back, as slurmstepd does
        let pid = r.pid as libc::pid_t;
        // SAFETY: `status` outlives the call; the pid is our own unreaped child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        let e = r.ready(&Linux).err().unwrap().to_string();
        assert_eq!(e, "img: no such file (gpurun hold exited)");
        std::fs::remove_dir_all(bin).unwrap();
    }

    #[test]
    fn timeout_is_reported_and_stop_kills_the_holder() {
        let (r, bin) = run("exec sleep 30", Duration::from_millis(200));
        let mut r = r.unwrap();
        let e = r.ready(&Linux).err().unwrap().to_string();
        assert!(e.contains("not ready after"), "{e}");
        let dir = r.dir.clone();
        r.stop(&Linux, Duration::from_secs(5));
        assert!(matches!(Linux.try_wait(r.pid), Ok(Some(_)) | Err(_)));
        assert!(!dir.exists());
        std::fs::remove_dir_all(bin).unwrap();
    }

    /// A holder started through the recording fake, with a directory of the test's.
    fn started(
        sys: &Recorder,
        log_stdout: bool,
    ) -> (Result<Running, HolderError>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let args = ["hold", "img", "--state", "/d/state.json"].map(String::from);
        let env = ["A=1", "B=x=y", "no-equals"].map(String::from);
        let creds = Creds {
            uid: 1000,
            gid: 100,
            groups: vec![100, 5],
        };
        let spec = Spec {
            gpurun: Path::new("/usr/bin/gpurun"),
            args: &args,
            env: &env,
            cwd: Path::new("/w"),
            creds: &creds,
            dir: dir.path(),
            timeout: Duration::from_secs(60),
            log_stdout,
        };
        (start(sys, &spec), dir)
    }

    const SPAWN: &str = "spawn /usr/bin/gpurun hold img --state /d/state.json | as 1000:100 \
                         groups [100, 5] | env A=1 B=x=y | cwd /w | out";

    /// Started as the user: the credentials, nothing of slurmstepd's environment but the
    /// step's `K=V` entries, the job's directory, the log; then a pidfd on it.
    #[test]
    fn a_holder_starts_as_the_user() {
        for (log_stdout, out) in [(false, "null"), (true, "log")] {
            let sys = Recorder::new();
            let (r, _dir) = started(&sys, log_stdout);
            assert_eq!(r.unwrap().pid, crate::sys::fake::PID);
            let want = [format!("{SPAWN} {out} err log"), "pidfd_open 4242".into()];
            assert_eq!(sys.lines(), want);
        }
        let sys = Recorder::new().failing("spawn_as", libc::ENOENT);
        let e = started(&sys, false).0.err().unwrap().to_string();
        assert_eq!(
            e,
            "cannot start /usr/bin/gpurun: No such file or directory (os error 2)"
        );
        assert_eq!(sys.lines().len(), 1, "no pidfd for what did not start");
    }

    /// Stopped through its pidfd, each wait with a deadline: SIGTERM, the grace, then SIGKILL
    /// and 5 s; then reaped. Without pidfds, kill(2) on the unreaped child and waitpid.
    #[test]
    fn a_holder_is_stopped_through_its_pidfd() {
        let grace = Duration::from_secs(10);
        let (term, kill) = (libc::SIGTERM, libc::SIGKILL);
        let reap = "waitpid 4242 WNOHANG";
        let table: [(Recorder, &[&str]); 3] = [
            (
                Recorder::new().exiting(term, Some("signal: 15")),
                &["signal pidfd 4242 TERM", "poll pidfd 4242 10s", reap],
            ),
            (
                Recorder::new().exiting(kill, Some("signal: 9")),
                &[
                    "signal pidfd 4242 TERM",
                    "poll pidfd 4242 10s",
                    "signal pidfd 4242 KILL",
                    "poll pidfd 4242 5s",
                    reap,
                ],
            ),
            (
                Recorder::new()
                    .without_pidfds()
                    .exiting(term, Some("signal: 15")),
                &["kill 4242 TERM", reap, reap],
            ),
        ];
        for (sys, want) in table {
            let (r, _dir) = started(&sys, false);
            let mut r = r.unwrap();
            let before = sys.lines().len();
            r.stop(&sys, grace);
            r.stop(&sys, grace);
            assert_eq!(sys.lines()[before..], *want, "once, however often asked");
        }
    }

    /// A holder that exited before its container was ready: one error, with its status where
    /// it is our child, else (a task's view) learnt through the pidfd or kill(pid, 0).
    #[test]
    fn a_holder_that_exited_is_one_clear_error() {
        let table: [(Recorder, &[&str], &str); 3] = [
            (
                Recorder::new().exiting(0, Some("exit status: 125")),
                &["waitpid 4242 WNOHANG"],
                "img: no such file (gpurun hold exit status: 125)",
            ),
            (
                Recorder::new().exiting(0, None),
                &["waitpid 4242 WNOHANG", "poll pidfd 4242 0ns"],
                "img: no such file (gpurun hold exited)",
            ),
            (
                Recorder::new().without_pidfds().exiting(0, None),
                &["waitpid 4242 WNOHANG", "kill 4242 0"],
                "img: no such file (gpurun hold exited)",
            ),
        ];
        for (sys, calls, want) in table {
            let (r, dir) = started(&sys, false);
            let mut r = r.unwrap();
            std::fs::write(log_path(dir.path()), "gpurun: img: no such file\n").unwrap();
            let before = sys.lines().len();
            assert_eq!(r.ready(&sys).unwrap_err().to_string(), want);
            assert_eq!(sys.lines()[before..], *calls, "{want}");
        }
    }

    /// The state file and the log are the user's to change: a FIFO there is not waited on
    /// (the deadline holds), nor is a link followed to another holder's state.
    #[test]
    fn a_state_file_the_user_swapped_is_not_waited_on_nor_followed() {
        let other = tempfile::tempdir().unwrap();
        let theirs = other.path().join("state.json");
        std::fs::write(&theirs, r#"{"pid": 1, "root": "/", "env": [], "cwd": "/"}"#).unwrap();
        for swap in ["fifo", "link"] {
            let sys = Recorder::new();
            let (r, dir) = started(&sys, false);
            let mut r = r.unwrap();
            let state = state_path(dir.path());
            let log = log_path(dir.path());
            std::fs::remove_file(&log).unwrap();
            match swap {
                "fifo" => {
                    for p in [&state, &log] {
                        nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRWXU).unwrap();
                    }
                }
                _ => std::os::unix::fs::symlink(&theirs, &state).unwrap(),
            }
            r.timeout = Duration::ZERO;
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || tx.send(r.ready(&Recorder::new()).map(|h| h.pid)));
            let got = rx.recv_timeout(Duration::from_secs(5));
            let got = got.unwrap_or_else(|_| panic!("{swap}: waited"));
            let e = got.unwrap_err().to_string();
            assert!(e.contains("not ready after 0s"), "{swap}: {e}");
        }
    }
}

//! Starting and stopping `gpurun hold`: one per node per step, run as the job's user, holding the
//! mounted image that the step's tasks join.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::state::{parse_state, Holder};

/// Who the holder runs as.
pub struct Creds {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub groups: Vec<libc::gid_t>,
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
    child: Child,
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

fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: plain syscall; a non-negative result is a new fd we own (close-on-exec by default).
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a non-negative result is a new fd that nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether `fd` (a pidfd: readable once the process exited) becomes readable within `timeout`.
fn readable(fd: &OwnedFd, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd and a valid timeout; no signal mask change.
    unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) == 1 }
}

/// The last non-empty lines of the holder's stderr, for the one line the user sees (which
/// says "gpurun: " once, in front).
fn log_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(log_path(dir)).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.trim().trim_start_matches("gpurun: "))
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(2)..].join(" / ")
}

/// Start the holder; it builds the container while slurmstepd goes on (see `Running::ready`).
pub fn start(spec: &Spec) -> Result<Running, String> {
    let log = File::create(log_path(spec.dir))
        .map_err(|e| format!("cannot create {}: {e}", log_path(spec.dir).display()))?;
    let out = match spec.log_stdout {
        true => log.try_clone().map_or(Stdio::null(), Stdio::from),
        false => Stdio::null(),
    };
    let mut cmd = Command::new(spec.gpurun);
    cmd.args(spec.args)
        .env_clear()
        .envs(spec.env.iter().filter_map(|e| e.split_once('=')))
        .current_dir(spec.cwd)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(log);
    let child = spawn_as(cmd, spec.creds)
        .map_err(|e| format!("cannot start {}: {e}", spec.gpurun.display()))?;
    let pidfd = pidfd_open(child.id());
    Ok(Running {
        dir: spec.dir.to_path_buf(),
        child,
        pidfd,
        started: Instant::now(),
        timeout: spec.timeout,
        stopped: false,
        owner: (spec.creds.uid, spec.creds.gid),
    })
}

/// Start the keeper of job `job`'s image servers (`gpurun keep`), as the job's user, in the
/// job's extern step: the servers it starts for the job's steps then live as long as the job.
pub fn start_keeper(gpurun: &Path, job: u32, creds: &Creds) -> Result<Child, String> {
    let mut cmd = Command::new(gpurun);
    cmd.args(["keep", "--job", &job.to_string()])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    spawn_as(cmd, creds).map_err(|e| format!("cannot start {}: {e}", gpurun.display()))
}

/// Spawn `cmd` as the user of `creds`, dying with slurmstepd.
fn spawn_as(mut cmd: Command, creds: &Creds) -> io::Result<Child> {
    as_user(&mut cmd, creds);
    cmd.spawn()
}

/// Make `cmd` run as the user of `creds`, with default signal handling, dying with
/// slurmstepd: what every program the plugin starts from slurmstepd needs.
pub fn as_user(cmd: &mut Command, creds: &Creds) {
    let (uid, gid, groups) = (creds.uid, creds.gid, creds.groups.clone());
    // SAFETY: the closure runs between fork and exec in a copy of a multi-threaded process, so
    // it only makes async-signal-safe syscalls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let check = |r: libc::c_int| {
                if r == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            };
            // slurmstepd runs user_init with ruid 0 and euid = user: regain euid 0 to be able to
            // drop every id (real, effective, saved) and the supplementary groups for good.
            if libc::getuid() == 0 {
                check(libc::seteuid(0))?;
                check(libc::setgroups(groups.len(), groups.as_ptr()))?;
                check(libc::setresgid(gid, gid, gid))?;
                check(libc::setresuid(uid, uid, uid))?;
            } else if libc::getuid() != uid || libc::geteuid() != uid {
                return Err(io::Error::from_raw_os_error(libc::EPERM));
            }
            // slurmstepd's threads block SIGTERM, SIGINT, SIGHUP…; the mask and ignored
            // dispositions survive exec and would make the process deaf to the stop signal
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            check(libc::pthread_sigmask(
                libc::SIG_SETMASK,
                &set,
                std::ptr::null_mut(),
            ))?;
            for sig in 1..32 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            // after the id change (which clears it): it dies with slurmstepd
            check(libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGTERM as libc::c_ulong,
                0,
                0,
                0,
            ))?;
            Ok(())
        });
    }
}

impl Running {
    /// What the holder has written (its stderr, and stdout where `log_stdout`).
    pub fn output(&self) -> String {
        std::fs::read_to_string(log_path(&self.dir)).unwrap_or_default()
    }

    /// Wait until the state file says the container is ready, the holder has exited, or the
    /// timeout (counted from the start) has passed. Called in each task (task_init), so the
    /// holder builds the container while slurmstepd prepares the tasks instead of before.
    pub fn ready(&mut self) -> Result<Holder, String> {
        let state = state_path(&self.dir);
        let mut pause = Duration::from_micros(250);
        loop {
            // the holder may write the file in place: a partial file does not parse yet
            if let Ok(text) = std::fs::read_to_string(&state) {
                if let Ok(h) = parse_state(&text) {
                    return Ok(h);
                }
            }
            if let Some(st) = self.exited() {
                return Err(match log_tail(&self.dir) {
                    why if why.is_empty() => format!("gpurun hold failed ({st})"),
                    why => format!("{why} (gpurun hold {st})"),
                });
            }
            if self.started.elapsed() > self.timeout {
                return Err(format!(
                    "gpurun hold: container not ready after {}s (plugstack.conf timeout=){}",
                    self.timeout.as_secs(),
                    match log_tail(&self.dir) {
                        t if t.is_empty() => String::new(),
                        t => format!(": {t}"),
                    }
                ));
            }
            // A short poll while a container usually gets ready (tens of ms), then backing off
            // for a pull. Not inotify: closing an inotify instance waits for an SRCU grace
            // period, milliseconds on every task's way to its command.
            self.pause(pause);
            if self.started.elapsed() > Duration::from_millis(200) {
                pause = (pause * 2).min(Duration::from_millis(20));
            }
        }
    }

    /// Sleep for `d`, waking early when the holder exits (its pidfd becomes readable).
    fn pause(&self, d: Duration) {
        match &self.pidfd {
            Some(fd) => {
                readable(fd, d);
            }
            None => std::thread::sleep(d),
        }
    }

    /// How the holder ended, if it has. In slurmstepd it is a child (its status is known); in
    /// a forked task it is not, and the pidfd (else the pid) tells whether it is still there.
    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(st)) => return Some(st.to_string()),
            Ok(None) => return None,
            Err(_) => {}
        }
        let gone = match &self.pidfd {
            Some(fd) => readable(fd, Duration::ZERO),
            // SAFETY: signal 0 only checks the pid.
            None => (unsafe { libc::kill(self.child.id() as libc::pid_t, 0) }) != 0,
        };
        gone.then(|| "exited".to_string())
    }

    /// SIGTERM, wait up to `grace` for the holder to unmount and exit, then SIGKILL; remove the
    /// state directory.
    pub fn stop(&mut self, grace: Duration) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        self.signal(libc::SIGTERM);
        if !self.wait_exit(grace) {
            self.signal(libc::SIGKILL);
            self.wait_exit(Duration::from_secs(5));
        }
        // reap it if slurmstepd has not already (then this returns an error we do not need)
        let _ = self.child.try_wait();
        // as root at the step's end: removed as the user it belongs to (removal.rs)
        if let (Some(parent), Some(name)) = (self.dir.parent(), self.dir.file_name()) {
            let name = name.to_string_lossy().into_owned();
            crate::removal::remove_dirs(parent, 0, self.owner, |n| n == name);
        }
    }

    fn signal(&self, sig: libc::c_int) {
        match &self.pidfd {
            // SAFETY: valid pidfd; a failure means the process is gone already.
            Some(fd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    sig,
                    0usize,
                    0u32,
                );
            },
            // no pidfd (kernel < 5.3): the child is unreaped until we wait for it, so the pid
            // still names it
            // SAFETY: a signal to our own child, unreaped, so its pid is not reused.
            None => unsafe {
                libc::kill(self.child.id() as libc::pid_t, sig);
            },
        }
    }

    fn wait_exit(&mut self, grace: Duration) -> bool {
        match &self.pidfd {
            Some(fd) => readable(fd, grace),
            None => {
                let t0 = Instant::now();
                while t0.elapsed() < grace {
                    if !matches!(self.child.try_wait(), Ok(None)) {
                        return true;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    fn run(body: &str, timeout: Duration) -> (Result<Running, String>, PathBuf) {
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
        let mut r = start(&spec);
        for _ in 0..20 {
            match &r {
                Err(e) if e.contains("Text file busy") => {
                    std::thread::sleep(Duration::from_millis(50));
                    r = start(&spec);
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
        let h = r.ready().unwrap();
        assert_eq!(h.env, [("FOO".to_string(), "bar".to_string())]);
        assert_eq!(h.cwd, std::env::temp_dir());
        let dir = r.dir.clone();
        r.stop(Duration::from_secs(5));
        assert!(!dir.exists());
        assert!(matches!(r.child.try_wait(), Ok(Some(_)) | Err(_)));
        std::fs::remove_dir_all(bin).unwrap();
    }

    #[test]
    fn failure_reports_the_holder_error() {
        let (r, bin) = run(
            "echo 'gpurun: noise' >&2; echo 'gpurun: img: no such file' >&2; exit 125",
            Duration::from_secs(10),
        );
        let e = r.unwrap().ready().err().unwrap();
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
        let pid = r.child.id() as libc::pid_t;
        // SAFETY: `status` outlives the call; the pid is our own unreaped child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        let e = r.ready().err().unwrap();
        assert_eq!(e, "img: no such file (gpurun hold exited)");
        std::fs::remove_dir_all(bin).unwrap();
    }

    #[test]
    fn timeout_is_reported_and_stop_kills_the_holder() {
        let (r, bin) = run("exec sleep 30", Duration::from_millis(200));
        let mut r = r.unwrap();
        let e = r.ready().err().unwrap();
        assert!(e.contains("not ready after"), "{e}");
        let dir = r.dir.clone();
        r.stop(Duration::from_secs(5));
        assert!(matches!(r.child.try_wait(), Ok(Some(_))));
        assert!(!dir.exists());
        std::fs::remove_dir_all(bin).unwrap();
    }
}

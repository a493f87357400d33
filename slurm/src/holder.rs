//! Starting and stopping `gpurun hold`: one per node per step, run as the job's user, holding the
//! mounted image that the step's tasks join.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
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
}

/// A ready holder.
pub struct Running {
    pub holder: Holder,
    pub dir: PathBuf,
    child: Child,
    /// Signals go through a pidfd: once the tasks run, slurmstepd reaps every child it has
    /// (wait3(-1)), so the holder's pid could be reused by the time the step ends.
    pidfd: Option<OwnedFd>,
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
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
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

/// Start the holder and wait until its state file says the container is ready.
pub fn start(spec: &Spec) -> Result<Running, String> {
    let log = File::create(log_path(spec.dir))
        .map_err(|e| format!("cannot create {}: {e}", log_path(spec.dir).display()))?;
    let mut cmd = Command::new(spec.gpurun);
    cmd.args(spec.args)
        .env_clear()
        .envs(spec.env.iter().filter_map(|e| e.split_once('=')))
        .current_dir(spec.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    let uid = spec.creds.uid;
    let gid = spec.creds.gid;
    let groups = spec.creds.groups.clone();
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
            // dispositions survive exec and would make the holder deaf to the stop signal
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
            // after the id change (which clears it): the holder dies with slurmstepd
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
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", spec.gpurun.display()))?;
    let pidfd = pidfd_open(child.id());
    let mut running = Running {
        holder: placeholder(),
        dir: spec.dir.to_path_buf(),
        child,
        pidfd,
    };
    match wait_ready(&mut running, spec.timeout) {
        Ok(h) => {
            running.holder = h;
            Ok(running)
        }
        Err(e) => {
            running.stop(Duration::from_secs(5));
            Err(e)
        }
    }
}

fn placeholder() -> Holder {
    Holder {
        pid: 0,
        root: PathBuf::from("/"),
        env: Vec::new(),
        cwd: PathBuf::from("/"),
    }
}

fn wait_ready(r: &mut Running, timeout: Duration) -> Result<Holder, String> {
    let t0 = Instant::now();
    let state = state_path(&r.dir);
    // Made before the first look at the state file, so a rename in between still wakes us.
    let watch = watch_dir(&r.dir);
    let mut pause = Duration::from_millis(2);
    loop {
        // the holder may write the file in place: a partial file does not parse yet
        if let Ok(text) = std::fs::read_to_string(&state) {
            if let Ok(h) = parse_state(&text) {
                return Ok(h);
            }
        }
        match r.child.try_wait() {
            Ok(Some(st)) => {
                return Err(match log_tail(&r.dir) {
                    why if why.is_empty() => format!("gpurun hold failed ({st})"),
                    why => format!("{why} (gpurun hold {st})"),
                });
            }
            Ok(None) => {}
            Err(e) => return Err(format!("gpurun hold: {e}")),
        }
        if t0.elapsed() > timeout {
            return Err(format!(
                "gpurun hold: container not ready after {}s (plugstack.conf timeout=){}",
                timeout.as_secs(),
                match log_tail(&r.dir) {
                    t if t.is_empty() => String::new(),
                    t => format!(": {t}"),
                }
            ));
        }
        match &watch {
            // Woken by the state file landing or the holder exiting: the step starts as soon
            // as the container is ready, not at the next tick of a poll (that cost up to half
            // of the plugin's start-up). The cap only bounds a missed event.
            Some(w) => wait_readable(&[w, r.pidfd.as_ref().unwrap_or(w)], 50),
            None => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
        }
    }
}

/// An inotify fd that becomes readable when a file is renamed into or written in `dir`; None
/// where inotify is unavailable (then the wait polls).
fn watch_dir(dir: &Path) -> Option<OwnedFd> {
    // SAFETY: plain syscall; a non-negative result is a new fd we own.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    if fd < 0 {
        return None;
    }
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: valid fd and NUL-terminated path.
    let wd = unsafe {
        libc::inotify_add_watch(
            fd.as_raw_fd(),
            path.as_ptr(),
            libc::IN_MOVED_TO | libc::IN_CLOSE_WRITE,
        )
    };
    (wd >= 0).then_some(fd)
}

/// Wait up to `ms` for any of `fds` to be readable, then drain the inotify events (the first
/// fd) so the next wait blocks again.
fn wait_readable(fds: &[&OwnedFd], ms: i32) {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: valid pollfds, and a buffer of the size given; the inotify fd is non-blocking.
    unsafe {
        libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms);
        let mut buf = [0u8; 4096];
        while libc::read(fds[0].as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) > 0 {}
    }
}

impl Running {
    /// SIGTERM, wait up to `grace` for the holder to unmount and exit, then SIGKILL; remove the
    /// state directory.
    pub fn stop(&mut self, grace: Duration) {
        self.signal(libc::SIGTERM);
        if !self.wait_exit(grace) {
            self.signal(libc::SIGKILL);
            self.wait_exit(Duration::from_secs(5));
        }
        // reap it if slurmstepd has not already (then this returns an error we do not need)
        let _ = self.child.try_wait();
        let _ = std::fs::remove_dir_all(&self.dir);
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
            None => unsafe {
                libc::kill(self.child.id() as libc::pid_t, sig);
            },
        }
    }

    fn wait_exit(&mut self, grace: Duration) -> bool {
        match &self.pidfd {
            Some(fd) => {
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = grace.as_millis().min(i32::MAX as u128) as i32;
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut p, 1, ms) == 1 }
            }
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
        assert_eq!(r.holder.env, [("FOO".to_string(), "bar".to_string())]);
        assert_eq!(r.holder.cwd, std::env::temp_dir());
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
        let e = r.err().unwrap();
        assert_eq!(
            e,
            "noise / img: no such file (gpurun hold exit status: 125)"
        );
        std::fs::remove_dir_all(bin).unwrap();
    }

    #[test]
    fn timeout_kills_the_holder() {
        let (r, bin) = run("exec sleep 30", Duration::from_millis(200));
        let e = r.err().unwrap();
        assert!(e.contains("not ready after"), "{e}");
        std::fs::remove_dir_all(bin).unwrap();
    }
}

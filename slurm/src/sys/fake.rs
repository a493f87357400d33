//! A recording stand-in for `seam`'s traits, for tests: each call is noted as one line, the
//! handles it gives out stand for what they were opened on (fds of /dev/null, named), and a
//! call fails with an errno where the test says so.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

use super::seam::{Enter, Ns, Procs, UserCommand};

/// The recording fake: every method notes its line (`is_other`, a lookup, notes none) and
/// succeeds unless `failing` named it; the holder it starts is pid [`PID`].
#[derive(Default)]
pub struct Recorder {
    lines: RefCell<Vec<String>>,
    names: RefCell<HashMap<RawFd, String>>,
    /// (method, errno): that method fails.
    failures: Vec<(&'static str, i32)>,
    /// The holder's namespaces that are the task's own.
    shared: Vec<Ns>,
    no_pidfd: bool,
    /// The signal after which the holder has exited (None: it never does; 0: it has already).
    exits_on: Option<libc::c_int>,
    /// What `try_wait` says once it has exited: its status (None: it is no child of ours).
    status: Option<String>,
    exited: Cell<bool>,
}

/// The pid of the holder `spawn_as` starts.
pub const PID: u32 = 4242;

/// A signal's name, as kill -l says it.
fn sig_name(sig: libc::c_int) -> String {
    match sig {
        0 => "0".into(),
        libc::SIGTERM => "TERM".into(),
        libc::SIGKILL => "KILL".into(),
        s => s.to_string(),
    }
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// `method` fails with `errno`.
    pub fn failing(mut self, method: &'static str, errno: i32) -> Recorder {
        self.failures.push((method, errno));
        self
    }

    /// The holder's namespace `ns` is the task's own.
    pub fn sharing(mut self, ns: Ns) -> Recorder {
        self.shared.push(ns);
        self
    }

    pub fn without_pidfds(mut self) -> Recorder {
        self.no_pidfd = true;
        self
    }

    /// The holder exits on signal `sig` (0: it has exited already), leaving `status` for
    /// `try_wait` (None: reaped by another, or no child of ours).
    pub fn exiting(mut self, sig: libc::c_int, status: Option<&str>) -> Recorder {
        self.exits_on = Some(sig);
        self.status = status.map(String::from);
        self.exited.set(sig == 0);
        self
    }

    /// The calls, one line each, as they were made.
    pub fn lines(&self) -> Vec<String> {
        self.lines.borrow().clone()
    }

    fn note(&self, line: String) {
        self.lines.borrow_mut().push(line);
    }

    fn check(&self, method: &str) -> io::Result<()> {
        match self.failures.iter().find(|(m, _)| *m == method) {
            Some((_, e)) => Err(io::Error::from_raw_os_error(*e)),
            None => Ok(()),
        }
    }

    fn handle(&self, name: String) -> OwnedFd {
        let fd = OwnedFd::from(File::open("/dev/null").expect("/dev/null"));
        self.names.borrow_mut().insert(fd.as_raw_fd(), name);
        fd
    }

    fn name(&self, fd: &OwnedFd) -> String {
        let names = self.names.borrow();
        let n = names.get(&fd.as_raw_fd()).cloned();
        n.unwrap_or_else(|| format!("fd {}", fd.as_raw_fd()))
    }
}

impl Enter for Recorder {
    fn open_process(&self, pid: i32) -> io::Result<OwnedFd> {
        self.note(format!("open /proc/{pid}"));
        self.check("open_process")?;
        Ok(self.handle(format!("/proc/{pid}")))
    }
    fn open_ns(&self, process: &OwnedFd, ns: Ns) -> io::Result<OwnedFd> {
        let path = format!("{}/ns/{}", self.name(process), ns.name());
        self.note(format!("open {path}"));
        self.check("open_ns")?;
        Ok(self.handle(path))
    }
    fn is_other(&self, _: &OwnedFd, ns: Ns) -> io::Result<bool> {
        Ok(!self.shared.contains(&ns))
    }
    fn setns(&self, fd: &OwnedFd, ns: Ns) -> io::Result<()> {
        self.note(format!("setns {} {}", self.name(fd), ns.name()));
        self.check("setns")
    }
    fn unshare_mount(&self) -> io::Result<()> {
        self.note("unshare mnt".into());
        self.check("unshare_mount")
    }
    fn make_root_rslave(&self) -> io::Result<()> {
        self.note("propagation / rslave".into());
        self.check("make_root_rslave")
    }
    fn chdir(&self, dir: &Path) -> io::Result<()> {
        self.note(format!("chdir {}", dir.display()));
        self.check(&format!("chdir {}", dir.display()))
    }
    fn pivot_root_here(&self) -> io::Result<()> {
        self.note("pivot_root . .".into());
        self.check("pivot_root_here")
    }
    fn detach_old_root(&self) -> io::Result<()> {
        self.note("umount2 . detach".into());
        self.check("detach_old_root")
    }
    fn no_new_privs(&self) -> io::Result<()> {
        self.note("no_new_privs".into());
        self.check("no_new_privs")
    }
    fn fake_ids(&self) -> io::Result<()> {
        self.note("seccomp fake-ids".into());
        self.check("fake_ids")
    }
}

impl Procs for Recorder {
    fn spawn_as(&self, c: UserCommand) -> io::Result<u32> {
        let env: Vec<String> = c.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let to = |f: &Option<File>| if f.is_some() { "log" } else { "null" };
        let cr = c.creds;
        self.note(format!(
            "spawn {} {} | as {}:{} groups {:?} | env {} | cwd {} | out {} err {}",
            c.program.display(),
            c.args.join(" "),
            cr.uid,
            cr.gid,
            cr.groups,
            env.join(" "),
            c.cwd.display(),
            to(&c.stdout),
            to(&c.stderr),
        ));
        self.check("spawn_as")?;
        Ok(PID)
    }
    fn pidfd_open(&self, pid: u32) -> Option<OwnedFd> {
        self.note(format!("pidfd_open {pid}"));
        (!self.no_pidfd).then(|| self.handle(format!("pidfd {pid}")))
    }
    fn try_wait(&self, pid: u32) -> io::Result<Option<String>> {
        self.note(format!("waitpid {pid} WNOHANG"));
        match (self.exited.get(), &self.status) {
            (false, _) => Ok(None),
            (true, Some(s)) => Ok(Some(s.clone())),
            (true, None) => Err(io::Error::from_raw_os_error(libc::ECHILD)),
        }
    }
    fn poll_exit(&self, pidfd: &OwnedFd, within: Duration) -> bool {
        self.note(format!("poll {} {within:?}", self.name(pidfd)));
        self.exited.get()
    }
    fn pidfd_signal(&self, pidfd: &OwnedFd, sig: libc::c_int) {
        self.note(format!("signal {} {}", self.name(pidfd), sig_name(sig)));
        if self.exits_on == Some(sig) {
            self.exited.set(true);
        }
    }
    fn kill(&self, pid: u32, sig: libc::c_int) -> io::Result<()> {
        self.note(format!("kill {pid} {}", sig_name(sig)));
        if self.exits_on == Some(sig) {
            self.exited.set(true);
        }
        match (sig, self.exited.get()) {
            (0, true) => Err(io::Error::from_raw_os_error(libc::ESRCH)),
            _ => Ok(()),
        }
    }
    fn sleep(&self, d: Duration) {
        self.note(format!("sleep {d:?}"));
    }
}

//! Shared helpers for the integration tests: the unprivileged test user, scratch dirs it owns,
//! images built with the real squashfs-tools, and running gpurun as that user.
#![allow(dead_code)] // each test binary uses a different subset

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Once;

/// The unprivileged user that runs gpurun in tests (created by .ci/run, or here when root).
pub const TEST_USER: &str = "gpuruntest";
/// A second unprivileged user, for tests of what one user can do to another's gpurun.
pub const OTHER_USER: &str = "gpurunother";

pub fn is_root() -> bool {
    // SAFETY: geteuid only reads the process's id.
    unsafe { libc::geteuid() == 0 }
}

/// Say that the running test does not do its work here, and why: "SKIP name: why", written to
/// stderr directly (the harness captures only print!/eprint!), so a passing run shows it.
pub fn skip(why: &str) {
    use std::io::Write;
    let t = std::thread::current();
    let name = t.name().unwrap_or("a test");
    let _ = writeln!(std::io::stderr().lock(), "SKIP {name}: {why}");
}

/// Whether the test runs as root (tests switch to the test user themselves); when not, it is
/// reported as skipped: "needs root WHAT".
pub fn root_or_skip(what: &str) -> bool {
    let root = is_root();
    if !root {
        skip(&format!("needs root {what}"));
    }
    root
}

pub fn gpurun_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpurun"))
}

static SETUP: Once = Once::new();

/// Make sure the test user exists and /dev/fuse is usable the way distributions ship it.
pub fn setup() {
    SETUP.call_once(|| {
        if !is_root() {
            return;
        }
        for user in [TEST_USER, OTHER_USER] {
            let exists = Command::new("id")
                .arg(user)
                .output()
                .unwrap()
                .status
                .success();
            if !exists {
                let st = Command::new("useradd")
                    .args(["-m", "-s", "/bin/sh", user])
                    .status()
                    .expect("useradd");
                assert!(st.success(), "could not create test user {user}");
            }
        }
        let _ = std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(0o666));
    });
}

/// uid and gid of the user that runs gpurun in tests.
pub fn test_ids() -> (u32, u32) {
    ids_of(TEST_USER)
}

/// uid and gid of `user` (the caller's own when not root: then there is one user only).
pub fn ids_of(user: &str) -> (u32, u32) {
    setup();
    if !is_root() {
        // SAFETY: getuid and getgid only read the process's ids.
        return unsafe { (libc::getuid(), libc::getgid()) };
    }
    let id = |flag: &str| -> u32 {
        let o = Command::new("id").args([flag, user]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    };
    (id("-u"), id("-g"))
}

/// A scratch directory owned by the test user, removed on drop.
pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        setup();
        let dir = tempfile::Builder::new()
            .prefix("gpurun-test.")
            .tempdir_in("/var/tmp")
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let (uid, gid) = test_ids();
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        Scratch { dir }
    }
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.dir.path().join(p)
    }
    /// Give everything under the scratch dir to the test user.
    pub fn chown_all(&self) {
        if is_root() {
            let (uid, gid) = test_ids();
            let st = Command::new("chown")
                .arg("-R")
                .arg(format!("{uid}:{gid}"))
                .arg(self.path())
                .status()
                .unwrap();
            assert!(st.success());
        }
    }
}

/// A command that runs `program` as the unprivileged test user (directly when not root).
/// setpriv execs in place (no fork, unlike runuser), so the pid we hold is the program's own and
/// signals sent to it reach it directly; the environment is reset to a login-like one.
pub fn as_user(program: impl AsRef<OsStr>) -> Command {
    as_named(TEST_USER, program)
}

/// `as_user`, as `user`.
pub fn as_named(user: &str, program: impl AsRef<OsStr>) -> Command {
    setup();
    if is_root() {
        let (uid, gid) = ids_of(user);
        let home = format!("/home/{user}");
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--init-groups")
            .arg("--")
            .arg(program)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            .env("HOME", home)
            .env("USER", user)
            .env("LOGNAME", user)
            .env("SHELL", "/bin/sh")
            // Image servers of the tests' images end soon after them (tests that share one
            // across starts set their own).
            .env("GPURUN_SERVER_IDLE", "20s")
            .current_dir("/");
        c
    } else {
        Command::new(program)
    }
}

/// `gpurun ARGS…` as the test user.
pub fn gpurun(args: &[&str]) -> Command {
    let mut c = as_user(gpurun_bin());
    c.args(args);
    c
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A first start of a docker:// image the cache lacks (from its unpacked layers), then the next
/// (from the finished .sqsh): both succeeded, only the first unpacked; their outputs.
pub fn first_and_second_start(run: impl Fn() -> Output) -> (Output, Output) {
    let first = run();
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(stderr(&first).contains("Unpacking"), "{}", stderr(&first));
    let second = run();
    assert!(second.status.success(), "{}", stderr(&second));
    let unpacked = stderr(&second).contains("Unpacking");
    assert!(
        !unpacked,
        "the second start unpacked again: {}",
        stderr(&second)
    );
    (first, second)
}

/// `o` failed with `code` and one `gpurun:` line that contains each of `needles`.
pub fn one_line_error(o: &Output, code: i32, needles: &[&str]) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {e}");
    let lines: Vec<&str> = e.lines().filter(|l| l.starts_with("gpurun:")).collect();
    assert_eq!(lines.len(), 1, "one error line expected: {e}");
    for n in needles {
        assert!(lines[0].contains(n), "error line lacks '{n}': {}", lines[0]);
    }
}

/// Run and return output, printing it on failure to ease debugging.
pub fn run_ok(cmd: &mut Command) -> Output {
    let o = cmd.output().expect("spawn");
    assert!(
        o.status.success(),
        "{cmd:?} failed: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    o
}

/// A minimal rootfs made from the machine's busybox-static: /bin/sh and the applets as links.
pub fn busybox_rootfs(root: &Path) {
    let bb = Path::new("/bin/busybox");
    assert!(
        bb.exists(),
        "busybox-static is needed for the tests (apt-get install busybox-static)"
    );
    for d in [
        "bin", "etc", "tmp", "usr/bin", "root", "home", "proc", "sys", "dev",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy(bb, root.join("bin/busybox")).unwrap();
    let out = Command::new(bb).arg("--list").output().unwrap();
    for applet in String::from_utf8_lossy(&out.stdout).lines() {
        if applet != "busybox" {
            let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(applet));
        }
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
}

/// Give `path` the extended attribute `name` (a user.* one: any file system here takes those).
pub fn setfattr(path: &Path, name: &str, value: &str) {
    run_ok(
        Command::new("setfattr")
            .args(["-n", name, "-v", value])
            .arg(path),
    );
}

/// mksquashfs DIR OUT (squashfs-tools), owned by the test user.
pub fn mksquashfs(dir: &Path, out: &Path, extra: &[&str]) {
    let mut c = Command::new("mksquashfs");
    c.arg(dir)
        .arg(out)
        .args(["-noappend", "-quiet", "-no-progress"])
        .args(extra);
    run_ok(&mut c);
    if is_root() {
        let (uid, gid) = test_ids();
        std::os::unix::fs::chown(out, Some(uid), Some(gid)).unwrap();
    }
}

/// A busybox image at SCRATCH/NAME.sqsh, with `customise` run on the rootfs first.
pub fn busybox_image(s: &Scratch, name: &str, customise: impl FnOnce(&Path)) -> PathBuf {
    busybox_image_with(s, name, &[], customise)
}

/// `busybox_image`, with these mksquashfs options.
pub fn busybox_image_with(
    s: &Scratch,
    name: &str,
    mksquashfs_args: &[&str],
    customise: impl FnOnce(&Path),
) -> PathBuf {
    let root = s.join(format!("{name}.root"));
    busybox_rootfs(&root);
    customise(&root);
    let img = s.join(format!("{name}.sqsh"));
    mksquashfs(&root, &img, mksquashfs_args);
    img
}

/// A busybox image with gpurun's metadata: Entrypoint /bin/echo, Cmd hi, PATH=/bin.
pub fn gpurun_image(s: &Scratch) -> PathBuf {
    busybox_image(s, "meta", |root| {
        std::fs::create_dir_all(root.join(".gpurun")).unwrap();
        std::fs::write(
            root.join(".gpurun/meta.json"),
            r#"{"env":["PATH=/bin","CUDA_VERSION=12.4.1"],"entrypoint":["/bin/echo"],"cmd":["hi"],
               "working_dir":"/","labels":{"org.opencontainers.image.title":"t"},
               "source":"docker://docker.io/library/busybox:1","manifest_digest":"sha256:abc",
               "platform":"linux/amd64","created":"2026-01-02T03:04:05Z"}"#,
        )
        .unwrap();
    })
}

/// /sys/fs/fuse/connections lists connections only with fusectl mounted there (not every machine
/// mounts it): mount it when root. Returns whether connections can be counted.
pub fn fusectl() -> bool {
    let mounted = || {
        std::fs::read_to_string("/proc/mounts")
            .unwrap()
            .lines()
            .any(|l| l.split_whitespace().nth(2) == Some("fusectl"))
    };
    if !mounted() && is_root() {
        let _ = Command::new("mount")
            .args(["-t", "fusectl", "fusectl", "/sys/fs/fuse/connections"])
            .status();
    }
    mounted()
}

/// Live FUSE connections on this machine (see `fusectl`).
pub fn fuse_connections() -> usize {
    std::fs::read_dir("/sys/fs/fuse/connections")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Processes of the test user whose command line mentions `marker`, as "PID: CMDLINE".
pub fn user_procs(marker: &str) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let (uid, _) = test_ids();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.parse::<u32>().is_err() || !e.metadata().is_ok_and(|m| m.uid() == uid) {
            continue;
        }
        let cmd = std::fs::read(format!("/proc/{name}/cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(marker) {
            out.push(format!("{name}: {cmd}"));
        }
    }
    out
}

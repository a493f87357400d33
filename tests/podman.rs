//! `podman://IMAGE` as the unprivileged test user, with Debian's real rootless podman: an image
//! put into the user's podman store (vfs; storage, runtime and config directories all in the
//! scratch directory, nothing from the network), then `gpurun pull` and `gpurun exec` of it; and
//! the errors of an image podman lacks, of no podman at all and of `dockerd://`; signals while
//! podman saves the image.

mod common;
mod support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{one_line_error, stderr, stdout, Scratch};
use support::{Comp, LayerTar, Layout};

const EXIT_NOT_FOUND: i32 = 20;
const EXIT_PODMAN: i32 = 25;
const NAME: &str = "localhost/gpurun-test/app:v1";

/// A rootless podman store of the test user's in a scratch directory; the pause process podman
/// leaves (its user namespace) is ended on drop, by its pid file.
struct Store {
    s: Scratch,
}

impl Store {
    fn new() -> Store {
        let s = Scratch::new();
        let root = s.join("podman-root");
        std::fs::write(
            s.join("storage.conf"),
            format!(
                "[storage]\ndriver = \"vfs\"\ngraphroot = \"{0}\"\nrootless_storage_path = \"{0}\"\n",
                root.display()
            ),
        )
        .unwrap();
        for d in ["run", "data", "config", "bin"] {
            std::fs::create_dir(s.join(d)).unwrap();
        }
        std::fs::set_permissions(
            s.join("run"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        s.chown_all();
        Store { s }
    }

    /// `program` as the test user, in this store, with gpurun's cache here too.
    fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let s = &self.s;
        let mut c = common::as_user(program);
        c.current_dir(s.path())
            .env("CONTAINERS_STORAGE_CONF", s.join("storage.conf"))
            .env("XDG_RUNTIME_DIR", s.join("run"))
            .env("XDG_DATA_HOME", s.join("data"))
            .env("XDG_CONFIG_HOME", s.join("config"))
            .env("GPURUN_CACHEDIR", s.join("cache"));
        c
    }

    fn gpurun(&self, args: &[&str]) -> Output {
        self.cmd(common::gpurun_bin()).args(args).output().unwrap()
    }

    fn gpurun_ok(&self, args: &[&str]) -> Output {
        let o = self.gpurun(args);
        assert!(o.status.success(), "gpurun {args:?}: {}", stderr(&o));
        o
    }

    fn podman(&self, args: &[&str]) -> String {
        let o = common::run_ok(self.cmd("podman").args(args));
        stdout(&o).trim().to_string()
    }

    /// An image whose /etc/hello says `hello`, copied into the store as `name` (the tag moves
    /// to it); returns the ID podman gives it.
    fn put(&self, name: &str, hello: &str) -> String {
        let dir = self.s.join(format!("layout-{hello}"));
        let mut l = Layout::new(&dir);
        let layer = LayerTar::new()
            .busybox()
            .file("etc/hello", hello.as_bytes())
            .finish();
        let config = serde_json::json!({
            "Env": ["PATH=/bin", "GREETING=from-the-image"],
            "Entrypoint": ["/bin/echo", "entrypoint"],
            "Cmd": ["cmd-arg"],
        });
        l.image("t", &[(layer, Comp::Gzip)], arch(), None, config);
        self.s.chown_all();
        let dest = format!("containers-storage:{name}");
        let src = format!("oci:{}:t", dir.display());
        common::run_ok(self.cmd("skopeo").args(["copy", "-q", &src, &dest]));
        self.podman(&["image", "inspect", "--format", "{{.Id}}", name])
    }

    fn cached_images(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.s.join("cache/images"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let pid_file = self.s.join("run/libpod/tmp/pause.pid");
        if let Some(pid) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|p| p.trim().parse::<libc::pid_t>().ok())
        {
            // SAFETY: a signal to podman's pause process: no memory is touched.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "amd64",
    }
}

/// podman is installed (tests/setup-machine.sh) and the tests run as root, to be the test user.
fn ready() -> bool {
    if !common::root_or_skip("to run podman as the test user") {
        return false;
    }
    let found = Command::new("podman").arg("--version").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "podman is missing: install it (tests/setup-machine.sh)"
    );
    true
}

/// Nothing but `keep` in `dir`: no image, no staging directory, no saved layout.
fn only(dir: &Path, keep: &[&str]) {
    for e in std::fs::read_dir(dir).unwrap() {
        let n = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(keep.contains(&n.as_str()), "{n} left in {}", dir.display());
    }
}

const SCRATCH_FILES: &[&str] = &[
    "storage.conf",
    "podman-root",
    "run",
    "data",
    "config",
    "bin",
    "cache",
    "layout-v1",
    "layout-v2",
];

#[test]
fn pull_and_exec_an_image_of_the_users_podman_store() {
    if !ready() {
        return;
    }
    let st = Store::new();
    let id1 = st.put(NAME, "v1");
    let src = format!("podman://{NAME}");

    // inspect: podman's word on it, nothing saved or cached.
    let o = st.gpurun_ok(&["inspect", "--json", &src]);
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["format"], "podman", "{r}");
    let digest = format!("sha256:{}", id1.trim_start_matches("sha256:"));
    assert_eq!(r["manifest_digest"], digest.as_str(), "{r}");
    assert_eq!(
        r["entrypoint"],
        serde_json::json!(["/bin/echo", "entrypoint"])
    );
    assert_eq!(r["platform"], format!("linux/{}", arch()), "{r}");
    assert!(r["size_bytes"].as_u64().unwrap() > 0, "{r}");
    assert!(st.cached_images().is_empty());

    // pull: the files and the image's config, and where it came from.
    st.gpurun_ok(&["pull", "-q", "-o", "out.sqsh", &src]);
    let tree = support::read_image(&st.s.join("out.sqsh"));
    assert_eq!(tree["etc/hello"].data, b"v1");
    let meta: serde_json::Value = serde_json::from_slice(&tree[".gpurun/meta.json"].data).unwrap();
    assert_eq!(meta["source"], src.as_str(), "{meta}");
    let env = serde_json::json!(["PATH=/bin", "GREETING=from-the-image"]);
    assert_eq!(meta["env"], env);
    assert_eq!(
        meta["entrypoint"],
        serde_json::json!(["/bin/echo", "entrypoint"])
    );
    assert_eq!(meta["cmd"], serde_json::json!(["cmd-arg"]));
    let o = st.gpurun_ok(&["run", "out.sqsh"]);
    assert_eq!(stdout(&o), "entrypoint cmd-arg\n");
    // Without -o: named after the image, as docker:// is.
    st.gpurun_ok(&["pull", "-q", &src]);
    assert!(st.s.join("app_v1.sqsh").is_file());
    std::fs::remove_file(st.s.join("app_v1.sqsh")).unwrap();
    std::fs::remove_file(st.s.join("out.sqsh")).unwrap();
    only(st.s.path(), SCRATCH_FILES);

    // exec: converted once into the cache, under podman's image ID.
    let script = "cat /etc/hello; echo \" $GREETING\"";
    let o = st.gpurun_ok(&["exec", &src, "sh", "-c", script]);
    assert_eq!(stdout(&o), "v1 from-the-image\n");
    assert!(stderr(&o).contains("from podman"), "{}", stderr(&o));
    let cached = format!("{}.sqsh", id1.trim_start_matches("sha256:"));
    assert_eq!(st.cached_images(), std::slice::from_ref(&cached));
    let first = std::fs::metadata(st.s.join("cache/images").join(&cached)).unwrap();
    let o = st.gpurun_ok(&["exec", &src, "sh", "-c", script]);
    assert_eq!(stdout(&o), "v1 from-the-image\n");
    assert!(!stderr(&o).contains("from podman"), "{}", stderr(&o));
    let again = std::fs::metadata(st.s.join("cache/images").join(&cached)).unwrap();
    assert_eq!((first.ino(), first.mtime()), (again.ino(), again.mtime()));

    // The name now points to another image: converted again, under its own ID.
    let id2 = st.put(NAME, "v2");
    assert_ne!(id1, id2);
    let o = st.gpurun_ok(&["exec", &src, "cat", "/etc/hello"]);
    assert_eq!(stdout(&o), "v2");
    let mut want = vec![
        cached,
        format!("{}.sqsh", id2.trim_start_matches("sha256:")),
    ];
    want.sort();
    assert_eq!(st.cached_images(), want);

    // pull --into-cache: that same file.
    let o = st.gpurun_ok(&["pull", "-q", "--into-cache", &src]);
    let path = PathBuf::from(stdout(&o).trim());
    assert_eq!(
        path,
        st.s.join("cache/images")
            .join(&want[1])
            .canonicalize()
            .unwrap()
    );
}

#[test]
fn podman_errors_name_the_fix_and_leave_nothing() {
    if !ready() {
        return;
    }
    let st = Store::new();
    let none = "podman://localhost/gpurun-test/none:v1";
    one_line_error(
        &st.gpurun(&["pull", "-o", "x.sqsh", none]),
        EXIT_NOT_FOUND,
        &[none, "podman images", "podman pull or podman load"],
    );
    one_line_error(&st.gpurun(&["exec", none, "true"]), EXIT_NOT_FOUND, &[none]);
    one_line_error(&st.gpurun(&["inspect", none]), EXIT_NOT_FOUND, &[none]);
    assert!(st.cached_images().is_empty(), "{:?}", st.cached_images());

    // No podman on PATH (tar2sqfs is not needed that far).
    let src = format!("podman://{NAME}");
    let no_podman = |args: &[&str]| {
        // Set by env(1), not for setpriv, which is found on the usual PATH.
        st.cmd("env")
            .arg(format!("PATH={}", st.s.join("bin").display()))
            .arg(common::gpurun_bin())
            .args(args)
            .output()
            .unwrap()
    };
    let needles = [src.as_str(), "cannot run podman", "install podman"];
    one_line_error(
        &no_podman(&["pull", "-o", "x.sqsh", &src]),
        EXIT_PODMAN,
        &needles,
    );
    one_line_error(&no_podman(&["exec", &src, "true"]), EXIT_PODMAN, &needles);

    // A pull that fails after podman saved the image (no tar2sqfs): the saved layout goes too.
    st.put(NAME, "v1");
    for tool in ["podman", "newuidmap", "newgidmap"] {
        let at = st.s.join("bin").join(tool);
        std::os::unix::fs::symlink(Path::new("/usr/bin").join(tool), at).unwrap();
    }
    let o = no_podman(&["pull", "-o", "x.sqsh", &src]);
    assert!(stderr(&o).contains("from podman"), "{}", stderr(&o));
    one_line_error(&o, 125, &["tar2sqfs"]);

    // The Docker daemon's socket is root's: the way round it is named.
    for args in [
        &["pull", "dockerd://alpine:3"][..],
        &["exec", "dockerd://alpine:3", "true"],
    ] {
        one_line_error(&st.gpurun(args), 125, &["Docker daemon", "docker-archive:"]);
    }
    only(st.s.path(), SCRATCH_FILES);
    if st.s.join("cache/images").exists() {
        only(&st.s.join("cache/images"), &[]);
    }
}

/// SIGINT and SIGTERM at points spread over a pull of `podman://`, while podman saves the image
/// among them: no output, no staging directory or saved layout, no podman left; then a pull works.
#[test]
fn an_interrupted_podman_pull_leaves_nothing() {
    if !ready() {
        return;
    }
    let st = Store::new();
    st.put(NAME, "v1");
    let src = format!("podman://{NAME}");
    let t0 = std::time::Instant::now();
    st.gpurun_ok(&["pull", "-o", "x.sqsh", &src]);
    let whole = t0.elapsed();
    std::fs::remove_file(st.s.join("x.sqsh")).unwrap();
    let scratch = st.s.path().display().to_string();
    let mut while_saving = 0;
    for i in 1..=8u32 {
        let child = st
            .cmd(common::gpurun_bin())
            .args(["pull", "-o", "x.sqsh", &src])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(whole * i / 9);
        let sig = [libc::SIGINT, libc::SIGTERM][i as usize % 2];
        // SAFETY: a signal to the test's own child: no memory is touched.
        unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        let o = child.wait_with_output().unwrap();
        if o.status.success() {
            std::fs::remove_file(st.s.join("x.sqsh")).unwrap();
            continue;
        }
        let saving = stderr(&o).contains("from podman") && !stderr(&o).contains("Writing");
        while_saving += usize::from(saving);
        // a signal after the image was put in place leaves it whole
        if st.s.join("x.sqsh").exists() {
            let tree = support::read_image(&st.s.join("x.sqsh"));
            assert_eq!(tree["etc/hello"].data, b"v1", "{}", stderr(&o));
            std::fs::remove_file(st.s.join("x.sqsh")).unwrap();
        }
        only(st.s.path(), SCRATCH_FILES);
        // podman's save and its helpers name the staging directory they write in
        let left = common::user_procs(&scratch);
        assert!(left.is_empty(), "left after signal {sig}: {left:?}");
    }
    assert!(while_saving > 0, "no signal came while podman saved");
    st.gpurun_ok(&["pull", "-o", "x.sqsh", &src]);
    assert!(st.s.join("x.sqsh").is_file());
}

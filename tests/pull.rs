//! `gpurun pull` against a real registry (Debian's docker-registry on loopback), run as the
//! unprivileged test user, results read back with squashfs-tools / squashfs-tools-ng.

mod common;
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{one_line_error, stderr, Scratch};
use support::{Action, Comp, LayerTar, Layout, Node, Proxy, Registry};

const EXIT_NOT_FOUND: i32 = 20;
const EXIT_AUTH: i32 = 21;
const EXIT_NETWORK: i32 = 22;
const EXIT_BAD_IMAGE: i32 = 23;

fn config() -> serde_json::Value {
    serde_json::json!({
        "Env": ["PATH=/bin", "GPURUN_TEST=1"],
        "Entrypoint": ["/bin/sh", "-c"],
        "Cmd": ["echo hi"],
        "WorkingDir": "/data",
        "User": "1000:1000",
        "Labels": {"org.test": "yes"}
    })
}

fn layer1() -> Vec<u8> {
    LayerTar::new()
        .busybox()
        .file("etc/motd", b"motd")
        .dir("opt")
        .dir("opt/dir")
        .file("opt/dir/a", b"a")
        .dir("opt/replaced")
        .file("opt/replaced/old", b"old")
        .dir("data")
        .file("data/orig", b"orig-v1")
        .hardlink("data/link", "data/orig")
        .file("data/keep", b"keep")
        .file_mode("bin/suid", b"x", 0o4755)
        .dir("dev")
        .chardev("dev/null")
        .file_xattr("etc/xattr-file", b"x", &[("user.gpurun", "hello")])
        .owned("etc/secret", b"s", 1000, 1000)
        .finish()
}

fn layer2() -> Vec<u8> {
    LayerTar::new()
        .file("etc/.wh.motd", b"")
        .file("opt/.wh.dir", b"")
        .dir("opt/replaced")
        .file("opt/replaced/.wh..wh..opq", b"")
        .file("opt/replaced/new", b"new")
        .hardlink("data/xkeep", "data/keep")
        .hardlink("data/xorig", "data/orig")
        .file("../../escape", b"e")
        .finish()
}

fn layer3() -> Vec<u8> {
    LayerTar::new()
        .file("data/orig", b"orig-v3")
        .file("etc/hostname", b"gpurun-test")
        .finish()
}

fn marker(text: &str) -> Vec<u8> {
    LayerTar::new()
        .dir("etc")
        .file("etc/marker", text.as_bytes())
        .finish()
}

struct Fixture {
    layout: PathBuf,
    layers_digest: String,
    simple_layers: Vec<String>,
    big_layer: String,
}

/// Build every test image into an OCI layout and push them to `reg`.
fn fixture(s: &Scratch, reg: &Registry) -> Fixture {
    let mut l = Layout::new(&s.join("layout"));
    let img = l.image(
        "layers",
        &[
            (layer1(), Comp::Gzip),
            (layer2(), Comp::Zstd),
            (layer3(), Comp::None),
        ],
        "amd64",
        None,
        config(),
    );
    let l1 = (layer1(), Comp::Gzip);
    let simple = l.image(
        "simple",
        &[l1.clone(), (marker("simple"), Comp::Gzip)],
        "amd64",
        None,
        config(),
    );
    let mut other = config();
    other["Labels"]["org.test"] = "other".into();
    l.image(
        "simple2",
        &[l1.clone(), (marker("simple"), Comp::Gzip)],
        "amd64",
        None,
        other,
    );
    l.image(
        "amd64",
        &[l1.clone(), (marker("amd64"), Comp::Gzip)],
        "amd64",
        None,
        config(),
    );
    l.image(
        "arm64",
        &[(marker("arm64"), Comp::Gzip)],
        "arm64",
        Some("v8"),
        config(),
    );
    l.index("multi", &["amd64", "arm64"]);
    // Random bytes do not compress: the blob is big enough to cut in the middle.
    let big = support::noise(3 << 20, 0x9e3779b97f4a7c15);
    let big = l.image(
        "big",
        &[(LayerTar::new().file("big", &big).finish(), Comp::Gzip)],
        "amd64",
        None,
        config(),
    );
    reg.push(&l.dir, "layers", "test/layers:oci", "oci");
    reg.push(&l.dir, "simple", "test/simple:v2", "v2s2");
    reg.push(&l.dir, "simple2", "test/simple2:v1", "v2s2");
    reg.push(&l.dir, "multi", "test/multi:latest", "all");
    reg.push(&l.dir, "big", "test/big:v1", "oci");
    s.chown_all();
    Fixture {
        layout: l.dir.clone(),
        layers_digest: img.digest,
        simple_layers: simple.layer_digests,
        big_layer: big.layer_digests[0].clone(),
    }
}

/// `gpurun pull ARGS` as the test user, cache and credentials isolated in the scratch dir.
fn gpurun_pull(s: &Scratch, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = common::gpurun(&["pull"]);
    c.args(args)
        .current_dir(s.path())
        .env("GPURUN_CACHEDIR", s.join("cache"))
        .env("DOCKER_CONFIG", s.join("docker-config"))
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("GPURUN_DOCKER_USERNAME")
        .env_remove("GPURUN_DOCKER_PASSWORD");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn pull(s: &Scratch, args: &[&str], env: &[(&str, &str)]) -> Output {
    gpurun_pull(s, args, env).output().expect("spawn gpurun")
}

fn pull_ok(s: &Scratch, args: &[&str], env: &[(&str, &str)]) -> Output {
    let o = pull(s, args, env);
    assert!(
        o.status.success(),
        "pull {args:?} failed ({:?}): {}",
        o.status,
        stderr(&o)
    );
    o
}

fn file(tree: &BTreeMap<String, Node>, p: &str) -> String {
    let n = tree
        .get(p)
        .unwrap_or_else(|| panic!("{p} missing from image: {:?}", tree.keys()));
    String::from_utf8_lossy(&n.data).into_owned()
}

fn no_temp_files(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let n = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            !n.contains(".tmp-") && !n.contains(".gpurun-"),
            "temp file left behind: {n}"
        );
    }
}

#[test]
fn pull_flattens_layers_into_squashfs() {
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    let fx = fixture(&s, &reg);
    let out = s.join("layers.sqsh");
    let src = format!("docker://{}/test/layers:oci", reg.addr());
    let o = pull_ok(&s, &[&src, "-o", out.to_str().unwrap()], &[]);
    let err = stderr(&o);

    let t = support::read_image(&out);
    // whiteouts and opaque directories
    for gone in [
        "etc/motd",
        "opt/dir",
        "opt/dir/a",
        "opt/replaced/old",
        "dev/null",
    ] {
        assert!(
            !t.contains_key(gone),
            "{gone} should be gone: {:?}",
            t.keys()
        );
    }
    assert_eq!(file(&t, "opt/replaced/new"), "new");
    assert_eq!(t["opt/replaced"].kind, 'd');
    assert_eq!(t["dev"].kind, 'd');
    // upper layer wins; hard links keep the content their layer saw
    assert_eq!(file(&t, "data/orig"), "orig-v3");
    assert_eq!(file(&t, "data/link"), "orig-v1");
    assert_eq!(file(&t, "data/xorig"), "orig-v1");
    assert_eq!(file(&t, "etc/hostname"), "gpurun-test");
    // a cross-layer hard link stays one inode
    let (k, xk) = (&t["data/keep"], &t["data/xkeep"]);
    assert!(
        (k.kind == 'h' && k.link == "data/xkeep") || (xk.kind == 'h' && xk.link == "data/keep"),
        "data/keep and data/xkeep should be hard-linked: {k:?} {xk:?}"
    );
    // symlinks as written, setuid dropped, owners and xattrs kept, escape neutralised
    assert_eq!(
        (t["bin/sh"].kind, t["bin/sh"].link.as_str()),
        ('l', "busybox")
    );
    assert_eq!(t["bin/suid"].mode, 0o755);
    assert_eq!((t["etc/secret"].uid, t["etc/secret"].mode), (1000, 0o600));
    assert_eq!(
        t["etc/xattr-file"].xattrs,
        vec![("user.gpurun".to_string(), b"hello".to_vec())]
    );
    assert_eq!(file(&t, "escape"), "e");
    assert_eq!(
        t["bin/busybox"].data,
        std::fs::read("/bin/busybox").unwrap()
    );

    // squashfs-tools agrees
    let lls = support::lls(&out);
    for want in [
        "-rwxr-xr-x 0/0 squashfs-root/bin/suid",
        "lrwxrwxrwx 0/0 squashfs-root/bin/sh -> busybox",
        "-rw------- 1000/1000 squashfs-root/etc/secret",
        "-rwxr-xr-x 0/0 squashfs-root/bin/busybox",
        "drwxr-xr-x 0/0 squashfs-root/opt/replaced",
    ] {
        assert!(
            lls.iter().any(|l| l == want),
            "unsquashfs -lls lacks {want}: {lls:#?}"
        );
    }

    // metadata
    let meta: serde_json::Value = serde_json::from_str(&file(&t, ".gpurun/meta.json")).unwrap();
    assert_eq!(
        meta["env"],
        serde_json::json!(["PATH=/bin", "GPURUN_TEST=1"])
    );
    assert_eq!(meta["entrypoint"], serde_json::json!(["/bin/sh", "-c"]));
    assert_eq!(meta["cmd"], serde_json::json!(["echo hi"]));
    assert_eq!(meta["working_dir"], "/data");
    assert_eq!(meta["user"], "1000:1000");
    assert_eq!(meta["labels"]["org.test"], "yes");
    assert_eq!(meta["source"], src.as_str());
    assert_eq!(meta["platform"], "linux/amd64");
    assert_eq!(meta["created"], "2024-01-01T00:00:00Z");
    // skopeo may recompress the uncompressed layer, so the pushed manifest digest is the registry's
    let digest = meta["manifest_digest"].as_str().unwrap();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );
    let _ = &fx.layers_digest;

    // one summary warning, and one line naming the layer and the hostile entry
    let summary: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("device nodes dropped"))
        .collect();
    assert_eq!(summary.len(), 1, "{err}");
    assert!(
        summary[0].contains("1 device nodes dropped")
            && summary[0].contains("setuid/setgid bits cleared on 1 files"),
        "{err}"
    );
    assert!(
        err.lines()
            .any(|l| l.contains("layer sha256:") && l.contains("'../../escape'")),
        "{err}"
    );

    // quiet means nothing on stderr
    let o = pull_ok(&s, &["-q", "-F", &src, "-o", out.to_str().unwrap()], &[]);
    assert_eq!(stderr(&o), "");
    no_temp_files(s.path());
}

/// A zstd layer of many frames (as podman and buildah push zstd:chunked) pulls to the very tree
/// its gzip twin does; big enough for its frames to be decoded on several cores.
#[test]
fn a_zstd_layer_of_many_frames_pulls_as_its_gzip_twin() {
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    let mut l = Layout::new(&s.join("layout"));
    let noise = support::noise(12 << 20, 0x2545f4914f6cdd1d);
    let tar = LayerTar::new()
        .busybox()
        .file("noise", &noise)
        .file("etc/motd", b"motd")
        .finish();
    for (tag, comp) in [("gz", Comp::Gzip), ("frames", Comp::ZstdFrames)] {
        l.image(tag, &[(tar.clone(), comp)], "amd64", None, config());
        reg.push(&l.dir, tag, &format!("test/twin:{tag}"), "oci");
    }
    s.chown_all();
    let trees: Vec<_> = ["gz", "frames"]
        .iter()
        .map(|tag| {
            let out = s.join(format!("{tag}.sqsh"));
            let src = format!("docker://{}/test/twin:{tag}", reg.addr());
            pull_ok(&s, &["-j", "4", &src, "-o", out.to_str().unwrap()], &[]);
            let mut tree = support::read_image(&out);
            // its source and manifest digest differ
            tree.remove(".gpurun/meta.json");
            tree
        })
        .collect();
    assert_eq!(file(&trees[1], "etc/motd"), "motd");
    assert!(trees[1]["noise"].data == noise);
    assert!(
        trees[0] == trees[1],
        "the zstd frames' tree differs from gzip's"
    );
}

#[test]
fn docker_v2_offline_sources_and_platforms() {
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    let fx = fixture(&s, &reg);
    let a = format!("docker://{}/test/simple:v2", reg.addr());
    pull_ok(&s, &[&a, "-o", "v2.sqsh"], &[]);
    let t = support::read_image(&s.join("v2.sqsh"));
    assert_eq!(file(&t, "etc/marker"), "simple");
    assert_eq!(file(&t, "etc/motd"), "motd");

    // default name, and refusing to overwrite
    pull_ok(&s, &[&a], &[]);
    assert!(s.join("simple_v2.sqsh").exists());
    std::fs::create_dir(s.join("outdir")).unwrap();
    s.chown_all();
    pull_ok(&s, &[&a, "-o", "outdir"], &[]);
    assert!(s.join("outdir/simple_v2.sqsh").exists());
    let o = pull(&s, &[&a], &[]);
    one_line_error(&o, 125, &["simple_v2.sqsh", "--force"]);

    // index: host platform by default, --platform, and a clear error
    let m = format!("docker://{}/test/multi:latest", reg.addr());
    if std::env::consts::ARCH == "x86_64" {
        pull_ok(&s, &[&m, "-o", "host.sqsh"], &[]);
        assert_eq!(
            file(&support::read_image(&s.join("host.sqsh")), "etc/marker"),
            "amd64"
        );
    }
    pull_ok(
        &s,
        &["--platform", "linux/arm64/v8", &m, "-o", "arm.sqsh"],
        &[],
    );
    let t = support::read_image(&s.join("arm.sqsh"));
    assert_eq!(file(&t, "etc/marker"), "arm64");
    let meta: serde_json::Value = serde_json::from_str(&file(&t, ".gpurun/meta.json")).unwrap();
    assert_eq!(meta["platform"], "linux/arm64/v8");
    let o = pull(&s, &["--platform", "linux/s390x", &m, "-o", "x.sqsh"], &[]);
    one_line_error(
        &o,
        EXIT_NOT_FOUND,
        &["linux/s390x", "linux/amd64, linux/arm64/v8", "--platform"],
    );
    assert!(!s.join("x.sqsh").exists());
    // inspect lists the platforms of a multi-platform image, and shows the one it picked
    let args = ["--json", "--platform", "linux/arm64/v8", m.as_str()];
    let mut c = common::gpurun(&["inspect"]);
    c.args(args)
        .current_dir(s.path())
        .env("GPURUN_CACHEDIR", s.join("cache"));
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["platforms"],
        serde_json::json!(["linux/amd64", "linux/arm64/v8"])
    );
    assert_eq!(v["platform"], "linux/arm64/v8");
    let o = common::gpurun(&["inspect", "--platform", "linux/arm64/v8", &m])
        .env("GPURUN_CACHEDIR", s.join("cache"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.contains("Platforms:      linux/amd64, linux/arm64/v8"),
        "{text}"
    );
    // a single-platform image has no list
    let o = common::gpurun(&["inspect", "--json", &a])
        .env("GPURUN_CACHEDIR", s.join("cache"))
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v.get("platforms").is_none(), "{v}");
    let o = pull(&s, &["--platform", "linux/arm64", &a, "-o", "x.sqsh"], &[]);
    one_line_error(
        &o,
        EXIT_NOT_FOUND,
        &["linux/arm64", "available: linux/amd64"],
    );

    // the same image from the OCI layout and from a docker archive
    let from_reg = support::read_image(&s.join("v2.sqsh"));
    let strip = |mut t: BTreeMap<String, Node>| {
        t.remove(".gpurun/meta.json");
        t
    };
    let oci = format!("oci:{}:simple", fx.layout.display());
    pull_ok(&s, &[&oci, "-o", "oci.sqsh"], &[]);
    assert_eq!(
        strip(support::read_image(&s.join("oci.sqsh"))),
        strip(from_reg.clone())
    );
    let multi = format!("oci:{}:multi", fx.layout.display());
    pull_ok(
        &s,
        &["--platform", "linux/arm64", &multi, "-o", "ocim.sqsh"],
        &[],
    );
    assert_eq!(
        file(&support::read_image(&s.join("ocim.sqsh")), "etc/marker"),
        "arm64"
    );
    let o = pull(
        &s,
        &[&format!("oci:{}:nope", fx.layout.display()), "-o", "n.sqsh"],
        &[],
    );
    one_line_error(&o, EXIT_NOT_FOUND, &["no tag 'nope'", "simple"]);
    // A layout whose blob no longer matches its digest (one bit flipped, size unchanged; then
    // the image config): refused, nothing written.
    let bad = s.join("bad-layout");
    assert!(Command::new("cp")
        .args(["-a"])
        .arg(&fx.layout)
        .arg(&bad)
        .status()
        .unwrap()
        .success());
    let blobs = bad.join("blobs/sha256");
    let json = |p: &Path| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    };
    let blob =
        |d: &serde_json::Value| blobs.join(d.as_str().unwrap().trim_start_matches("sha256:"));
    let index = json(&bad.join("index.json"));
    let simple = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == "simple")
        .unwrap();
    let manifest = json(&blob(&simple["digest"]));
    let flip = |p: &Path| {
        let mut b = std::fs::read(p).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 0x20;
        std::fs::write(p, b).unwrap();
    };
    let layer = manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|l| l["size"].as_u64().unwrap())
        .unwrap()["digest"]
        .clone();
    flip(&blob(&layer));
    s.chown_all();
    let src = format!("oci:{}:simple", bad.display());
    let o = pull(&s, &[&src, "-o", "bad.sqsh"], &[]);
    let short = &layer.as_str().unwrap()[..19];
    one_line_error(&o, EXIT_BAD_IMAGE, &[short, "does not match its digest"]);
    assert!(!s.join("bad.sqsh").exists());
    no_temp_files(s.path());
    flip(&blob(&layer));
    flip(&blob(&manifest["config"]["digest"]));
    let o = pull(&s, &[&src, "-o", "bad.sqsh"], &[]);
    one_line_error(
        &o,
        EXIT_BAD_IMAGE,
        &["does not match", "the layout is corrupt"],
    );
    assert!(!s.join("bad.sqsh").exists());

    let archive = s.join("simple.tar");
    let st = Command::new("skopeo")
        .args(["--insecure-policy", "copy", "--quiet"])
        .arg(format!("oci:{}:simple", fx.layout.display()))
        .arg(format!(
            "docker-archive:{}:test/simple:v2",
            archive.display()
        ))
        .status()
        .unwrap();
    assert!(st.success());
    s.chown_all();
    pull_ok(
        &s,
        &[
            &format!("docker-archive:{}", archive.display()),
            "-o",
            "arch.sqsh",
        ],
        &[],
    );
    let t = support::read_image(&s.join("arch.sqsh"));
    let meta: serde_json::Value = serde_json::from_str(&file(&t, ".gpurun/meta.json")).unwrap();
    assert_eq!(meta["cmd"], serde_json::json!(["echo hi"]));
    assert_eq!(strip(t), strip(from_reg));

    // a directory, with a hard link and an xattr
    let root = s.join("rootfs");
    common::busybox_rootfs(&root);
    std::fs::hard_link(root.join("etc/group"), root.join("etc/group.hl")).unwrap();
    common::setfattr(&root.join("etc/group"), "user.gpurun", "kept");
    s.chown_all();
    pull_ok(
        &s,
        &[&format!("dir:{}", root.display()), "-o", "dir.sqsh"],
        &[],
    );
    let t = support::read_image(&s.join("dir.sqsh"));
    assert_eq!(
        (t["bin/sh"].kind, t["bin/sh"].link.as_str()),
        ('l', "busybox")
    );
    assert_eq!(file(&t, "etc/group"), "root:x:0:\n");
    let hl = &t["etc/group.hl"];
    assert_eq!((hl.kind, hl.link.as_str()), ('h', "etc/group"));
    assert!(
        t["etc/group"]
            .xattrs
            .contains(&("user.gpurun".to_string(), b"kept".to_vec())),
        "{:?}",
        t["etc/group"].xattrs
    );

    // bad references: one line, no output
    let o = pull(&s, &["ubuntu:24.04"], &[]);
    one_line_error(&o, 125, &["docker://ubuntu:24.04"]);
    let o = pull(
        &s,
        &[
            &format!("docker://{}/test/nope:v1", reg.addr()),
            "-o",
            "n.sqsh",
        ],
        &[],
    );
    one_line_error(&o, EXIT_NOT_FOUND, &["test/nope:v1", "not found"]);
    assert!(!s.join("n.sqsh").exists());
    no_temp_files(s.path());
}

/// A registry that wants a login (tester / s3cret-pass) with test/simple:v2 in it; the
/// reference to pull. The registry is dropped before the scratch directory it serves from.
struct AuthRegistry {
    reg: Registry,
    s: Scratch,
    src: String,
}

fn auth_registry() -> AuthRegistry {
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), Some(("tester", "s3cret-pass")));
    let mut l = Layout::new(&s.join("layout"));
    let layers = [(layer1(), Comp::Gzip), (marker("simple"), Comp::Gzip)];
    l.image("simple", &layers, "amd64", None, config());
    reg.push(&l.dir, "simple", "test/simple:v2", "v2s2");
    s.chown_all();
    let src = format!("docker://{}/test/simple:v2", reg.addr());
    AuthRegistry { reg, s, src }
}

impl AuthRegistry {
    /// Write the docker config.json that `pull` reads (DOCKER_CONFIG); its path.
    fn docker_config(&self, json: &str) -> PathBuf {
        let dc = self.s.join("docker-config");
        std::fs::create_dir_all(&dc).unwrap();
        std::fs::write(dc.join("config.json"), json).unwrap();
        self.s.chown_all();
        dc.join("config.json")
    }

    /// Pull as OUT.sqsh, which must then hold the image.
    fn pull_ok(&self, out: &str, env: &[(&str, &str)]) -> Output {
        let o = pull_ok(&self.s, &[&self.src, "-o", out], env);
        assert!(!stderr(&o).contains("s3cret"), "{}", stderr(&o));
        let image = support::read_image(&self.s.join(out));
        assert_eq!(file(&image, "etc/marker"), "simple");
        o
    }
}

#[test]
fn basic_auth_without_credentials_names_the_variables() {
    let a = auth_registry();
    let o = pull(&a.s, &[&a.src, "-o", "a.sqsh"], &[]);
    one_line_error(
        &o,
        EXIT_AUTH,
        &[&a.reg.addr(), "refused access", "GPURUN_DOCKER_USERNAME"],
    );
    assert!(!a.s.join("a.sqsh").exists());
}

/// A wrong password reads differently from none: the credentials found were refused.
#[test]
fn basic_auth_wrong_password_from_the_variables_says_so() {
    let a = auth_registry();
    let o = pull(
        &a.s,
        &[&a.src, "-o", "a.sqsh"],
        &[
            ("GPURUN_DOCKER_USERNAME", "tester"),
            ("GPURUN_DOCKER_PASSWORD", "wrong-pass"),
        ],
    );
    one_line_error(
        &o,
        EXIT_AUTH,
        &[
            &a.reg.addr(),
            "refused the credentials from GPURUN_DOCKER_USERNAME and GPURUN_DOCKER_PASSWORD",
            "check the user name and password",
        ],
    );
    assert!(!stderr(&o).contains("wrong-pass"));
}

#[test]
fn basic_auth_wrong_password_from_docker_config_names_the_file() {
    let a = auth_registry();
    let wrong = "dGVzdGVyOndyb25nLXBhc3M="; // base64("tester:wrong-pass")
    let cfg = a.docker_config(&format!(
        r#"{{"auths":{{"{}":{{"auth":"{wrong}"}}}}}}"#,
        a.reg.addr()
    ));
    let o = pull(&a.s, &[&a.src, "-o", "a.sqsh"], &[]);
    let found_in = format!("refused the credentials found in {}", cfg.display());
    one_line_error(&o, EXIT_AUTH, &[&found_in]);
    assert!(!stderr(&o).contains("wrong-pass"));
}

#[test]
fn basic_auth_login_from_the_variables() {
    let a = auth_registry();
    a.pull_ok(
        "env.sqsh",
        &[
            ("GPURUN_DOCKER_USERNAME", "tester"),
            ("GPURUN_DOCKER_PASSWORD", "s3cret-pass"),
        ],
    );
}

/// docker's config.json with a base64 "auth", under the registry's http:// URL.
#[test]
fn basic_auth_login_from_docker_config() {
    let a = auth_registry();
    let auth = "dGVzdGVyOnMzY3JldC1wYXNz"; // base64("tester:s3cret-pass")
    a.docker_config(&format!(
        r#"{{"auths":{{"http://{}":{{"auth":"{auth}"}}}}}}"#,
        a.reg.addr()
    ));
    a.pull_ok("cfg.sqsh", &[]);
}

/// A credential helper named by credsStore (docker's protocol: the server on stdin, JSON out).
#[test]
fn basic_auth_login_from_a_credential_helper() {
    let a = auth_registry();
    let bin = a.s.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let helper = bin.join("docker-credential-gpuruntest");
    std::fs::write(
        &helper,
        format!(
            "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread server\n[ \"$server\" = \"{}\" ] || exit 1\n\
             echo '{{\"ServerURL\":\"'$server'\",\"Username\":\"tester\",\"Secret\":\"s3cret-pass\"}}'\n",
            a.reg.addr()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&helper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    a.docker_config(r#"{"credsStore":"gpuruntest"}"#);
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display());
    a.pull_ok("helper.sqsh", &[("PATH", &path)]);
}

#[test]
fn faults_retries_resume_and_shared_layers() {
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    let fx = fixture(&s, &reg);
    let proxy = Proxy::start(reg.port);
    let src = |repo: &str| format!("docker://{}/{repo}", proxy.addr());

    // 500 twice on the manifest, then fine: retried
    proxy.rule("/manifests/", Action::Status(500), 2);
    pull_ok(&s, &[&src("test/simple:v2"), "-o", "r.sqsh"], &[]);
    let manifest_gets = proxy
        .requests()
        .iter()
        .filter(|r| r.contains("/manifests/v2"))
        .count();
    assert_eq!(manifest_gets, 3, "{:#?}", proxy.requests());
    // every manifest request accepts all four manifest and index types
    for r in proxy
        .requests()
        .iter()
        .filter(|r| r.contains("/manifests/"))
    {
        for mt in [
            "application/vnd.oci.image.index.v1+json",
            "application/vnd.oci.image.manifest.v1+json",
            "application/vnd.docker.distribution.manifest.list.v2+json",
            "application/vnd.docker.distribution.manifest.v2+json",
        ] {
            assert!(r.contains(mt), "{r} lacks {mt}");
        }
    }

    // a second image sharing every layer downloads none of them
    proxy.clear();
    pull_ok(&s, &[&src("test/simple2:v1"), "-o", "shared.sqsh"], &[]);
    let reqs = proxy.requests();
    for d in &fx.simple_layers {
        assert!(
            !reqs.iter().any(|r| r.contains(d.as_str())),
            "layer {d} fetched again: {reqs:#?}"
        );
    }
    assert!(
        reqs.iter().any(|r| r.contains("/blobs/")),
        "the new config is fetched: {reqs:#?}"
    );
    let t = support::read_image(&s.join("shared.sqsh"));
    let meta: serde_json::Value = serde_json::from_str(&file(&t, ".gpurun/meta.json")).unwrap();
    assert_eq!(meta["labels"]["org.test"], "other");

    // a blob cut in the middle resumes with a range request
    proxy.clear();
    proxy.rule(&fx.big_layer, Action::Truncate(1 << 20), 1);
    let o = pull_ok(&s, &[&src("test/big:v1"), "-o", "big.sqsh"], &[]);
    let reqs = proxy.requests();
    assert!(
        reqs.iter()
            .any(|r| r.contains("/blobs/") && r.contains("bytes=") && !r.contains("bytes=0-")),
        "no resumed range request: {reqs:#?}\n{}",
        stderr(&o)
    );
    assert_eq!(
        support::read_image(&s.join("big.sqsh"))["big"].data.len(),
        3 << 20
    );

    // errors: one line, distinct codes, nothing written
    let cases: [(u16, i32, &[&str]); 4] = [
        (404, EXIT_NOT_FOUND, &["not found"]),
        (401, EXIT_AUTH, &["refused access"]),
        (429, EXIT_NETWORK, &["429", "rate limit", "log in"]),
        (503, EXIT_NETWORK, &["503"]),
    ];
    for (status, code, needles) in cases {
        proxy.clear();
        proxy.rule("/manifests/", Action::Status(status), usize::MAX);
        let out = format!("e{status}.sqsh");
        let o = pull(
            &s,
            &[&src("test/layers:oci"), "-o", &out],
            &[(
                "GPURUN_CACHEDIR",
                s.join(format!("c{status}")).to_str().unwrap(),
            )],
        );
        one_line_error(&o, code, needles);
        assert!(!s.join(&out).exists());
    }
    // a layer that keeps failing while the image is being written: its error, nothing written
    proxy.clear();
    proxy.rule(&fx.big_layer, Action::Status(503), usize::MAX);
    let o = pull(
        &s,
        &[&src("test/big:v1"), "-o", "bigfail.sqsh"],
        &[("GPURUN_CACHEDIR", s.join("cbig").to_str().unwrap())],
    );
    one_line_error(&o, EXIT_NETWORK, &["503"]);
    assert!(!s.join("bigfail.sqsh").exists());
    proxy.clear();
    no_temp_files(s.path());
}

#[test]
fn concurrent_pulls_share_the_cache_and_interrupts_leave_nothing() {
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    fixture(&s, &reg);
    let src = format!("docker://{}/test/layers:oci", reg.addr());
    let mut a = gpurun_pull(&s, &[&src, "-o", "a.sqsh"], &[])
        .spawn()
        .unwrap();
    let mut b = gpurun_pull(&s, &[&src, "-o", "b.sqsh"], &[])
        .spawn()
        .unwrap();
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
    // same bytes: the build is reproducible and neither saw a half-written blob
    assert_eq!(
        std::fs::read(s.join("a.sqsh")).unwrap(),
        std::fs::read(s.join("b.sqsh")).unwrap()
    );
    let blobs: Vec<String> = std::fs::read_dir(s.join("cache/blobs/sha256"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(blobs.iter().all(|b| !b.ends_with(".partial")), "{blobs:?}");

    // SIGTERM while a blob is slow to come: no output, no temp file, exit 128+
    let proxy = Proxy::start(reg.port);
    proxy.rule("/blobs/", Action::Delay(Duration::from_secs(5)), usize::MAX);
    let c = gpurun_pull(
        &s,
        &[
            &format!("docker://{}/test/big:v1", proxy.addr()),
            "-o",
            "int.sqsh",
        ],
        &[("GPURUN_CACHEDIR", s.join("cache-int").to_str().unwrap())],
    )
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let pid = gpurun_pid(c.id());
    // SAFETY: signalling a process this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let o = c.wait_with_output().unwrap();
    one_line_error(&o, 130, &["interrupted"]);
    assert!(!s.join("int.sqsh").exists());
    no_temp_files(s.path());
}

/// The gpurun process: the child itself, or runuser's child when running as root.
fn gpurun_pid(child: u32) -> libc::pid_t {
    if !common::is_root() {
        return child as libc::pid_t;
    }
    let kids =
        std::fs::read_to_string(format!("/proc/{child}/task/{child}/children")).unwrap_or_default();
    kids.split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or(child as libc::pid_t)
}

#[test]
fn ensure_local_caches_by_manifest_digest() {
    use gpurun::image::pull::{ensure_local, PullOptions};
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    fixture(&s, &reg);
    let proxy = Proxy::start(reg.port);
    // This process's own cache (the scratch directory is the test user's, not this process's).
    let lib_cache = tempfile::tempdir().unwrap();
    let opts = PullOptions {
        quiet: true,
        cache: Some(lib_cache.path().to_path_buf()),
        ..Default::default()
    };
    let r = format!("docker://{}/test/layers:oci", proxy.addr());
    let first = ensure_local(&r, &opts).unwrap();
    assert!(
        first.starts_with(lib_cache.path().join("images")),
        "{}",
        first.display()
    );
    assert_eq!(file(&support::read_image(&first), "data/orig"), "orig-v3");
    proxy.clear();
    let again = ensure_local(&r, &opts).unwrap();
    assert_eq!(first, again);
    let reqs = proxy.requests();
    assert!(!reqs.iter().any(|r| r.contains("/blobs/")), "{reqs:#?}");
    // The registry unreachable (every manifest request a 503): the image this reference last
    // resolved to is used, after one retry; a reference never resolved here still fails.
    proxy.clear();
    proxy.rule("/manifests/", Action::Status(503), usize::MAX);
    let t0 = std::time::Instant::now();
    assert_eq!(ensure_local(&r, &opts).unwrap(), first);
    assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    let other = format!("docker://{}/test/layers:v2", proxy.addr());
    let e = ensure_local(&other, &opts).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_NETWORK, "{e}");
    proxy.clear();
    let e = ensure_local(&format!("oci:{}", s.join("layout").display()), &opts).unwrap_err();
    assert_eq!(e.exit_code(), 125);
    let e = ensure_local(&format!("docker://{}/test/none:x", proxy.addr()), &opts).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_NOT_FOUND);
    assert!(e.to_string().contains("test/none:x"), "{e}");
    // `pull --into-cache`, as the test user: the cached image's path on stdout, nothing written
    // here; a second one fetches no blob and names the same file.
    let r = format!("docker://{}/test/simple:v2", proxy.addr());
    let o = pull_ok(&s, &["-q", "--into-cache", &r], &[]);
    let path = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    assert!(
        path.starts_with(s.join("cache/images")),
        "{}",
        path.display()
    );
    assert!(path.extension().is_some_and(|e| e == "sqsh"));
    assert_eq!(file(&support::read_image(&path), "etc/marker"), "simple");
    assert!(!s.join("simple_v2.sqsh").exists());
    proxy.clear();
    let o = pull_ok(&s, &["-q", "--into-cache", &r], &[]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        path.display().to_string()
    );
    let reqs = proxy.requests();
    assert!(!reqs.iter().any(|r| r.contains("/blobs/")), "{reqs:#?}");
    let layout = format!("oci:{}", s.join("layout").display());
    one_line_error(
        &pull(&s, &["--into-cache", &layout], &[]),
        125,
        &["only docker://"],
    );
    let o = pull(&s, &["--into-cache", "-o", "x.sqsh", &r], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// A pull that fails mid-download keeps the partial blob as a resume point: the next pull
/// resumes it and counts only what it downloaded itself; nothing holds it once the pull is gone,
/// so `cache clean` removes it at once.
#[test]
fn a_failed_pull_resumes_counts_and_cleans() {
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    let fx = fixture(&s, &reg);
    let proxy = Proxy::start(reg.port);
    let src = format!("docker://{}/test/big:v1", proxy.addr());
    let partials = |cache: &str| -> Vec<u64> {
        std::fs::read_dir(s.join(cache).join("blobs/sha256"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".partial"))
                    .map(|e| e.metadata().unwrap().len())
                    .collect()
            })
            .unwrap_or_default()
    };
    // cut after 1 MiB, then gone: the pull fails with the first 1 MiB kept
    let fail_once = |cache: &str| {
        proxy.clear();
        proxy.rule(&fx.big_layer, Action::Truncate(1 << 20), 1);
        proxy.rule(&fx.big_layer, Action::Status(404), 1);
        let cache_dir = s.join(cache);
        let o = pull(
            &s,
            &[&src, "-o", "fail.sqsh"],
            &[("GPURUN_CACHEDIR", cache_dir.to_str().unwrap())],
        );
        one_line_error(&o, EXIT_NOT_FOUND, &["not found"]);
        assert!(!s.join("fail.sqsh").exists());
        assert_eq!(partials(cache).len(), 1, "{}", stderr(&o));
    };
    fail_once("c1");
    proxy.clear();
    let o = pull_ok(
        &s,
        &[&src, "-o", "big.sqsh"],
        &[("GPURUN_CACHEDIR", s.join("c1").to_str().unwrap())],
    );
    let e = stderr(&o);
    let total = 3 << 20;
    let line = e
        .lines()
        .find(|l| l.starts_with("Downloaded "))
        .unwrap_or_else(|| panic!("no summary: {e}"));
    // "Downloaded NOW MiB of ALL MiB": all but the 1 MiB the failed pull kept
    let mib: Vec<f64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        mib.len() == 2 && (mib[1] - mib[0] - 1.0).abs() < 0.06 && mib[1] > 3.0,
        "{line}"
    );
    assert!(
        e.contains(&format!("resumed, {:.1} MiB downloaded now", mib[0])),
        "{e}"
    );
    assert!(!e.contains(" MB"), "decimal units: {e}");
    assert_eq!(
        support::read_image(&s.join("big.sqsh"))["big"].data.len(),
        total
    );
    assert!(partials("c1").is_empty());

    // the next failure's partial blob is not "in use": cache clean removes it at once
    fail_once("c2");
    let cache = |args: &[&str]| {
        let mut c = common::gpurun(&["cache"]);
        c.args(args).env("GPURUN_CACHEDIR", s.join("c2"));
        common::stdout(&common::run_ok(&mut c))
    };
    let list: serde_json::Value = serde_json::from_str(&cache(&["list", "--json"])).unwrap();
    let partial = list
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "partial")
        .unwrap_or_else(|| panic!("{list}"));
    assert!(partial["in_use"].is_null(), "{partial}");
    let out = cache(&["clean"]);
    assert!(out.contains("removed partial sha256:"), "{out}");
    assert!(partials("c2").is_empty());
}

#[test]
fn full_disk_leaves_no_partial_image() {
    if !common::root_or_skip("to mount a small tmpfs") {
        return;
    }
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    fixture(&s, &reg);
    struct Umount(PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let tmpfs = |name: &str, size: &str| {
        let dir = s.join(name);
        std::fs::create_dir(&dir).unwrap();
        let (uid, gid) = common::test_ids();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size},uid={uid},gid={gid}"))
            .args(["tmpfs"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success());
        Umount(dir)
    };
    let small_fs = tmpfs("small", "1m");
    let small = small_fs.0.clone();
    let src = format!("docker://{}/test/big:v1", reg.addr());
    let o = pull(
        &s,
        &[&src, "-o", small.join("big.sqsh").to_str().unwrap()],
        &[],
    );
    one_line_error(&o, 24, &["disk is full"]);
    assert_eq!(
        std::fs::read_dir(&small).unwrap().count(),
        0,
        "something left in the full fs"
    );
    // a full cache disk: the blob cannot be stored
    let o = pull(
        &s,
        &[&src, "-o", "big.sqsh"],
        &[("GPURUN_CACHEDIR", small.join("cache").to_str().unwrap())],
    );
    one_line_error(&o, 24, &["disk is full"]);
    assert!(!s.join("big.sqsh").exists());
    // exec: room for the 3 MiB blob in the cache, not for the image too; exec has no -o
    let mid = tmpfs("mid", "5m");
    let o = common::gpurun(&["exec", &src, "true"])
        .env("GPURUN_CACHEDIR", mid.0.join("cache"))
        .env("DOCKER_CONFIG", s.join("docker-config"))
        .output()
        .unwrap();
    let e = stderr(&o);
    assert!(
        e.contains("disk is full") && e.contains("GPURUN_CACHEDIR") && !e.contains("another -o"),
        "{e}"
    );
    assert_eq!(o.status.code(), Some(24), "{e}");
    // exec: a 24 MiB file of zeros in a tiny blob: the cache holds the blob, and the first
    // start's tree fills it while that file is written (by a writer thread, not the flattening)
    let mut l = Layout::new(&s.join("zeros-layout"));
    let zeros = LayerTar::new().file("zeros", &vec![0u8; 24 << 20]).finish();
    l.image("zeros", &[(zeros, Comp::Gzip)], "amd64", None, config());
    reg.push(&l.dir, "zeros", "test/zeros:v1", "oci");
    let small_tree = tmpfs("tree", "8m");
    let cache = small_tree.0.join("cache");
    let src = format!("docker://{}/test/zeros:v1", reg.addr());
    let o = common::gpurun(&["exec", &src, "true"])
        .env("GPURUN_CACHEDIR", &cache)
        .env("DOCKER_CONFIG", s.join("docker-config"))
        .output()
        .unwrap();
    let e = stderr(&o);
    assert!(
        e.contains("disk is full") && e.contains("GPURUN_CACHEDIR"),
        "{e}"
    );
    assert_eq!(o.status.code(), Some(24), "{e}");
    let left = Command::new("find")
        .arg(&cache)
        .args(["-mindepth", "2"])
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(
        !left.contains("rootfs") && !left.contains(".sqsh"),
        "left behind:\n{left}"
    );
}

#[test]
fn bearer_token_registry() {
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    fixture(&s, &reg);
    let proxy = Proxy::start_bearer(reg.port, "dGVzdGVyOnMzY3JldC1wYXNz"); // tester:s3cret-pass
    let src = format!("docker://{}/test/simple:v2", proxy.addr());
    let o = pull(&s, &[&src, "-o", "anon.sqsh"], &[]);
    one_line_error(&o, EXIT_AUTH, &[&proxy.addr()]);
    let o = pull_ok(
        &s,
        &[&src, "-o", "tok.sqsh"],
        &[
            ("GPURUN_DOCKER_USERNAME", "tester"),
            ("GPURUN_DOCKER_PASSWORD", "s3cret-pass"),
        ],
    );
    assert!(!stderr(&o).contains("s3cret") && !stderr(&o).contains(support::BEARER_TOKEN));
    assert_eq!(
        file(&support::read_image(&s.join("tok.sqsh")), "etc/marker"),
        "simple"
    );
    assert!(
        proxy.requests().iter().any(|r| r.starts_with("GET /token")),
        "{:#?}",
        proxy.requests()
    );
}

/// The image's entries as a container sees them: name, mode, mtime; a file's links, size and
/// content; a link's target (a directory's size and link count are the file system's own).
const LIST_TREE: &str = "cd / && for f in $(find bin opt data .gpurun etc/motd etc/xattr-file etc/secret | sort); do \
     if [ -d \"$f\" ]; then stat -c '%n %A %Y' \"$f\"; else stat -c '%n %A %h %Y' \"$f\"; fi; \
     if [ -L \"$f\" ]; then readlink \"$f\"; elif [ -f \"$f\" ]; then stat -c %s \"$f\"; md5sum \"$f\"; fi; \
     done";

/// `exec docker://` of an image the cache lacks starts from its unpacked layers while the
/// .sqsh is written, sees the tree that .sqsh then gives, and leaves only the image behind.
#[test]
fn first_start_sees_the_finished_images_tree() {
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    fixture(&s, &reg);
    let src = format!("docker://{}/test/layers:oci", reg.addr());
    let run = || {
        let mut c = common::gpurun(&["exec", "--contain", &src, "sh", "-c", LIST_TREE]);
        c.current_dir(s.path())
            .env("GPURUN_CACHEDIR", s.join("cache"))
            .env("DOCKER_CONFIG", s.join("docker-config"));
        c.output().unwrap()
    };
    let (first, second) = common::first_and_second_start(run);
    let images = s.join("cache/images");
    let left: Vec<String> = std::fs::read_dir(&images)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        left.len() == 1 && left[0].ends_with(".sqsh"),
        "the image alone expected in the cache: {left:?}\n{}",
        stderr(&first)
    );
    assert!(
        common::stdout(&first).contains("bin/busybox"),
        "{}",
        common::stdout(&first)
    );
    assert_eq!(common::stdout(&first), common::stdout(&second));
}

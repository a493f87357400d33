//! The user-facing commands as the unprivileged test user: inspect, run of enroot images, cache,
//! doctor, ps, config, version, help, and the checked-in completions and man pages.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
}

/// An image as `enroot import` + `enroot create` lay it out: the OCI Env in /etc/environment,
/// an /etc/rc that enters the WorkingDir, sources rc.local and execs the entrypoint; squashed
/// with enroot's default ENROOT_SQUASH_OPTIONS (lzo metadata and fragments, file data stored).
fn enroot_image(s: &Scratch) -> PathBuf {
    busybox_image_with(s, "enroot", &["-comp", "lzo", "-noD"], |root| {
        std::fs::write(
            root.join("etc/environment"),
            "PATH=/bin:/usr/bin\nENROOT_IMAGE_VAR=from-environment\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.join("work")).unwrap();
        std::fs::write(root.join("etc/rc.local"), "RC_LOCAL=sourced\n").unwrap();
        std::fs::write(
            root.join("etc/rc"),
            "cd /work || exit 1\n. /etc/rc.local\n\
             if [ $# -gt 0 ]; then exec /bin/echo entry \"$RC_LOCAL\" \"$(pwd)\" \"$@\"; \
             else exec /bin/echo entry default; fi\n",
        )
        .unwrap();
    })
}

#[test]
fn inspect_gpurun_enroot_and_plain_images() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let o = run_ok(&mut gpurun(&["inspect", "--json", img.to_str().unwrap()]));
    let v = json(&o);
    assert_eq!(v["format"], "gpurun");
    assert_eq!(v["source"], "docker://docker.io/library/busybox:1");
    assert_eq!(v["manifest_digest"], "sha256:abc");
    assert_eq!(v["platform"], "linux/amd64");
    assert_eq!(v["entrypoint"][0], "/bin/echo");
    assert_eq!(v["labels"]["org.opencontainers.image.title"], "t");
    assert_eq!(v["cuda_requirement"]["NVIDIA_REQUIRE_CUDA"], "cuda>=12.4");
    assert_eq!(v["size_bytes"], std::fs::metadata(&img).unwrap().len());
    let text = stdout(&run_ok(&mut gpurun(&["inspect", img.to_str().unwrap()])));
    assert!(text.contains("Platform:       linux/amd64"), "{text}");
    assert!(text.contains("NVIDIA_REQUIRE_CUDA=cuda>=12.4"), "{text}");

    let v = json(&run_ok(&mut gpurun(&[
        "inspect",
        "--json",
        enroot_image(&s).to_str().unwrap(),
    ])));
    assert_eq!(v["format"], "enroot");
    assert_eq!(v["env"][1], "ENROOT_IMAGE_VAR=from-environment");
    assert_eq!(v["entrypoint"], serde_json::json!(["/bin/sh", "/etc/rc"]));

    let plain = busybox_image(&s, "plain", |_| {});
    let v = json(&run_ok(&mut gpurun(&[
        "inspect",
        "--json",
        plain.to_str().unwrap(),
    ])));
    assert_eq!(v["format"], "plain squashfs");
    assert_eq!(v["compression"], "gzip");

    // Errors: one line that names the file and the fix.
    let o = gpurun(&["inspect", "/nonexistent.sqsh"]).output().unwrap();
    assert_eq!(o.status.code(), Some(125));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("/nonexistent.sqsh") && e.contains("check the path"),
        "{e}"
    );
}

#[test]
fn enroot_images_run_unchanged() {
    let s = Scratch::new();
    let img = enroot_image(&s);
    let img = img.to_str().unwrap();
    let o = run_ok(&mut gpurun(&[
        "exec",
        img,
        "sh",
        "-c",
        "echo $ENROOT_IMAGE_VAR",
    ]));
    assert_eq!(stdout(&o).trim(), "from-environment");
    // run = /etc/rc with the arguments, as enroot start does.
    let o = run_ok(&mut gpurun(&["run", img, "a", "b c"]));
    assert_eq!(stdout(&o).trim(), "entry sourced /work a b c");
    let o = run_ok(&mut gpurun(&["run", img]));
    assert_eq!(stdout(&o).trim(), "entry default");
}

/// The root filesystem of an Apptainer image (what `apptainer build` puts in the SIF's squashfs).
fn apptainer_root(root: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let d = root.join(".singularity.d");
    std::fs::create_dir_all(d.join("env")).unwrap();
    std::fs::write(
        d.join("env/10-docker2singularity.sh"),
        "#!/bin/sh\nexport PATH=\"${PATH:-/usr/local/bin:/usr/bin:/bin}\"\nexport APP_HOME=\"/opt/app\"\n",
    )
    .unwrap();
    std::fs::write(
        d.join("env/90-environment.sh"),
        "#!/bin/sh\nexport APP_DATA=\"$APP_HOME/data\"\n",
    )
    .unwrap();
    std::fs::write(
        d.join("runscript"),
        "#!/bin/sh\necho runscript \"$APP_DATA\" \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(d.join("runscript"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(d.join("labels.json"), r#"{"org.label-schema.name": "app"}"#).unwrap();
}

#[test]
fn apptainer_images_run_unchanged() {
    let s = Scratch::new();
    let img = busybox_image(&s, "apptainer", apptainer_root);
    let img = img.to_str().unwrap();
    let o = run_ok(&mut gpurun(&[
        "exec",
        img,
        "sh",
        "-c",
        "echo $APP_DATA $PATH",
    ]));
    assert_eq!(
        stdout(&o).trim(),
        "/opt/app/data /usr/local/bin:/usr/bin:/bin"
    );
    let o = run_ok(&mut gpurun(&["run", img, "x", "y"]));
    assert_eq!(stdout(&o).trim(), "runscript /opt/app/data x y");
    let v = json(&run_ok(&mut gpurun(&["inspect", "--json", img])));
    assert_eq!(v["format"], "apptainer");
    assert_eq!(v["labels"]["org.label-schema.name"], "app");
}

/// `squashfs` wrapped in a SIF file the way `apptainer build` writes one (SIF 1, little-endian,
/// packed): a 128-byte global header, a table of 585-byte descriptors, the data. Descriptor 1 is
/// a definition file, descriptor 2 the squashfs primary system partition, so the partition is
/// found by type rather than position.
fn sif(squashfs: &[u8]) -> Vec<u8> {
    const HEADER: usize = 128;
    const DESC: usize = 585;
    const NDESC: usize = 48;
    let deffile = b"Bootstrap: docker\nFrom: busybox\n";
    let def_off = (HEADER + NDESC * DESC).div_ceil(4096) * 4096;
    let part_off = (def_off + deffile.len()).div_ceil(4096) * 4096;
    let mut f = vec![0u8; part_off];
    let i64_at = |f: &mut Vec<u8>, at: usize, v: usize| {
        f[at..at + 8].copy_from_slice(&(v as i64).to_le_bytes())
    };
    f[..31].copy_from_slice(b"#!/usr/bin/env run-singularity\n");
    f[32..42].copy_from_slice(b"SIF_MAGIC\0");
    f[42..44].copy_from_slice(b"01");
    i64_at(&mut f, 80, NDESC - 2);
    i64_at(&mut f, 88, NDESC);
    i64_at(&mut f, 96, HEADER);
    i64_at(&mut f, 104, NDESC * DESC);
    i64_at(&mut f, 112, def_off);
    i64_at(&mut f, 120, part_off + squashfs.len() - def_off);
    let mut desc = |n: usize, kind: i32, off: usize, len: usize, extra: &[i32]| {
        let d = HEADER + n * DESC;
        f[d..d + 4].copy_from_slice(&kind.to_le_bytes());
        f[d + 4] = 1;
        f[d + 5..d + 9].copy_from_slice(&(n as u32 + 1).to_le_bytes());
        i64_at(&mut f, d + 17, off);
        i64_at(&mut f, d + 25, len);
        i64_at(&mut f, d + 33, len);
        for (i, v) in extra.iter().enumerate() {
            let at = d + 201 + 4 * i;
            f[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
    };
    desc(0, 0x4001, def_off, deffile.len(), &[]);
    // fs type 1 = squashfs, partition type 2 = primary system
    desc(1, 0x4004, part_off, squashfs.len(), &[1, 2]);
    f[def_off..def_off + deffile.len()].copy_from_slice(deffile);
    f.extend_from_slice(squashfs);
    f
}

#[test]
fn apptainer_sif_files_run_unchanged() {
    let s = Scratch::new();
    let sqsh = busybox_image(&s, "forsif", apptainer_root);
    let path = s.join("app.sif");
    std::fs::write(&path, sif(&std::fs::read(&sqsh).unwrap())).unwrap();
    s.chown_all();
    let img = path.to_str().unwrap();
    let o = run_ok(&mut gpurun(&[
        "exec",
        img,
        "sh",
        "-c",
        "echo $APP_DATA; cat /etc/passwd | head -1",
    ]));
    assert_eq!(stdout(&o).lines().next(), Some("/opt/app/data"));
    let o = run_ok(&mut gpurun(&["run", img, "from-sif"]));
    assert_eq!(stdout(&o).trim(), "runscript /opt/app/data from-sif");
    let v = json(&run_ok(&mut gpurun(&["inspect", "--json", img])));
    assert_eq!(v["format"], "apptainer (SIF)");
    assert_eq!(v["labels"]["org.label-schema.name"], "app");

    // A SIF without a squashfs system partition: one line that says what to do.
    let mut broken = std::fs::read(&path).unwrap();
    broken[128 + 585 + 201] = 2; // ext3
    std::fs::write(&path, &broken).unwrap();
    let o = gpurun(&["exec", img, "true"]).output().unwrap();
    assert_eq!(o.status.code(), Some(125));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains(img) && e.contains("no squashfs system partition"),
        "{e}"
    );
}

#[test]
fn doctor_checks_for_real() {
    let o = gpurun(&["doctor", "--json"]).output().unwrap();
    let v = json(&o);
    let checks = v.as_array().unwrap();
    let status = |name: &str| {
        checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no check {name}: {v}"))["status"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // The test machine runs the runtime tests, so these work here.
    assert_eq!(status("user namespaces"), "ok");
    assert_eq!(status("/dev/fuse"), "ok");
    assert!(checks
        .iter()
        .all(|c| c["status"] != "fail" || !c["fix"].as_str().unwrap().is_empty()));
    let failed = checks.iter().any(|c| c["status"] == "fail");
    assert_eq!(o.status.code(), Some(if failed { 1 } else { 0 }));
    let text = stdout(&gpurun(&["doctor"]).output().unwrap());
    assert!(text.contains("[ok  ] user namespaces"), "{text}");

    // A cache that cannot be written is a failure, with the fix, and the exit code says so.
    let o = gpurun(&["doctor"])
        .env("GPURUN_CACHEDIR", "/proc/gpurun-cache")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("fix: set GPURUN_CACHEDIR"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn ps_lists_running_containers() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let mut child = gpurun(&["exec", img.to_str().unwrap(), "sleep", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let found = loop {
        let v = json(&run_ok(&mut gpurun(&["ps", "--json"])));
        let mine: Vec<serde_json::Value> = v["containers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["pid"] == child.id())
            .cloned()
            .collect();
        // The init appears once the container is set up.
        if mine.len() == 1 && !mine[0]["init_pid"].is_null() {
            break mine[0].clone();
        }
        assert!(Instant::now() < deadline, "container not listed: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // SAFETY: a signal to the test's own child: no memory is touched.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
    assert_eq!(found["action"], "exec");
    assert_eq!(found["image"], img.to_str().unwrap());
    assert_eq!(found["command"], serde_json::json!(["sleep", "30"]));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let started = found["started"].as_u64().unwrap();
    assert!(
        started <= now + 1 && now - started < 60,
        "{started} vs {now}"
    );
    assert_eq!(found["gpus"], serde_json::json!([]));
}

/// `gpurun ps` finds containers whatever the binary's file is called: a site's versioned copy
/// (gpurun-1.2), run directly or through a wrapper script that execs it.
#[test]
fn ps_sees_containers_of_a_renamed_binary() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let copy = s.join("gpurun-1.2");
    std::fs::copy(gpurun_bin(), &copy).unwrap();
    let wrapper = s.join("site-gpurun");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nexec {} \"$@\"\n", copy.display()),
    )
    .unwrap();
    for f in [&copy, &wrapper] {
        std::fs::set_permissions(f, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let mut child = as_user(&wrapper)
        .args(["exec", img.to_str().unwrap(), "sleep", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = json(&run_ok(as_user(&wrapper).args(["ps", "--json"])));
        let listed = v["containers"].as_array().unwrap().iter().any(|c| {
            c["pid"] == child.id() && !c["init_pid"].is_null() && c["command"][0] == "sleep"
        });
        if listed {
            break;
        }
        if Instant::now() > deadline {
            // SAFETY: a signal to the test's own child: no memory is touched.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
            panic!("container of {} not listed: {v}", copy.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: a signal to the test's own child: no memory is touched.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

#[test]
fn config_layers_reach_launches_and_pulls() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let data = s.join("sitedata");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("f"), "site bind\n").unwrap();
    let site = s.join("gpurun.toml");
    std::fs::write(
        &site,
        format!(
            "binds = [\"{}:/site\"]\nallowed_registries = [\"nvcr.io\"]\ncompression = \"xz\"\n",
            data.display()
        ),
    )
    .unwrap();
    s.chown_all();
    let with = |args: &[&str]| {
        let mut c = gpurun(args);
        c.env("GPURUN_SITE_CONFIG", &site);
        c
    };
    let o = run_ok(with(&["config", "show", "--json"]).env("GPURUN_COMPRESSION", "lz4"));
    let v = json(&o);
    assert_eq!(v["binds"][0]["from"]["kind"], "site");
    assert_eq!(v["compression"]["value"], "lz4");
    assert_eq!(
        v["compression"]["from"],
        serde_json::json!({"kind": "env", "name": "GPURUN_COMPRESSION"})
    );
    let text = stdout(&run_ok(&mut with(&["config", "show"])));
    assert!(
        text.contains(&format!("site file {}", site.display())),
        "{text}"
    );

    // The site's default bind and GPURUN_BIND both apply.
    let o = run_ok(
        with(&["exec", img.to_str().unwrap(), "cat", "/site/f", "/extra/f"])
            .env("GPURUN_BIND", format!("{}:/extra", data.display())),
    );
    assert_eq!(stdout(&o), "site bind\nsite bind\n");

    // -v names the host paths bound; --debug every mount.
    let o = run_ok(&mut with(&["-v", "exec", img.to_str().unwrap(), "true"]));
    assert!(
        stderr(&o).contains(&format!("gpurun: bind {} -> /site", data.display())),
        "{}",
        stderr(&o)
    );
    let o = run_ok(&mut with(&[
        "--debug",
        "exec",
        img.to_str().unwrap(),
        "true",
    ]));
    assert!(
        stderr(&o).contains(r#"gpurun: mount {"dst":"/etc/passwd""#),
        "{}",
        stderr(&o)
    );

    // The site's compressor is what pull writes.
    let rootfs = s.join("rootfs");
    busybox_rootfs(&rootfs);
    s.chown_all();
    let out = s.join("pulled.sqsh");
    let src = format!("dir:{}", rootfs.display());
    run_ok(&mut with(&[
        "pull",
        "-q",
        &src,
        "-o",
        out.to_str().unwrap(),
    ]));
    let v = json(&run_ok(&mut gpurun(&[
        "inspect",
        "--json",
        out.to_str().unwrap(),
    ])));
    assert_eq!(v["compression"], "xz");

    // Registries outside the site's list are refused before any network access.
    let o = with(&["pull", "docker://docker.io/library/busybox:1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert!(
        stderr(&o).contains("registry docker.io is not allowed"),
        "{}",
        stderr(&o)
    );
    let o = with(&["exec", "docker://docker.io/library/busybox:1", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("is not allowed"), "{}", stderr(&o));

    // A user config in a HOME we cannot read (another user's, kept through su) is skipped.
    if is_root() {
        run_ok(with(&["config", "show"]).env("HOME", "/root"));
    }

    // A broken file is one line naming it.
    std::fs::write(&site, "bindz = 1\n").unwrap();
    let o = with(&["config", "show"]).output().unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert!(
        stderr(&o).contains(&site.display().to_string()),
        "{}",
        stderr(&o)
    );
}

#[test]
fn version_and_help_topics() {
    let v = stdout(&run_ok(&mut gpurun(&["version"])));
    assert!(v.starts_with("gpurun 0.1.0\ncommit  "), "{v}");
    assert!(
        v.contains("rustc 1.") && v.contains("target  x86_64") || v.contains("target  aarch64"),
        "{v}"
    );
    let v = stdout(&run_ok(&mut gpurun(&["--version"])));
    assert!(v.contains("(commit "), "{v}");
    for t in [
        "env",
        "binds",
        "gpu",
        "slurm",
        "exit-codes",
        "config",
        "images",
        "apptainer",
    ] {
        assert!(
            !stdout(&run_ok(&mut gpurun(&["help", t]))).is_empty(),
            "{t}"
        );
    }
    assert!(
        stdout(&run_ok(&mut gpurun(&["help", "cache", "gc"]))).contains("Usage: gpurun cache gc")
    );
    let o = gpurun(&["help", "nope"]).output().unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("topics: env"));
}

/// completions/ and man/ are generated from the clap definitions; regenerate them with
/// `tests/regenerate.sh` when this fails.
#[test]
fn completions_and_man_pages_are_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (shell, file) in [
        ("bash", "gpurun.bash"),
        ("zsh", "_gpurun"),
        ("fish", "gpurun.fish"),
    ] {
        let o = Command::new(gpurun_bin())
            .args(["completions", shell])
            .output()
            .unwrap();
        let have = std::fs::read(root.join("completions").join(file)).unwrap_or_default();
        assert!(
            o.stdout == have,
            "completions/{file} is stale: run tests/regenerate.sh"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(gpurun_bin())
        .arg("man")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let list = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        list(dir.path()),
        list(&root.join("man")),
        "man/ is stale: run tests/regenerate.sh"
    );
    for page in list(dir.path()) {
        let want = std::fs::read(dir.path().join(&page)).unwrap();
        let have = std::fs::read(root.join("man").join(&page)).unwrap();
        assert!(want == have, "man/{page} is stale: run tests/regenerate.sh");
    }
}

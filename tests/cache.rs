//! `gpurun cache list|gc|clean` as the unprivileged test user, on a cache laid out as cache.rs
//! lays it out. A binary of its own: cargo runs test binaries one after another, so no container
//! of the test user runs beside these tests (gc rightly keeps blobs while one does).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
}

/// A cache laid out as cache.rs lays it out, owned by the test user.
fn fake_cache(s: &Scratch) -> PathBuf {
    let c = s.join("cache");
    for d in ["blobs/sha256", "locks", "images", "image-blocks"] {
        std::fs::create_dir_all(c.join(d)).unwrap();
    }
    let hex = |ch: char| ch.to_string().repeat(64);
    let file = |p: PathBuf, size: usize, age_days: u64| {
        std::fs::write(&p, vec![7u8; size]).unwrap();
        let t = std::time::SystemTime::now() - Duration::from_secs(age_days * 86400);
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        f.set_times(std::fs::FileTimes::new().set_accessed(t).set_modified(t))
            .unwrap();
    };
    file(c.join("blobs/sha256").join(hex('a')), 1000, 40);
    file(c.join("blobs/sha256").join(hex('b')), 2000, 20);
    file(c.join("blobs/sha256").join(hex('c')), 4000, 5);
    file(
        c.join("images").join(format!("{}.sqsh", hex('d'))),
        8000,
        60,
    );
    file(c.join("blobs/sha256").join(hex('e')), 500, 0);
    file(c.join("image-blocks/ffffffffffff.blocks"), 300, 50);
    std::fs::write(c.join("locks").join(format!("{}.lock", hex('d'))), "").unwrap();
    s.chown_all();
    c
}

fn cache_cmd(c: &Path, args: &[&str]) -> Command {
    let mut a = vec!["cache"];
    a.extend_from_slice(args);
    let mut cmd = gpurun(&a);
    cmd.env("GPURUN_CACHEDIR", c);
    cmd
}

fn names(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap()[7..8].to_string())
        .collect()
}

/// gc counts a gpurun of the user whose environment it cannot read (a container's process) as
/// using any cache: the tests here, as one user, run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn cache_list_gc_and_clean_keep_what_is_in_use() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let s = Scratch::new();
    let c = fake_cache(&s);
    let v = json(&run_ok(&mut cache_cmd(&c, &["list", "--json"])));
    // Oldest use first.
    assert_eq!(names(&v), ["d", "f", "a", "b", "c", "e"]);
    assert_eq!(v[0]["kind"], "image");
    assert_eq!(v[0]["size_bytes"], 8000);
    assert_eq!(
        (&v[1]["kind"], &v[1]["size_bytes"]),
        (&"blocks".into(), &300.into())
    );
    let text = stdout(&run_ok(&mut cache_cmd(&c, &["list"])));
    assert!(text.contains("6 entries"), "{text}");

    // A pull building image d holds its lock: gc must keep the image.
    let lock =
        std::fs::File::open(c.join("locks").join(format!("{}.lock", "d".repeat(64)))).unwrap();
    assert_eq!(
        // SAFETY: an fd `lock` owns, alive during the call.
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) },
        0
    );
    let o = run_ok(&mut cache_cmd(
        &c,
        &["gc", "--older-than", "30d", "--dry-run"],
    ));
    for removed in [
        "would remove blob sha256:aaaa",
        "would remove blocks ffffffffffff.blocks",
    ] {
        assert!(stdout(&o).contains(removed), "{}", stdout(&o));
    }
    run_ok(&mut cache_cmd(&c, &["gc", "--older-than", "30d"]));
    let v = json(&run_ok(&mut cache_cmd(&c, &["list", "--json"])));
    assert_eq!(names(&v), ["d", "b", "c", "e"]);
    assert_eq!(v[0]["in_use"], "locked: a pull is writing it");
    // Down to 13000 bytes: b goes (the locked image stays, whatever its size).
    run_ok(&mut cache_cmd(&c, &["gc", "--max-size", "13000"]));
    assert_eq!(
        names(&json(&run_ok(&mut cache_cmd(&c, &["list", "--json"])))),
        ["d", "c", "e"]
    );
    // Forced, all but the locked image.
    let o = run_ok(&mut cache_cmd(&c, &["clean", "--force"]));
    assert!(
        stdout(&o).contains("kept image sha256:dddd") && stdout(&o).contains("a pull is writing"),
        "{}",
        stdout(&o)
    );
    drop(lock);
    run_ok(&mut cache_cmd(&c, &["clean"]));
    assert!(json(&run_ok(&mut cache_cmd(&c, &["list", "--json"])))
        .as_array()
        .unwrap()
        .is_empty());

    let o = cache_cmd(&c, &["gc", "--max-size", "20X"])
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("500M, 20G"), "{}", stderr(&o));
    let o = cache_cmd(&c, &["gc"]).output().unwrap();
    assert_eq!(o.status.code(), Some(125));
}

#[test]
fn a_running_gpurun_keeps_blobs_of_its_own_cache_only() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let s = Scratch::new();
    let img = busybox_image(&s, "bb", |_| {});
    let (mine, other) = (s.join("mine"), s.join("other"));
    for c in [&mine, &other] {
        std::fs::create_dir_all(c.join("blobs/sha256")).unwrap();
        let blob = c.join("blobs/sha256").join("a".repeat(64));
        std::fs::write(&blob, "x").unwrap();
        let old = std::time::SystemTime::now() - Duration::from_secs(86400);
        std::fs::File::options()
            .write(true)
            .open(&blob)
            .unwrap()
            .set_times(
                std::fs::FileTimes::new()
                    .set_accessed(old)
                    .set_modified(old),
            )
            .unwrap();
    }
    s.chown_all();
    let mut child = gpurun(&["exec", img.to_str().unwrap(), "sleep", "20"])
        .env("GPURUN_CACHEDIR", &mine)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let in_use =
        |c: &Path| json(&run_ok(&mut cache_cmd(c, &["list", "--json"])))[0]["in_use"].clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let running =
        |v: serde_json::Value| v.as_str().is_some_and(|s| s.starts_with("gpurun running"));
    while !running(in_use(&mine)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the running container was not seen"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(in_use(&other), serde_json::Value::Null);
    // SAFETY: a signal to the test's own child: no memory is touched.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

/// Just after a pull or a run, with nothing running, `clean` frees everything (the cache is on
/// a local file system here); an entry a process holds open stays, named with that process,
/// until `--force`.
#[test]
fn clean_frees_what_no_process_uses_and_names_who_keeps_the_rest() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let s = Scratch::new();
    let c = fake_cache(&s);
    let fresh = c.join("blobs/sha256").join("9".repeat(64));
    std::fs::write(&fresh, "just pulled").unwrap();
    let image = c.join("images").join(format!("{}.sqsh", "d".repeat(64)));
    s.chown_all();
    let mut holder = as_user("sh")
        .args(["-c", "exec 3<\"$1\"; echo ready; exec sleep 60", "-"])
        .arg(&image)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    let o = run_ok(&mut cache_cmd(&c, &["clean"]));
    let out = stdout(&o);
    let kept = format!("kept image sha256:{}", "d".repeat(64));
    let by = format!("open by pid {} (sleep 60)", holder.id());
    assert!(out.contains(&kept) && out.contains(&by), "{out}");
    assert!(
        out.contains(&format!("removed blob sha256:{}", "9".repeat(64))),
        "{out}"
    );
    assert!(
        out.contains("kept 1 in use") && out.contains("--force"),
        "{out}"
    );
    assert!(!fresh.exists() && image.exists(), "{out}");
    let o = run_ok(&mut cache_cmd(&c, &["clean", "--force"]));
    assert!(
        stdout(&o).contains(&format!("which was {}", by)),
        "{}",
        stdout(&o)
    );
    assert!(!image.exists());
    let _ = holder.kill();
    let _ = holder.wait();
}

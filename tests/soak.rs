//! Soak: many `exec`s of one image by one user share one image server and leave no mount,
//! process, fd or temp file behind once it is stopped.
//! GPURUN_SOAK=N sequential runs (default 200), GPURUN_SOAK_CONCURRENT=M at once (default 50);
//! the full check is GPURUN_SOAK=1000 GPURUN_SOAK_CONCURRENT=100.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{
    busybox_image, fuse_connections, fusectl, gpurun, stderr, test_ids, user_procs, Scratch,
};

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Entries the test user owns in the shared temp dirs that gpurun could have made (named for it,
/// or temp files): other engineers' tests on this machine leave their own files as the same user.
fn user_temp_files() -> BTreeSet<String> {
    let (uid, _) = test_ids();
    let mut out = BTreeSet::new();
    for dir in ["/tmp", "/var/tmp", "/dev/shm"] {
        let Ok(d) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in d.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("gpurun-test.") || !(n.contains("gpurun") || n.contains(".tmp")) {
                continue;
            }
            if e.metadata().is_ok_and(|m| m.uid() == uid) {
                out.insert(format!("{dir}/{n}"));
            }
        }
    }
    out
}

/// Other engineers' tests mount FUSE on this machine too: a leak shows as one connection per
/// run, far above this slack.
const FUSE_SLACK: usize = 5;

/// The test user's image servers of `img`: their pids.
fn servers(img: &str) -> Vec<String> {
    user_procs(&format!("gpurun serve --image {img} "))
        .into_iter()
        .map(|p| p.split(':').next().unwrap().to_string())
        .collect()
}

/// Stop the image's server, then nothing may be left.
fn settle(marker: &str, fuse_before: usize) {
    let o = gpurun(&["stop", marker]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline
        && (!user_procs(marker).is_empty() || fuse_connections() > fuse_before + FUSE_SLACK)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(user_procs(marker), Vec::<String>::new(), "processes left");
    assert!(
        fuse_connections() <= fuse_before + FUSE_SLACK,
        "FUSE connections: {} before, {} after",
        fuse_before,
        fuse_connections()
    );
}

#[test]
fn soak_sequential_and_concurrent_execs_leave_nothing() {
    let s = Scratch::new();
    let img = busybox_image(&s, "soak", |_| {});
    let img = img.to_str().unwrap().to_string();
    let (n, m) = (
        env_count("GPURUN_SOAK", 200),
        env_count("GPURUN_SOAK_CONCURRENT", 50),
    );
    let counted = fusectl();
    let fuse_before = fuse_connections();
    let temp_before = user_temp_files();

    let t0 = Instant::now();
    let mut server = Vec::new();
    for i in 0..n {
        let o = gpurun(&["exec", &img, "true"]).output().unwrap();
        assert!(o.status.success(), "run {i}: {}", stderr(&o));
        if i == 0 {
            server = servers(&img);
        }
    }
    let seq = t0.elapsed();
    assert_eq!(servers(&img), server, "not one server for all the starts");
    assert_eq!(server.len(), 1);
    settle(&img, fuse_before);

    let t0 = Instant::now();
    let kids: Vec<_> = (0..m)
        .map(|_| {
            gpurun(&["exec", &img, "cat", "/bin/busybox"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, k) in kids.into_iter().enumerate() {
        let o = k.wait_with_output().unwrap();
        assert!(o.status.success(), "concurrent {i}: {}", stderr(&o));
    }
    let conc = t0.elapsed();
    assert_eq!(
        servers(&img).len(),
        1,
        "not one server for the starts at once"
    );
    settle(&img, fuse_before);

    // a long-running container: gpurun's and its image server's fds stay flat over many opens
    // and reads
    let mut c = gpurun(&[
        "exec",
        &img,
        "sh",
        "-c",
        "echo ready; read go; i=0; while [ $i -lt 300 ]; do cat /bin/busybox /etc/passwd > /dev/null; \
         ls -R /bin > /dev/null; i=$((i+1)); done; echo done; read end",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    // Pipes left out: gpurun closes its start-up pipe (C's "root built") when it gets to it,
    // which on a loaded machine can be after the command runs.
    let fds = |pid: u32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
            .filter(|l| !l.to_string_lossy().starts_with("pipe:"))
            .count()
    };
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let server: u32 = servers(&img)[0].parse().unwrap();
    let fds_start = (fds(c.id()), fds(server));
    if counted {
        // the count sees a live image: a leak could not hide from it
        assert!(
            fuse_connections() > fuse_before,
            "no FUSE connection while running"
        );
    }
    let mut stdin = c.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "done\n");
    let fds_end = (fds(c.id()), fds(server));
    stdin.write_all(b"end\n").unwrap();
    drop(stdin);
    assert!(c.wait().unwrap().success());
    assert_eq!(
        fds_start, fds_end,
        "fds of gpurun or of the image server grew"
    );
    settle(&img, fuse_before);

    let new: Vec<String> = user_temp_files()
        .difference(&temp_before)
        .cloned()
        .collect();
    assert!(new.is_empty(), "temp files left: {new:?}");
    eprintln!(
        "soak: {n} sequential execs in {seq:?} ({:?} each), {m} concurrent in {conc:?}; \
         fds of a long-running gpurun and its server {fds_start:?} -> {fds_end:?}; \
         FUSE connections {fuse_before} -> {}",
        seq / n.max(1) as u32,
        fuse_connections()
    );
}

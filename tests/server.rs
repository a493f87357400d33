//! The image server shared by a user's containers of one image (runtime/image_server/serve.rs,
//! runtime/image_server/attach.rs), as the unprivileged test user: containers attach to one server and stay
//! apart from each other; the server exits when idle, stopped, replaced or cleaned away, is
//! replaced when it died, and is made once by many first starts at once.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

/// `gpurun ARGS` with servers that wait `idle` for another container.
fn gpurun_idle(idle: &str, args: &[&str]) -> Command {
    let mut c = gpurun(args);
    c.env("GPURUN_SERVER_IDLE", idle);
    c
}

/// The test user's servers of `img`, as `gpurun ps --json` lists them.
fn servers_of(img: &Path) -> Vec<serde_json::Value> {
    let v = json(&run_ok(&mut gpurun(&["ps", "--json"])));
    let all = v["servers"].as_array().unwrap().clone();
    all.into_iter()
        .filter(|s| s["image"] == img.to_str().unwrap())
        .collect()
}

fn pid_of(server: &serde_json::Value) -> u32 {
    server["pid"].as_u64().unwrap() as u32
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')))
}

/// Wait up to `secs` for `ok`.
fn eventually(secs: u64, what: &str, mut ok: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        assert!(Instant::now() < end, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A container that prints `ready` once running, then sleeps; its gpurun is the child.
fn sleeper(mut c: Command) -> Child {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut b = [0u8; 6];
    use std::io::Read;
    out.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"ready\n");
    child
}

fn stop(child: &mut Child) {
    // SAFETY: a signal to the test's own child: no memory is touched.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

/// The device number of the image's file system as a container sees it: one FUSE superblock,
/// one number, for every container that shares its server.
fn image_dev(img: &Path, idle: &str) -> String {
    let o = run_ok(&mut gpurun_idle(
        idle,
        &[
            "exec",
            img.to_str().unwrap(),
            "stat",
            "-c",
            "%d",
            "/bin/busybox",
        ],
    ));
    stdout(&o).trim().to_string()
}

/// A busybox image with every mount point a default container needs: no container gets an
/// overlay of its own over the image's root or /etc, so /bin's device number is the image's.
fn image(s: &Scratch, name: &str, app: &str) -> PathBuf {
    busybox_image(s, name, |root| {
        std::fs::write(root.join("etc/app"), app).unwrap();
        std::fs::create_dir_all(root.join("var/tmp")).unwrap();
        for f in ["hosts", "resolv.conf", "localtime"] {
            std::fs::write(root.join("etc").join(f), "").unwrap();
        }
    })
}

#[test]
fn containers_attach_to_one_server_and_see_nothing_of_each_other() {
    let s = Scratch::new();
    let img = image(&s, "share", "genuine\n");
    let i = img.to_str().unwrap();
    let data = s.join("data");
    std::fs::create_dir(&data).unwrap();
    s.chown_all();
    let bind = format!("{}:/data/sub", data.display());
    // A: its own bind (a mount point the image lacks), env, --fakeroot and a write to its
    // --writable-tmpfs root.
    let mut a = sleeper(gpurun_idle(
        "1m",
        &[
            "exec",
            "--fakeroot",
            "--writable-tmpfs",
            "-B",
            &bind,
            "--env",
            "MINE=a",
            i,
            "sh",
            "-c",
            "echo written > /etc/app; echo new > /newfile; echo ready; exec sleep 30",
        ],
    ));
    let b = run_ok(&mut gpurun_idle(
        "1m",
        &["exec", i, "sh", "-c",
          "cat /etc/app; id -u; echo \"MINE=$MINE\"; ls /data /newfile 2>&1 | wc -l; ls / | tr '\\n' ' '"],
    ));
    let out = stdout(&b);
    let lines: Vec<&str> = out.lines().collect();
    let (uid, _) = test_ids();
    assert_eq!(lines[0], "genuine", "A's write shows in B: {out}");
    assert_eq!(
        lines[1],
        uid.to_string(),
        "A's --fakeroot shows in B: {out}"
    );
    assert_eq!(lines[2], "MINE=", "A's env shows in B: {out}");
    assert_eq!(lines[3], "2", "A's mount point or file shows in B: {out}");
    assert!(
        !lines[4].contains("data") && !lines[4].contains("newfile"),
        "{out}"
    );
    // One server, A attached, and the same file system in both.
    let servers = servers_of(&img);
    assert_eq!(servers.len(), 1, "{servers:?}");
    assert!(servers[0]["containers"]
        .as_array()
        .unwrap()
        .contains(&a.id().into()));
    let a_dev = run_ok(&mut gpurun_idle(
        "1m",
        &["exec", "--fakeroot", i, "stat", "-c", "%d %u", "/etc"],
    ));
    let b_dev = run_ok(&mut gpurun_idle(
        "1m",
        &["exec", i, "stat", "-c", "%d %u", "/etc"],
    ));
    let (a_dev, b_dev) = (stdout(&a_dev), stdout(&b_dev));
    assert_eq!(
        a_dev.split(' ').next(),
        b_dev.split(' ').next(),
        "not one file system"
    );
    assert_eq!(
        (
            a_dev.trim().split(' ').nth(1),
            b_dev.trim().split(' ').nth(1)
        ),
        (Some("0"), Some(uid.to_string().as_str())),
        "owners as each maps them"
    );
    stop(&mut a);
    assert_eq!(
        servers_of(&img).len(),
        1,
        "the server outlives its containers"
    );
    run_ok(&mut gpurun(&["stop", i]));
    assert!(servers_of(&img).is_empty());
}

#[test]
fn an_idle_server_costs_nothing_and_exits() {
    let s = Scratch::new();
    let img = image(&s, "idle", "x\n");
    run_ok(&mut gpurun_idle(
        "3s",
        &[
            "exec",
            img.to_str().unwrap(),
            "sh",
            "-c",
            "find / -xdev -type f | xargs cat > /dev/null",
        ],
    ));
    let v = servers_of(&img);
    assert_eq!(v.len(), 1, "{v:?}");
    let pid = pid_of(&v[0]);
    let cpu = |v: &serde_json::Value| v["cpu_seconds"].as_f64().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let later = servers_of(&img);
    if let Some(l) = later.first() {
        assert!(
            cpu(l) - cpu(&v[0]) < 0.02,
            "an idle server used CPU: {v:?} {later:?}"
        );
    }
    eventually(10, "the idle server exits", || !alive(pid));
}

#[test]
fn a_replaced_image_gets_a_new_server_and_the_old_one_goes() {
    let s = Scratch::new();
    let img = image(&s, "repl", "one\n");
    let i = img.to_str().unwrap();
    let o = run_ok(&mut gpurun_idle("1m", &["exec", i, "cat", "/etc/app"]));
    assert_eq!(stdout(&o), "one\n");
    let old = pid_of(&servers_of(&img)[0]);
    // A new image renamed over the old one, as `gpurun pull -o` does.
    let new = image(&s, "repl2", "two\n");
    std::fs::rename(&new, &img).unwrap();
    let o = run_ok(&mut gpurun_idle("1m", &["exec", i, "cat", "/etc/app"]));
    assert_eq!(stdout(&o), "two\n", "a stale server served a changed image");
    eventually(10, "the old server exits", || !alive(old));
    let now = servers_of(&img);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(pid_of(&now[0]), old);
    run_ok(&mut gpurun(&["stop", i]));
}

#[test]
fn a_killed_server_ends_its_containers_cleanly_and_is_replaced() {
    let s = Scratch::new();
    let img = image(&s, "killed", "x\n");
    let i = img.to_str().unwrap();
    let a = sleeper(gpurun_idle(
        "1m",
        &[
            "exec",
            i,
            "sh",
            "-c",
            "echo ready; while cat /etc/app > /dev/null; do sleep 0.05; done; sleep 30",
        ],
    ));
    let pid = pid_of(&servers_of(&img)[0]);
    // SAFETY: a signal: no memory is touched.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let t = Instant::now();
    let o = a.wait_with_output().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "the container hung on a dead server"
    );
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("image server") && stderr(&o).contains("exited"),
        "{}",
        stderr(&o)
    );
    // Nothing of it is left, in D state or otherwise.
    let left = Command::new("pgrep").args(["-f", i]).output().unwrap();
    assert!(stdout(&left).trim().is_empty(), "left: {}", stdout(&left));
    let o = run_ok(&mut gpurun_idle("1m", &["exec", i, "cat", "/etc/app"]));
    assert_eq!(stdout(&o), "x\n");
    let now = servers_of(&img);
    assert_eq!(now.len(), 1);
    assert_ne!(pid_of(&now[0]), pid);
    run_ok(&mut gpurun(&["stop", i]));
}

#[test]
fn many_first_starts_at_once_make_one_server() {
    let s = Scratch::new();
    let img = image(&s, "many", "x\n");
    let i = img.to_str().unwrap();
    let starts: Vec<Child> = (0..16)
        .map(|_| {
            gpurun_idle("1m", &["exec", i, "stat", "-c", "%d", "/bin/busybox"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut devs = std::collections::BTreeSet::new();
    for c in starts {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stderr(&o).is_empty(), "{}", stderr(&o));
        devs.insert(stdout(&o));
    }
    assert_eq!(devs.len(), 1, "more than one file system: {devs:?}");
    assert_eq!(servers_of(&img).len(), 1);
    let procs = Command::new("pgrep")
        .args(["-fc", &format!("gpurun serve --image {i} ")])
        .output()
        .unwrap();
    assert_eq!(stdout(&procs).trim(), "1");
    run_ok(&mut gpurun(&["stop", i]));
}

#[test]
fn stop_and_cache_clean_end_servers_and_ps_lists_them() {
    let s = Scratch::new();
    let (busy, idle) = (image(&s, "busy", "b\n"), image(&s, "idle", "i\n"));
    let cache = s.join("cache");
    let with_cache = |mut c: Command| {
        c.env("GPURUN_CACHEDIR", &cache);
        c
    };
    let mut a = sleeper(with_cache(gpurun_idle(
        "1m",
        &[
            "exec",
            busy.to_str().unwrap(),
            "sh",
            "-c",
            "echo ready; exec sleep 30",
        ],
    )));
    run_ok(&mut with_cache(gpurun_idle(
        "1m",
        &["exec", idle.to_str().unwrap(), "true"],
    )));
    let text = stdout(&run_ok(&mut gpurun(&["ps"])));
    let busy_pid = pid_of(&servers_of(&busy)[0]);
    let idle_pid = pid_of(&servers_of(&idle)[0]);
    assert!(
        text.contains("SERVER") && text.contains(&busy_pid.to_string()),
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with(&busy_pid.to_string()))
        .unwrap();
    assert!(line.ends_with(&a.id().to_string()), "its container: {text}");
    let ps = json(&run_ok(&mut gpurun(&["ps", "--json"])));
    let mine = ps["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["pid"] == a.id())
        .unwrap()
        .clone();
    assert_eq!(mine["server"], busy_pid);
    // `stop`: the idle server is gone when it returns, the busy one once its container ends.
    let o = run_ok(&mut gpurun(&["stop"]));
    assert!(
        stdout(&o).contains("exits when its 1 container"),
        "{}",
        stdout(&o)
    );
    assert!(!alive(idle_pid));
    assert!(alive(busy_pid));
    assert_eq!(servers_of(&busy)[0]["stopping"], true);
    let o = run_ok(&mut with_cache(gpurun_idle(
        "1m",
        &["exec", busy.to_str().unwrap(), "cat", "/etc/app"],
    )));
    assert_eq!(stdout(&o), "b\n");
    stop(&mut a);
    eventually(10, "the stopped server exits after its container", || {
        !alive(busy_pid)
    });
    // `cache clean` stops the idle servers that hold images open.
    let left = pid_of(&servers_of(&busy)[0]);
    run_ok(&mut with_cache(gpurun(&["cache", "clean"])));
    assert!(!alive(left));
}

#[test]
fn an_idle_time_of_zero_gives_every_container_its_own_server() {
    let s = Scratch::new();
    let img = image(&s, "own", "x\n");
    // While one runs (a device number is reused once its file system is gone).
    let i = img.to_str().unwrap();
    let script = "stat -c %d /bin/busybox; echo ready; exec sleep 30";
    let mut a = gpurun_idle("0", &["exec", i, "sh", "-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(a.stdout.take().unwrap());
    lines.read_line(&mut first).unwrap();
    let two = image_dev(&img, "0");
    assert_ne!(first.trim(), two, "one file system for both");
    assert!(servers_of(&img).is_empty());
    stop(&mut a);
    // the container's own server ends once its connection closes, a moment after gpurun
    let left = || {
        let o = Command::new("pgrep")
            .args(["-f", img.to_str().unwrap()])
            .output()
            .unwrap();
        stdout(&o).trim().to_string()
    };
    eventually(10, "nothing of the image left", || left().is_empty());
}

/// A stand-in for slurmstepd: a shell by that name (what gpurun looks for above itself), run as
/// the test user with `script`, with SLURM_JOB_ID=`job` for what it starts.
fn fake_step(s: &Scratch, job: &str, script: &str) -> Child {
    let stepd = s.join("slurmstepd");
    if !stepd.exists() {
        std::fs::copy("/bin/sh", &stepd).unwrap();
    }
    let mut c = as_user(&stepd);
    c.args(["-c", script])
        .env("SLURM_JOB_ID", job)
        .env("GPURUN", gpurun_bin())
        .env("GPURUN_SERVER_IDLE", "1m")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().unwrap()
}

/// Under Slurm a server belongs to the step that started it and ends with the step's
/// slurmstepd; where the job has a keeper (the SPANK plugin starts one in the job's extern step)
/// the keeper starts it, for the whole job, and it ends with the keeper.
#[test]
fn under_slurm_a_server_ends_with_its_step_or_its_job() {
    let s = Scratch::new();
    let img = image(&s, "slurm", "x\n");
    let i = img.to_str().unwrap();
    let step = fake_step(
        &s,
        "77",
        &format!("\"$GPURUN\" exec {i} true && echo ready; sleep 2"),
    );
    let o = step.wait_with_output().unwrap();
    assert_eq!(stdout(&o), "ready\n", "{}", stderr(&o));
    eventually(10, "the step's server ends with the step", || {
        servers_of(&img).is_empty()
    });

    let script = format!(
        "\"$GPURUN\" keep --job 78 & sleep 0.5; \"$GPURUN\" exec {i} true && echo ready; \
         \"$GPURUN\" ps --json; sleep 30"
    );
    let mut job = fake_step(&s, "78", &script);
    let mut out = std::io::BufReader::new(job.stdout.take().unwrap());
    let mut line = String::new();
    use std::io::BufRead;
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let v = servers_of(&img);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0]["scope"], "slurm-job 78");
    let keeper = Command::new("pgrep")
        .args(["-f", "gpurun keep --job 78"])
        .output()
        .unwrap();
    let keeper: i32 = stdout(&keeper).trim().parse().unwrap();
    // SAFETY: a signal: no memory is touched.
    unsafe { libc::kill(keeper, libc::SIGTERM) };
    let server = pid_of(&v[0]);
    eventually(10, "the job's server ends with its keeper", || {
        !alive(server)
    });
    let _ = job.kill();
    let _ = job.wait();
}

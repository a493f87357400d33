//! SIGINT, SIGTERM and SIGKILL at random points of `pull` and `exec`, in a loop bounded in time
//! (GPURUN_INTERRUPT_SECS per loop, default 30): no partial image, no blob in the cache that fails
//! its digest, no process or FUSE connection left, and a later pull succeeds. After SIGKILL a
//! pull's temp file can only go with the next pull of the same output (docs/security.md).

mod common;
mod support;

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{busybox_image, gpurun, stderr, test_ids, Scratch};
use nix::sys::signal::Signal;
use support::{Comp, LayerTar, Layout, Registry};

/// xorshift64: reproducible from the printed seed, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn seed() -> u64 {
    std::env::var("GPURUN_INTERRUPT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        })
}

fn budget() -> Duration {
    Duration::from_secs(
        std::env::var("GPURUN_INTERRUPT_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30),
    )
}

const SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGKILL];

/// Processes of the test user whose command line mentions `marker`, once they had time to go.
fn procs_left(marker: &str) -> Vec<String> {
    let (uid, _) = test_ids();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
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
        if out.is_empty() || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every complete blob in the cache matches its digest (a .partial may be there to resume).
fn cache_sound(cache: &Path) {
    let Ok(d) = std::fs::read_dir(cache.join("blobs/sha256")) else {
        return;
    };
    for e in d.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.ends_with(".partial") || n.ends_with(".lock") {
            continue;
        }
        let got = support::sha256(&std::fs::read(e.path()).unwrap());
        assert_eq!(got, format!("sha256:{n}"), "cache holds a bad blob");
    }
}

fn temps(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

#[test]
fn interrupted_pulls_leave_nothing_and_resume() {
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    let mut rng = Rng(seed());
    eprintln!("seed {}", rng.0);
    // 8 MB that compresses badly: downloads and squashfs writing both take a while
    let big: Vec<u8> = (0..8u64 << 20).map(|_| rng.next() as u8).collect();
    let mut layout = Layout::new(&s.join("layout"));
    layout.image(
        "v1",
        &[
            (LayerTar::new().busybox().finish(), Comp::Gzip),
            (LayerTar::new().file("big", &big).finish(), Comp::Gzip),
        ],
        "amd64",
        None,
        serde_json::json!({}),
    );
    reg.push(&s.join("layout"), "v1", "test/int:v1", "oci");
    let out_dir = s.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    s.chown_all();
    let src = format!("docker://{}/test/int:v1", reg.addr());
    let pull = |cache: &Path, out: &str| {
        let mut c = gpurun(&["pull", &src, "-o", out]);
        c.current_dir(&out_dir)
            .env("GPURUN_CACHEDIR", cache)
            .stderr(Stdio::piped())
            .stdout(Stdio::null());
        c
    };
    let marker = out_dir.to_str().unwrap().to_string();
    // how long a whole pull takes from an empty cache: signals land anywhere in that
    let t = Instant::now();
    let o = pull(&s.join("cache-warmup"), "warmup.sqsh")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let span = t.elapsed().as_millis().max(50) as u64;
    let t0 = Instant::now();
    let mut counts = [0usize; 3];
    let mut i = 0;
    while t0.elapsed() < budget() || i < 3 {
        let sig = SIGNALS[i % 3];
        let cache = s.join(format!("cache{}", i % 4));
        if rng.below(3) == 0 {
            // a fresh cache: the signal can land in a download
            let _ = std::fs::remove_dir_all(&cache);
        }
        let out = format!("img{i}.sqsh");
        let delay = Duration::from_millis(rng.below(span));
        let mut c = pull(&cache, &out).spawn().unwrap();
        std::thread::sleep(delay);
        // setpriv execs in place: the child is gpurun itself
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), sig);
        let st = c.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(c.stderr.as_mut().unwrap(), &mut err).unwrap();
        let done = st.success();
        let what = format!("#{i} {sig:?} after {delay:?}: {st:?} {err}");
        if !done {
            counts[i % 3] += 1;
            match sig {
                Signal::SIGKILL => assert_eq!(st.signal(), Some(9), "{what}"),
                // killed before its handlers were in place, or exited 130
                _ => assert!(
                    st.code() == Some(130) || st.signal() == Some(sig as i32),
                    "{what}"
                ),
            }
            // killed after the rename: then it is the whole image (pulls are reproducible)
            if out_dir.join(&out).exists() {
                assert!(
                    std::fs::read(out_dir.join(&out)).unwrap()
                        == std::fs::read(out_dir.join("warmup.sqsh")).unwrap(),
                    "partial image: {what}"
                );
            }
            if sig != Signal::SIGKILL {
                assert_eq!(temps(&out_dir), Vec::<String>::new(), "{what}");
            }
        } else {
            assert!(out_dir.join(&out).exists(), "{what}");
        }
        assert_eq!(procs_left(&marker), Vec::<String>::new(), "{what}");
        cache_sound(&cache);
        if sig == Signal::SIGKILL && !done {
            // the same pull again: it succeeds and takes the dead one's temp file away (a kill
            // that landed after the rename left the whole image, checked above: pulled anew)
            let _ = std::fs::remove_file(out_dir.join(&out));
            let o = pull(&cache, &out).output().unwrap();
            assert!(o.status.success(), "re-pull after {what}: {}", stderr(&o));
            assert_eq!(temps(&out_dir), Vec::<String>::new(), "{what}");
            cache_sound(&cache);
        }
        i += 1;
    }
    for k in 0..4 {
        let cache = s.join(format!("cache{k}"));
        let o = pull(&cache, &format!("final{k}.sqsh")).output().unwrap();
        assert!(o.status.success(), "final pull: {}", stderr(&o));
        cache_sound(&cache);
    }
    assert_eq!(temps(&out_dir), Vec::<String>::new());
    eprintln!(
        "pull: {i} runs in {:?} (a pull takes {span} ms), interrupted by SIGINT {}, SIGTERM {}, SIGKILL {}",
        t0.elapsed(),
        counts[0],
        counts[1],
        counts[2]
    );
}

#[test]
fn interrupted_execs_leave_nothing() {
    let s = Scratch::new();
    let img = busybox_image(&s, "int", |_| {});
    let img = img.to_str().unwrap().to_string();
    let mut rng = Rng(seed());
    eprintln!("seed {}", rng.0);
    let fuse = || {
        std::fs::read_dir("/sys/fs/fuse/connections")
            .map(|d| d.count())
            .unwrap_or(0)
    };
    assert!(
        common::fusectl() || !common::is_root(),
        "fusectl could not be mounted"
    );
    let fuse_before = fuse();
    let t0 = Instant::now();
    let mut i = 0;
    while t0.elapsed() < budget() || i < 3 {
        let sig = SIGNALS[i % 3];
        // start-up (namespaces, FUSE, overlay) is where a dying gpurun can strand its child
        let delay = Duration::from_millis(rng.below(if i % 2 == 0 { 150 } else { 600 }));
        let mut c = gpurun(&[
            "exec",
            &img,
            "sh",
            "-c",
            "cat /bin/busybox > /dev/null; sleep 0.1; cat /bin/busybox > /dev/null; sleep 30",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        std::thread::sleep(delay);
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), sig);
        let st = c.wait().unwrap();
        let what = format!("#{i} {sig:?} after {delay:?}: {st:?}");
        assert!(
            st.signal() == Some(sig as i32) || st.code() == Some(128 + sig as i32),
            "{what}"
        );
        assert_eq!(procs_left(&img), Vec::<String>::new(), "{what}");
        i += 1;
    }
    // mounts go with the namespaces: their FUSE connections must be gone (slack for other
    // engineers' tests on this machine; a leak is one per run)
    let deadline = Instant::now() + Duration::from_secs(10);
    while fuse() > fuse_before + 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(fuse() <= fuse_before + 5, "{fuse_before} -> {}", fuse());
    eprintln!("exec: {i} runs interrupted in {:?}", t0.elapsed());
}

/// A server thread left waiting in the kernel when gpurun dies must not strand the container.
/// gpurun's page-cache stores (runtime/linger.rs, runtime/prefetch.rs) wait, unkillably, for a
/// page that a READ holds; once gpurun's threads are gone nothing answers that READ, and a
/// serving thread waiting so keeps the connection open. The container's exit then waits on that
/// store (the mount's teardown takes the lock the store holds), and both stay in D state for
/// good unless the container process aborts the connection. Made here on purpose: gpurun
/// stopped, the container's shell waits on a READ of /data (a readahead READ: one a killed
/// reader made itself would be dropped from the queue), this test stores into the page that READ
/// holds through gpurun's own /dev/fuse (pidfd_getfd, as root), and gpurun is killed.
#[test]
fn a_store_waiting_when_gpurun_dies_does_not_strand_the_container() {
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::Arc;
    if !root_and_fusectl("pidfd_getfd on gpurun") {
        return;
    }
    let s = Scratch::new();
    let img = busybox_image(&s, "stranded", |root| {
        std::fs::write(root.join("data"), vec![7u8; 1 << 20]).unwrap();
        std::fs::write(root.join("warm"), "x\n").unwrap();
    });
    let img = img.to_str().unwrap().to_string();
    // The shell's own `read` reads /data: no exec whose pages would need the stopped server,
    // and its code was paged in by reading /warm.
    let mut c = gpurun(&[
        "exec",
        &img,
        "sh",
        "-c",
        "read -r z < /warm; stat -c %i /data; read x; read -r y < /data; sleep 1000",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let gpurun_pid = nix::unistd::Pid::from_raw(c.id() as i32);
    let mut reaper = Reaper(gpurun_pid, None);
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let nodeid: u64 = line.trim().parse().expect("the inode number of /data");
    let p = gpurun_pid.as_raw();
    let conn = connection_of(p).expect("the image's FUSE connection");
    reaper.1 = Some(conn.clone());

    // gpurun's connection, held here as a thread of gpurun would hold it.
    let fd = std::fs::read_dir(format!("/proc/{p}/fd"))
        .unwrap()
        .flatten()
        .find(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == Path::new("/dev/fuse")))
        .and_then(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .expect("gpurun has /dev/fuse open");
    let held = unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, p, 0) as i32;
        assert!(
            pidfd >= 0,
            "pidfd_open: {}",
            std::io::Error::last_os_error()
        );
        let got = libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) as i32;
        assert!(got >= 0, "pidfd_getfd: {}", std::io::Error::last_os_error());
        libc::close(pidfd);
        OwnedFd::from_raw_fd(got)
    };

    // Nothing answers now: the shell waits on a READ of /data, its first page locked.
    nix::sys::signal::kill(gpurun_pid, Signal::SIGSTOP).unwrap();
    c.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let waiting = || {
        std::fs::read_to_string(conn.join("waiting"))
            .ok()
            .and_then(|w| w.trim().parse::<u32>().ok())
            .unwrap_or(0)
    };
    let t0 = Instant::now();
    while waiting() == 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "no request waits");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The readahead READ that follows: a store waiting on a READ its killed reader made itself
    // would be freed by that kill, and prove nothing.
    std::thread::sleep(Duration::from_millis(500));

    // A store into that page waits for the READ.
    let tid = Arc::new(AtomicI32::new(0));
    let tid2 = tid.clone();
    let store = std::thread::spawn(move || {
        tid2.store(nix::unistd::gettid().as_raw(), Ordering::SeqCst);
        gpurun::runtime::sys::notify_store(&held, nodeid, 0, &[7u8; 4096])
    });
    let state = |tid: i32| {
        let st = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
        let fields = st.rsplit(')').next().unwrap_or_default().to_string();
        fields.split_whitespace().next().map(str::to_string)
    };
    // Waiting, not just passing through a short uninterruptible sleep: D on 10 samples in a row.
    let (t0, mut in_d) = (Instant::now(), 0);
    while in_d < 10 {
        assert!(
            !store.is_finished() && t0.elapsed() < Duration::from_secs(5),
            "the store did not wait for the READ: the test no longer makes the hazard"
        );
        in_d = if state(tid.load(Ordering::SeqCst)).as_deref() == Some("D") {
            in_d + 1
        } else {
            0
        };
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !store.is_finished(),
        "the store ended before gpurun was killed"
    );

    nix::sys::signal::kill(gpurun_pid, Signal::SIGKILL).unwrap();
    let left = procs_left(&img);
    let t0 = Instant::now();
    while !store.is_finished() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let stranded = !store.is_finished();
    if stranded {
        let _ = std::fs::write(conn.join("abort"), "1");
    }
    let _ = store.join();
    let _ = c.wait();
    assert!(
        !stranded && left.is_empty(),
        "the store still waited: {stranded}; left behind: {left:?}"
    );
}

/// The fusectl directory of the image connection of the gpurun process `p`: from its container
/// process's mountinfo (the FUSE mount's device number).
fn connection_of(p: i32) -> Option<std::path::PathBuf> {
    let children = std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).ok()?;
    let c = children.split_whitespace().next()?;
    let info = std::fs::read_to_string(format!("/proc/{c}/mountinfo")).ok()?;
    let dev = info
        .lines()
        .find(|l| l.contains(" - fuse.gpurun "))?
        .split(' ')
        .nth(2)?;
    let (major, minor) = dev.split_once(':')?;
    let n = (major.parse::<u32>().ok()? << 20) | minor.parse::<u32>().ok()?;
    Some(Path::new("/sys/fs/fuse/connections").join(n.to_string()))
}

/// Kills gpurun when a test ends, however it ends, and on a failure aborts its connection (when
/// known), so that nothing is left waiting on this machine.
struct Reaper(nix::unistd::Pid, Option<std::path::PathBuf>);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0, Signal::SIGKILL);
        if let (true, Some(conn)) = (std::thread::panicking(), &self.1) {
            let _ = std::fs::write(conn.join("abort"), "1");
        }
    }
}

/// The pusher holds descriptors of its own: besides 0-2, the image and a /dev/fuse of its own
/// (runtime/prefetch.rs). Then the serving threads' descriptors close when they die, and a READ
/// one of them took ends, whatever the pusher waits on, even when nothing is left to abort the
/// connection (a SIGKILL of the container and gpurun at once).
#[test]
fn the_pusher_holds_only_the_image_and_its_own_fuse_descriptor() {
    if !root_and_fusectl("another user's /proc fd lists") {
        return;
    }
    let s = Scratch::new();
    let img = busybox_image(&s, "pusher", |_| {});
    let imgs = img.to_str().unwrap().to_string();
    let mut c = gpurun(&["exec", &imgs, "sleep", "30"]).spawn().unwrap();
    let _reaper = Reaper(nix::unistd::Pid::from_raw(c.id() as i32), None);
    let p = c.id();
    // What the descriptors above 0-2 are (the pusher keeps those three for its messages).
    let targets = |dir: String| -> Vec<String> {
        let mut t: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) > Some(2))
            .map(|e| std::fs::read_link(e.path()).unwrap_or_default())
            .map(|l| l.display().to_string())
            .collect();
        t.sort();
        t
    };
    let pusher = {
        let t0 = Instant::now();
        loop {
            let found = std::fs::read_dir(format!("/proc/{p}/task"))
                .unwrap()
                .flatten()
                .find(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|c| c.trim() == "gpurun-prefetch")
                });
            if let Some(t) = found {
                break t.path();
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "no pusher thread");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // It takes its own table at its start: wait for it.
    let want = vec!["/dev/fuse".to_string(), img.display().to_string()];
    let t0 = Instant::now();
    while targets(format!("{}/fd", pusher.display())) != want
        && t0.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(targets(format!("{}/fd", pusher.display())), want);
    let main = targets(format!("/proc/{p}/fd"));
    assert!(
        main.contains(&want[0]) && main.len() > want.len(),
        "the server's own table: {main:?}"
    );
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p as i32), Signal::SIGTERM);
    let _ = c.wait();
}

/// Whether a test that needs root (for `why`) and fusectl can run here; says so when not.
fn root_and_fusectl(why: &str) -> bool {
    let can = common::is_root() && common::fusectl();
    if !can {
        eprintln!("skipped: needs root ({why}) and fusectl");
    }
    can
}

//! A login node shared by many users (docs/security.md): nothing another local user creates
//! first steers what gpurun runs or writes. Each test lets one user (the attacker) prepare a
//! place, then another (the victim) runs gpurun there; the victim never runs the attacker's
//! content, no file of the victim's changes, and a refusal is one clear line.
//!
//! The attacks hold by construction (no link another user made is followed, nothing is used
//! that another user made), so they pass whatever fs.protected_symlinks is set to.

mod common;
mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{as_named, ids_of, stderr, stdout, Scratch, OTHER_USER, TEST_USER};
use support::{Comp, LayerTar, Layout, Registry};

/// A directory every user may write to, sticky and root's, as /tmp and /var/tmp are.
fn shared_tmp(s: &Scratch, name: &str) -> PathBuf {
    let d = s.join(name);
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
}

/// Tests that look up the test user's server names, squat them or end the user's idle servers
/// (`cache clean`) take turns: a squatted name or a stopped server of one is not the other's.
static SERVER_NAMES: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn server_names_turn() -> std::sync::MutexGuard<'static, ()> {
    SERVER_NAMES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Two users: without root there is only one, and nothing to test.
fn two_users() -> bool {
    common::root_or_skip("to act as two users")
}

/// Run `script` with sh as `user`; it must succeed.
fn sh_as(user: &str, script: &str) {
    common::run_ok(as_named(user, "sh").args(["-euc", script]));
}

/// `gpurun ARGS` as `user`.
fn gpurun_as(user: &str, args: &[&str]) -> Command {
    let mut c = as_named(user, common::gpurun_bin());
    c.args(args);
    c
}

/// The one `gpurun:` line of a failed run (warnings aside), after checking the exit code.
fn refusal(o: &Output, code: i32) -> String {
    let e = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(code),
        "stdout: {}\nstderr: {e}",
        stdout(o)
    );
    let lines: Vec<&str> = e.lines().filter(|l| !l.contains("warning:")).collect();
    assert_eq!(lines.len(), 1, "one line expected: {e}");
    assert!(lines[0].starts_with("gpurun: "), "{e}");
    lines[0].to_string()
}

/// A file of `user`'s in their home that no gpurun run may change, with its contents.
fn precious(user: &str) -> (PathBuf, String) {
    let p = PathBuf::from(format!("/home/{user}/precious.txt"));
    sh_as(user, &format!("printf keep > {}", p.display()));
    (p, "keep".to_string())
}

fn unchanged((p, text): &(PathBuf, String)) {
    assert_eq!(
        &std::fs::read_to_string(p).unwrap(),
        text,
        "{} changed",
        p.display()
    );
}

/// An image in a registry, and a layer of the same shape whose marker says PLANTED.
struct Fixture {
    reg: Registry,
    reference: String,
    layer_digest: String,
    planted_layer: Vec<u8>,
}

fn layer(marker: &str) -> Vec<u8> {
    LayerTar::new()
        .busybox()
        .file("etc/app", marker.as_bytes())
        .finish()
}

fn gzip(b: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn fixture(s: &Scratch) -> Fixture {
    let reg = Registry::start(&s.join("reg"), None);
    let mut l = Layout::new(&s.join("layout"));
    let config = serde_json::json!({"Env": ["PATH=/bin"], "Cmd": ["cat", "/etc/app"]});
    let img = l.image(
        "app",
        &[(layer("genuine"), Comp::Gzip)],
        "amd64",
        None,
        config,
    );
    reg.push(&l.dir, "app", "victim/app:v1", "oci");
    s.chown_all();
    let reference = format!("docker://{}/victim/app:v1", reg.addr());
    Fixture {
        reg,
        reference,
        layer_digest: img.layer_digests[0].clone(),
        planted_layer: gzip(&layer("PLANTED")),
    }
}

/// What the attacker leaves in the cache directory they make first.
enum Plant {
    /// The layer blob under its genuine digest, with other content.
    Blob,
    /// A partial download that is a link to a file of the victim's.
    PartialLink,
    /// The cache directory itself a link to a directory of the victim's.
    RootLink,
    /// An image and the reference's digest, for `exec docker://` when the registry is away.
    RefAndImage,
}

/// The attacker's cache at `cache`, made world-writable, holding `plant`.
fn plant(f: &Fixture, s: &Scratch, cache: &Path, plant: &Plant, victim_file: &Path) {
    let hex = &f.layer_digest[7..];
    let evil = s.join("evil-layer");
    std::fs::write(&evil, &f.planted_layer).unwrap();
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o644)).unwrap();
    let c = cache.display();
    let script = match plant {
        Plant::Blob => format!(
            "mkdir -p -m 0777 {c} {c}/blobs {c}/blobs/sha256 && chmod 0777 {c} && cp {} {c}/blobs/sha256/{hex}",
            evil.display()
        ),
        Plant::PartialLink => format!(
            "mkdir -p -m 0777 {c}/blobs/sha256 && chmod 0777 {c} && ln -s {} {c}/blobs/sha256/{hex}.partial",
            victim_file.display()
        ),
        Plant::RootLink => format!("ln -s {} {c}", victim_file.parent().unwrap().display()),
        Plant::RefAndImage => format!(
            "mkdir -p -m 0777 {c}/refs {c}/images && chmod 0777 {c} && printf 'sha256:{}\\n' > {c}/refs/any && cp {} {c}/images/{}.sqsh",
            "a".repeat(64),
            evil.display(),
            "a".repeat(64),
        ),
    };
    sh_as(OTHER_USER, &script);
}

#[test]
fn a_cache_directory_another_user_made_is_refused_and_left_alone() {
    if !two_users() {
        return;
    }
    let s = Scratch::new();
    let f = fixture(&s);
    let tmp = shared_tmp(&s, "tmp");
    let victim_file = precious(TEST_USER);
    let cases = [
        Plant::Blob,
        Plant::PartialLink,
        Plant::RootLink,
        Plant::RefAndImage,
    ];
    for (i, p) in cases.iter().enumerate() {
        let cache = tmp.join(format!("cache{i}"));
        plant(&f, &s, &cache, p, &victim_file.0);
        let before = std::fs::symlink_metadata(&cache).unwrap();
        let out = tmp.join(format!("out{i}.sqsh"));
        let o = match p {
            // The registry away: only a planted image could answer.
            Plant::RefAndImage => gpurun_as(
                TEST_USER,
                &[
                    "exec",
                    "docker://127.0.0.1:9/victim/app:v1",
                    "cat",
                    "/etc/app",
                ],
            ),
            _ => gpurun_as(
                TEST_USER,
                &["pull", &f.reference, "-o", out.to_str().unwrap()],
            ),
        }
        .env("GPURUN_CACHEDIR", &cache)
        .output()
        .unwrap();
        let line = refusal(&o, 125);
        assert!(
            !stdout(&o).contains("PLANTED"),
            "case {i} ran the planted content"
        );
        assert!(
            line.contains(&cache.display().to_string()),
            "case {i}: {line}"
        );
        assert!(
            line.contains(OTHER_USER) && line.contains("GPURUN_CACHEDIR"),
            "case {i}: {line}"
        );
        assert!(!out.exists(), "case {i}: an image was written");
        let after = std::fs::symlink_metadata(&cache).unwrap();
        assert_eq!(
            (before.mode(), before.uid()),
            (after.mode(), after.uid()),
            "case {i}: changed"
        );
        unchanged(&victim_file);
    }
    // The victim's directory behind the planted link was neither filled nor opened up.
    let home = victim_file.0.parent().unwrap();
    assert!(!home.join("blobs").exists());
    // The same pull into a cache of the victim's own works: the refusals above were the point.
    let own = tmp.join("own-cache");
    let out = tmp.join("own.sqsh");
    let o = gpurun_as(
        TEST_USER,
        &["pull", "-q", &f.reference, "-o", out.to_str().unwrap()],
    )
    .env("GPURUN_CACHEDIR", &own)
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = gpurun_as(TEST_USER, &["run", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(stdout(&o), "genuine");
    assert_eq!(std::fs::metadata(&own).unwrap().mode() & 0o777, 0o700);
    drop(f.reg);
}

/// The victim's default cache, /var/tmp/gpurun-UID, made first by someone else: a pull is
/// refused; running a local image still works, with one warning, and reads nothing from it.
#[test]
fn the_default_cache_made_first_by_someone_else() {
    if !two_users() {
        return;
    }
    // Here the test user squats the second user's default cache.
    let (victim_uid, _) = ids_of(OTHER_USER);
    let squatted = PathBuf::from(format!("/var/tmp/gpurun-{victim_uid}"));
    let _ = std::fs::remove_dir_all(&squatted);
    let s = Scratch::new();
    let f = fixture(&s);
    let hex = &f.layer_digest[7..];
    let evil = s.join("evil-layer");
    std::fs::write(&evil, &f.planted_layer).unwrap();
    let q = squatted.display();
    sh_as(
        TEST_USER,
        &format!(
            "mkdir -m 0777 {q} && mkdir -p -m 0777 {q}/blobs/sha256 {q}/image-facts && cp {} {q}/blobs/sha256/{hex}",
            evil.display()
        ),
    );
    let victim_dir = PathBuf::from(format!("/home/{OTHER_USER}"));
    let out = victim_dir.join("app.sqsh");
    let _ = std::fs::remove_file(&out);
    let o = gpurun_as(
        OTHER_USER,
        &["pull", &f.reference, "-o", out.to_str().unwrap()],
    )
    .output()
    .unwrap();
    let line = refusal(&o, 125);
    assert!(
        line.contains(&q.to_string()) && line.contains(TEST_USER),
        "{line}"
    );
    assert!(!out.exists());
    // A local image of the victim's own still runs, told once why nothing is kept.
    let img = victim_dir.join("local.sqsh");
    let root = s.join("root");
    common::busybox_rootfs(&root);
    std::fs::write(root.join("etc/app"), "local").unwrap();
    common::mksquashfs(&root, &img, &[]);
    std::os::unix::fs::chown(&img, Some(victim_uid), None).unwrap();
    let o = gpurun_as(
        OTHER_USER,
        &["exec", img.to_str().unwrap(), "cat", "/etc/app"],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "local");
    let err = stderr(&o);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning:")).collect();
    assert_eq!(warnings.len(), 1, "{}", stderr(&o));
    assert!(warnings[0].contains(&q.to_string()), "{}", warnings[0]);
    let facts = std::fs::read_dir(squatted.join("image-facts"))
        .unwrap()
        .count();
    assert_eq!(facts, 0, "nothing of the victim's was written there");
    // doctor says what is wrong with the cache, and the fix.
    let o = gpurun_as(OTHER_USER, &["doctor"]).output().unwrap();
    let report = stdout(&o);
    let cache_line = report
        .lines()
        .find(|l| l.contains(&q.to_string()))
        .unwrap_or_default();
    assert!(cache_line.contains("not by you"), "{report}");
    assert!(report.contains("GPURUN_CACHEDIR"), "{report}");
    std::fs::remove_dir_all(&squatted).unwrap();
    let _ = std::fs::remove_file(&img);
    drop(f.reg);
}

/// Links at `names` to `target`, made for `user` without starting a process (which would take
/// one of the pids the names guess).
fn plant_links(user: &str, names: impl Iterator<Item = PathBuf>, target: &Path) {
    let (uid, gid) = ids_of(user);
    for n in names {
        std::os::unix::fs::symlink(target, &n).unwrap();
        std::os::unix::fs::lchown(&n, Some(uid), Some(gid)).unwrap();
    }
}

/// The next pids this machine will hand out, for names an attacker would guess.
fn next_pids(n: u32) -> std::ops::Range<u32> {
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    last + 1..last + 1 + n
}

/// `pull -o` into a shared directory: names beside the output that another user planted (links
/// at the temporary names gpurun once used, a link at the output's own name) are never written
/// through; an output directory gpurun cannot write to is said before anything is downloaded.
#[test]
fn a_pull_into_a_shared_directory_writes_only_its_own_files() {
    if !two_users() {
        return;
    }
    let s = Scratch::new();
    let f = fixture(&s);
    let tmp = shared_tmp(&s, "tmp");
    let victim_file = precious(TEST_USER);
    let names = next_pids(1500).map(|pid| tmp.join(format!(".x.sqsh.tmp-{pid}")));
    plant_links(OTHER_USER, names, &victim_file.0);
    let cache = s.join("cache");
    let pull = |out: &Path, extra: &[&str]| {
        let mut args = vec!["pull", "-q", &f.reference, "-o", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        gpurun_as(TEST_USER, &args)
            .env("GPURUN_CACHEDIR", &cache)
            .output()
            .unwrap()
    };
    let x = tmp.join("x.sqsh");
    let o = pull(&x, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    unchanged(&victim_file);
    let (uid, _) = ids_of(TEST_USER);
    let md = std::fs::symlink_metadata(&x).unwrap();
    assert!(md.is_file() && md.uid() == uid);
    // A link at the output's name: refused without --force, replaced (never followed) with it.
    let y = tmp.join("y.sqsh");
    plant_links(OTHER_USER, std::iter::once(y.clone()), &victim_file.0);
    let line = refusal(&pull(&y, &[]), 125);
    assert!(line.contains("already exists"), "{line}");
    let o = pull(&y, &["--force"]);
    // In a sticky directory the link is not the victim's to replace: refused, nothing written.
    assert!(!o.status.success());
    unchanged(&victim_file);
    // Its own staging directories are gone; the planted links are as they were.
    for e in std::fs::read_dir(&tmp).unwrap() {
        let n = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!n.contains(".gpurun-"), "staging left behind: {n}");
    }
    // An output directory the victim cannot write to: said before anything is downloaded.
    let locked = s.join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    let fresh = s.join("fresh-cache");
    let o = gpurun_as(
        TEST_USER,
        &[
            "pull",
            &f.reference,
            "-o",
            locked.join("z.sqsh").to_str().unwrap(),
        ],
    )
    .env("GPURUN_CACHEDIR", &fresh)
    .output()
    .unwrap();
    let line = refusal(&o, 125);
    assert!(
        line.contains("cannot write") && line.contains("locked"),
        "{line}"
    );
    assert!(!fresh.exists(), "nothing downloaded first");
    drop(f.reg);
}

/// An image path or bind source behind a directory the user cannot search: "permission
/// denied", naming the path, not "does not exist".
#[test]
fn permission_problems_are_said_as_such() {
    if !two_users() {
        return;
    }
    let s = Scratch::new();
    let img = common::busybox_image(&s, "img", |_| {});
    let closed = s.join("closed");
    std::fs::create_dir(&closed).unwrap();
    std::fs::copy(&img, closed.join("img.sqsh")).unwrap();
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let inside = closed.join("img.sqsh");
    let o = gpurun_as(TEST_USER, &["exec", inside.to_str().unwrap(), "true"])
        .output()
        .unwrap();
    let line = refusal(&o, 125);
    assert!(
        line.contains("permission denied") && line.contains("closed/img.sqsh"),
        "{line}"
    );
    let bind = format!("{}:/mnt", closed.join("data").display());
    let o = gpurun_as(
        TEST_USER,
        &["exec", "--bind", &bind, img.to_str().unwrap(), "true"],
    )
    .output()
    .unwrap();
    let line = refusal(&o, 125);
    assert!(
        line.contains("permission denied") && line.contains("closed/data"),
        "{line}"
    );
}

/// A FIFO, a socket or a device where an image should be is refused at once, with one line.
#[test]
fn images_that_are_not_files_are_refused_at_once() {
    let s = Scratch::new();
    let tmp = shared_tmp(&s, "tmp");
    let fifo = tmp.join("img.sqsh");
    sh_as(
        if common::is_root() {
            OTHER_USER
        } else {
            TEST_USER
        },
        &format!("mkfifo {}", fifo.display()),
    );
    for (path, kind) in [
        (fifo.as_path(), "FIFO"),
        (Path::new("/dev/null"), "character device"),
    ] {
        let o = common::as_user("timeout")
            .arg("20")
            .arg(common::gpurun_bin())
            .args(["exec", path.to_str().unwrap(), "true"])
            .env("GPURUN_CACHEDIR", s.join("cache"))
            .output()
            .unwrap();
        let line = refusal(&o, 125);
        assert!(
            line.contains(kind) && line.contains(path.to_str().unwrap()),
            "{line}"
        );
    }
}

/// Registry credentials given to gpurun stay with gpurun: not in any container's environment.
#[test]
fn registry_credentials_never_reach_the_container() {
    let s = Scratch::new();
    let img = common::busybox_image(&s, "img", |_| {});
    for extra in [&[][..], &["--contain"][..], &["--cleanenv"][..]] {
        let mut args = vec!["exec"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[img.to_str().unwrap(), "env"]);
        let o = common::gpurun(&args)
            .env("GPURUN_DOCKER_USERNAME", "robot")
            .env("GPURUN_DOCKER_PASSWORD", "s3cret-token")
            .env("GPURUN_CACHEDIR", s.join("cache"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let env = stdout(&o);
        assert!(
            !env.contains("s3cret-token") && !env.contains("GPURUN_DOCKER"),
            "{extra:?}: {env}"
        );
        assert!(env.contains("PATH="), "the environment was printed: {env}");
    }
}

/// `hold --state FILE` in a shared directory: the state is written through a file gpurun made
/// itself, never through a link planted at the temporary name it uses.
#[test]
fn hold_state_is_never_written_through_a_planted_link() {
    if !two_users() {
        return;
    }
    let s = Scratch::new();
    let img = common::busybox_image(&s, "img", |_| {});
    let tmp = shared_tmp(&s, "tmp");
    let victim_file = precious(TEST_USER);
    let state = tmp.join("state.json");
    let names = next_pids(1500).map(|pid| tmp.join(format!("state.json.tmp{pid}")));
    plant_links(OTHER_USER, names, &victim_file.0);
    let mut child = gpurun_as(
        TEST_USER,
        &[
            "hold",
            "--state",
            state.to_str().unwrap(),
            img.to_str().unwrap(),
        ],
    )
    .env("GPURUN_CACHEDIR", s.join("cache"))
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let t0 = std::time::Instant::now();
    while !state.exists() && t0.elapsed() < std::time::Duration::from_secs(20) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let written = state.exists();
    // SAFETY: a signal to the test's own child: no memory is touched.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    unchanged(&victim_file);
    // The state was written where asked, or (its temporary name taken) the start refused.
    assert!(
        written || stderr(&o).contains("state.json.tmp"),
        "{}",
        stderr(&o)
    );
}

/// Without /dev/fuse, gpurun runs an extracted copy from the cache: one another user planted
/// under the image's content key is never run.
#[test]
fn a_planted_extracted_root_is_never_run() {
    if !two_users() {
        return;
    }
    let s = Scratch::new();
    let img = common::busybox_image(&s, "img", |r| {
        std::fs::write(r.join("etc/app"), "genuine").unwrap()
    });
    let key = gpurun::image::sqfs::Archive::open(&img)
        .unwrap()
        .content_key()
        .unwrap();
    let tmp = shared_tmp(&s, "tmp");
    let cache = tmp.join("cache");
    let planted = cache.join("rootfs").join(&key);
    common::busybox_rootfs(&planted);
    std::fs::write(planted.join("etc/app"), "PLANTED").unwrap();
    let (a_uid, a_gid) = ids_of(OTHER_USER);
    common::run_ok(
        Command::new("chown")
            .arg("-R")
            .arg(format!("{a_uid}:{a_gid}"))
            .arg(&cache),
    );
    common::run_ok(
        Command::new("chmod")
            .args(["0777"])
            .arg(&cache)
            .arg(cache.join("rootfs")),
    );
    let blocker = s.join("no-fuse");
    std::fs::write(&blocker, "").unwrap();
    std::fs::set_permissions(&blocker, std::fs::Permissions::from_mode(0o000)).unwrap();
    let (uid, gid) = ids_of(TEST_USER);
    // /dev/fuse is covered by an unreadable file in this private mount namespace only.
    let script = format!(
        "mount --bind {blocker} /dev/fuse && exec setpriv --reuid={uid} --regid={gid} --init-groups -- \
         env GPURUN_CACHEDIR={cache} HOME=/home/{TEST_USER} {bin} exec {img} cat /etc/app",
        blocker = blocker.display(),
        cache = cache.display(),
        bin = common::gpurun_bin().display(),
        img = img.display(),
    );
    let o = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(!stdout(&o).contains("PLANTED"), "ran the planted root");
    let line = refusal(&o, 125);
    assert!(
        line.contains(&cache.display().to_string()) && line.contains(OTHER_USER),
        "{line}"
    );
}

/// A site's shared read-only cache: filled by its owner (a site account) with ordinary runs,
/// read by every other user without downloading, also offline; refused once others could
/// change it.
#[test]
fn a_site_shared_cache_is_read_never_written_and_only_when_closed() {
    if !two_users() {
        return;
    }
    let s = Scratch::new();
    let f = fixture(&s);
    // The way to a shared cache is root's, as on a site's software area.
    let area = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(area.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared = area.path().join("site-cache");
    let site = s.join("site.toml");
    std::fs::write(&site, format!("shared_cache = \"{}\"\n", shared.display())).unwrap();
    std::fs::set_permissions(&site, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (site_uid, site_gid) = ids_of(OTHER_USER);
    std::os::unix::fs::chown(&shared, Some(site_uid), Some(site_gid)).unwrap();
    let run = |user: &str, cache: &Path, reference: &str| {
        gpurun_as(user, &["exec", "-q", reference, "cat", "/etc/app"])
            .env("GPURUN_SITE_CONFIG", &site)
            .env("GPURUN_CACHEDIR", cache)
            .output()
            .unwrap()
    };
    // The site account fills it: kept readable by all.
    let o = run(OTHER_USER, &shared, &f.reference);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::metadata(shared.join("images")).unwrap().mode() & 0o777,
        0o755
    );
    assert_eq!(std::fs::metadata(&shared).unwrap().mode() & 0o777, 0o755);
    // Another user runs from it: nothing downloaded into their own cache.
    let own = s.join("own");
    let o = run(TEST_USER, &own, &f.reference);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "genuine");
    assert_eq!(
        std::fs::read_dir(own.join("blobs/sha256")).unwrap().count(),
        0
    );
    assert_eq!(std::fs::read_dir(own.join("images")).unwrap().count(), 0);
    // Offline: the reference's digest comes from the shared cache too.
    let reference = f.reference.clone();
    drop(f.reg);
    let o = run(TEST_USER, &own, &reference);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "genuine");
    // Once others may change it, it is refused: one line, naming it.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let line = refusal(&run(TEST_USER, &own, &reference), 125);
    assert!(
        line.contains("shared cache") && line.contains("site-cache"),
        "{line}"
    );
    // A user's config may not name one: in a config home of its own, as the tests beside this
    // one run gpurun as the same user and read the real one.
    let config_home = s.join("config-home");
    sh_as(
        TEST_USER,
        &format!(
            "mkdir -p {0}/gpurun && echo 'shared_cache = \"/tmp\"' > {0}/gpurun/config.toml",
            config_home.display()
        ),
    );
    let o = gpurun_as(TEST_USER, &["config", "show"])
        .env("XDG_CONFIG_HOME", &config_home)
        .output()
        .unwrap();
    let line = refusal(&o, 125);
    assert!(line.contains("site setting"), "{line}");
}

/// The abstract socket names of `user`'s image servers listening now (from /proc/net/unix).
fn server_names(user: &str) -> Vec<String> {
    let (uid, _) = ids_of(user);
    let table = std::fs::read_to_string("/proc/net/unix").unwrap();
    let prefix = format!("@gpurun-{uid}-");
    let mut names: Vec<String> = table
        .lines()
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter(|n| n.starts_with(&prefix) && !n.contains("stopping"))
        .map(|n| n[1..].to_string())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The name of the test user's server of `img`.
fn name_of_server(img: &Path) -> String {
    let image = format!("\"image\":\"{}\"", img.display());
    let names = server_names(TEST_USER);
    let said: Vec<String> = names
        .iter()
        .map(|n| ask_as(TEST_USER, n, "status"))
        .collect();
    let found = names.iter().zip(&said).find(|(_, s)| s.contains(&image));
    found
        .map(|(n, _)| n.clone())
        .unwrap_or_else(|| panic!("the user's server of {image}: {names:?} said {said:?}"))
}

/// What `user` gets from the socket `name` for `op`: its answer and the number of descriptors
/// attached, or "refused" when it cannot connect or the server closes unanswered.
fn ask_as(user: &str, name: &str, op: &str) -> String {
    let script = r#"
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
try:
    s.connect("\0" + sys.argv[1])
    s.send(json.dumps({"op": sys.argv[2]}).encode())
    msg, fds, _, _ = socket.recv_fds(s, 65536, 4)
    print("refused" if not msg else f"{msg.decode()} {len(fds)} fds")
except OSError as e:
    print("refused")
"#;
    let o = as_named(user, "python3")
        .args(["-c", script, name, op])
        .output()
        .unwrap();
    stdout(&o).trim().to_string()
}

/// Another user can neither attach to a user's image server, nor ask it anything, nor stop it;
/// the user's own requests are answered.
#[test]
fn another_user_cannot_attach_to_or_stop_an_image_server() {
    if !two_users() {
        return;
    }
    let _turn = server_names_turn();
    let s = Scratch::new();
    let img = common::busybox_image(&s, "served", |_| {});
    let i = img.to_str().unwrap();
    let mut exec = gpurun_as(TEST_USER, &["exec", i, "true"]);
    common::run_ok(exec.env("GPURUN_SERVER_IDLE", "1m"));
    let name = name_of_server(&img);
    for op in ["attach", "status", "stop"] {
        assert_eq!(ask_as(OTHER_USER, &name, op), "refused", "{op}");
    }
    // The other user's stop ends only servers of their own (a test running alongside may have
    // one): never this one.
    let o = gpurun_as(OTHER_USER, &["stop"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).contains(i), "{}", stdout(&o));
    assert!(
        server_names(TEST_USER).contains(&name),
        "stopped by another user"
    );
    assert!(ask_as(TEST_USER, &name, "attach").ends_with("1 fds"));
    common::run_ok(&mut gpurun_as(TEST_USER, &["stop", i]));
}

/// An image whose /etc/app says "genuine", and the name of the test user's server of it, found
/// from a first run whose server is then stopped: a name another user can take.
fn image_and_its_server_name(s: &Scratch, name: &str) -> (PathBuf, String) {
    let img = common::busybox_image(s, name, |root| {
        std::fs::write(root.join("etc/app"), "genuine\n").unwrap()
    });
    let i = img.to_str().unwrap();
    common::run_ok(gpurun_as(TEST_USER, &["exec", i, "true"]).env("GPURUN_SERVER_IDLE", "1m"));
    let server = name_of_server(&img);
    common::run_ok(&mut gpurun_as(TEST_USER, &["stop", i]));
    (img, server)
}

/// A server's name that another user holds first means no sharing: the container gets a server
/// of its own, with one warning, and runs as ever.
#[test]
fn a_server_name_another_user_holds_means_a_server_of_ones_own() {
    if !two_users() {
        return;
    }
    let _turn = server_names_turn();
    let s = Scratch::new();
    let (img, name) = image_and_its_server_name(&s, "squat");
    let i = img.to_str().unwrap();
    let squat = r#"
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind("\0" + sys.argv[1]); s.listen(); print("ready", flush=True); time.sleep(60)
"#;
    let mut squatter = as_named(OTHER_USER, "python3")
        .args(["-c", squat, &name])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = [0u8; 6];
    use std::io::Read;
    squatter
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut ready)
        .unwrap();
    let o = gpurun_as(TEST_USER, &["exec", i, "cat", "/etc/app"])
        .env("GPURUN_SERVER_IDLE", "1m")
        .output()
        .unwrap();
    let _ = squatter.kill();
    let _ = squatter.wait();
    assert_eq!(stdout(&o), "genuine\n", "{}", stderr(&o));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with("gpurun: warning:") && e.contains("another user"),
        "{e}"
    );
}

/// Run `script` with python3 as `user`, with `args`; returns once it printed its first line.
fn python_as(user: &str, script: &str, args: &[&str]) -> std::process::Child {
    use std::io::Read;
    let mut c = as_named(user, "python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = [0u8; 6];
    c.stdout.as_mut().unwrap().read_exact(&mut ready).unwrap();
    c
}

/// `cmd`'s output, killed (and the test failed) when it takes longer than `bound`: a wait on
/// something another user holds is a hang.
fn within(cmd: &mut Command, bound: std::time::Duration) -> Output {
    let started = std::time::Instant::now();
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > bound {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{cmd:?} still ran after {bound:?} (a hang)\nstderr: {}",
                stderr(&o)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Another user binds the name of a user's server with a backlog of one queued connection and
/// never accepts: the user's commands neither hang nor use it (a server of the container's own,
/// with one warning; `ps`, `stop` and `cache clean` skip the name).
#[test]
fn a_squatted_name_that_never_accepts_hangs_nothing() {
    if !two_users() {
        return;
    }
    let _turn = server_names_turn();
    let s = Scratch::new();
    let (img, name) = image_and_its_server_name(&s, "backlog");
    let i = img.to_str().unwrap();
    let squat = r#"
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind("\0" + sys.argv[1]); s.listen(0)
c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); c.connect("\0" + sys.argv[1])
print("ready", flush=True); time.sleep(120)
"#;
    let mut squatter = python_as(OTHER_USER, squat, &[&name]);
    let bound = std::time::Duration::from_secs(40);
    let exec = within(
        gpurun_as(TEST_USER, &["exec", i, "cat", "/etc/app"]).env("GPURUN_SERVER_IDLE", "1m"),
        bound,
    );
    // `stop` of this image and `clean` of a cache of this test's ask every name all the same
    let ps = within(&mut gpurun_as(TEST_USER, &["ps"]), bound);
    let stop = within(&mut gpurun_as(TEST_USER, &["stop", i]), bound);
    let clean = within(
        gpurun_as(TEST_USER, &["cache", "clean"]).env("GPURUN_CACHEDIR", s.join("cache")),
        bound,
    );
    let _ = squatter.kill();
    let _ = squatter.wait();
    assert_eq!(stdout(&exec), "genuine\n", "{}", stderr(&exec));
    let e = stderr(&exec);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with("gpurun: warning:") && e.contains("does not answer"),
        "{e}"
    );
    for o in [&ps, &stop, &clean] {
        assert!(o.status.success(), "{}", stderr(o));
    }
}

/// The name of the test user's server of `img` when it belongs to Slurm job `job`, from a start
/// under a real keeper of the job (`gpurun keep`), below a process called slurmstepd.
fn job_server_name(s: &Scratch, img: &Path, job: &str) -> String {
    let keeper = common::gpurun_bin();
    let mut k = gpurun_as(TEST_USER, &["keep", "--job", job])
        .spawn()
        .unwrap();
    let (uid, _) = ids_of(TEST_USER);
    let keeper_name = format!("@gpurun-keep-{uid}-{job}");
    for _ in 0..200 {
        let table = std::fs::read_to_string("/proc/net/unix").unwrap();
        if table.contains(&keeper_name) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    let cmd = format!("{} exec {} true; exit $?", keeper.display(), img.display());
    common::run_ok(under_slurmstepd(s, job, &cmd).env("GPURUN_SERVER_IDLE", "1m"));
    let name = name_of_server(img);
    common::run_ok(&mut gpurun_as(TEST_USER, &["stop", img.to_str().unwrap()]));
    let _ = k.kill();
    let _ = k.wait();
    name
}

/// `sh -c CMD` as the test user in Slurm job `job`, from a shell called slurmstepd (gpurun
/// finds its step by that ancestor).
fn under_slurmstepd(s: &Scratch, job: &str, cmd: &str) -> Command {
    let stepd = s.join("slurmstepd");
    if !stepd.exists() {
        std::fs::copy("/bin/dash", &stepd).unwrap();
        s.chown_all();
    }
    let mut c = as_named(TEST_USER, &stepd);
    c.args(["-c", cmd]).env("SLURM_JOB_ID", job);
    c
}

/// The job's keeper ends (a job's end, an OOM kill) while a start has checked it and before
/// that start asks it for a server, and another user binds its name in between: the start
/// asks on the connection it checked, never on a new one, so the other user receives no
/// descriptor and the container runs the user's image.
#[test]
fn a_dead_keepers_name_taken_by_another_user_gets_nothing() {
    if !two_users() {
        return;
    }
    let _turn = server_names_turn();
    let s = Scratch::new();
    let img = common::busybox_image(&s, "keeper", |root| {
        std::fs::write(root.join("etc/app"), "genuine\n").unwrap()
    });
    let job = format!("9{}", std::process::id());
    let server = job_server_name(&s, &img, &job);
    let (uid, _) = ids_of(TEST_USER);
    let keeper = format!("gpurun-keep-{uid}-{job}");
    let flags = shared_tmp(&s, "flags");
    let (taken, held, got) = (flags.join("taken"), flags.join("held"), flags.join("got"));
    // the user's keeper, checked by the start, gone once the other user holds its name; a
    // server name that answers nothing until then, so the start asks the keeper afterwards
    let victim = r#"
import os, socket, sys, time
kname, sname, taken, held = sys.argv[1:5]
def listen(n):
    l = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); l.bind("\0" + n); l.listen(); return l
k, s = listen(kname), listen(sname)
print("ready", flush=True)
c, _ = k.accept(); k.close(); open(taken, "w").close()
while not os.path.exists(held): time.sleep(0.01)
d, _ = s.accept(); d.recv(65536); s.close(); d.close(); c.close()
time.sleep(60)
"#;
    let attacker = r#"
import os, socket, sys, time
kname, taken, held, got = sys.argv[1:5]
print("ready", flush=True)
while not os.path.exists(taken): time.sleep(0.01)
a = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); a.bind("\0" + kname); a.listen()
open(held, "w").close(); a.settimeout(60); n = 0
while True:
    c, _ = a.accept()
    _, fds, _, _ = socket.recv_fds(c, 65536, 8); n += len(fds)
    open(got, "w").write(str(n)); c.send(b"{}"); [os.close(f) for f in fds]
"#;
    let p = |p: &PathBuf| p.to_str().unwrap().to_string();
    let mut a = python_as(
        OTHER_USER,
        attacker,
        &[&keeper, &p(&taken), &p(&held), &p(&got)],
    );
    let mut v = python_as(
        TEST_USER,
        victim,
        &[&keeper, &server, &p(&taken), &p(&held)],
    );
    let cmd = format!(
        "{} exec {} cat /etc/app; exit $?",
        common::gpurun_bin().display(),
        img.display()
    );
    let o = within(
        under_slurmstepd(&s, &job, &cmd).env("GPURUN_SERVER_IDLE", "1m"),
        std::time::Duration::from_secs(90),
    );
    for c in [&mut a, &mut v] {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(held.exists(), "the other user never held the keeper's name");
    let received = std::fs::read_to_string(&got).unwrap_or_else(|_| "0".into());
    assert_eq!(
        received,
        "0",
        "the other user received descriptors: {}",
        stderr(&o)
    );
    assert_eq!(stdout(&o), "genuine\n", "{}", stderr(&o));
}

/// A cache below a sticky directory another user owns (who may rename anything in it, also
/// after gpurun checked the way) is not a safe place: nothing is kept or read there, with one
/// warning, and the container runs.
#[test]
fn a_sticky_directory_of_another_user_is_no_safe_way() {
    if !two_users() {
        return;
    }
    let s = Scratch::new();
    let img = common::busybox_image(&s, "sticky", |root| {
        std::fs::write(root.join("etc/app"), "genuine\n").unwrap()
    });
    let sticky = shared_tmp(&s, "theirs");
    let (other, _) = ids_of(OTHER_USER);
    std::os::unix::fs::chown(&sticky, Some(other), None).unwrap();
    let cache = sticky.join("cache");
    let o = gpurun_as(
        TEST_USER,
        &["exec", img.to_str().unwrap(), "cat", "/etc/app"],
    )
    .env("GPURUN_CACHEDIR", &cache)
    .output()
    .unwrap();
    assert_eq!(stdout(&o), "genuine\n", "{}", stderr(&o));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with("gpurun: warning: cache directory")
            && e.contains("may be changed by other users"),
        "{e}"
    );
    assert!(
        !cache.exists(),
        "made below a directory another user may rename in"
    );
}

/// Another user binds many names with the user's server prefix (`gpurun-UID-…`, all listed in
/// /proc/net/unix), each with a full backlog (listen(0) and one queued connection, whose
/// socket may even be closed again: one descriptor a name). Every name alone is skipped after
/// `own_server`'s 2 s, but the waits add up: `gpurun ps`, `stop` and `cache clean` take 2 s a
/// name, so a few hundred names (the other user's descriptor limit is thousands) hang them
/// for many minutes. A name held by another user must cost no wait at all.
#[test]
fn many_squatted_names_add_up_to_no_hang() {
    if !two_users() {
        return;
    }
    let _turn = server_names_turn();
    let (uid, _) = ids_of(TEST_USER);
    let squat = r#"
import socket, sys, time
keep = []
for i in range(int(sys.argv[2])):
    n = "\0gpurun-%s-squat%d-%04d" % (sys.argv[1], __import__("os").getpid(), i)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.bind(n); s.listen(0)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); c.connect(n); c.close()
    keep.append(s)
print("ready", flush=True); time.sleep(120)
"#;
    let mut squatter = python_as(OTHER_USER, squat, &[&uid.to_string(), "20"]);
    let bound = std::time::Duration::from_secs(10);
    // `ps` changes nothing; `stop` of an image no server serves stops nothing either, but
    // asks every name first
    let ps = std::panic::catch_unwind(|| within(&mut gpurun_as(TEST_USER, &["ps"]), bound));
    let stop = std::panic::catch_unwind(|| {
        within(
            &mut gpurun_as(TEST_USER, &["stop", "/nonexistent/none.sqsh"]),
            bound,
        )
    });
    let _ = squatter.kill();
    let _ = squatter.wait();
    for o in [ps, stop] {
        let o = o.expect("a hang on names another user holds");
        assert!(o.status.success(), "{}", stderr(&o));
    }
}

/// `exec docker://` of an image the cache lacks pulls it in a process of its own (the first
/// start): a cache directory another user made first, holding a planted blob, a planted link
/// to a file of the victim's, or being such a link itself, is refused there as by `pull`.
#[test]
fn a_first_start_into_a_cache_another_user_made_is_refused() {
    if !two_users() {
        return;
    }
    let s = Scratch::new();
    let f = fixture(&s);
    let tmp = shared_tmp(&s, "tmp");
    let victim_file = precious(TEST_USER);
    for (i, p) in [Plant::Blob, Plant::PartialLink, Plant::RootLink]
        .iter()
        .enumerate()
    {
        let cache = tmp.join(format!("cache{i}"));
        plant(&f, &s, &cache, p, &victim_file.0);
        let before = std::fs::symlink_metadata(&cache).unwrap();
        let o = gpurun_as(TEST_USER, &["exec", &f.reference, "cat", "/etc/app"])
            .env("GPURUN_CACHEDIR", &cache)
            .output()
            .unwrap();
        let line = refusal(&o, 125);
        assert!(!stdout(&o).contains("PLANTED"), "case {i} ran it");
        assert!(
            line.contains(&cache.display().to_string()) && line.contains(OTHER_USER),
            "case {i}: {line}"
        );
        let after = std::fs::symlink_metadata(&cache).unwrap();
        assert_eq!(
            (before.mode(), before.uid()),
            (after.mode(), after.uid()),
            "case {i}: changed"
        );
        unchanged(&victim_file);
    }
    let home = victim_file.0.parent().unwrap();
    for d in ["blobs", "images", "locks"] {
        assert!(!home.join(d).exists(), "{d} made behind the planted link");
    }
    drop(f.reg);
}

//! Registry faults tests/pull.rs does not cover (docs/security.md): a blob that fails its digest,
//! a manifest that is not JSON or far too big, a blob redirected to another host, a bearer token
//! that expires mid-pull. Retried or refused in one line; the cache never keeps a bad blob.

mod common;
mod support;

use std::path::Path;
use std::process::Output;

use common::{stderr, Scratch};
use support::{Action, Comp, LayerTar, Layout, Proxy, Registry};

const EXIT_BAD_IMAGE: i32 = 23;

fn pull(s: &Scratch, src: &str, out: &str, cache: &str, env: &[(&str, &str)]) -> Output {
    let mut c = common::gpurun(&["pull", src, "-o", out]);
    c.current_dir(s.path())
        .env("GPURUN_CACHEDIR", s.join(cache))
        .env("DOCKER_CONFIG", s.join("docker-config"));
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn error_line(o: &Output, code: i32) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {e}");
    let lines: Vec<&str> = e
        .lines()
        .filter(|l| l.starts_with("gpurun:") && !l.starts_with("gpurun: warning"))
        .collect();
    assert_eq!(lines.len(), 1, "one error line expected: {e}");
    lines[0].to_string()
}

/// No complete blob in the cache fails its digest.
fn cache_sound(cache: &Path) {
    let Ok(d) = std::fs::read_dir(cache.join("blobs/sha256")) else {
        return;
    };
    for e in d.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.contains('.') {
            continue;
        }
        let got = support::sha256(&std::fs::read(e.path()).unwrap());
        assert_eq!(got, format!("sha256:{n}"), "the cache holds a bad blob");
    }
}

struct Fx {
    s: Scratch,
    reg: Registry,
    layer: String,
}

fn fixture() -> Fx {
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    let mut layout = Layout::new(&s.join("layout"));
    let img = layout.image(
        "v1",
        &[
            (LayerTar::new().busybox().finish(), Comp::Gzip),
            (
                LayerTar::new()
                    .dir("etc")
                    .file("etc/marker", b"faults")
                    .finish(),
                Comp::Gzip,
            ),
        ],
        "amd64",
        None,
        serde_json::json!({}),
    );
    reg.push(&s.join("layout"), "v1", "test/f:v1", "oci");
    s.chown_all();
    let layer = img.layer_digests[0].clone();
    Fx { s, reg, layer }
}

#[test]
fn bad_digests_bad_manifests_and_redirects() {
    let Fx { s, reg, layer } = fixture();
    let proxy = Proxy::start(reg.port);
    let src = format!("docker://{}/test/f:v1", proxy.addr());

    // a blob whose bytes do not match its digest, every time: refused, not cached
    proxy.rule(&layer, Action::Corrupt, usize::MAX);
    let o = pull(&s, &src, "bad.sqsh", "c-bad", &[]);
    let line = error_line(&o, EXIT_BAD_IMAGE);
    assert!(
        line.contains(&layer[7..19]) || line.contains(&layer),
        "{line}"
    );
    assert!(!s.join("bad.sqsh").exists());
    assert!(
        !s.join("c-bad/blobs/sha256").join(&layer[7..]).exists(),
        "a blob that failed its digest is in the cache"
    );
    cache_sound(&s.join("c-bad"));
    // the same cache, the registry fine again: the pull succeeds
    proxy.clear();
    let o = pull(&s, &src, "good.sqsh", "c-bad", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    cache_sound(&s.join("c-bad"));

    // a manifest that is not JSON
    proxy.clear();
    let ct = "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n".to_string();
    proxy.rule(
        "/manifests/",
        Action::Reply(200, ct.clone(), b"<html>not a manifest</html>".to_vec()),
        usize::MAX,
    );
    let o = pull(&s, &src, "html.sqsh", "c-html", &[]);
    let line = error_line(&o, EXIT_BAD_IMAGE);
    assert!(line.contains("manifest"), "{line}");
    assert!(!s.join("html.sqsh").exists());

    // a manifest far too big (64 MiB of JSON whitespace): refused, and quickly
    proxy.clear();
    let mut huge = vec![b' '; 64 << 20];
    huge.extend_from_slice(b"{}");
    proxy.rule("/manifests/", Action::Reply(200, ct, huge), usize::MAX);
    let t0 = std::time::Instant::now();
    let o = pull(&s, &src, "huge.sqsh", "c-huge", &[]);
    let line = error_line(&o, EXIT_BAD_IMAGE);
    assert!(line.contains("manifest"), "{line}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(60));
    assert!(!s.join("huge.sqsh").exists());

    // blobs redirected to another host name (object storage): followed
    proxy.clear();
    proxy.rule(
        "/blobs/",
        Action::Redirect(format!("localhost:{}", reg.port)),
        usize::MAX,
    );
    let o = pull(&s, &src, "redirect.sqsh", "c-redirect", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        support::read_image(&s.join("redirect.sqsh"))["etc/marker"].data,
        b"faults"
    );
    assert!(
        proxy
            .requests()
            .iter()
            .filter(|r| r.contains("/blobs/"))
            .count()
            >= 3,
        "{:#?}",
        proxy.requests()
    );
    cache_sound(&s.join("c-redirect"));
}

#[test]
fn an_expired_token_is_renewed() {
    let Fx { s, reg, layer } = fixture();
    let proxy = Proxy::start_bearer(reg.port, "dGVzdGVyOnMzY3JldC1wYXNz"); // tester:s3cret-pass
    let src = format!("docker://{}/test/f:v1", proxy.addr());
    // the token is refused once, on a blob, as when it expires between manifest and layers
    let challenge = format!(
        "WWW-Authenticate: Bearer realm=\"http://{}/token\",service=\"gpurun-test\",error=\"invalid_token\"\r\n",
        proxy.addr()
    );
    proxy.rule(
        &layer,
        Action::Reply(
            401,
            challenge,
            br#"{"errors":[{"code":"UNAUTHORIZED","message":"token expired"}]}"#.to_vec(),
        ),
        1,
    );
    let o = pull(
        &s,
        &src,
        "tok.sqsh",
        "c-tok",
        &[
            ("GPURUN_DOCKER_USERNAME", "tester"),
            ("GPURUN_DOCKER_PASSWORD", "s3cret-pass"),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let tokens = proxy
        .requests()
        .iter()
        .filter(|r| r.starts_with("GET /token"))
        .count();
    assert!(
        tokens >= 2,
        "token not fetched again: {:#?}",
        proxy.requests()
    );
    cache_sound(&s.join("c-tok"));
}

#[test]
fn retry_after_is_honoured_up_to_a_minute() {
    let Fx { s, reg, layer } = fixture();
    let proxy = Proxy::start(reg.port);
    let src = format!("docker://{}/test/f:v1", proxy.addr());
    let limited = |secs: u64| {
        Action::Reply(
            429,
            format!("Retry-After: {secs}\r\n"),
            br#"{"errors":[{"code":"TOOMANYREQUESTS","message":"slow down"}]}"#.to_vec(),
        )
    };

    // The layer answers 429 asking for 3 s, twice (the GET, then the HEAD that reads the
    // header): gpurun waits the 3 s, not its 0.4 s backoff, and the pull succeeds.
    proxy.rule(&layer, limited(3), 2);
    let t0 = std::time::Instant::now();
    let o = pull(&s, &src, "wait.sqsh", "c-wait", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        t0.elapsed() >= std::time::Duration::from_secs(3),
        "{:?}",
        t0.elapsed()
    );
    let heads = proxy
        .requests()
        .iter()
        .filter(|r| r.starts_with("HEAD") && r.contains(&layer[7..]))
        .count();
    assert!(heads >= 1, "{:#?}", proxy.requests());

    // A registry asking for two hours (a pull rate limit): one line at once, saying so.
    proxy.clear();
    proxy.rule("/manifests/", limited(7200), usize::MAX);
    let t0 = std::time::Instant::now();
    let o = pull(&s, &src, "hours.sqsh", "c-hours", &[]);
    let line = error_line(&o, 22);
    assert!(
        line.contains("rate limit, it asks to wait 7200 s"),
        "{line}"
    );
    assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    assert!(!s.join("hours.sqsh").exists());
}

/// A registry behind a fault proxy with an image whose top layer holds `first` files, then
/// 8 MB that gzip makes 4 MB (parts from 1 MiB).
struct BigTop {
    s: Scratch,
    _reg: Registry,
    proxy: Proxy,
    /// The top layer's digest, the big file's content, the image's reference.
    top: String,
    big: Vec<u8>,
    src: String,
}

fn big_top_layer(first: &[(&str, &[u8])]) -> BigTop {
    let s = Scratch::new();
    let reg = Registry::start(&s.join("reg"), None);
    // 16 letters at random: about 2 to 1.
    let big: Vec<u8> = support::noise(8 << 20, 0x51f15e)
        .iter()
        .map(|b| b'a' + (b & 15))
        .collect();
    let mut layout = Layout::new(&s.join("layout"));
    let mut top = LayerTar::new();
    top.dir("data");
    for (name, data) in first {
        top.file(name, data);
    }
    let top = top.file("data/big", &big).finish();
    let img = layout.image(
        "v1",
        &[
            (LayerTar::new().busybox().finish(), Comp::Gzip),
            (top, Comp::Gzip),
        ],
        "amd64",
        None,
        serde_json::json!({}),
    );
    reg.push(&s.join("layout"), "v1", "test/g:v1", "oci");
    s.chown_all();
    let proxy = Proxy::start(reg.port);
    let src = format!("docker://{}/test/g:v1", proxy.addr());
    BigTop {
        s,
        _reg: reg,
        proxy,
        top: img.layer_digests[1].clone(),
        big,
        src,
    }
}

// Guards the reading of a layer while it downloads: the image is the registry's byte for byte,
// and a blob that fails its digest after a pause fails the pull as before (the digest's error,
// no image, no bad blob cached), on one core and in parts alike.
#[test]
fn a_layer_is_read_while_it_downloads() {
    let t = big_top_layer(&[]);
    let (s, proxy, top, big, src) = (t.s, t.proxy, t.top, t.big, t.src);
    let pause = std::time::Duration::from_millis(1500);
    for threads in ["1", "4"] {
        let env = [("GPURUN_PULL_THREADS", threads)];
        proxy.clear();
        proxy.rule(&top, Action::Pause(1 << 20, pause), usize::MAX);
        let (out, cache) = (format!("ok-{threads}.sqsh"), format!("c-ok-{threads}"));
        let o = pull(&s, &src, &out, &cache, &env);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(support::read_image(&s.join(&out))["data/big"].data == big);

        proxy.clear();
        proxy.rule(&top, Action::PauseThenCorrupt(1 << 20, pause), usize::MAX);
        let (out, cache) = (format!("bad-{threads}.sqsh"), format!("c-bad-{threads}"));
        let line = error_line(&pull(&s, &src, &out, &cache, &env), EXIT_BAD_IMAGE);
        assert!(
            line.contains("digest") && line.contains(&top[7..19]),
            "{line}"
        );
        assert!(!s.join(&out).exists());
        let cached = s.join(&cache).join("blobs/sha256").join(&top[7..]);
        assert!(
            !cached.exists(),
            "a blob that failed its digest is in the cache"
        );
        cache_sound(&s.join(&cache));
    }
}

// Attacks on a layer read while it downloads, as a registry: a download cut midway whose resume
// is answered with the whole blob again (written over the bytes being read: the image is still
// the registry's), and a blob longer than the manifest says (refused by its digest, nothing
// cached), each while the layer is being read, in parts.
#[test]
fn a_layer_read_while_it_downloads_survives_a_restart_and_refuses_extra_bytes() {
    let t = big_top_layer(&[]);
    let (s, proxy, top, big, src) = (t.s, t.proxy, t.top, t.big, t.src);
    let env = [("GPURUN_PULL_THREADS", "4")];
    proxy.rule(&top, Action::Truncate(2 << 20), 1);
    proxy.rule(&top, Action::IgnoreRange, 1);
    let o = pull(&s, &src, "restart.sqsh", "c-restart", &env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(support::read_image(&s.join("restart.sqsh"))["data/big"].data == big);
    let ranged = proxy
        .requests()
        .iter()
        .any(|r| r.contains(&top) && r.contains("range: bytes=2097152-"));
    assert!(ranged, "no resume asked for: {:#?}", proxy.requests());
    cache_sound(&s.join("c-restart"));

    proxy.clear();
    let blob = std::fs::read(s.join("layout/blobs/sha256").join(&top[7..])).unwrap();
    let longer = [&blob[..], b"and more bytes than the manifest says"].concat();
    let ct = "Content-Type: application/octet-stream\r\n".to_string();
    proxy.rule(&top, Action::Reply(200, ct, longer), usize::MAX);
    let line = error_line(&pull(&s, &src, "long.sqsh", "c-long", &env), EXIT_BAD_IMAGE);
    assert!(line.contains(&top[7..19]), "{line}");
    assert!(!s.join("long.sqsh").exists());
    assert!(!s.join("c-long/blobs/sha256").join(&top[7..]).exists());
    cache_sound(&s.join("c-long"));
}

// Attack, as a registry: the first answer tampered and cut at 2 MiB, the resume answered with
// the whole blob (its range ignored). The tampered bytes were read as they came: the pull fails
// by the digest (they are the bytes it checks), not as a layer that reads wrong, and keeps
// nothing.
#[test]
fn bytes_read_before_a_restart_are_the_ones_the_digest_checks() {
    let t = big_top_layer(&[]);
    let (s, proxy, top, src) = (t.s, t.proxy, t.top, t.src);
    let blob = std::fs::read(s.join("layout/blobs/sha256").join(&top[7..])).unwrap();
    let mut tampered = blob[..2 << 20].to_vec();
    tampered[1_500_000] ^= 0xff;
    let ct = "Content-Type: application/octet-stream\r\n".to_string();
    proxy.rule(&top, Action::Reply(200, ct, tampered), 1);
    proxy.rule(&top, Action::IgnoreRange, 1);
    let env = [("GPURUN_PULL_THREADS", "4")];
    let line = error_line(&pull(&s, &src, "t.sqsh", "c-t", &env), EXIT_BAD_IMAGE);
    assert!(
        line.contains("digest") && line.contains(&top[7..19]),
        "{line}"
    );
    assert!(!s.join("t.sqsh").exists());
    assert!(!s.join("c-t/blobs/sha256").join(&top[7..]).exists());
    cache_sound(&s.join("c-t"));
}

// Attack, as a registry that holds the rest of a layer back: a layer refused early (an entry
// twice, differing) fails the pull in seconds, not when the registry lets go.
#[test]
fn a_refused_layer_does_not_wait_for_the_rest_of_its_download() {
    let twice: &[(&str, &[u8])] = &[("data/x", b"one"), ("data/x", b"two")];
    let t = big_top_layer(twice);
    let (s, proxy, top, src) = (t.s, t.proxy, t.top, t.src);
    let held = std::time::Duration::from_secs(40);
    proxy.rule(&top, Action::Pause(1 << 20, held), 1);
    let t0 = std::time::Instant::now();
    let line = error_line(&pull(&s, &src, "r.sqsh", "c-r", &[]), EXIT_BAD_IMAGE);
    assert!(line.contains("appears twice"), "{line}");
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(25),
        "{:?}",
        t0.elapsed()
    );
    assert!(!s.join("r.sqsh").exists());
}

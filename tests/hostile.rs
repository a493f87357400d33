//! Hostile images (docs/security.md): layers that try to leave the image root, lie about their
//! sizes or are cut, pulled as the unprivileged test user from OCI layouts built here; and images
//! whose own symlinks try to steer gpurun's mounts out of the container.

mod common;
mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::{stderr, stdout, Scratch};
use support::{Comp, Layout, Node, Registry};
use tar::EntryType;

const EXIT_BAD_IMAGE: i32 = 23;

/// A layer written header by header with raw byte names: `..`, absolute, over-long and non-UTF-8
/// names go in exactly as a hostile writer puts them (GNU long-name records past 99 bytes).
struct Raw {
    b: tar::Builder<Vec<u8>>,
}

impl Raw {
    fn new() -> Raw {
        Raw {
            b: tar::Builder::new(Vec::new()),
        }
    }

    fn long(&mut self, t: EntryType, s: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(t);
        let n = b"././@LongLink";
        h.as_old_mut().name[..n.len()].copy_from_slice(n);
        h.set_mode(0o644);
        h.set_size(s.len() as u64 + 1);
        h.set_cksum();
        let mut data = s.to_vec();
        data.push(0);
        self.b.append(&h, &data[..]).unwrap();
    }

    fn put(&mut self, t: EntryType, name: &[u8], link: &[u8], mode: u32, data: &[u8]) -> &mut Self {
        if name.len() > 99 {
            self.long(EntryType::GNULongName, name);
        }
        if link.len() > 99 {
            self.long(EntryType::GNULongLink, link);
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(t);
        h.set_mode(mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_704_067_200);
        h.set_size(data.len() as u64);
        let old = h.as_old_mut();
        old.name[..name.len().min(99)].copy_from_slice(&name[..name.len().min(99)]);
        old.linkname[..link.len().min(99)].copy_from_slice(&link[..link.len().min(99)]);
        if matches!(t, EntryType::Char | EntryType::Block) {
            h.set_device_major(8).unwrap();
            h.set_device_minor(0).unwrap();
        }
        h.set_cksum();
        self.b.append(&h, data).unwrap();
        self
    }
    fn file(&mut self, name: &[u8], data: &[u8]) -> &mut Self {
        self.put(EntryType::Regular, name, b"", 0o644, data)
    }
    fn dir(&mut self, name: &[u8]) -> &mut Self {
        self.put(EntryType::Directory, name, b"", 0o755, b"")
    }
    fn sym(&mut self, name: &[u8], target: &[u8]) -> &mut Self {
        self.put(EntryType::Symlink, name, target, 0o777, b"")
    }
    fn hard(&mut self, name: &[u8], target: &[u8]) -> &mut Self {
        self.put(EntryType::Link, name, target, 0o644, b"")
    }
    fn busybox(&mut self) -> &mut Self {
        let bb = std::fs::read("/bin/busybox").expect("busybox-static");
        self.dir(b"bin")
            .put(EntryType::Regular, b"bin/busybox", b"", 0o755, &bb);
        for a in ["sh", "ls", "cat", "id"] {
            self.sym(format!("bin/{a}").as_bytes(), b"busybox");
        }
        self.dir(b"etc")
            .file(b"etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
            .file(b"etc/group", b"root:x:0:\n")
    }
    fn finish(&mut self) -> Vec<u8> {
        std::mem::replace(&mut self.b, tar::Builder::new(Vec::new()))
            .into_inner()
            .unwrap()
    }
}

fn pull(s: &Scratch, src: &str, out: &str) -> Output {
    common::gpurun(&["pull", src, "-o", out])
        .current_dir(s.path())
        .env("GPURUN_CACHEDIR", s.join("cache"))
        .output()
        .unwrap()
}

/// The one `gpurun:` error line (warnings aside), after checking the exit code.
fn error_line(o: &Output, code: i32) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {e}");
    let lines: Vec<&str> = e
        .lines()
        .filter(|l| l.starts_with("gpurun:") && !l.starts_with("gpurun: warning:"))
        .collect();
    assert_eq!(lines.len(), 1, "one error line expected: {e}");
    lines[0].to_string()
}

/// Only what a pull may leave in the scratch dir: inputs, the cache, finished images.
fn nothing_partial(s: &Scratch) {
    for e in std::fs::read_dir(s.path()).unwrap() {
        let n = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            n == "layout"
                || n == "cache"
                || n.ends_with(".sqsh") && !n.contains(".tmp") && !n.contains(".gpurun-"),
            "left behind: {n}"
        );
    }
    if let Ok(d) = std::fs::read_dir(s.join("cache/blobs/sha256")) {
        for e in d {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(!n.contains('.'), "temp blob left in the cache: {n}");
        }
    }
}

fn assert_in_root(tree: &BTreeMap<String, Node>) {
    for (p, n) in tree {
        assert!(
            !p.starts_with('/') && !p.split('/').any(|c| c == ".."),
            "{p} leaves the root"
        );
        if n.kind == 'h' {
            assert!(
                !n.link.starts_with('/') && !n.link.split('/').any(|c| c == ".."),
                "hard link {p} -> {}",
                n.link
            );
        }
    }
}

/// Names of [`hostile_layers`]: the escape to /tmp, a name of 255 bytes, a deep path.
fn hostile_names(tag: &str) -> (String, String, String) {
    let escape = format!("../../../../../../tmp/{tag}");
    let long_ok = format!("ok-{}", "x".repeat(252));
    let deep_ok = vec!["d".repeat(240); 16].join("/");
    (escape, long_ok, deep_ok)
}

/// Two layers (bottom, top) whose entries try every way out of the root; `tag` names the escape.
fn hostile_layers(tag: &str) -> [(Vec<u8>, Comp); 2] {
    let (escape, long_ok, deep_ok) = hostile_names(tag);
    let bottom = Raw::new()
        .busybox()
        .file(b"etc/hostfile", b"hostfile")
        // a symlink to a directory: data, resolved in the container's root
        .sym(b"lnk-up", b"/etc")
        .sym(b"abs-link", b"/etc/shadow")
        .sym(b"chain1", b"chain2")
        .sym(b"chain2", b"../../../../../")
        .sym(b"loop1", b"loop2")
        .sym(b"loop2", b"loop1")
        .dir(b"dev")
        .put(EntryType::Char, b"dev/evil-char", b"", 0o666, b"")
        .put(EntryType::Block, b"dev/evil-block", b"", 0o666, b"")
        .put(EntryType::Regular, b"bin/suid", b"", 0o4755, b"x")
        .put(EntryType::Regular, b"bin/sgid", b"", 0o2755, b"x")
        // the same entry twice (a harmless repeat; a differing one is refused below)
        .file(b"dup", b"same")
        .file(b"dup", b"same")
        .file(b"gone", b"g")
        .dir(b"opqdir")
        .file(b"opqdir/old", b"old")
        .file(b"caf\xe9", b"latin-1 name")
        .finish();
    let top = Raw::new()
        .file(escape.as_bytes(), b"escape")
        .file(b"/abs/file", b"abs")
        .hard(b"hl-out", b"../../../etc/hostfile")
        .hard(b"hl-abs", b"/etc/passwd")
        .hard(b"hl-missing", b"../nothere")
        .hard(b"hl-loop-a", b"hl-loop-b")
        .hard(b"hl-loop-b", b"hl-loop-a")
        .hard(b"hl-self", b"hl-self")
        .file(b"../../../.wh.gone", b"")
        .file(b"/../opqdir/.wh..wh..opq", b"")
        .file(b"lnk-up/.wh.shadow", b"")
        .file(long_ok.as_bytes(), b"long")
        .file(format!("{deep_ok}/f").as_bytes(), b"deep")
        .finish();
    [(bottom, Comp::Gzip), (top, Comp::Zstd)]
}

#[test]
fn hostile_layers_stay_in_the_root() {
    let s = Scratch::new();
    let tag = format!("gpurun-hostile-{}", std::process::id());
    let (escape, long_ok, deep_ok) = hostile_names(&tag);
    let mut layout = Layout::new(&s.join("layout"));
    layout.image(
        "hostile",
        &hostile_layers(&tag),
        "amd64",
        None,
        serde_json::json!({}),
    );
    s.chown_all();
    let src = format!("oci:{}:hostile", s.join("layout").display());
    let o = pull(&s, &src, "hostile.sqsh");
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("entry '{escape}' points outside the image root")),
        "{err}"
    );
    assert!(err.contains("2 device nodes dropped"), "{err}");
    assert!(
        err.contains("setuid/setgid bits cleared on 2 files"),
        "{err}"
    );

    // read_image panics on a device node: none may be in the image
    let t = support::read_image(&s.join("hostile.sqsh"));
    assert_in_root(&t);
    let data = |p: &str| {
        String::from_utf8_lossy(&t.get(p).unwrap_or_else(|| panic!("{p} missing")).data)
            .into_owned()
    };
    assert_eq!(data(&format!("tmp/{tag}")), "escape");
    assert_eq!(data("abs/file"), "abs");
    // symlinks stay data (writes through them: layers_writing_through_symlinks_are_refused)
    for (p, target) in [
        ("lnk-up", "/etc"),
        ("abs-link", "/etc/shadow"),
        ("chain2", "../../../../../"),
        ("loop1", "loop2"),
    ] {
        assert_eq!((t[p].kind, t[p].link.as_str()), ('l', target), "{p}");
    }
    for p in ["bin/suid", "bin/sgid"] {
        assert_eq!(t[p].mode & 0o6000, 0, "{p}");
    }
    assert_eq!(data("dup"), "same");
    assert!(!t.contains_key("gone") && !t.contains_key("opqdir/old"));
    assert_eq!(data("caf\u{fffd}"), "latin-1 name");
    assert_eq!(t["hl-out"].kind, 'h');
    assert!(t["hl-out"].link.ends_with("etc/hostfile"));
    assert!(t["hl-abs"].link.ends_with("etc/passwd"));
    for p in ["hl-missing", "hl-loop-a", "hl-loop-b", "hl-self"] {
        assert!(!t.contains_key(p), "{p}");
    }
    assert_eq!(data(&long_ok), "long");
    assert_eq!(data(&format!("{deep_ok}/f")), "deep");
    // and nothing on the host
    for p in [
        format!("/tmp/{tag}"),
        "/etc/evil".into(),
        "/abs".into(),
        "/tmp/evil".into(),
    ] {
        assert!(!Path::new(&p).exists(), "{p} written on the host");
    }
    nothing_partial(&s);

    // gpurun itself runs it: the hostile paths resolve inside
    let o = common::gpurun(&[
        "exec",
        s.join("hostile.sqsh").to_str().unwrap(),
        "cat",
        "/lnk-up/hostfile",
        "/abs/file",
    ])
    .output()
    .unwrap();
    assert_eq!(stdout(&o), "hostfileabs", "{}", stderr(&o));
}

/// What a container shows of the hostile entries: kind, mode, links, time; a link's target; a
/// file's size and content (a directory's size and link count are its file system's own); and
/// whether the image can be written.
fn show_hostile(tag: &str) -> String {
    let (_, long_ok, deep_ok) = hostile_names(tag);
    format!(
        "cd / && for f in etc/hostfile abs/file lnk-up abs-link chain1 chain2 loop1 loop2 \
         bin/suid bin/sgid dup gone opqdir opqdir/old caf\u{fffd} hl-out hl-abs hl-missing \
         hl-loop-a hl-loop-b hl-self {long_ok} {deep_ok}/f; do \
         if [ -L \"$f\" ]; then busybox stat -c '%n %A %h %Y' \"$f\"; busybox readlink \"$f\"; \
         elif [ -d \"$f\" ]; then busybox stat -c '%n %A %Y' \"$f\"; \
         elif [ -e \"$f\" ]; then busybox stat -c '%n %A %h %s %Y' \"$f\"; busybox md5sum \"$f\"; \
         else echo \"$f absent\"; fi; done; \
         if echo x 2>/dev/null > /bin/written; then echo writable; else echo read-only; fi"
    )
}

/// `exec docker://` of the hostile layers, pulled by its first start and unpacked into a tree
/// to start from: nothing lands outside the tree, and the container sees what the .sqsh shows
/// at the next start.
#[test]
fn first_start_of_hostile_layers_stays_in_its_tree() {
    let s = Scratch::new();
    let tag = format!("gpurun-hostile-first-{}", std::process::id());
    let reg = Registry::start(&s.join("reg"), None);
    // A directory of the victim's, named by an absolute entry that would open it to all.
    let victim = s.join("victim");
    std::fs::create_dir(&victim).unwrap();
    let named = victim.to_str().unwrap().as_bytes();
    let above = Raw::new()
        .put(EntryType::Directory, named, b"", 0o777, b"")
        .file(&[named, b"/planted"].concat(), b"x")
        .finish();
    let [bottom, top] = hostile_layers(&tag);
    let mut layout = Layout::new(&s.join("layout"));
    let layers = [bottom, top, (above, Comp::Gzip)];
    layout.image("hostile", &layers, "amd64", None, serde_json::json!({}));
    reg.push(&s.join("layout"), "hostile", "test/hostile:1", "oci");
    s.chown_all();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o700)).unwrap();
    let src = format!("docker://{}/test/hostile:1", reg.addr());
    let show = show_hostile(&tag);
    let run = || {
        common::gpurun(&["exec", "--contain", &src, "sh", "-c", &show])
            .current_dir(s.path())
            .env("GPURUN_CACHEDIR", s.join("cache"))
            .env("DOCKER_CONFIG", s.join("docker-config"))
            .output()
            .unwrap()
    };
    let (first, second) = common::first_and_second_start(run);
    for p in [format!("/tmp/{tag}"), "/abs".into(), "/etc/hostfile".into()] {
        assert!(!Path::new(&p).exists(), "{p} written on the host");
    }
    assert!(!victim.join("planted").exists());
    let mode = std::fs::metadata(&victim).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "the victim's directory was changed");
    assert!(stdout(&first).contains("abs/file "), "{}", stdout(&first));
    assert!(
        stdout(&first).contains("hl-missing absent"),
        "{}",
        stdout(&first)
    );
    assert!(
        stdout(&first).ends_with("read-only\n"),
        "{}",
        stdout(&first)
    );
    assert_eq!(stdout(&first), stdout(&second));
    let left: Vec<String> = std::fs::read_dir(s.join("cache/images"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.len() == 1 && left[0].ends_with(".sqsh"), "{left:?}");
}

/// A registry image whose `/etc/group` is a symlink to a FIFO another user made on the host
/// (and to a file of the image's inside it): the first start reads its tree as the container
/// would, inside it, so it neither opens the FIFO (which would wait for a writer for ever) nor
/// takes any host file for the image's; the container's group file is the one the .sqsh gives.
#[test]
fn first_start_reads_its_tree_not_the_host() {
    let s = Scratch::new();
    let fifo = format!("/var/tmp/gpurun-first-fifo-{}", std::process::id());
    let _ = std::fs::remove_file(&fifo);
    let made = common::as_named("gpurunother", "mkfifo")
        .args(["-m", "0666", &fifo])
        .status()
        .unwrap();
    assert!(made.success());
    let reg = Registry::start(&s.join("reg"), None);
    let bottom = Raw::new().busybox().finish();
    let top = Raw::new()
        .sym(b"etc/group", fifo.as_bytes())
        .dir(b"var")
        .dir(b"var/tmp")
        .file(&fifo.as_bytes()[1..], b"root:x:0:\nimagegroup:x:4242:\n")
        .finish();
    let mut layout = Layout::new(&s.join("layout"));
    layout.image(
        "fifo",
        &[(bottom, Comp::Gzip), (top, Comp::Gzip)],
        "amd64",
        None,
        serde_json::json!({}),
    );
    reg.push(&s.join("layout"), "fifo", "test/fifo:1", "oci");
    s.chown_all();
    let src = format!("docker://{}/test/fifo:1", reg.addr());
    let run = || {
        let mut c = common::gpurun(&["exec", &src, "busybox", "grep", "imagegroup", "/etc/group"]);
        c.current_dir(s.path())
            .env("GPURUN_CACHEDIR", s.join("cache"))
            .env("DOCKER_CONFIG", s.join("docker-config"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        let t0 = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if t0.elapsed() > Duration::from_secs(90) {
                let _ = child.kill();
                let o = child.wait_with_output().unwrap();
                let _ = std::fs::remove_file(&fifo);
                panic!("the start hangs on the host's FIFO: {}", stderr(&o));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        child.wait_with_output().unwrap()
    };
    let (first, second) = common::first_and_second_start(run);
    let _ = std::fs::remove_file(&fifo);
    assert_eq!(stdout(&first), "imagegroup:x:4242:\n", "{}", stderr(&first));
    assert_eq!(stdout(&first), stdout(&second));
}

fn gz(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn zstd_checked(b: &[u8]) -> Vec<u8> {
    let mut e = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
    e.include_checksum(true).unwrap();
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

/// Flip bytes in the middle of a compressed stream (past its header).
fn corrupt(mut b: Vec<u8>) -> Vec<u8> {
    let mid = b.len() / 2;
    for x in &mut b[mid..mid + 64] {
        *x ^= 0x5a;
    }
    b
}

#[test]
fn broken_layers_are_refused_naming_layer_and_entry() {
    let s = Scratch::new();
    let base = Raw::new().busybox().finish();
    let mut lie = Raw::new().file(b"liar", b"0123456789").finish();
    let mut h = tar::Header::from_byte_slice(&lie[..512]).clone();
    h.set_size(1 << 30);
    h.set_cksum();
    lie[..512].copy_from_slice(h.as_bytes());
    // a tar bomb's header: 2^62 bytes declared (GNU base-256 size field), a few present
    let mut bomb = Raw::new().file(b"bomb", b"tiny").finish();
    let mut h = tar::Header::from_byte_slice(&bomb[..512]).clone();
    h.set_size(1 << 62);
    h.set_cksum();
    bomb[..512].copy_from_slice(h.as_bytes());
    let long_name = "n".repeat(256);
    let deep = vec!["d".repeat(250); 17].join("/");
    let cases: Vec<(&str, Vec<u8>, Option<&str>, &str)> = vec![
        // A cut stream ends inside an entry; corrupt data breaks the stream or the next header.
        (
            "gz-cut",
            gz(&base)[..20_000].to_vec(),
            Some("bin/busybox"),
            "but the layer ends first",
        ),
        (
            "gz-corrupt",
            corrupt(gz(&base)),
            None,
            "the blob may be corrupt, pull again",
        ),
        (
            "zst-cut",
            zstd::encode_all(&base[..], 3).unwrap()[..20_000].to_vec(),
            None,
            "the blob may be corrupt, pull again",
        ),
        (
            "zst-corrupt",
            // with a content checksum, as the zstd CLI and Go's encoder write by default
            corrupt(zstd_checked(&base)),
            None,
            "the blob may be corrupt, pull again",
        ),
        (
            "size-lie",
            lie,
            Some("liar"),
            "declares 1073741824 bytes but the layer ends first",
        ),
        (
            "bomb",
            bomb,
            Some("bomb"),
            "declares 4611686018427387904 bytes",
        ),
        (
            "not-tar",
            (0..8192u32).map(|i| (i * 7919 % 251) as u8).collect(),
            None,
            "cannot read it",
        ),
        (
            "long-name",
            Raw::new().file(long_name.as_bytes(), b"x").finish(),
            Some("nnnnnnnn"),
            "256 bytes long, more than 255",
        ),
        (
            "deep-path",
            Raw::new().file(deep.as_bytes(), b"x").finish(),
            Some("dddddddd"),
            "more than 4095",
        ),
        (
            "dup-differs",
            Raw::new()
                .file(b"dup", b"first")
                .file(b"dup", b"second")
                .finish(),
            Some("dup"),
            "appears twice in this layer and the second differs",
        ),
        (
            "long-symlink",
            Raw::new().sym(b"l", "t/".repeat(2100).as_bytes()).finish(),
            Some("'l'"),
            "its symlink target",
        ),
    ];
    let mut layout = Layout::new(&s.join("layout"));
    let mut digests = Vec::new();
    for (tag, bad, _, _) in &cases {
        let img = layout.image(
            tag,
            &[
                (Raw::new().busybox().finish(), Comp::Gzip),
                (bad.clone(), Comp::None),
            ],
            "amd64",
            None,
            serde_json::json!({}),
        );
        digests.push(img.layer_digests[1].clone());
    }
    s.chown_all();
    for ((tag, _, entry, why), digest) in cases.iter().zip(&digests) {
        let t0 = Instant::now();
        let line = refused(&s, tag, digest);
        assert!(line.contains(why), "{tag}: {line}");
        if let Some(e) = entry {
            assert!(
                line.contains(&format!("entry '{}", e.trim_matches('\''))),
                "{tag}: {line}"
            );
        }
        assert!(line.len() < 400, "{tag}: the line stays short: {line}");
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{tag} took {:?}",
            t0.elapsed()
        );
        nothing_partial(&s);
    }
}

/// Pull `oci:layout:TAG` into TAG.sqsh: it must fail with exit 23 and one line naming the layer
/// `digest`, and leave no image; returns the line.
fn refused(s: &Scratch, tag: &str, digest: &str) -> String {
    let out = format!("{tag}.sqsh");
    let o = pull(
        s,
        &format!("oci:{}:{tag}", s.join("layout").display()),
        &out,
    );
    let line = error_line(&o, EXIT_BAD_IMAGE);
    assert!(line.contains(&format!("layer {digest}")), "{tag}: {line}");
    assert!(!s.join(&out).exists(), "{tag}: partial image");
    line
}

#[test]
fn docker_archive_metadata_is_bounded() {
    // A "docker save" archive with 20,000 small members and a 17 MiB manifest.json: refused
    // with one line, quickly, nothing written.
    let s = Scratch::new();
    std::fs::create_dir(s.join("layout")).unwrap();
    let path = s.join("layout/bomb.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&path).unwrap());
    let mut add = |name: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, data).unwrap();
    };
    for i in 0..20_000 {
        add(&format!("junk/{i}"), b"x");
    }
    let mut manifest = vec![b' '; 17 << 20];
    manifest.extend_from_slice(b"[]");
    add("manifest.json", &manifest);
    b.finish().unwrap();
    drop(b);
    s.chown_all();
    let t0 = Instant::now();
    let o = pull(
        &s,
        &format!("docker-archive:{}", path.display()),
        "bomb.sqsh",
    );
    let line = error_line(&o, EXIT_BAD_IMAGE);
    assert!(
        line.contains("manifest.json") && line.contains("too big"),
        "{line}"
    );
    assert!(t0.elapsed() < Duration::from_secs(60));
    assert!(!s.join("bomb.sqsh").exists());
    nothing_partial(&s);
}

/// umoci and podman write the root as an entry of its own ("/", "./"): it is no escape, and a
/// pull of such layers warns of nothing.
#[test]
fn a_root_entry_passes_silently() {
    let s = Scratch::new();
    let bottom = Raw::new().dir(b"/").busybox().finish();
    let top = Raw::new().dir(b"./").file(b"./etc/motd", b"hi").finish();
    let mut layout = Layout::new(&s.join("layout"));
    layout.image(
        "rooted",
        &[(bottom, Comp::Gzip), (top, Comp::Gzip)],
        "amd64",
        None,
        serde_json::json!({}),
    );
    s.chown_all();
    let src = format!("oci:{}:rooted", s.join("layout").display());
    let o = pull(&s, &src, "rooted.sqsh");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("gpurun: warning"), "{}", stderr(&o));
    let t = support::read_image(&s.join("rooted.sqsh"));
    assert_eq!(String::from_utf8_lossy(&t["etc/motd"].data), "hi");
}

#[test]
fn layers_writing_through_symlinks_are_refused() {
    // Docker would write these through the symlink (inside the root); a top-down merge meets
    // the symlink after what lies below it, so gpurun refuses them, naming layer and entry.
    let s = Scratch::new();
    let lower = Raw::new().busybox().sym(b"lnk", b"/etc").finish();
    let upper = Raw::new().file(b"lnk/evil", b"x").finish();
    let same = Raw::new()
        .sym(b"sd", b"../../tmp")
        .file(b"sd/evil", b"x")
        .finish();
    let mut layout = Layout::new(&s.join("layout"));
    let json = serde_json::json!({});
    let cross = layout.image(
        "cross",
        &[(lower, Comp::Gzip), (upper, Comp::Gzip)],
        "amd64",
        None,
        json.clone(),
    );
    let own = layout.image(
        "same",
        &[
            (Raw::new().busybox().finish(), Comp::Gzip),
            (same, Comp::Zstd),
        ],
        "amd64",
        None,
        json,
    );
    s.chown_all();
    for (tag, digest, entry, why) in [
        (
            "cross",
            &cross.layer_digests[0],
            "lnk",
            "a layer above writes 'lnk/evil'",
        ),
        (
            "same",
            &own.layer_digests[1],
            "sd/evil",
            "below 'sd', a symlink or file",
        ),
    ] {
        let line = refused(&s, tag, digest);
        assert!(line.contains(&format!("entry '{entry}'")), "{tag}: {line}");
        assert!(line.contains(why), "{tag}: {line}");
    }
    assert!(!Path::new("/etc/evil").exists() && !Path::new("/tmp/evil").exists());
    nothing_partial(&s);
}

/// An image config with a hundred thousand Env entries starts at the cost of any other (its
/// environment is composed in linear time): under a 10 s CPU limit that the quadratic
/// composition of 100k entries (about 20 s) overran. One over 4 MiB is refused at pull.
#[test]
fn huge_image_configs_are_bounded() {
    let s = Scratch::new();
    let mut l = Layout::new(&s.join("layout"));
    let busybox = support::LayerTar::new().busybox().finish();
    let env: Vec<String> = (0..100_000).map(|i| format!("V{i}={i}")).collect();
    let config = serde_json::json!({"Env": env, "Cmd": ["sh", "-c", "echo $V99999"]});
    l.image(
        "many",
        &[(busybox.clone(), Comp::Gzip)],
        "amd64",
        None,
        config,
    );
    let huge = serde_json::json!({"Labels": {"pad": "x".repeat(5 << 20)}});
    l.image("huge", &[(busybox, Comp::Gzip)], "amd64", None, huge);
    s.chown_all();
    let o = pull(&s, "oci:layout:many", "many.sqsh");
    assert!(o.status.success(), "{}", stderr(&o));
    let o = common::as_user("prlimit")
        .arg("--cpu=10")
        .arg(common::gpurun_bin())
        .args(["run", s.join("many.sqsh").to_str().unwrap()])
        .env("GPURUN_CACHEDIR", s.join("cache"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}: {}", o.status, stderr(&o));
    assert_eq!(stdout(&o).trim(), "99999");
    let o = pull(&s, "oci:layout:huge", "huge.sqsh");
    let line = error_line(&o, EXIT_BAD_IMAGE);
    assert!(line.contains("config") && line.contains("limit"), "{line}");
    assert!(!s.join("huge.sqsh").exists());
    nothing_partial(&s);
}

/// A first start of a layer that writes through its own symlink (refused, as by `pull`): the
/// link already unpacked into the tree is never written through, and nothing is left.
#[test]
fn a_first_start_never_writes_through_an_unpacked_link() {
    let s = Scratch::new();
    let victim = s.join("victim");
    std::fs::create_dir(&victim).unwrap();
    let reg = Registry::start(&s.join("reg"), None);
    let bottom = Raw::new().busybox().finish();
    let top = Raw::new()
        .sym(b"d", victim.to_str().unwrap().as_bytes())
        .file(b"d/planted", b"x")
        .finish();
    let mut layout = Layout::new(&s.join("layout"));
    let layers = [(bottom, Comp::Gzip), (top, Comp::Gzip)];
    layout.image("through", &layers, "amd64", None, serde_json::json!({}));
    reg.push(&s.join("layout"), "through", "test/through:1", "oci");
    s.chown_all();
    let src = format!("docker://{}/test/through:1", reg.addr());
    let o = common::gpurun(&["exec", &src, "true"])
        .current_dir(s.path())
        .env("GPURUN_CACHEDIR", s.join("cache"))
        .env("DOCKER_CONFIG", s.join("docker-config"))
        .output()
        .unwrap();
    let line = error_line(&o, EXIT_BAD_IMAGE);
    assert!(line.contains("'d/planted' is refused"), "{line}");
    assert!(!victim.join("planted").exists(), "written through the link");
    let left = std::fs::read_dir(s.join("cache/images")).unwrap().count();
    assert_eq!(left, 0, "the tree or its staging was left");
}

/// A pull killed (SIGKILL) once its first start's tree was unpacked leaves a staging directory
/// holding the image's read-only directories: the next pull from this host removes it whole.
#[test]
fn a_killed_pulls_read_only_tree_is_removed_by_the_next_pull() {
    let s = Scratch::new();
    let layer = Raw::new()
        .busybox()
        .put(EntryType::Directory, b"ro", b"", 0o555, b"")
        .file(b"ro/file", b"x")
        .finish();
    let mut layout = Layout::new(&s.join("layout"));
    layout.image(
        "ro",
        &[(layer, Comp::Gzip)],
        "amd64",
        None,
        serde_json::json!({}),
    );
    // The pid is above any pid_max: the pull that made it is gone.
    let host = nix::unistd::gethostname().unwrap();
    let name = format!(".ro.sqsh.gpurun-{}-4194305-x", host.to_string_lossy());
    let ro = s.join(&name).join("rootfs/ro");
    std::fs::create_dir_all(&ro).unwrap();
    std::fs::write(ro.join("file"), "x").unwrap();
    s.chown_all();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let src = format!("oci:{}:ro", s.join("layout").display());
    let o = pull(&s, &src, "ro.sqsh");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!s.join(&name).exists(), "the stale staging was left");
    nothing_partial(&s);
}

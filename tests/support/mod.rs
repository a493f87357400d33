//! Test harness for `gpurun pull`: a real `docker-registry` on loopback, OCI layouts written
//! here (layers as tar files built in memory, so owners, devices and xattrs need no root), pushes
//! with skopeo, and a fault-injecting HTTP proxy.
#![allow(dead_code)] // each test uses a different subset

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// ---------------------------------------------------------------- registry

/// A `docker-registry serve` process (distribution 2.8), plain http on 127.0.0.1, killed on drop.
pub struct Registry {
    child: Child,
    pub port: u16,
    pub creds: Option<(String, String)>,
}

impl Registry {
    pub fn start(dir: &Path, creds: Option<(&str, &str)>) -> Registry {
        std::fs::create_dir_all(dir.join("storage")).unwrap();
        let port = free_port();
        let mut cfg = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  maintenance:\n    uploadpurging:\n      enabled: false\n\
             http:\n  addr: 127.0.0.1:{port}\n  secret: gpurun-test-only\n",
            dir.join("storage").display()
        );
        if let Some((u, p)) = creds {
            let out = Command::new("htpasswd")
                .args(["-Bbn", u, p])
                .output()
                .expect("htpasswd (apt-get install apache2-utils)");
            assert!(out.status.success());
            std::fs::write(dir.join("htpasswd"), &out.stdout).unwrap();
            cfg.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: gpurun-test\n    path: {}\n",
                dir.join("htpasswd").display()
            ));
        }
        std::fs::write(dir.join("config.yml"), cfg).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("log")).unwrap())
            .spawn()
            .expect("docker-registry (apt-get install docker-registry)");
        let reg = Registry {
            child,
            port,
            creds: creds.map(|(u, p)| (u.to_string(), p.to_string())),
        };
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "registry did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        reg
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `skopeo copy oci:LAYOUT:TAG docker://ADDR/DEST` (format "oci", "v2s2", or "all" for an index).
    pub fn push(&self, layout: &Path, tag: &str, dest: &str, format: &str) {
        let mut c = Command::new("skopeo");
        c.args([
            "--insecure-policy",
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
        ]);
        match format {
            "all" => {
                c.arg("--all");
            }
            f => {
                c.args(["--format", f]);
            }
        }
        if let Some((u, p)) = &self.creds {
            c.arg("--dest-creds").arg(format!("{u}:{p}"));
        }
        c.arg(format!("oci:{}:{tag}", layout.display()))
            .arg(format!("docker://{}/{dest}", self.addr()));
        let o = c.output().expect("skopeo (apt-get install skopeo)");
        assert!(
            o.status.success(),
            "skopeo push {tag} -> {dest}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------- layers

/// A layer tar built entry by entry, with raw names (hostile layers write `..`).
pub struct LayerTar {
    b: tar::Builder<Vec<u8>>,
}

fn base_header(t: tar::EntryType, name: &str, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(t);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_704_067_200);
    h.set_size(size);
    assert!(name.len() < 100);
    let n = &mut h.as_old_mut().name;
    n[..name.len()].copy_from_slice(name.as_bytes());
    h
}

impl Default for LayerTar {
    fn default() -> Self {
        LayerTar {
            b: tar::Builder::new(Vec::new()),
        }
    }
}

impl LayerTar {
    pub fn new() -> LayerTar {
        LayerTar::default()
    }
    fn add(&mut self, mut h: tar::Header, data: &[u8]) -> &mut Self {
        h.set_cksum();
        self.b.append(&h, data).unwrap();
        self
    }
    pub fn dir(&mut self, name: &str) -> &mut Self {
        self.add(base_header(tar::EntryType::Directory, name, 0o755, 0), b"")
    }
    pub fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
        self.file_mode(name, data, 0o644)
    }
    pub fn file_mode(&mut self, name: &str, data: &[u8], mode: u32) -> &mut Self {
        self.add(
            base_header(tar::EntryType::Regular, name, mode, data.len() as u64),
            data,
        )
    }
    pub fn owned(&mut self, name: &str, data: &[u8], uid: u64, gid: u64) -> &mut Self {
        let mut h = base_header(tar::EntryType::Regular, name, 0o600, data.len() as u64);
        h.set_uid(uid);
        h.set_gid(gid);
        self.add(h, data)
    }
    pub fn symlink(&mut self, name: &str, target: &str) -> &mut Self {
        let mut h = base_header(tar::EntryType::Symlink, name, 0o777, 0);
        h.set_link_name(target).unwrap();
        self.add(h, b"")
    }
    pub fn hardlink(&mut self, name: &str, target: &str) -> &mut Self {
        let mut h = base_header(tar::EntryType::Link, name, 0o644, 0);
        h.set_link_name(target).unwrap();
        self.add(h, b"")
    }
    pub fn chardev(&mut self, name: &str) -> &mut Self {
        let mut h = base_header(tar::EntryType::Char, name, 0o666, 0);
        h.set_device_major(1).unwrap();
        h.set_device_minor(3).unwrap();
        self.add(h, b"")
    }
    /// A file with `user.NAME=VALUE` xattrs in a PAX header, as GNU tar --xattrs writes them.
    pub fn file_xattr(&mut self, name: &str, data: &[u8], xattrs: &[(&str, &str)]) -> &mut Self {
        let mut pax = Vec::new();
        for (k, v) in xattrs {
            // "LEN KEY=VALUE\n", where LEN counts its own digits.
            let body = format!(" SCHILY.xattr.{k}={v}\n");
            let mut len = body.len() + 1;
            while format!("{len}{body}").len() != len {
                len = format!("{len}{body}").len();
            }
            pax.extend_from_slice(format!("{len}{body}").as_bytes());
        }
        let h = base_header(
            tar::EntryType::XHeader,
            "PaxHeaders/x",
            0o644,
            pax.len() as u64,
        );
        self.add(h, &pax);
        self.file(name, data)
    }
    /// busybox-static as /bin/busybox with a few applet links and /etc basics.
    pub fn busybox(&mut self) -> &mut Self {
        let bb = std::fs::read("/bin/busybox").expect("busybox-static");
        self.dir("bin").file_mode("bin/busybox", &bb, 0o755);
        for a in ["sh", "ls", "cat", "echo"] {
            self.symlink(&format!("bin/{a}"), "busybox");
        }
        self.dir("etc")
            .file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
            .file("etc/group", b"root:x:0:\n")
    }
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::replace(&mut self.b, tar::Builder::new(Vec::new()))
            .into_inner()
            .unwrap()
    }
}

// ---------------------------------------------------------------- OCI layout

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Comp {
    Gzip,
    Zstd,
    /// zstd in frames of 256 KiB and a skippable frame last, the shape of podman's and buildah's
    /// zstd:chunked (a frame a file, the table of contents in a skippable frame).
    ZstdFrames,
    None,
}

/// `tar` as [`Comp::ZstdFrames`].
fn zstd_frames(tar: &[u8]) -> Vec<u8> {
    let mut blob: Vec<u8> = tar
        .chunks(256 << 10)
        .flat_map(|c| zstd::bulk::compress(c, 3).unwrap())
        .collect();
    let toc = b"table of contents";
    blob.extend_from_slice(&0x184D_2A50u32.to_le_bytes());
    blob.extend_from_slice(&(toc.len() as u32).to_le_bytes());
    blob.extend_from_slice(toc);
    blob
}

/// Every gzip layer of every test image, and every zstd one of many frames, inflates as a pull's
/// parallel path reads it (by position, on several cores) to the very tar it was made from.
fn inflates_on_many_cores(blob: &[u8], tar: &[u8]) {
    use gpurun::image::inflate::{inflate_span, Span};
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(blob).unwrap();
    let span = Span {
        file,
        start: 0,
        len: blob.len() as u64,
        check: None,
        arrival: None,
    };
    let mut s = inflate_span(span, 4, &|_| {}).unwrap();
    let mut out = Vec::new();
    let read = s.reader.read_to_end(&mut out).map(drop);
    s.finish(read, |e| e).unwrap();
    assert!(
        out == tar,
        "a layer inflated on many cores differs from its tar"
    );
}

pub fn sha256(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

/// An OCI image layout directory written here (the format skopeo reads with `oci:`).
pub struct Layout {
    pub dir: PathBuf,
    tags: Vec<serde_json::Value>,
}

pub struct BuiltImage {
    pub manifest: serde_json::Value,
    pub digest: String,
    pub layer_digests: Vec<String>,
}

impl Layout {
    pub fn new(dir: &Path) -> Layout {
        std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
        std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        let l = Layout {
            dir: dir.to_path_buf(),
            tags: Vec::new(),
        };
        l.save();
        l
    }

    pub fn put(&self, bytes: &[u8]) -> (String, usize) {
        let d = sha256(bytes);
        std::fs::write(self.dir.join("blobs/sha256").join(&d[7..]), bytes).unwrap();
        (d, bytes.len())
    }

    /// Config + manifest for `layers` (bottom first); tagged `tag` in index.json.
    pub fn image(
        &mut self,
        tag: &str,
        layers: &[(Vec<u8>, Comp)],
        arch: &str,
        variant: Option<&str>,
        config: serde_json::Value,
    ) -> BuiltImage {
        let mut descs = Vec::new();
        let mut diff_ids = Vec::new();
        let mut layer_digests = Vec::new();
        for (tar, comp) in layers {
            diff_ids.push(sha256(tar));
            let (blob, mt) = match comp {
                Comp::Gzip => {
                    let mut e =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    e.write_all(tar).unwrap();
                    let blob = e.finish().unwrap();
                    inflates_on_many_cores(&blob, tar);
                    (blob, "application/vnd.oci.image.layer.v1.tar+gzip")
                }
                Comp::Zstd => (
                    zstd::encode_all(&tar[..], 3).unwrap(),
                    "application/vnd.oci.image.layer.v1.tar+zstd",
                ),
                Comp::ZstdFrames => {
                    let blob = zstd_frames(tar);
                    inflates_on_many_cores(&blob, tar);
                    (blob, "application/vnd.oci.image.layer.v1.tar+zstd")
                }
                Comp::None => (tar.clone(), "application/vnd.oci.image.layer.v1.tar"),
            };
            let (d, size) = self.put(&blob);
            layer_digests.push(d.clone());
            descs.push(serde_json::json!({"mediaType": mt, "digest": d, "size": size}));
        }
        let mut cfg = serde_json::json!({
            "created": "2024-01-01T00:00:00Z",
            "architecture": arch,
            "os": "linux",
            "config": config,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        });
        if let Some(v) = variant {
            cfg["variant"] = v.into();
        }
        let (cd, cs) = self.put(&serde_json::to_vec(&cfg).unwrap());
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
            "layers": descs,
        });
        let bytes = serde_json::to_vec(&manifest).unwrap();
        let (md, ms) = self.put(&bytes);
        let mut platform = serde_json::json!({"architecture": arch, "os": "linux"});
        if let Some(v) = variant {
            platform["variant"] = v.into();
        }
        self.tag(
            tag,
            serde_json::json!({"mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": md, "size": ms, "platform": platform}),
        );
        BuiltImage {
            manifest,
            digest: md,
            layer_digests,
        }
    }

    /// An image index over already tagged images.
    pub fn index(&mut self, tag: &str, of: &[&str]) {
        let ms: Vec<serde_json::Value> = of
            .iter()
            .map(|t| {
                let mut d = self.tagged(t).clone();
                d.as_object_mut().unwrap().remove("annotations");
                d
            })
            .collect();
        let idx = serde_json::json!({"schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": ms});
        let (d, s) = self.put(&serde_json::to_vec(&idx).unwrap());
        self.tag(
            tag,
            serde_json::json!({"mediaType": "application/vnd.oci.image.index.v1+json", "digest": d, "size": s}),
        );
    }

    fn tagged(&self, tag: &str) -> &serde_json::Value {
        self.tags
            .iter()
            .find(|d| d["annotations"]["org.opencontainers.image.ref.name"] == tag)
            .unwrap()
    }

    fn tag(&mut self, tag: &str, mut desc: serde_json::Value) {
        desc["annotations"] = serde_json::json!({"org.opencontainers.image.ref.name": tag});
        self.tags
            .retain(|d| d["annotations"]["org.opencontainers.image.ref.name"] != tag);
        self.tags.push(desc);
        self.save();
    }

    fn save(&self) {
        let idx = serde_json::json!({"schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": self.tags});
        std::fs::write(
            self.dir.join("index.json"),
            serde_json::to_vec(&idx).unwrap(),
        )
        .unwrap();
    }
}

// ---------------------------------------------------------------- reading results

/// One entry of a squashfs image, as `sqfs2tar` streams it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub kind: char, // f d l h p
    pub mode: u32,
    pub uid: u64,
    pub data: Vec<u8>,
    pub link: String,
    pub xattrs: Vec<(String, Vec<u8>)>,
}

/// Every path in IMG → its node (hard links as kind 'h' with their target).
pub fn read_image(img: &Path) -> std::collections::BTreeMap<String, Node> {
    let out = Command::new("sqfs2tar")
        .arg("--no-skip")
        .arg(img)
        .output()
        .expect("sqfs2tar (apt-get install squashfs-tools-ng)");
    assert!(
        out.status.success(),
        "sqfs2tar: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ar = tar::Archive::new(&out.stdout[..]);
    let mut map = std::collections::BTreeMap::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let path = e
            .path()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches('/')
            .to_string();
        let mut xattrs = Vec::new();
        if let Some(exts) = e.pax_extensions().unwrap() {
            for x in exts {
                let x = x.unwrap();
                if let Some(k) = x.key().unwrap().strip_prefix("SCHILY.xattr.") {
                    xattrs.push((k.to_string(), x.value_bytes().to_vec()));
                }
            }
        }
        let h = e.header().clone();
        let kind = match h.entry_type() {
            tar::EntryType::Regular => 'f',
            tar::EntryType::Directory => 'd',
            tar::EntryType::Symlink => 'l',
            tar::EntryType::Link => 'h',
            tar::EntryType::Fifo => 'p',
            t => panic!("unexpected {t:?} at {path}"),
        };
        let link = e
            .link_name()
            .unwrap()
            .map(|l| l.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap();
        map.insert(
            path,
            Node {
                kind,
                mode: h.mode().unwrap() & 0o7777,
                uid: h.uid().unwrap(),
                data,
                link,
                xattrs,
            },
        );
    }
    map
}

/// `unsquashfs -lln` lines as "MODE OWNER PATH" (size and time dropped).
pub fn lls(img: &Path) -> Vec<String> {
    let out = Command::new("unsquashfs")
        .arg("-lln")
        .arg(img)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 6 && f[5].starts_with("squashfs-root"))
                .then(|| format!("{} {} {}", f[0], f[1], f[5..].join(" ")))
        })
        .collect()
}

/// `n` bytes of xorshift noise from `seed`: they do not compress.
pub fn noise(n: usize, mut seed: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

// ---------------------------------------------------------------- fault proxy

#[derive(Clone, Debug)]
pub enum Action {
    /// Answer with this status (and a Retry-After: 0 for 429).
    Status(u16),
    /// Forward, but cut the response body after this many bytes and close.
    Truncate(usize),
    /// Forward after a pause.
    Delay(Duration),
    /// Forward, with one byte of the body changed (a blob that fails its digest).
    Corrupt,
    /// Forward this many bytes of the body, pause, then the rest (a blob read as it arrives).
    Pause(usize, Duration),
    /// As `Pause`, with a byte after the pause changed.
    PauseThenCorrupt(usize, Duration),
    /// Forward without the Range header: the whole blob again, as some servers answer a resume.
    IgnoreRange,
    /// Answer this instead: status, extra header lines ("Name: value\r\n"), body.
    Reply(u16, String, Vec<u8>),
    /// Answer 307 to the same path on `http://HOST` (blob storage on another host).
    Redirect(String),
}

#[derive(Clone, Debug)]
pub struct Rule {
    pub path_contains: String,
    pub action: Action,
    /// How many matching requests it applies to.
    pub times: usize,
}

/// An HTTP/1.1 proxy in front of a registry that logs requests and injects faults.
pub struct Proxy {
    pub port: u16,
    pub log: Arc<Mutex<Vec<String>>>,
    pub rules: Arc<Mutex<Vec<Rule>>>,
}

/// The token the bearer-mode proxy hands out at /token for the right basic credentials.
pub const BEARER_TOKEN: &str = "gpurun-test-token";

impl Proxy {
    pub fn start(upstream: u16) -> Proxy {
        Proxy::start_with(upstream, None)
    }

    /// A proxy that acts like a token-auth registry (Docker Hub's flow): /v2/ answers 401 with a
    /// Bearer challenge, /token trades the basic credentials `basic_b64` (base64 user:password)
    /// for [`BEARER_TOKEN`], and every other request needs that token.
    pub fn start_bearer(upstream: u16, basic_b64: &str) -> Proxy {
        Proxy::start_with(upstream, Some(basic_b64.to_string()))
    }

    fn start_with(upstream: u16, bearer: Option<String>) -> Proxy {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let rules: Arc<Mutex<Vec<Rule>>> = Arc::new(Mutex::new(Vec::new()));
        let (log2, rules2) = (log.clone(), rules.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                let (log, rules, bearer) = (log2.clone(), rules2.clone(), bearer.clone());
                std::thread::spawn(move || serve(conn, upstream, port, bearer, &log, &rules));
            }
        });
        Proxy { port, log, rules }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn rule(&self, path_contains: &str, action: Action, times: usize) {
        self.rules.lock().unwrap().push(Rule {
            path_contains: path_contains.into(),
            action,
            times,
        });
    }

    pub fn clear(&self) {
        self.rules.lock().unwrap().clear();
        self.log.lock().unwrap().clear();
    }

    pub fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

fn reply(c: &mut TcpStream, code: u16, headers: &str, body: &str) {
    let _ = write!(
        c,
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}Connection: close\r\n\r\n{body}",
        body.len()
    );
}

fn serve(
    mut c: TcpStream,
    upstream: u16,
    port: u16,
    bearer: Option<String>,
    log: &Mutex<Vec<String>>,
    rules: &Mutex<Vec<Rule>>,
) {
    // One request per connection: we answer with Connection: close.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match c.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or("").to_string();
    let path = request_line.split(' ').nth(1).unwrap_or("").to_string();
    let range = lines
        .clone()
        .find(|l| l.to_ascii_lowercase().starts_with("range:"))
        .map(|l| format!(" [{}]", l.trim()))
        .unwrap_or_default();
    let accept = if path.contains("/manifests/") {
        lines
            .clone()
            .find(|l| l.to_ascii_lowercase().starts_with("accept:"))
            .map(|l| format!(" [{}]", l.trim()))
            .unwrap_or_default()
    } else {
        String::new()
    };
    log.lock().unwrap().push(format!(
        "{}{range}{accept}",
        request_line
            .rsplit_once(' ')
            .map_or(&*request_line, |x| x.0)
    ));
    if let Some(basic) = &bearer {
        let auth = text
            .split("\r\n")
            .find(|l| l.to_ascii_lowercase().starts_with("authorization:"))
            .map(|l| l.split_once(':').unwrap().1.trim().to_string())
            .unwrap_or_default();
        if path.starts_with("/token") {
            if auth == format!("Basic {basic}") {
                reply(
                    &mut c,
                    200,
                    "",
                    &format!("{{\"token\":\"{BEARER_TOKEN}\"}}"),
                );
            } else {
                reply(&mut c, 401, "", "{\"details\":\"bad credentials\"}");
            }
            return;
        }
        if auth != format!("Bearer {BEARER_TOKEN}") {
            let challenge = format!(
                "WWW-Authenticate: Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"gpurun-test\"\r\n"
            );
            reply(
                &mut c,
                401,
                &challenge,
                "{\"errors\":[{\"code\":\"UNAUTHORIZED\",\"message\":\"token needed\"}]}",
            );
            return;
        }
    }
    let action = {
        let mut rs = rules.lock().unwrap();
        rs.iter_mut()
            .find(|r| r.times > 0 && path.contains(&r.path_contains))
            .map(|r| {
                r.times -= 1;
                r.action.clone()
            })
    };
    if let Some(Action::Status(code)) = action {
        let body = format!("{{\"errors\":[]}} injected {code}");
        let extra = if code == 429 {
            "Retry-After: 0\r\n"
        } else {
            ""
        };
        let extra = if code == 401 {
            "WWW-Authenticate: Basic realm=\"injected\"\r\n"
        } else {
            extra
        };
        let _ = write!(
            c,
            "HTTP/1.1 {code} Injected\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
            body.len()
        );
        return;
    }
    match &action {
        Some(Action::Reply(code, headers, body)) => {
            let _ = write!(
                c,
                "HTTP/1.1 {code} Injected\r\nContent-Length: {}\r\n{headers}Connection: close\r\n\r\n",
                body.len()
            );
            let _ = c.write_all(body);
            return;
        }
        Some(Action::Redirect(host)) => {
            reply(
                &mut c,
                307,
                &format!("Location: http://{host}{path}\r\n"),
                "",
            );
            return;
        }
        _ => {}
    }
    if let Some(Action::Delay(d)) = action {
        std::thread::sleep(d);
    }
    let mut up = match TcpStream::connect(("127.0.0.1", upstream)) {
        Ok(u) => u,
        Err(_) => return,
    };
    let mut fwd = String::new();
    for (i, l) in text.split("\r\n").enumerate() {
        let lower = l.to_ascii_lowercase();
        let range = lower.starts_with("range:") && matches!(action, Some(Action::IgnoreRange));
        if i > 0 && (l.is_empty() || lower.starts_with("connection:") || range) {
            continue;
        }
        fwd.push_str(l);
        fwd.push_str("\r\n");
    }
    fwd.push_str("Connection: close\r\n\r\n");
    if up.write_all(fwd.as_bytes()).is_err() {
        return;
    }
    let mut resp = Vec::new();
    let _ = up.read_to_end(&mut resp);
    if let Some(Action::Corrupt) = action {
        if let Some(end) = resp.windows(4).position(|w| w == b"\r\n\r\n") {
            if let Some(b) = resp.get_mut(end + 4 + 100) {
                *b ^= 0xff;
            }
        }
    }
    if let Some(Action::Pause(n, pause) | Action::PauseThenCorrupt(n, pause)) = action {
        if let Some(end) = resp.windows(4).position(|w| w == b"\r\n\r\n") {
            let cut = (end + 4 + n).min(resp.len());
            if matches!(action, Some(Action::PauseThenCorrupt(..))) {
                if let Some(b) = resp.get_mut(cut + 100) {
                    *b ^= 0xff;
                }
            }
            let _ = c.write_all(&resp[..cut]).and_then(|_| c.flush());
            std::thread::sleep(pause);
            let _ = c.write_all(&resp[cut..]);
            return;
        }
    }
    if let Some(Action::Truncate(n)) = action {
        if let Some(end) = resp.windows(4).position(|w| w == b"\r\n\r\n") {
            let cut = (end + 4 + n).min(resp.len());
            let _ = c.write_all(&resp[..cut]);
            return;
        }
    }
    let _ = c.write_all(&resp);
}

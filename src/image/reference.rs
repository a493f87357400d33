//! Image sources as the user writes them: `docker://[REGISTRY/]REPO[:TAG][@DIGEST]` with Docker's
//! defaults (docker.io, `library/`, `latest`), `podman://IMAGE` from the user's own podman store,
//! and the offline sources `oci:DIR[:TAG]`, `docker-archive:FILE.tar` and `dir:ROOTFS`.

use std::fmt;
use std::path::PathBuf;

/// Docker Hub as written in references; `index.docker.io` and `registry-1.docker.io` are aliases.
pub const DOCKER_HUB: &str = "docker.io";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReferenceError {
    #[error("image reference '{0}' has no transport; write docker://{0} (or podman://IMAGE, oci:DIR, docker-archive:FILE, dir:ROOTFS)")]
    NoTransport(String),
    #[error("{0}: gpurun cannot read the Docker daemon's images (its socket is root's, and gpurun runs as you); save the image with docker save -o FILE.tar IMAGE and use docker-archive:FILE.tar")]
    Dockerd(String),
    #[error("image reference '{given}': the transport takes two slashes; write {meant}")]
    OneSlash { given: String, meant: String },
    #[error("image reference '{reference}' is invalid: {why}")]
    Invalid { reference: String, why: String },
}

/// Where an image comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Docker(ImageRef),
    /// An image in the user's podman store, named as podman knows it (short names, IDs too).
    Podman(String),
    /// An OCI image layout directory, optionally with the tag (`org.opencontainers.image.ref.name`).
    OciLayout {
        dir: PathBuf,
        tag: Option<String>,
    },
    /// A `docker save` tarball.
    DockerArchive(PathBuf),
    /// A root filesystem directory, packed as it is.
    Dir(PathBuf),
}

/// A fully qualified registry reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ImageRef {
    /// Host with optional port, e.g. `docker.io`, `nvcr.io`, `127.0.0.1:5000`.
    pub registry: String,
    /// Repository path, e.g. `library/ubuntu`, `nvidia/pytorch`.
    pub repository: String,
    /// The tag; `None` only when a digest is given without a tag.
    pub tag: Option<String>,
    /// `sha256:…` when pinned.
    pub digest: Option<String>,
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "docker://{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

impl ImageRef {
    /// Docker's rule: plain http is used without asking only for loopback registries.
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.rsplit_once(':') {
            // "[::1]:5000" and "[::1]" keep their brackets in `host` below.
            Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) && !h.is_empty() => h,
            _ => self.registry.as_str(),
        };
        let ip = host.trim_start_matches('[').trim_end_matches(']');
        host == "localhost"
            || ip
                .parse::<std::net::IpAddr>()
                .is_ok_and(|a| a.is_loopback())
    }

    /// The file name `pull` writes when no `-o` is given: `pytorch_24.05-py3.sqsh`.
    pub fn default_file_name(&self) -> String {
        let name = self
            .repository
            .rsplit('/')
            .next()
            .unwrap_or(&self.repository);
        match (&self.tag, &self.digest) {
            (Some(t), _) => format!("{name}_{t}.sqsh"),
            (None, Some(d)) => {
                let hex = d.split_once(':').map_or(d.as_str(), |(_, h)| h);
                format!("{name}_{}.sqsh", &hex[..hex.len().min(12)])
            }
            (None, None) => format!("{name}.sqsh"),
        }
    }

    /// The tag, or digest, to ask the registry for.
    pub fn reference_part(&self) -> &str {
        self.digest
            .as_deref()
            .or(self.tag.as_deref())
            .unwrap_or("latest")
    }
}

fn is_port(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `docker:/host/x`, `podman:x`: the transport was meant; a path after `docker:` may be a
/// `docker save` file.
fn one_slash(given: &str, transport: &str, rest: &str) -> ReferenceError {
    let mut meant = format!("{transport}://{}", rest.trim_start_matches('/'));
    if transport == "docker" && rest.starts_with('/') {
        meant.push_str(&format!(
            " (or docker-archive:{rest} for a docker save file)"
        ));
    }
    ReferenceError::OneSlash {
        given: given.to_string(),
        meant,
    }
}

impl Source {
    pub fn parse(s: &str) -> Result<Source, ReferenceError> {
        if let Some(rest) = s.strip_prefix("docker://") {
            return parse_docker(rest).map(Source::Docker);
        }
        if let Some(rest) = s.strip_prefix("podman://") {
            return parse_podman(rest).map(Source::Podman);
        }
        if s.starts_with("dockerd://") {
            return Err(ReferenceError::Dockerd(s.to_string()));
        }
        let (transport, rest) = match s.split_once(':') {
            Some((t, r)) if !t.contains('/') => (t, r),
            _ => return Err(ReferenceError::NoTransport(s.to_string())),
        };
        let bad = |why: &str| ReferenceError::Invalid {
            reference: s.to_string(),
            why: why.to_string(),
        };
        if rest.is_empty() {
            return Err(bad("the path is empty"));
        }
        match transport {
            "oci" => {
                // A tag cannot contain '/', so a ':' followed by a slash-free tail is the tag.
                match rest.rsplit_once(':') {
                    Some((dir, tag)) if !tag.contains('/') && !dir.is_empty() => {
                        if !valid_tag(tag) {
                            return Err(bad(&format!("'{tag}' is not a valid tag")));
                        }
                        Ok(Source::OciLayout {
                            dir: dir.into(),
                            tag: Some(tag.to_string()),
                        })
                    }
                    _ => Ok(Source::OciLayout {
                        dir: rest.into(),
                        tag: None,
                    }),
                }
            }
            "docker-archive" => Ok(Source::DockerArchive(rest.into())),
            "dir" => Ok(Source::Dir(rest.into())),
            // `docker:5000/x` is a registry called docker, on port 5000.
            "docker" | "podman" if !rest.split('/').next().is_some_and(is_port) => {
                Err(one_slash(s, transport, rest))
            }
            _ => Err(ReferenceError::NoTransport(s.to_string())),
        }
    }
}

/// Whether a launch's IMAGE names an image in a registry or a local image store (`docker://`,
/// `podman://`; `dockerd://` too, to be refused with its reason) rather than a file.
pub fn is_reference(s: &str) -> bool {
    ["docker://", "podman://", "dockerd://"]
        .iter()
        .any(|t| s.starts_with(t))
}

/// What follows `podman://`: podman's names are Docker's references (podman resolves short
/// ones in its store) or image IDs. Passed to podman as written.
fn parse_podman(s: &str) -> Result<String, ReferenceError> {
    let bad = |why: String| ReferenceError::Invalid {
        reference: format!("podman://{s}"),
        why,
    };
    match s.bytes().next() {
        None => return Err(bad("it is empty".into())),
        // podman would read a name that starts like an option as one.
        Some(b) if !b.is_ascii_alphanumeric() => {
            return Err(bad("an image name starts with a letter or digit".into()))
        }
        Some(_) => {}
    }
    match parse_docker(s) {
        Ok(_) => Ok(s.to_string()),
        Err(ReferenceError::Invalid { why, .. }) => Err(bad(why)),
        Err(e) => Err(e),
    }
}

/// Parse what follows `docker://`, applying Docker's defaults.
pub fn parse_docker(s: &str) -> Result<ImageRef, ReferenceError> {
    let bad = |why: String| ReferenceError::Invalid {
        reference: format!("docker://{s}"),
        why,
    };
    if s.is_empty() {
        return Err(bad("it is empty".into()));
    }
    let (name_tag, digest) = match s.split_once('@') {
        Some((n, d)) => {
            if !valid_digest(d) {
                return Err(bad(format!(
                    "'{d}' is not a digest (expected sha256: and 64 hex digits)"
                )));
            }
            (n, Some(d.to_string()))
        }
        None => (s, None),
    };
    // The tag is after the last ':' that follows the last '/' (a ':' before it is a port).
    let last_slash = name_tag.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match name_tag[last_slash..].rfind(':') {
        Some(i) => {
            let i = last_slash + i;
            (&name_tag[..i], Some(name_tag[i + 1..].to_string()))
        }
        None => (name_tag, None),
    };
    if let Some(t) = &tag {
        if !valid_tag(t) {
            return Err(bad(format!("'{t}' is not a valid tag")));
        }
    }
    let (registry, repo) = match name.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first.to_string(), rest.to_string())
        }
        _ => (DOCKER_HUB.to_string(), name.to_string()),
    };
    if !valid_registry(&registry) {
        return Err(bad(format!(
            "'{registry}' is not a valid registry host[:port]"
        )));
    }
    let registry = match registry.as_str() {
        "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB.to_string(),
        _ => registry,
    };
    let repository = if registry == DOCKER_HUB && !repo.contains('/') {
        format!("library/{repo}")
    } else {
        repo
    };
    if !valid_repository(&repository) {
        return Err(bad(format!(
            "'{repository}' is not a valid repository (lowercase letters, digits, '.', '_', '-', '/')"
        )));
    }
    let tag = match (tag, &digest) {
        (None, None) => Some("latest".to_string()),
        (t, _) => t,
    };
    Ok(ImageRef {
        registry,
        repository,
        tag,
        digest,
    })
}

/// `sha256:` and 64 lowercase hex digits (the only algorithm registries serve in practice; also
/// what makes a digest safe to use as a file name in the cache).
pub fn valid_digest(d: &str) -> bool {
    match d.split_once(':') {
        Some(("sha256", hex)) => {
            hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        }
        _ => false,
    }
}

fn valid_tag(t: &str) -> bool {
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

fn valid_registry(r: &str) -> bool {
    let (host, port) = match r.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') => (h, Some(p)),
        _ => (r, None),
    };
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    let host_ok = !host.is_empty()
        && (host.starts_with('[') && host.ends_with(']')
            || host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'));
    port_ok && host_ok
}

fn valid_repository(r: &str) -> bool {
    !r.is_empty()
        && r.split('/').all(|comp| {
            let b = comp.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_lowercase() | b[0].is_ascii_digit()
                && b[b.len() - 1].is_ascii_lowercase() | b[b.len() - 1].is_ascii_digit()
                && b.iter().all(|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-')
                })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn r(reg: &str, repo: &str, tag: Option<&str>, digest: Option<&str>) -> ImageRef {
        ImageRef {
            registry: reg.into(),
            repository: repo.into(),
            tag: tag.map(Into::into),
            digest: digest.map(Into::into),
        }
    }

    #[test]
    fn docker_references() {
        let dg = format!("ubuntu@{D}");
        let dg_tag = format!("nvcr.io/nvidia/pytorch:24.05-py3@{D}");
        let port_dg = format!("127.0.0.1:5000/bench/tiny@{D}");
        let cases: Vec<(&str, ImageRef)> = vec![
            (
                "ubuntu",
                r("docker.io", "library/ubuntu", Some("latest"), None),
            ),
            (
                "ubuntu:24.04",
                r("docker.io", "library/ubuntu", Some("24.04"), None),
            ),
            (
                "docker.io/ubuntu",
                r("docker.io", "library/ubuntu", Some("latest"), None),
            ),
            (
                "index.docker.io/library/ubuntu:22.04",
                r("docker.io", "library/ubuntu", Some("22.04"), None),
            ),
            (
                "tensorflow/tensorflow:latest-gpu",
                r(
                    "docker.io",
                    "tensorflow/tensorflow",
                    Some("latest-gpu"),
                    None,
                ),
            ),
            (
                "nvcr.io/nvidia/pytorch:24.05-py3",
                r("nvcr.io", "nvidia/pytorch", Some("24.05-py3"), None),
            ),
            ("localhost/foo", r("localhost", "foo", Some("latest"), None)),
            (
                "localhost:5000/a/b/c:v1",
                r("localhost:5000", "a/b/c", Some("v1"), None),
            ),
            (
                "127.0.0.1:5000/bench/tiny",
                r("127.0.0.1:5000", "bench/tiny", Some("latest"), None),
            ),
            (&dg, r("docker.io", "library/ubuntu", None, Some(D))),
            (
                &dg_tag,
                r("nvcr.io", "nvidia/pytorch", Some("24.05-py3"), Some(D)),
            ),
            (&port_dg, r("127.0.0.1:5000", "bench/tiny", None, Some(D))),
            ("[::1]:5000/x:y", r("[::1]:5000", "x", Some("y"), None)),
            (
                "ghcr.io/a-b/c__d.e:T_1.x-y",
                r("ghcr.io", "a-b/c__d.e", Some("T_1.x-y"), None),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse_docker(input).as_ref(), Ok(&want), "{input}");
        }
    }

    #[test]
    fn bad_docker_references() {
        for input in [
            "",
            "Ubuntu",
            "ubuntu:",
            "ubuntu:-x",
            "ubuntu@sha256:abc",
            "ubuntu@md5:0123",
            "nvcr.io/",
            "nvcr.io//x",
            "foo/-bar",
            "host:port/x",
            "a b",
            "ubuntu:a/b",
        ] {
            assert!(parse_docker(input).is_err(), "{input:?} should be refused");
        }
    }

    #[test]
    fn sources() {
        let podman_digest = format!("podman://quay.io/org/app@{D}");
        let ok: Vec<(&str, Source)> = vec![
            (
                "oci:/tmp/layout",
                Source::OciLayout {
                    dir: "/tmp/layout".into(),
                    tag: None,
                },
            ),
            (
                "oci:/tmp/layout:v1",
                Source::OciLayout {
                    dir: "/tmp/layout".into(),
                    tag: Some("v1".into()),
                },
            ),
            (
                "oci:rel/dir",
                Source::OciLayout {
                    dir: "rel/dir".into(),
                    tag: None,
                },
            ),
            (
                "docker-archive:img.tar",
                Source::DockerArchive("img.tar".into()),
            ),
            ("dir:/srv/rootfs", Source::Dir("/srv/rootfs".into())),
            (
                "docker://alpine",
                Source::Docker(r("docker.io", "library/alpine", Some("latest"), None)),
            ),
            (
                "podman://localhost/app:v1",
                Source::Podman("localhost/app:v1".into()),
            ),
            ("podman://ubuntu", Source::Podman("ubuntu".into())),
            (
                "podman://54c5c828f002",
                Source::Podman("54c5c828f002".into()),
            ),
            (
                &podman_digest,
                Source::Podman(podman_digest["podman://".len()..].into()),
            ),
        ];
        for (input, want) in ok {
            assert_eq!(Source::parse(input), Ok(want), "{input}");
        }
        assert!(matches!(
            Source::parse("ubuntu:24.04"),
            Err(ReferenceError::NoTransport(_))
        ));
        assert!(matches!(
            Source::parse("/path/x.sqsh"),
            Err(ReferenceError::NoTransport(_))
        ));
        let e = |r: &str| Source::parse(r).unwrap_err().to_string();
        assert_eq!(
            e("docker:/host/x"),
            "image reference 'docker:/host/x': the transport takes two slashes; write \
             docker://host/x (or docker-archive:/host/x for a docker save file)"
        );
        assert!(e("podman:ubi9").ends_with("write podman://ubi9"));
        assert!(e("docker:5000/x").contains("write docker://docker:5000/x"));
        assert!(matches!(
            Source::parse("dir:"),
            Err(ReferenceError::Invalid { .. })
        ));
        assert!(matches!(
            Source::parse("oci:/x:bad tag"),
            Err(ReferenceError::Invalid { .. })
        ));
        // Nothing podman would take for an option, or for something other than an image.
        for bad in [
            "podman://",
            "podman://--root=/tmp/x",
            "podman://-q",
            "podman://a b",
            "podman://Upper/case",
            "podman://x:bad/tag",
        ] {
            assert!(
                matches!(Source::parse(bad), Err(ReferenceError::Invalid { ref reference, .. }) if reference.starts_with("podman://")),
                "{bad} accepted: {:?}",
                Source::parse(bad)
            );
        }
        let e = Source::parse("dockerd://ubuntu:24.04").unwrap_err();
        assert_eq!(e, ReferenceError::Dockerd("dockerd://ubuntu:24.04".into()));
        assert!(e.to_string().contains("docker-archive:FILE.tar"), "{e}");
        for (s, is) in [
            ("docker://x", true),
            ("podman://x", true),
            ("dockerd://x", true),
            ("oci:/x", false),
            ("./img.sqsh", false),
            ("/srv/podman://x", false),
        ] {
            assert_eq!(is_reference(s), is, "{s}");
        }
    }

    #[test]
    fn names_and_loopback() {
        let p = parse_docker("nvcr.io/nvidia/pytorch:24.05-py3").unwrap();
        assert_eq!(p.default_file_name(), "pytorch_24.05-py3.sqsh");
        let d = parse_docker(&format!("ubuntu@{D}")).unwrap();
        assert_eq!(d.default_file_name(), "ubuntu_0123456789ab.sqsh");
        assert_eq!(d.reference_part(), D);
        for (reg, lo) in [
            ("127.0.0.1:5000", true),
            ("localhost", true),
            ("localhost:80", true),
            ("[::1]:5000", true),
            ("docker.io", false),
            ("127.example.com", false),
            ("127.1.2.3", true),
            ("10.0.0.1:5000", false),
        ] {
            assert_eq!(r(reg, "x", None, None).is_loopback(), lo, "{reg}");
        }
    }
}

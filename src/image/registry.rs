//! Talking to registries through oci-client: credentials (docker config.json, containers
//! auth.json, credential helpers, environment), manifests and indexes with platform choice, and
//! blobs streamed into the cache with digest checks, HTTP-range resume and retries.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::cache::{Cache, CacheError};
use super::reference::{valid_digest, ImageRef, DOCKER_HUB};

/// Every manifest type gpurun reads, sent on every manifest request.
pub const MANIFEST_MEDIA_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// Attempts per request; connection errors, 5xx and 429 are retried with exponential backoff.
const ATTEMPTS: u32 = 5;
const BACKOFF_BASE: Duration = Duration::from_millis(400);
/// The longest a 429's Retry-After is waited for within one pull.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Retry-After in delay-seconds (what registries send); an HTTP-date counts as absent.
fn parse_retry_after(v: &str) -> Option<Duration> {
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{what} not found on {registry} ({detail}); check the name, tag and platform")]
    NotFound {
        what: String,
        registry: String,
        detail: String,
    },
    #[error("{registry} refused access to {image} ({detail}); log in (docker login / podman login) or set GPURUN_DOCKER_USERNAME and GPURUN_DOCKER_PASSWORD")]
    Auth {
        registry: String,
        image: String,
        detail: String,
    },
    #[error("{registry} refused the credentials {from} for {image} ({detail}); check the user name and password (or token), or log in again")]
    Refused {
        registry: String,
        image: String,
        /// Where they were found (`Found::from`).
        from: String,
        detail: String,
    },
    #[error("cannot reach {registry} ({detail}); check the network, proxy and registry name, then run the pull again (it resumes)")]
    Network { registry: String, detail: String },
    #[error("{registry} refuses more requests for now (HTTP 429, a rate limit{asked}); wait and run the pull again (it resumes), or log in for a higher limit (docker login, GPURUN_DOCKER_USERNAME/GPURUN_DOCKER_PASSWORD)")]
    RateLimited {
        registry: String,
        /// ", it asks to wait N s" once its Retry-After is known.
        asked: String,
        /// The URL that answered 429, to ask for its Retry-After.
        url: Option<String>,
    },
    #[error("image {image} is unusable: {detail}")]
    BadImage { image: String, detail: String },
    #[error("blob {digest} from {registry} does not match its digest (got {actual}); the download was discarded, run the pull again")]
    Digest {
        registry: String,
        digest: String,
        actual: String,
    },
    #[error("no platform {wanted} in {image}; available: {available}; choose one with --platform")]
    NoPlatform {
        image: String,
        wanted: String,
        available: String,
    },
    #[error("credentials for {registry}: {detail}")]
    Credentials { registry: String, detail: String },
    #[error("writing {path}: the disk is full; free space or set GPURUN_CACHEDIR elsewhere")]
    DiskFull { path: PathBuf },
    #[error("writing {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Cache(#[from] CacheError),
}

fn io_err(path: &Path, source: io::Error) -> RegistryError {
    if source.raw_os_error() == Some(libc::ENOSPC) {
        RegistryError::DiskFull {
            path: path.to_path_buf(),
        }
    } else {
        RegistryError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

// ---------------------------------------------------------------- credentials

/// A username and password (or token). Never printed: Debug redacts the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// What an auth file says about one registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthEntry {
    Creds(Credentials),
    /// Ask `docker-credential-NAME`.
    Helper(String),
    Nothing,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AuthFile {
    auths: BTreeMap<String, AuthFileEntry>,
    #[serde(rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AuthFileEntry {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

/// The host an auth-file key names: keys may be `host`, `https://host`, `https://host/v1/`.
fn auth_key_host(key: &str) -> &str {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    k.split('/').next().unwrap_or(k)
}

fn same_registry(key_host: &str, registry: &str) -> bool {
    let hub = |h: &str| matches!(h, "docker.io" | "index.docker.io" | "registry-1.docker.io");
    key_host == registry || (hub(key_host) && hub(registry))
}

/// Parse a docker `config.json` or containers `auth.json` and find `registry` in it.
/// Order, as docker does: credHelpers, then auths, then credsStore.
pub fn parse_auth_file(json: &[u8], registry: &str) -> Result<AuthEntry, String> {
    let f: AuthFile = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    if let Some((_, h)) = f
        .cred_helpers
        .iter()
        .find(|(k, _)| same_registry(auth_key_host(k), registry))
    {
        return Ok(AuthEntry::Helper(h.clone()));
    }
    if let Some((_, e)) = f
        .auths
        .iter()
        .find(|(k, _)| same_registry(auth_key_host(k), registry))
    {
        if let (Some(u), Some(p)) = (&e.username, &e.password) {
            return Ok(AuthEntry::Creds(Credentials {
                username: u.clone(),
                password: p.clone(),
            }));
        }
        if let Some(a) = e.auth.as_deref().filter(|a| !a.is_empty()) {
            let raw = base64_decode(a).ok_or("an 'auth' value is not valid base64")?;
            let s = String::from_utf8(raw).map_err(|_| "an 'auth' value is not UTF-8")?;
            let (u, p) = s
                .split_once(':')
                .ok_or("an 'auth' value is not base64 of user:password")?;
            return Ok(AuthEntry::Creds(Credentials {
                username: u.to_string(),
                password: p.to_string(),
            }));
        }
    }
    Ok(match f.creds_store {
        Some(s) if !s.is_empty() => AuthEntry::Helper(s),
        _ => AuthEntry::Nothing,
    })
}

/// Standard base64 (with or without padding); auth files are the only user.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Credentials and where they were found, in words: "from GPURUN_DOCKER_USERNAME and
/// GPURUN_DOCKER_PASSWORD", "found in FILE", "from docker-credential-NAME (named in FILE)".
pub type Found = (Credentials, String);

/// Where credentials come from; `from_env` reads the real places.
#[derive(Debug, Clone, Default)]
pub struct AuthSources {
    pub env: Option<Credentials>,
    pub files: Vec<PathBuf>,
}

impl AuthSources {
    pub fn from_env() -> AuthSources {
        let env = match (
            std::env::var("GPURUN_DOCKER_USERNAME"),
            std::env::var("GPURUN_DOCKER_PASSWORD"),
        ) {
            (Ok(username), Ok(password)) => Some(Credentials { username, password }),
            _ => None,
        };
        let mut files = Vec::new();
        if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
            files.push(PathBuf::from(x).join("containers/auth.json"));
        }
        if let Some(d) = std::env::var_os("DOCKER_CONFIG") {
            files.push(PathBuf::from(d).join("config.json"));
        } else if let Some(h) = std::env::var_os("HOME") {
            files.push(PathBuf::from(h).join(".docker/config.json"));
        }
        AuthSources { env, files }
    }

    /// Credentials for `registry`: the environment first, then the first file that names it.
    pub fn lookup(&self, registry: &str) -> Result<Option<Found>, RegistryError> {
        if let Some(c) = &self.env {
            let from = "from GPURUN_DOCKER_USERNAME and GPURUN_DOCKER_PASSWORD";
            return Ok(Some((c.clone(), from.to_string())));
        }
        for f in &self.files {
            let Some(bytes) = read_auth_file(f) else {
                continue;
            };
            let entry =
                parse_auth_file(&bytes, registry).map_err(|e| RegistryError::Credentials {
                    registry: registry.to_string(),
                    detail: format!(
                        "{} is not a valid auth file ({e}); fix or remove it",
                        f.display()
                    ),
                })?;
            match entry {
                AuthEntry::Creds(c) => return Ok(Some((c, format!("found in {}", f.display())))),
                AuthEntry::Helper(h) => {
                    let from = format!("from docker-credential-{h} (named in {})", f.display());
                    return Ok(credential_helper(&h, registry)?.map(|c| (c, from)));
                }
                AuthEntry::Nothing => {}
            }
        }
        Ok(None)
    }
}

/// The bytes of the auth file `f`, when the caller (or root) owns it and nobody else may change
/// it; one another user could write is skipped with a warning (it could name a credential
/// helper for gpurun to run, or credentials that send the pull elsewhere).
fn read_auth_file(f: &Path) -> Option<Vec<u8>> {
    use crate::store::private_dir::{open_trusted, resolve_checked, Problem};
    let uid = nix::unistd::geteuid().as_raw();
    let opened = resolve_checked(f, uid)
        .map_err(|(_, p)| p)
        .and_then(|real| open_trusted(&real, uid));
    let mut file = match opened {
        Ok(file) => file,
        Err(Problem::Io(io::ErrorKind::NotFound, _)) => return None,
        Err(p) => {
            eprintln!("gpurun: warning: auth file {} skipped: {p}", f.display());
            return None;
        }
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// Run `docker-credential-HELPER get` (the docker credential-helper protocol). Not the
/// docker_credential crate: it runs whatever name a config gives (a path too) and keeps its
/// helper call private behind its own reading of config.json, without gpurun's trust checks.
fn credential_helper(helper: &str, registry: &str) -> Result<Option<Credentials>, RegistryError> {
    // A helper is a program on PATH, named by a suffix: never a path.
    let plain = |c: char| c.is_ascii_alphanumeric() || "._-".contains(c);
    if helper.is_empty() || !helper.chars().all(plain) || helper.starts_with('.') {
        return Err(RegistryError::Credentials {
            registry: registry.to_string(),
            detail: format!(
                "credential helper name {helper:?} is not a plain name; fix the docker config"
            ),
        });
    }
    let server = if registry == DOCKER_HUB {
        "https://index.docker.io/v1/"
    } else {
        registry
    };
    let prog = format!("docker-credential-{helper}");
    let fail = |detail: String| RegistryError::Credentials {
        registry: registry.to_string(),
        detail,
    };
    let mut child = std::process::Command::new(&prog)
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| {
            fail(format!(
                "cannot run {prog} ({e}); install it or remove it from the docker config"
            ))
        })?;
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(server.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| fail(format!("{prog}: {e}")))?;
    if !out.status.success() {
        // Helpers exit non-zero for "no credentials": anonymous access may still work.
        return Ok(None);
    }
    #[derive(Deserialize)]
    struct HelperOut {
        #[serde(rename = "Username")]
        username: String,
        #[serde(rename = "Secret")]
        secret: String,
    }
    let h: HelperOut = serde_json::from_slice(&out.stdout)
        .map_err(|e| fail(format!("{prog} gave unreadable output ({e})")))?;
    Ok(Some(Credentials {
        username: h.username,
        password: h.secret,
    }))
}

// ---------------------------------------------------------------- manifests and platforms

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Descriptor {
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub digest: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub platform: Option<Platform>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    /// The tag an OCI layout's index.json gives this image.
    pub fn annotations_ref_name(&self) -> Option<String> {
        self.annotations
            .get("org.opencontainers.image.ref.name")
            .cloned()
    }
}

/// An image manifest or an index (OCI or Docker v2), told apart by their fields.
#[derive(Debug, Clone, Deserialize)]
pub struct Manifest {
    #[serde(rename = "mediaType", default)]
    pub media_type: Option<String>,
    #[serde(default)]
    pub config: Option<Descriptor>,
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    #[serde(default)]
    pub manifests: Option<Vec<Descriptor>>,
}

impl Manifest {
    pub fn parse(bytes: &[u8]) -> Result<Manifest, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("manifest is not valid JSON ({e})"))
    }
    pub fn is_index(&self) -> bool {
        self.manifests.is_some() && self.config.is_none()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    #[serde(default)]
    pub variant: Option<String>,
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

fn normalize_arch(arch: &str, variant: Option<&str>) -> (String, Option<String>) {
    match (arch, variant) {
        ("x86_64" | "x86-64", v) => ("amd64".into(), v.map(Into::into)),
        ("aarch64" | "arm64", None | Some("v8")) => ("arm64".into(), Some("v8".into())),
        ("armhf", _) => ("arm".into(), Some("v7".into())),
        ("armel", _) => ("arm".into(), Some("v6".into())),
        (a, v) => (a.into(), v.map(Into::into)),
    }
}

impl Platform {
    /// `os/arch[/variant]`, e.g. `linux/arm64/v8`.
    pub fn parse(s: &str) -> Result<Platform, String> {
        let parts: Vec<&str> = s.split('/').collect();
        if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty()) {
            return Err(format!(
                "platform '{s}' is not os/arch[/variant], e.g. linux/amd64 or linux/arm64/v8"
            ));
        }
        Ok(Platform {
            os: parts[0].to_string(),
            architecture: parts[1].to_string(),
            variant: parts.get(2).map(|v| v.to_string()),
        })
    }

    /// The machine gpurun runs on.
    pub fn host() -> Platform {
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "powerpc64" => "ppc64le",
            a => a,
        };
        Platform {
            os: std::env::consts::OS.to_string(),
            architecture: arch.to_string(),
            variant: None,
        }
    }

    /// Does an index entry for `offered` satisfy a request for `self`? A request without variant
    /// takes any variant.
    pub fn accepts(&self, offered: &Platform) -> bool {
        let (wa, wv) = normalize_arch(&self.architecture, self.variant.as_deref());
        let (oa, ov) = normalize_arch(&offered.architecture, offered.variant.as_deref());
        self.os == offered.os && wa == oa && (self.variant.is_none() || wv == ov)
    }
}

/// The platforms an index offers (attestation manifests, unknown/unknown, are not images).
pub fn platforms(entries: &[Descriptor]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| e.platform.as_ref())
        .filter(|p| p.os != "unknown")
        .map(|p| p.to_string())
        .collect()
}

/// Pick the manifest for `want` from an index; the error lists what there is.
pub fn choose_platform<'a>(
    entries: &'a [Descriptor],
    want: &Platform,
) -> Result<&'a Descriptor, String> {
    entries
        .iter()
        .find(|e| e.platform.as_ref().is_some_and(|p| want.accepts(p)))
        .ok_or_else(|| {
            let avail = platforms(entries);
            if avail.is_empty() {
                "none".to_string()
            } else {
                avail.join(", ")
            }
        })
}

// ---------------------------------------------------------------- the client

/// Docker's rule: plain http only for loopback registries, or when the user says `--insecure`.
pub fn plain_http(image: &ImageRef, insecure: bool) -> bool {
    insecure || image.is_loopback()
}

pub struct RegistryClient {
    client: oci_client::Client,
    auth: RegistryAuth,
    /// Where the credentials in `auth` were found, when there are some.
    creds_from: Option<String>,
    image: ImageRef,
    attempts: u32,
}

enum Failure {
    Retry(RegistryError),
    Fatal(RegistryError),
}

impl RegistryClient {
    pub fn new(image: &ImageRef, insecure: bool, creds: Option<Found>) -> RegistryClient {
        let protocol = if plain_http(image, insecure) {
            ClientProtocol::HttpsExcept(vec![image.registry.clone()])
        } else {
            ClientProtocol::Https
        };
        let config = ClientConfig {
            protocol,
            // We choose platforms ourselves, so an index reaching oci-client is a bug.
            platform_resolver: None,
            connect_timeout: Some(Duration::from_secs(30)),
            read_timeout: Some(Duration::from_secs(120)),
            user_agent: concat!("gpurun/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        let (auth, creds_from) = match creds {
            Some((c, from)) => (RegistryAuth::Basic(c.username, c.password), Some(from)),
            None => (RegistryAuth::Anonymous, None),
        };
        RegistryClient {
            client: oci_client::Client::new(config),
            auth,
            creds_from,
            image: image.clone(),
            attempts: ATTEMPTS,
        }
    }

    /// Give up on connection errors, 5xx and 429 after `n` attempts (at least one).
    pub fn attempts(mut self, n: u32) -> RegistryClient {
        self.attempts = n.max(1);
        self
    }

    fn oref(&self, tag_or_digest: &str) -> oci_client::Reference {
        let (reg, repo) = (self.image.registry.clone(), self.image.repository.clone());
        if valid_digest(tag_or_digest) {
            oci_client::Reference::with_digest(reg, repo, tag_or_digest.to_string())
        } else {
            oci_client::Reference::with_tag(reg, repo, tag_or_digest.to_string())
        }
    }

    /// Sort an oci-client error into what the user can act on.
    fn classify(&self, what: &str, e: OciDistributionError) -> Failure {
        let registry = self.image.registry.clone();
        let image = self.image.to_string();
        let not_found = |detail: String| {
            Failure::Fatal(RegistryError::NotFound {
                what: what.to_string(),
                registry: registry.clone(),
                detail,
            })
        };
        // With credentials, a refusal is theirs: a wrong password reads differently from none.
        let auth = |detail: String| {
            Failure::Fatal(match &self.creds_from {
                Some(from) => RegistryError::Refused {
                    registry: registry.clone(),
                    image: image.clone(),
                    from: from.clone(),
                    detail,
                },
                None => RegistryError::Auth {
                    registry: registry.clone(),
                    image: image.clone(),
                    detail,
                },
            })
        };
        let net = |detail: String| {
            Failure::Retry(RegistryError::Network {
                registry: registry.clone(),
                detail,
            })
        };
        match e {
            OciDistributionError::ImageManifestNotFoundError(m) => not_found(m),
            OciDistributionError::UnauthorizedError { .. } => auth("HTTP 401".into()),
            OciDistributionError::AuthenticationFailure(m) => {
                auth(format!("token request failed: {}", first_line(&m)))
            }
            OciDistributionError::RegistryError { envelope, url } => {
                let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
                let detail = codes
                    .iter()
                    .map(|c| format!("{c:?}").to_uppercase())
                    .collect::<Vec<_>>()
                    .join(", ");
                match envelope_kind(&codes) {
                    EnvelopeKind::NotFound => not_found(detail),
                    EnvelopeKind::Auth => auth(detail),
                    EnvelopeKind::RateLimited => Failure::Retry(RegistryError::RateLimited {
                        registry: registry.clone(),
                        asked: String::new(),
                        url: Some(url),
                    }),
                    EnvelopeKind::Other => Failure::Fatal(RegistryError::BadImage {
                        image,
                        detail: format!("registry answered {detail} for {what}"),
                    }),
                }
            }
            OciDistributionError::ServerError { code, message, url } => match code {
                404 => not_found(format!("HTTP 404 {}", first_line(&message))),
                401 | 403 => auth(format!("HTTP {code}")),
                429 => Failure::Retry(RegistryError::RateLimited {
                    registry: registry.clone(),
                    asked: String::new(),
                    url: Some(url),
                }),
                c if c >= 500 => net(format!("HTTP {c} {}", first_line(&message))),
                c => Failure::Fatal(RegistryError::BadImage {
                    image,
                    detail: format!("registry answered HTTP {c} for {what}"),
                }),
            },
            OciDistributionError::RequestError(e) => net(error_chain(&e)),
            OciDistributionError::IoError(e) => net(e.to_string()),
            other => Failure::Fatal(RegistryError::BadImage {
                image,
                detail: format!("{what}: {other}"),
            }),
        }
    }

    /// Wait before retrying a request that failed with `e` (attempt `attempt`, from 0), or give
    /// `e` back when no attempt is left. The wait is the backoff, or what a 429's Retry-After
    /// asks when that is longer; a registry asking for more than [`MAX_RETRY_AFTER`] (pull rate
    /// limits ask for hours) gets the error at once, saying how long it asked.
    async fn before_retry(&self, e: RegistryError, attempt: u32) -> Result<(), RegistryError> {
        let mut wait = BACKOFF_BASE * 2u32.pow(attempt);
        let e = match e {
            RegistryError::RateLimited {
                registry,
                url: Some(url),
                ..
            } => {
                let asked = self.retry_after(&url).await;
                let e = RegistryError::RateLimited {
                    registry,
                    asked: asked
                        .map(|a| format!(", it asks to wait {} s", a.as_secs()))
                        .unwrap_or_default(),
                    url: Some(url),
                };
                match asked {
                    Some(a) if a > MAX_RETRY_AFTER => return Err(e),
                    Some(a) => wait = wait.max(a),
                    None => {}
                }
                e
            }
            e => e,
        };
        if attempt + 1 >= self.attempts {
            return Err(e);
        }
        tokio::time::sleep(wait).await;
        Ok(())
    }

    /// The Retry-After of a URL that answered 429. oci-client keeps response headers to itself,
    /// so this asks again with a HEAD, with the credentials oci-client holds for the registry.
    async fn retry_after(&self, url: &str) -> Option<Duration> {
        let r = self.oref(self.image.reference_part());
        let token = self
            .client
            .auth(&r, &self.auth, oci_client::RegistryOperation::Pull)
            .await
            .ok()
            .flatten();
        let mut req = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .user_agent(concat!("gpurun/", env!("CARGO_PKG_VERSION")))
            .build()
            .ok()?
            .head(url);
        match (token, &self.auth) {
            (Some(t), _) => req = req.bearer_auth(t),
            (None, RegistryAuth::Basic(u, p)) => req = req.basic_auth(u, Some(p)),
            _ => {}
        }
        let resp = req.send().await.ok()?;
        parse_retry_after(resp.headers().get("retry-after")?.to_str().ok()?)
    }

    async fn retrying<T, F, Fut>(&self, what: &str, mut f: F) -> Result<T, RegistryError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, OciDistributionError>>,
    {
        let mut attempt = 0;
        loop {
            match f().await {
                Ok(v) => return Ok(v),
                Err(e) => match self.classify(what, e) {
                    Failure::Retry(e) => {
                        self.before_retry(e, attempt).await?;
                        attempt += 1;
                    }
                    Failure::Fatal(e) => return Err(e),
                },
            }
        }
    }

    /// Fetch a manifest or index by tag or digest: raw bytes and the digest of those bytes
    /// (checked against the reference when it is a digest).
    pub async fn manifest(&self, tag_or_digest: &str) -> Result<(Vec<u8>, String), RegistryError> {
        let r = self.oref(tag_or_digest);
        let what = format!("image {}", self.image);
        let (bytes, digest) = self
            .retrying(&what, || {
                self.client
                    .pull_manifest_raw(&r, &self.auth, MANIFEST_MEDIA_TYPES)
            })
            .await?;
        Ok((bytes.to_vec(), digest))
    }

    /// Download blob `desc` into the cache (or find it there) and return its path. Verified
    /// against its digest while streaming; an interrupted download resumes with an HTTP range.
    /// `on_bytes` is told of every chunk; returns the path and, when it was downloaded, the bytes
    /// received now (not those a resumed download already had).
    pub async fn fetch_blob(
        &self,
        desc: &Descriptor,
        cache: &Cache,
        on_bytes: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<(PathBuf, Option<u64>), RegistryError> {
        let digest = desc.digest.as_str();
        if let Some(found) = cache.find_blob(digest)? {
            on_bytes(desc.size);
            return Ok((found, None));
        }
        let final_path = cache.blob_path(digest)?;
        let lock = {
            let c = cache.clone();
            let d = digest.to_string();
            tokio::task::spawn_blocking(move || c.lock(&d))
                .await
                .expect("lock task")?
        };
        if final_path.exists() {
            // Another pull finished it while we waited for the lock.
            on_bytes(desc.size);
            return Ok((final_path, None));
        }
        let mut part = PartialBlob::open(cache.partial_path(digest)?, cache, desc.size)?;
        on_bytes(part.have);
        let what = format!("blob {digest} of {}", self.image);
        let r = self.oref(self.image.reference_part());
        let mut attempt = 0;
        let mut reauthed = false;
        while desc.size == 0 || part.have < desc.size {
            let Some(err) = self.download_once(&r, desc, &mut part, on_bytes).await? else {
                break;
            };
            match self.classify(&what, err) {
                Failure::Fatal(RegistryError::Auth { .. } | RegistryError::Refused { .. })
                    if !reauthed =>
                {
                    // A bearer token can expire during a long pull (Docker Hub's last five
                    // minutes): fetch a new one, once, and go on where the download stopped.
                    reauthed = true;
                    if let Err(e) = self
                        .client
                        .auth(&r, &self.auth, oci_client::RegistryOperation::Pull)
                        .await
                    {
                        let (Failure::Retry(e) | Failure::Fatal(e)) = self.classify(&what, e);
                        return Err(e);
                    }
                }
                Failure::Retry(e) => {
                    self.before_retry(e, attempt).await?;
                    attempt += 1;
                }
                Failure::Fatal(e) => return Err(e),
            }
        }
        let received = part.received;
        part.commit(desc, &final_path, &self.image.registry)?;
        drop(lock);
        Ok((final_path, Some(received)))
    }

    /// One request for the rest of blob `desc`, appended to `part`. `None`: the blob is whole;
    /// `Some`: the request failed, to be sorted by [`Self::classify`]; `Err`: the cache's file
    /// could not be written.
    async fn download_once(
        &self,
        r: &oci_client::Reference,
        desc: &Descriptor,
        part: &mut PartialBlob,
        on_bytes: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<Option<OciDistributionError>, RegistryError> {
        let res = self
            .client
            .pull_blob_stream_partial(r, desc.digest.as_str(), part.have, None)
            .await;
        let stream = match res {
            Ok(oci_client::client::BlobResponse::Partial(s)) => s,
            Ok(oci_client::client::BlobResponse::Full(s)) => {
                // The server ignored the range: start over.
                if part.have > 0 {
                    part.restart()?;
                }
                s
            }
            Err(e) => return Ok(Some(e)),
        };
        let mut stream = stream.stream;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => {
                    part.append(&b)?;
                    on_bytes(b.len() as u64);
                }
                Err(e) => return Ok(Some(OciDistributionError::IoError(e))),
            }
        }
        if desc.size == 0 || part.have >= desc.size {
            return Ok(None);
        }
        Ok(Some(OciDistributionError::IoError(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "connection closed after {} of {} bytes",
                part.have, desc.size
            ),
        ))))
    }
}

/// A blob being downloaded into the cache's `.partial` file, hashed as it grows.
struct PartialBlob {
    file: File,
    path: PathBuf,
    hasher: Sha256,
    /// Bytes in the file.
    have: u64,
    /// Bytes received by this process (not those a resumed download already had).
    received: u64,
}

impl PartialBlob {
    /// The `.partial` file at `path`, with what an interrupted download left in it (dropped
    /// when longer than the blob's `size`).
    fn open(path: PathBuf, cache: &Cache, size: u64) -> Result<PartialBlob, RegistryError> {
        // A file of this cache's own (never through a link), appended to where it ends.
        let mut file = crate::store::private_dir::open_or_create(&path, cache.file_mode())
            .map_err(|e| io_err(&path, e))?;
        let (hasher, have) = hash_file(&mut file).map_err(|e| io_err(&path, e))?;
        let mut part = PartialBlob {
            file,
            path,
            hasher,
            have,
            received: 0,
        };
        if size > 0 && part.have > size {
            part.restart()?;
        }
        Ok(part)
    }

    /// Empty the file and start the hash over.
    fn restart(&mut self) -> Result<(), RegistryError> {
        self.file
            .set_len(0)
            .and_then(|_| self.file.rewind())
            .map_err(|e| io_err(&self.path, e))?;
        self.hasher = Sha256::new();
        self.have = 0;
        Ok(())
    }

    fn append(&mut self, b: &[u8]) -> Result<(), RegistryError> {
        self.file.write_all(b).map_err(|e| io_err(&self.path, e))?;
        self.hasher.update(b);
        self.have += b.len() as u64;
        self.received += b.len() as u64;
        Ok(())
    }

    /// The whole blob, checked against `desc`, moved to `final_path`; a mismatch removes it.
    fn commit(
        self,
        desc: &Descriptor,
        final_path: &Path,
        registry: &str,
    ) -> Result<(), RegistryError> {
        self.file.sync_all().map_err(|e| io_err(&self.path, e))?;
        let actual = format!("sha256:{}", hex::encode(self.hasher.finalize()));
        if actual != desc.digest || (desc.size > 0 && self.have != desc.size) {
            let _ = fs::remove_file(&self.path);
            return Err(RegistryError::Digest {
                registry: registry.to_string(),
                digest: desc.digest.clone(),
                actual,
            });
        }
        fs::rename(&self.path, final_path).map_err(|e| io_err(final_path, e))
    }
}

/// What the error codes of a registry's error envelope come to, the first that applies.
#[derive(Debug, PartialEq, Eq)]
enum EnvelopeKind {
    NotFound,
    Auth,
    RateLimited,
    Other,
}

fn envelope_kind(codes: &[&OciErrorCode]) -> EnvelopeKind {
    use OciErrorCode as C;
    let any = |f: fn(&OciErrorCode) -> bool| codes.iter().any(|c| f(c));
    if any(|c| {
        matches!(
            c,
            C::ManifestUnknown | C::NameUnknown | C::BlobUnknown | C::NotFound
        )
    }) {
        EnvelopeKind::NotFound
    } else if any(|c| matches!(c, C::Unauthorized | C::Denied)) {
        EnvelopeKind::Auth
    } else if any(|c| matches!(c, C::Toomanyrequests)) {
        EnvelopeKind::RateLimited
    } else {
        EnvelopeKind::Other
    }
}

/// sha256 state and length of what an interrupted download already wrote; `f` is left at its end.
fn hash_file(f: &mut File) -> io::Result<(Sha256, u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf)?;
        if k == 0 {
            return Ok((h, n));
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
}

fn first_line(s: &str) -> &str {
    let l = s.lines().next().unwrap_or("").trim();
    &l[..l.len().min(200)]
}

/// reqwest's Display hides the cause ("error sending request"); the cause is what helps.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_kinds() {
        use OciErrorCode as C;
        for (codes, kind) in [
            (vec![C::ManifestUnknown], EnvelopeKind::NotFound),
            (vec![C::Denied, C::BlobUnknown], EnvelopeKind::NotFound),
            (vec![C::Unauthorized], EnvelopeKind::Auth),
            (vec![C::Toomanyrequests, C::Denied], EnvelopeKind::Auth),
            (vec![C::Toomanyrequests], EnvelopeKind::RateLimited),
            (vec![C::Unsupported], EnvelopeKind::Other),
            (vec![], EnvelopeKind::Other),
        ] {
            let refs: Vec<&OciErrorCode> = codes.iter().collect();
            assert_eq!(envelope_kind(&refs), kind, "{codes:?}");
        }
    }

    fn creds(u: &str, p: &str) -> AuthEntry {
        AuthEntry::Creds(Credentials {
            username: u.into(),
            password: p.into(),
        })
    }

    #[test]
    fn retry_after_values() {
        for (v, want) in [
            ("3", Some(3)),
            (" 120 ", Some(120)),
            ("0", Some(0)),
            ("Wed, 21 Oct 2026 07:28:00 GMT", None),
            ("-1", None),
            ("", None),
        ] {
            assert_eq!(parse_retry_after(v), want.map(Duration::from_secs), "{v:?}");
        }
    }

    #[test]
    fn auth_files() {
        // "dTpw" = base64("u:p"), "YWxpY2U6czNjcjN0Oi0p" = base64("alice:s3cr3t:-)")
        let cases: Vec<(&str, &str, AuthEntry)> = vec![
            (
                r#"{"auths":{"https://index.docker.io/v1/":{"auth":"dTpw"}}}"#,
                "docker.io",
                creds("u", "p"),
            ),
            (
                r#"{"auths":{"docker.io":{"auth":"YWxpY2U6czNjcjN0Oi0p"}}}"#,
                "docker.io",
                creds("alice", "s3cr3t:-)"),
            ),
            (
                r#"{"auths":{"nvcr.io":{"auth":"dTpw"}}}"#,
                "docker.io",
                AuthEntry::Nothing,
            ),
            (
                r#"{"auths":{"http://127.0.0.1:5001":{"username":"a","password":"b"}}}"#,
                "127.0.0.1:5001",
                creds("a", "b"),
            ),
            (
                r#"{"auths":{"127.0.0.1:5001":{"auth":"dTpw"}}}"#,
                "127.0.0.1:5000",
                AuthEntry::Nothing,
            ),
            (
                r#"{"auths":{"nvcr.io":{"auth":"dTpw"}},"credsStore":"desktop"}"#,
                "ghcr.io",
                AuthEntry::Helper("desktop".into()),
            ),
            (
                r#"{"auths":{"nvcr.io":{"auth":"dTpw"}},"credsStore":"desktop"}"#,
                "nvcr.io",
                creds("u", "p"),
            ),
            (
                r#"{"credHelpers":{"gcr.io":"gcloud"},"auths":{"gcr.io":{"auth":"dTpw"}}}"#,
                "gcr.io",
                AuthEntry::Helper("gcloud".into()),
            ),
            (r#"{}"#, "docker.io", AuthEntry::Nothing),
            (
                r#"{"auths":{"docker.io":{}}}"#,
                "docker.io",
                AuthEntry::Nothing,
            ),
        ];
        for (json, reg, want) in cases {
            assert_eq!(
                parse_auth_file(json.as_bytes(), reg),
                Ok(want),
                "{json} / {reg}"
            );
        }
        assert!(parse_auth_file(b"not json", "x").is_err());
        assert!(parse_auth_file(br#"{"auths":{"x":{"auth":"!!"}}}"#, "x").is_err());
        assert!(parse_auth_file(br#"{"auths":{"x":{"auth":"bm9jb2xvbg=="}}}"#, "x").is_err());
    }

    #[test]
    fn secrets_are_redacted() {
        let c = Credentials {
            username: "alice".into(),
            password: "hunter2".into(),
        };
        let d = format!(
            "{c:?} {:?} {:?}",
            AuthEntry::Creds(c.clone()),
            AuthSources {
                env: Some(c.clone()),
                files: vec![]
            }
        );
        assert!(d.contains("alice") && !d.contains("hunter2"), "{d}");
    }

    #[test]
    fn base64() {
        for (enc, dec) in [
            ("", ""),
            ("YQ==", "a"),
            ("YWI=", "ab"),
            ("YWJj", "abc"),
            ("YWJjZA", "abcd"),
        ] {
            assert_eq!(base64_decode(enc).unwrap(), dec.as_bytes(), "{enc}");
        }
        assert!(base64_decode("a b").is_none());
    }

    fn entry(p: &str) -> Descriptor {
        let pl = Platform::parse(p).unwrap();
        Descriptor {
            media_type: String::new(),
            digest: format!("d-{p}"),
            size: 0,
            platform: Some(pl),
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn platforms() {
        let idx = vec![
            entry("linux/amd64"),
            entry("linux/arm/v7"),
            entry("linux/arm64/v8"),
            entry("linux/ppc64le"),
            entry("unknown/unknown"),
        ];
        let cases = [
            ("linux/amd64", Some("linux/amd64")),
            ("linux/arm64", Some("linux/arm64/v8")),
            ("linux/arm64/v8", Some("linux/arm64/v8")),
            ("linux/aarch64", Some("linux/arm64/v8")),
            ("linux/x86_64", Some("linux/amd64")),
            ("linux/arm", Some("linux/arm/v7")),
            ("linux/arm/v7", Some("linux/arm/v7")),
            ("linux/arm/v6", None),
            ("windows/amd64", None),
            ("linux/s390x", None),
        ];
        for (want, got) in cases {
            let r = choose_platform(&idx, &Platform::parse(want).unwrap());
            assert_eq!(
                r.ok().map(|d| d.digest.clone()),
                got.map(|g| format!("d-{g}")),
                "{want}"
            );
        }
        // An arm64 entry without variant is v8.
        let bare = vec![entry("linux/arm64")];
        assert!(choose_platform(&bare, &Platform::parse("linux/arm64/v8").unwrap()).is_ok());
        let err = choose_platform(&idx, &Platform::parse("linux/riscv64").unwrap()).unwrap_err();
        assert_eq!(
            err,
            "linux/amd64, linux/arm/v7, linux/arm64/v8, linux/ppc64le"
        );
        for bad in ["linux", "linux/", "/amd64", "a/b/c/d"] {
            assert!(Platform::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn http_only_for_loopback_or_insecure() {
        let r = |s: &str| crate::image::reference::parse_docker(s).unwrap();
        assert!(plain_http(&r("127.0.0.1:5000/a"), false));
        assert!(plain_http(&r("localhost:5000/a"), false));
        assert!(!plain_http(&r("nvcr.io/nvidia/pytorch:1"), false));
        assert!(!plain_http(&r("ubuntu"), false));
        assert!(plain_http(&r("registry.lan:5000/a"), true));
    }

    #[test]
    fn manifest_kinds() {
        let idx = Manifest::parse(br#"{"schemaVersion":2,"manifests":[{"digest":"x","size":1}]}"#)
            .unwrap();
        assert!(idx.is_index());
        let m = Manifest::parse(br#"{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"digest":"c","size":2},"layers":[{"digest":"l","size":3}]}"#).unwrap();
        assert!(!m.is_index());
        assert_eq!(m.layers[0].digest, "l");
    }
}

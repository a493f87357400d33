//! Requests to a registry through oci-client: retries with backoff (and a 429's Retry-After),
//! each failure sorted into what the user can act on, manifests fetched.

use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;

use super::credentials::Found;
use super::error::RegistryError;
use super::manifest::MANIFEST_MEDIA_TYPES;
use crate::image::reference::{valid_digest, ImageRef};

/// Attempts per request; connection errors, 5xx and 429 are retried with exponential backoff.
const ATTEMPTS: u32 = 5;
const BACKOFF_BASE: Duration = Duration::from_millis(400);
/// The longest a 429's Retry-After is waited for within one pull.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Retry-After in delay-seconds (what registries send); an HTTP-date counts as absent.
fn parse_retry_after(v: &str) -> Option<Duration> {
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Docker's rule: plain http only for loopback registries, or when the user says `--insecure`.
pub fn plain_http(image: &ImageRef, insecure: bool) -> bool {
    insecure || image.is_loopback()
}

pub struct RegistryClient {
    pub(super) client: oci_client::Client,
    pub(super) auth: RegistryAuth,
    /// Where the credentials in `auth` were found, when there are some.
    creds_from: Option<String>,
    pub(super) image: ImageRef,
    attempts: u32,
}

pub(super) enum Failure {
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

    pub(super) fn oref(&self, tag_or_digest: &str) -> oci_client::Reference {
        let (reg, repo) = (self.image.registry.clone(), self.image.repository.clone());
        if valid_digest(tag_or_digest) {
            oci_client::Reference::with_digest(reg, repo, tag_or_digest.to_string())
        } else {
            oci_client::Reference::with_tag(reg, repo, tag_or_digest.to_string())
        }
    }

    /// Sort an oci-client error into what the user can act on.
    pub(super) fn classify(&self, what: &str, e: OciDistributionError) -> Failure {
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
    pub(super) async fn before_retry(
        &self,
        e: RegistryError,
        attempt: u32,
    ) -> Result<(), RegistryError> {
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
    fn http_only_for_loopback_or_insecure() {
        let r = |s: &str| crate::image::reference::parse_docker(s).unwrap();
        assert!(plain_http(&r("127.0.0.1:5000/a"), false));
        assert!(plain_http(&r("localhost:5000/a"), false));
        assert!(!plain_http(&r("nvcr.io/nvidia/pytorch:1"), false));
        assert!(!plain_http(&r("ubuntu"), false));
        assert!(plain_http(&r("registry.lan:5000/a"), true));
    }
}

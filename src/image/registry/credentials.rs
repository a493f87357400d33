//! Credentials for a registry: the environment, docker config.json and containers auth.json
//! (only files nobody else may change), and docker credential helpers.

use std::collections::BTreeMap;
use std::fmt;

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::{AuthFileError, RegistryError};
use crate::image::reference::DOCKER_HUB;

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
pub fn parse_auth_file(json: &[u8], registry: &str) -> Result<AuthEntry, AuthFileError> {
    let f: AuthFile = serde_json::from_slice(json)?;
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
            let raw = base64_decode(a).ok_or(AuthFileError::NotBase64)?;
            let s = String::from_utf8(raw).map_err(|_| AuthFileError::NotUtf8)?;
            let (u, p) = s.split_once(':').ok_or(AuthFileError::NoColon)?;
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
                parse_auth_file(&bytes, registry).map_err(|source| RegistryError::AuthFile {
                    registry: registry.to_string(),
                    file: f.clone(),
                    source,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(u: &str, p: &str) -> AuthEntry {
        AuthEntry::Creds(Credentials {
            username: u.into(),
            password: p.into(),
        })
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
                parse_auth_file(json.as_bytes(), reg).ok(),
                Some(want),
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
}

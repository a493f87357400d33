//! What the plugin hands `gpurun hold` parsed besides its binds: the home directory
//! (`--home-json`) and each tmpfs (`--tmpfs-json`), in JSON, so that a path holding ':' or ','
//! arrives intact where the text of `--home SRC:DST` and `--tmpfs DST:OPTS` would split it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{normalize, TMPFS_KEYS, TMPFS_SWITCHES};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HandoverError {
    #[error("--{flag}: {path:?} must be an absolute path")]
    NotAbsolute { flag: &'static str, path: PathBuf },
    #[error("--tmpfs-json: a tmpfs at / would hide the container's root")]
    AtRoot,
    #[error("--tmpfs-json: unknown option {0:?}")]
    UnknownOption(String),
}

/// The home directory: the source on the host, the home inside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Home {
    pub src: PathBuf,
    pub dst: PathBuf,
}

/// A fresh tmpfs at `dst`; its options by name (gpurun reads their values).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tmpfs {
    pub dst: PathBuf,
    pub opts: Vec<String>,
}

fn absolute(flag: &'static str, p: &Path) -> Result<PathBuf, HandoverError> {
    match p.is_absolute() {
        true => Ok(normalize(p)),
        false => Err(HandoverError::NotAbsolute {
            flag,
            path: p.to_path_buf(),
        }),
    }
}

impl Home {
    /// Both paths absolute, taken normalised.
    pub fn checked(self) -> Result<Home, HandoverError> {
        let src = absolute("home-json", &self.src)?;
        let dst = absolute("home-json", &self.dst)?;
        Ok(Home { src, dst })
    }
}

impl Tmpfs {
    /// An absolute destination other than `/`, taken normalised; each option a tmpfs switch
    /// or `KEY=VALUE` of a known key.
    pub fn checked(self) -> Result<Tmpfs, HandoverError> {
        let dst = absolute("tmpfs-json", &self.dst)?;
        if dst == Path::new("/") {
            return Err(HandoverError::AtRoot);
        }
        let known = |o: &str| {
            TMPFS_SWITCHES.contains(&o)
                || o.split_once('=')
                    .is_some_and(|(k, _)| TMPFS_KEYS.contains(&k))
        };
        if let Some(o) = self.opts.iter().find(|o| !known(o)) {
            return Err(HandoverError::UnknownOption(o.clone()));
        }
        Ok(Tmpfs { dst, ..self })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Paths with ':' and ',' pass through JSON intact and normalised; relative paths, a tmpfs
    /// at /, an unknown option, an unknown or repeated field are refused.
    #[test]
    fn handed_over_intact_or_refused() {
        let home = Home {
            src: "/h/a:b,c/./d".into(),
            dst: "/root/../x:y".into(),
        };
        let back: Home = serde_json::from_str(&serde_json::to_string(&home).unwrap()).unwrap();
        let back = back.checked().unwrap();
        assert_eq!(
            (back.src.to_str(), back.dst.to_str()),
            (Some("/h/a:b,c/d"), Some("/x:y"))
        );
        let t = Tmpfs {
            dst: "/t:u,v".into(),
            opts: vec!["size=1G".into(), "mode=700".into(), "ro".into()],
        };
        let back: Tmpfs = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back.checked(), Ok(t));
        for bad in [
            r#"{"src":"rel","dst":"/d"}"#,
            r#"{"src":"/s","dst":"d"}"#,
            r#"{"src":"/s","dst":"/d","readonly":true}"#,
            r#"{"src":"/s","dst":"/d","dst":"/etc"}"#,
            r#"{"src":"/s"}"#,
        ] {
            let h = serde_json::from_str::<Home>(bad).map(|h| h.checked());
            assert!(!matches!(h, Ok(Ok(_))), "{bad}");
        }
        for bad in [
            r#"{"dst":"t","opts":[]}"#,
            r#"{"dst":"/","opts":[]}"#,
            r#"{"dst":"/a/..","opts":[]}"#,
            r#"{"dst":"/t","opts":["suid"]}"#,
            r#"{"dst":"/t","opts":["uid=0"]}"#,
        ] {
            let t = serde_json::from_str::<Tmpfs>(bad).map(|t| t.checked());
            assert!(!matches!(t, Ok(Ok(_))), "{bad}");
        }
    }
}

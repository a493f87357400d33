//! gpurun's `--bind SRC[:DST[:FLAGS]]`, or `SRC:FLAGS` (a comma list is split before): DST
//! absolute, SRC taken from the working directory.

use std::path::Path;

use crate::{bind_flag, normalize, Bind, MountFlags, BIND_FLAGS_TEXT};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BindError {
    #[error("--bind {0:?}: too many ':'; use SRC[:DST[:FLAGS]]")]
    TooManyParts(String),
    #[error("--bind {0:?}: empty path; use SRC[:DST[:FLAGS]]")]
    EmptyPath(String),
    #[error("--bind {0:?}: DST must be an absolute path inside the container")]
    RelativeDst(String),
    #[error("--bind {0:?}: unknown flag {1:?}; use {BIND_FLAGS_TEXT}, joined with '+'")]
    UnknownFlag(String, String),
    #[error("--bind-json: {0:?} must be an absolute path")]
    NotAbsolute(std::path::PathBuf),
}

/// Parse one `--bind` item; a relative SRC is taken from `cwd`, both paths normalised.
pub fn parse_bind(spec: &str, cwd: &Path) -> Result<Bind, BindError> {
    let parts: Vec<&str> = spec.split(':').collect();
    let (src, dst, flags) = match parts.as_slice() {
        [s] => (*s, *s, None),
        [s, f] if !f.starts_with('/') && bind_flags(spec, f).is_ok() => (*s, *s, Some(*f)),
        [s, d] => (*s, *d, None),
        [s, d, f] => (*s, *d, Some(*f)),
        _ => return Err(BindError::TooManyParts(spec.into())),
    };
    if src.is_empty() || dst.is_empty() {
        return Err(BindError::EmptyPath(spec.into()));
    }
    if !dst.starts_with('/') {
        return Err(BindError::RelativeDst(spec.into()));
    }
    let (readonly, flags) = match flags {
        Some(f) => bind_flags(spec, f)?,
        None => (false, MountFlags::default()),
    };
    Ok(Bind {
        flags,
        ..Bind::new(
            normalize(&cwd.join(src)),
            normalize(Path::new(dst)),
            readonly,
        )
    })
}

impl Bind {
    /// A bind handed over parsed already (`gpurun hold --bind-json`): both paths must be
    /// absolute, and are taken normalised; they may hold ':' or ',', which `--bind` splits at.
    pub fn checked(self) -> Result<Bind, BindError> {
        for p in [&self.src, &self.dst] {
            if !p.is_absolute() {
                return Err(BindError::NotAbsolute(p.clone()));
            }
        }
        let (src, dst) = (normalize(&self.src), normalize(&self.dst));
        Ok(Bind { src, dst, ..self })
    }
}

/// FLAGS (`text`, of the item `spec`) joined with '+': read-only or not, and the rest; the
/// first unknown one is the error.
fn bind_flags(spec: &str, text: &str) -> Result<(bool, MountFlags), BindError> {
    let (mut readonly, mut flags) = (false, MountFlags::default());
    match text
        .split('+')
        .find(|f| !bind_flag(f, &mut readonly, &mut flags))
    {
        Some(unknown) => Err(BindError::UnknownFlag(spec.into(), unknown.into())),
        None => Ok((readonly, flags)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PointKind, Propagation, PropagationKind};

    fn prop(kind: PropagationKind, recursive: bool) -> Option<Propagation> {
        Some(Propagation { kind, recursive })
    }

    /// Each spec parses to its bind, which passes through JSON unchanged (as the plugin hands it
    /// to `gpurun hold`).
    #[test]
    fn bind_specs() {
        let cwd = Path::new("/work");
        let plain = MountFlags::default();
        let with = |f: fn(&mut MountFlags)| {
            let mut m = MountFlags::default();
            f(&mut m);
            m
        };
        // (spec, (src, dst, read-only, flags))
        type Case<'a> = (&'a str, (&'a str, &'a str, bool, MountFlags));
        let ok: Vec<Case> = vec![
            ("/a", ("/a", "/a", false, plain)),
            ("/a:/b", ("/a", "/b", false, plain)),
            ("/a:/b:ro", ("/a", "/b", true, plain)),
            ("/a:/b:rw", ("/a", "/b", false, plain)),
            ("/a:ro", ("/a", "/a", true, plain)),
            ("/a:nodev+ro", ("/a", "/a", true, with(|f| f.nodev = true))),
            ("rel/x:/x", ("/work/rel/x", "/x", false, plain)),
            ("/a/../c/./d:/e/", ("/c/d", "/e", false, plain)),
            (
                "/a:/b:ro+nosuid+nodev+noexec+rbind",
                ("/a", "/b", true, {
                    with(|f| (f.nosuid, f.nodev, f.noexec) = (true, true, true))
                }),
            ),
            (
                "/a:/b:x-create=file+rslave",
                ("/a", "/b", false, {
                    with(|f| {
                        f.create = Some(PointKind::File);
                        f.propagation = prop(PropagationKind::Slave, true);
                    })
                }),
            ),
            (
                "/a:/b:x-create=dir+x-create=auto+unbindable",
                ("/a", "/b", false, {
                    with(|f| f.propagation = prop(PropagationKind::Unbindable, false))
                }),
            ),
        ];
        for (spec, (s, d, ro, flags)) in ok {
            let b = parse_bind(spec, cwd).unwrap_or_else(|e| panic!("{spec}: {e}"));
            assert_eq!(
                b,
                Bind {
                    flags,
                    ..Bind::new(s, d, ro)
                },
                "{spec}"
            );
            let json = serde_json::to_string(&b).unwrap();
            let back: Bind = serde_json::from_str(&json).unwrap();
            assert_eq!(back.checked(), Ok(b), "{spec} → {json}");
        }
        // (spec, what the error says)
        for (bad, says) in [
            ("/a:/b:rx", "unknown flag \"rx\"; use ro, rw, nosuid"),
            ("/a:/b:ro+nodevv", "unknown flag \"nodevv\""),
            ("/a:/b:x-create=pipe", "unknown flag \"x-create=pipe\""),
            ("/a:/b:", "unknown flag \"\""),
            ("/a:rel", "DST must be an absolute path"),
            (":/b", "empty path"),
            ("/a:/b:ro:x", "too many ':'"),
            ("/a:", "empty path"),
        ] {
            let e = parse_bind(bad, cwd).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--bind {bad:?}: ")), "{e}");
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    /// A bind handed over checked: absolute paths, normalised, ':' and ',' kept.
    #[test]
    fn checked_binds() {
        let b = Bind::new("/w/a:b,c/./d", "/data/../e:f", true)
            .checked()
            .unwrap();
        assert_eq!(
            (b.src.to_str(), b.dst.to_str()),
            (Some("/w/a:b,c/d"), Some("/e:f"))
        );
        for (src, dst) in [("rel", "/d"), ("/s", "d")] {
            let e = Bind::new(src, dst, false)
                .checked()
                .unwrap_err()
                .to_string();
            assert!(e.contains("must be an absolute path"), "{e}");
        }
    }
}

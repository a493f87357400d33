//! `--bind SRC[:DST[:FLAGS]]` and `--tmpfs DST[:OPTS]` as mounts. FLAGS are enroot's fstab
//! flags joined with '+' (commas separate binds): `ro`, `nodev`, `rslave`, `x-create=dir`…; a
//! tmpfs's OPTS are docker's `--tmpfs` ones (`size=`, `mode=`), comma- or '+'-separated. Pure.

use std::path::{Component, Path, PathBuf};

use crate::mount::{Mount, MountFlags, MountSource, PointKind, Propagation, PropagationKind};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("--bind {0:?}: {1}")]
    Bind(String, String),
    #[error("--tmpfs {0:?}: {1}")]
    Tmpfs(String, String),
}

/// The flags a bind takes, for the error that names one it does not.
const BIND_FLAGS: &str = "ro, rw, nosuid, nodev, noexec, [r]private, [r]slave, [r]shared, \
                          [r]unbindable, x-create=dir|file|auto";

/// Parse one `--bind` item: `SRC[:DST[:FLAGS]]`, or `SRC:FLAGS` (a comma list is split before).
/// SRC is taken from `cwd`.
pub fn parse_bind(spec: &str, cwd: &Path) -> Result<Mount, SpecError> {
    let err = |why: &str| SpecError::Bind(spec.to_string(), why.to_string());
    let parts: Vec<&str> = spec.split(':').collect();
    let (src, dst, flags) = match parts.as_slice() {
        [s] => (*s, *s, None),
        [s, f] if !f.starts_with('/') && bind_flags(f).is_ok() => (*s, *s, Some(*f)),
        [s, d] => (*s, *d, None),
        [s, d, f] => (*s, *d, Some(*f)),
        _ => return Err(err("too many ':'; use SRC[:DST[:FLAGS]]")),
    };
    if src.is_empty() || dst.is_empty() {
        return Err(err("empty path; use SRC[:DST[:FLAGS]]"));
    }
    if !dst.starts_with('/') {
        return Err(err("DST must be an absolute path inside the container"));
    }
    let (readonly, flags) = match flags {
        Some(f) => bind_flags(f).map_err(|e| SpecError::Bind(spec.to_string(), e))?,
        None => (false, MountFlags::default()),
    };
    let mut m = Mount::bind(
        normalize(&cwd.join(src)),
        normalize(Path::new(dst)),
        readonly,
    );
    m.flags = flags;
    Ok(m)
}

/// FLAGS joined with '+': read-only or not, and the rest.
fn bind_flags(text: &str) -> Result<(bool, MountFlags), String> {
    let mut readonly = false;
    let mut f = MountFlags::default();
    for flag in text.split('+') {
        match flag {
            "ro" => readonly = true,
            "rw" => readonly = false,
            // every bind is recursive (pyxis gives rbind)
            "rbind" => {}
            "nosuid" => f.nosuid = true,
            "nodev" => f.nodev = true,
            "noexec" => f.noexec = true,
            "x-create=dir" => f.create = Some(PointKind::Dir),
            "x-create=file" => f.create = Some(PointKind::File),
            "x-create=auto" => f.create = None,
            p => {
                let unknown = || format!("unknown flag {p:?}; use {BIND_FLAGS}, joined with '+'");
                f.propagation = Some(propagation(p).ok_or_else(unknown)?);
            }
        }
    }
    Ok((readonly, f))
}

/// `private`, `rslave`…
fn propagation(flag: &str) -> Option<Propagation> {
    let (recursive, name) = match flag.strip_prefix('r') {
        Some(n) => (true, n),
        None => (false, flag),
    };
    let kind = match name {
        "private" => PropagationKind::Private,
        "slave" => PropagationKind::Slave,
        "shared" => PropagationKind::Shared,
        "unbindable" => PropagationKind::Unbindable,
        _ => return None,
    };
    Some(Propagation { kind, recursive })
}

/// Parse one `--tmpfs DST[:OPTS]`: a fresh tmpfs at DST (mode 1777 unless `mode=`), OPTS
/// `size=N` (500M, 2G…), `mode=OCTAL`, `huge=POLICY`, `ro`, `rw`, `nosuid`, `nodev`, `noexec`.
pub fn parse_tmpfs(spec: &str) -> Result<Mount, SpecError> {
    let err = |why: String| SpecError::Tmpfs(spec.to_string(), why);
    let (dst, opts) = spec.split_once(':').unwrap_or((spec, ""));
    if !dst.starts_with('/') || normalize(Path::new(dst)) == Path::new("/") {
        return Err(err(
            "DST must be an absolute path inside the container, not /".into(),
        ));
    }
    let mut m = Mount {
        dst: normalize(Path::new(dst)),
        source: MountSource::tmpfs(0o1777),
        readonly: false,
        optional: false,
        flags: MountFlags::default(),
    };
    for opt in opts.split([',', '+']).filter(|o| !o.is_empty()) {
        tmpfs_option(&mut m, opt).map_err(err)?;
    }
    Ok(m)
}

/// tmpfs's huge page policies (the kernel's `huge=` mount option).
const HUGE: [&str; 4] = ["never", "always", "within_size", "advise"];

fn tmpfs_option(m: &mut Mount, opt: &str) -> Result<(), String> {
    let MountSource::Tmpfs { mode, size, huge } = &mut m.source else {
        unreachable!("a tmpfs")
    };
    match opt.split_once('=') {
        Some(("size", v)) => *size = Some(crate::units::parse_size(v)?),
        Some(("huge", v)) if HUGE.contains(&v) => *huge = Some(v.to_string()),
        Some(("huge", v)) => {
            return Err(format!("huge={v}: give one of {}", HUGE.join(", ")));
        }
        Some(("mode", v)) => {
            *mode = u32::from_str_radix(v, 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| format!("mode={v}: give an octal mode such as 1777 or 755"))?
        }
        _ => match opt {
            "ro" => m.readonly = true,
            "rw" => m.readonly = false,
            "nosuid" => m.flags.nosuid = true,
            "nodev" => m.flags.nodev = true,
            "noexec" => m.flags.noexec = true,
            _ => {
                return Err(format!(
                    "unknown option {opt:?}; use size=N, mode=OCTAL, huge=POLICY, ro, rw, nosuid, nodev, noexec"
                ))
            }
        },
    }
    Ok(())
}

/// Lexical normalisation (`a/./b/../c` → `a/c`); the kernel resolves symlinks later, inside the
/// container root.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prop(kind: PropagationKind, recursive: bool) -> Option<Propagation> {
        Some(Propagation { kind, recursive })
    }

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
            let m = parse_bind(spec, cwd).unwrap_or_else(|e| panic!("{spec}: {e}"));
            let want = Mount {
                flags,
                ..Mount::bind(s, d, ro)
            };
            assert_eq!(m, want, "{spec}");
        }
        // (spec, what the error says)
        for (bad, says) in [
            ("/a:/b:rx", "unknown flag \"rx\"; use ro, rw, nosuid"),
            ("/a:/b:ro+nodevv", "unknown flag \"nodevv\""),
            ("/a:/b:x-create=pipe", "unknown flag \"x-create=pipe\""),
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

    #[test]
    fn every_propagation() {
        use PropagationKind::*;
        for (flag, kind) in [
            ("private", Private),
            ("slave", Slave),
            ("shared", Shared),
            ("unbindable", Unbindable),
        ] {
            assert_eq!(propagation(flag), prop(kind, false), "{flag}");
            assert_eq!(
                propagation(&format!("r{flag}")),
                prop(kind, true),
                "r{flag}"
            );
        }
        assert_eq!(propagation("rr"), None);
        assert_eq!(propagation("ivate"), None);
    }

    #[test]
    fn tmpfs_specs() {
        // (spec, dst, mode, size, read-only, noexec)
        type Case<'a> = (&'a str, &'a str, u32, Option<u64>, bool, bool);
        let ok: &[Case] = &[
            ("/scratch", "/scratch", 0o1777, None, false, false),
            ("/s:huge=within_size", "/s", 0o1777, None, false, false),
            ("/s/", "/s", 0o1777, None, false, false),
            ("/s:size=64M", "/s", 0o1777, Some(64 << 20), false, false),
            (
                "/s:size=1G,mode=700,noexec",
                "/s",
                0o700,
                Some(1 << 30),
                false,
                true,
            ),
            ("/s:mode=755+ro", "/s", 0o755, None, true, false),
        ];
        for (spec, dst, mode, size, ro, noexec) in ok {
            let m = parse_tmpfs(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
            assert_eq!(m.dst, Path::new(dst), "{spec}");
            assert_eq!(
                m.source,
                MountSource::Tmpfs {
                    mode: *mode,
                    size: *size,
                    huge: spec.contains("huge=").then(|| "within_size".into()),
                },
                "{spec}"
            );
            assert_eq!((m.readonly, m.flags.noexec), (*ro, *noexec), "{spec}");
        }
        for (bad, says) in [
            ("rel", "absolute path"),
            ("/", "not /"),
            ("/s:size=lots", "unknown unit"),
            ("/s:size=-1", "not a size"),
            ("/s:mode=999", "octal mode"),
            ("/s:huge=yes", "huge=yes: give one of never, always"),
            ("/s:uid=0", "unknown option \"uid=0\""),
        ] {
            let e = parse_tmpfs(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--tmpfs {bad:?}: ")), "{e}");
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}

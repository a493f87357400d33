//! `--bind SRC[:DST[:FLAGS]]` and `--tmpfs DST[:OPTS]` as mounts. A bind's grammar is the
//! `mount-grammar` crate's, which the plugin's `--container-mounts` shares: FLAGS are enroot's
//! fstab flags joined with '+' (commas separate binds): `ro`, `nodev`, `rslave`,
//! `x-create=dir`…; a tmpfs's OPTS are docker's `--tmpfs` ones (`size=`, `mode=`), comma- or
//! '+'-separated. Pure.

use std::path::Path;

use mount_grammar::bind::BindError;
pub use mount_grammar::normalize;
use mount_grammar::{tmpfs_switch, TMPFS_SWITCHES};

use crate::mount::{Mount, MountFlags, MountSource};
use crate::units::UnitsError;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error(transparent)]
    Bind(#[from] BindError),
    #[error("--tmpfs {spec:?}: DST must be an absolute path inside the container, not /")]
    TmpfsDst { spec: String },
    #[error("--tmpfs {spec:?}: {source}")]
    TmpfsSize { spec: String, source: UnitsError },
    #[error("--tmpfs {spec:?}: huge={value}: give one of {}", HUGE.join(", "))]
    TmpfsHuge { spec: String, value: String },
    #[error("--tmpfs {spec:?}: mode={value}: give an octal mode such as 1777 or 755")]
    TmpfsMode { spec: String, value: String },
    #[error("--tmpfs {spec:?}: unknown option {option:?}; use size=N, mode=OCTAL, huge=POLICY, {}", TMPFS_SWITCHES.join(", "))]
    TmpfsOption { spec: String, option: String },
}

/// Parse one `--bind` item: `SRC[:DST[:FLAGS]]`, or `SRC:FLAGS` (a comma list is split before).
/// SRC is taken from `cwd`.
pub fn parse_bind(spec: &str, cwd: &Path) -> Result<Mount, SpecError> {
    Ok(bind_mount(mount_grammar::bind::parse_bind(spec, cwd)?))
}

/// A parsed bind (`--bind`'s, or the plugin's `hold --bind-json`) as a mount.
pub fn bind_mount(b: mount_grammar::Bind) -> Mount {
    Mount {
        flags: b.flags,
        ..Mount::bind(b.src, b.dst, b.readonly)
    }
}

/// Parse one `--tmpfs DST[:OPTS]`: a fresh tmpfs at DST (mode 1777 unless `mode=`), OPTS
/// `size=N` (500M, 2G…), `mode=OCTAL`, `huge=POLICY`, `ro`, `rw`, `nosuid`, `nodev`, `noexec`.
pub fn parse_tmpfs(spec: &str) -> Result<Mount, SpecError> {
    let (dst, opts) = spec.split_once(':').unwrap_or((spec, ""));
    let opts: Vec<&str> = opts.split([',', '+']).filter(|o| !o.is_empty()).collect();
    tmpfs_mount(spec, Path::new(dst), &opts)
}

/// A tmpfs at `dst` with `opts` (`--tmpfs`'s, or the plugin's `hold --tmpfs-json`); `spec`
/// names it in an error.
pub fn tmpfs_mount(spec: &str, dst: &Path, opts: &[&str]) -> Result<Mount, SpecError> {
    if !dst.is_absolute() || normalize(dst) == Path::new("/") {
        return Err(SpecError::TmpfsDst {
            spec: spec.to_string(),
        });
    }
    let mut m = Mount {
        dst: normalize(dst),
        source: MountSource::tmpfs(0o1777),
        readonly: false,
        optional: false,
        flags: MountFlags::default(),
    };
    for opt in opts {
        tmpfs_option(spec, &mut m, opt)?;
    }
    Ok(m)
}

/// tmpfs's huge page policies (the kernel's `huge=` mount option).
const HUGE: [&str; 4] = ["never", "always", "within_size", "advise"];

/// One option `opt` of the tmpfs `spec` onto `m`.
fn tmpfs_option(spec: &str, m: &mut Mount, opt: &str) -> Result<(), SpecError> {
    let MountSource::Tmpfs { mode, size, huge } = &mut m.source else {
        unreachable!("a tmpfs")
    };
    let spec = || spec.to_string();
    match opt.split_once('=') {
        Some(("size", v)) => {
            let bytes = crate::units::parse_size(v);
            *size = Some(bytes.map_err(|source| SpecError::TmpfsSize {
                spec: spec(),
                source,
            })?)
        }
        Some(("huge", v)) if HUGE.contains(&v) => *huge = Some(v.to_string()),
        Some(("huge", v)) => {
            return Err(SpecError::TmpfsHuge {
                spec: spec(),
                value: v.to_string(),
            });
        }
        Some(("mode", v)) => {
            *mode = u32::from_str_radix(v, 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| SpecError::TmpfsMode {
                    spec: spec(),
                    value: v.to_string(),
                })?
        }
        _ if tmpfs_switch(opt, &mut m.readonly, &mut m.flags) => {}
        _ => {
            return Err(SpecError::TmpfsOption {
                spec: spec(),
                option: opt.to_string(),
            })
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bind comes through as a mount with the grammar's paths and flags (the grammar's own
    /// table is in mount-grammar/src/bind.rs).
    #[test]
    fn bind_as_mount() {
        let m = parse_bind("rel:/b:ro+nodev", Path::new("/work")).unwrap();
        let mut want = Mount::bind("/work/rel", "/b", true);
        want.flags.nodev = true;
        assert_eq!(m, want);
        let e = parse_bind("/a:/b:rx", Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--bind \"/a:/b:rx\": unknown flag \"rx\""),
            "{e}"
        );
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
        // a size keeps the units' own error
        assert_eq!(
            parse_tmpfs("/s:size=lots"),
            Err(SpecError::TmpfsSize {
                spec: "/s:size=lots".into(),
                source: UnitsError::SizeUnit("lots".into()),
            })
        );
    }
}

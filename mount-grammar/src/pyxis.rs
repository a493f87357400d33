//! pyxis's `--container-mounts`: `SRC[:DST[:FLAGS]]` separated by commas, SRC a host path, or
//! `umount` (leave out gpurun's default mount at DST), or `tmpfs` (a fresh tmpfs at DST); DST
//! absolute or relative to the container's root; FLAGS enroot's fstab options joined with `+`.

use std::path::{Component, Path, PathBuf};

use crate::{bind_flag, normalize, Bind, MountFlags, BIND_FLAG_NAMES, TMPFS_KEYS, TMPFS_SWITCHES};

/// One `--container-mounts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mount {
    /// A host path bound in, SRC as written (relative to the job's directory).
    Bind(Bind),
    /// `tmpfs:DST[:OPTS]`: a fresh tmpfs (`size=`, `mode=`, `ro`, `noexec`…), the options
    /// checked by name only (gpurun reads their values).
    Tmpfs { dst: PathBuf, opts: Vec<String> },
    /// `umount:DST`: one of gpurun's default mounts left out (`--no-mount DST`).
    Umount(PathBuf),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MountsError {
    #[error("--container-mounts: {0:?}: an empty path")]
    EmptyPath(String),
    #[error(
        "--container-mounts: {0:?}: the destination {1} is not a path; write it absolute (/{1}) \
         or relative (./{1})"
    )]
    NotAPath(String, String),
    #[error(
        "--container-mounts: {0:?}: the destination {1} leaves the container's root (invalid \
         cross-device link); write it from /"
    )]
    LeavesRoot(String, String),
    #[error("--container-mounts: {0:?}: unknown flag {1} ({names})", names = BIND_FLAG_NAMES.join(", "))]
    UnknownFlag(String, String),
    #[error(
        "--container-mounts: {0:?}: unknown tmpfs flag {1} (size=N, mode=OCTAL, huge=POLICY, {switches})",
        switches = TMPFS_SWITCHES.join(", ")
    )]
    UnknownTmpfsFlag(String, String),
}

/// Parse the option's value: its comma-separated entries, blanks skipped.
pub fn parse_mounts(s: &str) -> Result<Vec<Mount>, MountsError> {
    s.split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(parse_mount)
        .collect()
}

fn parse_mount(m: &str) -> Result<Mount, MountsError> {
    let mut parts = m.splitn(3, ':');
    let src = parts.next().unwrap_or_default();
    let dst = parts.next().unwrap_or(src);
    let flags = parts.next().unwrap_or_default();
    if src.is_empty() || dst.is_empty() {
        return Err(MountsError::EmptyPath(m.into()));
    }
    let dst = mount_target(m, dst)?;
    // pyxis adds `rbind` in front of the user's flags: `bind` there changes nothing
    let mut given = flags.split('+').filter(|f| !f.is_empty() && *f != "bind");
    match src {
        "umount" => Ok(Mount::Umount(dst)),
        "tmpfs" => {
            let tmpfs_ok = |f: &str| {
                TMPFS_SWITCHES.contains(&f)
                    || (f.split_once('=')).is_some_and(|(k, _)| TMPFS_KEYS.contains(&k))
            };
            let opts: Vec<String> = given
                .filter(|f| !f.starts_with("x-create="))
                .map(String::from)
                .collect();
            match opts.iter().find(|f| !tmpfs_ok(f)) {
                Some(f) => Err(MountsError::UnknownTmpfsFlag(m.into(), f.clone())),
                None => Ok(Mount::Tmpfs { dst, opts }),
            }
        }
        _ => {
            let (mut readonly, mut flags) = (false, MountFlags::default());
            match given.find(|f| !bind_flag(f, &mut readonly, &mut flags)) {
                Some(f) => Err(MountsError::UnknownFlag(m.into(), f.into())),
                None => Ok(Mount::Bind(Bind {
                    flags,
                    ..Bind::new(src, dst, readonly)
                })),
            }
        }
    }
}

/// A mount's destination, as pyxis takes it: absolute, or relative to the container's root
/// when written `./DST` or `../DST`; one that climbs out of the root is refused with the
/// kernel's word for it (openat2's RESOLVE_BENEATH: EXDEV), as enroot refuses it.
fn mount_target(m: &str, p: &str) -> Result<PathBuf, MountsError> {
    if !p.starts_with(['.', '/']) {
        return Err(MountsError::NotAPath(m.into(), p.into()));
    }
    let mut depth = 0usize;
    for c in Path::new(p).components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir if depth == 0 => {
                return Err(MountsError::LeavesRoot(m.into(), p.into()))
            }
            Component::ParentDir => depth -= 1,
            _ => {}
        }
    }
    Ok(normalize(Path::new(p)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PointKind, Propagation, PropagationKind};

    fn bind(src: &str, dst: &str, readonly: bool, flags: MountFlags) -> Mount {
        Mount::Bind(Bind {
            flags,
            ..Bind::new(src, dst, readonly)
        })
    }

    fn m(src: &str, dst: &str, readonly: bool) -> Mount {
        bind(src, dst, readonly, MountFlags::default())
    }

    #[test]
    fn mounts() {
        let tmpfs = |dst: &str, opts: &[&str]| Mount::Tmpfs {
            dst: dst.into(),
            opts: opts.iter().map(|f| f.to_string()).collect(),
        };
        let prop = |kind, recursive| Some(Propagation { kind, recursive });
        let ok: &[(&str, Vec<Mount>)] = &[
            ("/data", vec![m("/data", "/data", false)]),
            ("/data:/in", vec![m("/data", "/in", false)]),
            ("/data:/in:ro", vec![m("/data", "/in", true)]),
            (
                "/a:/b:rw, /c:/d:ro,",
                vec![m("/a", "/b", false), m("/c", "/d", true)],
            ),
            ("./rel:/x", vec![m("./rel", "/x", false)]),
            ("/a:/b:ro++", vec![m("/a", "/b", true)]),
            // enroot's fstab flags, joined with +, handed on to gpurun's --bind
            (
                "/a:/b:ro+rprivate",
                vec![bind(
                    "/a",
                    "/b",
                    true,
                    MountFlags {
                        propagation: prop(PropagationKind::Private, true),
                        ..Default::default()
                    },
                )],
            ),
            (
                "/a:/b:ro+unbindable",
                vec![bind(
                    "/a",
                    "/b",
                    true,
                    MountFlags {
                        propagation: prop(PropagationKind::Unbindable, false),
                        ..Default::default()
                    },
                )],
            ),
            (
                "/a:/b:nodev+noexec+rslave",
                vec![bind(
                    "/a",
                    "/b",
                    false,
                    MountFlags {
                        nodev: true,
                        noexec: true,
                        propagation: prop(PropagationKind::Slave, true),
                        ..Default::default()
                    },
                )],
            ),
            (
                "/a:/b:bind+x-create=file",
                vec![bind(
                    "/a",
                    "/b",
                    false,
                    MountFlags {
                        create: Some(PointKind::File),
                        ..Default::default()
                    },
                )],
            ),
            // a relative destination is taken from the container's root
            ("/a:./rel/x", vec![m("/a", "/rel/x", false)]),
            ("/a:./b/../x", vec![m("/a", "/x", false)]),
            (
                "umount:/etc/hosts",
                vec![Mount::Umount("/etc/hosts".into())],
            ),
            ("tmpfs:/t", vec![tmpfs("/t", &[])]),
            (
                "tmpfs:/t:size=64M+mode=700+noexec+x-create=dir",
                vec![tmpfs("/t", &["size=64M", "mode=700", "noexec"])],
            ),
            (
                "tmpfs:/t:huge=within_size",
                vec![tmpfs("/t", &["huge=within_size"])],
            ),
        ];
        for (input, want) in ok {
            assert_eq!(&parse_mounts(input).unwrap(), want, "{input}");
        }
        for (input, says) in [
            ("/a:/b:ro:x", "unknown flag ro:x (ro, rw, rbind"),
            (":/b", "an empty path"),
            ("/a::ro", "an empty path"),
            ("/a:/b:sync", "unknown flag sync"),
            ("/a:/b:x-detach", "unknown flag x-detach"),
            ("tmpfs:/t:rbind", "unknown tmpfs flag rbind (size=N"),
            ("tmpfs:/t:sizex=1", "unknown tmpfs flag sizex=1"),
            ("/tmp:mnt:ro", "the destination mnt is not a path"),
            (
                "/home:../home",
                "leaves the container's root (invalid cross-device link)",
            ),
            ("/home:/a/../../home", "leaves the container's root"),
        ] {
            let e = parse_mounts(input).unwrap_err().to_string();
            let entry = input.split(',').next().unwrap();
            assert!(
                e.starts_with(&format!("--container-mounts: {entry:?}: ")),
                "{e}"
            );
            assert!(e.contains(says) && !e.contains('\n'), "{input}: {e}");
        }
    }
}

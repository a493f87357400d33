//! The grammar of mount specs that gpurun's `--bind SRC[:DST[:FLAGS]]` and its SPANK plugin's
//! `--container-mounts` (pyxis's) share: one definition of enroot's fstab flags (joined with
//! '+'), of a tmpfs's switches, of a parsed bind and of the lexical path rule, so that the two
//! cannot drift. [`bind`] is gpurun's form, [`pyxis`] the plugin's; a [`Bind`] the plugin
//! parsed is handed to gpurun as it is, in JSON (`gpurun hold --bind-json`, read back through
//! `bind`'s `Bind::checked`), so that a path holding ':' or ',' arrives intact; so are the home
//! and each tmpfs ([`handover`]). Pure.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod bind;
pub mod handover;
pub mod pyxis;

/// A mount's options beyond read-only: enroot's fstab flags (`nodev`, `rslave`,
/// `x-create=dir`…).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MountFlags {
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub nosuid: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub nodev: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub noexec: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub propagation: Option<Propagation>,
    /// What to make at the destination where the image lacks it (None: as the source is).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub create: Option<PointKind>,
}

impl MountFlags {
    pub fn is_plain(&self) -> bool {
        *self == MountFlags::default()
    }
}

/// How mount events pass between a bind and its peers (mount_namespaces(7)), and whether its
/// submounts get the same (the `r` forms: `rslave`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Propagation {
    pub kind: PropagationKind,
    pub recursive: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PropagationKind {
    Private,
    /// The host's mount events under the source reach the container, none go back.
    Slave,
    Shared,
    Unbindable,
}

impl PropagationKind {
    const ALL: [PropagationKind; 4] = [
        PropagationKind::Private,
        PropagationKind::Slave,
        PropagationKind::Shared,
        PropagationKind::Unbindable,
    ];

    /// Its word in FLAGS (the `r` form adds the submounts).
    fn name(self) -> &'static str {
        match self {
            PropagationKind::Private => "private",
            PropagationKind::Slave => "slave",
            PropagationKind::Shared => "shared",
            PropagationKind::Unbindable => "unbindable",
        }
    }
}

/// A mount point made in the image: a directory or a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointKind {
    Dir,
    File,
}

/// One parsed bind: a host path, where it appears inside, and its flags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bind {
    pub src: PathBuf,
    pub dst: PathBuf,
    pub readonly: bool,
    pub flags: MountFlags,
}

impl Bind {
    pub fn new(src: impl Into<PathBuf>, dst: impl Into<PathBuf>, readonly: bool) -> Bind {
        Bind {
            src: src.into(),
            dst: dst.into(),
            readonly,
            flags: MountFlags::default(),
        }
    }
}

/// Every flag a bind takes (joined with '+'), for the plugin's error that names one it does not.
pub const BIND_FLAG_NAMES: [&str; 17] = [
    "ro",
    "rw",
    "rbind",
    "nosuid",
    "nodev",
    "noexec",
    "private",
    "slave",
    "shared",
    "unbindable",
    "rprivate",
    "rslave",
    "rshared",
    "runbindable",
    "x-create=auto",
    "x-create=dir",
    "x-create=file",
];

/// The same flags in short, for gpurun's error that names one a bind does not take.
pub const BIND_FLAGS_TEXT: &str = "ro, rw, nosuid, nodev, noexec, [r]private, [r]slave, \
                                   [r]shared, [r]unbindable, x-create=dir|file|auto";

/// Apply one bind flag to `readonly` and `flags`; false where it is not one.
pub fn bind_flag(flag: &str, readonly: &mut bool, flags: &mut MountFlags) -> bool {
    match flag {
        // every bind is recursive (pyxis gives rbind)
        "rbind" => {}
        "x-create=dir" => flags.create = Some(PointKind::Dir),
        "x-create=file" => flags.create = Some(PointKind::File),
        "x-create=auto" => flags.create = None,
        _ if tmpfs_switch(flag, readonly, flags) => {}
        p => match propagation(p) {
            Some(p) => flags.propagation = Some(p),
            None => return false,
        },
    }
    true
}

/// `private`, `rslave`…
pub fn propagation(flag: &str) -> Option<Propagation> {
    let (recursive, name) = match flag.strip_prefix('r') {
        Some(n) => (true, n),
        None => (false, flag),
    };
    let kind = PropagationKind::ALL
        .into_iter()
        .find(|k| k.name() == name)?;
    Some(Propagation { kind, recursive })
}

/// The switches a tmpfs takes besides its `KEY=VALUE` options ([`TMPFS_KEYS`]).
pub const TMPFS_SWITCHES: [&str; 5] = ["ro", "rw", "nosuid", "nodev", "noexec"];

/// A tmpfs's `KEY=VALUE` options: its size, its root's mode, its huge page policy.
pub const TMPFS_KEYS: [&str; 3] = ["size", "mode", "huge"];

/// Apply one of [`TMPFS_SWITCHES`] (which a bind takes too); false where it is not one.
pub fn tmpfs_switch(opt: &str, readonly: &mut bool, flags: &mut MountFlags) -> bool {
    match opt {
        "ro" => *readonly = true,
        "rw" => *readonly = false,
        "nosuid" => flags.nosuid = true,
        "nodev" => flags.nodev = true,
        "noexec" => flags.noexec = true,
        _ => return false,
    }
    true
}

/// Lexical normalisation from the container's root (`a/./b/../c` → `/a/c`; `..` stops at the
/// root); the kernel resolves symlinks later, inside the container root.
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

    /// Every name the plugin lists is one a bind takes.
    #[test]
    fn listed_flags_are_the_known_ones() {
        for name in BIND_FLAG_NAMES {
            let (mut ro, mut f) = (false, MountFlags::default());
            assert!(bind_flag(name, &mut ro, &mut f), "{name}");
            assert!(!bind_flag(&format!("{name}x"), &mut ro, &mut f), "{name}x");
        }
        for bad in ["", "bind", "sync", "x-detach", "x-create=pipe", "rr"] {
            assert!(
                !bind_flag(bad, &mut false, &mut MountFlags::default()),
                "{bad}"
            );
        }
    }

    #[test]
    fn tmpfs_switches() {
        for s in TMPFS_SWITCHES {
            let (mut ro, mut f) = (s == "rw", MountFlags::default());
            assert!(tmpfs_switch(s, &mut ro, &mut f), "{s}");
            assert_ne!(
                (ro, f),
                (s == "rw", MountFlags::default()),
                "{s} changed nothing"
            );
        }
        assert!(!tmpfs_switch(
            "size=1G",
            &mut false,
            &mut MountFlags::default()
        ));
    }

    #[test]
    fn normalized() {
        for (input, want) in [
            ("/usr/local/bin", "/usr/local/bin"),
            ("/data/", "/data"),
            ("../", "/"),
            ("rel/x", "/rel/x"),
            ("./a/../b", "/b"),
            ("/a/../../..", "/"),
            ("/a/../c/./d", "/c/d"),
        ] {
            assert_eq!(normalize(Path::new(input)), Path::new(want), "{input}");
        }
    }
}

//! Everything the user asked for with the plugin's options, set one option at a time.

use std::path::{Path, PathBuf};

use mount_grammar::normalize;
use mount_grammar::pyxis::{parse_mounts, Mount};

use super::error::OptionError;
use super::table::*;
use super::values::{
    parse_env_names, parse_image, parse_name, parse_unshare, Image, Named, Unshare,
};

/// Everything the user asked for with the plugin's options. A switch and its `no-`/opposite
/// form set one `Option<bool>`: None where neither was given (gpurun's default then).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerOpts {
    pub image: Option<Image>,
    pub mounts: Vec<Mount>,
    pub workdir: Option<PathBuf>,
    pub env_from_host: Vec<String>,
    pub writable: Option<bool>,
    pub remap_root: Option<bool>,
    pub mount_home: Option<bool>,
    pub entrypoint: Option<bool>,
    pub unshare: Vec<Unshare>,
    /// `--container-save`: relative to the job's working directory.
    pub save: Option<PathBuf>,
    pub name: Option<Named>,
    /// `--container-entrypoint-log`: the entrypoint's output is shown.
    pub entrypoint_log: bool,
}

/// Set a switch that has two options; giving both is an error, as in pyxis.
fn switch(
    slot: &mut Option<bool>,
    value: bool,
    (on, off): (usize, usize),
) -> Result<(), OptionError> {
    match *slot {
        Some(v) if v != value => Err(OptionError::Both {
            on: OPTIONS[on].name.to_string_lossy().into(),
            off: OPTIONS[off].name.to_string_lossy().into(),
        }),
        _ => {
            *slot = Some(value);
            Ok(())
        }
    }
}

impl ContainerOpts {
    /// Apply option number `idx` of [`OPTIONS`]. Slurm may call this several times for the same
    /// option (twice per step in slurmstepd), so setting is idempotent: values replace.
    pub fn set(&mut self, idx: usize, arg: Option<&str>) -> Result<(), OptionError> {
        let spec = OPTIONS.get(idx).ok_or(OptionError::Unknown(idx))?;
        let need = |arg: Option<&str>| match arg {
            Some(a) if !a.trim().is_empty() => Ok(a.trim().to_string()),
            _ => Err(OptionError::NoValue {
                option: spec.name.to_string_lossy().into(),
            }),
        };
        match idx {
            IMAGE => self.image = Some(parse_image(&need(arg)?)?),
            MOUNTS => self.mounts = parse_mounts(&need(arg)?)?,
            WORKDIR => self.workdir = Some(normalize(Path::new(&need(arg)?))),
            ENV => self.env_from_host = parse_env_names(&need(arg)?)?,
            UNSHARE => self.unshare = parse_unshare(&need(arg)?)?,
            WRITABLE | READONLY => {
                switch(&mut self.writable, idx == WRITABLE, (WRITABLE, READONLY))?
            }
            REMAP_ROOT | NO_REMAP_ROOT => switch(
                &mut self.remap_root,
                idx == REMAP_ROOT,
                (REMAP_ROOT, NO_REMAP_ROOT),
            )?,
            MOUNT_HOME | NO_HOME => switch(
                &mut self.mount_home,
                idx == MOUNT_HOME,
                (MOUNT_HOME, NO_HOME),
            )?,
            ENTRYPOINT | NO_ENTRYPOINT => switch(
                &mut self.entrypoint,
                idx == ENTRYPOINT,
                (ENTRYPOINT, NO_ENTRYPOINT),
            )?,
            SAVE => self.save = Some(PathBuf::from(need(arg)?)),
            NAME => self.name = Some(parse_name(&need(arg)?)?),
            ENTRYPOINT_LOG => self.entrypoint_log = true,
            _ => unreachable!("OPTIONS has {} entries", OPTIONS.len()),
        }
        Ok(())
    }

    /// Whether any option other than the image was given (they mean nothing without one).
    pub fn has_container_settings(&self) -> bool {
        *self
            != ContainerOpts {
                image: self.image.clone(),
                ..Default::default()
            }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{m, refused};
    use super::*;
    /// The option reaches the grammar (whose table is mount-grammar/src/pyxis.rs), its errors
    /// one line each.
    #[test]
    fn mounts() {
        let mut o = ContainerOpts::default();
        o.set(MOUNTS, Some("/a:/b:rw, ./c:./d:ro,")).unwrap();
        assert_eq!(o.mounts, [m("/a", "/b", false), m("./c", "/d", true)]);
        refused(
            |v| ContainerOpts::default().set(MOUNTS, Some(v)),
            &[
                (
                    "/a:/b:sync",
                    "--container-mounts: \"/a:/b:sync\": unknown flag sync",
                ),
                ("/tmp:mnt:ro", "the destination mnt is not a path"),
            ],
        );
    }

    #[test]
    fn set_options() {
        let mut o = ContainerOpts::default();
        assert!(!o.has_container_settings());
        o.set(IMAGE, Some("./x.sqsh")).unwrap();
        assert!(!o.has_container_settings());
        o.set(MOUNTS, Some("/a:/b")).unwrap();
        o.set(MOUNTS, Some("/a:/b")).unwrap(); // called twice by slurmstepd: same result
        assert_eq!(o.mounts.len(), 1);
        o.set(WRITABLE, None).unwrap();
        assert!(o.has_container_settings());
        assert!(o.set(IMAGE, Some("  ")).is_err());
        assert!(o.set(IMAGE, None).is_err());
        o.set(WORKDIR, Some("rel")).unwrap();
        assert_eq!(o.workdir, Some("/rel".into()));
        assert!(o.set(SAVE, None).is_err());
        assert!(o.set(OPTIONS.len(), None).is_err());
    }

    /// Each switch and its opposite, as pyxis: the same one twice is fine (slurmstepd calls
    /// again), both is an error that names them.
    #[test]
    fn switches() {
        let table = [
            (
                WRITABLE,
                READONLY,
                "container-writable",
                "container-readonly",
            ),
            (
                REMAP_ROOT,
                NO_REMAP_ROOT,
                "container-remap-root",
                "no-container-remap-root",
            ),
            (
                MOUNT_HOME,
                NO_HOME,
                "container-mount-home",
                "no-container-mount-home",
            ),
            (
                ENTRYPOINT,
                NO_ENTRYPOINT,
                "container-entrypoint",
                "no-container-entrypoint",
            ),
        ];
        let slot = |o: &ContainerOpts, on: usize| match on {
            WRITABLE => o.writable,
            REMAP_ROOT => o.remap_root,
            MOUNT_HOME => o.mount_home,
            _ => o.entrypoint,
        };
        for (on, off, on_name, off_name) in table {
            for (first, value) in [(on, true), (off, false)] {
                let mut o = ContainerOpts::default();
                assert_eq!(slot(&o, on), None);
                o.set(first, None).unwrap();
                o.set(first, None).unwrap();
                assert_eq!(slot(&o, on), Some(value), "{on_name}");
                assert!(o.has_container_settings());
                let other = if first == on { off } else { on };
                let e = o.set(other, None).unwrap_err().to_string();
                assert!(e.contains(&format!("--{on_name} and --{off_name}")), "{e}");
            }
        }
    }
}

//! pyxis's `PYXIS_CONTAINER_*` variables, each acting as its option where that was not given.

use super::container_opts::ContainerOpts;
use super::error::OptionError;
use super::table::*;
use super::values::parse_bool;

/// `PYXIS_CONTAINER_*` variables naming a value, and their option.
const VALUE_VARS: [(&str, usize); 7] = [
    ("PYXIS_CONTAINER_IMAGE", IMAGE),
    ("PYXIS_CONTAINER_MOUNTS", MOUNTS),
    ("PYXIS_CONTAINER_WORKDIR", WORKDIR),
    ("PYXIS_CONTAINER_ENV", ENV),
    ("PYXIS_CONTAINER_UNSHARE", UNSHARE),
    ("PYXIS_CONTAINER_SAVE", SAVE),
    ("PYXIS_CONTAINER_NAME", NAME),
];

/// `PYXIS_CONTAINER_*` switches: the option a true value means, and a false one.
const SWITCH_VARS: [(&str, usize, usize); 5] = [
    ("PYXIS_CONTAINER_MOUNT_HOME", MOUNT_HOME, NO_HOME),
    ("PYXIS_CONTAINER_REMAP_ROOT", REMAP_ROOT, NO_REMAP_ROOT),
    ("PYXIS_CONTAINER_ENTRYPOINT", ENTRYPOINT, NO_ENTRYPOINT),
    ("PYXIS_CONTAINER_WRITABLE", WRITABLE, READONLY),
    ("PYXIS_CONTAINER_READONLY", READONLY, WRITABLE),
];

impl ContainerOpts {
    /// Whether option `idx` (or its opposite) was given.
    fn given(&self, idx: usize) -> bool {
        match idx {
            IMAGE => self.image.is_some(),
            MOUNTS => !self.mounts.is_empty(),
            WORKDIR => self.workdir.is_some(),
            ENV => !self.env_from_host.is_empty(),
            UNSHARE => !self.unshare.is_empty(),
            SAVE => self.save.is_some(),
            NAME => self.name.is_some(),
            WRITABLE | READONLY => self.writable.is_some(),
            REMAP_ROOT | NO_REMAP_ROOT => self.remap_root.is_some(),
            MOUNT_HOME | NO_HOME => self.mount_home.is_some(),
            ENTRYPOINT_LOG => self.entrypoint_log,
            _ => self.entrypoint.is_some(),
        }
    }

    /// The `PYXIS_CONTAINER_*` variables, each acting as its option where that was not given,
    /// as pyxis reads them after the options (srun's and sbatch's environment, the job's in
    /// slurmstepd). An empty value is unset; a switch's value that is not one of pyxis's
    /// booleans is left aside, as pyxis does, with a warning. Returns the warnings.
    pub fn apply_env_vars(
        &mut self,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<String>, OptionError> {
        let get = |name: &str| var(name).filter(|v| !v.is_empty());
        let mut warnings = Vec::new();
        for (name, idx) in VALUE_VARS {
            if let Some(v) = get(name).filter(|_| !self.given(idx)) {
                self.set(idx, Some(&v)).map_err(|e| OptionError::Var {
                    name,
                    value: v.clone(),
                    source: Box::new(e),
                })?;
            }
        }
        // a switch without an opposite option: false is its default
        let log = get("PYXIS_CONTAINER_ENTRYPOINT_LOG").filter(|_| !self.entrypoint_log);
        if let Some(v) = log {
            match parse_bool(&v) {
                Some(b) => self.entrypoint_log = b,
                None => warnings.push(format!(
                    "PYXIS_CONTAINER_ENTRYPOINT_LOG={v}: not 1, 0, true, false, yes, no, y or n; left aside"
                )),
            }
        }
        for (name, on, off) in SWITCH_VARS {
            let Some(v) = get(name).filter(|_| !self.given(on)) else {
                continue;
            };
            match parse_bool(&v) {
                Some(b) => self.set(if b { on } else { off }, None)?,
                None => warnings.push(format!(
                    "{name}={v}: not 1, 0, true, false, yes, no, y or n; left aside"
                )),
            }
        }
        Ok(warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::m;
    use super::super::values::{Image, Join, Named, Unshare};
    use super::*;
    use std::collections::HashMap;
    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    /// Each `PYXIS_CONTAINER_*` variable acts as its option; the option wins.
    #[test]
    fn pyxis_variables() {
        let from = |pairs: &[(&str, &str)], opts: &[(usize, Option<&str>)]| {
            let mut o = ContainerOpts::default();
            for (i, a) in opts {
                o.set(*i, *a).unwrap();
            }
            o.apply_env_vars(&vars(pairs)).map(|w| (o, w))
        };
        let (o, w) = from(
            &[
                ("PYXIS_CONTAINER_IMAGE", "ubuntu:24.04"),
                ("PYXIS_CONTAINER_MOUNTS", "/a:/b:ro"),
                ("PYXIS_CONTAINER_WORKDIR", "/w"),
                ("PYXIS_CONTAINER_ENV", "FOO,BAR"),
                ("PYXIS_CONTAINER_UNSHARE", "uts"),
                ("PYXIS_CONTAINER_MOUNT_HOME", "0"),
                ("PYXIS_CONTAINER_REMAP_ROOT", "yes"),
                ("PYXIS_CONTAINER_ENTRYPOINT", "true"),
                ("PYXIS_CONTAINER_WRITABLE", "1"),
                ("PYXIS_CONTAINER_READONLY", "1"),
            ],
            &[],
        )
        .unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(
            o.image,
            Some(Image::Registry("docker://ubuntu:24.04".into()))
        );
        assert_eq!(o.mounts, [m("/a", "/b", true)]);
        assert_eq!(o.workdir, Some("/w".into()));
        assert_eq!(o.env_from_host, ["FOO", "BAR"]);
        assert_eq!(o.unshare, [Unshare::Uts]);
        // WRITABLE is read before READONLY, as in pyxis
        let got = (o.mount_home, o.remap_root, o.entrypoint, o.writable);
        assert_eq!(got, (Some(false), Some(true), Some(true), Some(true)));

        // the options win, each over its variable
        let (o, _) = from(
            &[
                ("PYXIS_CONTAINER_IMAGE", "ubuntu:22.04"),
                ("PYXIS_CONTAINER_MOUNTS", "/e:/e"),
                ("PYXIS_CONTAINER_WORKDIR", "/e"),
                ("PYXIS_CONTAINER_WRITABLE", "1"),
                ("PYXIS_CONTAINER_REMAP_ROOT", "1"),
            ],
            &[
                (IMAGE, Some("/i.sqsh")),
                (MOUNTS, Some("/c:/c")),
                (WORKDIR, Some("/c")),
                (READONLY, None),
                (NO_REMAP_ROOT, None),
            ],
        )
        .unwrap();
        assert_eq!(o.image, Some(Image::File("/i.sqsh".into())));
        assert_eq!(o.mounts, [m("/c", "/c", false)]);
        assert_eq!(
            (o.workdir, o.writable, o.remap_root),
            (Some("/c".into()), Some(false), Some(false))
        );

        // READONLY=0 is writable; empty values are unset
        let (o, w) = from(
            &[
                ("PYXIS_CONTAINER_READONLY", "0"),
                ("PYXIS_CONTAINER_IMAGE", ""),
            ],
            &[],
        )
        .unwrap();
        assert_eq!((o.writable, o.image, w.len()), (Some(true), None, 0));

        // not a boolean: left aside with a warning; a name is the option's
        let (o, w) = from(
            &[
                ("PYXIS_CONTAINER_WRITABLE", "on"),
                ("PYXIS_CONTAINER_NAME", "c1:create"),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(o.writable, None);
        assert!(
            w[0].starts_with("PYXIS_CONTAINER_WRITABLE=on: not 1, 0"),
            "{w:?}"
        );
        assert_eq!(w.len(), 1, "{w:?}");
        let named = |n: &str, create| Named {
            name: n.into(),
            create,
            join: Join::IfRunning,
        };
        assert_eq!(o.name, Some(named("c1", true)));
        // the option wins over the variable
        let (o, _) = from(&[("PYXIS_CONTAINER_NAME", "c1")], &[(NAME, Some("c2"))]).unwrap();
        assert_eq!(o.name, Some(named("c2", false)));

        // a bad value is the option's error, naming the variable
        let e = from(&[("PYXIS_CONTAINER_ENV", "FOO,")], &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("PYXIS_CONTAINER_ENV=FOO,: --container-env"),
            "{e}"
        );
    }
}

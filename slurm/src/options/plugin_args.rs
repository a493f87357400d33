//! The arguments of the plugin's plugstack.conf line.

use std::path::PathBuf;
use std::time::Duration;

use super::error::OptionError;
use super::values::parse_bool;
use crate::jobimage;

/// Arguments from the plugin's plugstack.conf line, e.g.
/// `required /usr/lib/slurm/spank_gpurun.so gpurun=/usr/bin/gpurun timeout=600`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginArgs {
    /// The gpurun binary slurmstepd starts (as the user) to mount the image.
    pub gpurun: PathBuf,
    /// How long a step waits for its container (an image pulled from a registry takes longer).
    pub timeout: Duration,
    /// Whether the image's entrypoint runs when neither --container-entrypoint nor
    /// --no-container-entrypoint is given (pyxis's `execute_entrypoint=`, default no).
    pub execute_entrypoint: bool,
    /// Whether tasks in a PyTorch image get RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
    /// MASTER_PORT from Slurm's variables (`pytorch_env=`, default yes), as with pyxis + enroot's
    /// PyTorch hook.
    pub pytorch_env: bool,
    /// Whether the user is root inside when neither --container-remap-root nor
    /// --no-container-remap-root is given (`remap_root=`, default no): a site's default, as
    /// enroot's ENROOT_REMAP_ROOT is pyxis's.
    pub remap_root: bool,
    /// Who pulls a registry image and how the nodes get it (`pull=`, `pull_cache=`,
    /// `sbcast_dir=`).
    pub job_image: jobimage::Settings,
    /// Where named containers are kept on a node (`containers_dir=`): root's, a directory per
    /// user in it made by the plugin.
    pub containers_dir: PathBuf,
}

impl Default for PluginArgs {
    fn default() -> Self {
        PluginArgs {
            gpurun: PathBuf::from("/usr/local/bin/gpurun"),
            timeout: Duration::from_secs(300),
            execute_entrypoint: false,
            pytorch_env: true,
            remap_root: false,
            job_image: jobimage::Settings::default(),
            containers_dir: PathBuf::from(hold_state::CONTAINERS_DIR),
        }
    }
}

pub fn parse_plugin_args<'a>(
    args: impl IntoIterator<Item = &'a str>,
) -> Result<PluginArgs, OptionError> {
    let unknown = |a: &str| OptionError::UnknownArg { arg: a.into() };
    let absolute = |key, v: &str| OptionError::NotAbsolute {
        key,
        value: v.into(),
    };
    let boolean = |key, v: &str| {
        parse_bool(v).ok_or_else(|| OptionError::NotBool {
            key,
            value: v.into(),
        })
    };
    let mut p = PluginArgs::default();
    for a in args {
        match a.split_once('=') {
            Some(("gpurun", v)) if v.starts_with('/') => p.gpurun = PathBuf::from(v),
            Some(("gpurun", v)) => return Err(absolute("gpurun", v)),
            Some(("containers_dir", v)) if v.starts_with('/') => {
                p.containers_dir = PathBuf::from(v)
            }
            Some(("containers_dir", v)) => return Err(absolute("containers_dir", v)),
            Some(("timeout", v)) => match v.parse::<u64>() {
                Ok(s) if s > 0 => p.timeout = Duration::from_secs(s),
                _ => return Err(OptionError::Timeout { value: v.into() }),
            },
            Some(("execute_entrypoint", v)) => {
                p.execute_entrypoint = boolean("execute_entrypoint", v)?
            }
            Some(("pytorch_env", v)) => p.pytorch_env = boolean("pytorch_env", v)?,
            Some(("remap_root", v)) => p.remap_root = boolean("remap_root", v)?,
            Some((k, v)) => match p.job_image.parse_arg(k, v) {
                Some(r) => r?,
                None => return Err(unknown(a)),
            },
            None => return Err(unknown(a)),
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    #[test]
    fn plugin_args() {
        assert_eq!(parse_plugin_args([]).unwrap(), PluginArgs::default());
        let p = parse_plugin_args(["gpurun=/opt/gpurun/bin/gpurun", "timeout=20"]).unwrap();
        assert_eq!(p.gpurun, Path::new("/opt/gpurun/bin/gpurun"));
        assert_eq!(p.timeout, Duration::from_secs(20));
        assert!(!PluginArgs::default().execute_entrypoint);
        for (v, want) in [
            ("1", true),
            ("yes", true),
            ("y", true),
            ("0", false),
            ("no", false),
        ] {
            let arg = format!("execute_entrypoint={v}");
            assert_eq!(
                parse_plugin_args([arg.as_str()])
                    .unwrap()
                    .execute_entrypoint,
                want
            );
        }
        assert!(PluginArgs::default().pytorch_env);
        assert!(!parse_plugin_args(["pytorch_env=0"]).unwrap().pytorch_env);
        assert!(!PluginArgs::default().remap_root);
        assert!(parse_plugin_args(["remap_root=yes"]).unwrap().remap_root);
        let p = parse_plugin_args(["pull=shared", "pull_cache=%h/.cache/gpurun"]).unwrap();
        assert_eq!(p.job_image.mode, jobimage::Mode::Shared);
        for bad in [
            "gpurun=gpurun",
            "timeout=0",
            "timeout=x",
            "verbose",
            "pull=x",
            "execute_entrypoint=maybe",
            "pytorch_env=x",
            "remap_root=2",
        ] {
            assert!(parse_plugin_args([bad]).is_err(), "{bad} accepted");
        }
    }
}

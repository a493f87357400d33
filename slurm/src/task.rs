//! What the plugin decides in each task (task_init, as the user): the task's environment in the
//! container, and whether the task runs once it has entered. Pure: plugin.rs sets the
//! variables and enters the container (join.rs).

use std::collections::HashMap;
use std::path::Path;

use crate::jobimage;
use crate::join::JoinError;
use crate::options::{ContainerOpts, PluginArgs};
use crate::state::{self, EnvChange};

/// The changes to the task's environment (`task`, Slurm's for this task) that make it the
/// container's: `step` is the environment the holder started with, `container` the holder's
/// result (state.rs `task_env`); then the PMIx settings, PyTorch's variables where
/// plugstack.conf wants them, and the batch step's job image for the script's sruns.
pub fn env_changes(
    step: &HashMap<String, String>,
    container: &[(String, String)],
    task: &HashMap<String, String>,
    job_image: Option<&str>,
    opts: &ContainerOpts,
    args: &PluginArgs,
) -> Vec<EnvChange> {
    let mut changes = state::task_env(step, container, task, &opts.env_from_host);
    changes.extend(state::pmix_mca(&state::applied(task, &changes)));
    if args.pytorch_env {
        changes.extend(state::pytorch_env(&state::applied(task, &changes)));
    }
    if let Some(v) = job_image {
        changes.push(EnvChange::Set(jobimage::VAR.into(), v.to_string()));
    }
    changes
}

/// What a task does once it has tried to enter the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entered {
    Run,
    /// Run, after saying this line.
    Warn(String),
    /// End the task with gpurun's status; `every_task`: each task says why, not the first
    /// alone (a failure of one task, not the step's).
    Fail {
        line: String,
        every_task: bool,
    },
}

/// The task's fate from join.rs `enter` (`Ok(Some(warning))`: the working directory is
/// missing, the task starts in `/`). As pyxis: a working directory asked for must exist.
pub fn after_enter(
    entered: &Result<Option<String>, JoinError>,
    opts: &ContainerOpts,
    cwd: &Path,
) -> Entered {
    match entered {
        Ok(None) => Entered::Run,
        Ok(Some(_)) if opts.workdir.is_some() => Entered::Fail {
            line: format!(
                "--container-workdir={}: No such file or directory in the container; create it or choose another",
                cwd.display()
            ),
            every_task: false,
        },
        Ok(Some(warning)) => Entered::Warn(format!("gpurun: {warning}")),
        Err(e) => Entered::Fail {
            line: format!("cannot enter the container: {e}"),
            every_task: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        (pairs.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_tasks_environment() {
        let step = env(&[("A", "host"), ("GONE", "1"), ("PYTORCH_VERSION", "2")]);
        let container = [
            ("A".to_string(), "image".to_string()),
            ("PYTORCH_VERSION".to_string(), "2".to_string()),
        ];
        let task = env(&[
            ("A", "host"),
            ("GONE", "1"),
            ("PYTORCH_VERSION", "2"),
            ("SLURM_PROCID", "5"),
        ]);
        let set = |k: &str, v: &str| EnvChange::Set(k.into(), v.into());
        let o = ContainerOpts::default();
        let torch = PluginArgs::default();
        let no_torch = PluginArgs {
            pytorch_env: false,
            ..Default::default()
        };
        let image = jobimage::VAR.to_string();
        #[rustfmt::skip]
        let table = [
            (&torch, None, vec![set("A", "image"), EnvChange::Unset("GONE".into()), set("RANK", "5")]),
            (&no_torch, None, vec![set("A", "image"), EnvChange::Unset("GONE".into())]),
            (&no_torch, Some("j"), vec![set("A", "image"), EnvChange::Unset("GONE".into()), set(&image, "j")]),
        ];
        for (args, job_image, want) in table {
            let got = env_changes(&step, &container, &task, job_image, &o, args);
            assert_eq!(got, want, "{} {job_image:?}", args.pytorch_env);
        }
    }

    #[test]
    fn after_entering() {
        let missing = || Ok(Some("no /w in the container: starting in /".to_string()));
        let eperm = JoinError::Setns {
            ns: crate::sys::seam::Ns::User,
            source: std::io::Error::from_raw_os_error(libc::EPERM),
        };
        let workdir = ContainerOpts {
            workdir: Some("/w".into()),
            ..Default::default()
        };
        let plain = ContainerOpts::default();
        let no_dir = "--container-workdir=/w: No such file or directory in the container; create it or choose another";
        #[rustfmt::skip]
        let table = [
            (Ok(None), &workdir, Entered::Run),
            (missing(), &plain, Entered::Warn("gpurun: no /w in the container: starting in /".into())),
            (missing(), &workdir, Entered::Fail { line: no_dir.into(), every_task: false }),
            (Err(eperm), &plain, Entered::Fail { line: "cannot enter the container: setns(user namespace): Operation not permitted (os error 1)".into(), every_task: true }),
        ];
        for (entered, o, want) in table {
            assert_eq!(
                after_enter(&entered, o, Path::new("/w")),
                want,
                "{entered:?}"
            );
        }
    }
}

//! What `gpurun hold` reports once the container is ready, and how a task's environment is
//! derived from it. Pure.

use std::collections::HashMap;
use std::path::PathBuf;

/// The holder's state file (`hold_state::State`, the one definition gpurun writes), with the
/// environment split into names and values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// A process inside the prepared user and mount namespaces.
    pub pid: i32,
    /// The container's root, as seen inside that mount namespace.
    pub root: PathBuf,
    /// The container's environment as `gpurun exec` would give it.
    pub env: Vec<(String, String)>,
    /// The working directory inside the container.
    pub cwd: PathBuf,
}

pub fn parse_state(text: &str) -> Result<Holder, hold_state::StateError> {
    let s = hold_state::State::parse(text)?;
    Ok(Holder {
        pid: s.pid,
        env: s.env_pairs(),
        root: s.root,
        cwd: s.cwd,
    })
}

/// A change to apply to the task's environment through spank_setenv / spank_unsetenv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvChange {
    Set(String, String),
    Unset(String),
}

pub fn split_env<'a>(entries: impl IntoIterator<Item = &'a str>) -> HashMap<String, String> {
    entries
        .into_iter()
        .filter_map(|e| e.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The task's environment inside the container.
///
/// * `step`: the step's environment when the holder was started (the holder saw exactly this);
/// * `container`: the holder's result (host env composed with the image's env by gpurun);
/// * `task`: the task's environment now: Slurm has added per-task variables (SLURM_PROCID,
///   PMI ranks…) and may have changed some (CUDA_VISIBLE_DEVICES with --gpus-per-task);
/// * `from_host`: `--container-env` names, whose host value wins over the image's.
///
/// A variable whose task value differs from the step value was set per task by Slurm and is
/// kept; otherwise the container's value is used, and variables gpurun dropped are unset.
/// When gpurun renumbered a list the task changed (CUDA_VISIBLE_DEVICES with --gpus-per-task
/// and no device cgroup: step `2,3` → container `0,1`, task `3`), the task's entries are
/// translated the same way (`1`).
pub fn task_env(
    step: &HashMap<String, String>,
    container: &[(String, String)],
    task: &HashMap<String, String>,
    from_host: &[String],
) -> Vec<EnvChange> {
    let per_task = |k: &str| task.get(k) != step.get(k);
    let mut out = Vec::new();
    for (k, v) in container {
        if from_host.contains(k) && task.contains_key(k) {
            continue;
        }
        if let (true, Some(t)) = (per_task(k), task.get(k)) {
            if let Some(mapped) = step.get(k).and_then(|s| renumber(s, v, t)) {
                out.push(EnvChange::Set(k.clone(), mapped));
            }
            continue;
        }
        if task.get(k) != Some(v) {
            out.push(EnvChange::Set(k.clone(), v.clone()));
        }
    }
    let mut dropped: Vec<&String> = step
        .keys()
        .filter(|k| !container.iter().any(|(c, _)| c == *k))
        .filter(|k| !per_task(k) && !from_host.contains(k))
        .collect();
    dropped.sort();
    out.extend(dropped.into_iter().map(|k| EnvChange::Unset(k.clone())));
    out
}

/// Variables of the step itself, which a step joining another's container takes from its own
/// environment, not from the container's.
const STEP_OWN: [&str; 5] = ["SLURM_", "SLURMD_", "PMI_", "PMIX_", "OMPI_"];

/// The container environment of a step that joins the named container another step runs:
/// the container's, with Slurm's and the MPI launchers' variables of this step instead of the
/// first step's.
pub fn joined_env(
    container: &[(String, String)],
    step: &HashMap<String, String>,
) -> Vec<(String, String)> {
    let own = |k: &str| STEP_OWN.iter().any(|p| k.starts_with(p));
    let mut env: Vec<(String, String)> =
        container.iter().filter(|(k, _)| !own(k)).cloned().collect();
    let mut mine: Vec<(String, String)> = step
        .iter()
        .filter(|(k, _)| own(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    mine.sort();
    env.extend(mine);
    env
}

/// The task's environment once `changes` are applied.
pub fn applied(task: &HashMap<String, String>, changes: &[EnvChange]) -> HashMap<String, String> {
    let mut env = task.clone();
    for c in changes {
        match c {
            EnvChange::Set(k, v) => env.insert(k.clone(), v.clone()),
            EnvChange::Unset(k) => env.remove(k),
        };
    }
    env
}

/// Under Slurm's PMIx, the MCA settings an MPI library in the image reads (`PMIX_MCA_ptl`,
/// `_psec`, `_gds`), from the modules Slurm's PMIx server chose, where `env` (the task's
/// environment in the container) does not set them, as enroot's PMIx hook does: the image's
/// PMIx may otherwise pick a module the server does not speak.
pub fn pmix_mca(env: &HashMap<String, String>) -> Vec<EnvChange> {
    let pmix = env
        .get("SLURM_MPI_TYPE")
        .is_none_or(|t| t.starts_with("pmix"));
    let pairs = [
        ("PMIX_PTL_MODULE", "PMIX_MCA_ptl"),
        ("PMIX_SECURITY_MODE", "PMIX_MCA_psec"),
        ("PMIX_GDS_MODULE", "PMIX_MCA_gds"),
    ];
    pairs
        .iter()
        .filter(|_| pmix)
        .filter(|(_, to)| !env.contains_key(*to))
        .filter_map(|(from, to)| {
            let v = env.get(*from).filter(|v| !v.is_empty())?;
            Some(EnvChange::Set(to.to_string(), v.clone()))
        })
        .collect()
}

/// For a PyTorch image (its environment has PYTORCH_VERSION), what pyxis and enroot's Slurm
/// PyTorch hook set so that `torch.distributed` finds its peers without torchrun: RANK and
/// LOCAL_RANK from the task's SLURM_PROCID and SLURM_LOCALID; where `env` (the task's
/// environment in the container) has none yet, MASTER_ADDR (the step's first node),
/// MASTER_PORT (SLURM_JOB_ID % 4536 + 61000), WORLD_SIZE (SLURM_NTASKS), and OMP_NUM_THREADS=1
/// when a node runs more than one task, as torchrun does.
pub fn pytorch_env(env: &HashMap<String, String>) -> Vec<EnvChange> {
    if !env.contains_key("PYTORCH_VERSION") {
        return Vec::new();
    }
    let get = |k: &str| env.get(k).filter(|v| !v.is_empty());
    let num = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok());
    let mut out = Vec::new();
    for (from, to) in [("SLURM_PROCID", "RANK"), ("SLURM_LOCALID", "LOCAL_RANK")] {
        if let Some(v) = get(from) {
            out.push(EnvChange::Set(to.into(), v.clone()));
        }
    }
    let several_per_node =
        num("SLURM_STEP_NUM_TASKS").unwrap_or(1) > num("SLURM_STEP_NUM_NODES").unwrap_or(1);
    let unless_set = [
        (
            "MASTER_ADDR",
            get("SLURM_STEP_NODELIST").and_then(|l| first_host(l)),
        ),
        (
            "MASTER_PORT",
            num("SLURM_JOB_ID").map(|j| (j % 4536 + 61000).to_string()),
        ),
        ("WORLD_SIZE", get("SLURM_NTASKS").cloned()),
        ("OMP_NUM_THREADS", several_per_node.then(|| "1".to_string())),
    ];
    for (k, v) in unless_set {
        if let (None, Some(v)) = (env.get(k), v) {
            out.push(EnvChange::Set(k.into(), v));
        }
    }
    out
}

/// The first host name of a Slurm host list (`gpu[07-09,12],login1` → `gpu07`), as
/// `scontrol show hostnames LIST | head -n1` gives it.
pub fn first_host(list: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = list;
    loop {
        let stop = rest.find([',', '[']).unwrap_or(rest.len());
        out.push_str(&rest[..stop]);
        if !rest[stop..].starts_with('[') {
            break;
        }
        let close = rest.find(']')?;
        let inner = &rest[stop + 1..close];
        let first = inner.split(',').next()?.split('-').next()?;
        out.push_str(first);
        rest = &rest[close + 1..];
    }
    (!out.is_empty()).then_some(out)
}

/// `task`'s comma-separated entries translated by the position-wise map `step` → `container`;
/// None when the lists are not such a map (then the task's value stands).
fn renumber(step: &str, container: &str, task: &str) -> Option<String> {
    if step == container {
        return None;
    }
    let s: Vec<&str> = step.split(',').collect();
    let c: Vec<&str> = container.split(',').collect();
    if s.len() != c.len() {
        return None;
    }
    task.split(',')
        .map(|t| s.iter().position(|x| *x == t).map(|i| c[i]))
        .collect::<Option<Vec<_>>>()
        .map(|v| v.join(","))
}

/// The directory of Slurm's PMIx server for step `job.step`, found in this slurmstepd's
/// `/proc/self/maps` text. Slurm names it `pmix.JOB.STEP` (under SlurmdSpoolDir, or mpi.conf's
/// PMIxCliTmpDirBase) and tells the ranks through PMIX_SERVER_TMPDIR, but only in each task's
/// environment, after the holder has started. The server has already mapped its shared-memory
/// datastore there; ranks in the container must reach the same files, or PMIx fails to attach
/// them ("PMIX ERROR ... gds_ds12_lock") and falls back to slower messaging.
pub fn pmix_dir_in_maps(maps: &str, job: u32, step: u32) -> Option<String> {
    let name = format!("/pmix.{job}.{step}/");
    maps.lines()
        .filter_map(|l| l.find(" /").map(|i| l[i + 1..].trim_end()))
        .find_map(|path| {
            path.find(&name)
                .map(|i| path[..i + name.len() - 1].to_string())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pmix_modules_become_mca_settings() {
        let set = |k: &str, v: &str| EnvChange::Set(k.into(), v.into());
        for (env, want) in [
            (
                vec![
                    "SLURM_MPI_TYPE=pmix_v4",
                    "PMIX_SECURITY_MODE=native",
                    "PMIX_GDS_MODULE=hash",
                    "PMIX_PTL_MODULE=tcp,usock",
                ],
                vec![
                    set("PMIX_MCA_ptl", "tcp,usock"),
                    set("PMIX_MCA_psec", "native"),
                    set("PMIX_MCA_gds", "hash"),
                ],
            ),
            // the image's or the user's own setting wins
            (
                vec!["PMIX_SECURITY_MODE=native", "PMIX_MCA_psec=none"],
                vec![],
            ),
            (
                vec!["SLURM_MPI_TYPE=pmi2", "PMIX_SECURITY_MODE=native"],
                vec![],
            ),
            (vec!["PMIX_GDS_MODULE="], vec![]),
            (
                vec!["PMIX_GDS_MODULE=ds21"],
                vec![set("PMIX_MCA_gds", "ds21")],
            ),
        ] {
            assert_eq!(pmix_mca(&split_env(env.clone())), want, "{env:?}");
        }
    }

    #[test]
    fn a_joining_step_keeps_its_own_slurm_variables() {
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let container = pairs(&[
            ("PATH", "/usr/bin"),
            ("SLURM_STEP_ID", "0"),
            ("PMIX_RANK", "0"),
            ("SLURM_OLD", "x"),
            ("FOO", "image"),
        ]);
        let step = split_env(["PATH=/host", "SLURM_STEP_ID=1", "OMPI_X=y", "FOO=host"]);
        assert_eq!(
            joined_env(&container, &step),
            pairs(&[
                ("PATH", "/usr/bin"),
                ("FOO", "image"),
                ("OMPI_X", "y"),
                ("SLURM_STEP_ID", "1"),
            ])
        );
    }

    #[test]
    fn pmix_dir_from_maps() {
        let maps = "\
7f7a-7f7b r-xp 00000000 fe:00 12 /usr/lib/x86_64-linux-gnu/libpmix.so.2.6.2
7f7c-7f7d rw-s 00000000 fe:00 909700  /var/spool/slurmd/pmix.254.0/pmix_dstor_ds12_1/dstore_sm.lock
7f7e-7f7f rw-s 00000000 fe:00 909701  /var/spool/slurmd/pmix.25.0/x
";
        let cases = [
            ((254, 0), Some("/var/spool/slurmd/pmix.254.0")),
            ((25, 0), Some("/var/spool/slurmd/pmix.25.0")),
            ((254, 1), None),
            ((2, 0), None),
        ];
        for ((job, step), want) in cases {
            assert_eq!(
                pmix_dir_in_maps(maps, job, step).as_deref(),
                want,
                "{job}.{step}"
            );
        }
        assert_eq!(pmix_dir_in_maps("", 1, 0), None);
    }

    #[test]
    fn parse() {
        let h = parse_state(
            r#"{"pid": 42, "root": "/tmp/r", "env": ["PATH=/usr/bin", "A=b=c"], "cwd": "/w"}"#,
        )
        .unwrap();
        assert_eq!(h.pid, 42);
        assert_eq!(h.root, PathBuf::from("/tmp/r"));
        assert_eq!(h.cwd, PathBuf::from("/w"));
        assert_eq!(
            h.env,
            [
                ("PATH".into(), "/usr/bin".into()),
                ("A".into(), "b=c".into())
            ]
        );
        let e = parse_state(r#"{"pid": 0, "root": "/", "env": [], "cwd": "/"}"#).unwrap_err();
        assert!(e.to_string().contains("pid 0"), "{e}");
    }

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
    fn list(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
    fn set(k: &str, v: &str) -> EnvChange {
        EnvChange::Set(k.into(), v.into())
    }

    #[test]
    fn merge() {
        let step = env(&[
            ("PATH", "/host/bin"),
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("HOSTONLY", "x"),
            ("LANG", "C"),
            ("KEEP", "host"),
        ]);
        let container = list(&[
            ("PATH", "/usr/local/cuda/bin:/usr/bin"),
            ("CUDA_VISIBLE_DEVICES", "0,1"),
            ("LANG", "C"),
            ("IMAGEVAR", "1"),
            ("KEEP", "image"),
        ]);
        // task 1 of a --gpus-per-task step: CUDA_VISIBLE_DEVICES set per task, rank added
        let mut task = step.clone();
        task.insert("CUDA_VISIBLE_DEVICES".into(), "1".into());
        task.insert("SLURM_PROCID".into(), "1".into());
        let got = task_env(&step, &container, &task, &["KEEP".into()]);
        assert_eq!(
            got,
            [
                set("PATH", "/usr/local/cuda/bin:/usr/bin"),
                set("IMAGEVAR", "1"),
                EnvChange::Unset("HOSTONLY".into()),
            ]
        );
        // without per-task binding the container's (renumbered) value wins
        let step2 = env(&[("CUDA_VISIBLE_DEVICES", "2,3")]);
        let container2 = list(&[("CUDA_VISIBLE_DEVICES", "0,1")]);
        assert_eq!(
            task_env(&step2, &container2, &step2, &[]),
            [set("CUDA_VISIBLE_DEVICES", "0,1")]
        );
        // --gpus-per-task without a device cgroup: global indices, renumbered by gpurun
        let step4 = env(&[("CUDA_VISIBLE_DEVICES", "2,3")]);
        let task4 = env(&[("CUDA_VISIBLE_DEVICES", "3")]);
        assert_eq!(
            task_env(&step4, &container2, &task4, &[]),
            [set("CUDA_VISIBLE_DEVICES", "1")]
        );
        // not translatable (unknown entry, lists of other lengths): the task's value stands
        for (s, c, t) in [("2,3", "0,1", "5"), ("2,3", "0", "3"), ("0,1", "0,1", "1")] {
            assert_eq!(renumber(s, c, t), None, "{s} {c} {t}");
        }
        assert_eq!(renumber("4,6,7", "0,1,2", "7,4").as_deref(), Some("2,0"));
        // --container-env for a variable the host lacks: the image's value is used
        assert_eq!(
            task_env(
                &env(&[]),
                &list(&[("KEEP", "image")]),
                &env(&[]),
                &["KEEP".into()]
            ),
            [set("KEEP", "image")]
        );
        // a per-task variable the task no longer has (unset by a plugin) is not brought back,
        // unless the container sets it
        let step3 = env(&[("GONE", "1")]);
        assert_eq!(task_env(&step3, &[], &env(&[]), &[]), []);
    }

    #[test]
    fn first_hosts() {
        for (list, want) in [
            ("node1", Some("node1")),
            ("gpu[07-09,12],login1", Some("gpu07")),
            ("a,b", Some("a")),
            ("rack[2-3]-n[5-6]", Some("rack2-n5")),
            ("n[3]", Some("n3")),
            ("", None),
            ("n[1-2", None),
        ] {
            assert_eq!(first_host(list).as_deref(), want, "{list}");
        }
    }

    #[test]
    fn pytorch() {
        let slurm = [
            ("SLURM_PROCID", "5"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_STEP_NODELIST", "n[2-4]"),
            ("SLURM_JOB_ID", "4540"),
            ("SLURM_NTASKS", "6"),
            ("SLURM_STEP_NUM_TASKS", "6"),
            ("SLURM_STEP_NUM_NODES", "3"),
        ];
        assert_eq!(pytorch_env(&env(&slurm)), []);
        let mut torch = env(&slurm);
        torch.insert("PYTORCH_VERSION".into(), "2.3.0".into());
        assert_eq!(
            pytorch_env(&torch),
            [
                set("RANK", "5"),
                set("LOCAL_RANK", "1"),
                set("MASTER_ADDR", "n2"),
                set("MASTER_PORT", "61004"),
                set("WORLD_SIZE", "6"),
                set("OMP_NUM_THREADS", "1"),
            ]
        );
        // values already there stay, except the ranks; one task per node: no OMP_NUM_THREADS
        for (k, v) in [
            ("MASTER_ADDR", "head"),
            ("MASTER_PORT", "29500"),
            ("WORLD_SIZE", "2"),
            ("RANK", "0"),
            ("SLURM_STEP_NUM_TASKS", "3"),
        ] {
            torch.insert(k.into(), v.into());
        }
        assert_eq!(
            pytorch_env(&torch),
            [set("RANK", "5"), set("LOCAL_RANK", "1")]
        );
    }

    #[test]
    fn applying_changes() {
        let task = env(&[("A", "1"), ("B", "2")]);
        let got = applied(
            &task,
            &[set("A", "x"), EnvChange::Unset("B".into()), set("C", "3")],
        );
        assert_eq!(got, env(&[("A", "x"), ("C", "3")]));
    }
}

//! What the plugin decides before a step's tasks run, per SPANK context: init_post_opt (which
//! options hold, what comes next) and user_init (join a running named container, or start a
//! holder, and with what). Pure: plugin.rs gathers Slurm's items, the environment and the
//! plugstack.conf arguments, asks the node through [`Node`], and performs the result.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::holder::{HolderError, Running};
use crate::jobimage::{self, JobImageError, Pulled};
use crate::named;
use crate::options::{self, ContainerOpts, HoldCtx, Join, OptionError, PluginArgs, Unshare};
use crate::slurmd;
use crate::state::Holder;
use crate::sys::seam::Linux;

/// Step ids from here up are the batch script, the extern step, the interactive step…
pub const SLURM_MAX_NORMAL_STEP_ID: u32 = 0xffff_fff0;
/// The job's extern step (`PrologFlags=contain`), which lives as long as the job.
pub const SLURM_EXTERN_CONT: u32 = 0xffff_fffc;
/// The batch script's step.
pub const SLURM_BATCH_SCRIPT: u32 = 0xffff_fffb;
/// salloc's shell on the first node (`LaunchParameters=use_interactive_step`).
pub const SLURM_INTERACTIVE_STEP: u32 = 0xffff_fffa;

/// Why a step has no container: the line its tasks say (init_post_opt's is said as it is).
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A `PYXIS_CONTAINER_*` variable in init_post_opt.
    #[error("gpurun: {0}")]
    Vars(#[source] OptionError),
    #[error(transparent)]
    Options(#[from] OptionError),
    #[error("--container-name={name}:exec: the container is not running")]
    NotRunning { name: String },
    #[error("--container-unshare={}: the running container {name} is not in a separate {} \
             namespace", ns.proc_name(), ns.title())]
    NotSeparate { ns: Unshare, name: String },
    /// One of Slurm's items user_init needs (`what` names it).
    #[error("cannot get {what}")]
    NoItem { what: &'static str },
    #[error(transparent)]
    JobImage(#[from] JobImageError),
    /// The batch step's pull failed; gpurun said why.
    #[error("the job's image was not pulled")]
    NotPulled,
    #[error("cannot set {var} in the batch script's environment: error {rc}")]
    SetEnv { var: &'static str, rc: i32 },
    #[error("cannot create a state directory in /tmp: {source}")]
    StateDir { source: io::Error },
    #[error(transparent)]
    Holder(#[from] HolderError),
}

/// The SPANK context a callback runs in (`spank_context()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// srun.
    Local,
    /// slurmstepd.
    Remote,
    /// sbatch, salloc.
    Allocator,
    /// slurmd, the job script's context, or one unknown to this plugin.
    Other,
}

/// What the node answers for the step-start decisions: plugin.rs asks the file system and
/// /proc (named.rs, join.rs), the tests a table.
pub trait Node {
    /// Whether `p` is a directory (the job's `PWD` and `HOME`).
    fn is_dir(&self, p: &Path) -> bool;
    /// Whether `p` exists (a named container's record of its image).
    fn exists(&self, p: &Path) -> bool;
    /// Whether user `uid`'s named container `name` keeps the image it was made from
    /// (`named::image_kept`).
    fn image_kept(&self, base: &Path, uid: u32, name: &str) -> bool;
    /// The holder of user `uid`'s named container `name`, if a step runs in it now
    /// (`named::find_running`).
    fn find_running(&self, base: &Path, uid: u32, name: &str) -> Option<Holder>;
    /// Whether process `pid` has a namespace `ns` of its own (`join::own_ns`).
    fn own_ns(&self, pid: i32, ns: &str) -> bool;
}

/// What init_post_opt leads to once the options hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterOpts {
    /// srun: pull a registry image for the job before the step exists.
    Pull,
    /// slurmstepd of a container step: the user's directory of named containers (as root),
    /// and whether slurmd has loaded the plugin.
    PrepareNode,
    Nothing,
}

/// The lines init_post_opt says to the user, and what follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostOpt {
    pub warnings: Vec<String>,
    pub next: AfterOpts,
}

/// init_post_opt: the `PYXIS_CONTAINER_*` variables (`var`: srun's and sbatch's environment;
/// in slurmstepd the job's) where their options were not given. As with pyxis, other
/// --container-* options without an image leave the step on the host (`#SBATCH
/// --container-mounts` with an image on some srun lines only), but srun says so, in case the
/// image was forgotten. Warnings are said where the user sees them (not in slurmstepd); an
/// error is the whole line.
pub fn init_post_opt(
    ctx: Context,
    opts: &mut ContainerOpts,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<PostOpt, StepError> {
    let remote = ctx == Context::Remote;
    let warnings = opts.apply_env_vars(var).map_err(StepError::Vars)?;
    let mut said: Vec<String> = match remote {
        true => Vec::new(),
        false => warnings
            .iter()
            .map(|w| format!("gpurun: warning: {w}"))
            .collect(),
    };
    let container = opts.image.is_some() || opts.name.is_some();
    if ctx == Context::Local && !container && opts.has_container_settings() {
        said.push(
            "gpurun: warning: no --container-image: the --container-* options are ignored".into(),
        );
    }
    let next = match ctx {
        Context::Local => AfterOpts::Pull,
        Context::Remote if container => AfterOpts::PrepareNode,
        _ => AfterOpts::Nothing,
    };
    Ok(PostOpt {
        warnings: said,
        next,
    })
}

/// Whether step `step` of a job may run in a container: srun's steps, the batch script and
/// salloc's interactive step, as with pyxis; never the extern step.
pub fn container_step(step: u32) -> bool {
    step < SLURM_MAX_NORMAL_STEP_ID || [SLURM_BATCH_SCRIPT, SLURM_INTERACTIVE_STEP].contains(&step)
}

/// Whether user_init has a container to make: an image or a name was asked for.
pub fn wants_container(opts: &ContainerOpts) -> bool {
    opts.image.is_some() || opts.name.is_some()
}

/// Where a step's tasks go: the container its holder builds, or the named container another
/// step of the job runs (`--container-name`), which they join.
pub enum Container {
    Held(Running),
    Joined(Holder),
}

impl Container {
    pub fn ready(&mut self) -> Result<Holder, HolderError> {
        match self {
            Container::Held(r) => r.ready(&Linux),
            Container::Joined(h) => Ok(h.clone()),
        }
    }

    pub fn stop(&mut self, grace: Duration) {
        if let Container::Held(r) = self {
            r.stop(&Linux, grace);
        }
    }
}

/// user_init's outcome, which the step's tasks and its end use.
pub struct Step {
    pub container: Container,
    /// The environment the holder was started with.
    pub env: HashMap<String, String>,
    /// The file name of the copy sbcast made of the job's image for this step alone: the
    /// step's end removes it, as the user, among the job's copies it finds itself
    /// (`step_end::Names::SentForStep`).
    pub sent: Option<String>,
    /// The batch step's pull of the job's image, named in the script's environment for its
    /// sruns (`jobimage::VAR`).
    pub job_image: Option<String>,
    /// What the step's first task says before the command (once per node).
    pub notice: Option<String>,
}

/// A step naming a container that another step of the job runs now joins it, as with pyxis
/// (never with `:no_exec`; `:exec` requires it): its namespaces, its root with the changes made
/// so far, its environment; the step's own Slurm variables, working directory (else `/`).
/// `None`: start a holder. `uid` is Slurm's item, `env` the job's environment.
pub fn join_running(
    opts: &ContainerOpts,
    args: &PluginArgs,
    job: u32,
    uid: Option<u32>,
    env: HashMap<String, String>,
    node: &dyn Node,
) -> Option<Result<Step, StepError>> {
    let n = opts.name.as_ref().filter(|n| n.join != Join::Never)?;
    let base = &args.containers_dir;
    let Some(mut holder) = node.find_running(base, uid?, &format!("{job}.{}", n.name)) else {
        let name = n.name.clone();
        return (n.join == Join::Must).then_some(Err(StepError::NotRunning { name }));
    };
    // as pyxis: a namespace asked for must be the running container's own
    if let Some(ns) = (opts.unshare.iter()).find(|ns| !node.own_ns(holder.pid, ns.proc_name())) {
        let (ns, name) = (*ns, n.name.clone());
        return Some(Err(StepError::NotSeparate { ns, name }));
    }
    holder.env = crate::state::joined_env(&holder.env, &env);
    holder.cwd = opts.workdir.clone().unwrap_or_else(|| PathBuf::from("/"));
    let notice = (!opts.mounts.is_empty()).then(|| {
        "gpurun: ignoring --container-mounts: the step joins a running container".to_string()
    });
    Some(Ok(Step {
        container: Container::Joined(holder),
        env,
        sent: None,
        job_image: None,
        notice,
    }))
}

/// `srun --mpi=pmix`: gpurun binds PMIX_SERVER_TMPDIR, which Slurm sets only per task, so the
/// holder needs it found in slurmstepd's maps (`state::pmix_dir_in_maps`).
pub fn wants_pmix_dir(env: &HashMap<String, String>) -> bool {
    env.get("SLURM_MPI_TYPE")
        .is_some_and(|t| t.starts_with("pmix"))
        && !env.contains_key("PMIX_SERVER_TMPDIR")
}

/// The step's options for its holder: plugstack.conf's `remap_root=` where neither switch was
/// given; in the batch step its `script` (slurmstepd runs it from slurmd's spool directory, so
/// it must be there inside) bound read-only at its own path.
pub fn holder_opts(
    opts: &ContainerOpts,
    args: &PluginArgs,
    script: Option<PathBuf>,
) -> ContainerOpts {
    let mut opts = opts.clone();
    opts.remap_root = opts.remap_root.or(Some(args.remap_root));
    if let Some(script) = script {
        let bind = mount_grammar::Bind::new(script.clone(), script, true);
        opts.mounts.push(options::Mount::Bind(bind));
    }
    opts
}

/// The step's options with the job's image file (`found`: `jobimage::for_step`'s) in place of a
/// registry reference, and whether it is the copy sbcast made for this step. The variable that
/// named it is kept from the container (the tasks then have it unset, as gpurun dropped it).
pub fn with_job_image(
    mut opts: ContainerOpts,
    env: &mut Vec<String>,
    found: Option<&Pulled>,
    step: u32,
) -> (ContainerOpts, Option<String>) {
    let var = format!("{}=", jobimage::VAR);
    env.retain(|e| !e.starts_with(&var));
    let Some(p) = found else {
        return (opts, None);
    };
    opts.image = Some(options::Image::File(p.path.clone()));
    let name = p.path.file_name().map(|n| n.to_string_lossy().into_owned());
    (opts, name.filter(|_| p.copy_of_step(step)))
}

/// A named container of a registry image, as pyxis's: where the job's container exists and
/// keeps its image (`kept`, asked of record name `JOB.NAME`), it runs that copy (this step's
/// image is not used); where this step makes it, its copy stays for the job's later steps (the
/// job's epilog removes it), so the step's end must not remove it.
pub fn named_registry_image(
    mut opts: ContainerOpts,
    sent: Option<String>,
    job: u32,
    kept: impl FnOnce(&str) -> bool,
) -> (ContainerOpts, Option<String>) {
    let Some(n) = &opts.name else {
        return (opts, sent);
    };
    let from_registry =
        sent.is_some() || opts.image.as_ref().is_some_and(|i| i.registry().is_some());
    if !from_registry {
        return (opts, sent);
    }
    if kept(&format!("{job}.{}", n.name)) {
        opts.image = None;
        return (opts, sent);
    }
    (opts, None)
}

/// The directory of the step's container record: its name's, else `JOB.JOB.STEP` (pyxis's
/// name for an unnamed step's container).
pub fn record_name(opts: &ContainerOpts, job: u32, step: u32) -> String {
    match &opts.name {
        Some(n) => format!("{job}.{}", n.name),
        None => named::step_record(job, step),
    }
}

/// What user_init knows of a step when it starts a holder, besides the options.
pub struct StepFacts<'a> {
    pub job: u32,
    pub step: u32,
    /// The job's user (Slurm's item).
    pub uid: u32,
    /// The job's environment, split.
    pub env: &'a HashMap<String, String>,
    /// The node's host name.
    pub hostname: &'a str,
    /// The holder's state file, in the directory user_init made for it.
    pub state: &'a Path,
    /// The batch step pulled the job's image (`batch_pull`).
    pub batch_image: bool,
    /// This node's slurmd has not loaded the plugin (slurmd.rs).
    pub slurmd_lacks_plugin: bool,
}

/// How user_init starts the holder (holder.rs `Spec`, less what Slurm's items give).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderInputs {
    /// The arguments after the gpurun binary.
    pub args: Vec<String>,
    pub env: Vec<String>,
    pub cwd: PathBuf,
    /// The entrypoint's output is kept for the first task to show.
    pub log_stdout: bool,
    pub notice: Option<String>,
}

/// The holder's command line, environment and directory for a step of options `opts` (after
/// [`holder_opts`], [`with_job_image`] and [`named_registry_image`]); `env` the job's
/// environment as the holder gets it.
pub fn holder_inputs(
    opts: &ContainerOpts,
    args: &PluginArgs,
    f: &StepFacts,
    env: Vec<String>,
    node: &dyn Node,
) -> Result<HolderInputs, StepError> {
    // srun passes the submitting shell's PWD; the holder starts there so relative paths and
    // the default working directory mean what they mean for `gpurun exec`
    let dir_var = |k: &str| {
        (f.env.get(k))
            .map(Path::new)
            .filter(|d| d.is_absolute() && node.is_dir(d))
    };
    let cwd = dir_var("PWD").map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
    let entrypoint = opts.entrypoint.unwrap_or(args.execute_entrypoint);
    let mut env = options::without_host_locale(env, &opts.env_from_host);
    if entrypoint {
        env.extend(options::entrypoint_env(&opts.env_from_host, f.env));
    }
    let containers = hold_state::named_containers_dir(&args.containers_dir, f.uid);
    let at = HoldCtx {
        cwd: &cwd,
        state: f.state,
        entrypoint,
        hostname: f.hostname,
        job: f.job,
        home: dir_var("HOME"),
        containers: &containers,
    };
    let hold_args = options::holder_args(opts, &at)?;
    let notice = notice(opts, f, &containers, node);
    Ok(HolderInputs {
        args: hold_args,
        env,
        cwd,
        log_stdout: entrypoint && opts.entrypoint_log,
        notice,
    })
}

/// Where slurmd lacks the plugin, its epilog cannot remove what the job leaves on the node: the
/// batch step's pull of the job's image, a named container made by this step. The first task
/// then says so.
fn notice(
    opts: &ContainerOpts,
    f: &StepFacts,
    containers: &Path,
    node: &dyn Node,
) -> Option<String> {
    let made_here = |n: &options::Named| {
        let record = containers
            .join(format!("{}.{}", f.job, n.name))
            .join("image");
        !node.exists(&record)
    };
    let leaves = (f.step == SLURM_BATCH_SCRIPT && f.batch_image)
        || opts.name.as_ref().is_some_and(made_here);
    (f.slurmd_lacks_plugin && leaves).then(|| slurmd::restart_line(f.hostname))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{parse_image, parse_name, Image, Mount, Unshare};

    /// The node as a table: the directories and files there, whether a named container keeps
    /// its image, the holder a step runs now, and the namespaces it has of its own.
    #[derive(Default)]
    struct FakeNode {
        dirs: Vec<&'static str>,
        files: Vec<PathBuf>,
        kept: bool,
        running: Option<Holder>,
        own_ns: Vec<&'static str>,
    }

    impl Node for FakeNode {
        fn is_dir(&self, p: &Path) -> bool {
            self.dirs.iter().any(|d| Path::new(d) == p)
        }
        fn exists(&self, p: &Path) -> bool {
            self.files.iter().any(|f| f == p)
        }
        fn image_kept(&self, _: &Path, _: u32, _: &str) -> bool {
            self.kept
        }
        fn find_running(&self, _: &Path, _: u32, _: &str) -> Option<Holder> {
            self.running.clone()
        }
        fn own_ns(&self, _: i32, ns: &str) -> bool {
            self.own_ns.contains(&ns)
        }
    }

    fn opts(image: Option<&str>, name: Option<&str>) -> ContainerOpts {
        ContainerOpts {
            image: image.map(|i| parse_image(i).unwrap()),
            name: name.map(|n| parse_name(n).unwrap()),
            ..Default::default()
        }
    }

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        (pairs.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn after_the_options() {
        use AfterOpts::*;
        use Context::*;
        let no_image =
            "gpurun: warning: no --container-image: the --container-* options are ignored";
        let bad = "gpurun: warning: PYXIS_CONTAINER_REMAP_ROOT=maybe: not 1, 0, true, false, yes, no, y or n; left aside";
        let mounts = ContainerOpts {
            mounts: vec![Mount::Umount("/tmp".into())],
            ..Default::default()
        };
        let remap = [("PYXIS_CONTAINER_REMAP_ROOT", "maybe")];
        // (context, options, variables) -> (lines said, what follows)
        type Row<'a> = (
            Context,
            ContainerOpts,
            &'a [(&'a str, &'a str)],
            Vec<&'a str>,
            AfterOpts,
        );
        #[rustfmt::skip]
        let table: Vec<Row> = vec![
            (Local, opts(Some("ubuntu"), None), &[], vec![], Pull),
            (Local, opts(None, None), &[], vec![], Pull),
            (Local, mounts.clone(), &[], vec![no_image], Pull),
            (Local, opts(None, None), &[("PYXIS_CONTAINER_IMAGE", "ubuntu")], vec![], Pull),
            (Local, opts(Some("ubuntu"), None), &remap, vec![bad], Pull),
            (Allocator, opts(Some("ubuntu"), None), &remap, vec![bad], Nothing),
            (Allocator, mounts.clone(), &[], vec![], Nothing),
            // slurmstepd says nothing: the user saw it in srun
            (Remote, opts(Some("ubuntu"), None), &remap, vec![], PrepareNode),
            (Remote, opts(None, Some("c1")), &[], vec![], PrepareNode),
            (Remote, opts(None, None), &[("PYXIS_CONTAINER_NAME", "c1")], vec![], PrepareNode),
            (Remote, mounts, &[], vec![], Nothing),
            (Other, opts(Some("ubuntu"), None), &[], vec![], Nothing),
        ];
        for (ctx, mut o, vars, warnings, next) in table {
            let vars = env(vars);
            let got = init_post_opt(ctx, &mut o, &|k| vars.get(k).cloned()).unwrap();
            let want = PostOpt {
                warnings: warnings.into_iter().map(String::from).collect(),
                next,
            };
            assert_eq!(got, want, "{ctx:?} {vars:?}");
        }
        let vars = env(&[("PYXIS_CONTAINER_IMAGE", "a b")]);
        let e = init_post_opt(Local, &mut opts(None, None), &|k| vars.get(k).cloned());
        let e = e.unwrap_err().to_string();
        assert!(e.starts_with("gpurun: PYXIS_CONTAINER_IMAGE=a b: "), "{e}");
    }

    #[test]
    fn steps_that_run_in_a_container() {
        for (step, want) in [
            (0, true),
            (SLURM_MAX_NORMAL_STEP_ID - 1, true),
            (SLURM_BATCH_SCRIPT, true),
            (SLURM_INTERACTIVE_STEP, true),
            (SLURM_EXTERN_CONT, false),
            (SLURM_MAX_NORMAL_STEP_ID, false),
            (u32::MAX, false),
        ] {
            assert_eq!(container_step(step), want, "{step:#x}");
        }
        assert!(!wants_container(&ContainerOpts::default()));
        assert!(wants_container(&opts(None, Some("c1"))));
        assert!(wants_container(&opts(Some("/i.sqsh"), None)));
    }

    fn running() -> Holder {
        Holder {
            pid: 42,
            root: "/".into(),
            env: vec![
                ("A".into(), "1".into()),
                ("SLURM_STEP_ID".into(), "0".into()),
            ],
            cwd: "/first".into(),
        }
    }

    /// What a step gets from join_running: None (start a holder), an error, or the joined
    /// holder's pid, working directory and environment, and the notice.
    #[test]
    fn joining_a_running_container() {
        type Got = Option<Result<(i32, PathBuf, Vec<(String, String)>, Option<String>), String>>;
        let join = |o: &ContainerOpts, uid: Option<u32>, node: &FakeNode| -> Got {
            let step_env = env(&[("SLURM_STEP_ID", "3"), ("B", "2")]);
            let got = join_running(o, &PluginArgs::default(), 7, uid, step_env, node)?;
            let got = got.map_err(|e| e.to_string());
            Some(got.map(|s| {
                let Container::Joined(h) = s.container else {
                    panic!("a join holds no holder of its own")
                };
                assert!(s.sent.is_none() && s.job_image.is_none());
                (h.pid, h.cwd, h.env, s.notice)
            }))
        };
        let up = FakeNode {
            running: Some(running()),
            own_ns: vec!["net"],
            ..Default::default()
        };
        let down = FakeNode::default();
        let joined_env = vec![
            ("A".into(), "1".into()),
            ("SLURM_STEP_ID".into(), "3".into()),
        ];
        let ignored = "gpurun: ignoring --container-mounts: the step joins a running container";
        let mut with = opts(None, Some("c1"));
        with.workdir = Some("/w".into());
        with.mounts = vec![Mount::Umount("/tmp".into())];
        with.unshare = vec![Unshare::Net];
        let mut other_ns = opts(None, Some("c1"));
        other_ns.unshare = vec![Unshare::Net, Unshare::Ipc];
        let not_running = "--container-name=c1:exec: the container is not running";
        let not_own =
            "--container-unshare=ipc: the running container c1 is not in a separate IPC namespace";
        #[rustfmt::skip]
        let table: Vec<(ContainerOpts, Option<u32>, &FakeNode, Got)> = vec![
            (opts(Some("/i.sqsh"), None), Some(1), &up, None),
            (opts(None, Some("c1:no_exec")), Some(1), &up, None),
            (opts(None, Some("c1")), Some(1), &down, None),
            (opts(None, Some("c1:create")), Some(1), &down, None),
            (opts(None, Some("c1:exec")), Some(1), &down, Some(Err(not_running.into()))),
            (opts(None, Some("c1:exec")), None, &up, None),
            (opts(None, Some("c1")), Some(1), &up, Some(Ok((42, "/".into(), joined_env.clone(), None)))),
            (with, Some(1), &up, Some(Ok((42, "/w".into(), joined_env, Some(ignored.into()))))),
            (other_ns, Some(1), &up, Some(Err(not_own.into()))),
        ];
        for (i, (o, uid, node, want)) in table.into_iter().enumerate() {
            assert_eq!(join(&o, uid, node), want, "row {i}");
        }
    }

    #[test]
    fn pmix_dir_wanted() {
        for (vars, want) in [
            (&[("SLURM_MPI_TYPE", "pmix_v4")][..], true),
            (&[("SLURM_MPI_TYPE", "pmix")], true),
            (
                &[("SLURM_MPI_TYPE", "pmix"), ("PMIX_SERVER_TMPDIR", "/d")],
                false,
            ),
            (&[("SLURM_MPI_TYPE", "pmi2")], false),
            (&[], false),
        ] {
            assert_eq!(wants_pmix_dir(&env(vars)), want, "{vars:?}");
        }
    }

    #[test]
    fn options_for_the_holder() {
        let site = PluginArgs {
            remap_root: true,
            ..Default::default()
        };
        let o = opts(Some("/i.sqsh"), None);
        assert_eq!(holder_opts(&o, &site, None).remap_root, Some(true));
        let mut no = o.clone();
        no.remap_root = Some(false);
        assert_eq!(
            holder_opts(&no, &site, None).remap_root,
            Some(false),
            "the user's wins"
        );
        let script = PathBuf::from("/var/spool/slurmd/job7/slurm_script");
        let batch = holder_opts(&o, &PluginArgs::default(), Some(script.clone()));
        assert_eq!(batch.remap_root, Some(false));
        let bind = Mount::Bind(mount_grammar::Bind::new(script.clone(), script, true));
        assert_eq!(batch.mounts, [bind]);
    }

    fn pulled(step: Option<u32>, sent: bool) -> Pulled {
        Pulled {
            job: 7,
            step,
            sent,
            reference: "docker://ubuntu".into(),
            path: "/cache/ubuntu.sqsh".into(),
        }
    }

    #[test]
    fn the_jobs_image_for_a_step() {
        let var = format!("{}=x", jobimage::VAR);
        let registry = opts(Some("docker://ubuntu"), None);
        let file = Some(Image::File("/cache/ubuntu.sqsh".into()));
        #[rustfmt::skip]
        let table = [
            (None, registry.image.clone(), false),
            (Some(pulled(None, false)), file.clone(), false),
            (Some(pulled(None, true)), file.clone(), false),
            (Some(pulled(Some(3), true)), file.clone(), true),
            (Some(pulled(Some(4), true)), file, false),
        ];
        for (found, image, sent) in table {
            let mut env = vec!["A=1".to_string(), var.clone()];
            let (o, s) = with_job_image(registry.clone(), &mut env, found.as_ref(), 3);
            let sent = sent.then(|| "ubuntu.sqsh".to_string());
            assert_eq!((o.image, s), (image, sent), "{found:?}");
            assert_eq!(env, ["A=1"], "the variable is kept from the container");
        }
    }

    #[test]
    fn a_named_containers_registry_image() {
        let asked = std::cell::RefCell::new(Vec::new());
        let kept = |answer: bool| {
            let asked = &asked;
            move |n: &str| {
                asked.borrow_mut().push(n.to_string());
                answer
            }
        };
        let reg = Some(Image::Registry("docker://ubuntu".into()));
        let file = Some(Image::File("/i.sqsh".into()));
        #[rustfmt::skip]
        let table = [
            // (image, name, sent, kept) -> (image, sent)
            (reg.clone(), None, true, true, (reg.clone(), true)),
            (file.clone(), Some("c1"), false, true, (file.clone(), false)),
            (reg.clone(), Some("c1"), false, true, (None, false)),
            (file.clone(), Some("c1"), true, true, (None, true)),
            (reg.clone(), Some("c1"), false, false, (reg.clone(), false)),
            // this step makes the container: its copy stays for the job's later steps
            (file.clone(), Some("c1"), true, false, (file, false)),
        ];
        let copy = |sent: bool| sent.then(|| "gpurun-job.7.3.0123456789abcdef.sqsh".to_string());
        for (image, name, sent, answer, (want_image, want_sent)) in table {
            let (sent, want) = (copy(sent), (want_image, copy(want_sent)));
            let o = ContainerOpts {
                image: image.clone(),
                name: name.map(|n| parse_name(n).unwrap()),
                ..Default::default()
            };
            let (o, s) = named_registry_image(o, sent.clone(), 7, kept(answer));
            assert_eq!((o.image, s), want, "{image:?} {name:?} {sent:?} {answer}");
        }
        assert!(asked.borrow().iter().all(|n| n == "7.c1"), "{asked:?}");
    }

    #[test]
    fn record_names() {
        assert_eq!(record_name(&opts(None, Some("c1:exec")), 7, 3), "7.c1");
        assert_eq!(record_name(&opts(Some("/i.sqsh"), None), 7, 3), "7.7.3");
        assert_eq!(
            record_name(&opts(None, None), 7, SLURM_BATCH_SCRIPT),
            "7.7.4294967291"
        );
    }

    /// A step of job 7 on node n1, for user 1000.
    fn facts<'a>(
        step: u32,
        env: &'a HashMap<String, String>,
        batch_image: bool,
        lacks: bool,
    ) -> StepFacts<'a> {
        StepFacts {
            job: 7,
            step,
            uid: 1000,
            env,
            hostname: "n1",
            state: Path::new("/tmp/s/state.json"),
            batch_image,
            slurmd_lacks_plugin: lacks,
        }
    }

    /// The holder's inputs on a node with the user's home and work directories and `files`.
    fn inputs(
        o: &ContainerOpts,
        a: &PluginArgs,
        f: &StepFacts,
        files: Vec<PathBuf>,
    ) -> Result<HolderInputs, StepError> {
        let node = FakeNode {
            dirs: vec!["/home/u", "/home/u/work"],
            files,
            ..Default::default()
        };
        let env = vec!["LANG=C".to_string(), "X=1".to_string()];
        holder_inputs(o, a, f, env, &node)
    }

    fn job_env() -> HashMap<String, String> {
        env(&[
            ("PWD", "/home/u/work"),
            ("HOME", "/home/u"),
            ("LANG", "C"),
            ("X", "1"),
        ])
    }

    /// The holder's directory, environment and entrypoint output, from the job's environment,
    /// the options, plugstack.conf and the node.
    #[test]
    fn the_holders_inputs() {
        let site = PluginArgs::default();
        let job_env = job_env();
        let plain = opts(Some("/i.sqsh"), None);
        let got = inputs(&plain, &site, &facts(3, &job_env, false, true), vec![]).unwrap();
        assert_eq!(got.cwd, Path::new("/home/u/work"));
        assert_eq!(
            got.env,
            ["X=1"],
            "the host's locale is kept from the container"
        );
        assert!(!got.log_stdout && got.notice.is_none());
        let state = ["--state", "/tmp/s/state.json"];
        assert!(got.args.windows(2).any(|w| w == state), "{:?}", got.args);
        // a PWD or HOME that is no directory here, or relative, is not used
        let elsewhere = env(&[("PWD", "/gone"), ("HOME", "home/u")]);
        let got = inputs(&plain, &site, &facts(3, &elsewhere, false, false), vec![]);
        assert_eq!(got.unwrap().cwd, Path::new("/"));
        let mut entry = plain.clone();
        entry.env_from_host = vec!["X".into(), "LANG".into()];
        entry.entrypoint_log = true;
        let site = PluginArgs {
            execute_entrypoint: true,
            ..Default::default()
        };
        let got = inputs(&entry, &site, &facts(3, &job_env, false, false), vec![]).unwrap();
        let from_host = ["LANG=C", "X=1", "GPURUNENV_X=1", "GPURUNENV_LANG=C"];
        assert_eq!(got.env, from_host);
        assert!(got.log_stdout);
        entry.entrypoint = Some(false);
        let got = inputs(&entry, &site, &facts(3, &job_env, false, false), vec![]);
        assert!(!got.unwrap().log_stdout);
        let e = inputs(
            &ContainerOpts::default(),
            &site,
            &facts(3, &job_env, false, false),
            vec![],
        );
        assert_eq!(e.unwrap_err().to_string(), "no --container-image");
    }

    /// Where slurmd lacks the plugin, a step that leaves something on the node says so: the
    /// batch step's pull, a named container this step makes (no record of its image yet).
    #[test]
    fn the_notice_of_a_slurmd_without_the_plugin() {
        let base = PluginArgs::default().containers_dir;
        let record = hold_state::named_containers_dir(&base, 1000).join("7.c1/image");
        let restart = Some(slurmd::restart_line("n1"));
        let plain = opts(Some("/i.sqsh"), None);
        let named = opts(None, Some("c1"));
        let job_env = job_env();
        #[rustfmt::skip]
        let notices = [
            (&plain, SLURM_BATCH_SCRIPT, true, true, vec![], restart.clone()),
            (&plain, SLURM_BATCH_SCRIPT, false, true, vec![], None),
            (&plain, SLURM_BATCH_SCRIPT, true, false, vec![], None),
            (&plain, 3, true, true, vec![], None),
            (&named, 3, false, true, vec![], restart),
            (&named, 3, false, true, vec![record], None),
            (&named, 3, false, false, vec![], None),
        ];
        for (o, step, batch_image, lacks, files, want) in notices {
            let f = facts(step, &job_env, batch_image, lacks);
            let got = inputs(o, &PluginArgs::default(), &f, files).unwrap();
            assert_eq!(got.notice, want, "{step} {batch_image} {lacks}");
        }
    }
}

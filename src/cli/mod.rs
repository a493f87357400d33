//! Command-line definitions. Also the source of completions/ and man/ (`tests/regenerate.sh`):
//! [`command`] is the one place the clap command is built, with every option's `GPURUN_<FLAG>`
//! variable (`flag_vars`). Apptainer's and pyxis' options gpurun lacks are answered by `foreign`;
//! the man pages' EXAMPLES and ENVIRONMENT sections are kept in `man`; `launch` makes a launch's
//! options the runtime's `Launch`.

pub mod complete;
pub mod flag_vars;
pub mod foreign;
pub mod launch;
pub mod man;

use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::gpu::{DriverPaths, GpuOpts};

#[derive(Parser, Debug)]
#[command(
    name = "gpurun",
    version,
    about = "Run OCI container images as squashfs files on GPU clusters: no daemon, no root, no setuid",
    propagate_version = true,
    long_version = crate::version::LONG,
    after_long_help = crate::help::EXIT_CODES,
    disable_help_subcommand = true
)]
pub struct Cli {
    /// Print only errors
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Say what gpurun does (mounts, binds, devices)
    #[arg(short, long, global = true)]
    pub verbose: bool,
    /// Also print the cause chain of errors and every mount
    #[arg(long, global = true)]
    pub debug: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a command inside an image
    #[command(after_long_help = man::EXEC_EXAMPLES)]
    Exec(ExecArgs),
    /// Run the image's entrypoint and command (Docker semantics), else /bin/sh
    #[command(after_long_help = man::RUN_EXAMPLES)]
    Run(RunArgs),
    /// Start an interactive shell inside an image
    #[command(after_long_help = man::SHELL_EXAMPLES)]
    Shell(ShellArgs),
    /// List the GPUs this process may use (index, minor, UUID, name, memory, utilisation, processes)
    Gpus(GpusArgs),
    /// Prepare a container and hold it for other processes to join (used by the Slurm plugin)
    #[command(hide = true)]
    Hold(HoldArgs),
    /// Pull an image into one squashfs file (registry, OCI layout, docker archive or directory)
    #[command(after_long_help = man::PULL_EXAMPLES)]
    Pull(PullArgs),
    /// Show an image's source, digest, platform, size, environment, entrypoint and CUDA needs
    #[command(after_long_help = man::INSPECT_EXAMPLES)]
    Inspect(InspectArgs),
    /// List, clean or garbage-collect the blob and image cache
    #[command(after_long_help = man::CACHE_EXAMPLES)]
    Cache(CacheArgs),
    /// Check whether this node can run containers, and say how to fix what is missing
    Doctor(JsonArg),
    /// List your running gpurun containers and image servers on this node
    Ps(JsonArg),
    /// Stop your image servers on this node (all, or IMAGE's): they exit once their containers end
    Stop(StopArgs),
    /// Serve an image to containers (started by gpurun itself)
    #[command(hide = true)]
    Serve(ServeArgs),
    /// Start the image servers of a Slurm job (started by the SPANK plugin)
    #[command(hide = true)]
    Keep(KeepArgs),
    /// Print the merged configuration and where each value came from
    Config(ConfigArgs),
    /// Print the version, git commit, compiler and target
    Version,
    /// Help on a subcommand or a topic: env, binds, gpu, slurm, exit-codes, config, images,
    /// apptainer
    Help(HelpArgs),
    /// Write a shell completion script to stdout (bash, zsh, fish)
    Completions(CompletionsArgs),
    /// Write the man pages (gpurun.1 and one per subcommand) into DIR
    #[command(hide = true)]
    Man(ManArgs),
}

#[derive(Args, Debug)]
pub struct JsonArg {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// A .sqsh file (gpurun, enroot or mksquashfs), an Apptainer .sif file, docker://REF or podman://IMAGE
    pub image: String,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    /// For docker://: the platform to inspect, OS/ARCH[/VARIANT] (default: this machine's)
    #[arg(long, value_name = "OS/ARCH[/VARIANT]")]
    pub platform: Option<String>,
    /// For docker://: allow plain http to a registry that is not on loopback
    #[arg(long)]
    pub insecure: bool,
}

#[derive(Args, Debug)]
pub struct CacheArgs {
    #[command(subcommand)]
    pub command: CacheCommand,
}

#[derive(Subcommand, Debug)]
pub enum CacheCommand {
    /// List cached blobs and images with their size and last use
    List(JsonArg),
    /// Remove everything in the cache that no process uses; say what is kept and for whom
    Clean(CleanArgs),
    /// Remove least recently used entries until the cache fits the limits
    Gc(GcArgs),
}

#[derive(Args, Debug)]
pub struct CleanArgs {
    /// Remove what processes use too, all but what a pull is writing (an open file's space
    /// returns when its process ends)
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct GcArgs {
    /// Remove the least recently used entries until the cache is at most this big (e.g. 20G, 500M)
    #[arg(long, value_name = "SIZE", value_parser = crate::units::parse_size)]
    pub max_size: Option<u64>,
    /// Remove entries not used for this long (e.g. 30d, 12h, 90m)
    #[arg(long, value_name = "AGE", value_parser = crate::units::parse_age)]
    pub older_than: Option<std::time::Duration>,
    /// Say what would be removed, remove nothing
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Print every setting, its value and where it came from (site file, user file, environment)
    Show(JsonArg),
}

#[derive(Args, Debug)]
pub struct HelpArgs {
    /// A subcommand (exec, pull…) or a topic (env, binds, gpu, slurm, exit-codes, config,
    /// images, apptainer)
    #[arg(value_parser = Topic, hide_possible_values = true)]
    pub topic: Vec<String>,
}

/// `help`'s words: any is taken (`help` itself says what it does not know); the topics and the
/// visible subcommands are what shells complete.
#[derive(Clone, Copy)]
struct Topic;

impl clap::builder::TypedValueParser for Topic {
    type Value = String;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        Ok(value.to_string_lossy().into_owned())
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        let mut words: Vec<String> = crate::help::TOPICS
            .iter()
            .map(|(n, _)| n.to_string())
            .collect();
        for sub in Cli::command().get_subcommands() {
            let name = sub.get_name().to_string();
            if !sub.is_hide_set() && name != "help" && !words.contains(&name) {
                words.push(name);
            }
        }
        Some(Box::new(
            words.into_iter().map(clap::builder::PossibleValue::new),
        ))
    }
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    pub dir: PathBuf,
}

/// Options shared by exec, run and shell (and the Slurm plugin's `hold`). Each also reads a
/// `GPURUN_<FLAG>` variable when it is not given (`flag_vars`), as Apptainer's APPTAINER_<FLAG>.
#[derive(Args, Debug, Clone, Default)]
pub struct LaunchOpts {
    /// Bind a host path: SRC[:DST[:FLAGS]], repeatable, comma-separated lists allowed; FLAGS
    /// joined with '+': ro, rw, nosuid, nodev, noexec, [r]private, [r]slave, [r]shared,
    /// [r]unbindable, x-create=dir|file|auto (gpurun help binds)
    #[arg(short = 'B', long = "bind", value_name = "SRC[:DST[:FLAGS]]")]
    pub bind: Vec<String>,
    /// Mount a fresh tmpfs at DST inside: DST[:OPTS], OPTS size=N, mode=OCTAL, ro, noexec…
    /// (comma-separated; repeatable)
    #[arg(long, value_name = "DST[:OPTS]")]
    pub tmpfs: Vec<String>,
    /// An empty home directory and a private /tmp of the container's own (in memory); no cwd bind
    #[arg(short = 'c', long)]
    pub contain: bool,
    /// --contain and --cleanenv together, in PID and IPC namespaces of its own
    #[arg(short = 'C', long)]
    pub containall: bool,
    /// A PID namespace of the container's own, with its own /proc
    #[arg(short = 'p', long)]
    pub pid: bool,
    /// An IPC namespace of the container's own, with its own /dev/shm
    #[arg(short = 'i', long)]
    pub ipc: bool,
    /// A network namespace of the container's own, with only loopback (no network outside)
    #[arg(short = 'n', long)]
    pub net: bool,
    /// The network of --net: none (loopback only) is the one gpurun has; implies --net
    #[arg(long, value_name = "none")]
    pub network: Option<String>,
    /// Do not bind the home directory
    #[arg(long)]
    pub no_home: bool,
    /// Bind SRC as the home directory, at DST inside (default: SRC); also with --contain
    #[arg(short = 'H', long, value_name = "SRC[:DST]")]
    pub home: Option<String>,
    /// Leave out default mounts: home, cwd, tmp, hostfs, bind-paths (the config files' binds),
    /// or the destination of one of those binds or of /etc/hosts, /etc/localtime,
    /// /etc/resolv.conf (comma-separated, repeatable)
    #[arg(long, value_name = "NAME[,NAME…]", value_delimiter = ',')]
    pub no_mount: Vec<String>,
    /// Working directory inside the container (default: the current one); one the container
    /// lacks is an error
    #[arg(long, visible_alias = "cwd", value_name = "DIR")]
    pub pwd: Option<PathBuf>,
    /// Start from an empty environment (plus the image's and --env)
    #[arg(short = 'e', long)]
    pub cleanenv: bool,
    /// Set variables inside: K=V, or a comma-separated list K=V,K2=V2 (Apptainer's rules:
    /// gpurun help env), repeatable
    #[arg(long = "env", value_name = "K=V[,K=V…]")]
    pub env: Vec<String>,
    /// Read K=V lines from a file (comma-separated, repeatable)
    #[arg(long, value_name = "FILE", value_delimiter = ',')]
    pub env_file: Vec<PathBuf>,
    /// Make the root writable with a tmpfs overlay that vanishes on exit
    #[arg(long)]
    pub writable_tmpfs: bool,
    /// Keep the root read-only, also where the site makes it writable by default
    /// (writable_root in the config)
    #[arg(long)]
    pub read_only: bool,
    /// Write changes into the sandbox directory image itself (not a .sqsh or .sif image)
    #[arg(short = 'w', long)]
    pub writable: bool,
    /// Keep the root's changes in directory DIR (in DIR/upper), over the image; DIR:ro reads
    /// them without writing
    #[arg(short = 'o', long, value_name = "DIR[:ro]")]
    pub overlay: Option<String>,
    /// Map your user to root inside the container (no privilege is gained outside)
    #[arg(short = 'f', long)]
    pub fakeroot: bool,
    /// The container's host name (its own UTS namespace)
    #[arg(long, value_name = "NAME")]
    pub hostname: Option<String>,
    #[command(flatten)]
    pub gpu: GpuArgs,
    /// Print the launch plan (mounts, env, devices, uid map) as JSON and run nothing
    #[arg(long)]
    pub dry_run: bool,
}

/// GPU options of exec, run and shell.
#[derive(Args, Debug, Clone, Default)]
pub struct GpuArgs {
    /// Give the container the NVIDIA driver and the allowed GPUs; on by default when a driver is
    /// present (env GPURUN_NV=1|0)
    #[arg(long, conflicts_with = "no_nv")]
    pub nv: bool,
    /// No GPU support, even when a driver is present
    #[arg(long)]
    pub no_nv: bool,
    /// GPUs to use: indices, GPU-/MIG- UUIDs or PCI bus ids, comma-separated, or all, none
    /// [default: CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, Slurm's GPUs, else all allowed]
    #[arg(long, value_name = "LIST|all|none")]
    pub gpus: Option<String>,
    /// Driver capabilities beyond compute and utility: video, graphics, all
    /// [default: NVIDIA_DRIVER_CAPABILITIES]
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub nv_caps: Vec<String>,
    /// A device as the site's CDI specs define it (repeatable): VENDOR/CLASS=NAME, e.g.
    /// nvidia.com/gpu=0, nvidia.com/gpu=all, nvidia.com/gpu=GPU-<uuid> (gpurun help gpu)
    #[arg(long = "device", value_name = "VENDOR/CLASS=NAME")]
    pub devices: Vec<String>,
    #[command(flatten)]
    pub driver: DriverPathArgs,
}

impl GpuArgs {
    /// The options for gpu/: these, the configuration's CDI spec directories, the driver
    /// paths given here or else configured, and the user's cache for the facts kept.
    pub fn opts(
        &self,
        configured_driver_paths: &[PathBuf],
        cdi_spec_dirs: Vec<PathBuf>,
    ) -> GpuOpts {
        GpuOpts {
            nv: self.nv,
            no_nv: self.no_nv,
            gpus: self.gpus.clone(),
            nv_caps: self.nv_caps.clone(),
            devices: self.devices.clone(),
            cdi_spec_dirs,
            driver: DriverPaths {
                paths: self.driver.or_configured(configured_driver_paths),
            },
            kept_facts: Some(crate::store::cache_dir::cache_root()),
        }
    }
}

/// `--nv-driver-path`, for the GPU options of exec/run/shell and for `gpurun gpus`.
#[derive(Args, Debug, Clone, Default)]
pub struct DriverPathArgs {
    /// Extra ld.so.cache files or directories holding the driver's libraries, searched before
    /// /usr/local/nvidia and /etc/ld.so.cache
    #[arg(
        long = "nv-driver-path",
        env = "GPURUN_NV_DRIVER_PATH",
        value_delimiter = ':',
        value_name = "PATH"
    )]
    pub paths: Vec<PathBuf>,
}

impl DriverPathArgs {
    /// `--nv-driver-path` when given, else the configuration's `nv_driver_paths`.
    pub fn or_configured(&self, configured: &[PathBuf]) -> Vec<PathBuf> {
        if self.paths.is_empty() {
            configured.to_vec()
        } else {
            self.paths.clone()
        }
    }
}

/// Everything after the image goes to the container, as with Docker and Apptainer: `run IMG
/// --help` gives `--help` to the entrypoint. The image is the first value of the one trailing
/// positional, after which clap takes nothing as an option of gpurun's.
#[derive(Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    pub opts: LaunchOpts,
    /// Once the command has succeeded, write the container's root with its changes as a new
    /// image OUT (the image's metadata kept)
    #[arg(long, value_name = "OUT.sqsh")]
    pub save: Option<PathBuf>,
    /// The image (a .sqsh or .sif file, a root filesystem directory, docker://REF or
    /// podman://IMAGE), then the command and its arguments
    #[arg(
        value_names = ["IMAGE", "COMMAND"],
        num_args = 2..,
        required = true,
        trailing_var_arg = true
    )]
    pub target: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub opts: LaunchOpts,
    #[command(flatten)]
    pub image: ImageArgs,
}

#[derive(Args, Debug)]
pub struct ShellArgs {
    #[command(flatten)]
    pub opts: LaunchOpts,
    /// Shell to start (default: $SHELL if the image has it, else /bin/sh)
    #[arg(short, long)]
    pub shell: Option<String>,
    #[command(flatten)]
    pub image: ImageArgs,
}

/// run's and shell's image and the words after it.
#[derive(Args, Debug)]
pub struct ImageArgs {
    /// The image, then arguments: run's replace the image's Cmd, shell's go to the shell (-l,
    /// -c 'CMD')
    #[arg(
        value_names = ["IMAGE", "ARGS"],
        num_args = 1..,
        required = true,
        trailing_var_arg = true
    )]
    pub target: Vec<String>,
}

/// The image and what follows it in a launch's trailing values.
pub fn split_target(target: &[String]) -> (String, Vec<String>) {
    match target.split_first() {
        Some((image, rest)) => (image.clone(), rest.to_vec()),
        None => (String::new(), Vec::new()),
    }
}

#[derive(Args, Debug)]
pub struct GpusArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub driver: DriverPathArgs,
}

/// `--bind-json`'s value: one bind, absolute paths.
fn bind_json(text: &str) -> Result<mount_grammar::Bind, String> {
    let b: mount_grammar::Bind = serde_json::from_str(text).map_err(|e| e.to_string())?;
    b.checked().map_err(|e| e.to_string())
}

/// `--home-json`'s value: the home's source and destination, absolute paths.
fn home_json(text: &str) -> Result<mount_grammar::handover::Home, String> {
    let h: mount_grammar::handover::Home = serde_json::from_str(text).map_err(|e| e.to_string())?;
    h.checked().map_err(|e| e.to_string())
}

/// `--tmpfs-json`'s value: a tmpfs at an absolute destination, its options by name.
fn tmpfs_json(text: &str) -> Result<mount_grammar::handover::Tmpfs, String> {
    let t: mount_grammar::handover::Tmpfs =
        serde_json::from_str(text).map_err(|e| e.to_string())?;
    t.checked().map_err(|e| e.to_string())
}

#[derive(Args, Debug)]
pub struct HoldArgs {
    #[command(flatten)]
    pub opts: LaunchOpts,
    /// Write the container's state (JSON: pid, root, env, cwd) here once it is ready
    #[arg(long, value_name = "FILE")]
    pub state: PathBuf,
    /// Run the image's entrypoint once first; the environment and directory it leaves are the
    /// container's (the plugin's --container-entrypoint)
    #[arg(long)]
    pub entrypoint: bool,
    /// Without --pwd, start in the image's WorkingDir where it has one (the plugin's default,
    /// as pyxis's), else as without it
    #[arg(long)]
    pub image_workdir: bool,
    /// When the holder is stopped, write the root with its changes as a new image here
    #[arg(long, value_name = "OUT.sqsh")]
    pub save: Option<PathBuf>,
    /// The plugin's --container-name: the changes are kept in the node's named container
    /// JOB.NAME (made from IMAGE, else run with the image it was made from)
    #[arg(long, value_name = "JOB.NAME", hide = true, requires = "containers")]
    pub name: Option<String>,
    /// With --name: the user's directory of named containers on this node, which the plugin
    /// made as root
    #[arg(long, value_name = "DIR", hide = true, requires = "name")]
    pub containers: Option<std::path::PathBuf>,
    /// With --name: refuse a container that exists already
    #[arg(long, requires = "name", hide = true)]
    pub name_create: bool,
    /// A bind the plugin parsed (`--container-mounts`), as JSON: its paths arrive as they are,
    /// ':' and ',' too, which --bind's text would split at (repeatable)
    #[arg(long, value_name = "JSON", hide = true, value_parser = bind_json)]
    pub bind_json: Vec<mount_grammar::Bind>,
    /// The job's home as the plugin found it, as JSON (`{"src":…,"dst":…}`): a $HOME holding
    /// ':' arrives as one path, where --home SRC:DST would split it
    #[arg(long, value_name = "JSON", hide = true, value_parser = home_json, conflicts_with = "home")]
    pub home_json: Option<mount_grammar::handover::Home>,
    /// A tmpfs the plugin parsed (`--container-mounts`), as JSON (repeatable)
    #[arg(long, value_name = "JSON", hide = true, value_parser = tmpfs_json)]
    pub tmpfs_json: Vec<mount_grammar::handover::Tmpfs>,
    /// Image: a squashfs file
    #[arg(required_unless_present = "name")]
    pub image: Option<String>,
}

#[derive(Args, Debug)]
pub struct StopArgs {
    /// Only the server of this image file
    pub image: Option<PathBuf>,
}

/// An image server's settings (runtime/image_server/serve.rs `Args`).
#[derive(Args, Debug)]
pub struct ServeArgs {
    #[arg(long)]
    pub image: PathBuf,
    #[arg(long)]
    pub id: String,
    /// Seconds
    #[arg(long)]
    pub idle: u64,
    #[arg(long)]
    pub scope: String,
    #[arg(long)]
    pub anchor: Option<i32>,
    #[arg(long)]
    pub kept: Option<PathBuf>,
    #[arg(long)]
    pub private: bool,
}

#[derive(Args, Debug)]
pub struct KeepArgs {
    /// The Slurm job id
    #[arg(long)]
    pub job: String,
}

#[derive(Args, Debug)]
pub struct PullArgs {
    /// docker://[REGISTRY/]REPO[:TAG][@DIGEST], podman://IMAGE, oci:DIR[:TAG],
    /// docker-archive:FILE.tar or dir:ROOTFS
    pub source: String,
    /// Output file, or a directory to put NAME_TAG.sqsh in (default: NAME_TAG.sqsh here)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Platform to pull from a multi-platform image: OS/ARCH[/VARIANT] (default: this machine's)
    #[arg(long, value_name = "OS/ARCH[/VARIANT]")]
    pub platform: Option<String>,
    /// Allow plain http to a registry that is not on loopback
    #[arg(long)]
    pub insecure: bool,
    /// Replace the output file if it exists
    #[arg(short = 'F', long)]
    pub force: bool,
    /// Keep the image in the cache, as `exec docker://…` and `exec podman://…` do (converted
    /// once, kept by digest or image ID), instead of writing a file, and print its path
    #[arg(long, conflicts_with = "output")]
    pub into_cache: bool,
    /// With --into-cache: unpack the image to start from it at once, then write it (run by
    /// `exec docker://…` for an image not cached yet; image/pull/for_start.rs)
    #[arg(long, requires = "into_cache", hide = true)]
    pub for_start: bool,
    /// Threads that inflate a layer and compress the image (default: pull_threads, else the
    /// CPUs this process may use)
    #[arg(short, long, value_name = "N")]
    pub jobs: Option<usize>,
}

/// The command line's definition as help, the man pages and completions show it: the derive's,
/// with every option's `GPURUN_<FLAG>` variable.
pub fn documented() -> clap::Command {
    flag_vars::attach(Cli::command(), flag_vars::Vars::All)
}

/// Every option's `GPURUN_<FLAG>` variable, sorted by name.
pub fn option_vars() -> Vec<flag_vars::FlagVar> {
    flag_vars::all(&Cli::command())
}

/// Parse this process's command line: options, else their `GPURUN_<FLAG>` variables. Help
/// asked for shows every option's variable.
pub fn parse(args: &[String]) -> Result<Cli, clap::Error> {
    let help = args.iter().any(|a| a == "-h" || a == "--help");
    let vars = match help {
        true => flag_vars::Vars::Help,
        false => flag_vars::Vars::Set,
    };
    let mut cmd = flag_vars::attach(Cli::command(), vars);
    let mut m = cmd.try_get_matches_from_mut(args)?;
    Cli::from_arg_matches_mut(&mut m).map_err(|e| e.format(&mut cmd))
}

/// Parse another gpurun's command line (from /proc): this process's variables do not apply.
pub fn parse_other(args: &[String]) -> Option<Cli> {
    Cli::try_parse_from(args).ok()
}

/// The one line for a command line clap refused, where gpurun knows better: an option of
/// Apptainer's or pyxis' (`foreign`). `None`: clap's own message stands.
pub fn refusal(args: &[String], e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(typed)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let cmd = Cli::command();
    let names: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
    foreign::advice(foreign::subcommand(args, &names).as_deref(), typed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_paths_given_win_over_configured() {
        let p = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        let configured = p(&["/site/ld.so.cache"]);
        for (given, want) in [(p(&[]), configured.clone()), (p(&["/x"]), p(&["/x"]))] {
            let d = DriverPathArgs { paths: given };
            assert_eq!(d.or_configured(&configured), want);
        }
    }

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    /// `hold --bind-json`: the plugin's bind as it parsed it, ':' and ',' in its paths kept;
    /// a relative path, or JSON that is no bind, refused.
    #[test]
    fn hold_takes_parsed_binds() {
        let hold = |json: &str| {
            let args = [
                "gpurun",
                "hold",
                "--bind-json",
                json,
                "--state",
                "/s",
                "/i.sqsh",
            ];
            Cli::try_parse_from(args).map(|c| match c.command {
                Command::Hold(a) => a.bind_json,
                c => panic!("{c:?}"),
            })
        };
        let json = r#"{"src":"/w/a:b,c","dst":"/d","readonly":true,"flags":{"nodev":true}}"#;
        let mut want = mount_grammar::Bind::new("/w/a:b,c", "/d", true);
        want.flags.nodev = true;
        assert_eq!(hold(json).unwrap(), [want]);
        for bad in [
            r#"{"src":"rel","dst":"/d","readonly":false,"flags":{}}"#,
            r#"{"src":"/s","dst":"/d","readonly":false,"flags":{"suid":true}}"#,
            "/s:/d",
        ] {
            assert!(hold(bad).is_err(), "{bad}");
        }
    }

    /// `hold --home-json` and `--tmpfs-json`: the plugin's home and tmpfs as it parsed them,
    /// ':' and ',' in their paths kept; a relative path, an unknown option, JSON that is no
    /// home or tmpfs, a field given twice (a value crafted to close its string and add its own
    /// `dst`), or `--home` beside it refused.
    #[test]
    fn hold_takes_parsed_home_and_tmpfs() {
        use mount_grammar::handover::{Home, Tmpfs};
        let hold = |extra: &[&str]| {
            let args = ["gpurun", "hold", "--state", "/s", "/i.sqsh"];
            Cli::try_parse_from(args.iter().chain(extra)).map(|c| match c.command {
                Command::Hold(a) => (a.home_json, a.tmpfs_json),
                c => panic!("{c:?}"),
            })
        };
        let home = r#"{"src":"/h/a:b,c","dst":"/root"}"#;
        let tmpfs = r#"{"dst":"/t:u,v","opts":["size=1G","mode=700"]}"#;
        let (h, t) = hold(&["--home-json", home, "--tmpfs-json", tmpfs]).unwrap();
        let want_home = Home {
            src: "/h/a:b,c".into(),
            dst: "/root".into(),
        };
        let want_tmpfs = Tmpfs {
            dst: "/t:u,v".into(),
            opts: vec!["size=1G".into(), "mode=700".into()],
        };
        assert_eq!((h, t), (Some(want_home), vec![want_tmpfs]));
        for bad in [
            &["--home-json", r#"{"src":"h","dst":"/root"}"#][..],
            &["--home-json", r#"{"src":"/h","dst":"root"}"#],
            &["--home-json", r#"{"src":"/h","dst":"/h","dst":"/etc"}"#],
            &["--home-json", "/h:/root"],
            &["--home-json", home, "--home", "/h"],
            &["--tmpfs-json", r#"{"dst":"t","opts":[]}"#],
            &["--tmpfs-json", r#"{"dst":"/","opts":[]}"#],
            &["--tmpfs-json", r#"{"dst":"/t","opts":["uid=0"]}"#],
            &["--tmpfs-json", "/t:size=1G"],
        ] {
            assert!(hold(bad).is_err(), "{bad:?}");
        }
    }

    fn launch(args: &[&str]) -> (LaunchOpts, String, Vec<String>) {
        let cli = parse_other(&v(args)).unwrap_or_else(|| panic!("{args:?} did not parse"));
        match cli.command {
            Command::Exec(a) => {
                let (i, r) = split_target(&a.target);
                (a.opts, i, r)
            }
            Command::Run(a) => {
                let (i, r) = split_target(&a.image.target);
                (a.opts, i, r)
            }
            Command::Shell(a) => {
                let (i, r) = split_target(&a.image.target);
                (a.opts, i, r)
            }
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn everything_after_the_image_goes_to_the_container() {
        // (command line, contain?, image, what follows it)
        let cases: &[(&[&str], bool, &str, &[&str])] = &[
            (
                &["gpurun", "run", "i.sqsh", "-c", "echo hi"],
                false,
                "i.sqsh",
                &["-c", "echo hi"],
            ),
            (
                &["gpurun", "run", "-c", "i.sqsh", "-c", "x"],
                true,
                "i.sqsh",
                &["-c", "x"],
            ),
            (
                &["gpurun", "run", "i.sqsh", "--help"],
                false,
                "i.sqsh",
                &["--help"],
            ),
            (
                &["gpurun", "run", "i.sqsh", "--", "x"],
                false,
                "i.sqsh",
                &["--", "x"],
            ),
            (&["gpurun", "run", "i.sqsh"], false, "i.sqsh", &[]),
            (
                &["gpurun", "exec", "i.sqsh", "ls", "-c"],
                false,
                "i.sqsh",
                &["ls", "-c"],
            ),
            (
                &["gpurun", "exec", "i.sqsh", "-c", "ls"],
                false,
                "i.sqsh",
                &["-c", "ls"],
            ),
            (
                &["gpurun", "exec", "--contain", "i.sqsh", "--version"],
                true,
                "i.sqsh",
                &["--version"],
            ),
            (
                &["gpurun", "exec", "--", "i.sqsh", "ls"],
                false,
                "i.sqsh",
                &["ls"],
            ),
            (
                &["gpurun", "shell", "i.sqsh", "-c", "echo hi"],
                false,
                "i.sqsh",
                &["-c", "echo hi"],
            ),
            (
                &["gpurun", "-v", "shell", "-s", "/bin/sh", "i.sqsh", "-l"],
                false,
                "i.sqsh",
                &["-l"],
            ),
        ];
        for (args, contain, image, rest) in cases {
            let (o, i, r) = launch(args);
            assert_eq!((o.contain, i.as_str()), (*contain, *image), "{args:?}");
            assert_eq!(r, v(rest), "{args:?}");
        }
        // exec needs a command; an unknown option before the image is an error
        assert!(parse_other(&v(&["gpurun", "exec", "i.sqsh"])).is_none());
        assert!(parse_other(&v(&["gpurun", "exec", "--nope", "i.sqsh", "ls"])).is_none());
    }

    /// What docs/apptainer-and-pyxis.md says of Apptainer's options holds: one it calls the same
    /// is an option of exec, run or shell; one it calls not needed is refused, saying why.
    #[test]
    fn apptainer_table_agrees_with_the_options() {
        let doc = include_str!("../../docs/apptainer-and-pyxis.md");
        let table = doc
            .split("## Apptainer options (exec, run, shell)")
            .nth(1)
            .unwrap();
        let table = table.split("\n## ").next().unwrap();
        let cmd = documented();
        let launches = ["exec", "run", "shell"].map(|n| cmd.find_subcommand(n).unwrap());
        let defined = |o: &str| {
            let arg = |a: &clap::Arg| match o.strip_prefix("--") {
                Some(l) => a
                    .get_long_and_visible_aliases()
                    .unwrap_or_default()
                    .contains(&l),
                None => a.get_short().is_some_and(|s| o == format!("-{s}")),
            };
            launches.iter().any(|s| s.get_arguments().any(arg))
        };
        for row in table.lines().filter(|l| l.starts_with("| `")) {
            let (theirs, ours) = row[2..].split_once(" | ").unwrap();
            let opts = (theirs.split('`').skip(1).step_by(2))
                .flat_map(|c| c.split(", "))
                .map(|o| o.split([' ', '=']).next().unwrap())
                .filter(|o| o.starts_with('-') && !o.ends_with('*'));
            for o in opts {
                if ours.starts_with("the same") || ours.starts_with("always") {
                    assert!(defined(o), "{o} is not an option: {row}");
                } else if ours.starts_with("not needed") {
                    let args = v(&["gpurun", "exec", o, "i", "x"]);
                    let e = cmd.clone().try_get_matches_from(&args).unwrap_err();
                    assert!(refusal(&args, &e).is_some(), "{o} is not refused: {row}");
                }
            }
        }
    }

    /// The commands a user runs are in --help and the README (completions too, which installs
    /// the completion scripts).
    #[test]
    fn commands_are_in_help_and_readme() {
        let readme = include_str!("../../README.md");
        let cmd = documented();
        let shown: Vec<&str> = (cmd.get_subcommands())
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name())
            .collect();
        for name in [
            "exec",
            "run",
            "shell",
            "pull",
            "inspect",
            "cache",
            "doctor",
            "ps",
            "stop",
            "config",
            "gpus",
            "completions",
        ] {
            assert!(shown.contains(&name), "{name} is not in --help");
            let line = format!("gpurun {name}");
            assert!(readme.contains(&line), "{name} is not in the README");
        }
    }

    #[test]
    fn apptainer_and_pyxis_options_are_answered() {
        for (args, says) in [
            (
                &["gpurun", "exec", "--nvccli", "i", "x"][..],
                "--nvccli is an Apptainer option",
            ),
            (
                &["gpurun", "run", "--userns", "i"],
                "user namespace of your own",
            ),
            (
                &["gpurun", "exec", "--container-image=i.sqsh", "x"],
                "srun option of gpurun's Slurm plugin",
            ),
        ] {
            let e = documented().try_get_matches_from(args).unwrap_err();
            let line = refusal(&v(args), &e).unwrap_or_else(|| panic!("{args:?}: {e}"));
            assert!(line.contains(says), "{line}");
        }
        let args = ["gpurun", "exec", "--bogus", "i", "x"];
        let e = documented().try_get_matches_from(args).unwrap_err();
        assert_eq!(refusal(&v(&args), &e), None);
    }
}

//! Command-line definitions. Also the source of completions/ and man/ (see `gpurun completions`).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
    Exec(ExecArgs),
    /// Run the image's entrypoint and command (Docker semantics), else /bin/sh
    Run(RunArgs),
    /// Start an interactive shell inside an image
    Shell(ShellArgs),
    /// List the GPUs this process may use (index, minor, UUID, name, memory, utilisation, processes)
    Gpus(GpusArgs),
    /// Prepare a container and hold it for other processes to join (used by the Slurm plugin)
    #[command(hide = true)]
    Hold(HoldArgs),
    /// Pull an image into one squashfs file (registry, OCI layout, docker archive or directory)
    Pull(PullArgs),
    /// Show an image's source, digest, platform, size, environment, entrypoint and CUDA needs
    Inspect(InspectArgs),
    /// List, clean or garbage-collect the blob and image cache
    Cache(CacheArgs),
    /// Check whether this node can run containers, and say how to fix what is missing
    Doctor(JsonArg),
    /// List your running gpurun containers on this node (pid, image, command, GPUs)
    Ps(JsonArg),
    /// Print the merged configuration and where each value came from
    Config(ConfigArgs),
    /// Print the version, git commit, compiler and target
    Version,
    /// Help on a subcommand or a topic: env, binds, gpu, slurm, exit-codes, config, images
    Help(HelpArgs),
    /// Write a shell completion script to stdout (bash, zsh, fish)
    #[command(hide = true)]
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
    /// A .sqsh file (gpurun, enroot or mksquashfs), an Apptainer .sif file, or docker://REF
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
    /// Remove everything in the cache that no pull is using right now
    Clean,
    /// Remove least recently used entries until the cache fits the limits
    Gc(GcArgs),
}

#[derive(Args, Debug)]
pub struct GcArgs {
    /// Remove the least recently used entries until the cache is at most this big (e.g. 20G, 500M)
    #[arg(long, value_name = "SIZE", value_parser = crate::image::gc::parse_size)]
    pub max_size: Option<u64>,
    /// Remove entries not used for this long (e.g. 30d, 12h, 90m)
    #[arg(long, value_name = "AGE", value_parser = crate::image::gc::parse_age)]
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
    /// A subcommand (exec, pull…) or a topic (env, binds, gpu, slurm, exit-codes, config, images)
    pub topic: Vec<String>,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    pub dir: PathBuf,
}

/// Options shared by exec, run and shell.
#[derive(Args, Debug, Clone, Default)]
pub struct LaunchOpts {
    /// Bind a host path: SRC[:DST[:ro|rw]], repeatable, comma-separated lists allowed
    #[arg(short = 'B', long = "bind", value_name = "SRC[:DST[:ro]]")]
    pub bind: Vec<String>,
    /// Do not bind the home directory, use a private /tmp, and bind no cwd
    #[arg(short = 'c', long)]
    pub contain: bool,
    /// Do not bind the home directory
    #[arg(long)]
    pub no_home: bool,
    /// Working directory inside the container (default: the current one)
    #[arg(long, value_name = "DIR")]
    pub pwd: Option<PathBuf>,
    /// Start from an empty environment (plus the image's and --env)
    #[arg(short = 'e', long)]
    pub cleanenv: bool,
    /// Set an environment variable inside: K=V (repeatable)
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// Read K=V lines from a file
    #[arg(long, value_name = "FILE")]
    pub env_file: Vec<PathBuf>,
    /// Make the root writable with a tmpfs overlay that vanishes on exit
    #[arg(long)]
    pub writable_tmpfs: bool,
    /// Map your user to root inside the container (no privilege is gained outside)
    #[arg(long)]
    pub fakeroot: bool,
    #[command(flatten)]
    pub gpu: crate::gpu::GpuOpts,
    /// Print the launch plan (mounts, env, devices, uid map) as JSON and run nothing
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    pub opts: LaunchOpts,
    /// Image: a squashfs file (gpurun, enroot, mksquashfs) or an Apptainer .sif file
    pub image: String,
    /// Command and its arguments
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub opts: LaunchOpts,
    /// Image: a squashfs file
    pub image: String,
    /// Arguments that replace the image's Cmd
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ShellArgs {
    #[command(flatten)]
    pub opts: LaunchOpts,
    /// Image: a squashfs file
    pub image: String,
    /// Shell to start (default: $SHELL if the image has it, else /bin/sh)
    #[arg(short, long)]
    pub shell: Option<String>,
}

#[derive(Args, Debug)]
pub struct GpusArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub driver: crate::gpu::DriverPaths,
}

#[derive(Args, Debug)]
pub struct HoldArgs {
    #[command(flatten)]
    pub opts: LaunchOpts,
    /// Write the container's state (JSON: pid, root, env, cwd) here once it is ready
    #[arg(long, value_name = "FILE")]
    pub state: PathBuf,
    /// The program the step's tasks will run: its program and libraries are decompressed while
    /// the tasks start
    #[arg(long, value_name = "PROGRAM")]
    pub warm: Option<String>,
    /// Image: a squashfs file
    pub image: String,
}

#[derive(Args, Debug)]
pub struct PullArgs {
    /// docker://[REGISTRY/]REPO[:TAG][@DIGEST], oci:DIR[:TAG], docker-archive:FILE.tar or dir:ROOTFS
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
    /// Compressor threads (default: all CPUs)
    #[arg(short, long, value_name = "N")]
    pub jobs: Option<usize>,
}

use clap::Parser;
use gpurun::cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Exec(_) | Command::Run(_) | Command::Shell(_) => {
            eprintln!("gpurun: not yet built");
            gpurun::exit::GPURUN_FAILED
        }
        Command::Pull(args) => pull(args, cli.quiet),
    };
    std::process::exit(code);
}

fn pull(args: gpurun::cli::PullArgs, quiet: bool) -> i32 {
    use gpurun::image::pull::{self, PullOptions};
    let opts = PullOptions {
        platform: args.platform,
        insecure: args.insecure,
        quiet,
        force: args.force,
        jobs: args.jobs,
        cache: None,
        handle_signals: true,
    };
    match pull::pull(&args.source, args.output.as_deref(), &opts) {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("gpurun: {e}");
            e.exit_code()
        }
    }
}

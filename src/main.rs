use clap::Parser;
use gpurun::cli::{Cli, Command, LaunchOpts};
use gpurun::runtime::plan::{Action, Request};
use gpurun::runtime::start::{start, Launch, StartError};

fn request(o: &LaunchOpts) -> Request {
    Request {
        binds: o.bind.clone(),
        contain: o.contain,
        no_home: o.no_home,
        pwd: o.pwd.clone(),
        cleanenv: o.cleanenv,
        env: o.env.clone(),
        env_files: Vec::new(),
        writable_tmpfs: o.writable_tmpfs,
        fakeroot: o.fakeroot,
    }
}

fn launch(
    image: String,
    o: LaunchOpts,
    action: Action,
    state: Option<std::path::PathBuf>,
) -> Launch {
    Launch {
        image,
        request: request(&o),
        env_files: o.env_file.clone(),
        action,
        dry_run: o.dry_run,
        state,
    }
}

/// One line for the user; the cause chain only with --debug.
fn report(e: &dyn std::error::Error, debug: bool) {
    eprintln!("gpurun: {e}");
    if debug {
        let mut src = e.source();
        while let Some(s) = src {
            eprintln!("  caused by: {s}");
            src = s.source();
        }
    }
}

fn main() {
    let cli = Cli::parse();
    let result: Result<i32, StartError> = match cli.command {
        Command::Exec(a) => start(launch(a.image, a.opts, Action::Exec(a.command), None)),
        Command::Run(a) => start(launch(a.image, a.opts, Action::Run(a.args), None)),
        Command::Shell(a) => start(launch(a.image, a.opts, Action::Shell(a.shell), None)),
        Command::Hold(a) => start(launch(a.image, a.opts, Action::Hold, Some(a.state))),
        Command::Pull(args) => std::process::exit(pull(args, cli.quiet)),
    };
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            report(&e, cli.debug);
            e.exit_code()
        }
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

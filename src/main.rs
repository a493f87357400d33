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
    quiet: bool,
) -> Launch {
    Launch {
        image,
        request: request(&o),
        env_files: o.env_file.clone(),
        action,
        dry_run: o.dry_run,
        state,
        gpu: o.gpu.clone(),
        quiet,
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

fn launched(r: Result<i32, StartError>, debug: bool) -> i32 {
    match r {
        Ok(code) => code,
        Err(e) => {
            report(&e, debug);
            e.exit_code()
        }
    }
}

fn main() {
    // Before anything else, for every command: installed setuid-root by mistake, `pull -o` would
    // write (and read layouts and archives) as root wherever the caller names.
    if gpurun::runtime::sys::is_setuid() {
        let exe = std::env::current_exe().unwrap_or_else(|_| "gpurun".into());
        eprintln!(
            "gpurun: {}",
            gpurun::runtime::launch::LaunchError::Setuid(exe)
        );
        std::process::exit(gpurun::exit::GPURUN_FAILED);
    }
    let cli = Cli::parse();
    let debug = cli.debug;
    let code = match cli.command {
        Command::Exec(a) => launched(
            start(launch(
                a.image,
                a.opts,
                Action::Exec(a.command),
                None,
                cli.quiet,
            )),
            debug,
        ),
        Command::Run(a) => launched(
            start(launch(
                a.image,
                a.opts,
                Action::Run(a.args),
                None,
                cli.quiet,
            )),
            debug,
        ),
        Command::Shell(a) => launched(
            start(launch(
                a.image,
                a.opts,
                Action::Shell(a.shell),
                None,
                cli.quiet,
            )),
            debug,
        ),
        Command::Hold(a) => launched(
            start(launch(
                a.image,
                a.opts,
                Action::Hold,
                Some(a.state),
                cli.quiet,
            )),
            debug,
        ),
        Command::Pull(args) => pull(args, cli.quiet, debug),
        Command::Gpus(a) => match gpus(&a) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("gpurun: {e:#}");
                gpurun::exit::GPURUN_FAILED
            }
        },
    };
    std::process::exit(code);
}

fn pull(args: gpurun::cli::PullArgs, quiet: bool, debug: bool) -> i32 {
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
            report(&e, debug);
            e.exit_code()
        }
    }
}

fn gpus(a: &gpurun::cli::GpusArgs) -> anyhow::Result<()> {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let l = gpurun::gpu::list(&a.driver_paths, &env)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&l)?);
    } else {
        print!("{}", gpurun::gpu::render(&l));
    }
    Ok(())
}

use std::path::PathBuf;

use gpurun::cli::{CacheCommand, Command, ConfigCommand};
use gpurun::config::{Config, Origin};
use gpurun::runtime::first_start::FirstStartError;
use gpurun::runtime::plan::Action;
use gpurun::runtime::start::{start, Launch, Settings, StartError};

const FAILED: i32 = gpurun::exit::GPURUN_FAILED;

struct Ctx {
    cfg: Config,
    quiet: bool,
    verbose: bool,
    debug: bool,
}

impl Ctx {
    fn settings(&self) -> Settings {
        gpurun::cli::launch::settings(&self.cfg, self.quiet, self.verbose, self.debug)
    }
}

/// `gpurun hold`: the plugin's container; a named one (--name) runs with its overlay directory.
fn hold(mut a: gpurun::cli::HoldArgs, ctx: &Ctx) -> i32 {
    let action = Action::Hold {
        entrypoint: a.entrypoint,
        image_workdir: a.image_workdir,
    };
    let image = match &a.name {
        None => a.image.unwrap_or_default(),
        Some(name) => {
            let uid = nix::unistd::getuid().as_raw();
            let dir = a.containers.as_deref().unwrap_or(std::path::Path::new("/"));
            match gpurun::runtime::named::resolve(dir, name, a.image.as_deref(), a.name_create, uid)
            {
                Ok((image, overlay)) => {
                    a.opts.overlay = Some(overlay.display().to_string());
                    image
                }
                Err(e) => {
                    eprintln!("gpurun: {e}");
                    return FAILED;
                }
            }
        }
    };
    let target = (image, action);
    let mut l = (a.opts).launch(target, a.save, Some(a.state), &ctx.cfg, ctx.settings());
    l.request.parsed_binds = a.bind_json;
    l.request.parsed_tmpfs = a.tmpfs_json;
    l.request.parsed_home = a.home_json;
    go(l, ctx)
}

/// `gpurun stop [IMAGE]`: a line for each server stopped.
fn stop(image: Option<&std::path::Path>, quiet: bool) -> i32 {
    let stopped = gpurun::runtime::image_server::attach::stop(image);
    if !quiet {
        for s in &stopped {
            let busy = match s.containers.len() {
                0 => String::new(),
                n => format!("; it exits when its {n} container(s) end"),
            };
            println!(
                "stopped the server of {} (pid {}){busy}",
                s.image.display(),
                s.pid
            );
        }
        if stopped.is_empty() {
            println!("no image server of yours runs here");
        }
    }
    0
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

/// Start a launch; a docker:// image is pulled first, so the site's registry list applies.
fn go(l: Launch, ctx: &Ctx) -> i32 {
    if let Err(e) = ctx.cfg.check_registry(&l.image) {
        eprintln!("gpurun: {e}");
        return FAILED;
    }
    match start(l) {
        Ok(code) => code,
        // Its pull said why.
        Err(e @ StartError::FirstStart(FirstStartError::Failed { .. })) => e.exit_code(),
        Err(e) => {
            report(&e, ctx.debug);
            e.exit_code()
        }
    }
}

fn main() {
    gpurun::sys::process_start();
    std::process::exit(run(std::env::args_os().collect()))
}

fn run(args: Vec<std::ffi::OsString>) -> i32 {
    let (command, ctx) = setup(args);
    dispatch(command, &ctx)
}

/// Refuse a setuid install, parse the command line, load the config: the command and its
/// context, or exit with the error.
fn setup(args: Vec<std::ffi::OsString>) -> (Command, Ctx) {
    // Before anything else, for every command: installed setuid-root by mistake, `pull -o` would
    // write (and read layouts and archives) as root wherever the caller names.
    if gpurun::sys::is_setuid() {
        let exe = std::env::current_exe().unwrap_or_else(|_| "gpurun".into());
        eprintln!(
            "gpurun: {}",
            gpurun::runtime::launch::LaunchError::Setuid(exe)
        );
        std::process::exit(gpurun::exit::GPURUN_FAILED);
    }
    let args: Vec<String> = args
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let cli = match gpurun::cli::parse(&args) {
        Ok(c) => c,
        Err(e) => match gpurun::cli::refusal(&args, &e) {
            Some(line) => {
                eprintln!("gpurun: {line}");
                std::process::exit(e.exit_code());
            }
            None => e.exit(),
        },
    };
    let debug = cli.debug;
    let cfg = match Config::load() {
        Ok(c) => c,
        Err(e) => {
            report(&e, debug);
            std::process::exit(FAILED);
        }
    };
    gpurun::store::cache_dir::configure(gpurun::store::cache_dir::Settings {
        dir: cfg.cache_dir.value.clone(),
        shared: cfg.shared_cache.value.clone(),
    });
    let ctx = Ctx {
        cfg,
        quiet: cli.quiet,
        verbose: cli.verbose,
        debug,
    };
    (cli.command, ctx)
}

/// Run one command; its exit code.
fn dispatch(command: Command, ctx: &Ctx) -> i32 {
    match command {
        Command::Exec(a) => go(a.launch(&ctx.cfg, ctx.settings()), ctx),
        Command::Run(a) => go(a.launch(&ctx.cfg, ctx.settings()), ctx),
        Command::Shell(a) => go(a.launch(&ctx.cfg, ctx.settings()), ctx),
        Command::Hold(a) => hold(a, ctx),
        Command::Pull(args) => pull(args, ctx),
        Command::Gpus(a) => {
            let paths = a.driver.or_configured(&ctx.cfg.nv_driver_paths.value);
            gpus(&paths, a.json).unwrap_or_else(|e| {
                report(&e, ctx.debug);
                FAILED
            })
        }
        Command::Inspect(a) => inspect(a, ctx),
        Command::Cache(a) => done(cache(a.command, ctx), ctx.debug),
        Command::Doctor(a) => doctor(a.json, ctx),
        Command::Ps(a) => ps(a.json, ctx),
        Command::Stop(a) => stop(a.image.as_deref(), ctx.quiet),
        Command::Serve(a) => serve(a),
        Command::Keep(a) => gpurun::runtime::image_server::job_keeper::run(&a.job),
        Command::Config(a) => match a.command {
            ConfigCommand::Show(j) => {
                config_show(&ctx.cfg, j.json);
                0
            }
        },
        Command::Version => version(),
        Command::Help(h) => help(&h.topic),
        Command::Completions(a) => {
            let cmd = gpurun::cli::documented();
            let out = gpurun::cli::complete::generate(a.shell, &cmd, &mut std::io::stdout());
            done(out.map_err(anyhow::Error::from), ctx.debug)
        }
        Command::Man(a) => done(man(&a.dir).map_err(anyhow::Error::from), ctx.debug),
    }
}

/// `gpurun ps`, as JSON or as a table.
fn ps(json: bool, ctx: &Ctx) -> i32 {
    let v = gpurun::ps::report(&ctx.cfg.nv_driver_paths.value);
    print_report(&v, json, gpurun::ps::render);
    0
}

/// A report as pretty JSON, or rendered for people.
fn print_report<T: serde::Serialize>(v: &T, json: bool, render: impl Fn(&T) -> String) {
    if json {
        let text = serde_json::to_string_pretty(v).expect("reports serialise");
        println!("{text}");
    } else {
        print!("{}", render(v));
    }
}

/// `gpurun serve`: the image server of one image.
fn serve(a: gpurun::cli::ServeArgs) -> i32 {
    gpurun::runtime::image_server::serve::run(gpurun::runtime::image_server::serve::Args {
        image: a.image,
        id: a.id,
        idle: std::time::Duration::from_secs(a.idle),
        scope: a.scope,
        anchor: a.anchor,
        kept: a.kept,
        private: a.private,
    })
}

/// `gpurun version`: the version and what it was built from.
fn version() -> i32 {
    let b = &gpurun::version::BUILD;
    println!(
        "gpurun {}\ncommit  {}\nrustc   {}\ntarget  {}",
        b.version, b.commit, b.rustc, b.target
    );
    0
}

/// The settings, then the options set by their `GPURUN_<FLAG>` variables (`flags` in JSON).
fn config_show(cfg: &Config, json: bool) {
    use gpurun::cli::flag_vars;
    let env = gpurun::env_vars::host_env();
    let flags = flag_vars::set_in(&gpurun::cli::option_vars(), &env);
    if json {
        let mut v = serde_json::to_value(cfg).expect("config serialises");
        v["flags"] = serde_json::to_value(&flags).expect("flags serialise");
        println!("{}", serde_json::to_string_pretty(&v).expect("JSON"));
    } else {
        print!("{}{}", cfg.render(), flag_vars::render(&flags));
    }
}

fn done(r: anyhow::Result<()>, debug: bool) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("gpurun: {e}");
            if debug {
                for c in e.chain().skip(1) {
                    eprintln!("  caused by: {c}");
                }
            }
            FAILED
        }
    }
}

fn pull_options(
    platform: Option<String>,
    insecure: bool,
    ctx: &Ctx,
) -> gpurun::image::pull::PullOptions {
    gpurun::image::pull::PullOptions {
        platform,
        insecure,
        quiet: ctx.quiet,
        force: false,
        jobs: ctx.cfg.pull_threads.value,
        cache: None,
        compression: ctx.cfg.compression.value.clone(),
        handle_signals: true,
    }
}

fn pull(args: gpurun::cli::PullArgs, ctx: &Ctx) -> i32 {
    use gpurun::image::pull;
    if let Err(e) = ctx.cfg.check_registry(&args.source) {
        eprintln!("gpurun: {e}");
        return FAILED;
    }
    let opts = pull::PullOptions {
        force: args.force,
        jobs: args.jobs.or(ctx.cfg.pull_threads.value),
        ..pull_options(args.platform, args.insecure, ctx)
    };
    let pulled = match args.into_cache {
        true if !gpurun::image::reference::is_reference(&args.source) => {
            eprintln!(
                "gpurun: pull --into-cache {}: only docker:// and podman:// references go into the cache; pull it to a file (-o FILE)",
                args.source
            );
            return FAILED;
        }
        true if args.for_start => {
            let done = pull::for_start(
                &args.source,
                &opts,
                &mut std::io::stdout(),
                std::io::stdin(),
            );
            if let Err(e) = &done {
                let _ = pull::tell(&mut std::io::stdout(), &pull::Said::Failed(e.exit_code()));
            }
            done
        }
        true => pull::ensure_local(&args.source, &opts).map(|p| println!("{}", p.display())),
        false => pull::pull(&args.source, args.output.as_deref(), &opts).map(|_| ()),
    };
    match pulled {
        Ok(()) => 0,
        Err(e) => {
            report(&e, ctx.debug);
            e.exit_code()
        }
    }
}

fn inspect(a: gpurun::cli::InspectArgs, ctx: &Ctx) -> i32 {
    use gpurun::image::inspect;
    if let Err(e) = ctx.cfg.check_registry(&a.image) {
        eprintln!("gpurun: {e}");
        return FAILED;
    }
    let opts = gpurun::image::pull::PullOptions {
        handle_signals: false,
        ..pull_options(a.platform, a.insecure, ctx)
    };
    match inspect::inspect(&a.image, &opts, gpurun::gpu::require::constraints) {
        Ok(r) => {
            if a.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r).expect("reports serialise")
                );
            } else {
                print!("{}", inspect::render(&r));
            }
            0
        }
        Err(e) => {
            report(&e, ctx.debug);
            e.exit_code()
        }
    }
}

fn cache(c: CacheCommand, ctx: &Ctx) -> anyhow::Result<()> {
    use gpurun::image::gc;
    let cache = gpurun::image::cache::Cache::open(&gpurun::store::cache_dir::cache_root())?;
    let from_files = match &ctx.cfg.cache_dir.from {
        Origin::Site(_) | Origin::User(_) => ctx.cfg.cache_dir.value.as_deref(),
        _ => None,
    };
    if matches!(c, CacheCommand::Clean(_)) {
        // Image servers hold their images open: the idle ones end first.
        gpurun::runtime::image_server::attach::stop(None);
    }
    let entries = gc::list(&cache, &gc::Activity::scan(cache.root(), from_files))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let (chosen, dry_run, force) = match c {
        CacheCommand::List(j) => return cache_list(&entries, cache.root(), j.json),
        CacheCommand::Clean(a) => (
            gc::choose(&entries, None, None, now, a.force),
            false,
            a.force,
        ),
        CacheCommand::Gc(g) => {
            if g.max_size.is_none() && g.older_than.is_none() {
                anyhow::bail!("gc needs --max-size SIZE and/or --older-than AGE (gpurun cache clean removes everything unused)");
            }
            (
                gc::choose(&entries, g.max_size, g.older_than, now, false),
                g.dry_run,
                false,
            )
        }
    };
    let mut removed = vec![false; entries.len()];
    for &i in &chosen {
        removed[i] = dry_run || gc::remove(&entries[i])?;
    }
    if !ctx.quiet {
        cache_report(&entries, &removed, dry_run, force);
    }
    Ok(())
}

/// What `cache clean|gc` removed, and what it kept and why (the process that uses it).
fn cache_report(
    entries: &[gpurun::image::gc::Entry],
    removed: &[bool],
    dry_run: bool,
    force: bool,
) {
    use gpurun::units::human_size;
    let (mut freed, mut kept) = (0, 0);
    for (e, &gone) in entries.iter().zip(removed) {
        let what = format!(
            "{} {} ({})",
            format!("{:?}", e.kind).to_lowercase(),
            e.name,
            human_size(e.size_bytes)
        );
        let why = e.in_use.as_deref();
        match (gone, why) {
            (true, None) => println!(
                "{} {what}",
                if dry_run { "would remove" } else { "removed" }
            ),
            (true, Some(why)) => println!("removed {what}, which was {why}"),
            (false, Some(why)) => println!("kept {what}: {why}"),
            (false, None) => {}
        }
        freed += if gone { e.size_bytes } else { 0 };
        kept += usize::from(!gone && why.is_some());
    }
    let more = if kept > 0 && !force && entries.iter().any(|e| e.in_use.is_some() && !e.locked) {
        " (gpurun cache clean --force removes them, but for what a pull is writing)"
    } else {
        ""
    };
    println!(
        "{} {}; kept {kept} in use{more}",
        if dry_run { "would free" } else { "freed" },
        human_size(freed)
    );
}

/// `gpurun cache list`: every blob and image of the cache, as JSON or as a table.
fn cache_list(
    entries: &[gpurun::image::gc::Entry],
    root: &std::path::Path,
    json: bool,
) -> anyhow::Result<()> {
    use gpurun::units::human_size;
    if json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
        return Ok(());
    }
    // IN USE last: it names the process that uses the entry, of any length.
    println!(
        "{:<8} {:<20} {:>10}  {:<71}  IN USE",
        "KIND", "LAST USED", "SIZE", "NAME"
    );
    for e in entries {
        println!(
            "{:<8} {:<20} {:>10}  {:<71}  {}",
            format!("{:?}", e.kind).to_lowercase(),
            gpurun::ps::utc(e.last_used),
            human_size(e.size_bytes),
            e.name,
            e.in_use.as_deref().unwrap_or("-")
        );
    }
    let total: u64 = entries.iter().map(|e| e.size_bytes).sum();
    println!(
        "{} entries, {} in {}",
        entries.len(),
        human_size(total),
        root.display()
    );
    Ok(())
}

fn doctor(json: bool, ctx: &Ctx) -> i32 {
    let checks = gpurun::doctor::run(
        &ctx.cfg.nv_driver_paths.value,
        &gpurun::store::cache_dir::cache_root(),
    );
    print_report(&checks, json, |c| gpurun::doctor::render(c));
    if gpurun::doctor::healthy(&checks) {
        0
    } else {
        1
    }
}

fn help(topic: &[String]) -> i32 {
    let mut cmd = gpurun::cli::documented();
    let Some(first) = topic.first() else {
        let _ = cmd.print_long_help();
        let names: Vec<&str> = gpurun::help::TOPICS.iter().map(|(n, _)| *n).collect();
        println!("\nTopics: gpurun help {}", names.join("|"));
        return 0;
    };
    if let Some(text) = gpurun::help::topic(first) {
        print!("{text}");
        return 0;
    }
    // A subcommand path: `help cache gc`; built so usage lines carry the full command name.
    cmd.build();
    let mut sub = &mut cmd;
    for name in topic {
        match sub.find_subcommand_mut(name) {
            Some(s) => sub = s,
            None => {
                let names: Vec<&str> = gpurun::help::TOPICS.iter().map(|(n, _)| *n).collect();
                eprintln!(
                    "gpurun: no subcommand or help topic '{}'; topics: {}; subcommands: gpurun --help",
                    topic.join(" "),
                    names.join(", ")
                );
                return FAILED;
            }
        }
    }
    let _ = sub.print_long_help();
    0
}

/// gpurun.1 and one page per subcommand. The version is left out of the pages' headers (only
/// the package version is shown), so the checked-in pages change with the interface, not with
/// every commit.
fn man(dir: &std::path::Path) -> std::io::Result<()> {
    let cmd = gpurun::cli::documented().long_version(None::<&str>);
    gpurun::cli::man::generate(cmd, dir)
}

/// `gpurun gpus`: its exit status says whether a container here can be given a GPU.
fn gpus(driver_paths: &[PathBuf], json: bool) -> Result<i32, gpurun::gpu::GpuError> {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let l = gpurun::gpu::list(driver_paths, &env)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&l).expect("reports serialise")
        );
    } else {
        print!("{}", gpurun::gpu::render(&l));
    }
    Ok(l.exit_code())
}

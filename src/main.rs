use clap::Parser;
use gpurun::cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Exec(_) | Command::Run(_) | Command::Shell(_) => {
            eprintln!("gpurun: not yet built");
            gpurun::exit::GPURUN_FAILED
        }
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

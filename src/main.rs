use clap::Parser;
use gpurun::cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Exec(_) | Command::Run(_) | Command::Shell(_) => {
            eprintln!("gpurun: not yet built");
            gpurun::exit::GPURUN_FAILED
        }
    };
    std::process::exit(code);
}

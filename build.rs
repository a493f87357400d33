//! Build information for `gpurun version`: git commit, compiler and target, fixed at build time so
//! a binary copied to a cluster still says what it is.

use std::process::Command;

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let o = Command::new(cmd).args(args).output().ok()?;
    if !o.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&o.stdout).trim().to_string()).filter(|s| !s.is_empty())
}

fn main() {
    // A release tarball has no .git: the packager sets GPURUN_GIT_COMMIT instead.
    println!("cargo:rerun-if-env-changed=GPURUN_GIT_COMMIT");
    let commit = std::env::var("GPURUN_GIT_COMMIT")
        .ok()
        .or_else(|| {
            let hash = output("git", &["rev-parse", "--short=12", "HEAD"])?;
            let dirty = output("git", &["status", "--porcelain", "--untracked-files=no"]).is_some();
            Some(if dirty { format!("{hash}-dirty") } else { hash })
        })
        .unwrap_or_else(|| "unknown".into());
    // logs/HEAD changes on every commit and checkout, so the commit stays current without
    // rebuilding on every build.
    if let Some(dir) = output("git", &["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/logs/HEAD");
        println!("cargo:rerun-if-changed={dir}/HEAD");
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = output(&rustc, &["--version"]).unwrap_or_else(|| "rustc unknown".into());
    println!("cargo:rustc-env=GPURUN_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=GPURUN_RUSTC={rustc_version}");
    println!(
        "cargo:rustc-env=GPURUN_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
}

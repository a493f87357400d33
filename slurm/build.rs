//! Exports the installed Slurm's SLURM_VERSION_NUMBER as `plugin_version`: Slurm's plugin loader
//! refuses a plugin whose major.minor differs from its own.
//!
//! Source, in order: the SLURM_VERSION_NUMBER environment variable (e.g. `0x160508`, to build for
//! another Slurm than the headers here), then `slurm/slurm_version.h` under SLURM_INCLUDE_DIR
//! (default /usr/include, from libslurm-dev). Without either the workspace still builds (so
//! `cargo build` works on a machine without Slurm) but the plugin carries version 0, which every
//! Slurm refuses at load time with "Incompatible Slurm plugin version": a cargo warning says so.
use std::{env, fs, path::PathBuf};

fn parse_header(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        match (w.next(), w.next(), w.next()) {
            (Some("#define"), Some("SLURM_VERSION_NUMBER"), Some(v)) => Some(v.to_string()),
            _ => None,
        }
    })
}

fn parse_number(v: &str) -> Option<u32> {
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=SLURM_VERSION_NUMBER");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    let inc = env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let hdr = PathBuf::from(&inc).join("slurm/slurm_version.h");
    println!("cargo:rerun-if-changed={}", hdr.display());

    let (num, from) = if let Ok(v) = env::var("SLURM_VERSION_NUMBER") {
        let n = parse_number(v.trim())
            .unwrap_or_else(|| panic!("SLURM_VERSION_NUMBER={v:?} is not a number like 0x160508"));
        (n, "SLURM_VERSION_NUMBER".to_string())
    } else if let Ok(text) = fs::read_to_string(&hdr) {
        let v = parse_header(&text)
            .unwrap_or_else(|| panic!("no SLURM_VERSION_NUMBER in {}", hdr.display()));
        let n = parse_number(&v).unwrap_or_else(|| panic!("bad SLURM_VERSION_NUMBER {v:?}"));
        (n, hdr.display().to_string())
    } else {
        println!(
            "cargo:warning=no {} (install libslurm-dev, or set SLURM_VERSION_NUMBER): \
             the SPANK plugin is built with plugin_version 0 and Slurm will refuse to load it",
            hdr.display()
        );
        (0, "none".to_string())
    };
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("slurm_version.rs");
    fs::write(
        out,
        format!("/// From {from}.\npub const SLURM_VERSION_NUMBER: u32 = {num:#x};\n"),
    )
    .unwrap();
}

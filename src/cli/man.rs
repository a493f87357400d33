//! Man pages: clap_mangen's NAME, SYNOPSIS, DESCRIPTION, OPTIONS and SUBCOMMANDS, then the
//! sections written here: EXAMPLES (a command's `after_long_help`, which `--help` shows too),
//! ENVIRONMENT (each option's `GPURUN_<FLAG>`, and the variables in `VARIABLES`) and, in
//! gpurun(1), EXIT STATUS.

use std::io::Write;
use std::path::Path;

use clap::Command;

pub const ROOT_EXAMPLES: &str = "\
Examples:
  gpurun pull docker://nvcr.io/nvidia/pytorch:24.05-py3
  gpurun exec pytorch_24.05-py3.sqsh python train.py
  srun --gpus-per-task=1 gpurun exec --nv torch.sqsh python train.py
  gpurun help env
";

pub const EXEC_EXAMPLES: &str = "\
Examples:
  gpurun exec torch.sqsh python -c 'import torch; print(torch.cuda.is_available())'
  gpurun exec --gpus 0,1 -B /scratch:/data:ro torch.sqsh python train.py --data /data
  gpurun exec --containall --env OMP_NUM_THREADS=8,LANG=C.UTF-8 torch.sqsh ./bench
  GPURUN_CLEANENV=1 gpurun exec docker://alpine:3 env
  gpurun exec --overlay ~/torch-changes torch.sqsh pip install --user einops
  gpurun exec -B /data:/data:ro+nodev --tmpfs /scratch:size=8G --net torch.sqsh ./offline-job
Everything after the image is the command's: gpurun exec IMG ls --help lists ls's help.
";

pub const RUN_EXAMPLES: &str = "\
Examples:
  gpurun run torch.sqsh
  gpurun run app.sif --input data.csv
  gpurun run --home /scratch/me:/home/me image.sqsh
Everything after the image goes to its entrypoint: gpurun run IMG --help asks the image.
";

pub const SHELL_EXAMPLES: &str = "\
Examples:
  gpurun shell torch.sqsh
  gpurun shell -s /bin/bash --writable-tmpfs --fakeroot debian.sqsh
  gpurun shell --writable --fakeroot ./debian-sandbox/
  gpurun shell debian.sqsh -c 'cat /etc/os-release'
";

pub const PULL_EXAMPLES: &str = "\
Examples:
  gpurun pull docker://ubuntu:24.04
  gpurun pull -o /scratch/images/ docker://nvcr.io/nvidia/pytorch:24.05-py3
  gpurun pull --platform linux/arm64 docker://alpine:3
  gpurun pull docker-archive:image.tar
";

pub const INSPECT_EXAMPLES: &str = "\
Examples:
  gpurun inspect torch.sqsh
  gpurun inspect --json app.sif
  gpurun inspect docker://nvcr.io/nvidia/pytorch:24.05-py3
";

pub const CACHE_EXAMPLES: &str = "\
Examples:
  gpurun cache list
  gpurun cache gc --max-size 20G --older-than 30d
  gpurun cache clean
";

/// Variables besides the options' own, and the pages (commands) they belong on.
const VARIABLES: &[(&str, &[&str], &str)] = &[
    ("GPURUN_<FLAG>", &["gpurun"], "every option of exec, run, shell, pull and inspect, and the global ones, but the outputs --save, --json and pull's --output: GPURUN_CLEANENV=1, GPURUN_PWD=/work, GPURUN_NO_MOUNT=home,tmp (gpurun config show lists those set)"),
    ("GPURUNENV_NAME", &["gpurun", "exec", "run", "shell"], "sets NAME inside the container (as Apptainer's APPTAINERENV_NAME); GPURUN_ENV_NAME, the old form, still works and is warned about"),
    ("GPURUN_BIND", &["gpurun", "exec", "run", "shell"], "binds added to --bind: SRC[:DST[:FLAGS]],…"),
    ("GPURUN_WRITABLE_ROOT", &["gpurun", "exec", "run", "shell"], "1: the root is writable (a tmpfs overlay, as --writable-tmpfs) unless --read-only; writable_root in the config"),
    ("GPURUN_OVERLAY_DRIVER", &["gpurun", "exec", "run", "shell"], "what makes the root's overlay: auto (the kernel's overlayfs, else fuse-overlayfs), kernel, fuse-overlayfs; overlay_driver in the config"),
    ("GPURUN_NV", &["gpurun", "exec", "run", "shell"], "1: --nv; 0: --no-nv"),
    ("GPURUN_CDI_SPEC_DIRS", &["exec", "run", "shell"], "where --device finds CDI specs: DIR:DIR…"),
    ("CUDA_VISIBLE_DEVICES", &["exec", "run", "shell", "gpus"], "the GPUs to use when --gpus is not given (also NVIDIA_VISIBLE_DEVICES, SLURM_STEP_GPUS)"),
    ("GPURUN_CACHEDIR", &["gpurun", "exec", "run", "shell", "pull", "inspect", "cache"], "the cache of blobs and images (default $XDG_CACHE_HOME/gpurun, else /var/tmp/gpurun-UID)"),
    ("GPURUN_DOCKER_USERNAME", &["gpurun", "pull", "inspect", "exec", "run", "shell"], "registry user name (with GPURUN_DOCKER_PASSWORD); else docker's and podman's auth files"),
    ("GPURUN_DOCKER_PASSWORD", &["gpurun", "pull", "inspect", "exec", "run", "shell"], "registry password or token"),
    ("DOCKER_CONFIG", &["pull", "inspect"], "the directory of docker's config.json"),
    ("GPURUN_COMPRESSION", &["gpurun", "pull"], "the squashfs compressor: zstd (default), gzip, xz, lz4"),
    ("GPURUN_ZSTD_LEVEL", &["pull"], "zstd's level (default 3)"),
    ("GPURUN_PULL_THREADS", &["gpurun", "pull"], "threads that inflate a layer and compress the image (default: the CPUs this process may use, its affinity and cgroup respected); pull_threads in the config; pull's --jobs wins"),
    ("GPURUN_ALLOWED_REGISTRIES", &["gpurun", "pull", "inspect"], "registries that may be used: a,b (the site's list otherwise)"),
    ("GPURUN_SITE_CONFIG", &["gpurun", "config"], "another site file than /etc/gpurun/gpurun.toml"),
    ("XDG_CONFIG_HOME", &["config"], "where the user file is: $XDG_CONFIG_HOME/gpurun/config.toml"),
];

/// The man page's lines for `text` (roff-escaped, kept as typed).
fn preformatted(text: &str) -> String {
    let mut out = String::from(".nf\n");
    for line in text.lines() {
        let l = line.replace('\\', "\\e").replace('-', "\\-");
        if l.starts_with('.') || l.starts_with('\'') {
            out.push_str("\\&");
        }
        out.push_str(&l);
        out.push('\n');
    }
    out.push_str(".fi\n");
    out
}

/// A `.TP` item: the name in bold, then the text.
fn item(name: &str, text: &str) -> String {
    let esc = |s: &str| s.replace('\\', "\\e").replace('-', "\\-");
    format!(".TP\n\\fB{}\\fR\n{}\n", esc(name), esc(text))
}

/// The ENVIRONMENT section of page `name` (`gpurun`, `exec`…).
fn environment(cmd: &Command, name: &str) -> String {
    let mut s = String::new();
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        if let (Some(env), Some(long)) = (a.get_env(), a.get_long()) {
            s.push_str(&item(
                &env.to_string_lossy(),
                &format!("the --{long} option"),
            ));
        }
    }
    for (var, _, text) in VARIABLES.iter().filter(|(_, p, _)| p.contains(&name)) {
        s.push_str(&item(var, text));
    }
    if s.is_empty() {
        return s;
    }
    format!(".SH ENVIRONMENT\n{s}")
}

/// One command's page.
fn page(cmd: &Command, root: bool) -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut out)?;
    }
    let after = cmd.get_after_long_help().map(|t| t.to_string());
    let examples = if root {
        Some(ROOT_EXAMPLES.to_string())
    } else {
        after.clone()
    };
    if let Some(e) = examples {
        let body = e.strip_prefix("Examples:\n").unwrap_or(&e);
        out.write_all(format!(".SH EXAMPLES\n{}", preformatted(body)).as_bytes())?;
    }
    let name = if root { "gpurun" } else { cmd.get_name() };
    out.write_all(environment(cmd, name).as_bytes())?;
    if let (true, Some(status)) = (root, after) {
        out.write_all(format!(".SH \"EXIT STATUS\"\n{}", preformatted(&status)).as_bytes())?;
    }
    man.render_version_section(&mut out)?;
    Ok(once_preamble(&out))
}

/// Each of clap_mangen's sections starts with the same two-line preamble; a page needs one.
fn once_preamble(page: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(page);
    let preamble = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n";
    match text.split_once(preamble) {
        Some((head, rest)) => {
            format!("{head}{preamble}{}", rest.replace(preamble, "")).into_bytes()
        }
        None => page.to_vec(),
    }
}

/// gpurun.1 and one page per visible subcommand (gpurun-exec.1, gpurun-cache-gc.1…) in `dir`.
pub fn generate(cmd: Command, dir: &Path) -> std::io::Result<()> {
    fn write(cmd: &Command, dir: &Path, root: bool) -> std::io::Result<()> {
        for s in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            write(s, dir, false)?;
        }
        let name = clap_mangen::Man::new(cmd.clone()).get_filename();
        std::fs::write(dir.join(name), page(cmd, root)?)
    }
    std::fs::create_dir_all(dir)?;
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    write(&cmd, dir, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections() {
        let dir = tempfile::tempdir().unwrap();
        generate(
            super::super::documented().long_version(None::<&str>),
            dir.path(),
        )
        .unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        let root = read("gpurun.1");
        for s in [
            ".SH EXAMPLES",
            ".SH ENVIRONMENT",
            ".SH \"EXIT STATUS\"",
            "GPURUNENV_NAME",
        ] {
            assert!(root.contains(s), "gpurun.1 lacks {s}");
        }
        assert!(!root.contains(".SH EXTRA"));
        assert_eq!(root.matches(".ds Aq").count(), 2, "one preamble:\n{root}");
        let exec = read("gpurun-exec.1");
        for s in [
            ".SH EXAMPLES",
            "gpurun exec \\-\\-gpus 0,1",
            ".SH ENVIRONMENT",
            "\\fBGPURUN_CLEANENV\\fR\nthe \\-\\-cleanenv option",
            "\\fBGPURUN_BIND\\fR",
        ] {
            assert!(exec.contains(s), "gpurun-exec.1 lacks {s}:\n{exec}");
        }
        // No page for a hidden command; every visible one has one.
        assert!(!dir.path().join("gpurun-hold.1").exists());
        assert!(dir.path().join("gpurun-cache-gc.1").exists());
    }
}

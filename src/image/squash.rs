//! Writing the squashfs: the merged tar stream piped into squashfs-tools-ng's `tar2sqfs`
//! (DESIGN decision 3). Kept behind [`SquashWriter`] so an in-process writer can replace it.
//!
//! Options, and why:
//! - `-c zstd -X level=3`: level 15 (tar2sqfs's default) costs many times the CPU for an image a
//!   few percent smaller (benches/pull.sh), a pull on a shared login node is bound by that CPU,
//!   and zstd decompresses equally fast at any level. `GPURUN_ZSTD_LEVEL` overrides it for
//!   images built once and read many times.
//!   The config's `compression` (`GPURUN_COMPRESSION`) picks another compressor.
//! - `-j N`: one compressor job per CPU this process may use (`crate::cpus`, or `pull_threads`),
//!   so a Slurm step compresses on its own cores only.
//! - `--defaults mtime=0`: implicit directories (parents without a tar entry) get a fixed time,
//!   so the same layers always give the same bytes (checked: two builds compare equal).
//! - `--no-skip`: a record tar2sqfs cannot read is an error, not a silently missing file.
//! - `-q -f`: no progress chatter; the output is a new name in gpurun's own staging directory.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

pub const DEFAULT_ZSTD_LEVEL: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum SquashError {
    #[error(
        "cannot run tar2sqfs ({0}); install squashfs-tools-ng (apt-get install squashfs-tools-ng)"
    )]
    Spawn(io::Error),
    #[error("tar2sqfs failed writing {path}: {msg}")]
    Failed { path: PathBuf, msg: String },
    #[error(
        "tar2sqfs could not write {path}: the disk is full; {}",
        full_disk_fix(path)
    )]
    DiskFull { path: PathBuf },
}

/// What to do when writing `path` filled its disk: an image `exec docker://` builds in the cache
/// needs the cache elsewhere; `pull` writes its output where -o says.
pub fn full_disk_fix(path: &Path) -> &'static str {
    if path.starts_with(crate::store::cache_dir::cache_root()) {
        "free space (gpurun cache clean) or set GPURUN_CACHEDIR to a larger file system"
    } else {
        "free space or choose another -o"
    }
}

pub struct SquashWriter {
    child: Child,
    out: PathBuf,
}

impl SquashWriter {
    /// Start `tar2sqfs` writing `out`; feed the tar stream to [`SquashWriter::stdin`].
    pub fn start(
        out: &Path,
        jobs: usize,
        compressor: Option<&str>,
    ) -> Result<SquashWriter, SquashError> {
        let level = std::env::var("GPURUN_ZSTD_LEVEL")
            .ok()
            .and_then(|l| l.parse::<u32>().ok())
            .filter(|l| (1..=22).contains(l))
            .unwrap_or(DEFAULT_ZSTD_LEVEL);
        let compressor = compressor.filter(|c| !c.is_empty()).unwrap_or("zstd");
        let mut cmd = Command::new("tar2sqfs");
        cmd.args(["-q", "-f", "--no-skip", "-c", compressor]);
        if compressor == "zstd" {
            cmd.arg("-X").arg(format!("level={level}"));
        }
        let child = cmd
            .arg("-j")
            .arg(jobs.max(1).to_string())
            .args(["--defaults", "mtime=0"])
            .arg(out)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(SquashError::Spawn)?;
        Ok(SquashWriter {
            child,
            out: out.to_path_buf(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdin(&mut self) -> ChildStdin {
        self.child.stdin.take().expect("stdin taken once")
    }

    /// Wait for tar2sqfs; its stderr becomes the error message. `expected` is about how big the
    /// image would have been (0 if unknown).
    pub fn finish(mut self, expected: u64) -> Result<(), SquashError> {
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let status = self.child.wait().map_err(SquashError::Spawn)?;
        if status.success() {
            return Ok(());
        }
        // tar2sqfs reports ENOSPC as "I/O error" and deletes its output, so the free space now is
        // compared with the image's expected size.
        if err.to_ascii_lowercase().contains("no space left")
            || (err.contains("I/O error") && free_space(&self.out) < expected)
        {
            return Err(SquashError::DiskFull { path: self.out });
        }
        let msg = err
            .lines()
            .rfind(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_string();
        Err(SquashError::Failed {
            path: self.out,
            msg: if msg.is_empty() {
                format!("{status}")
            } else {
                msg
            },
        })
    }

    /// Stop tar2sqfs (after a failed read or an interrupt).
    pub fn abort(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Bytes available to us where `file` lives.
fn free_space(file: &Path) -> u64 {
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    nix::sys::statvfs::statvfs(dir)
        .map(|s| s.blocks_available().saturating_mul(s.fragment_size()))
        .unwrap_or(u64::MAX)
}

//! The first start of a docker:// image the cache does not hold: the pull runs in a process of
//! its own (`gpurun pull --into-cache --for-start`, image/pull/for_start.rs), which unpacks
//! the layers into a private tree and says so; the container starts from that tree while the
//! .sqsh is written behind it. The pull keeps the tree until this gpurun closes its stdin,
//! after the container; it runs detached, so that the end of the container does not kill it,
//! and gives up (removing all it wrote) when this gpurun dies before saying `done`.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};

use crate::image::pull::{Ready, Said, DONE};

#[derive(Debug, thiserror::Error)]
pub enum FirstStartError {
    #[error("cannot start the pull of {reference}: {source}")]
    Spawn {
        reference: String,
        source: std::io::Error,
    },
    /// The pull failed and said why on stderr; its exit status.
    #[error("the pull of {reference} failed (exit status {status})")]
    Failed { reference: String, status: i32 },
}

/// The pull of an image, running on after it said where to start from.
pub struct Pull {
    said: BufReader<ChildStdout>,
    _done: Done,
    image: PathBuf,
}

/// The pull's stdin: `done` goes down it when this gpurun lets go of it, however that happens
/// (an end without it means this gpurun died).
struct Done(Option<ChildStdin>);

impl Drop for Done {
    fn drop(&mut self) {
        if let Some(mut w) = self.0.take() {
            let _ = w.write_all(DONE);
        }
    }
}

/// Pull `reference` for a start. Returns where to start from, and the pull still writing the
/// image when that is a tree.
pub fn pull(reference: &str, quiet: bool) -> Result<(Ready, Option<Pull>), FirstStartError> {
    let spawn_err = |source| FirstStartError::Spawn {
        reference: reference.to_string(),
        source,
    };
    let mut cmd = Command::new("/proc/self/exe");
    // A Slurm step's output is a log: no progress there.
    if quiet || std::env::var_os("SLURM_STEP_ID").is_some() {
        cmd.arg("--quiet");
    }
    cmd.args(["pull", "--into-cache", "--for-start", reference])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().map_err(spawn_err)?;
    let (done, out) = (Done(child.stdin.take()), child.stdout.take());
    // It leaves its work to a child of its own at once.
    child.wait().map_err(spawn_err)?;
    let mut said = out.map(BufReader::new);
    let first = said.as_mut().and_then(next_said);
    let status = match (first, said) {
        (Some(Said::Ready(ready)), Some(said)) => {
            let image = ready.image.clone();
            let pull = ready.tree.is_some().then_some(Pull {
                said,
                _done: done,
                image,
            });
            return Ok((ready, pull));
        }
        (Some(Said::Failed(status)), _) => status,
        _ => crate::exit::GPURUN_FAILED,
    };
    Err(FirstStartError::Failed {
        reference: reference.to_string(),
        status,
    })
}

fn next_said(from: &mut BufReader<ChildStdout>) -> Option<Said> {
    let mut line = String::new();
    match from.read_line(&mut line) {
        Ok(n) if n > 0 => serde_json::from_str(&line).ok(),
        _ => None,
    }
}

impl Pull {
    /// The tree is no longer used: let the pull remove it once the image is written, and wait
    /// for that. A failure there is a warning: the container ran from a whole image.
    pub fn finish(self, quiet: bool) {
        let Pull {
            mut said,
            _done: done,
            image,
        } = self;
        drop(done);
        let fd = [said.get_ref().as_fd()];
        let said_more = !said.buffer().is_empty()
            || crate::sys::wait_readable(&fd, Some(std::time::Duration::ZERO)).is_ok_and(|r| r[0]);
        if !quiet && !said_more {
            eprintln!("gpurun: finishing {} for the next starts", image.display());
        }
        let written = std::iter::from_fn(|| next_said(&mut said)).any(|s| s == Said::Written(true));
        if !written {
            eprintln!(
                "gpurun: warning: {} was not cached; the next start pulls again",
                image.display()
            );
        }
    }
}

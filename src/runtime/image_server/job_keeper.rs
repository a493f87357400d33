//! The keeper of a Slurm job's image servers on a node: the SPANK plugin starts it, as the
//! job's user, in the job's extern step (slurmstepd's `PrologFlags=contain`), which lives as long
//! as the job. A start under that job asks the keeper to start its image server
//! (runtime/image_server/attach.rs), so the server is the keeper's child, in the extern step: it outlives
//! the step that needed it, serves the job's later steps and tasks, and ends with the job,
//! whose end ends the keeper (the server watches it too).
//!
//! Its name is abstract, so anyone may connect: it answers its own user only (SO_PEERCRED of
//! each connection), and starts nothing but `gpurun serve` with settings it derives itself
//! from a typed request: no path, program or argument a peer sends (code in a container shares
//! the host's abstract names) reaches the server's command line but the image's own name,
//! which the server only displays and watches.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::serve;
use crate::sys::{self, Spawn};

/// How long the keeper waits for a request on a connection, and a start for its answer.
const WAIT: Duration = Duration::from_secs(30);

/// What a start asks of the keeper, with the server's three descriptors (`serve::FDS`)
/// attached: its socket, its ready pipe and the image file.
#[derive(Debug, Serialize, Deserialize)]
pub struct Ask {
    /// The asking gpurun's build: the keeper's gpurun starts the server, and both must speak
    /// the same protocol to it.
    pub build: String,
    /// The image file's name (shown by `gpurun ps`, watched for changes); the server serves
    /// the descriptor, whose identity must be `id`.
    pub image: PathBuf,
    pub id: String,
    pub idle_seconds: u64,
    pub keep_blocks: bool,
}

/// Why the keeper starts no server for a request, or a start gets none from it. A keeper's
/// refusal crosses to the asking start as its one line.
#[derive(Debug, thiserror::Error)]
pub enum KeeperError {
    #[error("not a request of gpurun's")]
    NotARequest,
    #[error("the job's keeper is gpurun {0}")]
    OtherBuild(String),
    #[error("a request without the server's descriptors")]
    NoDescriptors,
    #[error("the job's keeper did not answer")]
    NoAnswer,
    /// The keeper's line for why it started no server.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Sys(#[from] sys::SysError),
}

fn build() -> String {
    let b = &crate::version::BUILD;
    format!("{} {}", b.version, b.commit)
}

/// The keeper process of job `job`: starts servers for the user's starts until it is killed.
pub fn run(job: &str) -> i32 {
    sys::set_process_name(c"gpurun-keep");
    let me = nix::unistd::getuid().as_raw();
    let listener = match sys::listen_abstract(&super::socket_names::keeper_name(me, job)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("gpurun: cannot keep the image servers of job {job}: {e}");
            return 1;
        }
    };
    sys::reap_children_automatically();
    loop {
        let Ok(c) = sys::accept(&listener) else {
            continue;
        };
        if sys::peer(&c).is_ok_and(|(uid, _)| uid == me) {
            // A start holds its connection while it decides: each is served apart.
            let job = job.to_string();
            std::thread::spawn(move || answer(&c, &job));
        }
    }
}

/// Answer the requests on one connection until it closes or stays silent for `WAIT`.
fn answer(c: &OwnedFd, job: &str) {
    if sys::set_timeouts(c, WAIT).is_err() {
        return;
    }
    while let Ok((msg, fds)) = sys::receive(c) {
        if msg.is_empty() {
            return;
        }
        let answer = match start(&msg, fds, job) {
            Ok(()) => "{}".to_string(),
            Err(e) => serde_json::json!({ "error": e.to_string() }).to_string(),
        };
        if sys::send(c, answer.as_bytes(), &[]).is_err() {
            return;
        }
    }
}

/// Start the server one request asks for: the job's, anchored to this keeper.
fn start(msg: &[u8], fds: Vec<OwnedFd>, job: &str) -> Result<(), KeeperError> {
    let ask: Ask = serde_json::from_slice(msg).map_err(|_| KeeperError::NotARequest)?;
    if ask.build != build() {
        return Err(KeeperError::OtherBuild(build()));
    }
    if fds.len() != serve::FDS.len() {
        return Err(KeeperError::NoDescriptors);
    }
    // the keeper's own cache, for the image it was given: a request names no place
    let kept = ask.keep_blocks.then(|| kept_file(&fds[2])).flatten();
    let args = serve_args(ask, job, std::process::id() as i32, kept);
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    sys::spawn(
        Path::new("/proc/self/exe"),
        &args.command_line(),
        &raw,
        Spawn::Child,
    )?;
    Ok(())
}

/// Where the keeper's cache keeps the blocks of the image file `image`.
fn kept_file(image: &OwnedFd) -> Option<PathBuf> {
    let archive = crate::image::sif::open_archive(&sys::fd_path(image)).ok()?;
    archive.blocks_file(crate::store::cache_dir::cache_root())
}

/// The server the keeper `keeper` of `job` starts for `ask`: everything but the image's name,
/// its identity and two settings is the keeper's own.
fn serve_args(ask: Ask, job: &str, keeper: i32, kept: Option<PathBuf>) -> serve::Args {
    serve::Args {
        image: ask.image,
        id: ask.id,
        idle: Duration::from_secs(ask.idle_seconds),
        scope: scope_label(job),
        anchor: Some(keeper),
        kept,
        private: false,
    }
}

/// What `gpurun ps` says a job's server belongs to.
pub fn scope_label(job: &str) -> String {
    format!("slurm-job {job}")
}

/// Ask the keeper at the other end of `keeper` (a connection checked to be the user's) to
/// start a server for `ask` with `fds` as its descriptors.
pub fn ask(keeper: &OwnedFd, ask: &Ask, fds: &[RawFd]) -> Result<(), KeeperError> {
    let msg = serde_json::to_vec(ask).expect("requests serialise");
    sys::send(keeper, &msg, fds)?;
    let (answer, _) = sys::receive(keeper)?;
    let answer: serde_json::Value =
        serde_json::from_slice(&answer).map_err(|_| KeeperError::NoAnswer)?;
    match answer.get("error").and_then(|e| e.as_str()) {
        Some(e) => Err(KeeperError::Refused(e.to_string())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the keeper refuses, and the line the asking start shows for it.
    #[test]
    fn refusals_and_their_lines() {
        let ask = |build: &str| {
            let a = Ask {
                build: build.into(),
                image: "/x/i.sqsh".into(),
                id: "1:2".into(),
                idle_seconds: 60,
                keep_blocks: false,
            };
            serde_json::to_vec(&a).unwrap()
        };
        let other = format!("the job's keeper is gpurun {}", build());
        let cases = [
            (b"{".to_vec(), "not a request of gpurun's"),
            (ask("0.1 old"), other.as_str()),
            (ask(&build()), "a request without the server's descriptors"),
        ];
        for (msg, line) in cases {
            let e = start(&msg, Vec::new(), "42").unwrap_err();
            assert_eq!(e.to_string(), line);
        }
    }

    #[test]
    fn a_request_names_no_path_the_server_acts_on() {
        let ask: Ask = serde_json::from_str(
            r#"{"build":"b","image":"/x/i.sqsh","id":"1:2","idle_seconds":60,
                "keep_blocks":true,"kept":"/home/u","args":["serve","--kept","/home/u"]}"#,
        )
        .unwrap();
        let line = serve_args(ask, "42", 7, Some("/c/image-blocks/x.blocks".into())).command_line();
        assert_eq!(
            line,
            [
                "serve",
                "--image",
                "/x/i.sqsh",
                "--id",
                "1:2",
                "--idle",
                "60",
                "--scope",
                "slurm-job 42",
                "--anchor",
                "7",
                "--kept",
                "/c/image-blocks/x.blocks",
            ]
        );
    }
}

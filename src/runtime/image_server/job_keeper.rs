//! The keeper of a Slurm job's image servers on a node: the SPANK plugin starts it, as the
//! job's user, in the job's extern step (slurmstepd's `PrologFlags=contain`), which lives as long
//! as the job. A start under that job asks the keeper to start its image server
//! (runtime/image_server/attach.rs), so the server is the keeper's child, in the extern step: it outlives
//! the step that needed it, serves the job's later steps and tasks, and ends with the job,
//! whose end ends the keeper (the server watches it too).

use std::os::fd::{OwnedFd, RawFd};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sys::{self, Spawn};

/// What a start asks of the keeper, with the server's descriptors attached.
#[derive(Serialize, Deserialize)]
struct Ask {
    /// The asking gpurun's build: the keeper's gpurun starts the server, and both must speak
    /// the same protocol to it.
    build: String,
    args: Vec<String>,
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
            let answer = match start(&c) {
                Ok(()) => "{}".to_string(),
                Err(e) => serde_json::json!({ "error": e }).to_string(),
            };
            let _ = sys::send(&c, answer.as_bytes(), &[]);
        }
    }
}

/// Start the server one connection asks for.
fn start(c: &OwnedFd) -> Result<(), String> {
    sys::set_receive_timeout(c, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    let (msg, fds) = sys::receive(c).map_err(|e| e.to_string())?;
    let ask: Ask = serde_json::from_slice(&msg).map_err(|e| e.to_string())?;
    if ask.build != build() {
        return Err(format!("the job's keeper is gpurun {}", build()));
    }
    if ask.args.first().map(String::as_str) != Some("serve") || fds.len() != 3 {
        return Err("the job's keeper starts image servers only".into());
    }
    let raw: Vec<RawFd> = fds.iter().map(std::os::fd::AsRawFd::as_raw_fd).collect();
    sys::spawn(Path::new("/proc/self/exe"), &ask.args, &raw, Spawn::Child)
        .map_err(|e| e.to_string())
}

/// Ask the keeper at the other end of `keeper` to start `gpurun ARGS` with `fds` as 3, 4, 5.
pub fn ask(keeper: &OwnedFd, args: &[String], fds: &[RawFd]) -> Result<(), String> {
    let ask = Ask {
        build: build(),
        args: args.to_vec(),
    };
    let msg = serde_json::to_vec(&ask).expect("requests serialise");
    sys::set_receive_timeout(keeper, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    sys::send(keeper, &msg, fds).map_err(|e| e.to_string())?;
    let (answer, _) = sys::receive(keeper).map_err(|e| e.to_string())?;
    let answer: serde_json::Value =
        serde_json::from_slice(&answer).map_err(|_| "the job's keeper did not answer")?;
    match answer.get("error").and_then(|e| e.as_str()) {
        Some(e) => Err(e.to_string()),
        None => Ok(()),
    }
}

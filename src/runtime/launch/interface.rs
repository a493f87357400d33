//! What `run` takes and returns besides the plan: the image's root, the holder's state file,
//! the error.

use std::path::PathBuf;

use crate::exit;
use nix::errno::Errno;

use crate::runtime::image_server::attach::{AttachError, Attached};
use crate::sys::SysError;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("cannot create a user namespace ({0}); ask the admin to allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0) — `gpurun doctor` checks this")]
    UserNamespace(SysError),
    /// A call of P's own before or while C runs (pipe, fork, signal mask, waitpid).
    #[error("{what}: {errno}")]
    Call { what: &'static str, errno: Errno },
    #[error("argument contains a NUL byte")]
    ArgumentNul,
    #[error("cannot serve the image: {0}")]
    Serve(AttachError),
    #[error("the image server of {} (pid {pid}) exited; the container could no longer read its image", .image.display())]
    ServerLost { image: PathBuf, pid: u32 },
    #[error("{message}")]
    Child { code: i32, message: String },
    #[error("gpurun is installed setuid or setgid; it needs no privilege: chmod u-s,g-s {0}")]
    Setuid(PathBuf),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Sys(#[from] SysError),
}

impl LaunchError {
    pub fn exit_code(&self) -> i32 {
        match self {
            LaunchError::Child { code, .. } => *code,
            _ => exit::GPURUN_FAILED,
        }
    }
}

/// How the image's root gets into the container.
pub enum Lower {
    /// A directory on the host (a sandbox or an extracted image).
    Dir(PathBuf),
    /// The image, as its server lends it (runtime/image_server/serve.rs): C attaches the mount.
    Served { image: PathBuf, attached: Attached },
}

/// For the Slurm holder: where to write the state once the container is ready.
pub struct HoldState {
    pub path: PathBuf,
}

//! What ends the container process (C) before or instead of its command: the one line P prints
//! and the status gpurun exits with, both derived from the variant.

use std::path::PathBuf;

use nix::errno::Errno;

use super::root::RootError;
use crate::exit;
use crate::sys::SysError;

#[derive(Debug, thiserror::Error)]
pub(super) enum Failure {
    #[error("gpurun exited during start-up")]
    Orphaned,
    #[error("{0}")]
    Root(#[from] RootError),
    #[error("cannot enter the container root: {0}")]
    PivotRoot(SysError),
    #[error("cannot write the holder state")]
    HoldState,
    #[error("--pwd {}: {} in the container; create it (or --bind a directory there) or choose another", .cwd.display(), .errno.desc())]
    Pwd { cwd: PathBuf, errno: Errno },
    /// A setting of C's own (subreaper, no_new_privs).
    #[error("{0}")]
    Call(SysError),
    #[error("--fakeroot: cannot install its seccomp filter ({0}); the kernel needs CONFIG_SECCOMP_FILTER")]
    FakeIds(SysError),
    #[error("no command given")]
    NoCommand,
    #[error("cannot start the command: {0}")]
    Spawn(SysError),
    /// The command could not be exec'd: exec.rs `exec_failure`'s line and status (126, 127).
    #[error("{message}")]
    Exec { code: i32, message: String },
    #[error("the image's entrypoint ({entry}) {how} instead of starting the command; without it: srun --no-container-entrypoint")]
    Entrypoint { entry: String, how: String },
    #[error("cannot read the environment the entrypoint left: {0}")]
    EntrypointEnv(std::io::Error),
}

impl Failure {
    pub(super) fn exit_code(&self) -> i32 {
        match self {
            Failure::Exec { code, .. } => *code,
            _ => exit::GPURUN_FAILED,
        }
    }
}

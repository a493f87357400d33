//! The error of every syscall wrapper: the call, the path it was working on, the errno.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

#[derive(Debug, thiserror::Error)]
pub enum SysError {
    #[error("{what} {path}: {errno}")]
    Path {
        what: &'static str,
        path: PathBuf,
        errno: Errno,
    },
    #[error("{what}: {errno}")]
    Call { what: &'static str, errno: Errno },
    /// A socket name held by another user's process.
    #[error("held by another user (uid {uid})")]
    Foreign { uid: u32 },
}

impl SysError {
    pub fn errno(&self) -> Errno {
        match self {
            SysError::Path { errno, .. } | SysError::Call { errno, .. } => *errno,
            SysError::Foreign { .. } => Errno::EACCES,
        }
    }
}

pub type Result<T> = std::result::Result<T, SysError>;

pub(super) fn at<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(Errno) -> SysError + 'a {
    move |errno| SysError::Path {
        what,
        path: path.to_path_buf(),
        errno,
    }
}

pub(super) fn call(what: &'static str) -> impl FnOnce(Errno) -> SysError {
    move |errno| SysError::Call { what, errno }
}

pub(super) fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("paths from the plan contain no NUL")
}

pub fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

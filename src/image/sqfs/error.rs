//! How reading an image fails, and the errno a FUSE reader gets for each.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SqfsError {
    #[error("cannot read image {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a squashfs image (no squashfs magic); give a .sqsh file made by `gpurun pull`, enroot or mksquashfs")]
    NotSquashfs { path: PathBuf },
    #[error("{path} is squashfs version {major}.{minor}; only 4.0 is supported, rebuild it with squashfs-tools 4.x")]
    Version {
        path: PathBuf,
        major: u16,
        minor: u16,
    },
    #[error("{path} is compressed with {name}, which gpurun cannot read; rebuild it with `mksquashfs -comp zstd` (gzip, lzo, xz and lz4 also work)")]
    Compressor { path: PathBuf, name: String },
    #[error("image {path} is corrupt or truncated ({what}); rebuild or download it again")]
    Corrupt { path: PathBuf, what: String },
    #[error("{inner} in image {path} is not a regular file")]
    NotAFile { path: PathBuf, inner: String },
    #[error("too many levels of symbolic links resolving {inner} in image {path}")]
    SymlinkLoop { path: PathBuf, inner: String },
}

impl SqfsError {
    /// The errno a FUSE reader should get.
    pub fn errno(&self) -> i32 {
        match self {
            SqfsError::NotAFile { .. } => libc::EISDIR,
            SqfsError::SymlinkLoop { .. } => libc::ELOOP,
            _ => libc::EIO,
        }
    }
}

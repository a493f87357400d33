//! How reading an image fails, and the errno a FUSE reader gets for each.

use std::path::PathBuf;

use super::compress::{Compressor, DecompressError};
use super::format::FormatError;

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
    #[error("{path} is compressed with {}, which gpurun cannot read; rebuild it with `mksquashfs -comp zstd` (gzip, lzo, xz and lz4 also work)", Compressor::unread_name(*id))]
    Compressor { path: PathBuf, id: u16 },
    #[error("image {path} is corrupt or truncated ({what}); rebuild or download it again")]
    Corrupt { path: PathBuf, what: String },
    #[error("image {path} is corrupt or truncated ({source}); rebuild or download it again")]
    Format { path: PathBuf, source: FormatError },
    /// A `block` ("data" or "metadata") block at `pos` that does not decompress.
    #[error("image {path} is corrupt or truncated ({block} block at {pos}: {source}); rebuild or download it again")]
    Decompress {
        path: PathBuf,
        block: &'static str,
        pos: u64,
        source: DecompressError,
    },
    #[error("{inner} in image {path} is not a regular file")]
    NotAFile { path: PathBuf, inner: String },
    #[error("too many levels of symbolic links resolving {inner} in image {path}")]
    SymlinkLoop { path: PathBuf, inner: String },
}

/// How a metadata stream fails: a fault in its bytes, for the caller to name the image in, or
/// the image's own error under them (a read, a block that does not decompress).
#[derive(Debug)]
pub enum StreamError {
    Format(FormatError),
    Image(SqfsError),
}

impl From<FormatError> for StreamError {
    fn from(e: FormatError) -> StreamError {
        StreamError::Format(e)
    }
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

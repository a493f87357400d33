//! What [`flatten`](super::flatten) merges: the image's layers and gpurun's own files.

use std::io::{self, Read};

use crate::image::inflate::Span;

/// One layer: a name for messages (its digest) and a way to open its (possibly compressed) tar.
pub struct Layer {
    pub name: String,
    /// Stored (compressed) size in bytes, 0 when unknown: the squashfs is about this big.
    pub size: u64,
    #[allow(clippy::type_complexity)]
    pub open: Box<dyn Fn() -> io::Result<Box<dyn Read + Send>> + Send + Sync>,
    /// The same bytes as a range of a file, where they are one: a gzip layer, or a zstd one of
    /// several frames, then inflates on many cores.
    #[allow(clippy::type_complexity)]
    pub span: Option<Box<dyn Fn() -> io::Result<Span> + Send + Sync>>,
}

/// A file written at the start of the image, ahead of every layer (gpurun's metadata).
pub struct ExtraFile<'a> {
    pub path: &'a str,
    pub data: &'a [u8],
}

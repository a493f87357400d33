//! OCI layer semantics, applied top-down into one tar stream (DESIGN decision 2).
//!
//! Layers are read from the top. The first layer that writes a path decides it; lower layers'
//! entries for that path, or below a whiteout (`.wh.NAME`), an opaque directory (`.wh..wh..opq`)
//! or a non-directory decided above, are skipped. So every entry written is final and the stream
//! has no duplicates. Whiteouts and opaque markers of a layer apply to the layers below it only,
//! so they are committed when the layer ends. The decisions are in [`Merge`] (pure, table-tested);
//! [`flatten`] does the reading and writing.
//!
//! The files: paths.rs (entry names: normalising, limits, whiteouts), merge.rs (the decisions),
//! flattener.rs (the stream, layer by layer), sink.rs (where it goes: a tar stream or a
//! directory), entry.rs (one entry judged and written),
//! hard_links.rs (links written last, or copied), tar_io.rs (headers, xattrs, exact data),
//! layer.rs, report.rs, error.rs.

mod entry;
mod error;
mod flattener;
mod hard_links;
mod layer;
mod merge;
mod paths;
mod report;
mod sink;
mod tar_io;

pub use crate::image::inflate::Span;
pub use error::FlattenError;
pub use flattener::{flatten, flatten_into};
pub use layer::{ExtraFile, Layer};
pub use merge::Merge;
pub use paths::{
    classify, normalize, over_limits, Kind, Normalized, OPAQUE_MARKER, WHITEOUT_PREFIX,
};
pub use report::Report;
pub use sink::Sink;

//! How flattening fails: a layer that cannot be read, an entry refused, the stream cut.

use std::io;

use super::layer::Layer;

#[derive(Debug, thiserror::Error)]
pub enum FlattenError {
    #[error("layer {layer}: {}", read_failure(source))]
    Read { layer: String, source: io::Error },
    #[error("layer {layer}: entry '{entry}' is refused: {why}")]
    Entry {
        layer: String,
        entry: String,
        why: String,
    },
    #[error("writing the merged tar stream to tar2sqfs failed ({0})")]
    Write(io::Error),
}

/// Why a layer could not be read, and the fix: a file the user may not read (`dir:` of another
/// user's tree) is no corrupt blob.
fn read_failure(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::PermissionDenied => format!(
            "permission denied: {e}; ask its owner for read access, or pull as a user who can read it"
        ),
        _ => format!("cannot read it as a tar archive ({e}); the blob may be corrupt, pull again"),
    }
}

/// An entry name for a message: long hostile names are cut, so the message stays one line.
fn shown(raw: &str) -> String {
    let cut: String = raw.chars().take(80).collect();
    if cut.len() < raw.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// The error for an entry `raw` of `layer` that cannot go into the image.
pub(super) fn refused(layer: &Layer, raw: &str, why: String) -> FlattenError {
    FlattenError::Entry {
        layer: layer.name.clone(),
        entry: shown(raw),
        why,
    }
}

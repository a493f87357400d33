//! The metadata gpurun stores inside an image, under `/.gpurun/`: what `run` and the environment need
//! from the OCI image config, plus where the image came from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Path of the metadata file inside the image.
pub const META_PATH: &str = "/.gpurun/meta.json";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ImageMeta {
    /// `KEY=VALUE` strings, as in the OCI config.
    pub env: Vec<String>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub working_dir: String,
    pub user: String,
    pub labels: BTreeMap<String, String>,
    /// The reference the image was pulled from (`docker://…`).
    pub source: String,
    /// Digest of the manifest that was pulled (`sha256:…`).
    pub manifest_digest: String,
    /// `os/arch[/variant]`.
    pub platform: String,
    /// RFC 3339 creation time from the config.
    pub created: String,
}

/// The largest image config or metadata file gpurun reads (real ones are kilobytes; a huge one
/// is an attack on every start that reads it).
pub const MAX_META_BYTES: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("image metadata {META_PATH} is not valid JSON ({0}); pull the image again")]
    Parse(#[from] serde_json::Error),
    #[error("image metadata {path} is {bytes} bytes, over gpurun's limit of {MAX_META_BYTES}; this is not a usable image")]
    TooLarge { path: String, bytes: usize },
}

/// `bytes`, read from `path` in an image, unless larger than [`MAX_META_BYTES`].
pub fn bounded<'a>(path: &str, bytes: &'a [u8]) -> Result<&'a [u8], MetaError> {
    match bytes.len() {
        n if n > MAX_META_BYTES => Err(MetaError::TooLarge {
            path: path.to_string(),
            bytes: n,
        }),
        _ => Ok(bytes),
    }
}

impl ImageMeta {
    pub fn from_json(bytes: &[u8]) -> Result<Self, MetaError> {
        Ok(serde_json::from_slice(bounded(META_PATH, bytes)?)?)
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("ImageMeta serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_defaults() {
        let m = ImageMeta {
            env: vec!["PATH=/usr/bin".into()],
            cmd: vec!["python3".into()],
            ..Default::default()
        };
        assert_eq!(ImageMeta::from_json(&m.to_json()).unwrap(), m);
        // Unknown and missing fields are tolerated so older and newer gpurun read each other's images.
        let m = ImageMeta::from_json(br#"{"cmd":["sh"],"future":1}"#).unwrap();
        assert_eq!(m.cmd, vec!["sh"]);
        assert!(m.env.is_empty());
        let huge = vec![b' '; MAX_META_BYTES + 1];
        let e = ImageMeta::from_json(&huge).unwrap_err().to_string();
        assert!(e.contains("over gpurun's limit"), "{e}");
    }
}

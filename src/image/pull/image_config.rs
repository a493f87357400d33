//! The OCI image config, as every source kind carries it, into gpurun's [`ImageMeta`].

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::image::meta::{ImageMeta, MetaError};

/// Why an image's config is refused; the caller names the image.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error("image config is not valid JSON ({0})")]
    Json(#[source] serde_json::Error),
}

/// The parts of the OCI image config gpurun keeps.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ConfigFile {
    created: Option<String>,
    architecture: String,
    os: String,
    variant: Option<String>,
    config: Option<RunConfig>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "PascalCase")]
struct RunConfig {
    env: Option<Vec<String>>,
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    working_dir: Option<String>,
    user: Option<String>,
    labels: Option<BTreeMap<String, String>>,
}

pub(super) fn image_meta(
    config: &[u8],
    source: &str,
    digest: &str,
) -> Result<ImageMeta, ConfigError> {
    let config = crate::image::meta::bounded("config", config)?;
    let c: ConfigFile = serde_json::from_slice(config).map_err(ConfigError::Json)?;
    let rc = c.config.unwrap_or_default();
    let mut platform = format!("{}/{}", c.os, c.architecture);
    if let Some(v) = c.variant.filter(|v| !v.is_empty()) {
        platform = format!("{platform}/{v}");
    }
    Ok(ImageMeta {
        env: rc.env.unwrap_or_default(),
        entrypoint: rc.entrypoint.unwrap_or_default(),
        cmd: rc.cmd.unwrap_or_default(),
        working_dir: rc.working_dir.unwrap_or_default(),
        user: rc.user.unwrap_or_default(),
        labels: rc.labels.unwrap_or_default(),
        source: source.to_string(),
        manifest_digest: digest.to_string(),
        platform,
        created: c.created.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_to_meta() {
        let cfg = br#"{"created":"2024-01-01T00:00:00Z","architecture":"arm64","variant":"v8","os":"linux",
            "config":{"Env":["PATH=/bin"],"Entrypoint":null,"Cmd":["/bin/sh"],"WorkingDir":"/w","User":"1000:1000",
            "Labels":{"a":"b"}}}"#;
        let m = image_meta(cfg, "docker://x/y:z", "sha256:abc").unwrap();
        assert_eq!(m.env, vec!["PATH=/bin"]);
        assert!(m.entrypoint.is_empty());
        assert_eq!(m.cmd, vec!["/bin/sh"]);
        assert_eq!(
            (m.working_dir.as_str(), m.user.as_str()),
            ("/w", "1000:1000")
        );
        assert_eq!(m.labels.get("a").map(String::as_str), Some("b"));
        assert_eq!(m.platform, "linux/arm64/v8");
        assert_eq!(m.created, "2024-01-01T00:00:00Z");
        assert!(image_meta(b"[", "s", "d").is_err());
    }
}

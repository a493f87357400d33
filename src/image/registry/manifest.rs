//! Manifests and indexes (OCI or Docker v2) as gpurun reads them, and the choice of a platform.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use super::error::ManifestError;

/// Every manifest type gpurun reads, sent on every manifest request.
pub const MANIFEST_MEDIA_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Descriptor {
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub digest: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub platform: Option<Platform>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    /// The tag an OCI layout's index.json gives this image.
    pub fn annotations_ref_name(&self) -> Option<String> {
        self.annotations
            .get("org.opencontainers.image.ref.name")
            .cloned()
    }
}

/// An image manifest or an index (OCI or Docker v2), told apart by their fields.
#[derive(Debug, Clone, Deserialize)]
pub struct Manifest {
    #[serde(rename = "mediaType", default)]
    pub media_type: Option<String>,
    #[serde(default)]
    pub config: Option<Descriptor>,
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    #[serde(default)]
    pub manifests: Option<Vec<Descriptor>>,
}

impl Manifest {
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        serde_json::from_slice(bytes).map_err(ManifestError::Json)
    }
    pub fn is_index(&self) -> bool {
        self.manifests.is_some() && self.config.is_none()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    #[serde(default)]
    pub variant: Option<String>,
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

fn normalize_arch(arch: &str, variant: Option<&str>) -> (String, Option<String>) {
    match (arch, variant) {
        ("x86_64" | "x86-64", v) => ("amd64".into(), v.map(Into::into)),
        ("aarch64" | "arm64", None | Some("v8")) => ("arm64".into(), Some("v8".into())),
        ("armhf", _) => ("arm".into(), Some("v7".into())),
        ("armel", _) => ("arm".into(), Some("v6".into())),
        (a, v) => (a.into(), v.map(Into::into)),
    }
}

impl Platform {
    /// `os/arch[/variant]`, e.g. `linux/arm64/v8`.
    pub fn parse(s: &str) -> Result<Platform, ManifestError> {
        let parts: Vec<&str> = s.split('/').collect();
        if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty()) {
            return Err(ManifestError::Platform(s.to_string()));
        }
        Ok(Platform {
            os: parts[0].to_string(),
            architecture: parts[1].to_string(),
            variant: parts.get(2).map(|v| v.to_string()),
        })
    }

    /// The machine gpurun runs on.
    pub fn host() -> Platform {
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "powerpc64" => "ppc64le",
            a => a,
        };
        Platform {
            os: std::env::consts::OS.to_string(),
            architecture: arch.to_string(),
            variant: None,
        }
    }

    /// Does an index entry for `offered` satisfy a request for `self`? A request without variant
    /// takes any variant.
    pub fn accepts(&self, offered: &Platform) -> bool {
        let (wa, wv) = normalize_arch(&self.architecture, self.variant.as_deref());
        let (oa, ov) = normalize_arch(&offered.architecture, offered.variant.as_deref());
        self.os == offered.os && wa == oa && (self.variant.is_none() || wv == ov)
    }
}

/// The platforms an index offers (attestation manifests, unknown/unknown, are not images).
pub fn platforms(entries: &[Descriptor]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| e.platform.as_ref())
        .filter(|p| p.os != "unknown")
        .map(|p| p.to_string())
        .collect()
}

/// Pick the manifest for `want` from an index (none: [`platforms`] tells what there is).
pub fn choose_platform<'a>(entries: &'a [Descriptor], want: &Platform) -> Option<&'a Descriptor> {
    entries
        .iter()
        .find(|e| e.platform.as_ref().is_some_and(|p| want.accepts(p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(p: &str) -> Descriptor {
        let pl = Platform::parse(p).unwrap();
        Descriptor {
            media_type: String::new(),
            digest: format!("d-{p}"),
            size: 0,
            platform: Some(pl),
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn platforms() {
        let idx = vec![
            entry("linux/amd64"),
            entry("linux/arm/v7"),
            entry("linux/arm64/v8"),
            entry("linux/ppc64le"),
            entry("unknown/unknown"),
        ];
        let cases = [
            ("linux/amd64", Some("linux/amd64")),
            ("linux/arm64", Some("linux/arm64/v8")),
            ("linux/arm64/v8", Some("linux/arm64/v8")),
            ("linux/aarch64", Some("linux/arm64/v8")),
            ("linux/x86_64", Some("linux/amd64")),
            ("linux/arm", Some("linux/arm/v7")),
            ("linux/arm/v7", Some("linux/arm/v7")),
            ("linux/arm/v6", None),
            ("windows/amd64", None),
            ("linux/s390x", None),
        ];
        for (want, got) in cases {
            let r = choose_platform(&idx, &Platform::parse(want).unwrap());
            assert_eq!(
                r.map(|d| d.digest.clone()),
                got.map(|g| format!("d-{g}")),
                "{want}"
            );
        }
        // An arm64 entry without variant is v8.
        let bare = vec![entry("linux/arm64")];
        assert!(choose_platform(&bare, &Platform::parse("linux/arm64/v8").unwrap()).is_some());
        assert!(choose_platform(&idx, &Platform::parse("linux/riscv64").unwrap()).is_none());
        assert_eq!(
            super::platforms(&idx),
            [
                "linux/amd64",
                "linux/arm/v7",
                "linux/arm64/v8",
                "linux/ppc64le"
            ]
        );
        for bad in ["linux", "linux/", "/amd64", "a/b/c/d"] {
            assert!(Platform::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn manifest_kinds() {
        let idx = Manifest::parse(br#"{"schemaVersion":2,"manifests":[{"digest":"x","size":1}]}"#)
            .unwrap();
        assert!(idx.is_index());
        let m = Manifest::parse(br#"{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{"digest":"c","size":2},"layers":[{"digest":"l","size":3}]}"#).unwrap();
        assert!(!m.is_index());
        assert_eq!(m.layers[0].digest, "l");
    }
}

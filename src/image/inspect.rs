//! `gpurun inspect`: what an image is, from the file (any tool's layout) or from the registry
//! (manifest and config only, no layer is downloaded).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::foreign;
use super::meta::{ImageMeta, MetaError};
use super::pull::{PullError, PullOptions};
use super::sif::OpenError;
use super::sqfs::Archive;
use crate::units::human_size;

#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("image {0}: no such file; check the path, or inspect docker://REF")]
    Missing(PathBuf),
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error(transparent)]
    Pull(#[from] PullError),
}

impl InspectError {
    pub fn exit_code(&self) -> i32 {
        match self {
            InspectError::Pull(e) => e.exit_code(),
            _ => crate::exit::GPURUN_FAILED,
        }
    }
}

/// What `gpurun inspect` reports: the image's metadata (flattened into the same JSON object)
/// and what the file or registry tells besides.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The file, or the docker:// reference as given.
    pub image: String,
    /// Whose layout the image follows (gpurun, apptainer, enroot, plain squashfs, registry).
    pub format: String,
    #[serde(flatten)]
    pub meta: ImageMeta,
    /// File size; for docker://, the compressed layers' total (what a pull downloads).
    pub size_bytes: u64,
    /// squashfs compressor, for files.
    pub compression: Option<String>,
    /// NVIDIA_REQUIRE_* constraints the image sets (or that CUDA_VERSION implies), checked
    /// against the driver at launch.
    pub cuda_requirement: BTreeMap<String, String>,
    /// For docker:// of a multi-platform image: every platform it offers (`platform` is the one
    /// shown, this machine's or --platform's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub platforms: Vec<String>,
}

/// An image file opened: a squashfs, or the squashfs inside a SIF.
pub fn open_file(path: &Path) -> Result<Archive, InspectError> {
    if !path.exists() {
        return Err(InspectError::Missing(path.to_path_buf()));
    }
    Ok(super::sif::open_archive(path)?)
}

/// What an image asks of the GPU driver, from its environment: `gpu::require::constraints`,
/// which the caller passes in (image/ does not import gpu/).
pub type Requirements = fn(&[(String, String)]) -> Vec<(String, String)>;

fn report(
    image: String,
    format: String,
    size_bytes: u64,
    compression: Option<String>,
    m: ImageMeta,
    requirements: Requirements,
) -> Report {
    let env: Vec<(String, String)> = m
        .env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Report {
        image,
        format,
        size_bytes,
        compression,
        cuda_requirement: requirements(&env).into_iter().collect(),
        meta: m,
        platforms: Vec::new(),
    }
}

/// Inspect a file, a `docker://` reference or a `podman://` image.
pub fn inspect(
    image: &str,
    opts: &PullOptions,
    requirements: Requirements,
) -> Result<Report, InspectError> {
    if image.starts_with("docker://") {
        let r = super::pull::remote_meta(image, opts)?;
        return Ok(Report {
            platforms: r.platforms,
            ..report(
                image.to_string(),
                "registry".into(),
                r.size,
                None,
                r.meta,
                requirements,
            )
        });
    }
    if image.starts_with("podman://") {
        let (meta, size) = super::pull::podman_meta(image)?;
        let report = report(
            image.to_string(),
            "podman".into(),
            size,
            None,
            meta,
            requirements,
        );
        return Ok(report);
    }
    let path = Path::new(image);
    let archive = open_file(path)?;
    let read = |p: &str| archive.read_file(p).ok().flatten();
    let list = |p: &str| archive.list_names(p);
    let (flavor, meta) = foreign::image_meta(&read, &list)?;
    let format = if super::sif::probe(path).ok().flatten().is_some() {
        format!("{flavor} (SIF)")
    } else {
        flavor.to_string()
    };
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let comp = format!("{:?}", archive.compressor()).to_lowercase();
    Ok(report(
        image.to_string(),
        format,
        size,
        Some(comp),
        meta,
        requirements,
    ))
}

/// The report as text, one field a line; lists indented below their name.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let mut line = |k: &str, v: &str| {
        if !v.is_empty() {
            s.push_str(&format!("{k:<16}{v}\n"));
        }
    };
    line("Image:", &r.image);
    line("Format:", &r.format);
    line("Source:", &r.meta.source);
    line("Digest:", &r.meta.manifest_digest);
    line("Platform:", &r.meta.platform);
    line("Platforms:", &r.platforms.join(", "));
    line("Created:", &r.meta.created);
    line("Size:", &human_size(r.size_bytes));
    line("Compression:", r.compression.as_deref().unwrap_or(""));
    line("Entrypoint:", &shell_words(&r.meta.entrypoint));
    line("Cmd:", &shell_words(&r.meta.cmd));
    line("WorkingDir:", &r.meta.working_dir);
    line("User:", &r.meta.user);
    let mut block = |k: &str, items: Vec<String>| {
        if !items.is_empty() {
            s.push_str(&format!("{k}\n"));
            for i in items {
                s.push_str(&format!("  {i}\n"));
            }
        }
    };
    block("Env:", r.meta.env.clone());
    block(
        "Labels:",
        r.meta
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
    );
    block(
        "CUDA requirement:",
        r.cuda_requirement
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
    );
    s
}

/// Words joined as a shell would need them typed.
fn shell_words(w: &[String]) -> String {
    w.iter()
        .map(|x| {
            if !x.is_empty()
                && x.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/._-=:,+@".contains(c))
            {
                x.clone()
            } else {
                format!("'{}'", x.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_quote() {
        let w = |v: &[&str]| shell_words(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            w(&["python", "-c", "print('x')"]),
            "python -c 'print('\\''x'\\'')'"
        );
        assert_eq!(w(&["a b", ""]), "'a b' ''");
    }
}

//! `gpurun pull`: any source into one squashfs file, and [`ensure_local`] for the runtime.
//!
//! Flow (DESIGN decision 2): resolve the manifest (and platform) and config → layer blobs into
//! the cache, several at once, top layer first, digest-checked → meanwhile the layers are
//! flattened top-down into one tar stream (each layer as soon as its blob is complete) →
//! `tar2sqfs` writes a temp file beside the target → rename. The output appears complete or not at
//! all; the cache only ever holds verified blobs (`*.partial` files are resume points).
//!
//! Known limits: `docker-archive:` members are trusted, not re-hashed (`oci:` blobs are checked
//! against their digests); file names that are not UTF-8 are stored lossily.

mod dir_source;
mod docker_archive_source;
mod error;
mod for_start;
mod image_config;
mod oci_layout_source;
mod options;
mod podman_source;
mod progress;
mod registry_source;
mod save;
mod staging;
mod write_image;

use std::path::{Path, PathBuf};

use crate::image::cache::Cache;
use crate::image::reference::{parse_docker, ImageRef, Source};
use crate::store::cache_dir::cache_root;

use dir_source::rootfs_dir;
use docker_archive_source::docker_archive;
pub use error::{exit, PullError};
pub use for_start::{for_start, tell, Ready, Said, DONE};
use oci_layout_source::oci_layout;
pub use options::PullOptions;
pub use podman_source::podman_meta;
use podman_source::{image_id, podman_image};
use progress::Ui;
pub use registry_source::{remote_meta, Remote};
use registry_source::{resolve_docker, resolve_registry, Resolution};
pub use save::{save, save_target, SaveTarget};
use staging::{signal_runtime, Staging};
use write_image::build;

/// `gpurun pull SOURCE [-o OUT]`: returns the path written.
pub fn pull(source: &str, output: Option<&Path>, opts: &PullOptions) -> Result<PathBuf, PullError> {
    let src = Source::parse(source)?;
    // `-o DIR` puts the default name in DIR.
    let out = match output {
        Some(o) if o.is_dir() => o.join(default_output(&src)),
        Some(o) => o.to_path_buf(),
        None => PathBuf::from(default_output(&src)),
    };
    if out.symlink_metadata().is_ok() && !opts.force {
        return Err(PullError::Exists(out));
    }
    // Before anything is downloaded: an output directory gpurun cannot write to is said now.
    let staging = Staging::beside(&out)?;
    let cache = Cache::open(&opts.cache.clone().unwrap_or_else(cache_root))?;
    let ui = Ui::new(opts.quiet);
    let rt = signal_runtime(opts)?;
    let ((layers, meta), downloads) = match &src {
        Source::Docker(image) => {
            let (layers, meta, d) = rt.block_on(resolve_docker(image, opts, &cache, &ui, None))?;
            ((layers, meta), Some(d))
        }
        Source::OciLayout { dir, tag } => (oci_layout(dir, tag.as_deref(), source, opts)?, None),
        Source::DockerArchive(file) => (docker_archive(file, source)?, None),
        Source::Dir(dir) => (rootfs_dir(dir, source)?, None),
        Source::Podman(name) => {
            let id = image_id(name, source)?;
            (podman_image(name, &id, &staging, source, opts, &ui)?, None)
        }
    };
    let built = build(&layers, &meta, staging, opts, &ui);
    if let Some(d) = downloads {
        d.finish(&rt, built.is_err())?;
    }
    built?;
    Ok(out)
}

/// The cached `.sqsh` a `docker://` reference resolves to now (or, the registry unreachable,
/// last resolved to), if the cache holds it; None when it must be pulled. In this process: a
/// warm start spawns no pull.
pub fn cached_registry_image(
    reference: &str,
    opts: &PullOptions,
) -> Result<Option<PathBuf>, PullError> {
    let Source::Docker(image) = Source::parse(reference)? else {
        return Err(PullError::NotRegistry(reference.to_string()));
    };
    let cache = Cache::open(&opts.cache.clone().unwrap_or_else(cache_root))?;
    let rt = signal_runtime(opts)?;
    let r = match resolve_registry(&image, opts, &cache, &rt)? {
        Resolution::Fresh(r) => r,
        Resolution::LastKnown(path) => return Ok(Some(path)),
    };
    let found = cache.find_image(&r.digest)?;
    if found.is_some() {
        let _ = cache.remember_ref(&r.key, &r.digest);
    }
    Ok(found)
}

/// A cached `.sqsh` for a `docker://` or `podman://` reference: converted on first use, reused
/// after. Safe against concurrent callers.
pub fn ensure_local(reference: &str, opts: &PullOptions) -> Result<PathBuf, PullError> {
    match Source::parse(reference)? {
        Source::Docker(image) => ensure_registry(&image, opts),
        Source::Podman(name) => ensure_podman(&name, reference, opts),
        _ => Err(PullError::NotRegistry(reference.to_string())),
    }
}

/// A registry image, keyed by the manifest digest of the host's (or `opts.platform`'s) image.
fn ensure_registry(image: &ImageRef, opts: &PullOptions) -> Result<PathBuf, PullError> {
    let cache = Cache::open(&opts.cache.clone().unwrap_or_else(cache_root))?;
    let ui = Ui::new(opts.quiet);
    let rt = signal_runtime(opts)?;
    let r = match resolve_registry(image, opts, &cache, &rt)? {
        Resolution::Fresh(r) => *r,
        Resolution::LastKnown(path) => return Ok(path),
    };
    let out = cached_image(&cache, &r.digest, |staging| {
        let resolved = (r.digest.clone(), r.manifest);
        let (layers, meta, downloads) = rt.block_on(resolve_docker(
            image,
            opts,
            &cache,
            &ui,
            Some((r.client, resolved)),
        ))?;
        let built = build(&layers, &meta, staging, opts, &ui);
        downloads.finish(&rt, built.is_err())?;
        built
    })?;
    // Best effort: without it only the offline fallback is lost.
    let _ = cache.remember_ref(&r.key, &r.digest);
    Ok(out)
}

/// An image of the user's podman store, keyed by the ID podman gives it: a name that now points
/// to another image (rebuilt, pulled again) is converted again.
fn ensure_podman(name: &str, reference: &str, opts: &PullOptions) -> Result<PathBuf, PullError> {
    let id = image_id(name, reference)?;
    let cache = Cache::open(&opts.cache.clone().unwrap_or_else(cache_root))?;
    cached_image(&cache, &id, |staging| {
        let ui = Ui::new(opts.quiet);
        // Held while podman saves and the image is built: its task cleans up on a signal.
        let _rt = signal_runtime(opts)?;
        let (layers, meta) = podman_image(name, &id, &staging, reference, opts, &ui)?;
        build(&layers, &meta, staging, opts, &ui)
    })
}

/// The cache's image `key`: found, else made by `make` in a staging directory beside its place,
/// under the key's lock (a process making it meanwhile is waited for, and its image used).
fn cached_image(
    cache: &Cache,
    key: &str,
    make: impl FnOnce(Staging) -> Result<(), PullError>,
) -> Result<PathBuf, PullError> {
    if let Some(found) = cache.find_image(key)? {
        return Ok(found);
    }
    let _lock = cache.lock(key)?;
    let out = cache.image_path(key)?;
    if !out.exists() {
        make(Staging::beside(&out)?)?;
    }
    Ok(out)
}

fn default_output(src: &Source) -> String {
    let stem = |p: &Path| {
        p.file_stem()
            .or_else(|| p.file_name())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "image".into())
    };
    match src {
        Source::Docker(r) => r.default_file_name(),
        Source::OciLayout { dir, tag } => match tag {
            Some(t) => format!("{}_{t}.sqsh", stem(dir)),
            None => format!("{}.sqsh", stem(dir)),
        },
        Source::DockerArchive(f) => format!("{}.sqsh", stem(f)),
        Source::Dir(d) => format!("{}.sqsh", stem(&d.canonicalize().unwrap_or(d.clone()))),
        // Named as the registry image of that name would be: localhost/app:v1 -> app_v1.sqsh.
        Source::Podman(name) => {
            parse_docker(name).map_or_else(|_| "image.sqsh".into(), |r| r.default_file_name())
        }
    }
}

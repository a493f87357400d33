//! `docker://REF`: the manifest (and platform) and config from a registry, and the layer blobs
//! downloaded into the cache while the image is being written.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

use futures_util::StreamExt;

use super::error::PullError;
use super::image_config::image_meta;
use super::options::{wanted_platform, PullOptions};
use super::progress::{mb, short, Ui};
use crate::image::cache::Cache;
use crate::image::flatten::{Layer, Span};
use crate::image::meta::ImageMeta;
use crate::image::reference::{ImageRef, Source};
use crate::image::registry::{
    choose_platform, platforms, AuthSources, Descriptor, Manifest, Platform, RegistryClient,
    RegistryError,
};
use crate::store::cache_dir::cache_root;

/// Layers downloaded at once.
const PARALLEL_DOWNLOADS: usize = 4;

pub(super) fn runtime() -> Result<tokio::runtime::Runtime, PullError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(PullError::Runtime)
}

pub(super) fn client_for(
    image: &ImageRef,
    opts: &PullOptions,
) -> Result<RegistryClient, PullError> {
    let creds = AuthSources::from_env().lookup(&image.registry)?;
    Ok(RegistryClient::new(image, opts.insecure, creds))
}

/// The platform-specific manifest: (digest, bytes); and the platforms of the multi-platform
/// index it was chosen from (none for a single-platform image).
pub(super) async fn resolve_manifest(
    client: &RegistryClient,
    image: &ImageRef,
    opts: &PullOptions,
) -> Result<(Resolved, Vec<String>), PullError> {
    let want = wanted_platform(opts)?;
    let (bytes, digest) = client.manifest(image.reference_part()).await?;
    let m = Manifest::parse(&bytes).map_err(|source| PullError::Manifest {
        image: image.to_string(),
        source,
    })?;
    if !m.is_index() {
        return Ok(((digest, bytes), Vec::new()));
    }
    let entries = m.manifests.unwrap_or_default();
    let chosen = choose_platform(&entries, &want).ok_or_else(|| RegistryError::NoPlatform {
        image: image.to_string(),
        wanted: want.to_string(),
        available: platforms(&entries),
    })?;
    let (bytes, digest) = client.manifest(&chosen.digest).await?;
    Ok(((digest, bytes), platforms(&entries)))
}

type Resolved = (String, Vec<u8>);

/// What `gpurun inspect docker://…` shows of a registry image.
pub struct Remote {
    pub meta: ImageMeta,
    /// The compressed layers' total size.
    pub size: u64,
    /// The platforms of a multi-platform image (empty for a single-platform one).
    pub platforms: Vec<String>,
}

/// A `docker://` image, from the manifest and the config alone (for `gpurun inspect`: no layer
/// is downloaded).
pub fn remote_meta(reference: &str, opts: &PullOptions) -> Result<Remote, PullError> {
    let Source::Docker(image) = Source::parse(reference)? else {
        return Err(PullError::NotRegistry(reference.to_string()));
    };
    let cache = Cache::open(&opts.cache.clone().unwrap_or_else(cache_root))?;
    let rt = runtime()?;
    rt.block_on(async {
        let client = client_for(&image, opts)?;
        let ((digest, bytes), platforms) = resolve_manifest(&client, &image, opts).await?;
        let (m, config) = parse_manifest(&image, &bytes)?;
        let meta = fetch_config(&client, &cache, &image, &config, &digest).await?;
        Ok(Remote {
            meta,
            size: m.layers.iter().map(|l| l.size).sum(),
            platforms,
        })
    })
}

/// A platform's manifest and its config's descriptor.
fn parse_manifest(image: &ImageRef, bytes: &[u8]) -> Result<(Manifest, Descriptor), PullError> {
    let bad = |detail: String| PullError::BadImage {
        image: image.to_string(),
        detail,
    };
    let m = Manifest::parse(bytes).map_err(|source| PullError::Manifest {
        image: image.to_string(),
        source,
    })?;
    let config = m
        .config
        .clone()
        .ok_or_else(|| bad("the manifest has no config".into()))?;
    Ok((m, config))
}

/// The image's config, fetched into the cache (or found there), as [`ImageMeta`].
async fn fetch_config(
    client: &RegistryClient,
    cache: &Cache,
    image: &ImageRef,
    config: &Descriptor,
    digest: &str,
) -> Result<ImageMeta, PullError> {
    let bad = |detail: String| PullError::BadImage {
        image: image.to_string(),
        detail,
    };
    let (path, _) = client.fetch_blob(config, cache, &|_: u64| {}).await?;
    let config_bytes = fs::read(&path).map_err(|e| bad(format!("config: {e}")))?;
    image_meta(&config_bytes, &image.to_string(), digest).map_err(|source| PullError::Config {
        image: image.to_string(),
        source,
    })
}

pub(super) async fn resolve_docker(
    image: &ImageRef,
    opts: &PullOptions,
    cache: &Cache,
    ui: &Ui,
    known: Option<(RegistryClient, Resolved)>,
) -> Result<(Vec<Layer>, ImageMeta, Downloads), PullError> {
    let (client, (digest, bytes)) = match known {
        Some(k) => k,
        None => {
            let c = client_for(image, opts)?;
            let (r, _) = resolve_manifest(&c, image, opts).await?;
            (c, r)
        }
    };
    let (m, config_desc) = parse_manifest(image, &bytes)?;
    ui.line(&format!(
        "Pulling {image} (manifest {}, {} layers)",
        short(&digest),
        m.layers.len()
    ));
    let meta = fetch_config(&client, cache, image, &config_desc, &digest).await?;
    // A single-platform image must still be what --platform asked for.
    if opts.platform.is_some() {
        let want = wanted_platform(opts)?;
        let have = Platform::parse(&meta.platform).map_err(|source| PullError::Manifest {
            image: image.to_string(),
            source,
        })?;
        if !want.accepts(&have) {
            return Err(RegistryError::NoPlatform {
                image: image.to_string(),
                wanted: want.to_string(),
                available: vec![have.to_string()],
            }
            .into());
        }
    }
    let slots: Vec<Arc<Slot>> = m.layers.iter().map(|_| Arc::new(Slot::default())).collect();
    let handle = tokio::spawn(download_all(
        Arc::new(client),
        cache.clone(),
        ui.clone(),
        m.layers.clone(),
        slots.clone(),
    ));
    // Top first: flattening starts as soon as the top layer is in, while the rest download.
    let layers = m
        .layers
        .iter()
        .zip(slots.iter().cloned())
        .rev()
        .map(|(d, slot)| {
            let at = slot.clone();
            Layer {
                name: d.digest.clone(),
                size: d.size,
                open: Box::new(move || {
                    Ok(Box::new(File::open(slot.wait()?)?) as Box<dyn Read + Send>)
                }),
                // The cache holds only blobs checked against their digest as they came in.
                span: Some(Box::new(move || {
                    let file = File::open(at.wait()?)?;
                    let len = file.metadata()?.len();
                    Ok(Span {
                        file,
                        start: 0,
                        len,
                        check: None,
                    })
                })),
            }
        })
        .collect();
    Ok((layers, meta, Downloads { handle, slots }))
}

/// What a layer's reader gets when a download failed (that download's own error is the
/// pull's).
#[derive(Debug, Clone, thiserror::Error)]
#[error("download of layer {digest} failed")]
struct DownloadFailed {
    digest: String,
}

/// Where one layer's download stands; `Layer::open` waits on it.
#[derive(Default)]
struct Slot {
    state: Mutex<Option<Result<PathBuf, DownloadFailed>>>,
    ready: Condvar,
}

impl Slot {
    fn set(&self, r: Result<PathBuf, DownloadFailed>) {
        let mut st = crate::lock(&self.state);
        if st.is_none() {
            *st = Some(r);
        }
        self.ready.notify_all();
    }

    fn failed(&self) -> bool {
        matches!(*crate::lock(&self.state), Some(Err(_)))
    }

    fn wait(&self) -> io::Result<PathBuf> {
        let mut st = crate::lock(&self.state);
        loop {
            match &*st {
                Some(Ok(p)) => return Ok(p.clone()),
                Some(Err(e)) => return Err(io::Error::other(e.clone())),
                None => st = self.ready.wait(st).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }
}

/// The layer downloads running beside the squashfs build.
pub(super) struct Downloads {
    handle: tokio::task::JoinHandle<Result<(), RegistryError>>,
    slots: Vec<Arc<Slot>>,
}

impl Downloads {
    /// Their outcome. A failed download is the real cause of a failed build, so it wins; when
    /// the build failed for its own reason the downloads are stopped (partial blobs stay as
    /// resume points).
    pub(super) fn finish(
        self,
        rt: &tokio::runtime::Runtime,
        build_failed: bool,
    ) -> Result<(), PullError> {
        if build_failed && !self.slots.iter().any(|s| s.failed()) {
            self.handle.abort();
            return Ok(());
        }
        match rt.block_on(self.handle) {
            Ok(r) => r.map_err(PullError::from),
            Err(_) => Ok(()),
        }
    }
}

async fn download_all(
    client: Arc<RegistryClient>,
    cache: Cache,
    ui: Ui,
    descs: Vec<Descriptor>,
    slots: Vec<Arc<Slot>>,
) -> Result<(), RegistryError> {
    let total: u64 = descs.iter().map(|l| l.size).sum();
    let overall = ui.bar(total, "total".into());
    let (client, cache, descs_ref, ui_ref) = (&client, &cache, &descs, &ui);
    let mut stream = futures_util::stream::iter((0..descs.len()).rev())
        .map(|i| {
            let overall = overall.clone();
            let bar = ui_ref.bar(
                descs_ref[i].size,
                format!("layer {}", short(&descs_ref[i].digest)),
            );
            async move {
                let on = move |n: u64| {
                    bar.inc(n);
                    overall.inc(n);
                };
                (i, client.fetch_blob(&descs_ref[i], cache, &on).await)
            }
        })
        .buffer_unordered(PARALLEL_DOWNLOADS);
    let mut downloaded = 0u64;
    while let Some((i, r)) = stream.next().await {
        let d = &descs[i];
        match r {
            Ok((p, received)) => {
                downloaded += received.unwrap_or(0);
                if ui.multi.is_none() {
                    ui.line(&format!(
                        "  layer {} {}: {}",
                        short(&d.digest),
                        mb(d.size),
                        layer_outcome(d.size, received)
                    ));
                }
                slots[i].set(Ok(p));
            }
            Err(e) => {
                for s in &slots {
                    s.set(Err(DownloadFailed {
                        digest: d.digest.clone(),
                    }));
                }
                overall.finish_and_clear();
                return Err(e);
            }
        }
    }
    overall.finish_and_clear();
    ui.line(&format!(
        "Downloaded {} of {} ({} layers)",
        mb(downloaded),
        mb(total),
        descs.len()
    ));
    Ok(())
}

/// What became of a layer of `size` bytes: cached, downloaded, or the rest of a resumed download.
fn layer_outcome(size: u64, received: Option<u64>) -> String {
    match received {
        None => "cached".into(),
        Some(n) if n >= size => "downloaded".into(),
        Some(n) => format!("resumed, {} downloaded now", mb(n)),
    }
}

/// A registry reference, resolved.
pub(super) enum Resolution {
    /// Its manifest, as the registry gives it now.
    Fresh(Box<ResolvedRef>),
    /// The registry unreachable: the cached image the reference last resolved to.
    LastKnown(PathBuf),
}

pub(super) struct ResolvedRef {
    /// The reference with its platform: the key of the offline fallback.
    pub(super) key: String,
    pub(super) digest: String,
    pub(super) manifest: Vec<u8>,
    pub(super) client: RegistryClient,
}

/// Resolve `image` to its manifest. With an image cached for this reference, an unreachable
/// registry is not fatal: one retry, then the image the reference last resolved to (compute
/// nodes often have no internet).
pub(super) fn resolve_registry(
    image: &ImageRef,
    opts: &PullOptions,
    cache: &Cache,
    rt: &tokio::runtime::Runtime,
) -> Result<Resolution, PullError> {
    let key = format!("{image} {}", wanted_platform(opts)?);
    let fallback = cache.recall_ref(&key);
    let mut client = client_for(image, opts)?;
    if fallback.is_some() {
        client = client.attempts(2);
    }
    match rt.block_on(resolve_manifest(&client, image, opts)) {
        Ok(((digest, manifest), _)) => Ok(Resolution::Fresh(Box::new(ResolvedRef {
            key,
            digest,
            manifest,
            client,
        }))),
        Err(PullError::Registry(
            e @ (RegistryError::Network { .. } | RegistryError::RateLimited { .. }),
        )) => match fallback {
            Some((digest, path)) => {
                if !opts.quiet {
                    eprintln!(
                        "gpurun: warning: {e}; using the cached image {image} last resolved to ({digest})"
                    );
                }
                Ok(Resolution::LastKnown(path))
            }
            None => Err(e.into()),
        },
        Err(e) => Err(e),
    }
}

//! `docker://REF`: the manifest (and platform) and config from a registry, and the layer blobs
//! downloaded into the cache while the image is being written.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use super::error::PullError;
use super::image_config::image_meta;
use super::options::{wanted_platform, PullOptions};
use super::progress::{mb, short, Ui};
use crate::image::cache::Cache;
use crate::image::flatten::{Layer, Span};
use crate::image::inflate::Arrival;
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
    let (path, _) = client
        .fetch_blob(config, cache, &|_: u64| {}, &|_: &File, _| {})
        .await?;
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
    let slots: Vec<Arc<Slot>> = m
        .layers
        .iter()
        .map(|d| Arc::new(Slot::new(d.size)))
        .collect();
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
                // Read as it downloads; the digest is checked as it comes in.
                span: Some(Box::new(move || at.span())),
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

/// Where one layer's download stands: its file as it grows, then its path once whole and
/// checked. `Layer::open` waits for the path; `Layer::span` reads the file as it comes.
struct Slot {
    /// The blob's size (the manifest's: a blob of any other fails its check).
    size: u64,
    state: Mutex<SlotState>,
    changed: Condvar,
}

#[derive(Default)]
struct SlotState {
    /// The blob's file while it downloads, and how many of its bytes are there for reading.
    growing: Option<(File, u64)>,
    done: Option<Result<PathBuf, DownloadFailed>>,
    /// Reads waiting for bytes: the download wakes them only when there are some.
    waiting: usize,
}

/// Bytes a download writes before readers of its file hear of them (they read 1 MiB at a time).
const TELL_EVERY: u64 = 1 << 20;

impl Slot {
    fn new(size: u64) -> Slot {
        Slot {
            size,
            state: Mutex::default(),
            changed: Condvar::new(),
        }
    }

    fn set(&self, r: Result<PathBuf, DownloadFailed>) {
        let mut st = crate::lock(&self.state);
        st.done.get_or_insert(r);
        st.growing = None;
        self.changed.notify_all();
    }

    /// The download's `file` holds `have` bytes of the blob.
    fn written(&self, file: &File, have: u64) {
        let mut st = crate::lock(&self.state);
        let read_whole = self.size == 0 || st.done.is_some();
        match &mut st.growing {
            Some((_, told)) if have < *told + TELL_EVERY => return,
            Some((_, told)) => *told = have,
            // A blob of no size known, or a file that cannot be shared, is read once whole.
            None if read_whole => return,
            None => match file.try_clone() {
                Ok(f) => st.growing = Some((f, have)),
                Err(_) => return,
            },
        }
        if st.waiting > 0 {
            self.changed.notify_all();
        }
    }

    fn failed(&self) -> bool {
        matches!(crate::lock(&self.state).done, Some(Err(_)))
    }

    /// `ready` of the state, once it says; `TimedOut` at `deadline`, if any.
    fn wait_until<T>(
        &self,
        deadline: Option<Instant>,
        mut ready: impl FnMut(&SlotState) -> Option<io::Result<T>>,
    ) -> io::Result<T> {
        let mut st = crate::lock(&self.state);
        loop {
            if let Some(r) = ready(&st) {
                return r;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Err(io::ErrorKind::TimedOut.into());
            }
            st.waiting += 1;
            st = match left {
                None => self.changed.wait(st).unwrap_or_else(|p| p.into_inner()),
                Some(l) => match self.changed.wait_timeout(st, l) {
                    Ok((st, _)) => st,
                    Err(p) => p.into_inner().0,
                },
            };
            st.waiting -= 1;
        }
    }

    /// The blob's path, once whole and checked.
    fn wait(&self) -> io::Result<PathBuf> {
        self.wait_until(None, |st| st.done.as_ref().map(done_path))
    }

    /// The blob as a span: its file as soon as the download writes it, else once whole.
    fn span(self: &Arc<Self>) -> io::Result<Span> {
        let (file, arriving) = self.wait_until(None, |st| match (&st.done, &st.growing) {
            (Some(done), _) => Some(done_path(done).and_then(File::open).map(|f| (f, false))),
            (None, Some((file, _))) => Some(file.try_clone().map(|f| (f, true))),
            (None, None) => None,
        })?;
        let len = match arriving {
            true => self.size,
            false => file.metadata()?.len(),
        };
        let arrival = arriving.then(|| self.clone() as Arc<dyn Arrival>);
        Ok(Span {
            file,
            start: 0,
            len,
            check: None,
            arrival,
        })
    }
}

fn done_path(done: &Result<PathBuf, DownloadFailed>) -> io::Result<PathBuf> {
    done.clone().map_err(io::Error::other)
}

impl Arrival for Slot {
    fn arrived(&self, at: u64, stop: &AtomicBool) -> io::Result<u64> {
        self.wait_until(None, |st| match (&st.done, &st.growing) {
            (Some(done), _) => Some(done_path(done).map(|_| self.size)),
            _ if stop.load(Ordering::Relaxed) => Some(Err(io::Error::other("inflating stopped"))),
            (None, Some((_, have))) if *have > at => Some(Ok(*have)),
            (None, _) => None,
        })
    }

    fn whole(&self, within: Option<Duration>) -> Option<io::Result<()>> {
        let deadline = within.map(|w| Instant::now() + w);
        let verdict = |st: &SlotState| st.done.as_ref().map(|d| done_path(d).map(drop));
        match self.wait_until(deadline, verdict) {
            Err(e) if deadline.is_some() && e.kind() == io::ErrorKind::TimedOut => None,
            r => Some(r),
        }
    }

    fn wake(&self) {
        let _st = crate::lock(&self.state);
        self.changed.notify_all();
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
    let (client, cache, descs_ref, ui_ref, slots_ref) = (&client, &cache, &descs, &ui, &slots);
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
                let slot = &slots_ref[i];
                let written = |file: &File, have: u64| slot.written(file, have);
                (
                    i,
                    client.fetch_blob(&descs_ref[i], cache, &on, &written).await,
                )
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

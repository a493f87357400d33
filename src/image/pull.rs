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

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::{self, BufWriter, IsTerminal, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::cache::{Cache, CacheError};
use super::flatten::{flatten, normalize, ExtraFile, FlattenError, Layer, Report};
use super::meta::{ImageMeta, META_PATH};
use super::reference::{ImageRef, ReferenceError, Source};
use super::registry::{
    choose_platform, platforms, AuthSources, Descriptor, Manifest, Platform, RegistryClient,
    RegistryError,
};
use super::squash::{SquashError, SquashWriter};
use crate::store::cache_dir::cache_root;

/// Exit codes of `gpurun pull` (and of commands that pull through [`ensure_local`]). Other
/// failures exit with [`crate::exit::GPURUN_FAILED`] (125).
pub mod exit {
    /// The image, tag, platform or blob does not exist.
    pub const NOT_FOUND: i32 = 20;
    /// The registry refused the credentials, or there were none and it wants some.
    pub const AUTH: i32 = 21;
    /// The registry could not be reached or kept failing (connection errors, 5xx, 429).
    pub const NETWORK: i32 = 22;
    /// The image is malformed: bad manifest, config or layer, digest mismatch.
    pub const BAD_IMAGE: i32 = 23;
    /// No space left for the cache or the output.
    pub const DISK_FULL: i32 = 24;
    /// Interrupted by SIGINT / SIGTERM (128 + SIGINT, as shells report it).
    pub const INTERRUPTED: i32 = 130;
}

/// Layers downloaded at once.
const PARALLEL_DOWNLOADS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Flatten(#[from] FlattenError),
    #[error(transparent)]
    Squash(#[from] SquashError),
    #[error("{0}")]
    Platform(String),
    #[error("{0} already exists; remove it or pass --force to replace it")]
    Exists(PathBuf),
    #[error("cannot write {path} ({source}); choose another -o")]
    Output { path: PathBuf, source: io::Error },
    #[error("{path}: the disk is full; free space or choose another -o")]
    DiskFull { path: PathBuf },
    #[error("source {source_ref}: {detail}")]
    Source { source_ref: String, detail: String },
    #[error("image {image}: {detail}")]
    BadImage { image: String, detail: String },
    #[error("ensure_local needs a docker:// reference, not '{0}'")]
    NotRegistry(String),
    #[error("cannot start the async runtime ({0})")]
    Runtime(io::Error),
}

impl PullError {
    /// The process exit status for this error (see [`exit`]).
    pub fn exit_code(&self) -> i32 {
        match self {
            PullError::Registry(e) => match e {
                RegistryError::NotFound { .. } | RegistryError::NoPlatform { .. } => {
                    exit::NOT_FOUND
                }
                RegistryError::Auth { .. }
                | RegistryError::Refused { .. }
                | RegistryError::Credentials { .. } => exit::AUTH,
                RegistryError::Network { .. } | RegistryError::RateLimited { .. } => exit::NETWORK,
                RegistryError::BadImage { .. } | RegistryError::Digest { .. } => exit::BAD_IMAGE,
                RegistryError::DiskFull { .. } => exit::DISK_FULL,
                RegistryError::Io { .. } | RegistryError::Cache(_) => crate::exit::GPURUN_FAILED,
            },
            PullError::Flatten(FlattenError::Read { .. } | FlattenError::Entry { .. })
            | PullError::BadImage { .. } => exit::BAD_IMAGE,
            PullError::Squash(SquashError::DiskFull { .. }) | PullError::DiskFull { .. } => {
                exit::DISK_FULL
            }
            PullError::Output { source, .. } if source.raw_os_error() == Some(libc::ENOSPC) => {
                exit::DISK_FULL
            }
            PullError::Source { .. } => exit::NOT_FOUND,
            _ => crate::exit::GPURUN_FAILED,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct PullOptions {
    /// `os/arch[/variant]`; the host's when `None`.
    pub platform: Option<String>,
    /// Allow plain http to a registry that is not on loopback.
    pub insecure: bool,
    /// Print only errors.
    pub quiet: bool,
    /// Replace an existing output file.
    pub force: bool,
    /// Compressor threads for tar2sqfs (all CPUs when `None`).
    pub jobs: Option<usize>,
    /// Cache root; [`cache_root`] when `None`.
    pub cache: Option<PathBuf>,
    /// The squashfs compressor (`zstd` when `None`).
    pub compression: Option<String>,
    /// Clean up and exit with [`exit::INTERRUPTED`] on SIGINT/SIGTERM (the CLI sets this; a
    /// library caller with its own signal handling leaves it off).
    pub handle_signals: bool,
}

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
    let rt = runtime()?;
    if opts.handle_signals {
        rt.spawn(cleanup_on_signal());
    }
    let ((layers, meta), downloads) = match &src {
        Source::Docker(image) => {
            let (layers, meta, d) = rt.block_on(resolve_docker(image, opts, &cache, &ui, None))?;
            ((layers, meta), Some(d))
        }
        Source::OciLayout { dir, tag } => (oci_layout(dir, tag.as_deref(), source, opts)?, None),
        Source::DockerArchive(file) => (docker_archive(file, source)?, None),
        Source::Dir(dir) => (rootfs_dir(dir, source)?, None),
    };
    let built = build(&layers, &meta, staging, opts, &ui);
    if let Some(d) = downloads {
        d.finish(&rt, built.is_err())?;
    }
    built?;
    Ok(out)
}

/// A cached `.sqsh` for a `docker://` reference, keyed by the manifest digest of the host's (or
/// `opts.platform`'s) image: pulled on first use, reused after. Safe against concurrent callers.
pub fn ensure_local(reference: &str, opts: &PullOptions) -> Result<PathBuf, PullError> {
    let Source::Docker(image) = Source::parse(reference)? else {
        return Err(PullError::NotRegistry(reference.to_string()));
    };
    let cache = Cache::open(&opts.cache.clone().unwrap_or_else(cache_root))?;
    let ui = Ui::new(opts.quiet);
    let rt = runtime()?;
    if opts.handle_signals {
        rt.spawn(cleanup_on_signal());
    }
    // With an image cached for this reference, an unreachable registry is not fatal: one retry,
    // then the image the reference last resolved to (compute nodes often have no internet).
    let key = format!("{image} {}", wanted_platform(opts)?);
    let fallback = cache.recall_ref(&key);
    let mut client = client_for(&image, opts)?;
    if fallback.is_some() {
        client = client.attempts(2);
    }
    let (digest, manifest_bytes) = match rt.block_on(resolve_manifest(&client, &image, opts)) {
        Ok((r, _)) => r,
        Err(PullError::Registry(
            e @ (RegistryError::Network { .. } | RegistryError::RateLimited { .. }),
        )) => match fallback {
            Some((digest, path)) => {
                if !opts.quiet {
                    eprintln!(
                        "gpurun: warning: {e}; using the cached image {image} last resolved to ({digest})"
                    );
                }
                return Ok(path);
            }
            None => return Err(e.into()),
        },
        Err(e) => return Err(e),
    };
    let remember = || {
        // Best effort: without it only the offline fallback is lost.
        let _ = cache.remember_ref(&key, &digest);
    };
    if let Some(found) = cache.find_image(&digest)? {
        remember();
        return Ok(found);
    }
    let _lock = cache.lock(&digest)?;
    let out = cache.image_path(&digest)?;
    if out.exists() {
        return Ok(out);
    }
    let staging = Staging::beside(&out)?;
    let resolved = (digest.clone(), manifest_bytes);
    let (layers, meta, downloads) = rt.block_on(resolve_docker(
        &image,
        opts,
        &cache,
        &ui,
        Some((client, resolved)),
    ))?;
    let built = build(&layers, &meta, staging, opts, &ui);
    downloads.finish(&rt, built.is_err())?;
    built?;
    remember();
    Ok(out)
}

fn runtime() -> Result<tokio::runtime::Runtime, PullError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(PullError::Runtime)
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
    }
}

// ---------------------------------------------------------------- progress

/// Bars on a terminal, plain lines otherwise, nothing when quiet.
#[derive(Clone)]
struct Ui {
    quiet: bool,
    multi: Option<MultiProgress>,
}

impl Ui {
    fn new(quiet: bool) -> Ui {
        let multi = (!quiet && io::stderr().is_terminal())
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Ui { quiet, multi }
    }

    fn line(&self, s: &str) {
        if self.quiet {
            return;
        }
        match &self.multi {
            Some(m) => {
                let _ = m.println(s);
            }
            None => eprintln!("{s}"),
        }
    }

    fn bar(&self, len: u64, label: String) -> ProgressBar {
        match &self.multi {
            Some(m) => {
                let b = m.add(ProgressBar::new(len));
                // Without a known size (a directory source) a spinner and a byte count.
                let template = if len == 0 {
                    "{prefix:>20} {spinner} {bytes:>10} {bytes_per_sec}"
                } else {
                    "{prefix:>20} [{bar:30}] {bytes:>10}/{total_bytes:10} {bytes_per_sec}"
                };
                b.set_style(
                    ProgressStyle::with_template(template)
                        .expect("template")
                        .progress_chars("=> "),
                );
                b.set_prefix(label);
                b
            }
            None => ProgressBar::hidden(),
        }
    }
}

fn short(digest: &str) -> &str {
    let hex = digest.split_once(':').map_or(digest, |(_, h)| h);
    &hex[..hex.len().min(12)]
}

/// Sizes in messages and bars: binary units (KiB, MiB, GiB), as everywhere in gpurun.
fn mb(bytes: u64) -> String {
    crate::units::human_size(bytes)
}

// ---------------------------------------------------------------- registry sources

fn client_for(image: &ImageRef, opts: &PullOptions) -> Result<RegistryClient, PullError> {
    let creds = AuthSources::from_env().lookup(&image.registry)?;
    Ok(RegistryClient::new(image, opts.insecure, creds))
}

fn wanted_platform(opts: &PullOptions) -> Result<Platform, PullError> {
    match &opts.platform {
        Some(p) => Platform::parse(p).map_err(PullError::Platform),
        None => Ok(Platform::host()),
    }
}

/// The platform-specific manifest: (digest, bytes); and the platforms of the multi-platform
/// index it was chosen from (none for a single-platform image).
async fn resolve_manifest(
    client: &RegistryClient,
    image: &ImageRef,
    opts: &PullOptions,
) -> Result<(Resolved, Vec<String>), PullError> {
    let want = wanted_platform(opts)?;
    let (bytes, digest) = client.manifest(image.reference_part()).await?;
    let m = Manifest::parse(&bytes).map_err(|detail| PullError::BadImage {
        image: image.to_string(),
        detail,
    })?;
    if !m.is_index() {
        return Ok(((digest, bytes), Vec::new()));
    }
    let entries = m.manifests.unwrap_or_default();
    let chosen =
        choose_platform(&entries, &want).map_err(|available| RegistryError::NoPlatform {
            image: image.to_string(),
            wanted: want.to_string(),
            available,
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
        let bad = |detail: String| PullError::BadImage {
            image: image.to_string(),
            detail,
        };
        let m = Manifest::parse(&bytes).map_err(bad)?;
        let config = m
            .config
            .clone()
            .ok_or_else(|| bad("the manifest has no config".into()))?;
        let (path, _) = client.fetch_blob(&config, &cache, &|_: u64| {}).await?;
        let config_bytes = fs::read(&path).map_err(|e| bad(format!("config: {e}")))?;
        let meta = image_meta(&config_bytes, &image.to_string(), &digest).map_err(bad)?;
        Ok(Remote {
            meta,
            size: m.layers.iter().map(|l| l.size).sum(),
            platforms,
        })
    })
}

async fn resolve_docker(
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
    let bad = |detail: String| PullError::BadImage {
        image: image.to_string(),
        detail,
    };
    let m = Manifest::parse(&bytes).map_err(bad)?;
    let config_desc = m
        .config
        .clone()
        .ok_or_else(|| bad("the manifest has no config".into()))?;
    ui.line(&format!(
        "Pulling {image} (manifest {}, {} layers)",
        short(&digest),
        m.layers.len()
    ));
    let nothing = |_: u64| {};
    let (config_path, _) = client.fetch_blob(&config_desc, cache, &nothing).await?;
    let config_bytes = fs::read(&config_path).map_err(|e| bad(format!("config: {e}")))?;

    let meta = image_meta(&config_bytes, &image.to_string(), &digest).map_err(bad)?;
    // A single-platform image must still be what --platform asked for.
    if opts.platform.is_some() {
        let want = wanted_platform(opts)?;
        let have = Platform::parse(&meta.platform).map_err(bad)?;
        if !want.accepts(&have) {
            return Err(RegistryError::NoPlatform {
                image: image.to_string(),
                wanted: want.to_string(),
                available: have.to_string(),
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
        .map(|(d, slot)| Layer {
            name: d.digest.clone(),
            size: d.size,
            open: Box::new(move || Ok(Box::new(File::open(slot.wait()?)?) as Box<dyn Read + Send>)),
        })
        .collect();
    Ok((layers, meta, Downloads { handle, slots }))
}

/// Where one layer's download stands; `Layer::open` waits on it.
#[derive(Default)]
struct Slot {
    state: Mutex<Option<Result<PathBuf, String>>>,
    ready: Condvar,
}

impl Slot {
    fn set(&self, r: Result<PathBuf, String>) {
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
struct Downloads {
    handle: tokio::task::JoinHandle<Result<(), RegistryError>>,
    slots: Vec<Arc<Slot>>,
}

impl Downloads {
    /// Their outcome. A failed download is the real cause of a failed build, so it wins; when
    /// the build failed for its own reason the downloads are stopped (partial blobs stay as
    /// resume points).
    fn finish(self, rt: &tokio::runtime::Runtime, build_failed: bool) -> Result<(), PullError> {
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
                    s.set(Err(format!("download of layer {} failed", d.digest)));
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

fn image_meta(config: &[u8], source: &str, digest: &str) -> Result<ImageMeta, String> {
    let config = super::meta::bounded("config", config).map_err(|e| e.to_string())?;
    let c: ConfigFile = serde_json::from_slice(config)
        .map_err(|e| format!("image config is not valid JSON ({e})"))?;
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

// ---------------------------------------------------------------- offline sources

fn oci_layout(
    dir: &Path,
    tag: Option<&str>,
    source: &str,
    opts: &PullOptions,
) -> Result<(Vec<Layer>, ImageMeta), PullError> {
    let fail = |detail: String| PullError::Source {
        source_ref: source.to_string(),
        detail,
    };
    let blob = |digest: &str| -> Result<PathBuf, PullError> {
        let (alg, hex) = digest
            .split_once(':')
            .filter(|(a, h)| !a.contains('/') && !h.contains('/') && !h.contains(".."))
            .ok_or_else(|| fail(format!("'{digest}' is not a digest")))?;
        Ok(dir.join("blobs").join(alg).join(hex))
    };
    let read = |p: &Path| fs::read(p).map_err(|e| fail(format!("{}: {e}", p.display())));
    // Blobs are content-addressed: what a layout holds must hash to its name.
    let read_blob = |digest: &str| -> Result<Vec<u8>, PullError> {
        sha256_digest(digest).map_err(fail)?;
        let bytes = read(&blob(digest)?)?;
        let actual = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        if actual != digest {
            return Err(PullError::BadImage {
                image: source.to_string(),
                detail: format!(
                    "blob {digest} does not match its digest (content is {actual}): the layout is corrupt; copy the image again"
                ),
            });
        }
        Ok(bytes)
    };
    let index = Manifest::parse(&read(&dir.join("index.json"))?).map_err(fail)?;
    let entries = index.manifests.unwrap_or_default();
    let tag_of = |d: &Descriptor| d.annotations_ref_name();
    let mut desc = match tag {
        Some(t) => entries
            .iter()
            .find(|d| tag_of(d).as_deref() == Some(t))
            .cloned()
            .ok_or_else(|| {
                let tags: Vec<String> = entries.iter().filter_map(tag_of).collect();
                fail(format!(
                    "no tag '{t}' in the layout; tags: {}",
                    tags.join(", ")
                ))
            })?,
        None if entries.len() == 1 => entries[0].clone(),
        None => {
            let tags: Vec<String> = entries.iter().filter_map(tag_of).collect();
            return Err(fail(format!(
                "the layout holds {} images; name one as oci:DIR:TAG (tags: {})",
                entries.len(),
                tags.join(", ")
            )));
        }
    };
    let mut bytes = read_blob(&desc.digest)?;
    let mut m = Manifest::parse(&bytes).map_err(fail)?;
    if m.is_index() {
        let want = wanted_platform(opts)?;
        let sub = m.manifests.clone().unwrap_or_default();
        desc = choose_platform(&sub, &want)
            .map_err(|available| {
                PullError::Registry(RegistryError::NoPlatform {
                    image: source.to_string(),
                    wanted: want.to_string(),
                    available,
                })
            })?
            .clone();
        bytes = read_blob(&desc.digest)?;
        m = Manifest::parse(&bytes).map_err(fail)?;
    }
    let config = m
        .config
        .as_ref()
        .ok_or_else(|| fail("the manifest has no config".into()))?;
    let config_bytes = read_blob(&config.digest)?;
    let mut layers = Vec::new();
    for l in m.layers.iter().rev() {
        let p = blob(&l.digest)?;
        if !p.exists() {
            return Err(fail(format!("layer blob {} is missing", p.display())));
        }
        let want = sha256_digest(&l.digest).map_err(fail)?;
        let (name, size) = (l.digest.clone(), l.size);
        layers.push(Layer {
            name: name.clone(),
            size,
            open: Box::new(move || {
                let f = File::open(&p)?;
                Ok(Box::new(Verified::new(f, &name, want, size)) as Box<dyn Read + Send>)
            }),
        });
    }
    let meta =
        image_meta(&config_bytes, source, &desc.digest).map_err(|detail| PullError::BadImage {
            image: source.to_string(),
            detail,
        })?;
    Ok((layers, meta))
}

/// The hex of a `sha256:` digest; layouts with other algorithms are refused, not trusted.
fn sha256_digest(digest: &str) -> Result<[u8; 32], String> {
    digest
        .strip_prefix("sha256:")
        .and_then(|h| hex::decode(h).ok())
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| format!("'{digest}' is not a sha256 digest (the only kind gpurun checks)"))
}

/// A layer blob of a local layout, hashed as the flattener reads it: at its declared size (or
/// at EOF) it must match its digest, or the read fails and so does the pull, which leaves
/// nothing. A corrupt or tampered layout never becomes an image; no second pass over the file.
struct Verified<R> {
    inner: R,
    name: String,
    want: [u8; 32],
    size: u64,
    seen: u64,
    hasher: Option<Sha256>,
}

impl<R> Verified<R> {
    fn new(inner: R, name: &str, want: [u8; 32], size: u64) -> Self {
        Verified {
            inner,
            name: name.to_string(),
            want,
            size,
            seen: 0,
            hasher: Some(Sha256::new()),
        }
    }

    fn check(&mut self) -> io::Result<()> {
        let Some(h) = self.hasher.take() else {
            return Ok(());
        };
        let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        if self.seen != self.size {
            return Err(bad(format!(
                "blob {} is {} bytes, its descriptor says {}: the layout is corrupt; copy the image again",
                self.name, self.seen, self.size
            )));
        }
        if h.finalize().as_slice() != self.want {
            return Err(bad(format!(
                "blob {} does not match its digest: the layout is corrupt; copy the image again",
                self.name
            )));
        }
        Ok(())
    }
}

impl<R: Read> Read for Verified<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        // The blob ends at its declared size; only bytes that went through the hash are used.
        let room = (self.size - self.seen) as usize;
        if room == 0 {
            self.check()?;
            return Ok(0);
        }
        let len = buf.len().min(room);
        let n = self.inner.read(&mut buf[..len])?;
        if let Some(h) = self.hasher.as_mut() {
            h.update(&buf[..n]);
        }
        self.seen += n as u64;
        if n == 0 || self.seen == self.size {
            self.check()?;
        }
        Ok(n)
    }
}

/// The most a `docker save` archive's manifest.json or image config may be (real ones: KiBs).
const MAX_JSON: u64 = 16 << 20;

/// A `docker save` archive: manifest.json names the config and the layer members, which are read
/// in place (seek to the member's data) rather than extracted.
fn docker_archive(file: &Path, source: &str) -> Result<(Vec<Layer>, ImageMeta), PullError> {
    let fail = |detail: String| PullError::Source {
        source_ref: source.to_string(),
        detail,
    };
    let f = File::open(file).map_err(|e| fail(format!("{}: {e}", file.display())))?;
    // Index the members (name -> data offset, size); only manifest.json and the config are
    // read, later, by offset: a hostile archive of many members costs no memory.
    let mut members: HashMap<String, (u64, u64)> = HashMap::new();
    let mut ar = tar::Archive::new(f);
    for e in ar.entries().map_err(|e| fail(e.to_string()))? {
        let e = e.map_err(|e| fail(e.to_string()))?;
        let name = normalize(&String::from_utf8_lossy(&e.path_bytes())).path;
        members.insert(name, (e.raw_file_position(), e.size()));
    }
    let read_member = |name: &str| -> Result<Vec<u8>, PullError> {
        let &(pos, size) = members
            .get(&normalize(name).path)
            .ok_or_else(|| fail(format!("{name} is missing")))?;
        if size > MAX_JSON {
            return Err(PullError::BadImage {
                image: source.to_string(),
                detail: format!(
                    "{name} is {size} bytes, too big for image metadata (at most {MAX_JSON}): not a docker save archive"
                ),
            });
        }
        let mut f = File::open(file).map_err(|e| fail(format!("{}: {e}", file.display())))?;
        let mut v = Vec::with_capacity(size as usize);
        f.seek(SeekFrom::Start(pos))
            .and_then(|_| f.take(size).read_to_end(&mut v))
            .map_err(|e| fail(format!("{name}: {e}")))?;
        Ok(v)
    };
    #[derive(Deserialize)]
    struct Entry {
        #[serde(rename = "Config")]
        config: String,
        #[serde(rename = "Layers")]
        layers: Vec<String>,
    }
    if !members.contains_key("manifest.json") {
        return Err(fail("no manifest.json: not a docker save archive".into()));
    }
    let manifest: Vec<Entry> = serde_json::from_slice(&read_member("manifest.json")?)
        .map_err(|e| fail(format!("manifest.json: {e}")))?;
    let entry = match manifest.as_slice() {
        [one] => one,
        _ => {
            return Err(fail(format!(
                "holds {} images; gpurun reads archives of one",
                manifest.len()
            )))
        }
    };
    let config = read_member(&entry.config)
        .map_err(|_| fail(format!("config {} is missing or unreadable", entry.config)))?;
    let mut layers = Vec::new();
    for l in entry.layers.iter().rev() {
        let &(pos, size) = members
            .get(&normalize(l).path)
            .ok_or_else(|| fail(format!("layer {l} is missing")))?;
        let path = file.to_path_buf();
        layers.push(Layer {
            name: l.clone(),
            size,
            open: Box::new(move || {
                let mut f = File::open(&path)?;
                f.seek(SeekFrom::Start(pos))?;
                Ok(Box::new(f.take(size)) as Box<dyn Read + Send>)
            }),
        });
    }
    let meta = image_meta(&config, source, "").map_err(|detail| PullError::BadImage {
        image: source.to_string(),
        detail,
    })?;
    Ok((layers, meta))
}

/// A root filesystem directory, packed as one layer by a writer thread.
fn rootfs_dir(dir: &Path, source: &str) -> Result<(Vec<Layer>, ImageMeta), PullError> {
    if !dir.is_dir() {
        return Err(PullError::Source {
            source_ref: source.to_string(),
            detail: format!("{} is not a directory", dir.display()),
        });
    }
    let root = dir.to_path_buf();
    let layer = Layer {
        name: source.to_string(),
        size: 0,
        open: Box::new(move || {
            let (reader, writer) = io::pipe()?;
            let root = root.clone();
            let handle = std::thread::spawn(move || -> io::Result<()> {
                let mut b = tar::Builder::new(writer);
                pack_dir(&root, Path::new(""), &mut b, &mut HashMap::new())?;
                b.into_inner().map(drop)
            });
            Ok(Box::new(ThreadReader {
                pipe: reader,
                handle: Some(handle),
            }) as Box<dyn Read + Send>)
        }),
    };
    let meta = ImageMeta {
        source: source.to_string(),
        platform: Platform::host().to_string(),
        ..Default::default()
    };
    Ok((vec![layer], meta))
}

/// Write the tree under `root/rel` into `b`, names sorted, each directory before what it holds:
/// a second name of a file already written becomes a hard link to the first (`seen`: device and
/// inode to path), xattrs go into PAX records, symlinks are stored, never followed. Sockets
/// are skipped (they mean nothing in an image).
fn pack_dir<W: io::Write>(
    root: &Path,
    rel: &Path,
    b: &mut tar::Builder<W>,
    seen: &mut HashMap<(u64, u64), PathBuf>,
) -> io::Result<()> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut names: Vec<_> = fs::read_dir(root.join(rel))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()?;
    names.sort();
    for name in names {
        let rel = rel.join(&name);
        let full = root.join(&rel);
        let md = fs::symlink_metadata(&full)?;
        let ft = md.file_type();
        if ft.is_socket() {
            continue;
        }
        let mut h = tar::Header::new_gnu();
        h.set_metadata_in_mode(&md, tar::HeaderMode::Complete);
        let xattrs = read_xattrs(&full);
        if !xattrs.is_empty() {
            b.append_pax_extensions(xattrs.iter().map(|(k, v)| (k.as_str(), v.as_slice())))?;
        }
        if ft.is_file() && md.nlink() > 1 {
            if let Some(first) = seen.get(&(md.dev(), md.ino())) {
                h.set_entry_type(tar::EntryType::Link);
                h.set_size(0);
                b.append_link(&mut h, &rel, first)?;
                continue;
            }
            seen.insert((md.dev(), md.ino()), rel.clone());
        }
        if ft.is_dir() {
            b.append_data(&mut h, &rel, io::empty())?;
            pack_dir(root, &rel, b, seen)?;
        } else if ft.is_symlink() {
            b.append_link(&mut h, &rel, fs::read_link(&full)?)?;
        } else if ft.is_file() {
            b.append_data(&mut h, &rel, File::open(&full)?)?;
        } else {
            // fifos and device nodes: header only (devices are dropped by the flattener)
            b.append_data(&mut h, &rel, io::empty())?;
        }
    }
    Ok(())
}

/// A file's xattrs as PAX records (`SCHILY.xattr.NAME`), without following a symlink; none
/// where the file system has none or refuses to list them.
fn read_xattrs(p: &Path) -> Vec<(String, Vec<u8>)> {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return Vec::new();
    };
    let mut names = vec![0u8; 64 << 10];
    // SAFETY: valid path and buffer of the given length.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return Vec::new();
    }
    names.truncate(n as usize);
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let Ok(cname) = std::ffi::CString::new(name) else {
            continue;
        };
        let mut v = vec![0u8; 64 << 10];
        // SAFETY: valid strings and buffer of the given length.
        let k =
            unsafe { libc::lgetxattr(c.as_ptr(), cname.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        if k >= 0 {
            v.truncate(k as usize);
            out.push((format!("SCHILY.xattr.{}", String::from_utf8_lossy(name)), v));
        }
    }
    out
}

/// Reads a pipe filled by a thread; at the end, the thread's error (if any) becomes the reader's.
struct ThreadReader {
    pipe: io::PipeReader,
    handle: Option<std::thread::JoinHandle<io::Result<()>>>,
}

impl Read for ThreadReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.pipe.read(buf)?;
        if n == 0 {
            if let Some(h) = self.handle.take() {
                h.join()
                    .map_err(|_| io::Error::other("tar writer thread panicked"))??;
            }
        }
        Ok(n)
    }
}

// ---------------------------------------------------------------- writing

/// Staging directories and the tar2sqfs child, removed / killed when a signal arrives.
static IN_FLIGHT: Mutex<(Vec<PathBuf>, Vec<u32>)> = Mutex::new((Vec::new(), Vec::new()));

async fn cleanup_on_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    let guard = crate::lock(&IN_FLIGHT);
    for pid in &guard.1 {
        // Our own child, reaped before the staging goes, so a create it was still making
        // cannot land after its removal.
        let pid = nix::unistd::Pid::from_raw(*pid as libc::pid_t);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(pid, None);
    }
    for p in &guard.0 {
        let _ = fs::remove_dir_all(p);
    }
    eprintln!("gpurun: interrupted; nothing was written (downloads resume on the next pull)");
    std::process::exit(exit::INTERRUPTED);
}

/// Where a pull writes its image before it is whole: a directory of its own made beside the
/// output (random name, mode 0700), so that nothing another user put there in advance can be
/// written through, and a directory gpurun cannot write to is found before any download. Removed
/// with what is left in it, unless the image was moved to its place.
struct Staging {
    dir: PathBuf,
    out: PathBuf,
}

impl Staging {
    fn beside(out: &Path) -> Result<Staging, PullError> {
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let prefix = staging_prefix(out);
        remove_stale_staging(&dir, &prefix);
        let made = tempfile::Builder::new()
            .prefix(&format!("{prefix}{}-", std::process::id()))
            .tempdir_in(&dir)
            .map_err(|source| PullError::Output {
                path: dir.clone(),
                source,
            })?;
        let staging = Staging {
            dir: made.keep(),
            out: out.to_path_buf(),
        };
        crate::lock(&IN_FLIGHT).0.push(staging.dir.clone());
        Ok(staging)
    }

    /// The file the writer makes (in the staging directory: nobody else can put anything there).
    fn file(&self) -> PathBuf {
        self.dir.join("image.sqsh")
    }

    /// Move the finished image to its place (replacing what is there, never writing through it).
    fn commit(self) -> Result<(), PullError> {
        fs::rename(self.file(), &self.out).map_err(|source| PullError::Output {
            path: self.out.clone(),
            source,
        })
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
        crate::lock(&IN_FLIGHT).0.retain(|p| p != &self.dir);
    }
}

/// `.NAME.gpurun-HOST-`: staging directories of pulls to `out` from this host (the output may be
/// on a file system other hosts write to; their pids mean nothing here).
fn staging_prefix(out: &Path) -> String {
    let name = out
        .file_name()
        .map_or("image.sqsh".into(), |n| n.to_string_lossy());
    let host = nix::unistd::gethostname().unwrap_or_default();
    format!(".{name}.gpurun-{}-", host.to_string_lossy())
}

/// Staging directories of pulls from this host that were killed (SIGKILL, power loss) before
/// they could clean up: the caller's own directories whose pid is gone.
fn remove_stale_staging(dir: &Path, prefix: &str) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let me = nix::unistd::geteuid().as_raw();
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = n.strip_prefix(prefix).and_then(|r| r.split('-').next()) else {
            continue;
        };
        let ours = e.metadata().is_ok_and(|m| m.is_dir() && m.uid() == me);
        if ours && !Path::new("/proc").join(pid).exists() {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

fn build(
    layers: &[Layer],
    meta: &ImageMeta,
    staging: Staging,
    opts: &PullOptions,
    ui: &Ui,
) -> Result<(), PullError> {
    let out = staging.out.clone();
    let jobs = opts
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    ui.line(&format!("Writing {}", out.display()));
    let expected: u64 = layers.iter().map(|l| l.size).sum();
    let bar = ui.bar(expected, "squashfs".into());
    bar.enable_steady_tick(Duration::from_millis(200));
    let on_read = |n: u64| bar.inc(n);
    // Started and registered under the lock: a signal handled in between would find no child
    // to kill, and tar2sqfs would then write its file after the cleanup.
    let mut writer = {
        let mut g = crate::lock(&IN_FLIGHT);
        let w = SquashWriter::start(&staging.file(), jobs, opts.compression.as_deref())?;
        g.1.push(w.pid());
        w
    };
    let pid = writer.pid();
    let meta_json = meta.to_json();
    let extra = [ExtraFile {
        path: META_PATH.trim_start_matches('/'),
        data: &meta_json,
    }];
    let stdin = BufWriter::with_capacity(1 << 20, writer.stdin());
    let flattened = flatten(layers, &extra, stdin, &on_read);
    let result = match flattened {
        Ok(report) => writer
            .finish(expected)
            .map(|_| report)
            .map_err(PullError::from),
        Err(e @ FlattenError::Write(_)) => {
            // The pipe broke because tar2sqfs stopped: its reason is the real one.
            writer
                .finish(expected)
                .map_err(PullError::from)
                .and(Err(e.into()))
        }
        Err(e) => {
            writer.abort();
            Err(e.into())
        }
    };
    crate::lock(&IN_FLIGHT).1.retain(|p| *p != pid);
    bar.finish_and_clear();
    let report = result?;
    warn_report(&report, ui);
    staging.commit()?;
    let size = fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    ui.line(&format!(
        "Wrote {} ({}, {} entries)",
        out.display(),
        mb(size),
        report.entries
    ));
    Ok(())
}

fn warn_report(r: &Report, ui: &Ui) {
    for n in &r.notes {
        ui.line(&format!("gpurun: warning: {n}"));
    }
    if r.notes_omitted > 0 {
        ui.line(&format!(
            "gpurun: warning: {} more entries outside the image root were neutralised",
            r.notes_omitted
        ));
    }
    let mut parts = Vec::new();
    if r.devices_dropped > 0 {
        parts.push(format!("{} device nodes dropped", r.devices_dropped));
    }
    if r.setid_cleared > 0 {
        parts.push(format!(
            "setuid/setgid bits cleared on {} files",
            r.setid_cleared
        ));
    }
    if r.unsupported_skipped > 0 {
        parts.push(format!(
            "{} entries of unsupported types skipped",
            r.unsupported_skipped
        ));
    }
    if !parts.is_empty() {
        ui.line(&format!(
            "gpurun: warning: {} (a rootless container cannot use them)",
            parts.join(", ")
        ));
    }
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

    #[test]
    fn local_blobs_are_checked_against_their_digest() {
        let data = b"layer bytes".to_vec();
        let want: [u8; 32] = Sha256::digest(&data).into();
        let read = |bytes: &[u8], size: u64| {
            let mut v = Vec::new();
            Verified::new(bytes, "sha256:x", want, size)
                .read_to_end(&mut v)
                .map(|_| v)
                .map_err(|e| e.to_string())
        };
        let mut flipped = data.clone();
        flipped[3] ^= 1;
        let mut longer = data.clone();
        longer.extend_from_slice(b"junk");
        let n = data.len() as u64;
        assert_eq!(read(&data, n).unwrap(), data);
        // Bytes past the declared size are never handed out, so they cannot sneak in.
        assert_eq!(read(&longer, n).unwrap(), data);
        for (bytes, size, needle) in [
            (&flipped[..], n, "does not match its digest"),
            (&data[..5], n, "is 5 bytes, its descriptor says 11"),
            (&data[..], n - 1, "does not match its digest"),
            (&data[..], 0, "does not match its digest"),
        ] {
            let e = read(bytes, size).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
        assert!(sha256_digest("sha512:00").is_err());
        assert!(sha256_digest(&format!("sha256:{}", "ab".repeat(32))).is_ok());
    }

    #[test]
    fn exit_codes_are_distinct() {
        let codes = [
            exit::NOT_FOUND,
            exit::AUTH,
            exit::NETWORK,
            exit::BAD_IMAGE,
            exit::DISK_FULL,
            exit::INTERRUPTED,
        ];
        for (i, a) in codes.iter().enumerate() {
            assert!(![0, 1, 2, 125, 126, 127].contains(a));
            assert!(codes[i + 1..].iter().all(|b| a != b));
        }
    }
}

//! `gpurun pull --into-cache --for-start docker://…`: what `exec docker://…` runs, in a process
//! of its own, for an image the cache does not hold yet. It downloads the layers and unpacks
//! them, flattened, into a private directory, says so on stdout, and only then writes the
//! image's .sqsh from the same (cached) layers, on CPU time the started container does not
//! want (SCHED_IDLE). The tree lives until the starting gpurun says `done` on this process's
//! stdin; a stdin that ends without it means that gpurun died, and the pull is abandoned as on
//! SIGINT (nothing left behind).
//!
//! It runs detached from the starting gpurun (which kills its descendants when its container
//! ends) and says what it does on stdout, a JSON line each ([`Said`]).

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use serde::{Deserialize, Serialize};

use super::error::PullError;
use super::options::PullOptions;
use super::progress::Ui;
use super::registry_source::{resolve_docker, resolve_registry, Resolution};
use super::staging::{abandon, signal_runtime, Staging};
use super::write_image::{build, flatten_shown, warn_report};
use crate::image::cache::Cache;
use crate::image::flatten::{FlattenError, Layer};
use crate::image::meta::ImageMeta;
use crate::image::reference::Source;
use crate::image::unpack::{UnpackError, Unpacker};
use crate::store::cache_dir::cache_root;

/// A line of `--for-start`'s stdout.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Said {
    /// The container may start.
    Ready(Ready),
    /// The pull failed before that, with this exit status (its error is on stderr).
    Failed(i32),
    /// Whether the image was written, after `Ready` with a tree.
    Written(bool),
}

/// Where to start from.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Ready {
    /// The cached .sqsh (being written while `tree` is set).
    pub image: PathBuf,
    /// The unpacked image to start from meanwhile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<PathBuf>,
}

/// The tree's directory in its staging.
const TREE: &str = "rootfs";

/// See the module's comment. `ready` is where the line goes; `done` reaches its end when the
/// tree is no longer used.
pub fn for_start(
    reference: &str,
    opts: &PullOptions,
    ready: &mut dyn Write,
    done: impl Read + Send + 'static,
) -> Result<(), PullError> {
    let Source::Docker(image) = Source::parse(reference)? else {
        return Err(PullError::NotRegistry(reference.to_string()));
    };
    // Before any thread is started.
    crate::sys::detach().map_err(PullError::Detach)?;
    let done = watch(done);
    let cache = Cache::open(&opts.cache.clone().unwrap_or_else(cache_root))?;
    let ui = Ui::new(opts.quiet);
    let rt = signal_runtime(opts)?;
    let r = match resolve_registry(&image, opts, &cache, &rt)? {
        Resolution::Fresh(r) => *r,
        Resolution::LastKnown(path) => return say(ready, path, None),
    };
    if let Some(found) = cache.find_image(&r.digest)? {
        return say(ready, found, None);
    }
    let lock = cache.lock(&r.digest)?;
    let out = cache.image_path(&r.digest)?;
    if out.exists() {
        return say(ready, out, None);
    }
    let unpacked = Staging::beside(&out)?;
    let tree = unpacked.scratch(TREE);
    let resolved = (r.digest.clone(), r.manifest);
    let (layers, meta, downloads) = rt.block_on(resolve_docker(
        &image,
        opts,
        &cache,
        &ui,
        Some((r.client, resolved)),
    ))?;
    let made = unpack(&layers, &meta, &tree, opts, &ui);
    downloads.finish(&rt, made.is_err())?;
    made?;
    // A gpurun that went away meanwhile starts nothing; the image is still worth writing.
    let _ = say(ready, out.clone(), Some(tree));
    let quiet = Ui::new(true);
    // Best effort both: Ctrl-C is then the container's alone, and the container comes first
    // on the CPUs.
    let _ = crate::sys::own_process_group();
    let _ = crate::sys::idle_priority();
    let built = Staging::beside(&out).and_then(|s| build(&layers, &meta, s, opts, &quiet));
    drop(lock);
    if built.is_ok() {
        let _ = cache.remember_ref(&r.key, &r.digest);
    }
    let _ = tell(ready, &Said::Written(built.is_ok()));
    let _ = done.recv();
    drop(unpacked);
    built
}

/// What the starting gpurun's stdin says: `done` (the tree is no longer used) comes through
/// the channel; its end without `done` abandons the pull.
fn watch(from: impl Read + Send + 'static) -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut said = Vec::new();
        let _ = from.take(64).read_to_end(&mut said);
        if !said.starts_with(DONE) {
            abandon();
        }
        let _ = tx.send(());
    });
    rx
}

/// What the starting gpurun says on stdin when its container is over.
pub const DONE: &[u8] = b"done\n";

fn say(ready: &mut dyn Write, image: PathBuf, tree: Option<PathBuf>) -> Result<(), PullError> {
    tell(ready, &Said::Ready(Ready { image, tree })).map_err(|source| PullError::Output {
        path: PathBuf::from("the starting gpurun's pipe"),
        source,
    })
}

/// One line to the starting gpurun.
pub fn tell(to: &mut dyn Write, said: &Said) -> io::Result<()> {
    let line = serde_json::to_string(said).expect("paths serialise");
    writeln!(to, "{line}").and_then(|_| to.flush())
}

/// The layers flattened into `tree`, as the .sqsh will hold them.
fn unpack(
    layers: &[Layer],
    meta: &ImageMeta,
    tree: &Path,
    opts: &PullOptions,
    ui: &Ui,
) -> Result<(), PullError> {
    let jobs = opts.jobs.unwrap_or_else(crate::cpus::usable);
    ui.line("Unpacking the layers to start from them; the image is written after");
    let mut u = Unpacker::new(tree, jobs).map_err(full_disk)?;
    let report = match flatten_shown(layers, meta, &mut u, jobs, ui, "unpacking") {
        Ok(report) => report,
        // Unpacking failed: its reason, with its path, is the real one.
        Err(e @ FlattenError::Write(_)) => {
            u.finish().map_err(full_disk)?;
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    u.finish().map_err(full_disk)?;
    warn_report(&report, ui);
    Ok(())
}

/// A full disk is said as a pull says it, with the cache's fix.
fn full_disk(e: UnpackError) -> PullError {
    match e.source.kind() {
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => {
            PullError::DiskFull { path: e.path }
        }
        _ => e.into(),
    }
}

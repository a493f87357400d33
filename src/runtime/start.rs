//! From a command line to a running container: gather the facts about the host and the image,
//! make the plan, and launch it (or print it with --dry-run).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::unistd::{Gid, Uid};

use super::env::{parse_env_file, EnvError};
use super::extract;
use super::first_start::{self, FirstStartError};
use super::image_server::attach::{self, AttachError};
use super::in_tree;
use super::launch::{self, HoldState, LaunchError, Lower};
use super::plan::{
    self, Action, DevEntry, Extras, HostView, ImageView, PlanError, Request, RootSource,
};
use crate::env_vars::host_env;
use crate::exit;
use crate::image::cache::Cache;
use crate::image::meta::ImageMeta;
use crate::image::meta::MetaError;
use crate::image::pull::{
    cached_registry_image, ensure_local, save, save_target, PullError, PullOptions, Ready,
    SaveTarget,
};
use crate::image::reference::is_reference;
use crate::image::sif::OpenError;
use crate::image::sqfs::Archive;
use crate::store::cache_dir::cache_root;
use crate::sys;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("image {0}: no such file or directory; check the path, or pull it first: gpurun pull docker://…")]
    ImageMissing(PathBuf),
    #[error("image {0}: permission denied; ask its owner for read access (and search access to the directories above it)")]
    ImageDenied(PathBuf),
    #[error("image {path}: {source}")]
    ImageIo {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("image {path}: is a {kind}, not an image file or directory; give a .sqsh or .sif file or a root filesystem directory")]
    NotAnImage { path: PathBuf, kind: &'static str },
    #[error("image {path}: {source}")]
    Sif {
        path: PathBuf,
        source: crate::image::sif::SifError,
    },
    #[error("image {path}: {source}")]
    Squashfs {
        path: PathBuf,
        source: crate::image::sqfs::SqfsError,
    },
    /// The copy of a squashfs image made where FUSE is unusable.
    #[error("image {path}: {source}")]
    Extract {
        path: PathBuf,
        source: extract::ExtractError,
    },
    #[error("--save {0}: it is a directory; name a file")]
    SaveIsDir(PathBuf),
    #[error("--save {0}: it exists already; remove it or choose another name")]
    SaveExists(PathBuf),
    #[error("--save {path}: its directory cannot be written ({source}); choose another place")]
    SaveDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--env-file {0}: {1}; check the path")]
    EnvFile(PathBuf, std::io::Error),
    #[error(transparent)]
    EnvFileSyntax(#[from] EnvError),
    #[error(transparent)]
    Meta(#[from] MetaError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[error(transparent)]
    Pull(#[from] PullError),
    #[error(transparent)]
    FirstStart(#[from] FirstStartError),
}

impl StartError {
    /// Why the image at `path` could not be looked at, as the user needs to hear it.
    fn image_access(path: &Path, e: std::io::Error) -> StartError {
        match e.kind() {
            std::io::ErrorKind::NotFound => StartError::ImageMissing(path.to_path_buf()),
            std::io::ErrorKind::PermissionDenied => StartError::ImageDenied(path.to_path_buf()),
            _ => StartError::ImageIo {
                path: path.to_path_buf(),
                source: e,
            },
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            StartError::Launch(e) => e.exit_code(),
            StartError::Pull(e) => e.exit_code(),
            StartError::FirstStart(FirstStartError::Failed { status, .. }) => *status,
            _ => exit::GPURUN_FAILED,
        }
    }
}

/// A launch as the command line describes it: the plan's request, and what the start does
/// around the plan.
pub struct Launch {
    pub image: String,
    pub action: Action,
    pub request: Request,
    /// `--env-file`: read when the launch starts, for the plan's environment.
    pub env_files: Vec<PathBuf>,
    pub gpu: crate::gpu::GpuOpts,
    pub dry_run: bool,
    /// For `hold`: where to write the state once ready.
    pub state: Option<PathBuf>,
    /// `--save OUT`: the root, with its changes, written as a new image once the command
    /// has succeeded (a holder's: once it is stopped).
    pub save: Option<PathBuf>,
    pub settings: Settings,
}

/// What the configuration and the global options say of every launch.
pub struct Settings {
    /// The squashfs compressor when a `docker://` image is pulled first (zstd when `None`).
    pub compression: Option<String>,
    /// No progress output when a `docker://` image is pulled first.
    pub quiet: bool,
    /// What to say on stderr about the launch: 0 nothing, 1 (--verbose) the host paths bound,
    /// 2 (--debug) every mount of the plan.
    pub log: u8,
    /// How long an image server waits for another container before it exits; zero: the
    /// container gets a server of its own (runtime/image_server/serve.rs).
    pub server_idle: Duration,
}

/// `--save OUT`: where the image goes, and the overlay directory collecting the changes (in
/// the cache: a local file system, as overlayfs wants; removed at the end).
struct Save {
    target: SaveTarget,
    dir: ChangesDir,
    /// A holder's container: its end is the Slurm step's, whatever its status.
    held: bool,
    /// The image's metadata, for the new one.
    meta: ImageMeta,
    /// The mount points the image lacks, made in the changes for the container's mounts.
    mount_points: Vec<PathBuf>,
}

/// The overlay directory of `--save`, removed with what it holds however the start ends.
struct ChangesDir(PathBuf);

impl Drop for ChangesDir {
    fn drop(&mut self) {
        crate::store::tree::remove_tree(&self.0);
    }
}

impl Save {
    /// For `--save OUT` (not with --dry-run): claim OUT and make the changes' directory,
    /// before the command runs. OUT must not exist, but for a holder's: pyxis's
    /// `--container-save` replaces a file once the new image is whole.
    fn prepare(l: &Launch, meta: &ImageMeta) -> Result<Option<Save>, StartError> {
        let Some(out) = l.save.as_deref().filter(|_| !l.dry_run) else {
            return Ok(None);
        };
        let held = matches!(l.action, Action::Hold { .. });
        match out.symlink_metadata() {
            Ok(m) if held && m.is_dir() => return Err(StartError::SaveIsDir(out.to_path_buf())),
            Ok(_) if !held => return Err(StartError::SaveExists(out.to_path_buf())),
            _ => {}
        }
        let target = save_target(out, held).map_err(|e| match e {
            PullError::Output { source, .. } => StartError::SaveDir {
                path: out.to_path_buf(),
                source,
            },
            e => e.into(),
        })?;
        let cache = Cache::open(&cache_root()).map_err(PullError::from)?;
        let base = cache.subdir("save").map_err(PullError::from)?;
        let dir = tempfile::Builder::new()
            .prefix("changes-")
            .tempdir_in(&base)
            .map_err(|source| PullError::Output { path: base, source })?
            .keep();
        Ok(Some(Save {
            target,
            dir: ChangesDir(dir),
            held,
            meta: meta.clone(),
            mount_points: Vec::new(),
        }))
    }

    /// After the command: OUT from the image (`lower`) and the changes, if it succeeded.
    fn finish(self, status: i32, lower: &Lower, pull: &PullOptions) -> Result<i32, StartError> {
        use std::os::fd::AsRawFd;
        let image = match lower {
            Lower::Dir(d) => d.clone(),
            Lower::Served { attached, .. } => {
                PathBuf::from(format!("/proc/self/fd/{}", attached.mount.as_raw_fd()))
            }
        };
        let saved = if status == 0 || self.held {
            let changes = self.dir.0.join("upper");
            let changes = (changes.as_path(), self.mount_points);
            save(self.target, changes, &image, &self.meta, pull).map(|_| status)
        } else {
            eprintln!(
                "gpurun: the command exited with status {status}; {} is not written (--save keeps a container whose command succeeded)",
                self.target.out().display()
            );
            Ok(status)
        };
        Ok(saved?)
    }
}

/// An image, opened: what the planner reads from it and what the launcher mounts.
enum Image {
    Dir(PathBuf),
    /// A first start's unpacked tree (runtime/first_start.rs): read as `Dir`, planned as the
    /// squashfs `image` being written from it.
    Unpacked {
        tree: PathBuf,
        image: PathBuf,
    },
    Squashfs {
        path: PathBuf,
        archive: Box<Archive>,
        /// Where its facts are kept between starts, and for which identity (`ImageFacts`).
        kept: Option<(PathBuf, String)>,
        /// Where its servers keep their decompressed blocks (`Archive::blocks_file`).
        blocks: Option<PathBuf>,
    },
}

impl Image {
    /// The image `arg` names; for a docker:// image not cached yet and a container that ends
    /// on its own (`early`), its unpacked tree and the pull still writing it.
    fn open(
        arg: &str,
        pull: &PullOptions,
        early: bool,
    ) -> Result<(Image, Option<first_start::Pull>), StartError> {
        // docker://, podman://: converted once into the cache (keyed by manifest digest, by
        // podman's image ID), then run from there.
        let cached = match early && arg.starts_with("docker://") {
            true => cached_registry_image(arg, pull)?,
            false => None,
        };
        let path = if let Some(p) = cached {
            p
        } else if early && arg.starts_with("docker://") {
            match first_start::pull(arg, pull.quiet)? {
                (
                    Ready {
                        tree: Some(tree),
                        image,
                    },
                    p,
                ) => {
                    return Ok((Image::Unpacked { tree, image }, p));
                }
                (Ready { image, .. }, _) => image,
            }
        } else if is_reference(arg) {
            ensure_local(arg, pull)?
        } else {
            PathBuf::from(arg)
        };
        Ok((Image::open_path(path)?, None))
    }

    fn open_path(path: PathBuf) -> Result<Image, StartError> {
        let md = std::fs::metadata(&path).map_err(|e| StartError::image_access(&path, e))?;
        let path = std::path::absolute(&path).unwrap_or(path);
        // An image the user may not read is said so, not taken for an empty or a damaged one.
        // (A FIFO is never opened: an open would wait for a writer. It is refused below.)
        let readable = match (md.is_dir(), md.is_file()) {
            (true, _) => std::fs::read_dir(&path).map(drop),
            (_, true) => std::fs::File::open(&path).map(drop),
            _ => Ok(()),
        };
        readable.map_err(|e| StartError::image_access(&path, e))?;
        if md.is_dir() {
            return Ok(Image::Dir(path));
        }
        if !md.is_file() {
            let kind = file_kind(&md);
            return Err(StartError::NotAnImage { path, kind });
        }
        // A squashfs file, or the squashfs partition inside an Apptainer SIF file.
        let archive = crate::image::sif::open_archive(&path).map_err(|e| match e {
            OpenError::Sif(_, source) => StartError::Sif {
                path: path.clone(),
                source,
            },
            OpenError::Sqfs(source) => StartError::Squashfs {
                path: path.clone(),
                source,
            },
        })?;
        let kept = kept_facts(&archive, cache_root());
        let blocks = archive.blocks_file(cache_root());
        // The blocks an earlier server kept serve this start's own lookups too (the plan's).
        if let (Some(f), Some((_, id))) = (&blocks, &kept) {
            archive.use_kept(f, id);
        }
        Ok(Image::Squashfs {
            path,
            archive: Box::new(archive),
            kept,
            blocks,
        })
    }

    fn read(&self, p: &str) -> Option<Vec<u8>> {
        match self {
            Image::Dir(d) => std::fs::read(d.join(p.trim_start_matches('/'))).ok(),
            Image::Unpacked { tree, .. } => in_tree::read(tree, p),
            Image::Squashfs { archive, .. } => archive.read_file(p).ok().flatten(),
        }
    }

    fn text(&self, p: &str) -> Option<String> {
        self.read(p)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// What the plan needs from the image (`ImageFacts`), kept for a squashfs image.
    fn facts(&self) -> Result<ImageFacts, StartError> {
        let find = |id: String| -> Result<ImageFacts, StartError> {
            // gpurun's own metadata, else enroot's or Apptainer's conventions (image/foreign.rs).
            let (_, meta) =
                crate::image::foreign::image_meta(&|p| self.read(p), &|d| self.list(d))?;
            Ok(ImageFacts {
                id,
                meta,
                passwd: self.text("/etc/passwd"),
                group: self.text("/etc/group"),
            })
        };
        // A directory can change at any time.
        let Image::Squashfs {
            kept: Some((file, id)),
            ..
        } = self
        else {
            return find(String::new());
        };
        let id = format!("{id}:{IMAGE_FACTS_FORMAT}");
        crate::store::kept_facts::kept(Some(file), |f: &ImageFacts| f.id == id, || find(id.clone()))
    }

    fn exists(&self, p: &str) -> bool {
        match self {
            Image::Dir(d) => d.join(p.trim_start_matches('/')).symlink_metadata().is_ok(),
            Image::Unpacked { tree, .. } => in_tree::exists(tree, p),
            Image::Squashfs { archive, .. } => archive.exists(p).unwrap_or(false),
        }
    }

    fn list(&self, p: &str) -> Option<Vec<String>> {
        match self {
            Image::Unpacked { tree, .. } => in_tree::list(tree, p),
            Image::Dir(d) => Some(
                std::fs::read_dir(d.join(p.trim_start_matches('/')))
                    .ok()?
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect(),
            ),
            Image::Squashfs { archive, .. } => archive.list_names(p),
        }
    }

    fn root(&self) -> RootSource {
        match self {
            Image::Dir(d) => RootSource::Dir(d.clone()),
            Image::Squashfs { path, .. } | Image::Unpacked { image: path, .. } => {
                RootSource::Squashfs(path.clone())
            }
        }
    }

    /// How the launcher gets the root: a copy of its image server's mount, or extracted once
    /// when FUSE is unusable here: /dev/fuse cannot be opened, or the server cannot mount it
    /// (another device in its place, a kernel or LSM that refuses FUSE in a user namespace).
    fn lower(self, idle: Duration) -> Result<Lower, StartError> {
        let (path, archive, blocks) = match self {
            Image::Dir(d) | Image::Unpacked { tree: d, .. } => return Ok(Lower::Dir(d)),
            Image::Squashfs {
                path,
                archive,
                blocks,
                ..
            } => (path, archive, blocks),
        };
        // A probe: the server opens its own.
        if let Err(e) = sys::open_fuse() {
            let why = format!("/dev/fuse cannot be opened ({e})");
            return extracted(&path, &archive, &why);
        }
        match attach::attach(&archive, &path, idle, blocks.as_deref()) {
            Ok(attached) => Ok(Lower::Served {
                image: path,
                attached,
            }),
            Err(e @ AttachError::NoFuse(_)) => extracted(&path, &archive, &e.to_string()),
            Err(e) => Err(LaunchError::Serve(e).into()),
        }
    }
}

/// The image at `path` extracted once into the cache, for a node where FUSE is unusable
/// (`why`, said on stderr since it costs disk and time the first time).
fn extracted(path: &Path, archive: &Archive, why: &str) -> Result<Lower, StartError> {
    let cache = Cache::open(&cache_root()).map_err(PullError::from)?;
    let base = cache.subdir("rootfs").map_err(PullError::from)?;
    eprintln!(
        "gpurun: {why}; using an extracted copy of {} under {} (made once)",
        path.display(),
        base.display()
    );
    let dir =
        extract::cached_rootfs(path, archive, &base).map_err(|source| StartError::Extract {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(Lower::Dir(dir))
}

/// What kind of file `md` describes, in words.
fn file_kind(md: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = md.file_type();
    match () {
        _ if t.is_fifo() => "FIFO",
        _ if t.is_socket() => "socket",
        _ if t.is_char_device() => "character device",
        _ if t.is_block_device() => "block device",
        _ => "special file",
    }
}

/// What the plan reads from an image: its metadata and its passwd and group files. Each small file
/// is most likely in a fragment block of its own to decompress, on every start. So for a squashfs
/// image they are kept in the user's cache while
/// the image file is the same (`Archive::identity`) and gpurun is the same build (`id`).
#[derive(serde::Serialize, serde::Deserialize)]
struct ImageFacts {
    id: String,
    meta: crate::image::meta::ImageMeta,
    passwd: Option<String>,
    group: Option<String>,
}

/// Bumped when what `ImageFacts` holds, or how it is read from an image, changes (a build from a
/// modified tree keeps its commit).
const IMAGE_FACTS_FORMAT: u32 = 1;

/// Where the facts of a squashfs image are kept in the user's cache (`FactsDir`), one file per
/// image file (its device and inode), and the identity they are valid for: the image file's
/// (`Archive::identity`) and gpurun's build. None where there is no private cache.
fn kept_facts(archive: &Archive, root: PathBuf) -> Option<(PathBuf, String)> {
    let (file_key, id) = archive.identity().ok()?;
    let file = crate::store::kept_facts::kept_file(root, "image-facts", &file_key, "json")?;
    Some((file, crate::image::sqfs::kept_id(&id)))
}

/// The host /dev entries worth a bind in a filtered /dev: directories, symlinks, and the nodes this
/// user may open at all. Virtual consoles, loop and memory devices (root's only) are left out:
/// they would cost a mount each on every start and could not be opened inside anyway.
fn dev_entries() -> Vec<DevEntry> {
    use nix::unistd::{access, AccessFlags};
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/dev") {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_symlink() {
                if let Ok(target) = std::fs::read_link(e.path()) {
                    out.push(DevEntry::Symlink { name, target });
                }
            } else if ft.is_dir()
                || access(&e.path(), AccessFlags::R_OK).is_ok()
                || access(&e.path(), AccessFlags::W_OK).is_ok()
            {
                out.push(DevEntry::Other { name });
            }
        }
    }
    out.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    out
}

/// The caller's terminal: the device node of the first of stdin, stdout and stderr that is a
/// terminal, where its name still leads to it (as Apptainer finds the one it binds).
fn caller_tty() -> Option<PathBuf> {
    use std::io::IsTerminal;
    use std::os::unix::fs::MetadataExt;
    let terminal = [
        std::io::stdin().is_terminal(),
        std::io::stdout().is_terminal(),
        std::io::stderr().is_terminal(),
    ];
    (0..3).filter(|fd| terminal[*fd]).find_map(|fd| {
        let link = format!("/proc/self/fd/{fd}");
        let name = std::fs::read_link(&link).ok()?;
        let (named, open) = (
            std::fs::metadata(&name).ok()?,
            std::fs::metadata(&link).ok()?,
        );
        (named.rdev() == open.rdev() && named.ino() == open.ino()).then_some(name)
    })
}

/// One line for the variables that still use the old prefix for the container's environment.
fn warn_legacy_env(env: &[(String, String)], quiet: bool) {
    let legacy = super::env::legacy_names(env);
    if !legacy.is_empty() && !quiet {
        eprintln!(
            "gpurun: warning: {}: the GPURUN_ENV_ prefix is deprecated; write GPURUNENV_NAME (GPURUN_ENV_FILE is --env-file's variable)",
            legacy.join(", ")
        );
    }
}

/// Run a launch; returns the exit code for gpurun.
pub fn start(l: Launch) -> Result<i32, StartError> {
    let pull = PullOptions {
        quiet: l.settings.quiet,
        compression: l.settings.compression.clone(),
        ..Default::default()
    };
    // A held container ends when its Slurm step is killed, which would abandon the image's
    // writing: it waits for the .sqsh, as before.
    let early = l.state.is_none();
    let (image, unpacked_pull) = Image::open(&l.image, &pull, early)?;
    let ImageFacts {
        meta,
        passwd: image_passwd,
        group: image_group,
        ..
    } = image.facts()?;
    let env_files = read_env_files(&l.env_files)?;
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    let env = host_env();
    warn_legacy_env(&env, l.settings.quiet);
    let (user, home, group) = names(uid, gid, &env);
    let extras = gpu_extras(&l.gpu, &env, &meta.env, &image)?;
    let mut saving = Save::prepare(&l, &meta)?;
    let host_exists = plan::HostPath::of;
    let host = HostView {
        uid: uid.as_raw(),
        gid: gid.as_raw(),
        user,
        group,
        home,
        shell: first(&env, "SHELL"),
        cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        env: env.clone(),
        dev: if extras.filter_nvidia_dev {
            dev_entries()
        } else {
            Vec::new()
        },
        tty: caller_tty(),
        env_files,
        save_changes: saving.as_ref().map(|s| s.dir.0.clone()),
        exists: &host_exists,
    };
    let image_exists = |p: &str| image.exists(p);
    let view = ImageView {
        root: image.root(),
        meta,
        passwd: image_passwd,
        group: image_group,
        exists: &image_exists,
    };
    let plan = plan::plan(&l.request, &l.action, &host, &view, &extras)?;
    log_plan(&plan, l.settings.log);
    if l.dry_run {
        println!(
            "{}",
            serde_json::to_string_pretty(&plan).expect("plans serialise")
        );
        return Ok(0);
    }
    let hold = l.state.map(|path| HoldState { path });
    if let Some(s) = &mut saving {
        s.mount_points = (plan.mounts.iter())
            .filter(|m| !image.exists(&m.dst.to_string_lossy()))
            .filter_map(|m| m.dst.strip_prefix("/").ok().map(Path::to_path_buf))
            .collect();
    }
    let lower = image.lower(l.settings.server_idle)?;
    let status = launch::run(&plan, &lower, hold);
    if let Some(p) = unpacked_pull {
        p.finish(l.settings.quiet);
    }
    match saving {
        Some(s) => s.finish(status?, &lower, &pull),
        None => Ok(status?),
    }
}

/// The variables of the `--env-file` files, in order.
fn read_env_files(files: &[PathBuf]) -> Result<Vec<(String, String)>, StartError> {
    let mut vars = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).map_err(|e| StartError::EnvFile(f.clone(), e))?;
        vars.extend(parse_env_file(f, &text)?);
    }
    Ok(vars)
}

/// The first value of `key` in `env`.
fn first(env: &[(String, String)], key: &str) -> Option<String> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
}

/// The user's and group's names and the home directory, from the user database or else the
/// environment.
fn names(uid: Uid, gid: Gid, env: &[(String, String)]) -> (String, PathBuf, String) {
    let pw = nix::unistd::User::from_uid(uid).ok().flatten();
    let user = pw
        .as_ref()
        .map(|p| p.name.clone())
        .or_else(|| first(env, "USER"))
        .unwrap_or_else(|| format!("user{uid}"));
    let home = pw
        .as_ref()
        .map(|p| p.dir.clone())
        .or_else(|| first(env, "HOME").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/"));
    let group = nix::unistd::Group::from_gid(gid)
        .ok()
        .flatten()
        .map(|g| g.name)
        .unwrap_or_else(|| format!("group{gid}"));
    (user, home, group)
}

/// The GPU plan (driver files, devices, environment) and CDI devices, as the plan's extras.
fn gpu_extras(
    gpu_opts: &crate::gpu::GpuOpts,
    env: &[(String, String)],
    meta_env: &[String],
    image: &Image,
) -> Result<Extras, StartError> {
    let image_env: Vec<(String, String)> = meta_env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let cdi = crate::gpu::cdi_devices(gpu_opts)?;
    let gpu = crate::gpu::prepare(gpu_opts, cdi.as_ref(), env, &image_env, &|d| image.list(d))?;
    let mut extras = match gpu {
        Some(g) => {
            for w in &g.warnings {
                eprintln!("gpurun: warning: {w}");
            }
            Extras::from_gpu(g)
        }
        None => Extras {
            filter_nvidia_dev: crate::gpu::host_has_nvidia_dev(),
            ..Extras::default()
        },
    };
    if let Some(a) = cdi {
        for s in &a.skipped {
            eprintln!("gpurun: {s}");
        }
        extras.add_cdi(a);
    }
    Ok(extras)
}

/// What to say on stderr about the plan: 0 nothing, 1 the host paths bound, 2 every mount.
fn log_plan(plan: &plan::Plan, log: u8) {
    if log >= 2 {
        eprintln!("gpurun: root {:?}", plan.root);
        for m in &plan.mounts {
            eprintln!(
                "gpurun: mount {}",
                serde_json::to_string(m).expect("mounts serialise")
            );
        }
    } else if log == 1 {
        for m in &plan.mounts {
            if let crate::mount::MountSource::Bind { src } = &m.source {
                let ro = if m.readonly { " (ro)" } else { "" };
                eprintln!("gpurun: bind {} -> {}{ro}", src.display(), m.dst.display());
            }
        }
    }
}

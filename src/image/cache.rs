//! The per-user cache: blobs stored once by digest, and whole images for `ensure_local`.
//!
//! Root: `GPURUN_CACHEDIR` / `cache_dir` (see config.rs), else `$XDG_CACHE_HOME/gpurun`, else
//! `/var/tmp/gpurun-$UID`. The default is deliberately not under `$HOME`: HPC home directories
//! have small quotas and are often on a slow shared filesystem, while `/var/tmp` is node-local,
//! large and survives reboots. Every directory of it is the caller's own and private, checked
//! before use (store/private_dir.rs): another user who made `/var/tmp/gpurun-$UID` first gets it
//! refused, never used.
//!
//! Layout:
//!   blobs/sha256/HEX          complete blob, verified against its digest (never modified)
//!   blobs/sha256/HEX.partial  download in progress; an interrupted pull resumes from its length
//!   locks/HEX.lock            flock(2) held while one process downloads HEX or builds image HEX
//!   images/HEX.sqsh           image built from the manifest with digest sha256:HEX
//!   refs/HASH                 the digest a reference last resolved to (offline fallback)
//!   rootfs/…                  the runtime's extraction fallback (runtime/extract.rs)
//!   image-blocks/HASH.blocks  an image's blocks kept decompressed from one server to the next
//!                             (image/sqfs/kept.rs)
//!   image-facts/, driver-libs/, gpu-proc/, nvml/   facts kept between starts (`FactsDir`)
//!
//! A site may name a shared cache (`shared_cache` in the site file) that a site account fills
//! and every user reads: its blobs and images are used without downloading, never written.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::reference::valid_digest;
use crate::store::private_dir::{self, PlaceError, Visibility};

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cache directory {0}")]
    Place(#[from] PlaceError),
    #[error("shared cache {0}")]
    Shared(PlaceError),
    #[error("lock {path}: {source}")]
    Lock { path: PathBuf, source: io::Error },
    #[error("'{0}' is not a sha256 digest")]
    BadDigest(String),
}

/// What the user can do when the cache directory is refused.
pub const CACHE_FIX: &str =
    "set GPURUN_CACHEDIR (or cache_dir in ~/.config/gpurun/config.toml) to a directory of your own";

/// The cache settings of this process, from the config (set once by the command line's entry).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `cache_dir` / `GPURUN_CACHEDIR`.
    pub dir: Option<PathBuf>,
    /// The site's shared read-only cache.
    pub shared: Option<PathBuf>,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Take the config's cache settings for this process (before any cache is opened).
pub fn configure(s: Settings) {
    let _ = SETTINGS.set(s);
}

fn settings() -> &'static Settings {
    SETTINGS.get_or_init(Settings::default)
}

/// The cache root (see the module comment for the order of precedence).
pub fn cache_root() -> PathBuf {
    cache_root_from(
        settings().dir.clone(),
        std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from),
        nix::unistd::getuid().as_raw(),
    )
}

/// [`cache_root`] from given values (also for `gpurun cache gc`, which works out the roots of
/// other gpurun processes).
pub fn cache_root_from(configured: Option<PathBuf>, xdg: Option<PathBuf>, uid: u32) -> PathBuf {
    // Empty or relative values are ignored, as the XDG spec asks.
    let usable = |p: &PathBuf| p.is_absolute();
    if let Some(p) = configured.filter(usable) {
        return p;
    }
    if let Some(p) = xdg.filter(usable) {
        return p.join("gpurun");
    }
    PathBuf::from(format!("/var/tmp/gpurun-{uid}"))
}

#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
    /// The site's shared read-only cache, checked (none where this cache is it).
    shared: Option<PathBuf>,
    vis: Visibility,
}

impl Cache {
    /// Open the cache at `root`, made if missing, checked as the caller's own (private, or
    /// readable by all where it is the site's shared cache and the caller its owner); the
    /// site's shared cache, if any, beside it for reading.
    pub fn open(root: &Path) -> Result<Cache, CacheError> {
        let shared = match &settings().shared {
            Some(s) => Some(
                private_dir::shared_dir(s, "fix or remove shared_cache in the site file")
                    .map_err(CacheError::Shared)?,
            ),
            None => None,
        };
        let vis = visibility(root);
        let publish = vis == Visibility::Readable;
        let root = private_dir::own_dir(root, vis, CACHE_FIX)?;
        let blobs = private_dir::own_subdir(&root, "blobs", vis, CACHE_FIX)?;
        private_dir::own_subdir(&blobs, "sha256", vis, CACHE_FIX)?;
        for sub in ["locks", "images", "refs"] {
            private_dir::own_subdir(&root, sub, vis, CACHE_FIX)?;
        }
        Ok(Cache {
            root,
            shared: shared.filter(|_| !publish),
            vis,
        })
    }

    /// The resolved root, checked: every path under it is where the check looked.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Mode for files this cache makes: private, or readable by all in a published cache.
    pub fn file_mode(&self) -> u32 {
        match self.vis {
            Visibility::Private => 0o600,
            Visibility::Readable => 0o644,
        }
    }

    /// The directory `name` of this cache (made if missing, checked like the root).
    pub fn subdir(&self, name: &str) -> Result<PathBuf, CacheError> {
        Ok(private_dir::own_subdir(
            &self.root, name, self.vis, CACHE_FIX,
        )?)
    }

    fn hex(digest: &str) -> Result<&str, CacheError> {
        if !valid_digest(digest) {
            return Err(CacheError::BadDigest(digest.to_string()));
        }
        Ok(&digest[7..])
    }

    pub fn blob_path(&self, digest: &str) -> Result<PathBuf, CacheError> {
        Ok(self.root.join("blobs/sha256").join(Self::hex(digest)?))
    }

    /// The complete blob `digest`: this cache's, else the site's shared cache's (a regular file
    /// nobody but that cache's owner may change).
    pub fn find_blob(&self, digest: &str) -> Result<Option<PathBuf>, CacheError> {
        let own = self.blob_path(digest)?;
        if own.exists() {
            return Ok(Some(own));
        }
        let rel = format!("blobs/sha256/{}", Self::hex(digest)?);
        Ok(self.shared_file(&rel))
    }

    fn shared_file(&self, rel: &str) -> Option<PathBuf> {
        let dir = self.shared.as_ref()?;
        let owner = fs::metadata(dir).ok()?.uid();
        let p = dir.join(rel);
        private_dir::open_trusted(&p, owner).ok().map(|_| p)
    }

    pub fn partial_path(&self, digest: &str) -> Result<PathBuf, CacheError> {
        Ok(self
            .root
            .join("blobs/sha256")
            .join(format!("{}.partial", Self::hex(digest)?)))
    }

    pub fn image_path(&self, manifest_digest: &str) -> Result<PathBuf, CacheError> {
        Ok(self
            .root
            .join("images")
            .join(format!("{}.sqsh", Self::hex(manifest_digest)?)))
    }

    /// The image built from `manifest_digest`: this cache's, else the shared cache's.
    pub fn find_image(&self, manifest_digest: &str) -> Result<Option<PathBuf>, CacheError> {
        let own = self.image_path(manifest_digest)?;
        if own.exists() {
            return Ok(Some(own));
        }
        let rel = format!("images/{}.sqsh", Self::hex(manifest_digest)?);
        Ok(self.shared_file(&rel))
    }

    /// Remember the manifest digest `key` (a reference and platform) last resolved to, so that
    /// `exec docker://…` still finds its image when the registry cannot be reached (compute
    /// nodes without internet access). Written whole or not at all.
    pub fn remember_ref(&self, key: &str, digest: &str) -> io::Result<()> {
        let path = self.ref_path(key);
        write_atomically(&path, format!("{digest}\n").as_bytes())?;
        if self.vis == Visibility::Readable {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&path, fs::Permissions::from_mode(self.file_mode()))?;
        }
        Ok(())
    }

    /// The digest `key` last resolved to, if it was remembered (here, else in the site's shared
    /// cache) and its image is still cached.
    pub fn recall_ref(&self, key: &str) -> Option<(String, PathBuf)> {
        let uid = nix::unistd::geteuid().as_raw();
        let own = private_dir::open_trusted(&self.ref_path(key), uid).ok();
        let shared = || {
            let dir = self.shared.as_ref()?;
            let owner = fs::metadata(dir).ok()?.uid();
            let p = dir.join("refs").join(ref_name(key));
            private_dir::open_trusted(&p, owner).ok()
        };
        let mut text = String::new();
        own.or_else(shared)?
            .take(200)
            .read_to_string(&mut text)
            .ok()?;
        let digest = text.trim().to_string();
        let image = self.find_image(&digest).ok()??;
        Some((digest, image))
    }

    fn ref_path(&self, key: &str) -> PathBuf {
        self.root.join("refs").join(ref_name(key))
    }

    /// Take the exclusive lock for `digest`, waiting for another process that holds it.
    pub fn lock(&self, digest: &str) -> Result<FileLock, CacheError> {
        let path = self
            .root
            .join("locks")
            .join(format!("{}.lock", Self::hex(digest)?));
        FileLock::acquire(&path)
    }
}

/// The file name under `refs/` for a reference key.
fn ref_name(key: &str) -> String {
    use sha2::{Digest as _, Sha256};
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// Who may read the cache at `root`: everyone where it is the site's shared cache and the caller
/// its owner (filling it), else only the caller.
fn visibility(root: &Path) -> Visibility {
    let me = nix::unistd::geteuid().as_raw();
    let published = settings().shared.as_ref().is_some_and(|s| {
        let real = |p: &Path| fs::canonicalize(p).ok();
        real(root).is_some_and(|r| Some(r) == real(s))
            && fs::metadata(s).is_ok_and(|m| m.uid() == me)
    });
    match published {
        true => Visibility::Readable,
        false => Visibility::Private,
    }
}

/// An exclusive flock(2), released on drop or when the process dies (so a killed pull never
/// leaves a stale lock behind).
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

impl FileLock {
    /// Lock `path`, a file in a directory of the caller's (never opened through a link).
    pub fn acquire(path: &Path) -> Result<FileLock, CacheError> {
        let err = |source| CacheError::Lock {
            path: path.to_path_buf(),
            source,
        };
        let file = private_dir::open_or_create(path, 0o600).map_err(err)?;
        loop {
            // flock(2): released when the file is closed, also by a killed process.
            match file.lock() {
                Ok(()) => return Ok(FileLock { _file: file }),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(err(e)),
            }
        }
    }
}

/// Write `file` whole or not at all: a reader sees the old contents or the new, never a part.
pub fn write_atomically(file: &Path, bytes: &[u8]) -> io::Result<()> {
    write_whole(file, |f| f.write_all(bytes))
}

/// Write `file` whole or not at all, by `write`. The new contents go to an unnamed file first
/// (O_TMPFILE), named only once whole, so a writer that fails or is killed midway leaves no
/// partial file. A replacement is linked under a temporary name and renamed over the old file
/// (a kill in that instant leaves the temporary name, which `prune` removes).
/// Where there are no unnamed files, or they cannot be named (no usable /proc/self/fd), a
/// temporary file of this call's own, made new (never one left by another writer), removed on
/// failure. Two processes may write the same file at once: each temporary name is its own.
pub fn write_whole(file: &Path, write: impl Fn(&mut File) -> io::Result<()>) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    let tmp = file.with_file_name(format!(".{name}.{}.{call}.tmp", std::process::id()));
    let renamed = || {
        fs::rename(&tmp, file).inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })
    };
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
    let unnamed = OpenOptions::new()
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(dir.unwrap_or(Path::new(".")));
    if let Ok(mut f) = unnamed {
        write(&mut f)?;
        // Named at once where there is no file yet.
        let named = match link_unnamed(&f, file) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                link_unnamed(&f, &tmp).and_then(|_| renamed())
            }
            named => named,
        };
        if named.is_ok() {
            return Ok(());
        }
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    write(&mut f).and_then(|_| renamed()).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

/// Give the unnamed (O_TMPFILE) file `f` the name `to`.
fn link_unnamed(f: &File, to: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let from = std::ffi::CString::new(format!("/proc/self/fd/{}", f.as_raw_fd()))?;
    let to = std::ffi::CString::new(to.as_os_str().as_bytes())?;
    // SAFETY: two NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The fact kept in `file` while it still `holds`, else what `find` finds, kept there for the
/// next start when it holds. A file that is missing, damaged or not writable just means `find`.
pub fn kept<T, E>(
    file: Option<&Path>,
    holds: impl Fn(&T) -> bool,
    find: impl FnOnce() -> Result<T, E>,
) -> Result<T, E>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let old = file
        .and_then(|f| std::fs::read(f).ok())
        .and_then(|b| serde_json::from_slice::<T>(&b).ok())
        .filter(&holds);
    if let Some(old) = old {
        return Ok(old);
    }
    let new = find()?;
    if let (Some(f), true) = (file, holds(&new)) {
        let _ = write_atomically(f, &serde_json::to_vec(&new).unwrap_or_default());
    }
    Ok(new)
}

/// Where facts are kept between starts (`kept`): one directory per kind under a root, the user's
/// gpurun cache, each the caller's own and private (store/private_dir.rs). Where the root is
/// refused (someone else made it), nothing is kept, and the user is told once.
pub struct FactsDir {
    root: PathBuf,
}

impl FactsDir {
    /// `root`, made if missing; None (said once on stderr) unless it is the caller's and private.
    pub fn open(root: PathBuf) -> Option<FactsDir> {
        match private_dir::own_dir(&root, visibility(&root), CACHE_FIX) {
            Ok(root) => Some(FactsDir { root }),
            Err(e) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    eprintln!(
                        "gpurun: warning: cache directory {e}; nothing is kept between starts"
                    )
                });
                None
            }
        }
    }

    /// The file `name` for facts of `kind`; None unless its directory is private too.
    pub fn file(&self, kind: &str, name: &str) -> Option<PathBuf> {
        private_dir::own_subdir(&self.root, kind, Visibility::Private, CACHE_FIX)
            .ok()
            .map(|dir| dir.join(name))
    }
}

/// Keep at most `max_files` files and `max_bytes` in `dir` (a directory of kept things, each
/// made again when missing), the most recently used first: by the later of access and
/// modification time, as `gpurun cache gc` judges use. A writer's temporary file (`.NAME.tmp`)
/// left by a gpurun killed mid-rename is removed once older than gc's grace period. Best effort.
pub fn prune(dir: &Path, max_files: usize, max_bytes: u64) {
    use std::os::unix::fs::MetadataExt;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut kept = Vec::new();
    for e in entries.flatten() {
        let (path, name) = (e.path(), e.file_name());
        let Ok(m) = fs::symlink_metadata(&path) else {
            continue;
        };
        let stale = now - m.mtime() > super::gc::GRACE.as_secs() as i64;
        if name.to_string_lossy().starts_with('.') {
            if stale {
                let _ = fs::remove_file(&path);
            }
        } else if m.is_file() {
            kept.push((m.atime().max(m.mtime()), m.len(), path));
        }
    }
    kept.sort_by(|a, b| b.cmp(a));
    let mut total = 0u64;
    for (i, (_, len, path)) in kept.iter().enumerate() {
        total += len;
        if i >= max_files || total > max_bytes {
            let _ = fs::remove_file(path);
        }
    }
}

/// A short name for `key` in a file name (the first 6 bytes of its SHA-256, in hex).
pub fn short_hash(key: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(key.as_bytes())[..6])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_only_in_a_private_directory() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("cache");
        let f = FactsDir::open(root.clone()).unwrap().file("k", "x.json");
        assert_eq!(f, Some(root.join("k/x.json")));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&root), mode(&root.join("k"))), (0o700, 0o700));
        // A kind's directory that is a link: no facts there.
        let d = FactsDir::open(root.clone()).unwrap();
        std::os::unix::fs::symlink(t.path(), root.join("l")).unwrap();
        assert_eq!(d.file("l", "x.json"), None);
        // Someone else's root: no facts at all.
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&root, Some(54321), None).unwrap();
            assert!(FactsDir::open(root.clone()).is_none());
        }
    }

    #[test]
    fn a_cache_someone_else_made_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root to make a directory of another user");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("cache");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::os::unix::fs::chown(&root, Some(54321), None).unwrap();
        let e = Cache::open(&root).unwrap_err().to_string();
        assert!(
            e.contains("not by you") && e.contains("GPURUN_CACHEDIR"),
            "{e}"
        );
        let mode = std::fs::metadata(&root).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o777, "never changed");
        assert!(!root.join("blobs").exists(), "nothing made in it");
    }

    #[test]
    fn short_hashes_are_stable_and_distinct() {
        assert_eq!(short_hash("a"), short_hash("a"));
        assert_eq!(short_hash("a").len(), 12);
        assert_ne!(short_hash("1:2"), short_hash("1:3"));
    }

    #[test]
    fn root_precedence() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(cache_root_from(p("/c"), p("/x"), 7), PathBuf::from("/c"));
        assert_eq!(
            cache_root_from(None, p("/x"), 7),
            PathBuf::from("/x/gpurun")
        );
        assert_eq!(
            cache_root_from(p("rel"), p(""), 7),
            PathBuf::from("/var/tmp/gpurun-7")
        );
        assert_eq!(
            cache_root_from(None, None, 1000),
            PathBuf::from("/var/tmp/gpurun-1000")
        );
    }

    #[test]
    fn paths_refuse_non_digests() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cache::open(dir.path()).unwrap();
        let d = format!("sha256:{}", "a".repeat(64));
        assert!(c.blob_path(&d).unwrap().ends_with("a".repeat(64)));
        assert!(c.blob_path("sha256:../../etc/passwd").is_err());
        let _l = c.lock(&d).unwrap();
    }

    #[test]
    fn prune_keeps_the_most_recently_used_within_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let now = std::time::SystemTime::now();
        let file = |name: &str, len: usize, age_s: u64| {
            let p = dir.path().join(name);
            fs::write(&p, vec![0u8; len]).unwrap();
            let t = now - std::time::Duration::from_secs(age_s);
            let f = File::options().write(true).open(&p).unwrap();
            f.set_times(fs::FileTimes::new().set_accessed(t).set_modified(t))
                .unwrap();
        };
        file("a.blocks", 100, 10);
        file("b.blocks", 100, 20);
        file("c.blocks", 100, 30);
        file("d.blocks", 100, 40);
        file(".e.blocks.7.tmp", 100, 3600);
        file(".f.blocks.8.tmp", 100, 5);
        let names = || {
            let mut v: Vec<String> = fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        prune(dir.path(), 3, 1000);
        assert_eq!(
            names(),
            [".f.blocks.8.tmp", "a.blocks", "b.blocks", "c.blocks"]
        );
        prune(dir.path(), 3, 250);
        assert_eq!(names(), [".f.blocks.8.tmp", "a.blocks", "b.blocks"]);
    }
}

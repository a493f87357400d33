//! The per-user cache: blobs stored once by digest, and whole images for `ensure_local`.
//!
//! Root: `$GPURUN_CACHE`, else `$XDG_CACHE_HOME/gpurun`, else `/var/tmp/gpurun-$UID`. The default is
//! deliberately not under `$HOME`: HPC home directories have small quotas and are often on a slow
//! shared filesystem, while `/var/tmp` is node-local, large and survives reboots.
//!
//! Layout:
//!   blobs/sha256/HEX          complete blob, verified against its digest (never modified)
//!   blobs/sha256/HEX.partial  download in progress; an interrupted pull resumes from its length
//!   locks/HEX.lock            flock(2) held while one process downloads HEX or builds image HEX
//!   images/HEX.sqsh           image built from the manifest with digest sha256:HEX
//!   rootfs/…                  the runtime's extraction fallback (not managed here)
//!   image-blocks/HASH.blocks  an image's blocks kept decompressed between starts
//!                             (image/sqfs/kept.rs)
//!   image-facts/, image-reads/, driver-libs/, gpu-proc/, nvml/   facts kept between starts
//!                             (`FactsDir`; image-reads/: runtime/kept_reads.rs)

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::reference::valid_digest;

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cache directory {path}: {source}; set GPURUN_CACHE to a writable directory")]
    Dir { path: PathBuf, source: io::Error },
    #[error("lock {path}: {source}")]
    Lock { path: PathBuf, source: io::Error },
    #[error("'{0}' is not a sha256 digest")]
    BadDigest(String),
}

/// The cache root (see the module comment for the order of precedence).
pub fn cache_root() -> PathBuf {
    cache_root_from(
        std::env::var_os("GPURUN_CACHE").map(PathBuf::from),
        std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from),
        nix::unistd::getuid().as_raw(),
    )
}

/// [`cache_root`] from given values (also for `gpurun cache gc`, which works out the roots of
/// other gpurun processes).
pub fn cache_root_from(gpurun: Option<PathBuf>, xdg: Option<PathBuf>, uid: u32) -> PathBuf {
    // Empty or relative values are ignored, as the XDG spec asks.
    let usable = |p: &PathBuf| p.is_absolute();
    if let Some(p) = gpurun.filter(usable) {
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
}

impl Cache {
    /// Open (creating if needed, mode 0700) the cache at `root`.
    pub fn open(root: &Path) -> Result<Cache, CacheError> {
        for sub in ["blobs/sha256", "locks", "images", "refs"] {
            let p = root.join(sub);
            fs::create_dir_all(&p).map_err(|source| CacheError::Dir { path: p, source })?;
        }
        // Private: pulled images may come from registries that needed credentials.
        use std::os::unix::fs::PermissionsExt;
        let _ = fs::set_permissions(root, fs::Permissions::from_mode(0o700));
        Ok(Cache {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
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

    /// Remember the manifest digest `key` (a reference and platform) last resolved to, so that
    /// `exec docker://…` still finds its image when the registry cannot be reached (compute
    /// nodes without internet access). Written whole or not at all.
    pub fn remember_ref(&self, key: &str, digest: &str) -> io::Result<()> {
        write_atomically(&self.ref_path(key), format!("{digest}\n").as_bytes())
    }

    /// The digest `key` last resolved to, if it was remembered and its image is still cached.
    pub fn recall_ref(&self, key: &str) -> Option<(String, PathBuf)> {
        let text = fs::read_to_string(self.ref_path(key)).ok()?;
        let digest = text.trim().to_string();
        let image = self.image_path(&digest).ok()?;
        image.exists().then_some((digest, image))
    }

    fn ref_path(&self, key: &str) -> PathBuf {
        use sha2::{Digest as _, Sha256};
        self.root
            .join("refs")
            .join(hex::encode(Sha256::digest(key.as_bytes())))
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

/// An exclusive flock(2), released on drop or when the process dies (so a killed pull never
/// leaves a stale lock behind).
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

impl FileLock {
    pub fn acquire(path: &Path) -> Result<FileLock, CacheError> {
        let err = |source| CacheError::Lock {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(err)?;
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
/// (O_TMPFILE), named only once whole, so a writer that fails or is killed midway (a start's
/// kept blocks are written while its command runs: image/sqfs/kept.rs) leaves no partial file.
/// A replacement is linked under a temporary name and renamed over the old file: a kill in that
/// instant leaves the temporary name (`prune` removes old ones). Where there are no unnamed
/// files, or they cannot be named (no usable /proc/self/fd), a temporary file of this call's
/// own, made new (never one left by another writer), removed on failure. Two threads may write
/// the same file at once (a start's warming and its end): each temporary name is its own.
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
/// gpurun cache. Only when the root and the kind's directory are the caller's own and private:
/// the default root in /var/tmp could have been made by someone else, who could then plant facts.
pub struct FactsDir {
    root: PathBuf,
    uid: u32,
}

impl FactsDir {
    /// `root`, made if missing; None unless it is `uid`'s own and private.
    pub fn open(root: PathBuf, uid: u32) -> Option<FactsDir> {
        private_dir_made(&root, uid).then_some(FactsDir { root, uid })
    }

    /// The file `name` for facts of `kind`; None unless its directory is private too.
    pub fn file(&self, kind: &str, name: &str) -> Option<PathBuf> {
        let dir = self.root.join(kind);
        private_dir_made(&dir, self.uid).then(|| dir.join(name))
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

/// `dir`, made (mode 0700, parents too) if missing, is a real directory (not a symlink) owned by
/// `uid` that nobody else may write to.
fn private_dir_made(dir: &Path, uid: u32) -> bool {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let private = |m: fs::Metadata| m.is_dir() && m.uid() == uid && m.mode() & 0o022 == 0;
    // Looked at first: on every start it is there already (one call, not a failed mkdir too).
    if let Ok(m) = fs::symlink_metadata(dir) {
        return private(m);
    }
    let _ = fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir);
    fs::symlink_metadata(dir).is_ok_and(private)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn facts_only_in_a_private_directory() {
        use std::os::unix::fs::PermissionsExt;
        let uid = nix::unistd::getuid().as_raw();
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("cache");
        let f = FactsDir::open(root.clone(), uid)
            .unwrap()
            .file("k", "x.json");
        assert_eq!(f, Some(root.join("k/x.json")));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&root), mode(&root.join("k"))), (0o700, 0o700));
        // A root others may write to, a symlink, or someone else's: no facts.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(FactsDir::open(root.clone(), uid).is_none());
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        assert!(FactsDir::open(link, uid).is_none());
        assert!(FactsDir::open(root.clone(), uid + 1).is_none());
        // Nor a kind's directory others may write to.
        let d = FactsDir::open(root.clone(), uid).unwrap();
        std::fs::set_permissions(root.join("k"), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(d.file("k", "x.json"), None);
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
}

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
//!   images/HEX.sqsh           image built from the manifest with digest sha256:HEX (for
//!                             podman://, from the image whose ID is sha256:HEX)
//!   refs/HASH                 the digest a reference last resolved to (offline fallback)
//!   rootfs/…                  the runtime's extraction fallback (runtime/extract.rs)
//!   image-blocks/HASH.blocks  an image's blocks kept decompressed from one server to the next
//!                             (image/sqfs/kept.rs)
//!   image-facts/, driver-libs/, gpu-proc/, nvml/   facts kept between starts (`FactsDir`)
//!
//! A site may name a shared cache (`shared_cache` in the site file) that a site account fills
//! and every user reads: its blobs and images are used without downloading, never written.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::reference::valid_digest;
use crate::store::cache_dir::{settings, visibility, CACHE_FIX};
use crate::store::private_dir::{self, PlaceError, Visibility};
use crate::store::whole_file::write_atomically;

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

/// An exclusive flock(2), released on drop or when the process dies (so a killed pull never
/// leaves a stale lock behind). std's `File::lock` (Rust 1.89) is that flock: no fs4 needed.
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn paths_refuse_non_digests() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cache::open(dir.path()).unwrap();
        let d = format!("sha256:{}", "a".repeat(64));
        assert!(c.blob_path(&d).unwrap().ends_with("a".repeat(64)));
        assert!(c.blob_path("sha256:../../etc/passwd").is_err());
        let _l = c.lock(&d).unwrap();
    }
}

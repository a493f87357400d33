//! A blob downloaded into the cache: digest-checked while it streams, resumed with an HTTP
//! range after an interruption, a bearer token fetched again once when it expires.

use std::fs::{self, File};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use oci_client::errors::OciDistributionError;
use sha2::{Digest as _, Sha256};

use super::client::{Failure, RegistryClient};
use super::error::{io_err, RegistryError};
use super::manifest::Descriptor;
use crate::image::cache::Cache;

/// Told of every chunk of a blob downloaded: its length.
pub type OnBytes<'a> = &'a (dyn Fn(u64) + Send + Sync);
/// Told of the blob's file after every chunk written into it, and how many bytes it holds.
pub type OnWritten<'a> = &'a (dyn Fn(&File, u64) + Send + Sync);

impl RegistryClient {
    /// Download blob `desc` into the cache (or find it there) and return its path. Verified
    /// against its digest while streaming; an interrupted download resumes with an HTTP range.
    /// `on_bytes` is told of every chunk, and `on_written` of the file and how many bytes it holds
    /// after each (bytes once written are never written again); returns
    /// the path and, when it was downloaded, the bytes received now (not those a resumed
    /// download already had).
    pub async fn fetch_blob(
        &self,
        desc: &Descriptor,
        cache: &Cache,
        on_bytes: OnBytes<'_>,
        on_written: OnWritten<'_>,
    ) -> Result<(PathBuf, Option<u64>), RegistryError> {
        let digest = desc.digest.as_str();
        if let Some(found) = cache.find_blob(digest)? {
            on_bytes(desc.size);
            return Ok((found, None));
        }
        let final_path = cache.blob_path(digest)?;
        let lock = {
            let c = cache.clone();
            let d = digest.to_string();
            tokio::task::spawn_blocking(move || c.lock(&d))
                .await
                .expect("lock task")?
        };
        if final_path.exists() {
            // Another pull finished it while we waited for the lock.
            on_bytes(desc.size);
            return Ok((final_path, None));
        }
        let mut part = PartialBlob::open(cache.partial_path(digest)?, cache, desc.size)?;
        on_bytes(part.have);
        let what = format!("blob {digest} of {}", self.image);
        let r = self.oref(self.image.reference_part());
        let mut attempt = 0;
        let mut reauthed = false;
        while desc.size == 0 || part.have < desc.size {
            let watch = (on_bytes, on_written);
            let Some(err) = self.download_once(&r, desc, &mut part, watch).await? else {
                break;
            };
            match self.classify(&what, err) {
                Failure::Fatal(RegistryError::Auth { .. } | RegistryError::Refused { .. })
                    if !reauthed =>
                {
                    // A bearer token can expire during a long pull (Docker Hub's last five
                    // minutes): fetch a new one, once, and go on where the download stopped.
                    reauthed = true;
                    if let Err(e) = self
                        .client
                        .auth(&r, &self.auth, oci_client::RegistryOperation::Pull)
                        .await
                    {
                        let (Failure::Retry(e) | Failure::Fatal(e)) = self.classify(&what, e);
                        return Err(e);
                    }
                }
                Failure::Retry(e) => {
                    self.before_retry(e, attempt).await?;
                    attempt += 1;
                }
                Failure::Fatal(e) => return Err(e),
            }
        }
        let received = part.received;
        part.commit(desc, &final_path, &self.image.registry)?;
        drop(lock);
        Ok((final_path, Some(received)))
    }

    /// One request for the rest of blob `desc`, appended to `part`. `None`: the blob is whole;
    /// `Some`: the request failed, to be sorted by [`Self::classify`]; `Err`: the cache's file
    /// could not be written.
    async fn download_once(
        &self,
        r: &oci_client::Reference,
        desc: &Descriptor,
        part: &mut PartialBlob,
        (on_bytes, on_written): (OnBytes<'_>, OnWritten<'_>),
    ) -> Result<Option<OciDistributionError>, RegistryError> {
        let res = self
            .client
            .pull_blob_stream_partial(r, desc.digest.as_str(), part.have, None)
            .await;
        // The server ignored the range: the bytes the file has are passed over, not written
        // again (a reader may have read them; the digest covers the file's bytes either way).
        let (stream, mut skip) = match res {
            Ok(oci_client::client::BlobResponse::Partial(s)) => (s, 0),
            Ok(oci_client::client::BlobResponse::Full(s)) => (s, part.have),
            Err(e) => return Ok(Some(e)),
        };
        let mut stream = stream.stream;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(mut b) => {
                    let passed = b.len().min(usize::try_from(skip).unwrap_or(usize::MAX));
                    skip -= passed as u64;
                    b = b.slice(passed..);
                    part.append(&b)?;
                    on_bytes(b.len() as u64);
                    on_written(&part.file, part.have);
                }
                Err(e) => return Ok(Some(OciDistributionError::IoError(e))),
            }
        }
        if desc.size == 0 || part.have >= desc.size {
            return Ok(None);
        }
        Ok(Some(OciDistributionError::IoError(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "connection closed after {} of {} bytes",
                part.have, desc.size
            ),
        ))))
    }
}

/// A blob being downloaded into the cache's `.partial` file, hashed as it grows.
struct PartialBlob {
    file: File,
    path: PathBuf,
    hasher: Sha256,
    /// Bytes in the file.
    have: u64,
    /// Bytes received by this process (not those a resumed download already had).
    received: u64,
}

impl PartialBlob {
    /// The `.partial` file at `path`, with what an interrupted download left in it (dropped
    /// when longer than the blob's `size`).
    fn open(path: PathBuf, cache: &Cache, size: u64) -> Result<PartialBlob, RegistryError> {
        // A file of this cache's own (never through a link), appended to where it ends.
        let mut file = crate::store::private_dir::open_or_create(&path, cache.file_mode())
            .map_err(|e| io_err(&path, e))?;
        let (hasher, have) = hash_file(&mut file).map_err(|e| io_err(&path, e))?;
        let mut part = PartialBlob {
            file,
            path,
            hasher,
            have,
            received: 0,
        };
        if size > 0 && part.have > size {
            part.restart()?;
        }
        Ok(part)
    }

    /// Empty the file and start the hash over.
    fn restart(&mut self) -> Result<(), RegistryError> {
        self.file
            .set_len(0)
            .and_then(|_| self.file.rewind())
            .map_err(|e| io_err(&self.path, e))?;
        self.hasher = Sha256::new();
        self.have = 0;
        Ok(())
    }

    fn append(&mut self, b: &[u8]) -> Result<(), RegistryError> {
        self.file.write_all(b).map_err(|e| io_err(&self.path, e))?;
        self.hasher.update(b);
        self.have += b.len() as u64;
        self.received += b.len() as u64;
        Ok(())
    }

    /// The whole blob, checked against `desc`, moved to `final_path`; a mismatch removes it.
    fn commit(
        self,
        desc: &Descriptor,
        final_path: &Path,
        registry: &str,
    ) -> Result<(), RegistryError> {
        self.file.sync_all().map_err(|e| io_err(&self.path, e))?;
        let actual = format!("sha256:{}", hex::encode(self.hasher.finalize()));
        if actual != desc.digest || (desc.size > 0 && self.have != desc.size) {
            let _ = fs::remove_file(&self.path);
            return Err(RegistryError::Digest {
                registry: registry.to_string(),
                digest: desc.digest.clone(),
                actual,
            });
        }
        fs::rename(&self.path, final_path).map_err(|e| io_err(final_path, e))
    }
}
/// sha256 state and length of what an interrupted download already wrote; `f` is left at its end.
fn hash_file(f: &mut File) -> io::Result<(Sha256, u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf)?;
        if k == 0 {
            return Ok((h, n));
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
}

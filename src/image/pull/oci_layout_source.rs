//! `oci:DIR[:TAG]`: an OCI image layout on disk; every blob is checked against its digest.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use super::error::PullError;
use super::image_config::image_meta;
use super::options::{wanted_platform, PullOptions};
use crate::image::flatten::{Layer, Span};
use crate::image::meta::ImageMeta;
use crate::image::registry::{
    choose_platform, platforms, Descriptor, Manifest, ManifestError, RegistryError,
};

pub(super) fn oci_layout(
    dir: &Path,
    tag: Option<&str>,
    source: &str,
    opts: &PullOptions,
) -> Result<(Vec<Layer>, ImageMeta), PullError> {
    let layout = Layout { dir, source };
    let (desc, m) = layout.manifest(tag, opts)?;
    let config = m
        .config
        .as_ref()
        .ok_or_else(|| layout.fail("the manifest has no config".into()))?;
    let config_bytes = layout.read_blob(&config.digest)?;
    let layers = m
        .layers
        .iter()
        .rev()
        .map(|l| layout.layer(l))
        .collect::<Result<_, _>>()?;
    let meta = image_meta(&config_bytes, source, &desc.digest).map_err(|e| PullError::Config {
        image: source.to_string(),
        source: e,
    })?;
    Ok((layers, meta))
}

/// An OCI layout directory, `source` as the user named it.
struct Layout<'a> {
    dir: &'a Path,
    source: &'a str,
}

impl Layout<'_> {
    fn fail(&self, detail: String) -> PullError {
        PullError::Source {
            source_ref: self.source.to_string(),
            detail,
        }
    }

    fn bad_manifest(&self, source: ManifestError) -> PullError {
        PullError::LayoutManifest {
            source_ref: self.source.to_string(),
            source,
        }
    }

    /// The hex of a `sha256:` digest; layouts with other algorithms are refused, not trusted.
    fn sha256(&self, digest: &str) -> Result<[u8; 32], PullError> {
        sha256_digest(digest).ok_or_else(|| PullError::NotSha256 {
            source_ref: self.source.to_string(),
            digest: digest.to_string(),
        })
    }

    fn blob(&self, digest: &str) -> Result<PathBuf, PullError> {
        let (alg, hex) = digest
            .split_once(':')
            .filter(|(a, h)| !a.contains('/') && !h.contains('/') && !h.contains(".."))
            .ok_or_else(|| self.fail(format!("'{digest}' is not a digest")))?;
        Ok(self.dir.join("blobs").join(alg).join(hex))
    }

    fn read(&self, p: &Path) -> Result<Vec<u8>, PullError> {
        fs::read(p).map_err(|e| self.fail(format!("{}: {e}", p.display())))
    }

    /// Blobs are content-addressed: what a layout holds must hash to its name.
    fn read_blob(&self, digest: &str) -> Result<Vec<u8>, PullError> {
        self.sha256(digest)?;
        let bytes = self.read(&self.blob(digest)?)?;
        let actual = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        if actual != digest {
            return Err(PullError::BadImage {
                image: self.source.to_string(),
                detail: format!(
                    "blob {digest} does not match its digest (content is {actual}): the layout is corrupt; copy the image again"
                ),
            });
        }
        Ok(bytes)
    }

    /// The image's manifest (descriptor and content): the one of `tag` in index.json, or its
    /// only one, and from a multi-platform index the platform `opts` wants.
    fn manifest(
        &self,
        tag: Option<&str>,
        opts: &PullOptions,
    ) -> Result<(Descriptor, Manifest), PullError> {
        let index = Manifest::parse(&self.read(&self.dir.join("index.json"))?)
            .map_err(|e| self.bad_manifest(e))?;
        let entries = index.manifests.unwrap_or_default();
        let tags = || -> String {
            let tags: Vec<String> = entries
                .iter()
                .filter_map(|d| d.annotations_ref_name())
                .collect();
            tags.join(", ")
        };
        let mut desc = match tag {
            Some(t) => entries
                .iter()
                .find(|d| d.annotations_ref_name().as_deref() == Some(t))
                .cloned()
                .ok_or_else(|| {
                    self.fail(format!("no tag '{t}' in the layout; tags: {}", tags()))
                })?,
            None if entries.len() == 1 => entries[0].clone(),
            None => {
                return Err(self.fail(format!(
                    "the layout holds {} images; name one as oci:DIR:TAG (tags: {})",
                    entries.len(),
                    tags()
                )));
            }
        };
        let mut m =
            Manifest::parse(&self.read_blob(&desc.digest)?).map_err(|e| self.bad_manifest(e))?;
        if m.is_index() {
            let want = wanted_platform(opts)?;
            let sub = m.manifests.clone().unwrap_or_default();
            desc = choose_platform(&sub, &want)
                .ok_or_else(|| {
                    PullError::Registry(RegistryError::NoPlatform {
                        image: self.source.to_string(),
                        wanted: want.to_string(),
                        available: platforms(&sub),
                    })
                })?
                .clone();
            m = Manifest::parse(&self.read_blob(&desc.digest)?)
                .map_err(|e| self.bad_manifest(e))?;
        }
        Ok((desc, m))
    }

    /// A layer blob, read through [`Verified`] when the flattener opens it.
    fn layer(&self, l: &Descriptor) -> Result<Layer, PullError> {
        let p = self.blob(&l.digest)?;
        if !p.exists() {
            return Err(self.fail(format!("layer blob {} is missing", p.display())));
        }
        let want = self.sha256(&l.digest)?;
        let (name, size) = (l.digest.clone(), l.size);
        let verified = move || -> io::Result<Box<dyn Read + Send>> {
            let f = File::open(&p)?;
            Ok(Box::new(Verified::new(f, &name, want, size)))
        };
        let open = Arc::new(verified);
        let (checked, path) = (open.clone(), self.blob(&l.digest)?);
        Ok(Layer {
            name: l.digest.clone(),
            size,
            open: Box::new(move || open()),
            // Read by position for the inflating, and once more in order through the digest.
            span: Some(Box::new(move || {
                Ok(Span {
                    file: File::open(&path)?,
                    start: 0,
                    len: size,
                    check: Some(checked()?),
                    arrival: None,
                })
            })),
        })
    }
}

/// The hex of a `sha256:` digest.
fn sha256_digest(digest: &str) -> Option<[u8; 32]> {
    digest
        .strip_prefix("sha256:")
        .and_then(|h| hex::decode(h).ok())
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(sha256_digest("sha512:00").is_none());
        assert!(sha256_digest(&format!("sha256:{}", "ab".repeat(32))).is_some());
    }
}

//! The blocks a server decompressed for its first containers, noted and written to the kept
//! file for the next server (kept.rs), and that file served from.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::archive::Archive;
use super::blocks::Block;
use super::caches::MetaBlock;
use super::kept::{self, Kept, KeptBlock};
use crate::lock;

impl Archive {
    /// Where the servers of this image keep its decompressed blocks in the user's private cache
    /// at `root` (kept.rs). Not on a network file system: the file is mapped, and a page of it
    /// that another node's rewrite or prune took away would be a SIGBUS in the server.
    pub fn blocks_file(&self, root: PathBuf) -> Option<PathBuf> {
        let (file_key, _) = self.identity().ok()?;
        let file = crate::store::kept_facts::kept_file(root, "image-blocks", &file_key, "blocks")?;
        file.parent().filter(|d| !crate::sys::on_network_fs(d))?;
        Some(file)
    }

    /// Serve the blocks, data and metadata, kept in `file` for `id` by an earlier server (kept.rs),
    /// when it holds any for this image.
    pub fn use_kept(&self, file: &Path, id: &str) {
        if let Some(k) = Kept::open(file, id, self.sb.block_size as usize) {
            let _ = self.kept.set(Arc::new(k));
        }
    }

    /// Note from now on which blocks, data and metadata, are decompressed, for `keep_blocks`.
    pub fn record_blocks(&self) {
        *lock(&self.recorded) = Some((Vec::new(), 0));
    }

    /// Note a decompressed block of `len` bytes while recording, up to `kept::RECORD_BYTES` in
    /// all: what a server's first containers need to start, not all of a job's reads.
    pub(super) fn record(&self, pos: u64, meta: bool, len: usize) {
        if let Some(r) = lock(&self.recorded).as_mut() {
            if r.1 + len <= kept::RECORD_BYTES && len > 0 {
                r.1 += len;
                r.0.push((pos, meta));
            }
        }
    }

    /// Write to `file` for `id` the blocks decompressed since `record_blocks` and still cached,
    /// with those kept already (`kept::merge`), and stop noting them. Ok(true) when the file
    /// has been written in this start, by this call or an earlier one.
    ///
    /// Noting stops only once a call has done its work: one that failed leaves the blocks for
    /// another call.
    pub fn keep_blocks(&self, file: &Path, id: &str) -> std::io::Result<bool> {
        if self.kept_written.load(Ordering::Acquire) {
            return Ok(true);
        }
        let Some((recorded, _)) = lock(&self.recorded).clone() else {
            return Ok(false);
        };
        let cached = |meta: bool| -> Vec<_> {
            (recorded.iter().filter(|r| r.1 == meta).map(|r| r.0)).collect()
        };
        let data: Vec<(u64, Arc<Block>)> = {
            let c = lock(&self.caches.data);
            (cached(false).into_iter())
                .filter_map(|p| Some((p, c.peek(&p)?.clone())))
                .collect()
        };
        let meta: Vec<(u64, Arc<MetaBlock>)> = {
            let c = lock(&self.caches.meta);
            (cached(true).into_iter())
                .filter_map(|p| Some((p, c.peek(&p)?.clone())))
                .collect()
        };
        // Metadata first: a start's lookups need it whatever the command reads.
        let new: Vec<KeptBlock> = (meta.iter())
            .map(|(pos, b)| KeptBlock {
                pos: *pos,
                meta_next: Some(b.next),
                data: &b.data[..],
            })
            .chain(data.iter().map(|(pos, b)| KeptBlock {
                pos: *pos,
                meta_next: None,
                data: b,
            }))
            .collect();
        let old = self.kept.get().into_iter().flat_map(|k| k.blocks());
        let Some(blocks) = kept::merge(&new, old, kept::MAX_BYTES) else {
            *lock(&self.recorded) = None;
            return Ok(false);
        };
        crate::store::whole_file::write_whole(file, |f| kept::write(f, id, &blocks))?;
        self.kept_written.store(true, Ordering::Release);
        *lock(&self.recorded) = None;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_image::image_of_f;
    use super::*;
    /// The blocks one start decompressed serve the next from the kept file, data and metadata
    /// alike: reading the same file again decompresses nothing (every decompression is noted),
    /// and there is nothing new to keep. Another image's or build's file is not used.
    #[test]
    fn kept_blocks_serve_the_next_start() {
        let (dir, first, data) = image_of_f();
        let (kept, img) = (dir.path().join("kept"), first.path().to_owned());
        let read = |ar: &Archive| {
            let ino = ar.lookup("/f", false).unwrap().unwrap();
            let mut buf = vec![0u8; data.len()];
            assert_eq!(ar.read_at(&ino, 0, &mut buf).unwrap(), data.len());
            buf
        };
        first.record_blocks();
        assert_eq!(read(&first), data);
        // A write that fails (or is cut short) leaves the blocks for the next call.
        let nowhere = dir.path().join("missing").join("kept");
        assert!(first.keep_blocks(&nowhere, "id:1").is_err());
        assert!(first.keep_blocks(&kept, "id:1").unwrap(), "nothing kept");
        assert!(
            first.keep_blocks(&kept, "id:1").unwrap(),
            "the write is forgotten"
        );

        let next = Archive::open(&img).unwrap();
        next.use_kept(&kept, "id:1");
        next.record_blocks();
        assert!(next.kept.get().is_some(), "the kept file was not taken");
        assert_eq!(read(&next), data);
        let decompressed = lock(&next.recorded).clone().unwrap();
        assert_eq!(decompressed, (vec![], 0), "kept blocks were decompressed");
        assert!(!next.keep_blocks(&kept, "id:1").unwrap());

        let other = Archive::open(&img).unwrap();
        other.use_kept(&kept, "id:2");
        other.record_blocks();
        assert_eq!(read(&other), data);
        assert!(other.kept.get().is_none());
        assert!(other.keep_blocks(&kept, "id:2").unwrap());
    }
}

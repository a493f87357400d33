//! File data: a read's pieces (holes, blocks, the tail in a fragment), each data block
//! decompressed once however many readers want it, or served from the kept blocks.

use std::sync::Arc;
use std::time::Instant;

use super::archive::Archive;
use super::blocks::Block;
use super::caches::{Loading, LOAD_WAIT};
use super::error::SqfsError;
use super::format::{self, BlockWord, Body, ByteSource};
use super::inode::Inode;
use crate::lock;

/// What a thread about to decompress a block is to do.
enum Claim<'a> {
    /// The block is cached already.
    Cached(Arc<Block>),
    /// It is this thread's to decompress; the guard wakes the waiters however that ends.
    Mine { _guard: Loading<'a> },
    /// Another thread decompresses it and the wait for it ran out: this one decompresses it
    /// too.
    Taken,
}

/// A data block and the range of it a read wants (`Archive::bytes_in_block`).
pub type BlockBytes = (Arc<Block>, std::ops::Range<usize>);

/// Where a file's bytes are: a hole (zeros), or a data block from this offset in it.
enum Piece {
    Hole,
    Data(Arc<Block>, usize),
}

impl Archive {
    /// The block at `pos` when an earlier start kept it.
    fn kept_block(&self, pos: u64) -> Option<Arc<Block>> {
        let k = self.kept.get()?;
        Some(Arc::new(Block::kept(k.clone(), k.find(pos)?)))
    }

    /// Decompressed data block (or fragment block) at image offset `pos`, cached.
    fn data_block(&self, pos: u64, word: BlockWord) -> Result<Arc<Block>, SqfsError> {
        if let Some(b) = self.kept_block(pos) {
            return Ok(b);
        }
        match self.claim(pos) {
            Claim::Cached(b) => Ok(b),
            // Mine: the claim is held until the block is in the cache. Taken: unclaimed.
            _claim => self.decompress_block(pos, word),
        }
    }

    /// Whether this thread is to decompress the block at `pos`: a read waits, up to
    /// `LOAD_WAIT`, for another read's load of it.
    fn claim(&self, pos: u64) -> Claim<'_> {
        if let Some(b) = lock(&self.caches.data).get(&pos) {
            return Claim::Cached(b.clone());
        }
        let mut loading = lock(&self.caches.loading);
        let deadline = Instant::now() + LOAD_WAIT;
        loop {
            if let Some(b) = lock(&self.caches.data).get(&pos) {
                return Claim::Cached(b.clone());
            }
            if loading.insert(pos) {
                return Claim::Mine {
                    _guard: Loading(&self.caches, pos),
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return Claim::Taken;
            }
            loading = match self.caches.loaded.wait_timeout(loading, deadline - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// Read and decompress the block at `pos` into the cache.
    fn decompress_block(&self, pos: u64, word: BlockWord) -> Result<Arc<Block>, SqfsError> {
        let bs = self.sb.block_size as usize;
        if word.on_disk as usize > bs {
            return Err(self.corrupt(format!("data block of {} bytes at {pos}", word.on_disk)));
        }
        let raw = self.pread(pos, word.on_disk as usize)?;
        let data = match &self.arena {
            _ if !word.compressed => Ok(Block::from_vec(raw)),
            Some(a) => a.block(bs, |out| self.comp.decompress_into(&raw, out)),
            None => self.comp.decompress(&raw, bs).map(Block::from_vec),
        }
        .map_err(|source| SqfsError::Decompress {
            path: self.path().to_owned(),
            block: "data",
            pos,
            source,
        })?;
        let b = Arc::new(data);
        self.record(pos, false, b.len());
        // An evicted block is freed after the lock is released: its slot goes back to the
        // region's free list (which takes that lock), a block outside it can be a munmap.
        let evicted = lock(&self.caches.data).push(pos, b.clone());
        drop(evicted);
        Ok(b)
    }

    fn fragment(&self, index: u32) -> Result<(u64, BlockWord), SqfsError> {
        let i = index as u64;
        let Some(&ptr) = self.frag_ptrs.get((i / 512) as usize) else {
            return Err(self.corrupt(format!("fragment {index} of {}", self.sb.frag_count)));
        };
        if index >= self.sb.frag_count {
            return Err(self.corrupt(format!("fragment {index} of {}", self.sb.frag_count)));
        }
        let mut c = self.cursor(ptr, (i % 512 * 16) as usize);
        let start = self.fmt(c.u64())?;
        let word = BlockWord::decode(self.fmt(c.u32())?);
        Ok((start, word))
    }

    /// Read file data at `offset` into `buf`; returns the byte count (0 at end of file).
    /// Reads up to the end of `buf` or the end of the file, whichever comes first.
    pub fn read_at(&self, ino: &Inode, offset: u64, buf: &mut [u8]) -> Result<usize, SqfsError> {
        let f = self.file_body(ino)?;
        if offset >= ino.size {
            return Ok(0);
        }
        let end = ino.size.min(offset + buf.len() as u64);
        let mut pos = offset;
        while pos < end {
            let (piece, n) = self.piece(ino, f, pos, end)?;
            let dst = &mut buf[(pos - offset) as usize..][..n];
            match piece {
                Piece::Hole => dst.fill(0),
                Piece::Data(b, from) => dst.copy_from_slice(&b[from..from + n]),
            }
            pos += n as u64;
        }
        Ok((end - offset) as usize)
    }

    /// The block holding all the file's bytes from `offset` up to `len` of them (fewer at its
    /// end), and where they start in it: a read within one block is answered from the block
    /// itself, not from a copy. None when they span blocks, are a hole, or lie past the end.
    pub fn bytes_in_block(
        &self,
        ino: &Inode,
        offset: u64,
        len: usize,
    ) -> Result<Option<BlockBytes>, SqfsError> {
        let f = self.file_body(ino)?;
        let end = ino.size.min(offset.saturating_add(len as u64));
        if offset >= end {
            return Ok(None);
        }
        Ok(match self.piece(ino, f, offset, end)? {
            (Piece::Data(b, from), n) if n as u64 == end - offset => Some((b, from..from + n)),
            _ => None,
        })
    }

    fn file_body<'a>(&self, ino: &'a Inode) -> Result<&'a format::FileLoc, SqfsError> {
        match &ino.body {
            Body::File(f) => Ok(f),
            _ => Err(SqfsError::NotAFile {
                path: self.path.clone(),
                inner: format!("inode {:#x}", ino.r),
            }),
        }
    }

    /// What holds the file's bytes from `pos` (before `end`, the end of the read) to the end of
    /// their block, and how many of them the read takes.
    fn piece(
        &self,
        ino: &Inode,
        f: &format::FileLoc,
        pos: u64,
        end: u64,
    ) -> Result<(Piece, usize), SqfsError> {
        let bs = self.sb.block_size as u64;
        let idx = pos / bs;
        let in_block = (pos % bs) as usize;
        let block_len = (ino.size - idx * bs).min(bs) as usize;
        let n = ((end - pos) as usize).min(block_len - in_block);
        if let Some(&w) = f.block_words.get(idx as usize) {
            let word = BlockWord::decode(w);
            if word.is_sparse() {
                return Ok((Piece::Hole, n));
            }
            let data = self.data_block(ino.block_pos[idx as usize], word)?;
            if data.len() != block_len {
                return Err(self.corrupt(format!(
                    "block {idx} of inode {:#x} is {} bytes, expected {block_len}",
                    ino.r,
                    data.len()
                )));
            }
            Ok((Piece::Data(data, in_block), n))
        } else if let (Some((frag, frag_off)), true) =
            (f.fragment, idx as usize == f.block_words.len())
        {
            let (start, word) = self.fragment(frag)?;
            let data = self.data_block(start, word)?;
            let from = frag_off as usize + in_block;
            if data.len() < from + n {
                return Err(
                    self.corrupt(format!("fragment {frag} too short for inode {:#x}", ino.r))
                );
            }
            Ok((Piece::Data(data, from), n))
        } else {
            Err(self.corrupt(format!("inode {:#x} has no block {idx}", ino.r)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::caches::Loading;
    use super::super::compress::DecompressError;
    use super::super::test_image::image_of_f;
    use super::*;
    use std::time::Duration;
    /// A read within one block gets the block itself; one across blocks, or past the end, not.
    #[test]
    fn bytes_in_one_block() {
        let (_dir, ar, data) = image_of_f();
        let f = ar.lookup("/f", false).unwrap().unwrap();
        let cases: [(u64, usize, Option<std::ops::Range<usize>>); 6] = [
            (0, 131_072, Some(0..131_072)),
            (100, 1000, Some(100..1100)),
            (131_072, 131_072, Some(0..131_072)),
            (131_000, 1000, None),
            (299_990, 100, Some(37_846..37_856)),
            (300_000, 10, None),
        ];
        for (offset, len, want) in cases {
            let got = ar.bytes_in_block(&f, offset, len).unwrap();
            assert_eq!(got.as_ref().map(|g| g.1.clone()), want, "{offset}+{len}");
            if let Some((b, r)) = got {
                let n = r.len();
                assert_eq!(&b[r], &data[offset as usize..offset as usize + n]);
            }
        }
    }

    /// A reader does not wait for ever on a block another reader claimed and does not finish (its
    /// thread lost the CPU): it decompresses the block itself after `LOAD_WAIT`.
    #[test]
    fn a_stalled_loader_does_not_block_readers() {
        let (_dir, ar, data) = image_of_f();
        let ino = ar.lookup("/f", false).unwrap().unwrap();
        // Claim the first block as a reader that never finishes would.
        lock(&ar.caches.loading).insert(ino.block_pos[0]);
        let t = Instant::now();
        let mut buf = vec![0u8; 1000];
        assert_eq!(ar.read_at(&ino, 0, &mut buf).unwrap(), 1000);
        assert_eq!(buf, data[..1000]);
        assert!(t.elapsed() >= LOAD_WAIT, "it waited for the loader first");
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "it did not wait for ever"
        );
        assert!(
            lock(&ar.caches.loading).contains(&ino.block_pos[0]),
            "the claim is the loader's"
        );
    }

    /// A reader waiting for a block another thread is decompressing is woken when that thread
    /// is done, well before `LOAD_WAIT`: the block comes from the loader, not a second
    /// decompression (a lost wake-up would show as waits of LOAD_WAIT every time).
    #[test]
    fn a_waiting_reader_is_woken_by_the_loader() {
        let (_dir, ar, _) = image_of_f();
        let ino = ar.lookup("/f", false).unwrap().unwrap();
        let pos = ino.block_pos[0];
        let mut fastest = Duration::MAX;
        for _ in 0..5 {
            lock(&ar.caches.data).clear();
            lock(&ar.caches.loading).insert(pos);
            let t = Instant::now();
            std::thread::scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(Duration::from_millis(1));
                    // What the loader decompressed: marked, to tell it from a second load.
                    let mut block = vec![0u8; 131_072];
                    block[0] = 0xAB;
                    lock(&ar.caches.data).put(pos, Arc::new(Block::from_vec(block)));
                    drop(Loading(&ar.caches, pos));
                });
                let mut b = [0u8; 1];
                ar.read_at(&ino, 0, &mut b).unwrap();
                assert_eq!(b[0], 0xAB, "the reader took the loader's block");
            });
            fastest = fastest.min(t.elapsed());
        }
        assert!(
            fastest < LOAD_WAIT,
            "never woken before LOAD_WAIT: {fastest:?}"
        );
    }

    /// A data block that does not decompress names its place and keeps the decompressor's
    /// error; the message is the corrupt image's.
    #[test]
    fn a_damaged_block_keeps_where_and_why() {
        use std::os::unix::fs::FileExt;
        let (_dir, ar, _) = image_of_f();
        let pos = ar.lookup("/f", false).unwrap().unwrap().block_pos[0];
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(ar.path())
            .unwrap();
        file.write_all_at(&[0xff; 64], pos).unwrap();
        let ar = Archive::open(ar.path()).unwrap();
        let ino = ar.lookup("/f", false).unwrap().unwrap();
        let e = ar.read_at(&ino, 0, &mut [0u8; 16]).unwrap_err();
        let SqfsError::Decompress {
            block: "data",
            pos: at,
            source: DecompressError::Zstd(why),
            ..
        } = &e
        else {
            panic!("not a data block's zstd error: {e:?}");
        };
        assert_eq!(*at, pos);
        assert_eq!(
            e.to_string(),
            format!(
                "image {} is corrupt or truncated (data block at {pos}: zstd: {why}); rebuild or download it again",
                ar.path().display()
            )
        );
        assert_eq!(e.errno(), libc::EIO);
    }
}

//! Metadata: blocks of the inode, directory, fragment, id and xattr tables read through a
//! cursor that crosses block boundaries; inodes parsed and cached; an inode's xattrs.

use std::sync::Arc;

use super::archive::Archive;
use super::blocks::Block;
use super::caches::MetaBlock;
use super::error::{SqfsError, StreamError};
use super::format::{self, BlockWord, Body, ByteSource, FormatError, RawInode};
use super::inode::{Inode, Xattr};
use crate::lock;

impl Archive {
    pub(super) fn meta_block(&self, pos: u64) -> Result<Arc<MetaBlock>, SqfsError> {
        if let Some(b) = lock(&self.caches.meta).get(&pos) {
            return Ok(b.clone());
        }
        if let Some(k) = self.kept.get() {
            if let Some((at, next)) = k.find_meta(pos) {
                let b = Arc::new(MetaBlock {
                    data: Block::kept(k.clone(), at),
                    next,
                });
                lock(&self.caches.meta).put(pos, b.clone());
                return Ok(b);
            }
        }
        // One read for header and block (a block is at most 2 + 8192 bytes on disk).
        let want = (2 + format::METADATA_SIZE as u64).min(self.sb.bytes_used.saturating_sub(pos));
        let mut raw = self.pread(pos, (want as usize).max(2))?;
        let (len, compressed) = format::meta_header(u16::from_le_bytes([raw[0], raw[1]]));
        if len + 2 > raw.len() {
            return Err(self.corrupt(format!(
                "metadata block at {pos} runs past the end of the image"
            )));
        }
        raw.truncate(len + 2);
        raw.drain(..2);
        let data = if compressed {
            self.comp
                .decompress(&raw, format::METADATA_SIZE)
                .map_err(|source| SqfsError::Decompress {
                    path: self.path().to_owned(),
                    block: "metadata",
                    pos,
                    source,
                })?
        } else {
            raw
        };
        let b = Arc::new(MetaBlock {
            data: Block::from_vec(data),
            next: pos + 2 + len as u64,
        });
        lock(&self.caches.meta).put(pos, b.clone());
        self.record(pos, true, b.data.len());
        Ok(b)
    }

    pub(super) fn cursor(&self, block: u64, offset: usize) -> MetaCursor<'_> {
        MetaCursor {
            ar: self,
            block,
            offset,
            cur: None,
        }
    }

    /// The inode with reference `r`.
    pub fn inode(&self, r: u64) -> Result<Arc<Inode>, SqfsError> {
        if let Some(i) = lock(&self.caches.inodes).get(r) {
            return Ok(i.clone());
        }
        let block = self.sb.inode_table + (r >> 16);
        if block >= self.sb.directory_table {
            return Err(self.corrupt(format!("inode reference {r:#x} outside the inode table")));
        }
        let mut c = self.cursor(block, (r & 0xffff) as usize);
        let raw = self.fmt(format::parse_inode(
            &mut c,
            self.sb.block_size,
            self.max_blocks,
        ))?;
        let ino = Arc::new(self.cook(r, raw)?);
        let weight = 160 + ino.block_pos.len() * 12 + ino.symlink_target().map_or(0, |t| t.len());
        lock(&self.caches.inodes).put(r, ino.clone(), weight);
        Ok(ino)
    }

    fn cook(&self, r: u64, raw: RawInode) -> Result<Inode, SqfsError> {
        let id = |i: u16| {
            self.ids
                .get(i as usize)
                .copied()
                .ok_or_else(|| self.corrupt(format!("uid/gid index {i}")))
        };
        let mut block_pos = Vec::new();
        let mut size = raw.size;
        match &raw.body {
            Body::File(f) => {
                block_pos.reserve(f.block_words.len());
                let mut p = f.blocks_start;
                for &w in &f.block_words {
                    block_pos.push(p);
                    p += BlockWord::decode(w).on_disk as u64;
                }
                if p > self.sb.bytes_used {
                    return Err(self.corrupt(format!(
                        "data of inode {r:#x} lies past the end of the image"
                    )));
                }
            }
            Body::Dir(d) => size = d.size as u64,
            _ => {}
        }
        Ok(Inode {
            r,
            kind: raw.kind,
            perm: raw.perm,
            uid: id(raw.uid_idx)?,
            gid: id(raw.gid_idx)?,
            mtime: raw.mtime,
            number: raw.number,
            nlink: raw.nlink,
            size,
            rdev: raw.rdev,
            xattr: raw.xattr,
            body: raw.body,
            block_pos,
        })
    }

    pub fn root(&self) -> Result<Arc<Inode>, SqfsError> {
        self.inode(self.sb.root_inode)
    }

    /// All xattrs of an inode as (full name, value), in stored order.
    pub fn xattrs(&self, ino: &Inode) -> Result<Vec<Xattr>, SqfsError> {
        let (Some(idx), Some((kv_start, ptrs))) = (ino.xattr, &self.xattr) else {
            return Ok(Vec::new());
        };
        let i = idx as u64;
        let Some(&ptr) = ptrs.get((i / 512) as usize) else {
            return Err(self.corrupt(format!("xattr id {idx} out of range")));
        };
        let mut c = self.cursor(ptr, (i % 512 * 16) as usize);
        let xref = self.fmt(c.u64())?;
        let count = self.fmt(c.u32())?;
        let mut kv = self.cursor(kv_start + (xref >> 16), (xref & 0xffff) as usize);
        let mut out = Vec::new();
        for _ in 0..count {
            let kind = self.fmt(kv.u16())?;
            let name_len = self.fmt(kv.u16())? as usize;
            let name = self.fmt(kv.take(name_len))?;
            let (full, out_of_line) = self.fmt(format::xattr_name(kind, &name))?;
            let vlen = self.fmt(kv.u32())? as usize;
            let value = if out_of_line {
                if vlen != 8 {
                    return Err(self.corrupt("out-of-line xattr reference is not 8 bytes"));
                }
                let vref = self.fmt(kv.u64())?;
                let mut v = self.cursor(kv_start + (vref >> 16), (vref & 0xffff) as usize);
                let len = self.fmt(v.u32())? as usize;
                self.fmt(v.take(len))?
            } else {
                self.fmt(kv.take(vlen))?
            };
            out.push((full, value));
            if out.len() > 65536 {
                return Err(self.corrupt("more than 65536 xattrs on one inode"));
            }
        }
        Ok(out)
    }
}

/// Reads consecutive bytes of a metadata table, crossing block boundaries.
pub(super) struct MetaCursor<'a> {
    ar: &'a Archive,
    block: u64,
    offset: usize,
    cur: Option<Arc<MetaBlock>>,
}

impl ByteSource for MetaCursor<'_> {
    type Error = StreamError;

    fn take(&mut self, n: usize) -> Result<Vec<u8>, StreamError> {
        let mut out = Vec::with_capacity(n.min(1 << 16));
        while out.len() < n {
            let b = match &self.cur {
                Some(b) => b.clone(),
                None => {
                    let b = self.ar.meta_block(self.block).map_err(StreamError::Image)?;
                    self.cur = Some(b.clone());
                    b
                }
            };
            if self.offset > b.data.len() {
                return Err(StreamError::Format(FormatError::PastBlock {
                    offset: self.offset,
                    len: b.data.len(),
                }));
            }
            let k = (n - out.len()).min(b.data.len() - self.offset);
            out.extend_from_slice(&b.data[self.offset..self.offset + k]);
            self.offset += k;
            if out.len() < n {
                self.block = b.next;
                self.offset = 0;
                self.cur = None;
            }
        }
        Ok(out)
    }
}

//! A lazy, thread-safe, read-only squashfs 4.0 reader (in the manner of squashfuse_ll).
//!
//! Opening reads only the superblock, the id table and the fragment/xattr lookup pointers. Inodes,
//! directory listings, fragments and xattrs are read on demand through bounded LRU caches of
//! decompressed metadata blocks, parsed inodes and directory listings; file data goes through
//! `pread` on the image and a bounded LRU of decompressed data blocks keyed by image offset.
//! Locks are held only around cache lookups and inserts, never across I/O or decompression.
//! Anything malformed becomes `SqfsError::Corrupt`: no panics, no unbounded allocations.

mod blocks;
mod compress;
mod format;
pub mod kept;
pub mod lzo;

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::lock;
use lru::LruCache;
use sha2::{Digest, Sha256};

use blocks::{Arena, Block};
pub use compress::Compressor;
use format::{BlockWord, Body, ByteSource, FormatResult, RawInode, Superblock, SuperblockError};
pub use format::{DirEntry, Kind};
pub use kept::kept_id;
use kept::{Kept, KeptBlock};

#[derive(Debug, thiserror::Error)]
pub enum SqfsError {
    #[error("cannot read image {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a squashfs image (no squashfs magic); give a .sqsh file made by `gpurun pull`, enroot or mksquashfs")]
    NotSquashfs { path: PathBuf },
    #[error("{path} is squashfs version {major}.{minor}; only 4.0 is supported, rebuild it with squashfs-tools 4.x")]
    Version {
        path: PathBuf,
        major: u16,
        minor: u16,
    },
    #[error("{path} is compressed with {name}, which gpurun cannot read; rebuild it with `mksquashfs -comp zstd` (gzip, lzo, xz and lz4 also work)")]
    Compressor { path: PathBuf, name: String },
    #[error("image {path} is corrupt or truncated ({what}); rebuild or download it again")]
    Corrupt { path: PathBuf, what: String },
    #[error("{inner} in image {path} is not a regular file")]
    NotAFile { path: PathBuf, inner: String },
    #[error("too many levels of symbolic links resolving {inner} in image {path}")]
    SymlinkLoop { path: PathBuf, inner: String },
}

/// Open the image file at `path` to read: a regular file only, so that a FIFO or device put
/// in an image's place is refused at once instead of blocking the open or the first read.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(f)
}

impl SqfsError {
    /// The errno a FUSE reader should get.
    pub fn errno(&self) -> i32 {
        match self {
            SqfsError::NotAFile { .. } => libc::EISDIR,
            SqfsError::SymlinkLoop { .. } => libc::ELOOP,
            _ => libc::EIO,
        }
    }
}

/// One extended attribute: (full name such as `user.x`, value).
pub type Xattr = (Vec<u8>, Vec<u8>);

/// A parsed inode. `r` is its inode reference (metadata block << 16 | offset), which is also
/// its identity: hard links share one inode and so one reference.
#[derive(Debug)]
pub struct Inode {
    pub r: u64,
    pub kind: Kind,
    /// Permission bits including setuid/setgid/sticky (no file type bits).
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    pub mtime: u32,
    /// The inode number stored in the image (1..=inode_count).
    pub number: u32,
    pub nlink: u32,
    /// File size, symlink target length, or directory listing size.
    pub size: u64,
    /// Device number in the kernel's new_encode_dev format (what FUSE and stat expect).
    pub rdev: u32,
    xattr: Option<u32>,
    body: Body,
    /// Absolute image offset of each data block (files only).
    block_pos: Vec<u64>,
}

impl Inode {
    pub fn mode(&self) -> u32 {
        self.kind.mode_bits() | self.perm as u32
    }
    pub fn symlink_target(&self) -> Option<&[u8]> {
        match &self.body {
            Body::Symlink(t) => Some(t),
            _ => None,
        }
    }
    pub fn has_xattrs(&self) -> bool {
        self.xattr.is_some()
    }
}

struct Caches {
    meta: Mutex<LruCache<u64, Arc<MetaBlock>>>,
    data: Mutex<LruCache<u64, Arc<Block>>>,
    /// Data blocks being decompressed (their image offsets).
    loading: Mutex<HashSet<u64>>,
    loaded: Condvar,
    inodes: Mutex<Weighted<Inode>>,
    dirs: Mutex<Weighted<Vec<DirEntry>>>,
}

/// An LRU bounded by the bytes its values hold rather than by their count: parsed inodes and
/// listings vary from a few bytes to megabytes (a huge file's block list, a huge directory).
struct Weighted<V> {
    lru: LruCache<u64, (Arc<V>, usize)>,
    total: usize,
    budget: usize,
}

impl<V> Weighted<V> {
    fn new(budget: usize) -> Weighted<V> {
        Weighted {
            lru: LruCache::unbounded(),
            total: 0,
            budget,
        }
    }

    fn get(&mut self, k: u64) -> Option<Arc<V>> {
        self.lru.get(&k).map(|(v, _)| v.clone())
    }

    fn put(&mut self, k: u64, v: Arc<V>, weight: usize) {
        if weight > self.budget / 4 {
            return; // one value must not flush everything else
        }
        if let Some((_, old)) = self.lru.put(k, (v, weight)) {
            self.total -= old;
        }
        self.total += weight;
        while self.total > self.budget {
            match self.lru.pop_lru() {
                Some((_, (_, w))) => self.total -= w,
                None => break,
            }
        }
    }
}

/// How long a reader waits for a block another reader is decompressing before it decompresses
/// the block itself: a load takes well under this (a 128 KiB zstd block ~0.2 ms, xz ~2 ms), unless
/// its thread lost its CPU on a busy machine.
#[cfg(not(test))]
const LOAD_WAIT: Duration = Duration::from_millis(5);
/// Tests tell a wait that ran out from one that was woken: on a busy test machine a wake-up alone
/// can take milliseconds.
#[cfg(test)]
const LOAD_WAIT: Duration = Duration::from_millis(50);

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

/// Blocks decompressed while recording (image offset, whether metadata), and their bytes.
type Recorded = (Vec<(u64, bool)>, usize);

/// A data block and the range of it a read wants (`Archive::bytes_in_block`).
pub type BlockBytes = (Arc<Block>, std::ops::Range<usize>);

/// Where a file's bytes are: a hole (zeros), or a data block from this offset in it.
enum Piece {
    Hole,
    Data(Arc<Block>, usize),
}

/// Takes a load off the loading set and wakes its waiters, however it ended (a waiter finding no
/// block in the cache then loads it itself, and meets the error on its own).
struct Loading<'a>(&'a Caches, u64);

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        lock(&self.0.loading).remove(&self.1);
        self.0.loaded.notify_all();
    }
}

struct MetaBlock {
    /// Decompressed, or served from a kept-blocks file (kept.rs) without a copy.
    data: Block,
    /// Image offset of the following metadata block.
    next: u64,
}

/// Sizes of the caches. Metadata is what makes lookups fast (the prototype's edge over the
/// kernel came from keeping it in RAM), so it gets a generous bound; data blocks are re-read
/// from the page cache cheaply.
const META_CACHE_BLOCKS: usize = 8192; // 64 MiB at most
const DATA_CACHE_BYTES: usize = 64 << 20;
const INODE_CACHE_BYTES: usize = 32 << 20;
const DIR_CACHE_BYTES: usize = 32 << 20;
const MAX_SYMLINKS: usize = 40;

pub struct Archive {
    file: std::fs::File,
    /// Where the squashfs starts in the file: 0, or the partition's offset inside a SIF file.
    /// Every offset in the squashfs is relative to it.
    base: u64,
    path: PathBuf,
    sb: Superblock,
    comp: Compressor,
    ids: Vec<u32>,
    frag_ptrs: Vec<u64>,
    /// (start of the key/value area, lookup block pointers) when the image has xattrs.
    xattr: Option<(u64, Vec<u64>)>,
    caches: Caches,
    /// Where decompressed data blocks live (`blocks`); None if it could not be mapped.
    arena: Option<Arc<Arena>>,
    /// Upper bound of block words an inode can hold: the inode table's size decompressed.
    max_blocks: u64,
    /// Blocks kept decompressed by an earlier server (kept.rs): served instead of decompressed.
    kept: OnceLock<Arc<Kept>>,
    /// Image offsets of the blocks decompressed since `record_blocks` (and whether each is a
    /// metadata block), and their bytes in all, while it records.
    recorded: Mutex<Option<Recorded>>,
    /// Whether `keep_blocks` has written the file.
    kept_written: AtomicBool,
}

/// The superblock of the squashfs `base` bytes into `file`.
fn read_superblock(file: &std::fs::File, path: &Path, base: u64) -> Result<Superblock, SqfsError> {
    let mut buf = [0u8; format::SUPERBLOCK_SIZE];
    match file.read_exact_at(&mut buf, base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return Err(SqfsError::NotSquashfs {
                path: path.to_owned(),
            })
        }
        Err(source) => {
            return Err(SqfsError::Io {
                path: path.to_owned(),
                source,
            })
        }
    }
    Superblock::parse(&buf).map_err(|e| match e {
        SuperblockError::BadMagic => SqfsError::NotSquashfs {
            path: path.to_owned(),
        },
        SuperblockError::Version(major, minor) => SqfsError::Version {
            path: path.to_owned(),
            major,
            minor,
        },
        SuperblockError::Invalid(what) => SqfsError::Corrupt {
            path: path.to_owned(),
            what,
        },
    })
}

fn cache<K: std::hash::Hash + Eq, V>(n: usize) -> Mutex<LruCache<K, V>> {
    Mutex::new(LruCache::new(NonZeroUsize::new(n.max(1)).unwrap()))
}

impl Archive {
    pub fn open(path: &Path) -> Result<Archive, SqfsError> {
        Archive::open_at(path, 0)
    }

    /// A squashfs that starts `base` bytes into the file (an Apptainer SIF's partition).
    pub fn open_at(path: &Path, base: u64) -> Result<Archive, SqfsError> {
        let io = |source| SqfsError::Io {
            path: path.to_owned(),
            source,
        };
        let file = open_regular(path).map_err(io)?;
        let sb = read_superblock(&file, path, base)?;
        let comp = Compressor::from_id(sb.compression).map_err(|name| SqfsError::Compressor {
            path: path.to_owned(),
            name,
        })?;
        let len = file.metadata().map_err(io)?.len();
        if len < sb.bytes_used {
            return Err(SqfsError::Corrupt {
                path: path.to_owned(),
                what: format!("file is {len} bytes, superblock says {}", sb.bytes_used),
            });
        }
        let max_blocks =
            (sb.directory_table - sb.inode_table) / 2 * format::METADATA_SIZE as u64 / 4 + 1;
        let data_blocks = DATA_CACHE_BYTES / sb.block_size as usize;
        let mut ar = Archive {
            file,
            base,
            path: path.to_owned(),
            comp,
            ids: Vec::new(),
            frag_ptrs: Vec::new(),
            xattr: None,
            caches: Caches {
                meta: cache(META_CACHE_BLOCKS),
                data: cache(data_blocks.max(16)),
                loading: Mutex::new(HashSet::new()),
                loaded: Condvar::new(),
                inodes: Mutex::new(Weighted::new(INODE_CACHE_BYTES)),
                dirs: Mutex::new(Weighted::new(DIR_CACHE_BYTES)),
            },
            // The cache's blocks, and some held by readers after their eviction.
            arena: Arena::new(sb.block_size as usize, data_blocks.max(16) + 64),
            max_blocks,
            kept: OnceLock::new(),
            recorded: Mutex::new(None),
            kept_written: AtomicBool::new(false),
            sb,
        };
        ar.load_tables()?;
        Ok(ar)
    }

    /// The id table, and where the fragment and xattr id tables are, read at open.
    fn load_tables(&mut self) -> Result<(), SqfsError> {
        let id_ptrs = self.read_u64s(self.sb.id_table, (self.sb.id_count as u64).div_ceil(2048))?;
        let mut ids = Vec::with_capacity(self.sb.id_count as usize);
        for i in 0..self.sb.id_count as u64 {
            let mut c = self.cursor(id_ptrs[(i / 2048) as usize], (i % 2048 * 4) as usize);
            ids.push(self.fmt(c.u32())?);
        }
        self.ids = ids;
        if self.sb.frag_count > 0 && self.sb.fragment_table != format::INVALID_U64 {
            self.frag_ptrs = self.read_u64s(
                self.sb.fragment_table,
                (self.sb.frag_count as u64).div_ceil(512),
            )?;
        }
        if self.sb.xattr_id_table != format::INVALID_U64 {
            let head = self.read_u64s(self.sb.xattr_id_table, 2)?;
            let count = head[1] & 0xffff_ffff;
            let ptrs = self.read_u64s(self.sb.xattr_id_table + 16, count.div_ceil(512))?;
            self.xattr = Some((head[0], ptrs));
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The same archive, called `path` in messages (opened through another name).
    pub fn named(mut self, path: &Path) -> Archive {
        self.path = path.to_owned();
        self
    }

    /// The image file's metadata, as of now.
    pub fn metadata(&self) -> std::io::Result<std::fs::Metadata> {
        self.file.metadata()
    }

    /// The descriptor every read of the image goes through.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.file)
    }

    /// The image file (its device and inode), and its identity while it is unchanged: that,
    /// its size, modification and change times (a write to the file moves the change time),
    /// and the squashfs's own offset, size and creation time (for file systems whose times
    /// are coarse). A few fields of one fstat, for every start: `content_key` reads the
    /// image's metadata (megabytes) and is for what is made from an image once.
    pub fn identity(&self) -> std::io::Result<(String, String)> {
        use std::os::unix::fs::MetadataExt;
        let m = self.file.metadata()?;
        let file = format!("{}:{}", m.dev(), m.ino());
        let id = format!(
            "{file}:{}:{}.{}:{}.{}:{}:{}:{}",
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
            self.base,
            self.sb.bytes_used,
            self.sb.mod_time
        );
        Ok((file, id))
    }
    /// Whether the image has an xattr table at all (most have none).
    pub fn any_xattrs(&self) -> bool {
        self.xattr.is_some()
    }

    pub fn block_size(&self) -> u32 {
        self.sb.block_size
    }
    pub fn inode_count(&self) -> u32 {
        self.sb.inode_count
    }
    pub fn bytes_used(&self) -> u64 {
        self.sb.bytes_used
    }
    pub fn compressor(&self) -> Compressor {
        self.comp
    }
    /// Inode reference of the root directory.
    pub fn root_ref(&self) -> u64 {
        self.sb.root_inode
    }

    fn corrupt(&self, what: impl Into<String>) -> SqfsError {
        SqfsError::Corrupt {
            path: self.path.clone(),
            what: what.into(),
        }
    }
    fn fmt<T>(&self, r: FormatResult<T>) -> Result<T, SqfsError> {
        r.map_err(|w| self.corrupt(w))
    }

    fn pread(&self, pos: u64, len: usize) -> Result<Vec<u8>, SqfsError> {
        if pos
            .checked_add(len as u64)
            .is_none_or(|end| end > self.sb.bytes_used)
        {
            return Err(self.corrupt(format!(
                "{len} bytes at offset {pos} lie past the end of the image"
            )));
        }
        let mut v = vec![0u8; len];
        self.file
            .read_exact_at(&mut v, self.base + pos)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    self.corrupt(format!("truncated at offset {pos}"))
                }
                _ => SqfsError::Io {
                    path: self.path.clone(),
                    source: e,
                },
            })?;
        Ok(v)
    }

    /// `n` little-endian u64 (uncompressed lookup table pointers) at `pos`.
    fn read_u64s(&self, pos: u64, n: u64) -> Result<Vec<u64>, SqfsError> {
        if n > self.sb.bytes_used / 8 {
            return Err(self.corrupt("lookup table larger than the image"));
        }
        let b = self.pread(pos, n as usize * 8)?;
        Ok(b.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect())
    }

    fn meta_block(&self, pos: u64) -> Result<Arc<MetaBlock>, SqfsError> {
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
                .map_err(|e| self.corrupt(format!("metadata block at {pos}: {e}")))?
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

    fn cursor(&self, block: u64, offset: usize) -> MetaCursor<'_> {
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

    /// The names in directory `path` (symlinks followed), lossily as text; None when it is
    /// not a readable directory.
    pub fn list_names(&self, path: &str) -> Option<Vec<String>> {
        let dir = self.lookup(path, true).ok()??;
        let entries = self.readdir(&dir).ok()?;
        Some(
            entries
                .iter()
                .map(|e| String::from_utf8_lossy(&e.name).into_owned())
                .collect(),
        )
    }

    /// The entries of a directory (without . and ..), sorted by name as squashfs stores them.
    pub fn readdir(&self, dir: &Inode) -> Result<Arc<Vec<DirEntry>>, SqfsError> {
        let Body::Dir(loc) = &dir.body else {
            return Err(self.corrupt(format!("inode {:#x} read as a directory", dir.r)));
        };
        if let Some(d) = lock(&self.caches.dirs).get(dir.r) {
            return Ok(d.clone());
        }
        let mut c = self.cursor(
            self.sb.directory_table + loc.block as u64,
            loc.offset as usize,
        );
        let entries = Arc::new(self.fmt(format::parse_dir(&mut c, loc.size))?);
        let weight = entries.iter().map(|e| e.name.len() + 56).sum::<usize>() + 64;
        lock(&self.caches.dirs).put(dir.r, entries.clone(), weight);
        Ok(entries)
    }

    /// Look a name up in a directory: in its cached listing, else through the directory index
    /// (parsing only the part of the listing that can hold the name), else in the whole
    /// listing, which is then cached.
    pub fn lookup_in(&self, dir: &Inode, name: &[u8]) -> Result<Option<DirEntry>, SqfsError> {
        // Listings are sorted by name: the kernel's own squashfs lookup relies on it too.
        let search = |entries: &[DirEntry]| {
            entries
                .binary_search_by(|e| e.name.as_slice().cmp(name))
                .ok()
                .map(|i| entries[i].clone())
        };
        if let Some(d) = lock(&self.caches.dirs).get(dir.r) {
            return Ok(search(&d));
        }
        let Body::Dir(loc) = &dir.body else {
            return Err(self.corrupt(format!("inode {:#x} read as a directory", dir.r)));
        };
        if loc.index.is_empty() {
            return Ok(search(&self.readdir(dir)?));
        }
        let (mut block, mut skip) = (loc.block, 0);
        for ix in loc.index.iter().take_while(|ix| ix.name.as_slice() <= name) {
            (block, skip) = (ix.block, ix.offset);
        }
        let offset = (loc.offset as usize + skip as usize) % format::METADATA_SIZE;
        let mut c = self.cursor(self.sb.directory_table + block as u64, offset);
        let mut found = None;
        let scan = format::scan_dir(&mut c, loc.size - skip, |e| {
            match e.name.as_slice().cmp(name) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Equal => {
                    found = Some(e);
                    false
                }
                std::cmp::Ordering::Greater => false,
            }
        });
        self.fmt(scan)?;
        Ok(found)
    }

    /// Resolve an absolute path inside the image, following symlinks inside the image
    /// (the last component only when `follow` is set). None when it does not exist.
    pub fn lookup(&self, path: &str, follow: bool) -> Result<Option<Arc<Inode>>, SqfsError> {
        let mut stack = vec![self.root()?];
        let mut todo: Vec<Vec<u8>> = components(path.as_bytes());
        todo.reverse();
        let mut links = 0;
        while let Some(name) = todo.pop() {
            let cur = stack.last().unwrap().clone();
            if name == b".." {
                if stack.len() > 1 {
                    stack.pop();
                }
                continue;
            }
            if cur.kind != Kind::Dir {
                return Ok(None);
            }
            let Some(e) = self.lookup_in(&cur, &name)? else {
                return Ok(None);
            };
            let ino = self.inode(e.inode)?;
            if ino.kind == Kind::Symlink && (follow || !todo.is_empty()) {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(SqfsError::SymlinkLoop {
                        path: self.path.clone(),
                        inner: path.to_owned(),
                    });
                }
                let target = ino.symlink_target().unwrap_or_default();
                if target.starts_with(b"/") {
                    stack.truncate(1);
                }
                let mut parts = components(target);
                parts.reverse();
                todo.extend(parts);
                continue;
            }
            stack.push(ino);
        }
        Ok(stack.pop())
    }

    pub fn exists(&self, path: &str) -> Result<bool, SqfsError> {
        Ok(self.lookup(path, false)?.is_some())
    }

    /// A whole regular file by absolute path (symlinks followed), None when absent.
    pub fn read_file(&self, path: &str) -> Result<Option<Vec<u8>>, SqfsError> {
        let Some(ino) = self.lookup(path, true)? else {
            return Ok(None);
        };
        if ino.kind != Kind::File {
            return Err(SqfsError::NotAFile {
                path: self.path.clone(),
                inner: path.to_owned(),
            });
        }
        let mut out = Vec::new();
        let mut buf = vec![0u8; self.sb.block_size as usize];
        loop {
            let n = self.read_at(&ino, out.len() as u64, &mut buf)?;
            if n == 0 {
                return Ok(Some(out));
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

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
    fn record(&self, pos: u64, meta: bool, len: usize) {
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
        .map_err(|e| self.corrupt(format!("data block at {pos}: {e}")))?;
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

    /// A key derived from the image's content, for caches of things made from it (the
    /// extracted rootfs). It is the SHA-256 of the superblock and of everything from the start
    /// of the inode table to the end of the image: the inode, directory, fragment, export, id
    /// and xattr tables. Those hold every name, mode, owner, mtime, xattr, and each data block's
    /// compressed size and position, so any real change to the image changes the key, yet a
    /// 10 GB image costs only its few MB of metadata to key. (Data bytes rewritten in place with
    /// identical compressed sizes and unchanged mtimes would not be noticed: not something any
    /// tool produces.)
    pub fn content_key(&self) -> Result<String, SqfsError> {
        let mut h = Sha256::new();
        h.update(self.pread(0, format::SUPERBLOCK_SIZE)?);
        let mut pos = self.sb.inode_table.min(self.sb.directory_table);
        while pos < self.sb.bytes_used {
            let n = (self.sb.bytes_used - pos).min(1 << 20);
            h.update(self.pread(pos, n as usize)?);
            pos += n;
        }
        Ok(hex::encode(h.finalize()))
    }
}

fn components(p: &[u8]) -> Vec<Vec<u8>> {
    p.split(|&c| c == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(|c| c.to_vec())
        .collect()
}

/// Reads consecutive bytes of a metadata table, crossing block boundaries.
struct MetaCursor<'a> {
    ar: &'a Archive,
    block: u64,
    offset: usize,
    cur: Option<Arc<MetaBlock>>,
}

impl ByteSource for MetaCursor<'_> {
    fn take(&mut self, n: usize) -> FormatResult<Vec<u8>> {
        let mut out = Vec::with_capacity(n.min(1 << 16));
        while out.len() < n {
            let b = match &self.cur {
                Some(b) => b.clone(),
                None => {
                    let b = self.ar.meta_block(self.block).map_err(|e| match e {
                        SqfsError::Corrupt { what, .. } => what,
                        e => e.to_string(),
                    })?;
                    self.cur = Some(b.clone());
                    b
                }
            };
            if self.offset > b.data.len() {
                return Err(format!(
                    "offset {} past a metadata block of {} bytes",
                    self.offset,
                    b.data.len()
                ));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_is_shared_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Archive>();
        send_sync::<Arc<Inode>>();
    }

    #[test]
    fn weighted_cache_keeps_to_its_budget() {
        let mut c = Weighted::new(100);
        for k in 0..10 {
            c.put(k, Arc::new(k), 20);
        }
        assert!(c.total <= 100);
        assert!(c.get(0).is_none(), "oldest evicted");
        assert_eq!(c.get(9).as_deref(), Some(&9));
        c.put(3, Arc::new(3), 20);
        c.put(3, Arc::new(33), 10);
        assert_eq!(c.get(3).as_deref(), Some(&33));
        assert_eq!(c.total, c.lru.iter().map(|(_, (_, w))| w).sum::<usize>());
        c.put(99, Arc::new(99), 60); // more than a quarter: not cached
        assert!(c.get(99).is_none());
    }

    /// A zstd image (mksquashfs) holding a 300 KB file /f, opened, and the file's bytes.
    fn image_of_f() -> (tempfile::TempDir, Archive, Vec<u8>) {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("f"), &data).unwrap();
        let img = dir.path().join("i.sqsh");
        let st = std::process::Command::new("mksquashfs")
            .args([src.as_os_str(), img.as_os_str()])
            .args(["-noappend", "-quiet", "-no-progress", "-comp", "zstd"])
            .status()
            .expect("mksquashfs (squashfs-tools)");
        assert!(st.success());
        let ar = Archive::open(&img).unwrap();
        (dir, ar, data)
    }

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

    #[test]
    fn path_components() {
        assert_eq!(
            components(b"/a//b/./c/"),
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
        assert!(components(b"/").is_empty());
        assert_eq!(components(b"../x"), vec![b"..".to_vec(), b"x".to_vec()]);
    }

    #[test]
    fn not_squashfs_names_path() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.sqsh");
        std::fs::write(&p, vec![7u8; 4096]).unwrap();
        let e = Archive::open(&p).err().unwrap();
        assert!(matches!(e, SqfsError::NotSquashfs { .. }));
        assert!(e.to_string().contains("x.sqsh"), "{e}");
        std::fs::write(&p, b"hsq").unwrap();
        assert!(matches!(
            Archive::open(&p),
            Err(SqfsError::NotSquashfs { .. })
        ));
        let e = Archive::open(&dir.path().join("missing")).err().unwrap();
        assert!(matches!(e, SqfsError::Io { .. }) && e.to_string().contains("missing"));
    }
}

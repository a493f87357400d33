//! The open image: its file, superblock, id table and the lookup tables read at open; reads of
//! its bytes; its identity and content key.

use std::collections::HashSet;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use sha2::{Digest, Sha256};

use super::blocks::Arena;
use super::caches::{
    cache, Caches, Weighted, DATA_CACHE_BYTES, DIR_CACHE_BYTES, INODE_CACHE_BYTES,
    META_CACHE_BLOCKS,
};
use super::compress::Compressor;
use super::error::{SqfsError, StreamError};
use super::format::{self, ByteSource, FormatError, Superblock};
use super::kept::Kept;

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

/// Blocks decompressed while recording (image offset, whether metadata), and their bytes.
pub(super) type Recorded = (Vec<(u64, bool)>, usize);

pub struct Archive {
    pub(super) file: std::fs::File,
    /// Where the squashfs starts in the file: 0, or the partition's offset inside a SIF file.
    /// Every offset in the squashfs is relative to it.
    pub(super) base: u64,
    pub(super) path: PathBuf,
    pub(super) sb: Superblock,
    pub(super) comp: Compressor,
    pub(super) ids: Vec<u32>,
    pub(super) frag_ptrs: Vec<u64>,
    /// (start of the key/value area, lookup block pointers) when the image has xattrs.
    pub(super) xattr: Option<(u64, Vec<u64>)>,
    pub(super) caches: Caches,
    /// Where decompressed data blocks live (`blocks`); None if it could not be mapped.
    pub(super) arena: Option<Arc<Arena>>,
    /// Upper bound of block words an inode can hold: the inode table's size decompressed.
    pub(super) max_blocks: u64,
    /// Blocks kept decompressed by an earlier server (kept.rs): served instead of decompressed.
    pub(super) kept: OnceLock<Arc<Kept>>,
    /// Image offsets of the blocks decompressed since `record_blocks` (and whether each is a
    /// metadata block), and their bytes in all, while it records.
    pub(super) recorded: Mutex<Option<Recorded>>,
    /// Whether `keep_blocks` has written the file.
    pub(super) kept_written: AtomicBool,
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
        FormatError::BadMagic => SqfsError::NotSquashfs {
            path: path.to_owned(),
        },
        FormatError::Version { major, minor } => SqfsError::Version {
            path: path.to_owned(),
            major,
            minor,
        },
        source => SqfsError::Format {
            path: path.to_owned(),
            source,
        },
    })
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
        let comp = Compressor::from_id(sb.compression).ok_or_else(|| SqfsError::Compressor {
            path: path.to_owned(),
            id: sb.compression,
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

    pub(super) fn corrupt(&self, what: impl Into<String>) -> SqfsError {
        SqfsError::Corrupt {
            path: self.path.clone(),
            what: what.into(),
        }
    }

    /// A fault in the bytes named as this image's; an error of the image itself as it is.
    pub(super) fn fmt<T>(&self, r: Result<T, impl Into<StreamError>>) -> Result<T, SqfsError> {
        r.map_err(|e| match e.into() {
            StreamError::Format(source) => SqfsError::Format {
                path: self.path.clone(),
                source,
            },
            StreamError::Image(e) => e,
        })
    }

    pub(super) fn pread(&self, pos: u64, len: usize) -> Result<Vec<u8>, SqfsError> {
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

#[cfg(test)]
mod tests {
    use super::super::inode::Inode;
    use super::*;
    #[test]
    fn archive_is_shared_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Archive>();
        send_sync::<Arc<Inode>>();
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

    /// A compressor gpurun does not read is named; the error keeps its id.
    #[test]
    fn an_unread_compressor_is_named() {
        let (_dir, ar, _) = super::super::test_image::image_of_f();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(ar.path())
            .unwrap();
        for (id, name) in [(2u16, "lzma"), (9, "unknown (id 9)")] {
            file.write_all_at(&id.to_le_bytes(), 20).unwrap();
            let e = Archive::open(ar.path()).err().unwrap();
            assert!(
                matches!(e, SqfsError::Compressor { id: i, .. } if i == id),
                "{e:?}"
            );
            assert_eq!(
                e.to_string(),
                format!("{} is compressed with {name}, which gpurun cannot read; rebuild it with `mksquashfs -comp zstd` (gzip, lzo, xz and lz4 also work)", ar.path().display())
            );
        }
    }
}

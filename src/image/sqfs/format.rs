//! squashfs 4.0 on-disk structures (little endian), parsed from byte sources with every length
//! checked. Facts from the kernel's fs/squashfs/squashfs_fs.h and squashfs-tools' documentation.

/// The size of the superblock at offset 0.
pub const SUPERBLOCK_SIZE: usize = 96;
pub const MAGIC: u32 = 0x7371_7368;
/// Decompressed size of a full metadata block.
pub const METADATA_SIZE: usize = 8192;
/// "No such table / no fragment / no xattrs" marker.
pub const INVALID_U64: u64 = u64::MAX;
pub const INVALID_U32: u32 = u32::MAX;
/// Data block size word: this bit set = stored uncompressed; low 24 bits = size on disk.
const BLOCK_UNCOMPRESSED: u32 = 1 << 24;
/// Names in a directory are at most 256 bytes, and one header covers at most 256 entries.
const MAX_NAME: usize = 256;
const MAX_DIR_COUNT: u32 = 256;
/// Longest symlink target we accept (Linux PATH_MAX is 4096; squashfs-tools allows up to 64 KiB).
const MAX_SYMLINK: usize = 65536;

/// Something wrong with the bytes; the caller names the image (`SqfsError::Format`).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("no squashfs magic")]
    BadMagic,
    #[error("squashfs version {major}.{minor}")]
    Version { major: u16, minor: u16 },
    #[error("block size {size} (log {log})")]
    BlockSize { size: u32, log: u16 },
    #[error("table offsets outside the image")]
    TableOffsets,
    #[error("{wanted} bytes wanted, {left} left")]
    Short { wanted: usize, left: usize },
    #[error("offset {offset} past a metadata block of {len} bytes")]
    PastBlock { offset: usize, len: usize },
    #[error("bad inode type {0}")]
    InodeType(u16),
    #[error("symlink target of {0} bytes")]
    SymlinkLength(usize),
    #[error("directory index entry ({name_len} bytes at {offset})")]
    DirIndex { name_len: usize, offset: u32 },
    #[error("file of {0} bytes cannot fit in the inode table")]
    FileSize(u64),
    #[error("directory size {0}")]
    DirSize(u32),
    #[error("directory listing ends inside a header")]
    HeaderCut,
    #[error("directory header with {0} entries")]
    DirCount(u64),
    #[error("directory listing ends inside an entry")]
    EntryCut,
    #[error("directory entry name of {0} bytes")]
    NameLength(usize),
    #[error("bad name {:?} in a directory", String::from_utf8_lossy(.0))]
    BadName(Vec<u8>),
    #[error("xattr type {0}")]
    XattrType(u16),
}

pub type FormatResult<T> = Result<T, FormatError>;

/// A source of consecutive bytes (a metadata stream, or a slice in tests). A slice fails only
/// as a `FormatError`; a metadata stream also as the image's reads and blocks do.
pub trait ByteSource {
    type Error: From<FormatError>;

    fn take(&mut self, n: usize) -> Result<Vec<u8>, Self::Error>;

    fn u16(&mut self) -> Result<u16, Self::Error> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32, Self::Error> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, Self::Error> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
}

impl ByteSource for &[u8] {
    type Error = FormatError;

    fn take(&mut self, n: usize) -> FormatResult<Vec<u8>> {
        if self.len() < n {
            return Err(FormatError::Short {
                wanted: n,
                left: self.len(),
            });
        }
        let (a, b) = self.split_at(n);
        *self = b;
        Ok(a.to_vec())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub inode_count: u32,
    pub mod_time: u32,
    pub block_size: u32,
    pub frag_count: u32,
    pub compression: u16,
    pub flags: u16,
    pub id_count: u16,
    pub root_inode: u64,
    pub bytes_used: u64,
    pub id_table: u64,
    pub xattr_id_table: u64,
    pub inode_table: u64,
    pub directory_table: u64,
    pub fragment_table: u64,
    pub export_table: u64,
}

impl Superblock {
    pub fn parse(b: &[u8; SUPERBLOCK_SIZE]) -> FormatResult<Superblock> {
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        if u32_at(0) != MAGIC {
            return Err(FormatError::BadMagic);
        }
        let (major, minor) = (u16_at(28), u16_at(30));
        if (major, minor) != (4, 0) {
            return Err(FormatError::Version { major, minor });
        }
        let sb = Superblock {
            inode_count: u32_at(4),
            mod_time: u32_at(8),
            block_size: u32_at(12),
            frag_count: u32_at(16),
            compression: u16_at(20),
            flags: u16_at(24),
            id_count: u16_at(26),
            root_inode: u64_at(32),
            bytes_used: u64_at(40),
            id_table: u64_at(48),
            xattr_id_table: u64_at(56),
            inode_table: u64_at(64),
            directory_table: u64_at(72),
            fragment_table: u64_at(80),
            export_table: u64_at(88),
        };
        let block_log = u16_at(22);
        let bs = sb.block_size;
        if !(4096..=1 << 20).contains(&bs)
            || !bs.is_power_of_two()
            || 1u32 << block_log.min(31) != bs
        {
            return Err(FormatError::BlockSize {
                size: bs,
                log: block_log,
            });
        }
        if sb.inode_table >= sb.bytes_used
            || sb.directory_table >= sb.bytes_used
            || sb.directory_table < sb.inode_table
            || sb.id_table >= sb.bytes_used
        {
            return Err(FormatError::TableOffsets);
        }
        Ok(sb)
    }
}

/// Decoded data block size word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockWord {
    pub on_disk: u32,
    pub compressed: bool,
}

impl BlockWord {
    pub fn decode(w: u32) -> BlockWord {
        BlockWord {
            on_disk: w & (BLOCK_UNCOMPRESSED - 1),
            compressed: w & BLOCK_UNCOMPRESSED == 0,
        }
    }
    /// Size 0 means a sparse block: all zeros, nothing stored.
    pub fn is_sparse(self) -> bool {
        self.on_disk == 0
    }
}

/// Metadata block header: (size on disk, compressed).
pub fn meta_header(h: u16) -> (usize, bool) {
    ((h & 0x7fff) as usize, h & 0x8000 == 0)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    BlockDev,
    CharDev,
    Fifo,
    Socket,
}

impl Kind {
    /// Basic type numbers 1..=7 (directory entries always use these).
    pub fn from_basic(t: u16) -> FormatResult<Kind> {
        Ok(match t {
            1 => Kind::Dir,
            2 => Kind::File,
            3 => Kind::Symlink,
            4 => Kind::BlockDev,
            5 => Kind::CharDev,
            6 => Kind::Fifo,
            7 => Kind::Socket,
            t => return Err(FormatError::InodeType(t)),
        })
    }
    /// The S_IF* bits.
    pub fn mode_bits(self) -> u32 {
        match self {
            Kind::Dir => libc::S_IFDIR,
            Kind::File => libc::S_IFREG,
            Kind::Symlink => libc::S_IFLNK,
            Kind::BlockDev => libc::S_IFBLK,
            Kind::CharDev => libc::S_IFCHR,
            Kind::Fifo => libc::S_IFIFO,
            Kind::Socket => libc::S_IFSOCK,
        }
    }
}

/// Where a directory's listing lives in the directory table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirLoc {
    /// Metadata block, relative to the directory table start.
    pub block: u32,
    pub offset: u16,
    /// Listing size in bytes (the stored size minus the 3 that squashfs adds for . and ..).
    pub size: u32,
    pub parent_number: u32,
    /// Directory index (extended directories of more than one metadata block): where the
    /// listing header holding each name onwards starts, so a lookup can skip ahead.
    pub index: Vec<DirIndex>,
}

/// One directory index entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirIndex {
    /// Byte offset of a listing header from the start of the listing.
    pub offset: u32,
    /// Metadata block holding it, relative to the directory table start.
    pub block: u32,
    /// First name under that header.
    pub name: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileLoc {
    pub blocks_start: u64,
    /// (fragment index, offset inside the fragment block).
    pub fragment: Option<(u32, u32)>,
    pub block_words: Vec<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    Dir(DirLoc),
    File(FileLoc),
    Symlink(Vec<u8>),
    /// Devices, fifos, sockets: nothing beyond the common fields.
    Special,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawInode {
    pub kind: Kind,
    pub perm: u16,
    pub uid_idx: u16,
    pub gid_idx: u16,
    pub mtime: u32,
    pub number: u32,
    pub nlink: u32,
    pub size: u64,
    pub rdev: u32,
    pub xattr: Option<u32>,
    pub body: Body,
}

fn opt(x: u32) -> Option<u32> {
    (x != INVALID_U32).then_some(x)
}

/// Parse one inode. `block_size` is needed to know how many block words a file has;
/// `max_blocks` bounds that count so a corrupt size cannot make us allocate without bound.
pub fn parse_inode<S: ByteSource>(
    src: &mut S,
    block_size: u32,
    max_blocks: u64,
) -> Result<RawInode, S::Error> {
    let t = src.u16()?;
    let perm = src.u16()?;
    let uid_idx = src.u16()?;
    let gid_idx = src.u16()?;
    let mtime = src.u32()?;
    let number = src.u32()?;
    let extended = t > 7;
    let kind = Kind::from_basic(if extended { t.wrapping_sub(7) } else { t })?;
    let mut ino = RawInode {
        kind,
        perm: perm & 0o7777,
        uid_idx,
        gid_idx,
        mtime,
        number,
        nlink: 1,
        size: 0,
        rdev: 0,
        xattr: None,
        body: Body::Special,
    };
    match (kind, extended) {
        (Kind::Dir, false) => {
            let block = src.u32()?;
            ino.nlink = src.u32()?;
            let size = src.u16()? as u32;
            let offset = src.u16()?;
            let parent_number = src.u32()?;
            ino.body = Body::Dir(dir_loc(block, offset, size, parent_number)?);
        }
        (Kind::Dir, true) => extended_dir(src, &mut ino)?,
        (Kind::File, ext) => file(src, &mut ino, ext, block_size, max_blocks)?,
        (Kind::Symlink, ext) => {
            ino.nlink = src.u32()?;
            let len = src.u32()? as usize;
            if len > MAX_SYMLINK {
                return Err(FormatError::SymlinkLength(len).into());
            }
            ino.body = Body::Symlink(src.take(len)?);
            ino.size = len as u64;
            if ext {
                ino.xattr = opt(src.u32()?);
            }
        }
        (Kind::BlockDev | Kind::CharDev, ext) => {
            ino.nlink = src.u32()?;
            ino.rdev = src.u32()?;
            if ext {
                ino.xattr = opt(src.u32()?);
            }
        }
        (Kind::Fifo | Kind::Socket, ext) => {
            ino.nlink = src.u32()?;
            if ext {
                ino.xattr = opt(src.u32()?);
            }
        }
    }
    Ok(ino)
}

/// The rest of an extended directory inode: its location, xattrs and directory index.
fn extended_dir<S: ByteSource>(src: &mut S, ino: &mut RawInode) -> Result<(), S::Error> {
    ino.nlink = src.u32()?;
    let size = src.u32()?;
    let block = src.u32()?;
    let parent_number = src.u32()?;
    let index_count = src.u16()?;
    let offset = src.u16()?;
    ino.xattr = opt(src.u32()?);
    let mut loc = dir_loc(block, offset, size, parent_number)?;
    for _ in 0..index_count {
        let offset = src.u32()?;
        let block = src.u32()?;
        let name_len = src.u32()? as usize + 1;
        if name_len > MAX_NAME || offset > loc.size {
            return Err(FormatError::DirIndex { name_len, offset }.into());
        }
        let name = src.take(name_len)?;
        loc.index.push(DirIndex {
            offset,
            block,
            name,
        });
    }
    ino.body = Body::Dir(loc);
    Ok(())
}

/// The rest of a file inode (basic or extended): size, fragment and block words.
fn file<S: ByteSource>(
    src: &mut S,
    ino: &mut RawInode,
    ext: bool,
    block_size: u32,
    max_blocks: u64,
) -> Result<(), S::Error> {
    let (blocks_start, frag, frag_off) = if ext {
        let start = src.u64()?;
        ino.size = src.u64()?;
        let _sparse = src.u64()?;
        ino.nlink = src.u32()?;
        let frag = src.u32()?;
        let off = src.u32()?;
        ino.xattr = opt(src.u32()?);
        (start, frag, off)
    } else {
        let start = src.u32()? as u64;
        let frag = src.u32()?;
        let off = src.u32()?;
        ino.size = src.u32()? as u64;
        (start, frag, off)
    };
    let fragment = opt(frag).map(|f| (f, frag_off));
    let bs = block_size as u64;
    let n = if fragment.is_some() {
        ino.size / bs
    } else {
        ino.size.div_ceil(bs)
    };
    if n > max_blocks {
        return Err(FormatError::FileSize(ino.size).into());
    }
    let words = src.take(n as usize * 4)?;
    let block_words = words
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    ino.body = Body::File(FileLoc {
        blocks_start,
        fragment,
        block_words,
    });
    Ok(())
}

fn dir_loc(block: u32, offset: u16, size: u32, parent_number: u32) -> FormatResult<DirLoc> {
    if size < 3 {
        return Err(FormatError::DirSize(size));
    }
    Ok(DirLoc {
        block,
        offset,
        size: size - 3,
        parent_number,
        index: Vec::new(),
    })
}

/// One directory entry: name, inode reference (block << 16 | offset), basic kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub inode: u64,
    pub kind: Kind,
}

/// Parse a whole directory listing of `size` bytes.
pub fn parse_dir<S: ByteSource>(src: &mut S, size: u32) -> Result<Vec<DirEntry>, S::Error> {
    let mut out = Vec::new();
    scan_dir(src, size, |e| {
        out.push(e);
        true
    })?;
    Ok(out)
}

/// Parse `size` bytes of a listing, handing each entry to `f` until it returns false.
pub fn scan_dir<S: ByteSource>(
    src: &mut S,
    size: u32,
    mut f: impl FnMut(DirEntry) -> bool,
) -> Result<(), S::Error> {
    let mut left = size as usize;
    while left > 0 {
        if left < 12 {
            return Err(FormatError::HeaderCut.into());
        }
        let count = src.u32()?;
        let start = src.u32()?;
        let _base_number = src.u32()?;
        left -= 12;
        if count >= MAX_DIR_COUNT {
            return Err(FormatError::DirCount(count as u64 + 1).into());
        }
        for _ in 0..=count {
            if left < 8 {
                return Err(FormatError::EntryCut.into());
            }
            let offset = src.u16()?;
            let _delta = src.u16()?;
            let kind = Kind::from_basic(src.u16()?)?;
            let name_len = src.u16()? as usize + 1;
            left -= 8;
            if name_len > MAX_NAME || name_len > left {
                return Err(FormatError::NameLength(name_len).into());
            }
            let name = src.take(name_len)?;
            left -= name_len;
            if name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
                return Err(FormatError::BadName(name).into());
            }
            let entry = DirEntry {
                name,
                inode: (start as u64) << 16 | offset as u64,
                kind,
            };
            if !f(entry) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// One xattr key as stored: full name with prefix, and whether the value is out of line.
pub fn xattr_name(kind: u16, name: &[u8]) -> FormatResult<(Vec<u8>, bool)> {
    let prefix: &[u8] = match kind & 0xff {
        0 => b"user.",
        1 => b"trusted.",
        2 => b"security.",
        t => return Err(FormatError::XattrType(t)),
    };
    let mut full = prefix.to_vec();
    full.extend_from_slice(name);
    Ok((full, kind & 0x100 != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb_bytes() -> [u8; SUPERBLOCK_SIZE] {
        let mut b = [0u8; SUPERBLOCK_SIZE];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[12..16].copy_from_slice(&131072u32.to_le_bytes());
        b[20..22].copy_from_slice(&6u16.to_le_bytes());
        b[22..24].copy_from_slice(&17u16.to_le_bytes());
        b[28..30].copy_from_slice(&4u16.to_le_bytes());
        b[40..48].copy_from_slice(&10000u64.to_le_bytes());
        b[48..56].copy_from_slice(&9000u64.to_le_bytes());
        b[64..72].copy_from_slice(&5000u64.to_le_bytes());
        b[72..80].copy_from_slice(&6000u64.to_le_bytes());
        b
    }

    #[test]
    fn superblock() {
        let sb = Superblock::parse(&sb_bytes()).unwrap();
        assert_eq!(
            (sb.block_size, sb.compression, sb.inode_table),
            (131072, 6, 5000)
        );
        let mut b = sb_bytes();
        b[0] = b'X';
        assert_eq!(Superblock::parse(&b), Err(FormatError::BadMagic));
        let mut b = sb_bytes();
        b[28] = 3;
        assert_eq!(
            Superblock::parse(&b),
            Err(FormatError::Version { major: 3, minor: 0 })
        );
        let mut b = sb_bytes();
        b[22] = 16; // log does not match size
        assert_eq!(
            Superblock::parse(&b),
            Err(FormatError::BlockSize {
                size: 131072,
                log: 16
            })
        );
        let mut b = sb_bytes();
        b[64..72].copy_from_slice(&20000u64.to_le_bytes());
        assert_eq!(Superblock::parse(&b), Err(FormatError::TableOffsets));
    }

    #[test]
    fn words() {
        assert_eq!(meta_header(0x8010), (16, false));
        assert_eq!(meta_header(0x0010), (16, true));
        assert_eq!(
            BlockWord::decode(0x0100_0200),
            BlockWord {
                on_disk: 0x200,
                compressed: false
            }
        );
        assert_eq!(
            BlockWord::decode(0x300),
            BlockWord {
                on_disk: 0x300,
                compressed: true
            }
        );
        assert!(BlockWord::decode(0).is_sparse());
    }

    fn header(t: u16) -> Vec<u8> {
        let mut v = Vec::new();
        for x in [t, 0o4755, 1, 2] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&1234u32.to_le_bytes());
        v.extend_from_slice(&7u32.to_le_bytes());
        v
    }

    fn le32(v: &mut Vec<u8>, xs: &[u32]) {
        for x in xs {
            v.extend_from_slice(&x.to_le_bytes());
        }
    }

    // Over 80 lines: one case per inode kind, in the format's order; split, they would scatter.
    #[test]
    fn inode_table() {
        // basic file: 2 full blocks + fragment tail
        let mut b = header(2);
        le32(&mut b, &[96, 3, 100, 4096 * 2 + 10, 500, 0x0100_1000]);
        let ino = parse_inode(&mut &b[..], 4096, 100).unwrap();
        assert_eq!(
            (ino.kind, ino.perm, ino.size, ino.number, ino.mtime),
            (Kind::File, 0o4755, 8202, 7, 1234)
        );
        assert_eq!(
            ino.body,
            Body::File(FileLoc {
                blocks_start: 96,
                fragment: Some((3, 100)),
                block_words: vec![500, 0x0100_1000]
            })
        );
        // same without fragment needs 3 words; with only 2 present it is truncated
        let mut b = header(2);
        le32(&mut b, &[96, INVALID_U32, 0, 4096 * 2 + 10, 500, 600]);
        assert!(parse_inode(&mut &b[..], 4096, 100).is_err());
        // absurd size is refused before allocating
        let mut b = header(2);
        le32(&mut b, &[96, INVALID_U32, 0, u32::MAX]);
        assert_eq!(
            parse_inode(&mut &b[..], 4096, 100),
            Err(FormatError::FileSize(u32::MAX as u64))
        );
        // extended symlink with xattr
        let mut b = header(10);
        le32(&mut b, &[2, 3]);
        b.extend_from_slice(b"a/b");
        le32(&mut b, &[5]);
        let ino = parse_inode(&mut &b[..], 4096, 100).unwrap();
        assert_eq!(
            (ino.nlink, ino.xattr, ino.body),
            (2, Some(5), Body::Symlink(b"a/b".to_vec()))
        );
        // char device
        let mut b = header(5);
        le32(&mut b, &[1, 0x103]);
        let ino = parse_inode(&mut &b[..], 4096, 100).unwrap();
        assert_eq!(
            (ino.kind, ino.rdev, ino.xattr),
            (Kind::CharDev, 0x103, None)
        );
        // basic dir
        let mut b = header(1);
        le32(&mut b, &[40, 3]);
        b.extend_from_slice(&30u16.to_le_bytes());
        b.extend_from_slice(&12u16.to_le_bytes());
        le32(&mut b, &[1]);
        let ino = parse_inode(&mut &b[..], 4096, 100).unwrap();
        assert_eq!(
            ino.body,
            Body::Dir(DirLoc {
                block: 40,
                offset: 12,
                size: 27,
                parent_number: 1,
                index: vec![]
            })
        );
        // extended dir with a two-entry index
        let mut b = header(8);
        le32(&mut b, &[2, 9000, 40, 1]);
        b.extend_from_slice(&2u16.to_le_bytes());
        b.extend_from_slice(&12u16.to_le_bytes());
        le32(&mut b, &[INVALID_U32]);
        for (off, blk, name) in [(0u32, 40u32, &b"aa"[..]), (8000, 41, b"mm")] {
            le32(&mut b, &[off, blk, name.len() as u32 - 1]);
            b.extend_from_slice(name);
        }
        let ino = parse_inode(&mut &b[..], 4096, 100).unwrap();
        let Body::Dir(loc) = ino.body else { panic!() };
        assert_eq!((loc.size, loc.index.len()), (8997, 2));
        assert_eq!(
            loc.index[1],
            DirIndex {
                offset: 8000,
                block: 41,
                name: b"mm".to_vec()
            }
        );
        // an index entry pointing past the listing is refused
        let at = b.len() - 14;
        b[at..at + 4].copy_from_slice(&9999u32.to_le_bytes());
        assert!(parse_inode(&mut &b[..], 4096, 100).is_err());
        // bad type
        assert!(parse_inode(&mut &header(15)[..], 4096, 100).is_err());
        assert!(parse_inode(&mut &header(0)[..], 4096, 100).is_err());
    }

    #[test]
    fn directory() {
        let mut b = Vec::new();
        le32(&mut b, &[1, 7, 100]);
        for (off, t, name) in [(16u16, 2u16, &b"a"[..]), (48, 1, b"bc")] {
            for x in [off, 0, t, name.len() as u16 - 1] {
                b.extend_from_slice(&x.to_le_bytes());
            }
            b.extend_from_slice(name);
        }
        let e = parse_dir(&mut &b[..], b.len() as u32).unwrap();
        assert_eq!(
            e[0],
            DirEntry {
                name: b"a".to_vec(),
                inode: 7 << 16 | 16,
                kind: Kind::File
            }
        );
        assert_eq!(
            e[1],
            DirEntry {
                name: b"bc".to_vec(),
                inode: 7 << 16 | 48,
                kind: Kind::Dir
            }
        );
        assert!(parse_dir(&mut &b[..], b.len() as u32 - 1).is_err());
        assert!(parse_dir(&mut &b[..5], b.len() as u32).is_err());
        let mut bad = b.clone();
        bad[12 + 8] = b'/';
        assert!(parse_dir(&mut &bad[..], b.len() as u32).is_err());
    }

    #[test]
    fn xattr_names() {
        assert_eq!(xattr_name(0, b"x").unwrap(), (b"user.x".to_vec(), false));
        assert_eq!(
            xattr_name(0x102, b"capability").unwrap(),
            (b"security.capability".to_vec(), true)
        );
        assert!(xattr_name(5, b"x").is_err());
    }
}

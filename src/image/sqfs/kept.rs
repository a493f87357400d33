//! Decompressed data blocks kept from one image server to the next.
//!
//! An image server's first containers decompress what they need to start: a Python's
//! interpreter, libraries and modules. While the server lives, the kernel's page cache keeps
//! what they read; a new server (after its idle time, a reboot, another Slurm job) would
//! decompress it all again: a cold Python start took 1.25x the time without this (benches/).
//!
//! So the blocks a server decompressed for its first containers, data and metadata (inodes and
//! directories), up to `RECORD_BYTES`, are written decompressed to one file per image in the
//! user's gpurun cache (`image-blocks/`, a private directory: `FactsDir`) once those containers
//! have ended (runtime/image_server/serve.rs), and a later server maps that file and serves those blocks
//! from it while the image file and the gpurun build are the same (the `id` in its header). A
//! later server that needs blocks not kept yet rewrites the file with them, up to `MAX_BYTES`.
//! The file is read only when it is the user's own, closed to others, and says it was kept by
//! this user (`kept_id`): another user's file at its name is never served.
//!
//! Layout (little-endian): `MAGIC`, `FORMAT` (u32), the entry count (u32), the id's length
//! (u32), 4 bytes reserved, the id padded to 8 bytes, then one entry per block (image offset,
//! file offset, length, and for a metadata block the image offset of the next one, else 0: four
//! u64), sorted by image offset, then the blocks' data.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;

const MAGIC: &[u8; 8] = b"GPURUNKB";
/// Bumped when the layout changes.
const FORMAT: u32 = 1;
const HEADER: usize = 24;
const ENTRY: usize = 32;
/// A file keeps at most this much block data: `RECORD_BYTES` twice over, for an image started
/// with more than one command.
pub const MAX_BYTES: usize = 32 << 20;
/// A server notes at most this much of what it decompresses: its first containers' start-up,
/// not a job's own reads.
pub const RECORD_BYTES: usize = 16 << 20;
/// Larger files are not mapped: `MAX_BYTES` and an index of the smallest blocks (4 KiB) fit.
const MAX_FILE: usize = MAX_BYTES * 2;

/// What a file kept for the image `image_id` (`Archive::identity`) must say it was kept for:
/// this user, this image file and this gpurun build.
pub fn kept_id(image_id: &str) -> String {
    let b = &crate::version::BUILD;
    let uid = nix::unistd::geteuid().as_raw();
    format!("{uid}:{image_id}:{}:{}", b.version, b.commit)
}

/// Where one kept block is in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    /// The block's offset in the image: the key a read looks it up by.
    pos: u64,
    off: usize,
    len: usize,
    /// For a metadata block, where the next one starts in the image; 0 for a data block.
    next: u64,
}

/// A block to keep, or kept: its offset in the image, its data decompressed, and for a metadata
/// block where the next one starts (`None` for a data block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptBlock<'a> {
    pub pos: u64,
    pub meta_next: Option<u64>,
    pub data: &'a [u8],
}

/// A kept-blocks file, mapped read-only.
pub struct Kept {
    map: NonNull<u8>,
    len: usize,
    entries: Vec<Entry>,
}

// SAFETY: the mapping is read-only and lives as long as `Kept`.
unsafe impl Send for Kept {}
// SAFETY: as Send above: a read-only mapping may be read from any thread.
unsafe impl Sync for Kept {}

impl Kept {
    /// The kept blocks in `file` when it was written for `id`, with blocks of at most
    /// `block_size` bytes; None when it is missing, damaged or for another image or build.
    pub fn open(file: &Path, id: &str, block_size: usize) -> Option<Kept> {
        let me = nix::unistd::geteuid().as_raw();
        let f = crate::store::private_dir::open_trusted(file, me).ok()?;
        let len = usize::try_from(f.metadata().ok()?.len()).ok()?;
        if !(HEADER..=MAX_FILE).contains(&len) {
            return None;
        }
        // SAFETY: a fresh private read-only mapping of a whole file we opened. The file is
        // replaced by rename, never rewritten in place, so the mapped pages stay as read.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                f.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return None;
        }
        let mut kept = Kept {
            map: NonNull::new(map as *mut u8)?,
            len,
            entries: Vec::new(),
        };
        kept.entries = parse(kept.bytes(), id, block_size)?;
        Some(kept)
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes mapped readable in `open`, alive until drop.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr(), self.len) }
    }

    fn entry(&self, pos: u64) -> Option<Entry> {
        let i = self.entries.binary_search_by_key(&pos, |e| e.pos).ok()?;
        Some(self.entries[i])
    }

    /// The kept data block at image offset `pos`, as (offset, length) in `bytes_at`.
    pub fn find(&self, pos: u64) -> Option<(usize, usize)> {
        let e = self.entry(pos).filter(|e| e.next == 0)?;
        Some((e.off, e.len))
    }

    /// The kept metadata block at image offset `pos`, as `find` locates a data block, and where
    /// the next one starts.
    pub fn find_meta(&self, pos: u64) -> Option<((usize, usize), u64)> {
        let e = self.entry(pos).filter(|e| e.next != 0)?;
        Some(((e.off, e.len), e.next))
    }

    /// The bytes `find` or `find_meta` located.
    pub fn bytes_at(&self, off: usize, len: usize) -> &[u8] {
        &self.bytes()[off..off + len]
    }

    /// Every kept block, by image offset.
    pub fn blocks(&self) -> impl Iterator<Item = KeptBlock<'_>> {
        self.entries.iter().map(|e| KeptBlock {
            pos: e.pos,
            meta_next: (e.next != 0).then_some(e.next),
            data: self.bytes_at(e.off, e.len),
        })
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`; blocks served from it hold an Arc of this.
        unsafe { libc::munmap(self.map.as_ptr() as *mut libc::c_void, self.len) };
    }
}

fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// Where the entries start for an id of `id_len` bytes.
fn entries_at(id_len: usize) -> usize {
    HEADER + id_len.next_multiple_of(8)
}

/// The entries of a kept file's `bytes` when it is whole and was written for `id`: sorted,
/// distinct, non-empty blocks of at most `block_size` bytes (a metadata block's size for those),
/// each inside the file, and metadata blocks followed by the next past their own start.
fn parse(bytes: &[u8], id: &str, block_size: usize) -> Option<Vec<Entry>> {
    if bytes.get(..8)? != MAGIC || u32_at(bytes, 8)? != FORMAT {
        return None;
    }
    let count = u32_at(bytes, 12)? as usize;
    let id_len = u32_at(bytes, 16)? as usize;
    if id_len != id.len() || bytes.get(HEADER..HEADER + id_len)? != id.as_bytes() {
        return None;
    }
    let start = entries_at(id_len);
    let data = start.checked_add(count.checked_mul(ENTRY)?)?;
    if data > bytes.len() {
        return None;
    }
    let mut out: Vec<Entry> = Vec::with_capacity(count);
    for i in 0..count {
        let o = start + i * ENTRY;
        let e = Entry {
            pos: u64_at(bytes, o)?,
            off: usize::try_from(u64_at(bytes, o + 8)?).ok()?,
            len: usize::try_from(u64_at(bytes, o + 16)?).ok()?,
            next: u64_at(bytes, o + 24)?,
        };
        let inside = e.off >= data && e.off.checked_add(e.len)? <= bytes.len();
        let sorted = out.last().is_none_or(|p| p.pos < e.pos);
        let max = match e.next {
            0 => block_size,
            n if n > e.pos => super::format::METADATA_SIZE,
            _ => 0,
        };
        if !inside || !sorted || e.len == 0 || e.len > max {
            return None;
        }
        out.push(e);
    }
    Some(out)
}

/// Write the kept file for `id` holding `blocks` (sorted by image offset, and distinct) to `out`.
pub fn write(out: &mut impl Write, id: &str, blocks: &[KeptBlock]) -> std::io::Result<()> {
    let start = entries_at(id.len());
    let mut head = Vec::with_capacity(start + blocks.len() * ENTRY);
    head.extend_from_slice(MAGIC);
    for n in [FORMAT, blocks.len() as u32, id.len() as u32, 0] {
        head.extend_from_slice(&n.to_le_bytes());
    }
    head.extend_from_slice(id.as_bytes());
    head.resize(start, 0);
    let mut off = start + blocks.len() * ENTRY;
    for b in blocks {
        for n in [
            b.pos,
            off as u64,
            b.data.len() as u64,
            b.meta_next.unwrap_or(0),
        ] {
            head.extend_from_slice(&n.to_le_bytes());
        }
        off += b.data.len();
    }
    out.write_all(&head)?;
    for b in blocks {
        out.write_all(b.data)?;
    }
    Ok(())
}

/// What a start keeps: the blocks kept before (`old`), then those it decompressed (`new`) while
/// they fit in `max` bytes, in image order. None when none of `new` is added: a full file stays
/// as it is rather than be rewritten on every start.
pub fn merge<'a>(
    new: &[KeptBlock<'a>],
    old: impl Iterator<Item = KeptBlock<'a>>,
    max: usize,
) -> Option<Vec<KeptBlock<'a>>> {
    let mut out: Vec<KeptBlock> = old.collect();
    let mut seen: std::collections::HashSet<u64> = out.iter().map(|b| b.pos).collect();
    let mut total: usize = out.iter().map(|b| b.data.len()).sum();
    let kept_before = out.len();
    for b in new {
        if total + b.data.len() <= max && seen.insert(b.pos) {
            total += b.data.len();
            out.push(*b);
        }
    }
    if out.len() == kept_before {
        return None;
    }
    out.sort_by_key(|b| b.pos);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pos: u64, data: &[u8]) -> KeptBlock<'_> {
        KeptBlock {
            pos,
            meta_next: None,
            data,
        }
    }

    fn meta(pos: u64, next: u64, data: &[u8]) -> KeptBlock<'_> {
        KeptBlock {
            pos,
            meta_next: Some(next),
            data,
        }
    }

    fn file(id: &str, blocks: &[KeptBlock]) -> Vec<u8> {
        let mut v = Vec::new();
        write(&mut v, id, blocks).unwrap();
        v
    }

    #[test]
    fn what_is_written_is_read_back() {
        let (a, b, m) = (vec![1u8; 100], vec![2u8; 7], vec![3u8; 9]);
        let blocks = [data(96, &a), meta(1000, 1011, &m), data(4096, &b)];
        let bytes = file("img:1", &blocks);
        let e = parse(&bytes, "img:1", 128).unwrap();
        let got: Vec<_> = e.iter().map(|e| (e.pos, e.len, e.next)).collect();
        assert_eq!(got, [(96, 100, 0), (1000, 9, 1011), (4096, 7, 0)]);
        for (e, want) in e.iter().zip([&a, &m, &b]) {
            assert_eq!(&bytes[e.off..][..e.len], &want[..]);
        }
        assert_eq!(parse(&file("", &[]), "", 128), Some(vec![]));
    }

    // Over 80 lines: one table of damaged files, each row one case.
    #[test]
    fn damaged_or_foreign_files_are_refused() {
        let good = file("img:1", &[data(96, &[1; 100]), meta(200, 300, &[2; 7])]);
        let patched = |at: usize, v: &[u8]| {
            let mut b = good.clone();
            b[at..at + v.len()].copy_from_slice(v);
            b
        };
        let (e0, e1) = (entries_at(5), entries_at(5) + ENTRY);
        let cases: Vec<(&str, Vec<u8>, &str, usize)> = vec![
            ("another image or build", good.clone(), "img:2", 128),
            ("a shorter id", good.clone(), "img:", 128),
            ("not ours", patched(0, b"GPURUNKX"), "img:1", 128),
            (
                "another format",
                patched(8, &2u32.to_le_bytes()),
                "img:1",
                128,
            ),
            (
                "truncated data",
                good[..good.len() - 1].to_vec(),
                "img:1",
                128,
            ),
            ("truncated index", good[..e0 + 30].to_vec(), "img:1", 128),
            (
                "more entries than fit",
                patched(12, &u32::MAX.to_le_bytes()),
                "img:1",
                128,
            ),
            ("a block larger than the image's", good.clone(), "img:1", 64),
            (
                "out of order",
                patched(e1, &50u64.to_le_bytes()),
                "img:1",
                128,
            ),
            (
                "a duplicate",
                patched(e1, &96u64.to_le_bytes()),
                "img:1",
                128,
            ),
            (
                "data over the index",
                patched(e0 + 8, &(e0 as u64).to_le_bytes()),
                "img:1",
                128,
            ),
            (
                "an empty block",
                patched(e0 + 16, &0u64.to_le_bytes()),
                "img:1",
                128,
            ),
            (
                "an offset past the end",
                patched(e0 + 8, &u64::MAX.to_le_bytes()),
                "img:1",
                128,
            ),
            (
                "metadata followed by itself",
                patched(e1 + 24, &200u64.to_le_bytes()),
                "img:1",
                128,
            ),
            (
                "metadata larger than 8 KiB",
                patched(e1 + 16, &9000u64.to_le_bytes()),
                "img:1",
                128,
            ),
            ("too short for a header", good[..10].to_vec(), "img:1", 128),
        ];
        assert!(parse(&good, "img:1", 128).is_some());
        for (what, bytes, id, bs) in cases {
            assert_eq!(parse(&bytes, id, bs), None, "{what}");
        }
    }

    #[test]
    fn a_start_adds_its_blocks_to_those_kept_while_they_fit() {
        let (a, b, c, d) = ([1u8; 4], [2u8; 4], [3u8; 4], [4u8; 4]);
        type Case<'a> = (
            &'a str,
            Vec<KeptBlock<'a>>,
            Vec<KeptBlock<'a>>,
            usize,
            Option<Vec<u64>>,
        );
        let cases: Vec<Case> = vec![
            (
                "nothing new: left as it is",
                vec![],
                vec![data(1, &a)],
                100,
                None,
            ),
            (
                "the first start",
                vec![data(9, &b), data(5, &c)],
                vec![],
                100,
                Some(vec![5, 9]),
            ),
            (
                "new and old, in image order",
                vec![data(9, &b)],
                vec![data(1, &a)],
                100,
                Some(vec![1, 9]),
            ),
            (
                "a block kept already adds nothing",
                vec![data(1, &c)],
                vec![data(1, &a)],
                100,
                None,
            ),
            (
                "metadata too",
                vec![meta(5, 7, &b)],
                vec![data(1, &a)],
                100,
                Some(vec![1, 5]),
            ),
            (
                "new ones that do not fit left out",
                vec![data(9, &b), data(5, &c)],
                vec![data(1, &a)],
                8,
                Some(vec![1, 9]),
            ),
            (
                "a full file stays",
                vec![data(9, &b)],
                vec![data(1, &a), data(2, &d)],
                8,
                None,
            ),
        ];
        for (what, new, old, max, want) in cases {
            let got = merge(&new, old.into_iter(), max);
            assert_eq!(
                got.as_ref().map(|v| v.iter().map(|b| b.pos).collect()),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn a_written_file_is_mapped_and_served() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        let d: Vec<u8> = (0..=255).cycle().take(5000).collect();
        let blocks = [data(7, &d), meta(100, 150, b"dir"), data(9000, b"tail")];
        std::fs::write(&p, file("img:1", &blocks)).unwrap();
        let k = Kept::open(&p, "img:1", 8192).unwrap();
        let (off, len) = k.find(7).unwrap();
        assert_eq!(k.bytes_at(off, len), &d[..]);
        let (at, next) = k.find_meta(100).unwrap();
        assert_eq!((k.bytes_at(at.0, at.1), next), (&b"dir"[..], 150));
        // A data block is not metadata, nor the other way round.
        assert_eq!((k.find_meta(7), k.find(100), k.find(8)), (None, None, None));
        assert_eq!(k.blocks().collect::<Vec<_>>(), blocks);
        assert!(Kept::open(&p, "img:2", 8192).is_none());
        assert!(Kept::open(&dir.path().join("missing"), "img:1", 8192).is_none());
        // never a file others may change, nor another user's, nor one through a link
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(
            Kept::open(&p, "img:1", 8192).is_none(),
            "others may write it"
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(Kept::open(&link, "img:1", 8192).is_none(), "a link");
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&p, Some(4242), None).unwrap();
            assert!(Kept::open(&p, "img:1", 8192).is_none(), "another user's");
        }
    }
}

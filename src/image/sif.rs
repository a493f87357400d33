//! Apptainer/Singularity SIF files: find the squashfs system partition inside, so the image runs
//! unchanged (the reader opens the squashfs at that offset).
//!
//! Layout (SIF 1, all integers little-endian, structs packed):
//!
//! ```text
//!   global header, 128 bytes: launch script [32], magic "SIF_MAGIC\0" [10], version [3], arch [3],
//!     uuid [16], ctime, mtime, descriptors free, descriptors total, descriptors offset,
//!     descriptors size, data offset, data size (i64 each)
//!   descriptors, 585 bytes each: data type i32, used u8, id u32, group id u32, link u32,
//!     file offset i64, file length i64, stored length i64, ctime i64, mtime i64, uid i64, gid i64,
//!     name [128], extra [384]; for a partition (data type 0x4004) extra starts with
//!     fs type i32 (1 = squashfs), partition type i32 (1 system, 2 primary system, 3 data, 4 overlay)
//! ```

use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::sqfs::{Archive, SqfsError};

pub const MAGIC: &[u8; 10] = b"SIF_MAGIC\0";
pub const HEADER_LEN: usize = 128;
pub const DESCRIPTOR_LEN: usize = 585;
const MAGIC_AT: usize = 32;
const DATA_PARTITION: i32 = 0x4004;
const FS_SQUASH: i32 = 1;
const PART_SYSTEM: i32 = 1;
const PART_PRIMARY_SYSTEM: i32 = 2;
/// Guards against a corrupt header asking for an absurd read.
const MAX_DESCRIPTORS: i64 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum SifError {
    #[error("cannot read {0}")]
    Io(#[from] io::Error),
    #[error("not a SIF file (no SIF_MAGIC)")]
    NotSif,
    #[error("corrupt SIF header: {0}")]
    Corrupt(String),
    #[error("the SIF file has no squashfs system partition (encrypted or ext3 images cannot be run); rebuild it with apptainer build")]
    NoSquashfs,
}

/// Where the root filesystem lies in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub offset: u64,
    pub len: u64,
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Does this header start a SIF file?
pub fn is_sif(header: &[u8]) -> bool {
    header.len() >= MAGIC_AT + MAGIC.len() && &header[MAGIC_AT..MAGIC_AT + MAGIC.len()] == MAGIC
}

/// The primary system partition (else the first system partition) that holds a squashfs, from
/// the global header and the descriptor table (`descriptors` read from the header's offset).
pub fn system_partition(
    header: &[u8],
    read_descriptors: impl FnOnce(u64, usize) -> io::Result<Vec<u8>>,
    file_len: u64,
) -> Result<Partition, SifError> {
    if header.len() < HEADER_LEN || !is_sif(header) {
        return Err(SifError::NotSif);
    }
    let total = i64_at(header, 88);
    let offset = i64_at(header, 96);
    if !(0..=MAX_DESCRIPTORS).contains(&total) || offset < HEADER_LEN as i64 {
        return Err(SifError::Corrupt(format!(
            "{total} descriptors at offset {offset}"
        )));
    }
    let table = read_descriptors(offset as u64, total as usize * DESCRIPTOR_LEN)?;
    let mut best: Option<(bool, Partition)> = None;
    for d in table.chunks_exact(DESCRIPTOR_LEN) {
        let (kind, used) = (i32_at(d, 0), d[4] != 0);
        if !used || kind != DATA_PARTITION {
            continue;
        }
        let (off, len) = (i64_at(d, 17), i64_at(d, 25));
        let extra = 17 + 7 * 8 + 128;
        let (fs, part) = (i32_at(d, extra), i32_at(d, extra + 4));
        if fs != FS_SQUASH || !(part == PART_SYSTEM || part == PART_PRIMARY_SYSTEM) {
            continue;
        }
        if off < 0 || len <= 0 || (off as u64).saturating_add(len as u64) > file_len {
            return Err(SifError::Corrupt(format!(
                "partition at {off}+{len} lies outside the {file_len}-byte file"
            )));
        }
        let p = Partition {
            offset: off as u64,
            len: len as u64,
        };
        let primary = part == PART_PRIMARY_SYSTEM;
        if best.is_none_or(|(was_primary, _)| primary && !was_primary) {
            best = Some((primary, p));
        }
    }
    best.map(|(_, p)| p).ok_or(SifError::NoSquashfs)
}

/// `Some(partition)` when `path` is a SIF file, `None` when it is something else.
pub fn probe(path: &Path) -> Result<Option<Partition>, SifError> {
    let f = super::sqfs::open_regular(path)?;
    let len = f.metadata()?.len();
    let mut header = [0u8; HEADER_LEN];
    if len < HEADER_LEN as u64 {
        return Ok(None);
    }
    f.read_exact_at(&mut header, 0)?;
    if !is_sif(&header) {
        return Ok(None);
    }
    let p = system_partition(
        &header,
        |off, n| {
            let mut b = vec![0; n];
            f.read_exact_at(&mut b, off)?;
            Ok(b)
        },
        len,
    )?;
    Ok(Some(p))
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("image {0}: {1}")]
    Sif(std::path::PathBuf, SifError),
    #[error(transparent)]
    Sqfs(#[from] SqfsError),
}

/// An image file's squashfs: the file itself, or the system partition inside a SIF.
pub fn open_archive(path: &Path) -> Result<Archive, OpenError> {
    match probe(path).map_err(|e| OpenError::Sif(path.to_path_buf(), e))? {
        Some(p) => Ok(Archive::open_at(path, p.offset)?),
        None => Ok(Archive::open(path)?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SIF file holding `squashfs` as its primary system partition, laid out as Apptainer lays
    /// them out.
    fn assemble(squashfs: &[u8]) -> Vec<u8> {
        let table_end = HEADER_LEN + 48 * DESCRIPTOR_LEN;
        let data_off = table_end.div_ceil(4096) * 4096;
        let mut h = vec![0u8; HEADER_LEN];
        h[..31].copy_from_slice(b"#!/usr/bin/env run-singularity\n");
        h[MAGIC_AT..MAGIC_AT + 10].copy_from_slice(MAGIC);
        h[42..45].copy_from_slice(b"01\0");
        h[45..47].copy_from_slice(b"2\0"); // arch: amd64 in SIF's table
        let put =
            |h: &mut Vec<u8>, at: usize, v: i64| h[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put(&mut h, 80, 47); // free descriptors
        put(&mut h, 88, 48); // total descriptors
        put(&mut h, 96, HEADER_LEN as i64);
        put(&mut h, 104, (48 * DESCRIPTOR_LEN) as i64);
        put(&mut h, 112, data_off as i64);
        put(&mut h, 120, squashfs.len() as i64);
        let mut d = vec![0u8; DESCRIPTOR_LEN];
        d[0..4].copy_from_slice(&DATA_PARTITION.to_le_bytes());
        d[4] = 1;
        d[5..9].copy_from_slice(&1u32.to_le_bytes());
        d[9..13].copy_from_slice(&0xf000_0001u32.to_le_bytes());
        d[17..25].copy_from_slice(&(data_off as i64).to_le_bytes());
        d[25..33].copy_from_slice(&(squashfs.len() as i64).to_le_bytes());
        d[33..41].copy_from_slice(&(squashfs.len() as i64).to_le_bytes());
        let name = b"rootfs.squashfs";
        d[73..73 + name.len()].copy_from_slice(name);
        let extra = 17 + 7 * 8 + 128;
        d[extra..extra + 4].copy_from_slice(&FS_SQUASH.to_le_bytes());
        d[extra + 4..extra + 8].copy_from_slice(&PART_PRIMARY_SYSTEM.to_le_bytes());
        d[extra + 8..extra + 11].copy_from_slice(b"2\0\0");
        let mut out = h;
        out.extend_from_slice(&d);
        out.resize(data_off, 0);
        out.extend_from_slice(squashfs);
        out
    }

    fn parse(file: &[u8]) -> Result<Partition, SifError> {
        system_partition(
            &file[..HEADER_LEN.min(file.len())],
            |off, n| Ok(file[off as usize..off as usize + n].to_vec()),
            file.len() as u64,
        )
    }

    #[test]
    fn finds_the_partition() {
        let f = assemble(b"hsqs and the rest");
        assert!(is_sif(&f));
        let p = parse(&f).unwrap();
        assert_eq!(
            &f[p.offset as usize..(p.offset + p.len) as usize],
            b"hsqs and the rest"
        );
        assert_eq!(p.offset % 4096, 0);
    }

    #[test]
    fn refuses_what_it_cannot_run() {
        let part_type_at = HEADER_LEN + 201 + 4;
        let fs_type_at = HEADER_LEN + 201;
        let len_at = HEADER_LEN + 25;
        // (what, byte to change, its new value, expected error)
        let cases: &[(&str, usize, u8, &str)] = &[
            ("magic", 32, b'X', "not a sif"),
            ("data partition", part_type_at, 3, "no squashfs"),
            ("ext3", fs_type_at, 2, "no squashfs"),
            ("unused", HEADER_LEN + 4, 0, "no squashfs"),
            ("past the end", len_at + 2, 0xff, "outside"),
            ("descriptor count", 88 + 7, 0x7f, "corrupt"),
        ];
        for (what, at, value, want) in cases {
            let mut f = assemble(b"hsqs");
            f[*at] = *value;
            let e = parse(&f).unwrap_err().to_string().to_lowercase();
            assert!(e.contains(want), "{what}: {e}");
        }
    }
}

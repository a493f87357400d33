//! A lazy, thread-safe, read-only squashfs 4.0 reader (in the manner of squashfuse_ll).
//!
//! Opening reads only the superblock, the id table and the fragment/xattr lookup pointers. Inodes,
//! directory listings, fragments and xattrs are read on demand through bounded LRU caches of
//! decompressed metadata blocks, parsed inodes and directory listings; file data goes through
//! `pread` on the image and a bounded LRU of decompressed data blocks keyed by image offset.
//! Locks are held only around cache lookups and inserts, never across I/O or decompression.
//! Anything malformed is an error (`SqfsError::Corrupt`, `::Format`, `::Decompress`): no panics,
//! no unbounded allocations.
//!
//! The files: archive.rs (the open image, its superblock and tables), metadata.rs (metadata
//! blocks, inodes, xattrs), lookup.rs (directories and paths), data.rs (file data, blocks
//! loaded once), caches.rs, keeping.rs (the blocks a server keeps for the next, kept.rs's
//! format), format.rs (the on-disk structures, pure), blocks.rs, compress.rs, lzo.rs.

mod archive;
mod blocks;
mod caches;
mod compress;
mod data;
mod error;
mod format;
mod inode;
mod keeping;
pub mod kept;
mod lookup;
pub mod lzo;
mod metadata;
#[cfg(test)]
mod test_image;

pub use archive::{open_regular, Archive};
pub use compress::Compressor;
pub use data::BlockBytes;
pub use error::SqfsError;
pub use format::{DirEntry, Kind};
pub use inode::{Inode, Xattr};
pub use kept::kept_id;

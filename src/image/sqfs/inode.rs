//! A parsed inode, as the reader hands it out.

use super::format::{Body, Kind};

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
    pub(super) xattr: Option<u32>,
    pub(super) body: Body,
    /// Absolute image offset of each data block (files only).
    pub(super) block_pos: Vec<u64>,
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

//! The tar crate's gaps: an exact copy of an entry's data, an entry's print (to compare two),
//! a clean header, xattrs read from PAX records (sink.rs writes them).

use std::io::{self, Read};

use tar::{EntryType, Header};

/// Exactly `left` bytes of `inner`, or UnexpectedEof: the tar builder pads a short copy silently,
/// which would hand tar2sqfs a header that lies about its data.
pub(super) struct Exact<R> {
    inner: R,
    left: u64,
    /// Tells a reading error (the layer's fault) from a writing one (the pipe's).
    pub(super) read_failed: bool,
    pub(super) crc: crc32fast::Hasher,
}

impl<R: Read> Exact<R> {
    pub(super) fn new(inner: R, left: u64) -> Exact<R> {
        Exact {
            inner,
            left,
            read_failed: false,
            crc: crc32fast::Hasher::new(),
        }
    }
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = match self.inner.read(&mut buf[..want]) {
            Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
            r => r,
        }
        .inspect_err(|_| self.read_failed = true)?;
        self.left -= n as u64;
        self.crc.update(&buf[..n]);
        Ok(n)
    }
}

/// What a non-directory entry holds (its type, mode, owner, size, link target and a CRC-32 of
/// its data), to tell an identical repeat of a path in one layer from a different one.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Print {
    kind: u8,
    mode: u32,
    owner: (u64, u64),
    size: u64,
    link: Vec<u8>,
    pub(super) crc: u32,
}

impl Print {
    /// Everything but the data's checksum (0 until set).
    pub(super) fn meta<R: Read>(entry: &tar::Entry<R>) -> Print {
        let h = entry.header();
        Print {
            kind: h.entry_type().as_byte(),
            mode: h.mode().unwrap_or(0),
            owner: (h.uid().unwrap_or(0), h.gid().unwrap_or(0)),
            size: entry.size(),
            link: entry
                .link_name_bytes()
                .map(|l| l.into_owned())
                .unwrap_or_default(),
            crc: 0,
        }
    }

    /// CRC-32 of an entry's data, read to its end.
    pub(super) fn checksum<R: Read>(entry: &mut tar::Entry<R>) -> io::Result<u32> {
        let mut h = crc32fast::Hasher::new();
        let mut buf = [0u8; 64 << 10];
        loop {
            match entry.read(&mut buf)? {
                0 => return Ok(h.finalize()),
                n => h.update(&buf[..n]),
            }
        }
    }
}

pub(super) fn header(t: EntryType, mode: u32, uid: u64, gid: u64, mtime: u64) -> Header {
    let mut h = Header::new_gnu();
    h.set_entry_type(t);
    h.set_mode(mode);
    h.set_uid(uid);
    h.set_gid(gid);
    h.set_mtime(mtime);
    h.set_size(0);
    h
}

/// The entry's `SCHILY.xattr.*` PAX records (how OCI layers carry xattrs).
pub(super) fn xattrs<R: Read>(entry: &mut tar::Entry<'_, R>) -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    if let Some(exts) = entry.pax_extensions()? {
        for ext in exts {
            let ext = ext?;
            if let Ok(k) = ext.key() {
                if k.starts_with("SCHILY.xattr.") {
                    out.push((k.to_string(), ext.value_bytes().to_vec()));
                }
            }
        }
    }
    Ok(out)
}

//! Bytes read by position: a layer blob as a range of a file, read by many workers at once.

use std::io::{self, Read};
use std::sync::Arc;

/// Bytes read by position, by many threads at once.
pub(super) trait ReadAt: Send + Sync {
    fn len(&self) -> io::Result<u64>;
    /// Up to `buf.len()` bytes from `at`; 0 at the end.
    fn read_at(&self, at: u64, buf: &mut [u8]) -> io::Result<usize>;
}

impl ReadAt for [u8] {
    fn len(&self) -> io::Result<u64> {
        Ok(<[u8]>::len(self) as u64)
    }

    fn read_at(&self, at: u64, buf: &mut [u8]) -> io::Result<usize> {
        let from = usize::try_from(at)
            .unwrap_or(usize::MAX)
            .min(<[u8]>::len(self));
        let n = buf.len().min(<[u8]>::len(self) - from);
        buf[..n].copy_from_slice(&self[from..from + n]);
        Ok(n)
    }
}

#[cfg(test)]
impl ReadAt for Vec<u8> {
    fn len(&self) -> io::Result<u64> {
        ReadAt::len(self.as_slice())
    }

    fn read_at(&self, at: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.as_slice().read_at(at, buf)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for Arc<T> {
    fn len(&self) -> io::Result<u64> {
        (**self).len()
    }

    fn read_at(&self, at: u64, buf: &mut [u8]) -> io::Result<usize> {
        (**self).read_at(at, buf)
    }
}

/// `buf` filled from `at`; `UnexpectedEof` where `src` ends first.
pub(super) fn read_exact_at<S: ReadAt + ?Sized>(
    src: &S,
    mut at: u64,
    mut buf: &mut [u8],
) -> io::Result<()> {
    while !buf.is_empty() {
        match src.read_at(at, buf)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                at += n as u64;
            }
        }
    }
    Ok(())
}

/// `buf` filled from `at` as far as `src` goes: how far.
pub(super) fn read_at_most<S: ReadAt + ?Sized>(
    src: &S,
    at: u64,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match src.read_at(at + n as u64, &mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The bytes of `src` from `pos` to its end, as a stream.
pub(super) struct ByteStream<S> {
    pub(super) src: S,
    pub(super) pos: u64,
}

impl<S: ReadAt> Read for ByteStream<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.src.read_at(self.pos, buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

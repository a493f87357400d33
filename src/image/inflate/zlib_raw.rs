//! A raw deflate decoder through zlib-rs's C interface, for what its safe `Inflate` leaves out and
//! a chunk of one stream needs: a start at any bit, a window before the first block, and a stop
//! at each block's end with the bit it ends at.

use std::io;

use libz_rs_sys as z;

/// Where one call to [`RawInflate::run`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// Out of input or room.
    Midway,
    /// At the end of a block that was not the last.
    BlockEnd,
    /// At the end of the last block.
    StreamEnd,
}

/// What one call read, wrote and where it stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ran {
    pub read: usize,
    pub wrote: usize,
    pub stop: Stop,
}

pub(super) struct RawInflate {
    // Boxed: zlib's state records its stream's address and refuses a stream that moved.
    strm: Box<z::z_stream>,
}

// SAFETY: the stream owns its state, allocated by zlib-rs's Rust allocator; it points at the
// caller's buffers only during `run`, which borrows them.
unsafe impl Send for RawInflate {}

impl RawInflate {
    pub(super) fn new() -> io::Result<Self> {
        let mut strm = Box::<z::z_stream>::default();
        let size = std::mem::size_of::<z::z_stream>() as i32;
        // SAFETY: a zeroed stream of the size zlib expects, its version string static; -15: a
        // raw deflate stream with a 32 KiB window.
        let rc = unsafe { z::inflateInit2_(&mut *strm, -15, z::zlibVersion(), size) };
        let mut me = Self { strm };
        me.check(rc)?;
        Ok(me)
    }

    /// Back to a stream's start: `bits` (below 8) of `value` come before the first byte given to
    /// `run`, and `window` is the output before the stream's start (up to 32 KiB).
    pub(super) fn restart(&mut self, bits: u8, value: u8, window: &[u8]) -> io::Result<()> {
        // SAFETY: the stream was initialised in `new` and has not moved (boxed).
        let rc = unsafe { z::inflateReset(&mut *self.strm) };
        self.check(rc)?;
        if bits > 0 {
            // SAFETY: as above; fewer than 8 bits into an empty bit buffer.
            let rc = unsafe { z::inflatePrime(&mut *self.strm, i32::from(bits), i32::from(value)) };
            self.check(rc)?;
        }
        if !window.is_empty() {
            let len = u32::try_from(window.len()).map_err(io::Error::other)?;
            // SAFETY: as above; zlib copies `len` bytes from the window's start.
            let rc = unsafe { z::inflateSetDictionary(&mut *self.strm, window.as_ptr(), len) };
            self.check(rc)?;
        }
        Ok(())
    }

    /// Decodes from `input` onto the end of `out`, at most `room` bytes, stopping at the end of a
    /// block. A stream that is not deflate is `InvalidData` with zlib's reason.
    pub(super) fn run(&mut self, input: &[u8], out: &mut Vec<u8>, room: usize) -> io::Result<Ran> {
        out.reserve(room);
        let spare = &mut out.spare_capacity_mut()[..room];
        self.strm.next_in = input.as_ptr();
        self.strm.avail_in = u32::try_from(input.len()).unwrap_or(u32::MAX);
        self.strm.next_out = spare.as_mut_ptr().cast();
        self.strm.avail_out = u32::try_from(room).unwrap_or(u32::MAX);
        // SAFETY: next_in/next_out point at `avail_in` readable and `avail_out` writable bytes of
        // the borrowed buffers, which outlive the call; the stream is initialised and boxed.
        let rc = unsafe { z::inflate(&mut *self.strm, z::Z_BLOCK) };
        let read = input.len().min(u32::MAX as usize) - self.strm.avail_in as usize;
        let wrote = room.min(u32::MAX as usize) - self.strm.avail_out as usize;
        // SAFETY: zlib wrote `wrote` bytes at the start of the spare capacity.
        unsafe { out.set_len(out.len() + wrote) };
        self.strm.next_in = std::ptr::null();
        self.strm.next_out = std::ptr::null_mut();
        // data_type: 128 at a block's end, 64 once the last block's header is read.
        let stop = match (rc, self.strm.data_type & (128 | 64)) {
            (z::Z_STREAM_END, _) | (z::Z_OK, 192) => Stop::StreamEnd,
            (z::Z_OK, 128) => Stop::BlockEnd,
            (z::Z_OK | z::Z_BUF_ERROR, _) => Stop::Midway,
            _ => return Err(self.error(rc)),
        };
        Ok(Ran { read, wrote, stop })
    }

    /// The bits of the bytes read that are not decoded yet.
    pub(super) fn unread_bits(&self) -> u64 {
        (self.strm.data_type & 63) as u64
    }

    fn check(&mut self, rc: i32) -> io::Result<()> {
        match rc {
            z::Z_OK => Ok(()),
            _ => Err(self.error(rc)),
        }
    }

    fn error(&self, rc: i32) -> io::Error {
        let why = if self.strm.msg.is_null() {
            format!("zlib error {rc}")
        } else {
            // SAFETY: zlib's messages are static NUL-terminated strings.
            let msg = unsafe { std::ffi::CStr::from_ptr(self.strm.msg) };
            msg.to_string_lossy().into_owned()
        };
        let kind = match rc {
            z::Z_DATA_ERROR => io::ErrorKind::InvalidData,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, format!("corrupt deflate stream: {why}"))
    }
}

impl Drop for RawInflate {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, ended once here.
        unsafe { z::inflateEnd(&mut *self.strm) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decoder restarted at any block end of a stream, the output before it as its window,
    /// decodes on as the one that got there: the bit it reports is where the next block starts.
    #[test]
    fn every_block_end_is_a_place_to_restart() {
        let data = crate::image::inflate::tests::text(4 << 20, 1);
        for blob in [
            crate::image::inflate::tests::system_gz(&data, 1),
            crate::image::inflate::tests::system_gz(&data, 9),
        ] {
            let deflate = &blob[10..];
            let mut z = RawInflate::new().unwrap();
            let (mut out, mut at, mut ends) = (Vec::new(), 0, Vec::new());
            loop {
                let r = z.run(&deflate[at..], &mut out, 1 << 20).unwrap();
                at += r.read;
                match r.stop {
                    Stop::BlockEnd => ends.push((at as u64 * 8 - z.unread_bits(), out.len())),
                    Stop::StreamEnd => break,
                    Stop::Midway => {}
                }
            }
            assert!(out == data);
            assert!(ends.len() > 10, "{} blocks", ends.len());
            for &(bit, len) in &ends {
                let (byte, shift) = ((bit / 8) as usize, (bit % 8) as u8);
                let (bits, value, from) = match shift {
                    0 => (0, 0, byte),
                    _ => (8 - shift, deflate[byte] >> shift, byte + 1),
                };
                let mut z = RawInflate::new().unwrap();
                z.restart(bits, value, &out[len.saturating_sub(32 << 10)..len])
                    .unwrap();
                let mut o = Vec::new();
                let r = z.run(&deflate[from..], &mut o, 1 << 20);
                let r = r.unwrap_or_else(|e| panic!("at bit {bit}: {e}"));
                assert!(
                    r.wrote > 0 && out[len..].starts_with(&o),
                    "at bit {bit}: {r:?}"
                );
            }
        }
    }
}

//! Decompressors for the squashfs compressor ids. Every call gets a hard output limit (8 KiB for
//! metadata, the block size for data) so a corrupt block can never make us allocate without bound.

use std::{fmt, io};

use super::lzo::LzoError;

// One decompression context per thread, reused for every block: creating one per block cost
// a visible share of a FUSE read and of exec start-up (ZSTD_createDCtx in the profile).
thread_local! {
    static ZSTD: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        std::cell::RefCell::new(zstd::bulk::Decompressor::new().ok());
    static DEFLATE: std::cell::RefCell<libdeflater::Decompressor> =
        std::cell::RefCell::new(libdeflater::Decompressor::new());
}

/// Why a block does not decompress into its limit.
#[derive(Debug, thiserror::Error)]
pub enum DecompressError {
    #[error("zlib: data longer than {limit} bytes")]
    ZlibTooLong { limit: usize },
    #[error("zlib: {0}")]
    Zlib(#[source] libdeflater::DecompressionError),
    #[error("zstd: {0}")]
    Zstd(#[source] io::Error),
    #[error(transparent)]
    Lzo(#[from] LzoError),
    #[error("xz: {0}")]
    Xz(#[source] liblzma::stream::Error),
    #[error("xz stream does not end within the block")]
    XzUnended,
    #[error("lz4: {0}")]
    Lz4(#[source] lz4_flex::block::DecompressError),
    #[error("data longer than {limit} bytes")]
    TooLong { limit: usize },
}

/// Compressor id from the superblock (squashfs_fs.h numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compressor {
    Gzip,
    Lzo,
    Xz,
    Lz4,
    Zstd,
}

impl Compressor {
    /// The compressor of `id`, if gpurun reads it.
    pub fn from_id(id: u16) -> Option<Compressor> {
        match id {
            1 => Some(Compressor::Gzip),
            3 => Some(Compressor::Lzo),
            4 => Some(Compressor::Xz),
            5 => Some(Compressor::Lz4),
            6 => Some(Compressor::Zstd),
            _ => None,
        }
    }

    /// The name of a compressor id gpurun does not read, for the user.
    pub fn unread_name(id: u16) -> String {
        match id {
            2 => "lzma".into(),
            n => format!("unknown (id {n})"),
        }
    }

    /// Decompress `input`, producing at most `limit` bytes; anything malformed or longer is an error.
    pub fn decompress(self, input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
        let mut out = vec![0u8; limit];
        let n = self.decompress_into(input, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// Decompress `input` into `out`; returns the length of the data, which must fit in `out`.
    pub fn decompress_into(self, input: &[u8], out: &mut [u8]) -> Result<usize, DecompressError> {
        let limit = out.len();
        match self {
            Compressor::Gzip => {
                DEFLATE.with(|d| match d.borrow_mut().zlib_decompress(input, out) {
                    Ok(n) => Ok(n),
                    Err(libdeflater::DecompressionError::InsufficientSpace) => {
                        Err(DecompressError::ZlibTooLong { limit })
                    }
                    Err(e) => Err(DecompressError::Zlib(e)),
                })
            }
            Compressor::Zstd => ZSTD
                .with(|d| match d.borrow_mut().as_mut() {
                    Some(d) => d.decompress_to_buffer(input, out),
                    None => zstd::bulk::decompress_to_buffer(input, out),
                })
                .map_err(DecompressError::Zstd),
            Compressor::Lzo => copy_into(super::lzo::decompress(input, limit)?, out),
            Compressor::Xz => {
                let mut s = liblzma::stream::Stream::new_stream_decoder(256 << 20, 0)
                    .map_err(DecompressError::Xz)?;
                let mut v = Vec::with_capacity(limit);
                match s.process_vec(input, &mut v, liblzma::stream::Action::Finish) {
                    Ok(liblzma::stream::Status::StreamEnd) => copy_into(v, out),
                    Ok(_) => Err(DecompressError::XzUnended),
                    Err(e) => Err(DecompressError::Xz(e)),
                }
            }
            Compressor::Lz4 => {
                lz4_flex::block::decompress_into(input, out).map_err(DecompressError::Lz4)
            }
        }
    }
}

/// `data` into `out`, for the decompressors that make their own buffer.
fn copy_into(data: Vec<u8>, out: &mut [u8]) -> Result<usize, DecompressError> {
    let limit = out.len();
    let dst = out
        .get_mut(..data.len())
        .ok_or(DecompressError::TooLong { limit })?;
    dst.copy_from_slice(&data);
    Ok(data.len())
}

impl fmt::Display for Compressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compressor::Gzip => "gzip",
            Compressor::Lzo => "lzo",
            Compressor::Xz => "xz",
            Compressor::Lz4 => "lz4",
            Compressor::Zstd => "zstd",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn sample() -> Vec<u8> {
        (0..5000u32).flat_map(|i| (i % 251).to_le_bytes()).collect()
    }

    #[test]
    fn ids() {
        assert_eq!(Compressor::from_id(1), Some(Compressor::Gzip));
        assert_eq!(Compressor::from_id(6), Some(Compressor::Zstd));
        assert_eq!(Compressor::from_id(3), Some(Compressor::Lzo));
        assert_eq!(Compressor::from_id(2), None);
        assert_eq!(Compressor::unread_name(2), "lzma");
        assert_eq!(Compressor::unread_name(99), "unknown (id 99)");
    }

    #[test]
    fn roundtrip_and_limits() {
        let data = sample();
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&data).unwrap();
        let gz = z.finish().unwrap();
        let zs = zstd::bulk::compress(&data, 3).unwrap();
        let l4 = lz4_flex::block::compress(&data);
        let mut x = liblzma::write::XzEncoder::new(Vec::new(), 6);
        x.write_all(&data).unwrap();
        let xz = x.finish().unwrap();
        for (c, bytes) in [
            (Compressor::Gzip, &gz),
            (Compressor::Zstd, &zs),
            (Compressor::Lz4, &l4),
            (Compressor::Xz, &xz),
        ] {
            assert_eq!(c.decompress(bytes, data.len()).unwrap(), data, "{c}");
            // One byte too little room: must be an error, never a silently cut block.
            assert!(c.decompress(bytes, data.len() - 1).is_err(), "{c} limit");
            // Truncated input: error, no panic.
            assert!(
                c.decompress(&bytes[..bytes.len() / 2], data.len()).is_err(),
                "{c} truncated"
            );
            assert!(
                c.decompress(&[0xff; 16], data.len()).is_err(),
                "{c} garbage"
            );
            // The thread's reused context is sound again after those failures.
            assert_eq!(c.decompress(bytes, data.len()).unwrap(), data, "{c} reuse");
        }
    }
}

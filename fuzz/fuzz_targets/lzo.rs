//! The LZO1X decompressor on any bytes: an error or at most `limit` bytes, never a panic, a hang
//! or an allocation beyond the limit.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // the first byte picks a limit, as squashfs gives one per block (8 KiB metadata, up to 1 MiB data)
    let Some((&k, stream)) = data.split_first() else { return };
    let limit = 1usize << (k % 21);
    if let Ok(out) = gpurun::image::sqfs::lzo::decompress(stream, limit) {
        assert!(out.len() <= limit);
    }
});

//! ld.so.cache parsing (old, new and combined formats): errors, never a panic.
#![no_main]
use gpurun::gpu::driver::parse_ldcache;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_ldcache(data, "/etc/ld.so.cache");
});

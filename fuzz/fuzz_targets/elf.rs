//! What the start-up warming reads from an image's files: ELF headers and dynamic sections, `#!`
//! lines, ld.so.cache lookups. Any bytes: an answer or None, never a panic, a hang or a large
//! allocation (-rss_limit_mb in run.sh).
#![no_main]
use gpurun::runtime::warm::{elf_needs, ldcache_find, shebang};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let read = |off: u64, len: usize| {
        let s = data.get(usize::try_from(off).ok()?..)?;
        Some(s[..len.min(s.len())].to_vec())
    };
    if let Some(n) = elf_needs(&read) {
        assert!(n.needed.len() <= 32 && n.runpath.len() <= 16);
    }
    let _ = shebang(data);
    let _ = ldcache_find(data, "libc.so.6");
});

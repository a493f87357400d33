//! The squashfs reader on any image: errors, never a panic or a hang (the walk is bounded, as in
//! tests/sqfs.rs, so a directory loop in a corrupt image ends).
#![no_main]
use std::sync::OnceLock;

use gpurun::image::sqfs::{Archive, Kind, SqfsError};
use libfuzzer_sys::fuzz_target;

fn walk(ar: &Archive) -> Result<(), SqfsError> {
    let mut todo = vec![(ar.root()?, 0)];
    let mut n = 0;
    let mut buf = vec![0u8; 1 << 16];
    while let Some((dir, depth)) = todo.pop() {
        for e in ar.readdir(&dir)?.iter() {
            n += 1;
            if n > 10_000 {
                return Ok(());
            }
            let ino = ar.inode(e.inode)?;
            ar.xattrs(&ino)?;
            match ino.kind {
                Kind::Dir if depth < 32 => todo.push((ino, depth + 1)),
                Kind::File => {
                    let mut off = 0;
                    for _ in 0..64 {
                        let k = ar.read_at(&ino, off, &mut buf)?;
                        if k == 0 {
                            break;
                        }
                        off += k as u64;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    // Archive reads a file; one per fuzzing process, in memory (/dev/shm).
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    let path = PATH.get_or_init(|| {
        std::path::PathBuf::from(format!("/dev/shm/gpurun-fuzz-sqfs.{}", std::process::id()))
    });
    std::fs::write(path, data).unwrap();
    if let Ok(ar) = Archive::open(path) {
        let _ = walk(&ar);
    }
});

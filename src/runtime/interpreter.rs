//! Why a file that is there could not be executed with ENOENT: what it names to run it with is
//! missing in the container. A script's `#!` interpreter (with CRLF line endings its name ends
//! in `\r`), or an ELF program's loader (PT_INTERP). Pure: the caller reads the file's head.

use std::path::Path;

/// How much of a file is read to find what it names (an ELF loader's name is in its first
/// page; a `#!` line the kernel reads is shorter still).
pub const HEAD_BYTES: usize = 4096;

/// The one line for `path`, whose first bytes are `head`, when it names an interpreter or loader.
pub fn missing(path: &Path, head: &[u8]) -> Option<String> {
    let p = path.display();
    if let Some(interp) = shebang(head) {
        return Some(if interp.ends_with('\r') {
            format!(
                "cannot execute {p}: its #! line names {:?}, with a carriage return (\\r): the file has Windows (CRLF) line endings; convert it with dos2unix {p} (or sed -i 's/\\r$//' {p})",
                interp
            )
        } else {
            format!(
                "cannot execute {p}: its interpreter {interp} (from its #! line) is not in the container; install it in the image or fix the #! line"
            )
        });
    }
    let loader = elf_interp(head)?;
    Some(format!(
        "cannot execute {p}: the program loader it names, {loader}, is not in the container (a program built for another system or C library?)"
    ))
}

/// The program a `#!` line names: after `#!` and blanks, up to the next blank or the line's
/// end, as the kernel reads it (so a `\r` before the newline is part of the name).
fn shebang(head: &[u8]) -> Option<String> {
    let rest = head.strip_prefix(b"#!")?;
    let line = rest.split(|&b| b == b'\n').next()?;
    let line = line.trim_ascii_start();
    let name = line.split(|&b| b == b' ' || b == b'\t').next()?;
    (!name.is_empty()).then(|| String::from_utf8_lossy(name).into_owned())
}

/// PT_INTERP of a 64-bit little-endian ELF file (x86_64, aarch64) whose first bytes are `head`.
fn elf_interp(head: &[u8]) -> Option<String> {
    if !head.starts_with(b"\x7fELF") || head.get(4) != Some(&2) || head.get(5) != Some(&1) {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(head.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(head.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(head.get(o..o + 8)?.try_into().ok()?));
    let (phoff, phentsize, phnum) = (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?);
    for i in 0..usize::from(phnum) {
        let ph = usize::try_from(phoff).ok()? + i * usize::from(phentsize);
        const PT_INTERP: u32 = 3;
        if u32_at(ph)? == PT_INTERP {
            let off = usize::try_from(u64_at(ph + 8)?).ok()?;
            let len = usize::try_from(u64_at(ph + 32)?).ok()?;
            let name = head.get(off..off.checked_add(len)?)?;
            let name = name.split(|&b| b == 0).next()?;
            return Some(String::from_utf8_lossy(name).into_owned());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-bit little-endian ELF header with one PT_INTERP program header naming `interp`.
    fn elf(interp: &str) -> Vec<u8> {
        let mut f = vec![0u8; 0x200];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2;
        f[5] = 1;
        f[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        f[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        f[0x38..0x3a].copy_from_slice(&2u16.to_le_bytes());
        // the first program header is PT_LOAD, the second PT_INTERP at 0x100
        f[0x40..0x44].copy_from_slice(&1u32.to_le_bytes());
        let ph = 0x40 + 56;
        f[ph..ph + 4].copy_from_slice(&3u32.to_le_bytes());
        f[ph + 8..ph + 16].copy_from_slice(&0x100u64.to_le_bytes());
        let name = format!("{interp}\0");
        f[ph + 32..ph + 40].copy_from_slice(&(name.len() as u64).to_le_bytes());
        f[0x100..0x100 + name.len()].copy_from_slice(name.as_bytes());
        f
    }

    #[test]
    fn what_a_file_names() {
        let p = Path::new("/work/run.sh");
        let cases: Vec<(Vec<u8>, Option<&str>)> = vec![
            (b"#!/bin/bash\necho\n".to_vec(), Some("its interpreter /bin/bash (from its #! line) is not in the container")),
            (b"#! /usr/bin/python3 -u\n".to_vec(), Some("its interpreter /usr/bin/python3 (from")),
            (b"#!/bin/sh\r\necho hi\r\n".to_vec(), Some("names \"/bin/sh\\r\", with a carriage return (\\r): the file has Windows (CRLF) line endings")),
            (b"#!/bin/sh".to_vec(), Some("/bin/sh (from its #! line)")),
            (elf("/lib/ld-musl-x86_64.so.1"), Some("the program loader it names, /lib/ld-musl-x86_64.so.1, is not in the container")),
            (b"#!\n".to_vec(), None),
            (b"echo no shebang\n".to_vec(), None),
            (b"\x7fELF".to_vec(), None),
            (elf("/lib64/ld-linux-x86-64.so.2")[..0x80].to_vec(), None),
            (vec![], None),
        ];
        for (head, want) in cases {
            let got = missing(p, &head);
            match (want, &got) {
                (Some(w), Some(g)) => {
                    assert!(
                        g.starts_with("cannot execute /work/run.sh: ") && g.contains(w),
                        "{g}"
                    )
                }
                (None, None) => {}
                _ => panic!("{:?}: {got:?}", String::from_utf8_lossy(&head)),
            }
        }
    }
}

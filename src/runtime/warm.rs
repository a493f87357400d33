//! Start-up warming: while the container process builds the root, the command's program, its
//! ELF interpreter and the libraries it needs are decompressed into the image server's block
//! cache, on threads of gpurun's own.
//!
//! Without it, exec and the dynamic loader fault in those files page by page from a freshly
//! mounted image, and each fault waits on a FUSE READ that decompresses its blocks there and
//! then (`exec true` from a Debian image: ~1.5 MB of libc, ld.so and true, about a third of the
//! whole start). Its threads step aside after each block and each file, so that a thread woken
//! on their CPU goes first, unless the CPUs are contended (runtime/step_aside.rs), and no READ
//! ever waits for them (`Archive::claim`). Where other work leaves a CPU free they take the
//! lowest priority (nice 19) and always yield, so that the container's set-up and command,
//! woken on their CPU, go first (`StepAside::for_warming`). Elsewhere they run at normal
//! priority: at idle priority (SCHED_IDLE) a machine busy with other work starved
//! them, and then gpurun's exit waited until each got a CPU to die, and a server thread could
//! wait on a lock one held. Beside two CPU-bound processes on a 2-CPU machine `exec true` took
//! 115 ms on average and up to 664 ms then, 29 and 39 ms now, as ch-run (`benches/load.sh`).
//! Work that fills every CPU during the few milliseconds of a
//! start that found one free can still starve them.
//! There is no warming on one CPU (`workers`). What the warming finds is a guess: a
//! wrong one costs some CPU, nothing else.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use crate::gpu::driver::{cstr_bytes, for_each_ldcache_entry, NATIVE_FLAGS};
use crate::image::sqfs::{Archive, Inode, Kind};
use crate::runtime::step_aside::StepAside;

/// At most this much file data is warmed (a quarter of the data block cache).
pub const BUDGET: u64 = 16 << 20;
/// Files warmed at most: the program, an interpreter, and the libraries they need.
const MAX_FILES: usize = 32;
/// `#!` interpreters followed at most (a script run by `env`, which runs python).
const MAX_SCRIPTS: usize = 2;

/// What an ELF program needs before it runs: its interpreter (PT_INTERP), the libraries it names
/// (DT_NEEDED, in order) and its own library search path (DT_RUNPATH, else DT_RPATH).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ElfNeeds {
    pub interp: Option<String>,
    pub needed: Vec<String>,
    pub runpath: Vec<String>,
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;
/// Bounds on what a header may make us read (a program header table, a dynamic section, its
/// string table) and keep (names, search directories, libraries): a damaged or hostile file
/// costs a little reading, never a large allocation or a long search.
const MAX_TABLE: usize = 1 << 20;
const MAX_NAME: usize = 4096;
const MAX_DIRS: usize = 16;
/// An image's ld.so.cache larger than this is not read (glibc's own are well under 1 MiB).
const MAX_LDCACHE: u64 = 4 << 20;

/// The string at `off` when it is a sane name or path (at most `MAX_NAME` bytes).
fn name_at(b: &[u8], off: usize) -> Option<String> {
    let s = cstr_bytes(b, off).filter(|s| s.len() <= MAX_NAME)?;
    Some(String::from_utf8_lossy(s).into_owned())
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// Parse what a 64-bit little-endian ELF file needs; `read(offset, len)` returns the file's
/// bytes there (fewer at its end). None for anything else: a script, a 32-bit or big-endian
/// program, a damaged header.
pub fn elf_needs(read: &dyn Fn(u64, usize) -> Option<Vec<u8>>) -> Option<ElfNeeds> {
    let h = read(0, 64)?;
    // magic, ELFCLASS64, ELFDATA2LSB
    if h.len() < 64 || &h[..4] != b"\x7fELF" || h[4] != 2 || h[5] != 1 {
        return None;
    }
    let phoff = u64_at(&h, 32)?;
    let phentsize = u16_at(&h, 54)? as usize;
    let phnum = u16_at(&h, 56)? as usize;
    if phentsize < 56 || phentsize * phnum > MAX_TABLE {
        return None;
    }
    let ph = read(phoff, phentsize * phnum)?;
    let mut out = ElfNeeds::default();
    // (vaddr, filesz, offset) of each loaded segment, to find the string table in the file.
    let mut loads = Vec::new();
    let mut dynamic = None;
    for i in 0..phnum {
        let e = i * phentsize;
        let (kind, off) = (u32_at(&ph, e)?, u64_at(&ph, e + 8)?);
        let (vaddr, filesz) = (u64_at(&ph, e + 16)?, u64_at(&ph, e + 32)?);
        match kind {
            PT_LOAD => loads.push((vaddr, filesz, off)),
            PT_DYNAMIC => dynamic = Some((off, filesz)),
            PT_INTERP if (filesz as usize) < 4096 => {
                out.interp = name_at(&read(off, filesz as usize)?, 0);
            }
            _ => {}
        }
    }
    let Some((dyn_off, dyn_size)) = dynamic else {
        return Some(out); // static
    };
    let dynamic = read(dyn_off, (dyn_size as usize).min(MAX_TABLE))?;
    let (mut strtab, mut strsz) = (None, 0usize);
    let (mut needed, mut rpath, mut runpath) = (Vec::new(), None, None);
    for e in dynamic.chunks_exact(16) {
        let (tag, val) = (u64_at(e, 0)?, u64_at(e, 8)?);
        match tag {
            0 => break, // DT_NULL
            DT_NEEDED => needed.push(val as usize),
            DT_STRTAB => strtab = Some(val),
            DT_STRSZ => strsz = (val as usize).min(MAX_TABLE),
            DT_RPATH => rpath = Some(val as usize),
            DT_RUNPATH => runpath = Some(val as usize),
            _ => {}
        }
    }
    // DT_STRTAB is an address: the loaded segment holding it says where it lies in the file.
    let addr = strtab?;
    let &(vaddr, _, off) = loads
        .iter()
        .find(|&&(v, size, _)| addr >= v && addr - v < size)?;
    let strings = read((addr - vaddr).checked_add(off)?, strsz)?;
    out.needed = needed
        .into_iter()
        .filter_map(|o| name_at(&strings, o))
        .take(MAX_FILES)
        .collect();
    if let Some(p) = runpath.or(rpath).and_then(|o| name_at(&strings, o)) {
        out.runpath = p
            .split(':')
            .filter(|d| !d.is_empty())
            .take(MAX_DIRS)
            .map(String::from)
            .collect();
    }
    Some(out)
}

/// A `#!` line: the interpreter and its one optional argument (as the kernel splits it).
pub fn shebang(head: &[u8]) -> Option<(String, Option<String>)> {
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&c| c == b'\n')?];
    let line = String::from_utf8_lossy(line);
    let line = line.trim_matches([' ', '\t']);
    let (interp, arg) = match line.split_once([' ', '\t']) {
        Some((i, a)) => (i, Some(a.trim_matches([' ', '\t']).to_string())),
        None => (line, None),
    };
    (!interp.is_empty()).then(|| (interp.to_string(), arg.filter(|a| !a.is_empty())))
}

/// Where the dynamic loader would look for `name`, in its order: a name with a slash as it is;
/// else the program's DT_RUNPATH (or DT_RPATH) with `$ORIGIN` put in, LD_LIBRARY_PATH,
/// what ld.so.cache says (`from_cache`, see `ldcache_find`), then the default directories.
pub fn lib_candidates(
    name: &str,
    origin: &str,
    runpath: &[String],
    ld_library_path: &str,
    from_cache: Option<&str>,
) -> Vec<String> {
    if name.contains('/') {
        return vec![name.to_string()];
    }
    let mut dirs: Vec<String> = runpath
        .iter()
        .map(|d| d.replace("${ORIGIN}", origin).replace("$ORIGIN", origin))
        .collect();
    dirs.extend(
        ld_library_path
            .split(':')
            .filter(|d| !d.is_empty())
            .take(MAX_DIRS)
            .map(String::from),
    );
    let mut out: Vec<String> = dirs.iter().map(|d| format!("{d}/{name}")).collect();
    out.extend(from_cache.map(String::from));
    out.extend(DEFAULT_LIB_DIRS.iter().map(|d| format!("{d}/{name}")));
    out
}

/// The path an ld.so.cache gives for library `name` on this architecture (its first entry).
pub fn ldcache_find(cache: &[u8], name: &str) -> Option<String> {
    let mut found = None;
    let _ = for_each_ldcache_entry(cache, "/etc/ld.so.cache", |flags, key, value| {
        if flags == NATIVE_FLAGS && key == name.as_bytes() && value.len() <= MAX_NAME {
            found = Some(String::from_utf8_lossy(value).into_owned());
        }
        found.is_none()
    });
    found
}

const DEFAULT_LIB_DIRS: &[&str] = &[
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
    #[cfg(target_arch = "x86_64")]
    "/lib/x86_64-linux-gnu",
    #[cfg(target_arch = "x86_64")]
    "/usr/lib/x86_64-linux-gnu",
    #[cfg(target_arch = "aarch64")]
    "/lib/aarch64-linux-gnu",
    #[cfg(target_arch = "aarch64")]
    "/usr/lib/aarch64-linux-gnu",
];

/// The command as the container will find it: the first executable regular file among its
/// candidates (`env::command_candidates`, as launch's exec searches), relative ones from `cwd`.
fn find_command(ar: &Archive, cmd: &str, path_dirs: &[PathBuf], cwd: &Path) -> Option<String> {
    super::env::command_candidates(cmd, path_dirs)
        .into_iter()
        .find_map(|p| {
            let p = cwd.join(p).to_string_lossy().into_owned();
            let ino = ar.lookup(&p, true).ok()??;
            (ino.kind == Kind::File && ino.mode() & 0o111 != 0).then_some(p)
        })
}

/// Decompressing threads for the start-up warming on `cpus` CPUs, besides the one that finds the
/// files: one fewer than the CPUs, at most 4; none on one CPU. The warming is for CPU time the
/// start leaves idle, and one CPU has none: there it only competed with the container's set-up
/// (on one vCPU `exec true` 13.4 -> 14.6 ms, `apt-get --version` 42.3 -> 46.4 ms at normal
/// priority; 12.7 and 41.3 ms without it).
pub fn workers(cpus: usize) -> Option<usize> {
    (cpus >= 2).then(|| (cpus - 1).min(4))
}

/// Decompress what `cmd` needs to start into the archive's block cache, up to `BUDGET` bytes,
/// on gpurun's `cpus` CPUs: the files are found in order on this thread, and their blocks
/// decompressed by `workers` threads, in that order (the program is needed first, its libraries
/// later); nothing on one CPU. Each file's path in the image is told to `found` as soon as it is
/// found.
pub fn warm(
    ar: &Archive,
    cmd: &str,
    path_dirs: &[PathBuf],
    cwd: &Path,
    ld_library_path: &str,
    cpus: usize,
    found: &mut dyn FnMut(&str),
) {
    let Some(workers) = workers(cpus) else {
        return;
    };
    let queue = Queue::default();
    let aside = StepAside::for_warming(cpus);
    aside.enlist();
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                aside.enlist();
                while let Some((f, i)) = queue.pop() {
                    // A damaged block is reported by the read that needs it, not here.
                    let _ = ar.preload_block(&f, i);
                    // Without it a worker kept a CPU for a whole slice (ms) while the server
                    // thread waited on it, runnable, with the other CPU idle (2 vCPUs). Ending
                    // the warming when the CPUs are contended was tried: a quiet machine's own
                    // command, busy on a CPU, looks the same, and `apt-get --version` went 31 ->
                    // 40 ms.
                    aside.step_aside();
                }
            });
        }
        // Closed however the walk ends (a panic too), or the workers would wait for ever.
        let _close = CloseOnDrop(&queue);
        let mut left = BUDGET;
        visit(ar, cmd, path_dirs, cwd, ld_library_path, &mut |path, f| {
            found(path);
            // Also the walk (lookups, headers, ld.so.cache scans) lets a thread woken on this
            // CPU go first, between files.
            aside.step_aside();
            for i in 0..ar.data_blocks(f) {
                if left == 0 {
                    break;
                }
                queue.push((f.clone(), i));
                left = left.saturating_sub(ar.block_size() as u64);
            }
            left > 0
        });
    });
}

struct CloseOnDrop<'a>(&'a Queue);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A file's data block: the file and the block's index (`Archive::preload_block`).
type Block = (Arc<Inode>, usize);

/// Blocks to decompress, first in first out, until closed and empty.
#[derive(Default)]
struct Queue {
    state: Mutex<Pending>,
    ready: Condvar,
}

#[derive(Default)]
struct Pending {
    blocks: VecDeque<Block>,
    closed: bool,
}

impl Queue {
    fn push(&self, b: Block) {
        crate::lock(&self.state).blocks.push_back(b);
        self.ready.notify_one();
    }

    fn close(&self) {
        crate::lock(&self.state).closed = true;
        self.ready.notify_all();
    }

    fn pop(&self) -> Option<Block> {
        let mut st = crate::lock(&self.state);
        loop {
            if let Some(b) = st.blocks.pop_front() {
                return Some(b);
            }
            if st.closed {
                return None;
            }
            st = self.ready.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The image's /etc/ld.so.cache, unless it is implausibly large.
fn read_ldcache(ar: &Archive) -> Option<Vec<u8>> {
    let ino = ar.lookup("/etc/ld.so.cache", true).ok()??;
    if ino.kind != Kind::File || ino.size > MAX_LDCACHE {
        return None;
    }
    let mut b = vec![0u8; ino.size as usize];
    let n = ar.read_at(&ino, 0, &mut b).ok()?;
    b.truncate(n);
    Some(b)
}

/// Walk the files `cmd` needs to start, each once, in the order it needs them, until `found`
/// returns false: a script and its interpreters (`env NAME` runs NAME from PATH), then each
/// program, its ELF interpreter and its libraries, breadth first as the loader takes them.
fn visit(
    ar: &Archive,
    cmd: &str,
    path_dirs: &[PathBuf],
    cwd: &Path,
    ld_library_path: &str,
    found: &mut dyn FnMut(&str, &Arc<Inode>) -> bool,
) {
    let Some(mut prog) = find_command(ar, cmd, path_dirs, cwd) else {
        return;
    };
    let mut count = 0;
    // Files to take, with their inode when it has been looked up already.
    let mut programs: Vec<(String, Option<Arc<Inode>>)> = Vec::new();
    let mut prog_ino = None;
    for _ in 0..=MAX_SCRIPTS {
        let Ok(Some(ino)) = ar.lookup(&prog, true) else {
            return;
        };
        let mut head = vec![0u8; 256];
        let n = ar.read_at(&ino, 0, &mut head).unwrap_or(0);
        let Some((interp, arg)) = shebang(&head[..n]) else {
            prog_ino = Some(ino);
            break;
        };
        count += 1;
        if !found(&prog, &ino) {
            return;
        }
        prog = match arg {
            Some(a) if interp.ends_with("/env") && !a.starts_with('-') => {
                programs.push((interp, None));
                match find_command(ar, &a, path_dirs, cwd) {
                    Some(p) => p,
                    None => break,
                }
            }
            _ => interp,
        };
    }
    programs.push((prog, prog_ino));
    let mut cache = None;
    let mut queue = std::collections::VecDeque::from(programs);
    let mut seen = std::collections::HashSet::new();
    while let Some((path, known)) = queue.pop_front() {
        if count >= MAX_FILES {
            return;
        }
        let Some(ino) = known.or_else(|| ar.lookup(&path, true).ok().flatten()) else {
            continue;
        };
        if ino.kind != Kind::File || !seen.insert(ino.r) {
            continue;
        }
        count += 1;
        if !found(&path, &ino) {
            return;
        }
        let read = |off: u64, len: usize| {
            let mut b = vec![0u8; len];
            let n = ar.read_at(&ino, off, &mut b).ok()?;
            b.truncate(n);
            Some(b)
        };
        let Some(needs) = elf_needs(&read) else {
            continue;
        };
        let origin = match path.rsplit_once('/') {
            Some((d, _)) if !d.is_empty() => d.to_string(),
            _ => "/".to_string(),
        };
        queue.extend(needs.interp.map(|p| (p, None)));
        if needs.needed.is_empty() {
            continue;
        }
        // Read only when a library is needed: a static program (busybox) needs none.
        let cache: &Vec<u8> = cache.get_or_insert_with(|| read_ldcache(ar).unwrap_or_default());
        for name in &needs.needed {
            let cached = ldcache_find(cache, name);
            let from_cache = cached.as_deref();
            let found = lib_candidates(name, &origin, &needs.runpath, ld_library_path, from_cache)
                .into_iter()
                .find_map(|c| match ar.lookup(&c, true) {
                    Ok(Some(i)) if i.kind == Kind::File => Some((c, Some(i))),
                    _ => None,
                });
            queue.extend(found);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warming_threads_per_cpu_count() {
        for (cpus, want) in [
            (1, None),
            (2, Some(1)),
            (3, Some(2)),
            (5, Some(4)),
            (64, Some(4)),
        ] {
            assert_eq!(workers(cpus), want, "{cpus} CPUs");
        }
    }

    fn bytes(b: &[u8]) -> impl Fn(u64, usize) -> Option<Vec<u8>> + '_ {
        move |off, len| {
            let s = b.get(off as usize..)?;
            Some(s[..len.min(s.len())].to_vec())
        }
    }

    #[test]
    fn shebang_table() {
        let s = |i: &str, a: Option<&str>| Some((i.to_string(), a.map(String::from)));
        for (head, want) in [
            (&b"#!/bin/sh\necho"[..], s("/bin/sh", None)),
            (
                b"#! /usr/bin/env python3\n",
                s("/usr/bin/env", Some("python3")),
            ),
            (b"#!/usr/bin/perl -w  \n", s("/usr/bin/perl", Some("-w"))),
            (b"#!/bin/bash\t-e\n", s("/bin/bash", Some("-e"))),
            (b"#!\n", None),
            (b"#!/bin/sh", None), // no end of line within the head read
            (b"\x7fELF", None),
            (b"echo hi\n", None),
        ] {
            assert_eq!(shebang(head), want, "{:?}", String::from_utf8_lossy(head));
        }
    }

    #[test]
    fn lib_candidates_follow_the_loader_order() {
        let c = lib_candidates(
            "libc.so.6",
            "/opt/app/bin",
            &["$ORIGIN/../lib".into(), "/opt/x".into()],
            "/ld:",
            Some("/usr/lib/x86_64-linux-gnu/libc.so.6"),
        );
        assert_eq!(
            &c[..4],
            [
                "/opt/app/bin/../lib/libc.so.6",
                "/opt/x/libc.so.6",
                "/ld/libc.so.6",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
            ]
        );
        assert_eq!(c[4], "/lib64/libc.so.6");
        assert_eq!(
            lib_candidates("/abs/libz.so", "/", &[], "/ld", None),
            ["/abs/libz.so"]
        );
        // A hostile LD_LIBRARY_PATH (an image's Env) is searched only so far.
        let long = vec!["/d"; 100_000].join(":");
        assert_eq!(
            lib_candidates("x", "/", &[], &long, None).len(),
            MAX_DIRS + DEFAULT_LIB_DIRS.len()
        );
    }

    #[test]
    fn ldcache_find_in_this_machines_cache() {
        let cache = std::fs::read("/etc/ld.so.cache").unwrap();
        let libc = ldcache_find(&cache, "libc.so.6").expect("libc.so.6 in ld.so.cache");
        assert!(
            libc.ends_with("/libc.so.6") && Path::new(&libc).exists(),
            "{libc}"
        );
        assert_eq!(ldcache_find(&cache, "libnonesuch.so.9"), None);
        assert_eq!(ldcache_find(b"not a cache", "libc.so.6"), None);
    }

    #[test]
    fn elf_needs_of_a_dynamic_program() {
        // This test binary: a dynamic program of this architecture, linked against libc.
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let n = elf_needs(&bytes(&exe)).expect("an ELF64 LE program");
        assert!(
            n.interp.as_deref().is_some_and(|i| i.contains("ld-")),
            "{n:?}"
        );
        assert!(n.needed.iter().any(|l| l.starts_with("libc.so")), "{n:?}");
    }

    /// A minimal ELF64 LE file: one PT_LOAD mapping the file at 0x400000, a PT_INTERP, and a
    /// PT_DYNAMIC with two DT_NEEDED, a DT_RUNPATH and the string table.
    fn synthetic(strtab_addr: u64) -> Vec<u8> {
        let mut f = vec![0u8; 0x300];
        f[..6].copy_from_slice(b"\x7fELF\x02\x01");
        f[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        f[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        f[56..58].copy_from_slice(&3u16.to_le_bytes()); // e_phnum
        let ph = |f: &mut Vec<u8>, i: usize, kind: u32, off: u64, vaddr: u64, size: u64| {
            let e = 64 + i * 56;
            f[e..e + 4].copy_from_slice(&kind.to_le_bytes());
            f[e + 8..e + 16].copy_from_slice(&off.to_le_bytes());
            f[e + 16..e + 24].copy_from_slice(&vaddr.to_le_bytes());
            f[e + 32..e + 40].copy_from_slice(&size.to_le_bytes());
        };
        ph(&mut f, 0, PT_LOAD, 0, 0x400000, 0x300);
        ph(&mut f, 1, PT_INTERP, 0x100, 0x400100, 11); // with its NUL
        ph(&mut f, 2, PT_DYNAMIC, 0x200, 0x400200, 6 * 16);
        f[0x100..0x10a].copy_from_slice(b"/lib/ld.so");
        let strings = b"\0libfoo.so.1\0libc.so.6\0$ORIGIN/lib:/opt\0";
        f[0x180..0x180 + strings.len()].copy_from_slice(strings);
        let dyns = [
            (DT_NEEDED, 1),
            (DT_NEEDED, 13),
            (DT_RUNPATH, 23),
            (DT_STRTAB, strtab_addr),
            (DT_STRSZ, strings.len() as u64),
            (0, 0),
        ];
        for (i, (t, v)) in dyns.iter().enumerate() {
            let e = 0x200 + i * 16;
            f[e..e + 8].copy_from_slice(&t.to_le_bytes());
            f[e + 8..e + 16].copy_from_slice(&v.to_le_bytes());
        }
        f
    }

    #[test]
    fn elf_needs_table() {
        let good = synthetic(0x400180);
        assert_eq!(
            elf_needs(&bytes(&good)),
            Some(ElfNeeds {
                interp: Some("/lib/ld.so".into()),
                needed: vec!["libfoo.so.1".into(), "libc.so.6".into()],
                runpath: vec!["$ORIGIN/lib".into(), "/opt".into()],
            })
        );
        // A string table outside every loaded segment: nothing to trust.
        assert_eq!(elf_needs(&bytes(&synthetic(0x900000))), None);
        let mut be = good.clone();
        be[5] = 2; // big-endian
        assert_eq!(elf_needs(&bytes(&be)), None);
        let mut class32 = good.clone();
        class32[4] = 1;
        assert_eq!(elf_needs(&bytes(&class32)), None);
        assert_eq!(elf_needs(&bytes(&good[..40])), None, "truncated header");
        assert_eq!(elf_needs(&bytes(&good[..0x120])), None, "truncated tables");
        let mut huge = good.clone();
        huge[56..58].copy_from_slice(&u16::MAX.to_le_bytes()); // 65535 program headers
        assert_eq!(elf_needs(&bytes(&huge)), None);
        assert_eq!(elf_needs(&bytes(b"#!/bin/sh\n")), None);
        // A loaded segment at file offset u64::MAX: the string table's offset would overflow.
        let mut wrap = good.clone();
        wrap[64 + 8..64 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(elf_needs(&bytes(&wrap)), None);
    }

    /// A dynamic section full of DT_NEEDED entries, all naming one string of `len` bytes.
    fn many_needed(count: usize, len: usize) -> Vec<u8> {
        let mut f = synthetic(0x400180);
        let strtab = f.len() as u64;
        f.extend(std::iter::repeat_n(b'a', len));
        f.push(0);
        let dyn_off = f.len() as u64;
        let mut entries: Vec<(u64, u64)> = vec![(DT_NEEDED, 0); count];
        entries.extend([
            (DT_STRTAB, 0x400000 + strtab),
            (DT_STRSZ, len as u64 + 1),
            (0, 0),
        ]);
        for (t, v) in entries {
            f.extend(t.to_le_bytes());
            f.extend(v.to_le_bytes());
        }
        // the loaded segment covers the whole file; the dynamic section moves to the end
        let size = f.len() as u64;
        f[64 + 32..64 + 40].copy_from_slice(&size.to_le_bytes());
        let e = 64 + 2 * 56;
        f[e + 8..e + 16].copy_from_slice(&dyn_off.to_le_bytes());
        f[e + 32..e + 40].copy_from_slice(&((count as u64 + 3) * 16).to_le_bytes());
        f
    }

    #[test]
    fn hostile_dynamic_sections_stay_small() {
        // 60,000 names of 4 KiB each would be 240 MB of strings: at most MAX_FILES are taken.
        let n = elf_needs(&bytes(&many_needed(60_000, MAX_NAME))).unwrap();
        assert_eq!(n.needed.len(), MAX_FILES);
        // A name longer than any path is no library name: skipped, not copied.
        let n = elf_needs(&bytes(&many_needed(1000, MAX_NAME + 1))).unwrap();
        assert!(n.needed.is_empty());
    }
}

//! The parts of files a start reads, kept for the next start of the image, which pushes them
//! into the page cache as soon as each file is first read.
//!
//! With its blocks kept (image/sqfs/kept.rs) a start decompresses nothing, but its command still
//! waits on FUSE round trips: the loader and the libraries fault their pages in one READ at a
//! time. `exec true` from a Debian image made 18 READs after its exec, each a wake-up of the
//! server and then of the command: 1.6 ms of a 6.2 ms start on a 2-CPU
//! machine. The pages a command needs are the same from one start to the next. So the server
//! notes the ranges a start reads (file, offset, length), they are kept in the user's cache
//! (`image-reads/`, one small file per image file, beside the kept blocks), and at the next
//! start, on the first READ of a file (the proof that the kernel has its inode: a push before
//! that finds none), the rest of that file's ranges go to the pusher (runtime/prefetch.rs), which
//! stores them in the page cache (FUSE_NOTIFY_STORE) while the container is still being set up.
//! The file is rewritten only when a start reads something not kept yet, up to `MAX_BYTES`.

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::lock;

const HEAD: &str = "gpurun-kept-reads 1";
/// What a start notes at most: its start-up, not all of a job's reads.
const RECORD_BYTES: u64 = 16 << 20;
const RECORD_READS: usize = 4096;
/// What a file keeps at most (`union`), and what a kept file may hold to be used at all: a
/// damaged or edited one must not make a start push gigabytes or parse megabytes.
const MAX_BYTES: u64 = 32 << 20;
const MAX_RANGES: usize = 2 * RECORD_READS;
const MAX_FILE: u64 = 1 << 20;

/// A range of an image file read by a start: the file's squashfs inode reference, then bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct FileRange {
    inode: u64,
    off: u64,
    len: u64,
}

impl FileRange {
    fn end(&self) -> u64 {
        self.off.saturating_add(self.len)
    }
}

/// The ranges of one image's files kept by earlier starts, and those this start reads.
pub struct KeptReads {
    /// The file and the id it must hold (the image's identity and gpurun's build); None where
    /// nothing is kept (no private cache).
    file: Option<(PathBuf, String)>,
    kept: Vec<FileRange>,
    /// What is still to be pushed, by inode reference: taken on the file's first read.
    due: Mutex<HashMap<u64, Vec<Range<u64>>>>,
    /// This start's reads, and their bytes.
    seen: Mutex<(Vec<FileRange>, u64)>,
    recording: AtomicBool,
}

impl KeptReads {
    /// The ranges kept in `file` for its id; none when it is missing, damaged or another's.
    pub fn load(file: Option<(PathBuf, String)>) -> KeptReads {
        let kept = (file.as_ref())
            .and_then(|(f, id)| {
                use std::io::Read;
                let mut text = String::new();
                let f = std::fs::File::open(f).ok()?;
                // One byte more than allowed: a longer file is refused, not cut.
                f.take(MAX_FILE + 1).read_to_string(&mut text).ok()?;
                (text.len() as u64 <= MAX_FILE).then(|| parse(&text, id))?
            })
            .unwrap_or_default();
        let mut due: HashMap<u64, Vec<Range<u64>>> = HashMap::new();
        for r in &kept {
            due.entry(r.inode).or_default().push(r.off..r.end());
        }
        KeptReads {
            recording: AtomicBool::new(file.is_some()),
            file,
            kept,
            due: Mutex::new(due),
            seen: Mutex::new((Vec::new(), 0)),
        }
    }

    /// A READ of `len` bytes at `off` in the file of inode reference `inode`: noted, and on
    /// the file's first read, what is kept of it and not read now, to push.
    pub fn on_read(&self, inode: u64, off: u64, len: u64) -> Vec<Range<u64>> {
        if self.recording.load(Ordering::Relaxed) && len > 0 {
            let (seen, total) = &mut *lock(&self.seen);
            if seen.len() < RECORD_READS && *total + len <= RECORD_BYTES {
                seen.push(FileRange { inode, off, len });
                *total += len;
            } else {
                self.recording.store(false, Ordering::Relaxed);
            }
        }
        let Some(spans) = lock(&self.due).remove(&inode) else {
            return Vec::new();
        };
        spans
            .into_iter()
            .flat_map(|s| minus(s, off..off.saturating_add(len)))
            .collect()
    }

    /// Where they are kept, and for which id.
    pub fn file(&self) -> Option<&(PathBuf, String)> {
        self.file.as_ref()
    }

    /// Keep what this start read with what was kept, when it read anything new. Ok(true) when
    /// the file was written.
    pub fn keep(&self) -> std::io::Result<bool> {
        let Some((file, id)) = &self.file else {
            return Ok(false);
        };
        let seen = lock(&self.seen).0.clone();
        let Some(all) = union(&self.kept, &seen) else {
            return Ok(false);
        };
        crate::image::cache::write_whole(file, |f| {
            std::io::Write::write_all(f, encode(id, &all).as_bytes())
        })?;
        Ok(true)
    }
}

/// `s` without `hole`: none, one or two spans.
fn minus(s: Range<u64>, hole: Range<u64>) -> impl Iterator<Item = Range<u64>> {
    let before = s.start..s.end.min(hole.start);
    let after = s.start.max(hole.end)..s.end;
    [before, after].into_iter().filter(|x| x.start < x.end)
}

/// Sorted, with the ranges of a file that overlap or touch made one.
fn normalize(mut v: Vec<FileRange>) -> Vec<FileRange> {
    v.retain(|r| r.len > 0);
    v.sort();
    let mut out: Vec<FileRange> = Vec::with_capacity(v.len());
    for r in v {
        match out.last_mut() {
            Some(l) if l.inode == r.inode && r.off <= l.end() => {
                l.len = l.end().max(r.end()) - l.off;
            }
            _ => out.push(r),
        }
    }
    out
}

/// Their bytes in all; None past u64 (a damaged file).
fn bytes(v: &[FileRange]) -> Option<u64> {
    v.iter().try_fold(0u64, |t, r| t.checked_add(r.len))
}

/// What to keep: `kept` with `new` added; None when `new` adds nothing. Past `MAX_BYTES`, this
/// start's reads alone: what is kept follows what the image is used for now, rather than stay
/// with the first starts for good. Of a file read in a single READ nothing is added: at the next
/// start that READ is the first, and nothing is left to push (most files a job reads are small
/// ones, read whole at once).
fn union(kept: &[FileRange], new: &[FileRange]) -> Option<Vec<FileRange>> {
    let mut reads_of: HashMap<u64, usize> = HashMap::new();
    for r in new {
        *reads_of.entry(r.inode).or_default() += 1;
    }
    let new: Vec<FileRange> = new
        .iter()
        .filter(|r| reads_of[&r.inode] > 1)
        .copied()
        .collect();
    // `kept` is as `parse` took it: normalized already.
    let before = bytes(kept)?;
    let all = normalize(kept.iter().chain(&new).copied().collect());
    let after = bytes(&all)?;
    if after <= before {
        return None;
    }
    if after <= MAX_BYTES {
        return Some(all);
    }
    let new = normalize(new);
    (bytes(&new)? <= MAX_BYTES).then_some(new)
}

fn encode(id: &str, reads: &[FileRange]) -> String {
    let mut s = format!("{HEAD}\n{id}\n");
    for r in reads {
        s.push_str(&format!("{} {} {}\n", r.inode, r.off, r.len));
    }
    s
}

/// The ranges of a kept file's `text` when it is whole, was written for `id`, and is as `encode`
/// writes them (`normalize`d: sorted, apart) and no larger than what a start may keep.
fn parse(text: &str, id: &str) -> Option<Vec<FileRange>> {
    let mut lines = text.strip_suffix('\n')?.split('\n');
    if lines.next()? != HEAD || lines.next()? != id {
        return None;
    }
    let reads = lines
        .take(MAX_RANGES + 1)
        .map(|l| {
            let mut n = l.split(' ').map(|x| x.parse::<u64>().ok());
            let r = FileRange {
                inode: n.next()??,
                off: n.next()??,
                len: n.next()??,
            };
            (n.next().is_none() && r.len > 0 && r.off.checked_add(r.len).is_some()).then_some(r)
        })
        .collect::<Option<Vec<FileRange>>>()?;
    let apart = reads.windows(2).all(|w| {
        (w[0].inode, w[0].off) < (w[1].inode, w[1].off)
            && (w[0].inode != w[1].inode || w[0].end() < w[1].off)
    });
    (apart && reads.len() <= MAX_RANGES && bytes(&reads)? <= MAX_BYTES).then_some(reads)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(inode: u64, off: u64, len: u64) -> FileRange {
        FileRange { inode, off, len }
    }

    #[test]
    fn ranges_merge_per_file() {
        let cases: &[(&str, Vec<FileRange>, Vec<FileRange>)] = &[
            ("empty", vec![], vec![]),
            (
                "touching ranges become one",
                vec![r(1, 4096, 4096), r(1, 0, 4096)],
                vec![r(1, 0, 8192)],
            ),
            (
                "overlapping and contained ones too",
                vec![r(1, 0, 8192), r(1, 4096, 8192), r(1, 100, 10)],
                vec![r(1, 0, 12288)],
            ),
            (
                "a gap keeps them apart",
                vec![r(1, 0, 4096), r(1, 8192, 4096)],
                vec![r(1, 0, 4096), r(1, 8192, 4096)],
            ),
            (
                "other files never merge",
                vec![r(2, 0, 4096), r(1, 4096, 4096)],
                vec![r(1, 4096, 4096), r(2, 0, 4096)],
            ),
            ("empty ranges go", vec![r(1, 0, 0)], vec![]),
        ];
        for (name, input, want) in cases {
            assert_eq!(&normalize(input.clone()), want, "{name}");
        }
    }

    #[test]
    fn a_start_adds_what_it_read_anew_while_it_fits() {
        let kept = vec![r(1, 0, 8192)];
        type Case = (&'static str, Vec<FileRange>, Option<Vec<FileRange>>);
        let cases: &[Case] = &[
            ("nothing read", vec![], None),
            ("only what is kept", vec![r(1, 4096, 4096)], None),
            (
                "a new range of a kept file",
                vec![r(1, 0, 4096), r(1, 8192, 4096)],
                Some(vec![r(1, 0, 12288)]),
            ),
            (
                "a new file",
                vec![r(7, 0, 100), r(7, 200, 100)],
                Some(vec![r(1, 0, 8192), r(7, 0, 100), r(7, 200, 100)]),
            ),
            ("a file read in one READ", vec![r(7, 0, 100)], None),
            (
                "past the limit: this start's reads alone",
                vec![r(9, 0, MAX_BYTES - 4096), r(9, MAX_BYTES - 4096, 4096)],
                Some(vec![r(9, 0, MAX_BYTES)]),
            ),
            (
                "and those past it too: kept as it is",
                vec![r(9, 0, MAX_BYTES), r(9, MAX_BYTES, 1)],
                None,
            ),
        ];
        for (name, new, want) in cases {
            assert_eq!(&union(&kept, new), want, "{name}");
        }
    }

    #[test]
    fn what_is_written_is_read_back_for_its_id_only() {
        let reads = vec![r(1, 0, 4096), r(3, 8192, 100)];
        let text = encode("img:1", &reads);
        assert_eq!(parse(&text, "img:1"), Some(reads));
        assert_eq!(parse(&text, "img:2"), None, "another image or build");
        for bad in [
            "".to_string(),
            text.replace("kept-reads 1", "kept-reads 2"),
            text.replace("8192 100", "8192"),
            text.replace("8192 100", "8192 100 1"),
            text.replace("8192 100", "8192 0"),
            text.replace("8192 100", "x 100"),
            text.trim_end().to_string(),
            format!("{HEAD}\nimg:1\n1 0 {}\n", MAX_BYTES + 1),
            // lengths that wrap around when added
            format!(
                "{HEAD}\nimg:1\n1 0 {0}\n2 0 {0}\n3 0 {0}\n4 0 {0}\n",
                1u64 << 63
            ),
            format!("{HEAD}\nimg:1\n1 0 4096\n1 0 4096\n"),
            format!("{HEAD}\nimg:1\n1 0 4096\n1 4096 4096\n"),
            format!("{HEAD}\nimg:1\n2 0 4096\n1 0 4096\n"),
            format!(
                "{HEAD}\nimg:1\n{}",
                (0..=MAX_RANGES as u64)
                    .map(|i| format!("1 {} 1\n", 2 * i))
                    .collect::<String>()
            ),
        ] {
            assert_eq!(parse(&bad, "img:1"), None, "{bad:?}");
        }
    }

    #[test]
    fn a_files_first_read_takes_its_ranges_less_that_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.reads");
        let kept = vec![r(1, 0, 262144), r(1, 524288, 4096), r(2, 0, 4096)];
        std::fs::write(&file, encode("id", &kept)).unwrap();
        let k = KeptReads::load(Some((file.clone(), "id".into())));
        assert_eq!(
            k.on_read(1, 131072, 4096),
            vec![0..131072, 135168..262144, 524288..528384]
        );
        assert_eq!(k.on_read(1, 0, 4096), vec![], "only on the first read");
        assert_eq!(k.on_read(3, 0, 4096), vec![], "nothing kept of it");
        assert_eq!(k.on_read(3, 65536, 4096), vec![]);
        // what this start read that was not kept is added, and only then is the file written
        assert!(k.keep().unwrap());
        let again = KeptReads::load(Some((file.clone(), "id".into())));
        let read = vec![r(3, 0, 4096), r(3, 65536, 4096)];
        assert_eq!(again.kept, normalize([kept, read].concat()));
        assert!(!again.keep().unwrap(), "nothing new read");
        again.on_read(2, 0, 4096);
        assert!(!again.keep().unwrap(), "nothing new read");
        let other = KeptReads::load(Some((file, "another".into())));
        assert_eq!(other.on_read(1, 0, 4096), vec![], "kept for another id");
    }
}

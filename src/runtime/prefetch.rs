//! Directory-scan readahead for the FUSE server.
//!
//! A program that reads the files of a directory in listing order (tar, cp -r, rsync, a
//! checksum over a tree) waits one FUSE round trip per file, and on a VM a round trip costs
//! more than decompressing a small file. Once two reads in a row follow the listing, the next
//! files are decompressed on a background thread and pushed into the kernel's page cache
//! (FUSE_NOTIFY_STORE), so the program finds them there. The kernel's own readahead cannot do
//! this: it never crosses from one file to the next. Random access (imports, library loads)
//! never looks like a scan and pays nothing but one map lookup per read.
//!
//! The same thread pushes the ranges of a file that earlier starts read (runtime/kept_reads.rs),
//! once the file is first read.
//!
//! A store waits, unkillably, for a page that a READ holds. Should gpurun be killed then, the
//! READ must still end: it ends when the descriptor of the thread that took it is closed (or
//! when the connection is aborted, runtime/launch.rs). So the pusher holds descriptors of its
//! own only (`sys::own_fd_table`): the image, and a /dev/fuse of its own to store through; the
//! serving threads' descriptors then close with them, whatever the pusher waits on.

use std::collections::HashMap;
use std::ops::Range;
use std::os::fd::{OwnedFd, RawFd};
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use crate::image::sqfs::{Archive, Kind};
use crate::runtime::sys;

/// Entries pushed ahead of the reader when a scan is seen (or catches up with the pushes).
pub const WINDOW: u32 = 32;
/// Larger files are left to the kernel's readahead, which handles one big file well.
pub const MAX_FILE: u64 = 1 << 20;
/// Bytes stored in one go. A store is one syscall that copies page after page; while a long one
/// runs, a request the server's thread on this CPU must answer waits (kept reads of `exec true`
/// stored a range at a time, up to 315 KB: 6.65 against 6.35 ms in 128 KiB steps, interleaved
/// on a 2-CPU machine).
const STORE_BYTES: u64 = 128 << 10;

/// Where each scan of a directory has got to. Pure bookkeeping, no I/O.
#[derive(Default)]
pub struct ScanTracker {
    dirs: HashMap<u64, DirScan>,
}

#[derive(Default)]
struct DirScan {
    /// Listing index of the last file read from its start.
    last: Option<u32>,
    /// Entries below this index have been pushed already.
    pushed: u32,
}

impl ScanTracker {
    /// A read from the start of entry `idx` of directory `dir`, which has `len` entries. Returns
    /// the entries to push when the read continues a scan in listing order: right after the
    /// previous file read, or at the first entry not yet pushed (the pushed ones in between
    /// were served from the page cache, so their reads never reached us).
    pub fn on_read(&mut self, dir: u64, idx: u32, len: u32) -> Option<Range<u32>> {
        let s = self.dirs.entry(dir).or_default();
        let scan = matches!(s.last, Some(l) if idx > l && idx <= l.saturating_add(1).max(s.pushed));
        s.last = Some(idx);
        if !scan {
            return None;
        }
        let from = idx.saturating_add(1).max(s.pushed);
        let to = idx.saturating_add(1 + WINDOW).min(len);
        if from >= to {
            return None;
        }
        s.pushed = to;
        Some(from..to)
    }
}

/// A file to push: its FUSE inode number, its squashfs inode reference, and what of it.
pub struct Job {
    pub ino: u64,
    pub inode_ref: u64,
    pub part: Part,
}

pub enum Part {
    /// All of a file of at most `MAX_FILE` bytes (a scan).
    Whole,
    /// These byte ranges (kept reads).
    Ranges(Vec<Range<u64>>),
}

/// Push what is sent on `jobs` into the page cache of the connection of `session` until every
/// sender is gone (the FUSE session ended) or the mount is. Run on a thread of its own: it
/// takes a table of descriptors of its own first, and pushes nothing where it cannot.
pub fn run(ar: Arc<Archive>, session: RawFd, jobs: Receiver<Job>) {
    let Ok(fuse) = own_descriptors(&ar, session) else {
        return;
    };
    let mut buf = Vec::new();
    for job in jobs {
        let Ok(ino) = ar.inode(job.inode_ref) else {
            continue;
        };
        if ino.kind != Kind::File {
            continue;
        }
        let ranges = match job.part {
            Part::Whole if ino.size <= MAX_FILE => std::iter::once(0..ino.size).collect(),
            Part::Whole => continue,
            Part::Ranges(r) => r,
        };
        let steps = ranges.into_iter().flat_map(|r| {
            let end = r.end.min(ino.size);
            (r.start..end)
                .step_by(STORE_BYTES as usize)
                .map(move |at| at..at.saturating_add(STORE_BYTES).min(end))
        });
        for r in steps {
            buf.resize((r.end - r.start) as usize, 0);
            // A damaged block is reported by the read that needs it, not here.
            let Ok(n) = ar.read_at(&ino, r.start, &mut buf) else {
                continue;
            };
            // An inode the kernel has forgotten (ENOENT, also once unmounted) is no error.
            let _ = sys::notify_store(&fuse, job.ino, r.start, &buf[..n]);
        }
    }
}

/// This thread's own table of descriptors: the image's, and a clone of `session` to store
/// through. (Should this thread drop the last reference to the archive, the image's descriptor
/// in the process's table stays open: the session is over by then.)
fn own_descriptors(ar: &Archive, session: RawFd) -> Result<OwnedFd, sys::SysError> {
    sys::own_fd_table(&[ar.raw_fd(), session])?;
    let fuse = sys::clone_fuse(session);
    // Not the session's own: a READ taken through it must end when the server's threads do.
    let _ = nix::unistd::close(session);
    fuse
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (directory, entry) read, and what it must push.
    type Read = (u64, u32, Option<Range<u32>>);

    /// Each case: a listing length, then reads in order.
    #[test]
    fn scans_in_listing_order_push_ahead_and_nothing_else_does() {
        let w = WINDOW;
        let cases: &[(&str, u32, &[Read])] = &[
            ("a first read pushes nothing", 100, &[(1, 0, None)]),
            ("nor one in the middle", 100, &[(1, 5, None)]),
            (
                "two reads in order push a window",
                100,
                &[(1, 0, None), (1, 1, Some(2..2 + w))],
            ),
            (
                // entries 2..2+w come from the page cache: the next read seen is the first
                // entry not pushed
                "the reader reaching the end of the window pushes the next one",
                100,
                &[
                    (1, 0, None),
                    (1, 1, Some(2..2 + w)),
                    (1, 2 + w, Some(3 + w..3 + 2 * w)),
                ],
            ),
            (
                "a read the pusher has not reached keeps the window one ahead",
                100,
                &[
                    (1, 0, None),
                    (1, 1, Some(2..2 + w)),
                    (1, 2, Some(2 + w..3 + w)),
                ],
            ),
            (
                "random order is not a scan",
                100,
                &[
                    (1, 10, None),
                    (1, 3, None),
                    (1, 50, None),
                    (1, 7, None),
                    (1, 7, None),
                ],
            ),
            (
                "skipping ahead is not a scan",
                100,
                &[(1, 0, None), (1, 2, None), (1, 9, None)],
            ),
            (
                "the window stops at the end of the listing",
                5,
                &[(1, 0, None), (1, 1, Some(2..5)), (1, 4, None)],
            ),
            (
                "nothing after the last entry",
                2,
                &[(1, 0, None), (1, 1, None)],
            ),
            (
                "directories are tracked apart",
                100,
                &[
                    (1, 0, None),
                    (2, 0, None),
                    (2, 1, Some(2..2 + w)),
                    (1, 1, Some(2..2 + w)),
                ],
            ),
        ];
        for (name, len, reads) in cases {
            let mut t = ScanTracker::default();
            for (i, (dir, idx, want)) in reads.iter().enumerate() {
                let got = t.on_read(*dir, *idx, *len);
                assert_eq!(got, *want, "{name}: read #{i} (dir {dir} entry {idx})");
            }
        }
    }
}

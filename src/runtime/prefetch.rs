//! Directory-scan readahead for the FUSE server.
//!
//! A program that reads the files of a directory in listing order (tar, cp -r, rsync, a
//! checksum over a tree) waits one FUSE round trip per file, and on a VM a round trip costs
//! more than decompressing a small file. Once two reads in a row follow the listing, the next
//! files are decompressed on a background thread and pushed into the kernel's page cache
//! (FUSE_NOTIFY_STORE), so the program finds them there. The kernel's own readahead cannot do
//! this: it never crosses from one file to the next. Random access (imports, library loads)
//! never looks like a scan and pays nothing but one map lookup per read.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use fuser::{INodeNo, Notifier};

use crate::image::sqfs::{Archive, Kind};

/// Entries pushed ahead of the reader when a scan is seen (or catches up with the pushes).
pub const WINDOW: u32 = 32;
/// Larger files are left to the kernel's readahead, which handles one big file well.
pub const MAX_FILE: u64 = 1 << 20;

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

/// A file to push: its FUSE inode number and its squashfs inode reference.
pub struct Job {
    pub ino: u64,
    pub inode_ref: u64,
}

/// Push the files sent on `jobs` into the page cache until every sender is gone (the FUSE
/// session ended) or the mount is.
pub fn run(ar: Arc<Archive>, notifier: Notifier, jobs: Receiver<Job>) {
    let mut buf = Vec::new();
    for job in jobs {
        let Ok(ino) = ar.inode(job.inode_ref) else {
            continue;
        };
        if ino.kind != Kind::File || ino.size == 0 || ino.size > MAX_FILE {
            continue;
        }
        buf.resize(ino.size as usize, 0);
        // A damaged block is reported by the read that needs it, not here.
        let Ok(n) = ar.read_at(&ino, 0, &mut buf) else {
            continue;
        };
        // ENOENT: the kernel has forgotten the inode, nothing to do. ENODEV: unmounted.
        if let Err(e) = notifier.store(INodeNo(job.ino), 0, &buf[..n]) {
            if e.raw_os_error() == Some(libc::ENODEV) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (directory, index) reads in order, and what each must push.
    fn check(len: u32, reads: &[(u64, u32, Option<Range<u32>>)]) {
        let mut t = ScanTracker::default();
        for (i, (dir, idx, want)) in reads.iter().enumerate() {
            assert_eq!(
                t.on_read(*dir, *idx, len),
                *want,
                "read #{i}: dir {dir} entry {idx}"
            );
        }
    }

    #[test]
    fn first_read_of_a_directory_pushes_nothing() {
        check(100, &[(1, 0, None)]);
        check(100, &[(1, 5, None)]);
    }

    #[test]
    fn two_reads_in_listing_order_push_a_window() {
        check(100, &[(1, 0, None), (1, 1, Some(2..2 + WINDOW))]);
    }

    #[test]
    fn next_window_when_the_reader_reaches_the_first_entry_not_pushed() {
        let end = 2 + WINDOW;
        check(
            100,
            &[
                (1, 0, None),
                (1, 1, Some(2..end)),
                // entries 2..end come from the page cache; the next read we see is `end`
                (1, end, Some(end + 1..end + 1 + WINDOW)),
            ],
        );
    }

    #[test]
    fn a_read_the_pusher_had_not_reached_pushes_nothing_new() {
        check(
            100,
            &[
                (1, 0, None),
                (1, 1, Some(2..2 + WINDOW)),
                (1, 2, Some(2 + WINDOW..3 + WINDOW)),
            ],
        );
    }

    #[test]
    fn random_order_is_not_a_scan() {
        check(
            100,
            &[
                (1, 10, None),
                (1, 3, None),
                (1, 50, None),
                (1, 7, None),
                (1, 7, None),
            ],
        );
    }

    #[test]
    fn skipping_ahead_is_not_a_scan() {
        check(100, &[(1, 0, None), (1, 2, None), (1, 9, None)]);
    }

    #[test]
    fn the_window_stops_at_the_end_of_the_listing() {
        check(5, &[(1, 0, None), (1, 1, Some(2..5)), (1, 4, None)]);
        check(2, &[(1, 0, None), (1, 1, None)]);
    }

    #[test]
    fn directories_are_tracked_apart() {
        check(
            100,
            &[
                (1, 0, None),
                (2, 0, None),
                (2, 1, Some(2..2 + WINDOW)),
                (1, 1, Some(2..2 + WINDOW)),
            ],
        );
    }
}

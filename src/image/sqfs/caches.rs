//! The reader's caches: metadata blocks, data blocks (with the loads under way), parsed inodes
//! and directory listings, each bounded.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use lru::LruCache;

use super::blocks::Block;
use super::format::DirEntry;
use super::inode::Inode;
use crate::lock;

pub(super) struct Caches {
    pub(super) meta: Mutex<LruCache<u64, Arc<MetaBlock>>>,
    pub(super) data: Mutex<LruCache<u64, Arc<Block>>>,
    /// Data blocks being decompressed (their image offsets).
    pub(super) loading: Mutex<HashSet<u64>>,
    pub(super) loaded: Condvar,
    pub(super) inodes: Mutex<Weighted<Inode>>,
    pub(super) dirs: Mutex<Weighted<Vec<DirEntry>>>,
}

/// An LRU bounded by the bytes its values hold rather than by their count: parsed inodes and
/// listings vary from a few bytes to megabytes (a huge file's block list, a huge directory).
pub(super) struct Weighted<V> {
    lru: LruCache<u64, (Arc<V>, usize)>,
    total: usize,
    budget: usize,
}

impl<V> Weighted<V> {
    pub(super) fn new(budget: usize) -> Weighted<V> {
        Weighted {
            lru: LruCache::unbounded(),
            total: 0,
            budget,
        }
    }

    pub(super) fn get(&mut self, k: u64) -> Option<Arc<V>> {
        self.lru.get(&k).map(|(v, _)| v.clone())
    }

    pub(super) fn put(&mut self, k: u64, v: Arc<V>, weight: usize) {
        if weight > self.budget / 4 {
            return; // one value must not flush everything else
        }
        if let Some((_, old)) = self.lru.put(k, (v, weight)) {
            self.total -= old;
        }
        self.total += weight;
        while self.total > self.budget {
            match self.lru.pop_lru() {
                Some((_, (_, w))) => self.total -= w,
                None => break,
            }
        }
    }
}

/// How long a reader waits for a block another reader is decompressing before it decompresses
/// the block itself: a load takes well under this (a 128 KiB zstd block ~0.2 ms, xz ~2 ms), unless
/// its thread lost its CPU on a busy machine.
#[cfg(not(test))]
pub(super) const LOAD_WAIT: Duration = Duration::from_millis(5);
/// Tests tell a wait that ran out from one that was woken: on a busy test machine a wake-up alone
/// can take milliseconds.
#[cfg(test)]
pub(super) const LOAD_WAIT: Duration = Duration::from_millis(50);

/// Takes a load off the loading set and wakes its waiters, however it ended (a waiter finding no
/// block in the cache then loads it itself, and meets the error on its own).
pub(super) struct Loading<'a>(pub(super) &'a Caches, pub(super) u64);

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        lock(&self.0.loading).remove(&self.1);
        self.0.loaded.notify_all();
    }
}

pub(super) struct MetaBlock {
    /// Decompressed, or served from a kept-blocks file (kept.rs) without a copy.
    pub(super) data: Block,
    /// Image offset of the following metadata block.
    pub(super) next: u64,
}

/// Sizes of the caches. Metadata is what makes lookups fast (the prototype's edge over the
/// kernel came from keeping it in RAM), so it gets a generous bound; data blocks are re-read
/// from the page cache cheaply.
pub(super) const META_CACHE_BLOCKS: usize = 8192; // 64 MiB at most
pub(super) const DATA_CACHE_BYTES: usize = 64 << 20;
pub(super) const INODE_CACHE_BYTES: usize = 32 << 20;
pub(super) const DIR_CACHE_BYTES: usize = 32 << 20;

pub(super) fn cache<K: std::hash::Hash + Eq, V>(n: usize) -> Mutex<LruCache<K, V>> {
    Mutex::new(LruCache::new(NonZeroUsize::new(n.max(1)).unwrap()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_cache_keeps_to_its_budget() {
        let mut c = Weighted::new(100);
        for k in 0..10 {
            c.put(k, Arc::new(k), 20);
        }
        assert!(c.total <= 100);
        assert!(c.get(0).is_none(), "oldest evicted");
        assert_eq!(c.get(9).as_deref(), Some(&9));
        c.put(3, Arc::new(3), 20);
        c.put(3, Arc::new(33), 10);
        assert_eq!(c.get(3).as_deref(), Some(&33));
        assert_eq!(c.total, c.lru.iter().map(|(_, (_, w))| w).sum::<usize>());
        c.put(99, Arc::new(99), 60); // more than a quarter: not cached
        assert!(c.get(99).is_none());
    }
}

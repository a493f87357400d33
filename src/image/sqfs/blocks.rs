//! Memory for decompressed data blocks: one region, reserved once per image, whose block-sized
//! slots are reused, backed by transparent huge pages where the kernel allows it.
//!
//! glibc maps a 128 KiB allocation afresh and unmaps it when freed, so a block of its own costs
//! 32 page faults each time; in 2 MiB pages (MADV_HUGEPAGE) sixteen blocks take one. The region
//! is not inherited by forks (MADV_DONTFORK): the container process never reads blocks, and a
//! copy-on-write huge page would cost a 2 MiB copy to whichever side wrote it first.
//!
//! With the kernel's default THP defrag setting ("madvise"), a fault in such a region may compact
//! memory to find a huge page; where none can be had, it falls back to small pages.

use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use super::kept::Kept;

const HUGE_PAGE: usize = 2 << 20;

/// The region and which of its slots are free.
pub struct Arena {
    /// The mapping as made (unaligned), for munmap.
    map: NonNull<u8>,
    map_len: usize,
    /// The first slot, 2 MiB-aligned inside the mapping.
    base: NonNull<u8>,
    slot: usize,
    slots: usize,
    state: Mutex<Slots>,
}

struct Slots {
    /// Slots below this index have been handed out at least once.
    next: usize,
    free: Vec<usize>,
}

// SAFETY: the region is only reached through `Block`s, each the sole owner of its slot while it
// lives (the free list hands a slot out once at a time); `Arena` itself only keeps the list.
unsafe impl Send for Arena {}
// SAFETY: as Send above: every slot has one owner, so shared `&Arena`s touch no slot.
unsafe impl Sync for Arena {}

impl Arena {
    /// A region of `slots` slots of `slot` bytes; None when it cannot be mapped (then blocks
    /// are plain allocations).
    pub fn new(slot: usize, slots: usize) -> Option<Arc<Arena>> {
        let len = slot.checked_mul(slots)?;
        let map_len = len.checked_add(HUGE_PAGE)?;
        // SAFETY: a fresh anonymous private mapping; nothing else refers to it.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return None;
        }
        let base = (map as usize).next_multiple_of(HUGE_PAGE);
        // SAFETY: advice on a range inside the mapping just made. Best effort: without huge
        // pages the slots still work, in small pages.
        unsafe {
            libc::madvise(base as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
            libc::madvise(map, map_len, libc::MADV_DONTFORK);
        }
        Some(Arc::new(Arena {
            map: NonNull::new(map as *mut u8)?,
            map_len,
            base: NonNull::new(base as *mut u8)?,
            slot,
            slots,
            state: Mutex::new(Slots {
                next: 0,
                free: Vec::new(),
            }),
        }))
    }

    /// A block of at most `len` bytes (the slot size at most) filled by `fill`, which writes
    /// into the buffer it is given and returns how many bytes it wrote. The block is in a slot
    /// when one is free, else a plain allocation (blocks held past their eviction can outnumber
    /// the slots).
    pub fn block<E>(
        self: &Arc<Arena>,
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<Block, E> {
        let index = (len <= self.slot).then(|| self.take()).flatten();
        let Some(index) = index else {
            let mut v = vec![0u8; len];
            let n = fill(&mut v)?;
            v.truncate(n);
            return Ok(Block(Memory::Heap(v)));
        };
        // Returned to the free list if `fill` fails.
        let mut b = Slot {
            arena: self.clone(),
            index,
            len: 0,
        };
        // SAFETY: slot `index` is this block's alone until it is dropped (`take`), and lies
        // inside the mapping, which the Arc keeps alive.
        let buf = unsafe {
            std::slice::from_raw_parts_mut(self.base.as_ptr().add(index * self.slot), len)
        };
        b.len = fill(buf)?.min(len);
        Ok(Block(Memory::Slot(b)))
    }

    fn take(&self) -> Option<usize> {
        let mut s = crate::lock(&self.state);
        if let Some(i) = s.free.pop() {
            return Some(i);
        }
        (s.next < self.slots).then(|| {
            s.next += 1;
            s.next - 1
        })
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; every Block holds the Arc, so none is left.
        unsafe { libc::munmap(self.map.as_ptr() as *mut libc::c_void, self.map_len) };
    }
}

/// A decompressed data block.
pub struct Block(Memory);

enum Memory {
    Slot(Slot),
    Heap(Vec<u8>),
    /// `len` bytes at `off` in a kept-blocks file (kept.rs).
    Kept {
        file: Arc<Kept>,
        off: usize,
        len: usize,
    },
}

struct Slot {
    arena: Arc<Arena>,
    index: usize,
    len: usize,
}

impl Drop for Slot {
    fn drop(&mut self) {
        crate::lock(&self.arena.state).free.push(self.index);
    }
}

impl Block {
    /// A block in an ordinary allocation (no arena).
    pub fn from_vec(v: Vec<u8>) -> Block {
        Block(Memory::Heap(v))
    }

    /// A block served from a kept-blocks file, where `Kept::find` located it.
    pub fn kept(file: Arc<Kept>, (off, len): (usize, usize)) -> Block {
        Block(Memory::Kept { file, off, len })
    }
}

impl Deref for Block {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            // SAFETY: the slot is this block's alone, inside the live mapping, and `len` bytes
            // of it were written by `fill`.
            Memory::Slot(s) => unsafe {
                std::slice::from_raw_parts(s.arena.base.as_ptr().add(s.index * s.arena.slot), s.len)
            },
            Memory::Heap(v) => v,
            Memory::Kept { file, off, len } => file.bytes_at(*off, *len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill_with(byte: u8, n: usize) -> impl FnOnce(&mut [u8]) -> Result<usize, ()> {
        move |b: &mut [u8]| {
            b[..n].fill(byte);
            Ok(n)
        }
    }

    #[test]
    fn slots_are_reused_and_hold_their_own_data() {
        let a = Arena::new(4096, 2).unwrap();
        let x = a.block(4096, fill_with(1, 100)).unwrap();
        let y = a.block(4096, fill_with(2, 4096)).unwrap();
        assert!(matches!(x.0, Memory::Slot(_)) && matches!(y.0, Memory::Slot(_)));
        assert_eq!((x.len(), y.len()), (100, 4096));
        assert!(x.iter().all(|&b| b == 1) && y.iter().all(|&b| b == 2));
        // Both slots taken: the next block is a plain allocation.
        let z = a.block(4096, fill_with(3, 10)).unwrap();
        assert!(matches!(z.0, Memory::Heap(_)));
        assert_eq!(&*z, &[3u8; 10]);
        // A freed slot is handed out again, and the other block is untouched.
        drop(x);
        let w = a.block(4096, fill_with(4, 50)).unwrap();
        assert!(matches!(w.0, Memory::Slot(_)));
        assert!(w.iter().all(|&b| b == 4) && y.iter().all(|&b| b == 2));
    }

    #[test]
    fn a_failed_fill_gives_the_slot_back() {
        let a = Arena::new(4096, 1).unwrap();
        assert!(a.block(4096, |_| Err::<usize, _>("bad")).is_err());
        let b = a.block(4096, fill_with(5, 1)).unwrap();
        assert!(matches!(b.0, Memory::Slot(_)), "the slot was lost");
    }

    #[test]
    fn larger_than_a_slot_is_a_plain_allocation() {
        let a = Arena::new(4096, 4).unwrap();
        let b = a.block(8192, fill_with(6, 8192)).unwrap();
        assert!(matches!(b.0, Memory::Heap(_)));
        assert_eq!(b.len(), 8192);
    }

    #[test]
    fn threads_taking_and_dropping_blocks_each_keep_their_own() {
        let a = Arena::new(4096, 8).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let a = &a;
                s.spawn(move || {
                    for i in 0..500u32 {
                        let byte = t.wrapping_mul(61).wrapping_add(i as u8);
                        let b = a.block(4096, fill_with(byte, 4096)).unwrap();
                        std::thread::yield_now();
                        assert!(b.iter().all(|&x| x == byte), "a slot was shared");
                    }
                });
            }
        });
        // Every slot went back: all eight can be taken again.
        let all: Vec<_> = (0..8)
            .map(|_| a.block(4096, fill_with(1, 1)).unwrap())
            .collect();
        assert!(all.iter().all(|b| matches!(b.0, Memory::Slot(_))));
    }

    #[test]
    fn blocks_outlive_the_archive_handle() {
        let a = Arena::new(4096, 1).unwrap();
        let b = a.block(4096, fill_with(7, 8)).unwrap();
        drop(a);
        assert_eq!(&*b, &[7u8; 8]);
    }
}

//! Polling for the next FUSE request before sleeping.
//!
//! Every FUSE request is a round trip: the caller sleeps, a server thread wakes, answers, and
//! wakes the caller. Waking a thread that sleeps on an idle CPU costs about as much as answering
//! a small request (an IPI and, in a VM, a halt exit; on bare metal a C-state exit). So a thread
//! that has answered a request polls /dev/fuse for up to `WINDOW` before it goes back to sleep
//! in read(2), as NVMe hybrid polling does: while a command reads file after file, the next
//! request finds a thread awake. The poll yields the CPU to any other runnable thread (the
//! command, the pusher of a directory scan), so it only uses a CPU nothing else wants. An idle
//! container costs nothing (no request, no poll), and with one CPU gpurun never polls.
//!
//! On a machine busy with other work the poll stops for a while (runtime/step_aside.rs): there a
//! yield can hand the CPU to another process for a whole time slice, and a request that arrives
//! meanwhile waits, since nothing wakes a thread that is runnable already; and no CPU halts there,
//! so polling has nothing to win.
//!
//! Measured on a 2-CPU machine (benches/runtime.sh workloads, interleaved, medians of 8): 4,000
//! random small files 0.71 → 0.55 s, tar of /usr 0.56 → 0.51 s. Busy-waiting without yielding
//! slowed the tar instead (0.56 → 0.62 s: it took the CPU from the scan pusher). Deciding per
//! request whether a burst is on, by the time since the previous reply, was tried and dropped: a
//! thread woken from sleep sees its own wake-up latency in that gap, counts the request as no
//! burst, sleeps again, and bursts are seldom found (1,090 of 8,700 requests of the random read
//! still went through a sleeping thread, against 53 when every reply is followed by a poll).
//! Letting only one thread poll at a time was tried too: random files 0.53 → 0.59 s (slower
//! whenever the other thread, asleep, was the one the kernel woke for the request).
//!
//! A poll after the LOOKUP of a small file also stores the file's data into the page cache
//! (FUSE_NOTIFY_STORE), so that the caller's read finds it there instead of making a READ round
//! trip. The store can only succeed once the caller, woken by the reply, has made the inode
//! (before, the kernel answers ENOENT), and it must come before the caller's read a few µs later:
//! a polling thread, awake on its own CPU, retries it on every turn of its poll and mostly wins.
//! 4,000 random small files, 4,004 READs → 622, 0.43 → 0.33 s (extracted tree 0.36 s; a 2-CPU
//! machine, interleaved). A store waits for a page that a READ in flight
//! holds locked; the server therefore keeps one thread that never polls (`Linger::new`), asleep
//! in read(2), which answers that READ while a poller waits: without it, the only thread could
//! wait on a READ that only it would answer. Should gpurun die while a poller waits so, nothing
//! answers that READ: the container process then aborts the connection (runtime/launch.rs,
//! `gpurun_died`), and where it cannot, no store is made. Without the abort
//! 1 of 27 SIGKILLs of gpurun hung so, with it 0 of 80 (docs/security.md,
//! known gaps, for the kill of gpurun and its container at once).

use std::cell::Cell;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;

use super::step_aside::StepAside;
use super::sys;

/// How long a thread polls after a reply. Measured on the random small-file read of
/// benches/runtime.sh: 50 µs is shorter than the caller's own work between two reads (open,
/// read, write to a pipe) and saves little; 200 µs does as well as never sleeping.
const WINDOW: Duration = Duration::from_micros(200);
/// Files up to this size are stored after their LOOKUP: one READ's worth of a small file (the
/// random read's files are 1 B to 64 KiB).
pub const STORE_MAX: u64 = 64 << 10;

thread_local! {
    /// Whether this server thread polls: taken on its first request (`Linger::polls`).
    static POLLS: Cell<Option<bool>> = const { Cell::new(None) };
}

pub struct Linger {
    /// The FUSE device: a duplicate of the server's fd (the request queue is the connection's,
    /// so any of its fds shows a waiting request).
    fd: OwnedFd,
    /// Shared by the server's threads: none polls while the CPUs are contended.
    aside: StepAside,
    /// How many of the server's threads poll; the one left never does.
    pollers: usize,
    /// Threads that have taken their part so far.
    parts: AtomicUsize,
    /// Whether a poll may store a file (`fuse::serve`: only where the container can abort the
    /// connection).
    stores: bool,
}

impl Linger {
    /// For a server of `threads` threads: all poll, or, where they store (`stores`), all but
    /// one. `None` when polling would take a CPU from the command (`cpus` < 2), or no thread
    /// would be left to answer while a poller waits on a store.
    pub fn new(fd: OwnedFd, cpus: usize, threads: usize, stores: bool) -> Option<Linger> {
        (cpus >= 2 && threads > usize::from(stores)).then(|| Linger {
            fd,
            aside: StepAside::default(),
            pollers: threads - usize::from(stores),
            parts: AtomicUsize::new(0),
            stores,
        })
    }

    /// Call when a request arrives; the guard, dropped after the reply, polls.
    pub fn request(&self) -> Poll<'_> {
        Poll(self, None)
    }

    /// Whether the calling server thread is one that polls.
    fn polls(&self) -> bool {
        POLLS.with(|p| {
            let polls = p
                .get()
                .unwrap_or_else(|| self.parts.fetch_add(1, Ordering::Relaxed) < self.pollers);
            p.set(Some(polls));
            polls
        })
    }

    /// Poll for up to `WINDOW`, storing `store` meanwhile; whether a request is waiting.
    fn wait_for_request(&self, mut store: Option<Pending>) -> bool {
        if !self.polls() {
            return false;
        }
        // A poll must not slow the command, or the pusher of a directory scan, on this CPU: with
        // any of them runnable this thread steps aside.
        self.poll(sys::yield_cpu, || {
            let again = (store.as_mut()).is_some_and(|s| {
                s.turn(|ino, d| sys::notify_store(&self.fd, ino, 0, d).map_err(|e| e.errno()))
            });
            if !again {
                store = None;
            }
        })
    }

    /// `wait_for_request` with `yield_cpu` standing for the yield (tests), and `between` called
    /// on every turn while no request waits.
    fn poll(&self, mut yield_cpu: impl FnMut(), mut between: impl FnMut()) -> bool {
        if !self.aside.on() {
            return false;
        }
        let until = Instant::now() + WINDOW;
        loop {
            if sys::readable_now(&self.fd) {
                return true;
            }
            between();
            if Instant::now() >= until || !self.aside.step_aside_with(&mut yield_cpu) {
                return false;
            }
        }
    }
}

/// A store under way: the file's data is read on its first turn, when no request waits (one
/// waiting may be this very file's READ, which then reads it instead).
struct Pending<'a> {
    ino: u64,
    read: Option<Box<dyn FnOnce() -> Option<Vec<u8>> + 'a>>,
    data: Vec<u8>,
}

impl<'a> Pending<'a> {
    /// FUSE inode `ino`, whose data `read` gives.
    fn new(ino: u64, read: impl FnOnce() -> Option<Vec<u8>> + 'a) -> Pending<'a> {
        Pending {
            ino,
            read: Some(Box::new(read)),
            data: Vec::new(),
        }
    }

    /// One turn of the poll: try the store; whether to try again on the next (ENOENT: the
    /// caller has not made the inode yet; anything else, success included, ends it).
    fn turn(&mut self, store: impl FnOnce(u64, &[u8]) -> Result<(), Errno>) -> bool {
        if let Some(read) = self.read.take() {
            match read() {
                Some(d) => self.data = d,
                None => return false,
            }
        }
        store(self.ino, &self.data) == Err(Errno::ENOENT)
    }
}

pub struct Poll<'a>(&'a Linger, Option<Pending<'a>>);

impl<'a> Poll<'a> {
    /// After the reply, store the data `read` gives into FUSE inode `ino` while polling, where
    /// this thread polls and stores are made at all (else nothing is boxed or read).
    pub fn store(&mut self, ino: u64, read: impl FnOnce() -> Option<Vec<u8>> + 'a) {
        if self.0.stores && self.0.polls() {
            self.1 = Some(Pending::new(ino, read));
        }
    }
}

impl Drop for Poll<'_> {
    fn drop(&mut self) {
        self.0.wait_for_request(self.1.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cpu_never_polls() {
        let fd = || std::fs::File::open("/dev/null").unwrap().into();
        assert!(Linger::new(fd(), 1, 2, true).is_none());
        assert!(Linger::new(fd(), 2, 2, true).is_some());
        assert!(
            Linger::new(fd(), 2, 1, true).is_none(),
            "no thread left to answer"
        );
        let l = Linger::new(fd(), 2, 1, false).expect("one thread polls where none stores");
        assert_eq!(l.pollers, 1);
        assert_eq!(Linger::new(fd(), 2, 3, true).unwrap().pollers, 2);
    }

    #[test]
    fn polls_until_a_request_waits() {
        // A pipe stands in for /dev/fuse: readable means a request waits.
        // No real yield: on a busy test machine one could take long enough to back off. And a
        // fresh Linger for each half, in case being preempted did that.
        let (r, _w) = nix::unistd::pipe().unwrap();
        let l = Linger::new(r, 2, 2, true).unwrap();
        let t = Instant::now();
        assert!(!l.poll(|| {}, || {}));
        assert!(t.elapsed() >= WINDOW, "gave up before the window");
        let (r, w) = nix::unistd::pipe().unwrap();
        let l = Linger::new(r, 2, 2, true).unwrap();
        nix::unistd::write(&w, b"x").unwrap();
        assert!(l.poll(|| {}, || {}));
    }

    #[test]
    fn a_store_is_tried_until_the_inode_exists_and_no_longer() {
        let reads = std::cell::Cell::new(0);
        let store = || {
            Pending::new(7, || {
                reads.set(reads.get() + 1);
                Some(b"data".to_vec())
            })
        };
        // ENOENT twice, then stored: three turns, the file read once, each with the data.
        let mut p = store();
        let mut answers = [Err(Errno::ENOENT), Err(Errno::ENOENT), Ok(())].into_iter();
        let mut turns = 0;
        while p.turn(|ino, d| {
            assert_eq!((ino, d), (7, &b"data"[..]));
            answers.next().unwrap()
        }) {
            turns += 1;
        }
        assert_eq!((turns, reads.get()), (2, 1));
        // Any other answer ends it at once.
        let mut p = store();
        assert!(!p.turn(|_, _| Err(Errno::ENODEV)));
        // A file that cannot be read is never stored.
        let mut p = Pending::new(8, || None);
        assert!(!p.turn(|_, _| panic!("stored what could not be read")));
    }

    #[test]
    fn contended_cpus_stop_the_polling() {
        let (r, _w) = nix::unistd::pipe().unwrap();
        let l = Linger::new(r, 2, 2, true).unwrap();
        let mut yields = 0;
        assert!(!l.poll(
            || {
                yields += 1;
                std::thread::sleep(Duration::from_millis(1));
            },
            || {}
        ));
        assert_eq!(yields, 1);
        assert!(!l.aside.on(), "the long yield turned polling off");
        assert!(!l.poll(|| yields += 1, || {}));
        assert_eq!(yields, 1, "polled while the CPUs were contended");
    }
}

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
//! so polling has nothing to win (benches/README.md, stop 15).
//!
//! Measured on the 2-vCPU VM (benches/runtime.sh workloads, interleaved, medians of 8): 4,000
//! random small files 0.71 → 0.55 s, tar of /usr 0.56 → 0.51 s. Busy-waiting without yielding
//! slowed the tar instead (0.56 → 0.62 s: it took the CPU from the scan pusher). Deciding per
//! request whether a burst is on, by the time since the previous reply, was tried and dropped: a
//! thread woken from sleep sees its own wake-up latency in that gap, counts the request as no
//! burst, sleeps again, and bursts are seldom found (1,090 of 8,700 requests of the random read
//! still went through a sleeping thread, against 53 when every reply is followed by a poll).
//! Letting only one thread poll at a time was tried too: random files 0.53 → 0.59 s (slower
//! whenever the other thread, asleep, was the one the kernel woke for the request).

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use super::step_aside::StepAside;
use super::sys;

/// How long a thread polls after a reply. Measured on the random small-file read of
/// benches/runtime.sh: 50 µs is shorter than the caller's own work between two reads (open,
/// read, write to a pipe) and saves little; 200 µs does as well as never sleeping.
const WINDOW: Duration = Duration::from_micros(200);

pub struct Linger {
    /// The FUSE device: a duplicate of the server's fd (the request queue is the connection's,
    /// so any of its fds shows a waiting request).
    fd: OwnedFd,
    /// Shared by the server's threads: none polls while the CPUs are contended.
    aside: StepAside,
}

impl Linger {
    /// `None` when polling would take a CPU from the command (`cpus` < 2).
    pub fn new(fd: OwnedFd, cpus: usize) -> Option<Linger> {
        (cpus >= 2).then(|| Linger {
            fd,
            aside: StepAside::default(),
        })
    }

    /// Call when a request arrives; the guard, dropped after the reply, polls.
    pub fn request(&self) -> Poll<'_> {
        Poll(self)
    }

    /// Poll for up to `WINDOW`; whether a request is waiting.
    fn wait_for_request(&self) -> bool {
        // A poll must not slow the command, or the pusher of a directory scan, on this CPU: with
        // any of them runnable this thread steps aside.
        self.poll(sys::yield_cpu)
    }

    /// `wait_for_request` with `yield_cpu` standing for the yield (tests).
    fn poll(&self, mut yield_cpu: impl FnMut()) -> bool {
        if !self.aside.on() {
            return false;
        }
        let until = Instant::now() + WINDOW;
        loop {
            if sys::readable_now(&self.fd) {
                return true;
            }
            if Instant::now() >= until || !self.aside.step_aside_with(&mut yield_cpu) {
                return false;
            }
        }
    }
}

pub struct Poll<'a>(&'a Linger);

impl Drop for Poll<'_> {
    fn drop(&mut self) {
        self.0.wait_for_request();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cpu_never_polls() {
        let fd = || std::fs::File::open("/dev/null").unwrap().into();
        assert!(Linger::new(fd(), 1).is_none());
        assert!(Linger::new(fd(), 2).is_some());
    }

    #[test]
    fn polls_until_a_request_waits() {
        // A pipe stands in for /dev/fuse: readable means a request waits.
        // No real yield: on a busy test machine one could take long enough to back off. And a
        // fresh Linger for each half, in case being preempted did that.
        let (r, _w) = nix::unistd::pipe().unwrap();
        let l = Linger::new(r, 2).unwrap();
        let t = Instant::now();
        assert!(!l.poll(|| {}));
        assert!(t.elapsed() >= WINDOW, "gave up before the window");
        let (r, w) = nix::unistd::pipe().unwrap();
        let l = Linger::new(r, 2).unwrap();
        nix::unistd::write(&w, b"x").unwrap();
        assert!(l.poll(|| {}));
    }

    #[test]
    fn contended_cpus_stop_the_polling() {
        let (r, _w) = nix::unistd::pipe().unwrap();
        let l = Linger::new(r, 2).unwrap();
        let mut yields = 0;
        assert!(!l.poll(|| {
            yields += 1;
            std::thread::sleep(Duration::from_millis(1));
        }));
        assert_eq!(yields, 1);
        assert!(!l.aside.on(), "the long yield turned polling off");
        assert!(!l.poll(|| yields += 1));
        assert_eq!(yields, 1, "polled while the CPUs were contended");
    }
}

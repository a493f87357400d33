//! Yielding the CPU to other runnable threads, while that is cheap.
//!
//! gpurun's helper threads (the FUSE server's poll between requests, the start-up warming) yield
//! often, so that the command or a server thread woken on their CPU goes first. On a machine busy
//! with other work a yield can instead hand the CPU to another process for a whole time slice
//! (milliseconds), and nothing wakes a thread that is runnable already. So a yield that kept its
//! thread off the CPU longer than `CONTENDED` turns yielding off for `BACK_OFF`, for every thread
//! that shares the `StepAside`: the CPUs are the machine's, not one thread's.
//!
//! Beside two CPU-bound processes on a 2-CPU machine, `exec true` took 32.6 ms at the median while
//! the warming always yielded (the server's poll backing off), against 25.6 ms with this for
//! both (ch-run 28-29 ms); `apt-get --version` 80 against 72 ms (ch-run 111-115 ms), in two
//! runs. On a quiet 2-CPU machine it fired too, about once per `exec true` (the container's
//! own set-up or command kept the CPU over 0.5 ms), and a warming thread then kept its CPU for a
//! scheduler tick while the command waited: the warming's `StepAside` never backs off where
//! other work leaves a CPU free (`for_warming`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::sys;

/// Off the CPU longer than this in a yield means other work wants the CPUs: a CPU-bound process
/// keeps it for a time slice, a millisecond or more. At 50 µs, work of the container's own
/// (a pipeline's fork and exec between two requests, the set-up of the root) turned yielding off
/// too often: random reads 8 % slower, `exec true` 10 % slower on a quiet machine.
const CONTENDED: Duration = Duration::from_micros(500);
/// How long yielding stays off once the CPUs were found contended.
const BACK_OFF: Duration = Duration::from_millis(50);

pub struct StepAside {
    epoch: Instant,
    /// Yielding is off until this many µs after `epoch`.
    off_until: AtomicU64,
    /// Other work left a CPU free when this was made: always yield (`for_warming`).
    quiet: bool,
}

impl Default for StepAside {
    fn default() -> Self {
        StepAside {
            epoch: Instant::now(),
            off_until: AtomicU64::new(0),
            quiet: false,
        }
    }
}

/// How many tasks other than the caller are running or runnable on the machine now, from
/// /proc/loadavg's fourth field ("running/threads", the caller included).
pub fn others_running(loadavg: &str) -> Option<u32> {
    let (running, _) = loadavg.split_whitespace().nth(3)?.split_once('/')?;
    running.parse::<u32>().ok()?.checked_sub(1)
}

/// Whether other work leaves one of gpurun's `cpus` CPUs free: fewer other tasks are running
/// than there are CPUs. "None at all" was too strict: on a quiet 2-CPU machine a freshly started
/// process saw another one running in 93 of 200 reads (its parent, not yet asleep in wait).
/// The count is the machine's and `cpus` gpurun's own (its affinity and quota), which errs
/// towards the busy mode. It is read once: work that fills every CPU later in the start can
/// preempt a nice-19 thread that holds a cache lock, and a server thread then waits for it.
pub fn cpu_free(loadavg: &str, cpus: usize) -> bool {
    others_running(loadavg).is_some_and(|n| (n as usize) < cpus)
}

impl StepAside {
    /// For the start-up warming. Where other work leaves a CPU free (`cpu_free`), a long yield
    /// only means that the container's own set-up or command took the CPU, which is what the
    /// yield is for: there it always yields, and the warming's threads take the lowest priority
    /// (`quiet`), which the free CPU keeps from starving. Elsewhere it backs off as `default`
    /// does. Without this, on a quiet 2-CPU machine, the first long yield turned yielding off and a
    /// warming thread then kept its CPU for a scheduler tick (4 ms) while the command, woken on
    /// that CPU, waited.
    pub fn for_warming(cpus: usize) -> StepAside {
        let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        StepAside {
            quiet: cpu_free(&loadavg, cpus),
            ..StepAside::default()
        }
    }

    /// For each thread that yields through this: where other work left a CPU free
    /// (`for_warming`), the thread takes the lowest priority.
    pub fn enlist(&self) {
        if self.quiet {
            sys::lowest_priority();
        }
    }

    /// Whether yielding is on: the machine is quiet, or the CPUs were not found contended lately.
    pub fn on(&self) -> bool {
        self.quiet || self.micros(Instant::now()) >= self.off_until.load(Ordering::Relaxed)
    }

    /// Yield unless yielding is off; whether it is still on afterwards.
    pub fn step_aside(&self) -> bool {
        self.step_aside_with(sys::yield_cpu)
    }

    /// `step_aside` with `yield_cpu` standing for the yield (Linger passes its own, for its tests).
    pub(crate) fn step_aside_with(&self, yield_cpu: impl FnOnce()) -> bool {
        if !self.on() {
            return false;
        }
        let t = Instant::now();
        yield_cpu();
        let back = Instant::now();
        if back - t > CONTENDED && !self.quiet {
            let off = self.micros(back + BACK_OFF);
            self.off_until.fetch_max(off, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn micros(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_micros() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_yield_turns_yielding_off_for_a_while() {
        let s = StepAside::default();
        let mut yields = 0;
        assert!(s.step_aside_with(|| yields += 1));
        assert!(s.step_aside_with(|| yields += 1));
        assert_eq!(yields, 2);
        // A yield that kept the thread off its CPU: off, and the next does not yield.
        assert!(!s.step_aside_with(|| std::thread::sleep(CONTENDED * 2)));
        let t = Instant::now();
        assert!(!s.on());
        assert!(!s.step_aside_with(|| yields += 1));
        assert_eq!(yields, 2, "yielded while off");
        // Until the back-off has passed.
        std::thread::sleep(BACK_OFF.saturating_sub(t.elapsed()) + Duration::from_millis(1));
        assert!(s.on());
        assert!(s.step_aside_with(|| yields += 1));
        assert_eq!(yields, 3);
    }

    #[test]
    fn others_running_table() {
        for (loadavg, want) in [
            ("0.48 0.82 1.06 1/78 4236\n", Some(0)),
            ("2.10 1.00 0.50 3/82 4247", Some(2)),
            ("0.00 0.00 0.00 0/10 1", None),
            ("0.48 0.82 1.06", None),
            ("0.48 0.82 1.06 x/78 4236", None),
            ("", None),
        ] {
            assert_eq!(others_running(loadavg), want, "{loadavg:?}");
        }
    }

    #[test]
    fn a_cpu_is_free_while_fewer_others_run_than_there_are_cpus() {
        let load = |running: u32| format!("0.50 0.40 0.30 {running}/90 1234");
        for (running, cpus, free) in [
            (1, 2, true),  // only the caller
            (2, 2, true),  // and its parent, not yet asleep
            (3, 2, false), // two CPU-bound processes on two CPUs
            (3, 32, true),
            (33, 32, false),
            (1, 1, true),
        ] {
            assert_eq!(cpu_free(&load(running), cpus), free, "{running} on {cpus}");
        }
        assert!(!cpu_free("garbage", 4));
    }

    #[test]
    fn on_a_quiet_machine_a_long_yield_changes_nothing() {
        let s = StepAside {
            quiet: true,
            ..StepAside::default()
        };
        assert!(s.step_aside_with(|| std::thread::sleep(CONTENDED * 2)));
        let mut yields = 0;
        assert!(s.step_aside_with(|| yields += 1));
        assert_eq!(yields, 1, "stopped yielding on a quiet machine");
    }

    #[test]
    fn enlisted_threads_take_the_lowest_priority_only_where_a_cpu_is_free() {
        let nice_after = |quiet: bool| {
            std::thread::spawn(move || {
                let s = StepAside {
                    quiet,
                    ..StepAside::default()
                };
                // SAFETY: reading this thread's own priority.
                let before = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as _) };
                s.enlist();
                let after = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as _) };
                (before, after)
            })
            .join()
            .unwrap()
        };
        assert_eq!(nice_after(true).1, 19);
        let (before, after) = nice_after(false);
        assert_eq!(after, before, "a busy machine's warming keeps its priority");
    }

    #[test]
    fn shared_between_threads() {
        let s = StepAside::default();
        std::thread::scope(|sc| {
            sc.spawn(|| s.step_aside_with(|| std::thread::sleep(CONTENDED * 2)));
        });
        assert!(!s.on(), "one thread's finding holds for all");
    }
}

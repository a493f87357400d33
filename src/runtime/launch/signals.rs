//! The signals gpurun passes on, the one that tells C gpurun died, and leaving by a signal.

use nix::sys::signal::{SigSet, Signal};

use crate::sys;

/// The signals gpurun passes on to the container.
pub(super) const FORWARDED: [Signal; 7] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

/// The signals C forwards or acts on, and `also`.
pub(super) fn forwarded_and(also: &[i32]) -> Vec<i32> {
    FORWARDED
        .iter()
        .map(|&s| s as i32)
        .chain(also.iter().copied())
        .collect()
}

/// Sent to C when gpurun dies: a real-time signal, so it never collides with one a user sends.
pub(super) fn parent_death_signal() -> i32 {
    libc::SIGRTMIN()
}

/// Leave by `sig`, as the command did, so callers see a signal and not a number.
pub(super) fn die_by(sig: Signal, core: bool) -> ! {
    if !core {
        sys::default_action(sig as i32);
        let mut m = SigSet::empty();
        m.add(sig);
        let _ = m.thread_unblock();
        let _ = nix::sys::signal::raise(sig);
    }
    sys::exit_now(128 + sig as i32)
}

//! Signal masks, waits and dispositions, async-signal-safe where a child sharing gpurun's
//! memory calls them.

use std::sync::atomic::{AtomicBool, Ordering};

/// The set of `signals`, by number: real-time ones have no name in nix. Async-signal-safe.
pub(super) fn sigset(signals: &[i32]) -> libc::sigset_t {
    // SAFETY: a local sigset_t, initialised by sigemptyset before use.
    unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Block or unblock one signal (any number, real-time ones too) for the calling thread.
pub fn block_signal(sig: i32, blocked: bool) {
    let how = if blocked {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    // SAFETY: a valid set; the old mask is not asked for.
    unsafe { libc::pthread_sigmask(how, &sigset(&[sig]), std::ptr::null_mut()) };
}

/// Set the calling thread's signal mask to `mask`. Async-signal-safe.
pub fn set_signal_mask(mask: &libc::sigset_t) {
    // SAFETY: a valid set; the old mask is not asked for.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
}

/// Wait for one of `signals`, which the caller has blocked: its number, and whether the kernel
/// raised it itself (SI_KERNEL: a terminal's SIGINT or SIGWINCH) rather than a process sending
/// it. None when the wait was interrupted.
pub fn wait_signal(signals: &[i32]) -> Option<(i32, bool)> {
    // SAFETY: a valid set, and a zeroed siginfo_t for the kernel to fill.
    unsafe {
        let mut info = std::mem::zeroed::<libc::siginfo_t>();
        let signo = libc::sigwaitinfo(&sigset(signals), &mut info);
        (signo >= 0).then_some((signo, info.si_code == libc::SI_KERNEL))
    }
}

/// Give `sig` its default action back.
pub fn default_action(sig: i32) {
    // SAFETY: SIG_DFL installs no handler.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

/// Whether gpurun's caller left SIGPIPE ignored (`note_caller_sigpipe`).
static CALLER_IGNORED_SIGPIPE: AtomicBool = AtomicBool::new(false);

/// Runs before std's start-up, which ignores SIGPIPE in gpurun itself (a write to a pipe whose
/// reader is gone is an error it handles): the caller's disposition is noted first, for the
/// command (`caller_dispositions`).
#[used]
#[link_section = ".init_array"]
static NOTE_CALLER_SIGPIPE: extern "C" fn() = note_caller_sigpipe;

extern "C" fn note_caller_sigpipe() {
    // SAFETY: sigaction only reads the disposition into a zeroed struct.
    let ignored = unsafe {
        let mut old = std::mem::zeroed::<libc::sigaction>();
        libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    };
    CALLER_IGNORED_SIGPIPE.store(ignored, Ordering::Relaxed);
}

/// For the command about to be exec'd: `signals`, and SIGPIPE, as gpurun's caller left them.
/// A handler of gpurun's is dropped (exec would reset it to the default; done before the
/// signal mask is lifted in a child that shares gpurun's memory, it keeps the handler from
/// running there), an ignored signal stays ignored (`nohup`), and SIGPIPE, which gpurun itself
/// ignores, gets the caller's disposition back: with gpurun's SIG_IGN inherited, `yes | head -1`
/// in the container printed "Broken pipe". Async-signal-safe.
pub fn caller_dispositions(signals: &[nix::sys::signal::Signal]) {
    // SAFETY: sigaction reads into a zeroed struct; signal() sets a default disposition.
    unsafe {
        for &sig in signals {
            let mut old = std::mem::zeroed::<libc::sigaction>();
            if libc::sigaction(sig as i32, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction != libc::SIG_IGN
                && old.sa_sigaction != libc::SIG_DFL
            {
                libc::signal(sig as i32, libc::SIG_DFL);
            }
        }
        if !CALLER_IGNORED_SIGPIPE.load(Ordering::Relaxed) {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}

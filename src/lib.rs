//! gpurun: a setuid-free container launcher for GPU clusters.
//!
//! `image` gets images (registry → one squashfs file) and reads them; `runtime` runs a command in one
//! (plan, then apply); `gpu` decides which NVIDIA driver files and devices go in.

pub mod cli;
pub mod config;
pub mod cpus;
pub mod doctor;
pub mod env_vars;
pub mod gpu;
pub mod help;
pub mod image;
pub mod mount;
pub mod ps;
pub mod runtime;
pub mod store;
pub mod sys;
pub mod units;
pub mod version;

/// Lock a mutex even when a thread panicked while holding it. Every mutex gpurun shares
/// between threads guards single inserts, lookups or list edits, which a panic cannot leave
/// half done; one failed FUSE request or download must not take the others down with it.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Exit codes shared by every command (documented in the README and the man page).
pub mod exit {
    /// gpurun itself failed (bad option, unusable image, mount refused…).
    pub const GPURUN_FAILED: i32 = 125;
    /// The command exists in the container but cannot be executed.
    pub const NOT_EXECUTABLE: i32 = 126;
    /// The command was not found in the container.
    pub const NOT_FOUND: i32 = 127;
}

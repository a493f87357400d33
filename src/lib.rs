//! gpurun: a setuid-free container launcher for GPU clusters.
//!
//! `image` gets images (registry → one squashfs file) and reads them; `runtime` runs a command in one
//! (plan, then apply); `gpu` decides which NVIDIA driver files and devices go in.

pub mod cli;
pub mod gpu;
pub mod image;
pub mod runtime;

/// Exit codes shared by every command (documented in the README and the man page).
pub mod exit {
    /// gpurun itself failed (bad option, unusable image, mount refused…).
    pub const GPURUN_FAILED: i32 = 125;
    /// The command exists in the container but cannot be executed.
    pub const NOT_EXECUTABLE: i32 = 126;
    /// The command was not found in the container.
    pub const NOT_FOUND: i32 = 127;
}

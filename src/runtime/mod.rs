//! How a command runs in an image: a pure plan, then a thin layer of syscalls that applies it.

pub mod env;
pub mod extract;
pub mod fuse;
pub mod interpreter;
pub mod kept_reads;
pub mod launch;
pub mod linger;
pub mod plan;
pub mod points;
pub mod prefetch;
pub mod provide;
pub mod resolve;
pub mod start;
pub mod step_aside;
pub mod sys;
pub mod warm;

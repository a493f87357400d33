//! How a command runs in an image: a pure plan, then a thin layer of syscalls that applies it.

pub mod plan;

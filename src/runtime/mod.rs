//! How a command runs in an image: a pure plan, then a thin layer of syscalls that applies it.

pub mod env;
pub mod extract;
pub mod first_start;
pub mod image_server;
mod in_tree;
pub mod interpreter;
pub mod launch;
pub mod mount_spec;
pub mod named;
pub mod plan;
pub mod start;

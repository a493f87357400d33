//! How a command runs in an image: a pure plan, then a thin layer of syscalls that applies it.

pub mod attach;
pub mod env;
pub mod extract;
pub mod fuse;
pub mod interpreter;
pub mod keeper;
pub mod launch;
pub mod plan;
pub mod server;
pub mod socket_names;
pub mod start;

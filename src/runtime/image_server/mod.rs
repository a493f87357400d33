//! The image servers: one process per user and image serves it read-only over FUSE and lends
//! its mount to that user's containers.

pub mod attach;
pub mod fuse_fs;
pub mod job_keeper;
pub mod serve;
pub mod socket_names;

#[cfg(test)]
mod serve_tests;

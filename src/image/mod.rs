//! What an image is and how to get one.

pub mod meta;
pub mod sqfs;

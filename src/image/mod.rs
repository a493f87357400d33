//! What an image is and how to get one.

pub mod cache;
pub mod flatten;
pub mod meta;
pub mod pull;
pub mod reference;
pub mod registry;
pub mod sqfs;
pub mod squash;

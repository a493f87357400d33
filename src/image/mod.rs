//! What an image is and how to get one.

pub mod cache;
pub mod env_list;
pub mod flatten;
pub mod foreign;
pub mod gc;
pub mod inflate;
pub mod inspect;
pub mod meta;
pub mod pull;
pub mod reference;
pub mod registry;
pub mod sif;
pub mod sqfs;
pub mod squash;
pub mod unpack;

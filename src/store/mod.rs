//! The ground floor: places gpurun keeps on the machine (the cache, private directories, kept
//! facts), checked so that no other local user can steer them.

pub mod private_dir;

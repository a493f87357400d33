//! The ground floor: places gpurun keeps on the machine (the cache, private directories, kept
//! facts), checked so that no other local user can steer them, and the user's processes.

pub mod cache_dir;
pub mod kept_facts;
pub mod private_dir;
pub mod processes;
pub mod tree;
pub mod whole_file;

/// A short name for `key` in a file name (the first 6 bytes of its SHA-256, in hex).
pub fn short_hash(key: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(key.as_bytes())[..6])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_hashes_are_stable_and_distinct() {
        assert_eq!(short_hash("a"), short_hash("a"));
        assert_eq!(short_hash("a").len(), 12);
        assert_ne!(short_hash("1:2"), short_hash("1:3"));
    }
}

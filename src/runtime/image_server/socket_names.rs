//! The abstract unix socket names of the user's image servers and Slurm job keepers
//! (runtime/image_server/attach.rs says why sockets, and what a server's name must match).

/// Bumped when the messages between gpurun and its servers change.
const PROTOCOL: u32 = 2;

/// The abstract socket name of a server: the user, then a hash of what must match for a
/// container to share it (attach.rs's module comment). At most 107 bytes, as sun_path allows.
pub fn server_name(uid: u32, image_id: &str, gid: u32, scope: &str) -> String {
    let b = &crate::version::BUILD;
    let key = format!(
        "{image_id}|{gid}|{}|{}|{PROTOCOL}|{scope}",
        b.version, b.commit
    );
    format!("{}{}", server_prefix(uid), crate::store::short_hash(&key))
}

/// What the names of user `uid`'s servers start with (`gpurun ps` lists them by it).
pub fn server_prefix(uid: u32) -> String {
    format!("gpurun-{uid}-")
}

/// The name a stopped server answers `gpurun ps` under (no start looks for it).
pub fn retired_name(uid: u32, pid: u32) -> String {
    format!("{}stopping-{pid}", server_prefix(uid))
}

/// The name of the keeper of Slurm job `job` for user `uid`.
pub fn keeper_name(uid: u32, job: &str) -> String {
    format!("gpurun-keep-{uid}-{job}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_differ_by_what_must_match() {
        let n = server_name(4294967294, "1:2:3:4.5:6.7:0:8:9", 100, "job 123");
        assert!(n.starts_with("gpurun-4294967294-"), "{n}");
        assert!(n.len() <= 107, "{n}");
        let base = server_name(1000, "id", 100, "");
        for other in [
            server_name(1001, "id", 100, ""),
            server_name(1000, "id2", 100, ""),
            server_name(1000, "id", 101, ""),
            server_name(1000, "id", 100, "job 1"),
        ] {
            assert_ne!(base, other);
        }
        assert_eq!(base, server_name(1000, "id", 100, ""));
    }
}

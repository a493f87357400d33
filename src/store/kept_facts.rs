//! Facts kept between starts in the user's cache: a fact is found again only when it is missing
//! or no longer holds.

use std::fs;
use std::path::{Path, PathBuf};

use super::cache_dir::{visibility, CACHE_FIX, GRACE};
use super::private_dir::{self, Visibility};
use super::whole_file::write_atomically;

/// The fact kept in `file` while it still `holds`, else what `find` finds, kept there for the
/// next start when it holds. A file that is missing, damaged or not writable just means `find`.
pub fn kept<T, E>(
    file: Option<&Path>,
    holds: impl Fn(&T) -> bool,
    find: impl FnOnce() -> Result<T, E>,
) -> Result<T, E>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let old = file
        .and_then(read_own)
        .and_then(|b| serde_json::from_slice::<T>(&b).ok())
        .filter(&holds);
    if let Some(old) = old {
        return Ok(old);
    }
    let new = find()?;
    if let (Some(f), true) = (file, holds(&new)) {
        let _ = write_atomically(f, &serde_json::to_vec(&new).unwrap_or_default());
    }
    Ok(new)
}

/// The contents of a kept file: only one of the caller's, no link, closed to others (another
/// user's file at the name is never read).
fn read_own(file: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let uid = nix::unistd::geteuid().as_raw();
    let mut b = Vec::new();
    let mut f = private_dir::open_trusted(file, uid).ok()?;
    f.read_to_end(&mut b).ok()?;
    Some(b)
}

/// The file of `kind` (`image-facts`, `image-blocks`) kept for the image file `file_key` in the
/// user's private cache at `root`.
pub fn kept_file(root: PathBuf, kind: &str, file_key: &str, ext: &str) -> Option<PathBuf> {
    let name = format!("{}.{ext}", super::short_hash(file_key));
    FactsDir::open(root)?.file(kind, &name)
}

/// Where facts are kept between starts (`kept`): one directory per kind under a root, the user's
/// gpurun cache, each the caller's own and private (store/private_dir.rs). Where the root is
/// refused (someone else made it), nothing is kept, and the user is told once.
pub struct FactsDir {
    root: PathBuf,
}

impl FactsDir {
    /// `root`, made if missing; None (said once on stderr) unless it is the caller's and private.
    pub fn open(root: PathBuf) -> Option<FactsDir> {
        match private_dir::own_dir(&root, visibility(&root), CACHE_FIX) {
            Ok(root) => Some(FactsDir { root }),
            Err(e) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    eprintln!(
                        "gpurun: warning: cache directory {e}; nothing is kept between starts"
                    )
                });
                None
            }
        }
    }

    /// The file `name` for facts of `kind`; None unless its directory is private too.
    pub fn file(&self, kind: &str, name: &str) -> Option<PathBuf> {
        private_dir::own_subdir(&self.root, kind, Visibility::Private, CACHE_FIX)
            .ok()
            .map(|dir| dir.join(name))
    }
}

/// Keep at most `max_files` files and `max_bytes` in `dir` (a directory of kept things, each
/// made again when missing), the most recently used first: by the later of access and
/// modification time, as `gpurun cache gc` judges use. A writer's temporary file (`.NAME.tmp`)
/// left by a gpurun killed mid-rename is removed once older than gc's grace period. Best effort.
pub fn prune(dir: &Path, max_files: usize, max_bytes: u64) {
    use std::os::unix::fs::MetadataExt;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut kept = Vec::new();
    for e in entries.flatten() {
        let (path, name) = (e.path(), e.file_name());
        let Ok(m) = fs::symlink_metadata(&path) else {
            continue;
        };
        let stale = now - m.mtime() > GRACE.as_secs() as i64;
        if name.to_string_lossy().starts_with('.') {
            if stale {
                let _ = fs::remove_file(&path);
            }
        } else if m.is_file() {
            kept.push((m.atime().max(m.mtime()), m.len(), path));
        }
    }
    kept.sort_by(|a, b| b.cmp(a));
    let mut total = 0u64;
    for (i, (_, len, path)) in kept.iter().enumerate() {
        total += len;
        if i >= max_files || total > max_bytes {
            let _ = fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    #[test]
    fn one_file_per_kind_and_image_file() {
        let t = tempfile::tempdir().unwrap();
        let f = |kind, key| kept_file(t.path().to_path_buf(), kind, key, "x").unwrap();
        assert!(f("image-facts", "1:2").starts_with(t.path().join("image-facts")));
        assert!(f("image-blocks", "1:2").starts_with(t.path().join("image-blocks")));
        assert_eq!(f("image-facts", "1:2"), f("image-facts", "1:2"));
        assert_ne!(f("image-facts", "1:2"), f("image-facts", "1:3"));
    }

    #[test]
    fn facts_only_in_a_private_directory() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("cache");
        let f = FactsDir::open(root.clone()).unwrap().file("k", "x.json");
        assert_eq!(f, Some(root.join("k/x.json")));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&root), mode(&root.join("k"))), (0o700, 0o700));
        // A kind's directory that is a link: no facts there.
        let d = FactsDir::open(root.clone()).unwrap();
        std::os::unix::fs::symlink(t.path(), root.join("l")).unwrap();
        assert_eq!(d.file("l", "x.json"), None);
        // Someone else's root: no facts at all.
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&root, Some(54321), None).unwrap();
            assert!(FactsDir::open(root.clone()).is_none());
        }
    }

    #[test]
    fn prune_keeps_the_most_recently_used_within_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let now = std::time::SystemTime::now();
        let file = |name: &str, len: usize, age_s: u64| {
            let p = dir.path().join(name);
            fs::write(&p, vec![0u8; len]).unwrap();
            let t = now - std::time::Duration::from_secs(age_s);
            let f = File::options().write(true).open(&p).unwrap();
            f.set_times(fs::FileTimes::new().set_accessed(t).set_modified(t))
                .unwrap();
        };
        file("a.blocks", 100, 10);
        file("b.blocks", 100, 20);
        file("c.blocks", 100, 30);
        file("d.blocks", 100, 40);
        file(".e.blocks.7.tmp", 100, 3600);
        file(".f.blocks.8.tmp", 100, 5);
        let names = || {
            let mut v: Vec<String> = fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        prune(dir.path(), 3, 1000);
        assert_eq!(
            names(),
            [".f.blocks.8.tmp", "a.blocks", "b.blocks", "c.blocks"]
        );
        prune(dir.path(), 3, 250);
        assert_eq!(names(), [".f.blocks.8.tmp", "a.blocks", "b.blocks"]);
    }
}

//! Removing a tree of the user's own that an image unpacked: its directories may be read-only.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Best-effort removal of a (partial) tree of ours, making directories writable first (an
/// image's read-only directories would otherwise keep their entries). Links are never followed.
pub fn remove_tree(p: &Path) {
    if std::fs::remove_dir_all(p).is_ok() {
        return;
    }
    let mut stack = vec![p.to_owned()];
    while let Some(d) = stack.pop() {
        let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(p);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_directories_and_links_out() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        let tree = t.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::write(tree.join("a/b/f"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("a/out")).unwrap();
        for d in ["a/b", "a"] {
            std::fs::set_permissions(tree.join(d), std::fs::Permissions::from_mode(0o555)).unwrap();
        }
        remove_tree(&tree);
        assert!(!tree.exists());
        assert!(outside.join("keep").exists(), "a link was followed");
    }
}

//! A first start's unpacked tree (first_start.rs) read as the container, and the .sqsh written
//! from the same layers, show it: every path resolved inside the tree, never on the host. The
//! image is a registry's: read by its host path, a symlink of its `/etc/passwd` to a FIFO
//! another user made would hang the start, one to `/dev/zero` would fill the memory.

use std::os::fd::OwnedFd;
use std::path::Path;

use nix::fcntl::AtFlags;
use nix::sys::stat::{fstat, fstatat, FileStat};

use crate::sys::{fd_path, open_in_root, open_path, Create};

/// `p` opened (O_PATH) inside `tree`, its symlinks followed there, and what it is.
fn open(tree: &Path, p: &Path) -> Option<(OwnedFd, FileStat)> {
    let root = open_path(tree).ok()?;
    let fd = open_in_root(&root, p, Create::No).ok()?;
    let st = fstat(&fd).ok()?;
    Some((fd, st))
}

fn is(st: &FileStat, kind: libc::mode_t) -> bool {
    st.st_mode & libc::S_IFMT == kind
}

/// A regular file's content, as `Archive::read_file` gives it.
pub fn read(tree: &Path, p: &str) -> Option<Vec<u8>> {
    let (fd, st) = open(tree, Path::new(p))?;
    // Reopened through the handle: the very inode found to be a regular file.
    is(&st, libc::S_IFREG)
        .then(|| std::fs::read(fd_path(&fd)).ok())
        .flatten()
}

/// A directory's names, as `Archive::list_names` gives them.
pub fn list(tree: &Path, p: &str) -> Option<Vec<String>> {
    let (fd, st) = open(tree, Path::new(p))?;
    if !is(&st, libc::S_IFDIR) {
        return None;
    }
    let names = std::fs::read_dir(fd_path(&fd)).ok()?;
    Some(
        names
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
    )
}

/// Whether `p` is there, its last component not followed (as `Archive::exists`).
pub fn exists(tree: &Path, p: &str) -> bool {
    let p = Path::new(p);
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return open(tree, p).is_some();
    };
    open(tree, parent)
        .is_some_and(|(dir, _)| fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::time::Duration;

    #[test]
    fn the_image_s_links_resolve_inside_the_tree() {
        let t = tempfile::tempdir().unwrap();
        let (host, tree) = (t.path().join("host"), t.path().join("tree"));
        std::fs::create_dir_all(tree.join("etc")).unwrap();
        std::fs::create_dir(&host).unwrap();
        std::fs::write(host.join("secret"), "host").unwrap();
        nix::unistd::mkfifo(&host.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::fs::write(tree.join("etc/real"), "tree").unwrap();
        symlink("/etc/real", tree.join("etc/passwd")).unwrap();
        symlink(host.join("fifo"), tree.join("etc/group")).unwrap();
        symlink(&host, tree.join("up")).unwrap();
        symlink("/nowhere", tree.join("dangling")).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let at = tree.clone();
        // A read that opens the host's FIFO waits for ever: the answer never comes.
        std::thread::spawn(move || tx.send(read(&at, "/etc/group")));
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(None));
        assert_eq!(read(&tree, "/etc/passwd").as_deref(), Some(&b"tree"[..]));
        assert_eq!(read(&tree, "/up/secret"), None);
        assert_eq!(list(&tree, "/up"), None);
        let mut names = list(&tree, "/etc").unwrap();
        names.sort();
        assert_eq!(names, ["group", "passwd", "real"]);
        assert!(exists(&tree, "/dangling") && exists(&tree, "/") && exists(&tree, "/etc/group"));
        assert!(!exists(&tree, "/up/secret"));
    }
}

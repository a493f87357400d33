//! A source tree with every kind of thing a squashfs image can hold, and a comparison of two
//! trees on disk (source against a FUSE mount or an extracted copy).
#![allow(dead_code)] // each test binary uses a different subset

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

pub const BIG_LEN: usize = 3 * 1024 * 1024 + 12345;
pub const SPARSE_LEN: u64 = 4 * 1024 * 1024 + 77;
pub const MANY: usize = 3000;

/// Deterministic pseudo-random bytes (xorshift), so content mismatches are reproducible.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn setxattr(p: &Path, name: &str, value: &[u8]) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: C strings and a value buffer of the length given, alive during the call.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "setxattr {name} on {p:?}: {}",
        std::io::Error::last_os_error()
    );
}

/// user.* xattrs of a path (not following symlinks), sorted by name.
pub fn user_xattrs(p: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 65536];
    // SAFETY: a C string and a buffer of the length given, alive during the call.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(
        n >= 0,
        "listxattr {p:?}: {}",
        std::io::Error::last_os_error()
    );
    let mut out = Vec::new();
    for name in names[..n as usize]
        .split(|&b| b == 0)
        .filter(|n| n.starts_with(b"user."))
    {
        let cn = CString::new(name).unwrap();
        let mut v = vec![0u8; 65536];
        // SAFETY: C strings and a buffer of the length given, alive during the call.
        let k = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        assert!(
            k >= 0,
            "getxattr {p:?}: {}",
            std::io::Error::last_os_error()
        );
        v.truncate(k as usize);
        out.push((name.to_vec(), v));
    }
    out.sort();
    out
}

fn set_mtime(p: &Path, secs: i64) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let ts = [libc::timespec {
        tv_sec: secs,
        tv_nsec: 0,
    }; 2];
    // SAFETY: a C string and a two-element timespec array, alive during the call.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(r, 0);
}

/// Build the reference tree under `root` (which must not exist yet).
pub fn build(root: &Path) {
    let w = |p: &str, data: &[u8]| std::fs::write(root.join(p), data).unwrap();
    std::fs::create_dir_all(root).unwrap();
    for d in [
        "etc", "bin", "hl/sub", "empty", "secret", "x", "many", "usr/lib",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    w("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n");
    w("etc/group", b"root:x:0:\n");
    w("empty-file", b"");
    w("big", &random_bytes(BIG_LEN, 1));
    w("exact", &random_bytes(256 * 1024, 2)); // a block multiple: no tail
    w("small", b"hello\n");
    let sparse = std::fs::File::create(root.join("sparse")).unwrap();
    sparse.set_len(SPARSE_LEN).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, &random_bytes(100, 3), 1024 * 1024 + 5)
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&sparse, b"end", SPARSE_LEN - 3).unwrap();
    drop(sparse);
    // hard links: three names, one inode
    w("hl/a", &random_bytes(200_000, 4));
    std::fs::hard_link(root.join("hl/a"), root.join("hl/b")).unwrap();
    std::fs::hard_link(root.join("hl/a"), root.join("hl/sub/c")).unwrap();
    // symlinks: relative, absolute, dangling, to a directory, chained
    std::os::unix::fs::symlink("../small", root.join("x/rel")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", root.join("x/abs")).unwrap();
    std::os::unix::fs::symlink("/nowhere/at/all", root.join("x/dangling")).unwrap();
    std::os::unix::fs::symlink("../etc", root.join("x/etcdir")).unwrap();
    std::os::unix::fs::symlink("etcdir/group", root.join("x/chain")).unwrap();
    std::os::unix::fs::symlink("loop2", root.join("x/loop1")).unwrap();
    std::os::unix::fs::symlink("loop1", root.join("x/loop2")).unwrap();
    // xattrs, one shared large value (mksquashfs stores repeats out of line)
    let shared = vec![b'v'; 3000];
    w("xa", b"a");
    w("xb", b"b");
    setxattr(&root.join("xa"), "user.x", b"1");
    setxattr(&root.join("xa"), "user.big", &shared);
    setxattr(&root.join("xb"), "user.big", &shared);
    setxattr(&root.join("xb"), "user.other", b"");
    setxattr(&root.join("x"), "user.onadir", b"dir value");
    // modes and owners
    w("secret/key", b"s3cret");
    std::fs::set_permissions(
        root.join("secret/key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::set_permissions(root.join("secret"), std::fs::Permissions::from_mode(0o700)).unwrap();
    w("bin/suid", b"#!/bin/sh\n");
    std::fs::set_permissions(
        root.join("bin/suid"),
        std::fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    w("none", b"unreadable");
    std::fs::set_permissions(root.join("none"), std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::set_permissions(root.join("empty"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    // SAFETY: geteuid only reads the process's id.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::lchown(root.join("small"), Some(1234), Some(5678)).unwrap();
    }
    let fifo = CString::new(root.join("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: a C string alive during the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    // deep tree
    let mut deep = root.join("deep");
    for i in 0..60 {
        deep = deep.join(format!("level{i}"));
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("bottom"), b"deep down\n").unwrap();
    // a directory with thousands of entries, one of them a subdirectory
    for i in 0..MANY {
        w(&format!("many/f{i:05}"), format!("{i}\n").as_bytes());
    }
    std::fs::create_dir(root.join("many/zz-subdir")).unwrap();
    w("usr/lib/libfoo.so.1", &random_bytes(70_000, 5));
    std::os::unix::fs::symlink("libfoo.so.1", root.join("usr/lib/libfoo.so")).unwrap();
    // distinct, known mtimes everywhere (children before their directories)
    let all = walk(root);
    for (i, (rel, _)) in all.iter().enumerate().rev() {
        set_mtime(
            &root.join(rel.trim_start_matches('/')),
            1_600_000_000 + i as i64,
        );
    }
    set_mtime(root, 1_500_000_000);
}

/// Every path under root ("/a/b"), sorted, with lstat metadata; the root itself is "/".
pub fn walk(root: &Path) -> Vec<(String, std::fs::Metadata)> {
    let mut out = vec![("/".to_string(), std::fs::symlink_metadata(root).unwrap())];
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(rel.trim_start_matches('/'));
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let p = format!("{rel}/{}", e.file_name().to_str().unwrap());
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            if md.is_dir() {
                stack.push(p.clone());
            }
            out.push((p, md));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[derive(Clone, Copy)]
pub struct Compare {
    /// Compare uid/gid (not through a user namespace that does not map them).
    pub owners: bool,
    /// Compare setuid/setgid bits (an extracted copy drops them on purpose).
    pub suid: bool,
    /// Compare nlink of directories.
    pub dir_nlink: bool,
    /// Compare xattrs.
    pub xattrs: bool,
    /// The other tree was made by a tool that may add /dev (pseudo files) – skip it.
    pub skip_dev: bool,
}

/// Compare the tree at `other` with the source tree: names, types, modes, sizes, mtimes,
/// contents, link targets, xattrs, and hard links (same inode there iff same inode here).
pub fn compare(src: &Path, other: &Path, how: Compare) {
    let a = walk(src);
    let mut b = walk(other);
    if how.skip_dev {
        b.retain(|(p, _)| p != "/dev");
    }
    let names_a: Vec<&String> = a.iter().map(|x| &x.0).collect();
    let names_b: Vec<&String> = b.iter().map(|x| &x.0).collect();
    assert_eq!(names_a, names_b, "different paths");
    let mut inode_a: HashMap<u64, &str> = HashMap::new();
    let mut inode_b: HashMap<u64, &str> = HashMap::new();
    for ((p, ma), (_, mb)) in a.iter().zip(&b) {
        let mask = if how.suid { 0o177777 } else { 0o171777 };
        let want_mode = if how.suid {
            ma.mode()
        } else {
            ma.mode() & !0o6000
        };
        assert_eq!(
            mb.mode() & mask,
            want_mode & mask,
            "{p}: mode {:o} vs {:o}",
            ma.mode(),
            mb.mode()
        );
        if !ma.is_dir() {
            assert_eq!(ma.len(), mb.len(), "{p}: size");
            assert_eq!(ma.nlink(), mb.nlink(), "{p}: nlink");
            // same inode on one side exactly when same inode on the other
            let first_a = *inode_a.entry(ma.ino()).or_insert(p);
            let first_b = *inode_b.entry(mb.ino()).or_insert(p);
            assert_eq!(first_a, first_b, "{p}: hard link structure");
        } else if how.dir_nlink {
            assert_eq!(ma.nlink(), mb.nlink(), "{p}: dir nlink");
        }
        assert_eq!(ma.mtime(), mb.mtime(), "{p}: mtime");
        if how.owners {
            assert_eq!((ma.uid(), ma.gid()), (mb.uid(), mb.gid()), "{p}: owner");
        }
        let (pa, pb) = (
            src.join(p.trim_start_matches('/')),
            other.join(p.trim_start_matches('/')),
        );
        if ma.is_file() {
            let (da, db) = (std::fs::read(&pa), std::fs::read(&pb));
            match (da, db) {
                (Ok(da), Ok(db)) => assert!(da == db, "{p}: contents differ"),
                (da, db) => panic!("{p}: read {:?} / {:?}", da.err(), db.err()),
            }
        }
        if ma.file_type().is_symlink() {
            assert_eq!(
                std::fs::read_link(&pa).unwrap(),
                std::fs::read_link(&pb).unwrap(),
                "{p}: target"
            );
        }
        if how.xattrs && !ma.file_type().is_symlink() {
            assert_eq!(user_xattrs(&pa), user_xattrs(&pb), "{p}: xattrs");
        }
    }
}

//! The extract fallback: a cached rootfs equal to the source tree, safe under concurrency.

mod common;
mod tree;

use std::sync::Arc;

use gpurun::image::sqfs::Archive;
use gpurun::runtime::extract::cached_rootfs;

/// Where extracted trees go: the cache's `rootfs/` (made private by the cache's opener).
fn rootfs_base(s: &common::Scratch) -> std::path::PathBuf {
    let base = s.join("cache/rootfs");
    std::fs::create_dir_all(&base).unwrap();
    base
}

#[test]
fn extracted_tree_equals_source_and_is_cached() {
    let s = common::Scratch::new();
    let src = s.join("src");
    tree::build(&src);
    let img = s.join("img.sqsh");
    common::mksquashfs(&src, &img, &["-comp", "zstd", "-p", "dev c 644 0 0 1 3"]);
    let ar = Archive::open(&img).unwrap();
    let cache = rootfs_base(&s);
    let root = cached_rootfs(&img, &ar, &cache).unwrap();
    assert_eq!(root, cache.join(ar.content_key().unwrap()));
    let how = tree::Compare {
        owners: false,
        suid: false,
        dir_nlink: true,
        xattrs: true,
        skip_dev: false,
    };
    tree::compare(&src, &root, how);
    // sparse stays sparse
    use std::os::unix::fs::MetadataExt;
    let sp = std::fs::metadata(root.join("sparse")).unwrap();
    assert!(
        sp.blocks() * 512 < sp.len() / 2,
        "sparse file was written out in full"
    );
    // setuid dropped
    assert_eq!(
        std::fs::metadata(root.join("bin/suid")).unwrap().mode() & 0o7777,
        0o755
    );
    // second call: the same tree, not extracted again
    let marker = root.join("small");
    let before = std::fs::metadata(&marker).unwrap().ino();
    assert_eq!(cached_rootfs(&img, &ar, &cache).unwrap(), root);
    assert_eq!(std::fs::metadata(&marker).unwrap().ino(), before);
    let leftovers: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");
}

#[test]
fn concurrent_extraction_is_safe() {
    let s = common::Scratch::new();
    let src = s.join("src");
    common::busybox_rootfs(&src);
    std::fs::write(src.join("etc/big"), tree::random_bytes(2_000_000, 9)).unwrap();
    let img = s.join("img.sqsh");
    common::mksquashfs(&src, &img, &[]);
    let ar = Arc::new(Archive::open(&img).unwrap());
    let cache = rootfs_base(&s);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (ar, img, cache) = (ar.clone(), img.clone(), cache.clone());
            std::thread::spawn(move || cached_rootfs(&img, &ar, &cache).unwrap())
        })
        .collect();
    let roots: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(roots.iter().all(|r| *r == roots[0]));
    let how = tree::Compare {
        owners: true,
        suid: false,
        dir_nlink: true,
        xattrs: false,
        skip_dev: false,
    };
    tree::compare(&src, &roots[0], how);
    let leftovers: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers.len(),
        1,
        "temporary trees left behind: {leftovers:?}"
    );
}

#[test]
fn corrupt_image_leaves_nothing_behind() {
    let s = common::Scratch::new();
    let src = s.join("src");
    common::busybox_rootfs(&src);
    std::fs::write(src.join("etc/big"), tree::random_bytes(2_000_000, 9)).unwrap();
    let img = s.join("img.sqsh");
    common::mksquashfs(&src, &img, &["-comp", "zstd"]);
    // zero part of the data area: metadata (and so the key) intact, some block unreadable
    let mut b = std::fs::read(&img).unwrap();
    b[300_000..310_000].fill(0);
    std::fs::write(&img, &b).unwrap();
    let ar = Archive::open(&img).unwrap();
    let cache = rootfs_base(&s);
    let e = cached_rootfs(&img, &ar, &cache).unwrap_err();
    assert!(e.to_string().contains("img.sqsh"), "{e}");
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 0);
}

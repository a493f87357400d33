//! The squashfs reader against images made by the real squashfs-tools and squashfs-tools-ng.

mod common;
mod tree;

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gpurun::image::sqfs::{Archive, Kind, SqfsError};

fn kind_of(md: &std::fs::Metadata) -> Kind {
    use std::os::unix::fs::FileTypeExt;
    let t = md.file_type();
    if t.is_dir() {
        Kind::Dir
    } else if t.is_file() {
        Kind::File
    } else if t.is_symlink() {
        Kind::Symlink
    } else if t.is_fifo() {
        Kind::Fifo
    } else if t.is_char_device() {
        Kind::CharDev
    } else if t.is_block_device() {
        Kind::BlockDev
    } else {
        Kind::Socket
    }
}

/// Check every path of the source tree through the Archive API.
fn check_archive(ar: &Archive, src: &Path, xattrs: bool) {
    let mut by_src_ino: HashMap<u64, u64> = HashMap::new();
    for (p, md) in tree::walk(src) {
        let ino = ar
            .lookup(&p, false)
            .unwrap()
            .unwrap_or_else(|| panic!("{p} missing"));
        assert_eq!(ino.kind, kind_of(&md), "{p}: kind");
        assert_eq!(ino.mode(), md.mode(), "{p}: mode");
        assert_eq!((ino.uid, ino.gid), (md.uid(), md.gid()), "{p}: owner");
        assert_eq!(ino.mtime as i64, md.mtime(), "{p}: mtime");
        if ino.kind != Kind::Dir {
            assert_eq!(ino.nlink as u64, md.nlink(), "{p}: nlink");
            let r = *by_src_ino.entry(md.ino()).or_insert(ino.r);
            assert_eq!(r, ino.r, "{p}: hard links must share the inode reference");
        }
        let full = src.join(p.trim_start_matches('/'));
        match ino.kind {
            Kind::File => {
                assert_eq!(ino.size, md.len(), "{p}: size");
                let want = std::fs::read(&full).unwrap();
                assert!(ar.read_file(&p).unwrap().unwrap() == want, "{p}: contents");
                // unaligned reads across block boundaries
                if want.len() > 200_000 {
                    let mut buf = vec![0u8; 150_001];
                    for off in [1u64, 131_071, 131_072, want.len() as u64 - 1000] {
                        let n = ar.read_at(&ino, off, &mut buf).unwrap();
                        let end = (off as usize + n).min(want.len());
                        assert_eq!(n, end - off as usize);
                        assert!(buf[..n] == want[off as usize..end], "{p}: read_at {off}");
                    }
                }
            }
            Kind::Symlink => {
                let t = std::fs::read_link(&full).unwrap();
                assert_eq!(
                    ino.symlink_target().unwrap(),
                    t.as_os_str().as_encoded_bytes(),
                    "{p}"
                );
            }
            Kind::Dir => {
                let mut names: Vec<Vec<u8>> = std::fs::read_dir(&full)
                    .unwrap()
                    .map(|e| e.unwrap().file_name().as_encoded_bytes().to_vec())
                    .collect();
                names.sort();
                let got: Vec<Vec<u8>> = ar
                    .readdir(&ino)
                    .unwrap()
                    .iter()
                    .map(|e| e.name.clone())
                    .collect();
                let got: Vec<Vec<u8>> = got
                    .into_iter()
                    .filter(|n| !(p == "/" && n == b"dev"))
                    .collect();
                assert_eq!(got, names, "{p}: listing");
            }
            _ => {}
        }
        if xattrs {
            let mut x = ar.xattrs(&ino).unwrap();
            x.sort();
            assert_eq!(x, tree::user_xattrs(&full), "{p}: xattrs");
        }
    }
}

fn check_paths(ar: &Archive) {
    assert_eq!(ar.read_file("/x/rel").unwrap().unwrap(), b"hello\n");
    assert_eq!(
        ar.read_file("/x/abs").unwrap().unwrap(),
        b"root:x:0:0:root:/root:/bin/sh\n"
    );
    assert_eq!(ar.read_file("/x/chain").unwrap().unwrap(), b"root:x:0:\n");
    assert_eq!(
        ar.read_file("/x/etcdir/../small").unwrap().unwrap(),
        b"hello\n"
    );
    assert_eq!(
        ar.read_file("//etc/./passwd").unwrap().unwrap(),
        b"root:x:0:0:root:/root:/bin/sh\n"
    );
    assert_eq!(
        ar.read_file("/../../etc/group").unwrap().unwrap(),
        b"root:x:0:\n"
    );
    assert!(ar.read_file("/x/dangling").unwrap().is_none());
    assert!(ar.read_file("/nope").unwrap().is_none());
    assert!(ar.read_file("/small/under-a-file").unwrap().is_none());
    assert!(matches!(
        ar.read_file("/etc"),
        Err(SqfsError::NotAFile { .. })
    ));
    assert!(matches!(
        ar.read_file("/x/loop1"),
        Err(SqfsError::SymlinkLoop { .. })
    ));
    assert!(ar.exists("/x/dangling").unwrap());
    assert!(ar.exists("/x/loop1").unwrap());
    assert!(!ar.exists("/x/nope").unwrap());
    assert_eq!(
        ar.lookup("/x/etcdir", true).unwrap().unwrap().kind,
        Kind::Dir
    );
    assert_eq!(
        ar.lookup("/x/etcdir", false).unwrap().unwrap().kind,
        Kind::Symlink
    );
    let deep = ar.lookup("/deep", false).unwrap().unwrap();
    assert_eq!(deep.kind, Kind::Dir);
    let many = ar.lookup("/many", false).unwrap().unwrap();
    assert_eq!(ar.readdir(&many).unwrap().len(), tree::MANY + 1);
    assert_eq!(ar.read_file("/many/f02999").unwrap().unwrap(), b"2999\n");
    let sparse = ar.read_file("/sparse").unwrap().unwrap();
    assert_eq!(sparse.len() as u64, tree::SPARSE_LEN);
    assert!(sparse[..1024 * 1024 + 5].iter().all(|&b| b == 0));
}

/// `tar | tar2sqfs` (squashfs-tools-ng), the way gpurun pull writes images.
fn tar2sqfs(src: &Path, img: &Path, comp: &str) {
    let mut tar = Command::new("tar")
        .args([
            "--xattrs",
            "--xattrs-include=user.*",
            "--numeric-owner",
            "-C",
        ])
        .arg(src)
        .args(["-cf", "-", "."])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let st = Command::new("tar2sqfs")
        .args(["-q", "-f", "-c", comp])
        .arg(img)
        .stdin(tar.stdout.take().unwrap())
        .status()
        .unwrap();
    assert!(st.success() && tar.wait().unwrap().success());
}

struct Fixture {
    _s: common::Scratch,
    src: PathBuf,
    dir: PathBuf,
}

fn fixture() -> Fixture {
    let s = common::Scratch::new();
    let src = s.join("src");
    tree::build(&src);
    let dir = s.path().to_owned();
    Fixture { _s: s, src, dir }
}

#[test]
fn mksquashfs_every_compressor_and_fragment_mode() {
    let f = fixture();
    let variants: &[(&str, &[&str])] = &[
        ("gzip", &["-comp", "gzip"]),
        ("zstd", &["-comp", "zstd"]),
        ("xz", &["-comp", "xz"]),
        ("lz4", &["-comp", "lz4"]),
        ("lzo", &["-comp", "lzo"]),
        ("lzo1x_1", &["-comp", "lzo", "-Xalgorithm", "lzo1x_1"]),
        // enroot's default ENROOT_SQUASH_OPTIONS: lzo metadata and fragments, data stored
        ("enroot", &["-comp", "lzo", "-noD"]),
        ("nofrag", &["-comp", "zstd", "-no-fragments"]),
        ("alwaysfrag", &["-comp", "gzip", "-always-use-fragments"]),
        ("uncompressed", &["-noI", "-noD", "-noF", "-noX"]),
        ("small-blocks", &["-comp", "lz4", "-b", "4096"]),
        ("big-blocks", &["-comp", "zstd", "-b", "1M"]),
    ];
    for (name, args) in variants {
        let img = f.dir.join(format!("{name}.sqsh"));
        let mut a = args.to_vec();
        a.extend(["-p", "dev c 644 0 0 1 3"]);
        common::mksquashfs(&f.src, &img, &a);
        let ar = Archive::open(&img).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_archive(&ar, &f.src, true);
        check_paths(&ar);
        let dev = ar.lookup("/dev", false).unwrap().unwrap();
        assert_eq!(
            (dev.kind, dev.perm, dev.rdev),
            (Kind::CharDev, 0o644, 0x103),
            "{name}: pseudo char dev"
        );
        assert_eq!(
            ar.content_key().unwrap(),
            Archive::open(&img).unwrap().content_key().unwrap()
        );
    }
}

#[test]
fn tar2sqfs_images() {
    let f = fixture();
    for comp in ["zstd", "xz", "gzip", "lzo"] {
        let img = f.dir.join(format!("t2s-{comp}.sqsh"));
        tar2sqfs(&f.src, &img, comp);
        let ar = Archive::open(&img).unwrap();
        check_archive(&ar, &f.src, true);
        check_paths(&ar);
    }
}

#[test]
fn unknown_compressors_are_named() {
    let s = common::Scratch::new();
    std::fs::create_dir(s.join("d")).unwrap();
    std::fs::write(s.join("d/f"), b"x").unwrap();
    // lzma (squashfs 4's deprecated id 2; nothing current writes it)
    let img = s.join("lzma.sqsh");
    tar2sqfs(&s.join("d"), &img, "lzma");
    let e = Archive::open(&img).err().expect("must be refused");
    assert!(matches!(e, SqfsError::Compressor { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("lzma") && msg.contains(&*img.to_string_lossy()),
        "{msg}"
    );
}

#[test]
fn hard_links_and_inode_identity() {
    let f = fixture();
    let img = f.dir.join("hl.sqsh");
    common::mksquashfs(&f.src, &img, &[]);
    let ar = Archive::open(&img).unwrap();
    let a = ar.lookup("/hl/a", false).unwrap().unwrap();
    let b = ar.lookup("/hl/b", false).unwrap().unwrap();
    let c = ar.lookup("/hl/sub/c", false).unwrap().unwrap();
    assert_eq!((a.r, a.nlink), (b.r, 3));
    assert_eq!(a.r, c.r);
    assert_ne!(a.r, ar.lookup("/small", false).unwrap().unwrap().r);
    assert_eq!(ar.root().unwrap().r, ar.root_ref());
}

/// Walk everything and read everything, bounded so that a corrupt loop cannot hang the test.
fn walk_all(ar: &Archive) -> Result<usize, SqfsError> {
    let mut todo = vec![(ar.root()?, 0)];
    let mut n = 0;
    let mut buf = vec![0u8; 1 << 20];
    while let Some((dir, depth)) = todo.pop() {
        for e in ar.readdir(&dir)?.iter() {
            n += 1;
            if n > 100_000 {
                return Ok(n);
            }
            let ino = ar.inode(e.inode)?;
            ar.xattrs(&ino)?;
            match ino.kind {
                Kind::Dir if depth < 100 => todo.push((ino, depth + 1)),
                Kind::File => {
                    let mut off = 0;
                    loop {
                        let k = ar.read_at(&ino, off, &mut buf)?;
                        if k == 0 {
                            break;
                        }
                        off += k as u64;
                    }
                }
                _ => {}
            }
        }
    }
    Ok(n)
}

#[test]
fn corrupt_and_truncated_images_give_errors_not_panics() {
    let f = fixture();
    for comp in ["zstd", "gzip", "xz", "lz4", "lzo"] {
        let img = f.dir.join(format!("c-{comp}.sqsh"));
        common::mksquashfs(&f.src, &img, &["-comp", comp]);
        let good = std::fs::read(&img).unwrap();
        let total = walk_all(&Archive::open(&img).unwrap()).unwrap();
        assert!(total > tree::MANY);
        let bad = f.dir.join("bad.sqsh");
        // truncations: at open or on first use, an error naming the image
        for cut in [
            0,
            50,
            96,
            4096,
            good.len() / 2,
            good.len() - 4097,
            good.len() - 5000,
        ] {
            std::fs::write(&bad, &good[..cut]).unwrap();
            let r = Archive::open(&bad).and_then(|a| walk_all(&a));
            let e = r
                .err()
                .unwrap_or_else(|| panic!("{comp}: truncation at {cut} not noticed"));
            assert!(e.to_string().contains("bad.sqsh"), "{e}");
        }
        // random byte flips everywhere: any result but a panic or a hang
        let bytes = tree::random_bytes(4000, 7 + comp.len() as u64);
        for i in 0..400 {
            let mut b = good.clone();
            let pick = u32::from_le_bytes(bytes[i * 8..i * 8 + 4].try_into().unwrap()) as usize;
            // half the flips in the tables at the end (where most structure lives)
            let pos = if i % 2 == 0 {
                pick % b.len()
            } else {
                b.len() - 1 - pick % 16384.min(b.len())
            };
            b[pos] ^= 1 << (bytes[i * 8 + 4] % 8);
            std::fs::write(&bad, &b).unwrap();
            if let Ok(a) = Archive::open(&bad) {
                let _ = walk_all(&a);
                let _ = a.read_file("/etc/passwd");
                let _ = a.content_key();
            }
        }
    }
}

#[test]
fn content_key_follows_content() {
    let s = common::Scratch::new();
    let src = s.join("src");
    common::busybox_rootfs(&src);
    let (a, b) = (s.join("a.sqsh"), s.join("b.sqsh"));
    common::mksquashfs(&src, &a, &[]);
    std::fs::copy(&a, &b).unwrap();
    let key = Archive::open(&a).unwrap().content_key().unwrap();
    assert_eq!(key.len(), 64);
    assert_eq!(
        key,
        Archive::open(&b).unwrap().content_key().unwrap(),
        "a copy has the same key"
    );
    std::fs::write(src.join("etc/hostname"), b"changed\n").unwrap();
    common::mksquashfs(&src, &b, &[]);
    assert_ne!(key, Archive::open(&b).unwrap().content_key().unwrap());
}

#[test]
fn concurrent_readers_share_one_archive() {
    let f = fixture();
    let img = f.dir.join("conc.sqsh");
    common::mksquashfs(&f.src, &img, &["-comp", "zstd"]);
    let ar = std::sync::Arc::new(Archive::open(&img).unwrap());
    let want = std::fs::read(f.src.join("big")).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let ar = ar.clone();
            let want = want.clone();
            std::thread::spawn(move || {
                for _ in 0..3 {
                    assert!(ar.read_file("/big").unwrap().unwrap() == want);
                    walk_all(&ar).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Lookups in a big directory before any listing is cached go through the directory index.
#[test]
fn big_directory_lookups_through_the_index() {
    let s = common::Scratch::new();
    let src = s.join("src");
    std::fs::create_dir_all(src.join("many")).unwrap();
    for i in 0..tree::MANY {
        std::fs::write(src.join(format!("many/f{i:05}")), format!("{i}\n")).unwrap();
    }
    std::fs::create_dir(src.join("many/zz-subdir")).unwrap();
    let mk = s.join("mk.sqsh");
    common::mksquashfs(&src, &mk, &["-comp", "lz4"]);
    let t2s = s.join("t2s.sqsh");
    tar2sqfs(&src, &t2s, "gzip");
    for img in [mk, t2s] {
        let ar = Archive::open(&img).unwrap();
        let many = ar.lookup("/many", false).unwrap().unwrap();
        for i in (0..tree::MANY).rev() {
            let name = format!("f{i:05}");
            let e = ar.lookup_in(&many, name.as_bytes()).unwrap();
            let e = e.unwrap_or_else(|| panic!("{name} not found in {img:?}"));
            assert_eq!(e.name, name.as_bytes());
            let ino = ar.inode(e.inode).unwrap();
            let mut buf = [0u8; 16];
            let n = ar.read_at(&ino, 0, &mut buf).unwrap();
            assert_eq!(&buf[..n], format!("{i}\n").as_bytes());
        }
        for miss in ["a", "f", "f0", "f00000a", "f02999z", "g", "zz", "zzz"] {
            assert!(
                ar.lookup_in(&many, miss.as_bytes()).unwrap().is_none(),
                "{miss}"
            );
        }
        assert_eq!(
            ar.lookup_in(&many, b"zz-subdir").unwrap().unwrap().kind,
            Kind::Dir
        );
        // and the same answers once the whole listing is cached
        assert_eq!(ar.readdir(&many).unwrap().len(), tree::MANY + 1);
        assert!(ar.lookup_in(&many, b"f01234").unwrap().is_some());
        assert!(ar.lookup_in(&many, b"f0").unwrap().is_none());
    }
}

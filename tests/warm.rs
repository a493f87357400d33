//! Start-up warming against real images: host programs and the libraries the real dynamic
//! loader (ldd) finds for them, copied into a squashfs made by mksquashfs; the closure must be
//! what ldd says, in the order the loader needs it.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use gpurun::image::sqfs::Archive;
use gpurun::runtime::warm::{closure, warm};

/// The files the host's loader maps for `prog`: its interpreter and libraries (ldd's paths).
fn ldd(prog: &str) -> Vec<String> {
    let out = Command::new("ldd")
        .arg(prog)
        .output()
        .expect("ldd (libc-bin)");
    assert!(out.status.success(), "ldd {prog}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let p = l.split_once("=> ").map_or(l, |(_, p)| p);
            let p = p.split(" (").next()?;
            p.starts_with('/').then(|| p.to_string())
        })
        .collect()
}

/// A merged-/usr tree holding `progs` (at /usr/bin/NAME) and every file ldd names for them at its
/// real path, reachable by the path ldd printed.
fn tree(root: &Path, progs: &[&str]) -> BTreeSet<String> {
    for (link, to) in [
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
        ("bin", "usr/bin"),
    ] {
        std::fs::create_dir_all(root.join(to)).unwrap();
        std::os::unix::fs::symlink(to, root.join(link)).unwrap();
    }
    let mut real = BTreeSet::new();
    for prog in progs {
        let host = format!("/usr/bin/{prog}");
        std::fs::copy(&host, root.join(&host[1..])).unwrap();
        real.insert(host.clone());
        for p in ldd(&host) {
            let canon = std::fs::canonicalize(&p).unwrap();
            let dst = root.join(canon.strip_prefix("/").unwrap());
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::copy(&canon, &dst).unwrap();
            real.insert(canon.to_string_lossy().into_owned());
            let merged = ["/lib/", "/lib64/", "/bin/"]
                .iter()
                .find_map(|d| p.strip_prefix(d).map(|rest| format!("/usr{d}{rest}")))
                .unwrap_or_else(|| p.clone());
            let at = root.join(&merged[1..]);
            if at.symlink_metadata().is_err() {
                std::fs::create_dir_all(at.parent().unwrap()).unwrap();
                std::os::unix::fs::symlink(&canon, at).unwrap();
            }
        }
    }
    real
}

/// Each warmed inode by the path it has in `want` (or its reference when it is none of them).
fn names(
    ar: &Archive,
    files: &[std::sync::Arc<gpurun::image::sqfs::Inode>],
    want: &BTreeSet<String>,
) -> Vec<String> {
    files
        .iter()
        .map(|f| {
            want.iter()
                .find(|p| ar.lookup(p, true).unwrap().is_some_and(|i| i.r == f.r))
                .cloned()
                .unwrap_or_else(|| format!("inode {:#x}", f.r))
        })
        .collect()
}

#[test]
fn closure_is_what_the_loader_maps() {
    let s = common::Scratch::new();
    let root = s.path().join("root");
    let want = tree(&root, &["ls", "env"]);
    std::fs::create_dir_all(root.join("app")).unwrap();
    let noise: Vec<u8> = (0..400_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(root.join("unused"), noise).unwrap();
    std::fs::write(root.join("app/run"), "#!/usr/bin/env ls\n").unwrap();
    std::fs::set_permissions(
        root.join("app/run"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let ld = ldd("/usr/bin/ls")
        .into_iter()
        .find(|p| p.contains("ld-"))
        .unwrap();
    let interp = std::fs::canonicalize(ld)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // Without an ld.so.cache (the default directories), and with the host's.
    for cache in [false, true] {
        if cache {
            std::fs::create_dir_all(root.join("etc")).unwrap();
            std::fs::copy("/etc/ld.so.cache", root.join("etc/ld.so.cache")).unwrap();
        }
        let img = s.path().join(format!("warm-{cache}.sqsh"));
        common::mksquashfs(&root, &img, &["-comp", "zstd"]);
        let ar = Archive::open(&img).unwrap();
        let path = [PathBuf::from("/usr/local/bin"), PathBuf::from("/usr/bin")];

        let files = closure(&ar, "ls", &path, Path::new("/"), "");
        let got = names(&ar, &files, &want);
        let ls: BTreeSet<String> = std::iter::once("/usr/bin/ls".to_string())
            .chain(ldd("/usr/bin/ls").iter().map(|p| {
                std::fs::canonicalize(p)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            }))
            .collect();
        assert_eq!(
            got[..2],
            ["/usr/bin/ls".to_string(), interp.clone()],
            "cache {cache}"
        );
        assert_eq!(
            got.iter().cloned().collect::<BTreeSet<_>>(),
            ls,
            "cache {cache}"
        );
        assert_eq!(got.len(), ls.len(), "each file once: {got:?}");

        // A script run by env: the script, env and its libraries, then ls and its own.
        let files = closure(&ar, "/app/run", &path, Path::new("/"), "");
        let got = names(&ar, &files, &want);
        assert!(got[0].starts_with("inode"), "the script first: {got:?}");
        assert_eq!(got[1], "/usr/bin/env");
        assert_eq!(
            got[1..].iter().cloned().collect::<BTreeSet<_>>(),
            want,
            "cache {cache}"
        );

        // Relative to the working directory, and not found at all.
        assert_eq!(
            closure(&ar, "./run", &path, Path::new("/app"), "").len(),
            files.len()
        );
        assert!(closure(&ar, "nonesuch", &path, Path::new("/"), "").is_empty());

        // Warming puts every block of those files in the cache: with the image's bytes gone
        // afterwards they still read whole and right, and a file it did not warm does not.
        let fresh = Archive::open(&img).unwrap();
        let mut told = Vec::new();
        warm(&fresh, "/app/run", &path, Path::new("/"), "", 3, &mut |p| {
            told.push(p.to_string())
        });
        // Each file found is told by the path it was found at, in order.
        let refs = |ps: &[String]| -> Vec<u64> {
            ps.iter()
                .map(|p| fresh.lookup(p, true).unwrap().unwrap().r)
                .collect()
        };
        assert_eq!(refs(&told), files.iter().map(|f| f.r).collect::<Vec<_>>());
        let inode = |p: &str| fresh.lookup(p, true).unwrap().unwrap();
        let warmed: Vec<_> = want.iter().map(|p| (p, inode(p))).collect();
        let unused = inode("/unused");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&img)
            .unwrap()
            .set_len(0)
            .unwrap();
        for (p, ino) in warmed {
            let mut b = vec![0u8; ino.size as usize];
            assert_eq!(fresh.read_at(&ino, 0, &mut b).unwrap(), b.len(), "{p}");
            assert!(b == std::fs::read(p).unwrap(), "{p} from the cache");
        }
        let mut b = vec![0u8; unused.size as usize];
        assert!(
            fresh.read_at(&unused, 0, &mut b).is_err(),
            "an unwarmed file read without its image"
        );
    }
}

#[test]
fn preload_block_by_block() {
    let s = common::Scratch::new();
    let root = s.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(root.join("big"), &data).unwrap();
    let img = s.path().join("big.sqsh");
    common::mksquashfs(&root, &img, &["-comp", "zstd"]);
    let ar = Archive::open(&img).unwrap();
    let ino = ar.lookup("/big", false).unwrap().unwrap();
    // 1,000,000 bytes: seven whole 128 KiB blocks and a tail of 82,496 bytes in a fragment.
    assert_eq!(ar.data_blocks(&ino), 8);
    let sizes: Vec<u64> = (0..9).map(|i| ar.preload_block(&ino, i).unwrap()).collect();
    assert_eq!(
        sizes,
        [131_072, 131_072, 131_072, 131_072, 131_072, 131_072, 131_072, 82_496, 0]
    );
    assert!(ar.read_file("/big").unwrap().unwrap() == data);
}

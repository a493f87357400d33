//! Start-up warming against real images: host programs and the libraries the real dynamic
//! loader (ldd) finds for them, copied into a squashfs made by mksquashfs; the closure must be
//! what ldd says, in the order the loader needs it.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use gpurun::image::sqfs::Archive;
use gpurun::runtime::warm::warm;

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

/// The paths the warming tells for `cmd`, in order (2 CPUs, one worker: the decompression is
/// beside the point here).
fn found(ar: &Archive, cmd: &str, cwd: &str) -> Vec<String> {
    let path = [PathBuf::from("/usr/local/bin"), PathBuf::from("/usr/bin")];
    let mut told = Vec::new();
    warm(ar, cmd, &path, Path::new(cwd), "", 2, &mut |p| {
        told.push(p.to_string())
    });
    told
}

/// Each path by the path in `want` of the same file (where it was found may be through a link),
/// else as it is.
fn names(ar: &Archive, paths: &[String], want: &BTreeSet<String>) -> Vec<String> {
    let r = |p: &str| ar.lookup(p, true).unwrap().map(|i| i.r);
    paths
        .iter()
        .map(|p| want.iter().find(|w| r(w) == r(p)).unwrap_or(p).clone())
        .collect()
}

/// Take an image's bytes away (the Archive keeps its fd): what is not cached no longer reads.
fn empty(img: &Path) {
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    f.set_len(0).unwrap();
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
        let got = names(&ar, &found(&ar, "ls", "/"), &want);
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
        let script = found(&ar, "/app/run", "/");
        let got = names(&ar, &script, &want);
        assert_eq!(got[0], "/app/run", "the script first");
        assert_eq!(got[1], "/usr/bin/env");
        assert_eq!(
            got[1..].iter().cloned().collect::<BTreeSet<_>>(),
            want,
            "cache {cache}"
        );

        // Relative to the working directory, and not found at all.
        assert_eq!(found(&ar, "./run", "/app").len(), script.len());
        assert!(found(&ar, "nonesuch", "/").is_empty());

        // Warming puts every block of those files in the cache: with the image's bytes gone
        // afterwards they still read whole and right, and a file it did not warm does not.
        let fresh = Archive::open(&img).unwrap();
        let path = [PathBuf::from("/usr/bin")];
        warm(
            &fresh,
            "/app/run",
            &path,
            Path::new("/"),
            "",
            4, // CPUs: 3 workers
            &mut |_| {},
        );
        let inode = |p: &str| fresh.lookup(p, true).unwrap().unwrap();
        let warmed: Vec<_> = want.iter().map(|p| (p, inode(p))).collect();
        let unused = inode("/unused");
        empty(&img);
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
    // 1,000,000 bytes: seven whole 128 KiB blocks and a tail in a fragment.
    assert_eq!(ar.data_blocks(&ino), 8);
    for i in 0..8 {
        ar.preload_block(&ino, i).unwrap();
    }
    // Past the end: nothing to do.
    ar.preload_block(&ino, 8).unwrap();
    // Every block is in the cache: the file reads whole with the image's bytes gone.
    empty(&img);
    let mut b = vec![0u8; data.len()];
    assert_eq!(ar.read_at(&ino, 0, &mut b).unwrap(), data.len());
    assert!(b == data);
}

//! The FUSE server end to end at library level: a forked child becomes the unprivileged test
//! user, enters a new user+mount namespace, mounts /dev/fuse the way `gpurun exec` does, serves
//! the image with `serve` and checks the mount against the source tree.

mod common;
mod tree;

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gpurun::image::sqfs::Archive;
use gpurun::runtime::fuse::{serve, Server};
use gpurun::runtime::kept_reads::KeptReads;
use gpurun::runtime::launch::Served;
use gpurun::runtime::provide::Provided;

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn check(r: libc::c_int, what: &str) {
    assert!(r >= 0, "{what}: {}", std::io::Error::last_os_error());
}

/// In the child: become the test user (when root), then unshare user+mount namespaces with
/// that user mapped to 0, as gpurun does.
fn enter_namespaces(uid: u32, gid: u32) {
    unsafe {
        if libc::geteuid() == 0 {
            check(libc::setgroups(0, std::ptr::null()), "setgroups");
            check(libc::setgid(gid), "setgid");
            check(libc::setuid(uid), "setuid");
            // setuid cleared "dumpable", which makes /proc/self/* root's: restore it, as a
            // process that was never root (the real gpurun) has it.
            check(libc::prctl(libc::PR_SET_DUMPABLE, 1), "prctl");
        }
        check(
            libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS),
            "unshare",
        );
    }
    std::fs::write("/proc/self/setgroups", "deny").unwrap();
    std::fs::write("/proc/self/uid_map", format!("0 {uid} 1")).unwrap();
    std::fs::write("/proc/self/gid_map", format!("0 {gid} 1")).unwrap();
    let none = CString::new("none").unwrap();
    let root = CString::new("/").unwrap();
    let r = unsafe {
        libc::mount(
            none.as_ptr(),
            root.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    };
    check(r, "make / private");
}

/// Open /dev/fuse and mount it read-only on `mnt` with the options gpurun's launcher uses.
fn mount_fuse(mnt: &Path) -> OwnedFd {
    mount_fuse_with(mnt, libc::MS_RDONLY)
}

fn mount_fuse_with(mnt: &Path, rdonly: libc::c_ulong) -> OwnedFd {
    let dev = CString::new("/dev/fuse").unwrap();
    let fd = unsafe { libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    check(fd, "open /dev/fuse");
    let opts = CString::new(format!("fd={fd},rootmode=40000,user_id=0,group_id=0")).unwrap();
    let (src, fstype) = (
        CString::new("gpurun").unwrap(),
        CString::new("fuse.gpurun").unwrap(),
    );
    let flags = rdonly | libc::MS_NOSUID | libc::MS_NODEV;
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            c(mnt).as_ptr(),
            fstype.as_ptr(),
            flags,
            opts.as_ptr().cast(),
        )
    };
    check(r, "mount fuse");
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn getxattr(p: &Path, name: &str, size: usize) -> Result<Vec<u8>, i32> {
    let n = CString::new(name).unwrap();
    let mut v = vec![0u8; size];
    let k = unsafe { libc::getxattr(c(p).as_ptr(), n.as_ptr(), v.as_mut_ptr().cast(), size) };
    if k < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap());
    }
    v.truncate(if size == 0 { 0 } else { k as usize });
    if size == 0 {
        v = (k as usize).to_le_bytes().to_vec();
    }
    Ok(v)
}

/// The image server of `img` on `fd`, with `cpus` CPUs, owner (0, 0), providing `provided`.
fn serve_image(img: &Path, fd: OwnedFd, cpus: usize, provided: Vec<Provided>) -> Server {
    serve_with_reads(
        img,
        fd,
        cpus,
        provided,
        Arc::new(KeptReads::load(None)),
        true,
    )
}

/// `abortable`: whether the container could abort the connection (`serve`).
fn serve_with_reads(
    img: &Path,
    fd: OwnedFd,
    cpus: usize,
    provided: Vec<Provided>,
    reads: Arc<KeptReads>,
    abortable: bool,
) -> Server {
    serve(
        Arc::new(Archive::open(img).unwrap()),
        fd,
        cpus,
        (0, 0),
        provided,
        reads,
        abortable,
    )
    .unwrap()
}

fn checks(src: &Path, img: &Path, bad_img: &Path, mnt: &Path, mnt2: &Path) {
    let fd = mount_fuse(mnt);
    let _session = serve_image(img, fd, 2, Vec::new());
    let how = tree::Compare {
        owners: false,
        suid: true,
        dir_nlink: true,
        xattrs: true,
        skip_dev: true,
    };
    tree::compare(src, mnt, how);
    // what tells gpurun an image waits on I/O: a FUSE mount counts, a local disk does not
    assert!(gpurun::runtime::sys::on_network_fs(&mnt.join("small")));
    assert!(!gpurun::runtime::sys::on_network_fs(src));

    // hard links: one inode number, nlink 3; root is inode 1
    let a = std::fs::metadata(mnt.join("hl/a")).unwrap();
    let cc = std::fs::metadata(mnt.join("hl/sub/c")).unwrap();
    assert_eq!((a.ino(), a.nlink()), (cc.ino(), 3));
    assert_eq!(std::fs::metadata(mnt).unwrap().ino(), 1);
    // devices keep their numbers (unusable under nodev)
    let dev = std::fs::symlink_metadata(mnt.join("dev")).unwrap();
    assert_eq!(dev.rdev(), libc::makedev(1, 3));
    // xattr protocol: size query, ERANGE, ENODATA
    assert_eq!(
        getxattr(&mnt.join("xa"), "user.x", 0).unwrap(),
        1usize.to_le_bytes()
    );
    assert_eq!(getxattr(&mnt.join("xa"), "user.x", 10).unwrap(), b"1");
    assert_eq!(
        getxattr(&mnt.join("xa"), "user.big", 100),
        Err(libc::ERANGE)
    );
    assert_eq!(
        getxattr(&mnt.join("xa"), "user.missing", 100),
        Err(libc::ENODATA)
    );
    assert_eq!(
        getxattr(&mnt.join("small"), "user.x", 100),
        Err(libc::ENODATA)
    );
    // misses, twice (the second from the kernel's negative cache), and writes refused
    for _ in 0..2 {
        let e = std::fs::metadata(mnt.join("etc/nope")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }
    let e = std::fs::OpenOptions::new()
        .write(true)
        .open(mnt.join("small"))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    // symlinks resolve through the mount
    assert_eq!(std::fs::read(mnt.join("x/rel")).unwrap(), b"hello\n");
    assert_eq!(
        std::fs::read_link(mnt.join("x/dangling")).unwrap(),
        Path::new("/nowhere/at/all")
    );
    // .. in a listing and path walking through it
    assert_eq!(
        std::fs::read(mnt.join("hl/sub/../../small")).unwrap(),
        b"hello\n"
    );
    // statfs
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    check(
        unsafe { libc::statvfs(c(mnt).as_ptr(), &mut st) },
        "statvfs",
    );
    assert!(st.f_blocks > 0 && st.f_files > tree::MANY as u64 && st.f_bsize == 131072);

    // a corrupt data block: EIO to the reader, the rest of the image still served
    let fd = mount_fuse(mnt2);
    let _bad = serve_image(bad_img, fd, 1, Vec::new());
    let r = std::fs::read(mnt2.join("big")).map(|d| d.len());
    assert_eq!(r.map_err(|e| e.raw_os_error()), Err(Some(libc::EIO)));
    assert_eq!(std::fs::read(mnt2.join("small")).unwrap(), b"hello\n");
    // An image without an xattr table answers xattr requests with ENOSYS once, so the kernel
    // stops asking (overlayfs asks on every lookup): callers see "not supported", as on a
    // file system without xattrs.
    for _ in 0..2 {
        assert_eq!(
            getxattr(&mnt2.join("small"), "user.x", 100),
            Err(libc::EOPNOTSUPP)
        );
    }
}

#[test]
fn fuse_mount_serves_the_image() {
    let s = common::Scratch::new();
    let src = s.join("src");
    tree::build(&src);
    let img = s.join("img.sqsh");
    common::mksquashfs(&src, &img, &["-comp", "zstd", "-p", "dev c 644 0 0 1 3"]);
    // An image whose first data block (right after the 96-byte superblock) is compressed
    // text, then broken: random data would be stored uncompressed, where nothing can tell.
    let src2 = s.join("src2");
    std::fs::create_dir(&src2).unwrap();
    std::fs::write(
        src2.join("big"),
        "compressible line of text\n".repeat(40_000),
    )
    .unwrap();
    std::fs::write(src2.join("small"), "hello\n").unwrap();
    let bad_img = s.join("bad.sqsh");
    common::mksquashfs(&src2, &bad_img, &["-comp", "zstd"]);
    let mut b = std::fs::read(&bad_img).unwrap();
    b[200..300].fill(0xAA);
    std::fs::write(&bad_img, &b).unwrap();
    for m in ["mnt", "mnt2"] {
        std::fs::create_dir(s.join(m)).unwrap();
    }
    // the test user must be able to read the source (it is its own, hence ns-root's, then)
    s.chown_all();
    // chown cleared the setuid bit of the source; the image has it
    std::fs::set_permissions(
        src.join("bin/suid"),
        std::fs::Permissions::from_mode(0o4755),
    )
    .unwrap();
    in_namespaces(|| checks(&src, &img, &bad_img, &s.join("mnt"), &s.join("mnt2")));
}

/// Run `f` in a forked child that is the test user in new user+mount namespaces; fail when it
/// panics. (unshare(CLONE_NEWUSER) needs a single-threaded process, hence the fork.)
fn in_namespaces(f: impl FnOnce()) {
    let (uid, gid) = common::test_ids();
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            enter_namespaces(uid, gid);
            f();
        }));
        unsafe { libc::_exit(if r.is_ok() { 0 } else { 1 }) };
    }
    let mut status = 0;
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed: status {status:#x}"
    );
}

/// `src` as a zstd image, and an empty mount point, both the test user's.
fn image_and_mount_point(s: &common::Scratch, src: &Path) -> (PathBuf, PathBuf) {
    let img = s.join("img.sqsh");
    common::mksquashfs(src, &img, &["-comp", "zstd"]);
    std::fs::create_dir(s.join("mnt")).unwrap();
    s.chown_all();
    (img, s.join("mnt"))
}

/// Whether the first page of `p` is in the page cache, asked without reading it (mincore).
fn cached(p: &Path) -> bool {
    cached_at(p, 0)
}

/// Whether the page of `p` at `off` is in the page cache.
fn cached_at(p: &Path, off: i64) -> bool {
    let f = std::fs::File::open(p).unwrap();
    unsafe {
        use std::os::fd::AsRawFd;
        let a = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            off,
        );
        assert_ne!(a, libc::MAP_FAILED, "mmap {}", p.display());
        let mut v = 0u8;
        check(libc::mincore(a, 4096, &mut v), "mincore");
        libc::munmap(a, 4096);
        v & 1 == 1
    }
}

/// Wait (up to 10 s) for the pusher thread to act.
fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ok() {
        assert!(std::time::Instant::now() < end, "never: {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Files provided in place of mounts (runtime/provide.rs): one takes the place of the image's
/// entry of its name, in lookups, in listings (readdir and readdirplus, at the same place) and
/// in reads; another is added where the image has none. The image's other entries are as ever.
#[test]
fn provided_files_take_the_place_of_the_images() {
    let s = common::Scratch::new();
    let src = s.join("src");
    std::fs::create_dir_all(src.join("etc")).unwrap();
    std::fs::write(src.join("etc/passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
    std::fs::write(src.join("etc/other"), "kept\n").unwrap();
    let (img, mnt) = image_and_mount_point(&s, &src);
    let etc = Archive::open(&img)
        .unwrap()
        .lookup("/etc", false)
        .unwrap()
        .unwrap();
    let provide = |name: &str, text: &str| Provided {
        mount: 0,
        dir: etc.r,
        name: name.into(),
        contents: Arc::from(text.as_bytes()),
    };
    in_namespaces(|| {
        let fd = mount_fuse(&mnt);
        let provided = vec![
            provide("passwd", "me:x:1000:1000::/home/me:/bin/sh\n"),
            provide("hosts", "127.0.0.1 localhost\n"),
        ];
        let _session = serve_image(&img, fd, 2, provided);
        let etc = mnt.join("etc");
        // A listing first (readdirplus fills the kernel's entries), then lookups and reads.
        let mut names: Vec<_> = std::fs::read_dir(&etc)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["hosts", "other", "passwd"]);
        assert_eq!(
            std::fs::read_to_string(etc.join("passwd")).unwrap(),
            "me:x:1000:1000::/home/me:/bin/sh\n"
        );
        assert_eq!(
            std::fs::read_to_string(etc.join("hosts")).unwrap(),
            "127.0.0.1 localhost\n"
        );
        assert_eq!(
            std::fs::read_to_string(etc.join("other")).unwrap(),
            "kept\n"
        );
        let m = std::fs::metadata(etc.join("passwd")).unwrap();
        assert!(m.is_file() && m.len() == 33 && m.permissions().mode() & 0o777 == 0o644);
        let listed: Vec<u64> = std::fs::read_dir(&etc)
            .unwrap()
            .map(|e| e.unwrap().ino())
            .collect();
        assert!(
            listed.contains(&m.ino()),
            "the listing has the provided file's inode"
        );
        // In the image's place in the stream: passwd after other, as mksquashfs sorted them.
        let order: Vec<String> = std::fs::read_dir(&etc)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(order, ["other", "passwd", "hosts"]);
        let e = std::fs::OpenOptions::new()
            .write(true)
            .open(etc.join("passwd"));
        assert_eq!(e.unwrap_err().raw_os_error(), Some(libc::EROFS));
    });
}

/// Reading a directory's files in listing order makes the server push the next ones into the
/// page cache before they are asked for; reads in any other order push nothing. Either way
/// every byte read is the file's.
#[test]
fn directory_scans_are_pushed_ahead() {
    let s = common::Scratch::new();
    let src = s.join("src");
    let content = |d: &str, i: usize| format!("{d} file {i}\n").repeat(300 + i);
    for d in ["scan", "random"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
        for i in 0..60 {
            std::fs::write(src.join(d).join(format!("f{i:03}")), content(d, i)).unwrap();
        }
    }
    let (img, mnt) = image_and_mount_point(&s, &src);
    in_namespaces(|| {
        let fd = mount_fuse(&mnt);
        let _session = serve_image(&img, fd, 2, Vec::new());
        let f = |d: &str, i: usize| mnt.join(d).join(format!("f{i:03}"));
        for d in ["scan", "random"] {
            assert_eq!(std::fs::read_dir(mnt.join(d)).unwrap().count(), 60);
        }
        // random order: nothing pushed, ever
        for i in [40, 7, 23, 8, 50] {
            assert_eq!(
                std::fs::read_to_string(f("random", i)).unwrap(),
                content("random", i)
            );
        }
        // a scan: after f000 and f001, the next files arrive without being read
        for i in 0..2 {
            assert_eq!(
                std::fs::read_to_string(f("scan", i)).unwrap(),
                content("scan", i)
            );
        }
        eventually("f002..f033 of a scan in the page cache", || {
            (2..34).all(|i| cached(&f("scan", i)))
        });
        assert!(!cached(&f("scan", 34)), "pushed beyond the window");
        for i in (0..60).filter(|i| ![40, 7, 23, 8, 50].contains(i)) {
            assert!(!cached(&f("random", i)), "random/f{i:03} pushed");
        }
        // the pushed data is the files' data, and the scan goes on to the end
        for i in 2..60 {
            assert_eq!(
                std::fs::read_to_string(f("scan", i)).unwrap(),
                content("scan", i)
            );
        }
    });
}

/// What a start reads is kept (runtime/kept_reads.rs), and the next start with the same id
/// pushes it into the page cache on the file's first read, with the file's own bytes; a start
/// with another id pushes nothing; a kept range past the end of the file pushes up to its end
/// and no further.
#[test]
fn a_starts_reads_are_pushed_at_the_next_start() {
    let s = common::Scratch::new();
    let src = s.join("src");
    std::fs::create_dir_all(&src).unwrap();
    // Distinct bytes in every page, so a page pushed from the wrong place shows; a last page
    // that is not whole.
    let lib: Vec<u8> = (0..(1u32 << 20) + 1234)
        .map(|i| (i / 4096 + i % 251) as u8)
        .collect();
    std::fs::write(src.join("lib"), &lib).unwrap();
    std::fs::write(src.join("other"), vec![7u8; 64 << 10]).unwrap();
    let (img, mnt) = image_and_mount_point(&s, &src);
    let kept = s.join("x.reads");
    let pread = |p: &Path, off: u64, len: usize| {
        use std::os::unix::fs::FileExt;
        let mut b = vec![0u8; len];
        std::fs::File::open(p)
            .unwrap()
            .read_exact_at(&mut b, off)
            .unwrap();
        b
    };
    // Far into it, and more than one store (runtime/prefetch.rs stores 128 KiB at a time).
    let (far, far_len): (u64, usize) = (256 << 10, 512 << 10);
    let far_pages = [far, far + (200 << 10), far + far_len as u64 - 4096];
    // The pusher stores whether or not the container could abort the connection.
    let start = |id: &str, check: &dyn Fn(&KeptReads)| {
        let reads = Arc::new(KeptReads::load(Some((kept.clone(), id.to_string()))));
        in_namespaces(|| {
            let fd = mount_fuse(&mnt);
            let _session = serve_with_reads(&img, fd, 2, Vec::new(), reads.clone(), false);
            check(&reads);
        });
    };
    // The first start reads the head of `lib` and a range far into it.
    start("img:1", &|reads| {
        let lib_path = mnt.join("lib");
        assert_eq!(
            pread(&lib_path, far, far_len),
            lib[far as usize..][..far_len]
        );
        assert_eq!(pread(&lib_path, 0, 4096), lib[..4096]);
        assert!(reads.keep().unwrap(), "what it read is kept");
    });
    assert!(kept.exists());
    start("img:1", &|_| {
        let lib_path = mnt.join("lib");
        assert!(!cached_at(&lib_path, far as i64), "pushed before any read");
        assert_eq!(pread(&lib_path, 0, 4096), lib[..4096]);
        eventually("the far range pushed after the first read", || {
            far_pages.iter().all(|&p| cached_at(&lib_path, p as i64))
        });
        assert_eq!(
            pread(&lib_path, far, far_len),
            lib[far as usize..][..far_len]
        );
        assert!(!cached(&mnt.join("other")), "a file nobody read pushed");
    });
    start("img:2", &|_| {
        let lib_path = mnt.join("lib");
        assert_eq!(pread(&lib_path, 0, 4096), lib[..4096]);
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            far_pages.iter().all(|&p| !cached_at(&lib_path, p as i64)),
            "pushed for another image or build"
        );
    });
    let lib_ref = Archive::open(&img)
        .unwrap()
        .lookup("/lib", false)
        .unwrap()
        .unwrap()
        .r;
    // A range of 4 MiB: past the file's end, within what a kept file may hold.
    let last = (lib.len() as u64 - 1) & !4095;
    std::fs::write(
        &kept,
        format!("gpurun-kept-reads 1\nimg:3\n{lib_ref} 0 {}\n", 4u64 << 20),
    )
    .unwrap();
    start("img:3", &|_| {
        let lib_path = mnt.join("lib");
        assert_eq!(pread(&lib_path, 0, 4096), lib[..4096]);
        eventually("the last page pushed", || cached_at(&lib_path, last as i64));
        assert_eq!(
            std::fs::metadata(&lib_path).unwrap().len(),
            lib.len() as u64,
            "a push changed the file's size"
        );
        let tail = lib.len() - last as usize;
        assert_eq!(pread(&lib_path, last, tail), lib[last as usize..]);
    });
}

/// A small file's LOOKUP makes the polling server thread store its data into the page cache
/// (runtime/linger.rs), so a read right after finds it there: the bytes are the file's. A file
/// larger than that is not stored, nor is anything where the container cannot abort. The store
/// races the caller's wake-up (it must land between the kernel making the inode and the read),
/// so the test asks it of at least one of many files.
#[test]
fn small_files_are_stored_after_their_lookup() {
    let s = common::Scratch::new();
    let src = s.join("src");
    std::fs::create_dir_all(src.join("small")).unwrap();
    let content = |i: usize| format!("small file {i}\n").repeat(50 + i * 7);
    for i in 0..100 {
        std::fs::write(src.join("small").join(format!("f{i:03}")), content(i)).unwrap();
    }
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(src.join("big"), &big).unwrap();
    let (img, mnt) = image_and_mount_point(&s, &src);
    // Where the container could not abort the connection, the serving threads store nothing.
    in_namespaces(|| {
        let fd = mount_fuse(&mnt);
        let reads = Arc::new(KeptReads::load(None));
        let _session = serve_with_reads(&img, fd, 2, Vec::new(), reads, false);
        for i in 0..20 {
            let f = mnt.join("small").join(format!("f{i:03}"));
            assert!(std::fs::metadata(&f).unwrap().is_file());
            std::thread::sleep(std::time::Duration::from_millis(2));
            assert!(
                !cached(&f),
                "f{i:03} stored where the container cannot abort"
            );
        }
    });
    in_namespaces(|| {
        let fd = mount_fuse(&mnt);
        let _session = serve_image(&img, fd, 2, Vec::new());
        let mut stored = 0;
        for i in 0..100 {
            let f = mnt.join("small").join(format!("f{i:03}"));
            // A LOOKUP, and no read.
            assert!(std::fs::metadata(&f).unwrap().is_file());
            std::thread::sleep(std::time::Duration::from_millis(2));
            if cached(&f) {
                stored += 1;
                assert_eq!(std::fs::read_to_string(&f).unwrap(), content(i), "f{i:03}");
            }
        }
        assert!(stored > 0, "no small file stored after its lookup");
        assert!(std::fs::metadata(mnt.join("big")).unwrap().is_file());
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!cached(&mnt.join("big")), "a large file stored on lookup");
        assert_eq!(std::fs::read(mnt.join("big")).unwrap(), big);
    });
}

fn errno<T: std::fmt::Debug>(r: std::io::Result<T>) -> Option<i32> {
    r.unwrap_err().raw_os_error()
}

/// A read-write mount of the server takes mkdir and create as mount points, nested or not,
/// listed after the image's entries, empty, the user's; names the image has are taken; once
/// sealed, nothing more is made and the image is as it was.
#[test]
fn mount_points_are_made_until_sealed() {
    let s = common::Scratch::new();
    let src = s.join("src");
    std::fs::create_dir_all(src.join("etc")).unwrap();
    std::fs::write(src.join("etc/hosts"), "image\n").unwrap();
    std::fs::write(src.join("file"), "f\n").unwrap();
    // Too long for one READDIRPLUS reply: the kernel goes on with plain READDIRs from an offset,
    // and the point made in it comes in one of those (600 entries fit in one reply here).
    std::fs::create_dir(src.join("big")).unwrap();
    for i in 0..3000 {
        std::fs::write(src.join(format!("big/file-with-a-long-name-{i:04}")), "").unwrap();
    }
    // An image with xattrs, so that the points' (none) are asked for.
    common::setfattr(&src.join("file"), "user.x", "1");
    let (img, mnt) = image_and_mount_point(&s, &src);
    in_namespaces(|| {
        let fd = mount_fuse_with(&mnt, 0);
        let server = serve_image(&img, fd, 2, Vec::new());
        let names = |d: &str| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(mnt.join(d))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            v.sort();
            v
        };
        std::fs::create_dir_all(mnt.join("home/user/work")).unwrap();
        std::fs::create_dir(mnt.join("etc/extra")).unwrap();
        std::fs::File::create_new(mnt.join("etc/resolv.conf")).unwrap();
        assert_eq!(names(""), ["big", "etc", "file", "home"]);
        assert_eq!(names("etc"), ["extra", "hosts", "resolv.conf"]);
        assert_eq!(names("home/user"), ["work"]);
        let d = std::fs::metadata(mnt.join("home/user")).unwrap();
        assert!(d.is_dir() && d.permissions().mode() & 0o777 == 0o755 && d.uid() == 0);
        let f = std::fs::metadata(mnt.join("etc/resolv.conf")).unwrap();
        assert!(f.is_file() && f.len() == 0 && f.permissions().mode() & 0o777 == 0o644);
        assert_eq!(std::fs::read(mnt.join("etc/resolv.conf")).unwrap(), b"");
        assert_ne!(d.ino(), f.ino());
        // `..` of a point, as listed, is its parent (a path walk through `..` would not ask the
        // server: the kernel's dentries answer it)
        let dotdot = |d: &str| {
            let mut dir = nix::dir::Dir::open(
                &mnt.join(d),
                nix::fcntl::OFlag::O_RDONLY,
                nix::sys::stat::Mode::empty(),
            )
            .unwrap();
            let e = dir
                .iter()
                .map(Result::unwrap)
                .find(|e| e.file_name() == c"..");
            e.unwrap().ino()
        };
        let ino = |p: &str| std::fs::metadata(mnt.join(p)).unwrap().ino();
        assert_eq!(dotdot("home/user/work"), ino("home/user"));
        assert_eq!(dotdot("home/user"), ino("home"));
        // a point in a long listing comes once, after all of the image's entries
        std::fs::create_dir(mnt.join("big/zz-point")).unwrap();
        let big = names("big");
        assert_eq!(big.len(), 3001);
        assert_eq!(big.iter().filter(|n| *n == "zz-point").count(), 1);
        assert_eq!(
            getxattr(&mnt.join("home"), "user.x", 100),
            Err(libc::ENODATA)
        );
        // the image's names are taken; a file is no directory
        assert_eq!(
            errno(std::fs::create_dir(mnt.join("etc"))),
            Some(libc::EEXIST)
        );
        let e = std::fs::File::create_new(mnt.join("etc/hosts"));
        assert_eq!(errno(e), Some(libc::EEXIST));
        let e = std::fs::create_dir(mnt.join("etc/resolv.conf/x"));
        assert_eq!(errno(e), Some(libc::ENOTDIR));

        server.seal();
        assert_eq!(
            errno(std::fs::create_dir(mnt.join("late"))),
            Some(libc::EROFS)
        );
        let e = std::fs::File::create_new(mnt.join("home/late"));
        assert_eq!(errno(e), Some(libc::EROFS));
        assert_eq!(
            names(""),
            ["big", "etc", "file", "home"],
            "sealing keeps what was made"
        );
        assert_eq!(std::fs::read(mnt.join("etc/hosts")).unwrap(), b"image\n");
    });
}

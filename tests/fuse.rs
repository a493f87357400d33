//! The FUSE server end to end at library level: a forked child becomes the unprivileged test
//! user, enters a new user+mount namespace, mounts /dev/fuse the way `gpurun exec` does, serves
//! the image with `serve` and checks the mount against the source tree.

mod common;
mod tree;

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use gpurun::image::sqfs::Archive;
use gpurun::runtime::image_server::fuse_fs::serve;

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn check(r: libc::c_int, what: &str) {
    assert!(r >= 0, "{what}: {}", std::io::Error::last_os_error());
}

/// In the child: become the test user (when root), then unshare user+mount namespaces with
/// that user mapped to 0, as gpurun does.
fn enter_namespaces(uid: u32, gid: u32) {
    // SAFETY: integer arguments and a NULL list of length 0: no memory is touched.
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
    // SAFETY: C strings alive during the call.
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
    let dev = CString::new("/dev/fuse").unwrap();
    // SAFETY: a C string alive during the call.
    let fd = unsafe { libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    check(fd, "open /dev/fuse");
    let opts = CString::new(format!("fd={fd},rootmode=40000,user_id=0,group_id=0")).unwrap();
    let (src, fstype) = (
        CString::new("gpurun").unwrap(),
        CString::new("fuse.gpurun").unwrap(),
    );
    let flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
    // SAFETY: C strings alive during the call.
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
    // SAFETY: open returned a new fd that nothing else owns (checked above).
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn getxattr(p: &Path, name: &str, size: usize) -> Result<Vec<u8>, i32> {
    let n = CString::new(name).unwrap();
    let mut v = vec![0u8; size];
    // SAFETY: C strings and a buffer of `size` bytes, alive during the call.
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

/// The image server of `img` on `fd`, with `cpus` CPUs, owner (0, 0).
fn serve_image(img: &Path, fd: OwnedFd, cpus: usize) -> fuser::BackgroundSession {
    serve(Arc::new(Archive::open(img).unwrap()), fd, cpus, (0, 0)).unwrap()
}

fn checks(src: &Path, img: &Path, bad_img: &Path, mnt: &Path, mnt2: &Path) {
    let fd = mount_fuse(mnt);
    let _session = serve_image(img, fd, 2);
    let how = tree::Compare {
        owners: false,
        suid: true,
        dir_nlink: true,
        xattrs: true,
        skip_dev: true,
    };
    tree::compare(src, mnt, how);

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
    // SAFETY: statvfs is plain integers; all zeroes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    check(
        // SAFETY: a C string and `st`, alive during the call.
        unsafe { libc::statvfs(c(mnt).as_ptr(), &mut st) },
        "statvfs",
    );
    assert!(st.f_blocks > 0 && st.f_files > tree::MANY as u64 && st.f_bsize == 131072);

    // a corrupt data block: EIO to the reader, the rest of the image still served
    let fd = mount_fuse(mnt2);
    let _bad = serve_image(bad_img, fd, 1);
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
    // SAFETY: the child runs the test's closure and leaves with _exit, never returning into the harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            enter_namespaces(uid, gid);
            f();
        }));
        // SAFETY: _exit ends the forked child without running the harness's destructors.
        unsafe { libc::_exit(if r.is_ok() { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: `status` outlives the call; the pid is our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed: status {status:#x}"
    );
}

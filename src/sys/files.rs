//! Handles for the mount calls, and files opened, made or written inside a container root
//! without ever leaving it (openat2 RESOLVE_IN_ROOT).

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;

use super::error::*;

/// Open a path without reading it (O_PATH): a handle for the mount calls.
pub fn open_path(path: &Path) -> Result<OwnedFd> {
    let fd = nix::fcntl::open(
        path,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(at("open", path))?;
    Ok(fd)
}

pub fn is_dir(fd: &OwnedFd) -> Result<bool> {
    let st = nix::sys::stat::fstat(fd).map_err(call("fstat"))?;
    Ok(st.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// The `/proc/self/fd/N` path of an fd: mount(2) follows it to the object itself.
pub fn fd_path(fd: &impl AsRawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// How to open a path inside the container root.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Create {
    Dir,
    File,
    /// Open only; do not create.
    No,
}

/// Open `path` inside the directory `root` as if `root` were `/` (openat2 RESOLVE_IN_ROOT), creating
/// missing parents as directories and the last component as `create` says. A hostile image's
/// symlinks and `..` can then never make a mount point land outside the container.
pub fn open_in_root(root: &OwnedFd, path: &Path, create: Create) -> Result<OwnedFd> {
    let rel: PathBuf = path
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    // Most targets exist (or only their last component is missing): one lookup from the root,
    // not one per component.
    let err = match openat2_in_root(root, &rel) {
        Ok(fd) => return Ok(fd),
        Err(e) => e,
    };
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(at("open", path)(err));
    };
    if err != Errno::ENOENT || create == Create::No {
        return Err(at("open", path)(err));
    }
    let dir = open_in_root(root, &Path::new("/").join(parent), Create::Dir)?;
    let c = CString::new(name.as_bytes()).expect("no NUL");
    // An O_PATH directory fd is enough for the *at calls.
    let r = if create == Create::Dir {
        // SAFETY: an O_PATH directory fd and a C string, alive during the call.
        unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) }
    } else {
        let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC;
        // SAFETY: an O_PATH directory fd and a C string, alive during the call.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags, 0o644) };
        if fd >= 0 {
            // SAFETY: the fd openat just returned, closed once.
            unsafe { libc::close(fd) };
        }
        fd.min(0)
    };
    if r < 0 && Errno::last() != Errno::EEXIST {
        return Err(at("create", path)(Errno::last()));
    }
    openat2_in_root(root, &rel).map_err(at("open", path))
}

/// Open `rel` inside the directory `root`, never through a link or out of it (openat2
/// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS): a tree written from an image, entry by entry.
pub fn open_beneath(
    root: &OwnedFd,
    rel: &str,
    flags: nix::fcntl::OFlag,
) -> std::result::Result<OwnedFd, Errno> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    nix::fcntl::openat2(root, if rel.is_empty() { "." } else { rel }, how)
}

fn openat2_in_root(root: &OwnedFd, rel: &Path) -> std::result::Result<OwnedFd, Errno> {
    // SAFETY: open_how is plain integers; all zeroes is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    let c = cstr(if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    });
    // EAGAIN: a path with ".." met a mount or rename made meanwhile anywhere on the machine (the
    // kernel cannot tell it from an escape); openat2(2) says to try again. Seen in CI, where
    // other tests mount in parallel.
    for _ in 0..64 {
        // SAFETY: the fd, the C string and `how` outlive the call.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        match Errno::last() {
            // SAFETY: openat2 returned a new fd that nothing else owns.
            _ if fd >= 0 => return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }),
            Errno::EAGAIN => yield_cpu(),
            e => return Err(e),
        }
    }
    Err(Errno::EAGAIN)
}

/// Create a symlink at `path` inside `root` (parents created), unless something is already there.
pub fn symlink_in_root(root: &OwnedFd, path: &Path, target: &Path) -> Result<()> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    let dir = open_in_root(root, parent, Create::Dir)?;
    let name = CString::new(path.file_name().unwrap_or_default().as_bytes()).expect("no NUL");
    let t = cstr(target);
    // SAFETY: C strings and an O_PATH directory fd, alive during the call.
    if unsafe { libc::symlinkat(t.as_ptr(), dir.as_raw_fd(), name.as_ptr()) } < 0
        && Errno::last() != Errno::EEXIST
    {
        return Err(at("symlink", path)(Errno::last()));
    }
    Ok(())
}

/// Remove the file or symlink at `path` inside `root`, if there is one.
pub fn unlink_in_root(root: &OwnedFd, path: &Path) -> Result<()> {
    let dir = open_in_root(root, path.parent().unwrap_or(Path::new("/")), Create::No)?;
    let name = CString::new(path.file_name().unwrap_or_default().as_bytes()).expect("no NUL");
    // SAFETY: a C string and an O_PATH directory fd, alive meanwhile.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } < 0
        && Errno::last() != Errno::ENOENT
    {
        return Err(at("remove", path)(Errno::last()));
    }
    Ok(())
}

/// Write `contents` as the file at `path` inside `root` (parents created), mode 0644, over what
/// is there; a symlink there is refused (ELOOP), so the write never lands outside the root.
pub fn write_in_root(root: &OwnedFd, path: &Path, contents: &[u8]) -> Result<()> {
    let dir = open_in_root(root, path.parent().unwrap_or(Path::new("/")), Create::Dir)?;
    let name = CString::new(path.file_name().unwrap_or_default().as_bytes()).expect("no NUL");
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a C string and an O_PATH directory fd, alive meanwhile; the fd returned is owned.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, 0o644) };
    if fd < 0 {
        return Err(at("create", path)(Errno::last()));
    }
    // SAFETY: openat returned a new fd that nothing else owns.
    let mut f = unsafe { File::from_raw_fd(fd) };
    let written = f.write_all(contents).and_then(|_| {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o644))
    });
    written.map_err(|e| at("write", path)(io_errno(&e)))
}

pub fn fstat(fd: &OwnedFd) -> Result<nix::sys::stat::FileStat> {
    nix::sys::stat::fstat(fd).map_err(call("fstat"))
}

/// Give the CPU to any other runnable thread; returns at once when there is none.
fn yield_cpu() {
    let _ = nix::sched::sched_yield();
}

/// A C string of a path from an image (squashfs names hold no NUL: checked when parsed).
fn image_cpath(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| std::io::ErrorKind::InvalidInput.into())
}

/// Set the access and modification times of `p` (a symlink itself, not what it points to) to
/// `mtime`, in seconds since the epoch.
pub fn set_mtime_nofollow(p: &Path, mtime: u32) -> std::io::Result<()> {
    let ts = [libc::timespec {
        tv_sec: mtime as libc::time_t,
        tv_nsec: 0,
    }; 2];
    let c = image_cpath(p)?;
    // SAFETY: a C string and a two-element timespec array, both alive during the call.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Set the extended attribute `name` of `p` (a symlink itself) to `value`.
pub fn set_xattr_nofollow(p: &Path, name: &[u8], value: &[u8]) -> std::io::Result<()> {
    let (c, n) = (image_cpath(p)?, CString::new(name)?);
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
    xattr_set(r)
}

/// Set the extended attribute `name` of the open file `fd` to `value`.
pub fn set_xattr_fd(fd: &OwnedFd, name: &[u8], value: &[u8]) -> std::io::Result<()> {
    let n = CString::new(name)?;
    // SAFETY: an open fd, a C string and a value buffer of the length given, alive during the
    // call.
    let r = unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    xattr_set(r)
}

fn xattr_set(r: libc::c_int) -> std::io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A named pipe at `p` of `mode`.
pub fn mkfifo(p: &Path, mode: u32) -> std::io::Result<()> {
    let c = image_cpath(p)?;
    // SAFETY: a C string alive during the call.
    if unsafe { libc::mkfifo(c.as_ptr(), mode) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

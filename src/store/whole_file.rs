//! Files written whole or not at all.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

/// Write `file` whole or not at all: a reader sees the old contents or the new, never a part.
pub fn write_atomically(file: &Path, bytes: &[u8]) -> io::Result<()> {
    write_whole(file, |f| f.write_all(bytes))
}

/// Write `file` whole or not at all, by `write`. The new contents go to an unnamed file first
/// (O_TMPFILE), named only once whole, so a writer that fails or is killed midway leaves no
/// partial file. A replacement is linked under a temporary name and renamed over the old file
/// (a kill in that instant leaves the temporary name, which `prune` removes).
/// Where there are no unnamed files, or they cannot be named (no usable /proc/self/fd), a
/// temporary file of this call's own, made new (never one left by another writer), removed on
/// failure. Two processes may write the same file at once: each temporary name is its own.
pub fn write_whole(file: &Path, write: impl Fn(&mut File) -> io::Result<()>) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    let tmp = file.with_file_name(format!(".{name}.{}.{call}.tmp", std::process::id()));
    let renamed = || {
        fs::rename(&tmp, file).inspect_err(|_| {
            let _ = fs::remove_file(&tmp);
        })
    };
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty());
    let unnamed = OpenOptions::new()
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(dir.unwrap_or(Path::new(".")));
    if let Ok(mut f) = unnamed {
        write(&mut f)?;
        // Named at once where there is no file yet.
        let named = match link_unnamed(&f, file) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                link_unnamed(&f, &tmp).and_then(|_| renamed())
            }
            named => named,
        };
        if named.is_ok() {
            return Ok(());
        }
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    write(&mut f).and_then(|_| renamed()).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

/// Give the unnamed (O_TMPFILE) file `f` the name `to`.
fn link_unnamed(f: &File, to: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let from = std::ffi::CString::new(format!("/proc/self/fd/{}", f.as_raw_fd()))?;
    let to = std::ffi::CString::new(to.as_os_str().as_bytes())?;
    // SAFETY: two NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

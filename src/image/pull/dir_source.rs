//! `dir:DIR`: a root filesystem directory, packed into one tar layer as it is read.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::error::PullError;
use crate::image::flatten::{Layer, OPAQUE_MARKER, WHITEOUT_PREFIX};
use crate::image::meta::ImageMeta;
use crate::image::registry::Platform;

/// A root filesystem directory, packed as one layer by a writer thread.
pub(super) fn rootfs_dir(dir: &Path, source: &str) -> Result<(Vec<Layer>, ImageMeta), PullError> {
    if !dir.is_dir() {
        return Err(PullError::Source {
            source_ref: source.to_string(),
            detail: format!("{} is not a directory", dir.display()),
        });
    }
    let meta = ImageMeta {
        source: source.to_string(),
        platform: Platform::host().to_string(),
        ..Default::default()
    };
    Ok((vec![dir_layer(dir, source, false, Vec::new())], meta))
}

/// The tree under `dir` as a layer named `name`, but for the paths in `skip` (relative). An
/// overlay's `upper` directory has its whiteouts and opaque directories written as OCI ones,
/// and its own xattrs left out.
pub(super) fn dir_layer(dir: &Path, name: &str, upper: bool, skip: Vec<PathBuf>) -> Layer {
    // Absolute, as the messages name paths in it.
    let root = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    Layer {
        name: name.to_string(),
        size: 0,
        open: Box::new(move || {
            let (reader, writer) = io::pipe()?;
            let (root, skip) = (root.clone(), skip.clone());
            let handle = std::thread::spawn(move || -> io::Result<()> {
                let mut b = tar::Builder::new(writer);
                let mut p = Packer {
                    root: &root,
                    upper,
                    skip,
                    seen: HashMap::new(),
                };
                p.dir(Path::new(""), &mut b)?;
                b.into_inner().map(drop)
            });
            Ok(Box::new(ThreadReader {
                pipe: reader,
                handle: Some(handle),
            }) as Box<dyn Read + Send>)
        }),
        span: None,
    }
}

/// Writes a directory tree into a tar stream (`dir_layer`).
struct Packer<'a> {
    root: &'a Path,
    /// An overlay's upper directory (`dir_layer`).
    upper: bool,
    /// Paths left out.
    skip: Vec<PathBuf>,
    /// Device and inode to the path first written with them.
    seen: HashMap<(u64, u64), PathBuf>,
}

/// xattrs of overlayfs's own bookkeeping in an upper directory.
const OVERLAY_XATTRS: [&str; 2] = [
    "SCHILY.xattr.user.overlay.",
    "SCHILY.xattr.trusted.overlay.",
];

impl Packer<'_> {
    /// Write the tree under `root/rel` into `b`, names sorted, each directory before what it
    /// holds: a second name of a file already written becomes a hard link to the first, xattrs
    /// go into PAX records, symlinks are stored, never followed. Sockets are skipped (they mean
    /// nothing in an image).
    fn dir<W: io::Write>(&mut self, rel: &Path, b: &mut tar::Builder<W>) -> io::Result<()> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let here = match rel.as_os_str().is_empty() {
            true => self.root.to_path_buf(),
            false => self.root.join(rel),
        };
        let mut names: Vec<_> = fs::read_dir(&here)
            .and_then(|d| d.map(|e| e.map(|e| e.file_name())).collect())
            .map_err(|e| at(&here, e))?;
        names.sort();
        for name in names {
            let rel = rel.join(&name);
            let full = self.root.join(&rel);
            let md = fs::symlink_metadata(&full).map_err(|e| at(&full, e))?;
            let ft = md.file_type();
            if ft.is_socket() || self.skip.contains(&rel) {
                continue;
            }
            if self.upper && ft.is_char_device() && md.rdev() == 0 {
                let mut wh = std::ffi::OsString::from(WHITEOUT_PREFIX);
                wh.push(&name);
                empty_entry(b, &rel.with_file_name(wh))?;
                continue;
            }
            self.entry(&rel, &full, &md, b)?;
        }
        Ok(())
    }

    /// One entry of `dir`, and what a directory holds.
    fn entry<W: io::Write>(
        &mut self,
        rel: &Path,
        full: &Path,
        md: &fs::Metadata,
        b: &mut tar::Builder<W>,
    ) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let ft = md.file_type();
        let mut h = tar::Header::new_gnu();
        h.set_metadata_in_mode(md, tar::HeaderMode::Complete);
        let mut xattrs = read_xattrs(full);
        let opaque = self.upper
            && xattrs
                .iter()
                .any(|(k, v)| k.ends_with(".overlay.opaque") && v == b"y");
        if self.upper {
            xattrs.retain(|(k, _)| !OVERLAY_XATTRS.iter().any(|o| k.starts_with(o)));
        }
        if !xattrs.is_empty() {
            b.append_pax_extensions(xattrs.iter().map(|(k, v)| (k.as_str(), v.as_slice())))?;
        }
        if ft.is_file() && md.nlink() > 1 {
            if let Some(first) = self.seen.get(&(md.dev(), md.ino())) {
                h.set_entry_type(tar::EntryType::Link);
                h.set_size(0);
                return b.append_link(&mut h, rel, first);
            }
            self.seen.insert((md.dev(), md.ino()), rel.to_path_buf());
        }
        if ft.is_dir() {
            b.append_data(&mut h, rel, io::empty())?;
            if opaque {
                empty_entry(b, &rel.join(OPAQUE_MARKER))?;
            }
            return self.dir(rel, b);
        }
        let full = full.to_path_buf();
        let rel = rel.to_path_buf();
        if ft.is_symlink() {
            b.append_link(
                &mut h,
                &rel,
                fs::read_link(&full).map_err(|e| at(&full, e))?,
            )
        } else if ft.is_file() {
            b.append_data(&mut h, &rel, File::open(&full).map_err(|e| at(&full, e))?)
        } else {
            // fifos and device nodes: header only (devices are dropped by the flattener)
            b.append_data(&mut h, &rel, io::empty())
        }
    }
}

/// `e`, met at `path`, naming it: the flattener says "permission denied" and the path.
fn at(path: &Path, e: io::Error) -> io::Error {
    match e.kind() {
        io::ErrorKind::PermissionDenied => io::Error::new(e.kind(), path.display().to_string()),
        _ => io::Error::new(e.kind(), format!("{}: {e}", path.display())),
    }
}

/// An empty regular file at `path` (a whiteout or an opaque directory's marker).
fn empty_entry<W: io::Write>(b: &mut tar::Builder<W>, path: &Path) -> io::Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o644);
    h.set_size(0);
    b.append_data(&mut h, path, io::empty())
}

/// A file's xattrs as PAX records (`SCHILY.xattr.NAME`), without following a symlink; none
/// where the file system has none or refuses to list them.
fn read_xattrs(p: &Path) -> Vec<(String, Vec<u8>)> {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return Vec::new();
    };
    let mut names = vec![0u8; 64 << 10];
    // SAFETY: valid path and buffer of the given length.
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return Vec::new();
    }
    names.truncate(n as usize);
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let Ok(cname) = std::ffi::CString::new(name) else {
            continue;
        };
        let mut v = vec![0u8; 64 << 10];
        // SAFETY: valid strings and buffer of the given length.
        let k =
            unsafe { libc::lgetxattr(c.as_ptr(), cname.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        if k >= 0 {
            v.truncate(k as usize);
            out.push((format!("SCHILY.xattr.{}", String::from_utf8_lossy(name)), v));
        }
    }
    out
}

/// Reads a pipe filled by a thread; at the end, the thread's error (if any) becomes the reader's.
struct ThreadReader {
    pipe: io::PipeReader,
    handle: Option<std::thread::JoinHandle<io::Result<()>>>,
}

impl Read for ThreadReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.pipe.read(buf)?;
        if n == 0 {
            if let Some(h) = self.handle.take() {
                h.join()
                    .map_err(|_| io::Error::other("tar writer thread panicked"))??;
            }
        }
        Ok(n)
    }
}

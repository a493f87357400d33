//! `dir:DIR`: a root filesystem directory, packed into one tar layer as it is read.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::error::PullError;
use crate::image::flatten::Layer;
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
    let root = dir.to_path_buf();
    let layer = Layer {
        name: source.to_string(),
        size: 0,
        open: Box::new(move || {
            let (reader, writer) = io::pipe()?;
            let root = root.clone();
            let handle = std::thread::spawn(move || -> io::Result<()> {
                let mut b = tar::Builder::new(writer);
                pack_dir(&root, Path::new(""), &mut b, &mut HashMap::new())?;
                b.into_inner().map(drop)
            });
            Ok(Box::new(ThreadReader {
                pipe: reader,
                handle: Some(handle),
            }) as Box<dyn Read + Send>)
        }),
    };
    let meta = ImageMeta {
        source: source.to_string(),
        platform: Platform::host().to_string(),
        ..Default::default()
    };
    Ok((vec![layer], meta))
}

/// Write the tree under `root/rel` into `b`, names sorted, each directory before what it holds:
/// a second name of a file already written becomes a hard link to the first (`seen`: device and
/// inode to path), xattrs go into PAX records, symlinks are stored, never followed. Sockets
/// are skipped (they mean nothing in an image).
fn pack_dir<W: io::Write>(
    root: &Path,
    rel: &Path,
    b: &mut tar::Builder<W>,
    seen: &mut HashMap<(u64, u64), PathBuf>,
) -> io::Result<()> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let mut names: Vec<_> = fs::read_dir(root.join(rel))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()?;
    names.sort();
    for name in names {
        let rel = rel.join(&name);
        let full = root.join(&rel);
        let md = fs::symlink_metadata(&full)?;
        let ft = md.file_type();
        if ft.is_socket() {
            continue;
        }
        let mut h = tar::Header::new_gnu();
        h.set_metadata_in_mode(&md, tar::HeaderMode::Complete);
        let xattrs = read_xattrs(&full);
        if !xattrs.is_empty() {
            b.append_pax_extensions(xattrs.iter().map(|(k, v)| (k.as_str(), v.as_slice())))?;
        }
        if ft.is_file() && md.nlink() > 1 {
            if let Some(first) = seen.get(&(md.dev(), md.ino())) {
                h.set_entry_type(tar::EntryType::Link);
                h.set_size(0);
                b.append_link(&mut h, &rel, first)?;
                continue;
            }
            seen.insert((md.dev(), md.ino()), rel.clone());
        }
        if ft.is_dir() {
            b.append_data(&mut h, &rel, io::empty())?;
            pack_dir(root, &rel, b, seen)?;
        } else if ft.is_symlink() {
            b.append_link(&mut h, &rel, fs::read_link(&full)?)?;
        } else if ft.is_file() {
            b.append_data(&mut h, &rel, File::open(&full)?)?;
        } else {
            // fifos and device nodes: header only (devices are dropped by the flattener)
            b.append_data(&mut h, &rel, io::empty())?;
        }
    }
    Ok(())
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

//! Directories and paths: listings, a name looked up through the directory index, a path
//! resolved inside the image (its symlinks followed there), a whole file read.

use std::sync::Arc;

use super::archive::Archive;
use super::error::SqfsError;
use super::format::{self, Body, DirEntry, Kind};
use super::inode::Inode;
use crate::lock;

const MAX_SYMLINKS: usize = 40;

impl Archive {
    /// The names in directory `path` (symlinks followed), lossily as text; None when it is
    /// not a readable directory.
    pub fn list_names(&self, path: &str) -> Option<Vec<String>> {
        let dir = self.lookup(path, true).ok()??;
        let entries = self.readdir(&dir).ok()?;
        Some(
            entries
                .iter()
                .map(|e| String::from_utf8_lossy(&e.name).into_owned())
                .collect(),
        )
    }

    /// Look a name up in a directory: in its cached listing, else through the directory index
    /// (parsing only the part of the listing that can hold the name), else in the whole
    /// listing, which is then cached.
    pub fn lookup_in(&self, dir: &Inode, name: &[u8]) -> Result<Option<DirEntry>, SqfsError> {
        // Listings are sorted by name: the kernel's own squashfs lookup relies on it too.
        let search = |entries: &[DirEntry]| {
            entries
                .binary_search_by(|e| e.name.as_slice().cmp(name))
                .ok()
                .map(|i| entries[i].clone())
        };
        if let Some(d) = lock(&self.caches.dirs).get(dir.r) {
            return Ok(search(&d));
        }
        let Body::Dir(loc) = &dir.body else {
            return Err(self.corrupt(format!("inode {:#x} read as a directory", dir.r)));
        };
        if loc.index.is_empty() {
            return Ok(search(&self.readdir(dir)?));
        }
        let (mut block, mut skip) = (loc.block, 0);
        for ix in loc.index.iter().take_while(|ix| ix.name.as_slice() <= name) {
            (block, skip) = (ix.block, ix.offset);
        }
        let offset = (loc.offset as usize + skip as usize) % format::METADATA_SIZE;
        let mut c = self.cursor(self.sb.directory_table + block as u64, offset);
        let mut found = None;
        let scan = format::scan_dir(&mut c, loc.size - skip, |e| {
            match e.name.as_slice().cmp(name) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Equal => {
                    found = Some(e);
                    false
                }
                std::cmp::Ordering::Greater => false,
            }
        });
        self.fmt(scan)?;
        Ok(found)
    }

    /// The entries of a directory (without . and ..), sorted by name as squashfs stores them.
    pub fn readdir(&self, dir: &Inode) -> Result<Arc<Vec<DirEntry>>, SqfsError> {
        let Body::Dir(loc) = &dir.body else {
            return Err(self.corrupt(format!("inode {:#x} read as a directory", dir.r)));
        };
        if let Some(d) = lock(&self.caches.dirs).get(dir.r) {
            return Ok(d.clone());
        }
        let mut c = self.cursor(
            self.sb.directory_table + loc.block as u64,
            loc.offset as usize,
        );
        let entries = Arc::new(self.fmt(format::parse_dir(&mut c, loc.size))?);
        let weight = entries.iter().map(|e| e.name.len() + 56).sum::<usize>() + 64;
        lock(&self.caches.dirs).put(dir.r, entries.clone(), weight);
        Ok(entries)
    }

    /// Resolve an absolute path inside the image, following symlinks inside the image
    /// (the last component only when `follow` is set). None when it does not exist.
    pub fn lookup(&self, path: &str, follow: bool) -> Result<Option<Arc<Inode>>, SqfsError> {
        let mut stack = vec![self.root()?];
        let mut todo: Vec<Vec<u8>> = components(path.as_bytes());
        todo.reverse();
        let mut links = 0;
        while let Some(name) = todo.pop() {
            let cur = stack.last().unwrap().clone();
            if name == b".." {
                if stack.len() > 1 {
                    stack.pop();
                }
                continue;
            }
            if cur.kind != Kind::Dir {
                return Ok(None);
            }
            let Some(e) = self.lookup_in(&cur, &name)? else {
                return Ok(None);
            };
            let ino = self.inode(e.inode)?;
            if ino.kind == Kind::Symlink && (follow || !todo.is_empty()) {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(SqfsError::SymlinkLoop {
                        path: self.path.clone(),
                        inner: path.to_owned(),
                    });
                }
                let target = ino.symlink_target().unwrap_or_default();
                if target.starts_with(b"/") {
                    stack.truncate(1);
                }
                let mut parts = components(target);
                parts.reverse();
                todo.extend(parts);
                continue;
            }
            stack.push(ino);
        }
        Ok(stack.pop())
    }

    pub fn exists(&self, path: &str) -> Result<bool, SqfsError> {
        Ok(self.lookup(path, false)?.is_some())
    }

    /// A whole regular file by absolute path (symlinks followed), None when absent.
    pub fn read_file(&self, path: &str) -> Result<Option<Vec<u8>>, SqfsError> {
        let Some(ino) = self.lookup(path, true)? else {
            return Ok(None);
        };
        if ino.kind != Kind::File {
            return Err(SqfsError::NotAFile {
                path: self.path.clone(),
                inner: path.to_owned(),
            });
        }
        let mut out = Vec::new();
        let mut buf = vec![0u8; self.sb.block_size as usize];
        loop {
            let n = self.read_at(&ino, out.len() as u64, &mut buf)?;
            if n == 0 {
                return Ok(Some(out));
            }
            out.extend_from_slice(&buf[..n]);
        }
    }
}

fn components(p: &[u8]) -> Vec<Vec<u8>> {
    p.split(|&c| c == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(|c| c.to_vec())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_components() {
        assert_eq!(
            components(b"/a//b/./c/"),
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
        assert!(components(b"/").is_empty());
        assert_eq!(components(b"../x"), vec![b"..".to_vec(), b"x".to_vec()]);
    }
}

//! The mount points an image lacks, made in the image server's memory while the root is built,
//! and the files gpurun provides in place of mounts (runtime/provide.rs).
//!
//! The container's mounts (the home directory, the cwd, binds, the driver tmpfs) need a directory
//! or an empty file at their destination. Rather than an overlay over the whole image, whose
//! every lookup and open costs the container a second filesystem layer, the image server takes
//! the set-up's mkdir and create itself and keeps the new entries here: empty directories and
//! empty files, added to the image's listings. Once the root is built the table is sealed and the
//! image is read-only again, whatever the container does to its mounts. A provided file is a
//! point with contents, made before the set-up starts; it takes the place of any entry of its
//! name in the image. Pure bookkeeping: the FUSE server (runtime/fuse.rs) asks, this answers.

use std::ffi::{OsStr, OsString};
use std::sync::Arc;

/// FUSE inode numbers of the points start here: image inode numbers come from squashfs inode
/// references (48 bits), so the two never meet.
pub const FIRST: u64 = 1 << 63;

/// Whether a FUSE inode number is one of the points'.
pub fn is_point(ino: u64) -> bool {
    ino >= FIRST
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointKind {
    Dir,
    File,
}

/// One point: where it is and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    pub ino: u64,
    /// The FUSE inode number of its directory (the image's, or another point's).
    pub parent: u64,
    pub kind: PointKind,
    /// The length of a provided file's contents; 0 for a mount point.
    pub size: u64,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The root is built: the image takes no new entries (EROFS).
    Sealed,
    /// The name is taken (EEXIST).
    Exists,
    /// The parent is a point that is a file (ENOTDIR).
    NotDir,
}

#[derive(Default)]
pub struct Points {
    /// Point `i` has the inode number `FIRST + i`. A handful per container: a scan is cheaper
    /// than any index.
    entries: Vec<Entry>,
    sealed: bool,
}

struct Entry {
    point: Point,
    name: OsString,
    /// A provided file's contents.
    contents: Option<Arc<[u8]>>,
}

impl Points {
    /// Add `name` in the directory `parent`, which the caller found not to have it in the
    /// image. Returns the new point.
    pub fn add(&mut self, parent: u64, name: &OsStr, kind: PointKind) -> Result<Point, Refused> {
        if self.sealed {
            return Err(Refused::Sealed);
        }
        if self.get(parent).is_some_and(|p| p.kind != PointKind::Dir) {
            return Err(Refused::NotDir);
        }
        if self.lookup(parent, name).is_some() {
            return Err(Refused::Exists);
        }
        Ok(self.push(parent, name, kind, None))
    }

    /// A file with `contents` at `name` in the image directory `parent`, in place of whatever
    /// the image has there; made before the set-up, so sealing does not apply. Refused where a
    /// point of that name was made already.
    pub fn provide(
        &mut self,
        parent: u64,
        name: &OsStr,
        contents: Arc<[u8]>,
    ) -> Result<Point, Refused> {
        if self.lookup(parent, name).is_some() {
            return Err(Refused::Exists);
        }
        Ok(self.push(parent, name, PointKind::File, Some(contents)))
    }

    fn push(
        &mut self,
        parent: u64,
        name: &OsStr,
        kind: PointKind,
        contents: Option<Arc<[u8]>>,
    ) -> Point {
        let point = Point {
            ino: FIRST + self.entries.len() as u64,
            parent,
            kind,
            size: contents.as_ref().map_or(0, |c| c.len() as u64),
        };
        self.entries.push(Entry {
            point,
            name: name.to_owned(),
            contents,
        });
        point
    }

    fn entry(&self, ino: u64) -> Option<&Entry> {
        let i = usize::try_from(ino.checked_sub(FIRST)?).ok()?;
        self.entries.get(i)
    }

    pub fn get(&self, ino: u64) -> Option<Point> {
        self.entry(ino).map(|e| e.point)
    }

    /// A provided file's contents (empty for a mount point).
    pub fn contents(&self, ino: u64) -> Option<Arc<[u8]>> {
        self.entry(ino)?.contents.clone()
    }

    pub fn lookup(&self, parent: u64, name: &OsStr) -> Option<Point> {
        self.entries
            .iter()
            .find(|e| e.point.parent == parent && e.name == name)
            .map(|e| e.point)
    }

    /// The points in `dir`, in the order they were made (listed after the image's entries, or
    /// in the place of the image's entry a provided file replaces).
    pub fn children(&self, dir: u64) -> impl Iterator<Item = (Point, &OsStr)> {
        self.entries
            .iter()
            .filter(move |e| e.point.parent == dir)
            .map(|e| (e.point, e.name.as_os_str()))
    }

    /// The root is built: refuse every new point from now on.
    pub fn seal(&mut self) {
        self.sealed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> &OsStr {
        OsStr::new(s)
    }

    #[test]
    fn points_nest_and_list_in_order() {
        let mut t = Points::default();
        let home = t.add(5, name("home"), PointKind::Dir).unwrap();
        let user = t.add(home.ino, name("user"), PointKind::Dir).unwrap();
        let hosts = t.add(5, name("hosts"), PointKind::File).unwrap();
        assert!(is_point(home.ino) && is_point(user.ino) && !is_point(5));
        assert_ne!(home.ino, user.ino);
        assert_eq!(t.get(user.ino), Some(user));
        assert_eq!(user.parent, home.ino);
        assert_eq!(t.lookup(home.ino, name("user")), Some(user));
        assert_eq!(t.lookup(5, name("user")), None, "names are per directory");
        let in_root: Vec<_> = t.children(5).map(|(p, n)| (p.ino, n)).collect();
        assert_eq!(
            in_root,
            vec![(home.ino, name("home")), (hosts.ino, name("hosts"))]
        );
        assert_eq!(t.children(user.ino).count(), 0);
    }

    #[test]
    fn provided_files_hold_their_contents() {
        let mut t = Points::default();
        let hosts = t
            .provide(5, name("hosts"), Arc::from(&b"127.0.0.1 h\n"[..]))
            .unwrap();
        let mp = t.add(5, name("mnt"), PointKind::Dir).unwrap();
        assert_eq!((hosts.kind, hosts.size, mp.size), (PointKind::File, 12, 0));
        assert_eq!(
            t.contents(hosts.ino).as_deref(),
            Some(&b"127.0.0.1 h\n"[..])
        );
        assert_eq!(t.contents(mp.ino), None);
        assert_eq!(t.lookup(5, name("hosts")), Some(hosts));
        // Once per name, before or after sealing; a mount point cannot take its place either.
        assert_eq!(
            t.provide(5, name("hosts"), Arc::from(&b""[..])),
            Err(Refused::Exists)
        );
        assert_eq!(
            t.add(5, name("hosts"), PointKind::File),
            Err(Refused::Exists)
        );
        assert_eq!(
            t.add(hosts.ino, name("x"), PointKind::Dir),
            Err(Refused::NotDir)
        );
    }

    #[test]
    fn refusals() {
        let mut t = Points::default();
        let f = t.add(5, name("f"), PointKind::File).unwrap();
        let table = [(5, "f", Refused::Exists), (f.ino, "x", Refused::NotDir)];
        for (parent, n, want) in table {
            assert_eq!(t.add(parent, name(n), PointKind::Dir), Err(want), "{n}");
        }
        t.seal();
        assert_eq!(t.add(5, name("g"), PointKind::Dir), Err(Refused::Sealed));
        assert_eq!(t.get(f.ino), Some(f), "sealing keeps what was made");
        assert_eq!(t.get(FIRST + 7), None);
        assert_eq!(t.get(3), None);
    }
}

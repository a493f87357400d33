//! Places gpurun keeps as its own on a machine shared by many users: the cache and its
//! subdirectories, state files, temporary outputs. Each is made by gpurun and checked before use,
//! so that nothing another local user made first, or can change later, steers what gpurun runs
//! or writes.
//!
//! The rule, one for every such place:
//! - the directory is the caller's own, not a symbolic link another user made, and nobody else
//!   may write to it (for [`Visibility::Private`], nor read or search it);
//! - every directory on its way from `/` can be changed only by root or the caller, or is sticky
//!   and root's or the caller's (as /tmp and /var/tmp are), so nobody can swap it for another
//!   after the check;
//! - a symbolic link on the way is followed only when root or the caller made it.
//!
//! The path returned is the resolved one, with no link left in it: later opens go exactly where
//! the check looked.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Symbolic links followed at most on one path (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// Who may read a place besides its owner. Nobody else ever writes to one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Only the owner (mode 0700): the cache, whose images may come from private registries.
    Private,
    /// Everyone may read (mode 0755): a cache a site account publishes for all users.
    Readable,
}

impl Visibility {
    fn mode(self) -> u32 {
        match self {
            Visibility::Private => 0o700,
            Visibility::Readable => 0o755,
        }
    }
}

/// What is wrong with a place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Another user owns it.
    NotYours {
        owner: u32,
        mode: u32,
    },
    /// Someone besides its owner may write to it (or, for a private place, read it).
    OpenToOthers {
        owner: u32,
        mode: u32,
    },
    /// A directory on the way that others may change (not sticky).
    WayOpenToOthers {
        dir: PathBuf,
        owner: u32,
        mode: u32,
    },
    /// A symbolic link on the way that another user made.
    ForeignLink {
        link: PathBuf,
        owner: u32,
    },
    NotDir,
    NotRegular,
    TooManyLinks,
    Io(io::ErrorKind, String),
}

/// A place gpurun refused, with what is wrong and what the user can do.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{path}: {problem}; {fix}")]
pub struct PlaceError {
    pub path: PathBuf,
    pub problem: Problem,
    /// What the user can do about it, in the caller's words.
    pub fix: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::NotYours { owner, mode } => write!(
                f,
                "owned by {} (mode {mode:04o}), not by you: gpurun uses no place another user made",
                user_name(*owner)
            ),
            Problem::OpenToOthers { owner, mode } => write!(
                f,
                "other users may change it (owner {}, mode {mode:04o})",
                user_name(*owner)
            ),
            Problem::WayOpenToOthers { dir, owner, mode } => write!(
                f,
                "the directory {} on its way may be changed by other users (owner {}, mode {mode:04o})",
                dir.display(),
                user_name(*owner)
            ),
            Problem::ForeignLink { link, owner } => write!(
                f,
                "{} is a symbolic link made by {}: gpurun follows no link another user made",
                link.display(),
                user_name(*owner)
            ),
            Problem::NotDir => f.write_str("not a directory"),
            Problem::NotRegular => f.write_str("not a regular file"),
            Problem::TooManyLinks => f.write_str("too many levels of symbolic links"),
            Problem::Io(_, e) => f.write_str(e),
        }
    }
}

impl PlaceError {
    /// Whether the place does not exist (as opposed to existing and being refused).
    pub fn is_missing(&self) -> bool {
        matches!(self.problem, Problem::Io(io::ErrorKind::NotFound, _))
    }
}

/// `uid`'s name, or `uid N` when it has none.
pub fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(uid.into()) {
        Ok(Some(u)) => format!("{} (uid {uid})", u.name),
        _ => format!("uid {uid}"),
    }
}

fn caller() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn io_problem(e: &io::Error) -> Problem {
    let text = e.to_string();
    // "No such file or directory (os error 2)" reads better without the number.
    let text = text.split(" (os error").next().unwrap_or(&text).to_string();
    Problem::Io(e.kind(), text)
}

/// Whether a directory on the way to a place can be changed by nobody but root and `uid`. A
/// sticky directory of root's or the caller's (/tmp) is fine: others can add names to it, but
/// not replace ours. The owner of a sticky directory may rename anything in it, so another
/// user's is not.
fn way_is_safe(mode: u32, owner: u32, uid: u32, own_group: impl FnOnce() -> bool) -> bool {
    let owner_ok = owner == 0 || owner == uid;
    if mode & libc::S_ISVTX != 0 {
        return owner_ok;
    }
    let group_ok = mode & 0o020 == 0 || (owner == uid && own_group());
    owner_ok && mode & 0o002 == 0 && group_ok
}

/// Whether `gid` is `uid`'s user-private group (same name as the user, the user's primary
/// group), which many distributions make group-writable directories for: only `uid` is in it.
fn own_user_group(gid: u32, uid: u32) -> bool {
    let user = nix::unistd::User::from_uid(uid.into()).ok().flatten();
    let group = nix::unistd::Group::from_gid(gid.into()).ok().flatten();
    match (user, group) {
        (Some(u), Some(g)) => u.gid.as_raw() == gid && g.name == u.name && g.mem.is_empty(),
        _ => false,
    }
}

/// `path` with every symbolic link resolved, checking the way there: each directory on it safe
/// for `uid` (`way_is_safe`), each link made by root or `uid`. The last component must exist;
/// what it is, is the caller's to check.
pub fn resolve_checked(path: &Path, uid: u32) -> Result<PathBuf, (PathBuf, Problem)> {
    let mut todo: Vec<std::ffi::OsString> = Vec::new();
    push_components(&mut todo, path);
    let mut here = PathBuf::from("/");
    let mut links = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            here.pop();
            continue;
        }
        let next = here.join(&name);
        let md = fs::symlink_metadata(&next).map_err(|e| (next.clone(), io_problem(&e)))?;
        if md.file_type().is_symlink() {
            if md.uid() != 0 && md.uid() != uid {
                let owner = md.uid();
                return Err((
                    path.to_path_buf(),
                    Problem::ForeignLink { link: next, owner },
                ));
            }
            links += 1;
            if links > MAX_LINKS {
                return Err((path.to_path_buf(), Problem::TooManyLinks));
            }
            let target = fs::read_link(&next).map_err(|e| (next.clone(), io_problem(&e)))?;
            if target.is_absolute() {
                here = PathBuf::from("/");
            }
            push_components(&mut todo, &target);
            continue;
        }
        if !todo.is_empty() {
            if !md.is_dir() {
                return Err((next, Problem::NotDir));
            }
            if !way_is_safe(md.mode(), md.uid(), uid, || own_user_group(md.gid(), uid)) {
                let (owner, mode) = (md.uid(), md.mode() & 0o7777);
                let problem = Problem::WayOpenToOthers {
                    dir: next,
                    owner,
                    mode,
                };
                return Err((path.to_path_buf(), problem));
            }
        }
        here = next;
    }
    Ok(here)
}

/// Push `p`'s components onto `todo` so that they pop in order (`.` dropped, `/` implied).
fn push_components(todo: &mut Vec<std::ffi::OsString>, p: &Path) {
    let parts: Vec<std::ffi::OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    todo.extend(parts.into_iter().rev());
}

/// The caller's own directory at `path`, made (with missing parents, each mode 0700) if it is
/// not there, and checked by the rule of this module. A directory of the caller's that others
/// may read or write is closed to them (never one of someone else's). Returns the resolved path.
pub fn own_dir(path: &Path, vis: Visibility, fix: &str) -> Result<PathBuf, PlaceError> {
    let err = |path: PathBuf, problem| PlaceError {
        path,
        problem,
        fix: fix.to_string(),
    };
    if !path.is_absolute() {
        let problem = Problem::Io(io::ErrorKind::InvalidInput, "not an absolute path".into());
        return Err(err(path.to_path_buf(), problem));
    }
    let uid = caller();
    // One missing component made per round, each below a way already checked.
    for _ in 0..256 {
        match resolve_checked(path, uid) {
            Ok(real) => return check_own(&real, vis, uid).map_err(|p| err(path.to_path_buf(), p)),
            Err((at, Problem::Io(io::ErrorKind::NotFound, _))) if at != Path::new("/") => {
                let mode = if at == path { vis.mode() } else { 0o700 };
                match fs::DirBuilder::new().mode(mode).create(&at) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(err(at, io_problem(&e))),
                }
            }
            Err((at, problem)) => return Err(err(at, problem)),
        }
    }
    Err(err(path.to_path_buf(), Problem::TooManyLinks))
}

/// The caller's own directory `name` in `parent` (a resolved path [`own_dir`] returned), made
/// if missing and checked like it. Cheaper than `own_dir`: the way to `parent` is known safe.
pub fn own_subdir(
    parent: &Path,
    name: &str,
    vis: Visibility,
    fix: &str,
) -> Result<PathBuf, PlaceError> {
    let dir = parent.join(name);
    let err = |problem| PlaceError {
        path: dir.clone(),
        problem,
        fix: fix.to_string(),
    };
    match fs::DirBuilder::new()
        .recursive(false)
        .mode(vis.mode())
        .create(&dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(err(io_problem(&e))),
    }
    check_own(&dir, vis, caller()).map_err(err)?;
    Ok(dir)
}

/// `dir` (resolved, no link at its end) is `uid`'s directory and closed to others as `vis`
/// wants; a directory of `uid`'s that is too open is closed here.
fn check_own(dir: &Path, vis: Visibility, uid: u32) -> Result<PathBuf, Problem> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => Problem::NotDir,
            _ => io_problem(&e),
        })?;
    let md = f.metadata().map_err(|e| io_problem(&e))?;
    let mode = md.mode() & 0o7777;
    if md.uid() != uid {
        return Err(Problem::NotYours {
            owner: md.uid(),
            mode,
        });
    }
    let closed = match vis {
        Visibility::Private => 0o077,
        Visibility::Readable => 0o022,
    };
    if mode & closed != 0 {
        // Ours: closed through the descriptor just checked, never through the path again.
        f.set_permissions(fs::Permissions::from_mode(mode & !closed & 0o7777))
            .map_err(|e| io_problem(&e))?;
    }
    Ok(dir.to_path_buf())
}

/// A directory that a site account keeps for every user to read (a shared read-only cache):
/// nobody but its owner may change it or the way to it. Whose it is, the site decided by naming it.
pub fn shared_dir(path: &Path, fix: &str) -> Result<PathBuf, PlaceError> {
    let err = |path: PathBuf, problem| PlaceError {
        path,
        problem,
        fix: fix.to_string(),
    };
    let owner_of = |p: &Path| fs::metadata(p).map(|m| m.uid()).unwrap_or(0);
    // The way may belong to the directory's owner as well as to root.
    let real = resolve_checked(path, owner_of(path)).map_err(|(at, p)| err(at, p))?;
    let md = fs::metadata(&real).map_err(|e| err(real.clone(), io_problem(&e)))?;
    if !md.is_dir() {
        return Err(err(real, Problem::NotDir));
    }
    if md.mode() & 0o022 != 0 {
        let (owner, mode) = (md.uid(), md.mode() & 0o7777);
        return Err(err(real, Problem::OpenToOthers { owner, mode }));
    }
    Ok(real)
}

/// Open the regular file at `path` for reading, not through a link at its end, only when it
/// belongs to `owner` (or root) and nobody else may write to it.
pub fn open_trusted(path: &Path, owner: u32) -> Result<File, Problem> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => Problem::NotRegular,
            _ => io_problem(&e),
        })?;
    let md = f.metadata().map_err(|e| io_problem(&e))?;
    let mode = md.mode() & 0o7777;
    if !md.is_file() {
        return Err(Problem::NotRegular);
    }
    if md.uid() != owner && md.uid() != 0 {
        return Err(Problem::NotYours {
            owner: md.uid(),
            mode,
        });
    }
    if mode & 0o022 != 0 {
        return Err(Problem::OpenToOthers {
            owner: md.uid(),
            mode,
        });
    }
    Ok(f)
}

/// A new file `path` (in a place of the caller's), created here: never an existing file, never
/// through a link.
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Open `path` (in a place of the caller's) to read and write, creating it if missing: never
/// through a link, and only a regular file.
pub fn open_or_create(path: &Path, mode: u32) -> io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    fn set_mode(p: &Path, m: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
    }

    #[test]
    fn made_private_with_missing_parents() {
        let t = tempfile::tempdir().unwrap();
        let want = t.path().join("a/b/cache");
        let got = own_dir(&want, Visibility::Private, "fix").unwrap();
        assert_eq!(got, fs::canonicalize(&want).unwrap());
        assert_eq!(mode(&want), 0o700);
        assert_eq!(mode(&t.path().join("a")), 0o700);
        // A second call finds it as it is.
        assert_eq!(own_dir(&want, Visibility::Private, "fix").unwrap(), got);
    }

    #[test]
    fn own_directory_too_open_is_closed() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("c");
        fs::create_dir(&d).unwrap();
        set_mode(&d, 0o777);
        own_dir(&d, Visibility::Private, "fix").unwrap();
        assert_eq!(mode(&d), 0o700);
        set_mode(&d, 0o777);
        own_dir(&d, Visibility::Readable, "fix").unwrap();
        assert_eq!(mode(&d), 0o755);
    }

    #[test]
    fn own_links_are_followed_and_resolved() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("real");
        fs::create_dir(&real).unwrap();
        symlink(&real, t.path().join("link")).unwrap();
        symlink("real/../real", t.path().join("rel")).unwrap();
        let want = fs::canonicalize(&real).unwrap().join("cache");
        assert_eq!(
            own_dir(&t.path().join("link/cache"), Visibility::Private, "f").unwrap(),
            want
        );
        assert_eq!(
            own_dir(&t.path().join("rel/cache"), Visibility::Private, "f").unwrap(),
            want
        );
    }

    #[test]
    fn a_way_others_may_change_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let open = t.path().join("open");
        fs::create_dir(&open).unwrap();
        set_mode(&open, 0o777);
        let e = own_dir(&open.join("cache"), Visibility::Private, "set X").unwrap_err();
        assert!(matches!(e.problem, Problem::WayOpenToOthers { .. }), "{e}");
        assert!(!open.join("cache").exists(), "nothing made below it");
        assert!(e.to_string().ends_with("; set X"), "{e}");
        // Sticky, as /tmp: fine.
        set_mode(&open, 0o1777);
        own_dir(&open.join("cache"), Visibility::Private, "f").unwrap();
    }

    #[test]
    fn not_a_directory_and_relative_paths_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("file");
        fs::write(&f, "x").unwrap();
        assert_eq!(
            own_dir(&f, Visibility::Private, "f").unwrap_err().problem,
            Problem::NotDir
        );
        let e = own_dir(&f.join("sub"), Visibility::Private, "f").unwrap_err();
        assert_eq!(e.problem, Problem::NotDir);
        assert!(own_dir(Path::new("rel/dir"), Visibility::Private, "f").is_err());
    }

    #[test]
    fn subdirs_are_checked_like_their_parent() {
        let t = tempfile::tempdir().unwrap();
        let root = own_dir(&t.path().join("r"), Visibility::Private, "f").unwrap();
        let sub = own_subdir(&root, "blobs", Visibility::Private, "f").unwrap();
        assert_eq!(mode(&sub), 0o700);
        fs::remove_dir(&sub).unwrap();
        symlink(t.path(), &sub).unwrap();
        let e = own_subdir(&root, "blobs", Visibility::Private, "f").unwrap_err();
        assert_eq!(e.problem, Problem::NotDir);
    }

    #[test]
    fn trusted_files_only() {
        let t = tempfile::tempdir().unwrap();
        let uid = caller();
        let f = t.path().join("auth.json");
        fs::write(&f, "{}").unwrap();
        set_mode(&f, 0o600);
        assert!(open_trusted(&f, uid).is_ok());
        set_mode(&f, 0o666);
        assert!(matches!(
            open_trusted(&f, uid),
            Err(Problem::OpenToOthers { .. })
        ));
        set_mode(&f, 0o600);
        let l = t.path().join("link.json");
        symlink(&f, &l).unwrap();
        assert_eq!(open_trusted(&l, uid).unwrap_err(), Problem::NotRegular);
        assert_eq!(
            open_trusted(t.path(), uid).unwrap_err(),
            Problem::NotRegular
        );
    }

    #[test]
    fn new_files_never_through_links() {
        let t = tempfile::tempdir().unwrap();
        let target = t.path().join("victim");
        fs::write(&target, "keep").unwrap();
        let l = t.path().join("planted");
        symlink(&target, &l).unwrap();
        assert!(create_new(&l, 0o600).is_err());
        assert!(open_or_create(&l, 0o600).is_err());
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep");
        let n = t.path().join("new");
        create_new(&n, 0o600).unwrap();
        assert_eq!(mode(&n), 0o600);
        assert!(create_new(&n, 0o600).is_err(), "never an existing file");
        open_or_create(&n, 0o600).unwrap();
    }

    #[test]
    fn way_rules() {
        // (mode, owner, caller, the group is the caller's own, safe)
        let cases: &[(u32, u32, u32, bool, bool)] = &[
            (0o755, 0, 1000, false, true),
            (0o755, 1000, 1000, false, true),
            (0o700, 1001, 1000, false, false),
            (0o777, 0, 1000, false, false),
            (0o757, 1000, 1000, false, false),
            (0o1777, 0, 1000, false, true),
            (0o1777, 1001, 1000, false, false),
            (0o1777, 1000, 1000, false, true),
            (0o1770, 1001, 1000, true, false),
            (0o775, 1000, 1000, true, true),
            (0o775, 1000, 1000, false, false),
            (0o775, 0, 1000, true, false),
            (0o2770, 1001, 1000, true, false),
        ];
        for &(mode, owner, uid, upg, want) in cases {
            assert_eq!(
                way_is_safe(mode, owner, uid, || upg),
                want,
                "{mode:o} {owner} {uid} {upg}"
            );
        }
    }
}

//! `gpurun cache list|clean|gc`: what the cache holds (see cache.rs for the layout) and removing
//! what nothing uses.
//!
//! Safe beside running pulls and containers. An entry is kept when:
//! - its lock (`locks/HEX.lock`) is held: a pull is downloading that blob or building that image;
//! - a process of this user has it open (an image server holds its image);
//! - it is a blob or an extracted rootfs and a `gpurun` pull or container of this user that uses
//!   this cache (by its environment and the config files) runs on this node: a pull may have
//!   found a blob in the cache and not opened it yet, and a container may run from an extracted
//!   rootfs;
//! - the cache is on a network file system and the entry changed in the last ten minutes (a
//!   pull on another node, which no /proc scan here can see, may use it).
//!
//! Each reason names the process, so the user can end it; `cache clean --force` removes all but
//! the locked entries (an open file's space returns when its process ends).
//!
//! A partial download is in use only while its lock is held: its writer holds the lock as long
//! as it writes (also from another node, where the file system passes flock on), so one left by a
//! failed pull (a full disk) is removed at once.
//!
//! "Last use" is the later of the access and modification times: the kernel updates atime on
//! reads (relatime: at least daily), so it tracks when a cached image was last run.

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::cache::Cache;
use crate::store::cache_dir::{cache_root_from, GRACE};
use crate::store::processes::{environ, open_files, own_processes, Proc};
use crate::sys;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Blob,
    Partial,
    Image,
    Rootfs,
    /// An image's blocks kept decompressed from one image server to the next
    /// (image/sqfs/kept.rs).
    Blocks,
}

#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    pub kind: Kind,
    /// `sha256:HEX` for blobs and images, the content key for an extracted rootfs.
    pub name: String,
    pub path: PathBuf,
    pub size_bytes: u64,
    /// Seconds since the epoch.
    pub last_used: u64,
    /// Why it must stay, when it must ([`Keep`] in words).
    pub in_use: Option<String>,
    /// A pull is writing it: not removed even by `clean --force`.
    #[serde(skip)]
    pub locked: bool,
}

/// A process that uses the cache: named where an entry is kept for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub pid: u32,
    /// Its command line, shortened.
    pub command: String,
}

impl User {
    fn of(p: &Proc) -> User {
        let mut args = p.cmdline.iter();
        let first = args
            .next()
            .map(|a| a.rsplit('/').next().unwrap_or(a).to_string());
        let line: Vec<String> = first.into_iter().chain(args.cloned()).collect();
        let line = line.join(" ");
        let command = match line.char_indices().nth(60) {
            Some((i, _)) => format!("{}…", &line[..i]),
            None => line,
        };
        User {
            pid: p.pid,
            command,
        }
    }
}

impl fmt::Display for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.command)
    }
}

/// Why an entry must stay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    Locked,
    Open(User),
    Gpurun(User),
    /// Changed this many seconds ago, on a network file system.
    Recent(u64),
}

impl fmt::Display for Keep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Keep::Locked => write!(f, "locked: a pull is writing it"),
            Keep::Open(u) => write!(f, "open by {u}"),
            Keep::Gpurun(u) => write!(f, "gpurun running, may use it: {u}"),
            Keep::Recent(s) => write!(
                f,
                "changed {} min ago on a network file system: a pull on another node may use it",
                s / 60
            ),
        }
    }
}

/// What is known of one entry, to decide whether it must stay.
struct Seen<'a> {
    kind: Kind,
    locked: bool,
    open_by: Option<&'a User>,
    /// Seconds since it last changed.
    changed: u64,
}

/// Why `e` must stay, if it must, with `a` the user's activity on this node.
fn why_kept(e: &Seen, a: &Activity) -> Option<Keep> {
    if e.locked {
        return Some(Keep::Locked);
    }
    if e.kind == Kind::Partial {
        // Its writer holds the lock for as long as it writes: unlocked, nothing writes it.
        return None;
    }
    if let Some(u) = e.open_by {
        return Some(Keep::Open(u.clone()));
    }
    match &a.gpurun {
        Some(u) if matches!(e.kind, Kind::Blob | Kind::Rootfs) => Some(Keep::Gpurun(u.clone())),
        _ if a.network_fs && e.changed < GRACE.as_secs() => Some(Keep::Recent(e.changed)),
        _ => None,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GcError {
    #[error("cache {path}: {source}; check GPURUN_CACHEDIR / the cache_dir setting")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot remove {path}: {source}; check its owner and permissions (the cache is per user)"
    )]
    Remove {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

fn dir_size(p: &Path) -> u64 {
    let Ok(md) = fs::symlink_metadata(p) else {
        return 0;
    };
    if !md.is_dir() {
        return md.len();
    }
    fs::read_dir(p)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| dir_size(&e.path()))
        .sum::<u64>()
        + md.len()
}

/// Is the flock on `lock` held by someone else?
fn locked(lock: &Path) -> bool {
    // Opened for writing where it can be, as the holders open it: on NFS flock(2) is a POSIX
    // lock, and an exclusive one on a file opened read-only fails whether or not it is held.
    let opened = OpenOptions::new().write(true).open(lock);
    let Ok(f) = opened.or_else(|_| OpenOptions::new().read(true).open(lock)) else {
        return false;
    };
    // flock(2), as the holders take it; closing `f` releases ours.
    f.try_lock().is_err()
}

/// What this user's processes have open, whether a gpurun pull or launch that uses this cache
/// runs, and whether the cache is on a network file system (seen by other nodes' pulls).
#[derive(Default)]
pub struct Activity {
    pub open: HashMap<PathBuf, User>,
    pub gpurun: Option<User>,
    pub network_fs: bool,
}

/// The cache root a process with environment `env` uses: GPURUN_CACHEDIR, else the
/// config files' cache_dir (`from_files`, the same files for every process of this user), else
/// the XDG / /var/tmp default.
pub fn cache_root_of(env: &[(String, String)], from_files: Option<&Path>, uid: u32) -> PathBuf {
    let get = |k: &str| {
        env.iter()
            .rev()
            .find(|(n, _)| n == k)
            .map(|(_, v)| PathBuf::from(v))
            .filter(|p| p.is_absolute())
    };
    let explicit = get("GPURUN_CACHEDIR").or_else(|| from_files.map(Path::to_path_buf));
    cache_root_from(explicit, get("XDG_CACHE_HOME"), uid)
}

impl Activity {
    /// `cache` is the root being collected; `from_files` the config files' cache_dir, if any.
    pub fn scan(cache: &Path, from_files: Option<&Path>) -> Activity {
        let me = std::process::id();
        let uid = nix::unistd::getuid().as_raw();
        let mut a = Activity {
            network_fs: sys::on_network_fs(cache),
            ..Activity::default()
        };
        for p in own_processes(uid) {
            if p.pid == me {
                continue;
            }
            for f in open_files(p.pid) {
                a.open.entry(f).or_insert_with(|| User::of(&p));
            }
            let active = p.is_gpurun
                && matches!(
                    p.subcommand().as_deref(),
                    Some("pull" | "exec" | "run" | "shell" | "hold")
                );
            // A process whose environment cannot be read is assumed to use this cache.
            if active
                && a.gpurun.is_none()
                && environ(p.pid).is_none_or(|env| cache_root_of(&env, from_files, uid) == cache)
            {
                a.gpurun = Some(User::of(&p));
            }
        }
        a
    }
}

/// Everything in the cache, oldest use first.
pub fn list(cache: &Cache, activity: &Activity) -> Result<Vec<Entry>, GcError> {
    let root = cache.root();
    let t = now();
    let mut out = Vec::new();
    let mut add = |kind: Kind, name: String, path: PathBuf, lock: Option<PathBuf>| {
        let Ok(md) = fs::symlink_metadata(&path) else {
            return;
        };
        let last_used = (md.atime().max(md.mtime())).max(0) as u64;
        let seen = Seen {
            kind,
            locked: lock.as_deref().is_some_and(locked),
            open_by: activity.open.get(&path),
            changed: t.saturating_sub(md.mtime().max(0) as u64),
        };
        let in_use = why_kept(&seen, activity);
        out.push(Entry {
            kind,
            name,
            size_bytes: if kind == Kind::Rootfs {
                dir_size(&path)
            } else {
                md.len()
            },
            path,
            last_used,
            in_use: in_use.map(|k| k.to_string()),
            locked: seen.locked,
        });
    };
    let read = |sub: &str| -> Result<Vec<String>, GcError> {
        let p = root.join(sub);
        match fs::read_dir(&p) {
            Ok(rd) => Ok(rd
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(source) => Err(GcError::Read { path: p, source }),
        }
    };
    let lock = |hex: &str| Some(root.join("locks").join(format!("{hex}.lock")));
    for n in read("blobs/sha256")? {
        let path = root.join("blobs/sha256").join(&n);
        match n.strip_suffix(".partial") {
            Some(hex) => add(Kind::Partial, format!("sha256:{hex}"), path, lock(hex)),
            None => add(Kind::Blob, format!("sha256:{n}"), path, lock(&n)),
        }
    }
    for n in read("images")? {
        if let Some(hex) = n.strip_suffix(".sqsh") {
            add(
                Kind::Image,
                format!("sha256:{hex}"),
                root.join("images").join(&n),
                lock(hex),
            );
        }
    }
    for n in read("rootfs")? {
        // .tmp-* are extractions in progress (kept while their gpurun runs) or abandoned.
        add(Kind::Rootfs, n.clone(), root.join("rootfs").join(&n), None);
    }
    for n in read("image-blocks")? {
        // Removing one costs the next server of its image the decompression it saved.
        let path = root.join("image-blocks").join(&n);
        add(Kind::Blocks, n, path, None);
    }
    out.sort_by_key(|e| (e.last_used, e.path.clone()));
    Ok(out)
}

/// What gc would remove, in order: entries unused for `older_than`, then the least recently
/// used until the total is at most `max_size`. With neither limit, everything not in use;
/// `force` takes entries in use too, all but the locked ones.
pub fn choose(
    entries: &[Entry],
    max_size: Option<u64>,
    older_than: Option<Duration>,
    now: u64,
    force: bool,
) -> Vec<usize> {
    let mut total: u64 = entries.iter().map(|e| e.size_bytes).sum();
    let mut chosen = Vec::new();
    let free = |e: &Entry| e.in_use.is_none() || (force && !e.locked);
    for (i, e) in entries.iter().enumerate() {
        let old = match (max_size, older_than) {
            (None, None) => true,
            (_, Some(age)) => now.saturating_sub(e.last_used) >= age.as_secs(),
            (Some(_), None) => false,
        };
        if free(e) && old {
            chosen.push(i);
            total -= e.size_bytes;
        }
    }
    if let Some(max) = max_size {
        // Entries are oldest use first.
        for (i, e) in entries.iter().enumerate() {
            if total <= max {
                break;
            }
            if free(e) && !chosen.contains(&i) {
                chosen.push(i);
                total -= e.size_bytes;
            }
        }
    }
    chosen
}

/// Remove one entry; a lock taken just now (a pull started since the listing) wins over gc.
pub fn remove(e: &Entry) -> Result<bool, GcError> {
    let err = |source| GcError::Remove {
        path: e.path.clone(),
        source,
    };
    let r = if e.kind == Kind::Rootfs {
        fs::remove_dir_all(&e.path)
    } else {
        fs::remove_file(&e.path)
    };
    match r {
        Ok(()) => Ok(true),
        Err(x) if x.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(x) => Err(err(x)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(size: u64, last_used: u64, in_use: bool) -> Entry {
        Entry {
            kind: Kind::Blob,
            name: String::new(),
            path: PathBuf::new(),
            size_bytes: size,
            last_used,
            in_use: in_use.then(|| "open".to_string()),
            locked: false,
        }
    }

    #[test]
    fn reasons_to_keep() {
        let u = |pid| User {
            pid,
            command: "gpurun serve".into(),
        };
        let seen = |kind, locked, open_by, changed| Seen {
            kind,
            locked,
            open_by,
            changed,
        };
        let (idle, running) = (
            Activity::default(),
            Activity {
                gpurun: Some(u(9)),
                ..Activity::default()
            },
        );
        let network = Activity {
            network_fs: true,
            ..Activity::default()
        };
        let open = u(7);
        let cases: &[(Seen, &Activity, Option<Keep>)] = &[
            (seen(Kind::Image, true, None, 0), &idle, Some(Keep::Locked)),
            (seen(Kind::Partial, false, Some(&open), 0), &running, None),
            (
                seen(Kind::Image, false, Some(&open), 0),
                &idle,
                Some(Keep::Open(u(7))),
            ),
            (
                seen(Kind::Blob, false, None, 0),
                &running,
                Some(Keep::Gpurun(u(9))),
            ),
            (
                seen(Kind::Rootfs, false, None, 0),
                &running,
                Some(Keep::Gpurun(u(9))),
            ),
            (seen(Kind::Image, false, None, 0), &running, None),
            // Changed just now, nothing uses it: kept only where other nodes' pulls may.
            (seen(Kind::Blob, false, None, 5), &idle, None),
            (
                seen(Kind::Blob, false, None, 120),
                &network,
                Some(Keep::Recent(120)),
            ),
            (seen(Kind::Blob, false, None, 600), &network, None),
        ];
        for (i, (s, a, want)) in cases.iter().enumerate() {
            assert_eq!(&why_kept(s, a), want, "case {i}");
        }
        assert_eq!(Keep::Open(u(7)).to_string(), "open by pid 7 (gpurun serve)");
    }

    #[test]
    fn cache_roots_of_other_processes() {
        let env = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        type Env<'a> = &'a [(&'a str, &'a str)];
        let files = Some(Path::new("/site"));
        let cases: &[(Env, Option<&Path>, &str)] = &[
            (&[("GPURUN_CACHEDIR", "/a")], files, "/a"),
            (&[("GPURUN_CACHE", "/b")], files, "/site"),
            (&[("XDG_CACHE_HOME", "/x")], files, "/site"),
            (&[("XDG_CACHE_HOME", "/x")], None, "/x/gpurun"),
            (&[("GPURUN_CACHEDIR", "rel")], None, "/var/tmp/gpurun-7"),
        ];
        for (e, f, want) in cases {
            assert_eq!(cache_root_of(&env(e), *f, 7), Path::new(want), "{e:?}");
        }
    }

    #[test]
    fn choosing() {
        let day = 86400;
        let now = 100 * day;
        // Oldest first, as list() returns them.
        let v = vec![
            e(10, 10 * day, false),
            e(20, 50 * day, true),
            e(30, 90 * day, false),
            e(40, 99 * day, false),
        ];
        assert_eq!(choose(&v, None, None, now, false), vec![0, 2, 3]);
        assert_eq!(
            choose(&v, None, Some(Duration::from_secs(30 * day)), now, false),
            vec![0]
        );
        // 100 in all; to reach 60 remove 10 (in-use 20 skipped) then 30.
        assert_eq!(choose(&v, Some(60), None, now, false), vec![0, 2]);
        assert_eq!(choose(&v, Some(100), None, now, false), Vec::<usize>::new());
        // Both limits: the old ones first, then by size.
        assert_eq!(
            choose(
                &v,
                Some(30),
                Some(Duration::from_secs(30 * day)),
                now,
                false
            ),
            vec![0, 2, 3]
        );
        // In-use entries are never chosen, even when the limit cannot be met.
        assert_eq!(choose(&v, Some(0), None, now, false), vec![0, 2, 3]);
        // Forced, all but the locked ones.
        assert_eq!(choose(&v, None, None, now, true), vec![0, 1, 2, 3]);
        let mut locked = v.clone();
        locked[1].locked = true;
        assert_eq!(choose(&locked, None, None, now, true), vec![0, 2, 3]);
    }
}

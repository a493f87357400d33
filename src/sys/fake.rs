//! A recording stand-in for `seam`'s traits, for tests: each call is noted as a `Call`, the
//! handles it gives out stand for the paths they were opened at (fds of /dev/null, named), and
//! a call fails with an errno where the test says so.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use super::error::*;
use super::files::Create;
use super::mount::{Attrs, FuseMount};
use super::namespaces::Propagation;
use super::seam::{Mounts, Namespaces};

/// One call that changes the system, its paths as the handles' names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    UserNamespace {
        uid: u32,
        gid: u32,
    },
    PidIpcNamespaces {
        pid: bool,
        ipc: bool,
    },
    MountNamespace,
    RootPropagation(Propagation),
    UtsNamespace(String),
    NetNamespace,
    /// open_tree of `path` with `flags`.
    CloneTree {
        path: PathBuf,
        flags: libc::c_uint,
    },
    OpenFuse,
    Fuse {
        at: PathBuf,
        mount: FuseMount,
    },
    SetTreeAttrs {
        tree: PathBuf,
        attrs: Attrs,
    },
    AttachTree {
        tree: PathBuf,
        at: PathBuf,
    },
    SetPropagation {
        at: PathBuf,
        p: crate::mount::Propagation,
    },
    Tmpfs {
        at: PathBuf,
        mode: u32,
        size: Option<u64>,
        huge: Option<String>,
        attrs: Attrs,
    },
    Overlay {
        lowers: Vec<PathBuf>,
        upper: Option<(PathBuf, PathBuf)>,
        at: PathBuf,
    },
    Proc(PathBuf),
    Devpts(PathBuf),
    Mqueue(PathBuf),
    Remount {
        at: PathBuf,
        attrs: Attrs,
    },
    PivotRoot(PathBuf),
    Mkdir(PathBuf),
    WriteFile(PathBuf),
    WriteInRoot(PathBuf),
    SymlinkInRoot {
        path: PathBuf,
        target: PathBuf,
    },
    UnlinkInRoot(PathBuf),
}

/// `ro,nosuid,nodev,noexec` as set; `-` for none.
fn flags(a: &Attrs) -> String {
    let on = [
        (a.readonly, "ro"),
        (a.nosuid, "nosuid"),
        (a.nodev, "nodev"),
        (a.noexec, "noexec"),
    ];
    let set: Vec<&str> = on.iter().filter(|(b, _)| *b).map(|(_, n)| *n).collect();
    match set.is_empty() {
        true => "-".into(),
        false => set.join(","),
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let d = |p: &PathBuf| p.display().to_string();
        match self {
            Call::UserNamespace { uid, gid } => write!(f, "unshare user, map {uid}:{gid}"),
            Call::PidIpcNamespaces { pid, ipc } => write!(f, "unshare pid={pid} ipc={ipc}"),
            Call::MountNamespace => write!(f, "unshare mnt"),
            Call::RootPropagation(p) => write!(f, "propagation / {p:?}"),
            Call::UtsNamespace(h) => write!(f, "unshare uts, hostname {h}"),
            Call::NetNamespace => write!(f, "unshare net, lo up"),
            // the flags are those of every clone, `mount::CLONE_TREE`; tests read them apart
            Call::CloneTree { path, .. } => write!(f, "open_tree {}", d(path)),
            Call::OpenFuse => write!(f, "open /dev/fuse"),
            Call::Fuse { at, mount: m } => {
                let src = m.source.display();
                write!(
                    f,
                    "mount {} {src} on {} {:?} {}",
                    m.fstype,
                    d(at),
                    m.flags,
                    m.options
                )
            }
            Call::SetTreeAttrs { tree, attrs } => write!(f, "setattr {} {}", d(tree), flags(attrs)),
            Call::AttachTree { tree, at } => write!(f, "move_mount {} {}", d(tree), d(at)),
            Call::SetPropagation { at, p } => {
                let r = if p.recursive { "r" } else { "" };
                write!(f, "propagation {} {r}{:?}", d(at), p.kind)
            }
            Call::Tmpfs {
                at,
                mode,
                size,
                huge,
                attrs,
            } => {
                write!(f, "tmpfs {} mode={mode:o} {}", d(at), flags(attrs))?;
                if let Some(s) = size {
                    write!(f, " size={s}")?;
                }
                match huge {
                    Some(h) => write!(f, " huge={h}"),
                    None => Ok(()),
                }
            }
            Call::Overlay { lowers, upper, at } => {
                let l: Vec<String> = lowers.iter().map(d).collect();
                write!(f, "overlay {} lower={}", d(at), l.join(":"))?;
                match upper {
                    Some((u, w)) => write!(f, " upper={} work={}", d(u), d(w)),
                    None => write!(f, " ro"),
                }
            }
            Call::Proc(p) => write!(f, "proc {}", d(p)),
            Call::Devpts(p) => write!(f, "devpts {}", d(p)),
            Call::Mqueue(p) => write!(f, "mqueue {}", d(p)),
            Call::Remount { at, attrs } => write!(f, "remount {} {}", d(at), flags(attrs)),
            Call::PivotRoot(p) => write!(f, "pivot_root {}", d(p)),
            Call::Mkdir(p) => write!(f, "mkdir {}", d(p)),
            Call::WriteFile(p) => write!(f, "write {}", d(p)),
            Call::WriteInRoot(p) => write!(f, "write in root {}", d(p)),
            Call::SymlinkInRoot { path, target } => {
                write!(f, "symlink in root {} -> {}", d(path), d(target))
            }
            Call::UnlinkInRoot(p) => write!(f, "unlink in root {}", d(p)),
        }
    }
}

/// The recording fake: every method of `Mounts` and `Namespaces` notes its `Call` (lookups
/// note nothing) and succeeds, unless `failing` named it.
#[derive(Default)]
pub struct Recorder {
    calls: RefCell<Vec<Call>>,
    /// The name of each handle given out: the path it stands for.
    names: RefCell<HashMap<RawFd, PathBuf>>,
    /// (method, path, errno, once): that method fails at that path (the first time only).
    failures: RefCell<Vec<(&'static str, PathBuf, Errno, bool)>>,
    /// Host paths that are files (every other one is a directory).
    files: Vec<PathBuf>,
    /// Host symlinks and where they point.
    links: Vec<(PathBuf, PathBuf)>,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder::default()
    }

    /// `method` (a method's name: "open_in_root", "mount_overlay"…) fails at `path` with `e`.
    pub fn failing(self, method: &'static str, path: &str, e: Errno) -> Recorder {
        self.failures
            .borrow_mut()
            .push((method, path.into(), e, false));
        self
    }

    /// `failing`, the first time only.
    pub fn failing_once(self, method: &'static str, path: &str, e: Errno) -> Recorder {
        self.failures
            .borrow_mut()
            .push((method, path.into(), e, true));
        self
    }

    /// The host's `path` is a file, not a directory.
    pub fn with_file(mut self, path: &str) -> Recorder {
        self.files.push(path.into());
        self
    }

    /// The host's `path` is a symlink to `target`.
    pub fn with_link(mut self, path: &str, target: &str) -> Recorder {
        self.links.push((path.into(), target.into()));
        self
    }

    /// The calls, one line each (`Call`'s Display).
    pub fn lines(&self) -> Vec<String> {
        self.calls.borrow().iter().map(Call::to_string).collect()
    }

    /// The calls, as they were made.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }

    fn note(&self, c: Call) {
        self.calls.borrow_mut().push(c);
    }

    /// Err where the test asked `method` to fail at `path`.
    fn check(&self, method: &'static str, path: &Path) -> Result<()> {
        let mut failures = self.failures.borrow_mut();
        let Some(i) = (failures.iter()).position(|(m, p, _, _)| *m == method && p == path) else {
            return Ok(());
        };
        let errno = failures[i].2;
        if failures[i].3 {
            failures.remove(i);
        }
        Err(at(method, path)(errno))
    }

    fn check_io(&self, method: &'static str, path: &Path) -> std::io::Result<()> {
        let e = self.check(method, path).map_err(|e| e.errno() as i32);
        e.map_err(std::io::Error::from_raw_os_error)
    }

    /// A new handle standing for `name`.
    fn handle(&self, name: PathBuf) -> OwnedFd {
        let fd = OwnedFd::from(std::fs::File::open("/dev/null").expect("/dev/null"));
        self.names.borrow_mut().insert(fd.as_raw_fd(), name);
        fd
    }

    fn name(&self, fd: &OwnedFd) -> PathBuf {
        let names = self.names.borrow();
        let name = names.get(&fd.as_raw_fd());
        name.cloned()
            .unwrap_or_else(|| format!("fd {}", fd.as_raw_fd()).into())
    }

    /// `path`, with a `/proc/self/fd/N` of a handle given out shown as its name.
    fn shown(&self, path: &Path) -> PathBuf {
        let fd = (path.strip_prefix("/proc/self/fd").ok())
            .and_then(|n| n.to_str()?.parse::<RawFd>().ok());
        match fd.and_then(|fd| self.names.borrow().get(&fd).cloned()) {
            Some(name) => name,
            None => path.to_path_buf(),
        }
    }
}

impl Mounts for Recorder {
    fn clone_tree(&self, path: &Path) -> Result<OwnedFd> {
        let path = self.shown(path);
        self.check("clone_tree", &path)?;
        let flags = super::mount::CLONE_TREE;
        self.note(Call::CloneTree {
            path: path.clone(),
            flags,
        });
        Ok(self.handle(path))
    }
    fn attach_tree(&self, tree: &OwnedFd, dst: &OwnedFd, what: &Path) -> Result<()> {
        self.check("attach_tree", what)?;
        let (tree, at) = (self.name(tree), self.name(dst));
        self.note(Call::AttachTree { tree, at });
        Ok(())
    }
    fn set_tree_attrs(&self, tree: &OwnedFd, attrs: Attrs, what: &Path) -> Result<bool> {
        self.check("set_tree_attrs", what)?;
        let tree = self.name(tree);
        self.note(Call::SetTreeAttrs { tree, attrs });
        Ok(true)
    }
    fn set_propagation(&self, path: &Path, p: crate::mount::Propagation) -> Result<()> {
        let at = self.shown(path);
        self.check("set_propagation", &at)?;
        self.note(Call::SetPropagation { at, p });
        Ok(())
    }
    fn mount_tmpfs(
        &self,
        target: &Path,
        mode: u32,
        size: Option<u64>,
        huge: Option<&str>,
        attrs: Attrs,
    ) -> Result<()> {
        let at = self.shown(target);
        self.check("mount_tmpfs", &at)?;
        let huge = huge.map(String::from);
        self.note(Call::Tmpfs {
            at,
            mode,
            size,
            huge,
            attrs,
        });
        Ok(())
    }
    fn mount_overlay(&self, lower: &Path, upper: &Path, work: &Path, target: &Path) -> Result<()> {
        let at = self.shown(target);
        self.check("mount_overlay", &at)?;
        let lowers = vec![self.shown(lower)];
        let upper = Some((self.shown(upper), self.shown(work)));
        self.note(Call::Overlay { lowers, upper, at });
        Ok(())
    }
    fn mount_overlay_ro(&self, lowers: &[&Path], target: &Path) -> Result<()> {
        let at = self.shown(target);
        self.check("mount_overlay_ro", &at)?;
        let lowers = lowers.iter().map(|l| self.shown(l)).collect();
        self.note(Call::Overlay {
            lowers,
            upper: None,
            at,
        });
        Ok(())
    }
    fn mount_proc(&self, target: &Path) -> Result<()> {
        self.note(Call::Proc(self.shown(target)));
        Ok(())
    }
    fn mount_devpts(&self, target: &Path) -> Result<()> {
        self.note(Call::Devpts(self.shown(target)));
        Ok(())
    }
    fn mount_mqueue(&self, target: &Path) -> Result<()> {
        self.note(Call::Mqueue(self.shown(target)));
        Ok(())
    }
    fn remount(&self, dst: &Path, attrs: Attrs) -> Result<()> {
        let at = self.shown(dst);
        self.check("remount", &at)?;
        self.note(Call::Remount { at, attrs });
        Ok(())
    }
    fn pivot_root(&self, root: &Path) -> Result<()> {
        self.check("pivot_root", root)?;
        self.note(Call::PivotRoot(root.into()));
        Ok(())
    }
    fn open_fuse(&self) -> std::io::Result<OwnedFd> {
        self.check_io("open_fuse", Path::new("/dev/fuse"))?;
        self.note(Call::OpenFuse);
        Ok(self.handle("/dev/fuse".into()))
    }
    fn mount_fuse(
        &self,
        fd: &OwnedFd,
        source: &Path,
        target: &Path,
        (uid, gid): (u32, u32),
    ) -> Result<()> {
        let at = self.shown(target);
        self.check("mount_fuse", &at)?;
        let mount = FuseMount::image(fd, source, uid, gid);
        self.note(Call::Fuse { at, mount });
        Ok(())
    }
    fn open_path(&self, path: &Path) -> Result<OwnedFd> {
        self.check("open_path", path)?;
        Ok(self.handle(path.into()))
    }
    fn is_dir(&self, fd: &OwnedFd) -> Result<bool> {
        Ok(!self.files.contains(&self.name(fd)))
    }
    fn identity(&self, fd: &OwnedFd) -> Result<(u64, u64)> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.name(fd).hash(&mut h);
        Ok((0, h.finish()))
    }
    fn open_in_root(&self, root: &OwnedFd, path: &Path, _: Create) -> Result<OwnedFd> {
        self.check("open_in_root", path)?;
        let rel = path.strip_prefix("/").unwrap_or(path);
        let name = self.name(root).join(rel);
        Ok(self.handle(name.components().collect()))
    }
    fn symlink_in_root(&self, _: &OwnedFd, path: &Path, target: &Path) -> Result<()> {
        self.check("symlink_in_root", path)?;
        let (path, target) = (path.into(), target.into());
        self.note(Call::SymlinkInRoot { path, target });
        Ok(())
    }
    fn unlink_in_root(&self, _: &OwnedFd, path: &Path) -> Result<()> {
        self.check("unlink_in_root", path)?;
        self.note(Call::UnlinkInRoot(path.into()));
        Ok(())
    }
    fn write_in_root(&self, _: &OwnedFd, path: &Path, _: &[u8]) -> Result<()> {
        self.check("write_in_root", path)?;
        self.note(Call::WriteInRoot(path.into()));
        Ok(())
    }
    fn mkdir(&self, path: &Path) -> std::io::Result<()> {
        self.check_io("mkdir", path)?;
        self.note(Call::Mkdir(path.into()));
        Ok(())
    }
    fn write_file(&self, path: &Path, _: &[u8]) -> std::io::Result<()> {
        self.check_io("write_file", path)?;
        self.note(Call::WriteFile(path.into()));
        Ok(())
    }
    fn read_host(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        self.check_io("read_host", path)?;
        Ok(Vec::new())
    }
    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        let link = self.links.iter().find(|(l, _)| l == path);
        link.map(|(_, t)| t.clone())
    }
}

impl Namespaces for Recorder {
    fn enter_user_namespace(&self, uid: u32, gid: u32) -> Result<()> {
        self.check("enter_user_namespace", Path::new("-"))?;
        self.note(Call::UserNamespace { uid, gid });
        Ok(())
    }
    fn enter_pid_ipc_namespaces(&self, pid: bool, ipc: bool) -> Result<()> {
        self.note(Call::PidIpcNamespaces { pid, ipc });
        Ok(())
    }
    fn enter_mount_namespace_then<T>(
        &self,
        p: Propagation,
        first: impl FnOnce() -> T,
    ) -> Result<T> {
        self.check("enter_mount_namespace_then", Path::new("-"))?;
        self.note(Call::MountNamespace);
        let done = first();
        self.note(Call::RootPropagation(p));
        Ok(done)
    }
    fn enter_uts_namespace(&self, hostname: &str) -> Result<()> {
        self.note(Call::UtsNamespace(hostname.into()));
        Ok(())
    }
    fn enter_net_namespace(&self) -> Result<()> {
        self.check("enter_net_namespace", Path::new("-"))?;
        self.note(Call::NetNamespace);
        Ok(())
    }
}

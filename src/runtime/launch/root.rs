//! Build the container's root in C's private mount namespace: the image's mount and the plan's
//! mounts, on a tmpfs stage over /tmp.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use super::interface::Lower;
use super::overlay::{self, Layers, OverlayError};
use crate::mount::{Mount, MountSource, OverlayDriver, PointKind, PropagationKind};
use crate::runtime::plan::{Changes, Plan};
use crate::sys::seam::{Mounts, Namespaces};
use crate::sys::{self, Create, SysError};

/// Where the container's pieces live inside C's private mount namespace. A tmpfs mounted over /tmp
/// holds them: nothing is created on the host, and host /tmp is pinned by an fd beforehand.
const STAGE: &str = "/tmp";

/// Why the container's root could not be built: the step (its option where the user asked for
/// it), the path, and the call with its errno.
#[derive(Debug, thiserror::Error)]
pub(super) enum RootError {
    /// A call of C's own: a namespace, the stage's tmpfs, a handle, a remount.
    #[error("{0}")]
    Call(#[from] SysError),
    #[error("mkdir {}: {source}", .path.display())]
    Mkdir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--net: {0}")]
    Net(SysError),
    #[error("cannot bind {}: {source}", .src.display())]
    Source { src: PathBuf, source: SysError },
    #[error("cannot use image directory: {0}")]
    ImageDir(SysError),
    #[error("cannot mount {} {}: {source}", .kind, .image.display())]
    Image {
        kind: &'static str,
        image: PathBuf,
        source: SysError,
    },
    /// A mount of the plan; `image_dir`: the directory image, where the kernel may refuse
    /// mount points.
    #[error("cannot mount {}: {source}{}", .dst.display(), refused_hint(.source, .image_dir))]
    Mount {
        dst: PathBuf,
        source: SysError,
        image_dir: Option<PathBuf>,
    },
    #[error("--overlay {}: {source}", .dir.display())]
    OverlayDir { dir: PathBuf, source: SysError },
    #[error("--overlay: its directory was not captured")]
    NotCaptured,
    #[error("--overlay {}: has no upper/ (a writable --overlay run makes it)", .dir.display())]
    NoUpper { dir: PathBuf },
    #[error("--overlay {}: cannot create {sub}/ in it ({source}); give a directory you can write, or add :ro", .dir.display())]
    OverlaySubdir {
        dir: PathBuf,
        sub: &'static str,
        source: std::io::Error,
    },
    #[error("--overlay {}: {source}", .dir.display())]
    Overlay { dir: PathBuf, source: OverlayError },
    #[error("--writable-tmpfs: {0}")]
    WritableTmpfs(OverlayError),
}

/// For a mount refused in a directory image: how to make it work.
fn refused_hint(e: &SysError, image_dir: &Option<PathBuf>) -> String {
    match image_dir {
        Some(d) if mount_point_refused(e.errno()) => format!(
            " (if this is in the image directory {}: gpurun makes mount points only in a \
             directory image that is yours and has no mounts below it; chown it, or use a \
             .sqsh image)",
            d.display()
        ),
        _ => String::new(),
    }
}

/// Build the container root in C's private mount namespace through `os` (`sys::seam::Linux`,
/// a recording fake in tests); returns its path.
pub(super) fn setup_root<S: Mounts + Namespaces>(
    os: &S,
    plan: &Plan,
    lower: &Lower,
) -> Result<PathBuf, RootError> {
    let srcs = enter_namespaces(os, plan)?;
    let kept = match &plan.changes {
        Changes::Overlay { dir, .. } => Some(os.clone_tree(dir).map_err(|source| {
            let dir = dir.clone();
            RootError::OverlayDir { dir, source }
        })?),
        _ => None,
    };
    // Only P holds the server's connection: the container ends with P.
    let captured;
    let (tree, image, dir) = match lower {
        Lower::Dir(d) => {
            captured = os.clone_tree(d).map_err(RootError::ImageDir)?;
            (&captured, d, Some(d.as_path()))
        }
        Lower::Served { image, attached } => (&attached.mount, image, None),
    };
    let served = dir.is_none();
    let mut stage = Stage::new(os)?;
    let lower_p = stage.dir("lower")?;
    let dst = os.open_path(&lower_p)?;
    os.attach_tree(tree, &dst, &lower_p)
        .map_err(|source| RootError::Image {
            kind: if served { "image" } else { "image directory" },
            image: image.clone(),
            source,
        })?;
    if !served && plan.changes != Changes::InPlace {
        os.remount_readonly(&lower_p)?;
    }
    let kept = kept.map(|t| stage.attach("overlay", &t)).transpose()?;
    let root = stage.root(lower_p, served, &plan.changes, kept, plan.overlay_driver)?;
    let mut root = Root::open(os, &root)?;
    let files = stage.dir("files")?;
    // Every mount point first: an overlay made for one would hide the mounts made below its
    // directory before it.
    for (i, (m, src)) in plan.mounts.iter().zip(srcs.iter()).enumerate() {
        let covered = plan.mounts[..i].iter().any(|e| m.dst.starts_with(&e.dst));
        let Some(kind) = point_kind(os, m, src.as_ref()).filter(|_| !covered) else {
            continue;
        };
        let made = stage.mount_point(&mut root, &m.dst, kind);
        made.map(drop).or_else(|e| refused(m, e, dir))?;
    }
    for (i, (m, src)) in plan.mounts.iter().zip(srcs.iter()).enumerate() {
        let applied = apply_mount(&mut root, &mut stage, m, src.as_ref(), &files, i);
        applied.or_else(|e| refused(m, e, dir))?;
    }
    if !plan.changes.writable() {
        let tops = stage.overlays.iter().map(sys::fd_path);
        for p in std::iter::once(root.path.clone())
            .filter(|_| !served)
            .chain(tops)
        {
            os.remount_readonly(&p)?;
        }
    }
    Ok(root.path)
}

/// C's mount namespace (the `slave` binds' sources captured in it before it is made private,
/// so that the host's mount events still reach them), and its UTS and network namespaces as
/// the plan asks. Returns the plan's bind sources (`capture_sources`), every one captured
/// before STAGE is mounted over /tmp.
fn enter_namespaces<S: Mounts + Namespaces>(
    os: &S,
    plan: &Plan,
) -> Result<Vec<Option<OwnedFd>>, RootError> {
    let early = || capture_sources(os, plan, true);
    let slaves = os.enter_mount_namespace_then(sys::Propagation::Private, early)??;
    if let Some(h) = &plan.hostname {
        os.enter_uts_namespace(h)?;
    }
    if plan.own_net {
        os.enter_net_namespace().map_err(RootError::Net)?;
    }
    let others = capture_sources(os, plan, false)?;
    Ok(slaves
        .into_iter()
        .zip(others)
        .map(|(s, o)| s.or(o))
        .collect())
}

/// A bind that the host's mount events under its source reach (`slave`, `rslave`).
fn receives_host_events(m: &Mount) -> bool {
    let p = m.flags.propagation;
    p.is_some_and(|p| p.kind == PropagationKind::Slave)
}

/// Detached copies of the plan's bind sources, of the slave ones or of the others, in plan
/// order (None for other mounts, and for an optional source that is missing).
fn capture_sources(
    os: &impl Mounts,
    plan: &Plan,
    slaves: bool,
) -> Result<Vec<Option<OwnedFd>>, RootError> {
    let mut srcs = Vec::with_capacity(plan.mounts.len());
    for m in &plan.mounts {
        srcs.push(match &m.source {
            MountSource::Bind { src } | MountSource::HostCopy { src }
                if receives_host_events(m) == slaves =>
            {
                match os.clone_tree(src) {
                    Ok(fd) => Some(fd),
                    Err(_) if m.optional => None,
                    Err(source) => {
                        let src = src.clone();
                        return Err(RootError::Source { src, source });
                    }
                }
            }
            _ => None,
        });
    }
    Ok(srcs)
}

/// A mount that failed: fine when optional, else the one line, with a hint for a mount point
/// refused in a directory image (`dir`).
fn refused(m: &Mount, e: SysError, dir: Option<&Path>) -> Result<(), RootError> {
    if m.optional {
        return Ok(());
    }
    Err(RootError::Mount {
        dst: m.dst.clone(),
        source: e,
        image_dir: dir.map(Path::to_path_buf),
    })
}

/// The tmpfs where the container's pieces live inside C's private mount namespace, mounted over
/// /tmp (STAGE): nothing is created on the host. And the overlays made with it.
struct Stage<'s, S: Mounts> {
    os: &'s S,
    /// The overlays made for mount points: remounted read-only once the root is built.
    overlays: Vec<OwnedFd>,
    made: usize,
}

impl<'s, S: Mounts> Stage<'s, S> {
    fn new(os: &'s S) -> Result<Self, RootError> {
        let at = Path::new(STAGE);
        os.mount_tmpfs(at, 0o755, None, None, sys::Attrs::default())?;
        Ok(Stage {
            os,
            overlays: Vec::new(),
            made: 0,
        })
    }

    fn dir(&self, name: &str) -> Result<PathBuf, RootError> {
        let path = Path::new(STAGE).join(name);
        match self.os.mkdir(&path) {
            Ok(()) => Ok(path),
            Err(source) => Err(RootError::Mkdir { path, source }),
        }
    }

    /// A captured tree attached at a new directory `name` of the stage.
    fn attach(&self, name: &str, tree: &OwnedFd) -> Result<PathBuf, RootError> {
        let d = self.dir(name)?;
        let dst = self.os.open_path(&d)?;
        self.os.attach_tree(tree, &dst, &d)?;
        Ok(d)
    }

    /// The container's root, with the image attached at `lower`: a read-only root is the
    /// server's read-only mount itself, and a mount point it lacks gets an overlay on its
    /// directory only (`mount_point`), not one over the whole image, whose every lookup and
    /// open that would cost. A directory image, or a writable root, gets one as a whole (made
    /// by `driver`); `--writable` writes to the directory itself; `--overlay` (attached at
    /// `kept`) keeps the changes in its directory.
    fn root(
        &mut self,
        lower: PathBuf,
        served: bool,
        changes: &Changes,
        kept: Option<PathBuf>,
        driver: OverlayDriver,
    ) -> Result<PathBuf, RootError> {
        let top = match changes {
            Changes::InPlace => return Ok(lower),
            Changes::None if served => return Ok(lower),
            Changes::Overlay { dir, readonly } => {
                let kept = kept.ok_or(RootError::NotCaptured)?;
                return self.persistent(&lower, &kept, dir, *readonly, driver);
            }
            _ => self.dir("root")?,
        };
        if !changes.writable() {
            // a directory image: read-only as it is where no overlay can be made
            return Ok(self.overlay(&lower, &top).map_or(lower, |_| top));
        }
        let (upper, work) = self.upper_work()?;
        let layers = Layers {
            lowers: vec![&lower],
            upper: Some((&upper, &work)),
        };
        overlay::mount(self.os, driver, &layers, &top).map_err(RootError::WritableTmpfs)?;
        Ok(top)
    }

    /// `--overlay DIR` (attached at `at`): DIR/upper over the image, DIR/work its work
    /// directory (both made when missing); with `readonly`, DIR/upper as one more lower layer.
    fn persistent(
        &mut self,
        lower: &Path,
        at: &Path,
        dir: &Path,
        readonly: bool,
        driver: OverlayDriver,
    ) -> Result<PathBuf, RootError> {
        let top = self.dir("root")?;
        let (upper, work) = (at.join("upper"), at.join("work"));
        let dir = dir.to_path_buf();
        let upper_is_dir = self.os.open_path(&upper).and_then(|d| self.os.is_dir(&d));
        if readonly && !upper_is_dir.unwrap_or(false) {
            return Err(RootError::NoUpper { dir });
        }
        for sub in ["upper", "work"].into_iter().filter(|_| !readonly) {
            match self.os.mkdir(&at.join(sub)) {
                Err(source) if source.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(RootError::OverlaySubdir { dir, sub, source });
                }
                _ => {}
            }
        }
        let layers = match readonly {
            true => Layers {
                lowers: vec![&upper, lower],
                upper: None,
            },
            false => Layers {
                lowers: vec![lower],
                upper: Some((&upper, &work)),
            },
        };
        let made = overlay::mount(self.os, driver, &layers, &top);
        made.map_err(|source| RootError::Overlay { dir, source })?;
        Ok(top)
    }

    /// A tmpfs overlay on `lower`, where new entries go, mounted at `at`.
    fn overlay(&mut self, lower: &Path, at: &Path) -> Result<(), RootError> {
        let (upper, work) = self.upper_work()?;
        Ok(self.os.mount_overlay(lower, &upper, &work, at)?)
    }

    /// A new overlay's upper and work directories, in the stage.
    fn upper_work(&mut self) -> Result<(PathBuf, PathBuf), RootError> {
        self.made += 1;
        let n = self.made;
        Ok((
            self.dir(&format!("upper{n}"))?,
            self.dir(&format!("work{n}"))?,
        ))
    }

    /// Open the mount point at `dst` in `root`, made as `kind` where the root lacks it. Where
    /// the image is read-only there, or its directory cannot be copied up (a directory image
    /// whose group is one outside the user namespace: EOVERFLOW), its nearest directory gets a
    /// tmpfs overlay of this container's own, whose top takes the new entry without a copy-up:
    /// no other container sees the mount point, and the image stays as it is.
    fn mount_point(
        &mut self,
        root: &mut Root,
        dst: &Path,
        kind: Create,
    ) -> Result<OwnedFd, SysError> {
        let os = self.os;
        let refused = match os.open_in_root(&root.fd, dst, kind) {
            Err(e)
                if kind != Create::No && matches!(e.errno(), Errno::EROFS | Errno::EOVERFLOW) =>
            {
                e
            }
            r => return r,
        };
        let found = dst.ancestors().skip(1).find_map(|a| {
            let fd = os.open_in_root(&root.fd, a, Create::No).ok()?;
            Some((a.to_path_buf(), fd))
        });
        let Some((at, dir)) = found else {
            return Err(refused);
        };
        let on = sys::fd_path(&dir);
        self.overlay(&on, &on).map_err(|_| refused)?;
        // The root's own handle is under the overlay now: from the path again, it is on top.
        if at == Path::new("/") {
            *root = Root::open(os, &root.path)?;
        }
        self.overlays
            .push(os.open_in_root(&root.fd, &at, Create::No)?);
        os.open_in_root(&root.fd, dst, kind)
    }
}

/// How the kernel refuses a mount point in a directory image it cannot overlay or write: owned
/// by ids outside the user namespace (EACCES, EPERM; EOVERFLOW on copy-up), or left read-only
/// because overlayfs refuses a lower with mounts below it (EROFS).
fn mount_point_refused(e: Errno) -> bool {
    matches!(
        e,
        Errno::EACCES | Errno::EPERM | Errno::EOVERFLOW | Errno::EROFS
    )
}

/// What a mount needs at its destination: a directory or a file (None for a symlink, and for an
/// optional bind whose source is missing).
fn point_kind(os: &impl Mounts, m: &Mount, src: Option<&OwnedFd>) -> Option<Create> {
    match &m.source {
        MountSource::Bind { .. } => Some(match (m.flags.create, os.is_dir(src?)) {
            (Some(PointKind::Dir), _) | (None, Ok(true)) => Create::Dir,
            _ => Create::File,
        }),
        MountSource::Tmpfs { .. }
        | MountSource::Proc
        | MountSource::Devpts
        | MountSource::Mqueue => Some(Create::Dir),
        MountSource::File { .. } => Some(Create::File),
        MountSource::Symlink { .. }
        | MountSource::RootFile { .. }
        | MountSource::HostCopy { .. } => None,
    }
}

fn apply_mount<S: Mounts>(
    root: &mut Root,
    stage: &mut Stage<S>,
    m: &Mount,
    src: Option<&OwnedFd>,
    files: &Path,
    i: usize,
) -> Result<(), SysError> {
    match &m.source {
        MountSource::Bind { .. } => {
            let os = stage.os;
            let (Some(tree), Some(kind)) = (src, point_kind(os, m, src)) else {
                return Ok(());
            };
            attach(root, stage, m, tree, kind)
        }
        MountSource::Tmpfs { mode, size, huge } => {
            let dst = stage.mount_point(root, &m.dst, Create::Dir)?;
            root.not_the_root(stage.os, &dst, &m.dst)?;
            let at = sys::fd_path(&dst);
            (stage.os).mount_tmpfs(&at, *mode, *size, huge.as_deref(), attrs(m))
        }
        MountSource::File { contents } => {
            let f = files.join(i.to_string());
            stage
                .os
                .write_file(&f, contents.as_bytes())
                .map_err(|e| SysError::Path {
                    what: "write",
                    path: f.clone(),
                    errno: sys::io_errno(&e),
                })?;
            let tree = stage.os.clone_tree(&f)?;
            attach(root, stage, m, &tree, Create::File)
        }
        MountSource::RootFile { contents } => {
            let written = stage
                .os
                .write_in_root(&root.fd, &m.dst, contents.as_bytes());
            written.or_else(|_| {
                // a root that refuses it (an image directory's file whose owner is outside
                // the user namespace cannot be copied up): bound read-only instead
                let source = MountSource::File {
                    contents: contents.clone(),
                };
                let bound = Mount {
                    source,
                    readonly: true,
                    ..m.clone()
                };
                apply_mount(root, stage, &bound, None, files, i)
            })
        }
        MountSource::HostCopy { src: host } => {
            let Some(tree) = src else {
                return Ok(());
            };
            copy_host_file(stage.os, root, host, &m.dst).or_else(|_| {
                // a root that refuses it: bound read-only, as without a writable root
                let bound = Mount::bind(host, &m.dst, true);
                attach(root, stage, &bound, tree, Create::File)
            })
        }
        MountSource::Symlink { target } => stage.os.symlink_in_root(&root.fd, &m.dst, target),
        MountSource::Proc | MountSource::Devpts | MountSource::Mqueue => {
            let dst = stage.mount_point(root, &m.dst, Create::Dir)?;
            root.not_the_root(stage.os, &dst, &m.dst)?;
            let at = sys::fd_path(&dst);
            match m.source {
                MountSource::Proc => stage.os.mount_proc(&at),
                MountSource::Mqueue => stage.os.mount_mqueue(&at),
                _ => stage.os.mount_devpts(&at),
            }
        }
    }
}

/// `host` copied over `dst` in the writable root: a symlink stays one where the image has what
/// it points to (enroot's copy of /etc/localtime), else the file's contents are copied.
fn copy_host_file(os: &impl Mounts, root: &Root, host: &Path, dst: &Path) -> Result<(), SysError> {
    let io = |e: std::io::Error| SysError::Path {
        what: "read",
        path: host.to_path_buf(),
        errno: sys::io_errno(&e),
    };
    let target = os.read_link(host);
    if let Some(t) = target.filter(|t| t.is_absolute()) {
        if os.open_in_root(&root.fd, &t, Create::No).is_ok() {
            os.unlink_in_root(&root.fd, dst)?;
            return os.symlink_in_root(&root.fd, dst, &t);
        }
    }
    let contents = os.read_host(host).map_err(io)?;
    os.unlink_in_root(&root.fd, dst)?;
    os.write_in_root(&root.fd, dst, &contents)
}

/// The mount's attributes as the kernel takes them.
fn attrs(m: &Mount) -> sys::Attrs {
    sys::Attrs {
        readonly: m.readonly,
        nosuid: m.flags.nosuid,
        nodev: m.flags.nodev,
        noexec: m.flags.noexec,
    }
}

/// Attach a detached tree at the mount's destination, read-only (nodev, noexec…) first where
/// asked (so the tree is never writable in the container, not even for a moment), then with
/// the propagation asked for.
fn attach<S: Mounts>(
    root: &mut Root,
    stage: &mut Stage<S>,
    m: &Mount,
    tree: &OwnedFd,
    kind: Create,
) -> Result<(), SysError> {
    let os = stage.os;
    let attrs = attrs(m);
    let later = attrs != sys::Attrs::default() && !os.set_tree_attrs(tree, attrs, &m.dst)?;
    let dst = stage.mount_point(root, &m.dst, kind)?;
    root.not_the_root(os, &dst, &m.dst)?;
    os.attach_tree(tree, &dst, &m.dst)?;
    if !later && m.flags.propagation.is_none() {
        return Ok(());
    }
    // The new mount is reached through a fresh handle; an fd opened before it was attached
    // still points under it.
    let top = os.open_in_root(&root.fd, &m.dst, Create::No)?;
    if later {
        // Kernels before 5.12: the mount itself only (its submounts keep their flags).
        os.remount(&sys::fd_path(&top), attrs)?;
    }
    match m.flags.propagation {
        Some(p) => os.set_propagation(&sys::fd_path(&top), p),
        None => Ok(()),
    }
}

/// The container's root directory, and its identity to compare mount points with.
struct Root {
    path: PathBuf,
    fd: OwnedFd,
    id: (u64, u64),
}

impl Root {
    fn open(os: &impl Mounts, path: &Path) -> Result<Root, SysError> {
        let fd = os.open_path(path)?;
        let id = os.identity(&fd)?;
        Ok(Root {
            path: path.to_path_buf(),
            fd,
            id,
        })
    }

    /// An image whose /tmp (say) is a symlink to `/` would have a bind hide the whole image,
    /// and put the host's world-writable /tmp where the container looks for
    /// /etc/ld.so.preload: refused.
    fn not_the_root(&self, os: &impl Mounts, dst: &OwnedFd, path: &Path) -> Result<(), SysError> {
        if path != Path::new("/") && self.id == os.identity(dst)? {
            return Err(SysError::Path {
                what: "the image's symlinks resolve it to the container's root:",
                path: path.to_path_buf(),
                errno: nix::errno::Errno::ELOOP,
            });
        }
        Ok(())
    }
}

//! Where the cache directory is: `GPURUN_CACHEDIR` / `cache_dir` (see config.rs), else
//! `$XDG_CACHE_HOME/gpurun`, else `/var/tmp/gpurun-$UID` (image/cache.rs says why); and who
//! may read it.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use super::private_dir::Visibility;

/// Files younger than this are never taken for abandoned (by `gpurun cache gc`, and by `prune`
/// for a writer's temporary file).
pub const GRACE: Duration = Duration::from_secs(600);

/// What the user can do when the cache directory is refused.
pub const CACHE_FIX: &str =
    "set GPURUN_CACHEDIR (or cache_dir in ~/.config/gpurun/config.toml) to a directory of your own";

/// The cache settings of this process, from the config (set once by the command line's entry).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `cache_dir` / `GPURUN_CACHEDIR`.
    pub dir: Option<PathBuf>,
    /// The site's shared read-only cache.
    pub shared: Option<PathBuf>,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Take the config's cache settings for this process (before any cache is opened).
pub fn configure(s: Settings) {
    let _ = SETTINGS.set(s);
}

pub fn settings() -> &'static Settings {
    SETTINGS.get_or_init(Settings::default)
}

/// The cache root (see the module comment for the order of precedence).
pub fn cache_root() -> PathBuf {
    cache_root_from(
        settings().dir.clone(),
        std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from),
        nix::unistd::getuid().as_raw(),
    )
}

/// [`cache_root`] from given values (also for `gpurun cache gc`, which works out the roots of
/// other gpurun processes).
pub fn cache_root_from(configured: Option<PathBuf>, xdg: Option<PathBuf>, uid: u32) -> PathBuf {
    // Empty or relative values are ignored, as the XDG spec asks.
    let usable = |p: &PathBuf| p.is_absolute();
    if let Some(p) = configured.filter(usable) {
        return p;
    }
    if let Some(p) = xdg.filter(usable) {
        return p.join("gpurun");
    }
    PathBuf::from(format!("/var/tmp/gpurun-{uid}"))
}

/// Who may read the cache at `root`: everyone where it is the site's shared cache and the caller
/// its owner (filling it), else only the caller.
pub fn visibility(root: &Path) -> Visibility {
    let me = nix::unistd::geteuid().as_raw();
    let published = settings().shared.as_ref().is_some_and(|s| {
        let real = |p: &Path| fs::canonicalize(p).ok();
        real(root).is_some_and(|r| Some(r) == real(s))
            && fs::metadata(s).is_ok_and(|m| m.uid() == me)
    });
    match published {
        true => Visibility::Readable,
        false => Visibility::Private,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_precedence() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(cache_root_from(p("/c"), p("/x"), 7), PathBuf::from("/c"));
        assert_eq!(
            cache_root_from(None, p("/x"), 7),
            PathBuf::from("/x/gpurun")
        );
        assert_eq!(
            cache_root_from(p("rel"), p(""), 7),
            PathBuf::from("/var/tmp/gpurun-7")
        );
        assert_eq!(
            cache_root_from(None, None, 1000),
            PathBuf::from("/var/tmp/gpurun-1000")
        );
    }
}

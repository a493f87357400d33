//! The host's NVIDIA driver files: libraries found through ld.so.cache files (no ldconfig run)
//! or plain directories, binaries, GSP firmware, IPC sockets, and the driver's version and params.
//! Parsing and choosing are pure; the rest only reads files and directories.
//!
//! ldcache.rs reads ld.so.cache files, proc_files.rs the driver's /proc files; this file finds
//! and chooses the libraries, binaries, firmware and sockets.

mod ldcache;
mod proc_files;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use ldcache::{for_each_ldcache_entry, NATIVE_FLAGS};
pub use ldcache::{parse_ldcache, CacheEntry, DriverError};
pub use proc_files::{params_without_modify, parse_gpu_information, parse_proc_version, ProcGpu};

/// libnvidia-container's groups of driver libraries (driver capabilities).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Group {
    Utility,
    Compute,
    Video,
    Graphics,
}

const UTILITY: &[&str] = &["libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so"];

const COMPUTE: &[&str] = &[
    "libcuda.so",
    "libcudadebugger.so",
    "libnvidia-opencl.so",
    "libnvidia-gpucomp.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-fatbinaryloader.so",
    "libnvidia-allocator.so",
    "libnvidia-compiler.so",
    "libnvidia-pkcs11.so",
    "libnvidia-pkcs11-openssl3.so",
    "libnvidia-nvvm.so",
    "libnvidia-tileiras.so",
];

const VIDEO: &[&str] = &[
    "libvdpau_nvidia.so",
    "libnvidia-encode.so",
    "libnvidia-opticalflow.so",
    "libnvcuvid.so",
];

const GRAPHICS: &[&str] = &[
    "libnvidia-eglcore.so",
    "libnvidia-glcore.so",
    "libnvidia-tls.so",
    "libnvidia-glsi.so",
    "libnvidia-fbc.so",
    "libnvidia-ifr.so",
    "libnvidia-rtcore.so",
    "libnvoptix.so",
    "libGLX_nvidia.so",
    "libEGL_nvidia.so",
    "libGLESv2_nvidia.so",
    "libGLESv1_CM_nvidia.so",
    "libnvidia-glvkspirv.so",
    "libnvidia-cbl.so",
    "libnvidia-egl-wayland.so",
    "libnvidia-egl-gbm.so",
];

/// The group a library belongs to, by name (`libcuda.so.1` → compute).
pub fn group_of(name: &str) -> Option<Group> {
    let in_list = |l: &[&str]| {
        l.iter()
            .any(|p| name == *p || name.strip_prefix(p).is_some_and(|r| r.starts_with('.')))
    };
    [
        (UTILITY, Group::Utility),
        (COMPUTE, Group::Compute),
        (VIDEO, Group::Video),
        (GRAPHICS, Group::Graphics),
    ]
    .into_iter()
    .find(|(l, _)| in_list(l))
    .map(|(_, g)| g)
}

/// The groups turned on by a capability list (`compute,utility,video`, `all`); compute and utility
/// are always on. Unknown words are returned separately.
pub fn groups_from_caps<'a>(caps: impl IntoIterator<Item = &'a str>) -> (Vec<Group>, Vec<String>) {
    let mut g = vec![Group::Utility, Group::Compute];
    let mut unknown = vec![];
    for c in caps {
        match c.trim().to_ascii_lowercase().as_str() {
            "" | "compute" | "utility" | "compat32" => {}
            "all" => g.extend([Group::Video, Group::Graphics]),
            "video" => g.push(Group::Video),
            "graphics" | "display" => g.push(Group::Graphics),
            _ => unknown.push(c.trim().to_string()),
        }
    }
    g.sort();
    g.dedup();
    (g, unknown)
}

/// A library the host offers: the name the loader looks for, and the real file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Candidate {
    /// Soname or link name, e.g. `libcuda.so.1`.
    pub name: String,
    /// The resolved file, e.g. `/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04`.
    pub file: PathBuf,
}

/// A library chosen for the container: bound from `src` to `<libdir>/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Library {
    pub name: String,
    pub src: PathBuf,
    pub group: Option<Group>,
}

/// Choose the driver libraries: those whose real file ends in `.so.<version>` (a library of an
/// older driver left behind is never taken), of an enabled group or of none. The first
/// candidate for a name wins. Each library is offered under its own name and, for libcuda and
/// libnvidia-ml, also without version (`libcuda.so`), which some programs dlopen.
pub fn choose_libraries(candidates: &[Candidate], version: &str, groups: &[Group]) -> Vec<Library> {
    let suffix = format!(".so.{version}");
    let mut out: BTreeMap<String, Library> = BTreeMap::new();
    for c in candidates {
        let real = c
            .file
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !real.ends_with(&suffix) {
            continue;
        }
        let group = group_of(&c.name).or_else(|| group_of(&real));
        if group.is_some_and(|g| !groups.contains(&g)) {
            continue;
        }
        let mut names = vec![c.name.clone(), real.clone()];
        for dev in ["libcuda.so", "libnvidia-ml.so"] {
            if c.name.starts_with(&format!("{dev}.")) {
                names.push(dev.to_string());
            }
        }
        for n in names {
            out.entry(n.clone()).or_insert(Library {
                name: n,
                src: c.file.clone(),
                group,
            });
        }
    }
    out.into_values().collect()
}

/// Is this ELF file built for the running architecture (class and machine of its header)?
/// Two fields of a 20-byte header: not worth `object` or `goblin`, which parse whole files.
pub fn elf_is_native(header: &[u8]) -> bool {
    if header.len() < 20 || &header[..4] != b"\x7fELF" {
        return false;
    }
    let class64 = header[4] == 2;
    let machine = u16::from_le_bytes([header[18], header[19]]);
    let want: u16 = if cfg!(target_arch = "x86_64") {
        62
    } else if cfg!(target_arch = "aarch64") {
        183
    } else if cfg!(target_arch = "powerpc64") {
        21
    } else {
        return true;
    };
    class64 == cfg!(target_pointer_width = "64")
        && (machine == want || machine.swap_bytes() == want)
}

fn is_native_file(p: &Path) -> bool {
    use std::io::Read;
    let mut h = [0u8; 20];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut h))
        .is_ok()
        && elf_is_native(&h)
}

/// Resolves library paths cheaply: a soname link points within its directory
/// (`libcuda.so.1 -> libcuda.so.580.159.04`), so it is followed with one readlink and the
/// directory is canonicalised once, not the whole path once per library (a driver directory
/// holds 70-odd of them, and every GPU start looks).
#[derive(Default)]
struct Resolver {
    dirs: HashMap<PathBuf, Option<PathBuf>>,
    /// Files already checked for this architecture (a library's file has two or three names).
    native: HashMap<PathBuf, bool>,
}

impl Resolver {
    /// The real file `p` names (`known_file`: the caller already knows it is no link).
    fn file(&mut self, p: &Path, known_file: bool) -> Option<PathBuf> {
        let mut p = p.to_path_buf();
        if !known_file {
            let mut hops = 0;
            loop {
                match std::fs::read_link(&p) {
                    Ok(t)
                        if hops < 8
                            && matches!(
                                t.components().collect::<Vec<_>>()[..],
                                [Component::Normal(_)]
                            ) =>
                    {
                        p.set_file_name(t);
                        hops += 1;
                    }
                    Ok(_) => return std::fs::canonicalize(&p).ok(),
                    // EINVAL: not a link; the file itself
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => break,
                    Err(_) => return None,
                }
            }
        }
        let (dir, name) = (p.parent()?, p.file_name()?);
        let real = self
            .dirs
            .entry(dir.to_path_buf())
            .or_insert_with(|| std::fs::canonicalize(dir).ok());
        Some(real.as_ref()?.join(name))
    }

    /// A library file worth offering: of this driver version when known (others are never
    /// chosen, so not even opened), and built for this architecture.
    fn offered(&mut self, file: &Path, suffix: Option<&str>) -> bool {
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        suffix.is_none_or(|s| name.ends_with(s))
            && *self
                .native
                .entry(file.to_path_buf())
                .or_insert_with(|| is_native_file(file))
    }
}

/// (name, path, known to be no link) of an ld.so.cache's native entries that may be the driver's.
fn ldcache_entries(path: &Path) -> Result<Vec<(String, PathBuf, bool)>, DriverError> {
    let b = match std::fs::read(path) {
        Ok(b) => b,
        Err(_) => return Ok(vec![]),
    };
    // Judged on the bytes: a cache lists thousands of libraries and only the driver's are kept.
    let driver_lib = |key: &[u8]| {
        let has = |needle: &[u8]| key.windows(needle.len()).any(|w| w == needle);
        key.starts_with(b"libcuda")
            || key.starts_with(b"libnvcuvid")
            || key.starts_with(b"libnvoptix")
            || has(b"nvidia")
    };
    let mut out = Vec::new();
    for_each_ldcache_entry(&b, &path.display().to_string(), |flags, key, value| {
        if flags == NATIVE_FLAGS && driver_lib(key) {
            let name = String::from_utf8_lossy(key).into_owned();
            let file = PathBuf::from(std::ffi::OsStr::from_bytes(value));
            out.push((name, file, false));
        }
        true
    })?;
    Ok(out)
}

/// (name, path, known to be no link) of a directory's `lib*.so*` entries, in name order.
fn dir_entries(dir: &Path) -> Vec<(String, PathBuf, bool)> {
    let mut v: Vec<(String, PathBuf, bool)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let file = e.file_type().is_ok_and(|t| t.is_file());
            (name.starts_with("lib") && name.contains(".so")).then(|| (name, e.path(), file))
        })
        .collect();
    v.sort();
    v
}

/// Where driver libraries are looked for, in order: the site's paths (ld.so.cache files or
/// directories), /usr/local/nvidia/lib64 and /usr/local/nvidia/lib, then /etc/ld.so.cache.
pub fn library_sources(extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = extra.to_vec();
    v.extend(
        [
            "/usr/local/nvidia/lib64",
            "/usr/local/nvidia/lib",
            "/etc/ld.so.cache",
        ]
        .map(PathBuf::from),
    );
    v
}

/// All candidates from the sources (a file is an ld.so.cache, a directory is scanned), of
/// driver `version` when it is known: for each name the first one offered (what
/// `choose_libraries` would keep), resolved; later ones are not even looked at.
pub fn candidates(
    sources: &[PathBuf],
    version: Option<&str>,
) -> Result<Vec<Candidate>, DriverError> {
    let suffix = version.map(|v| format!(".so.{v}"));
    let mut r = Resolver::default();
    let mut out: Vec<Candidate> = vec![];
    let mut found = std::collections::HashSet::new();
    for s in sources {
        let entries = if s.is_dir() {
            dir_entries(s)
        } else if s.is_file() {
            ldcache_entries(s)?
        } else {
            continue;
        };
        for (name, path, known_file) in entries {
            if found.contains(&name) {
                continue;
            }
            let Some(file) = r.file(&path, known_file) else {
                continue;
            };
            if r.offered(&file, suffix.as_deref()) {
                found.insert(name.clone());
                out.push(Candidate { name, file });
            }
        }
    }
    Ok(out)
}

/// The driver's binaries.
pub const BINARIES: &[&str] = &[
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
];

/// Find the binaries in PATH, then /usr/local/nvidia/bin and the `bin` beside each site path.
/// Only programs of this architecture count: a site's wrapper script (`exec /opt/…/nvidia-smi`)
/// would point at a path the container does not have.
pub fn find_binaries(path_env: Option<&str>, extra: &[PathBuf]) -> Vec<(String, PathBuf)> {
    let mut dirs: Vec<PathBuf> = path_env
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    dirs.push("/usr/local/nvidia/bin".into());
    for e in extra {
        let d = if e.is_dir() {
            e.clone()
        } else {
            e.parent().map(Path::to_path_buf).unwrap_or_default()
        };
        dirs.push(d.join("bin"));
        if let Some(p) = d.parent() {
            dirs.push(p.join("bin"));
        }
    }
    BINARIES
        .iter()
        .filter_map(|b| {
            dirs.iter()
                .filter_map(|d| std::fs::canonicalize(d.join(b)).ok())
                .find(|p| p.is_file() && is_native_file(p))
                .map(|p| (b.to_string(), p))
        })
        .collect()
}

/// The GSP firmware directory of this driver version, if the host has one.
pub fn find_firmware(version: &str, extra: &[PathBuf]) -> Option<PathBuf> {
    let mut roots: Vec<PathBuf> = [
        "/lib/firmware",
        "/usr/lib/firmware",
        "/usr/local/nvidia/firmware",
    ]
    .map(PathBuf::from)
    .to_vec();
    for e in extra {
        if let Some(p) = e.parent() {
            roots.push(p.join("firmware"));
        }
    }
    roots
        .into_iter()
        .map(|r| r.join("nvidia").join(version))
        .find(|p| p.is_dir())
}

/// Sockets and pipe directories of the driver's daemons that exist on the host.
pub fn find_ipc(mps_pipe_dir: Option<&str>) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = [
        "/run/nvidia-persistenced/socket",
        "/run/nvidia-fabricmanager/socket",
    ]
    .map(PathBuf::from)
    .to_vec();
    v.push(PathBuf::from(mps_pipe_dir.unwrap_or("/tmp/nvidia-mps")));
    v.into_iter().filter(|p| p.exists()).collect()
}

/// Version of the CUDA forward-compatibility libcuda among a directory's entries
/// (`libcuda.so.575.57.08` → `575.57.08`).
pub fn compat_version(entries: &[String]) -> Option<String> {
    entries
        .iter()
        .filter_map(|e| e.strip_prefix("libcuda.so."))
        .filter(|v| v.contains('.') && super::require::compare_versions(v, "0").is_some())
        .max_by(|a, b| super::require::compare_versions(a, b).unwrap_or(std::cmp::Ordering::Equal))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_table() {
        let cases = [
            ("libcuda.so.1", Some(Group::Compute)),
            ("libcuda.so", Some(Group::Compute)),
            ("libcudadebugger.so.1", Some(Group::Compute)),
            ("libnvidia-ml.so.1", Some(Group::Utility)),
            ("libnvidia-pkcs11-openssl3.so.580.1", Some(Group::Compute)),
            ("libnvidia-nvvm.so.4", Some(Group::Compute)),
            ("libnvcuvid.so.1", Some(Group::Video)),
            ("libGLX_nvidia.so.0", Some(Group::Graphics)),
            ("libnvidia-glcore.so.580.1", Some(Group::Graphics)),
            ("libnvidia-sandboxutils.so.1", None),
            ("libcudart.so.12", None),
        ];
        for (n, want) in cases {
            assert_eq!(group_of(n), want, "{n}");
        }
        assert_eq!(
            groups_from_caps(["compute", "utility"]).0,
            vec![Group::Utility, Group::Compute]
        );
        assert_eq!(
            groups_from_caps(["video"]).0,
            vec![Group::Utility, Group::Compute, Group::Video]
        );
        assert_eq!(
            groups_from_caps(["all"]).0,
            vec![
                Group::Utility,
                Group::Compute,
                Group::Video,
                Group::Graphics
            ]
        );
        assert_eq!(
            groups_from_caps(["graphics", "bogus"]).1,
            vec!["bogus".to_string()]
        );
    }

    #[test]
    fn choose_table() {
        let v = "550.54.14";
        let c = |n: &str, f: &str| Candidate {
            name: n.into(),
            file: PathBuf::from(f),
        };
        let cands = vec![
            c("libcuda.so.1", "/a/libcuda.so.550.54.14"),
            c("libcuda.so.1", "/b/libcuda.so.550.54.14"), // later source: ignored
            c("libnvidia-ml.so.1", "/a/libnvidia-ml.so.550.54.14"),
            c("libnvidia-nvvm.so.4", "/a/libnvidia-nvvm.so.550.54.14"),
            c("libnvidia-old.so.1", "/a/libnvidia-old.so.470.1"), // another driver's leftover
            c(
                "libnvidia-sandboxutils.so.1",
                "/a/libnvidia-sandboxutils.so.550.54.14",
            ),
            c("libnvcuvid.so.1", "/a/libnvcuvid.so.550.54.14"),
            c(
                "libnvidia-glcore.so.550.54.14",
                "/a/libnvidia-glcore.so.550.54.14",
            ),
            c("libcudart.so.12", "/a/libcudart.so.12.4.1"),
        ];
        let names = |g: &[Group]| {
            choose_libraries(&cands, v, g)
                .into_iter()
                .map(|l| format!("{}={}", l.name, l.src.display()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(&[Group::Utility, Group::Compute]),
            vec![
                "libcuda.so=/a/libcuda.so.550.54.14",
                "libcuda.so.1=/a/libcuda.so.550.54.14",
                "libcuda.so.550.54.14=/a/libcuda.so.550.54.14",
                "libnvidia-ml.so=/a/libnvidia-ml.so.550.54.14",
                "libnvidia-ml.so.1=/a/libnvidia-ml.so.550.54.14",
                "libnvidia-ml.so.550.54.14=/a/libnvidia-ml.so.550.54.14",
                "libnvidia-nvvm.so.4=/a/libnvidia-nvvm.so.550.54.14",
                "libnvidia-nvvm.so.550.54.14=/a/libnvidia-nvvm.so.550.54.14",
                "libnvidia-sandboxutils.so.1=/a/libnvidia-sandboxutils.so.550.54.14",
                "libnvidia-sandboxutils.so.550.54.14=/a/libnvidia-sandboxutils.so.550.54.14",
            ]
        );
        let all = names(&[
            Group::Utility,
            Group::Compute,
            Group::Video,
            Group::Graphics,
        ]);
        assert!(all.contains(&"libnvcuvid.so.1=/a/libnvcuvid.so.550.54.14".to_string()));
        assert!(all.contains(
            &"libnvidia-glcore.so.550.54.14=/a/libnvidia-glcore.so.550.54.14".to_string()
        ));
        assert!(choose_libraries(&cands, "999.1", &[Group::Compute]).is_empty());
    }

    #[test]
    fn elf_header_table() {
        let mut h = [0u8; 20];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        let m: u16 = if cfg!(target_arch = "aarch64") {
            183
        } else {
            62
        };
        h[18..20].copy_from_slice(&m.to_le_bytes());
        assert!(elf_is_native(&h));
        h[4] = 1;
        assert!(!elf_is_native(&h));
        h[4] = 2;
        h[18..20].copy_from_slice(&3u16.to_le_bytes()); // i386
        assert!(!elf_is_native(&h));
        assert!(!elf_is_native(b"#!/bin/sh\n"));
    }

    #[test]
    fn binaries_skip_wrapper_scripts() {
        let dir = tempfile::tempdir().unwrap();
        let (wrap, real) = (dir.path().join("wrap"), dir.path().join("real"));
        std::fs::create_dir_all(&wrap).unwrap();
        std::fs::create_dir_all(&real).unwrap();
        std::fs::write(
            wrap.join("nvidia-smi"),
            "#!/bin/sh\nexec /opt/nvidia/bin/nvidia-smi \"$@\"\n",
        )
        .unwrap();
        std::fs::copy(std::env::current_exe().unwrap(), real.join("nvidia-smi")).unwrap();
        std::os::unix::fs::symlink(real.join("nvidia-smi"), wrap.join("nvidia-debugdump")).unwrap();
        let path = format!("{}:{}", wrap.display(), real.display());
        let found = find_binaries(Some(&path), &[]);
        let real_smi = std::fs::canonicalize(real.join("nvidia-smi")).unwrap();
        assert!(
            found.contains(&("nvidia-smi".to_string(), real_smi.clone())),
            "{found:?}"
        );
        assert!(
            found.contains(&("nvidia-debugdump".to_string(), real_smi)),
            "{found:?}"
        );
    }

    /// A driver directory reached through a symlinked path, with the links a driver installs
    /// (chains, an absolute one into another directory, a dangling one) and another version's
    /// leftovers: every link resolves to the real file in the canonical directory, and only
    /// this version's native files are offered.
    #[test]
    fn candidates_resolve_links_and_keep_this_version() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("real");
        let other = t.path().join("other");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink(&real, t.path().join("via")).unwrap();
        let exe = std::env::current_exe().unwrap(); // an ELF of this architecture
        for f in ["libcuda.so.550.1", "libnvidia-ml.so.470.1"] {
            std::fs::copy(&exe, real.join(f)).unwrap();
        }
        std::fs::copy(&exe, other.join("libnvidia-nvvm.so.550.1")).unwrap();
        std::fs::write(real.join("libnvidia-cfg.so.550.1"), "not ELF").unwrap();
        let links: [(&str, PathBuf); 6] = [
            ("libcuda.so.1", "libcuda.so.550.1".into()),
            ("libcuda.so", "libcuda.so.1".into()),
            ("libnvidia-ml.so.1", "libnvidia-ml.so.470.1".into()),
            ("libnvidia-nvvm.so.4", other.join("libnvidia-nvvm.so.550.1")),
            ("libnvidia-gone.so.1", "libnvidia-gone.so.550.1".into()),
            ("libnvidia-cfg.so.1", "libnvidia-cfg.so.550.1".into()),
        ];
        for (name, target) in &links {
            std::os::unix::fs::symlink(target, real.join(name)).unwrap();
        }
        let canon = |d: &Path, f: &str| std::fs::canonicalize(d).unwrap().join(f);
        let got = |version| {
            let mut v: Vec<(String, PathBuf)> = candidates(&[t.path().join("via")], version)
                .unwrap()
                .into_iter()
                .map(|c| (c.name, c.file))
                .collect();
            v.sort();
            v
        };
        let cuda = canon(&real, "libcuda.so.550.1");
        let nvvm = canon(&other, "libnvidia-nvvm.so.550.1");
        assert_eq!(
            got(Some("550.1")),
            vec![
                ("libcuda.so".into(), cuda.clone()),
                ("libcuda.so.1".into(), cuda.clone()),
                ("libcuda.so.550.1".into(), cuda.clone()),
                ("libnvidia-nvvm.so.4".into(), nvvm.clone()),
            ]
        );
        // Without a version (NVML is asked for it), every native library is offered.
        let ml = canon(&real, "libnvidia-ml.so.470.1");
        assert_eq!(
            got(None),
            vec![
                ("libcuda.so".into(), cuda.clone()),
                ("libcuda.so.1".into(), cuda.clone()),
                ("libcuda.so.550.1".into(), cuda),
                ("libnvidia-ml.so.1".into(), ml.clone()),
                ("libnvidia-ml.so.470.1".into(), ml),
                ("libnvidia-nvvm.so.4".into(), nvvm),
            ]
        );
    }

    #[test]
    fn compat_table() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            compat_version(&s(&[
                "libcuda.so",
                "libcuda.so.1",
                "libcuda.so.575.57.08",
                "libnvidia-ptxjitcompiler.so.1"
            ]))
            .as_deref(),
            Some("575.57.08")
        );
        assert_eq!(compat_version(&s(&["libcuda.so.1"])), None);
        assert_eq!(compat_version(&[]), None);
    }
}

//! Host paths in the container: /tmp and the host's /etc files, the site's and the user's
//! binds and tmpfs, Slurm's PMIx directory; `--no-mount`, which leaves default ones out.

use std::path::{Path, PathBuf};

use super::types::{Changes, HostPath, HostView, PlanError, Request};
use crate::mount::{Mount, MountSource};
use crate::runtime::mount_spec::{bind_mount, normalize, parse_bind, parse_tmpfs, tmpfs_mount};

/// The default mounts `--no-mount` leaves out.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Skips {
    pub home: bool,
    pub cwd: bool,
    pub tmp: bool,
    /// The config files' binds.
    pub bind_paths: bool,
    /// Destinations: of config-file binds, or of the host files bound by default.
    pub dsts: Vec<PathBuf>,
}

/// `--no-mount`'s names, as Apptainer's (`mount home`, `mount tmp`… of apptainer.conf).
const NO_MOUNT_NAMES: &[&str] = &["home", "cwd", "tmp", "hostfs", "bind-paths"];

/// The host files gpurun copies in, which `--no-mount DST` may leave out.
const HOST_FILES: [&str; 3] = ["/etc/hosts", "/etc/resolv.conf", "/etc/localtime"];

/// Parse `--no-mount` (comma lists allowed).
pub(super) fn parse_no_mount(names: &[String]) -> Result<Skips, PlanError> {
    let mut s = Skips::default();
    for n in names.iter().flat_map(|n| n.split(',')).map(str::trim) {
        match n {
            "" => {}
            "home" => s.home = true,
            "cwd" => s.cwd = true,
            "tmp" => s.tmp = true,
            // gpurun never binds the host's file systems (Apptainer's "mount hostfs").
            "hostfs" => {}
            "bind-paths" => s.bind_paths = true,
            "proc" | "sys" | "dev" | "devpts" => {
                let why = "gpurun always mounts /proc, /sys and /dev: the container needs them";
                return Err(PlanError::NoMount(n.into(), why.into()));
            }
            p if normalize(Path::new(p)) == Path::new("/tmp") => s.tmp = true,
            p if p.starts_with('/') => s.dsts.push(normalize(Path::new(p))),
            _ => {
                let why = format!(
                    "unknown name; use {}, or the destination of a config-file bind or of {}",
                    NO_MOUNT_NAMES.join(", "),
                    HOST_FILES.join(", ")
                );
                return Err(PlanError::NoMount(n.into(), why));
            }
        }
    }
    Ok(s)
}

/// /tmp and /var/tmp (the host's, or fresh ones with --contain), and the host files: bound
/// read-only, or copied into a writable root whose changes are gpurun's (tmpfs) or the
/// container's (--overlay), where packages may replace them (enroot copies them too).
pub(super) fn tmp_and_host_files(
    req: &Request,
    host: &HostView,
    skips: &Skips,
    changes: &Changes,
    mounts: &mut Vec<Mount>,
) {
    match (skips.tmp, req.contain) {
        (true, _) => {}
        (false, true) => {
            mounts.push(Mount::new("/tmp", MountSource::tmpfs(0o1777)));
            mounts.push(Mount::new("/var/tmp", MountSource::tmpfs(0o1777)));
        }
        (false, false) => {
            mounts.push(Mount::bind("/tmp", "/tmp", false));
            mounts.push(Mount::bind("/var/tmp", "/var/tmp", false).optional());
        }
    }
    // not into what --save keeps: the host's files are not the image's
    let copied = host.save_changes.is_none()
        && matches!(
            changes,
            Changes::Tmpfs
                | Changes::Overlay {
                    readonly: false,
                    ..
                }
        );
    for f in HOST_FILES
        .iter()
        .filter(|f| !skips.dsts.iter().any(|d| d == Path::new(f)))
    {
        mounts.push(match copied {
            true => Mount::new(f, MountSource::HostCopy { src: f.into() }).optional(),
            false => Mount::bind(f, f, true).optional(),
        });
    }
}

/// The config file's site binds, then the user's --bind and --tmpfs (and the plugin's parsed
/// ones), shallower destinations
/// first (a tmpfs at /work, then a bind in it at /work/data), as docker orders its mounts; each
/// bind's source is checked on the host.
pub(super) fn binds(
    req: &Request,
    host: &HostView,
    skips: &Skips,
    mounts: &mut Vec<Mount>,
) -> Result<(), PlanError> {
    let site = req.site_binds.iter().filter(|_| !skips.bind_paths);
    let site = site.flat_map(|b| b.split(',')).map(|b| (b, true));
    let user = req
        .binds
        .iter()
        .flat_map(|b| b.split(','))
        .map(|b| (b, false));
    let mut parsed = Vec::new();
    for (spec, from_site) in site.chain(user).filter(|(s, _)| !s.is_empty()) {
        parsed.push((parse_bind(spec, &host.cwd)?, from_site));
    }
    let plugins = req
        .parsed_binds
        .iter()
        .map(|b| (bind_mount(b.clone()), false));
    parsed.extend(plugins);
    let mut skipped = Vec::new();
    let mut mine = Vec::new();
    for (m, from_site) in parsed {
        if from_site && skips.dsts.contains(&m.dst) {
            skipped.push(m.dst);
            continue;
        }
        if let MountSource::Bind { src } = &m.source {
            match (host.exists)(src) {
                HostPath::Exists => {}
                HostPath::Missing => return Err(PlanError::BindSourceMissing(src.clone())),
                HostPath::Denied => return Err(PlanError::BindSourceDenied(src.clone())),
            }
        }
        match from_site {
            true => mounts.push(m),
            false => mine.push(m),
        }
    }
    for t in &req.tmpfs {
        mine.push(parse_tmpfs(t)?);
    }
    for t in &req.parsed_tmpfs {
        let opts: Vec<&str> = t.opts.iter().map(String::as_str).collect();
        let spec = format!("{}:{}", t.dst.display(), t.opts.join(","));
        mine.push(tmpfs_mount(&spec, &t.dst, &opts)?);
    }
    mine.sort_by_key(|m| m.dst.components().count());
    mounts.extend(mine);
    let named = |d: &PathBuf| skipped.contains(d) || HOST_FILES.iter().any(|f| d == Path::new(f));
    if let Some(d) = skips.dsts.iter().find(|d| !named(d)) {
        let why = format!(
            "no config-file bind nor default host file ({}) has this destination",
            HOST_FILES.join(", ")
        );
        return Err(PlanError::NoMount(d.display().to_string(), why));
    }
    Ok(())
}

/// `srun --mpi=pmix`: Slurm's PMIx server keeps the socket and shared-memory files its ranks
/// open in PMIX_SERVER_TMPDIR, under slurmd's spool directory (/var/spool/slurmd/pmix.J.S):
/// the ranks in the container must find it at the same path.
pub(super) fn pmix_dir(host: &HostView, mounts: &mut Vec<Mount>) {
    if let Some(dir) = crate::env_vars::var(&host.env, "PMIX_SERVER_TMPDIR") {
        let dir = normalize(Path::new(dir));
        let covered = mounts.iter().any(|m| {
            matches!(m.source, MountSource::Bind { .. })
                && dir.starts_with(&m.dst)
                && m.dst != Path::new("/")
        });
        if dir.is_absolute() && !covered && (host.exists)(&dir) == HostPath::Exists {
            mounts.push(Mount::bind(&dir, &dir, false));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    // Long as a table is: one case of --no-mount names, accepted or refused, each.
    #[test]
    fn no_mount_names() {
        let parsed =
            |v: &[&str]| parse_no_mount(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            parsed(&["home,cwd", "tmp", "hostfs", " bind-paths ", "/etc/hosts/"]).unwrap(),
            Skips {
                home: true,
                cwd: true,
                tmp: true,
                bind_paths: true,
                dsts: vec!["/etc/hosts".into()],
            }
        );
        assert_eq!(parsed(&[]).unwrap(), Skips::default());
        for (bad, says) in [
            ("proc", "always mounts /proc"),
            ("dev", "always mounts"),
            (
                "homes",
                "unknown name; use home, cwd, tmp, hostfs, bind-paths",
            ),
        ] {
            let e = parsed(&[bad]).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("--no-mount {bad}: ")) && e.contains(says),
                "{e}"
            );
        }
        let req = |names: &[&str]| Request {
            no_mount: names.iter().map(|s| s.to_string()).collect(),
            site_binds: vec!["/site:/site".into(), "/apps:/opt/apps:ro".into()],
            binds: vec!["/mine".into()],
            ..Default::default()
        };
        let p = |names: &[&str]| {
            run_plan(
                &Fixture {
                    cwd: "/data/proj",
                    dev: vec![],
                },
                &req(names),
                Action::Exec(vec![]),
                ImageMeta {
                    working_dir: "/w".into(),
                    ..Default::default()
                },
                &Extras::default(),
            )
        };
        let all = dsts(&p(&[]).unwrap());
        for d in [
            "/home/alice",
            "/tmp",
            "/var/tmp",
            "/data/proj",
            "/site",
            "/opt/apps",
            "/mine",
            "/etc/hosts",
        ] {
            assert!(all.iter().any(|x| x == d), "{d} not in {all:?}");
        }
        // (names, destinations gone, cwd)
        let cases: &[(&[&str], &[&str], &str)] = &[
            (&["home"], &["/home/alice"], "/data/proj"),
            // the home's and /tmp's destinations name them
            (&["/home/alice/"], &["/home/alice"], "/data/proj"),
            (&["tmp"], &["/tmp", "/var/tmp"], "/data/proj"),
            (&["/tmp"], &["/tmp", "/var/tmp"], "/data/proj"),
            (&["cwd"], &["/data/proj"], "/w"),
            (&["bind-paths"], &["/site", "/opt/apps"], "/data/proj"),
            (&["/opt/apps"], &["/opt/apps"], "/data/proj"),
            (
                &["/etc/hosts", "/etc/localtime"],
                &["/etc/hosts", "/etc/localtime"],
                "/data/proj",
            ),
            (&["hostfs"], &[], "/data/proj"),
        ];
        for (names, gone, cwd) in cases {
            let plan = p(names).unwrap();
            let have = dsts(&plan);
            for g in *gone {
                assert!(!have.iter().any(|x| x == g), "{names:?}: {g} in {have:?}");
            }
            assert_eq!(have.len() + gone.len(), all.len(), "{names:?}: {have:?}");
            assert_eq!(plan.cwd, Path::new(cwd), "{names:?}");
        }
        // --bind's own binds are not "bind paths"; a destination nobody binds is an error
        assert!(dsts(&p(&["bind-paths"]).unwrap())
            .iter()
            .any(|x| x == "/mine"));
        let e = p(&["/mine"]).unwrap_err().to_string();
        assert!(
            e.starts_with("--no-mount /mine: no config-file bind"),
            "{e}"
        );
    }

    /// The plugin's binds (`hold --bind-json`) are mounted as they were parsed, paths with ':'
    /// and ',' intact, and their sources checked on the host as --bind's are.
    #[test]
    fn parsed_binds() {
        let bind = |src: &str| mount_grammar::Bind::new(src, "/d:e,f", true);
        let req = Request {
            parsed_binds: vec![bind("/w/a:b,c")],
            ..Default::default()
        };
        let m = find(&exec_plan(&req).unwrap(), "/d:e,f").unwrap().clone();
        assert_eq!(
            m.source,
            MountSource::Bind {
                src: "/w/a:b,c".into()
            }
        );
        assert!(m.readonly);
        let req = Request {
            parsed_binds: vec![bind("/missing/a:b")],
            ..Default::default()
        };
        let e = exec_plan(&req).unwrap_err().to_string();
        assert!(e.contains("/missing/a:b"), "{e}");
    }

    #[test]
    fn binds_and_tmpfs() {
        let req = Request {
            binds: vec!["/x:/y:ro,/z".into()],
            ..Default::default()
        };
        let p = exec_plan(&req).unwrap();
        assert!(find(&p, "/y").unwrap().readonly);
        assert!(!find(&p, "/z").unwrap().readonly);
        // flags come with the bind; the user's binds and tmpfs go shallower first, in order
        let req = Request {
            binds: vec!["/x:/w/a/b:nodev+rslave,/x:/w".into(), "/z:/w/a/b".into()],
            tmpfs: vec!["/w/a:size=1M".into()],
            ..Default::default()
        };
        let p = exec_plan(&req).unwrap();
        let d = dsts(&p);
        let at = |x: &str| d.iter().position(|y| y == x).unwrap();
        assert!(at("/w") < at("/w/a") && at("/w/a") < at("/w/a/b"), "{d:?}");
        let ab: Vec<&Mount> = p
            .mounts
            .iter()
            .filter(|m| m.dst == Path::new("/w/a/b"))
            .collect();
        assert!(
            ab[0].flags.nodev && ab[0].flags.propagation.is_some(),
            "{ab:?}"
        );
        assert!(ab[1].flags.is_plain() && ab[1].source == MountSource::Bind { src: "/z".into() });
        assert_eq!(
            find(&p, "/w/a").unwrap().source,
            MountSource::Tmpfs {
                mode: 0o1777,
                size: Some(1 << 20),
                huge: None,
            }
        );
        // the plugin's tmpfs, parsed: a ':' in its destination kept, its options read
        let req = Request {
            parsed_tmpfs: vec![mount_grammar::handover::Tmpfs {
                dst: "/t:u,v".into(),
                opts: vec!["size=1M".into(), "mode=700".into()],
            }],
            ..Default::default()
        };
        let p = exec_plan(&req).unwrap();
        let t = MountSource::Tmpfs {
            mode: 0o700,
            size: Some(1 << 20),
            huge: None,
        };
        assert_eq!(find(&p, "/t:u,v").unwrap().source, t);
        for (req, says) in [
            (
                Request {
                    binds: vec!["/x:/y:ro+bogus".into()],
                    ..Default::default()
                },
                "--bind \"/x:/y:ro+bogus\": unknown flag \"bogus\"",
            ),
            (
                Request {
                    tmpfs: vec!["/t:size=1M,bogus".into()],
                    ..Default::default()
                },
                "--tmpfs \"/t:size=1M,bogus\": unknown option \"bogus\"",
            ),
        ] {
            let e = exec_plan(&req).unwrap_err().to_string();
            assert!(e.starts_with(says), "{e}");
        }
        let req = Request {
            binds: vec!["/missing/dir:/m".into()],
            ..Default::default()
        };
        assert!(matches!(
            exec_plan(&req),
            Err(PlanError::BindSourceMissing(_))
        ));
        let req = Request {
            binds: vec!["/root-only/dir:/m".into()],
            ..Default::default()
        };
        let e = exec_plan(&req).unwrap_err();
        assert_eq!(e, PlanError::BindSourceDenied("/root-only/dir".into()));
        assert!(e.to_string().contains("permission denied"), "{e}");
    }

    #[test]
    fn pmix_server_directory_is_bound() {
        let plan_with =
            |env: Vec<(String, String)>, req: &Request| plan_in_env(env, req, &Extras::default());
        let pmix = |d: &str| vec![("PMIX_SERVER_TMPDIR".to_string(), d.to_string())];
        let spool = "/var/spool/slurmd/pmix.7.0";
        let p = plan_with(pmix("/var/spool/slurmd/pmix.7.0/"), &Request::default());
        let m = find(&p, spool).expect("PMIx directory bound");
        assert!(matches!(&m.source, MountSource::Bind { src, .. } if src == Path::new(spool)));
        let contain = Request {
            contain: true,
            ..Default::default()
        };
        assert!(find(&plan_with(pmix(spool), &contain), spool).is_some());
        // already visible through the /tmp bind; missing on the host; relative; unset
        for env in [
            pmix("/tmp/pmix.7.0"),
            pmix("/missing/pmix"),
            pmix("rel"),
            vec![],
        ] {
            let p = plan_with(env.clone(), &Request::default());
            assert_eq!(
                p.mounts
                    .iter()
                    .filter(|m| m.dst.starts_with("/tmp/pmix.7.0")
                        || m.dst.starts_with("/missing")
                        || m.dst == Path::new("rel"))
                    .count(),
                0,
                "{env:?}"
            );
        }
    }

    /// The host's /etc files: bound read-only, or copied into a root whose changes are gpurun's
    /// or the container's, never into a directory image or what --save keeps.
    #[test]
    fn host_files_in_writable_roots() {
        let bound = MountSource::Bind {
            src: "/etc/localtime".into(),
        };
        let copied = MountSource::HostCopy {
            src: "/etc/localtime".into(),
        };
        let req = |set: fn(&mut Request)| {
            let mut r = Request::default();
            set(&mut r);
            r
        };
        let cases = [
            (req(|_| {}), &bound),
            (req(|r| r.writable_tmpfs = true), &copied),
            (req(|r| r.overlay = Some("/o".into())), &copied),
            (req(|r| r.overlay = Some("/o:ro".into())), &bound),
        ];
        for (req, want) in cases {
            let p = exec_plan(&req).unwrap();
            assert_eq!(at_of(&p, "/etc/localtime").as_ref(), Some(want), "{req:?}");
        }
        // --save's changes directory
        let saving = HostView {
            save_changes: Some("/s".into()),
            ..alice(HOMEDIR.cwd, Vec::new(), Vec::new())
        };
        let image = image_of(ImageMeta::default());
        let exec = Action::Exec(vec![]);
        let p = plan(&req(|_| {}), &exec, &saving, &image, &Extras::default()).unwrap();
        assert_eq!(at_of(&p, "/etc/localtime"), Some(bound));
    }
}

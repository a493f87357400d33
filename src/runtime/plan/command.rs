//! What runs and where: the command line, the working directory (kept from the host, bound when
//! nothing else brings it in), the variables gpurun sets, and whether a directory image is a
//! root at all.

use std::path::{Path, PathBuf};

use super::binds::Skips;
use super::types::{
    Action, Extras, HostView, ImageView, PlanError, Request, RootSource, HOLD_STOP,
};
use crate::mount::{Mount, MountSource};

/// The command line to run.
pub(super) fn argv_for(
    action: &Action,
    image: &ImageView,
    host: &HostView,
) -> Result<Vec<String>, PlanError> {
    let sh = || -> Result<String, PlanError> {
        if (image.exists)("/bin/sh") {
            Ok("/bin/sh".into())
        } else {
            Err(PlanError::NothingToRun)
        }
    };
    Ok(match action {
        Action::Exec(argv) => argv.clone(),
        Action::Hold { entrypoint, .. } if *entrypoint && !image.meta.entrypoint.is_empty() => {
            let stop = HOLD_STOP.iter().map(|a| a.to_string());
            image.meta.entrypoint.iter().cloned().chain(stop).collect()
        }
        Action::Hold { .. } => Vec::new(),
        Action::Run(args) => {
            let mut argv = image.meta.entrypoint.clone();
            argv.extend(if args.is_empty() {
                image.meta.cmd.clone()
            } else {
                args.clone()
            });
            if argv.is_empty() {
                argv.push(sh()?);
            }
            argv
        }
        Action::Shell(choice, args) => {
            let shell = match (choice, &host.shell) {
                (Some(s), _) => s.clone(),
                (None, Some(s)) if (image.exists)(s) => s.clone(),
                _ => sh()?,
            };
            std::iter::once(shell).chain(args.iter().cloned()).collect()
        }
    })
}

/// The top directories of a root filesystem; a directory image with none of them is not one.
const ROOT_DIRS: &[&str] = &["/bin", "/usr", "/sbin", "/lib", "/etc"];

/// Is a directory image a root filesystem? Either it has one of `ROOT_DIRS`, or what runs is
/// there (a static program in a bare directory), in the image or in a mount.
pub(super) fn root_like(
    image: &ImageView,
    argv: Option<&[String]>,
    env: &[(String, String)],
    mounts: &[Mount],
) -> bool {
    if ROOT_DIRS.iter().any(|d| (image.exists)(d)) {
        return true;
    }
    let Some(name) = argv.and_then(|a| a.first()) else {
        return false;
    };
    let dirs = crate::runtime::env::path_dirs(env);
    crate::runtime::env::command_candidates(name, &dirs)
        .iter()
        .filter(|c| c.is_absolute())
        .any(|c| {
            (image.exists)(&c.to_string_lossy())
                || mounts
                    .iter()
                    .any(|m| m.dst != Path::new("/") && c.starts_with(&m.dst))
        })
}

/// Host directories that are never bound as the working directory: binding them would hide the
/// image's own copy (Apptainer skips them too).
const SYSTEM_DIRS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/root", "/run",
    "/sbin", "/sys", "/usr", "/var", "/opt", "/srv",
];

fn is_system_dir(p: &Path) -> bool {
    SYSTEM_DIRS.iter().any(|d| Path::new(d) == p)
        || ["/usr", "/etc", "/proc", "/sys", "/dev", "/boot"]
            .iter()
            .any(|d| p.starts_with(d))
}

/// The working directory: kept from the host, bound when nothing else brings it in.
pub(super) fn working_dir(
    req: &Request,
    action: &Action,
    host: &HostView,
    image: &ImageView,
    skips: &Skips,
    mounts: &mut Vec<Mount>,
) -> Result<PathBuf, PlanError> {
    let workdir = || match image.meta.working_dir.as_str() {
        "" => PathBuf::from("/"),
        w => PathBuf::from(w),
    };
    Ok(match &req.pwd {
        Some(p) if !p.is_absolute() => return Err(PlanError::RelativePwd(p.clone())),
        Some(p) => p.clone(),
        None if req.contain => workdir(),
        None if matches!(
            action,
            Action::Hold {
                image_workdir: true,
                ..
            }
        ) && !image.meta.working_dir.is_empty() =>
        {
            workdir()
        }
        None => {
            let covered = mounts.iter().any(|m| {
                matches!(m.source, MountSource::Bind { .. }) && host.cwd.starts_with(&m.dst)
            }) && !is_system_dir(&host.cwd);
            let in_image = || (image.exists)(&host.cwd.to_string_lossy());
            if covered || ((is_system_dir(&host.cwd) || skips.cwd) && in_image()) {
                host.cwd.clone()
            } else if skips.cwd {
                workdir()
            } else if is_system_dir(&host.cwd) {
                PathBuf::from("/")
            } else {
                mounts.push(Mount::bind(&host.cwd, &host.cwd, false));
                host.cwd.clone()
            }
        }
    })
}

/// The variables gpurun sets whatever the host and image say.
pub(super) fn forced_env(
    req: &Request,
    action: &Action,
    host: &HostView,
    image: &ImageView,
    extras: &Extras,
    home: &Path,
) -> Vec<(String, String)> {
    let mut forced = vec![
        ("HOME".to_string(), home.display().to_string()),
        (
            "USER".to_string(),
            if req.fakeroot {
                "root".into()
            } else {
                host.user.clone()
            },
        ),
        (
            "GPURUN_CONTAINER".to_string(),
            match &image.root {
                RootSource::Squashfs(p) | RootSource::Dir(p) => p.display().to_string(),
            },
        ),
    ];
    forced.extend(extras.env.iter().cloned());
    if matches!(action, Action::Shell(..)) {
        forced.push(("PS1".into(), "gpurun> ".into()));
    }
    forced
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn what_runs() {
        let meta = ImageMeta {
            entrypoint: vec!["/entry".into()],
            cmd: vec!["default".into()],
            ..Default::default()
        };
        let hold = |entrypoint| Action::Hold {
            entrypoint,
            image_workdir: false,
        };
        let argv = |action: Action, meta: ImageMeta| {
            run_plan(
                &HOMEDIR,
                &Request::default(),
                action,
                meta,
                &Extras::default(),
            )
            .map(|p| p.argv)
        };
        let cases: Vec<(Action, ImageMeta, Vec<&str>)> = vec![
            (Action::Run(vec![]), meta.clone(), vec!["/entry", "default"]),
            (
                Action::Run(vec!["x".into()]),
                meta.clone(),
                vec!["/entry", "x"],
            ),
            (
                Action::Run(vec![]),
                ImageMeta {
                    cmd: vec!["python3".into()],
                    ..Default::default()
                },
                vec!["python3"],
            ),
            (Action::Run(vec![]), ImageMeta::default(), vec!["/bin/sh"]),
            (
                Action::Shell(None, vec![]),
                ImageMeta::default(),
                vec!["/bin/bash"],
            ),
            (
                Action::Shell(Some("/bin/zsh".into()), vec![]),
                ImageMeta::default(),
                vec!["/bin/zsh"],
            ),
            (
                Action::Shell(None, vec!["-c".into(), "echo hi".into()]),
                ImageMeta::default(),
                vec!["/bin/bash", "-c", "echo hi"],
            ),
            (
                Action::Exec(vec!["ls".into(), "-l".into()]),
                meta.clone(),
                vec!["ls", "-l"],
            ),
            (hold(false), meta.clone(), vec![]),
            (
                hold(true),
                meta,
                vec!["/entry", "sh", "-c", "kill -STOP $$"],
            ),
            (hold(true), ImageMeta::default(), vec![]),
        ];
        for (action, meta, want) in cases {
            assert_eq!(argv(action.clone(), meta).unwrap(), want, "{action:?}");
        }
        let p = run_plan(
            &HOMEDIR,
            &Request::default(),
            Action::Shell(None, vec![]),
            ImageMeta::default(),
            &Extras::default(),
        )
        .unwrap();
        assert_eq!(env(&p, "PS1"), Some("gpurun> "));
    }

    #[test]
    fn a_directory_that_is_not_a_root() {
        let exists_in = |have: &'static [&'static str]| move |p: &str| have.contains(&p);
        let dir = |exists: &'static dyn Fn(&str) -> bool| ImageView {
            root: RootSource::Dir("/data/pkg".into()),
            meta: ImageMeta::default(),
            passwd: None,
            group: None,
            exists,
        };
        let host = alice("/home/alice", vec![], vec![]);
        let exec = |cmd: &str| Action::Exec(vec![cmd.into()]);
        let bare: &'static dyn Fn(&str) -> bool = Box::leak(Box::new(exists_in(&[])));
        let usr: &'static dyn Fn(&str) -> bool = Box::leak(Box::new(exists_in(&["/usr"])));
        let app: &'static dyn Fn(&str) -> bool = Box::leak(Box::new(exists_in(&["/app"])));
        // (what the directory has, what runs, a root?)
        type Exists = &'static dyn Fn(&str) -> bool;
        let cases: Vec<(Exists, Action, bool)> = vec![
            (bare, exec("ls"), false),
            (bare, Action::Run(vec![]), false),
            (bare, Action::Shell(None, vec![]), false),
            (usr, exec("ls"), true),
            // a static program in a bare directory, or one the binds bring
            (app, exec("/app"), true),
            (bare, exec("/home/alice/tool"), true),
        ];
        for (exists, action, root) in cases {
            let r = plan(
                &Request::default(),
                &action,
                &host,
                &dir(exists),
                &Extras::default(),
            );
            match r {
                Err(PlanError::NotARoot(d)) => {
                    assert!(!root, "{action:?}");
                    assert_eq!(d, Path::new("/data/pkg"));
                }
                Ok(_) => assert!(root, "{action:?}"),
                Err(e) => panic!("{action:?}: {e}"),
            }
        }
        let e = PlanError::NotARoot("/data/pkg".into()).to_string();
        assert!(
            e.contains("not a root filesystem (it has no /bin, /usr"),
            "{e}"
        );
    }

    #[test]
    fn cwd_rules() {
        // (cwd, request, expected cwd, cwd bound?)
        let contain = Request {
            contain: true,
            ..Default::default()
        };
        let pwd = Request {
            pwd: Some("/opt".into()),
            ..Default::default()
        };
        let cases: Vec<(&'static str, Request, &str, bool)> = vec![
            ("/data/proj", Request::default(), "/data/proj", true),
            ("/tmp/x", Request::default(), "/tmp/x", false),
            ("/usr/lib", Request::default(), "/", false),
            ("/opt", Request::default(), "/opt", false),
            ("/", Request::default(), "/", false),
            ("/data/proj", contain.clone(), "/", false),
            ("/data/proj", pwd, "/opt", false),
        ];
        for (cwd, req, want, bound) in cases {
            let f = Fixture { cwd, dev: vec![] };
            let p = run_plan(
                &f,
                &req,
                Action::Exec(vec!["true".into()]),
                ImageMeta::default(),
                &Extras::default(),
            )
            .unwrap();
            assert_eq!(p.cwd, Path::new(want), "cwd {cwd}");
            assert_eq!(
                p.mounts.iter().any(|m| m.dst == Path::new(cwd)
                    && cwd != "/tmp/x"
                    && matches!(m.source, MountSource::Bind { .. })
                    && m.dst != Path::new("/")),
                bound,
                "cwd {cwd} bound"
            );
        }
        let meta = ImageMeta {
            working_dir: "/workspace".into(),
            ..Default::default()
        };
        let p = run_plan(
            &HOMEDIR,
            &contain,
            Action::Exec(vec!["true".into()]),
            meta,
            &Extras::default(),
        )
        .unwrap();
        assert_eq!(p.cwd, Path::new("/workspace"));
        // the Slurm plugin's holder: the image's WorkingDir where it has one, else the cwd
        for (working_dir, want) in [("/workspace", "/workspace"), ("", "/data/proj")] {
            let meta = ImageMeta {
                working_dir: working_dir.into(),
                ..Default::default()
            };
            let f = Fixture {
                cwd: "/data/proj",
                dev: vec![],
            };
            let hold = Action::Hold {
                entrypoint: false,
                image_workdir: true,
            };
            let p = run_plan(&f, &Request::default(), hold, meta, &Extras::default()).unwrap();
            assert_eq!(p.cwd, Path::new(want), "WorkingDir {working_dir:?}");
        }
        let rel = Request {
            pwd: Some("rel".into()),
            ..Default::default()
        };
        assert!(matches!(exec_plan(&rel), Err(PlanError::RelativePwd(_))));
    }
}

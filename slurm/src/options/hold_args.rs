//! The options as a `gpurun hold` command line.

use std::path::{Path, PathBuf};

use mount_grammar::handover::{Home, Tmpfs};
use mount_grammar::pyxis::Mount;
use mount_grammar::Bind;

use super::container_opts::ContainerOpts;
use super::error::OptionError;
use super::values::{Image, Unshare};

fn absolute(cwd: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// A parsed bind, home or tmpfs as JSON, which carries any path, ':' and ',' too, where the
/// text of --bind, --home and --tmpfs would split it; only a path that is no UTF-8 fails.
fn json(
    text: serde_json::Result<String>,
    what: &'static str,
    p: &Path,
) -> Result<String, OptionError> {
    text.map_err(|_| OptionError::NotUtf8 {
        what,
        path: p.to_path_buf(),
    })
}

/// Where and how the holder starts, besides the options.
pub struct HoldCtx<'a> {
    /// The job's working directory: relative paths are taken from it.
    pub cwd: &'a Path,
    /// The holder's state file.
    pub state: &'a Path,
    /// Whether the image's entrypoint runs (the option, else plugstack.conf's
    /// execute_entrypoint).
    pub entrypoint: bool,
    /// The node's host name, the container's in a UTS namespace of its own.
    pub hostname: &'a str,
    /// The job's id: a named container is the job's.
    pub job: u32,
    /// The job's `$HOME` where it is a directory: bound as the container's home, at `/root`
    /// with remap-root (enroot's home hook binds `$HOME`, not the user database's home).
    pub home: Option<&'a Path>,
    /// The user's directory of named containers on this node (named.rs `prepare`).
    pub containers: &'a Path,
}

/// The arguments after the gpurun binary: `hold [launch options] IMAGE --state FILE`.
pub fn holder_args(o: &ContainerOpts, at: &HoldCtx) -> Result<Vec<String>, OptionError> {
    let image = match o.image.as_ref() {
        Some(Image::File(p)) => absolute(at.cwd, p).display().to_string(),
        Some(Image::Registry(r) | Image::Podman(r)) => r.clone(),
        None if o.name.is_some() => String::new(),
        None => return Err(OptionError::NoImage),
    };
    let mut a = vec!["hold".to_string()];
    for m in &o.mounts {
        let (flag, value) = match m {
            // as parsed, SRC from the job's directory: JSON carries any path, ':' and ',' too,
            // where --bind's text would split it
            Mount::Bind(b) => {
                let src = absolute(at.cwd, &b.src);
                let text = serde_json::to_string(&Bind { src, ..b.clone() });
                let src = absolute(at.cwd, &b.src);
                ("--bind-json", json(text, "--container-mounts", &src)?)
            }
            Mount::Tmpfs { dst, opts } => {
                let (d, opts) = (dst.clone(), opts.clone());
                let text = serde_json::to_string(&Tmpfs { dst: d, opts });
                ("--tmpfs-json", json(text, "--container-mounts", dst)?)
            }
            Mount::Umount(dst) => ("--no-mount", dst.display().to_string()),
        };
        a.extend([flag.to_string(), value]);
    }
    match &o.workdir {
        Some(w) => a.extend(["--pwd".to_string(), w.display().to_string()]),
        None => a.push("--image-workdir".into()),
    }
    for ns in &o.unshare {
        match ns {
            Unshare::Uts => a.extend(["--hostname".to_string(), at.hostname.to_string()]),
            Unshare::Net => a.push("--net".into()),
            Unshare::Ipc => a.push("--ipc".into()),
        }
    }
    // gpurun's defaults are pyxis's usual ones: read-only root, own uid, home bound
    let flags = [
        // a named container's root is writable: its changes are what it keeps
        (
            o.writable == Some(true) && o.name.is_none(),
            "--writable-tmpfs",
        ),
        // neither: the site's default (gpurun's writable_root, pyxis's ENROOT_ROOTFS_WRITABLE)
        (o.writable == Some(false) && o.name.is_none(), "--read-only"),
        (o.remap_root == Some(true), "--fakeroot"),
        (o.mount_home == Some(false), "--no-home"),
        (at.entrypoint, "--entrypoint"),
    ];
    a.extend(
        flags
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, f)| f.to_string()),
    );
    if let (Some(h), false) = (at.home, o.mount_home == Some(false)) {
        let dst = match o.remap_root == Some(true) {
            true => Path::new("/root"),
            false => h,
        };
        let (src, dst) = (h.to_path_buf(), dst.to_path_buf());
        let text = serde_json::to_string(&Home { src, dst });
        a.extend(["--home-json".into(), json(text, "$HOME", h)?]);
    }
    if let Some(s) = &o.save {
        a.push("--save".into());
        a.push(absolute(at.cwd, s).display().to_string());
    }
    if let Some(n) = &o.name {
        a.extend(["--name".to_string(), format!("{}.{}", at.job, n.name)]);
        a.extend(["--containers".into(), at.containers.display().to_string()]);
        if n.create {
            a.push("--name-create".into());
        }
    }
    if !image.is_empty() {
        a.push(image);
    }
    a.push("--state".into());
    a.push(at.state.display().to_string());
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::super::table::*;
    use super::*;
    fn at<'a>(cwd: &'a str, state: &'a str, entrypoint: bool) -> HoldCtx<'a> {
        HoldCtx {
            cwd: Path::new(cwd),
            state: Path::new(state),
            entrypoint,
            hostname: "node1",
            job: 42,
            home: None,
            containers: Path::new("/c/1000"),
        }
    }

    #[test]
    fn named_holder_command_line() {
        type Case<'a> = (&'a [(usize, Option<&'a str>)], &'a str);
        let cases: [Case; 2] = [
            // no image: the holder runs the one the container was made from
            (
                &[(NAME, Some("c1:create"))],
                "hold --image-workdir --name 42.c1 --containers /c/1000 --name-create --state /s",
            ),
            // writable anyway: no tmpfs over the kept changes
            (
                &[
                    (NAME, Some("c1")),
                    (IMAGE, Some("/i.sqsh")),
                    (WRITABLE, None),
                ],
                "hold --image-workdir --name 42.c1 --containers /c/1000 /i.sqsh --state /s",
            ),
        ];
        for (set, want) in cases {
            let mut o = ContainerOpts::default();
            for (i, arg) in set {
                o.set(*i, *arg).unwrap();
            }
            let args = holder_args(&o, &at("/w", "/s", false)).unwrap();
            assert_eq!(args.join(" "), want);
        }
    }

    #[test]
    fn holder_command_line() {
        let mut o = ContainerOpts::default();
        assert!(holder_args(&o, &at("/w", "/s", false)).is_err());
        o.set(IMAGE, Some("./img.sqsh")).unwrap();
        assert_eq!(
            holder_args(&o, &at("/home/u/job", "/tmp/d/state.json", false)).unwrap(),
            [
                "hold",
                "--image-workdir",
                "/home/u/job/./img.sqsh",
                "--state",
                "/tmp/d/state.json"
            ]
        );
        // podman://: as given, for the node's gpurun to convert from the user's store there.
        o.set(IMAGE, Some("podman://localhost/app:v1")).unwrap();
        assert_eq!(
            holder_args(&o, &at("/w", "/s", false)).unwrap().join(" "),
            "hold --image-workdir podman://localhost/app:v1 --state /s"
        );
        o.set(IMAGE, Some("ubuntu")).unwrap();
        o.set(
            MOUNTS,
            Some("data:/data:ro+nodev,/scratch,umount:/etc/hosts,tmpfs:/t:size=1G+mode=700"),
        )
        .unwrap();
        o.set(WORKDIR, Some("/data")).unwrap();
        o.set(UNSHARE, Some("uts,net,ipc")).unwrap();
        for f in [WRITABLE, REMAP_ROOT, NO_HOME] {
            o.set(f, None).unwrap();
        }
        o.set(SAVE, Some("out/saved.sqsh")).unwrap();
        assert_eq!(
            holder_args(&o, &at("/w", "/s", true)).unwrap(),
            [
                "hold",
                "--bind-json",
                r#"{"src":"/w/data","dst":"/data","readonly":true,"flags":{"nodev":true}}"#,
                "--bind-json",
                r#"{"src":"/scratch","dst":"/scratch","readonly":false,"flags":{}}"#,
                "--no-mount",
                "/etc/hosts",
                "--tmpfs-json",
                r#"{"dst":"/t","opts":["size=1G","mode=700"]}"#,
                "--pwd",
                "/data",
                "--hostname",
                "node1",
                "--net",
                "--ipc",
                "--writable-tmpfs",
                "--fakeroot",
                "--no-home",
                "--entrypoint",
                "--save",
                "/w/out/saved.sqsh",
                "docker://ubuntu",
                "--state",
                "/s"
            ]
        );
        // the defaults spelled out change nothing: own uid, home bound; the root is the
        // site's default (writable_root) unless --container-readonly says read-only
        let mut d = ContainerOpts::default();
        d.set(IMAGE, Some("/i.sqsh")).unwrap();
        for f in [NO_REMAP_ROOT, MOUNT_HOME] {
            d.set(f, None).unwrap();
        }
        let plain = ["hold", "--image-workdir", "/i.sqsh", "--state", "/s"];
        assert_eq!(holder_args(&d, &at("/w", "/s", false)).unwrap(), plain);
        d.set(READONLY, None).unwrap();
        assert_eq!(
            holder_args(&d, &at("/w", "/s", false)).unwrap(),
            [
                "hold",
                "--image-workdir",
                "--read-only",
                "/i.sqsh",
                "--state",
                "/s"
            ]
        );
    }

    /// A job's directory with ':' or ',' in it, which `--bind`'s text would split into another
    /// source and destination, arrives intact: the bind is handed over as parsed.
    #[test]
    fn a_path_with_colon_or_comma_arrives_intact() {
        for (cwd, mounts) in [
            ("/w/a:b", "data:/d"),
            ("/w/a,b", "data:/d:ro"),
            ("/w/x:/etc:ro", "data:/d"),
            ("/w", "/abs:/d:ro"),
        ] {
            let o = ContainerOpts {
                image: Some(Image::File("/img.sqsh".into())),
                mounts: mount_grammar::pyxis::parse_mounts(mounts).unwrap(),
                ..Default::default()
            };
            let a = holder_args(&o, &at(cwd, "/s", false)).unwrap();
            assert!(!a.contains(&"--bind".to_string()), "{a:?}");
            let i = a.iter().position(|x| x == "--bind-json").unwrap();
            let back: Bind = serde_json::from_str(&a[i + 1]).unwrap();
            let Some(Mount::Bind(want)) = o.mounts.first() else {
                panic!()
            };
            let src = absolute(Path::new(cwd), &want.src);
            assert_eq!(
                back.checked(),
                Ok(Bind {
                    src,
                    ..want.clone()
                }),
                "{cwd} {mounts}"
            );
        }
    }

    /// The job's `$HOME` is the container's home, at `/root` with remap-root (enroot's home
    /// hook), and nowhere with --no-container-mount-home.
    #[test]
    fn home_from_the_job() {
        let home = Path::new("/tmp");
        for (flags, want) in [
            (&[][..], Some(("/tmp", "/tmp"))),
            (&[MOUNT_HOME][..], Some(("/tmp", "/tmp"))),
            (&[REMAP_ROOT, MOUNT_HOME][..], Some(("/tmp", "/root"))),
            (&[REMAP_ROOT, NO_HOME][..], None),
        ] {
            let mut o = ContainerOpts::default();
            o.set(IMAGE, Some("/i.sqsh")).unwrap();
            for f in flags {
                o.set(*f, None).unwrap();
            }
            let got = handed_home(&o, home);
            let want = want.map(|(src, dst)| Home {
                src: src.into(),
                dst: dst.into(),
            });
            assert_eq!(got, want, "{flags:?}");
        }
    }

    /// The home `holder_args` hands over for `$HOME` = `home`, read back as gpurun reads it.
    fn handed_home(o: &ContainerOpts, home: &Path) -> Option<Home> {
        let at = HoldCtx {
            home: Some(home),
            ..at("/w", "/s", false)
        };
        let args = holder_args(o, &at).unwrap();
        assert!(!args.contains(&"--home".to_string()), "{args:?}");
        let i = args.iter().position(|a| a == "--home-json")?;
        let back: Home = serde_json::from_str(&args[i + 1]).unwrap();
        Some(back.checked().unwrap())
    }

    /// A `$HOME` the job's user chose, with ':' and ',' (which `--home SRC:DST` split into
    /// another source and destination) or crafted to close the JSON string and add a `dst` of
    /// its own, arrives as one path, bound at itself.
    #[test]
    fn a_crafted_home_arrives_as_one_path() {
        let mut o = ContainerOpts::default();
        o.set(IMAGE, Some("/i.sqsh")).unwrap();
        for home in [
            "/h/a:b,c",
            "/h/u:/etc",
            "/h/u:/etc:/root",
            r#"/h/u","dst":"/etc"#,
            "/h/u\\\",\"dst\":\"/etc",
            "/h/u\n--home\n/etc",
        ] {
            let want = Home {
                src: home.into(),
                dst: home.into(),
            };
            assert_eq!(handed_home(&o, Path::new(home)), Some(want), "{home}");
        }
    }

    /// A tmpfs's destination and options arrive as parsed, in JSON; one `gpurun hold` refuses
    /// (a relative destination, an option it does not know) never passes its check.
    #[test]
    fn a_tmpfs_arrives_as_parsed() {
        let tmpfs = |o: &ContainerOpts| {
            let a = holder_args(o, &at("/w", "/s", false)).unwrap();
            assert!(!a.contains(&"--tmpfs".to_string()), "{a:?}");
            let i = a.iter().position(|x| x == "--tmpfs-json").unwrap();
            serde_json::from_str::<Tmpfs>(&a[i + 1]).unwrap().checked()
        };
        let mut o = ContainerOpts::default();
        o.set(IMAGE, Some("/i.sqsh")).unwrap();
        o.set(MOUNTS, Some(r#"tmpfs:/t"x\y:size=1G+mode=700"#))
            .unwrap();
        let want = Tmpfs {
            dst: r#"/t"x\y"#.into(),
            opts: vec!["size=1G".into(), "mode=700".into()],
        };
        assert_eq!(tmpfs(&o), Ok(want));
        for (dst, opts) in [("t", vec![]), ("/t", vec!["uid=0".to_string()])] {
            o.mounts = vec![Mount::Tmpfs {
                dst: dst.into(),
                opts,
            }];
            assert!(tmpfs(&o).is_err(), "{dst}");
        }
    }
}

//! Who the user is inside: the ids, the home directory (`--home`, `--contain`, `--fakeroot`),
//! and /etc/passwd and /etc/group naming them.

use std::path::{Path, PathBuf};

use super::binds::Skips;
use super::types::{Changes, HostPath, HostView, ImageView, PlanError, Request};
use crate::mount::{Mount, MountSource};
use crate::runtime::mount_spec::normalize;

/// Parse `--home SRC[:DST]` (DST: SRC): the source on the host, the home directory inside.
pub(super) fn parse_home(spec: &str, cwd: &Path) -> Result<(PathBuf, PathBuf), PlanError> {
    let err = |why| PlanError::Home(spec.to_string(), why);
    let (src, dst) = match spec.split(':').collect::<Vec<_>>().as_slice() {
        [s] => (*s, None),
        [s, d] => (*s, Some(*d)),
        _ => return Err(err("too many ':'; use SRC[:DST]")),
    };
    if src.is_empty() || dst == Some("") {
        return Err(err("empty path; use SRC[:DST]"));
    }
    let src = normalize(&cwd.join(src));
    let dst = match dst {
        Some(d) if !d.starts_with('/') => {
            return Err(err("DST must be an absolute path inside the container"))
        }
        Some(d) => normalize(Path::new(d)),
        None => src.clone(),
    };
    Ok((src, dst))
}

/// Whether a passwd or group text has an entry of `id`.
fn has_id(text: &str, id: u32) -> bool {
    text.lines()
        .any(|l| l.split(':').nth(2).and_then(|u| u.parse::<u32>().ok()) == Some(id))
}

fn passwd_with(image: Option<&str>, line: &str, id: u32) -> String {
    let mut text = image.unwrap_or("").to_string();
    if !has_id(&text, id) {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// The ids inside, the home directory (bound; an empty tmpfs when contained) and /etc/passwd
/// and /etc/group naming the user.
pub(super) fn user_and_home(
    req: &Request,
    host: &HostView,
    image: &ImageView,
    skips: &mut Skips,
    changes: &Changes,
    mounts: &mut Vec<Mount>,
) -> Result<(u32, u32, PathBuf), PlanError> {
    let (uid, gid) = match req.fakeroot {
        true => (0, 0),
        false => (host.uid, host.gid),
    };
    // --home is bound even with --contain, as in Apptainer; --no-home wins over it.
    let (home_src, home, custom) = match (&req.parsed_home, &req.home) {
        (Some(h), _) => (h.src.clone(), h.dst.clone(), true),
        (None, Some(spec)) => {
            let (src, dst) = parse_home(spec, &host.cwd)?;
            (src, dst, true)
        }
        (None, None) if req.fakeroot => (host.home.clone(), PathBuf::from("/root"), false),
        (None, None) => (host.home.clone(), host.home.clone(), false),
    };
    // the home's destination names it, as `home` does (pyxis's `umount:/root`)
    if skips.dsts.contains(&home) {
        skips.dsts.retain(|d| *d != home);
        skips.home = true;
    }
    if !req.no_home && !skips.home {
        if custom || !req.contain {
            if custom && (host.exists)(&home_src) != HostPath::Exists {
                return Err(PlanError::HomeMissing(home_src));
            }
            mounts.push(Mount::bind(&home_src, &home, false));
        } else {
            // contained: an empty home of the container's own, as Apptainer's, so $HOME exists
            mounts.push(Mount::new(&home, MountSource::tmpfs(0o700)));
        }
    }
    // a passwd field cannot hold ':' or a line break (a home handed over parsed may): such a
    // home is / there, lest it add fields or lines; HOME still names it
    let home_text = home.display().to_string();
    let pw_home = match home_text.contains([':', '\n']) {
        true => "/",
        false => home_text.as_str(),
    };
    let passwd_line = format!(
        "{}:x:{}:{}:{}:{}:{}",
        host.user,
        uid,
        gid,
        host.user,
        pw_home,
        host.shell
            .as_deref()
            .filter(|s| (image.exists)(s))
            .unwrap_or("/bin/sh")
    );
    let (passwd_line, group_line) = match req.fakeroot {
        true => ("root:x:0:0:root:/root:/bin/sh".into(), "root:x:0:".into()),
        false => (passwd_line, format!("{}:x:{gid}:", host.group)),
    };
    let passwd = id_file(
        "/etc/passwd",
        image.passwd.as_deref(),
        &passwd_line,
        uid,
        changes,
    );
    let group = id_file(
        "/etc/group",
        image.group.as_deref(),
        &group_line,
        gid,
        changes,
    );
    mounts.extend(passwd.into_iter().chain(group));
    Ok((uid, gid, home))
}

/// /etc/passwd or /etc/group with the user's entry (`line`, of `id`). In a writable root whose
/// file has the entry, that file itself: a package's postinst may change it (groupadd and
/// useradd replace it by rename, which a mount refuses). Else the image's text with the entry
/// added: in a root whose changes vanish (tmpfs), written into it; else bound read-only, as the
/// changes of --writable and --overlay DIR are the user's, which gpurun never rewrites.
fn id_file(
    dst: &str,
    image: Option<&str>,
    line: &str,
    id: u32,
    changes: &Changes,
) -> Option<Mount> {
    if changes.writable() && image.is_some_and(|t| has_id(t, id)) {
        return None;
    }
    let contents = passwd_with(image, line, id);
    Some(match changes {
        Changes::Tmpfs => Mount::new(dst, MountSource::RootFile { contents }),
        _ => Mount::new(dst, MountSource::File { contents }).ro(),
    })
}

/// apt's sandbox user where --fakeroot runs an image that has apt: root, as enroot sets it.
/// apt would drop to `_apt`, and the drop, faked (fake-ids), fails apt's check of its ids.
const APT_SANDBOX: (&str, &str) = (
    "/etc/apt/apt.conf.d/99gpurun-fakeroot",
    "APT::Sandbox::User \"root\";\n",
);

pub(super) fn apt_sandbox(req: &Request, image: &ImageView, mounts: &mut Vec<Mount>) {
    if req.fakeroot && (image.exists)("/etc/apt/apt.conf.d") {
        let contents = APT_SANDBOX.1.to_string();
        mounts.push(Mount::new(APT_SANDBOX.0, MountSource::File { contents }).ro());
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;

    #[test]
    fn contain_no_home_and_fakeroot() {
        let contain = Request {
            contain: true,
            ..Default::default()
        };
        let p = exec_plan(&contain).unwrap();
        // an empty home of its own, not the host's
        assert_eq!(
            find(&p, "/home/alice").unwrap().source,
            MountSource::tmpfs(0o700)
        );
        assert_eq!(find(&p, "/tmp").unwrap().source, MountSource::tmpfs(0o1777));
        let no_home = Request {
            no_home: true,
            ..Default::default()
        };
        let p = run_plan(
            &Fixture {
                cwd: "/data",
                dev: vec![],
            },
            &no_home,
            Action::Exec(vec![]),
            ImageMeta::default(),
            &Extras::default(),
        )
        .unwrap();
        assert!(find(&p, "/home/alice").is_none());
        assert!(matches!(
            find(&p, "/tmp").unwrap().source,
            MountSource::Bind { .. }
        ));
        let fr = Request {
            fakeroot: true,
            ..Default::default()
        };
        let p = exec_plan(&fr).unwrap();
        assert_eq!((p.uid.inside, p.uid.outside, p.gid.inside), (0, 1000, 0));
        assert_eq!(
            find(&p, "/root").unwrap().source,
            MountSource::Bind {
                src: "/home/alice".into()
            }
        );
        assert_eq!(env(&p, "HOME"), Some("/root"));
        assert_eq!(env(&p, "USER"), Some("root"));
    }

    // Long as a table is: one case of --home (and its interplay with --contain, --no-home) each.
    #[test]
    fn home_option() {
        let home = |spec: &str, extra: Request| Request {
            home: Some(spec.into()),
            ..extra
        };
        // (request, where the home is bound from, HOME inside)
        let cases: Vec<(Request, Option<&str>, &str)> = vec![
            (
                home("/data/me", Request::default()),
                Some("/data/me"),
                "/data/me",
            ),
            (
                home("/data/me:/home/me", Request::default()),
                Some("/data/me"),
                "/home/me",
            ),
            (
                home("rel:/h", Request::default()),
                Some("/data/proj/rel"),
                "/h",
            ),
            // --home is bound with --contain too, and wins over --fakeroot's /root
            (
                home(
                    "/data/me",
                    Request {
                        contain: true,
                        ..Default::default()
                    },
                ),
                Some("/data/me"),
                "/data/me",
            ),
            (
                home(
                    "/data/me:/h",
                    Request {
                        fakeroot: true,
                        ..Default::default()
                    },
                ),
                Some("/data/me"),
                "/h",
            ),
            // --no-home and --no-mount home leave it out; HOME is still DST
            (
                home(
                    "/data/me:/h",
                    Request {
                        no_home: true,
                        ..Default::default()
                    },
                ),
                None,
                "/h",
            ),
            (
                home(
                    "/data/me:/h",
                    Request {
                        no_mount: vec!["home".into()],
                        ..Default::default()
                    },
                ),
                None,
                "/h",
            ),
        ];
        let data = Fixture {
            cwd: "/data/proj",
            dev: vec![],
        };
        for (req, src, want) in cases {
            let p = run_plan(
                &data,
                &req,
                Action::Exec(vec![]),
                ImageMeta::default(),
                &Extras::default(),
            )
            .unwrap();
            let bound = p.mounts.iter().find(|m| m.dst == Path::new(want));
            match (src, bound) {
                (Some(s), Some(m)) => assert_eq!(m.source, MountSource::Bind { src: s.into() }),
                (None, None) => {}
                (s, b) => panic!("{req:?}: {s:?} {b:?}"),
            }
            assert!(find(&p, "/home/alice").is_none(), "{req:?}");
            assert_eq!(env(&p, "HOME"), Some(want), "{req:?}");
            let MountSource::File { contents } = &find(&p, "/etc/passwd").unwrap().source else {
                panic!()
            };
            assert!(
                req.fakeroot || contents.contains(&format!(":{want}:")),
                "{contents}"
            );
        }
        // the plugin's home, parsed: ':' and ',' kept, a line break kept out of /etc/passwd
        let crafted = "/h/a:b,c\nroot2:x:0:0::/:/bin/sh";
        let req = Request {
            parsed_home: Some(mount_grammar::handover::Home {
                src: "/data/a:b,c".into(),
                dst: crafted.into(),
            }),
            ..Default::default()
        };
        let p = exec_plan(&req).unwrap();
        let m = find(&p, crafted).unwrap();
        assert_eq!(
            m.source,
            MountSource::Bind {
                src: "/data/a:b,c".into()
            }
        );
        assert_eq!(env(&p, "HOME"), Some(crafted));
        let MountSource::File { contents } = &find(&p, "/etc/passwd").unwrap().source else {
            panic!()
        };
        assert!(
            !contents.contains("root2") && contents.contains(":/:"),
            "{contents}"
        );
        for bad in ["/a:rel", "/a:/b:/c", ":/b", "/a:"] {
            let req = home(bad, Request::default());
            assert!(matches!(exec_plan(&req), Err(PlanError::Home(..))), "{bad}");
        }
        let req = home("/missing/home", Request::default());
        assert_eq!(
            exec_plan(&req).unwrap_err(),
            PlanError::HomeMissing("/missing/home".into())
        );
    }

    /// /etc/passwd and /etc/group by where the root's changes go: in a writable root the
    /// image's own where they have the user's entry (a postinst may rewrite them), else the
    /// entry added, written into a tmpfs root, or bound read-only (a read-only root, and the
    /// user's own --writable directory and --overlay DIR, which gpurun never rewrites).
    #[test]
    fn passwd_and_group_by_where_changes_go() {
        let exists = |p: &str| ["/bin/sh", "/etc"].contains(&p);
        let (with_root, without_root) =
            ("root:x:0:0:root:/root:/bin/sh\n", "bin:x:2:2::/:/bin/sh\n");
        let req = |changes: &str, fakeroot| Request {
            writable_tmpfs: changes == "tmpfs",
            writable: changes == "in-place",
            overlay: (changes.starts_with("/o")).then(|| changes.to_string()),
            fakeroot,
            ..Request::default()
        };
        // (changes, fakeroot, image passwd) → (/etc/passwd, /etc/group): "own" (not mounted),
        // "written" (RootFile), "bound" (read-only File)
        for (changes, fakeroot, passwd, want) in [
            ("none", true, with_root, ("bound", "bound")),
            ("none", false, with_root, ("bound", "bound")),
            ("tmpfs", true, with_root, ("own", "own")),
            ("tmpfs", true, without_root, ("written", "own")),
            ("tmpfs", false, with_root, ("written", "written")),
            ("/o", true, with_root, ("own", "own")),
            ("/o", true, without_root, ("bound", "own")),
            ("/o", false, with_root, ("bound", "bound")),
            ("/o:ro", true, with_root, ("bound", "bound")),
            ("in-place", true, with_root, ("own", "own")),
            ("in-place", true, without_root, ("bound", "own")),
            ("in-place", false, with_root, ("bound", "bound")),
        ] {
            let image = ImageView {
                root: RootSource::Dir("/img".into()),
                meta: ImageMeta::default(),
                passwd: Some(passwd.into()),
                group: Some("root:x:0:\n".into()),
                exists: &exists,
            };
            let host = alice("/home/alice", vec![], vec![]);
            let r = req(changes, fakeroot);
            let p = plan(
                &r,
                &Action::Exec(vec!["id".into()]),
                &host,
                &image,
                &Extras::default(),
            );
            let p = p.unwrap();
            let (line, grp) = match fakeroot {
                true => ("root:x:0:0:", "root:x:0:"),
                false => ("alice:x:1000:100:", "users:x:100:"),
            };
            let how = |dst: &str, entry: &str| match find(&p, dst) {
                None => "own",
                Some(m) => {
                    let (MountSource::File { contents } | MountSource::RootFile { contents }) =
                        &m.source
                    else {
                        panic!("{dst}: {m:?}")
                    };
                    assert!(contents.contains(entry), "{dst}: {contents}");
                    match m.source {
                        MountSource::File { .. } if m.readonly => "bound",
                        MountSource::RootFile { .. } if !m.readonly => "written",
                        _ => panic!("{dst}: {m:?}"),
                    }
                }
            };
            let got = (how("/etc/passwd", line), how("/etc/group", grp));
            assert_eq!(got, want, "{changes} fakeroot={fakeroot} {passwd}");
        }
    }

    /// --fakeroot fakes chown and id changes, and where the image has apt sets its sandbox
    /// user to root.
    #[test]
    fn fakeroot_fakes_ids_and_keeps_apt_as_root() {
        let with_apt = |p: &str| ["/bin/sh", "/etc/apt/apt.conf.d"].contains(&p);
        let without_apt = |p: &str| p == "/bin/sh";
        for (fakeroot, exists, apt) in [
            (true, &with_apt as &dyn Fn(&str) -> bool, true),
            (false, &with_apt, false),
            (true, &without_apt, false),
        ] {
            let image = ImageView {
                exists,
                ..image_of(ImageMeta::default())
            };
            let host = alice("/home/alice", vec![], vec![]);
            let req = Request {
                fakeroot,
                ..Request::default()
            };
            let p = plan(
                &req,
                &Action::Exec(vec!["id".into()]),
                &host,
                &image,
                &Extras::default(),
            );
            let p = p.unwrap();
            assert_eq!(p.fake_ids, fakeroot);
            let conf = find(&p, "/etc/apt/apt.conf.d/99gpurun-fakeroot");
            assert_eq!(conf.is_some(), apt, "fakeroot={fakeroot}");
            if let Some(m) = conf {
                let contents = "APT::Sandbox::User \"root\";\n".to_string();
                assert_eq!(m.source, MountSource::File { contents });
                assert!(m.readonly);
            }
        }
    }
}

//! Where the root's changes go: nowhere (read-only), a tmpfs, a directory, an overlay.

use super::types::{Changes, HostPath, HostView, PlanError, Request, RootSource};

/// Where the root's changes go, from `--writable`, `--writable-tmpfs` and `--overlay`.
pub(super) fn changes(
    req: &Request,
    host: &HostView,
    root: &RootSource,
) -> Result<Changes, PlanError> {
    let given = [req.writable, req.writable_tmpfs, req.overlay.is_some()];
    if given.iter().filter(|g| **g).count() > 1 {
        return Err(PlanError::Changes);
    }
    let overlay_ro = req.overlay.as_deref().is_some_and(|o| o.ends_with(":ro"));
    let writes = req.writable || req.writable_tmpfs || host.save_changes.is_some();
    if req.read_only && (writes || req.overlay.is_some() && !overlay_ro) {
        return Err(PlanError::ReadOnly);
    }
    if let Some(dir) = &host.save_changes {
        if req.writable || req.overlay.is_some() {
            return Err(PlanError::SaveWith);
        }
        let dir = dir.clone();
        return Ok(Changes::Overlay {
            dir,
            readonly: false,
        });
    }
    if req.writable_tmpfs {
        return Ok(Changes::Tmpfs);
    }
    if req.writable {
        return match root {
            RootSource::Dir(_) => Ok(Changes::InPlace),
            RootSource::Squashfs(p) => Err(PlanError::NotWritable(p.clone())),
        };
    }
    let Some(spec) = &req.overlay else {
        return Ok(match req.writable_by_default && !req.read_only {
            true => Changes::Tmpfs,
            false => Changes::None,
        });
    };
    let (dir, readonly) = match spec.rsplit_once(':') {
        Some((d, "ro")) => (d, true),
        Some((d, "rw")) => (d, false),
        Some(_) => return Err(PlanError::Overlay(spec.clone(), "use DIR or DIR:ro")),
        None => (spec.as_str(), false),
    };
    if dir.is_empty() {
        return Err(PlanError::Overlay(
            spec.clone(),
            "give a directory: DIR or DIR:ro",
        ));
    }
    let dir = host.cwd.join(dir);
    if (host.exists)(&dir) != HostPath::Exists {
        return Err(PlanError::OverlayMissing(dir));
    }
    Ok(Changes::Overlay { dir, readonly })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn where_changes_go() {
        let host = alice("/home/alice/work", Vec::new(), Vec::new());
        let sqsh = RootSource::Squashfs("/img.sqsh".into());
        let dir = RootSource::Dir("/sb".into());
        let ov = |dir: &str, readonly| Changes::Overlay {
            dir: dir.into(),
            readonly,
        };
        let req = |writable, tmpfs, overlay: Option<&str>| Request {
            writable,
            writable_tmpfs: tmpfs,
            overlay: overlay.map(String::from),
            ..Request::default()
        };
        // (request, root, what comes of it: Ok changes, or Err with the error's text)
        let cases: Vec<(Request, &RootSource, Result<Changes, &str>)> = vec![
            (req(false, false, None), &sqsh, Ok(Changes::None)),
            (req(false, true, None), &sqsh, Ok(Changes::Tmpfs)),
            (req(true, false, None), &dir, Ok(Changes::InPlace)),
            (
                req(true, false, None),
                &sqsh,
                Err("--writable needs a sandbox directory image; /img.sqsh is read-only"),
            ),
            (req(true, true, None), &dir, Err("give one")),
            (req(false, true, Some("o")), &sqsh, Err("give one")),
            (
                req(false, false, Some("o")),
                &sqsh,
                Ok(ov("/home/alice/work/o", false)),
            ),
            (req(false, false, Some("/o:ro")), &dir, Ok(ov("/o", true))),
            (req(false, false, Some("/o:rw")), &dir, Ok(ov("/o", false))),
            (
                req(false, false, Some("/o:x")),
                &dir,
                Err("use DIR or DIR:ro"),
            ),
            (
                req(false, false, Some(":ro")),
                &dir,
                Err("give a directory"),
            ),
            (
                req(false, false, Some("/missing/o")),
                &dir,
                Err("/missing/o: no such directory"),
            ),
        ];
        // --read-only, and the site's writable_root
        let ro = |r: Request| Request {
            read_only: true,
            ..r
        };
        let by_default = |r: Request| Request {
            writable_by_default: true,
            ..r
        };
        let mut cases = cases;
        cases.extend([
            (
                by_default(req(false, false, None)),
                &sqsh,
                Ok(Changes::Tmpfs),
            ),
            (
                ro(by_default(req(false, false, None))),
                &sqsh,
                Ok(Changes::None),
            ),
            (ro(req(false, false, None)), &sqsh, Ok(Changes::None)),
            (
                by_default(req(true, false, None)),
                &dir,
                Ok(Changes::InPlace),
            ),
            (
                by_default(req(false, false, Some("/o"))),
                &dir,
                Ok(ov("/o", false)),
            ),
            (
                ro(req(false, false, Some("/o:ro"))),
                &dir,
                Ok(ov("/o", true)),
            ),
            (ro(req(false, true, None)), &sqsh, Err("--read-only keeps")),
            (ro(req(true, false, None)), &dir, Err("--read-only keeps")),
            (
                ro(req(false, false, Some("/o"))),
                &dir,
                Err("--read-only keeps"),
            ),
        ]);
        for (r, root, want) in cases {
            let got = changes(&r, &host, root);
            match (&got, want) {
                (Ok(c), Ok(w)) => assert_eq!(*c, w, "{r:?}"),
                (Err(e), Err(w)) => assert!(e.to_string().contains(w), "{r:?}: {e}"),
                _ => panic!("{r:?}: {got:?}"),
            }
        }
        // --save's changes directory, with --read-only
        let saving = HostView {
            save_changes: Some("/cache/save".into()),
            ..alice("/home/alice/work", Vec::new(), Vec::new())
        };
        let e = changes(&ro(req(false, false, None)), &saving, &sqsh).unwrap_err();
        assert!(e.to_string().contains("--read-only keeps"), "{e}");
        assert!(Changes::Tmpfs.writable() && Changes::InPlace.writable());
        assert!(
            !Changes::None.writable() && !ov("/o", true).writable() && ov("/o", false).writable()
        );
    }
}

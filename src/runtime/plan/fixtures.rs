//! The tests' host, image and request: alice in her home, an image with a shell.

// What the tests of each step use besides their own file's items.
pub(super) use std::path::Path;

pub(super) use super::plan;
pub(super) use super::types::*;
pub(super) use crate::image::meta::ImageMeta;
pub(super) use crate::mount::{Mount, MountSource};

pub(super) struct Fixture {
    pub(super) cwd: &'static str,
    pub(super) dev: Vec<DevEntry>,
}

pub(super) fn host_exists(p: &Path) -> HostPath {
    match () {
        _ if p.starts_with("/missing") => HostPath::Missing,
        _ if p.starts_with("/root-only") => HostPath::Denied,
        _ => HostPath::Exists,
    }
}

pub(super) fn image_exists(p: &str) -> bool {
    ["/bin/sh", "/bin/bash", "/opt"].contains(&p)
}

/// `exec` of nothing in particular, with the home-directory fixture and no extras.
pub(super) fn exec_plan(req: &Request) -> Result<Plan, PlanError> {
    run_plan(
        &HOMEDIR,
        req,
        Action::Exec(vec![]),
        ImageMeta::default(),
        &Extras::default(),
    )
}

/// alice, in `cwd` with this environment and /dev.
pub(super) fn alice(
    cwd: &str,
    env: Vec<(String, String)>,
    dev: Vec<DevEntry>,
) -> HostView<'static> {
    HostView {
        uid: 1000,
        gid: 100,
        user: "alice".into(),
        group: "users".into(),
        home: "/home/alice".into(),
        shell: Some("/bin/bash".into()),
        cwd: cwd.into(),
        env,
        dev,
        tty: None,
        env_files: Vec::new(),
        save_changes: None,
        exists: &host_exists,
    }
}

pub(super) fn image_of(meta: ImageMeta) -> ImageView<'static> {
    ImageView {
        root: RootSource::Squashfs("/img.sqsh".into()),
        meta,
        passwd: Some("root:x:0:0:root:/root:/bin/sh\n".into()),
        group: None,
        exists: &image_exists,
    }
}

pub(super) fn run_plan(
    f: &Fixture,
    req: &Request,
    action: Action,
    meta: ImageMeta,
    extras: &Extras,
) -> Result<Plan, PlanError> {
    let host = alice(f.cwd, vec![("FOO".into(), "1".into())], f.dev.clone());
    plan(req, &action, &host, &image_of(meta), extras)
}

/// `exec true` from alice's home with this host environment.
pub(super) fn plan_in_env(env: Vec<(String, String)>, req: &Request, extras: &Extras) -> Plan {
    let host = alice("/home/alice", env, Vec::new());
    let image = image_of(ImageMeta::default());
    plan(
        req,
        &Action::Exec(vec!["true".into()]),
        &host,
        &image,
        extras,
    )
    .unwrap()
}

pub(super) fn dsts(p: &Plan) -> Vec<String> {
    p.mounts
        .iter()
        .map(|m| m.dst.display().to_string())
        .collect()
}

pub(super) fn find<'a>(p: &'a Plan, dst: &str) -> Option<&'a Mount> {
    p.mounts.iter().find(|m| m.dst == Path::new(dst))
}

pub(super) fn env<'a>(p: &'a Plan, k: &str) -> Option<&'a str> {
    p.env
        .iter()
        .find(|(key, _)| key == k)
        .map(|(_, v)| v.as_str())
}

pub(super) const HOMEDIR: Fixture = Fixture {
    cwd: "/home/alice/work",
    dev: Vec::new(),
};

pub(super) fn at_of(p: &Plan, d: &str) -> Option<MountSource> {
    p.mounts
        .iter()
        .find(|m| m.dst == Path::new(d))
        .map(|m| m.source.clone())
}

//! The image server and the extract fallback through `gpurun exec`, as the unprivileged test
//! user: every file of a full test tree, compared with the source using the same busybox tools.

mod common;
mod tree;

use std::path::Path;
use std::process::Command;

use common::*;

/// Lists names, raw modes, mtimes, link counts, contents and link targets below the current
/// directory; the same busybox applets run on the host and in the container. The mode-000 file
/// is left out of the contents: the container user is not root, and the overlay over the image
/// checks modes as any filesystem does.
const MANIFEST: &str = "busybox find . | busybox sort | busybox xargs busybox stat -c '%n %f %Y %h'; \
    busybox find . -type f ! -name none | busybox sort | busybox xargs busybox md5sum; \
    busybox find . -type l | busybox sort | while read l; do echo \"$l -> $(busybox readlink $l)\"; done";

fn same(want: &str, got: &str, what: &str) {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let diff: Vec<_> = w.iter().zip(&g).filter(|(a, b)| a != b).take(5).collect();
    assert!(
        w.len() == g.len() && diff.is_empty(),
        "tree differs {what} (want, got): {diff:?}"
    );
}

fn image(s: &Scratch) -> (std::path::PathBuf, String) {
    let img = busybox_image(s, "tree", |root| tree::build(&root.join("data")));
    let o = run_ok(
        Command::new("sh")
            .args(["-c", MANIFEST])
            .current_dir(s.join("tree.root/data")),
    );
    (img, stdout(&o))
}

#[test]
fn whole_tree_through_gpurun_exec() {
    let s = Scratch::new();
    let (img, want) = image(&s);
    let script = format!("cd /data && {{ {MANIFEST}; }}");
    let o = run_ok(&mut gpurun(&[
        "exec",
        img.to_str().unwrap(),
        "sh",
        "-c",
        &script,
    ]));
    let got = stdout(&o);
    assert!(want.lines().count() > tree::MANY * 2);
    if got != want {
        let diff: Vec<_> = want
            .lines()
            .zip(got.lines())
            .filter(|(a, b)| a != b)
            .take(5)
            .collect();
        panic!("tree differs through FUSE (first differences, want/got): {diff:?}");
    }
    // hard links: one inode; the root of the image is inode 1
    let o = run_ok(&mut gpurun(&[
        "exec",
        img.to_str().unwrap(),
        "busybox",
        "stat",
        "-c",
        "%i %h",
        "/data/hl/a",
        "/data/hl/b",
        "/data/hl/sub/c",
    ]));
    let out = stdout(&o);
    let l: Vec<&str> = out.lines().collect();
    assert!(
        l.len() == 3 && l[0] == l[1] && l[1] == l[2] && l[0].ends_with(" 3"),
        "{l:?}"
    );
}

#[test]
fn extract_fallback_when_dev_fuse_is_unusable() {
    if !root_or_skip("for a private mount namespace that hides /dev/fuse from gpurun") {
        return;
    }
    let s = Scratch::new();
    let (img, want) = image(&s);
    // /dev/fuse replaced, in a private mount namespace only, by a file the user cannot open
    let blocker = s.join("no-fuse");
    std::fs::write(&blocker, b"").unwrap();
    let cache = s.join("cache");
    let (uid, gid) = test_ids();
    let script = format!("cd /data && {{ {MANIFEST}; }}");
    for round in 0..2 {
        let o = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c"])
            .arg(r#"mount --bind "$0" /dev/fuse && exec "$@""#)
            .arg(&blocker)
            .args([
                "setpriv",
                &format!("--reuid={uid}"),
                &format!("--regid={gid}"),
                "--clear-groups",
            ])
            .arg("env")
            .arg(format!("GPURUN_CACHEDIR={}", cache.display()))
            .arg(gpurun_bin())
            .args(["exec", img.to_str().unwrap(), "sh", "-c", &script])
            .output()
            .unwrap();
        assert!(o.status.success(), "round {round}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("/dev/fuse cannot be opened"),
            "{}",
            stderr(&o)
        );
        // the extracted copy drops setuid on purpose
        let want = want.replace("./bin/suid 89ed", "./bin/suid 81ed");
        same(&want, &stdout(&o), &format!("extracted, round {round}"));
    }
    let entries: Vec<_> = std::fs::read_dir(cache.join("rootfs"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "one extracted tree, no leftovers: {entries:?}"
    );
    assert!(Path::new(&cache.join("rootfs").join(&entries[0]))
        .join("data/big")
        .is_file());
}

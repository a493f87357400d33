//! Errors that once sent the user the wrong way, as the unprivileged test user: each says what
//! went wrong (a permission, a misspelt transport, a noexec mount, a directory) with the fix that
//! applies, and the exit code of its kind.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;

fn private(p: &Path, mode: u32) {
    std::os::unix::fs::chown(p, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn permission_problems_say_permission_denied_the_path_and_the_fix() {
    if !root_or_skip("to make images the test user cannot read") {
        return;
    }
    let s = Scratch::new();
    let img = busybox_image(&s, "img", |_| {});
    let (dir, sqsh) = (s.join("img.root"), s.join("private.sqsh"));
    std::fs::copy(&img, &sqsh).unwrap();
    private(&dir, 0o700);
    private(&sqsh, 0o600);
    for image in [&dir, &sqsh] {
        let o = gpurun(&["exec", image.to_str().unwrap(), "true"])
            .output()
            .unwrap();
        let path = image.display().to_string();
        one_line_error(&o, 125, &["permission denied", &path, "ask its owner"]);
    }
    let src = format!("dir:{}", dir.display());
    let o = gpurun(&["pull", "-o", s.join("out.sqsh").to_str().unwrap(), &src])
        .output()
        .unwrap();
    let path = dir.display().to_string();
    one_line_error(&o, 125, &["permission denied", &path, "ask its owner"]);
}

#[test]
fn errors_name_the_fix_that_applies() {
    let s = Scratch::new();
    let o = gpurun(&["pull", "docker:/host/x"]).output().unwrap();
    one_line_error(&o, 125, &["write docker://host/x "]);
    assert!(!stderr(&o).contains("docker://docker:"), "{}", stderr(&o));

    let not_tar = s.join("image.tar");
    std::fs::write(&not_tar, "not a tar file, as a failed download leaves it\n").unwrap();
    s.chown_all();
    let src = format!("docker-archive:{}", not_tar.display());
    let o = gpurun(&["pull", "-o", s.join("out.sqsh").to_str().unwrap(), &src])
        .output()
        .unwrap();
    one_line_error(&o, 23, &["not a tar file", "not a docker save archive"]);

    // A program on a noexec bind and a directory given as the command: each its own fix.
    let img = busybox_image(&s, "img", |_| {});
    let tools = s.join("tools");
    std::fs::create_dir(&tools).unwrap();
    std::fs::copy("/bin/busybox", tools.join("tool")).unwrap();
    s.chown_all();
    let bind = format!("{}:/tools:noexec", tools.display());
    let img = img.to_str().unwrap();
    let o = gpurun(&["exec", "-B", &bind, img, "/tools/tool", "true"])
        .output()
        .unwrap();
    one_line_error(
        &o,
        126,
        &["/tools/tool", "mounted noexec", "without noexec"],
    );
    assert!(!stderr(&o).contains("chmod +x"), "{}", stderr(&o));
    let o = gpurun(&["exec", img, "/bin"]).output().unwrap();
    one_line_error(&o, 126, &["/bin: it is a directory"]);
    assert!(!stderr(&o).contains("chmod +x"), "{}", stderr(&o));
}

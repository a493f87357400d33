//! Package installs under --fakeroot, as enroot's users make them: `apt-get update` and
//! `apt-get install` of a package whose file is owned by another uid and whose postinst chowns
//! it, adds a group and a user and renames a file over /etc/localtime (as tzdata's), from a
//! repository on 127.0.0.1, in a Debian image made of
//! this machine's own apt and dpkg (tests/fakeroot/make-apt-image.sh). Rootless: gpurun runs as
//! the test user, in a user namespace that maps that one uid, which the fake-ids filter and
//! apt's sandbox user (root) make enough.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const PKG: &str = "gpurun-fakeroot-test";

/// The repository: GET and HEAD of the files of `dir` over http on 127.0.0.1, one request per
/// connection, for as long as the test runs. Returns the port.
fn serve(dir: PathBuf) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let _ = answer(&dir, conn);
        }
    });
    port
}

fn answer(dir: &Path, mut conn: TcpStream) -> std::io::Result<()> {
    let mut lines = BufReader::new(conn.try_clone()?).lines();
    let request = lines.next().transpose()?.unwrap_or_default();
    for line in lines.by_ref() {
        if line?.is_empty() {
            break;
        }
    }
    let mut words = request.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let file = path.trim_start_matches("/./").trim_start_matches('/');
    let body = match file.contains("..") {
        true => None,
        false => std::fs::read(dir.join(file)).ok(),
    };
    let Some(body) = body else {
        return conn.write_all(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    if method != "HEAD" {
        conn.write_all(&body)?;
    }
    Ok(())
}

/// The Debian image (a squashfs file the test user owns) and its repository, served.
fn apt_image(s: &Scratch) -> PathBuf {
    let out = s.join("apt");
    std::fs::create_dir_all(&out).unwrap();
    let port = serve(out.join("repo"));
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fakeroot/make-apt-image.sh"
    );
    run_ok(
        Command::new("bash")
            .arg(script)
            .arg(&out)
            .arg(port.to_string()),
    );
    let img = s.join("debian.sqsh");
    mksquashfs(&out.join("rootfs"), &img, &[]);
    img
}

/// `gpurun exec OPTS IMG sh -c SCRIPT` with a system's PATH (apt and dpkg run from sbin too).
fn sh(opts: &[&str], img: &Path, script: &str) -> std::process::Output {
    let mut a = vec!["exec"];
    a.extend_from_slice(opts);
    let path = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
    a.extend_from_slice(&[img.to_str().unwrap(), "env", path, "sh", "-c", script]);
    gpurun(&a).output().unwrap()
}

/// Install the package and say what it left: its file's owner and contents, the postinst's
/// group and user, and dpkg's status of the package.
const INSTALL: &str = "apt-get update -q >/dev/null && apt-get install -y -q gpurun-fakeroot-test";
const REPORT: &str =
    "f=/usr/share/gpurun-fakeroot-test/owned; echo \"file $(stat -c %u:%g $f) $(cat $f)\"; \
     getent group gpurunpkg; getent passwd gpurunpkg; \
     dpkg-query -W -f='${Status}\\n' gpurun-fakeroot-test";

/// What REPORT says of the package installed: the file as root's (neither its 1234 nor the
/// postinst's 4321 took), the postinst's group and user, dpkg's "installed".
fn installed() -> String {
    "file 0:0 owned by 1234\ngpurunpkg:x:4321:\ngpurunpkg:x:4321:4321::/nonexistent:/bin/sh\n\
     install ok installed\n"
        .into()
}

fn no_debian_tools() -> bool {
    let missing = ["apt-get", "dpkg-deb", "groupadd"].iter().find(|p| {
        !Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .unwrap()
            .status
            .success()
    });
    if let Some(p) = missing {
        skip(&format!(
            "needs Debian's apt, dpkg and passwd on this machine ({p})"
        ));
    }
    missing.is_some()
}

/// `apt-get update && apt-get install` under --fakeroot: in a tmpfs root, gone with the
/// container; under --overlay DIR, kept there, so the next container finds the package
/// installed; the image itself never changes.
#[test]
fn apt_installs_a_package_under_fakeroot() {
    if !root_or_skip("to make the package's file owned by uid 1234") || no_debian_tools() {
        return;
    }
    let s = Scratch::new();
    let img = apt_image(&s);
    let ov = s.join("overlay");
    std::fs::create_dir(&ov).unwrap();
    s.chown_all();
    let ov_opt = ov.to_str().unwrap();

    for opts in [
        &["--fakeroot", "--writable-tmpfs"][..],
        &["--fakeroot", "--overlay", ov_opt],
    ] {
        let o = sh(opts, &img, &format!("{INSTALL} && {{ {REPORT}; }}"));
        let out = stdout(&o);
        assert!(o.status.success(), "{opts:?}: {out}\n{}", stderr(&o));
        assert!(
            out.ends_with(&installed()),
            "{opts:?}: {out}\n{}",
            stderr(&o)
        );
    }
    // The overlay keeps it: installed, and apt knows it.
    let script = format!("{REPORT}; apt-get install -y -q {PKG} | grep -c 'already the newest'");
    let o = sh(&["--fakeroot", "--overlay", ov_opt], &img, &script);
    assert_eq!(stdout(&o), installed() + "1\n", "{}", stderr(&o));
    // On the host the file is the user's, as everything the container writes.
    let kept = ov.join("upper/usr/share").join(PKG).join("owned");
    let (uid, _) = test_ids();
    let meta = std::fs::metadata(&kept).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), uid);
    // The image has none of it.
    let script = "dpkg-query -W gpurun-fakeroot-test 2>&1; getent passwd gpurunpkg || echo no user";
    let o = sh(&["--fakeroot"], &img, script);
    assert_eq!(
        stdout(&o),
        "dpkg-query: no packages found matching gpurun-fakeroot-test\nno user\n"
    );
}

/// Only --fakeroot fakes: without it chown to another id fails as the kernel says (Apptainer's
/// behaviour), and no seccomp filter is installed.
#[test]
fn only_fakeroot_fakes_ownership_changes() {
    let s = Scratch::new();
    let img = busybox_image(&s, "bb", |_| {});
    let script = "grep '^Seccomp:' /proc/self/status; touch /f; chown 4321:4321 /f 2>/dev/null; \
                  echo rc=$?; stat -c %u:%g /f";
    let o = sh(&["--fakeroot", "--writable-tmpfs"], &img, script);
    assert_eq!(stdout(&o), "Seccomp:\t2\nrc=0\n0:0\n", "{}", stderr(&o));
    let (uid, gid) = test_ids();
    let o = sh(&["--writable-tmpfs"], &img, script);
    assert_eq!(
        stdout(&o),
        format!("Seccomp:\t0\nrc=1\n{uid}:{gid}\n"),
        "{}",
        stderr(&o)
    );
}

/// /etc/passwd and /etc/group in a writable root are files of the root's own that have the
/// user's entry, not mounts (which groupadd's rename could not replace); in a read-only root
/// they are the generated files, bound.
#[test]
fn passwd_and_group_in_a_writable_root() {
    let s = Scratch::new();
    let img = busybox_image(&s, "bb", |_| {});
    let script = "for f in passwd group; do grep -q \" /etc/$f \" /proc/self/mountinfo \
                  && echo $f bound || echo $f own; done; id -un; id -gn";
    let user = TEST_USER;
    let group = {
        let o = Command::new("id").args(["-gn", user]).output().unwrap();
        stdout(&o).trim().to_string()
    };
    for (opts, want) in [
        (
            &["--fakeroot", "--writable-tmpfs"][..],
            "passwd own\ngroup own\nroot\nroot\n".to_string(),
        ),
        (
            &["--writable-tmpfs"][..],
            format!("passwd own\ngroup own\n{user}\n{group}\n"),
        ),
        (
            &["--fakeroot"][..],
            "passwd bound\ngroup bound\nroot\nroot\n".to_string(),
        ),
        (
            &[][..],
            format!("passwd bound\ngroup bound\n{user}\n{group}\n"),
        ),
    ] {
        let o = sh(opts, &img, script);
        assert_eq!(stdout(&o), want, "{opts:?}: {}", stderr(&o));
    }
    // --fakeroot can change them, as groupadd does (a new file renamed over the old one)
    let script = "cp /etc/group /etc/group+ && echo pkg:x:4321: >> /etc/group+ && \
                  mv /etc/group+ /etc/group && grep -c pkg /etc/group";
    let o = sh(&["--fakeroot", "--writable-tmpfs"], &img, script);
    assert_eq!(stdout(&o), "1\n", "{}", stderr(&o));
}

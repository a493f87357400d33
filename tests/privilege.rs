//! What a container cannot do (docs/security.md): gain privileges (no_new_privs, nosuid and nodev
//! mounts, a setuid-root binary in the image), steer gpurun's mounts out of the root with the
//! image's own symlinks, or crash or hang gpurun with a corrupt image; and gpurun refuses to run
//! when installed setuid by mistake.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{busybox_image, gpurun, run_ok, stderr, stdout, test_ids, Scratch};

fn exec(img: &Path, args: &[&str]) -> std::process::Output {
    let mut a = vec!["exec", img.to_str().unwrap()];
    a.extend_from_slice(args);
    gpurun(&a).output().unwrap()
}

#[test]
fn no_privilege_can_be_gained_inside() {
    let s = Scratch::new();
    let img = busybox_image(&s, "priv", |root| {
        // made by root here, so mksquashfs keeps the owner 0 and the setuid bit
        // busybox runs as a multi-call binary when its name starts with "busybox"
        std::fs::copy("/bin/busybox", root.join("bin/busybox-suid")).unwrap();
        std::fs::set_permissions(
            root.join("bin/busybox-suid"),
            std::fs::Permissions::from_mode(0o4755),
        )
        .unwrap();
        if common::is_root() {
            let st = Command::new("mknod")
                .args(["-m", "666"])
                .arg(root.join("etc/image-null"))
                .args(["c", "1", "3"])
                .status()
                .unwrap();
            assert!(st.success());
        }
    });
    let (uid, _) = test_ids();
    let o = run_ok(&mut gpurun(&[
        "exec",
        img.to_str().unwrap(),
        "sh",
        "-c",
        "grep NoNewPrivs /proc/self/status; /bin/busybox-suid id -u; \
         stat -c %a /bin/busybox-suid; \
         awk '$5 == \"/\" {print $6}' /proc/self/mountinfo",
    ]));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "NoNewPrivs:\t1", "{out}");
    // the image's setuid-root binary runs as the caller
    assert_eq!(lines[1], uid.to_string(), "{out}");
    assert_eq!(lines[2], "4755", "the bit is there and does nothing: {out}");
    let root_opts = lines[3];
    for o in ["nosuid", "nodev"] {
        assert!(root_opts.split(',').any(|x| x == o), "root mount: {out}");
    }
    if common::is_root() {
        // a device node in the image (not under /dev, which is gpurun's) cannot be opened: nodev
        let o = exec(
            &img,
            &[
                "sh",
                "-c",
                "echo x > /etc/image-null && echo opened; cat /etc/image-null && echo read; ls -l /etc/image-null",
            ],
        );
        let out = stdout(&o);
        assert!(
            !out.contains("opened") && !out.contains("read"),
            "{out} {}",
            stderr(&o)
        );
    }
}

/// Entries of a host directory, to compare before and after.
fn listing(dir: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn image_symlinks_cannot_steer_mounts_out() {
    let s = Scratch::new();
    let img = busybox_image(&s, "links", |root| {
        for d in ["home", "mnt"] {
            let _ = std::fs::remove_dir_all(root.join(d));
        }
        std::os::unix::fs::symlink("/etc", root.join("home")).unwrap();
        std::os::unix::fs::symlink("../../../../../../etc", root.join("mnt")).unwrap();
    });
    // /tmp -> /: the host's /tmp bound there would hide the image and stand in for its /etc
    let root_img = busybox_image(&s, "tmp-root", |root| {
        std::fs::remove_dir_all(root.join("tmp")).unwrap();
        std::os::unix::fs::symlink("/", root.join("tmp")).unwrap();
    });
    std::fs::create_dir(s.join("data")).unwrap();
    std::fs::write(s.join("data/in.txt"), "bound\n").unwrap();
    s.chown_all();
    let (host_root, host_etc) = (listing("/"), listing("/etc"));
    let d = s.join("data");
    let binds = format!("{d}:/home/x/y,{d}:/mnt/data", d = d.display());
    // resolved in the container's root: /home/x/y is the container's /etc/x/y
    let o = run_ok(&mut gpurun(&[
        "exec",
        "--bind",
        &binds,
        img.to_str().unwrap(),
        "sh",
        "-c",
        "cat /etc/x/y/in.txt /etc/data/in.txt",
    ]));
    assert_eq!(stdout(&o), "bound\nbound\n");
    for args in [vec![], vec!["--contain"]] {
        let mut a = vec!["exec"];
        a.extend(args);
        a.extend([root_img.to_str().unwrap(), "true"]);
        let o = gpurun(&a).output().unwrap();
        assert_eq!(o.status.code(), Some(125), "{a:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(
                "cannot mount /tmp: the image's symlinks resolve it to the container's root"
            ),
            "{a:?}: {}",
            stderr(&o)
        );
    }
    assert_eq!(listing("/"), host_root, "host / changed");
    assert_eq!(listing("/etc"), host_etc, "host /etc changed");
}

#[test]
fn corrupt_images_give_errors_not_hangs() {
    let s = Scratch::new();
    let img = busybox_image(&s, "good", |root| {
        // 8 MB at 4 bits of entropy a byte: compressed blocks (so corruption is detectable; squashfs
        // has no checksums, an uncompressed block reads back as it is) that fill most of the image
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let big: Vec<u8> = (0..8_000_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x & 0x0f) as u8
            })
            .collect();
        std::fs::write(root.join("big.bin"), big).unwrap();
    });
    let bytes = std::fs::read(&img).unwrap();
    // busybox's blocks come first, then big.bin's: three quarters in is big.bin
    let mut bad = bytes.clone();
    let at = bytes.len() * 3 / 4;
    for b in &mut bad[at..at + 4096] {
        *b ^= 0xa5;
    }
    let cases = [
        ("bad-blocks.sqsh", bad),
        ("truncated.sqsh", bytes[..bytes.len() / 3].to_vec()),
        ("header-only.sqsh", bytes[..96].to_vec()),
        ("empty.sqsh", Vec::new()),
        ("garbage.sqsh", vec![0x5a; 1 << 16]),
    ];
    for (name, data) in &cases {
        std::fs::write(s.join(name), data).unwrap();
    }
    s.chown_all();
    for (name, _) in &cases {
        let t0 = Instant::now();
        let o = exec(
            &s.join(name),
            &["sh", "-c", "cat /big.bin > /dev/null && echo read-ok"],
        );
        let err = stderr(&o);
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{name}: took {:?}",
            t0.elapsed()
        );
        assert!(!stdout(&o).contains("read-ok"), "{name}: garbage read");
        assert!(
            o.status.code().is_some(),
            "{name}: killed by a signal: {err}"
        );
        if *name == "bad-blocks.sqsh" {
            // the image mounts; the reader gets EIO, not garbage, and the server names the block
            assert_eq!(o.status.code(), Some(1), "{err}");
            assert!(err.contains("cat: read error: Input/output error"), "{err}");
            assert!(
                err.contains("is corrupt or truncated (data block at"),
                "{err}"
            );
        } else {
            assert_eq!(o.status.code(), Some(125), "{name}: {err}");
            let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("gpurun:")).collect();
            assert_eq!(lines.len(), 1, "{name}: one line: {err}");
            assert!(lines[0].contains(name), "{name}: {err}");
        }
    }
}

#[test]
fn a_setuid_install_is_refused() {
    if !common::root_or_skip("to make a setuid-root copy") {
        return;
    }
    let s = Scratch::new();
    let img = busybox_image(&s, "bb", |_| {});
    let bin = s.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = bin.join("gpurun");
    std::fs::copy(common::gpurun_bin(), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // the copy must really run as root, or the test proves nothing: no nosuid on /var/tmp
    let st = nix::sys::statvfs::statvfs(&copy).unwrap();
    assert!(
        !st.flags().contains(nix::sys::statvfs::FsFlags::ST_NOSUID),
        "/var/tmp is nosuid here"
    );
    let target = format!("/root/gpurun-setuid-{}.sqsh", std::process::id());
    for args in [
        vec!["exec", img.to_str().unwrap(), "true"],
        vec!["pull", "oci:/nonexistent", "-o", &target],
        vec!["--version"],
    ] {
        let o = common::as_user(&copy).args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(125), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("gpurun is installed setuid or setgid")
                && stderr(&o).contains("chmod u-s,g-s"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    assert!(!Path::new(&target).exists());
    // setgid alone too
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o2755)).unwrap();
    let o = common::as_user(&copy).arg("--version").output().unwrap();
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
}

#[test]
fn the_built_binary_has_no_setuid_bit_or_capability() {
    use std::os::unix::ffi::OsStrExt;
    let bin = common::gpurun_bin();
    let mode = std::fs::metadata(&bin).unwrap().permissions().mode();
    assert_eq!(mode & 0o6000, 0, "{} mode {mode:o}", bin.display());
    let path = std::ffi::CString::new(bin.as_os_str().as_bytes()).unwrap();
    let name = c"security.capability";
    // SAFETY: a size query (null buffer) on valid C strings.
    let r = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    assert!(
        r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENODATA),
        "{} carries a file capability",
        bin.display()
    );
}

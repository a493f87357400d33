//! The runtime core, end to end: an unprivileged user runs commands from squashfs images made
//! here with mksquashfs.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn image(s: &Scratch) -> std::path::PathBuf {
    busybox_image(s, "bb", |root| {
        std::fs::create_dir_all(root.join(".gpurun")).unwrap();
        std::fs::write(
            root.join(".gpurun/meta.json"),
            r#"{"env":["IMGVAR=fromimage","PATH=/bin:/usr/bin"],"entrypoint":["/bin/echo","entry"],"cmd":["default-cmd"],"working_dir":"/opt/work"}"#,
        )
        .unwrap();
        std::fs::create_dir_all(root.join("opt/work")).unwrap();
        std::fs::write(root.join("opt/data.txt"), "hello from the image\n").unwrap();
        std::fs::hard_link(root.join("opt/data.txt"), root.join("opt/link.txt")).unwrap();
        std::fs::write(root.join("opt/notexec"), "#!/bin/sh\necho hi\n").unwrap();
        std::fs::set_permissions(
            root.join("opt/notexec"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        // A root-owned 0700 directory, as images have (/root): readable rootless all the same.
        std::fs::create_dir_all(root.join("root/secret")).unwrap();
        std::fs::write(root.join("root/secret/f"), "s\n").unwrap();
        std::fs::set_permissions(root.join("root"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        let big: Vec<u8> = (0..3_000_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        std::fs::write(root.join("opt/big.bin"), &big).unwrap();
        setfattr(&root.join("opt/data.txt"), "user.origin", "gpurun-test");
    })
}

/// A directory `data` with `in.txt` ("data\n") in it, to bind.
fn data_dir(s: &Scratch) -> std::path::PathBuf {
    std::fs::create_dir_all(s.join("data")).unwrap();
    std::fs::write(s.join("data/in.txt"), "data\n").unwrap();
    s.join("data")
}

fn exec(img: &Path, args: &[&str]) -> std::process::Output {
    exec_with(&[], img, args)
}

/// `gpurun exec OPTS IMG ARGS`, its output.
fn exec_with(opts: &[&str], img: &Path, args: &[&str]) -> std::process::Output {
    let mut a = vec!["exec"];
    a.extend_from_slice(opts);
    a.push(img.to_str().unwrap());
    a.extend_from_slice(args);
    gpurun(&a).output().unwrap()
}

/// A directory image that is not the user's (root's, as root left it) cannot take the user's home
/// as a mount point: one line names the directory and the fix; chowned, the same directory runs.
#[test]
fn a_directory_image_that_is_not_the_users_says_so() {
    if !root_or_skip("for a directory that is not the test user's") {
        return;
    }
    let s = Scratch::new();
    let root = s.join("rootdir");
    busybox_rootfs(&root);
    let o = exec(&root, &["true"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(125), "{e}");
    assert!(
        e.contains(&format!("image directory {}", root.display())) && e.contains("chown it"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    s.chown_all();
    let o = exec(&root, &["sh", "-c", "echo ran"]);
    assert_eq!(stdout(&o), "ran\n", "{}", stderr(&o));
}

#[test]
fn identity_home_cwd_and_files() {
    let s = Scratch::new();
    let img = image(&s);
    let (uid, gid) = test_ids();
    let o = exec(
        &img,
        &[
            "sh",
            "-c",
            "id -u; id -g; id -un; echo $HOME; pwd; cat /opt/data.txt; cat /root/secret/f",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], uid.to_string());
    assert_eq!(lines[1], gid.to_string());
    assert_eq!(lines[2], TEST_USER, "the caller's name resolves inside");
    assert_eq!(lines[3], format!("/home/{TEST_USER}"));
    assert_eq!(
        lines[4], "/",
        "setpriv runs from /; / is not bound, so cwd stays /"
    );
    assert_eq!(lines[5], "hello from the image");
    assert_eq!(lines[6], "s");

    // The home directory is the host's: a file written inside is there afterwards.
    let marker = format!("gpurun-home-test-{}", std::process::id());
    let o = exec(&img, &["sh", "-c", &format!("echo hi > $HOME/{marker}")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let host_file = Path::new("/home").join(TEST_USER).join(&marker);
    assert_eq!(std::fs::read_to_string(&host_file).unwrap(), "hi\n");
    std::fs::remove_file(host_file).unwrap();

    // The current directory is kept and bound.
    let mut c = gpurun(&["exec", img.to_str().unwrap(), "sh", "-c", "pwd; ls"]);
    std::fs::write(s.join("here.txt"), "x").unwrap();
    c.current_dir(s.path());
    let o = run_ok(&mut c);
    assert!(stdout(&o).starts_with(&format!("{}\n", s.path().display())));
    assert!(stdout(&o).contains("here.txt"));
}

/// -c/--contain and -C/--containall give an empty, writable home of the user's own (and /tmp), as
/// Apptainer does: $HOME exists, and what is written there stays out of the host's home.
#[test]
fn contained_home_is_empty_and_writable() {
    let s = Scratch::new();
    let img = image(&s);
    let probe =
        "cd && ls -A | wc -l && echo x > .cachefile && test \"$(stat -c %u .)\" = \"$(id -u)\" \
                 && touch /tmp/t && echo $HOME";
    for opt in ["-c", "-C"] {
        let o = exec_with(&[opt], &img, &["sh", "-c", probe]);
        assert!(o.status.success(), "{opt}: {}{}", stdout(&o), stderr(&o));
        let home = format!("/home/{TEST_USER}");
        assert_eq!(stdout(&o), format!("0\n{home}\n"), "{opt}");
        assert!(!Path::new(&home).join(".cachefile").exists(), "{opt}");
    }
}

/// --pwd names where the command must start: a directory the container lacks is an error (exit
/// 125, as pyxis's --container-workdir), not a start in / with a warning. Without --pwd, a
/// working directory the container lacks still falls back to / with a warning.
#[test]
fn pwd_missing_is_an_error() {
    let s = Scratch::new();
    let img = image(&s);
    let o = exec_with(&["--pwd", "/missing/dir"], &img, &["pwd"]);
    one_line_error(
        &o,
        125,
        &["--pwd /missing/dir", "No such file or directory"],
    );
    assert_eq!(stdout(&o), "");
    let o = exec_with(&["--pwd", "/opt/work"], &img, &["pwd"]);
    assert_eq!(stdout(&o), "/opt/work\n", "{}", stderr(&o));
}

/// --env-file takes its K=V lines literally, as `gpurun help env` says (Apptainer evaluates the
/// file as a shell script): nothing is expanded; `export ` and one pair of quotes are dropped.
#[test]
fn env_file_values_are_literal() {
    let s = Scratch::new();
    let img = image(&s);
    let f = s.join("vars.env");
    std::fs::write(&f, "# comment\nA=$HOME/x\n  export B='q r'\n").unwrap();
    let file = f.to_str().unwrap();
    let o = exec_with(&["--env-file", file], &img, &["sh", "-c", "echo \"$A|$B\""]);
    assert_eq!(stdout(&o), "$HOME/x|q r\n", "{}", stderr(&o));
    let help = stdout(&run_ok(&mut gpurun(&["help", "env"])));
    assert!(
        help.contains("taken literally: no $VAR expansion"),
        "{help}"
    );
}

/// `run` follows Docker's rule, as the README says: an image with neither entrypoint nor cmd
/// runs ARGS as the command, and /bin/sh without ARGS.
#[test]
fn run_without_entrypoint_or_cmd() {
    let s = Scratch::new();
    let img = busybox_image(&s, "bare", |_| {});
    let img = img.to_str().unwrap();
    let o = run_ok(&mut gpurun(&["run", img, "echo", "as the command"]));
    assert_eq!(stdout(&o), "as the command\n");
    let mut c = gpurun(&["run", img]);
    c.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"echo from sh\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(stdout(&o), "from sh\n");
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let said = "neither entrypoint nor cmd runs ARGS as the command, and `/bin/sh`\nwithout ARGS";
    assert!(
        readme.contains(said),
        "the README does not say what run does"
    );
}

#[test]
fn hard_links_xattrs_and_big_files() {
    let s = Scratch::new();
    let img = image(&s);
    let o = exec(
        &img,
        &[
            "sh",
            "-c",
            "stat -c '%i %h' /opt/data.txt /opt/link.txt; md5sum /opt/big.bin",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let l: Vec<&str> = out.lines().collect();
    assert_eq!(l[0], l[1], "hard links share one inode");
    assert!(l[0].ends_with(" 2"), "nlink is 2: {}", l[0]);
    let want = Command::new("md5sum")
        .arg(s.join("bb.root/opt/big.bin"))
        .output()
        .unwrap();
    assert_eq!(
        l[2].split_whitespace().next(),
        stdout(&want).split_whitespace().next()
    );

    // xattrs, read from the host through the container's root (busybox has no getfattr).
    let mut child = gpurun(&["exec", img.to_str().unwrap(), "sleep", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = wait_for_descendant(child.id(), "sleep");
    let o = as_user("getfattr")
        .args(["--only-values", "-n", "user.origin"])
        .arg(format!("/proc/{pid}/root/opt/data.txt"))
        .output()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(stdout(&o), "gpurun-test", "{}", stderr(&o));
}

/// The pid of the first descendant of `pid` whose command name is `comm`.
fn wait_for_descendant(pid: u32, comm: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let mut procs = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            let name = stat
                .split_once('(')
                .and_then(|(_, r)| r.rsplit_once(')'))
                .map(|(n, _)| n.to_string());
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
            procs.push((p, ppid.unwrap_or(0), name.unwrap_or_default()));
        }
        let mut family = vec![pid];
        let mut i = 0;
        while i < family.len() {
            for (p, pp, name) in &procs {
                if *pp == family[i] {
                    if name == comm {
                        return *p;
                    }
                    family.push(*p);
                }
            }
            i += 1;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no {comm} under {pid}");
}

#[test]
fn exit_codes_and_errors() {
    let s = Scratch::new();
    let img = image(&s);
    let o = exec(&img, &["sh", "-c", "exit 7"]);
    assert_eq!(o.status.code(), Some(7));
    let o = exec(&img, &["no-such-command"]);
    assert_eq!(o.status.code(), Some(127));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "one line: {e}");
    assert!(
        e.contains("no-such-command") && e.contains("not found"),
        "{e}"
    );
    let o = exec(&img, &["/opt/notexec"]);
    assert_eq!(o.status.code(), Some(126));
    assert!(stderr(&o).contains("/opt/notexec"), "{}", stderr(&o));
    let o = exec(&s.join("missing.sqsh"), &["true"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("missing.sqsh"), "{}", stderr(&o));
    std::fs::write(s.join("garbage.sqsh"), vec![7u8; 4096]).unwrap();
    s.chown_all();
    let o = exec(&s.join("garbage.sqsh"), &["true"]);
    assert_eq!(o.status.code(), Some(125));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("garbage.sqsh"), "{}", stderr(&o));
}

/// Signal dispositions reach the command as gpurun's caller left them: by default a writer to a
/// closed pipe dies quietly (gpurun itself ignores SIGPIPE, and the command used to inherit that:
/// `yes` printed "Broken pipe"); a caller that ignores SIGPIPE or SIGHUP (`nohup`) gets them
/// ignored inside too (SIGHUP used to be reset to its default).
#[test]
fn signal_dispositions_as_the_caller_left_them() {
    use std::os::unix::process::CommandExt;
    let s = Scratch::new();
    let img = image(&s);
    let probe = ["sh", "-c", "yes | head -1; grep SigIgn /proc/self/status"];
    // SigIgn is a hex mask of signal numbers minus one: SIGHUP (1) is bit 0, SIGPIPE (13) bit 12.
    let ignored = |o: &std::process::Output| {
        let line = stdout(o)
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:").map(str::trim).map(String::from));
        u64::from_str_radix(&line.expect("SigIgn line"), 16).unwrap()
    };
    let o = exec(&img, &probe);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("y\n"), "{}", stdout(&o));
    assert!(!stderr(&o).contains("Broken pipe"), "{}", stderr(&o));
    assert_eq!(
        ignored(&o) & (1 << 12 | 1),
        0,
        "SIGPIPE or SIGHUP ignored: {}",
        stdout(&o)
    );
    let mut a = vec!["exec", img.to_str().unwrap()];
    a.extend_from_slice(&probe);
    let mut c = gpurun(&a);
    // SAFETY: only async-signal-safe work between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        ignored(&o) & (1 << 12 | 1),
        1 << 12 | 1,
        "the caller's SIG_IGN was lost: {}",
        stdout(&o)
    );
}

/// `gpurun exec IMG ARGS…` with its cache in `cache`: the command's stdout; fails the test
/// unless it succeeded.
fn exec_cached(img: &Path, cache: &Path, args: &[&str]) -> String {
    let mut a = vec!["exec", img.to_str().unwrap()];
    a.extend_from_slice(args);
    let o = gpurun(&a).env("GPURUN_CACHEDIR", cache).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

/// The files in `dir`, sorted; none when it is missing.
fn files_in(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Write to the image file again: its change time moves, so nothing kept of it applies.
fn touch(img: &Path) {
    let f = std::fs::File::options().append(true).open(img).unwrap();
    f.set_modified(std::time::SystemTime::now()).unwrap();
}

/// The blocks an image server decompressed for its first containers are kept decompressed in the
/// user's cache (one private file per image, written whole once they have ended) and serve the
/// next server of the image: an edit to the kept file shows in its containers. A changed image
/// is read anew.
#[test]
fn blocks_are_kept_from_one_server_to_the_next() {
    let s = Scratch::new();
    let img = busybox_image(&s, "kb", |root| {
        std::fs::write(root.join("say.sh"), "#!/bin/sh\necho said-by-the-image\n").unwrap();
        std::fs::set_permissions(root.join("say.sh"), PermissionsExt::from_mode(0o755)).unwrap();
    });
    let cache = s.join("cache");
    s.chown_all();
    let i = img.to_str().unwrap();
    let say = || exec_cached(&img, &cache, &["/say.sh"]);
    let stop = || {
        let o = gpurun(&["stop", i]).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    };
    let dir = cache.join("image-blocks");
    assert_eq!(say(), "said-by-the-image\n");
    stop();
    let kept = files_in(&dir);
    assert!(
        kept.len() == 1 && kept[0].extension().is_some_and(|e| e == "blocks"),
        "one kept file and nothing else: {kept:?}"
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode(&dir), mode(&kept[0])), (0o700, 0o600));
    let mut bytes = std::fs::read(&kept[0]).unwrap();
    let at = bytes
        .windows(17)
        .position(|w| w == b"said-by-the-image")
        .expect("the script's block is kept");
    bytes[at..at + 17].copy_from_slice(b"said-by-the-kept!");
    std::fs::write(&kept[0], &bytes).unwrap();
    assert_eq!(
        say(),
        "said-by-the-kept!\n",
        "the kept blocks were not used"
    );
    stop();
    // The image written to again (its change time moves): read anew, and kept anew.
    touch(&img);
    assert_eq!(
        say(),
        "said-by-the-image\n",
        "a changed image's blocks were reused"
    );
    stop();
    assert_eq!(files_in(&dir), kept, "not one file per image");
    let bytes = std::fs::read(&kept[0]).unwrap();
    assert!(bytes.windows(17).any(|w| w == b"said-by-the-image"));
}

/// What the plan reads from a squashfs image (its metadata, passwd and group) is kept in the
/// user's cache while the image file is the same: an edited kept file shows it was used, and the
/// image changed on disk is read again (and its file rewritten).
#[test]
fn image_facts_are_kept_while_the_image_is_the_same() {
    let s = Scratch::new();
    let img = image(&s);
    let cache = s.join("cache");
    s.chown_all();
    let passwd = || exec_cached(&img, &cache, &["cat", "/etc/passwd"]);
    let kept = || files_in(&cache.join("image-facts"));
    assert!(!passwd().contains("kept-marker"));
    let files = kept();
    assert_eq!(files.len(), 1, "{files:?}");
    let mut facts: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    facts["passwd"] = "kept-marker:x:4242:4242::/:/bin/sh\n".into();
    std::fs::write(&files[0], facts.to_string()).unwrap();
    assert!(
        passwd().contains("kept-marker"),
        "the kept facts were not used"
    );
    // The image written to again (its change time moves): read anew.
    touch(&img);
    assert!(
        !passwd().contains("kept-marker"),
        "a changed image's facts were reused"
    );
    // One file per image, rewritten with the new facts.
    assert_eq!(kept(), files);
    assert!(!std::fs::read_to_string(&files[0])
        .unwrap()
        .contains("kept-marker"));
}

#[test]
fn environment_and_run() {
    let s = Scratch::new();
    let img = image(&s);
    std::fs::write(
        s.join("vars.env"),
        "# comment\nFROMFILE=file\nexport QUOTED=\"a b\"\n",
    )
    .unwrap();
    s.chown_all();
    let mut c = gpurun(&[
        "exec",
        "--env",
        "CLI=1",
        "--env-file",
        s.join("vars.env").to_str().unwrap(),
        img.to_str().unwrap(),
        "sh",
        "-c",
        "echo $IMGVAR $CLI $FROMFILE $QUOTED $HOSTVAR $INNER; echo $PATH",
    ]);
    c.env("HOSTVAR", "host")
        .env("GPURUNENV_INNER", "prefixed")
        .env("LD_LIBRARY_PATH", "/host-libs");
    let o = run_ok(&mut c);
    let out = stdout(&o);
    assert_eq!(
        out.lines().next().unwrap(),
        "fromimage 1 file a b host prefixed"
    );
    assert_eq!(
        out.lines().nth(1).unwrap(),
        "/bin:/usr/bin",
        "the image's PATH, not the host's"
    );

    let mut c = gpurun(&[
        "exec",
        "--cleanenv",
        img.to_str().unwrap(),
        "sh",
        "-c",
        "echo ${HOSTVAR:-unset} $IMGVAR; env | grep -c LD_LIBRARY_PATH",
    ]);
    c.env("HOSTVAR", "host")
        .env("LD_LIBRARY_PATH", "/host-libs");
    let o = c.output().unwrap();
    assert_eq!(stdout(&o).lines().next(), Some("unset fromimage"));
    assert_eq!(stdout(&o).lines().nth(1), Some("0"));

    // run: entrypoint + cmd from the image metadata; arguments replace cmd.
    let o = run_ok(&mut gpurun(&["run", img.to_str().unwrap()]));
    assert_eq!(stdout(&o), "entry default-cmd\n");
    let o = run_ok(&mut gpurun(&[
        "run",
        img.to_str().unwrap(),
        "mine",
        "--flag",
    ]));
    assert_eq!(stdout(&o), "entry mine --flag\n");
    let o = run_ok(gpurun(&["shell", img.to_str().unwrap()]).stdin(Stdio::null()));
    assert_eq!(stdout(&o), "", "a shell on empty stdin exits quietly");
    let mut sh = gpurun(&["shell", img.to_str().unwrap()]);
    sh.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = sh.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"echo in-shell $0\nexit 4\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(4));
    assert_eq!(stdout(&o), "in-shell /bin/sh\n");
}

#[test]
fn binds_contain_and_writable_tmpfs() {
    let s = Scratch::new();
    let img = image(&s);
    data_dir(&s);
    std::fs::create_dir_all(s.join("out")).unwrap();
    s.chown_all();
    let binds = format!(
        "{}:/mnt/data:ro,{}:/results",
        s.join("data").display(),
        s.join("out").display()
    );
    let o = run_ok(&mut gpurun(&[
        "exec", "--bind", &binds, img.to_str().unwrap(), "sh", "-c",
        "cat /mnt/data/in.txt; echo w > /results/o.txt; echo x > /mnt/data/new 2>/dev/null || echo ro-refused",
    ]));
    assert_eq!(stdout(&o), "data\nro-refused\n");
    assert_eq!(std::fs::read_to_string(s.join("out/o.txt")).unwrap(), "w\n");

    let o = gpurun(&[
        "exec",
        "--bind",
        "/nonexistent-src:/x",
        img.to_str().unwrap(),
        "true",
    ])
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("/nonexistent-src"), "{}", stderr(&o));

    // --contain: not the host's home (an empty one), private /tmp, image WorkingDir.
    let marker = format!("/tmp/gpurun-contain-{}", std::process::id());
    std::fs::write(&marker, "host").unwrap();
    let o = run_ok(&mut gpurun(&[
        "exec", "--contain", img.to_str().unwrap(), "sh", "-c",
        &format!("pwd; test -z \"$(ls -A $HOME)\" || echo home-visible; test -e {marker} && echo tmp-shared; echo ok"),
    ]));
    assert_eq!(stdout(&o), "/opt/work\nok\n");
    let o = run_ok(&mut gpurun(&[
        "exec",
        img.to_str().unwrap(),
        "cat",
        &marker,
    ]));
    assert_eq!(stdout(&o), "host", "without --contain, /tmp is the host's");
    std::fs::remove_file(&marker).unwrap();

    // Read-only by default; --writable-tmpfs gives a throwaway writable root.
    let o = exec(&img, &["sh", "-c", "echo x > /opt/new"]);
    assert!(!o.status.success());
    let script =
        "echo x > /opt/new && cat /opt/new && echo y >> /opt/data.txt && tail -1 /opt/data.txt";
    let o = exec_with(&["--writable-tmpfs"], &img, &["sh", "-c", script]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "x\ny\n");
    let o = run_ok(&mut gpurun(&[
        "exec",
        "--writable-tmpfs",
        img.to_str().unwrap(),
        "cat",
        "/opt/data.txt",
    ]));
    assert_eq!(stdout(&o), "hello from the image\n", "nothing persists");

    // --fakeroot maps the caller to root inside.
    let o = run_ok(&mut gpurun(&[
        "exec",
        "--fakeroot",
        img.to_str().unwrap(),
        "sh",
        "-c",
        "id -u; echo $HOME",
    ]));
    assert_eq!(stdout(&o), "0\n/root\n");
}

/// /etc/hosts, resolv.conf and localtime (the host's) and the generated passwd and group are
/// there, listed in /etc; a bind over /etc covers them as it covers any mount.
#[test]
fn default_files() {
    let s = Scratch::new();
    let img = image(&s);
    let data = data_dir(&s).display().to_string();
    s.chown_all();
    let script = "cat /etc/hosts; echo --; grep ^$(id -un): /etc/passwd | cut -d: -f3; \
                  grep -c ^$(id -gn): /etc/group; ls /etc | grep -x -e hosts -e passwd; true";
    let o = exec(&img, &["sh", "-c", script]);
    assert!(o.status.success(), "{}", stderr(&o));
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap();
    let (uid, _) = test_ids();
    assert_eq!(stdout(&o), format!("{hosts}--\n{uid}\n1\nhosts\npasswd\n"));
    let o = exec_with(&["--bind", &format!("{data}:/etc")], &img, &["ls", "/etc"]);
    assert_eq!(
        stdout(&o),
        "in.txt\n",
        "a bind over /etc covers the default files"
    );
}

/// The mount points an image lacks are made in an overlay of the container's own on their
/// nearest directory: listed where they are, empty until mounted on, and nothing else can be
/// made there, not in the image either, also by a --fakeroot user who remounts the root
/// read-write (the image's file system is read-only as a whole). Another container of the same
/// image server sees none of them.
#[test]
fn mount_points_the_image_lacks() {
    let s = Scratch::new();
    let img = image(&s);
    let data = data_dir(&s).display().to_string();
    std::fs::write(s.join("one.txt"), "one\n").unwrap();
    s.chown_all();
    let binds = format!(
        "{data}:/new/deep/dir,{}:/new/one.txt,{data}:/opt/work/sub",
        s.join("one.txt").display(),
    );
    let script = "ls -a /new; ls /new/deep; cat /new/deep/dir/in.txt /new/one.txt; \
                  ls /opt/work; ls / | grep -x new; \
                  grep -q ' / / ro,' /proc/self/mountinfo && echo ro; \
                  mkdir /late 2>&1; touch /opt/late 2>&1; true";
    let o = exec_with(&["--bind", &binds], &img, &["sh", "-c", script]);
    assert_eq!(
        stdout(&o),
        ".\n..\ndeep\none.txt\ndir\ndata\none\nsub\nnew\nro\n\
         mkdir: can't create directory '/late': Read-only file system\n\
         touch: /opt/late: Read-only file system\n"
    );
    let o = exec(&img, &["sh", "-c", "ls /new /opt/work 2>&1; true"]);
    assert_eq!(
        stdout(&o),
        "ls: /new: No such file or directory\n/opt/work:\n",
        "another container sees the mount points"
    );
    // A --fakeroot user may make its root writable (where it is an overlay of its own, what it
    // makes goes there) but never the image, which no other container then sees changed.
    let script = "mount -o remount,rw / && grep ' / / rw' /proc/self/mountinfo >/dev/null \
                  && echo rw; mkdir /late 2>/dev/null; echo changed > /opt/data.txt; true";
    let o = exec_with(&["--fakeroot"], &img, &["sh", "-c", script]);
    assert_eq!(stdout(&o), "rw\n");
    let o = exec(&img, &["sh", "-c", "ls /late 2>&1; cat /opt/data.txt"]);
    assert_eq!(
        stdout(&o),
        "ls: /late: No such file or directory\nhello from the image\n"
    );
}

/// `:ro` holds for what is mounted below the bound directory too (as Docker's read-only binds
/// since 25.0), not only for the directory's own filesystem.
#[test]
fn read_only_binds_cover_their_submounts() {
    if !root_or_skip("to mount below the bound directory") {
        return;
    }
    // mount_setattr (Linux 5.12) makes a tree read-only; before it, only the top mount is.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = release
        .split(['.', '-'])
        .map(|n| n.parse::<u32>().unwrap_or(0));
    if (v.next().unwrap_or(0), v.next().unwrap_or(0)) < (5, 12) {
        skip(&format!("kernel {release} has no mount_setattr"));
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let s = Scratch::new();
    let img = image(&s);
    let sub = s.join("data/sub");
    std::fs::create_dir_all(&sub).unwrap();
    assert!(Command::new("mount")
        .args(["-t", "tmpfs", "-o", "mode=1777", "tmpfs"])
        .arg(&sub)
        .status()
        .unwrap()
        .success());
    let _unmount = Unmount(sub.clone());
    std::fs::write(sub.join("in.txt"), "below\n").unwrap();
    s.chown_all();
    let script = "cat /mnt/data/sub/in.txt; echo x > /mnt/data/sub/new 2>/dev/null && echo written || echo ro-refused";
    let with_bind = |mode: &str| {
        let bind = format!("{}:/mnt/data{mode}", s.join("data").display());
        let args = [
            "exec",
            "--bind",
            &bind,
            img.to_str().unwrap(),
            "sh",
            "-c",
            script,
        ];
        stdout(&run_ok(&mut gpurun(&args)))
    };
    assert_eq!(with_bind(":ro"), "below\nro-refused\n");
    assert!(!sub.join("new").exists());
    // The same bind without :ro writes through to the host's submount.
    assert_eq!(with_bind(""), "below\nwritten\n");
    assert!(sub.join("new").exists());
}

/// Processes of the test user whose command line mentions `marker`.
fn user_procs(marker: &str) -> Vec<u32> {
    let (uid, _) = test_ids();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        let owner = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1));
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if owner == Some(uid.to_string().as_str()) && String::from_utf8_lossy(&cmd).contains(marker)
        {
            out.push(pid);
        }
    }
    out
}

fn wait_gone(marker: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if user_procs(marker).is_empty() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn signals_and_no_leftovers() {
    let s = Scratch::new();
    let img = image(&s);
    let img = img.to_str().unwrap();

    // A forwarded signal reaches the command, whose exit status comes back.
    let mut c = gpurun(&[
        "exec",
        img,
        "sh",
        "-c",
        "trap 'echo got-usr1; exit 42' USR1; echo ready; while true; do sleep 0.1; done",
    ])
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let mut first = [0u8; 6];
    use std::io::Read;
    c.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    assert_eq!(&first, b"ready\n");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .unwrap();
    let o = c.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(42));
    assert_eq!(stdout(&o), "got-usr1\n");

    // SIGTERM: the command dies of it, and so does gpurun (the shell sees the signal).
    for (sig, marker) in [
        (nix::sys::signal::Signal::SIGTERM, "gpurun-leftover-term"),
        (nix::sys::signal::Signal::SIGKILL, "gpurun-leftover-kill"),
    ] {
        let mut c = gpurun(&[
            "exec",
            img,
            "sh",
            "-c",
            &format!("sleep 1000 & sleep 999; : {marker}"),
        ])
        .spawn()
        .unwrap();
        wait_for_descendant(c.id(), "sh");
        std::thread::sleep(Duration::from_millis(200));
        assert!(!user_procs(marker).is_empty());
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), sig).unwrap();
        let st = c.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(sig as i32), "{sig:?}");
        // The shell dies with gpurun; its background sleep must not outlive it either.
        if sig == nix::sys::signal::Signal::SIGTERM {
            assert!(
                wait_gone(marker),
                "processes left after {sig:?}: {:?}",
                user_procs(marker)
            );
        } else {
            assert!(
                wait_gone(marker) || user_procs(marker).iter().all(|p| !is_sh(*p)),
                "container shell left after SIGKILL"
            );
        }
    }
    // A background process left by a command that exits normally is cleaned up too.
    let o = run_ok(&mut gpurun(&[
        "exec",
        img,
        "sh",
        "-c",
        "sleep 777 & echo started",
    ]));
    assert_eq!(stdout(&o), "started\n");
    assert!(wait_gone("sleep 777"));
    // The image's server outlives the containers until it is stopped; then nothing is left.
    run_ok(&mut gpurun(&["stop", img]));
    assert!(wait_gone(img), "left: {:?}", user_procs(img));
}

fn is_sh(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim() == "sh")
        .unwrap_or(false)
}

#[test]
fn dry_run_prints_the_plan() {
    let s = Scratch::new();
    let img = image(&s);
    let o = run_ok(&mut gpurun(&[
        "exec",
        "--dry-run",
        "--bind",
        "/etc:/hostetc:ro",
        img.to_str().unwrap(),
        "true",
    ]));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["argv"][0], "true");
    assert!(v["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["dst"] == "/hostetc" && m["readonly"] == true));
}

#[test]
fn without_fuse_the_image_is_extracted_once() {
    if !root_or_skip("for a private mount namespace that takes /dev/fuse away from the test user") {
        return;
    }
    let s = Scratch::new();
    let img = image(&s);
    let blocker = s.join("no-fuse");
    std::fs::write(&blocker, "").unwrap();
    std::fs::set_permissions(&blocker, std::fs::Permissions::from_mode(0o000)).unwrap();
    let (uid, gid) = test_ids();
    let cache = s.join("cache");
    // /dev/fuse is covered by an unreadable file in this private mount namespace only.
    let script = format!(
        "mount --bind {blocker} /dev/fuse && exec setpriv --reuid={uid} --regid={gid} --init-groups -- \
         env GPURUN_CACHEDIR={cache} HOME=/home/{TEST_USER} {bin} exec {img} sh -c 'cat /opt/data.txt; stat -c %i /opt/data.txt /opt/link.txt'",
        blocker = blocker.display(),
        cache = cache.display(),
        bin = gpurun_bin().display(),
        img = img.display(),
    );
    for round in 0..2 {
        let o = Command::new("unshare")
            .args(["-m", "sh", "-c", &script])
            .output()
            .unwrap();
        assert!(o.status.success(), "round {round}: {}", stderr(&o));
        let out = stdout(&o);
        let l: Vec<&str> = out.lines().collect();
        assert_eq!(l[0], "hello from the image");
        assert_eq!(l[1], l[2], "hard links survive extraction");
        assert!(stderr(&o).contains("/dev/fuse"), "says why: {}", stderr(&o));
    }
    let rootfs: Vec<_> = std::fs::read_dir(cache.join("rootfs"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(rootfs.len(), 1, "extracted once, reused: {rootfs:?}");
}

#[test]
fn the_terminal_is_passed_through() {
    let s = Scratch::new();
    let img = image(&s);
    // script(1) gives gpurun a pseudo-terminal, as an interactive login would.
    let cmd = format!(
        "{} exec {} sh -c 'test -t 0 && test -t 1 && echo on-a-tty; stty size'",
        gpurun_bin().display(),
        img.display()
    );
    let o = as_user("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("COLUMNS", "91")
        .env("LINES", "33")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(out.contains("on-a-tty"), "{out}\n{}", stderr(&o));
}

/// `gpurun hold IMG --state FILE`, until the state is written or it exits: the state's text (if
/// any) and the holder's output after SIGTERM.
fn hold(
    img: &Path,
    state: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Option<String>, std::process::Output) {
    let mut a = vec!["hold"];
    a.extend_from_slice(extra);
    a.extend(["--state", state.to_str().unwrap(), img.to_str().unwrap()]);
    let mut child = gpurun(&a)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !state.exists() && t0.elapsed() < Duration::from_secs(20) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(state).ok();
    // SAFETY: a signal to the test's own child: no memory is touched.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    (text, child.wait_with_output().unwrap())
}

/// An image whose entrypoint exports a variable and changes directory, or fails with ENTRY_FAIL.
fn entrypoint_image(s: &Scratch) -> std::path::PathBuf {
    busybox_image(s, "entry", |root| {
        std::fs::create_dir_all(root.join(".gpurun")).unwrap();
        std::fs::write(
            root.join(".gpurun/meta.json"),
            r#"{"env":["PATH=/bin"],"entrypoint":["/entry.sh"]}"#,
        )
        .unwrap();
        std::fs::write(
            root.join("entry.sh"),
            "#!/bin/sh\n[ -n \"$ENTRY_FAIL\" ] && { echo 'entry.sh: cannot start' >&2; exit 3; }\n\
             export ENTRY_SET=yes ENTRY_SAW_HOST=\"${HOSTVAR-unset}\"\ncd /tmp\nexec \"$@\"\n",
        )
        .unwrap();
        std::fs::set_permissions(
            root.join("entry.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    })
}

/// What `gpurun hold` writes is what the SPANK plugin reads (both use the hold-state crate);
/// with --entrypoint the image's entrypoint runs first, as pyxis's, with the image's environment
/// (not the host's HOSTVAR), and what it sets and the directory it leaves are the container's.
#[test]
fn hold_writes_the_state_the_plugin_reads() {
    let s = Scratch::new();
    let img = entrypoint_image(&s);
    for (name, extra, entry) in [
        ("plain", &[][..], false),
        ("entry", &["--entrypoint"][..], true),
    ] {
        let state = s.join(format!("{name}.json"));
        let (text, o) = hold(&img, &state, extra, &[("HOSTVAR", "h")]);
        let text = text.unwrap_or_else(|| panic!("{name}: no state: {}", stderr(&o)));
        let st = hold_state::State::parse(&text).unwrap();
        assert!(st.pid > 0 && st.root == Path::new("/"), "{name}: {st:?}");
        let has = |v: &str| st.env.iter().any(|e| e == v);
        assert_eq!(has("ENTRY_SET=yes"), entry, "{name}: {st:?}");
        assert_eq!(has("ENTRY_SAW_HOST=unset"), entry, "{name}: {st:?}");
        assert!(has("HOSTVAR=h"), "{name}: {st:?}");
        assert!(st.env.iter().any(|e| e == "PATH=/bin"), "{name}: {st:?}");
        let cwd = if entry { "/tmp" } else { "/" };
        assert_eq!(st.cwd, Path::new(cwd), "{name}");
    }
}

/// An entrypoint that exits instead of starting its command: exit 125 and one line with the way
/// out, after the entrypoint's own.
#[test]
fn hold_reports_a_failing_entrypoint() {
    let s = Scratch::new();
    let img = entrypoint_image(&s);
    let state = s.join("state.json");
    // given as the plugin gives a --container-env name: the entrypoint sees no other host variable
    let (text, o) = hold(
        &img,
        &state,
        &["--entrypoint"],
        &[("GPURUNENV_ENTRY_FAIL", "1")],
    );
    assert_eq!(text, None);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("entry.sh: cannot start"), "{err}");
    assert!(
        err.contains("gpurun: the image's entrypoint (/entry.sh) exited with status 3 instead of starting the command; without it: srun --no-container-entrypoint"),
        "{err}"
    );
    assert!(!state.exists());
}

/// The mount options of the line for `dst` in a mountinfo, and its optional fields (shared:N,
/// master:N, unbindable).
const MOUNTINFO: &str = "grep \" $1 \" /proc/self/mountinfo | cut -d' ' -f6-  | sed 's/ - .*//'";

/// What `MOUNTINFO` says about `dst` inside, given these options.
fn mountinfo_of(opts: &[&str], img: &Path, dst: &str) -> String {
    let script = format!("f() {{ {MOUNTINFO}; }}; f {dst}");
    let o = exec_with(opts, img, &["sh", "-c", &script]);
    assert!(o.status.success(), "{opts:?}: {}", stderr(&o));
    stdout(&o).trim().to_string()
}

/// --bind's flags (enroot's fstab flags joined with '+'), each as the container sees it.
#[test]
fn bind_flags_seen_inside() {
    let s = Scratch::new();
    let img = image(&s);
    let d = data_dir(&s);
    std::fs::copy("/bin/busybox", d.join("busybox")).unwrap();
    s.chown_all();
    let d = d.display().to_string();
    let opts = mountinfo_of(
        &["--bind", &format!("{d}:/m:ro+nosuid+nodev+noexec")],
        &img,
        "/m",
    );
    let opts: Vec<&str> = opts.split([',', ' ']).collect();
    for want in ["ro", "nosuid", "nodev", "noexec"] {
        assert!(opts.contains(&want), "{want} not in {opts:?}");
    }
    let plain = mountinfo_of(&["--bind", &format!("{d}:/m")], &img, "/m");
    assert!(
        !plain.contains("noexec") && !plain.contains("nodev"),
        "{plain}"
    );
    // noexec refuses a program; nodev a device node; without them both work
    let binds = format!(
        "{d}:/x:noexec,{d}:/y,/dev/null:/nodev/null:nodev,/dev/null:/withdev/null:x-create=file"
    );
    let script = "/x/busybox true && echo ran || echo exec-refused; /y/busybox true && echo ran; \
                  echo x > /nodev/null && echo opened || echo dev-refused; \
                  echo x > /withdev/null && echo opened";
    let o = exec_with(&["--bind", &binds], &img, &["sh", "-c", script]);
    assert_eq!(
        stdout(&o),
        "exec-refused\nran\ndev-refused\nopened\n",
        "{}",
        stderr(&o)
    );
    // x-create: what is made where the image lacks the destination
    let binds = format!("{d}:/xc/dir:x-create=dir,{d}:/xc/auto:x-create=auto");
    let o = exec_with(
        &["--bind", &binds],
        &img,
        &["sh", "-c", "cat /xc/dir/in.txt /xc/auto/in.txt"],
    );
    assert_eq!(stdout(&o), "data\ndata\n", "{}", stderr(&o));
    for (bind, says) in [
        (format!("{d}:/xc/f:x-create=file"), "cannot mount /xc/f: "),
        (
            format!("{d}:/m:ro+bogus"),
            "unknown flag \"bogus\"; use ro, rw, nosuid",
        ),
    ] {
        let o = exec_with(&["--bind", &bind], &img, &["true"]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(125), "{e}");
        assert!(e.lines().count() == 1 && e.contains(says), "{bind}: {e}");
    }
}

/// The propagation flags: a `slave` bind gets the host's mounts made under its source after
/// the start, a plain one does not; `shared` and `unbindable` show in the container's
/// mountinfo.
#[test]
fn bind_propagation_flags() {
    if !root_or_skip("to make a shared mount on the host") {
        return;
    }
    struct Unmount(Vec<std::path::PathBuf>);
    impl Drop for Unmount {
        fn drop(&mut self) {
            for p in self.0.iter().rev() {
                let _ = Command::new("umount").arg(p).status();
            }
        }
    }
    let mount = |args: &[&str], at: &Path| {
        let ok = Command::new("mount").args(args).arg(at).status().unwrap();
        assert!(ok.success(), "mount {args:?} {}", at.display());
    };
    let s = Scratch::new();
    let img = image(&s);
    let shared = s.join("shared");
    std::fs::create_dir(&shared).unwrap();
    mount(&["-t", "tmpfs", "-o", "mode=1777", "tmpfs"], &shared);
    let mut guard = Unmount(vec![shared.clone()]);
    mount(&["--make-shared"], &shared);
    std::fs::create_dir(shared.join("sub")).unwrap();
    s.chown_all();
    let src = shared.display().to_string();
    let bind = |flags: &str| format!("{src}:/s{flags}");
    let info = |flags: &str| mountinfo_of(&["--bind", &bind(flags)], &img, "/s");
    assert!(info(":shared").contains("shared:"), "{}", info(":shared"));
    assert!(
        info(":unbindable").contains("unbindable"),
        "{}",
        info(":unbindable")
    );
    for flags in ["", ":private", ":rprivate"] {
        let i = info(flags);
        assert!(
            !i.contains("shared:") && !i.contains("master:"),
            "{flags}: {i}"
        );
    }
    assert!(info(":rslave").contains("master:"), "{}", info(":rslave"));
    // a host mount made under the source while the container runs
    let wait = "touch /s/ready; i=0; while [ ! -e /s/sub/marker ] && [ $i -lt 30 ]; \
                do sleep 0.1; i=$((i+1)); done; cat /s/sub/marker 2>/dev/null || echo unseen";
    for (flags, want) in [
        (":rslave", "seen\n"),
        (":slave", "seen\n"),
        ("", "unseen\n"),
    ] {
        let c = gpurun(&[
            "exec",
            "--bind",
            &bind(flags),
            img.to_str().unwrap(),
            "sh",
            "-c",
            wait,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !shared.join("ready").exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let sub = shared.join("sub");
        mount(&["-t", "tmpfs", "tmpfs"], &sub);
        guard.0.push(sub.clone());
        std::fs::write(sub.join("marker"), "seen\n").unwrap();
        let o = c.wait_with_output().unwrap();
        assert_eq!(stdout(&o), want, "{flags}: {}", stderr(&o));
        assert!(Command::new("umount").arg(&sub).status().unwrap().success());
        guard.0.pop();
        std::fs::remove_file(shared.join("ready")).unwrap();
    }
}

/// --tmpfs DST[:OPTS]: a fresh tmpfs of that size and mode, noexec where asked, and mounts
/// inside it kept (shallower destinations first).
#[test]
fn tmpfs_mounts() {
    let s = Scratch::new();
    let img = image(&s);
    let d = data_dir(&s);
    s.chown_all();
    let script = "stat -c %a /scratch; f() { grep \" $1 \" /proc/self/mountinfo; }; f /scratch; \
                  dd if=/dev/zero of=/scratch/f bs=1k count=2048 2>/dev/null || echo full; \
                  echo w > /work/w && cat /work/w /work/data/in.txt; \
                  cp /bin/busybox /t/busybox && /t/busybox true && echo ran || echo exec-refused; \
                  cp /bin/busybox /work/busybox && /work/busybox true && echo ran";
    let bind = format!("{}:/work/data", d.display());
    let opts = [
        "--bind",
        &bind,
        "--tmpfs",
        "/scratch:size=1M,mode=700",
        "--tmpfs",
        "/work",
        "--tmpfs",
        "/t:noexec",
    ];
    let o = exec_with(&opts, &img, &["sh", "-c", script]);
    let out = stdout(&o);
    let l: Vec<&str> = out.lines().collect();
    assert_eq!(l.first(), Some(&"700"), "{out}\n{}", stderr(&o));
    assert!(
        l[1].contains(" - tmpfs ") && l[1].contains("size=1024k"),
        "{out}"
    );
    assert_eq!(
        &l[2..],
        ["full", "w", "data", "exec-refused", "ran"],
        "{out}"
    );
    let o = exec_with(&["--tmpfs", "/t:size=1M,uid=0"], &img, &["true"]);
    assert_eq!(o.status.code(), Some(125));
    let e = stderr(&o);
    assert!(
        e.lines().count() == 1
            && e.contains("--tmpfs \"/t:size=1M,uid=0\": unknown option \"uid=0\""),
        "{e}"
    );
}

/// fuse-overlayfs (overlay_driver) is the container's child: it ends when the container does,
/// and when gpurun itself is killed.
#[test]
fn fuse_overlayfs_ends_with_the_container() {
    assert!(
        Path::new("/usr/bin/fuse-overlayfs").exists(),
        "fuse-overlayfs is needed for the tests (tests/setup-machine.sh installs it)"
    );
    let s = Scratch::new();
    let img = image(&s);
    std::fs::create_dir(s.join("ov")).unwrap();
    s.chown_all();
    let ov = s.join("ov").display().to_string();
    for kill in [false, true] {
        let args = [
            "exec",
            "--overlay",
            &ov,
            img.to_str().unwrap(),
            "sh",
            "-c",
            "echo up; read x; echo done",
        ];
        let mut c = gpurun(&args)
            .env("GPURUN_OVERLAY_DRIVER", "fuse-overlayfs")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut up = [0u8; 3];
        use std::io::{Read, Write};
        c.stdout.as_mut().unwrap().read_exact(&mut up).unwrap();
        assert_eq!(&up, b"up\n");
        let daemon = wait_for_descendant(c.id(), "fuse-overlayfs");
        if kill {
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
            c.wait().unwrap();
        } else {
            c.stdin.as_mut().unwrap().write_all(b"\n").unwrap();
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "{}", stderr(&o));
            assert_eq!(stdout(&o), "done\n");
        }
        let comm = format!("/proc/{daemon}/comm");
        let deadline = Instant::now() + Duration::from_secs(5);
        let alive = || std::fs::read_to_string(&comm).is_ok_and(|c| c.trim() == "fuse-overlayfs");
        while alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            !alive(),
            "fuse-overlayfs {daemon} left (gpurun killed: {kill})"
        );
    }
}

/// Where the kernel refuses the overlay (its DIR on a FUSE file system: overlayfs takes no
/// upper directory there), gpurun falls back to fuse-overlayfs by itself; with
/// overlay_driver = "kernel" the kernel's refusal is the error.
#[test]
fn overlay_falls_back_to_fuse_overlayfs() {
    if !root_or_skip("to mount a FUSE file system on the host") {
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("fusermount3").arg("-u").arg(&self.0).status();
        }
    }
    let s = Scratch::new();
    let img = image(&s);
    for d in ["l", "u", "w", "m"] {
        std::fs::create_dir(s.join(d)).unwrap();
    }
    // a FUSE file system (fuse-overlayfs, run as root here) that the test user may write
    let o = s.join("l").display().to_string();
    let opts = format!(
        "lowerdir={o},upperdir={},workdir={},allow_other",
        s.join("u").display(),
        s.join("w").display()
    );
    let m = s.join("m");
    run_ok(Command::new("fuse-overlayfs").args(["-o", &opts]).arg(&m));
    let _unmount = Unmount(m.clone());
    let ov = m.join("ov");
    std::fs::create_dir(&ov).unwrap();
    let (uid, gid) = test_ids();
    std::os::unix::fs::chown(&ov, Some(uid), Some(gid)).unwrap();
    let ov = ov.display().to_string();
    let script = "grep ' / / ' /proc/self/mountinfo | sed 's/.* - //' | cut -d' ' -f1; \
                  echo kept >> /etc/kept; cat /etc/kept";
    let args = ["--no-home", "--overlay", &ov];
    let o = exec_with(&args, &img, &["sh", "-c", script]);
    assert_eq!(stdout(&o), "fuse.fuse-overlayfs\nkept\n", "{}", stderr(&o));
    let o = exec_with(&args, &img, &["sh", "-c", script]);
    assert_eq!(
        stdout(&o),
        "fuse.fuse-overlayfs\nkept\nkept\n",
        "{}",
        stderr(&o)
    );
    let mut c = gpurun(&[
        "exec",
        "--no-home",
        "--overlay",
        &ov,
        img.to_str().unwrap(),
        "true",
    ]);
    let o = c.env("GPURUN_OVERLAY_DRIVER", "kernel").output().unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(125), "{e}");
    assert!(
        e.lines().count() == 1
            && e.contains(&format!("--overlay {ov}: mount overlay on"))
            && e.contains("overlayfs in a user namespace needs Linux ≥ 5.11"),
        "{e}"
    );
}

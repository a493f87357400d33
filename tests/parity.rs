//! What users of Apptainer and of enroot/pyxis expect, as the unprivileged test user: everything
//! after the image goes to the container; Apptainer's options and GPURUN_<FLAG> variables;
//! their options gpurun lacks answered with what to use; clear errors for a script with a bad
//! #! line and a directory that is not a root filesystem.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use common::*;

/// gpurun ARGS… as the test user, with these variables.
fn with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = gpurun(args);
    c.envs(env.iter().copied());
    c.output().unwrap()
}

fn out_ok(args: &[&str], env: &[(&str, &str)]) -> String {
    let o = with_env(args, env);
    assert!(o.status.success(), "{args:?} {env:?}: {}", stderr(&o));
    stdout(&o)
}

/// One line on stderr, starting `gpurun: ` and holding `says`, and this exit status.
fn one_line(o: &Output, code: i32, says: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("gpurun: ") && e.contains(says), "{e}");
}

#[test]
fn everything_after_the_image_is_the_containers() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let img = img.to_str().unwrap();
    // (command line, stdout); the image's entrypoint is /bin/echo
    let cases: &[(&[&str], &str)] = &[
        (&["run", img, "-c", "echo hi"], "-c echo hi\n"),
        (&["run", img, "--help"], "--help\n"),
        (&["run", img, "--", "x"], "-- x\n"),
        (&["run", "-c", img, "-c", "x"], "-c x\n"),
        (
            &["exec", img, "echo", "-c", "--version", "-e"],
            "-c --version -e\n",
        ),
        (&["exec", img, "sh", "-c", "echo $1", "x", "-y"], "-y\n"),
        (
            &["shell", "-s", "/bin/sh", img, "-c", "echo shell $0"],
            "shell /bin/sh\n",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(out_ok(args, &[]), *want, "{args:?}");
    }
    // exec IMG --help runs a command named --help
    let o = with_env(&["exec", img, "--help"], &[]);
    one_line(&o, 127, "--help: command not found in the container's PATH");
}

#[test]
fn options_of_apptainer_and_pyxis_say_what_to_use() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let img = img.to_str().unwrap();
    for (args, says) in [
        (
            &["exec", "--nvccli", img, "true"][..],
            "--nvccli is an Apptainer option gpurun does not have: gpurun sets up NVIDIA GPUs itself",
        ),
        (&["run", "--userns", img], "always runs in a user namespace of your own"),
        (&["shell", "-u", img], "(Apptainer's --userns)"),
        (&["exec", "--rocm", img, "true"], "no AMD ROCm support"),
        (&["exec", "--fusemount", "host:sshfs x /y", img, "true"], "--bind its mount point"),
        (&["exec", "--netns-path", "/run/netns/x", img, "true"], "gpurun has --net (--network none): a network namespace with loopback only"),
        (
            &["exec", "--container-image=x.sqsh", "true"],
            "--container-image is an srun option of gpurun's Slurm plugin",
        ),
        (&["run", "--container-mounts=/a:/b", img], "use --bind SRC[:DST[:FLAGS]], and --tmpfs DST for tmpfs:DST"),
        (&["exec", "--container-name=c", img, "true"], "pyxis option gpurun does not have"),
        (&["pull", "--docker-login", "docker://x"], "docker login"),
    ] {
        one_line(&with_env(args, &[]), 2, says);
    }
    // Anything else is clap's usage error, as before.
    let o = with_env(&["exec", "--bogus", img, "true"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unexpected argument '--bogus'"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn home_containall_no_mount_env_hostname_fakeroot() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let img = img.to_str().unwrap();
    let myhome = s.join("myhome");
    std::fs::create_dir(&myhome).unwrap();
    std::fs::write(myhome.join("f"), "mine\n").unwrap();
    let work = s.join("work");
    std::fs::create_dir(&work).unwrap();
    s.chown_all();
    let home = myhome.to_str().unwrap();
    let probe =
        "echo $HOME; cat $HOME/f; [ -d /home/gpuruntest ] && echo userhome || echo nouserhome";
    // --home SRC:DST, --home SRC, and with --contain
    let spec = format!("{home}:/home/me");
    assert_eq!(
        out_ok(&["exec", "--home", &spec, img, "sh", "-c", probe], &[]),
        "/home/me\nmine\nnouserhome\n"
    );
    assert_eq!(
        out_ok(&["exec", "-H", home, img, "sh", "-c", probe], &[]),
        format!("{home}\nmine\nnouserhome\n")
    );
    assert_eq!(
        out_ok(
            &["exec", "-c", "--home", &spec, img, "sh", "-c", probe],
            &[]
        ),
        "/home/me\nmine\nnouserhome\n"
    );
    let o = with_env(&["exec", "--home", "/nonexistent/h", img, "true"], &[]);
    one_line(&o, 125, "--home source /nonexistent/h does not exist");

    // -C: --contain and --cleanenv
    // the host's home is not there: an empty one of the container's own
    let probe = "echo ${FOO:-unset}; [ -n \"$(ls -A /home/gpuruntest)\" ] && echo home || echo nohome; touch /tmp/x && ls /tmp";
    let env = [("FOO", "bar")];
    assert_eq!(
        out_ok(&["exec", "-C", img, "sh", "-c", probe], &env),
        "unset\nnohome\nx\n"
    );
    assert_eq!(
        out_ok(&["exec", "--containall", img, "sh", "-c", probe], &env),
        "unset\nnohome\nx\n"
    );
    assert!(out_ok(&["exec", "-c", img, "sh", "-c", probe], &env).starts_with("bar\nnohome\n"));

    // --no-mount
    let probe = "[ -d /home/gpuruntest ] && echo home || echo nohome; touch /tmp/y 2>/dev/null && echo tmp || echo imagetmp; pwd";
    let run_in = |args: &[&str]| {
        let mut c = gpurun(args);
        c.current_dir(&work);
        let o = c.output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        stdout(&o)
    };
    let w = work.to_str().unwrap();
    assert_eq!(
        run_in(&["exec", img, "sh", "-c", probe]),
        format!("home\ntmp\n{w}\n")
    );
    assert_eq!(
        run_in(&["exec", "--no-mount", "home,tmp", img, "sh", "-c", probe]),
        format!("nohome\nimagetmp\n{w}\n")
    );
    // the scratch directory is under /var/tmp, bound with /tmp: without both, it is not there
    assert_eq!(
        run_in(&[
            "exec",
            "--no-mount",
            "cwd,tmp",
            "--no-mount",
            "hostfs",
            img,
            "sh",
            "-c",
            probe
        ]),
        "home\nimagetmp\n/\n"
    );
    let hosts = "[ -e /etc/hosts ] && echo hosts || echo nohosts";
    assert_eq!(
        out_ok(
            &["exec", "--no-mount", "/etc/hosts", img, "sh", "-c", hosts],
            &[]
        ),
        "nohosts\n"
    );
    one_line(
        &with_env(&["exec", "--no-mount", "proc", img, "true"], &[]),
        125,
        "--no-mount proc: gpurun always mounts /proc, /sys and /dev",
    );
    one_line(
        &with_env(&["exec", "--no-mount", "homes", img, "true"], &[]),
        125,
        "--no-mount homes: unknown name; use home, cwd, tmp, hostfs, bind-paths",
    );

    // --env splits as Apptainer's does
    let o = out_ok(
        &[
            "exec",
            "--env",
            "A=1,B=2",
            "--env",
            "P=/a,b",
            "--env",
            "\"C=x,y\",D=z",
            img,
            "sh",
            "-c",
            "echo $A $B $P $C $D",
        ],
        &[],
    );
    assert_eq!(o, "1 2 /a,b x,y z\n");
    one_line(
        &with_env(&["exec", "--env", "A=\"1,2\",B=3", img, "true"], &[]),
        125,
        "quote a whole K=V",
    );

    // --hostname, -f/--fakeroot, --cwd
    assert_eq!(
        out_ok(
            &[
                "exec",
                "--hostname",
                "box1",
                img,
                "sh",
                "-c",
                "hostname; uname -n"
            ],
            &[]
        ),
        "box1\nbox1\n"
    );
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(out_ok(&["exec", img, "hostname"], &[]), host);
    one_line(
        &with_env(&["exec", "--hostname", "a b", img, "true"], &[]),
        125,
        "--hostname \"a b\"",
    );
    assert_eq!(out_ok(&["exec", "-f", img, "id", "-u"], &[]), "0\n");
    assert_eq!(
        out_ok(&["exec", "--cwd", "/bin", img, "pwd"], &[]),
        "/bin\n"
    );
}

#[test]
fn every_option_has_a_variable() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let img = img.to_str().unwrap();
    let envfile = s.join("e.env");
    std::fs::write(&envfile, "FROMFILE=yes\n").unwrap();
    s.chown_all();
    let foo = "echo ${FOO:-unset}";
    // (variables, command after the image, stdout)
    type Case<'a> = (Vec<(&'a str, &'a str)>, Vec<&'a str>, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec![("FOO", "bar"), ("GPURUN_CLEANENV", "1")],
            vec!["sh", "-c", foo],
            "unset\n",
        ),
        (
            vec![("FOO", "bar"), ("GPURUN_CLEANENV", "true")],
            vec!["sh", "-c", foo],
            "unset\n",
        ),
        (
            vec![("FOO", "bar"), ("GPURUN_CLEANENV", "0")],
            vec!["sh", "-c", foo],
            "bar\n",
        ),
        // empty is unset
        (
            vec![("FOO", "bar"), ("GPURUN_CLEANENV", "")],
            vec!["sh", "-c", foo],
            "bar\n",
        ),
        (vec![("GPURUN_PWD", "/bin")], vec!["pwd"], "/bin\n"),
        (
            vec![("GPURUN_TMPFS", "/scratch:mode=700")],
            vec!["stat", "-c", "%a", "/scratch"],
            "700\n",
        ),
        (vec![("GPURUN_FAKEROOT", "yes")], vec!["id", "-u"], "0\n"),
        (
            vec![("GPURUN_HOSTNAME", "viavar")],
            vec!["hostname"],
            "viavar\n",
        ),
        (
            vec![("GPURUN_ENV", "A=1,B=2")],
            vec!["sh", "-c", "echo $A$B"],
            "12\n",
        ),
        (
            vec![("GPURUN_CONTAIN", "on")],
            vec![
                "sh",
                "-c",
                "[ -n \"$(ls -A /home/gpuruntest)\" ] && echo home || echo nohome",
            ],
            "nohome\n",
        ),
        (
            vec![("GPURUN_NO_MOUNT", "home")],
            vec![
                "sh",
                "-c",
                "[ -d /home/gpuruntest ] && echo home || echo nohome",
            ],
            "nohome\n",
        ),
        (
            vec![("GPURUN_ENV_FILE", envfile.to_str().unwrap())],
            vec!["sh", "-c", "echo $FROMFILE ${FILE:-nofile}"],
            "yes nofile\n",
        ),
        // GPURUNENV_K sets K inside; credentials never pass
        (
            vec![
                ("GPURUNENV_INSIDE", "v"),
                ("GPURUN_DOCKER_PASSWORD", "s3cret"),
            ],
            vec!["sh", "-c", "echo $INSIDE; env | grep -c s3cret || true"],
            "v\n0\n",
        ),
    ];
    for (env, cmd, want) in cases {
        let mut args = vec!["exec", img];
        args.extend(cmd);
        let o = with_env(&args, &env);
        assert!(o.status.success(), "{env:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), want, "{env:?}");
        assert!(stderr(&o).is_empty(), "{env:?}: {}", stderr(&o));
    }
    // The command line wins over the variable.
    assert_eq!(
        out_ok(
            &["exec", "--pwd", "/etc", img, "pwd"],
            &[("GPURUN_PWD", "/bin")]
        ),
        "/etc\n"
    );
    // A switch's variable that is not yes or no: one line naming it, a usage error.
    let o = with_env(&["exec", img, "true"], &[("GPURUN_FAKEROOT", "maybe")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("GPURUN_FAKEROOT=maybe: not a yes/no value"),
        "{}",
        stderr(&o)
    );
    // The old prefix still sets a variable inside, with one line of warning.
    let o = with_env(
        &["exec", img, "sh", "-c", "echo $OLD"],
        &[("GPURUN_ENV_OLD", "still")],
    );
    assert_eq!(stdout(&o), "still\n");
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with("gpurun: warning: GPURUN_ENV_OLD: the GPURUN_ENV_ prefix is deprecated; write GPURUNENV_NAME"),
        "{e}"
    );
    // config show names the options set by variables, and the variables
    let o = with_env(
        &["config", "show", "--json"],
        &[("GPURUN_CLEANENV", "1"), ("GPURUN_NO_MOUNT", "home,tmp")],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let flags = v["flags"].as_array().unwrap();
    assert!(
        flags.contains(&serde_json::json!({
            "flag": "--cleanenv", "value": "1",
            "from": {"kind": "env", "name": "GPURUN_CLEANENV"}
        })),
        "{v}"
    );
    let text = out_ok(&["config", "show"], &[("GPURUN_NO_MOUNT", "home,tmp")]);
    assert!(
        text.contains("--no-mount")
            && text.contains("home,tmp")
            && text.contains("(environment GPURUN_NO_MOUNT)"),
        "{text}"
    );
}

#[test]
fn scripts_whose_interpreter_is_missing() {
    let s = Scratch::new();
    let img = busybox_image(&s, "scripts", |root| {
        let script = |name: &str, text: &[u8]| {
            let p = root.join(name);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        script("crlf.sh", b"#!/bin/sh\r\necho hi\r\n");
        script("py.sh", b"#!/usr/bin/python3\nprint(1)\n");
        script("ok.sh", b"#!/bin/sh\necho ok\n");
        // a program linked against the host's glibc: its loader is not in a busybox image
        std::fs::copy("/usr/bin/true", root.join("glibc-true")).unwrap();
    });
    let img = img.to_str().unwrap();
    one_line(
        &with_env(&["exec", img, "/crlf.sh"], &[]),
        126,
        "cannot execute /crlf.sh: its #! line names \"/bin/sh\\r\", with a carriage return (\\r): the file has Windows (CRLF) line endings; convert it with dos2unix /crlf.sh",
    );
    one_line(
        &with_env(&["exec", img, "/py.sh"], &[]),
        126,
        "cannot execute /py.sh: its interpreter /usr/bin/python3 (from its #! line) is not in the container",
    );
    one_line(
        &with_env(&["exec", img, "/glibc-true"], &[]),
        126,
        "cannot execute /glibc-true: the program loader it names, /lib",
    );
    assert_eq!(out_ok(&["exec", img, "/ok.sh"], &[]), "ok\n");
    // a missing file is still that
    one_line(
        &with_env(&["exec", img, "/nope.sh"], &[]),
        127,
        "/nope.sh: no such file in the container",
    );
}

#[test]
fn a_directory_that_is_not_a_root_filesystem() {
    let s = Scratch::new();
    let root = s.join("rootfs");
    busybox_rootfs(&root);
    std::fs::create_dir_all(s.join("data/sub")).unwrap();
    std::fs::write(s.join("data/readme"), "x").unwrap();
    s.chown_all();
    assert_eq!(
        out_ok(&["exec", root.to_str().unwrap(), "echo", "fine"], &[]),
        "fine\n"
    );
    for dir in [s.join("data"), s.path().to_path_buf()] {
        let d = dir.to_str().unwrap();
        for args in [vec!["exec", d, "ls"], vec!["run", d], vec!["shell", d]] {
            one_line(
                &with_env(&args, &[]),
                125,
                &format!("image {d}: not a root filesystem (it has no /bin, /usr"),
            );
        }
    }
}

/// The completion scripts, run in their shells: image files where an IMAGE goes, help's topics,
/// no hidden command.
#[test]
fn completions_complete_images_and_topics() {
    let s = Scratch::new();
    let dir = s.join("c");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    for f in ["a.sqsh", "b.sif", "c.txt"] {
        std::fs::write(dir.join(f), "").unwrap();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("completions");
    let run = |shell: &str, script: String| {
        let o = Command::new(shell)
            .arg("-c")
            .arg(script)
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| panic!("{shell}: {e} (tests/setup-machine.sh installs it)"));
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        stdout(&o)
    };
    let bash = |words: &str| {
        run(
            "bash",
            format!(
                "source {}; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
                 _gpurun_complete gpurun \"${{COMP_WORDS[COMP_CWORD]}}\" x; echo \"${{COMPREPLY[*]}}\"",
                root.join("gpurun.bash").display()
            ),
        )
    };
    let fish = |line: &str| {
        run(
            "fish",
            format!(
                "source {}; complete -C '{line}' | string replace -r '\\t.*' '' | string join ' '",
                root.join("gpurun.fish").display()
            ),
        )
    };
    let words = |s: String| -> Vec<String> {
        let mut v: Vec<String> = s.split_whitespace().map(str::to_string).collect();
        v.sort();
        v
    };
    for line in [
        "gpurun exec ''",
        "gpurun -v run -B /x -c ''",
        "gpurun shell -- ''",
    ] {
        assert_eq!(
            words(bash(line)),
            ["a.sqsh", "b.sif", "sub"],
            "bash: {line}"
        );
    }
    assert_eq!(words(bash("gpurun inspect b")), ["b.sif"]);
    // after the image: the container's words, no option of gpurun's
    assert_eq!(bash("gpurun exec a.sqsh ''").trim(), "");
    for line in ["gpurun exec ", "gpurun run -B /x -c "] {
        assert_eq!(
            words(fish(line)),
            ["a.sqsh", "b.sif", "sub/"],
            "fish: {line}"
        );
    }
    let topics = [
        "env",
        "binds",
        "gpu",
        "apptainer",
        "exit-codes",
        "exec",
        "pull",
    ];
    let help_bash = words(bash("gpurun help ''"));
    let help_fish = words(fish("gpurun help "));
    let commands_bash = words(bash("gpurun ''"));
    let commands_fish = words(fish("gpurun "));
    for t in topics {
        assert!(
            help_bash.iter().any(|w| w == t),
            "bash help {t}: {help_bash:?}"
        );
        assert!(
            help_fish.iter().any(|w| w == t),
            "fish help {t}: {help_fish:?}"
        );
    }
    assert!(
        commands_bash.iter().any(|w| w == "completions"),
        "{commands_bash:?}"
    );
    for hidden in ["hold", "man"] {
        for list in [&help_bash, &help_fish, &commands_bash, &commands_fish] {
            assert!(!list.iter().any(|w| w == hidden), "{hidden} in {list:?}");
        }
    }
    assert!(
        commands_fish.iter().any(|w| w == "exec"),
        "{commands_fish:?}"
    );
    // zsh: the script parses, and an IMAGE completes image files
    run("zsh", format!("zsh -n {}", root.join("_gpurun").display()));
    let z = std::fs::read_to_string(root.join("_gpurun")).unwrap();
    assert_eq!(
        z.matches(r#":image -- The image:_files -g "*.(sqsh|sif|squashfs|sqfs)"'"#)
            .count(),
        3
    );
}

/// gpurun ARGS… as the test user in a private mount namespace where /dev/fuse is /dev/null:
/// it opens, and the kernel refuses to mount it (EINVAL), as with another device in its place.
fn with_fuse_replaced(cache: &Path, args: &[&str]) -> Output {
    let (uid, gid) = test_ids();
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --bind /dev/null /dev/fuse && exec "$@""#)
        .arg("sh")
        .arg("setpriv")
        .args([format!("--reuid={uid}"), format!("--regid={gid}")])
        .args(["--init-groups", "--", "env", "-i", "PATH=/usr/bin:/bin"])
        .arg(format!("HOME=/home/{TEST_USER}"))
        .arg(format!("GPURUN_CACHEDIR={}", cache.display()))
        .arg(gpurun_bin())
        .args(args)
        .current_dir("/")
        .output()
        .unwrap()
}

#[test]
fn fuse_that_cannot_be_mounted_falls_back_to_an_extracted_copy() {
    if !is_root() {
        return; // needs a private mount namespace to replace /dev/fuse
    }
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let cache = s.join("cache");
    let i = img.to_str().unwrap();
    for round in 0..2 {
        let o = with_fuse_replaced(&cache, &["exec", i, "sh", "-c", "head -1 /etc/passwd"]);
        assert!(o.status.success(), "round {round}: {}", stderr(&o));
        assert_eq!(stdout(&o), "root:x:0:0:root:/root:/bin/sh\n");
        let want = format!(
            "gpurun: /dev/fuse cannot be mounted (mount FUSE on /tmp: EINVAL: Invalid argument); \
             using an extracted copy of {i} under {}/rootfs (made once)\n",
            cache.display()
        );
        assert_eq!(stderr(&o), want, "round {round}");
    }
    let kept = std::fs::read_dir(cache.join("rootfs")).unwrap().count();
    assert_eq!(kept, 1, "extracted once");

    // doctor mounts FUSE for real, so it sees what the start saw
    let o = with_fuse_replaced(&cache, &["doctor", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let fuse = v
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "/dev/fuse")
        .unwrap()
        .clone();
    assert_eq!(fuse["status"], "warn", "{fuse}");
    let detail = fuse["detail"].as_str().unwrap();
    assert!(
        detail
            .contains("mounting FUSE in a user namespace failed (mount FUSE on /tmp/fuse: EINVAL"),
        "{detail}"
    );
    assert!(fuse["fix"].as_str().unwrap().contains("10,229"), "{fuse}");
}

#[test]
fn a_directory_image_whose_group_is_root() {
    if !is_root() {
        return; // root extracts the image, as `sudo tar x` does; `chown -R user` keeps group 0
    }
    let s = Scratch::new();
    let root = s.join("sandbox");
    busybox_rootfs(&root);
    let (uid, _) = test_ids();
    run_ok(
        Command::new("chown")
            .arg("-R")
            .arg(uid.to_string())
            .arg(&root),
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(root.join("usr")).unwrap().gid(), 0);
    std::fs::create_dir(s.join("data")).unwrap();
    std::fs::write(s.join("data/f"), "data\n").unwrap();
    let r = root.to_str().unwrap();
    // mount points below /home, /usr and /etc, whose copy-up the kernel refuses (EOVERFLOW)
    let bind = format!("{}:/usr/share/data:ro", s.join("data").display());
    let script = "grep -c ^gpuruntest: /etc/passwd; cat /usr/share/data/f; cd && pwd";
    let out = out_ok(&["exec", "--bind", &bind, r, "sh", "-c", script], &[]);
    assert_eq!(out, format!("1\ndata\n/home/{TEST_USER}\n"));
    let script = "echo new > /etc/new && cat /etc/new";
    let out = out_ok(&["exec", "--writable-tmpfs", r, "sh", "-c", script], &[]);
    assert_eq!(out, "new\n");
    // the image directory is as it was
    for p in ["usr/share", "home/gpuruntest", "etc/new"] {
        assert!(!root.join(p).exists(), "{p} made in the image");
    }
}

#[test]
fn writable_sandbox_and_persistent_overlay() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let img = img.to_str().unwrap();
    let sandbox = s.join("sandbox");
    busybox_rootfs(&sandbox);
    std::fs::create_dir(s.join("ov")).unwrap();
    s.chown_all();
    let sb = sandbox.to_str().unwrap();
    // --writable: changes go to the directory itself
    let out = out_ok(
        &[
            "exec",
            "-w",
            sb,
            "sh",
            "-c",
            "echo kept > /etc/kept; rm /bin/ls; echo ok",
        ],
        &[],
    );
    assert_eq!(out, "ok\n");
    assert_eq!(
        std::fs::read_to_string(sandbox.join("etc/kept")).unwrap(),
        "kept\n"
    );
    assert!(!sandbox.join("bin/ls").exists());
    let o = with_env(&["exec", sb, "sh", "-c", "echo x > /etc/x"], &[]);
    assert!(
        stderr(&o).contains("Read-only file system"),
        "read-only without -w: {}",
        stderr(&o)
    );
    one_line(
        &with_env(&["exec", "--writable", img, "true"], &[]),
        125,
        &format!(
            "--writable needs a sandbox directory image; {img} is read-only: use --writable-tmpfs"
        ),
    );
    one_line(
        &with_env(&["exec", "-w", "--writable-tmpfs", sb, "true"], &[]),
        125,
        "--writable, --writable-tmpfs and --overlay each say where changes go: give one",
    );

    // --overlay DIR: changes kept in DIR/upper from one run to the next; DIR:ro reads them
    let ov = s.join("ov");
    let o = ov.to_str().unwrap();
    let script = "echo 1 > /etc/p; rm /bin/ls; echo ok";
    assert_eq!(
        out_ok(&["exec", "--overlay", o, img, "sh", "-c", script], &[]),
        "ok\n"
    );
    assert_eq!(
        std::fs::read_to_string(ov.join("upper/etc/p")).unwrap(),
        "1\n"
    );
    let script = "cat /etc/p; test -e /bin/ls || echo gone; echo 2 >> /etc/p; cat /etc/p";
    assert_eq!(
        out_ok(&["exec", "-o", o, img, "sh", "-c", script], &[]),
        "1\ngone\n1\n2\n"
    );
    let ro = format!("{o}:ro");
    let script = "cat /etc/p; echo 3 > /etc/p || echo refused";
    let out = with_env(&["exec", "--overlay", &ro, img, "sh", "-c", script], &[]);
    assert_eq!(stdout(&out), "1\n2\nrefused\n", "{}", stderr(&out));
    // the image itself is as it was
    assert_eq!(
        out_ok(
            &["exec", img, "sh", "-c", "test -e /etc/p || ls /bin/ls"],
            &[]
        ),
        "/bin/ls\n"
    );
    let missing = s.join("nope");
    one_line(
        &with_env(
            &["exec", "--overlay", missing.to_str().unwrap(), img, "true"],
            &[],
        ),
        125,
        &format!(
            "--overlay {}: no such directory; create it",
            missing.display()
        ),
    );
    one_line(
        &with_env(&["exec", "--overlay", "/etc", img, "true"], &[]),
        125,
        "--overlay /etc: cannot create upper/ in it (Permission denied",
    );
    one_line(
        &with_env(&["exec", "--overlay", &format!("{o}:rx"), img, "true"], &[]),
        125,
        "use DIR or DIR:ro",
    );
}

#[test]
fn containall_has_its_own_pid_and_ipc_namespaces() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let img = img.to_str().unwrap();
    let host = |ns: &str| std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
    let (pid, ipc) = (host("pid"), host("ipc"));
    let script =
        "echo $$; readlink /proc/self/ns/pid; readlink /proc/self/ns/ipc; ls /proc | grep -c '^[0-9]'";
    let out = out_ok(&["exec", "-C", img, "sh", "-c", script], &[]);
    let l: Vec<&str> = out.lines().collect();
    // gpurun's supervisor is the namespace's init (1), the command 2; ls and grep 3 and 4
    assert_eq!(l[0], "2", "{out}");
    assert_ne!(Path::new(l[1]), pid, "{out}");
    assert_ne!(Path::new(l[2]), ipc, "{out}");
    assert_eq!(
        l[3], "4",
        "only the container's processes in its /proc: {out}"
    );
    // without it, the host's
    let script = "readlink /proc/self/ns/pid; readlink /proc/self/ns/ipc";
    let out = out_ok(&["exec", img, "sh", "-c", script], &[]);
    assert_eq!(out, format!("{}\n{}\n", pid.display(), ipc.display()));
    // a --containall container's processes end with it
    let out = out_ok(
        &["exec", "-C", img, "sh", "-c", "sleep 100 & echo started"],
        &[],
    );
    assert_eq!(out, "started\n");
}

#[test]
fn exec_save_writes_image_and_changes_as_a_new_image() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let img = img.to_str().unwrap();
    let out = s.join("saved.sqsh");
    let o = out.to_str().unwrap();
    let script = "echo saved > /etc/saved; rm /bin/ls; mkdir -p /opt/d; echo f > /opt/d/f";
    let done = with_env(&["exec", "--save", o, img, "sh", "-c", script], &[]);
    assert!(done.status.success(), "{}", stderr(&done));
    // the changes, the image, and its metadata (entrypoint /bin/echo, its environment)
    let check = "cat /etc/saved /opt/d/f; test -e /bin/ls || echo gone; echo $CUDA_VERSION";
    assert_eq!(
        out_ok(&["exec", o, "sh", "-c", check], &[]),
        "saved\nf\ngone\n12.4.1\n"
    );
    assert_eq!(
        out_ok(&["run", o, "from", "entrypoint"], &[]),
        "from entrypoint\n"
    );
    // the mount points made for the container (its home, the cwd) are not part of it
    let list = run_ok(Command::new("unsquashfs").args(["-l", "-d", "", o]));
    let list = stdout(&list);
    assert!(!list.contains(&format!("home/{TEST_USER}")), "{list}");
    assert!(
        !list.contains(".wh.") && list.contains("/opt/d/f"),
        "{list}"
    );
    // the image is unchanged
    assert_eq!(out_ok(&["exec", img, "ls", "/bin/ls"], &[]), "/bin/ls\n");

    one_line(
        &with_env(&["exec", "--save", o, img, "true"], &[]),
        125,
        &format!("--save {o}: it exists already; remove it or choose another name"),
    );
    one_line(
        &with_env(&["exec", "--save", "/proc/x.sqsh", img, "true"], &[]),
        125,
        "--save /proc/x.sqsh: its directory cannot be written",
    );
    // a command that fails saves nothing, and leaves nothing beside OUT
    let out2 = s.join("failed.sqsh");
    let o2 = out2.to_str().unwrap();
    let failed = with_env(&["exec", "--save", o2, img, "sh", "-c", "exit 3"], &[]);
    assert_eq!(failed.status.code(), Some(3), "{}", stderr(&failed));
    assert!(
        stderr(&failed).contains("is not written"),
        "{}",
        stderr(&failed)
    );
    let left: Vec<_> = std::fs::read_dir(s.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') || n.starts_with("failed"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // nor anything in the cache
    let (uid, _) = test_ids();
    let kept = std::fs::read_dir(format!("/var/tmp/gpurun-{uid}/save")).map_or(0, |d| d.count());
    assert_eq!(kept, 0, "changes' directories removed");
}

/// The root's file system type, from inside.
const ROOT_FS: &str = "grep ' / / ' /proc/self/mountinfo | sed 's/.* - //' | cut -d' ' -f1";

/// --overlay DIR[:ro] with the kernel's overlayfs and with fuse-overlayfs (the site's
/// overlay_driver, here GPURUN_OVERLAY_DRIVER): changes and deletions kept from one run to the
/// next, read without writing with :ro, and either driver reads the other's.
#[test]
fn overlay_with_either_driver() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let img = img.to_str().unwrap();
    for d in ["kernel", "fuse-overlayfs"] {
        std::fs::create_dir(s.join(format!("ov-{d}"))).unwrap();
    }
    s.chown_all();
    let run = |driver: &str, opts: &[&str], script: &str| {
        let mut args = vec!["exec"];
        args.extend_from_slice(opts);
        args.extend([img, "sh", "-c", script]);
        out_ok(&args, &[("GPURUN_OVERLAY_DRIVER", driver)])
    };
    for (driver, fs) in [
        ("kernel", "overlay"),
        ("fuse-overlayfs", "fuse.fuse-overlayfs"),
    ] {
        let dir = s.join(format!("ov-{driver}"));
        let ov = dir.to_str().unwrap();
        let script = format!("{ROOT_FS}; echo 1 > /etc/p; rm /bin/ls; mkdir -p /opt/d; echo ok");
        assert_eq!(
            run(driver, &["--overlay", ov], &script),
            format!("{fs}\nok\n")
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("upper/etc/p")).unwrap(),
            "1\n"
        );
        let script = "cat /etc/p; test -e /bin/ls || echo gone; echo 2 >> /etc/p; rmdir /opt/d; \
                      test -d /opt/d || echo d-gone";
        assert_eq!(
            run(driver, &["-o", ov], script),
            "1\ngone\nd-gone\n",
            "{driver}"
        );
        let script = format!("{ROOT_FS}; cat /etc/p; echo 3 > /etc/p 2>/dev/null || echo refused");
        let ro = format!("{ov}:ro");
        assert_eq!(
            run(driver, &["--overlay", &ro], &script),
            format!("{fs}\n1\n2\nrefused\n"),
            "{driver}"
        );
    }
    // the one driver takes the other's overlay directory
    let script = "cat /etc/p; test -e /bin/ls || echo gone; test -d /opt/d || echo d-gone";
    for (driver, other) in [("kernel", "fuse-overlayfs"), ("fuse-overlayfs", "kernel")] {
        let ov = s.join(format!("ov-{other}"));
        let out = run(driver, &["--overlay", ov.to_str().unwrap()], script);
        assert_eq!(out, "1\n2\ngone\nd-gone\n", "{driver} on {other}'s");
    }
    // --writable-tmpfs with fuse-overlayfs
    let script = format!("{ROOT_FS}; echo x > /etc/x; cat /etc/x");
    let out = run("fuse-overlayfs", &["--writable-tmpfs"], &script);
    assert_eq!(out, "fuse.fuse-overlayfs\nx\n");
    one_line(
        &with_env(&["exec", img, "true"], &[("GPURUN_OVERLAY_DRIVER", "fuse")]),
        125,
        "GPURUN_OVERLAY_DRIVER=fuse: overlay_driver: unknown driver 'fuse'; use one of auto, kernel, fuse-overlayfs",
    );
}

/// The site's writable_root (pyxis sites: enroot's ENROOT_ROOTFS_WRITABLE) makes the root
/// writable, as --writable-tmpfs; --read-only (the plugin's --container-readonly) wins.
#[test]
fn read_only_and_the_sites_writable_root() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let img = img.to_str().unwrap();
    let site = s.join("gpurun.toml");
    std::fs::write(&site, "writable_root = true\n").unwrap();
    let site = site.to_str().unwrap();
    let probe = "echo x > /etc/x 2>/dev/null && echo written || echo refused";
    // (options, variables, what the probe says)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (&[], &[], "refused"),
        (&[], &[("GPURUN_SITE_CONFIG", site)], "written"),
        (&["--read-only"], &[("GPURUN_SITE_CONFIG", site)], "refused"),
        (
            &[],
            &[("GPURUN_SITE_CONFIG", site), ("GPURUN_READ_ONLY", "1")],
            "refused",
        ),
        (&[], &[("GPURUN_WRITABLE_ROOT", "yes")], "written"),
        (
            &[],
            &[("GPURUN_SITE_CONFIG", site), ("GPURUN_WRITABLE_ROOT", "0")],
            "refused",
        ),
        (&["--read-only"], &[], "refused"),
    ];
    for (opts, env, want) in cases {
        let mut args = vec!["exec"];
        args.extend_from_slice(opts);
        args.extend([img, "sh", "-c", probe]);
        assert_eq!(out_ok(&args, env), format!("{want}\n"), "{opts:?} {env:?}");
    }
    one_line(
        &with_env(&["exec", "--read-only", "--writable-tmpfs", img, "true"], &[]),
        125,
        "--read-only keeps the root as the image has it: leave out --writable, --writable-tmpfs, --overlay",
    );
    let shown = out_ok(&["config", "show"], &[("GPURUN_SITE_CONFIG", site)]);
    assert!(
        shown.contains("writable_root        true") && shown.contains(site),
        "{shown}"
    );
}

/// -p/--pid, -i/--ipc and -n/--net (--network none), one by one: each namespace of the
/// container's own, and only that one.
#[test]
fn pid_ipc_and_network_namespaces_one_by_one() {
    let s = Scratch::new();
    let img = gpurun_image(&s);
    let img = img.to_str().unwrap();
    let host = |ns: &str| std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
    let host: Vec<String> = ["pid", "ipc", "net"]
        .map(|n| host(n).display().to_string())
        .to_vec();
    let shm = format!("/dev/shm/gpurun-test-{}", std::process::id());
    std::fs::write(&shm, "host").unwrap();
    let script = format!(
        "for n in pid ipc net; do readlink /proc/self/ns/$n; done; echo $$; \
         test -e {shm} && echo host-shm || echo own-shm"
    );
    // (options, variables, own pid, ipc, net namespace)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], [bool; 3]);
    let cases: &[Case] = &[
        (&[], &[], [false, false, false]),
        (&["-p"], &[], [true, false, false]),
        (&["--pid"], &[], [true, false, false]),
        (&[], &[("GPURUN_PID", "1")], [true, false, false]),
        (&["-i"], &[], [false, true, false]),
        (&["--ipc"], &[], [false, true, false]),
        (&[], &[("GPURUN_IPC", "1")], [false, true, false]),
        (&["-n"], &[], [false, false, true]),
        (&["--net", "--network", "none"], &[], [false, false, true]),
        (&["--network", "none"], &[], [false, false, true]),
        (&[], &[("GPURUN_NET", "on")], [false, false, true]),
        (&["-C"], &[], [true, true, false]),
    ];
    for (opts, env, own) in cases {
        let mut args = vec!["exec"];
        args.extend_from_slice(opts);
        args.extend([img, "sh", "-c", &script]);
        let out = out_ok(&args, env);
        let l: Vec<&str> = out.lines().collect();
        for (i, ns) in ["pid", "ipc", "net"].iter().enumerate() {
            assert_eq!(l[i] != host[i], own[i], "{ns} of {opts:?} {env:?}: {out}");
        }
        // the PID namespace's init is gpurun's supervisor; the command is 2
        assert_eq!(l[3] == "2", own[0], "{opts:?} {env:?}: {out}");
        let want = if own[1] { "own-shm" } else { "host-shm" };
        assert_eq!(l[4], want, "{opts:?} {env:?}: {out}");
    }
    std::fs::remove_file(&shm).unwrap();

    // --net: only loopback, up; the host's loopback is out of reach
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || listener.incoming().for_each(drop));
    let script = format!(
        "grep -c : /proc/net/dev; grep -c '^ *lo:' /proc/net/dev; ip -o link | grep -o 'lo: <[A-Z,_]*>'; \
         nc 127.0.0.1 {port} </dev/null 2>/dev/null && echo reached || echo unreachable"
    );
    let out = out_ok(&["exec", "--net", img, "sh", "-c", &script], &[]);
    assert_eq!(out, "1\n1\nlo: <LOOPBACK,UP,LOWER_UP>\nunreachable\n");
    let out = out_ok(&["exec", img, "sh", "-c", &script], &[]);
    assert!(
        out.ends_with("\nreached\n"),
        "the host's network without --net: {out}"
    );
    one_line(
        &with_env(&["exec", "--net", "--network", "bridge", img, "true"], &[]),
        125,
        "--network bridge: gpurun has only none (a network namespace of the container's own, loopback only)",
    );
}

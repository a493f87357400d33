//! Options of Apptainer and pyxis that gpurun does not have: typed on gpurun, the error says
//! what to use instead, not clap's nearest spelling (`--nvccli`: "a similar argument exists:
//! '--nv'"). docs/apptainer-and-pyxis.md has the whole table, with the options gpurun does have.

/// Whose option it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peer {
    Apptainer,
    /// An srun option of pyxis, which gpurun's SPANK plugin offers under the same name.
    Pyxis,
    /// An srun option of pyxis that gpurun's SPANK plugin does not offer (yet).
    PyxisOnly,
}

/// (option, whose, commands it belongs to, what to use in gpurun).
type Entry = (&'static str, Peer, &'static [&'static str], &'static str);

const LAUNCH: &[&str] = &["exec", "run", "shell"];
const PULL: &[&str] = &["pull"];
const PULLS: &[&str] = &["pull", "inspect"];
const ANY: &[&str] = &["exec", "run", "shell", "pull", "inspect"];

const NO_NS: &str =
    "gpurun has --net (--network none): a network namespace with loopback only; no CNI networks";
const NOT_APPLICABLE: &str = "gpurun runs as you, with no privilege to keep or drop; leave it out";
const CGROUPS: &str =
    "gpurun sets no limits of its own: use Slurm's (srun --cpus-per-task, --mem) or systemd-run";

const TABLE: &[Entry] = &[
    // Apptainer: GPUs and devices
    ("--nvccli", Peer::Apptainer, LAUNCH, "gpurun sets up NVIDIA GPUs itself (--nv, on where a driver is present); for nvidia-container-toolkit's view use its CDI spec: --device nvidia.com/gpu=all"),
    ("--rocm", Peer::Apptainer, LAUNCH, "gpurun has no AMD ROCm support; a device with a CDI spec can be given with --device VENDOR/CLASS=NAME"),
    ("--no-rocm", Peer::Apptainer, LAUNCH, "gpurun has no AMD ROCm support; leave it out"),
    ("--intel-hpu", Peer::Apptainer, LAUNCH, "gpurun has no Intel Gaudi support; a device with a CDI spec can be given with --device VENDOR/CLASS=NAME"),
    ("--compat32", Peer::Apptainer, LAUNCH, "gpurun binds no 32-bit driver libraries"),
    ("--cdi-dirs", Peer::Apptainer, LAUNCH, "set GPURUN_CDI_SPEC_DIRS=/a:/b (or cdi_spec_dirs in the config file)"),
    // Apptainer: namespaces
    ("--userns", Peer::Apptainer, LAUNCH, "gpurun always runs in a user namespace of your own; leave it out"),
    ("-u", Peer::Apptainer, LAUNCH, "(Apptainer's --userns) gpurun always runs in a user namespace of your own; leave it out"),
    ("--uts", Peer::Apptainer, LAUNCH, "use --hostname NAME (a UTS namespace with that name)"),
    ("--network-args", Peer::Apptainer, LAUNCH, NO_NS),
    ("--netns-path", Peer::Apptainer, LAUNCH, NO_NS),
    ("--dns", Peer::Apptainer, LAUNCH, "the host's /etc/resolv.conf is used; --bind FILE:/etc/resolv.conf for another"),
    ("--sharens", Peer::Apptainer, LAUNCH, "gpurun's Slurm plugin starts one container per node per step that the tasks join (srun --container-image)"),
    ("--no-pid", Peer::Apptainer, LAUNCH, "gpurun shares the host's PID namespace unless --pid or --containall; leave it out"),
    ("--no-init", Peer::Apptainer, LAUNCH, "gpurun runs no shim process in the container; leave it out"),
    // Apptainer: file systems
    ("--scratch", Peer::Apptainer, LAUNCH, "--bind a host directory to the path, or --contain for a private /tmp"),
    ("-S", Peer::Apptainer, LAUNCH, "(Apptainer's --scratch) --bind a host directory to the path, or --contain for a private /tmp"),
    ("--workdir", Peer::Apptainer, LAUNCH, "--contain gives /tmp and /var/tmp in memory; --bind DIR:/tmp puts /tmp on disk"),
    ("-W", Peer::Apptainer, LAUNCH, "(Apptainer's --workdir) --contain gives /tmp and /var/tmp in memory; --bind DIR:/tmp puts /tmp on disk"),
    ("--mount", Peer::Apptainer, LAUNCH, "use --bind SRC[:DST[:FLAGS]], or --tmpfs DST[:OPTS]"),
    ("--fusemount", Peer::Apptainer, LAUNCH, "mount the FUSE file system on the host and --bind its mount point"),
    ("--containlibs", Peer::Apptainer, LAUNCH, "--bind the libraries' directory and set LD_LIBRARY_PATH with --env"),
    ("--underlay", Peer::Apptainer, LAUNCH, "gpurun makes bind mount points itself; leave it out"),
    ("--unsquash", Peer::Apptainer, LAUNCH, "gpurun extracts the image by itself where FUSE is unavailable; leave it out"),
    ("--disable-cache", Peer::Apptainer, ANY, "set GPURUN_CACHEDIR to another directory, or run gpurun cache clean afterwards"),
    // Apptainer: environment and process
    ("--no-env", Peer::Apptainer, LAUNCH, "use --cleanenv and pass what you need with --env, or GPURUNENV_NAME=VALUE"),
    ("--no-eval", Peer::Apptainer, LAUNCH, "gpurun does not run a shell to evaluate variables or arguments; leave it out"),
    ("--no-umask", Peer::Apptainer, LAUNCH, "set the umask in the command (sh -c 'umask 022; …')"),
    ("--compat", Peer::Apptainer, LAUNCH, "use --containall --writable-tmpfs"),
    ("--app", Peer::Apptainer, LAUNCH, "gpurun does not run SCIF apps: exec the app's program directly"),
    ("--boot", Peer::Apptainer, LAUNCH, "gpurun does not boot an init system in the container"),
    ("--keep-privs", Peer::Apptainer, LAUNCH, NOT_APPLICABLE),
    ("--no-privs", Peer::Apptainer, LAUNCH, NOT_APPLICABLE),
    ("--add-caps", Peer::Apptainer, LAUNCH, NOT_APPLICABLE),
    ("--drop-caps", Peer::Apptainer, LAUNCH, NOT_APPLICABLE),
    ("--allow-setuid", Peer::Apptainer, LAUNCH, NOT_APPLICABLE),
    ("--security", Peer::Apptainer, LAUNCH, NOT_APPLICABLE),
    ("--apply-cgroups", Peer::Apptainer, LAUNCH, CGROUPS),
    ("--cpus", Peer::Apptainer, LAUNCH, CGROUPS),
    ("--cpu-shares", Peer::Apptainer, LAUNCH, CGROUPS),
    ("--cpuset-cpus", Peer::Apptainer, LAUNCH, CGROUPS),
    ("--cpuset-mems", Peer::Apptainer, LAUNCH, CGROUPS),
    ("--memory", Peer::Apptainer, LAUNCH, CGROUPS),
    ("--memory-reservation", Peer::Apptainer, LAUNCH, CGROUPS),
    ("--memory-swap", Peer::Apptainer, LAUNCH, CGROUPS),
    ("--oom-kill-disable", Peer::Apptainer, LAUNCH, CGROUPS),
    ("--pids-limit", Peer::Apptainer, LAUNCH, CGROUPS),
    ("--blkio-weight", Peer::Apptainer, LAUNCH, CGROUPS),
    ("--blkio-weight-device", Peer::Apptainer, LAUNCH, CGROUPS),
    ("--ignore-subuid", Peer::Apptainer, LAUNCH, "gpurun uses no /etc/subuid ranges; leave it out"),
    ("--ignore-fakeroot-command", Peer::Apptainer, LAUNCH, "gpurun's --fakeroot is a user namespace mapping only; leave it out"),
    ("--ignore-userns", Peer::Apptainer, LAUNCH, "gpurun needs user namespaces (gpurun doctor says whether this node has them)"),
    ("--dmtcp-launch", Peer::Apptainer, LAUNCH, "gpurun has no DMTCP support"),
    ("--dmtcp-restart", Peer::Apptainer, LAUNCH, "gpurun has no DMTCP support"),
    // Apptainer: registries
    ("--docker-login", Peer::Apptainer, PULLS, "log in with docker login or podman login, or set GPURUN_DOCKER_USERNAME and GPURUN_DOCKER_PASSWORD"),
    ("--docker-username", Peer::Apptainer, PULLS, "set GPURUN_DOCKER_USERNAME (and GPURUN_DOCKER_PASSWORD)"),
    ("--docker-password", Peer::Apptainer, PULLS, "set GPURUN_DOCKER_PASSWORD (and GPURUN_DOCKER_USERNAME)"),
    ("--authfile", Peer::Apptainer, PULLS, "set DOCKER_CONFIG=DIR to use DIR/config.json"),
    ("--nohttps", Peer::Apptainer, PULLS, "use --insecure"),
    ("--no-https", Peer::Apptainer, PULLS, "use --insecure"),
    ("--arch", Peer::Apptainer, PULLS, "use --platform linux/ARCH"),
    ("--name", Peer::Apptainer, PULL, "use -o FILE"),
    ("--sandbox", Peer::Apptainer, PULL, "gpurun writes one .sqsh file; unsquashfs -d DIR FILE.sqsh makes a directory of it"),
    ("--dir", Peer::Apptainer, PULL, "use -o DIR (the image is written there as NAME_TAG.sqsh)"),
    // pyxis, as gpurun's SPANK plugin offers them
    ("--container-image", Peer::Pyxis, ANY, "on the gpurun command line the image comes first: gpurun exec IMAGE CMD"),
    ("--container-mounts", Peer::Pyxis, ANY, "on the gpurun command line use --bind SRC[:DST[:FLAGS]], and --tmpfs DST for tmpfs:DST"),
    ("--container-workdir", Peer::Pyxis, ANY, "on the gpurun command line use --pwd DIR"),
    ("--container-env", Peer::Pyxis, ANY, "on the gpurun command line the host's variables are passed already; --env K=V sets one"),
    ("--container-writable", Peer::Pyxis, ANY, "on the gpurun command line use --writable-tmpfs"),
    ("--container-remap-root", Peer::Pyxis, ANY, "on the gpurun command line use --fakeroot"),
    ("--no-container-mount-home", Peer::Pyxis, ANY, "on the gpurun command line use --no-home"),
    ("--container-mount-home", Peer::Pyxis, ANY, "on the gpurun command line the home directory is bound by default; --no-home leaves it out"),
    ("--no-container-remap-root", Peer::Pyxis, ANY, "on the gpurun command line you run as yourself by default; leave it out"),
    ("--container-readonly", Peer::Pyxis, ANY, "on the gpurun command line use --read-only (the root is read-only unless the site sets writable_root)"),
    ("--container-entrypoint", Peer::Pyxis, ANY, "on the gpurun command line gpurun run IMAGE starts the image's entrypoint"),
    ("--no-container-entrypoint", Peer::Pyxis, ANY, "on the gpurun command line gpurun exec IMAGE CMD runs CMD without it"),
    ("--container-unshare", Peer::Pyxis, ANY, "on the gpurun command line --hostname NAME, --net and --ipc give the container UTS, network and IPC namespaces of its own"),
    ("--container-save", Peer::Pyxis, ANY, "on the gpurun command line use gpurun exec --save OUT.sqsh IMAGE CMD"),
    // pyxis, not in gpurun's plugin
    ("--container-name", Peer::PyxisOnly, ANY, "not yet: named containers kept between steps"),
    ("--container-entrypoint-log", Peer::PyxisOnly, ANY, "gpurun has no entrypoint log"),
];

/// What to say for the unknown option `typed` (as clap reports it: `--name`, `--name=value`,
/// `-x`) of command `sub`, when it is Apptainer's or pyxis'.
pub fn advice(sub: Option<&str>, typed: &str) -> Option<String> {
    let name = typed.split_once('=').map_or(typed, |(n, _)| n);
    let sub = sub.unwrap_or("");
    let (name, peer, _, instead) = TABLE
        .iter()
        .find(|(n, _, cmds, _)| *n == name && cmds.contains(&sub))?;
    Some(match peer {
        Peer::Apptainer => format!("{name} is an Apptainer option gpurun does not have: {instead}"),
        Peer::Pyxis => format!(
            "{name} is an srun option of gpurun's Slurm plugin (srun {name}=… as with pyxis); {instead}"
        ),
        Peer::PyxisOnly => format!("{name} is a pyxis option gpurun does not have: {instead}"),
    })
}

/// The subcommand of a gpurun command line: its first word that names one.
pub fn subcommand(args: &[String], names: &[&str]) -> Option<String> {
    args.iter()
        .skip(1)
        .find(|a| names.contains(&a.as_str()))
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_table() {
        // (command, typed, what the line says)
        let cases: &[(&str, &str, Option<&str>)] = &[
            (
                "exec",
                "--nvccli",
                Some("Apptainer option gpurun does not have: gpurun sets up NVIDIA GPUs itself"),
            ),
            ("run", "--userns", Some("always runs in a user namespace")),
            ("shell", "-u", Some("(Apptainer's --userns)")),
            ("exec", "--rocm", Some("no AMD ROCm support")),
            (
                "exec",
                "--fusemount=host:sshfs x /y",
                Some("--bind its mount point"),
            ),
            (
                "exec",
                "--netns-path",
                Some("gpurun has --net (--network none)"),
            ),
            (
                "exec",
                "--container-image=x.sqsh",
                Some("srun option of gpurun's Slurm plugin (srun --container-image=…"),
            ),
            ("run", "--container-mounts", Some("use --bind")),
            (
                "exec",
                "--container-name",
                Some("pyxis option gpurun does not have: not yet"),
            ),
            ("pull", "--docker-login", Some("docker login")),
            ("pull", "--arch", Some("--platform linux/ARCH")),
            // -o is pull's own; --arch is not an option of exec
            ("pull", "-o", None),
            ("exec", "--arch", None),
            ("exec", "--no-such-thing", None),
        ];
        for (sub, typed, want) in cases {
            let got = advice(Some(sub), typed);
            match (want, &got) {
                (Some(w), Some(g)) => assert!(g.contains(w), "{sub} {typed}: {g}"),
                (None, None) => {}
                _ => panic!("{sub} {typed}: {got:?}"),
            }
        }
        // every entry names a replacement, and no option is listed twice for a command
        for (i, (n, _, cmds, instead)) in TABLE.iter().enumerate() {
            assert!(!instead.is_empty(), "{n}");
            for (m, _, other, _) in &TABLE[i + 1..] {
                assert!(
                    n != m || !cmds.iter().any(|c| other.contains(c)),
                    "{n} twice"
                );
            }
        }
    }

    #[test]
    fn no_entry_shadows_an_option_of_gpurun() {
        let cmd = super::super::documented();
        for (name, _, cmds, _) in TABLE {
            for sub in *cmds {
                let s = cmd.find_subcommand(sub).unwrap();
                let taken = s.get_arguments().any(|a| {
                    a.get_long().is_some_and(|l| format!("--{l}") == *name)
                        || a.get_short().is_some_and(|c| format!("-{c}") == *name)
                        || a.get_all_aliases()
                            .into_iter()
                            .flatten()
                            .any(|l| format!("--{l}") == *name)
                });
                assert!(!taken, "{name} is an option of gpurun {sub}");
            }
        }
    }

    #[test]
    fn subcommand_of_a_command_line() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let names = ["exec", "run"];
        assert_eq!(
            subcommand(&v(&["gpurun", "-v", "exec", "x"]), &names),
            Some("exec".into())
        );
        assert_eq!(subcommand(&v(&["gpurun", "--nvccli"]), &names), None);
    }
}

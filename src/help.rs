//! `gpurun help TOPIC`: the things a man page of options does not explain.

pub const TOPICS: &[(&str, &str)] = &[
    ("env", ENV),
    ("binds", BINDS),
    ("gpu", GPU),
    ("slurm", SLURM),
    ("exit-codes", EXIT_CODES),
    ("config", CONFIG),
    ("images", IMAGES),
    ("apptainer", APPTAINER),
];

pub fn topic(name: &str) -> Option<&'static str> {
    TOPICS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

const ENV: &str = "\
Environment inside the container, lowest to highest precedence:
  1. the host's environment, minus host-specific variables (PATH, LD_LIBRARY_PATH, LD_PRELOAD,
     PYTHONPATH, PS1, …) and registry credentials; --cleanenv (-e) drops the host's entirely
  2. the image's: the OCI config's Env (gpurun images), /etc/environment (enroot images),
     the assignments in /.singularity.d/env/*.sh (Apptainer images)
  3. --env-file FILE (KEY=VALUE lines, taken literally: no $VAR expansion, unlike Apptainer's,
     which runs the file as a shell script on the host)
  4. GPURUNENV_K=V in the host environment (like APPTAINERENV_K); the old form GPURUN_ENV_K
     still works, with a warning (GPURUN_ENV_FILE is --env-file's variable, not FILE inside)
  5. --env K=V
  6. what gpurun sets: CUDA_VISIBLE_DEVICES (renumbered 0..n-1 for the GPUs bound), the driver's
     library and binary directories appended to LD_LIBRARY_PATH and PATH, the env of the CDI
     devices asked for with --device (whose GPUs the host's CUDA_VISIBLE_DEVICES does not narrow)
PATH defaults to /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin when nobody sets it.
--env splits as Apptainer's does: with one '=' the value is one variable, commas and all
(--env PATH=/a,b sets PATH to \"/a,b\"); with more it is a comma-separated list (--env A=1,B=2),
where a whole K=V in double quotes keeps its commas (--env '\"A=1,2\",B=3'). No backslash escapes.
Every option but the outputs (--save, --json, pull's -o) has a variable too (GPURUN_CLEANENV=1,
GPURUN_ENV=A=1,B=2, GPURUN_PWD=/w, …; the command line wins): gpurun help config.
";

const BINDS: &str = "\
Bind host paths into the container:
  -B, --bind SRC[:DST[:FLAGS]]   repeatable; comma-separated lists allowed (-B /a,/b:/c:ro)
  GPURUN_BIND=/a,/b:/c:ro        like APPTAINER_BIND, added to --bind
  binds = [..] in the site or user config file: default binds, added too
FLAGS are enroot's fstab flags joined with '+' (-B /data:/data:ro+nodev): ro, rw, nosuid, nodev,
noexec; the propagation private, slave (the host's mounts made under SRC later show inside),
shared, unbindable, and their r- forms (rslave: the submounts too); x-create=dir|file|auto (what
is made at DST where the image lacks it; auto: as SRC is). An unknown flag is an error.
  --tmpfs DST[:OPTS]             a fresh tmpfs at DST (repeatable): size=8G, mode=700, ro,
                                 noexec…, comma-separated (docker's --tmpfs)
Your --bind and --tmpfs mounts go shallower destinations first: --tmpfs /w -B /d:/w/d keeps both.
Bound by default: your home directory (not with --no-home; --contain gives an empty one in
memory) and the current directory when it is outside what is already bound (not with
--contain); --contain also gives a private /tmp and /var/tmp. SRC must exist on the host; DST must be an absolute path.
  -H, --home SRC[:DST]     SRC as the home directory, at DST inside (HOME=DST); also with --contain
  -C, --containall         --contain and --cleanenv
  --no-mount home,cwd,tmp  leave default mounts out; also bind-paths (the config files' binds),
                           a config-file bind's DST, /etc/hosts, /etc/localtime, /etc/resolv.conf;
                           hostfs is accepted (gpurun never binds the host's file systems)
--debug prints every mount of the plan: where, from what, read-only or not.
--dry-run prints the whole plan as JSON and runs nothing.
";

const GPU: &str = "\
GPU support is on when an NVIDIA driver is present (--nv forces it, --no-nv or GPURUN_NV=0
turns it off). gpurun binds only the GPUs this process may open (Slurm's device cgroup decides),
narrowed by --gpus, else CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, SLURM_STEP_GPUS /
SLURM_JOB_GPUS; CUDA_VISIBLE_DEVICES is renumbered 0..n-1 inside (UUIDs kept). The driver's
libraries (compute and utility; --nv-caps video,graphics for more) and tools (nvidia-smi, …)
appear in /.gpurun/nvidia (libraries as links into read-only binds of their host directories).
An image's NVIDIA_REQUIRE_CUDA (or CUDA_VERSION) is checked against the driver;
NVIDIA_DISABLE_REQUIRE=1 skips the check; /usr/local/cuda/compat in the image is used when
newer than the driver.
  gpurun gpus            what this process may use (NVML: name, UUID, memory, utilisation)
  gpurun doctor          whether the driver and devices are usable here
  --nv-driver-path P     extra ld.so.cache or directory with the driver's libraries
                         (GPURUN_NV_DRIVER_PATH, nv_driver_paths in the config)
CDI specs (nvidia-ctk cdi generate; in /etc/cdi, /var/run/cdi, or cdi_spec_dirs in the config,
GPURUN_CDI_SPEC_DIRS): --device nvidia.com/gpu=0|all|GPU-<uuid> (repeatable) picks devices as
podman does. Their device nodes, bind mounts and env are applied; hooks are reported and skipped.
CDI GPUs replace gpurun's choice of GPUs (--gpus with them is an error); gpurun still adds the
driver's libraries and tools unless --no-nv. A node the job may not open is refused.
";

const SLURM: &str = "\
Inside a Slurm job, plain srun works, no plugin needed:
  srun --gpus-per-task=1 gpurun exec --nv pytorch.sqsh python train.py
gpurun stays in the step's cgroup (Slurm's memory and device limits apply) and reads
SLURM_STEP_GPUS / CUDA_VISIBLE_DEVICES to pick the GPUs. Pull once on a login node (or in the job
to node-local disk) and point every rank at the same .sqsh file: one file on the parallel
filesystem, read through the page cache. The SPANK plugin (slurm/) adds pyxis-style options
(--container-image, --container-mounts, --container-workdir, --container-env,
--container-writable/-readonly, --[no-]container-remap-root, --[no-]container-mount-home,
--[no-]container-entrypoint, --container-unshare, --container-save, and pyxis's
PYXIS_CONTAINER_* variables) and starts one container per node per step that the tasks join.
";

/// Also the EXIT STATUS part of gpurun(1).
pub const EXIT_CODES: &str = "\
Every command returns 2 for a usage error (an unknown option, a missing argument).
exec, run, shell return the command's own exit status, or:
  125  gpurun itself failed (bad option value, unusable image, mount refused, GPUs asked for
       and no driver, …)
  126  the command exists in the container but cannot be executed
  127  the command was not found in the container
  128+N the command was killed by signal N
pull (and inspect docker://) return:
  0 success; 20 image, tag, platform or blob not found; 21 authentication refused or needed;
  22 registry unreachable or kept failing; 23 malformed image (digest mismatch, bad manifest or
  layer); 24 disk full; 25 podman:// with podman missing (not on PATH) or failing;
  130 interrupted (SIGINT/SIGTERM); 125 other failures
doctor returns 0 when this node can run containers, 1 when a check failed.
gpus returns 0 when it lists a GPU a container here can be given, 1 when none (no driver, no
  device node, or none this process may open).
Other commands return 0 on success and 125 on failure.
";

const CONFIG: &str = "\
Settings, later wins: /etc/gpurun/gpurun.toml (site; GPURUN_SITE_CONFIG names another),
~/.config/gpurun/config.toml (user; $XDG_CONFIG_HOME respected), environment, flags.
  binds = [\"/scratch\", \"/apps:/apps:ro\"]    GPURUN_BIND=/a,/b     (binds add up)
  nv_driver_paths = [\"/opt/nvidia/lib64\"]     GPURUN_NV_DRIVER_PATH=/x:/y
  cache_dir = \"/local/gpurun\"                 GPURUN_CACHEDIR
  allowed_registries = [\"nvcr.io\"]            GPURUN_ALLOWED_REGISTRIES=a,b  (empty: any)
  compression = \"zstd\"                        GPURUN_COMPRESSION
  pull_threads = 8                            GPURUN_PULL_THREADS  (threads that inflate a
                                              layer and compress the image; default: the
                                              CPUs this process may use)
  cdi_spec_dirs = [\"/etc/cdi\", \"/var/run/cdi\"]  GPURUN_CDI_SPEC_DIRS=/x:/y
  server_idle = \"10m\"                         GPURUN_SERVER_IDLE (0: a server per container)
  writable_root = true                        GPURUN_WRITABLE_ROOT=1  (a writable root by
                                              default, as --writable-tmpfs; --read-only wins)
  overlay_driver = \"auto\"                     GPURUN_OVERLAY_DRIVER  (auto: the kernel's
                                              overlayfs, else fuse-overlayfs; kernel;
                                              fuse-overlayfs)
Every option of exec, run, shell, pull and inspect, and the global ones, has a variable named
after it, as Apptainer's APPTAINER_<FLAG>: GPURUN_CLEANENV=1, GPURUN_CONTAIN=yes,
GPURUN_NO_MOUNT=home,tmp, GPURUN_PWD=/work, GPURUN_GPUS=0,1 … The command line wins; empty is
unset; switches take 1/0, true/false, yes/no, on/off. Not --bind (GPURUN_BIND adds to it) nor
--nv (GPURUN_NV=1|0); the outputs --save, --json and pull's --output have none. Their names:
the ENVIRONMENT section of gpurun-exec(1).
gpurun config show prints the merged values, the options set by variables, and where each came
from.
";

const IMAGES: &str = "\
gpurun runs one squashfs file as the container's root, read-only, served over FUSE:
  gpurun images  (gpurun pull): metadata in /.gpurun/meta.json (Env, Entrypoint, Cmd, …)
  enroot images  (enroot import): /etc/environment is the image's environment and
                 `run` starts /etc/rc with your arguments, as enroot start does
  Apptainer SIF  (apptainer build/pull): the squashfs partition inside the SIF is used;
                 /.singularity.d/env/*.sh give the environment, `run` starts the runscript
  plain squashfs (mksquashfs DIR img.sqsh): no metadata; `run` starts a shell
gpurun inspect IMAGE shows what gpurun reads from any of them (and from docker://REF without
downloading layers). exec, run and shell also take docker://REF and podman://IMAGE (an image of
your podman store), converted once into the cache.
";

const APPTAINER: &str = "\
Coming from Apptainer: the same options do the same (-B/--bind, -c/--contain, -C/--containall,
-e/--cleanenv, --env, --env-file, -H/--home, --no-home, --no-mount, --pwd/--cwd, --fakeroot,
--writable-tmpfs, -w/--writable (a sandbox directory), -o/--overlay DIR[:ro], --hostname,
-p/--pid, -i/--ipc, -n/--net (--network none), --nv, --no-nv, --device), APPTAINER_<FLAG> is
GPURUN_<FLAG>, APPTAINERENV_K is GPURUNENV_K, APPTAINER_BIND is GPURUN_BIND, .sif files run as
they are, and everything after the image goes to the container. An option gpurun does not have (--nvccli,
--userns, --network-args, …) is refused with what to use instead.
Coming from enroot and pyxis: .sqsh files from enroot import run as they are; enroot start
--root is --fakeroot, enroot's seccomp filter included (chown and id changes succeed and do
nothing, so apt-get install works with --writable-tmpfs or --overlay DIR); srun
--container-image, --container-mounts, --container-workdir, --container-env,
--container-writable/-readonly, --[no-]container-remap-root, --[no-]container-mount-home,
--[no-]container-entrypoint, --container-unshare, --container-save come with gpurun's SPANK
plugin (gpurun help slurm); enroot's fstab flags are --bind's (-B /d:/d:ro+nodev), and
ENROOT_ROOTFS_WRITABLE is writable_root in the config. The whole table:
docs/apptainer-and-pyxis.md.
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_are_found() {
        for (name, text) in TOPICS {
            assert_eq!(topic(name), Some(*text));
            assert!(text.ends_with('\n'));
        }
        assert_eq!(topic("nope"), None);
    }
}

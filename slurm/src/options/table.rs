//! The plugin's options as Slurm registers them, pyxis's names, and each one's index.

use std::ffi::CStr;

/// One option as registered with Slurm; `val` in `struct spank_option` is the index in [`OPTIONS`].
pub struct OptSpec {
    pub name: &'static CStr,
    /// None: a flag without argument.
    pub arginfo: Option<&'static CStr>,
    pub usage: &'static CStr,
}

/// Same names and meanings as pyxis, so job scripts written for pyxis run unchanged.
pub const OPTIONS: [OptSpec; 16] = [
    OptSpec {
        name: c"container-image",
        arginfo: Some(c"IMAGE"),
        usage:
            c"[gpurun] run the step's tasks in this image: a squashfs file (absolute or ./relative \
                 path) or a registry reference (docker://REF, REGISTRY#IMAGE, IMAGE[:TAG])",
    },
    OptSpec {
        name: c"container-mounts",
        arginfo: Some(c"SRC[:DST[:FLAGS]][,...]"),
        usage: c"[gpurun] bind host paths into the container; FLAGS joined with +: ro, rw, \
                 nosuid, nodev, noexec, [r]private|slave|shared|unbindable, \
                 x-create=dir|file|auto; tmpfs:DST[:size=N+mode=M] a tmpfs; umount:DST leaves \
                 out a default mount",
    },
    OptSpec {
        name: c"container-workdir",
        arginfo: Some(c"DIR"),
        usage: c"[gpurun] working directory inside the container (default: the image's \
                 WorkingDir, else the job's directory)",
    },
    OptSpec {
        name: c"container-env",
        arginfo: Some(c"NAME[,NAME...]"),
        usage: c"[gpurun] these variables keep the host's value even where the image sets them \
                 (and the entrypoint sees it)",
    },
    OptSpec {
        name: c"container-writable",
        arginfo: None,
        usage: c"[gpurun] make the container root writable (tmpfs overlay, dropped at step end)",
    },
    OptSpec {
        name: c"container-readonly",
        arginfo: None,
        usage: c"[gpurun] keep the container root read-only (the default)",
    },
    OptSpec {
        name: c"container-remap-root",
        arginfo: None,
        usage: c"[gpurun] be root inside the container (no privilege outside)",
    },
    OptSpec {
        name: c"no-container-remap-root",
        arginfo: None,
        usage: c"[gpurun] keep your own uid inside the container (the default)",
    },
    OptSpec {
        name: c"container-mount-home",
        arginfo: None,
        usage: c"[gpurun] bind the home directory into the container (the default)",
    },
    OptSpec {
        name: c"no-container-mount-home",
        arginfo: None,
        usage: c"[gpurun] do not bind the home directory into the container",
    },
    OptSpec {
        name: c"container-entrypoint",
        arginfo: None,
        usage: c"[gpurun] run the image's entrypoint once per node before the tasks; the \
                 environment it sets is theirs",
    },
    OptSpec {
        name: c"no-container-entrypoint",
        arginfo: None,
        usage: c"[gpurun] do not run the image's entrypoint (the default, unless plugstack.conf \
                 says execute_entrypoint=1)",
    },
    OptSpec {
        name: c"container-unshare",
        arginfo: Some(c"NS[,NS...]"),
        usage: c"[gpurun] new namespaces for the container, shared by the step's tasks and \
                 joined by later steps naming it: uts, net (loopback only), ipc",
    },
    OptSpec {
        name: c"container-save",
        arginfo: Some(c"PATH"),
        usage: c"[gpurun] at the step's end, save the container's root with its changes as a \
                 new squashfs image PATH (on each node's file system; a file there is replaced \
                 once the new image is whole)",
    },
    OptSpec {
        name: c"container-name",
        arginfo: Some(c"NAME[:FLAGS]"),
        usage: c"[gpurun] keep the container's changes on the node for later steps of the job \
                 with this name (they may leave out --container-image), and join it while a \
                 step runs in it; FLAGS: auto (the default), create, exec (join, which must be \
                 possible), no_exec (never join)",
    },
    OptSpec {
        name: c"container-entrypoint-log",
        arginfo: None,
        usage: c"[gpurun] print what the image's entrypoint wrote (with --container-entrypoint)",
    },
];

pub(super) const IMAGE: usize = 0;
pub(super) const MOUNTS: usize = 1;
pub(super) const WORKDIR: usize = 2;
pub(super) const ENV: usize = 3;
pub(super) const WRITABLE: usize = 4;
pub(super) const READONLY: usize = 5;
pub(super) const REMAP_ROOT: usize = 6;
pub(super) const NO_REMAP_ROOT: usize = 7;
pub(super) const MOUNT_HOME: usize = 8;
pub(super) const NO_HOME: usize = 9;
pub(super) const ENTRYPOINT: usize = 10;
pub(super) const NO_ENTRYPOINT: usize = 11;
pub(super) const UNSHARE: usize = 12;
pub(super) const SAVE: usize = 13;
pub(super) const NAME: usize = 14;
pub(super) const ENTRYPOINT_LOG: usize = 15;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_indices() {
        let names: Vec<_> = OPTIONS.iter().map(|o| o.name.to_str().unwrap()).collect();
        let want = [
            (IMAGE, "container-image"),
            (MOUNTS, "container-mounts"),
            (WORKDIR, "container-workdir"),
            (ENV, "container-env"),
            (WRITABLE, "container-writable"),
            (READONLY, "container-readonly"),
            (REMAP_ROOT, "container-remap-root"),
            (NO_REMAP_ROOT, "no-container-remap-root"),
            (MOUNT_HOME, "container-mount-home"),
            (NO_HOME, "no-container-mount-home"),
            (ENTRYPOINT, "container-entrypoint"),
            (NO_ENTRYPOINT, "no-container-entrypoint"),
            (UNSHARE, "container-unshare"),
            (SAVE, "container-save"),
            (NAME, "container-name"),
            (ENTRYPOINT_LOG, "container-entrypoint-log"),
        ];
        assert_eq!(want.len(), OPTIONS.len());
        for (i, name) in want {
            assert_eq!(names[i], name);
            assert_eq!(
                OPTIONS[i].arginfo.is_some(),
                i <= ENV || i == UNSHARE || i == SAVE || i == NAME,
                "{name}"
            );
        }
    }
}

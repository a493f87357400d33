//! gpurun's SPANK plugin: `srun --container-image=IMAGE …` runs the step's tasks in a gpurun
//! container, with pyxis's option names (`--container-mounts`, `--container-workdir`,
//! `--container-env`, `--container-writable`/`-readonly`, `--[no-]container-remap-root`,
//! `--[no-]container-mount-home`, `--[no-]container-entrypoint`, `--container-save`, `--container-name`). The state file of
//! `gpurun hold` is shared with gpurun as the `gpurun-hold-state` crate, the seccomp filter
//! of --fakeroot, which every task gets, as the `gpurun-fake-ids` crate, and the grammar of
//! `--container-mounts` and gpurun's `--bind` as the `gpurun-mount-grammar` crate.
//!
//! Per job step and node, slurmstepd starts one `gpurun hold` as the user (user_init), which
//! mounts the image and prepares the container exactly as `gpurun exec` would; every task of the
//! step on that node then joins it (task_init: setns + pivot_root), so 64 ranks mount once. The
//! holder is stopped, and the image unmounted, when the step ends (exit). In the job's extern
//! step the plugin starts `gpurun keep` (task_post_fork), which starts the job's image servers,
//! one per image, for all its steps; it is stopped at the job's end. A registry image is pulled
//! once per job, by srun before the tasks launch (`jobimage`), not by every node.
//!
//! Everything that can be decided without Slurm is in pure modules with unit tests: `options`,
//! `state`, and the decisions of each SPANK context, `step_start` (init_post_opt, user_init),
//! `task` (task_init) and `step_end` (task_exit, exit, job_epilog: what root removes).
//! `holder` and `join` make their syscalls through `sys` (a trait per concern, one Linux
//! implementation, and in tests a recording fake that checks their exact sequence); `named`
//! and `removal` make theirs on directory handles. `plugin` is the C ABI, a thin
//! dispatcher: it gathers Slurm's items, the environment and plugstack.conf's arguments, calls
//! the decision, and performs it. It is left out of test builds: its `spank_*` symbols only
//! exist inside Slurm's processes.

pub mod holder;
pub mod jobimage;
pub mod join;
pub mod named;
pub mod options;
#[cfg(not(test))]
mod plugin;
pub mod removal;
pub mod slurmd;
pub mod state;
pub mod step_end;
pub mod step_start;
pub mod sys;
pub mod task;

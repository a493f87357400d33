//! The plugin's command-line options (pyxis-compatible names) and plugstack.conf arguments, and
//! how they become a `gpurun hold` command line. Pure: no Slurm, no syscalls.
//!
//! The files: table.rs (the options as Slurm registers them), values.rs (each option's value
//! parsed, pyxis's rules), container_opts.rs (the options given, one by one), pyxis_vars.rs
//! (`PYXIS_CONTAINER_*`), environment.rs, hold_args.rs (the holder's command line),
//! plugin_args.rs (plugstack.conf's arguments), error.rs (why one of them is refused).

mod container_opts;
mod environment;
mod error;
mod hold_args;
mod plugin_args;
mod pyxis_vars;
mod table;
#[cfg(test)]
mod test_util;
mod values;

pub use container_opts::ContainerOpts;
pub use environment::{entrypoint_env, without_host_locale};
pub use error::OptionError;
pub use hold_args::{holder_args, HoldCtx};
pub use mount_grammar::pyxis::{parse_mounts, Mount};
pub use plugin_args::{parse_plugin_args, PluginArgs};
pub use table::{OptSpec, OPTIONS};
pub use values::{
    parse_bool, parse_env_names, parse_image, parse_name, parse_unshare, Image, Join, Named,
    Unshare,
};

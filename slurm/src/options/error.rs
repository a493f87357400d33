//! Why an option, a `PYXIS_CONTAINER_*` variable or a plugstack.conf argument is refused: one
//! line each, naming what was given.

use std::path::PathBuf;

use mount_grammar::pyxis::MountsError;

use crate::jobimage::JobImageError;

#[derive(Debug, thiserror::Error)]
pub enum OptionError {
    #[error("--container-image={value:?}: contains white space")]
    ImageSpace { value: String },
    #[error("--container-image={value}: expected podman://IMAGE")]
    ImagePodman { value: String },
    #[error(
        "--container-image={value}: gpurun cannot read the Docker daemon's images (its \
         socket is root's, and gpurun runs as you); docker save -o FILE.tar IMAGE, \
         gpurun pull docker-archive:FILE.tar, and give the .sqsh file"
    )]
    ImageDockerd { value: String },
    #[error("--container-image={value}: only docker://, podman:// references and squashfs paths")]
    ImageScheme { value: String },
    #[error(
        "--container-image={value}: credentials in the reference (USER@) are not supported; \
         gpurun reads registry logins from ~/.docker/config.json"
    )]
    ImageCredentials { value: String },
    #[error("--container-image={value}: expected REGISTRY#IMAGE")]
    ImageRegistry { value: String },
    #[error(
        "--container-name={value}: a name with '/', '..' or nothing in it; use letters, \
         digits, '-', '_' or '.'"
    )]
    Name { value: String },
    #[error("--container-name={value}: unknown flag {flag:?} (auto, create, exec, no_exec)")]
    NameFlag { value: String, flag: String },
    #[error("--container-env={value}: an empty name (a comma too many?)")]
    EnvEmpty { value: String },
    #[error("--container-env: {name:?} is not a variable name")]
    EnvName { name: String },
    #[error("--container-unshare={value}: an empty namespace")]
    UnshareEmpty { value: String },
    #[error("--container-unshare={value}: unknown namespace {ns:?} (net, ipc, uts)")]
    UnshareUnknown { value: String, ns: String },
    #[error(transparent)]
    Mounts(#[from] MountsError),
    #[error("unknown option number {0}")]
    Unknown(usize),
    #[error("--{option} needs a value")]
    NoValue { option: String },
    /// A switch and its opposite.
    #[error("both --{on} and --{off} were given")]
    Both { on: String, off: String },
    /// A `PYXIS_CONTAINER_*` variable, refused as its option would be.
    #[error("{name}={value}: {source}")]
    Var {
        name: &'static str,
        value: String,
        source: Box<OptionError>,
    },
    #[error("{key}={value}: needs an absolute path")]
    NotAbsolute { key: &'static str, value: String },
    #[error("timeout={value}: needs a positive number of seconds")]
    Timeout { value: String },
    #[error("{key}={value}: needs 1 or 0 (yes, no)")]
    NotBool { key: &'static str, value: String },
    #[error(
        "unknown plugstack.conf argument {arg:?} (gpurun=PATH, timeout=SECONDS, \
         execute_entrypoint=0|1, pytorch_env=0|1, remap_root=0|1, containers_dir=DIR, {})",
        crate::jobimage::ARGS
    )]
    UnknownArg { arg: String },
    #[error(transparent)]
    JobImage(#[from] JobImageError),
    #[error("no --container-image")]
    NoImage,
    /// A path JSON cannot carry: a bind's, a tmpfs's (`what`: --container-mounts), the home's.
    #[error("{what}: {} is no UTF-8 text", path.display())]
    NotUtf8 { what: &'static str, path: PathBuf },
}

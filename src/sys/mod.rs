//! The only place that makes namespace, mount and process-control syscalls. Thin on purpose:
//! every decision is made in `plan`; these functions just do what they are told and report errno
//! with the path they were working on. One file per concern.

mod error;
mod files;
mod host;
mod mount;
mod namespaces;
mod process;
mod signals;
mod socket;

pub use error::*;
pub use files::*;
pub use host::*;
pub use mount::*;
pub use namespaces::*;
pub use process::*;
pub use signals::*;
pub use socket::*;

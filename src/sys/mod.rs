//! The only place that makes namespace, mount and process-control syscalls. Thin on purpose:
//! every decision is made in `plan`; these functions just do what they are told and report errno
//! with the path they were working on. One file per concern; `seam` puts the calls that apply a
//! plan behind traits, so that the code that applies it runs against `fake` in tests.

mod error;
#[cfg(test)]
pub mod fake;
mod files;
mod host;
mod mount;
mod namespaces;
mod process;
pub mod seam;
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

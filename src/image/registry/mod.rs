//! Talking to registries through oci-client: credentials (docker config.json, containers
//! auth.json, credential helpers, environment), manifests and indexes with platform choice, and
//! blobs streamed into the cache with digest checks, HTTP-range resume and retries.
//!
//! The files: credentials.rs (where credentials come from), manifest.rs (manifests, indexes,
//! platforms), client.rs (requests, retries, what a failure means), blob.rs (a blob into the
//! cache), error.rs.

mod blob;
mod client;
mod credentials;
mod error;
mod manifest;

pub use client::{plain_http, RegistryClient};
pub use credentials::{base64_decode, parse_auth_file, AuthEntry, AuthSources, Credentials, Found};
pub use error::{AuthFileError, ManifestError, RegistryError};
pub use manifest::{
    choose_platform, platforms, Descriptor, Manifest, Platform, MANIFEST_MEDIA_TYPES,
};

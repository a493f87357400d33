//! `podman://IMAGE`: an image in the user's own podman store (enroot's and pyxis' `podman://`).
//! podman, run as the user, saves it by its ID as an OCI layout into the pull's staging directory
//! (private, made by gpurun, removed however the pull ends), read from there as `oci:` is, every
//! blob checked against its digest.

use std::ffi::{OsStr, OsString};
use std::io;
use std::process::{Command, Stdio};

use super::error::PullError;
use super::oci_layout_source::oci_layout;
use super::options::PullOptions;
use super::progress::Ui;
use super::staging::{Staging, IN_FLIGHT};
use crate::image::flatten::Layer;
use crate::image::meta::ImageMeta;
use crate::image::reference::{valid_digest, Source};

/// The ID podman gives the image `name` (`sha256:` and its config's digest): names its content,
/// so it keys the cache for `exec podman://`, and a changed image is converted again.
pub(super) fn image_id(name: &str, source: &str) -> Result<String, PullError> {
    let args = ["image", "inspect", "--format", "{{.Id}}", name].map(OsStr::new);
    checked_id(&podman(&args, source)?, source)
}

/// podman's `{{.Id}}` as a digest, or why it is not one.
fn checked_id(out: &str, source: &str) -> Result<String, PullError> {
    let id = format!("sha256:{}", out.trim());
    if !valid_digest(&id) {
        return Err(PullError::Podman {
            source_ref: source.to_string(),
            detail: format!(
                "podman image inspect gave {:?}, not an image ID",
                out.trim()
            ),
        });
    }
    Ok(id)
}

/// What one `podman image inspect` tells of an image for `gpurun inspect`, a line each: its ID,
/// its size, and an OCI config (its config, platform and creation time) for
/// `image_config::image_meta`.
const INSPECT_FORMAT: &str = "{{.Id}}\n{{.Size}}\n{\"config\":{{json .Config}},\"os\":{{json .Os}},\"architecture\":{{json .Architecture}},\"created\":{{json .Created}}}";

/// `podman://NAME` for `gpurun inspect`: its metadata (the image ID as its digest) and size;
/// nothing is saved.
pub fn podman_meta(reference: &str) -> Result<(ImageMeta, u64), PullError> {
    let Source::Podman(name) = Source::parse(reference)? else {
        return Err(PullError::NotRegistry(reference.to_string()));
    };
    let args = ["image", "inspect", "--format", INSPECT_FORMAT, &name].map(OsStr::new);
    let out = podman(&args, reference)?;
    let bad = |detail: String| PullError::Podman {
        source_ref: reference.to_string(),
        detail,
    };
    let mut lines = out.splitn(3, '\n');
    let (Some(id), Some(size), Some(config)) = (lines.next(), lines.next(), lines.next()) else {
        return Err(bad(format!("podman image inspect gave {:?}", out.trim())));
    };
    let id = checked_id(id, reference)?;
    let size = size.trim().parse().unwrap_or(0);
    let meta = super::image_config::image_meta(config.trim_end().as_bytes(), reference, &id)
        .map_err(|source| PullError::PodmanConfig {
            source_ref: reference.to_string(),
            source,
        })?;
    Ok((meta, size))
}

/// The image `id` (of `name`), saved into `staging` and read from there.
pub(super) fn podman_image(
    name: &str,
    id: &str,
    staging: &Staging,
    source: &str,
    opts: &PullOptions,
    ui: &Ui,
) -> Result<(Vec<Layer>, ImageMeta), PullError> {
    ui.line(&format!("Saving {name} ({}) from podman", &id[7..19]));
    // By ID: a name retagged meanwhile cannot give other content than the ID says.
    let dir = staging.scratch("podman-layout");
    // One argument, whatever the path starts with; the path as bytes, whatever they are.
    let mut output = OsString::from("--output=");
    output.push(&dir);
    let args = ["image", "save", "--quiet", "--format", "oci-dir"].map(OsStr::new);
    podman(
        &[&args[..], &[&output, OsStr::new(&id[7..])]].concat(),
        source,
    )?;
    oci_layout(&dir, None, source, opts)
}

/// Run podman with `args`; its stdout, or its error as the user needs to hear it.
fn podman(args: &[&OsStr], source: &str) -> Result<String, PullError> {
    // Started and registered under the lock, as tar2sqfs is: a signal kills it before the
    // staging directory it writes in is removed.
    let child = {
        let mut g = crate::lock(&IN_FLIGHT);
        let child = Command::new("podman")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| PullError::NoPodman {
                source_ref: source.to_string(),
                reason: match e.kind() {
                    io::ErrorKind::NotFound => "not found on PATH".into(),
                    _ => e.to_string(),
                },
            })?;
        g.1.push(child.id());
        child
    };
    let pid = child.id();
    let done = child.wait_with_output();
    crate::lock(&IN_FLIGHT).1.retain(|p| *p != pid);
    let failed = |detail: String| PullError::Podman {
        source_ref: source.to_string(),
        detail,
    };
    let out = done.map_err(|e| failed(e.to_string()))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    // containers/storage's words for an image the store does not hold.
    if err.contains("image not known") {
        return Err(PullError::NotInPodman(source.to_string()));
    }
    Err(failed(error_line(&err, &out.status.to_string())))
}

/// podman's error: its `Error:` line, else the message of its last logged error (it logs
/// warnings too), else its last line, else `status`.
fn error_line(stderr: &str, status: &str) -> String {
    let lines = || stderr.lines().map(str::trim).filter(|l| !l.is_empty());
    let logged = |l: &str| -> Option<String> {
        let (_, msg) = l.split_once("level=error msg=\"")?;
        Some(msg.strip_suffix('"').unwrap_or(msg).replace("\\\"", "\""))
    };
    lines()
        .rfind(|l| l.starts_with("Error:"))
        .map(String::from)
        .or_else(|| lines().filter_map(logged).next_back())
        .or_else(|| lines().next_back().map(String::from))
        .unwrap_or_else(|| status.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podmans_error_line() {
        let warned = "time=\"…\" level=warning msg=\"\\\"/\\\" is not a shared mount\"\n\
                      Error: reading storage: permission denied\n";
        let logged =
            "time=\"…\" level=error msg=\"invalid internal status: \\\"newuidmap\\\" not found\"\n\
                      time=\"…\" level=warning msg=\"\\\"/\\\" is not a shared mount\"\n";
        for (stderr, want) in [
            (warned, "Error: reading storage: permission denied"),
            (logged, "invalid internal status: \"newuidmap\" not found"),
            ("something odd\n\n", "something odd"),
            ("", "exit status: 125"),
        ] {
            assert_eq!(error_line(stderr, "exit status: 125"), want);
        }
    }
}

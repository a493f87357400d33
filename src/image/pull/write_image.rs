//! The layers, flattened top-down, through tar2sqfs into the staged image, then moved in place.

use std::fs;
use std::io::BufWriter;
use std::time::Duration;

use super::error::PullError;
use super::options::PullOptions;
use super::progress::{mb, Ui};
use super::staging::{Staging, IN_FLIGHT};
use crate::image::flatten::{flatten_into, ExtraFile, FlattenError, Layer, Report, Sink};
use crate::image::meta::{ImageMeta, META_PATH};
use crate::image::squash::SquashWriter;

pub(super) fn build(
    layers: &[Layer],
    meta: &ImageMeta,
    staging: Staging,
    opts: &PullOptions,
    ui: &Ui,
) -> Result<(), PullError> {
    let out = staging.out.clone();
    let jobs = opts.jobs.unwrap_or_else(crate::cpus::usable);
    ui.line(&format!("Writing {}", out.display()));
    let expected: u64 = layers.iter().map(|l| l.size).sum();
    // Started and registered under the lock: a signal handled in between would find no child
    // to kill, and tar2sqfs would then write its file after the cleanup.
    let mut writer = {
        let mut g = crate::lock(&IN_FLIGHT);
        let w = SquashWriter::start(&staging.file(), jobs, opts.compression.as_deref())?;
        g.1.push(w.pid());
        w
    };
    let pid = writer.pid();
    let stdin = BufWriter::with_capacity(1 << 20, writer.stdin());
    let mut tar = tar::Builder::new(stdin);
    let flattened = flatten_shown(layers, meta, &mut tar, jobs, ui, "squashfs");
    // tar2sqfs ends only once its stdin is closed.
    drop(tar);
    let result = match flattened {
        Ok(report) => writer
            .finish(expected)
            .map(|_| report)
            .map_err(PullError::from),
        Err(e @ FlattenError::Write(_)) => {
            // The pipe broke because tar2sqfs stopped: its reason is the real one.
            writer
                .finish(expected)
                .map_err(PullError::from)
                .and(Err(e.into()))
        }
        Err(e) => {
            writer.abort();
            Err(e.into())
        }
    };
    crate::lock(&IN_FLIGHT).1.retain(|p| *p != pid);
    let report = result?;
    warn_report(&report, ui);
    staging.commit()?;
    let size = fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    ui.line(&format!(
        "Wrote {} ({}, {} entries)",
        out.display(),
        mb(size),
        report.entries
    ));
    Ok(())
}

/// The layers and the image's metadata file flattened into `out`, under a bar named `label`.
pub(super) fn flatten_shown(
    layers: &[Layer],
    meta: &ImageMeta,
    out: &mut dyn Sink,
    jobs: usize,
    ui: &Ui,
    label: &str,
) -> Result<Report, FlattenError> {
    let expected: u64 = layers.iter().map(|l| l.size).sum();
    let bar = ui.bar(expected, label.into());
    bar.enable_steady_tick(Duration::from_millis(200));
    let meta_json = meta.to_json();
    let extra = [ExtraFile {
        path: META_PATH.trim_start_matches('/'),
        data: &meta_json,
    }];
    let flattened = flatten_into(layers, &extra, out, jobs, &|n: u64| bar.inc(n));
    bar.finish_and_clear();
    flattened
}

pub(super) fn warn_report(r: &Report, ui: &Ui) {
    for n in &r.notes {
        ui.line(&format!("gpurun: warning: {n}"));
    }
    if r.notes_omitted > 0 {
        ui.line(&format!(
            "gpurun: warning: {} more entries outside the image root were neutralised",
            r.notes_omitted
        ));
    }
    let mut parts = Vec::new();
    if r.devices_dropped > 0 {
        parts.push(format!("{} device nodes dropped", r.devices_dropped));
    }
    if r.setid_cleared > 0 {
        parts.push(format!(
            "setuid/setgid bits cleared on {} files",
            r.setid_cleared
        ));
    }
    if r.unsupported_skipped > 0 {
        parts.push(format!(
            "{} entries of unsupported types skipped",
            r.unsupported_skipped
        ));
    }
    if !parts.is_empty() {
        ui.line(&format!(
            "gpurun: warning: {} (a rootless container cannot use them)",
            parts.join(", ")
        ));
    }
}

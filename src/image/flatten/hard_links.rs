//! Hard links: kept for the end and written once their target is in the stream, or, where the
//! target was replaced above, written as a copy of the content their layer saw.

use std::io::Read;

use tar::{Archive, EntryType};

use super::error::FlattenError;
use super::flattener::{Flattener, Out, PendingLink};
use super::layer::Layer;
use super::paths::normalize;
use super::sink::Sink;
use super::tar_io::{header, xattrs, Exact};
use crate::image::inflate::decompress;

impl Flattener<'_> {
    /// A hard link of layer `i`: kept for the end when its target is in the image; its
    /// target's content copied when that was replaced above; `false` when skipped.
    pub(super) fn hard_link<R: Read>(
        &mut self,
        i: usize,
        o: Out<'_>,
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<bool, FlattenError> {
        let (layer, raw, path) = (o.layer, o.raw, o.path);
        let raw_t = entry.link_name_bytes().unwrap_or_default();
        let raw_t = String::from_utf8_lossy(&raw_t).into_owned();
        let t = normalize(&raw_t);
        if t.escaped {
            self.report.note(format!(
                "layer {}: hard link '{raw}' -> '{raw_t}' leaves the image root; linked to '/{}'",
                layer.name, t.path
            ));
        }
        if t.path == path || t.path.is_empty() {
            self.report.note(format!(
                "layer {}: hard link '{raw}' -> '{raw_t}' is invalid; skipped",
                layer.name
            ));
            return Ok(false);
        }
        let what = format!("layer {}: hard link '{raw}' -> '{raw_t}'", layer.name);
        let target = if self.merge.link_target_ok(&t.path) {
            t.path
        } else if let Some(first) = self.copies.get(&(i, t.path.clone())) {
            // Another link to the same replaced file: share the copy, as before.
            first.clone()
        } else {
            if materialise(self.layers, i, &t.path, path, self.b)? {
                self.copies.insert((i, t.path), path.to_string());
                self.written.insert(path.to_string());
            } else {
                self.report.note(format!(
                    "{what} has no target in this or a lower layer; skipped"
                ));
            }
            return Ok(true);
        };
        self.links.push(PendingLink {
            path: path.to_string(),
            target,
            header: o.header,
            xattrs: o.xattrs,
            what,
        });
        Ok(true)
    }

    /// The hard links kept for the end, each once its target is written; chains (a link to a
    /// link) resolve over several rounds.
    pub(super) fn pending_links(&mut self) -> Result<(), FlattenError> {
        let mut links = std::mem::take(&mut self.links);
        loop {
            let before = links.len();
            let mut unresolved = Vec::new();
            for mut l in links {
                if self.written.contains(&l.target) {
                    self.b
                        .append_link(&mut l.header, &l.path, &l.target, &l.xattrs)
                        .map_err(FlattenError::Write)?;
                    self.written.insert(l.path);
                } else {
                    unresolved.push(l);
                }
            }
            links = unresolved;
            if links.len() == before {
                break;
            }
        }
        for l in links {
            self.report
                .note(format!("{} has no target in the image; skipped", l.what));
        }
        Ok(())
    }
}

/// A hard link whose target was replaced above its layer: write the target's content as this
/// layer saw it (the topmost regular file at `target` from layer `from` down) as a plain file.
fn materialise(
    layers: &[Layer],
    from: usize,
    target: &str,
    path: &str,
    b: &mut dyn Sink,
) -> Result<bool, FlattenError> {
    let mut target = target.to_string();
    let mut li = from;
    // Follow link chains a few hops; a longer chain is a broken image.
    for _ in 0..8 {
        if li >= layers.len() {
            return Ok(false);
        }
        let layer = &layers[li];
        let rerr = |source| FlattenError::Read {
            layer: layer.name.clone(),
            source,
        };
        let reader = (layer.open)().and_then(decompress).map_err(rerr)?;
        let mut ar = Archive::new(reader);
        let mut next = None;
        for entry in ar.entries().map_err(rerr)? {
            let mut entry = entry.map_err(rerr)?;
            if normalize(&String::from_utf8_lossy(&entry.path_bytes())).path != target {
                continue;
            }
            let hdr = entry.header();
            match hdr.entry_type() {
                EntryType::Regular | EntryType::Continuous => {
                    let mode = hdr.mode().map_err(rerr)? & 0o1777;
                    let mut h = header(
                        EntryType::Regular,
                        mode,
                        hdr.uid().unwrap_or(0),
                        hdr.gid().unwrap_or(0),
                        hdr.mtime().unwrap_or(0),
                    );
                    let size = entry.size();
                    h.set_size(size);
                    let xa = xattrs(&mut entry).map_err(rerr)?;
                    let mut data = Exact::new(&mut entry, size);
                    b.append(&mut h, path, &xa, &mut data).map_err(|e| {
                        if data.read_failed {
                            rerr(e)
                        } else {
                            FlattenError::Write(e)
                        }
                    })?;
                    return Ok(true);
                }
                EntryType::Link => {
                    let t = entry.link_name_bytes().unwrap_or_default();
                    next = Some(normalize(&String::from_utf8_lossy(&t)).path);
                    break;
                }
                _ => return Ok(false),
            }
        }
        match next {
            Some(t) => target = t,
            None => li += 1,
        }
    }
    Ok(false)
}

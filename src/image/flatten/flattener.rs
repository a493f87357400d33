//! The merged stream: gpurun's files first, then each layer from the top, entry by entry
//! (entry.rs), hard links last (hard_links.rs).

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};

use tar::{Archive, EntryType, Header};

use super::error::{refused, FlattenError};
use super::layer::{ExtraFile, Layer};
use super::merge::Merge;
use super::paths::ancestors;
use super::report::Report;
use super::sink::Sink;
use super::tar_io::{header, Print};
use crate::image::inflate::{inflate_span, inflate_stream};

/// Merge `layers` (top first) into one tar stream on `out`, a gzip layer (or zstd of several
/// frames) inflated on up to `threads` cores; `on_read` hears of every (compressed) byte read.
pub fn flatten<W: Write>(
    layers: &[Layer],
    extra: &[ExtraFile<'_>],
    out: W,
    threads: usize,
    on_read: &(dyn Fn(u64) + Sync),
) -> Result<Report, FlattenError> {
    let mut b = tar::Builder::new(out);
    flatten_into(layers, extra, &mut b, threads, on_read)
}

/// [`flatten`] into any [`Sink`].
pub fn flatten_into(
    layers: &[Layer],
    extra: &[ExtraFile<'_>],
    sink: &mut dyn Sink,
    threads: usize,
    on_read: &(dyn Fn(u64) + Sync),
) -> Result<Report, FlattenError> {
    let mut f = Flattener {
        b: sink,
        layers,
        threads,
        merge: Merge::new(),
        written: HashSet::new(),
        links: Vec::new(),
        copies: HashMap::new(),
        report: Report::default(),
    };
    f.extra_files(extra)?;
    for i in 0..layers.len() {
        f.layer(i, on_read)?;
    }
    f.pending_links()?;
    f.b.finish().map_err(FlattenError::Write)?;
    Ok(f.report)
}

/// One [`flatten`] under way: the stream being written and what the layers above decided.
pub(super) struct Flattener<'a> {
    pub(super) b: &'a mut dyn Sink,
    pub(super) layers: &'a [Layer],
    pub(super) threads: usize,
    pub(super) merge: Merge,
    /// Non-directories written so far; hard links are written last, once their target is known
    /// to be in the image (tar2sqfs aborts on a dangling one).
    pub(super) written: HashSet<String>,
    pub(super) links: Vec<PendingLink>,
    /// (layer, replaced link target) -> the path its content was copied to.
    pub(super) copies: HashMap<(usize, String), String>,
    pub(super) report: Report,
}

/// An entry on its way into the stream: where it comes from (for errors) and what it becomes.
pub(super) struct Out<'e> {
    pub(super) layer: &'e Layer,
    pub(super) raw: &'e str,
    pub(super) path: &'e str,
    pub(super) header: Header,
    pub(super) xattrs: Vec<(String, Vec<u8>)>,
}

impl Out<'_> {
    pub(super) fn refused(&self, why: String) -> FlattenError {
        refused(self.layer, self.raw, why)
    }
}

pub(super) struct PendingLink {
    pub(super) path: String,
    pub(super) target: String,
    pub(super) header: Header,
    pub(super) xattrs: Vec<(String, Vec<u8>)>,
    /// "layer L: hard link 'A' -> 'B'", for the note when it cannot be written.
    pub(super) what: String,
}

impl Flattener<'_> {
    /// gpurun's files, ahead of every layer (as a layer 0 above them all).
    fn extra_files(&mut self, extra: &[ExtraFile<'_>]) -> Result<(), FlattenError> {
        let now_epoch = 0;
        self.merge.begin_layer(0);
        for f in extra {
            for a in ancestors(f.path).collect::<Vec<_>>().into_iter().rev() {
                if self.merge.decide(a, true) {
                    let mut h = header(EntryType::Directory, 0o755, 0, 0, now_epoch);
                    self.b
                        .append(&mut h, a, &[], &mut io::empty())
                        .map_err(FlattenError::Write)?;
                }
            }
            self.merge.decide(f.path, false);
            let mut h = header(EntryType::Regular, 0o644, 0, 0, now_epoch);
            h.set_size(f.data.len() as u64);
            self.b
                .append(&mut h, f.path, &[], &mut { f.data })
                .map_err(FlattenError::Write)?;
        }
        self.merge.end_layer();
        Ok(())
    }

    /// Layer `i` (counted from the top), entry by entry.
    fn layer(&mut self, i: usize, on_read: &(dyn Fn(u64) + Sync)) -> Result<(), FlattenError> {
        let layer = &self.layers[i];
        self.merge.begin_layer(i + 1);
        // What this layer wrote at each non-directory path, to judge a second entry there.
        let mut prints: HashMap<String, Print> = HashMap::new();
        let rerr = |source| FlattenError::Read {
            layer: layer.name.clone(),
            source,
        };
        let stream = match &layer.span {
            Some(span) => span().and_then(|s| inflate_span(s, self.threads, on_read)),
            None => (layer.open)().and_then(|r| inflate_stream(r, on_read)),
        };
        let mut stream = stream.map_err(rerr)?;
        let read = self.entries(i, &mut stream.reader, &mut prints);
        stream.finish(read, rerr)?;
        self.merge.end_layer();
        Ok(())
    }

    /// The entries of layer `i`, then its stream to the end: the gzip CRC and the zstd checksum
    /// sit after the tar's end blocks, and only they catch a corrupt layer from a local layout or
    /// archive.
    fn entries(
        &mut self,
        i: usize,
        reader: &mut (dyn Read + Send + '_),
        prints: &mut HashMap<String, Print>,
    ) -> Result<(), FlattenError> {
        let rerr = |source| FlattenError::Read {
            layer: self.layers[i].name.clone(),
            source,
        };
        let mut ar = Archive::new(reader);
        for entry in ar.entries().map_err(rerr)? {
            let mut entry = entry.map_err(rerr)?;
            self.entry(i, &mut entry, prints)?;
        }
        io::copy(&mut ar.into_inner(), &mut io::sink()).map_err(rerr)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, EntryType, &[u8], &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, t, data, link) in entries {
            let mut h = Header::new_gnu();
            h.set_entry_type(*t);
            h.set_mode(if *t == EntryType::Directory {
                0o755
            } else {
                0o4755
            });
            h.set_size(data.len() as u64);
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(0);
            if t.is_hard_link() || t.is_symlink() {
                h.set_link_name(link).unwrap();
            }
            // set_path refuses "..", write the raw name as a hostile layer would.
            let name = h.as_old_mut().name.as_mut();
            name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn layer(name: &str, data: Vec<u8>) -> Layer {
        Layer {
            name: name.into(),
            size: 0,
            open: Box::new(move || {
                Ok(Box::new(io::Cursor::new(data.clone())) as Box<dyn Read + Send>)
            }),
            span: None,
        }
    }

    #[test]
    fn flatten_stream() {
        let top = tar_of(&[
            ("bin/.wh.old", EntryType::Regular, b"", ""),
            ("bin/sh", EntryType::Regular, b"new sh", ""),
            ("bin/link-to-old-sh", EntryType::Link, b"", "bin/sh-orig"),
            ("../../etc/evil", EntryType::Regular, b"e", ""),
            ("dev/null", EntryType::Char, b"", ""),
        ]);
        let gz = {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(&tar_of(&[
                ("bin", EntryType::Directory, b"", ""),
                ("bin/sh", EntryType::Regular, b"old sh", ""),
                ("bin/sh-orig", EntryType::Link, b"", "bin/sh"),
                ("bin/sh-orig2", EntryType::Link, b"", "bin/sh"),
                ("bin/dangling", EntryType::Link, b"", "nothere"),
                ("bin/old", EntryType::Regular, b"x", ""),
                ("lib/l", EntryType::Symlink, b"", "../../../x"),
            ]))
            .unwrap();
            e.finish().unwrap()
        };
        let mut out = Vec::new();
        let total = (top.len() + gz.len()) as u64;
        let layers = [layer("top", top), layer("base", gz)];
        let meta = [ExtraFile {
            path: ".gpurun/meta.json",
            data: b"{}",
        }];
        let read = std::sync::atomic::AtomicU64::new(0);
        let count = |n: u64| {
            read.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        };
        let rep = flatten(&layers, &meta, &mut out, 1, &count).unwrap();
        let read = read.into_inner();
        // Both layers are read up to their end-of-archive blocks (not the padding after them).
        assert!(read > total / 2 && read <= total, "{read} of {total}");
        assert_eq!(rep.devices_dropped, 1);
        assert_eq!(rep.setid_cleared, 7);
        assert_eq!(rep.notes.len(), 2, "{:?}", rep.notes);
        assert!(rep.notes[0].contains("layer top") && rep.notes[0].contains("../../etc/evil"));
        assert!(rep.notes[1].contains("layer base") && rep.notes[1].contains("'bin/dangling'"));
        let mut got = Vec::new();
        let mut ar = Archive::new(io::Cursor::new(out));
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            let mut data = String::new();
            e.read_to_string(&mut data).unwrap();
            let link = e
                .link_name()
                .unwrap()
                .map(|l| l.display().to_string())
                .unwrap_or_default();
            got.push(format!(
                "{} {:?} {:o} {data} {link}",
                e.path().unwrap().display(),
                e.header().entry_type(),
                e.header().mode().unwrap()
            ));
        }
        assert_eq!(
            got,
            [
                ".gpurun Directory 755  ",
                ".gpurun/meta.json Regular 644 {} ",
                "bin/sh Regular 755 new sh ",
                "etc/evil Regular 755 e ",
                "bin Directory 755  ",
                // bin/sh-orig links to the lower bin/sh, replaced above: written as a copy
                "bin/sh-orig Regular 755 old sh ",
                "lib/l Symlink 755  ../../../x",
                // hard links come last, once their targets are known to be there
                "bin/link-to-old-sh Link 755  bin/sh-orig",
                "bin/sh-orig2 Link 755  bin/sh-orig",
            ]
        );
    }

    #[test]
    fn names_and_paths_over_the_limits_are_refused() {
        let layers = [
            layer("ok", tar_of(&[("a", EntryType::Regular, b"x", "")])),
            layer("long", {
                // GNU long-name entry: the tar crate writes it for names over 100 bytes.
                let mut b = tar::Builder::new(Vec::new());
                let mut h = header(EntryType::Regular, 0o644, 0, 0, 0);
                h.set_size(1);
                b.append_data(&mut h, "n".repeat(256), &b"x"[..]).unwrap();
                b.into_inner().unwrap()
            }),
        ];
        let e = flatten(&layers, &[], io::sink(), 1, &|_| {}).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("layer long: entry 'nnnn") && msg.contains("256 bytes long"),
            "{msg}"
        );
    }

    #[test]
    fn a_header_that_lies_about_its_size_names_the_entry() {
        let mut t = tar_of(&[("big", EntryType::Regular, b"0123456789", "")]);
        // Claim 1 GiB; the data and the end-of-archive blocks are all there is.
        let mut h = Header::from_byte_slice(&t[..512]).clone();
        h.set_size(1 << 30);
        h.set_cksum();
        t[..512].copy_from_slice(h.as_bytes());
        let e = flatten(&[layer("liar", t)], &[], io::sink(), 1, &|_| {}).unwrap_err();
        assert_eq!(
            e.to_string(),
            "layer liar: entry 'big' is refused: its header declares 1073741824 bytes but the layer ends first; the blob may be corrupt, pull again"
        );
    }
}

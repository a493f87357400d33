//! One entry of a layer: admitted or not (its path, the merge's decision, its kind), then
//! written with its mode, owner, xattrs and exact data.

use std::collections::HashMap;
use std::io::{self, Read};

use tar::EntryType;

use super::error::{refused, FlattenError};
use super::flattener::{Flattener, Out};
use super::layer::Layer;
use super::paths::{classify, normalize, over_limits, Kind};
use super::tar_io::{header, xattrs, Exact, Print};

impl Flattener<'_> {
    /// One entry of layer `i`: judged, then written, or kept for the end (a hard link).
    pub(super) fn entry<R: Read>(
        &mut self,
        i: usize,
        entry: &mut tar::Entry<'_, R>,
        prints: &mut HashMap<String, Print>,
    ) -> Result<(), FlattenError> {
        let layer = &self.layers[i];
        let rerr = |source| FlattenError::Read {
            layer: layer.name.clone(),
            source,
        };
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(path) = self.admit(layer, &raw, entry, prints)? else {
            return Ok(());
        };
        let et = entry.header().entry_type();
        let hdr = entry.header();
        let mut mode = hdr.mode().map_err(rerr)? & 0o7777;
        if mode & 0o6000 != 0 && !et.is_dir() {
            mode &= !0o6000;
            self.report.setid_cleared += 1;
        }
        // Some writers leave numeric fields blank; blank means 0 to GNU tar too.
        let (uid, gid) = (hdr.uid().unwrap_or(0), hdr.gid().unwrap_or(0));
        let mtime = hdr.mtime().unwrap_or(0);
        let xattrs = xattrs(entry).map_err(rerr)?;
        let out_type = if et == EntryType::Continuous {
            EntryType::Regular
        } else {
            et
        };
        let h = header(out_type, mode, uid, gid, mtime);
        let mut print = Print::meta(entry);
        self.report.entries += 1;
        let o = Out {
            layer,
            raw: &raw,
            path: &path,
            header: h,
            xattrs,
        };
        match out_type {
            EntryType::Regular => print.crc = self.regular(o, entry)?,
            EntryType::Symlink => self.symlink(o, entry)?,
            EntryType::Link => {
                if !self.hard_link(i, o, entry)? {
                    return Ok(());
                }
            }
            _ => self.other(o)?,
        }
        if !et.is_dir() {
            prints.insert(path, print);
        }
        Ok(())
    }

    /// The normalised path of an entry that goes into the image, or `None` for one that does
    /// not (decided above, a whiteout, a device node…); an error for one refused.
    fn admit<R: Read>(
        &mut self,
        layer: &Layer,
        raw: &str,
        entry: &mut tar::Entry<'_, R>,
        prints: &HashMap<String, Print>,
    ) -> Result<Option<String>, FlattenError> {
        let norm = normalize(raw);
        if norm.escaped {
            self.report.note(format!(
                "layer {}: entry '{raw}' points outside the image root; stored as '/{}'",
                layer.name, norm.path
            ));
        }
        if norm.path.is_empty() {
            return Ok(None); // the root keeps tar2sqfs's defaults
        }
        if let Some(why) = over_limits(&norm.path) {
            return Err(refused(layer, raw, why));
        }
        match classify(&norm.path) {
            Kind::Whiteout(p) => self.merge.whiteout(&p),
            Kind::Opaque(d) => self.merge.opaque(&d),
            Kind::Internal => {}
            Kind::Entry => return self.decide(layer, raw, norm.path, entry, prints),
        }
        Ok(None)
    }

    /// Whether this layer's entry at `path` is the one the image keeps (see
    /// [`Merge::decide`](super::merge::Merge::decide)), and of a kind it can hold.
    fn decide<R: Read>(
        &mut self,
        layer: &Layer,
        raw: &str,
        path: String,
        entry: &mut tar::Entry<'_, R>,
        prints: &HashMap<String, Print>,
    ) -> Result<Option<String>, FlattenError> {
        let et = entry.header().entry_type();
        if let Some(why) = self.merge.writes_through(&path, et.is_dir()) {
            return Err(refused(layer, raw, why));
        }
        if !self.merge.decide(&path, et.is_dir()) {
            // The same path twice in one layer: harmless when identical; otherwise Docker
            // keeps the last entry, and the first is already in the stream: refused.
            if let Some(first) = prints.get(&path) {
                let mut second = Print::meta(entry);
                second.crc = Print::checksum(entry).map_err(|source| FlattenError::Read {
                    layer: layer.name.clone(),
                    source,
                })?;
                if *first != second {
                    return Err(refused(layer, raw,
                        "it appears twice in this layer and the second differs (Docker keeps the last; gpurun has written the first)".into(),
                    ));
                }
            }
            return Ok(None);
        }
        match et {
            EntryType::Char | EntryType::Block => self.report.devices_dropped += 1,
            EntryType::Regular
            | EntryType::Continuous
            | EntryType::Directory
            | EntryType::Symlink
            | EntryType::Link
            | EntryType::Fifo => return Ok(Some(path)),
            _ => self.report.unsupported_skipped += 1,
        }
        Ok(None)
    }

    /// A regular file, its data copied exactly; returns the data's CRC-32.
    fn regular<R: Read>(
        &mut self,
        mut o: Out<'_>,
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<u32, FlattenError> {
        let size = entry.size();
        o.header.set_size(size);
        let mut data = Exact::new(entry, size);
        let written = self.b.append(&mut o.header, o.path, &o.xattrs, &mut data);
        written.map_err(|e| {
            // A failed read is the layer's fault (a header that lies about its size,
            // a cut or corrupt stream); anything else is the pipe's.
            match data.read_failed {
                false => FlattenError::Write(e),
                true if e.kind() == io::ErrorKind::UnexpectedEof => o.refused(format!(
                    "its header declares {size} bytes but the layer ends first; the blob may be corrupt, pull again"
                )),
                true => o.refused(format!(
                    "its data cannot be read ({e}); the blob may be corrupt, pull again"
                )),
            }
        })?;
        self.written.insert(o.path.to_string());
        Ok(data.crc.clone().finalize())
    }

    fn symlink<R: Read>(
        &mut self,
        mut o: Out<'_>,
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<(), FlattenError> {
        let target = entry.link_name_bytes().unwrap_or_default();
        let target = String::from_utf8_lossy(&target).into_owned();
        if let Some(why) = over_limits(&target) {
            return Err(o.refused(format!("its symlink target: {why}")));
        }
        self.b
            .append_link(&mut o.header, o.path, &target, &o.xattrs)
            .map_err(FlattenError::Write)?;
        self.written.insert(o.path.to_string());
        Ok(())
    }

    /// A directory or a fifo: a header only.
    fn other(&mut self, mut o: Out<'_>) -> Result<(), FlattenError> {
        self.b
            .append(&mut o.header, o.path, &o.xattrs, &mut io::empty())
            .map_err(FlattenError::Write)?;
        if o.header.entry_type() != EntryType::Directory {
            self.written.insert(o.path.to_string());
        }
        Ok(())
    }
}

//! OCI layer semantics, applied top-down into one tar stream (DESIGN decision 2).
//!
//! Layers are read from the top. The first layer that writes a path decides it; lower layers'
//! entries for that path, or below a whiteout (`.wh.NAME`), an opaque directory (`.wh..wh..opq`)
//! or a non-directory decided above, are skipped. So every entry written is final and the stream
//! has no duplicates. Whiteouts and opaque markers of a layer apply to the layers below it only,
//! so they are committed when the layer ends. The decisions are in [`Merge`] (pure, table-tested);
//! [`flatten`] does the reading and writing.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};

use tar::{Archive, EntryType, Header};

pub use crate::image::inflate::Span;
use crate::image::inflate::{decompress, inflate_span, inflate_stream};

pub const WHITEOUT_PREFIX: &str = ".wh.";
pub const OPAQUE_MARKER: &str = ".wh..wh..opq";

#[derive(Debug, thiserror::Error)]
pub enum FlattenError {
    #[error("layer {layer}: {}", read_failure(source))]
    Read { layer: String, source: io::Error },
    #[error("layer {layer}: entry '{entry}' is refused: {why}")]
    Entry {
        layer: String,
        entry: String,
        why: String,
    },
    #[error("writing the merged tar stream to tar2sqfs failed ({0})")]
    Write(io::Error),
}

/// Why a layer could not be read, and the fix: a file the user may not read (`dir:` of another
/// user's tree) is no corrupt blob.
fn read_failure(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::PermissionDenied => format!(
            "permission denied: {e}; ask its owner for read access, or pull as a user who can read it"
        ),
        _ => format!("cannot read it as a tar archive ({e}); the blob may be corrupt, pull again"),
    }
}

/// A path made relative to the image root, with `.` and `..` resolved without leaving it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    /// `a/b/c`; empty for the root itself.
    pub path: String,
    /// True when the entry was absolute or its `..` tried to climb above the root.
    pub escaped: bool,
}

/// Normalise a tar entry name or hard-link target lexically (a tar stream has no symlinks to
/// follow, and clamping `..` at the root is what chroot-style resolution does).
pub fn normalize(raw: &str) -> Normalized {
    // An absolute name escapes, but for the root itself ("/"), which umoci and podman write.
    let mut escaped = raw.starts_with('/') && raw.split('/').any(|c| !c.is_empty() && c != ".");
    let mut parts: Vec<&str> = Vec::new();
    for comp in raw.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    escaped = true;
                }
            }
            c => parts.push(c),
        }
    }
    Normalized {
        path: parts.join("/"),
        escaped,
    }
}

/// Linux's NAME_MAX: squashfs stores longer names (tar2sqfs writes them) but the kernel, unsquashfs
/// and every tool reading the image then call it corrupt.
const NAME_MAX: usize = 255;
/// Linux's PATH_MAX less the leading '/': a deeper path cannot be opened by one path anywhere.
const PATH_MAX: usize = 4095;

/// Why a normalised path (or a symlink target) cannot go into an image, if it cannot.
pub fn over_limits(path: &str) -> Option<String> {
    if path.len() > PATH_MAX {
        return Some(format!(
            "it is {} bytes long, more than {PATH_MAX}",
            path.len()
        ));
    }
    path.split('/').find(|c| c.len() > NAME_MAX).map(|c| {
        format!(
            "a name in it is {} bytes long, more than {NAME_MAX}",
            c.len()
        )
    })
}

/// An entry name for a message: long hostile names are cut, so the message stays one line.
fn shown(raw: &str) -> String {
    let cut: String = raw.chars().take(80).collect();
    if cut.len() < raw.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// What a (normalised) layer entry means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// `.wh.NAME`: NAME (this path) is deleted from the layers below.
    Whiteout(String),
    /// `DIR/.wh..wh..opq`: DIR's contents in the layers below are hidden.
    Opaque(String),
    /// Other `.wh..wh.*` names (aufs bookkeeping such as `.wh..wh.plnk`): never part of the image.
    Internal,
    /// A real entry.
    Entry,
}

pub fn classify(path: &str) -> Kind {
    let (dir, name) = match path.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => ("", path),
    };
    if name == OPAQUE_MARKER {
        return Kind::Opaque(dir.to_string());
    }
    if name.starts_with(".wh..wh.") {
        return Kind::Internal;
    }
    match name.strip_prefix(WHITEOUT_PREFIX) {
        Some("") | None => Kind::Entry,
        Some(hidden) if dir.is_empty() => Kind::Whiteout(hidden.to_string()),
        Some(hidden) => Kind::Whiteout(format!("{dir}/{hidden}")),
    }
}

/// Strict ancestors of `path`, nearest first: `a/b/c` → `a/b`, `a`.
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut cur = path;
    std::iter::from_fn(move || {
        let (parent, _) = cur.rsplit_once('/')?;
        cur = parent;
        Some(parent)
    })
}

#[derive(Debug, Clone, Copy)]
struct Decided {
    layer: usize,
    dir: bool,
}

/// The top-down merge state.
#[derive(Debug, Default)]
pub struct Merge {
    layer: usize,
    decided: HashMap<String, Decided>,
    /// Ancestors of decided paths: directories for every layer below, even without an entry.
    /// With the layer and the path that made each one, for messages.
    implicit_dirs: HashMap<String, (usize, String)>,
    hidden: HashSet<String>,
    opaque: HashSet<String>,
    pending_hidden: Vec<String>,
    pending_opaque: Vec<String>,
}

impl Merge {
    pub fn new() -> Merge {
        Merge::default()
    }

    /// Start layer `index` (layers are numbered upwards from the top, each larger than the last).
    pub fn begin_layer(&mut self, index: usize) {
        self.layer = index;
    }

    /// Commit this layer's whiteouts and opaque markers for the layers below.
    pub fn end_layer(&mut self) {
        self.hidden.extend(self.pending_hidden.drain(..));
        self.opaque.extend(self.pending_opaque.drain(..));
    }

    pub fn whiteout(&mut self, path: &str) {
        self.pending_hidden.push(path.to_string());
    }

    pub fn opaque(&mut self, dir: &str) {
        self.pending_opaque.push(dir.to_string());
    }

    /// Is `path` hidden from this layer by what the layers above did?
    fn hidden_from_above(&self, path: &str) -> bool {
        // An opaque root (`/.wh..wh..opq`) hides every lower entry.
        if self.hidden.contains(path) || self.opaque.contains("") {
            return true;
        }
        ancestors(path).any(|a| {
            self.hidden.contains(a)
                || self.opaque.contains(a)
                || self.decided.get(a).is_some_and(|d| !d.dir)
        })
    }

    /// Should this layer's entry at `path` be written? Records the decision when it should.
    pub fn decide(&mut self, path: &str, is_dir: bool) -> bool {
        if self.decided.contains_key(path) || self.hidden_from_above(path) {
            return false;
        }
        if self.implicit_dirs.contains_key(path) && !is_dir {
            // Something above put entries below this path, so it is a directory there.
            return false;
        }
        self.decided.insert(
            path.to_string(),
            Decided {
                layer: self.layer,
                dir: is_dir,
            },
        );
        for a in ancestors(path) {
            if self.implicit_dirs.contains_key(a) {
                break;
            }
            self.implicit_dirs
                .insert(a.to_string(), (self.layer, path.to_string()));
        }
        true
    }

    /// Why this layer's entry at `path` would be written through a symlink (or a file), if it
    /// would: below a non-directory this same layer wrote, or a non-directory where a layer
    /// above put entries without a directory entry of its own. Docker writes such entries
    /// through the symlink; a top-down merge cannot (it meets the symlink after what lies
    /// below it), so they are refused. Layers built by Docker or buildah never hold them: a
    /// write through a symlink lands in the diff at the symlink's target.
    pub fn writes_through(&self, path: &str, is_dir: bool) -> Option<String> {
        if let Some(a) = ancestors(path).find(|a| {
            self.decided
                .get(*a)
                .is_some_and(|d| !d.dir && d.layer == self.layer)
        }) {
            return Some(format!(
                "it lies below '{a}', a symlink or file of the same layer: writing through it is refused"
            ));
        }
        if is_dir || self.decided.contains_key(path) || self.hidden_from_above(path) {
            return None;
        }
        match self.implicit_dirs.get(path) {
            // layer 0 is gpurun's own files (/.gpurun): they win without a word
            Some((layer, below)) if *layer > 0 => Some(format!(
                "a layer above writes '{below}' below it as if it were a directory; writing through a symlink or file is refused"
            )),
            _ => None,
        }
    }

    /// May a hard link in the current layer to `target` be written as a link? Only when the
    /// image's final `target` is the one this layer sees: written by this layer or a lower one.
    pub fn link_target_ok(&self, target: &str) -> bool {
        match self.decided.get(target) {
            Some(d) => d.layer == self.layer && !d.dir,
            None => !self.hidden_from_above(target) && !self.implicit_dirs.contains_key(target),
        }
    }
}

/// One layer: a name for messages (its digest) and a way to open its (possibly compressed) tar.
pub struct Layer {
    pub name: String,
    /// Stored (compressed) size in bytes, 0 when unknown: the squashfs is about this big.
    pub size: u64,
    #[allow(clippy::type_complexity)]
    pub open: Box<dyn Fn() -> io::Result<Box<dyn Read + Send>> + Send + Sync>,
    /// The same bytes as a range of a file, where they are one: a gzip layer then inflates on
    /// many cores.
    #[allow(clippy::type_complexity)]
    pub span: Option<Box<dyn Fn() -> io::Result<Span> + Send + Sync>>,
}

/// What the flattening dropped or changed, for one summary warning.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub entries: u64,
    pub devices_dropped: u64,
    pub setid_cleared: u64,
    pub unsupported_skipped: u64,
    /// One line per neutralised or refused entry (capped), naming layer and entry.
    pub notes: Vec<String>,
    pub notes_omitted: u64,
}

impl Report {
    fn note(&mut self, line: String) {
        if self.notes.len() < 20 {
            self.notes.push(line);
        } else {
            self.notes_omitted += 1;
        }
    }
}

/// A file written at the start of the image, ahead of every layer (gpurun's metadata).
pub struct ExtraFile<'a> {
    pub path: &'a str,
    pub data: &'a [u8],
}

/// Merge `layers` (top first) into one tar stream on `out`, a gzip layer inflated on up to
/// `threads` cores; `on_read` hears of every (compressed) layer byte read.
pub fn flatten<W: Write>(
    layers: &[Layer],
    extra: &[ExtraFile<'_>],
    out: W,
    threads: usize,
    on_read: &(dyn Fn(u64) + Sync),
) -> Result<Report, FlattenError> {
    let mut f = Flattener {
        b: tar::Builder::new(out),
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
    f.b.into_inner()
        .and_then(|mut w| w.flush())
        .map_err(FlattenError::Write)?;
    Ok(f.report)
}

/// One [`flatten`] under way: the stream being written and what the layers above decided.
struct Flattener<'a, W: Write> {
    b: tar::Builder<W>,
    layers: &'a [Layer],
    threads: usize,
    merge: Merge,
    /// Non-directories written so far; hard links are written last, once their target is known
    /// to be in the image (tar2sqfs aborts on a dangling one).
    written: HashSet<String>,
    links: Vec<PendingLink>,
    /// (layer, replaced link target) -> the path its content was copied to.
    copies: HashMap<(usize, String), String>,
    report: Report,
}

/// An entry on its way into the stream: where it comes from (for errors) and what it becomes.
struct Out<'e> {
    layer: &'e Layer,
    raw: &'e str,
    path: &'e str,
    header: Header,
    xattrs: Vec<(String, Vec<u8>)>,
}

impl Out<'_> {
    fn refused(&self, why: String) -> FlattenError {
        refused(self.layer, self.raw, why)
    }
}

/// The error for an entry `raw` of `layer` that cannot go into the image.
fn refused(layer: &Layer, raw: &str, why: String) -> FlattenError {
    FlattenError::Entry {
        layer: layer.name.clone(),
        entry: shown(raw),
        why,
    }
}

impl<W: Write> Flattener<'_, W> {
    /// gpurun's files, ahead of every layer (as a layer 0 above them all).
    fn extra_files(&mut self, extra: &[ExtraFile<'_>]) -> Result<(), FlattenError> {
        let now_epoch = 0;
        self.merge.begin_layer(0);
        for f in extra {
            for a in ancestors(f.path).collect::<Vec<_>>().into_iter().rev() {
                if self.merge.decide(a, true) {
                    let mut h = header(EntryType::Directory, 0o755, 0, 0, now_epoch);
                    self.b
                        .append_data(&mut h, a, io::empty())
                        .map_err(FlattenError::Write)?;
                }
            }
            self.merge.decide(f.path, false);
            let mut h = header(EntryType::Regular, 0o644, 0, 0, now_epoch);
            h.set_size(f.data.len() as u64);
            self.b
                .append_data(&mut h, f.path, f.data)
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

    /// One entry of layer `i`: judged, then written, or kept for the end (a hard link).
    fn entry<R: Read>(
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

    /// Whether this layer's entry at `path` is the one the image keeps (see [`Merge::decide`]),
    /// and of a kind it can hold.
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
        write_pax(&mut self.b, &o.xattrs)?;
        let size = entry.size();
        o.header.set_size(size);
        let mut data = Exact::new(entry, size);
        self.b.append_data(&mut o.header, o.path, &mut data).map_err(|e| {
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
        write_pax(&mut self.b, &o.xattrs)?;
        self.b
            .append_link(&mut o.header, o.path, &target)
            .map_err(FlattenError::Write)?;
        self.written.insert(o.path.to_string());
        Ok(())
    }

    /// A hard link of layer `i`: kept for the end when its target is in the image; its
    /// target's content copied when that was replaced above; `false` when skipped.
    fn hard_link<R: Read>(
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
            if materialise(self.layers, i, &t.path, path, &mut self.b)? {
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

    /// A directory or a fifo: a header only.
    fn other(&mut self, mut o: Out<'_>) -> Result<(), FlattenError> {
        write_pax(&mut self.b, &o.xattrs)?;
        self.b
            .append_data(&mut o.header, o.path, io::empty())
            .map_err(FlattenError::Write)?;
        if o.header.entry_type() != EntryType::Directory {
            self.written.insert(o.path.to_string());
        }
        Ok(())
    }

    /// The hard links kept for the end, each once its target is written; chains (a link to a
    /// link) resolve over several rounds.
    fn pending_links(&mut self) -> Result<(), FlattenError> {
        let mut links = std::mem::take(&mut self.links);
        loop {
            let before = links.len();
            let mut unresolved = Vec::new();
            for mut l in links {
                if self.written.contains(&l.target) {
                    write_pax(&mut self.b, &l.xattrs)?;
                    self.b
                        .append_link(&mut l.header, &l.path, &l.target)
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

/// Exactly `left` bytes of `inner`, or UnexpectedEof: the tar builder pads a short copy silently,
/// which would hand tar2sqfs a header that lies about its data.
struct Exact<R> {
    inner: R,
    left: u64,
    /// Tells a reading error (the layer's fault) from a writing one (the pipe's).
    read_failed: bool,
    crc: crc32fast::Hasher,
}

impl<R: Read> Exact<R> {
    fn new(inner: R, left: u64) -> Exact<R> {
        Exact {
            inner,
            left,
            read_failed: false,
            crc: crc32fast::Hasher::new(),
        }
    }
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = match self.inner.read(&mut buf[..want]) {
            Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
            r => r,
        }
        .inspect_err(|_| self.read_failed = true)?;
        self.left -= n as u64;
        self.crc.update(&buf[..n]);
        Ok(n)
    }
}

/// What a non-directory entry holds (its type, mode, owner, size, link target and a CRC-32 of
/// its data), to tell an identical repeat of a path in one layer from a different one.
#[derive(Debug, PartialEq, Eq)]
struct Print {
    kind: u8,
    mode: u32,
    owner: (u64, u64),
    size: u64,
    link: Vec<u8>,
    crc: u32,
}

impl Print {
    /// Everything but the data's checksum (0 until set).
    fn meta<R: Read>(entry: &tar::Entry<R>) -> Print {
        let h = entry.header();
        Print {
            kind: h.entry_type().as_byte(),
            mode: h.mode().unwrap_or(0),
            owner: (h.uid().unwrap_or(0), h.gid().unwrap_or(0)),
            size: entry.size(),
            link: entry
                .link_name_bytes()
                .map(|l| l.into_owned())
                .unwrap_or_default(),
            crc: 0,
        }
    }

    /// CRC-32 of an entry's data, read to its end.
    fn checksum<R: Read>(entry: &mut tar::Entry<R>) -> io::Result<u32> {
        let mut h = crc32fast::Hasher::new();
        let mut buf = [0u8; 64 << 10];
        loop {
            match entry.read(&mut buf)? {
                0 => return Ok(h.finalize()),
                n => h.update(&buf[..n]),
            }
        }
    }
}

struct PendingLink {
    path: String,
    target: String,
    header: Header,
    xattrs: Vec<(String, Vec<u8>)>,
    /// "layer L: hard link 'A' -> 'B'", for the note when it cannot be written.
    what: String,
}

fn header(t: EntryType, mode: u32, uid: u64, gid: u64, mtime: u64) -> Header {
    let mut h = Header::new_gnu();
    h.set_entry_type(t);
    h.set_mode(mode);
    h.set_uid(uid);
    h.set_gid(gid);
    h.set_mtime(mtime);
    h.set_size(0);
    h
}

/// The entry's `SCHILY.xattr.*` PAX records (how OCI layers carry xattrs).
fn xattrs<R: Read>(entry: &mut tar::Entry<'_, R>) -> io::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    if let Some(exts) = entry.pax_extensions()? {
        for ext in exts {
            let ext = ext?;
            if let Ok(k) = ext.key() {
                if k.starts_with("SCHILY.xattr.") {
                    out.push((k.to_string(), ext.value_bytes().to_vec()));
                }
            }
        }
    }
    Ok(out)
}

/// Write a PAX extended header carrying `records` (the tar crate's builder has no writer for them).
fn write_pax<W: Write>(
    b: &mut tar::Builder<W>,
    records: &[(String, Vec<u8>)],
) -> Result<(), FlattenError> {
    if records.is_empty() {
        return Ok(());
    }
    let mut data = Vec::new();
    for (k, v) in records {
        // "LEN KEY=VALUE\n" where LEN counts itself.
        let body = k.len() + v.len() + 3;
        let mut len = body + body.to_string().len();
        if len.to_string().len() != body.to_string().len() {
            len = body + len.to_string().len();
        }
        data.extend_from_slice(format!("{len} {k}=").as_bytes());
        data.extend_from_slice(v);
        data.push(b'\n');
    }
    let mut h = Header::new_ustar();
    h.set_entry_type(EntryType::XHeader);
    h.set_path("PaxHeader").map_err(FlattenError::Write)?;
    h.set_mode(0o644);
    h.set_size(data.len() as u64);
    h.set_cksum();
    b.append(&h, data.as_slice()).map_err(FlattenError::Write)
}

/// A hard link whose target was replaced above its layer: write the target's content as this
/// layer saw it (the topmost regular file at `target` from layer `from` down) as a plain file.
fn materialise<W: Write>(
    layers: &[Layer],
    from: usize,
    target: &str,
    path: &str,
    b: &mut tar::Builder<W>,
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
                    write_pax(b, &xa)?;
                    let mut data = Exact::new(&mut entry, size);
                    b.append_data(&mut h, path, &mut data).map_err(|e| {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_paths() {
        let cases = [
            ("a/b", "a/b", false),
            ("./a/b/", "a/b", false),
            ("a//b/./c", "a/b/c", false),
            ("/etc/passwd", "etc/passwd", true),
            ("a/../b", "b", false),
            ("../../etc/shadow", "etc/shadow", true),
            ("a/../../b", "b", true),
            ("./", "", false),
            ("/", "", false),
            ("/./", "", false),
            ("/..", "", true),
            ("..", "", true),
            ("a/b/..", "a", false),
        ];
        for (raw, path, escaped) in cases {
            assert_eq!(
                normalize(raw),
                Normalized {
                    path: path.into(),
                    escaped
                },
                "{raw}"
            );
        }
    }

    #[test]
    fn classify_names() {
        let cases = [
            ("etc/.wh.motd", Kind::Whiteout("etc/motd".into())),
            (".wh.opt", Kind::Whiteout("opt".into())),
            (
                "usr/share/doc/.wh..wh..opq",
                Kind::Opaque("usr/share/doc".into()),
            ),
            (".wh..wh..opq", Kind::Opaque("".into())),
            ("x/.wh..wh.plnk", Kind::Internal),
            ("x/.wh.", Kind::Entry),
            ("x/a.wh.b", Kind::Entry),
            ("etc/motd", Kind::Entry),
        ];
        for (p, k) in cases {
            assert_eq!(classify(p), k, "{p}");
        }
    }

    /// One step of a merge script.
    enum Op {
        Next(usize),
        Wh(&'static str),
        Opq(&'static str),
        /// path, is_dir, expected decision
        E(&'static str, bool, bool),
        /// hard link target, expected link_target_ok
        L(&'static str, bool),
        /// path, is_dir, expected: refused as a write through a symlink or file
        T(&'static str, bool, bool),
    }
    use Op::*;

    fn run(script: &[Op]) {
        let mut m = Merge::new();
        for (n, op) in script.iter().enumerate() {
            match op {
                Next(i) => {
                    m.end_layer();
                    m.begin_layer(*i);
                }
                Wh(p) => m.whiteout(p),
                Opq(d) => m.opaque(d),
                E(p, dir, want) => assert_eq!(m.decide(p, *dir), *want, "step {n}: {p}"),
                L(t, want) => assert_eq!(m.link_target_ok(t), *want, "step {n}: link to {t}"),
                T(p, dir, want) => {
                    assert_eq!(m.writes_through(p, *dir).is_some(), *want, "step {n}: {p}")
                }
            }
        }
    }

    #[test]
    fn writes_through_symlinks_are_refused() {
        run(&[
            // gpurun's own files (layer 0) win over an image's symlink without a word
            E(".gpurun/meta.json", false, true),
            Next(1),
            T("lnk/evil", false, false), // nothing known about lnk yet
            E("lnk/evil", false, true),
            E("real", true, true),
            E("real/x", false, true),
            E("sd", false, true), // a symlink
            T("sd/evil", false, true),
            T("sd/deeper/evil", true, true),
            T("sd", false, false),
            Next(2),
            T(".gpurun", false, false),
            T("lnk", false, true), // the layer above wrote lnk/evil with no directory entry
            T("lnk", true, false), // a directory there is what the layer above meant
            T("real", false, false), // the layer above made it a directory itself
            T("sd/evil", false, false), // a lower layer below an upper symlink: just hidden
            E("sd/evil", false, false),
            Wh("gone"),
            Next(3),
            T("gone", false, false),
        ]);
    }

    #[test]
    fn upper_layer_wins() {
        run(&[
            Next(1),
            E("etc", true, true),
            E("etc/hosts", false, true),
            Next(2),
            E("etc", true, false),        // dir attributes from above
            E("etc/hosts", false, false), // replaced above
            E("etc/passwd", false, true), // merged into the upper dir
        ]);
    }

    #[test]
    fn whiteouts_hide_lower_layers_only() {
        run(&[
            Next(1),
            Wh("etc/motd"),
            Wh("opt/gone"),
            E("etc/new", false, true),
            Next(2),
            E("etc/motd", false, false),
            E("opt/gone", true, false),
            E("opt/gone/deep/file", false, false),
            E("opt/kept", false, true),
            E("etc/motd.d", false, true), // a sibling with a common prefix is not hidden
        ]);
    }

    #[test]
    fn whiteout_applies_after_the_layer_even_when_listed_late() {
        run(&[
            Next(1),
            E("a", false, true),
            Wh("b"),
            Next(2),
            E("b", false, false),
        ]);
    }

    #[test]
    fn opaque_dirs() {
        run(&[
            Next(1),
            E("usr/share/doc", true, true),
            Opq("usr/share/doc"),
            E("usr/share/doc/new", false, true), // same layer: kept
            Next(2),
            E("usr/share/doc", true, false),
            E("usr/share/doc/old", false, false),
            E("usr/share/doc/x/y", false, false),
            E("usr/share/docs", false, true),
            E("usr/share", true, true),
        ]);
    }

    #[test]
    fn opaque_root() {
        run(&[
            Next(1),
            Opq(""),
            E("etc/new", false, true),
            Next(2),
            E("etc", true, false),
            E("bin/sh", false, false),
        ]);
    }

    #[test]
    fn file_replacing_dir_and_dir_replacing_file() {
        run(&[
            Next(1),
            E("opt/app", false, true), // a file where lower layers had a dir
            E("var/lib/x", false, true), // implies var/lib is a dir
            Next(2),
            E("opt/app", true, false),
            E("opt/app/bin/tool", false, false),
            E("var/lib", false, false), // a file below an implied dir is hidden
            E("var/lib", true, true),   // its first real dir entry gives attributes
            E("var/lib", true, false),
        ]);
    }

    #[test]
    fn hard_link_targets() {
        run(&[
            Next(1),
            E("bin/a", false, true),
            L("bin/a", true),     // same layer
            L("bin/lower", true), // comes from a lower layer
            Wh("bin/gone"),
            Next(2),
            L("bin/a", false),    // replaced above: this layer's bin/a differs
            L("bin/gone", false), // deleted above
            E("bin/b", false, true),
            L("bin/b", true),
            L("bin", false), // a directory is not a link target
        ]);
    }

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
        assert!(over_limits(&"n".repeat(255)).is_none());
        let deep = vec!["d".repeat(200); 21].join("/");
        assert!(over_limits(&deep).unwrap().contains("more than 4095"));
        assert!(over_limits(&deep[..4095]).is_none());
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

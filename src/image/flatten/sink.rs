//! Where the merged entries go: a tar stream (tar2sqfs's stdin, for the .sqsh) or a directory
//! written as they come (image/unpack.rs, for a first start).

use std::io::{self, Read, Write};

use tar::{EntryType, Header};

/// The receiver of [`flatten_into`](super::flatten_into)'s entries, in order: each path once,
/// a hard link only after its target.
pub trait Sink {
    /// An entry of any kind but a hard link or symlink: exactly `header`'s size bytes of `data`
    /// (0 but for a regular file), `xattrs` as `SCHILY.xattr.NAME` PAX records.
    fn append(
        &mut self,
        header: &mut Header,
        path: &str,
        xattrs: &[(String, Vec<u8>)],
        data: &mut dyn Read,
    ) -> io::Result<()>;
    /// A symlink or hard link (`header`'s type) to `target`, an image path for a hard link.
    fn append_link(
        &mut self,
        header: &mut Header,
        path: &str,
        target: &str,
        xattrs: &[(String, Vec<u8>)],
    ) -> io::Result<()>;
    /// After the last entry: the stream's end written and flushed, or every write done.
    fn finish(&mut self) -> io::Result<()>;
}

impl<W: Write> Sink for tar::Builder<W> {
    fn append(
        &mut self,
        header: &mut Header,
        path: &str,
        xattrs: &[(String, Vec<u8>)],
        data: &mut dyn Read,
    ) -> io::Result<()> {
        write_pax(self, xattrs)?;
        self.append_data(header, path, data)
    }

    fn append_link(
        &mut self,
        header: &mut Header,
        path: &str,
        target: &str,
        xattrs: &[(String, Vec<u8>)],
    ) -> io::Result<()> {
        write_pax(self, xattrs)?;
        tar::Builder::append_link(self, header, path, target)
    }

    fn finish(&mut self) -> io::Result<()> {
        tar::Builder::finish(self)?;
        self.get_mut().flush()
    }
}

/// Write a PAX extended header carrying `records` (the tar crate's builder has no writer for them).
fn write_pax<W: Write>(b: &mut tar::Builder<W>, records: &[(String, Vec<u8>)]) -> io::Result<()> {
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
    h.set_path("PaxHeader")?;
    h.set_mode(0o644);
    h.set_size(data.len() as u64);
    h.set_cksum();
    b.append(&h, data.as_slice())
}

//! `docker-archive:FILE`: a `docker save` tar, its layers read in place.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde::Deserialize;

use super::error::PullError;
use super::image_config::image_meta;
use crate::image::flatten::{normalize, Layer, Span};
use crate::image::meta::ImageMeta;

/// The most a `docker save` archive's manifest.json or image config may be (real ones: KiBs).
const MAX_JSON: u64 = 16 << 20;

/// A `docker save` archive: manifest.json names the config and the layer members, which are read
/// in place (seek to the member's data) rather than extracted.
pub(super) fn docker_archive(
    file: &Path,
    source: &str,
) -> Result<(Vec<Layer>, ImageMeta), PullError> {
    let fail = |detail: String| PullError::Source {
        source_ref: source.to_string(),
        detail,
    };
    let not_archive = |why: String| PullError::BadImage {
        image: source.to_string(),
        detail: format!(
            "{why}: not a docker save archive (docker save -o FILE.tar IMAGE makes one)"
        ),
    };
    let members = index_members(file).map_err(|e| match e {
        Index::Open(why) => fail(why),
        Index::NotTar(why) => not_archive(format!("not a tar file ({why})")),
    })?;
    let read_member = |name: &str| -> Result<Vec<u8>, PullError> {
        let &(pos, size) = members
            .get(&normalize(name).path)
            .ok_or_else(|| fail(format!("{name} is missing")))?;
        if size > MAX_JSON {
            return Err(PullError::BadImage {
                image: source.to_string(),
                detail: format!(
                    "{name} is {size} bytes, too big for image metadata (at most {MAX_JSON}): not a docker save archive"
                ),
            });
        }
        let mut f = File::open(file).map_err(|e| fail(format!("{}: {e}", file.display())))?;
        let mut v = Vec::with_capacity(size as usize);
        f.seek(SeekFrom::Start(pos))
            .and_then(|_| f.take(size).read_to_end(&mut v))
            .map_err(|e| fail(format!("{name}: {e}")))?;
        Ok(v)
    };
    #[derive(Deserialize)]
    struct Entry {
        #[serde(rename = "Config")]
        config: String,
        #[serde(rename = "Layers")]
        layers: Vec<String>,
    }
    if !members.contains_key("manifest.json") {
        return Err(not_archive("no manifest.json".into()));
    }
    let manifest: Vec<Entry> = serde_json::from_slice(&read_member("manifest.json")?)
        .map_err(|e| fail(format!("manifest.json: {e}")))?;
    let entry = match manifest.as_slice() {
        [one] => one,
        _ => {
            return Err(fail(format!(
                "holds {} images; gpurun reads archives of one",
                manifest.len()
            )))
        }
    };
    let config = read_member(&entry.config)
        .map_err(|_| fail(format!("config {} is missing or unreadable", entry.config)))?;
    let mut layers = Vec::new();
    for l in entry.layers.iter().rev() {
        let &(pos, size) = members
            .get(&normalize(l).path)
            .ok_or_else(|| fail(format!("layer {l} is missing")))?;
        let path = file.to_path_buf();
        layers.push(Layer {
            name: l.clone(),
            size,
            open: Box::new({
                let path = path.clone();
                move || {
                    let mut f = File::open(&path)?;
                    f.seek(SeekFrom::Start(pos))?;
                    Ok(Box::new(f.take(size)) as Box<dyn Read + Send>)
                }
            }),
            // Members are trusted as they are (the module's known limit): nothing to check.
            span: Some(Box::new(move || {
                Ok(Span {
                    file: File::open(&path)?,
                    start: pos,
                    len: size,
                    check: None,
                    arrival: None,
                })
            })),
        });
    }
    let meta = image_meta(&config, source, "").map_err(|e| PullError::Config {
        image: source.to_string(),
        source: e,
    })?;
    Ok((layers, meta))
}

/// Why the archive's members could not be listed: the file cannot be opened (missing: exit 20),
/// or it is no tar (a malformed image: exit 23).
enum Index {
    Open(String),
    NotTar(String),
}

/// The archive's members: name -> (data offset, size). Only manifest.json and the config are
/// read, later, by offset: a hostile archive of many members costs no memory.
fn index_members(file: &Path) -> Result<HashMap<String, (u64, u64)>, Index> {
    let f = File::open(file).map_err(|e| Index::Open(format!("{}: {e}", file.display())))?;
    let mut members = HashMap::new();
    let mut ar = tar::Archive::new(f);
    let not_tar = |e: std::io::Error| Index::NotTar(e.to_string());
    for e in ar.entries().map_err(not_tar)? {
        let e = e.map_err(not_tar)?;
        let name = normalize(&String::from_utf8_lossy(&e.path_bytes())).path;
        members.insert(name, (e.raw_file_position(), e.size()));
    }
    Ok(members)
}

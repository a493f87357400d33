//! Named containers (the SPANK plugin's `--container-name`, as pyxis's): a step's root changes
//! kept on the node in an overlay directory that later steps of the job with the same name reuse.
//! The plugin's job epilog removes the job's (`JOB.*`) at its end. They live in the user's
//! directory the plugin made as root in the site's `containers_dir=` (no fixed name in /tmp
//! that another user could take first).

use std::fs;
use std::path::{Path, PathBuf};

use crate::store::private_dir::{own_dir, own_subdir, Visibility};

#[derive(Debug, thiserror::Error)]
pub enum NamedError {
    #[error("--container-name={0}: a name with '/', '..' or nothing in it; use letters, digits, '-', '_' or '.'")]
    BadName(String),
    #[error("--container-name={0}:create: the container exists already in this job; leave out :create to reuse it")]
    Exists(String),
    #[error("--container-name={0}: no such container in this job yet; give --container-image to create it")]
    NoImage(String),
    #[error("--container-name={0}: its image {1} is gone (a registry image's copy ends with its step); give --container-image again")]
    ImageGone(String, String),
    #[error("--container-name={name}: it was made from {recorded}, not {given}; leave out --container-image or use another name")]
    OtherImage {
        name: String,
        recorded: String,
        given: String,
    },
    #[error("{0}")]
    Place(#[from] crate::store::private_dir::PlaceError),
    #[error("--container-name: {0}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// `JOB.NAME` as the plugin writes it: one path component, not `.`/`..`.
pub fn valid(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && !name.contains("..") && name != "."
}

/// The image to run and the `--overlay` directory of named container `name` (`JOB.NAME`) in
/// `dir`, the user's directory of named containers: made with `image` where it is not there
/// (an error with `create` where it is), else run with the image it was made from.
pub fn resolve(
    dir: &Path,
    name: &str,
    image: Option<&str>,
    create: bool,
    uid: u32,
) -> Result<(String, PathBuf), NamedError> {
    if !valid(name) {
        return Err(NamedError::BadName(name.into()));
    }
    let fix = "the SPANK plugin makes it as root: check plugstack.conf's containers_dir=";
    let base = own_dir(dir, Visibility::Private, fix)?;
    let dir = base.join(name);
    let record = dir.join("image");
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |e| NamedError::Io(p, e)
    };
    let short = name.split_once('.').map_or(name, |(_, n)| n).to_string();
    match read_record(&record, uid) {
        Ok(_) if create => Err(NamedError::Exists(short)),
        Ok(recorded) => match (image, Path::new(&recorded).exists()) {
            (Some(given), true) if given != recorded => Err(NamedError::OtherImage {
                name: short,
                recorded,
                given: given.into(),
            }),
            // a registry image's per-step copy is gone: this step's copy takes its place
            (Some(given), false) => {
                fs::write(&record, given).map_err(io(&record))?;
                Ok((given.to_string(), dir.join("overlay")))
            }
            (None, false) => Err(NamedError::ImageGone(short, recorded)),
            _ => Ok((recorded, dir.join("overlay"))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let image = image.ok_or(NamedError::NoImage(short))?;
            let dir = own_subdir(&base, name, Visibility::Private, fix)?;
            let overlay = own_subdir(&dir, "overlay", Visibility::Private, fix)?;
            // written last: a container without its record is made again
            fs::write(&record, image).map_err(io(&record))?;
            Ok((image.to_string(), overlay))
        }
        Err(e) => Err(NamedError::Io(record, e)),
    }
}

/// The image named in `record`, a file of the user's own closed to others (NotFound when
/// missing).
fn read_record(record: &Path, uid: u32) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = crate::store::private_dir::open_trusted(record, uid).map_err(|p| match p {
        crate::store::private_dir::Problem::Io(k, t) => std::io::Error::new(k, t),
        p => std::io::Error::other(p.to_string()),
    })?;
    let mut s = String::new();
    f.read_to_string(&mut s)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for (n, ok) in [
            ("7.c1", true),
            ("7.a.b", true),
            ("", false),
            ("7.a/b", false),
            ("7...", false),
            ("..", false),
            (".", false),
        ] {
            assert_eq!(valid(n), ok, "{n}");
        }
    }
}

//! `gpurun exec --save OUT`: a container's root, its changes over its image, as a new image.

use std::path::{Path, PathBuf};

use super::dir_source::dir_layer;
use super::error::PullError;
use super::options::PullOptions;
use super::progress::Ui;
use super::staging::Staging;
use super::write_image::build;
use crate::image::meta::ImageMeta;

/// Where `gpurun exec --save OUT` writes, claimed before the container runs, so that an OUT
/// that exists or a directory that cannot be written is said before the command runs.
pub struct SaveTarget(Staging);

impl SaveTarget {
    pub fn out(&self) -> &Path {
        &self.0.out
    }
}

pub fn save_target(out: &Path, replace: bool) -> Result<SaveTarget, PullError> {
    match out.symlink_metadata() {
        Ok(m) if replace && !m.is_dir() => {}
        Ok(_) => return Err(PullError::Exists(out.to_path_buf())),
        Err(_) => {}
    }
    Ok(SaveTarget(Staging::beside(out)?))
}

/// Write a container's root as a new image at the target: `changes` (an overlay's upper
/// directory; without `mount_points`, the ones made for the container's mounts) over the
/// image's tree at `image`, with the image's metadata `meta`. OUT appears whole or not at all.
pub fn save(
    target: SaveTarget,
    (changes, mount_points): (&Path, Vec<PathBuf>),
    image: &Path,
    meta: &ImageMeta,
    opts: &PullOptions,
) -> Result<PathBuf, PullError> {
    let out = target.0.out.clone();
    let layers = [
        dir_layer(changes, "the container's changes", true, mount_points),
        dir_layer(image, "the image", false, Vec::new()),
    ];
    build(&layers, meta, target.0, opts, &Ui::new(opts.quiet))?;
    Ok(out)
}

//! The top-down merge's decisions (pure): which layer's entry wins a path, what whiteouts and
//! opaque directories hide, where a hard link may point, what would write through a symlink.

use std::collections::{HashMap, HashSet};

use super::paths::ancestors;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}

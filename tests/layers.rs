//! ARCHITECTURE's layers held against the code: every `crate::`, `super::` and `self::` path in
//! src/ (in main.rs also `gpurun::`) points into its own layer or one below, the parts of a layer
//! ("image|gpu") stay apart, no files use each other round a circle, every file is in a layer,
//! clap is used in the top layer only, and slurm/ uses nothing of gpurun (nor do its files form
//! a circle). Paths are read from the text, comments and strings left out.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, top first; each a name and its parts, each part its entries (`cli/`, `main.rs`).
type Layers = Vec<(String, Vec<Vec<String>>)>;

/// The lines below `layers:` up to the next blank line: `NAME: ENTRY… [| ENTRY…]`.
fn parse_layers(text: &str) -> Result<Layers, String> {
    let mut lines = text.lines().skip_while(|l| l.trim() != "layers:");
    if lines.next().is_none() {
        return Err("ARCHITECTURE has no 'layers:' line".into());
    }
    let mut layers = Layers::new();
    for line in lines.take_while(|l| !l.trim().is_empty()) {
        let (name, entries) = (line.split_once(':'))
            .ok_or_else(|| format!("ARCHITECTURE: '{line}' is not 'NAME: ENTRIES'"))?;
        let parts = entries
            .split('|')
            .map(|p| p.split_whitespace().map(String::from).collect())
            .collect();
        layers.push((name.trim().to_string(), parts));
    }
    match layers.is_empty() {
        true => Err("ARCHITECTURE lists no layer below 'layers:'".into()),
        false => Ok(layers),
    }
}

/// (layer, part) of a file of src/ (`cli/mod.rs`): a folder entry holds everything under it.
fn place(layers: &Layers, rel: &str) -> Option<(usize, usize)> {
    let holds = |e: &String| match e.ends_with('/') {
        true => rel.starts_with(e.as_str()),
        false => rel == e,
    };
    layers.iter().enumerate().find_map(|(l, (_, parts))| {
        let p = parts.iter().position(|p| p.iter().any(holds))?;
        Some((l, p))
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `text` with comments and the insides of string and char literals blanked (newlines kept,
/// so offsets and line numbers stay).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            i + rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len())
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = i;
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            j
        } else if let Some(hashes) = raw_string_start(b, i) {
            let close: Vec<u8> = std::iter::once(b'"').chain(vec![b'#'; hashes]).collect();
            let body = i + hashes + 2 + usize::from(b[i] == b'b');
            let len = b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice());
            body + len.unwrap_or(b.len() - body) + close.len()
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}', '"'); otherwise a lifetime, left as it is.
            let close = match b.get(i + 1) {
                Some(b'\\') => b[i + 3..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|p| i + 4 + p),
                Some(_) => {
                    let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + ch) == Some(&b'\'')).then_some(i + 2 + ch)
                }
                None => None,
            };
            close.unwrap_or(i + 1)
        } else {
            i += 1;
            continue;
        };
        if end > i + 1 || b[i] == b'\'' {
            blank(&mut out, i, end);
        }
        i = end.max(i + 1);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The number of `#`s when a raw string (r"…", r#"…"#, br"…") starts at `i`.
fn raw_string_start(b: &[u8], i: usize) -> Option<usize> {
    let word_start = i == 0 || !is_ident(b[i - 1]);
    let j = i + usize::from(b[i] == b'b');
    if !word_start || b.get(j) != Some(&b'r') {
        return None;
    }
    let hashes = b[j + 1..].iter().take_while(|&&c| c == b'#').count();
    (b.get(j + 1 + hashes) == Some(&b'"')).then_some(hashes)
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The module a file of src/ is: `image/sqfs/mod.rs` is [image, sqfs]; lib.rs and main.rs the root.
fn module_of(rel: &str) -> Vec<String> {
    let rel = rel.strip_suffix(".rs").unwrap_or(rel);
    let mut m: Vec<String> = rel.split('/').map(String::from).collect();
    if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        m.pop();
    }
    m
}

/// A module path a file names: its line, the path from the crate root, and whether it is in a
/// `#[cfg(test)]` module.
type Reference = (usize, Vec<String>, bool);

/// Every module path a file names.
fn references(code: &str, file_module: &[String], binary: bool) -> Vec<Reference> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    // `mod NAME;`: a child module, which this file may name without `self::`.
    let children: BTreeSet<&str> = (code.split(';'))
        .filter_map(|s| {
            s.split_whitespace()
                .rev()
                .take(2)
                .collect::<Vec<_>>()
                .try_into()
                .ok()
        })
        .filter_map(|[name, m]: [&str; 2]| (m == "mod").then_some(name))
        .collect();
    // Inline modules (`mod tests {`) open at a brace depth: their paths are relative to them.
    let (mut depth, mut inline): (usize, Vec<(String, usize, bool)>) = (0, Vec::new());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d, _)| *d == depth) {
                    inline.pop();
                }
            }
            c if is_ident(c) && (i == 0 || !is_ident(b[i - 1]) && b[i - 1] != b':') => {
                let word_end = i + b[i..].iter().take_while(|&&c| is_ident(c)).count();
                let word = &code[i..word_end];
                let mut module: Vec<String> = file_module.to_vec();
                module.extend(inline.iter().map(|(n, _, _)| n.clone()));
                let in_test = inline.iter().any(|(_, _, t)| *t);
                if word == "mod" {
                    let name_at = word_end + count_ws(&b[word_end..]);
                    let name_end =
                        name_at + b[name_at..].iter().take_while(|&&c| is_ident(c)).count();
                    let after = name_end + count_ws(&b[name_end..]);
                    if name_end > name_at && b.get(after) == Some(&b'{') {
                        let test = code[..i].trim_end().trim_end_matches("pub").trim_end();
                        let test = test.ends_with("#[cfg(test)]");
                        inline.push((code[name_at..name_end].to_string(), depth, test));
                    }
                } else if b[word_end..].starts_with(b"::") {
                    let base = match word {
                        "crate" if !binary => Some(Vec::new()),
                        "gpurun" if binary => Some(Vec::new()),
                        "self" | "super" if !binary => Some(module),
                        w if inline.is_empty() && children.contains(w) => Some(module),
                        _ => None,
                    };
                    if let Some(base) = base {
                        let line = code[..i].matches('\n').count() + 1;
                        let keyword = matches!(word, "crate" | "gpurun" | "self");
                        let start = if keyword { word_end + 2 } else { i };
                        let (paths, _) = use_tree(code, start, base);
                        out.extend(paths.into_iter().map(|p| (line, p, in_test)));
                    }
                }
                i = word_end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

fn count_ws(b: &[u8]) -> usize {
    b.iter().take_while(|c| c.is_ascii_whitespace()).count()
}

/// The paths of a path or use tree at `i` (`a::b`, `a::{b, c::{d, self}}`, `super::x`), each
/// from `prefix`, and where it ends.
fn use_tree(code: &str, mut i: usize, mut prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let b = code.as_bytes();
    loop {
        i += count_ws(&b[i..]);
        match b.get(i) {
            Some(b'{') => {
                let mut all = Vec::new();
                i += 1;
                loop {
                    i += count_ws(&b[i..]);
                    match b.get(i) {
                        Some(b'}') | None => return (all, i + 1),
                        Some(b',') => i += 1,
                        _ => {
                            let (paths, end) = use_tree(code, i, prefix.clone());
                            all.extend(paths);
                            // Past `as NAME` and the like, to the next item.
                            i = end
                                + b[end..]
                                    .iter()
                                    .take_while(|&&c| c != b',' && c != b'}')
                                    .count();
                        }
                    }
                }
            }
            Some(&c) if is_ident(c) => {
                let end = i + b[i..].iter().take_while(|&&c| is_ident(c)).count();
                match &code[i..end] {
                    "super" => {
                        prefix.pop();
                    }
                    "self" => {}
                    w => prefix.push(w.to_string()),
                }
                let after = end + count_ws(&b[end..]);
                if !b[after..].starts_with(b"::") {
                    return (vec![prefix], end);
                }
                i = after + 2;
            }
            _ => return (vec![prefix], i),
        }
    }
}

/// The file of src/ a path lands in: the longest prefix that is a module file, else lib.rs
/// (the items lib.rs defines: `lock`, `exit`).
fn file_of(path: &[String], files: &BTreeSet<String>) -> String {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("/"))
        .find_map(|m| {
            [format!("{m}.rs"), format!("{m}/mod.rs")]
                .into_iter()
                .find(|f| files.contains(f))
        })
        .unwrap_or_else(|| "lib.rs".into())
}

/// What in the tree at `root` breaks ARCHITECTURE, one line each.
fn check(root: &Path) -> Vec<String> {
    let text = fs::read_to_string(root.join("ARCHITECTURE")).unwrap_or_default();
    let layers = match parse_layers(&text) {
        Ok(l) => l,
        Err(e) => return vec![e],
    };
    let src = root.join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let rel = |p: &Path| p.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
    let files: BTreeSet<String> = paths.iter().map(|p| rel(p)).collect();
    let name = |(l, p): (usize, usize)| match layers[l].1.len() {
        1 => format!("layer {}", layers[l].0),
        _ => format!("{} of layer {}", layers[l].1[p].join(" "), layers[l].0),
    };
    let mut problems = Vec::new();
    let mut edges = Edges::new();
    let mut said = BTreeSet::new();
    for f in &files {
        let Some(from) = place(&layers, f) else {
            problems.push(format!(
                "src/{f}: in no layer of ARCHITECTURE; add it to one"
            ));
            continue;
        };
        let code = code_only(&fs::read_to_string(src.join(f)).unwrap_or_default());
        // The command line's parser belongs to the top layer alone.
        if from.0 > 0 {
            let clap = code
                .lines()
                .position(|l| l.contains("clap::") || l.contains("use clap"));
            if let Some(n) = clap {
                let top = &layers[0].0;
                problems.push(format!("src/{f}:{}: uses clap outside layer {top}", n + 1));
            }
        }
        for (line, path, in_test) in references(&code, &module_of(f), f == "main.rs") {
            let target = file_of(&path, &files);
            if &target == f {
                continue;
            }
            // A child's tests may use their parent (cli/man.rs's the whole command line).
            if !in_test {
                let to = edges.entry(f.clone()).or_default();
                to.entry(target.clone()).or_insert(line);
            }
            let Some(to) = place(&layers, &target).filter(|_| said.insert((line, target.clone())))
            else {
                continue;
            };
            let arrow = format!("src/{f}:{line}: crate::{} -> src/{target}", path.join("::"));
            if to.0 < from.0 {
                problems.push(format!("{arrow}: up from {} to {}", name(from), name(to)));
            } else if to.0 == from.0 && to.1 != from.1 {
                problems.push(format!(
                    "{arrow}: {} and {} are apart",
                    name(from),
                    name(to)
                ));
            }
        }
    }
    problems.extend(said_circles(&edges, "src"));
    for dir in parse_apart(&text) {
        problems.extend(apart(root, &dir));
    }
    problems
}

/// Each circle of `edges` (files of `dir`) as one line: every step with the line that makes it.
fn said_circles(edges: &Edges, dir: &str) -> Vec<String> {
    let step = |(a, b): (&String, &String)| format!("{dir}/{a}:{} -> {dir}/{b}", edges[a][b]);
    (circles(edges).iter())
        .map(|c| c.iter().zip(c.iter().cycle().skip(1)).map(step))
        .map(|steps| format!("circle: {}", steps.collect::<Vec<_>>().join(", ")))
        .collect()
}

/// Which file uses which, at which line first (test modules left out).
type Edges = BTreeMap<String, BTreeMap<String, usize>>;

/// Files that use each other round a circle, each circle as a path through it.
fn circles(edges: &Edges) -> Vec<Vec<String>> {
    let next = |f: &String| edges.get(f).into_iter().flat_map(|m| m.keys());
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&String> = next(from).collect();
        while let Some(f) = todo.pop() {
            if seen.insert(f.clone()) {
                todo.extend(next(f));
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        edges.keys().map(|f| (f, reach(f))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for f in edges.keys() {
        if done.contains(f) || !reaches[f].contains(f) {
            continue;
        }
        // A shortest way back to f, through files that f reaches and that reach f.
        let mut back: BTreeMap<String, String> = BTreeMap::new();
        let mut wave = vec![f.clone()];
        'search: while !wave.is_empty() {
            let mut following = Vec::new();
            for a in &wave {
                for b in next(a) {
                    if b == f {
                        let mut way = vec![a.clone()];
                        while let Some(p) = back.get(way.last().unwrap()) {
                            way.push(p.clone());
                        }
                        way.reverse();
                        done.extend(way.iter().cloned());
                        out.push(way);
                        break 'search;
                    }
                    if !back.contains_key(b) && reaches.get(b).is_some_and(|r| r.contains(f)) {
                        back.insert(b.clone(), a.clone());
                        following.push(b.clone());
                    }
                }
            }
            wave = following;
        }
    }
    out
}

/// The crates below `apart:` (`slurm/`), each a line's first word.
fn parse_apart(text: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| l.trim() != "apart:").skip(1);
    let words = lines.by_ref().take_while(|l| !l.trim().is_empty());
    let first = words.filter_map(|l| l.split_whitespace().next());
    first
        .filter(|w| w.ends_with('/'))
        .map(String::from)
        .collect()
}

/// A crate that is apart: no gpurun:: path in its code, no dependency on the gpurun package,
/// and no circle of its own files.
fn apart(root: &Path, dir: &str) -> Vec<String> {
    let krate = root.join(dir);
    let mut problems = crate_circles(&krate.join("src"), &format!("{dir}src"));
    let mut paths = Vec::new();
    rust_files(&krate, &mut paths);
    for p in paths {
        let code = code_only(&fs::read_to_string(&p).unwrap_or_default());
        for (n, line) in code.lines().enumerate() {
            let b = line.as_bytes();
            let at = line.match_indices("gpurun::").map(|(i, _)| i);
            if at.into_iter().any(|i| i == 0 || !is_ident(b[i - 1])) {
                let f = p.strip_prefix(root).unwrap().display();
                problems.push(format!("{f}:{}: uses gpurun; {dir} is apart", n + 1));
            }
        }
    }
    let toml = fs::read_to_string(krate.join("Cargo.toml")).unwrap_or_default();
    for (n, line) in toml.lines().enumerate() {
        let key = line.split('=').next().unwrap_or("").trim();
        let path = (line.split("path").nth(1)).map(|v| v.trim_start_matches([' ', '=', '"']));
        let to_root = path.is_some_and(|v| v.starts_with("..\"") || v.starts_with("../\""));
        if key == "gpurun" || key.starts_with("gpurun.") || to_root {
            let l = n + 1;
            problems.push(format!(
                "{dir}Cargo.toml:{l}: depends on gpurun; {dir} is apart"
            ));
        }
    }
    problems
}

fn crate_circles(src: &Path, dir: &str) -> Vec<String> {
    let mut paths = Vec::new();
    rust_files(src, &mut paths);
    let rel = |p: &Path| p.strip_prefix(src).unwrap().to_string_lossy().into_owned();
    let files: BTreeSet<String> = paths.iter().map(|p| rel(p)).collect();
    let mut edges = Edges::new();
    for f in &files {
        let code = code_only(&fs::read_to_string(src.join(f)).unwrap_or_default());
        for (line, path, in_test) in references(&code, &module_of(f), false) {
            let target = file_of(&path, &files);
            if !in_test && &target != f {
                let to = edges.entry(f.clone()).or_default();
                to.entry(target).or_insert(line);
            }
        }
    }
    said_circles(&edges, dir)
}

#[test]
fn the_code_keeps_its_layers() {
    let problems = check(Path::new(env!("CARGO_MANIFEST_DIR")));
    assert!(
        problems.is_empty(),
        "ARCHITECTURE broken:\n{}",
        problems.join("\n")
    );
}

/// A copy of the repository's ARCHITECTURE, src/ and the crates apart, to plant imports in.
fn copy() -> tempfile::TempDir {
    fn copy_dir(from: &Path, to: &Path) {
        fs::create_dir_all(to).unwrap();
        for e in fs::read_dir(from).unwrap().flatten() {
            let (p, name) = (e.path(), e.file_name());
            if name == "target" {
                continue;
            }
            match p.is_dir() {
                true => copy_dir(&p, &to.join(&name)),
                false => drop(fs::copy(&p, to.join(&name)).unwrap()),
            }
        }
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let t = tempfile::tempdir().unwrap();
    fs::copy(repo.join("ARCHITECTURE"), t.path().join("ARCHITECTURE")).unwrap();
    copy_dir(&repo.join("src"), &t.path().join("src"));
    for krate in ["slurm", "hold-state"] {
        copy_dir(
            &repo.join(krate).join("src"),
            &t.path().join(krate).join("src"),
        );
        let toml = |at: &Path| at.join(krate).join("Cargo.toml");
        fs::copy(toml(repo), toml(t.path())).unwrap();
    }
    t
}

/// Add `lines` to the end of `file`; the line number of the first.
fn plant(root: &Path, file: &str, lines: &str) -> usize {
    let p = root.join(file);
    let mut text = fs::read_to_string(&p).unwrap();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let line = text.lines().count() + 1;
    fs::write(&p, text + lines).unwrap();
    line
}

#[test]
fn planted_arrows_up_and_across_are_caught() {
    let t = copy();
    let root = t.path();
    let up = plant(root, "src/gpu/nvml.rs", "use crate::runtime::plan::Plan;\n");
    let call = "fn f() -> Vec<(String, String)> {\n    crate::gpu::require::constraints(&[])\n}\n";
    let across = plant(root, "src/image/inspect.rs", call);
    let clap = plant(
        root,
        "src/gpu/mod.rs",
        "#[derive(clap::Args)]\nstruct A {}\n",
    );
    let grouped = plant(
        root,
        "src/store/mod.rs",
        "use crate::{sys, cli::{self, Cli}};\n",
    );
    let relative = plant(
        root,
        "src/runtime/image_server/job_keeper.rs",
        "use super::super::super::ps;\n",
    );
    let problems = check(t.path());
    let said = |want: &[&str]| {
        let hit = problems.iter().any(|p| want.iter().all(|w| p.contains(w)));
        assert!(hit, "nothing says {want:?} in:\n{}", problems.join("\n"));
    };
    said(&[
        &format!("src/gpu/nvml.rs:{up}:"),
        "runtime::plan::Plan",
        "up from",
    ]);
    said(&[
        &format!("src/image/inspect.rs:{}:", across + 1),
        "image/ of",
        "gpu/ of",
        "apart",
    ]);
    said(&[
        &format!("src/store/mod.rs:{grouped}:"),
        "crate::cli -> src/cli/mod.rs",
        "up from",
    ]);
    said(&[
        &format!("src/runtime/image_server/job_keeper.rs:{relative}:"),
        "-> src/ps.rs",
        "up from",
    ]);
    said(&[&format!(
        "src/gpu/mod.rs:{clap}: uses clap outside layer commands"
    )]);
    // And the circles these arrows close, nothing else.
    let arrows = problems.iter().filter(|p| !p.starts_with("circle: "));
    assert_eq!(arrows.count(), 5, "{}", problems.join("\n"));
}

#[test]
fn planted_circles_strays_and_imports_into_crates_apart_are_caught() {
    let t = copy();
    let root = t.path();
    let down = plant(root, "src/store/mod.rs", "use crate::sys::process_start;\n");
    let back = plant(
        root,
        "src/sys/mod.rs",
        "pub use crate::store::short_hash;\n",
    );
    plant(root, "src/lib.rs", "pub mod stray;\n");
    fs::write(root.join("src/stray.rs"), "").unwrap();
    let gpurun = plant(
        root,
        "slurm/src/state.rs",
        "use gpurun::runtime::plan::Plan;\n",
    );
    let state = plant(root, "slurm/src/state.rs", "use crate::holder::Creds;\n");
    plant(root, "slurm/Cargo.toml", "gpurun = { path = \"..\" }\n");
    let shared = plant(root, "hold-state/src/lib.rs", "use gpurun::sys;\n");
    // Neither comments nor strings nor a test module's `super` are imports.
    let ignored = "// crate::cli\nconst S: &str = \"crate::ps\";\n";
    plant(root, "src/store/processes.rs", ignored);
    let problems = check(root);
    let want = [
        format!(
            "circle: src/store/mod.rs:{down} -> src/sys/mod.rs, src/sys/mod.rs:{back} -> src/store/mod.rs"
        ),
        "src/stray.rs: in no layer".into(),
        format!("slurm/src/state.rs:{gpurun}: uses gpurun"),
        // holder.rs uses state.rs already
        format!("-> slurm/src/state.rs, slurm/src/state.rs:{state} -> slurm/src/holder.rs"),
        "slurm/Cargo.toml".into(),
        format!("hold-state/src/lib.rs:{shared}: uses gpurun; hold-state/ is apart"),
    ];
    for w in &want {
        let hit = problems.iter().any(|p| p.contains(w.as_str()));
        assert!(hit, "no '{w}' in:\n{}", problems.join("\n"));
    }
    assert_eq!(problems.len(), want.len(), "{}", problems.join("\n"));
}

#[test]
fn use_trees_and_literals_are_read_as_rust_reads_them() {
    let code = code_only(concat!(
        "use super::{a::{self, B}, c};\n",
        "let s = \"crate::x\"; let c = '\"'; // crate::y\n",
        "fn f<'a>() { crate::z::w(r#\"crate::q\"#) }\n",
        "#[cfg(test)]\n",
        "mod tests { use super::*; }\n",
    ));
    let refs = references(&code, &["m".into(), "n".into()], false);
    let got: Vec<(usize, String, bool)> = (refs.into_iter())
        .map(|(l, p, t)| (l, p.join("::"), t))
        .collect();
    let want = [
        (1, "m::a", false),
        (1, "m::a::B", false),
        (1, "m::c", false),
        (3, "z::w", false),
        (5, "m::n", true),
    ];
    let want: Vec<(usize, String, bool)> = (want.iter())
        .map(|(l, p, t)| (*l, p.to_string(), *t))
        .collect();
    assert_eq!(got, want);
}

//! Images gpurun did not build: what `run` and the environment come from in each tool's layout.
//!
//! - gpurun: `/.gpurun/meta.json` (the OCI config, kept at pull time).
//! - Apptainer/Singularity (the squashfs inside a SIF, or a sandbox made into a squashfs):
//!   `/.singularity.d/env/*.sh` are sourced in name order before every command, `runscript` is
//!   what `run` starts (with the user's arguments), `labels.json` holds the labels.
//! - enroot: `/etc/environment` holds the image's `KEY=VALUE` environment (enroot writes the OCI
//!   config's Env there), and `/etc/rc` is what `enroot start` runs (it `cd`s to the WorkingDir,
//!   sources `/etc/rc.local` and execs the entrypoint and command, or its arguments).
//! - anything else (plain mksquashfs of a root filesystem): no metadata, `run` starts a shell.

use std::collections::BTreeMap;

use serde::Serialize;

use super::env_list::EnvList;
use super::meta::{bounded, ImageMeta, MetaError, MAX_META_BYTES, META_PATH};

/// Which tool's layout an image follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    Gpurun,
    Apptainer,
    Enroot,
    Plain,
}

impl std::fmt::Display for Flavor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Flavor::Gpurun => "gpurun",
            Flavor::Apptainer => "apptainer",
            Flavor::Enroot => "enroot",
            Flavor::Plain => "plain squashfs",
        })
    }
}

const SINGULARITY_ENV: &str = "/.singularity.d/env";
const SINGULARITY_RUNSCRIPT: &str = "/.singularity.d/runscript";
const SINGULARITY_LABELS: &str = "/.singularity.d/labels.json";

/// The image's metadata, from whichever layout it follows. `read` returns a file's bytes,
/// `list` a directory's entry names (both `None` when missing).
pub fn image_meta(
    read: &dyn Fn(&str) -> Option<Vec<u8>>,
    list: &dyn Fn(&str) -> Option<Vec<String>>,
) -> Result<(Flavor, ImageMeta), MetaError> {
    if let Some(b) = read(META_PATH) {
        return Ok((Flavor::Gpurun, ImageMeta::from_json(&b)?));
    }
    let text = |p: &str| -> Result<Option<String>, MetaError> {
        let Some(b) = read(p) else { return Ok(None) };
        Ok(Some(String::from_utf8_lossy(bounded(p, &b)?).into_owned()))
    };
    if let Some(mut scripts) = list(SINGULARITY_ENV) {
        scripts.retain(|n| n.ends_with(".sh"));
        scripts.sort();
        let mut env = EnvList::new();
        for s in scripts {
            if let Some(t) = text(&format!("{SINGULARITY_ENV}/{s}"))? {
                shell_exports(&t, &mut env);
            }
        }
        let runscript = read(SINGULARITY_RUNSCRIPT).is_some();
        let labels = text(SINGULARITY_LABELS)?
            .and_then(|t| serde_json::from_str::<BTreeMap<String, String>>(&t).ok())
            .unwrap_or_default();
        return Ok((
            Flavor::Apptainer,
            ImageMeta {
                env: env
                    .into_vec()
                    .into_iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect(),
                // Executed itself, as Apptainer does: its #! line picks the interpreter.
                entrypoint: if runscript {
                    vec![SINGULARITY_RUNSCRIPT.into()]
                } else {
                    Vec::new()
                },
                labels,
                ..ImageMeta::default()
            },
        ));
    }
    if let (Some(environment), true) = (text("/etc/environment")?, read("/etc/rc").is_some()) {
        return Ok((
            Flavor::Enroot,
            ImageMeta {
                env: environment_file(&environment)
                    .into_iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect(),
                // /etc/rc does the WorkingDir, rc.local and the entrypoint itself, as under enroot.
                entrypoint: vec!["/bin/sh".into(), "/etc/rc".into()],
                ..ImageMeta::default()
            },
        ));
    }
    Ok((Flavor::Plain, ImageMeta::default()))
}

fn unquote(v: &str) -> &str {
    let v = v.trim();
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return &v[1..v.len() - 1];
        }
    }
    v
}

fn valid_name(k: &str) -> bool {
    let mut c = k.chars();
    matches!(c.next(), Some(ch) if ch == '_' || ch.is_ascii_alphabetic())
        && c.all(|ch| ch == '_' || ch.is_ascii_alphanumeric())
}

/// `/etc/environment` as enroot and pam_env read it: `KEY=VALUE` lines, optionally `export `-ed
/// or quoted; comments and malformed lines are skipped.
pub fn environment_file(text: &str) -> Vec<(String, String)> {
    let mut out = EnvList::new();
    for line in text.lines() {
        let line = line.trim();
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        if line.starts_with('#') || !valid_name(k) {
            continue;
        }
        out.set(k, unquote(v));
    }
    out.into_vec()
}

/// The assignments in Apptainer's env scripts, without running a shell: `export K=V`, `K=V`
/// and `export K="…${OTHER:-default}…"`, expanding `$X`, `${X}` and `${X:-default}` from what
/// the earlier lines set (a variable set nowhere expands to its default, or nothing). Lines that
/// are not plain assignments (conditionals, functions) are skipped: the images Apptainer builds
/// from Docker images and `%environment` sections of plain exports are covered; scripts that
/// compute values are not.
pub fn shell_exports(text: &str, env: &mut EnvList) {
    for line in text.lines() {
        let line = line.trim();
        let rest = line.strip_prefix("export ").unwrap_or(line);
        let Some((k, v)) = rest.split_once('=') else {
            continue;
        };
        if !valid_name(k) {
            continue;
        }
        let v = v.trim();
        let value = if let Some(inner) = v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')) {
            inner.to_string()
        } else {
            let inner = v
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .unwrap_or(v);
            expand(inner, env)
        };
        env.set(k, value);
    }
}

/// `s` with its variables expanded from `env`; at most [`MAX_META_BYTES`] long, however often a
/// value repeats itself (`A=$A$A`, line after line, doubles).
fn expand(s: &str, env: &EnvList) -> String {
    let get = |k: &str| env.get(k).map(str::to_string);
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        if out.len() > MAX_META_BYTES {
            return out;
        }
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(body) = after.strip_prefix('{') {
            let Some(end) = body.find('}') else {
                out.push_str(&rest[i..]);
                return out;
            };
            let expr = &body[..end];
            let (name, default) = match expr.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (expr, None),
            };
            match get(name).filter(|v| !v.is_empty()) {
                Some(v) => out.push_str(&v),
                None => out.push_str(&expand(default.unwrap_or(""), env)),
            }
            rest = &body[end + 1..];
        } else {
            let n = after
                .find(|c: char| c != '_' && !c.is_ascii_alphanumeric())
                .unwrap_or(after.len());
            if n == 0 {
                out.push('$');
            } else if let Some(v) = get(&after[..n]) {
                out.push_str(&v);
            }
            rest = &after[n..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn enroot_environment() {
        let cases: &[(&str, &[(&str, &str)])] = &[
            (
                "PATH=/usr/local/cuda/bin:/usr/bin\nCUDA_VERSION=12.4.1\n",
                &[
                    ("PATH", "/usr/local/cuda/bin:/usr/bin"),
                    ("CUDA_VERSION", "12.4.1"),
                ],
            ),
            (
                "export A=\"x y\"\n# comment=1\n\nB='q'\n",
                &[("A", "x y"), ("B", "q")],
            ),
            ("A=1\nA=2\n", &[("A", "2")]),
            ("EQ=a=b\n1BAD=x\nno equals\n", &[("EQ", "a=b")]),
            ("", &[]),
        ];
        for (text, want) in cases {
            assert_eq!(environment_file(text), kv(want), "{text:?}");
        }
    }

    #[test]
    fn singularity_exports() {
        let mut env = EnvList::new();
        shell_exports(
            "#!/bin/sh\nexport PATH=\"${PATH:-/usr/local/sbin:/usr/bin}\"\n\
             export CUDA_HOME=\"/usr/local/cuda\"\nexport LD=\"$CUDA_HOME/lib64:${LD_X}\"\n\
             if [ -z \"$X\" ]; then\nLIT='$NOT'\nfi\n",
            &mut env,
        );
        assert_eq!(
            env.into_vec(),
            kv(&[
                ("PATH", "/usr/local/sbin:/usr/bin"),
                ("CUDA_HOME", "/usr/local/cuda"),
                ("LD", "/usr/local/cuda/lib64:"),
                ("LIT", "$NOT"),
            ])
        );
    }

    #[test]
    fn doubling_values_stay_bounded() {
        let mut env = EnvList::new();
        shell_exports("export A=xxxxxxxx\n", &mut env);
        shell_exports(&"export A=$A$A\n".repeat(40), &mut env);
        let a = env.get("A").unwrap().len();
        assert!(a <= 2 * MAX_META_BYTES + 16, "{a}");
    }

    #[test]
    fn flavors() {
        use std::collections::HashMap;
        let files = |f: &[(&str, &str)]| -> HashMap<String, Vec<u8>> {
            f.iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect()
        };
        let detect = |f: HashMap<String, Vec<u8>>| {
            let read = |p: &str| f.get(p).cloned();
            let list = |d: &str| {
                let names: Vec<String> = f
                    .keys()
                    .filter_map(|k| k.strip_prefix(&format!("{d}/")).map(str::to_string))
                    .collect();
                (!names.is_empty()).then_some(names)
            };
            image_meta(&read, &list).unwrap()
        };
        let (fl, m) = detect(files(&[(META_PATH, r#"{"cmd":["python"]}"#)]));
        assert_eq!((fl, m.cmd), (Flavor::Gpurun, vec!["python".to_string()]));
        let (fl, m) = detect(files(&[
            ("/etc/environment", "A=1\n"),
            ("/etc/rc", "exec \"$@\"\n"),
        ]));
        assert_eq!(fl, Flavor::Enroot);
        assert_eq!(m.env, vec!["A=1"]);
        assert_eq!(m.entrypoint, vec!["/bin/sh", "/etc/rc"]);
        let (fl, m) = detect(files(&[
            ("/.singularity.d/env/90-environment.sh", "export B=2\n"),
            (
                "/.singularity.d/env/10-docker2singularity.sh",
                "export B=1\nexport C=$B\n",
            ),
            ("/.singularity.d/runscript", "#!/bin/sh\n"),
            ("/.singularity.d/labels.json", r#"{"org.x":"y"}"#),
        ]));
        assert_eq!(fl, Flavor::Apptainer);
        assert_eq!(m.env, vec!["B=2", "C=1"]);
        assert_eq!(m.entrypoint, vec![SINGULARITY_RUNSCRIPT]);
        assert_eq!(m.labels.get("org.x").map(String::as_str), Some("y"));
        // /etc/environment alone is any Debian image, not enroot.
        let (fl, _) = detect(files(&[("/etc/environment", "A=1\n")]));
        assert_eq!(fl, Flavor::Plain);
    }
}

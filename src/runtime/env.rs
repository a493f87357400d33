//! Environment composition, in Apptainer's order: host (minus a deny list) < image < --env-file <
//! GPURUNENV_* < --env < what gpurun itself must set. Pure functions, table-tested.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::env_vars::var;
use crate::image::env_list::EnvList;

/// Used when neither the image nor the user gives a PATH.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The directories a command name is searched in: the container's PATH (an empty entry is the
/// working directory, as in execvp).
pub fn path_dirs(env: &[(String, String)]) -> Vec<PathBuf> {
    var(env, "PATH")
        .unwrap_or(DEFAULT_PATH)
        .split(':')
        .map(|d| PathBuf::from(if d.is_empty() { "." } else { d }))
        .collect()
}

/// Where a command may be: a name with a slash as it is, else the name in each of `path_dirs`
/// (`path_dirs`), in order.
pub fn command_candidates(name: &str, path_dirs: &[PathBuf]) -> Vec<PathBuf> {
    if name.contains('/') {
        vec![PathBuf::from(name)]
    } else {
        path_dirs.iter().map(|d| d.join(name)).collect()
    }
}

/// Host variables that are not passed in: they describe the host's filesystem or shell, not the
/// user's intent, and would break programs in the image (host library paths, host prompts).
pub const DENY: &[&str] = &[
    "PATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "LD_AUDIT",
    "PS1",
    "PROMPT_COMMAND",
    "PYTHONPATH",
    "PYTHONHOME",
    "MANPATH",
    "INFOPATH",
    "LIBRARY_PATH",
    "CPATH",
    "PKG_CONFIG_PATH",
    "BASH_ENV",
    "ENV",
    "SHLVL",
    "OLDPWD",
    "_",
];

/// Prefix that sets a variable inside only (like APPTAINERENV_FOO=bar).
pub const ENV_PREFIX: &str = "GPURUNENV_";

/// The prefix `ENV_PREFIX` replaced: it collides with the `GPURUN_<FLAG>` variables of options
/// whose names start with `env-` (cli/flag_vars.rs), as APPTAINER_ENV_FILE would have with a
/// prefix APPTAINER_ENV_. Still read, with a warning (`legacy_names`), except for those.
pub const LEGACY_ENV_PREFIX: &str = "GPURUN_ENV_";

/// The flag variables `LEGACY_ENV_PREFIX` would take (a cli test keeps this list complete).
pub const FLAG_VARS_WITH_ENV_PREFIX: &[&str] = &["GPURUN_ENV_FILE"];

/// The name inside of a variable set with the old prefix, when `k` is one.
fn legacy_name(k: &str) -> Option<&str> {
    let name = k.strip_prefix(LEGACY_ENV_PREFIX)?;
    (!name.is_empty() && !FLAG_VARS_WITH_ENV_PREFIX.contains(&k)).then_some(name)
}

/// The host variables that use the old prefix, for one warning.
pub fn legacy_names(host: &[(String, String)]) -> Vec<&str> {
    host.iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| legacy_name(k).is_some())
        .collect()
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvError {
    #[error("--env {0:?} is not KEY=VALUE; write it as NAME=value")]
    NotKeyValue(String),
    #[error("--env {value:?}: {why}; quote a whole K=V that holds a comma: --env '\"A=1,2\",B=3'")]
    Quote { value: String, why: &'static str },
    #[error("{file}: line {line} is not KEY=VALUE; fix or remove it")]
    BadFileLine { file: PathBuf, line: usize },
}

/// Everything that decides the container's environment.
#[derive(Debug, Default, Clone)]
pub struct EnvInputs<'a> {
    pub host: &'a [(String, String)],
    /// Host variables not passed in for this launch, besides `DENY`.
    pub host_drop: &'a [String],
    pub cleanenv: bool,
    /// `KEY=VALUE` from the image config (OCI Env).
    pub image: &'a [String],
    /// Parsed --env-file contents, in order.
    pub files: &'a [(String, String)],
    /// --env values, in order.
    pub cli: &'a [String],
    /// Set by gpurun, win over everything (HOME, GPU variables…).
    pub forced: &'a [(String, String)],
    pub ld_library_path_prepend: &'a [PathBuf],
    pub ld_library_path_append: &'a [PathBuf],
    pub path_append: &'a [PathBuf],
}

pub fn parse_kv(s: &str) -> Option<(String, String)> {
    let (k, v) = s.split_once('=')?;
    if k.is_empty() || k.contains(char::is_whitespace) {
        return None;
    }
    Some((k.to_string(), v.to_string()))
}

/// Parse an --env-file: KEY=VALUE lines; blank lines and `#` comments skipped; optional `export `
/// and surrounding quotes accepted, since people reuse shell snippets.
pub fn parse_env_file(file: &Path, text: &str) -> Result<Vec<(String, String)>, EnvError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let l = l.strip_prefix("export ").unwrap_or(l).trim_start();
        let (k, v) = parse_kv(l).ok_or(EnvError::BadFileLine {
            file: file.to_path_buf(),
            line: i + 1,
        })?;
        let v = match v.as_bytes() {
            [b'"', .., b'"'] | [b'\'', .., b'\''] if v.len() >= 2 => v[1..v.len() - 1].to_string(),
            _ => v,
        };
        out.push((k, v));
    }
    Ok(out)
}

/// One `--env` value, split as Apptainer splits it (pflag's map flag): with one `=` it is one
/// K=V whatever commas it holds (surrounding `"` dropped); with more, a comma-separated list read
/// as a CSV record, where a field in `"…"` keeps its commas and `""` is a `"`.
pub fn split_env_arg(value: &str) -> Result<Vec<(String, String)>, EnvError> {
    let pairs = match value.matches('=').count() {
        0 => return Err(EnvError::NotKeyValue(value.to_string())),
        1 => vec![value.trim_matches('"').to_string()],
        _ => csv_record(value).map_err(|why| EnvError::Quote {
            value: value.to_string(),
            why,
        })?,
    };
    pairs
        .iter()
        .map(|p| parse_kv(p).ok_or_else(|| EnvError::NotKeyValue(p.clone())))
        .collect()
}

/// The first record of `s` as Go's encoding/csv reads it (comma-separated, `"`-quoted fields).
fn csv_record(s: &str) -> Result<Vec<String>, &'static str> {
    let s = s.trim_start_matches(['\r', '\n']);
    let mut fields = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        let mut f = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        f.push('"');
                    }
                    Some('"') => break,
                    Some(c) => f.push(c),
                    None => return Err("a quoted field is not closed"),
                }
            }
            match chars.peek() {
                None | Some(',') | Some('\n') | Some('\r') => {}
                Some(_) => return Err("text after a closing quote"),
            }
        } else {
            while let Some(&c) = chars.peek() {
                match c {
                    ',' | '\n' | '\r' => break,
                    '"' => return Err("a quote inside a field that does not start with one"),
                    _ => f.push(c),
                }
                chars.next();
            }
        }
        fields.push(f);
        match chars.next() {
            Some(',') => continue,
            // A record ends at the end of its line.
            _ => return Ok(fields),
        }
    }
}

fn join_paths(parts: impl IntoIterator<Item = String>) -> String {
    parts
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(":")
}

/// Compose the container environment (linear in the number of variables: an image may set
/// hundreds of thousands).
pub fn compose(inp: &EnvInputs) -> Result<Vec<(String, String)>, EnvError> {
    let mut env = EnvList::new();
    let (mut prefixed, mut legacy) = (Vec::new(), Vec::new());
    for (k, v) in inp.host {
        if let Some(name) = k.strip_prefix(ENV_PREFIX) {
            if !name.is_empty() {
                prefixed.push((name.to_string(), v.clone()));
            }
        } else if let Some(name) = legacy_name(k) {
            legacy.push((name.to_string(), v.clone()));
        } else if !inp.cleanenv
            && !DENY.contains(&k.as_str())
            && !secret(k)
            && !inp.host_drop.contains(k)
        {
            env.set(k, v.as_str());
        }
    }
    for kv in inp.image {
        // The OCI spec allows a bare KEY (meaning empty); keep it rather than fail on a vendor image.
        let (k, v) = parse_kv(kv).unwrap_or((kv.clone(), String::new()));
        if !k.is_empty() {
            env.set(&k, v);
        }
    }
    // The new prefix wins over the old one.
    for (k, v) in inp.files.iter().chain(&legacy).chain(&prefixed) {
        env.set(k, v.as_str());
    }
    for arg in inp.cli {
        for (k, v) in split_env_arg(arg)? {
            env.set(&k, v);
        }
    }
    let path = env.get("PATH").unwrap_or(DEFAULT_PATH).to_string();
    env.set(
        "PATH",
        join_paths(
            std::iter::once(path).chain(inp.path_append.iter().map(|p| p.display().to_string())),
        ),
    );
    if !inp.ld_library_path_prepend.is_empty() || !inp.ld_library_path_append.is_empty() {
        let show = |p: &PathBuf| p.display().to_string();
        let old = env.get("LD_LIBRARY_PATH").unwrap_or_default().to_string();
        let p = join_paths(
            (inp.ld_library_path_prepend.iter().map(show))
                .chain(std::iter::once(old))
                .chain(inp.ld_library_path_append.iter().map(show)),
        );
        env.set("LD_LIBRARY_PATH", p);
    }
    for (k, v) in inp.forced {
        env.set(k, v.as_str());
    }
    Ok(env.into_vec())
}

/// The container's environment after the holder's entrypoint: `env` with what the entrypoint
/// changed from `given` (what it was started with) to `left` (what it exec'd the stop shell
/// with): variables set or changed take their new value, variables it unset are dropped.
pub fn after_entrypoint(
    env: &[(String, String)],
    given: &[(String, String)],
    left: &[(String, String)],
) -> Vec<(String, String)> {
    let given: HashMap<&str, &str> = given
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let left_map: HashMap<&str, &str> =
        left.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let unset = |k: &str| given.contains_key(k) && !left_map.contains_key(k);
    let mut out = EnvList::new();
    for (k, v) in env.iter().filter(|(k, _)| !unset(k)) {
        out.set(k, v.as_str());
    }
    for (k, v) in left
        .iter()
        .filter(|(k, v)| given.get(k.as_str()) != Some(&v.as_str()))
    {
        out.set(k, v.as_str());
    }
    out.into_vec()
}

/// Host variables that hold secrets of gpurun's (registry credentials): never passed in, not
/// even by name through `--env`-less inheritance.
fn secret(name: &str) -> bool {
    SECRETS.contains(&name)
}

/// The variables `secret` keeps out of every container.
pub const SECRETS: &[&str] = &["GPURUN_DOCKER_USERNAME", "GPURUN_DOCKER_PASSWORD"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_entrypoint_table() {
        let env = kv(&[("HOST", "h"), ("PATH", "/img"), ("TLS", "1"), ("GONE", "x")]);
        let given = kv(&[("PATH", "/img"), ("GONE", "x")]);
        // (what the entrypoint left, the result)
        type Vars<'a> = &'a [(&'a str, &'a str)];
        let cases: [(Vars, Vars); 4] = [
            (
                &[("PATH", "/img"), ("GONE", "x")],
                &[("HOST", "h"), ("PATH", "/img"), ("TLS", "1"), ("GONE", "x")],
            ),
            (
                &[("PATH", "/img"), ("GONE", "x"), ("NEW", "n")],
                &[
                    ("HOST", "h"),
                    ("PATH", "/img"),
                    ("TLS", "1"),
                    ("GONE", "x"),
                    ("NEW", "n"),
                ],
            ),
            (
                &[("PATH", "/e:/img")],
                &[("HOST", "h"), ("PATH", "/e:/img"), ("TLS", "1")],
            ),
            // a host variable the entrypoint never saw keeps the host's value unless it set one
            (
                &[("PATH", "/img"), ("GONE", "x"), ("HOST", "e")],
                &[("HOST", "e"), ("PATH", "/img"), ("TLS", "1"), ("GONE", "x")],
            ),
        ];
        for (left, want) in cases {
            assert_eq!(
                after_entrypoint(&env, &given, &kv(left)),
                kv(want),
                "{left:?}"
            );
        }
    }

    #[test]
    fn command_candidates_table() {
        let dirs = [PathBuf::from("/usr/bin"), PathBuf::from("/bin")];
        for (name, want) in [
            ("ls", vec!["/usr/bin/ls", "/bin/ls"]),
            ("/opt/x", vec!["/opt/x"]),
            ("./run.sh", vec!["./run.sh"]),
        ] {
            let want: Vec<PathBuf> = want.into_iter().map(PathBuf::from).collect();
            assert_eq!(command_candidates(name, &dirs), want, "{name}");
        }
        assert!(command_candidates("ls", &[]).is_empty());
    }

    fn kv(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn precedence_table() {
        let host = kv(&[
            ("FOO", "host"),
            ("PATH", "/host/bin"),
            ("LD_LIBRARY_PATH", "/host/lib"),
            ("KEEP", "1"),
            ("GPURUNENV_INNER", "fromprefix"),
            ("GPURUN_ENV_OLD", "old"),
            ("GPURUN_ENV_BOTH", "old"),
            ("GPURUNENV_BOTH", "new"),
            ("GPURUN_ENV_FILE", "/f.env"),
            ("GPURUN_DOCKER_PASSWORD", "s3cret"),
            ("HOME", "/home/u"),
        ]);
        let image = vec![
            "FOO=image".to_string(),
            "PATH=/img/bin".into(),
            "BARE".into(),
        ];
        let files = kv(&[("FILEVAR", "f"), ("FOO", "file")]);
        let cli = vec!["CLIVAR=c".to_string()];
        let forced = kv(&[("HOME", "/root")]);
        // (cleanenv, key, expected)
        let cases: &[(bool, &str, Option<&str>)] = &[
            (false, "FOO", Some("file")),
            (false, "KEEP", Some("1")),
            (true, "KEEP", None),
            (false, "PATH", Some("/img/bin")),
            (false, "LD_LIBRARY_PATH", None),
            (false, "INNER", Some("fromprefix")),
            (true, "INNER", Some("fromprefix")),
            (false, "GPURUNENV_INNER", None),
            // the old prefix still sets a variable inside; the new one wins
            (false, "OLD", Some("old")),
            (true, "OLD", Some("old")),
            (false, "GPURUN_ENV_OLD", None),
            (false, "BOTH", Some("new")),
            // GPURUN_ENV_FILE is --env-file's variable, not FILE inside
            (false, "FILE", None),
            (false, "GPURUN_ENV_FILE", Some("/f.env")),
            // credentials never pass
            (false, "GPURUN_DOCKER_PASSWORD", None),
            (false, "BARE", Some("")),
            (false, "CLIVAR", Some("c")),
            (false, "HOME", Some("/root")),
            (true, "HOME", Some("/root")),
        ];
        for &(cleanenv, key, want) in cases {
            let env = compose(&EnvInputs {
                host: &host,
                cleanenv,
                image: &image,
                files: &files,
                cli: &cli,
                forced: &forced,
                ..Default::default()
            })
            .unwrap();
            assert_eq!(var(&env, key), want, "cleanenv={cleanenv} key={key}");
        }
    }

    #[test]
    fn host_variables_dropped_for_a_launch() {
        let host = kv(&[
            ("CUDA_VISIBLE_DEVICES", "3"),
            ("GPURUNENV_X", "1"),
            ("Y", "2"),
        ]);
        let drop = vec!["CUDA_VISIBLE_DEVICES".to_string(), "X".to_string()];
        let cli = vec!["CUDA_VISIBLE_DEVICES=0".to_string()];
        let env = compose(&EnvInputs {
            host: &host,
            host_drop: &drop,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(var(&env, "CUDA_VISIBLE_DEVICES"), None);
        // the host's variables only: what the user sets for inside stays
        assert_eq!((var(&env, "X"), var(&env, "Y")), (Some("1"), Some("2")));
        let env = compose(&EnvInputs {
            host: &host,
            host_drop: &drop,
            cli: &cli,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(var(&env, "CUDA_VISIBLE_DEVICES"), Some("0"));
    }

    #[test]
    fn default_path_and_gpu_paths() {
        let env = compose(&EnvInputs::default()).unwrap();
        assert_eq!(var(&env, "PATH"), Some(DEFAULT_PATH));
        let image = vec!["LD_LIBRARY_PATH=/img/lib".to_string()];
        let pre = vec![PathBuf::from("/compat")];
        let app = vec![PathBuf::from("/.gpurun/nvidia/lib")];
        let bin = vec![PathBuf::from("/.gpurun/nvidia/bin")];
        let env = compose(&EnvInputs {
            image: &image,
            ld_library_path_prepend: &pre,
            ld_library_path_append: &app,
            path_append: &bin,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            var(&env, "LD_LIBRARY_PATH"),
            Some("/compat:/img/lib:/.gpurun/nvidia/lib")
        );
        assert_eq!(
            var(&env, "PATH"),
            Some(format!("{DEFAULT_PATH}:/.gpurun/nvidia/bin").as_str())
        );
        // Without an image LD_LIBRARY_PATH there is no empty element (which would mean cwd).
        let env = compose(&EnvInputs {
            ld_library_path_append: &app,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(var(&env, "LD_LIBRARY_PATH"), Some("/.gpurun/nvidia/lib"));
    }

    #[test]
    fn legacy_prefix_names() {
        let host = kv(&[
            ("GPURUN_ENV_A", "1"),
            ("GPURUN_ENV_FILE", "/x"),
            ("GPURUN_ENV_", "x"),
            ("GPURUNENV_B", "2"),
            ("GPURUN_CLEANENV", "1"),
        ]);
        assert_eq!(legacy_names(&host), ["GPURUN_ENV_A"]);
    }

    #[test]
    fn env_args_split_as_apptainer_splits_them() {
        let ok: &[(&str, &[(&str, &str)])] = &[
            ("A=1", &[("A", "1")]),
            // one '=': one variable, commas and all
            ("A=1,2", &[("A", "1,2")]),
            ("PATH=/a:/b,c", &[("PATH", "/a:/b,c")]),
            ("A=1,B", &[("A", "1,B")]),
            ("\"A=x\"", &[("A", "x")]),
            ("A=\"x\"", &[("A", "\"x")]),
            // more: a CSV record
            ("A=1,B=2", &[("A", "1"), ("B", "2")]),
            ("A=1,B=", &[("A", "1"), ("B", "")]),
            ("A=b=c,D=e", &[("A", "b=c"), ("D", "e")]),
            ("\"A=1,2\",B=3", &[("A", "1,2"), ("B", "3")]),
            (
                "\"A=say \"\"hi\"\"\",B=3",
                &[("A", "say \"hi\""), ("B", "3")],
            ),
            // no escape but quoting: a backslash is a character
            ("A=1\\,B=2", &[("A", "1\\"), ("B", "2")]),
            // a record ends with its line
            ("A=1,B=2\nC=3", &[("A", "1"), ("B", "2")]),
        ];
        for (arg, want) in ok {
            let want: Vec<(String, String)> = want
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(split_env_arg(arg).unwrap(), want, "{arg:?}");
        }
        for bad in [
            "NOEQUALS",
            "A=1,=2",
            "A=\"1,2\",B=3",
            "\"A=1,B=2",
            "\"A=1\"x,B=2",
            "A B=1,C=2",
        ] {
            assert!(split_env_arg(bad).is_err(), "{bad:?}");
        }
        // The error says how to keep a comma.
        let e = split_env_arg("A=\"1,2\",B=3").unwrap_err().to_string();
        assert!(e.contains("quote a whole K=V"), "{e}");
    }

    #[test]
    fn cli_errors_and_env_files() {
        let cli = vec!["NOEQUALS".to_string()];
        let err = compose(&EnvInputs {
            cli: &cli,
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(err, EnvError::NotKeyValue("NOEQUALS".into()));
        let f = Path::new("e.env");
        let parsed =
            parse_env_file(f, "# c\n\nA=1\nexport B=\"two words\"\nC='x'\nD=a=b\n").unwrap();
        assert_eq!(
            parsed,
            kv(&[("A", "1"), ("B", "two words"), ("C", "x"), ("D", "a=b")])
        );
        assert_eq!(
            parse_env_file(f, "A=1\noops\n").unwrap_err(),
            EnvError::BadFileLine {
                file: f.into(),
                line: 2
            }
        );
    }
}

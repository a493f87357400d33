//! Environment composition, in Apptainer's order: host (minus a deny list) < image < --env-file <
//! --env / GPURUN_ENV_* < what gpurun itself must set. Pure functions, table-tested.

use std::path::{Path, PathBuf};

use crate::image::env_list::EnvList;

/// Used when neither the image nor the user gives a PATH.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The value of `key` in an environment list; the last one when it is set twice, as composing
/// the environment would leave it.
pub fn var<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

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
pub const ENV_PREFIX: &str = "GPURUN_ENV_";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvError {
    #[error("--env {0:?} is not KEY=VALUE; write it as NAME=value")]
    NotKeyValue(String),
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
    let mut prefixed = Vec::new();
    for (k, v) in inp.host {
        if let Some(name) = k.strip_prefix(ENV_PREFIX) {
            if !name.is_empty() {
                prefixed.push((name.to_string(), v.clone()));
            }
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
    for (k, v) in inp.files.iter().chain(prefixed.iter()) {
        env.set(k, v.as_str());
    }
    for kv in inp.cli {
        let (k, v) = parse_kv(kv).ok_or_else(|| EnvError::NotKeyValue(kv.clone()))?;
        env.set(&k, v);
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
    fn var_takes_the_last_setting() {
        let env = kv(&[("A", "1"), ("B", "x"), ("A", "2")]);
        assert_eq!(var(&env, "A"), Some("2"));
        assert_eq!(var(&env, "B"), Some("x"));
        assert_eq!(var(&env, "C"), None);
    }

    #[test]
    fn precedence_table() {
        let host = kv(&[
            ("FOO", "host"),
            ("PATH", "/host/bin"),
            ("LD_LIBRARY_PATH", "/host/lib"),
            ("KEEP", "1"),
            ("GPURUN_ENV_INNER", "fromprefix"),
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
            (false, "GPURUN_ENV_INNER", None),
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
            ("GPURUN_ENV_X", "1"),
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

//! The state file `gpurun hold` writes once its container is ready and gpurun's SPANK plugin
//! reads to join it: one definition for both sides. The plugin depends on this crate alone of
//! gpurun's, so that srun and slurmstepd load nothing else of it.
//!
//! `{"pid": N, "root": "/…", "env": ["K=V", …], "cwd": "/…"}`

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// A process inside the prepared user and mount namespaces.
    pub pid: i32,
    /// The container's root, as seen inside that mount namespace.
    pub root: PathBuf,
    /// The container's environment, `K=V`, as `gpurun exec` would give it.
    pub env: Vec<String>,
    /// The working directory inside the container.
    pub cwd: PathBuf,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    #[error("holder state is not valid JSON of its form: {0}")]
    Json(String),
    #[error("holder state: pid {0} is not a process id")]
    Pid(i32),
    #[error("holder state: \"{0}\" is not an absolute path")]
    NotAbsolute(&'static str),
    #[error("holder state: env entry {0:?} is not \"K=V\"")]
    Env(String),
}

fn json_line(v: &impl Serialize) -> String {
    let mut s = serde_json::to_string(v).expect("strings and numbers serialise");
    s.push('\n');
    s
}

fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StateError> {
    serde_json::from_str(text).map_err(|e| StateError::Json(e.to_string()))
}

impl State {
    /// One line of JSON, newline-terminated.
    pub fn to_line(&self) -> String {
        json_line(self)
    }

    /// Parse and check what a reader relies on: a positive pid, absolute paths, `K=V` entries.
    pub fn parse(text: &str) -> Result<State, StateError> {
        let s: State = from_json(text)?;
        if s.pid <= 0 {
            return Err(StateError::Pid(s.pid));
        }
        if !s.root.is_absolute() {
            return Err(StateError::NotAbsolute("root"));
        }
        if !s.cwd.is_absolute() {
            return Err(StateError::NotAbsolute("cwd"));
        }
        if let Some(bad) = s
            .env
            .iter()
            .find(|e| !matches!(e.split_once('='), Some((k, _)) if !k.is_empty()))
        {
            return Err(StateError::Env(bad.clone()));
        }
        Ok(s)
    }

    /// The environment as (name, value) pairs; a value may contain `=`.
    pub fn env_pairs(&self) -> Vec<(String, String)> {
        self.env
            .iter()
            .filter_map(|e| e.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// Where the plugin keeps named containers on a node unless plugstack.conf says
/// `containers_dir=`: a directory of root's, in a directory only root may change, so that no
/// user can make it, or a user's place in it, first.
pub const CONTAINERS_DIR: &str = "/var/lib/gpurun/containers";

/// Where `gpurun hold --name JOB.NAME` keeps user `uid`'s named containers on a node (the
/// plugin's `--container-name`), below the site's `base`: made by the plugin as root, the
/// user's and private, and whence the plugin's job epilog removes the job's.
pub fn named_containers_dir(base: &Path, uid: u32) -> PathBuf {
    base.join(uid.to_string())
}

/// A named container's holder while a step runs in it, which later steps of the job join
/// (pyxis's `--container-name=NAME:exec`, and its default when the container runs): the
/// holder's state and the inode numbers of its user and mount namespaces, which tell a live
/// record from one a killed holder left.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Running {
    pub state: State,
    pub user_ns: u64,
    pub mnt_ns: u64,
}

impl Running {
    /// One line of JSON, newline-terminated.
    pub fn to_line(&self) -> String {
        json_line(self)
    }

    /// Parse, with the checks of [`State::parse`].
    pub fn parse(text: &str) -> Result<Running, StateError> {
        let r: Running = from_json(text)?;
        State::parse(&r.state.to_line())?;
        Ok(r)
    }
}

/// The running record of user `uid`'s named container `JOB.NAME`.
pub fn running_record(base: &Path, uid: u32, name: &str) -> PathBuf {
    named_containers_dir(base, uid).join(name).join("running")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State {
            pid: 42,
            root: "/".into(),
            env: vec!["PATH=/usr/bin".into(), "A=b=c".into(), "E=".into()],
            cwd: "/w".into(),
        }
    }

    #[test]
    fn running_records_round_trip_and_are_checked() {
        let r = Running {
            state: state(),
            user_ns: 4026531837,
            mnt_ns: 4026531841,
        };
        assert_eq!(Running::parse(&r.to_line()), Ok(r.clone()));
        let mut bad = r;
        bad.state.pid = 0;
        assert_eq!(Running::parse(&bad.to_line()), Err(StateError::Pid(0)));
    }

    #[test]
    fn written_state_reads_back() {
        let s = state();
        let line = s.to_line();
        assert!(line.ends_with("}\n") && !line[..line.len() - 1].contains('\n'));
        assert_eq!(State::parse(&line).unwrap(), s);
        assert_eq!(
            s.env_pairs(),
            [
                ("PATH".into(), "/usr/bin".into()),
                ("A".into(), "b=c".into()),
                ("E".into(), "".into())
            ]
        );
    }

    /// The exact text gpurun writes: a change here is a change of the format both sides read.
    #[test]
    fn the_format() {
        assert_eq!(
            state().to_line(),
            "{\"pid\":42,\"root\":\"/\",\"env\":[\"PATH=/usr/bin\",\"A=b=c\",\"E=\"],\"cwd\":\"/w\"}\n"
        );
        let spaced =
            r#"{"pid": 42, "root": "/", "env": ["PATH=/usr/bin", "A=b=c", "E="], "cwd": "/w"}"#;
        assert_eq!(State::parse(spaced).unwrap(), state());
    }

    #[test]
    fn bad_states_are_refused() {
        type Check = fn(&StateError) -> bool;
        let table: &[(&str, Check)] = &[
            ("", |e| matches!(e, StateError::Json(_))),
            ("{", |e| matches!(e, StateError::Json(_))),
            (r#"{"pid": 1, "root": "/", "cwd": "/"}"#, |e| {
                matches!(e, StateError::Json(_))
            }),
            (r#"{"pid": 1, "root": "/", "env": [1], "cwd": "/"}"#, |e| {
                matches!(e, StateError::Json(_))
            }),
            (r#"{"pid": 0, "root": "/", "env": [], "cwd": "/"}"#, |e| {
                *e == StateError::Pid(0)
            }),
            (r#"{"pid": 1, "root": "r", "env": [], "cwd": "/"}"#, |e| {
                *e == StateError::NotAbsolute("root")
            }),
            (r#"{"pid": 1, "root": "/", "env": [], "cwd": "w"}"#, |e| {
                *e == StateError::NotAbsolute("cwd")
            }),
            (
                r#"{"pid": 1, "root": "/", "env": ["NOEQ"], "cwd": "/"}"#,
                |e| *e == StateError::Env("NOEQ".into()),
            ),
            (
                r#"{"pid": 1, "root": "/", "env": ["=v"], "cwd": "/"}"#,
                |e| *e == StateError::Env("=v".into()),
            ),
        ];
        for (text, want) in table {
            let e = State::parse(text).unwrap_err();
            assert!(want(&e), "{text}: {e}");
        }
    }
}

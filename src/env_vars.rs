//! An environment as gpurun handles it: (name, value) pairs, in order, as the host gives them
//! and as the container's is composed (runtime/env.rs).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

/// Environment of this process; values that are not UTF-8 are kept lossily rather than dropped.
pub fn host_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, lossy(v))))
        .collect()
}

fn lossy(v: OsString) -> String {
    v.into_string()
        .unwrap_or_else(|v| String::from_utf8_lossy(&v.into_vec()).into_owned())
}

/// The value of `key` in an environment list; the last one when it is set twice, as composing
/// the environment would leave it.
pub fn var<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// `Some(b)` for a word that means yes or no: Go's ParseBool words (Apptainer's), and yes/no,
/// on/off; empty is no.
pub fn switch_value(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" | "y" | "yes" | "on" => Some(true),
        "0" | "f" | "false" | "n" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_words() {
        for (v, want) in [
            ("1", Some(true)),
            ("TRUE", Some(true)),
            ("yes", Some(true)),
            ("on", Some(true)),
            (" t ", Some(true)),
            ("0", Some(false)),
            ("False", Some(false)),
            ("no", Some(false)),
            ("off", Some(false)),
            ("", Some(false)),
            ("maybe", None),
            ("2", None),
        ] {
            assert_eq!(switch_value(v), want, "{v:?}");
        }
    }

    #[test]
    fn var_takes_the_last_setting() {
        let env = [("A", "1"), ("B", "x"), ("A", "2")].map(|(k, v)| (k.into(), v.into()));
        assert_eq!(var(&env, "A"), Some("2"));
        assert_eq!(var(&env, "B"), Some("x"));
        assert_eq!(var(&env, "C"), None);
    }
}

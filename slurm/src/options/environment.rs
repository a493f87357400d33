//! The container's environment as pyxis composes it: the host's locale left out, and the host's
//! values of `--container-env` names for the entrypoint.

use std::collections::HashMap;

/// The host's locale variables, which pyxis keeps from the container unless --container-env
/// names them (the image may not have the locale: perl and apt then warn).
const LOCALE_VARS: [&str; 3] = ["LANG", "LANGUAGE", "LC_ALL"];

/// The step's environment without the host's locale variables not named in `from_host`: what
/// the container's environment is composed from.
pub fn without_host_locale(env: Vec<String>, from_host: &[String]) -> Vec<String> {
    env.into_iter()
        .filter(|e| {
            let name = e.split_once('=').map_or(e.as_str(), |(k, _)| k);
            !LOCALE_VARS.contains(&name) || from_host.iter().any(|k| k == name)
        })
        .collect()
}

/// What the holder's environment gets in addition for the entrypoint: as in pyxis, the host's
/// value of each `--container-env` name is set before the entrypoint runs (`GPURUNENV_K` is
/// gpurun's "K inside" variable, which wins over the image's value).
pub fn entrypoint_env(from_host: &[String], step: &HashMap<String, String>) -> Vec<String> {
    from_host
        .iter()
        .filter_map(|k| step.get(k).map(|v| format!("GPURUNENV_{k}={v}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locale_of_the_host_is_dropped() {
        let env: Vec<String> = [
            "LANG=en_US.UTF-8",
            "LC_ALL=C",
            "LANGUAGE=en",
            "LC_TIME=C",
            "A=1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(without_host_locale(env.clone(), &[]), ["LC_TIME=C", "A=1"]);
        assert_eq!(
            without_host_locale(env, &["LANG".into()]),
            ["LANG=en_US.UTF-8", "LC_TIME=C", "A=1"]
        );
    }

    #[test]
    fn entrypoint_gets_the_named_host_values() {
        let step: HashMap<String, String> = [("A", "1"), ("B", "x=y"), ("C", "3")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let names = ["B".to_string(), "MISSING".into(), "A".into()];
        assert_eq!(
            entrypoint_env(&names, &step),
            ["GPURUNENV_B=x=y", "GPURUNENV_A=1"]
        );
        assert!(entrypoint_env(&[], &step).is_empty());
    }
}

//! `GPURUN_<FLAG>`: every option of exec, run, shell, pull and inspect, and the global ones, may
//! be given by a variable instead (`GPURUN_CLEANENV=1`, `GPURUN_PWD=/work`,
//! `GPURUN_NO_MOUNT=home,tmp`), as Apptainer's APPTAINER_<FLAG>: the command line wins, an empty
//! variable counts as unset, a switch takes 1/0, true/false, yes/no or on/off. The names are
//! made from the options' long names, so every option has one and none is listed twice.
//!
//! Not all: `--bind`'s is `GPURUN_BIND`, which adds to `--bind` (config.rs); `--nv`'s is
//! `GPURUN_NV`, which also turns GPU support off (`GPURUN_NV=0`, gpu/mod.rs); `--json`,
//! `--output`, `--save` (an output too) and the hidden `hold`'s own options have none.

use std::ffi::OsStr;

use clap::builder::{PossibleValue, TypedValueParser};
use clap::error::ErrorKind;
use clap::{Arg, ArgAction, Command};
use serde::Serialize;

use crate::config::Origin;

/// The commands whose options have variables (`hold` shares exec's).
const COMMANDS: &[&str] = &["exec", "run", "shell", "hold", "pull", "inspect"];

/// Options (by id) without a variable of this form.
const WITHOUT: &[&str] = &[
    "help", "version", "json", "bind", "nv", "output", "save", "state",
];

/// Variables for options that are not made by `var_name` (set by hand where they are read).
const BY_HAND: &[(&str, &str)] = &[
    ("GPURUN_BIND", "--bind (added to it)"),
    ("GPURUN_NV", "--nv (GPURUN_NV=0: --no-nv)"),
];

/// `--no-home` -> `GPURUN_NO_HOME`.
pub fn var_name(long: &str) -> String {
    format!("GPURUN_{}", long.to_ascii_uppercase().replace('-', "_"))
}

/// Which options get their variable.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Vars {
    /// Every option: the man pages, completions and help show them all.
    All,
    /// Only those whose variable is set, not empty, in this process's environment: to parse a
    /// command line, the others change nothing, and giving all of them their variable would
    /// double the cost of building the command, which every start pays. Empty is unset, as in
    /// Apptainer (clap would take it as a value).
    Set,
    /// All but those set empty: to parse a command line that asks for help.
    Help,
}

/// Give the options of `cmd` their variables (`vars` says which).
pub fn attach(cmd: Command, vars: Vars) -> Command {
    // This process's GPURUN_ variables that are set, and whether each is empty.
    let set: Vec<(String, bool)> = match vars {
        Vars::All => Vec::new(),
        Vars::Set | Vars::Help => crate::sys::env_with_prefix("GPURUN_"),
    };
    let wanted = |long: &str| {
        let here = set.iter().find(|(k, _)| is_var_of(k, long));
        match vars {
            Vars::All => true,
            Vars::Set => here.is_some_and(|(_, empty)| !empty),
            Vars::Help => !here.is_some_and(|(_, empty)| *empty),
        }
    };
    // Most starts set none: then the options are only looked at, not rebuilt (a cost every
    // start would pay).
    let any = {
        let subs = cmd
            .get_subcommands()
            .filter(|s| COMMANDS.contains(&s.get_name()));
        let mut args = cmd
            .get_arguments()
            .chain(subs.flat_map(|s| s.get_arguments()));
        args.any(|a| a.get_long().is_some_and(wanted))
    };
    if vars == Vars::Set && !any {
        return cmd;
    }
    let f = |a: Arg| with_var(a, &wanted);
    cmd.mut_args(f)
        .mut_subcommands(|s| match COMMANDS.contains(&s.get_name()) {
            true => s.mut_args(f),
            false => s,
        })
}

/// Is `var` the variable of the option `--long` (`var_name`, without making it)?
fn is_var_of(var: &str, long: &str) -> bool {
    var.strip_prefix("GPURUN_").is_some_and(|rest| {
        rest.len() == long.len()
            && rest.bytes().zip(long.bytes()).all(|(v, l)| match l {
                b'-' => v == b'_',
                _ => v == l.to_ascii_uppercase(),
            })
    })
}

/// `a` with its variable, when it has one and `wanted` (given its long name) says so.
fn with_var(a: Arg, wanted: &dyn Fn(&str) -> bool) -> Arg {
    let Some(long) = a.get_long() else {
        return a;
    };
    if WITHOUT.contains(&a.get_id().as_str()) || a.get_env().is_some() || !wanted(long) {
        return a;
    }
    let name = var_name(long);
    let a = match a.get_action() {
        ArgAction::SetTrue => a.value_parser(Switch),
        _ => a,
    };
    a.env(name).hide_env_values(true)
}

/// A switch's value from its variable (`env_vars::switch_value`).
#[derive(Clone, Copy)]
struct Switch;

impl TypedValueParser for Switch {
    type Value = bool;

    fn parse_ref(
        &self,
        _cmd: &Command,
        arg: Option<&Arg>,
        value: &OsStr,
    ) -> Result<bool, clap::Error> {
        let v = value.to_string_lossy();
        crate::env_vars::switch_value(&v).ok_or_else(|| {
            let var = arg
                .and_then(Arg::get_env)
                .map_or("the variable".into(), |e| e.to_string_lossy().into_owned());
            clap::Error::raw(
                ErrorKind::InvalidValue,
                format!("{var}={v}: not a yes/no value; use 1 or 0 (true/false, yes/no, on/off)\n"),
            )
        })
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        None
    }
}

/// One variable and the option it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlagVar {
    pub var: String,
    /// `--cleanenv`, as typed.
    pub flag: String,
}

/// Every `GPURUN_<FLAG>` variable of `cmd` (cli::option_vars: the command line's), sorted by
/// name.
pub fn all(cmd: &Command) -> Vec<FlagVar> {
    let mut args: Vec<&Arg> = cmd.get_arguments().collect();
    for name in COMMANDS {
        args.extend(
            cmd.find_subcommand(name)
                .into_iter()
                .flat_map(|s| s.get_arguments()),
        );
    }
    let mut out: Vec<FlagVar> = args
        .into_iter()
        .filter_map(|a| {
            let long = a.get_long()?;
            let var = match a.get_env() {
                Some(e) => e.to_string_lossy().into_owned(),
                None if WITHOUT.contains(&a.get_id().as_str()) => return None,
                None => var_name(long),
            };
            Some(FlagVar {
                var,
                flag: format!("--{long}"),
            })
        })
        .chain(BY_HAND.iter().map(|(var, flag)| FlagVar {
            var: var.to_string(),
            flag: flag.to_string(),
        }))
        .collect();
    out.sort_by(|a, b| a.var.cmp(&b.var));
    out.dedup();
    out
}

/// A flag variable set in the environment, for `gpurun config show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlagSetting {
    pub flag: String,
    pub value: String,
    pub from: Origin,
}

/// The flag variables `env` sets (not empty), in `vars`' order.
pub fn set_in(vars: &[FlagVar], env: &[(String, String)]) -> Vec<FlagSetting> {
    vars.iter()
        .filter_map(|v| {
            let value = crate::env_vars::var(env, &v.var)?;
            (!value.trim().is_empty()).then(|| FlagSetting {
                flag: v.flag.clone(),
                value: value.to_string(),
                from: Origin::Env(v.var.clone()),
            })
        })
        .collect()
}

/// `config show`'s rows for them.
pub fn render(set: &[FlagSetting]) -> String {
    set.iter()
        .map(|s| format!("{:<20} {:<40} ({})\n", s.flag, s.value, s.from))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The options left without a variable are the ones `gpurun help config` names as such (the
    /// help, the docs and the man page say every other option has one).
    #[test]
    fn options_without_a_variable_are_named() {
        let config = crate::help::topic("config").unwrap();
        let cmd = crate::cli::documented();
        // the hidden `hold`'s own options are the plugin's, not a user's
        let subs = (COMMANDS.iter())
            .filter_map(|n| cmd.find_subcommand(n))
            .filter(|s| !s.is_hide_set());
        let args = cmd
            .get_arguments()
            .chain(subs.flat_map(|s| s.get_arguments()));
        for a in args.filter(|a| !a.is_hide_set() && a.get_env().is_none()) {
            let Some(long) = a.get_long().filter(|l| !["help", "version"].contains(l)) else {
                continue;
            };
            assert!(config.contains(&format!("--{long}")), "--{long}: {config}");
        }
    }

    #[test]
    fn names_follow_the_long_option() {
        for (long, var) in [
            ("cleanenv", "GPURUN_CLEANENV"),
            ("no-home", "GPURUN_NO_HOME"),
            ("writable-tmpfs", "GPURUN_WRITABLE_TMPFS"),
            ("env-file", "GPURUN_ENV_FILE"),
        ] {
            assert_eq!(var_name(long), var);
            assert!(is_var_of(var, long), "{var}");
        }
        for (var, long) in [
            ("GPURUN_NO_HOMES", "no-home"),
            ("GPURUN_NO-HOME", "no-home"),
            ("GPURUN_HOME", "no-home"),
            ("GPURUN_no_home", "no-home"),
            ("NO_HOME", "no-home"),
        ] {
            assert!(!is_var_of(var, long), "{var}");
        }
        let vars: Vec<String> = all(&<crate::cli::Cli as clap::CommandFactory>::command())
            .into_iter()
            .map(|v| v.var)
            .collect();
        for want in [
            "GPURUN_CLEANENV",
            "GPURUN_CONTAIN",
            "GPURUN_CONTAINALL",
            "GPURUN_FAKEROOT",
            "GPURUN_PWD",
            "GPURUN_NO_HOME",
            "GPURUN_HOME",
            "GPURUN_NO_MOUNT",
            "GPURUN_WRITABLE_TMPFS",
            "GPURUN_ENV",
            "GPURUN_ENV_FILE",
            "GPURUN_HOSTNAME",
            "GPURUN_PID",
            "GPURUN_IPC",
            "GPURUN_NET",
            "GPURUN_NETWORK",
            "GPURUN_TMPFS",
            "GPURUN_READ_ONLY",
            "GPURUN_NO_NV",
            "GPURUN_GPUS",
            "GPURUN_NV_CAPS",
            "GPURUN_DEVICE",
            "GPURUN_NV_DRIVER_PATH",
            "GPURUN_DRY_RUN",
            "GPURUN_SHELL",
            "GPURUN_QUIET",
            "GPURUN_VERBOSE",
            "GPURUN_DEBUG",
            "GPURUN_PLATFORM",
            "GPURUN_INSECURE",
            "GPURUN_FORCE",
            "GPURUN_JOBS",
            "GPURUN_BIND",
            "GPURUN_NV",
        ] {
            assert!(vars.iter().any(|v| v == want), "no {want} in {vars:?}");
        }
        for not in [
            "GPURUN_JSON",
            "GPURUN_OUTPUT",
            "GPURUN_STATE",
            "GPURUN_HELP",
        ] {
            assert!(!vars.iter().any(|v| v == not), "{not} in {vars:?}");
        }
        // One name, one option.
        let mut names = vars.clone();
        names.dedup();
        assert_eq!(names, vars);
        // A flag variable the old GPURUN_ENV_K form must not take for a container variable.
        for v in vars.iter().filter(|v| v.starts_with("GPURUN_ENV_")) {
            assert!(
                crate::runtime::env::FLAG_VARS_WITH_ENV_PREFIX.contains(&v.as_str()),
                "{v} is missing from runtime::env::FLAG_VARS_WITH_ENV_PREFIX"
            );
        }
    }

    #[test]
    fn settings_from_the_environment() {
        let vars = all(&<crate::cli::Cli as clap::CommandFactory>::command());
        let env: Vec<(String, String)> = [
            ("GPURUN_CLEANENV", "1"),
            ("GPURUN_PWD", "/work"),
            ("GPURUN_NO_HOME", " "),
            ("GPURUN_NV", "0"),
            ("UNRELATED", "x"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let set = set_in(&vars, &env);
        let got: Vec<(&str, &str)> = set
            .iter()
            .map(|s| (s.flag.as_str(), s.value.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("--cleanenv", "1"),
                ("--nv (GPURUN_NV=0: --no-nv)", "0"),
                ("--pwd", "/work")
            ]
        );
        assert_eq!(set[0].from, Origin::Env("GPURUN_CLEANENV".into()));
        assert!(render(&set).contains("(environment GPURUN_PWD)"));
    }
}

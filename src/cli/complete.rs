//! Shell completion scripts: clap_complete's, of the visible commands only (it would offer the
//! hidden ones too), plus image files (`.sqsh`, `.sif`, `.squashfs`, `.sqfs`) and directories
//! where an IMAGE is expected, which clap_complete cannot say. `help` completes its topics
//! through its value parser (cli/mod.rs `Topic`).

use std::io::Write;

use clap::{ArgAction, Command};
use clap_complete::Shell;

/// The commands whose first value is an image.
const IMAGE_COMMANDS: &[&str] = &["exec", "run", "shell", "inspect"];

/// Image file name extensions offered.
const IMAGE_EXTENSIONS: &[&str] = &["sqsh", "sif", "squashfs", "sqfs"];

/// gpurun as a user sees it: the hidden commands left out.
fn visible(cmd: &Command) -> Command {
    let subs = cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned();
    Command::new(cmd.get_name().to_string())
        .version(cmd.get_version().unwrap_or_default().to_string())
        .propagate_version(true)
        .disable_help_subcommand(true)
        .args(cmd.get_arguments().cloned())
        .subcommands(subs)
}

/// The options of `sub` that take a value, as typed (`-B`, `--bind`, aliases too).
fn value_options(cmd: &Command, sub: &str) -> Vec<String> {
    let mut c = cmd.clone();
    c.build();
    let Some(s) = c.find_subcommand(sub) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for a in s.get_arguments() {
        if a.is_positional() || matches!(a.get_action(), ArgAction::SetTrue | ArgAction::Help) {
            continue;
        }
        if !a.get_action().takes_values() {
            continue;
        }
        out.extend(a.get_short().map(|c| format!("-{c}")));
        out.extend(a.get_long().map(|l| format!("--{l}")));
        out.extend(
            a.get_all_aliases()
                .into_iter()
                .flatten()
                .map(|l| format!("--{l}")),
        );
    }
    out
}

/// What `gpurun help` completes (its value parser's possible values).
fn help_words(cmd: &Command) -> Vec<String> {
    let help = cmd.find_subcommand("help").expect("a help command");
    help.get_positionals()
        .flat_map(|a| a.get_possible_values())
        .map(|v| v.get_name().to_string())
        .collect()
}

/// Write the completion script for `shell`.
pub fn generate(shell: Shell, cmd: &Command, out: &mut dyn Write) -> std::io::Result<()> {
    let mut v = visible(cmd);
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut v, "gpurun", &mut buf);
    let script = String::from_utf8_lossy(&buf).into_owned();
    let script = match shell {
        Shell::Bash => bash(script, cmd),
        Shell::Zsh => zsh(script),
        Shell::Fish => fish(script, cmd),
        _ => script,
    };
    out.write_all(script.as_bytes())
}

fn bash(script: String, cmd: &Command) -> String {
    let hook = "complete -F _gpurun ";
    assert_eq!(
        script.matches(hook).count(),
        2,
        "clap_complete's bash script changed"
    );
    let mut cases = String::new();
    for sub in IMAGE_COMMANDS {
        cases.push_str(&format!(
            "                {sub}) sub=$w; vals=\"{}\" ;;\n",
            value_options(cmd, sub).join(" ")
        ));
    }
    let globs: Vec<String> = IMAGE_EXTENSIONS
        .iter()
        .map(|e| format!("compgen -f -X '!*.{e}' -- \"$cur\""))
        .collect();
    let extra = format!(
        r#"
# The IMAGE of exec, run, shell and inspect: image files and directories.
_gpurun_image() {{
    local i w sub="" vals="" cur="${{COMP_WORDS[COMP_CWORD]}}"
    [[ $cur == -* ]] && return 1
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${{COMP_WORDS[i]}}"
        if [[ -z $sub ]]; then
            case "$w" in
{cases}                -*) ;;
                *) return 1 ;;
            esac
        elif [[ $w == -- ]]; then
            ((i + 1 == COMP_CWORD)) && break
            return 1
        elif [[ $w == -* ]]; then
            [[ $w != *=* && " $vals " == *" $w "* ]] && ((i++))
        else
            # The container's words follow the image: files, not gpurun's options.
            COMPREPLY=()
            return 0
        fi
    done
    [[ -n $sub ]] || return 1
    local IFS=$'\n'
    compopt -o filenames 2>/dev/null
    COMPREPLY=($(compgen -d -- "$cur"; {globs}))
    return 0
}}

_gpurun_complete() {{
    _gpurun_image || _gpurun "$@"
}}
"#,
        globs = globs.join("; ")
    );
    let script = script.replace(hook, "complete -F _gpurun_complete ");
    match script.find("\nif [[ \"${BASH_VERSINFO[0]}\" -eq 4") {
        Some(at) => format!("{}{extra}{}", &script[..at], &script[at..]),
        None => panic!("clap_complete's bash script changed"),
    }
}

/// The launch commands' IMAGE (the first of their trailing values) and inspect's complete
/// image files, where clap_complete offers any.
fn zsh(script: String) -> String {
    let files = format!("_files -g \"*.({})\"", IMAGE_EXTENSIONS.join("|"));
    let mut out = String::new();
    let mut changed = 0;
    for line in script.lines() {
        if line.starts_with("'*::target -- ") {
            out.push_str(&format!("':image -- The image:{files}' \\\n"));
            changed += 1;
        }
        if line.starts_with("':image -- ") {
            out.push_str(&line.replacen(":_default' \\", &format!(":{files}' \\"), 1));
            changed += 1;
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    assert_eq!(changed, 4, "clap_complete's zsh script changed");
    out
}

fn fish(script: String, cmd: &Command) -> String {
    let mut cases = String::new();
    for sub in IMAGE_COMMANDS {
        cases.push_str(&format!(
            "        case {sub}\n            printf '%s\\n' {}\n",
            value_options(cmd, sub).join(" ")
        ));
    }
    format!(
        r#"{script}
# The IMAGE of exec, run, shell and inspect: image files and directories.
function __fish_gpurun_value_options
    switch $argv[1]
{cases}    end
end

function __fish_gpurun_wants_image
    set -l sub
    set -l skip 0
    set -l dashdash 0
    for w in (commandline -opc)[2..-1]
        if test $dashdash = 1
            return 1
        else if test $skip = 1
            set skip 0
        else if test -z "$sub"
            switch $w
                case {subs}
                    set sub $w
                case '-*'
                case '*'
                    return 1
            end
        else
            switch $w
                case --
                    set dashdash 1
                case '--*=*'
                case '-*'
                    if contains -- $w (__fish_gpurun_value_options $sub)
                        set skip 1
                    end
                case '*'
                    return 1
            end
        end
    end
    test -n "$sub"; and test $skip = 0
end

function __fish_gpurun_images
    for f in (commandline -ct)*
        if test -d $f
            echo $f/
        else if string match -qr '\.({exts})$' -- $f
            echo $f
        end
    end
end

complete -c gpurun -n __fish_gpurun_wants_image -f -a '(__fish_gpurun_images)'
# help's topics and subcommands (clap_complete's fish script offers no positional values)
complete -c gpurun -n "__fish_gpurun_using_subcommand help" -f -a "{topics}"
"#,
        subs = IMAGE_COMMANDS.join(" "),
        exts = IMAGE_EXTENSIONS.join("|"),
        topics = help_words(cmd).join(" ")
    )
}

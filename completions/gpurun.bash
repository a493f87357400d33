_gpurun() {
    local i cur prev opts cmd
    COMPREPLY=()
    if [[ "${BASH_VERSINFO[0]}" -ge 4 ]]; then
        cur="$2"
    else
        cur="${COMP_WORDS[COMP_CWORD]}"
    fi
    prev="$3"
    cmd=""
    opts=""

    for i in "${COMP_WORDS[@]:0:COMP_CWORD}"
    do
        case "${cmd},${i}" in
            ",$1")
                cmd="gpurun"
                ;;
            gpurun,cache)
                cmd="gpurun__subcmd__cache"
                ;;
            gpurun,completions)
                cmd="gpurun__subcmd__completions"
                ;;
            gpurun,config)
                cmd="gpurun__subcmd__config"
                ;;
            gpurun,doctor)
                cmd="gpurun__subcmd__doctor"
                ;;
            gpurun,exec)
                cmd="gpurun__subcmd__exec"
                ;;
            gpurun,gpus)
                cmd="gpurun__subcmd__gpus"
                ;;
            gpurun,help)
                cmd="gpurun__subcmd__help"
                ;;
            gpurun,inspect)
                cmd="gpurun__subcmd__inspect"
                ;;
            gpurun,ps)
                cmd="gpurun__subcmd__ps"
                ;;
            gpurun,pull)
                cmd="gpurun__subcmd__pull"
                ;;
            gpurun,run)
                cmd="gpurun__subcmd__run"
                ;;
            gpurun,shell)
                cmd="gpurun__subcmd__shell"
                ;;
            gpurun,stop)
                cmd="gpurun__subcmd__stop"
                ;;
            gpurun,version)
                cmd="gpurun__subcmd__version"
                ;;
            gpurun__subcmd__cache,clean)
                cmd="gpurun__subcmd__cache__subcmd__clean"
                ;;
            gpurun__subcmd__cache,gc)
                cmd="gpurun__subcmd__cache__subcmd__gc"
                ;;
            gpurun__subcmd__cache,list)
                cmd="gpurun__subcmd__cache__subcmd__list"
                ;;
            gpurun__subcmd__config,show)
                cmd="gpurun__subcmd__config__subcmd__show"
                ;;
            *)
                ;;
        esac
    done

    case "${cmd}" in
        gpurun)
            opts="-q -v -h -V --quiet --verbose --debug --help --version exec run shell gpus pull inspect cache doctor ps stop config version help completions"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 1 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__cache)
            opts="-q -v -h -V --quiet --verbose --debug --help --version list clean gc"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__cache__subcmd__clean)
            opts="-q -v -h -V --force --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__cache__subcmd__gc)
            opts="-q -v -h -V --max-size --older-than --dry-run --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --max-size)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --older-than)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__cache__subcmd__list)
            opts="-q -v -h -V --json --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__completions)
            opts="-q -v -h -V --quiet --verbose --debug --help --version bash elvish fish powershell zsh"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__config)
            opts="-q -v -h -V --quiet --verbose --debug --help --version show"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__config__subcmd__show)
            opts="-q -v -h -V --json --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 3 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__doctor)
            opts="-q -v -h -V --json --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__exec)
            opts="-B -c -C -p -i -n -H -e -w -o -f -q -v -h -V --bind --tmpfs --contain --containall --pid --ipc --net --network --no-home --home --no-mount --cwd --pwd --cleanenv --env --env-file --writable-tmpfs --read-only --writable --overlay --fakeroot --hostname --nv --no-nv --gpus --nv-caps --device --nv-driver-path --dry-run --save --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --bind)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -B)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tmpfs)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --network)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --home)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -H)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --no-mount)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pwd)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cwd)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --env)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --env-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --overlay)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --hostname)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gpus)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nv-caps)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --device)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nv-driver-path)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --save)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__gpus)
            opts="-q -v -h -V --json --nv-driver-path --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --nv-driver-path)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__help)
            opts="-q -v -h -V --quiet --verbose --debug --help --version env binds gpu slurm exit-codes config images apptainer exec run shell gpus pull inspect cache doctor ps stop version completions"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__inspect)
            opts="-q -v -h -V --json --platform --insecure --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --platform)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__ps)
            opts="-q -v -h -V --json --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__pull)
            opts="-o -F -j -q -v -h -V --output --platform --insecure --force --into-cache --for-start --jobs --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --output)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --platform)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --jobs)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -j)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__run)
            opts="-B -c -C -p -i -n -H -e -w -o -f -q -v -h -V --bind --tmpfs --contain --containall --pid --ipc --net --network --no-home --home --no-mount --cwd --pwd --cleanenv --env --env-file --writable-tmpfs --read-only --writable --overlay --fakeroot --hostname --nv --no-nv --gpus --nv-caps --device --nv-driver-path --dry-run --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --bind)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -B)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tmpfs)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --network)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --home)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -H)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --no-mount)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pwd)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cwd)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --env)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --env-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --overlay)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --hostname)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gpus)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nv-caps)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --device)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nv-driver-path)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__shell)
            opts="-B -c -C -p -i -n -H -e -w -o -f -s -q -v -h -V --bind --tmpfs --contain --containall --pid --ipc --net --network --no-home --home --no-mount --cwd --pwd --cleanenv --env --env-file --writable-tmpfs --read-only --writable --overlay --fakeroot --hostname --nv --no-nv --gpus --nv-caps --device --nv-driver-path --dry-run --shell --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                --bind)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -B)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --tmpfs)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --network)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --home)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -H)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --no-mount)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --pwd)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --cwd)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --env)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --env-file)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --overlay)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -o)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --hostname)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --gpus)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nv-caps)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --device)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --nv-driver-path)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                --shell)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                -s)
                    COMPREPLY=($(compgen -f "${cur}"))
                    return 0
                    ;;
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__stop)
            opts="-q -v -h -V --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
        gpurun__subcmd__version)
            opts="-q -v -h -V --quiet --verbose --debug --help --version"
            if [[ ${cur} == -* || ${COMP_CWORD} -eq 2 ]] ; then
                COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
                return 0
            fi
            case "${prev}" in
                *)
                    COMPREPLY=()
                    ;;
            esac
            COMPREPLY=( $(compgen -W "${opts}" -- "${cur}") )
            return 0
            ;;
    esac
}

# The IMAGE of exec, run, shell and inspect: image files and directories.
_gpurun_image() {
    local i w sub="" vals="" cur="${COMP_WORDS[COMP_CWORD]}"
    [[ $cur == -* ]] && return 1
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        if [[ -z $sub ]]; then
            case "$w" in
                exec) sub=$w; vals="-B --bind --tmpfs --network -H --home --no-mount --pwd --cwd --env --env-file -o --overlay --hostname --gpus --nv-caps --device --nv-driver-path --save" ;;
                run) sub=$w; vals="-B --bind --tmpfs --network -H --home --no-mount --pwd --cwd --env --env-file -o --overlay --hostname --gpus --nv-caps --device --nv-driver-path" ;;
                shell) sub=$w; vals="-B --bind --tmpfs --network -H --home --no-mount --pwd --cwd --env --env-file -o --overlay --hostname --gpus --nv-caps --device --nv-driver-path -s --shell" ;;
                inspect) sub=$w; vals="--platform" ;;
                -*) ;;
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
    COMPREPLY=($(compgen -d -- "$cur"; compgen -f -X '!*.sqsh' -- "$cur"; compgen -f -X '!*.sif' -- "$cur"; compgen -f -X '!*.squashfs' -- "$cur"; compgen -f -X '!*.sqfs' -- "$cur"))
    return 0
}

_gpurun_complete() {
    _gpurun_image || _gpurun "$@"
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _gpurun_complete -o nosort -o bashdefault -o default gpurun
else
    complete -F _gpurun_complete -o bashdefault -o default gpurun
fi

# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_gpurun_global_optspecs
    string join \n q/quiet v/verbose debug h/help V/version
end

function __fish_gpurun_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_gpurun_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_gpurun_using_subcommand
    set -l cmd (__fish_gpurun_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c gpurun -n "__fish_gpurun_needs_command" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_needs_command" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_needs_command" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_needs_command" -s h -l help -d 'Print help'
complete -c gpurun -n "__fish_gpurun_needs_command" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "exec" -d 'Run a command inside an image'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "run" -d 'Run the image\'s entrypoint and command (Docker semantics), else /bin/sh'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "shell" -d 'Start an interactive shell inside an image'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "gpus" -d 'List the GPUs this process may use (index, minor, UUID, name, memory, utilisation, processes)'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "pull" -d 'Pull an image into one squashfs file (registry, OCI layout, docker archive or directory)'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "inspect" -d 'Show an image\'s source, digest, platform, size, environment, entrypoint and CUDA needs'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "cache" -d 'List, clean or garbage-collect the blob and image cache'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "doctor" -d 'Check whether this node can run containers, and say how to fix what is missing'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "ps" -d 'List your running gpurun containers and image servers on this node'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "stop" -d 'Stop your image servers on this node (all, or IMAGE\'s): they exit once their containers end'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "config" -d 'Print the merged configuration and where each value came from'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "version" -d 'Print the version, git commit, compiler and target'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "help" -d 'Help on a subcommand or a topic: env, binds, gpu, slurm, exit-codes, config, images, apptainer'
complete -c gpurun -n "__fish_gpurun_needs_command" -f -a "completions" -d 'Write a shell completion script to stdout (bash, zsh, fish)'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s B -l bind -d 'Bind a host path: SRC[:DST[:FLAGS]], repeatable, comma-separated lists allowed; FLAGS joined with \'+\': ro, rw, nosuid, nodev, noexec, [r]private, [r]slave, [r]shared, [r]unbindable, x-create=dir|file|auto (gpurun help binds)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l tmpfs -d 'Mount a fresh tmpfs at DST inside: DST[:OPTS], OPTS size=N, mode=OCTAL, ro, noexec… (comma-separated; repeatable)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l network -d 'The network of --net: none (loopback only) is the one gpurun has; implies --net' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s H -l home -d 'Bind SRC as the home directory, at DST inside (default: SRC); also with --contain' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l no-mount -d 'Leave out default mounts: home, cwd, tmp, hostfs, bind-paths (the config files\' binds), or the destination of one of those binds or of /etc/hosts, /etc/localtime, /etc/resolv.conf (comma-separated, repeatable)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l pwd -l cwd -d 'Working directory inside the container (default: the current one); one the container lacks is an error' -r -F
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l env -d 'Set variables inside: K=V, or a comma-separated list K=V,K2=V2 (Apptainer\'s rules: gpurun help env), repeatable' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l env-file -d 'Read K=V lines from a file (comma-separated, repeatable)' -r -F
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s o -l overlay -d 'Keep the root\'s changes in directory DIR (in DIR/upper), over the image; DIR:ro reads them without writing' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l hostname -d 'The container\'s host name (its own UTS namespace)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l gpus -d 'GPUs to use: indices, GPU-/MIG- UUIDs or PCI bus ids, comma-separated, or all, none [default: CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, Slurm\'s GPUs, else all allowed]' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l nv-caps -d 'Driver capabilities beyond compute and utility: video, graphics, all [default: NVIDIA_DRIVER_CAPABILITIES]' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l device -d 'A device as the site\'s CDI specs define it (repeatable): VENDOR/CLASS=NAME, e.g. nvidia.com/gpu=0, nvidia.com/gpu=all, nvidia.com/gpu=GPU-<uuid> (gpurun help gpu)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l nv-driver-path -d 'Extra ld.so.cache files or directories holding the driver\'s libraries, searched before /usr/local/nvidia and /etc/ld.so.cache' -r -F
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l save -d 'Once the command has succeeded, write the container\'s root with its changes as a new image OUT (the image\'s metadata kept)' -r -F
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s c -l contain -d 'An empty home directory and a private /tmp of the container\'s own (in memory); no cwd bind'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s C -l containall -d '--contain and --cleanenv together, in PID and IPC namespaces of its own'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s p -l pid -d 'A PID namespace of the container\'s own, with its own /proc'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s i -l ipc -d 'An IPC namespace of the container\'s own, with its own /dev/shm'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s n -l net -d 'A network namespace of the container\'s own, with only loopback (no network outside)'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l no-home -d 'Do not bind the home directory'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s e -l cleanenv -d 'Start from an empty environment (plus the image\'s and --env)'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l writable-tmpfs -d 'Make the root writable with a tmpfs overlay that vanishes on exit'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l read-only -d 'Keep the root read-only, also where the site makes it writable by default (writable_root in the config)'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s w -l writable -d 'Write changes into the sandbox directory image itself (not a .sqsh or .sif image)'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s f -l fakeroot -d 'Map your user to root inside the container (no privilege is gained outside)'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l nv -d 'Give the container the NVIDIA driver and the allowed GPUs; on by default when a driver is present (env GPURUN_NV=1|0)'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l no-nv -d 'No GPU support, even when a driver is present'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l dry-run -d 'Print the launch plan (mounts, env, devices, uid map) as JSON and run nothing'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpurun -n "__fish_gpurun_using_subcommand exec" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s B -l bind -d 'Bind a host path: SRC[:DST[:FLAGS]], repeatable, comma-separated lists allowed; FLAGS joined with \'+\': ro, rw, nosuid, nodev, noexec, [r]private, [r]slave, [r]shared, [r]unbindable, x-create=dir|file|auto (gpurun help binds)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l tmpfs -d 'Mount a fresh tmpfs at DST inside: DST[:OPTS], OPTS size=N, mode=OCTAL, ro, noexec… (comma-separated; repeatable)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l network -d 'The network of --net: none (loopback only) is the one gpurun has; implies --net' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s H -l home -d 'Bind SRC as the home directory, at DST inside (default: SRC); also with --contain' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l no-mount -d 'Leave out default mounts: home, cwd, tmp, hostfs, bind-paths (the config files\' binds), or the destination of one of those binds or of /etc/hosts, /etc/localtime, /etc/resolv.conf (comma-separated, repeatable)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l pwd -l cwd -d 'Working directory inside the container (default: the current one); one the container lacks is an error' -r -F
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l env -d 'Set variables inside: K=V, or a comma-separated list K=V,K2=V2 (Apptainer\'s rules: gpurun help env), repeatable' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l env-file -d 'Read K=V lines from a file (comma-separated, repeatable)' -r -F
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s o -l overlay -d 'Keep the root\'s changes in directory DIR (in DIR/upper), over the image; DIR:ro reads them without writing' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l hostname -d 'The container\'s host name (its own UTS namespace)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l gpus -d 'GPUs to use: indices, GPU-/MIG- UUIDs or PCI bus ids, comma-separated, or all, none [default: CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, Slurm\'s GPUs, else all allowed]' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l nv-caps -d 'Driver capabilities beyond compute and utility: video, graphics, all [default: NVIDIA_DRIVER_CAPABILITIES]' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l device -d 'A device as the site\'s CDI specs define it (repeatable): VENDOR/CLASS=NAME, e.g. nvidia.com/gpu=0, nvidia.com/gpu=all, nvidia.com/gpu=GPU-<uuid> (gpurun help gpu)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l nv-driver-path -d 'Extra ld.so.cache files or directories holding the driver\'s libraries, searched before /usr/local/nvidia and /etc/ld.so.cache' -r -F
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s c -l contain -d 'An empty home directory and a private /tmp of the container\'s own (in memory); no cwd bind'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s C -l containall -d '--contain and --cleanenv together, in PID and IPC namespaces of its own'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s p -l pid -d 'A PID namespace of the container\'s own, with its own /proc'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s i -l ipc -d 'An IPC namespace of the container\'s own, with its own /dev/shm'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s n -l net -d 'A network namespace of the container\'s own, with only loopback (no network outside)'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l no-home -d 'Do not bind the home directory'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s e -l cleanenv -d 'Start from an empty environment (plus the image\'s and --env)'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l writable-tmpfs -d 'Make the root writable with a tmpfs overlay that vanishes on exit'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l read-only -d 'Keep the root read-only, also where the site makes it writable by default (writable_root in the config)'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s w -l writable -d 'Write changes into the sandbox directory image itself (not a .sqsh or .sif image)'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s f -l fakeroot -d 'Map your user to root inside the container (no privilege is gained outside)'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l nv -d 'Give the container the NVIDIA driver and the allowed GPUs; on by default when a driver is present (env GPURUN_NV=1|0)'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l no-nv -d 'No GPU support, even when a driver is present'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l dry-run -d 'Print the launch plan (mounts, env, devices, uid map) as JSON and run nothing'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpurun -n "__fish_gpurun_using_subcommand run" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s B -l bind -d 'Bind a host path: SRC[:DST[:FLAGS]], repeatable, comma-separated lists allowed; FLAGS joined with \'+\': ro, rw, nosuid, nodev, noexec, [r]private, [r]slave, [r]shared, [r]unbindable, x-create=dir|file|auto (gpurun help binds)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l tmpfs -d 'Mount a fresh tmpfs at DST inside: DST[:OPTS], OPTS size=N, mode=OCTAL, ro, noexec… (comma-separated; repeatable)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l network -d 'The network of --net: none (loopback only) is the one gpurun has; implies --net' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s H -l home -d 'Bind SRC as the home directory, at DST inside (default: SRC); also with --contain' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l no-mount -d 'Leave out default mounts: home, cwd, tmp, hostfs, bind-paths (the config files\' binds), or the destination of one of those binds or of /etc/hosts, /etc/localtime, /etc/resolv.conf (comma-separated, repeatable)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l pwd -l cwd -d 'Working directory inside the container (default: the current one); one the container lacks is an error' -r -F
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l env -d 'Set variables inside: K=V, or a comma-separated list K=V,K2=V2 (Apptainer\'s rules: gpurun help env), repeatable' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l env-file -d 'Read K=V lines from a file (comma-separated, repeatable)' -r -F
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s o -l overlay -d 'Keep the root\'s changes in directory DIR (in DIR/upper), over the image; DIR:ro reads them without writing' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l hostname -d 'The container\'s host name (its own UTS namespace)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l gpus -d 'GPUs to use: indices, GPU-/MIG- UUIDs or PCI bus ids, comma-separated, or all, none [default: CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, Slurm\'s GPUs, else all allowed]' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l nv-caps -d 'Driver capabilities beyond compute and utility: video, graphics, all [default: NVIDIA_DRIVER_CAPABILITIES]' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l device -d 'A device as the site\'s CDI specs define it (repeatable): VENDOR/CLASS=NAME, e.g. nvidia.com/gpu=0, nvidia.com/gpu=all, nvidia.com/gpu=GPU-<uuid> (gpurun help gpu)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l nv-driver-path -d 'Extra ld.so.cache files or directories holding the driver\'s libraries, searched before /usr/local/nvidia and /etc/ld.so.cache' -r -F
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s s -l shell -d 'Shell to start (default: $SHELL if the image has it, else /bin/sh)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s c -l contain -d 'An empty home directory and a private /tmp of the container\'s own (in memory); no cwd bind'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s C -l containall -d '--contain and --cleanenv together, in PID and IPC namespaces of its own'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s p -l pid -d 'A PID namespace of the container\'s own, with its own /proc'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s i -l ipc -d 'An IPC namespace of the container\'s own, with its own /dev/shm'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s n -l net -d 'A network namespace of the container\'s own, with only loopback (no network outside)'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l no-home -d 'Do not bind the home directory'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s e -l cleanenv -d 'Start from an empty environment (plus the image\'s and --env)'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l writable-tmpfs -d 'Make the root writable with a tmpfs overlay that vanishes on exit'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l read-only -d 'Keep the root read-only, also where the site makes it writable by default (writable_root in the config)'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s w -l writable -d 'Write changes into the sandbox directory image itself (not a .sqsh or .sif image)'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s f -l fakeroot -d 'Map your user to root inside the container (no privilege is gained outside)'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l nv -d 'Give the container the NVIDIA driver and the allowed GPUs; on by default when a driver is present (env GPURUN_NV=1|0)'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l no-nv -d 'No GPU support, even when a driver is present'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l dry-run -d 'Print the launch plan (mounts, env, devices, uid map) as JSON and run nothing'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpurun -n "__fish_gpurun_using_subcommand shell" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand gpus" -l nv-driver-path -d 'Extra ld.so.cache files or directories holding the driver\'s libraries, searched before /usr/local/nvidia and /etc/ld.so.cache' -r -F
complete -c gpurun -n "__fish_gpurun_using_subcommand gpus" -l json -d 'Print JSON'
complete -c gpurun -n "__fish_gpurun_using_subcommand gpus" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand gpus" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand gpus" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand gpus" -s h -l help -d 'Print help'
complete -c gpurun -n "__fish_gpurun_using_subcommand gpus" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand pull" -s o -l output -d 'Output file, or a directory to put NAME_TAG.sqsh in (default: NAME_TAG.sqsh here)' -r -F
complete -c gpurun -n "__fish_gpurun_using_subcommand pull" -l platform -d 'Platform to pull from a multi-platform image: OS/ARCH[/VARIANT] (default: this machine\'s)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand pull" -s j -l jobs -d 'Threads that inflate a layer and compress the image (default: pull_threads, else the CPUs this process may use)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand pull" -l insecure -d 'Allow plain http to a registry that is not on loopback'
complete -c gpurun -n "__fish_gpurun_using_subcommand pull" -s F -l force -d 'Replace the output file if it exists'
complete -c gpurun -n "__fish_gpurun_using_subcommand pull" -l into-cache -d 'Keep the image in the cache, as `exec docker://…` and `exec podman://…` do (converted once, kept by digest or image ID), instead of writing a file, and print its path'
complete -c gpurun -n "__fish_gpurun_using_subcommand pull" -l for-start -d 'With --into-cache: unpack the image to start from it at once, then write it (run by `exec docker://…` for an image not cached yet; image/pull/for_start.rs)'
complete -c gpurun -n "__fish_gpurun_using_subcommand pull" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand pull" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand pull" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand pull" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpurun -n "__fish_gpurun_using_subcommand pull" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand inspect" -l platform -d 'For docker://: the platform to inspect, OS/ARCH[/VARIANT] (default: this machine\'s)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand inspect" -l json -d 'Print JSON'
complete -c gpurun -n "__fish_gpurun_using_subcommand inspect" -l insecure -d 'For docker://: allow plain http to a registry that is not on loopback'
complete -c gpurun -n "__fish_gpurun_using_subcommand inspect" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand inspect" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand inspect" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand inspect" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpurun -n "__fish_gpurun_using_subcommand inspect" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and not __fish_seen_subcommand_from list clean gc" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and not __fish_seen_subcommand_from list clean gc" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and not __fish_seen_subcommand_from list clean gc" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and not __fish_seen_subcommand_from list clean gc" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and not __fish_seen_subcommand_from list clean gc" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and not __fish_seen_subcommand_from list clean gc" -f -a "list" -d 'List cached blobs and images with their size and last use'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and not __fish_seen_subcommand_from list clean gc" -f -a "clean" -d 'Remove everything in the cache that no process uses; say what is kept and for whom'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and not __fish_seen_subcommand_from list clean gc" -f -a "gc" -d 'Remove least recently used entries until the cache fits the limits'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from list" -l json -d 'Print JSON'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from list" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from list" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from list" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from clean" -l force -d 'Remove what processes use too, all but what a pull is writing (an open file\'s space returns when its process ends)'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from clean" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from clean" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from clean" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from clean" -s h -l help -d 'Print help'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from clean" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from gc" -l max-size -d 'Remove the least recently used entries until the cache is at most this big (e.g. 20G, 500M)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from gc" -l older-than -d 'Remove entries not used for this long (e.g. 30d, 12h, 90m)' -r
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from gc" -l dry-run -d 'Say what would be removed, remove nothing'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from gc" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from gc" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from gc" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from gc" -s h -l help -d 'Print help'
complete -c gpurun -n "__fish_gpurun_using_subcommand cache; and __fish_seen_subcommand_from gc" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand doctor" -l json -d 'Print JSON'
complete -c gpurun -n "__fish_gpurun_using_subcommand doctor" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand doctor" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand doctor" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand doctor" -s h -l help -d 'Print help'
complete -c gpurun -n "__fish_gpurun_using_subcommand doctor" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand ps" -l json -d 'Print JSON'
complete -c gpurun -n "__fish_gpurun_using_subcommand ps" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand ps" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand ps" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand ps" -s h -l help -d 'Print help'
complete -c gpurun -n "__fish_gpurun_using_subcommand ps" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand stop" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand stop" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand stop" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand stop" -s h -l help -d 'Print help'
complete -c gpurun -n "__fish_gpurun_using_subcommand stop" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand config; and not __fish_seen_subcommand_from show" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand config; and not __fish_seen_subcommand_from show" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand config; and not __fish_seen_subcommand_from show" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand config; and not __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c gpurun -n "__fish_gpurun_using_subcommand config; and not __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand config; and not __fish_seen_subcommand_from show" -f -a "show" -d 'Print every setting, its value and where it came from (site file, user file, environment)'
complete -c gpurun -n "__fish_gpurun_using_subcommand config; and __fish_seen_subcommand_from show" -l json -d 'Print JSON'
complete -c gpurun -n "__fish_gpurun_using_subcommand config; and __fish_seen_subcommand_from show" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand config; and __fish_seen_subcommand_from show" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand config; and __fish_seen_subcommand_from show" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand config; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c gpurun -n "__fish_gpurun_using_subcommand config; and __fish_seen_subcommand_from show" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand version" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand version" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand version" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand version" -s h -l help -d 'Print help'
complete -c gpurun -n "__fish_gpurun_using_subcommand version" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand help" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand help" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand help" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand help" -s h -l help -d 'Print help'
complete -c gpurun -n "__fish_gpurun_using_subcommand help" -s V -l version -d 'Print version'
complete -c gpurun -n "__fish_gpurun_using_subcommand completions" -s q -l quiet -d 'Print only errors'
complete -c gpurun -n "__fish_gpurun_using_subcommand completions" -s v -l verbose -d 'Say what gpurun does (mounts, binds, devices)'
complete -c gpurun -n "__fish_gpurun_using_subcommand completions" -l debug -d 'Also print the cause chain of errors and every mount'
complete -c gpurun -n "__fish_gpurun_using_subcommand completions" -s h -l help -d 'Print help'
complete -c gpurun -n "__fish_gpurun_using_subcommand completions" -s V -l version -d 'Print version'

# The IMAGE of exec, run, shell and inspect: image files and directories.
function __fish_gpurun_value_options
    switch $argv[1]
        case exec
            printf '%s\n' -B --bind --tmpfs --network -H --home --no-mount --pwd --cwd --env --env-file -o --overlay --hostname --gpus --nv-caps --device --nv-driver-path --save
        case run
            printf '%s\n' -B --bind --tmpfs --network -H --home --no-mount --pwd --cwd --env --env-file -o --overlay --hostname --gpus --nv-caps --device --nv-driver-path
        case shell
            printf '%s\n' -B --bind --tmpfs --network -H --home --no-mount --pwd --cwd --env --env-file -o --overlay --hostname --gpus --nv-caps --device --nv-driver-path -s --shell
        case inspect
            printf '%s\n' --platform
    end
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
                case exec run shell inspect
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
        else if string match -qr '\.(sqsh|sif|squashfs|sqfs)$' -- $f
            echo $f
        end
    end
end

complete -c gpurun -n __fish_gpurun_wants_image -f -a '(__fish_gpurun_images)'
# help's topics and subcommands (clap_complete's fish script offers no positional values)
complete -c gpurun -n "__fish_gpurun_using_subcommand help" -f -a "env binds gpu slurm exit-codes config images apptainer exec run shell gpus pull inspect cache doctor ps stop version completions"

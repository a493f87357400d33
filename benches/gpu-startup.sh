#!/bin/bash
# Start-up of `gpurun exec IMAGE true` with and without GPU support, on a GPU node; no peer tools
# needed, so it runs where cargo and the Debian peers are not (the GPU machine). Run as root: it
# builds a small busybox image and runs gpurun as an unprivileged user.
#
#   sudo GPURUN=/path/gpurun [BASELINE=/path/older-gpurun] TEST_USER=ubuntu \
#        [BUSYBOX=/bin/busybox] [MKSQUASHFS=mksquashfs] [RUNS=20] [ROUNDS=3] [CH_RUN=DIR]
#        bash benches/gpu-startup.sh
#
# CH_RUN: a directory with Debian's ch-run and, in lib/, the libraries ldd lists for it (other
# than libc), to time `ch-run IMAGE -- true` and `unshare -Urm true` beside gpurun where
# Charliecloud is not installed.
#
# Each round runs, for each build in turn, RUNS execs with --no-nv, then RUNS with --nv, and
# prints the mean time per exec of each loop (interleaved, so a busy second hits both builds).
# Then the --nv plan's mounts by kind (binds of device nodes, of host paths, symlinks, files).
set -eu
GPURUN=${GPURUN:?set GPURUN to the gpurun binary}
TEST_USER=${TEST_USER:-ubuntu}
BUSYBOX=${BUSYBOX:-/bin/busybox}
MKSQUASHFS=${MKSQUASHFS:-mksquashfs}
RUNS=${RUNS:-20}
ROUNDS=${ROUNDS:-3}
W=$(mktemp -d /tmp/gpurun-startup.XXXXXX)
trap 'rm -rf "$W"' EXIT
chmod 755 "$W"

mkdir -p "$W/root/bin" "$W/root/etc" "$W/root/tmp" "$W/root/proc" "$W/root/sys" "$W/root/dev"
cp "$BUSYBOX" "$W/root/bin/busybox"
mkdir -p "$W/root/usr/bin"
for t in sh true; do ln -s busybox "$W/root/bin/$t"; done
ln -s ../../bin/busybox "$W/root/usr/bin/true"
mkdir -p "$W/dyn/tmp" "$W/dyn/proc" "$W/dyn/sys" "$W/dyn/dev" "$W/dyn/etc" "$W/dyn/home"
for r in root dyn; do # ch-run binds its own over these
    echo 'root:x:0:0:root:/root:/bin/sh' >"$W/$r/etc/passwd"
    echo 'root:x:0:' >"$W/$r/etc/group"
done
"$MKSQUASHFS" "$W/root" "$W/img.sqsh" -comp zstd -noappend -quiet >/dev/null
# And a dynamic program: the host's `true` with the loader and libraries ldd finds for it.
cp -L --parents /usr/bin/true $(ldd /usr/bin/true | grep -o '/[^ ]*') "$W/dyn/"
"$MKSQUASHFS" "$W/dyn" "$W/dyn.sqsh" -comp zstd -noappend -quiet >/dev/null
builds=("new=$GPURUN")
[ -n "${BASELINE:-}" ] && builds+=("old=$BASELINE")
for b in "${builds[@]}"; do
    install -m 755 "${b#*=}" "$W/gpurun-${b%%=*}"
done
[ -z "${CH_RUN:-}" ] || cp -r "$CH_RUN" "$W/ch"
chmod -R a+rX "$W"

as_user() { runuser -u "$TEST_USER" -- env -i PATH=/usr/bin:/bin HOME=/tmp "$@"; }
per_exec() { # per_exec BINARY MODE IMAGE: mean microseconds per exec over RUNS execs, as the user
    as_user sh -c 't0=$(date +%s%N); i=0
        while [ $i -lt '"$RUNS"' ]; do "$0" exec "$1" "$2" /usr/bin/true || exit 1; i=$((i + 1)); done
        echo $((($(date +%s%N) - t0) / '"$RUNS"' / 1000))' "$1" "$2" "$3"
}

per_exec_peer() { # per_exec_peer IMAGE: ch-run's mean microseconds per exec, then unshare's
    as_user env USER="$TEST_USER" sh -c 't0=$(date +%s%N); i=0
        while [ $i -lt '"$RUNS"' ]; do LD_LIBRARY_PATH="$0/lib" "$0/ch-run" "$1" -- /usr/bin/true || exit 1
        i=$((i + 1)); done; echo $((($(date +%s%N) - t0) / '"$RUNS"' / 1000))' "$W/ch" "$1"
}
per_exec_unshare() {
    as_user sh -c 't0=$(date +%s%N); i=0
        while [ $i -lt '"$RUNS"' ]; do unshare -Urm true || exit 1; i=$((i + 1)); done
        echo $((($(date +%s%N) - t0) / '"$RUNS"' / 1000))'
}

echo "# gpurun exec of true (busybox: static; dyn: the host's, with ld.so and libc), $RUNS runs per line, $(nproc) CPUs, $(uname -r)"
as_user "$W/gpurun-new" exec --nv "$W/img.sqsh" true # the first NVML answer, if any, is kept
for r in $(seq "$ROUNDS"); do
    for b in "${builds[@]}"; do
        n=${b%%=*}
        for mode in --no-nv --nv; do
            for img in img dyn; do
                echo "round $r $n $mode $img $(per_exec "$W/gpurun-$n" "$mode" "$W/$img.sqsh") us per exec"
            done
        done
    done
    if [ -n "${CH_RUN:-}" ]; then
        for img in img dyn; do
            echo "round $r ch-run - $img $(per_exec_peer "$W/$img.sqsh") us per exec"
        done
        echo "round $r unshare -Urm true $(per_exec_unshare) us per exec"
    fi
done
for b in "${builds[@]}"; do
    n=${b%%=*}
    as_user "$W/gpurun-$n" exec --nv --dry-run "$W/img.sqsh" true >"$W/plan-$n.json"
    python3 - "$W/plan-$n.json" "$n" <<'EOF'
import json, sys
from collections import Counter
plan = json.load(open(sys.argv[1]))
c = Counter()
for m in plan["mounts"]:
    kind = m["kind"]
    where = "/dev" if m["dst"].startswith("/dev") else "/.gpurun" if m["dst"].startswith("/.gpurun") else "other"
    c[(kind, where)] += 1
print(sys.argv[2], "--nv plan:", len(plan["mounts"]), "mounts;", ", ".join(f"{k} {w}: {n}" for (k, w), n in sorted(c.items())))
EOF
done

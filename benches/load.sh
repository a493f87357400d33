#!/bin/bash
# Start-up when the machine is busy: `exec IMAGE CMD` of gpurun (and of BASELINE, another gpurun
# build, and ch-run where there is one), each run timed so that the tail shows, in four states:
#   quiet   nothing else running;
#   hogs    one CPU-bound process per CPU at normal priority (a login node's other users);
#   idle    the same at idle priority (SCHED_IDLE: scavenger jobs);
#   burst   BURST starts at once, the time of the whole batch (an MPI launch of many tasks).
# Rounds are interleaved (each tool in turn, the order kept), so a slow minute hits every tool.
#
#   sudo GPURUN=/path/gpurun IMG=image.sqsh [CMD=true] [BASELINE=/path/gpurun-old]
#        [CH_RUN=ch-run|DIR] [BENCH_USER=gpuruntest] [RUNS=20] [ROUNDS=4] [HOGS=$(nproc)]
#        [BURST=$((4 * HOGS))] [STATES="quiet hogs idle burst"] bash benches/load.sh
#
# CH_RUN: ch-run on PATH by default; a directory as for benches/gpu-startup.sh (ch-run and, in
# lib/, its libraries) where Charliecloud is not installed. Root only starts the hogs and
# switches user; every measured command runs as BENCH_USER.
set -euo pipefail
GPURUN=$(readlink -f "${GPURUN:?set GPURUN to the gpurun binary}")
IMG=$(readlink -f "${IMG:?set IMG to a squashfs image}")
CMD=${CMD:-true}
BENCH_USER=${BENCH_USER:-gpuruntest}
RUNS=${RUNS:-20}
ROUNDS=${ROUNDS:-4}
HOGS=${HOGS:-$(nproc)}
BURST=${BURST:-$((4 * HOGS))}
STATES=${STATES:-quiet hogs idle burst}
[ "$(id -u)" = 0 ] || { echo "load.sh: run as root (hogs and the user switch only)" >&2; exit 2; }
id "$BENCH_USER" >/dev/null || { echo "load.sh: no user $BENCH_USER" >&2; exit 2; }

# Each tool is NAME=ARGV, ARGV quoted for the harness (paths may hold spaces; CMD is split there).
q() { printf '%q ' "$@"; }
tools=("gpurun=$(q "$GPURUN" exec "$IMG")$CMD")
[ -z "${BASELINE:-}" ] || tools+=("baseline=$(q "$(readlink -f "$BASELINE")" exec "$IMG")$CMD")
CH_RUN=${CH_RUN:-$(command -v ch-run || true)}
if [ -d "$CH_RUN" ]; then
    tools+=("ch-run=$(q env "LD_LIBRARY_PATH=$CH_RUN/lib" "$CH_RUN/ch-run" "$IMG" --)$CMD")
elif [ -n "$CH_RUN" ]; then
    tools+=("ch-run=$(q "$CH_RUN" "$IMG" --)$CMD")
fi

hogs=()
start_hogs() { # start_hogs normal|idle
    local _
    for _ in $(seq "$HOGS"); do
        if [ "$1" = idle ]; then
            chrt -i 0 sh -c 'while :; do :; done' &
        else
            sh -c 'while :; do :; done' &
        fi
        hogs+=($!)
    done
    sleep 0.5
}
stop_hogs() {
    if [ ${#hogs[@]} -gt 0 ]; then
        kill "${hogs[@]}" 2>/dev/null || true
        wait "${hogs[@]}" 2>/dev/null || true
    fi
    hogs=()
}
trap stop_hogs EXIT

# The timing loop, as the user: per round and tool, RUNS runs (or RUNS batches of BURST).
measure() { # measure STATE
    runuser -u "$BENCH_USER" -- env -i PATH=/usr/bin:/bin HOME=/tmp USER="$BENCH_USER" \
        python3 - "$1" "$RUNS" "$ROUNDS" "$BURST" "${tools[@]}" <<'EOF'
import shlex, statistics as st, subprocess, sys, time
state, runs, rounds, burst = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tools = [t.split("=", 1) for t in sys.argv[5:]]
times = {name: [] for name, _ in tools}
def once(argv):
    t = time.perf_counter()
    if state == "burst":
        ps = [subprocess.Popen(argv, stdout=subprocess.DEVNULL) for _ in range(burst)]
        codes = [p.wait() for p in ps]
    else:
        codes = [subprocess.call(argv, stdout=subprocess.DEVNULL)]
    if any(codes):
        sys.exit(f"load.sh: {' '.join(argv)} failed ({codes})")
    return (time.perf_counter() - t) * 1000
for name, cmd in tools:  # warm-up: the image in the page cache, gpurun's kept facts written
    once(shlex.split(cmd))
for _ in range(rounds):
    for name, cmd in tools:
        times[name] += [once(shlex.split(cmd)) for _ in range(runs)]
ref = st.mean(times["ch-run"]) if "ch-run" in times else None
what = f"batch of {burst}" if state == "burst" else "one start"
for name, v in times.items():
    v.sort()
    ratio = f"  mean / ch-run {st.mean(v) / ref:.2f}" if ref else ""
    print(f"{state:5} {name:8} ms per {what}: median {st.median(v):7.2f}  mean {st.mean(v):7.2f}"
          f"  p90 {v[int(len(v) * 0.9)]:7.2f}  max {v[-1]:7.2f}{ratio}")
EOF
}

echo "# exec $(basename "$IMG") $CMD; $(nproc) CPUs, $(uname -r); $ROUNDS rounds of $RUNS; hogs: $HOGS; burst: $BURST"
for s in $STATES; do
    case $s in
    quiet | burst) measure "$s" ;;
    hogs) start_hogs normal; measure hogs; stop_hogs ;;
    idle) start_hogs idle; measure idle; stop_hogs ;;
    *) echo "load.sh: unknown state $s" >&2; exit 2 ;;
    esac
done

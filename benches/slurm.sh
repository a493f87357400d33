#!/usr/bin/env bash
# Cost of a containerised Slurm job step, per task: the SPANK plugin (one image mount per node,
# tasks join it) against plain `srun gpurun exec` (one mount per task), with `srun true` on the
# host as the floor. Steps of 1 task and of 2N tasks (N = nodes of the allocation, or NTASKS).
#
#   benches/slurm.sh                 as an unprivileged user, on a cluster whose plugstack loads
#                                    the plugin (tests/slurm/cluster.sh start v1 PLUGIN.so gpurun=…)
#   benches/slurm.sh nodes           the multi-node case, on tests/slurm/multinode.sh's cluster:
#                                    for N = 1 … all nodes, the time from `srun -N N` until all N
#                                    tasks run (each task prints the time it started, inside the
#                                    image or, for the floor, on the host) and until srun returns;
#                                    then the cost of each further node
# Environment: GPURUN (default target/release/gpurun, else target/debug/gpurun), IMAGE (default: a
# busybox squashfs built here), REPS (default 10), NTASKS (default 2 x nodes; more tasks than
# CPUs are run with --overcommit), BENCH_DIR (default /tmp/gpurun-slurm-bench.USER; for `nodes`
# ~/gpurun-slurm-bench, which every node must see). Prints medians, `nodes` with min-max.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GPURUN=${GPURUN:-$ROOT/target/release/gpurun}
[ -x "$GPURUN" ] || GPURUN=$ROOT/target/debug/gpurun
REPS=${REPS:-10}
MODE=${1:-tasks}
case "$MODE" in
  tasks) W=${BENCH_DIR:-/tmp/gpurun-slurm-bench.$(id -un)} ;;
  nodes) W=${BENCH_DIR:-$HOME/gpurun-slurm-bench} ;;
  *) echo "usage: benches/slurm.sh [nodes]" >&2; exit 2 ;;
esac
[ "$(id -u)" != 0 ] || { echo "run as an unprivileged user" >&2; exit 2; }
srun --help 2>/dev/null | grep -q -- --container-image= || { echo "the gpurun SPANK plugin is not loaded" >&2; exit 2; }

mkdir -p "$W"; cd "$W"
[ "$MODE" = nodes ] && IMAGE=   # its own image: the tasks run its /stamp
if [ -z "${IMAGE:-}" ]; then
  rm -rf rootfs; mkdir -p rootfs/{bin,etc,tmp,proc,sys,dev,root} "rootfs/home/$(id -un)"
  cp /bin/busybox rootfs/bin/; ln -s busybox rootfs/bin/sh; ln -s busybox rootfs/bin/true
  echo 'root:x:0:0:root:/root:/bin/sh' > rootfs/etc/passwd; echo 'root:x:0:' > rootfs/etc/group
  # a static program that prints the time it started (ns), run in the image and on the host
  printf '#include <stdio.h>\n#include <time.h>\nint main(void) { struct timespec t;\n  clock_gettime(CLOCK_REALTIME, &t); printf("%%lld\\n", t.tv_sec * 1000000000LL + t.tv_nsec); return 0; }\n' >stamp.c
  gcc -O2 -static -o rootfs/stamp stamp.c
  mksquashfs rootfs img.sqsh -noappend -quiet -no-progress -all-root >/dev/null
  IMAGE=$W/img.sqsh
fi
NODES=$(sinfo -h -o %D | awk '{s += $1} END {print s}')
ms() { local t0; t0=$(date +%s%N); "$@" >/dev/null 2>&1; echo $((($(date +%s%N) - t0) / 1000000)); }
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

# One step of N tasks on N nodes, by kind (0 the host, 1 gpurun exec, 2 the plugin): prints the
# ms from srun's start until the last task started, and until srun returned.
node_step() {  # kind n
  local o=(-Q -t 1 -N "$2" -n "$2") t0 t1 out
  # a job still completing holds its nodes: the next srun would wait for them
  for _ in $(seq 100); do [ -z "$(squeue -h -u "$(id -u)")" ] && break; sleep 0.05; done
  t0=$(date +%s%N)
  case $1 in
  0) out=$(srun "${o[@]}" "$W/rootfs/stamp") ;;
  1) out=$(srun "${o[@]}" "$GPURUN" exec "$IMAGE" /stamp) ;;
  2) out=$(srun "${o[@]}" --container-image="$IMAGE" /stamp) ;;
  esac || return 1
  t1=$(date +%s%N)
  [ "$(grep -c . <<<"$out")" = "$2" ] || return 1
  echo "$((($(sort -n <<<"$out" | tail -1) - t0) / 1000000)) $(((t1 - t0) / 1000000))"
}
# "median (min-max)" of column COL (3: ready, 4: srun returned) of kind J on N nodes
spread() {  # n j col
  awk -v n="$1" -v j="$2" -v c="$3" '$1 == n && $2 == j {print $c}' "$W/node-times" | sort -n |
    awk '{a[NR] = $1} END {printf "%d (%d-%d)", a[int((NR + 1) / 2)], a[1], a[NR]}'
}
med() { spread "$@" | cut -d' ' -f1; }
nodes_bench() {
  local n j
  for n in $(seq "$NODES"); do # warm-up (page cache), and a failing kind says why
    for j in 0 1 2; do node_step "$j" "$n" >/dev/null || { echo "failed: kind $j on $n nodes" >&2; exit 1; }; done
  done
  : >"$W/node-times"
  for _ in $(seq "$REPS"); do
    for n in $(seq "$NODES"); do
      for j in 0 1 2; do echo "$n $j $(node_step "$j" "$n")" >>"$W/node-times"; done
    done
  done
  echo "image $IMAGE, gpurun $GPURUN, N tasks on N of $NODES nodes, $REPS runs each (all interleaved)"
  echo "ms from srun's start, median (min-max): until the last task runs | until srun returns"
  printf '%-5s %-14s %-14s %-18s | %-14s %-14s %s\n' nodes "srun (host)" "gpurun exec" "--container-image" \
    "srun (host)" "gpurun exec" "--container-image"
  for n in $(seq "$NODES"); do
    printf '%-5s %-14s %-14s %-18s | %-14s %-14s %s\n' "$n" "$(spread "$n" 0 3)" "$(spread "$n" 1 3)" \
      "$(spread "$n" 2 3)" "$(spread "$n" 0 4)" "$(spread "$n" 1 4)" "$(spread "$n" 2 4)"
  done
  [ "$NODES" -gt 1 ] || return 0
  local per=() c
  for c in 3 4; do for j in 0 1 2; do per+=("$(((($(med "$NODES" "$j" "$c") - $(med 1 "$j" "$c")) / (NODES - 1))))"); done; done
  printf '%-5s %-14s %-14s %-18s | %-14s %-14s %s\n' "+node" "${per[@]}"
  echo "(+node: each further node, (median at $NODES - median at 1) / $((NODES - 1)), in ms)"
}
[ "$MODE" = nodes ] && { nodes_bench; exit; }
NT=${NTASKS:-$((2 * NODES))}
CPUS=$(sinfo -h -o %C | awk -F/ '{print $4}')
OC=(); [ "$NT" -le "$CPUS" ] || OC=(--overcommit)

echo "image $IMAGE, gpurun $GPURUN, $NODES node(s), $REPS runs each (the three kinds interleaved), median wall time of the step"
printf '%-8s %11s %14s %17s %24s\n' tasks "srun true" "gpurun exec" "--container-image" "per task: exec / plugin"
for n in 1 "$NT"; do
  o=(-t 1 -N "$NODES" -n "$n" "${OC[@]}"); [ "$n" -ge "$NODES" ] || o=(-t 1 -N 1 -n 1)
  step() { # kind: 0 plain srun, 1 srun gpurun exec, 2 the plugin
    case $1 in
    0) srun "${o[@]}" true ;;
    1) srun "${o[@]}" "$GPURUN" exec "$IMAGE" true ;;
    2) srun "${o[@]}" --container-image="$IMAGE" true ;;
    esac
  }
  for j in 0 1 2; do # warm-up (page cache), and a failing kind says why
    step "$j" >/dev/null 2>&1 || { echo "failed: step kind $j" >&2; step "$j" >&2; exit 1; }
  done
  : >"$W/times"
  for _ in $(seq "$REPS"); do
    for j in 0 1 2; do
      echo "$j $(ms step "$j")" >>"$W/times"
    done
  done
  base=$(awk '$1 == 0 {print $2}' "$W/times" | median)
  exec=$(awk '$1 == 1 {print $2}' "$W/times" | median)
  plug=$(awk '$1 == 2 {print $2}' "$W/times" | median)
  printf '%-8s %8s ms %11s ms %14s ms %15s / %s ms\n' "$n" "$base" "$exec" "$plug" \
    "$(( (exec - base) / n ))" "$(( (plug - base) / n ))"
done

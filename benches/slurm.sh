#!/usr/bin/env bash
# Cost of a containerised Slurm job step, per task: the SPANK plugin (one image mount per node,
# tasks join it) against plain `srun gpurun exec` (one mount per task), with `srun true` on the
# host as the floor. Steps of 1 task and of 2N tasks (N = nodes of the allocation, or NTASKS).
#
#   benches/slurm.sh                 as an unprivileged user, on a cluster whose plugstack loads
#                                    the plugin (tests/slurm/cluster.sh start v1 PLUGIN.so gpurun=…)
# Environment: GPURUN (default target/release/gpurun, else target/debug/gpurun), IMAGE (default: a
# busybox squashfs built here), REPS (default 10), NTASKS (default 2 x nodes; more tasks than
# CPUs are run with --overcommit). Prints the median wall time of each step kind.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GPURUN=${GPURUN:-$ROOT/target/release/gpurun}
[ -x "$GPURUN" ] || GPURUN=$ROOT/target/debug/gpurun
REPS=${REPS:-10}
W=${BENCH_DIR:-/tmp/gpurun-slurm-bench.$(id -un)}
[ "$(id -u)" != 0 ] || { echo "run as an unprivileged user" >&2; exit 2; }
srun --help 2>/dev/null | grep -q -- --container-image= || { echo "the gpurun SPANK plugin is not loaded" >&2; exit 2; }

mkdir -p "$W"; cd "$W"
if [ -z "${IMAGE:-}" ]; then
  rm -rf rootfs; mkdir -p rootfs/{bin,etc,tmp,proc,sys,dev,root} "rootfs/home/$(id -un)"
  cp /bin/busybox rootfs/bin/; ln -s busybox rootfs/bin/sh; ln -s busybox rootfs/bin/true
  echo 'root:x:0:0:root:/root:/bin/sh' > rootfs/etc/passwd; echo 'root:x:0:' > rootfs/etc/group
  mksquashfs rootfs img.sqsh -noappend -quiet -no-progress -all-root >/dev/null
  IMAGE=$W/img.sqsh
fi
NODES=$(sinfo -h -o %D | awk '{s += $1} END {print s}')
NT=${NTASKS:-$((2 * NODES))}
CPUS=$(sinfo -h -o %C | awk -F/ '{print $4}')
OC=(); [ "$NT" -le "$CPUS" ] || OC=(--overcommit)

ms() { local t0; t0=$(date +%s%N); "$@" >/dev/null 2>&1; echo $((($(date +%s%N) - t0) / 1000000)); }
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

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

#!/bin/bash
# PyTorch on one GPU inside a gpurun container against the same program on the host, as an
# unprivileged user, interleaved (inside, outside, inside, …). Run as root on a GPU node with a
# PyTorch virtual environment; docs/gpu.md ("PyTorch inside and outside the container on one
# H200") has the results and how they were read.
#
#   sudo GPURUN=/path/gpurun [TEST_USER=ubuntu] [VENV=/opt/torch/.venv] [PAIRS=12]
#        [STARTUP_PAIRS=12] [MIN_PAIRS=10] [BUDGET_S=480] [RUNS_FILE=torch-parity.jsonl]
#        bash tests/gpu/torch-parity.sh 2>&1 | tee torch-parity.log
#
# 1. The host: GPU, driver, file systems, the venv's interpreter.
# 2. `torch_parity.py checks` on the host, then a directory image of the venv built from the
#    host's files (torch_image.py: hard links; no squashfs writer needed), then the same checks
#    inside: CUDA, NVML, cuBLAS(Lt), cuDNN, NVRTC, the driver's PTX JIT, Triton, NCCL, CUDA IPC
#    between processes, 100 GiB on the device, 8 GiB pinned. What passes outside must pass inside.
# 3. PAIRS interleaved pairs of `torch_parity.py bench` (bf16 matmul TFLOPS at 4096, 8192, 16384;
#    a 4 GiB device copy; 1 GiB pinned host<->device copies; the SM clock after the matmuls).
# 4. STARTUP_PAIRS interleaved pairs of `import torch; torch.cuda.is_available()`, timed from start
#    to exit, after one unmeasured run each; the same from a squashfs of the image when mksquashfs
#    is there and time is left.
# 5. nvidia-smi's clocks before and after; medians, ranges and ratios (torch_parity.py summary).
# Pairs stop once MIN_PAIRS are done and little of BUDGET_S seconds is left (before MIN_PAIRS only
# when far over it). Exit 0 only when every check that passed outside passed inside and every run
# gave its numbers.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
GPURUN=${GPURUN:-$here/gpurun}
TEST_USER=${TEST_USER:-ubuntu}
VENV=${VENV:-/opt/torch/.venv}
PAIRS=${PAIRS:-12}
STARTUP_PAIRS=${STARTUP_PAIRS:-12}
MIN_PAIRS=${MIN_PAIRS:-10}
BUDGET_S=${BUDGET_S:-480}
RUNS_FILE=$(realpath -m "${RUNS_FILE:-torch-parity.jsonl}")
HOSTPY=$(command -v python3 || echo "$VENV/bin/python")
W=$(mktemp -d /tmp/torch-parity.XXXXXX)
chmod 755 "$W"
IMG=""
trap 'rm -rf "$W"; [ -n "$IMG" ] && rm -rf "$IMG" "$IMG.sqsh"' EXIT
cd /
: >"$RUNS_FILE"
failed=0
say() { printf '\n== %s (%d s)\n' "$*" "$SECONDS"; }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

# The same small environment on both sides. NVLink multicast stays off (the GPU host's rule);
# the driver compiles the checks' PTX anew each time (no JIT cache shared between the sides).
as_user() {
    runuser -u "$TEST_USER" -- env -i HOME=/tmp PATH="$VENV/bin:/usr/bin:/bin" \
        PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
        NVSHMEM_DISABLE_NVLS=1 CUDA_CACHE_DISABLE=1 "$@"
}
cp "$here/torch_parity.py" "$W/"
install -m 755 "$GPURUN" "$W/gpurun"
PYF=$W/torch_parity.py G=$W/gpurun PY=$VENV/bin/python
chmod 644 "$PYF"
chmod 666 /dev/fuse 2>/dev/null || true
# the command line of one side: outside, inside (the directory image), sqsh (its squashfs)
side() {
    case $1 in
    outside) echo "$PY" ;;
    inside) echo "$G exec --nv $IMG $PY" ;;
    sqsh) echo "$G exec --nv $IMG.sqsh $PY" ;;
    esac
}
# record KIND SERIES WHERE PAIR: one run of `torch_parity.py KIND` on side WHERE, timed from
# start to exit inside the user's shell; its JSON line, with series, pair and wall_ms, goes to
# RUNS_FILE.
record() {
    local kind=$1 series=$2 where=$3 pair=$4 out stamps line ms
    out=$(as_user bash -c 't0=$EPOCHREALTIME; out=$(timeout -k 5 300 "$@"); rc=$?
        echo "$t0 $EPOCHREALTIME $rc"; printf "%s\n" "$out"' _ $(side "$where") "$PYF" "$kind" "$where")
    stamps=$(head -1 <<<"$out")
    line=$(grep '^{' <<<"$out" | tail -1)
    ms=$(awk '{printf "%.1f", ($2 - $1) * 1000}' <<<"$stamps")
    if [ -z "$line" ] || [ "${stamps##* }" != 0 ]; then
        bad "$kind $where (pair $pair): exit ${stamps##* }, no result"
        return 1
    fi
    line="${line%\}}, \"series\": \"$series\", \"pair\": $pair, \"wall_ms\": $ms}"
    echo "$line" >>"$RUNS_FILE"
    echo "$line"
}
clocks() {
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,temperature.gpu,power.draw,pstate --format=csv
    nvidia-smi -q -d PERFORMANCE | sed -n '/Performance/,$p' | grep -v '^$'
}

say "host"
date -u
uname -r
nproc
free -g | head -2
cat /proc/driver/nvidia/version | head -1
nvidia-smi -L
id "$TEST_USER"
ls -la /dev/nvidia* /dev/fuse
findmnt -T "$VENV" -o TARGET,SOURCE,FSTYPE,OPTIONS
findmnt -T /usr/lib -o TARGET,SOURCE,FSTYPE,OPTIONS
findmnt -T /tmp -o TARGET,SOURCE,FSTYPE,OPTIONS
df -h / /tmp /var/tmp "$VENV" | sort -u
ls -la "$VENV/bin/python"* && cat "$VENV/pyvenv.cfg"
du -sh "$VENV" 2>/dev/null
echo "mksquashfs: $(command -v mksquashfs || echo none)"
runuser -u "$TEST_USER" -- bash -c 'echo "$(id -un): memlock $(ulimit -l) nofile $(ulimit -n)"'
ldconfig -p | grep -E 'libcuda.so.1|libnvidia-ml.so.1'

say "checks outside"
as_user timeout -k 5 180 "$PY" "$PYF" checks outside >"$W/checks-outside.json"
cat "$W/checks-outside.json"

say "image"
"$HOSTPY" "$here/torch_image.py" "$VENV" "$TEST_USER" "$W/checks-outside.json" | tee "$W/image.txt"
IMG=$(tail -1 "$W/image.txt" | grep "/gpurun-torch-image\.[^/]*$")
[ -d "$IMG" ] || { bad "the image was not built"; exit 1; }
du -sh --apparent-size "$IMG"
if ! as_user "$G" exec --nv "$IMG" "$PY" -c 'import sys; print(sys.version)'; then
    bad "python in the image"
    as_user "$G" exec --nv --dry-run "$IMG" "$PY" | head -150
    exit 1
fi

say "checks inside"
as_user timeout -k 5 180 "$G" exec --nv "$IMG" "$PY" "$PYF" checks inside >"$W/checks-inside.json"
cat "$W/checks-inside.json"
"$HOSTPY" - "$W/checks-outside.json" "$W/checks-inside.json" >"$W/compare.txt" <<'EOF'
import json, sys
load = lambda p: next((json.loads(l) for l in open(p) if l.startswith("{")), {"checks": {}})
o, i = load(sys.argv[1]), load(sys.argv[2])
for name, r in o["checks"].items():
    got = i["checks"].get(name, {"ok": False, "detail": "no result"})
    state = "ok" if got["ok"] else ("FAIL" if r["ok"] else "fails on both sides")
    print(f"{state:5} {name}: inside {got['detail']} | outside {r['detail']}")
for side, d in (("outside", o), ("inside", i)):
    print(f"{side} CUDA libraries:", " ".join(d.get("cuda_libraries", [])))
EOF
cat "$W/compare.txt"
n=$(grep -c '^FAIL' "$W/compare.txt")
[ "$n" = 0 ] || bad "$n check(s) pass outside but not inside"
[ -s "$W/checks-inside.json" ] || bad "no checks inside"

say "clocks before"
clocks

say "bench: inside, outside, interleaved"
for i in $(seq "$PAIRS"); do
    if { [ "$i" -gt "$MIN_PAIRS" ] && [ "$SECONDS" -gt $((BUDGET_S - 120)) ]; } ||
        [ "$SECONDS" -gt $((BUDGET_S - 60)) ]; then
        echo "stopping after $((i - 1)) pairs: $SECONDS s spent"
        break
    fi
    record bench bench inside "$i"
    record bench bench outside "$i"
done

say "clocks after the bench"
clocks

say "start-up: import torch; torch.cuda.is_available()"
record startup cold inside 0
record startup cold outside 0
for i in $(seq "$STARTUP_PAIRS"); do
    if { [ "$i" -gt "$MIN_PAIRS" ] && [ "$SECONDS" -gt $((BUDGET_S - 60)) ]; } ||
        [ "$SECONDS" -gt $((BUDGET_S + 30)) ]; then
        echo "stopping after $((i - 1)) pairs: $SECONDS s spent"
        break
    fi
    record startup startup inside "$i"
    record startup startup outside "$i"
done

if command -v mksquashfs >/dev/null && [ "$SECONDS" -lt $((BUDGET_S - 150)) ]; then
    say "start-up from a squashfs of the same image"
    t0=$SECONDS
    if timeout 100 mksquashfs "$IMG" "$IMG.sqsh" -comp zstd -Xcompression-level 3 -quiet \
        -no-progress -noappend >/dev/null; then
        chmod 644 "$IMG.sqsh"
        echo "mksquashfs: $((SECONDS - t0)) s, $(du -h "$IMG.sqsh" | cut -f1)"
        record startup cold-sqsh sqsh 0
        for i in $(seq "$MIN_PAIRS"); do
            [ "$SECONDS" -gt $((BUDGET_S - 15)) ] && break
            record startup startup-sqsh sqsh "$i"
            record startup startup-sqsh outside "$i"
        done
    else
        echo "mksquashfs failed or took over 100 s: skipped"
    fi
fi

say "clocks at the end"
clocks

say "summary"
echo "image: directory of hard links to the host's files ($(grep -c '^  /' "$W/image.txt") system libraries besides the venv and the standard library)"
"$HOSTPY" "$PYF" summary "$RUNS_FILE"
echo
cat "$W/compare.txt" | cut -c1-160
echo "$failed failure(s)"
[ "$failed" = 0 ]

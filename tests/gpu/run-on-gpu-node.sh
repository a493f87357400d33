#!/bin/bash
# GPU test for gpurun on a real NVIDIA node. Run as root (it makes /dev/fuse usable and switches to
# an unprivileged user, as a site would); everything gpurun does runs as that user.
#
#   sudo GPURUN=/path/to/gpurun TEST_USER=ubuntu LOG=gpu-node.log bash tests/gpu/run-on-gpu-node.sh
#
# Environment: GPURUN (default: gpurun next to this script, then PATH), TEST_USER (default: ubuntu,
# else nobody), BUSYBOX (a static busybox for the test image; default: next to this script, then
# /bin/busybox), IMAGE (use this image instead of the one built here: a .sqsh or a directory),
# IMAGE_REQUIRE (with IMAGE: an image whose NVIDIA_REQUIRE_CUDA this node does not meet; with a
# directory image one is made here), MKSQUASHFS (turns the images built here into .sqsh files;
# default: mksquashfs on PATH), LOG (default ./gpu-node.log). Needs nvcc (CUDA toolkit) for the CUDA program, nvidia-smi on the host.
# The test image is built here: busybox plus this host's C/C++ runtime (so a program compiled here
# runs in it). Ends with "N passed, N failed"; exit status 0 only when nothing failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
GPURUN=${GPURUN:-$here/gpurun}
[ -x "$GPURUN" ] || GPURUN=$(command -v gpurun || true)
TEST_USER=${TEST_USER:-ubuntu}
id "$TEST_USER" >/dev/null 2>&1 || TEST_USER=nobody
BUSYBOX=${BUSYBOX:-$here/busybox}
[ -x "$BUSYBOX" ] || BUSYBOX=/bin/busybox
LOG=${LOG:-$PWD/gpu-node.log}
W=$(mktemp -d /tmp/gpurun-gpu.XXXXXX)
chmod 755 "$W"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$W"' EXIT  # KEEP=1 keeps the work directory
pass=0 fail=0
exec > >(tee "$LOG") 2>&1

say() { printf '\n== %s\n' "$*"; }
ok() { pass=$((pass + 1)); echo "PASS: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { # check NAME CONDITION-COMMAND...
    local name=$1; shift
    if "$@"; then ok "$name"; else bad "$name"; fi
}
# run a command line as the test user, in $W, with a small clean environment (plus gpurun's site
# settings GPURUN_NV_DRIVER_PATH, GPURUN_NV_DEV, GPURUN_NV_PROC when set) and "$@" assignments
as_user() {
    local keep=""
    for v in GPURUN_NV_DRIVER_PATH GPURUN_NV_DEV GPURUN_NV_PROC; do
        [ -n "${!v:-}" ] && keep="$keep $v=${!v}"
    done
    su "$TEST_USER" -s /bin/bash -c "cd / && env -i HOME=/tmp PATH=/usr/local/bin:/usr/bin:/bin$keep $*"
}
G="$W/gpurun"

say "host"
date -u; uname -r; id "$TEST_USER"
cat /proc/driver/nvidia/version 2>&1 | head -1
nvidia-smi -L
ls -la /dev/nvidia* /dev/nvidia-caps 2>&1
env | grep -E '^(NVIDIA|CUDA)_' || true
[ -n "$GPURUN" ] && [ -x "$GPURUN" ] || { bad "gpurun binary (GPURUN=$GPURUN)"; echo "$pass passed, $fail failed"; exit 1; }
cp "$GPURUN" "$G"; chmod 755 "$G"
chmod 666 /dev/fuse 2>/dev/null || true
mapfile -t UUIDS < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
mapfile -t BUSIDS < <(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader)
NG=${#UUIDS[@]}
echo "GPUs: $NG"

say "CUDA test program (nvcc -cudart static)"
cat > "$W/vecadd.cu" <<'EOF'
#include <cstdio>
#include <cstdlib>
__global__ void add(const float *a, const float *b, float *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
int main() {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) { printf("cudaGetDeviceCount: %s\n", cudaGetErrorString(e)); return 2; }
    printf("devices: %d\n", n);
    for (int d = 0; d < n; d++) {
        cudaDeviceProp p; char bus[32];
        cudaGetDeviceProperties(&p, d);
        cudaDeviceGetPCIBusId(bus, sizeof bus, d);
        printf("device %d: %s %s sm_%d%d\n", d, p.name, bus, p.major, p.minor);
    }
    const int N = 1 << 20;
    size_t sz = N * sizeof(float);
    float *a = (float *)malloc(sz), *b = (float *)malloc(sz), *c = (float *)malloc(sz);
    for (int i = 0; i < N; i++) { a[i] = i; b[i] = 2.0f * i; }
    float *da, *db, *dc;
    if (cudaMalloc(&da, sz) || cudaMalloc(&db, sz) || cudaMalloc(&dc, sz)) { printf("cudaMalloc failed\n"); return 3; }
    cudaMemcpy(da, a, sz, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, sz, cudaMemcpyHostToDevice);
    add<<<(N + 255) / 256, 256>>>(da, db, dc, N);
    e = cudaMemcpy(c, dc, sz, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) { printf("kernel: %s\n", cudaGetErrorString(e)); return 4; }
    for (int i = 0; i < N; i++) if (c[i] != 3.0f * i) { printf("vecadd: FAIL at %d\n", i); return 5; }
    printf("vecadd: OK (%d elements)\n", N);
    return 0;
}
EOF
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if "$NVCC" -cudart static -O2 -o "$W/vecadd" "$W/vecadd.cu"; then
    ok "nvcc built vecadd"; "$W/vecadd" | sed 's/^/host: /'
else
    bad "nvcc built vecadd"
fi

say "test image"
if [ -n "${IMAGE:-}" ]; then
    IMG=$IMAGE
else
    IMG=$W/img
    mkdir -p "$IMG"/{bin,usr/bin,etc,tmp,dev,proc,sys,lib64,lib/x86_64-linux-gnu,.gpurun,w}
    cp "$BUSYBOX" "$IMG/bin/busybox"
    for a in $("$IMG/bin/busybox" --list); do [ "$a" = busybox ] || ln -s busybox "$IMG/bin/$a"; done
    for l in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libstdc++.so.6 libgcc_s.so.1; do
        f=$(readlink -f /lib/x86_64-linux-gnu/$l) && cp "$f" "$IMG/lib/x86_64-linux-gnu/$l"
    done
    ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$IMG/lib64/ld-linux-x86-64.so.2"
    echo 'root:x:0:0:root:/root:/bin/sh' > "$IMG/etc/passwd"; echo 'root:x:0:' > "$IMG/etc/group"
    echo '{"env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","NVIDIA_REQUIRE_CUDA=cuda>=12.0"]}' > "$IMG/.gpurun/meta.json"
    chmod -R a+rX "$IMG"
fi
# the same image with a requirement no driver meets
IMG_NEW=${IMAGE_REQUIRE:-}
if [ -z "$IMG_NEW" ] && [ -d "$IMG" ]; then
    IMG_NEW=$W/img-new
    cp -a "$IMG" "$IMG_NEW"
    mkdir -p "$IMG_NEW/.gpurun"
    echo '{"env":["PATH=/bin:/usr/bin","NVIDIA_REQUIRE_CUDA=cuda>=99.0 brand=tesla,driver>=470,driver<471"]}' > "$IMG_NEW/.gpurun/meta.json"
    # a directory image is the user's own (as one unpacked by the user would be)
    chown -R "$TEST_USER:$(id -gn "$TEST_USER")" "$IMG" "$IMG_NEW"
fi
# Squashfs images, as users run them, when mksquashfs is at hand (MKSQUASHFS, else PATH).
MKSQUASHFS=${MKSQUASHFS:-$(command -v mksquashfs || true)}
if [ -d "$IMG" ] && [ -n "$MKSQUASHFS" ]; then
    for d in "$IMG" "$IMG_NEW"; do
        "$MKSQUASHFS" "$d" "$d.sqsh" -noappend -quiet -no-progress -comp zstd && chmod 644 "$d.sqsh"
    done
    IMG=$IMG.sqsh IMG_NEW=$IMG_NEW.sqsh
fi
echo "image: $IMG ($(du -sh "$IMG" | cut -f1))"

say "gpurun gpus"
as_user "$G" gpus | tee "$W/gpus.txt"
check "gpurun gpus lists GPU 0 with its UUID" grep -q "GPU 0: .*${UUIDS[0]}" "$W/gpus.txt"
as_user "$G" gpus --json > "$W/gpus.json"; head -c 1500 "$W/gpus.json"; echo
check "gpurun gpus --json has the driver version" grep -q '"driver_version": "' "$W/gpus.json"

say "exec --nv nvidia-smi -L (all GPUs)"
t0=$(date +%s%N)
as_user "$G" exec --nv --gpus all "$IMG" nvidia-smi -L | tee "$W/smi.txt"
t1=$(date +%s%N); echo "took $(( (t1 - t0) / 1000000 )) ms"
check "nvidia-smi -L inside shows all $NG GPUs" [ "$(grep -c '^GPU ' "$W/smi.txt")" = "$NG" ]
check "nvidia-smi -L inside shows GPU 0's UUID" grep -q "${UUIDS[0]}" "$W/smi.txt"

say "inside: devices, environment, driver files"
as_user "$G" exec --nv --gpus all "$IMG" sh -c "'ls -la /dev | grep -i nvidia; echo CVD=\$CUDA_VISIBLE_DEVICES; echo LD=\$LD_LIBRARY_PATH; echo PATH=\$PATH; ls /.gpurun/nvidia/lib /.gpurun/nvidia/bin; grep ModifyDeviceFiles /proc/driver/nvidia/params'" | tee "$W/inside.txt"
check "libcuda.so.1 injected" grep -q '^libcuda.so.1$' "$W/inside.txt"
check "libnvidia-ml.so.1 injected" grep -q '^libnvidia-ml.so.1$' "$W/inside.txt"
check "nvidia-smi on PATH" grep -q '^nvidia-smi$' "$W/inside.txt"
check "ModifyDeviceFiles is 0 inside" grep -q 'ModifyDeviceFiles: 0' "$W/inside.txt"
check "nvidiactl inside" grep -q 'nvidiactl' "$W/inside.txt"

say "CUDA program inside"
as_user "$G" exec --nv --gpus all --bind "$W:/w" "$IMG" /w/vecadd | tee "$W/vecadd.txt"
check "vecadd OK inside" grep -q 'vecadd: OK' "$W/vecadd.txt"
check "vecadd sees $NG GPU(s) inside" grep -q "devices: $NG" "$W/vecadd.txt"

say "a terminal inside the GPU-filtered /dev, and --fakeroot beside the GPUs"
# /dev is gpurun's own where GPUs are filtered: the container's devpts must give a pty
cat > "$W/pty.c" <<'EOF'
#define _XOPEN_SOURCE 600
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(void) {
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) || unlockpt(m)) { perror("posix_openpt"); return 2; }
    int s = open(ptsname(m), O_RDWR | O_NOCTTY);
    if (s < 0) { perror(ptsname(m)); return 3; }
    char b[8] = {0};
    if (write(s, "ping\n", 5) != 5 || read(m, b, 4) != 4) { perror("pty io"); return 4; }
    printf("pty: %s %s\n", ptsname(m), b);
    return 0;
}
EOF
if ${CC:-cc} -O2 -o "$W/pty" "$W/pty.c" 2>/dev/null || "$NVCC" -O2 -o "$W/pty" -x c "$W/pty.c"; then
    as_user "$G" exec --nv --gpus all --bind "$W:/w" "$IMG" /w/pty | tee "$W/pty.txt"
    check "a pty opens inside, where /dev is gpurun's own" grep -q '^pty: /dev/pts/[0-9]* ping$' "$W/pty.txt"
else
    bad "a C compiler for the pty test (cc or nvcc)"
fi
as_user "$G" exec --nv --gpus all --fakeroot "$IMG" sh -c "'id -u; grep Seccomp: /proc/self/status; nvidia-smi -L'" | tee "$W/fakeroot.txt"
check "--fakeroot with GPUs: root inside, the fake-ids filter, the GPUs seen" \
    bash -c "grep -qx 0 '$W/fakeroot.txt' && grep -q 'Seccomp:.2' '$W/fakeroot.txt' && [ \$(grep -c '^GPU ' '$W/fakeroot.txt') = $NG ]"
# an IPC namespace's own message queues in gpurun's /dev; a writable root's /etc/localtime is a
# copy a package may rename over (tzdata's postinst), not a mount
as_user "$G" exec --nv --gpus all --ipc --writable-tmpfs --fakeroot "$IMG" sh -c "'grep -c \" /dev/mqueue mqueue \" /proc/self/mounts; echo x > /etc/localtime.new && mv /etc/localtime.new /etc/localtime && echo localtime-replaced; nvidia-smi -L'" | tee "$W/ipc.txt"
check "--ipc --writable-tmpfs --fakeroot with GPUs: own /dev/mqueue, /etc/localtime replaceable, the GPUs seen" \
    bash -c "grep -qx 1 '$W/ipc.txt' && grep -qx localtime-replaced '$W/ipc.txt' && [ \$(grep -c '^GPU ' '$W/ipc.txt') = $NG ]"

say "device filter"
if [ "$NG" -ge 2 ]; then
    as_user CUDA_VISIBLE_DEVICES=1 "$G" exec --nv "$IMG" nvidia-smi -L | tee "$W/f1.txt"
    check "CUDA_VISIBLE_DEVICES=1: exactly one GPU inside" [ "$(grep -c '^GPU ' "$W/f1.txt")" = 1 ]
    check "CUDA_VISIBLE_DEVICES=1: it is GPU 1 (${UUIDS[1]})" grep -q "${UUIDS[1]}" "$W/f1.txt"
    as_user CUDA_VISIBLE_DEVICES=1 "$G" exec --nv --bind "$W:/w" "$IMG" sh -c "'ls /dev | grep -E \"^nvidia[0-9]+\$\"; echo CVD=\$CUDA_VISIBLE_DEVICES; /w/vecadd'" | tee "$W/f2.txt"
    check "CUDA_VISIBLE_DEVICES=1: one device node inside" [ "$(grep -cE '^nvidia[0-9]+$' "$W/f2.txt")" = 1 ]
    check "CUDA_VISIBLE_DEVICES=1: renumbered to 0 inside" grep -q '^CVD=0$' "$W/f2.txt"
    check "CUDA_VISIBLE_DEVICES=1: CUDA sees one device" grep -q 'devices: 1' "$W/f2.txt"
    bus1=$(echo "${BUSIDS[1]}" | sed 's/^0000//' | tr 'A-F' 'a-f')
    check "CUDA_VISIBLE_DEVICES=1: CUDA's device is GPU 1 ($bus1)" grep -qi "$bus1" "$W/f2.txt"
    check "CUDA_VISIBLE_DEVICES=1: vecadd OK" grep -q 'vecadd: OK' "$W/f2.txt"
    as_user CUDA_VISIBLE_DEVICES=1,0 "$G" exec --nv "$IMG" sh -c "'echo CVD=\$CUDA_VISIBLE_DEVICES; nvidia-smi -L'" | tee "$W/f3.txt"
    check "CUDA_VISIBLE_DEVICES=1,0: order kept (1,0)" grep -q '^CVD=1,0$' "$W/f3.txt"
else
    as_user CUDA_VISIBLE_DEVICES=1 "$G" exec --nv "$IMG" true > "$W/f1.txt" 2>&1; rc=$?
    cat "$W/f1.txt"
    check "one GPU: CUDA_VISIBLE_DEVICES=1 is refused (exit 125)" [ "$rc" = 125 ]
    check "one GPU: the error lists the allowed GPU" grep -q 'allowed: 0 (/dev/nvidia' "$W/f1.txt"
fi
last=$((NG - 1))
as_user CUDA_VISIBLE_DEVICES=${UUIDS[$last]} "$G" exec --nv "$IMG" sh -c "'echo CVD=\$CUDA_VISIBLE_DEVICES; nvidia-smi -L'" | tee "$W/u.txt"
check "UUID selection keeps the UUID" grep -q "^CVD=${UUIDS[$last]}\$" "$W/u.txt"
check "UUID selection shows that GPU" [ "$(grep -c "${UUIDS[$last]}" "$W/u.txt")" = 2 ]
as_user "$G" exec --nv --gpus none "$IMG" sh -c "'ls /dev | grep -cE \"^nvidia[0-9]+\$\"; nvidia-smi -L'" > "$W/none.txt" 2>&1; cat "$W/none.txt"
check "--gpus none: no GPU node inside" grep -q '^0$' "$W/none.txt"

say "GPU support off"
as_user "$G" exec --no-nv "$IMG" sh -c "'ls /dev | grep -c nvidia; ls /.gpurun/nvidia 2>&1 | head -1'" | tee "$W/off.txt"
check "--no-nv: no nvidia node inside" grep -q '^0$' "$W/off.txt"
as_user GPURUN_NV=0 "$G" exec "$IMG" sh -c "'ls /dev | grep -c nvidia'" | tee "$W/off2.txt"
check "GPURUN_NV=0: no nvidia node inside" grep -q '^0$' "$W/off2.txt"
as_user "$G" exec "$IMG" sh -c "'ls /dev | grep -c nvidia'" | tee "$W/default.txt"
check "default with a driver: GPU support on" grep -vq '^0$' "$W/default.txt"

say "NVIDIA_REQUIRE_CUDA"
if [ -z "$IMG_NEW" ]; then
    echo "skipped: no image with an unmet requirement (IMAGE_REQUIRE)"
else
as_user "$G" exec --nv "$IMG_NEW" true > "$W/req.txt" 2>&1; rc=$?
cat "$W/req.txt"
check "too-new requirement refused (exit 125)" [ "$rc" = 125 ]
check "the error names the CUDA the image needs" grep -q 'CUDA >= 99.0' "$W/req.txt"
check "the error names what the driver supports" grep -q 'supporting CUDA' "$W/req.txt"
as_user NVIDIA_DISABLE_REQUIRE=1 "$G" exec --nv "$IMG_NEW" true; rc=$?
check "NVIDIA_DISABLE_REQUIRE=1 lets it run" [ "$rc" = 0 ]
fi

say "gpurun ps and doctor on a real GPU"
# A container that holds 1 GiB of GPU memory and keeps GPU 0 busy while ps looks at it.
cat > "$W/hold.cu" <<'EOF'
#include <cstdio>
#include <cstdlib>
#include <ctime>
__global__ void spin(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) for (int k = 0; k < 4000; k++) x[i] = x[i] * 0.999f + 1.0f;
}
int main(int argc, char **argv) {
    int secs = argc > 1 ? atoi(argv[1]) : 10;
    float *d;
    if (cudaMalloc(&d, 1ull << 30) != cudaSuccess) { printf("cudaMalloc failed\n"); return 2; }
    cudaMemset(d, 0, 1ull << 30);
    printf("holding\n"); fflush(stdout);
    for (time_t end = time(0) + secs; time(0) < end;) { spin<<<4096, 256>>>(d, 1 << 20); cudaDeviceSynchronize(); }
    printf("released\n");
    return 0;
}
EOF
if "$NVCC" -cudart static -O2 -o "$W/hold" "$W/hold.cu"; then
    as_user "$G" exec --nv --bind "$W:/w" "$IMG" /w/hold 12 > "$W/hold.txt" 2>&1 &
    hold_pid=$!
    for _ in $(seq 100); do grep -q holding "$W/hold.txt" && break; sleep 0.2; done
    sleep 2
    as_user "$G" ps | tee "$W/ps.txt"
    as_user "$G" ps --json > "$W/ps.json"; cat "$W/ps.json"
    # the container running /w/hold: its entry for GPU 0 (by UUID), memory and utilisation
    read -r mem util < <(python3 -c '
import json, sys
cs = [c for c in json.load(open(sys.argv[1]))["containers"] if c["command"][:1] == ["/w/hold"]]
g = [g for c in cs for g in c["gpus"] if g["uuid"] == sys.argv[2]]
print(g[0]["memory_used_bytes"], g[0]["utilization_percent"]) if g else print(-1, -1)
' "$W/ps.json" "${UUIDS[0]}")
    echo "GPU 0 in ps: memory_used_bytes=$mem utilization_percent=$util"
    check "ps lists the running CUDA container with GPU 0 (UUID from NVML)" [ "${mem:--1}" != -1 ]
    check "ps shows the container's GPU memory (>= the 1 GiB it holds)" [ "${mem:-0}" -ge 1073741824 ]
    check "ps shows GPU 0's utilisation while the kernel runs (> 0 %)" [ "${util:-0}" -gt 0 ]
    # (a bare `wait` would also wait for the log's tee)
    wait "$hold_pid"
    check "the CUDA container ran to the end" grep -q released "$W/hold.txt"
    as_user "$G" ps --json > "$W/ps-after.json"
    check "ps lists no container once it exited" python3 -c '
import json, sys
sys.exit(len(json.load(open(sys.argv[1]))["containers"]) != 0)' "$W/ps-after.json"
else
    bad "nvcc built the GPU memory holder"
fi
as_user "$G" doctor --json > "$W/doctor.json"; cat "$W/doctor.json"
dr=$(python3 -c '
import json, sys
d = {c["name"]: c for c in json.load(open(sys.argv[1]))}
print(d["NVIDIA driver"]["status"], d["NVIDIA driver"]["detail"], "|", d["GPU devices"]["status"], d["GPU devices"]["detail"])
' "$W/doctor.json")
echo "doctor: $dr"
drv=$(head -1 /proc/driver/nvidia/version | grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?' | head -1)
check "doctor: NVIDIA driver ok, version $drv as the host's" grep -q "^ok driver $drv" <<<"$dr"
check "doctor: the GPU devices open (/dev/nvidia0)" grep -q "| ok may open .*/dev/nvidia0" <<<"$dr"

say "--dry-run"
as_user "$G" exec --nv --dry-run "$IMG" true > "$W/dry.json"
grep -E '"(dst|src|key|value)": "[^"]*(nvidia|firmware|gpurun|CUDA|NVIDIA|LD_LIBRARY)' "$W/dry.json" | head -80
check "--dry-run shows /dev/nvidia0 and libcuda" grep -q '/.gpurun/nvidia/lib/libcuda.so.1' "$W/dry.json"

say "files read in listing order (the FUSE server pushes the next ones into the page cache)"
if [ -d "$W/img/lib/x86_64-linux-gnu" ] && [ "${IMG%.sqsh}" != "$IMG" ]; then
    want=$(cd "$W/img/lib/x86_64-linux-gnu" && md5sum * | tee "$W/md5-host.txt" | md5sum)
    got=$(as_user "$G" exec --no-nv "$IMG" sh -c "'cd /lib/x86_64-linux-gnu && md5sum *'" | tee "$W/md5-inside.txt" | md5sum)
    diff "$W/md5-host.txt" "$W/md5-inside.txt"
    check "every library of the image read in order: the bytes of the source ($(wc -l <"$W/md5-inside.txt") files)" [ "$want" = "$got" ]
fi

say "PyTorch DDP example: two ranks as srun starts them (slurm/examples/pytorch-ddp.sbatch)"
# The node's own PyTorch (TORCH_PY, a venv) in a minimal directory image that binds the host's
# Python; the per-task line of the example verbatim, with the variables srun sets for each task.
TORCH_PY=${TORCH_PY:-/opt/torch/.venv/bin/python}
EX=$here/../../slurm/examples
if [ "$NG" -ge 2 ] && [ -x "$TORCH_PY" ] && [ -f "$EX/ddp_check.py" ]; then
    venv=$(dirname "$(dirname "$TORCH_PY")")
    py=$(basename "$(readlink -f "$TORCH_PY")") # python3.12
    P=$W/pyimg
    mkdir -p "$P"/{bin,etc,tmp,dev,proc,sys,home,usr/bin,usr/lib/"$py",usr/lib/x86_64-linux-gnu,usr/lib64} "$P$venv"
    cp "$BUSYBOX" "$P/bin/busybox"; ln -s busybox "$P/bin/sh"
    ln -s usr/lib "$P/lib"; ln -s usr/lib64 "$P/lib64"
    chown -R "$TEST_USER:$(id -g "$TEST_USER")" "$P" # its user's, as after unsquashfs
    cp "$EX/ddp_check.py" "$W/"
    line=$(grep -m1 'export RANK=' "$EX/pytorch-ddp.sbatch" | sed 's/^ *//')
    printf '%s\nexec python "$1"\n' "$line" >"$W/ddp-task.sh"
    chmod 644 "$W/ddp_check.py" "$W/ddp-task.sh"
    binds="--bind /usr/bin --bind /usr/lib/$py --bind /usr/lib/x86_64-linux-gnu --bind /usr/lib64 --bind $venv --bind $W"
    ddp() { # NAME PORT ENV-PER-RANK... : two ranks, one container each, in parallel
        local name=$1 port=$2 r pids=(); shift 2
        for r in 0 1; do
            as_user SLURM_PROCID=$r SLURM_LOCALID=$r SLURM_NTASKS=2 MASTER_ADDR=127.0.0.1 \
                MASTER_PORT="$port" "${@//RANK/$r}" timeout -k 5 120 "$G" exec --nv $binds \
                --env PATH="$venv/bin:/usr/bin:/bin" "$P" sh "$W/ddp-task.sh" "$W/ddp_check.py" \
                >"$W/ddp-$name-$r.txt" 2>&1 &
            pids+=($!)
        done
        wait "${pids[@]}"
        tail -4 "$W/ddp-$name-0.txt"
    }
    # srun --gpu-bind=none, as the example: the step's GPUs in every container, LOCAL_RANK picks
    ddp all 24251 CUDA_VISIBLE_DEVICES=0,1
    check "DDP over NCCL, both GPUs in each container, rank by LOCAL_RANK: all_reduce right" \
        grep -q "all_reduce sum 1, expected 1: OK" "$W/ddp-all-0.txt"
    # per-task binding (one GPU per container) needs NCCL without peer-to-peer: the peer's
    # device node is not in the container
    ddp one 24252 CUDA_VISIBLE_DEVICES=RANK NCCL_P2P_DISABLE=1
    check "DDP over NCCL, one GPU per container, NCCL_P2P_DISABLE=1: all_reduce right" \
        grep -q "all_reduce sum 1, expected 1: OK" "$W/ddp-one-0.txt"
else
    echo "skipped: needs 2 GPUs and PyTorch at $TORCH_PY"
fi

say "result"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]

#!/usr/bin/env bash
# The counts docs/scale.md models a 64-, 1,000- and 10,000-node job from, measured on the
# simulated cluster of tests/slurm/multinode.sh (3 nodes). Counts, not times: the simulated
# nodes share this machine's cores, its page cache and its disk.
#
#   sudo benches/scale.sh          (root: it rewrites plugstack.conf between jobs and reads the
#                                   registry's log and the nodes' processes; every job runs as
#                                   the test user)
#
# What it prints, and how each count is taken:
#   image      the PyTorch test image of tests/slurm/torch-image.sh (Debian's python3-torch, CPU):
#              its .sqsh size, the bytes and entries it holds (unsquashfs -lls), its layer's size
#              once pushed to the test registry (umoci, skopeo)
#   registry   per job of `srun -N3 --container-image=docker://… python3 -c 'import torch'`, for
#              pull=sbcast, pull=shared and pull=node: the requests gpurun made (the registry's
#              access log, user agent gpurun/…) and the bytes it was sent (that log's size
#              field); the images converted (.sqsh files made in srun's and the nodes' caches);
#              the bytes sbcast wrote on each node (the copy's size)
#   reads      per node, for a Python start (`python3 -c pass`) and a PyTorch start (`import
#              torch`), each on nodes that never ran the image (no cache, no image server):
#              - with the plugin: /proc/PID/io of the node's gpurun processes holding the image
#                (rchar: bytes of their read calls, syscr: their number; both include the FUSE
#                requests the server reads from /dev/fuse, about 100 bytes each), taken while
#                the tasks wait after their start
#              - with `gpurun exec` under `strace -f` on each node, outside Slurm: gpurun's
#                preads (of the image, the only file it preads: count, bytes), its opens of the
#                image, and the file-system calls of the Python process tree (open, stat,
#                readlink, getdents, access; read calls and bytes): what the container asked of
#                the image's file system
# Environment: IMAGE (a .sqsh with python3 and torch to measure instead of the test image),
# GPURUN (default: the plugin's gpurun= in plugstack.conf), GPURUN_TEST_USER
# (default gpuruntest), KEEP=1 keeps the work directory ~USER/gpurun-scale.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MN=$ROOT/tests/slurm/multinode.sh
U=${GPURUN_TEST_USER:-gpuruntest}
[ "$(id -u)" = 0 ] || { echo "run as root (jobs run as $U)" >&2; exit 2; }
env_lines=$(bash "$MN" env) || { echo "no multi-node cluster (tests/slurm/multinode.sh start 3)" >&2; exit 2; }
eval "$env_lines"
PLUG=$(cat "$MN_PLUGSTACK")
GPURUN=${GPURUN:-$(tr ' ' '\n' <<<"$PLUG" | sed -n 's/^gpurun=//p')}
read -ra NODES <<<"$MN_NODES"
UHOME=$(getent passwd "$U" | cut -d: -f6)
W=$UHOME/gpurun-scale
T=(-t 10)
as_user() {
  (cd "$W" && setpriv --reuid="$U" --regid="$(id -g "$U")" --init-groups -- env -i \
    PATH="$(dirname "$GPURUN"):/usr/local/bin:/usr/bin:/bin" HOME="$UHOME" USER="$U" LOGNAME="$U" \
    SHELL=/bin/sh LANG=C.UTF-8 SSL_CERT_FILE="$MN_CA_BUNDLE" "$@")
}
trap 'echo "$PLUG" > "$MN_PLUGSTACK"; [ "${KEEP:-0}" = 1 ] || rm -rf "$W" /var/tmp/gpurun-scale.*' EXIT
rm -rf "$W" /var/tmp/gpurun-scale.*; install -d -o "$U" -g "$(id -g "$U")" "$W"; cd "$W"
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# ------------------------------------------------------------------ the image
if [ -n "${IMAGE:-}" ]; then
  install -o "$U" -m 0644 "$IMAGE" "$W/torch.sqsh"
else
  as_user bash "$ROOT/tests/slurm/torch-image.sh" "$W/torch.sqsh"
fi
IMG=$W/torch.sqsh
read -r files bytes < <(unsquashfs -lls "$IMG" | awk '$1 ~ /^-/ { n++; b += $3 } END { print n, b }')
entries=$(unsquashfs -l "$IMG" | grep -c '^squashfs-root')
echo "image: $(mib "$(stat -c %s "$IMG")") .sqsh (zstd level 3), $(mib "$bytes") in $files files, $entries entries"

REF=$MN_REGISTRY/gpurun/scale:torch
as_user sh -c "unsquashfs -q -d rootfs '$IMG' >/dev/null && umoci init --layout oci && umoci new --image oci:t \
  && umoci unpack --rootless --image oci:t bundle && cp -a rootfs/. bundle/rootfs/ && rm -rf rootfs \
  && umoci repack --image oci:t bundle && rm -rf bundle \
  && skopeo copy -q --dest-cert-dir '$MN_REGISTRY_CA_DIR' oci:oci:t 'docker://$REF'" >push.log 2>&1 \
  || { cat push.log; exit 1; }
layer=$(as_user skopeo inspect --raw --cert-dir "$MN_REGISTRY_CA_DIR" "docker://$REF" | python3 -c \
  'import json,sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))')
echo "registry: the image is one layer of $(mib "$layer") (gzip)"

# ------------------------------------------------------------------ registry traffic per job
# gpurun's requests since log line $1: "N requests (P /v2/, M manifest, B blob), B bytes"
traffic() {
  tail -n +"$(( $1 + 1 ))" "$MN_REGISTRY_LOG" | grep '"gpurun/' | grep -o '"[A-Z]* [^ ]* HTTP/[0-9.]*" [0-9]* [0-9]*' |
    awk '{ n++; b += $5; if ($2 == "/v2/") p++; else if ($2 ~ /manifests/) m++; else if ($2 ~ /blobs/) bl++ }
         END { printf "%d requests (%d /v2/, %d manifest, %d blob), %d bytes", n, p, m, bl, b }'
}
images_made() {  # .sqsh files in srun's cache ($1), the shared cache and the nodes' caches
  local n t; t=$(ls "$1"/images/*.sqsh "$W"/shared-cache/images/*.sqsh 2>/dev/null | wc -l)
  for n in "${NODES[@]}"; do
    t=$((t + $(bash "$MN" exec "$n" sh -c 'ls /var/tmp/gpurun-scale.*/images/*.sqsh 2>/dev/null | wc -l')))
  done
  echo "$t"
}
for mode in sbcast shared node; do
  case $mode in
    sbcast) echo "$PLUG" > "$MN_PLUGSTACK" ;;
    shared) echo "$PLUG pull=shared pull_cache=%h/gpurun-scale/shared-cache" > "$MN_PLUGSTACK" ;;
    node) echo "$PLUG pull=node" > "$MN_PLUGSTACK" ;;
  esac
  c=/var/tmp/gpurun-scale.$mode; mark=$(wc -l <"$MN_REGISTRY_LOG")
  as_user env GPURUN_CACHEDIR="$c" srun "${T[@]}" -N3 --container-image="docker://$REF" \
    sh -c 'python3 -c "import torch"; echo "$(hostname) $(stat -c %s "$GPURUN_CONTAINER")"' >reg-$mode.out 2>reg-$mode.err \
    || { cat reg-$mode.err; exit 1; }
  made=$(images_made "$c")
  sent=""; [ $mode = sbcast ] && sent=", sbcast wrote $(mib "$(awk '{ print $2; exit }' reg-$mode.out)") on each node"
  echo "registry, pull=$mode, 3 nodes: $(traffic "$mark"); $made image(s) converted$sent"
  rm -rf "$c" "$W/shared-cache"
  for n in "${NODES[@]}"; do bash "$MN" exec "$n" sh -c 'rm -rf /var/tmp/gpurun-scale.*'; done
done
echo "$PLUG" > "$MN_PLUGSTACK"

# ------------------------------------------------------------------ reads per node
# Every start on a cold node: no cache of the user's there (it keeps decompressed blocks between
# the image servers of one image), no server of the image left (gpurun stop).
cold() {
  local n
  for n in "${NODES[@]}"; do
    bash "$MN" exec "$n" setpriv --reuid="$U" --regid="$(id -g "$U")" --init-groups -- \
      env -i PATH=/usr/bin:/bin HOME="$UHOME" "$GPURUN" -q stop >/dev/null 2>&1 || true
    bash "$MN" exec "$n" sh -c "rm -rf /var/tmp/gpurun-$(id -u "$U") /var/tmp/gpurun-scale.*"
  done
  sleep 1
}
# With the plugin: the image server's /proc/PID/io on each node while the tasks wait.
server_io() {  # NODE: "rchar syscr", summed over the user's processes there that hold $IMG open
  local p uid; uid=$(id -u "$U")
  for p in $(ip netns pids "gpmn${1#n}"); do
    [ "$(stat -c %u "/proc/$p" 2>/dev/null)" = "$uid" ] || continue
    ls -l "/proc/$p/fd" 2>/dev/null | grep -qF -- "$IMG" || continue
    awk '/^rchar|^syscr/ { print $2 }' "/proc/$p/io" | tr '\n' ' '; echo
  done | awk '{ r += $1; s += $2 } END { print r + 0, s + 0 }'
}
for start in "pass" "import torch"; do
  rm -f "$W"/done.* "$W/go"; cold
  as_user env GPURUN_CACHEDIR=/var/tmp/gpurun-scale.reads srun "${T[@]}" -N3 --container-image="$IMG" sh -c \
    "python3 -c '$start'; touch $W/done.\$SLURMD_NODENAME; while [ ! -e $W/go ]; do sleep 0.1; done" \
    >reads.out 2>reads.err &
  job=$!
  for _ in $(seq 600); do [ "$(ls "$W"/done.* 2>/dev/null | wc -l)" = 3 ] && break; sleep 0.2; done
  for n in "${NODES[@]}"; do
    read -r rchar syscr < <(server_io "$n")
    echo "plugin, python3 -c '$start', $n: image server read $(mib "${rchar:-0}") in ${syscr:-0} read calls (/proc/PID/io)"
  done
  touch "$W/go"; wait "$job" || { cat reads.err; exit 1; }
done

# With `gpurun exec` under strace -f on each node, outside Slurm (a job's image server would be
# its keeper's child, out of strace's sight); the node's server quits 1 s after its container.
for start in "pass" "import torch"; do
  rm -rf "$W/strace"; mkdir -p "$W/strace"; chown "$U" "$W/strace"; cold
  for n in "${NODES[@]}"; do
    bash "$MN" exec "$n" setpriv --reuid="$U" --regid="$(id -g "$U")" --init-groups -- env -i \
      PATH="$(dirname "$GPURUN"):/usr/bin:/bin" HOME="$UHOME" GPURUN_SERVER_IDLE=1s \
      GPURUN_CACHEDIR=/var/tmp/gpurun-scale.strace sh -c "cd $W && exec strace -f -qq -o $W/strace/$n \
        -e trace=%file,%desc,getdents64 gpurun exec $IMG python3 -c '$start'" >strace.out 2>strace.err \
      || { cat strace.err; exit 1; }
  done
  for n in "${NODES[@]}"; do
    python3 - "$W/strace/$n" "$IMG" "$n" "$start" <<'PY'
import re, sys
trace, image, node, start = sys.argv[1:]
# a call other threads interrupted is split in two lines ("<unfinished ...>", "<... resumed>")
lines, pending = [], {}
for l in open(trace, errors="replace").read().splitlines():
    m = re.match(r"(\d+) +(.*) <unfinished \.\.\.>$", l)
    if m:
        pending[m.group(1)] = m.group(2)
        continue
    m = re.match(r"(\d+) +<\.\.\. \w+ resumed>(.*)$", l)
    if m:
        l = f"{m.group(1)} {pending.pop(m.group(1), '')}{m.group(2)}"
    lines.append(l)
# the Python process tree: the pid that execve()d python3 and every task it cloned
children, py = {}, set()
for l in lines:
    m = re.match(r"(\d+) +(clone3?|fork|vfork)\(.*= (\d+)$", l)
    if m:
        children.setdefault(m.group(1), []).append(m.group(3))
    m = re.match(r'(\d+) +execve\("[^"]*python3[^"]*"', l)
    if m and not py:
        py.add(m.group(1))
todo = list(py)
while todo:
    for c in children.get(todo.pop(), []):
        if c not in py:
            py.add(c); todo.append(c)
meta = re.compile(r"(openat2?|open|stat|lstat|newfstatat|statx|access|faccessat2?|readlinkat|readlink|getdents64)\(")
pread_n, pread_b, opens = 0, 0, 0
ops, reads, read_b = {}, 0, 0
for l in lines:
    m = re.match(r"(\d+) +(\w+)\((.*)\) += (-?\d+)", l)
    if not m:
        continue
    pid, call, args, ret = m.group(1), m.group(2), m.group(3), int(m.group(4))
    if pid in py:
        mm = meta.match(call + "(")
        if mm:
            ops[mm.group(1)] = ops.get(mm.group(1), 0) + 1
        elif call in ("read", "pread64") and ret >= 0:
            reads += 1; read_b += ret
        continue
    # gpurun preads nothing but the image (its server reads it through a descriptor it was given)
    if call in ("openat", "open") and image in args and ret >= 0:
        opens += 1
    elif call == "pread64" and ret >= 0:
        pread_n += 1; pread_b += ret
total = sum(ops.values())
detail = ", ".join(f"{k} {v}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1]))
print(f"exec+strace, python3 -c '{start}', {node}: gpurun opened the image {opens}x, "
      f"{pread_n} preads of it, {pread_b / 1048576:.1f} MiB; the Python tree made {total} "
      f"file-system calls ({detail}) and {reads} reads of {read_b / 1048576:.1f} MiB")
PY
  done
done
cold

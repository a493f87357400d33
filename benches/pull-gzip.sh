#!/bin/bash
# `gpurun pull` of an image whose one large layer is gzip, two builds side by side (OLD, NEW),
# interleaved rounds (A B, then B A…), from a docker-registry on loopback, each pull into an empty
# cache. Prints every run, then each build's median wall and CPU time, the range, and NEW/OLD.
#
#   sudo OLD=/path/gpurun-main NEW=target/release/gpurun benches/pull-gzip.sh [ROUNDS] [DIRS...]
#   SOURCE=oci …: from the OCI layout itself (`pull oci:`: the same inflate and flatten), where
#   no docker-registry or skopeo is installed, as on the GPU machine.
#
# The layer: a tar of DIRS (default /usr/lib/x86_64-linux-gnu: ~1.2 GB, binaries, text and
# compressed data), `gzip -6` as docker's and most registries' layers are (one member).
set -euo pipefail
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH

ROUNDS=${1:-5}
shift || true
DIRS=("${@:-/usr/lib/x86_64-linux-gnu}")
HERE=$(cd "$(dirname "$0")/.." && pwd)
OLD=${OLD:?set OLD to the gpurun binary to compare with}
NEW=${NEW:-$HERE/target/release/gpurun}
BENCH_USER=${BENCH_USER:-gpuruntest}
[ "$(id -u)" = 0 ] || { echo "run as root (setup only; pulls run as $BENCH_USER)" >&2; exit 1; }

W=$(mktemp -d /var/tmp/gpurun-gzipbench.XXXXXX)
chmod 755 "$W"
REG_PID=''
cleanup() {
    [ -z "$REG_PID" ] || kill "$REG_PID" 2> /dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT

# The bench user's own copies: the runs must not depend on paths it cannot read.
install -m 755 "$OLD" "$W/gpurun-old"
install -m 755 "$NEW" "$W/gpurun-new"
install -d -o "$BENCH_USER" -m 755 "$W/run"

echo "# $(date -u '+%F %T UTC')  $(uname -r)  $(nproc) CPUs  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "# uptime before: $(uptime)"
echo "# old: $OLD  new: $NEW ($(git -C "$HERE" rev-parse --short HEAD 2> /dev/null || echo '?'))"

SOURCE=${SOURCE:-registry}
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n  secret: bench-only\n' \
    "$W/storage" "$PORT" > "$W/registry.yml"
REG=127.0.0.1:$PORT
if [ "$SOURCE" = registry ]; then
    docker-registry serve "$W/registry.yml" > "$W/registry.log" 2>&1 &
    REG_PID=$!
    for _ in $(seq 100); do curl -s -o /dev/null "http://$REG/v2/" && break; sleep 0.1; done
fi

# One gzip layer in an OCI layout, pushed as is (skopeo keeps the blob).
L=$W/layout
mkdir -p "$L/blobs/sha256"
tar -C / -cf "$W/layer" "${DIRS[@]#/}" 2> /dev/null || true
TAR_MB=$(stat -c %s "$W/layer" | awk '{printf "%.1f", $1/1e6}')
gzip -6 "$W/layer"
python3 - "$L" "$W/layer.gz" <<'PY'
import hashlib, json, os, sys
layout, layer = sys.argv[1], sys.argv[2]
def put(path_or_bytes):
    if isinstance(path_or_bytes, bytes):
        data = path_or_bytes
        d = hashlib.sha256(data).hexdigest()
        open(f"{layout}/blobs/sha256/{d}", "wb").write(data)
        return f"sha256:{d}", len(data)
    h = hashlib.sha256()
    with open(path_or_bytes, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    d = h.hexdigest()
    os.rename(path_or_bytes, f"{layout}/blobs/sha256/{d}")
    return f"sha256:{d}", os.path.getsize(f"{layout}/blobs/sha256/{d}")
ld, ls = put(layer)
cfg = {"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/sh"]},
       "rootfs": {"type": "layers", "diff_ids": [ld]}}
cd, cs = put(json.dumps(cfg).encode())
m = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
     "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
     "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": ld, "size": ls}]}
md, ms = put(json.dumps(m).encode())
open(f"{layout}/oci-layout", "w").write('{"imageLayoutVersion":"1.0.0"}')
open(f"{layout}/index.json", "w").write(json.dumps({"schemaVersion": 2, "manifests": [
    {"mediaType": m["mediaType"], "digest": md, "size": ms,
     "annotations": {"org.opencontainers.image.ref.name": "t"}}]}))
print(f"# image bench/gzip: 1 layer, {ls / 1e6:.1f} MB gzip -6", file=sys.stderr)
PY
echo "# layer tar: $TAR_MB MB of ${DIRS[*]}"
if [ "$SOURCE" = registry ]; then
    skopeo --insecure-policy copy --quiet --dest-tls-verify=false "oci:$L:t" "docker://$REG/bench/gzip:latest"
    rm -rf "$L"
    IMAGE=docker://$REG/bench/gzip:latest
else
    chmod -R a+rX "$L"
    IMAGE=oci:$L:t
fi

# pull BUILD: one pull into an empty cache, as the bench user; prints wall and CPU seconds.
pull() {
    local run=$W/run/$1
    rm -rf "$run"
    runuser -u "$BENCH_USER" -- mkdir -p "$run"
    # bash's time: wall, and the CPU of the pull and every process it waited for
    local TIMEFORMAT='%R %U %S'
    { time (cd / && runuser -u "$BENCH_USER" -- env -i PATH="$PATH" HOME="$run" \
        GPURUN_CACHEDIR="$run/cache" "$W/gpurun-$1" pull -q "$IMAGE" -o "$run/out.sqsh" \
        2> "$run.err"); } 2> "$run.time" || cat "$run.err" >&2
    awk '{printf "%.2f %.2f\n", $1, $2 + $3}' "$run.time"
    rm -rf "$run"
}

echo "# round build wall_s cpu_s"
for r in $(seq "$ROUNDS"); do
    order="old new"
    [ $((r % 2)) = 0 ] && order="new old"
    for b in $order; do
        echo "$r $b $(pull "$b")" | tee -a "$W/results"
    done
done
echo "# uptime after: $(uptime)"

# Medians, ranges (min-max) and NEW/OLD, per column.
awk -v rounds="$ROUNDS" '
    function median(a, n,   i, j, t) {
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { n[$2]++; w[$2, n[$2]] = $3; c[$2, n[$2]] = $4; rw[$1, $2] = $3 }
    END {
        for (b in n) {
            for (i = 1; i <= n[b]; i++) { ww[i] = w[b, i]; cc[i] = c[b, i] }
            mw[b] = median(ww, n[b]); lo[b] = ww[1]; hi[b] = ww[n[b]]
            mc[b] = median(cc, n[b]); clo[b] = cc[1]; chi[b] = cc[n[b]]
        }
        printf "# median of %d: old wall %.2f s (%.2f-%.2f), cpu %.2f s (%.2f-%.2f)\n", rounds, mw["old"], lo["old"], hi["old"], mc["old"], clo["old"], chi["old"]
        printf "# median of %d: new wall %.2f s (%.2f-%.2f), cpu %.2f s (%.2f-%.2f)\n", rounds, mw["new"], lo["new"], hi["new"], mc["new"], clo["new"], chi["new"]
        for (i = 1; i <= rounds; i++) q[i] = rw[i, "new"] / rw[i, "old"]
        median(q, rounds)
        printf "# new/old: wall %.2fx (per round %.2f-%.2f), cpu %.2fx\n", mw["new"] / mw["old"], q[1], q[rounds], mc["new"] / mc["old"]
    }' "$W/results"

#!/bin/bash
# Side-by-side: registry image -> one squashfs file.
#
#   benches/pull.sh [REPS] [medium|large|all]        (default: 3 all)
#   TOOLS="gpurun gpurun15" benches/pull.sh 1 medium   (a subset of the tools)
#
# Builds two test images from this machine's files (no network), pushes them to a local
# docker-registry, then runs, interleaved per repetition, each with an empty cache:
#   gpurun   gpurun pull docker://…  -o out.sqsh                 (zstd level 3, its default)
#   gpurun15 the same with GPURUN_ZSTD_LEVEL=15 (mksquashfs's zstd level: same compression work)
#   umoci    skopeo copy docker://… oci:… ; umoci unpack --rootless ; mksquashfs -comp zstd
#   ch       ch-image pull ; ch-convert -o squash         (when ch-image works; https registry)
# and reports wall / CPU seconds, peak temporary disk (sampled every 0.2 s) and ratios to gpurun.
#
#   medium  3 layers, about 130 MB uncompressed (python3.11, python3, perl libraries)
#   large   3 layers, about 800 MB uncompressed (+ /usr/lib/x86_64-linux-gnu)
#
# Seen here (2026-11-29; 2 vCPUs shared with other builds, load average 11-17, so wall times are
# noisy; CPU = user+sys of the whole pipeline; peak = cache/temp + output; best of 1-3):
#   image   tool       wall s   cpu s   peak MB   image MB
#   medium  gpurun        1.4     1.0       66        34
#   medium  gpurun15     25.0    13.2       63        29
#   medium  umoci        69.9    20.3      190        29
#   medium  ch           91.7    23.4      318        33
#   large   gpurun       10.4     6.0      518       257
#   large   gpurun15    138.0    81.3      483       221
#   large   umoci       423.6   114.4     1252       221
#   large   ch          452.7   120.7     2049       250
# At equal compression (gpurun15 vs umoci) gpurun needs 0.65-0.7x the CPU and 0.33-0.4x the disk.
#
# Needs: docker-registry, skopeo, umoci, squashfs-tools, squashfs-tools-ng, openssl, curl;
# charliecloud (+ python3-lark) optional. Build gpurun first: cargo build --release.
set -euo pipefail
# Debian python for ch-image (a pyenv python3 first in PATH lacks its modules).
export PATH=/usr/bin:/bin:$PATH
export USER=${USER:-$(id -un)}

REPS=${1:-3}
WHICH=${2:-all}
HERE=$(cd "$(dirname "$0")/.." && pwd)
GPURUN=${GPURUN:-$HERE/target/release/gpurun}
[ -x "$GPURUN" ] || GPURUN=$HERE/target/debug/gpurun
W=$(mktemp -d /var/tmp/gpurun-bench.XXXXXX)
trap 'kill $REG_PID $TLS_PID 2>/dev/null || true; rm -rf "$W"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

registry() { # name port [tls]
    local d=$W/reg-$1 port=$2
    mkdir -p "$d"
    {
        printf 'version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n'
        printf 'storage:\n  filesystem:\n    rootdirectory: %s\n' "$W/storage"
        printf 'http:\n  addr: 127.0.0.1:%s\n  secret: bench-only\n' "$port"
        if [ "${3:-}" = tls ]; then
            printf '  tls:\n    certificate: %s\n    key: %s\n' "$W/cert.pem" "$W/key.pem"
        fi
    } > "$d/config.yml"
    docker-registry serve "$d/config.yml" > "$d/log" 2>&1 &
    echo $!
}

PORT=$(free_port)
REG_PID=$(registry plain "$PORT")
REG=127.0.0.1:$PORT
TLS_PID=
if ch-image --version > /dev/null 2>&1; then
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$W/key.pem" -out "$W/cert.pem" -days 1 \
        -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2> /dev/null
    TPORT=$(free_port)
    TLS_PID=$(registry tls "$TPORT" tls)
fi
for _ in $(seq 100); do curl -s -o /dev/null "http://$REG/v2/" && break; sleep 0.1; done

# image NAME DIR... : one layer per DIR (umoci repack), pushed as bench/NAME:latest
image() {
    local name=$1; shift
    local L=$W/build/$name
    umoci init --layout "$L" > /dev/null
    umoci new --image "$L:t" > /dev/null
    for dir in "$@"; do
        rm -rf "$W/build/bundle"
        umoci unpack --rootless --image "$L:t" "$W/build/bundle" > /dev/null
        mkdir -p "$W/build/bundle/rootfs$(dirname "$dir")"
        cp -a "$dir" "$W/build/bundle/rootfs$dir"
        umoci repack --image "$L:t" "$W/build/bundle" > /dev/null
    done
    umoci config --image "$L:t" --config.cmd /bin/sh > /dev/null
    rm -rf "$W/build/bundle"
    skopeo --insecure-policy copy --quiet --dest-tls-verify=false "oci:$L:t" "docker://$REG/bench/$name:latest"
    echo "image bench/$name: $(du -sm "$L/blobs" | cut -f1) MB of blobs" >&2
}

mkdir -p "$W/build"
IMAGES=()
if [ "$WHICH" = medium ] || [ "$WHICH" = all ]; then
    image medium /usr/lib/python3.11 /usr/lib/python3 /usr/share/perl
    IMAGES+=(medium)
fi
if [ "$WHICH" = large ] || [ "$WHICH" = all ]; then
    image large /usr/lib/python3.11 /usr/lib/x86_64-linux-gnu /usr/share/perl
    IMAGES+=(large)
fi
rm -rf "$W/build"

# run TOOL IMAGE: prints "wall cpu peak_mb"
run() {
    local tool=$1 img=$2 t=$W/run
    rm -rf "$t"; mkdir -p "$t"
    local cmd
    case $tool in
        gpurun) cmd="GPURUN_CACHE=$t/cache $GPURUN pull -q docker://$REG/bench/$img:latest -o $t/out.sqsh" ;;
        gpurun15) cmd="GPURUN_ZSTD_LEVEL=15 GPURUN_CACHE=$t/cache $GPURUN pull -q docker://$REG/bench/$img:latest -o $t/out.sqsh" ;;
        umoci) cmd="skopeo --insecure-policy copy --quiet --src-tls-verify=false docker://$REG/bench/$img:latest oci:$t/oci:t \
                 && umoci unpack --rootless --image $t/oci:t $t/bundle > /dev/null \
                 && mksquashfs $t/bundle/rootfs $t/out.sqsh -comp zstd -noappend -quiet -no-progress" ;;
        ch) cmd="REQUESTS_CA_BUNDLE=$W/cert.pem CH_IMAGE_STORAGE=$t/ch ch-image --tls-no-verify pull 127.0.0.1:$TPORT/bench/$img:latest bench-$img \
                 && CH_IMAGE_STORAGE=$t/ch ch-convert --tmp $t -i ch-image -o squash bench-$img $t/out.sqsh" ;;
    esac
    local peak=0 pid
    ( while :; do du -sm "$t" 2> /dev/null | cut -f1; sleep 0.2; done ) > "$t.du" &
    pid=$!
    /usr/bin/time -f '%e %U %S' -o "$t.time" bash -c "$cmd" > /dev/null 2> "$t.err" || { kill $pid; echo "FAILED: $(tail -1 "$t.err")"; return; }
    kill $pid 2> /dev/null; wait $pid 2> /dev/null || true
    peak=$(sort -n "$t.du" | tail -1)
    read -r wall u s < "$t.time"
    echo "$wall $(echo "$u + $s" | bc) ${peak:-0} $(du -m "$t/out.sqsh" | cut -f1)"
}

if [ -n "${TOOLS:-}" ]; then
    read -r -a TOOLS <<< "$TOOLS"
else
    TOOLS=(gpurun gpurun15 umoci)
    [ -n "$TLS_PID" ] && TOOLS+=(ch)
fi
echo "# rep image tool wall_s cpu_s peak_tmp_MB out_MB"
for img in "${IMAGES[@]}"; do
    for rep in $(seq "$REPS"); do
        for tool in "${TOOLS[@]}"; do
            echo "$rep $img $tool $(run "$tool" "$img")"
        done
    done
done | tee "$W/results"
echo
echo "# best of $REPS (wall s / cpu s / peak tmp MB / image MB); ratios = tool / gpurun"
for img in "${IMAGES[@]}"; do
    read -r gw gc gp <<< "$(awk -v i="$img" '$2==i && $3=="gpurun" && $4+0>0 {print $4, $5, $6}' "$W/results" | sort -n | head -1)"
    for tool in "${TOOLS[@]}"; do
        awk -v i="$img" -v t="$tool" -v gw="${gw:-0}" -v gc="${gc:-0}" -v gp="${gp:-0}" '$2==i && $3==t && $4+0>0 {
            if (!n || $4 < w) {w=$4; c=$5; p=$6; o=$7}; n++ }
            END { if (!n) { printf "%-7s %-9s failed\n", i, t; exit }
                  printf "%-7s %-9s wall %6.1f  cpu %6.1f  peak %5d MB  image %4d MB", i, t, w, c, p, o
                  if (gw > 0) printf "  ratios: wall %.1f  cpu %.1f  peak %.1f", w/gw, c/gc, p/gp
                  printf "\n" }' "$W/results"
    done
done

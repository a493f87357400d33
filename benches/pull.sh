#!/bin/bash
# Side-by-side: registry image -> one squashfs file (and podman pull as the no-squashfs reference).
#
#   benches/pull.sh [REPS] [medium|large|all]        (default: 1 all)
#   TOOLS="gpurun podman" benches/pull.sh 1 medium   (a subset of the tools)
#   SUMMARY_FROM=benches/results/latest/pull.log benches/pull.sh   (a kept log's summary again)
#
# Builds two test images from this machine's own files (no network), pushes them to a local
# docker-registry on loopback, then runs, interleaved per repetition, each with an empty cache:
#   gpurun   gpurun pull docker://…  -o out.sqsh                 (zstd level 3, its default)
#   gpurun15 the same with GPURUN_ZSTD_LEVEL=15 (mksquashfs's zstd level: same compression work)
#   umoci    skopeo copy docker://… oci:… ; umoci unpack --rootless ; mksquashfs -comp zstd   (a)
#   ch       ch-image pull ; ch-convert -o squash   (when ch-image works; https registry)      (b)
#   podman   podman pull --tls-verify=false into a fresh --root/--runroot, overlay driver. No
#            squashfs: the issue's "below podman's" reference. Runs as whoever runs this script
#            (root here: rootless podman would need /etc/subuid ranges for the user, which root
#            has none of). overlay, podman's default, because vfs copies every layer below each
#            new one (disk and time grow with the layer count) and nobody pulls with it by choice.
#
# Images (layers are tar archives of whole directories with their parent directories, added with
# `umoci raw add-layer`, gzip as umoci writes it; large reuses medium's three layers verbatim, so
# the two share them, as images built FROM one base do):
#   medium  3 layers, ~80 MB gzip, ~210 MB unpacked: /usr/lib/python3.11 | /usr/lib/python3 |
#           /usr/lib/postgresql + /usr/lib/git-core + /usr/share/vim
#   large   5 layers, ~600 MB gzip, ~1.6 GB unpacked: medium's 3 + /usr/lib/x86_64-linux-gnu
#           (shared libraries) | /usr/lib/jvm (a JDK: mostly jar and jmod files, already compressed)
#
# Timing: wall and CPU (user+sys of the whole pipeline, children included) from /usr/bin/time.
# Disk: every run works in an empty ext4 file system of its own (a loop-mounted sparse file under
# the work directory), with HOME, TMPDIR, the cache/storage directories and the output all in it,
# so nothing a tool writes escapes the count. Its used blocks (statfs: total - free, which counts
# ext4's delayed allocations) are sampled every 0.1 s, less the empty file system's own. Counted:
# downloaded blobs and partial downloads, caches and tool storage (gpurun's cache, skopeo's OCI
# layout, umoci's bundle, ch-image's storage, podman's --root, --runroot and temp), temporary files
# and the output .sqsh while it grows; file-system metadata (inodes, directories) included.
#   peak      the highest sample (or the final usage, if higher)
#   extra     peak - the final .sqsh (for podman, which writes none, the peak itself): the
#             issue's "peak extra disk", compared to the image's compressed layer bytes (xL)
# Sizes are MB = 10^6 bytes. Best of REPS by wall time.
# After the runs: gpurun pulls medium, then large into the same cache, then large again, and
# counts the blob bytes the registry served each time (its access log): large should fetch only
# its 2 own layers (and its config), the second large pull nothing.
#
# Targets (the issue): gpurun wall <= 1/3 of the fastest squashfs-producing peer (umoci, ch);
# gpurun wall < podman's; gpurun's peak extra <= 1.1x the compressed layers; a second pull of an
# image sharing layers downloads nothing (of those layers).
#
# The latest results and what they mean: benches/README.md (raw output in results/latest/).
#
# Needs: root (loop mount), docker-registry, skopeo, umoci, squashfs-tools, podman, e2fsprogs,
# openssl, curl, bc; charliecloud (+ python3-lark) optional. Build gpurun first: cargo build --release.
set -euo pipefail
# Debian python for ch-image (a pyenv python3 first in PATH lacks its modules).
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH
export USER=${USER:-$(id -un)}

REPS=${1:-1}
WHICH=${2:-all}
HERE=$(cd "$(dirname "$0")/.." && pwd)
GPURUN=${GPURUN:-$HERE/target/release/gpurun}
[ -x "$GPURUN" ] || GPURUN=$HERE/target/debug/gpurun
# summary: the table and the targets from $W/results ("rep image tool wall cpu peak final out") and
# $W/clayers-IMAGE (compressed layer bytes), for IMAGES and TOOLS
summary() {
    echo "# best of $REPS by wall. MB = 1e6 B. extra = peak - .sqsh; xL = extra / compressed layers; ratios = tool / gpurun"
    printf '%-7s %-9s %8s %7s %8s %8s %7s %5s %10s %9s\n' image tool wall_s cpu_s peak_MB extra_MB sqsh_MB xL wall/gpurun cpu/gpurun
    for img in "${IMAGES[@]}"; do
        L=$(cat "$W/clayers-$img")
        awk -v i="$img" -v L="$L" -v order="${TOOLS[*]}" '
            $2 == i && $4+0 > 0 { t = $3; if (!(t in w) || $4 < w[t]) { w[t] = $4; c[t] = $5; p[t] = $6; o[t] = $8 } }
            $2 == i && $4 == "FAILED:" { failed[$3] = 1 }
            END {
                nt = split(order, tools, " ")
                for (k = 1; k <= nt; k++) {
                    t = tools[k]
                    if (!(t in w)) { printf "%-7s %-9s failed\n", i, t; continue }
                    x = p[t] - o[t]
                    printf "%-7s %-9s %8.1f %7.1f %8.0f %8.0f %7.0f %5.2f", i, t, w[t], c[t], p[t]/1e6, x/1e6, o[t]/1e6, x/L
                    if ("gpurun" in w) printf " %10.1f %9.1f", w[t]/w["gpurun"], c[t]/c["gpurun"]
                    printf "\n"
                }
                if (!("gpurun" in w)) exit
                best = 0
                if ("umoci" in w) { best = w["umoci"]; bn = "umoci" }
                if ("ch" in w && (!best || w["ch"] < best)) { best = w["ch"]; bn = "ch" }
                printf "%-7s targets (compressed layers %.1f MB):", i, L/1e6
                if (best) printf " gpurun <= 1/3 of fastest squashfs peer (%s %.1f s): %.1f s = 1/%.1f %s;", bn, best, w["gpurun"], best/w["gpurun"], (w["gpurun"] <= best/3 ? "MET" : "NOT MET")
                if ("podman" in w) printf " gpurun < podman (%.1f s): %.1f s %s;", w["podman"], w["gpurun"], (w["gpurun"] < w["podman"] ? "MET" : "NOT MET")
                x = p["gpurun"] - o["gpurun"]
                printf " peak extra <= 1.1x layers: %.2fx %s\n", x/L, (x <= 1.1*L ? "MET" : "NOT MET")
            }' "$W/results"
    done
}

# SUMMARY_FROM=LOG benches/pull.sh : print the summary of an earlier run's log again, run nothing
if [ -n "${SUMMARY_FROM:-}" ]; then
    W=$(mktemp -d)
    trap 'rm -rf "$W"' EXIT
    grep -E '^[0-9]+ [a-z]+ [a-z0-9]+ ' "$SUMMARY_FROM" > "$W/results"
    mapfile -t IMAGES < <(awk '{print $2}' "$W/results" | awk '!s[$0]++')
    mapfile -t TOOLS < <(awk '{print $3}' "$W/results" | awk '!s[$0]++')
    for img in "${IMAGES[@]}"; do
        sed -n "s|^# image bench/$img: .* \([0-9.]*\) MB compressed.*|\1|p" "$SUMMARY_FROM" | awk '{printf "%.0f\n", $1 * 1e6}' > "$W/clayers-$img"
    done
    REPS=$(awk '{print $1}' "$W/results" | sort -n | tail -1)
    summary
    exit 0
fi

W=$(mktemp -d /var/tmp/gpurun-pullbench.XXXXXX)
M=$W/m
REG_PID='' TLS_PID=''
# shellcheck disable=SC2317  # called by the trap
cleanup() {
    for p in $REG_PID $TLS_PID; do kill "$p" 2> /dev/null || true; done
    if mountpoint -q "$M"; then umount "$M" || umount -l "$M"; fi
    rm -rf "$W"
}
trap cleanup EXIT

echo "# $(date -u '+%F %T UTC')  $(uname -r)  $(nproc) CPUs  gpurun: $("$GPURUN" --version 2>&1 | head -1)"
echo "# uptime before: $(uptime)"
echo "# $(skopeo --version); umoci $(umoci --version | awk '{print $NF}'); $(mksquashfs -version 2>&1 | head -1)"
echo "# $(podman --version); ch-image $(ch-image --version 2>&1 || echo unavailable)"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

registry() { # name port [tls]
    local d=$W/reg-$1 port=$2
    mkdir -p "$d"
    {
        printf 'version: 0.1\nlog:\n  level: error\n'
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
if ch-image --version > /dev/null 2>&1; then
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$W/key.pem" -out "$W/cert.pem" -days 1 \
        -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2> /dev/null
    TPORT=$(free_port)
    TLS_PID=$(registry tls "$TPORT" tls)
fi
for _ in $(seq 100); do curl -s -o /dev/null "http://$REG/v2/" && break; sleep 0.1; done

# layer_tar OUT DIR... : one uncompressed layer holding DIRs and their parent directories
layer_tar() {
    local out=$1 d p; shift
    local parents=() dirs=()
    for d in "$@"; do
        dirs+=("${d#/}")
        p=$(dirname "${d#/}")
        while [ "$p" != . ]; do parents+=("$p"); p=$(dirname "$p"); done
    done
    mapfile -t parents < <(printf '%s\n' "${parents[@]}" | sort -u)
    tar -C / --no-recursion -cf "$out" "${parents[@]}"
    tar -C / -rf "$out" "${dirs[@]}"
}

# image NAME LAYER.tar... : pushed as bench/NAME:latest; writes $W/clayers-NAME (gzip bytes)
image() {
    local name=$1 l; shift
    local L=$W/build/$name
    umoci init --layout "$L" > /dev/null
    umoci new --image "$L:t" > /dev/null
    for l in "$@"; do umoci raw add-layer --image "$L:t" "$l" > /dev/null; done
    umoci config --image "$L:t" --config.cmd /bin/sh > /dev/null
    skopeo --insecure-policy copy --quiet --dest-tls-verify=false "oci:$L:t" "docker://$REG/bench/$name:latest"
    curl -s -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REG/v2/bench/$name/manifests/latest" |
        python3 -c 'import json,sys; print(sum(l["size"] for l in json.load(sys.stdin)["layers"]))' > "$W/clayers-$name"
    echo "# image bench/$name: $# layers, $(awk '{printf "%.1f", $1/1e6}' "$W/clayers-$name") MB compressed, $(cat "$@" | wc -c | awk '{printf "%.1f", $1/1e6}') MB of layer tars" >&2
}

mkdir -p "$W/build" "$M"
T=$W/build
IMAGES=()
layer_tar "$T/1.tar" /usr/lib/python3.11
layer_tar "$T/2.tar" /usr/lib/python3
layer_tar "$T/3.tar" /usr/lib/postgresql /usr/lib/git-core /usr/share/vim
if [ "$WHICH" = medium ] || [ "$WHICH" = all ]; then
    image medium "$T/1.tar" "$T/2.tar" "$T/3.tar"
    IMAGES+=(medium)
fi
if [ "$WHICH" = large ] || [ "$WHICH" = all ]; then
    layer_tar "$T/4.tar" /usr/lib/x86_64-linux-gnu
    layer_tar "$T/5.tar" /usr/lib/jvm
    image large "$T/1.tar" "$T/2.tar" "$T/3.tar" "$T/4.tar" "$T/5.tar"
    IMAGES+=(large)
fi
rm -rf "$W/build"

# The measuring file system: sparse, no lazy inode-table init (no background writes during runs).
truncate -s 24G "$W/fs.img"
mkfs.ext4 -q -F -i 65536 -E lazy_itable_init=0,lazy_journal_init=0 "$W/fs.img"
mount -o loop "$W/fs.img" "$M"
used() { stat -f -c '%b %f %S' "$M" | awk '{printf "%.0f\n", ($1 - $2) * $3}'; }

# run TOOL IMAGE: prints "wall cpu peak_B final_B out_B" (or FAILED: …)
run() {
    local tool=$1 img=$2 t=$M/run
    rm -rf "$t"; sync -f "$M"
    mkdir -p "$t/tmp" "$t/home"
    local base; base=$(used)
    # HOME is empty, so git (ch-image's build cache) gets its identity from the environment
    local env=(HOME="$t/home" TMPDIR="$t/tmp" GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@localhost
               GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@localhost) cmd
    case $tool in
        gpurun) cmd="GPURUN_CACHEDIR=$t/cache $GPURUN pull -q docker://$REG/bench/$img:latest -o $t/out.sqsh" ;;
        gpurun15) cmd="GPURUN_ZSTD_LEVEL=15 GPURUN_CACHEDIR=$t/cache $GPURUN pull -q docker://$REG/bench/$img:latest -o $t/out.sqsh" ;;
        umoci) cmd="skopeo --insecure-policy copy --quiet --src-tls-verify=false docker://$REG/bench/$img:latest oci:$t/oci:t \
                 && umoci unpack --rootless --image $t/oci:t $t/bundle > /dev/null \
                 && mksquashfs $t/bundle/rootfs $t/out.sqsh -comp zstd -noappend -quiet -no-progress" ;;
        ch) cmd="REQUESTS_CA_BUNDLE=$W/cert.pem CH_IMAGE_STORAGE=$t/ch ch-image --tls-no-verify pull 127.0.0.1:$TPORT/bench/$img:latest bench-$img \
                 && CH_IMAGE_STORAGE=$t/ch ch-convert --tmp $t/tmp -i ch-image -o squash bench-$img $t/out.sqsh" ;;
        podman) cmd="podman --root $t/podman-root --runroot $t/podman-run --tmpdir $t/podman-tmp --storage-driver=overlay \
                 --cgroup-manager=cgroupfs --events-backend=file pull -q --tls-verify=false docker://$REG/bench/$img:latest" ;;
    esac
    local pid
    ( while :; do used; sleep 0.1; done ) > "$W/du" &
    pid=$!
    if ! env "${env[@]}" /usr/bin/time -f '%e %U %S' -o "$W/time" bash -c "$cmd" > /dev/null 2> "$W/err"; then
        kill $pid; wait $pid 2> /dev/null || true
        echo "FAILED: $(grep -v '^Command exited' "$W/err" | tail -1)"
        return
    fi
    kill $pid; wait $pid 2> /dev/null || true
    sync -f "$M"
    local final; final=$(used)
    local peak; peak=$( { cat "$W/du"; echo "$final"; } | sort -n | tail -1)
    local out=0
    [ -f "$t/out.sqsh" ] && out=$(stat -c %s "$t/out.sqsh")
    read -r wall u s < "$W/time"
    echo "$wall $(echo "$u + $s" | bc) $((peak - base)) $((final - base)) $out"
}

if [ -n "${TOOLS:-}" ]; then
    read -r -a TOOLS <<< "$TOOLS"
else
    TOOLS=(gpurun gpurun15 umoci podman)
    [ -n "$TLS_PID" ] && TOOLS+=(ch)
fi
echo "# rep image tool wall_s cpu_s peak_B final_B out_B"
: > "$W/results"
for img in "${IMAGES[@]}"; do
    for rep in $(seq "$REPS"); do
        # rotate the order each rep, so slow drifts in load do not always hit the same tool
        n=${#TOOLS[@]}
        for i in $(seq 0 $((n - 1))); do
            tool=${TOOLS[$(((i + rep - 1) % n))]}
            echo "$rep $img $tool $(run "$tool" "$img")" | tee -a "$W/results"
        done
    done
done
rm -rf "$M/run"

# Layer sharing: gpurun's cache after medium, then large, then large again (registry access log).
SHARE=
if [ ${#IMAGES[@]} = 2 ]; then
    blobs() { # count and MB of the blob GETs in the access log's lines $1+1 .. $2
        sed -n "$(($1 + 1)),$2p" "$W/reg-plain/log" | { grep -E '"GET /v2/bench/[a-z]+/blobs/sha256:' || true; } |
            awk '{ n++; b += $10 } END { printf "%d blobs, %.1f MB", n, b/1e6 }'
    }
    lines() { wc -l < "$W/reg-plain/log"; }
    c=$M/share
    mkdir -p "$c"
    l0=$(lines)
    GPURUN_CACHEDIR=$c/cache "$GPURUN" pull -q "docker://$REG/bench/medium:latest" -o "$c/m.sqsh"
    l1=$(lines)
    GPURUN_CACHEDIR=$c/cache "$GPURUN" pull -q "docker://$REG/bench/large:latest" -o "$c/l.sqsh"
    l2=$(lines)
    GPURUN_CACHEDIR=$c/cache "$GPURUN" pull -q "docker://$REG/bench/large:latest" -o "$c/l2.sqsh"
    l3=$(lines)
    own=$(awk -v a="$(cat "$W/clayers-large")" -v b="$(cat "$W/clayers-medium")" 'BEGIN { printf "%.1f", (a - b) / 1e6 }')
    SHARE="gpurun, one cache: medium fetched $(blobs "$l0" "$l1"); then large $(blobs "$l1" "$l2") (its 2 own layers: $own MB, + config); then large again $(blobs "$l2" "$l3")"
    rm -rf "$c"
fi

echo
echo "# uptime after: $(uptime)"
echo
summary
[ -n "$SHARE" ] && echo "# layer sharing: $SHARE"
exit 0

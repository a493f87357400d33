#!/usr/bin/env bash
# The first-start bench's peers and builds for the GPU machine (Ubuntu 24.04: no network, no
# package registry, none of the peers), in one folder the device tool carries:
#
#   sudo NEW=target/release/gpurun benches/device-bundle.sh [DEST]     # DEST [.fsbench], here
#   then there, from the repository root (DEST named in the call's carry):
#   bash DEST/device-run.sh                  # REPS [1], TOOLS, CMDS…: see benches/first-start.sh
#
# DEST/peers.tar.xz: this machine's docker-registry, skopeo, umoci, mksquashfs, ch-run, tar2sqfs
# (gpurun's pull), pigz (the image's layers), podman with conmon, runc, newuidmap and newgidmap,
# Debian's seccomp profile and policy.json, and every library they load but glibc's; each tool
# in bin/ as a wrapper that finds its libraries in lib/ (ch-run through the dynamic loader, so
# that no LD_LIBRARY_PATH reaches its container); the builds OLD and NEW as gpurun-old and
# gpurun-new; first-start.sh and lib.sh as they are in this tree. DEST/device-run.sh unpacks it
# and runs first-start.sh with IMAGE=venv. DEST must be ignored by git (.gitignore has /.fsbench/).
#
# Environment [default]: NEW [target/release/gpurun], OLD [.bench/gpurun-old], PREV [none: a
# third build, the bench's tool prev]. Debian 12 only:
# pigz is fetched with apt-get download if not installed.
set -euo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
HERE=$(cd "$(dirname "$0")" && pwd)
DEST=${1:-.fsbench}
NEW=${NEW:-target/release/gpurun}
OLD=${OLD:-.bench/gpurun-old}
[ -x "$NEW" ] && [ -x "$OLD" ] || { echo "no gpurun at NEW=$NEW or OLD=$OLD" >&2; exit 1; }
git check-ignore -q "$DEST" 2>/dev/null || echo "warning: $DEST is not ignored by git: add /$DEST/ to .git/info/exclude" >&2

S=$(mktemp -d /var/tmp/fsbench-bundle.XXXXXX)
trap 'rm -rf "$S"' EXIT
B=$S/fsbench
mkdir -p "$B/bin" "$B/libexec" "$B/lib" "$B/share" "$B/setuid" "$B/benches"

PIGZ=$(command -v pigz || true)
if [ -z "$PIGZ" ]; then
    (cd "$S" && apt-get download pigz >/dev/null 2>&1) || { echo "apt-get download pigz failed" >&2; exit 1; }
    dpkg -x "$S"/pigz_*.deb "$S/pigz"
    PIGZ=$S/pigz/usr/bin/pigz
fi
libs() { # the libraries FILE loads, glibc's left out (the GPU machine's glibc is newer)
    ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
        grep -Ev '/(libc|libm|libpthread|libdl|librt|libresolv|ld-linux-x86-64)\.so' || true
}
add() { # add PATH [loader]: PATH in libexec/, its libraries in lib/, a wrapper in bin/
    local f=$1 n
    n=$(basename "$f")
    cp -L "$f" "$B/libexec/$n"
    for l in $(libs "$f"); do cp -Ln "$l" "$B/lib/"; done
    if [ "${2:-}" = loader ]; then
        printf '#!/bin/sh\nD=$(dirname "$(readlink -f "$0")")/..\nexec /lib64/ld-linux-x86-64.so.2 --library-path "$D/lib" "$D/libexec/%s" "$@"\n' "$n" >"$B/bin/$n"
    else
        printf '#!/bin/sh\nD=$(dirname "$(readlink -f "$0")")/..\nLD_LIBRARY_PATH=$D/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$D/libexec/%s" "$@"\n' "$n" >"$B/bin/$n"
    fi
    chmod 755 "$B/bin/$n"
}
for t in docker-registry skopeo umoci mksquashfs tar2sqfs podman conmon runc; do add "$(command -v $t)"; done
add "$PIGZ"
add "$(command -v ch-run)" loader
# newuidmap and newgidmap are setuid, so no wrapper: device-run.sh installs them, and only the
# libraries the machine lacks, where the loader looks.
for t in newuidmap newgidmap; do
    cp -L "$(command -v $t)" "$B/setuid/"
    for l in $(libs "$(command -v $t)"); do cp -Ln "$l" "$B/setuid/"; done
done
cp /usr/share/containers/seccomp.json /etc/containers/policy.json "$B/share/"
install -m 755 "$NEW" "$B/gpurun-new"
install -m 755 "$OLD" "$B/gpurun-old"
[ -z "${PREV:-}" ] || install -m 755 "$PREV" "$B/gpurun-prev"
cp "$HERE/first-start.sh" "$HERE/first-start-timeline.sh" "$HERE/lib.sh" "$B/benches/"
chmod -R a+rX "$B"

mkdir -p "$DEST"
tar -C "$S" -cf - fsbench | xz -6 -T2 >"$DEST/peers.tar.xz.tmp"
mv "$DEST/peers.tar.xz.tmp" "$DEST/peers.tar.xz"
cat >"$DEST/device-run.sh" <<'SH'
#!/bin/bash
# On the GPU machine, as root, from the repository root: unpack peers.tar.xz beside this file,
# make podman's id mapping work for BENCH_USER, run first-start.sh (IMAGE=venv); results in $OUT
# when set (the device tool brings them back), else benches/results/latest. Settings as
# first-start.sh's; NEW=/path overrides the bundle's gpurun-new.
set -euo pipefail
D=$(cd "$(dirname "$0")" && pwd)
P=/var/tmp/fsbench
rm -rf "$P" && mkdir -p "$P" && tar -C "$(dirname "$P")" -xJf "$D/peers.tar.xz"
chmod 755 "$P"
export BENCH_USER=${BENCH_USER:-ubuntu}
if ! command -v newuidmap >/dev/null; then
    for f in "$P"/setuid/*.so*; do
        [ -e "/usr/lib/x86_64-linux-gnu/$(basename "$f")" ] || cp -n "$f" /usr/local/lib/
    done
    ldconfig
    install -m 4755 "$P/setuid/newuidmap" "$P/setuid/newgidmap" /usr/local/bin/
fi
for f in /etc/subuid /etc/subgid; do
    grep -q "^$BENCH_USER:" "$f" 2>/dev/null || echo "$BENCH_USER:200000:65536" >>"$f"
done
S=benches/first-start.sh
[ -f "$S" ] || S=$P/benches/first-start.sh
[ ! -x "$P/gpurun-prev" ] || export PREV=${PREV:-$P/gpurun-prev}
NEW=${NEW:-$P/gpurun-new} OLD=${OLD:-$P/gpurun-old} BUNDLE=$P IMAGE=venv \
    RESULTS=${RESULTS:-${OUT:-benches/results/latest}} REPS=${REPS:-1} bash "$S"
R=$(ls -d /var/tmp/gpurun-bench/first-start/results-* | tail -1)
[ -z "${OUT:-}" ] || cp "$R/first-start.tsv" "$R/stderr.log" "$OUT/" 2>/dev/null || true
SH
chmod 755 "$DEST/device-run.sh"
echo "$DEST: $(du -sh "$DEST" | cut -f1) ($(ls "$DEST" | tr '\n' ' '))"

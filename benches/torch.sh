#!/usr/bin/env bash
# A real framework image: PyTorch with its CUDA libraries, from PyPI wheels, on the medium Debian
# base; pushed to a docker-registry on loopback; pulled with gpurun against skopeo + umoci +
# mksquashfs and rootless podman; then `import torch` cold and warm against the same peers as
# imports.sh (it runs imports.sh with IMAGE=torch).
#
#   sudo benches/torch.sh                       # pull, then import
#   sudo SUITE=pull PULL_REPS=2 benches/torch.sh
#
# Made once and kept in $BENCH_DIR/torch, so that later runs download nothing:
#   wheels/     `pip download torch==$TORCH_VERSION` and its dependencies (nvidia-* CUDA
#               libraries, triton, sympy…), for this machine's platform and PIP's Python (3.11,
#               Debian bookworm's)
#   registry/   docker-registry storage with bench/torch:latest, 3 layers: the Debian base
#               (imports.sh's image), the nvidia-* and cuda-* packages, torch and the rest, all
#               in /usr/local/lib/python3.11/dist-packages (on Debian's python3 path)
#   torch.sqsh  gpurun's pull of it: the file all import peers run on
# Pull: PULL_REPS reps of the tools, order rotated each rep, one tool at a time as $BENCH_USER
# in an empty work directory that is deleted (with its cache, unpacked tree and output) before
# the next tool starts; each tool starts with nothing of the image and the page cache dropped
# (the registry's blobs are read from disk, as from a registry's). Wall and CPU (user + sys,
# children included) from /usr/bin/time.
#   gpurun   gpurun pull docker://… -o out.sqsh (zstd level 3, its default)
#   umoci    skopeo copy docker://… oci:… ; umoci unpack --rootless ; mksquashfs -comp zstd (its
#            level 15 unless UMOCI_ZSTD_LEVEL is set: 3 is gpurun's, the same compression work)
#   podman   podman pull, rootless (the user's /etc/subuid range, overlay storage in the work
#            directory); no squashfs: the no-conversion reference
#
# Environment [default]: SUITE [pull,import], PULL_REPS [1], PULL_TOOLS [gpurun umoci podman],
# UMOCI_ZSTD_LEVEL [mksquashfs's default], TORCH_VERSION [2.15.0], PIP [pip]; for the import
# part REPS, TOOLS, KEEP_EXTRACTED (see imports.sh); BENCH_DIR, BENCH_USER, GPURUN, OUT. Writes OUT/torch-pull.{tsv,log,md} and
# OUT/imports-torch.*. Keep it out of CI: several GB and tens of minutes.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SUITE=${SUITE:-pull,import}
PULL_REPS=${PULL_REPS:-1}
read -r -a PULL_TOOLS <<<"${PULL_TOOLS:-gpurun umoci podman}"
TORCH_VERSION=${TORCH_VERSION:-2.15.0}
PIP=${PIP:-pip}
MKSQ_LEVEL=${UMOCI_ZSTD_LEVEL:+-Xcompression-level $UMOCI_ZSTD_LEVEL}
bench_setup docker-registry skopeo umoci mksquashfs unsquashfs podman debootstrap curl
T=$BENCH_DIR/torch
SITE=usr/local/lib/python3.11/dist-packages
mkdir -p "$T"
REG_PID=
W=$RUN/pull
cleanup() {
    [ -z "$REG_PID" ] || kill "$REG_PID" 2>/dev/null || true
    rm -rf "$W" "$T/build"
}
trap cleanup EXIT

registry() { start_registry "$1" "$T"; } # sets REG and REG_PID

# --- the image, made once ----------------------------------------------------------------
if [ ! -d "$T/wheels" ]; then
    "$PIP" --version | grep -q 'python 3\.11' || die "PIP=$PIP is not Python 3.11's pip (the image's python3 is 3.11)"
    echo "== pip download torch==$TORCH_VERSION (once)"
    rm -rf "$T/wheels.tmp"
    "$PIP" download -q --only-binary=:all: -d "$T/wheels.tmp" "torch==$TORCH_VERSION"
    mv "$T/wheels.tmp" "$T/wheels"
fi
if [ ! -d "$T/registry" ]; then
    pydeb_image
    B=$T/build
    rm -rf "$B" "$T/registry.tmp" "$T/torch.sqsh"
    echo "== pip install --target (once)"
    "$PIP" install -q --no-index --find-links "$T/wheels" --target "$B/root/$SITE" "torch==$TORCH_VERSION"
    echo "== layers (once)"
    tar -C "$PYDEB/rootfs" --numeric-owner -cf "$B/1.tar" .
    parents=(usr usr/local usr/local/lib usr/local/lib/python3.11 "$SITE")
    (cd "$B/root" && tar --owner=0 --group=0 --numeric-owner -cf "$B/2.tar" --no-recursion "${parents[@]}" &&
        tar --owner=0 --group=0 --numeric-owner -rf "$B/2.tar" "$SITE"/nvidia* "$SITE"/cuda*)
    (cd "$B/root" && tar --owner=0 --group=0 --numeric-owner -cf "$B/3.tar" --no-recursion "${parents[@]}" &&
        find "$SITE" -mindepth 1 -maxdepth 1 ! -name 'nvidia*' ! -name 'cuda*' -print0 |
        tar --owner=0 --group=0 --numeric-owner -rf "$B/3.tar" --null -T -)
    umoci init --layout "$B/oci" >/dev/null
    umoci new --image "$B/oci:t" >/dev/null
    for l in 1 2 3; do umoci raw add-layer --image "$B/oci:t" "$B/$l.tar" >/dev/null; rm "$B/$l.tar"; done
    umoci config --image "$B/oci:t" --config.cmd python3 >/dev/null
    echo "== push to the registry (once)"
    registry "$T/registry.tmp"
    skopeo --insecure-policy copy --quiet --dest-tls-verify=false "oci:$B/oci:t" "docker://$REG/bench/torch:latest"
    kill "$REG_PID"; wait "$REG_PID" 2>/dev/null || true
    mv "$T/registry.tmp" "$T/registry"
    rm -rf "$B"
fi
registry "$T/registry"
REF=docker://$REG/bench/torch:latest
{
    env_header
    curl -s -H 'Accept: application/vnd.oci.image.manifest.v1+json' "http://$REG/v2/bench/torch/manifests/latest" |
        python3 -c 'import json,sys; l=[x["size"] for x in json.load(sys.stdin)["layers"]]; print(f"image: bench/torch:latest, torch '"$TORCH_VERSION"', {len(l)} layers, {sum(l)/1e9:.2f} GB gzip")'
    echo "cached: wheels $(du -sh "$T/wheels" | cut -f1), registry $(du -sh "$T/registry" | cut -f1); disk free: $(df -h --output=avail "$T" | tail -1 | tr -d ' ')"
    echo "$(skopeo --version); umoci $(umoci --version | awk '{print $NF}'); $(mksquashfs -version 2>&1 | head -1); $(podman --version)"
} | tee "$OUT/torch-pull.log"

# --- pull, one tool at a time ------------------------------------------------------------
pull_cmd() { # the shell command of a tool's pull, run in $W as the user
    case $1 in
    gpurun) echo "GPURUN_CACHEDIR=$W/cache $GPURUN pull -q $REF -o $W/out.sqsh" ;;
    umoci) echo "skopeo --insecure-policy copy --quiet --src-tls-verify=false $REF oci:$W/oci:t &&
              umoci unpack --rootless --image $W/oci:t $W/bundle >/dev/null &&
              mksquashfs $W/bundle/rootfs $W/out.sqsh -comp zstd $MKSQ_LEVEL -noappend -quiet -no-progress" ;;
    podman) echo "podman --root $W/root --runroot $W/runroot --tmpdir $W/tmp --storage-driver overlay \
              --cgroup-manager cgroupfs --events-backend file pull -q --tls-verify=false $REF" ;;
    *) die "unknown pull tool $1" ;;
    esac
}
# podman keeps a pause process (its user namespace) alive after the pull: end it by its pid file.
end_pause() { local f; for f in "$W"/xdg/libpod/tmp/pause.pid "$W"/tmp/pause.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done; true; }
pull_once() { # pull_once REP TOOL
    local rep=$1 t=$2 wall u s size entries rc=0
    rm -rf "$W"; install -d -o "$BENCH_USER" -m 700 "$W" "$W/tmp" "$W/xdg"
    drop_caches
    as_user /usr/bin/time -f '%e %U %S' -o "$W/time" env TMPDIR="$W/tmp" XDG_RUNTIME_DIR="$W/xdg" \
        bash -c "$(pull_cmd "$t")" >"$RUN/pull.err" 2>&1 || rc=$?
    end_pause
    read -r wall u s < <(tail -1 "$W/time")
    if [ "$t" = podman ]; then
        size=$(du -sb "$W/root" | cut -f1) entries=$(find "$W/root/overlay" -path '*/diff/*' | wc -l)
    elif [ -f "$W/out.sqsh" ]; then
        size=$(stat -c %s "$W/out.sqsh") entries=$(unsquashfs -l "$W/out.sqsh" | grep -c '^squashfs-root/')
    else
        size=0 entries=0
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$t" "$wall" "$(awk "BEGIN{print $u + $s}")" "$size" "$entries" "$rc" >>"$OUT/torch-pull.tsv"
    echo "rep $rep $t: ${wall} s wall, $(awk "BEGIN{print $u + $s}") s CPU, $((size / 1000000)) MB, $entries entries, rc $rc; disk free $(df -h --output=avail "$T" | tail -1 | tr -d ' ')" | tee -a "$OUT/torch-pull.log"
    [ "$rc" = 0 ] || tail -3 "$RUN/pull.err" | tee -a "$OUT/torch-pull.log"
    if [ "$t" = gpurun ] && [ "$rc" = 0 ] && [ ! -f "$T/torch.sqsh" ]; then
        mv "$W/out.sqsh" "$T/torch.sqsh"
        chown root: "$T/torch.sqsh"; chmod 644 "$T/torch.sqsh"
    fi
    rm -rf "$W"
}
if [[ $SUITE == *pull* ]]; then
    printf 'rep\ttool\twall_s\tcpu_s\tbytes\tentries\trc\n' >"$OUT/torch-pull.tsv"
    n=${#PULL_TOOLS[@]}
    for rep in $(seq "$PULL_REPS"); do
        for k in $(seq 0 $((n - 1))); do pull_once "$rep" "${PULL_TOOLS[$(((k + rep - 1) % n))]}"; done
    done
    python3 - "$OUT/torch-pull.tsv" <<'PY' | tee "$OUT/torch-pull.md"
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])][1:]
by = {}
for rep, t, wall, cpu, size, entries, rc in rows:
    if rc == "0":
        by.setdefault(t, []).append((float(wall), float(cpu), int(size), int(entries)))
print("\n### pull of bench/torch:latest (median of reps; min–max)\n")
print("| tool | reps | wall s | min–max | CPU s | output MB | entries | wall / gpurun |")
print("|---|---|---|---|---|---|---|---|")
g = st.median(x[0] for x in by["gpurun"]) if "gpurun" in by else None
for t in dict.fromkeys(r[1] for r in rows):
    v = by.get(t, [])
    if not v:
        print(f"| {t} | 0 (failed) | – | – | – | – | – | – |"); continue
    w = [x[0] for x in v]
    ratio = f"{st.median(w) / g:.2f}×" if g else "–"
    print(f"| {t} | {len(v)} | {st.median(w):.1f} | {min(w):.1f}–{max(w):.1f} | {st.median(x[1] for x in v):.1f} | "
          f"{st.median(x[2] for x in v) / 1e6:.0f} | {v[0][3]} | {ratio} |")
PY
fi
if [[ $SUITE == *import* ]] && [ ! -f "$T/torch.sqsh" ]; then
    echo "== gpurun pull (not timed: torch.sqsh for the import runs)"
    rm -rf "$W"; install -d -o "$BENCH_USER" -m 700 "$W"
    as_user env GPURUN_CACHEDIR="$W/cache" "$GPURUN" pull -q "$REF" -o "$W/out.sqsh"
    mv "$W/out.sqsh" "$T/torch.sqsh"; chown root: "$T/torch.sqsh"; chmod 644 "$T/torch.sqsh"
    rm -rf "$W"
fi
kill "$REG_PID"; wait "$REG_PID" 2>/dev/null || true
REG_PID=

# --- import torch ------------------------------------------------------------------------
if [[ $SUITE == *import* ]]; then
    IMAGE=torch OUT=$OUT GPURUN=$GPURUN BENCH_DIR=$BENCH_DIR BENCH_USER=$BENCH_USER "$(dirname "$0")/imports.sh"
fi
echo "sizes: $(du -sh "$T"/wheels "$T"/registry "$T"/torch.sqsh 2>/dev/null | awk '{printf "%s %s; ", $2, $1}')disk free $(df -h --output=avail "$T" | tail -1 | tr -d ' ')"

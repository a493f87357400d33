#!/usr/bin/env bash
# Reads through gpurun's image server against the same tree extracted on local disk, with no
# peer tools: for machines that lack them (the GPU node). benches/runtime.sh is the full
# comparison (squashfuse_ll, ch-run); this is its two-tool core, on a tree taken from the host.
#
#   sudo benches/reads.sh              root for setup and page-cache control only; every measured
#                                      command runs as $BENCH_USER
# Environment: GPURUN [target/release/gpurun], BUSYBOX [busybox-static in PATH], MKSQUASHFS
# [mksquashfs], BENCH_USER [gpuruntest], NFILES [4000], REPS [8], SRC [/usr: where the files
# come from], W [/var/tmp/gpurun-reads], BASELINE [none: another gpurun binary to interleave, for
# before/after]. Prints medians and the ratios to the extracted tree.
set -euo pipefail
# shellcheck source=benches/lib.sh
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GPURUN=$(readlink -f "${GPURUN:-$ROOT/target/release/gpurun}")
BASELINE=${BASELINE:+$(readlink -f "$BASELINE")}
TOOLS=(gpurun extracted); [ -z "$BASELINE" ] || TOOLS+=(baseline)
BUSYBOX=$(readlink -f "${BUSYBOX:-$(command -v busybox)}")
MKSQUASHFS=${MKSQUASHFS:-mksquashfs}
BENCH_USER=${BENCH_USER:-gpuruntest}
NFILES=${NFILES:-4000}
REPS=${REPS:-8}
SRC=${SRC:-/usr}
W=${W:-/var/tmp/gpurun-reads}
[ "$(id -u)" = 0 ] || { echo "reads.sh: run as root (setup only)" >&2; exit 2; }
id "$BENCH_USER" >/dev/null || { echo "reads.sh: no user $BENCH_USER" >&2; exit 2; }
"$BUSYBOX" --list | grep -qx xargs || { echo "reads.sh: $BUSYBOX is not a static busybox" >&2; exit 2; }

# The tree: busybox for the shell and tools, and NFILES regular files of 1 B .. 64 KiB from
# $SRC (fixed seed), with their directories. Made once.
rm -rf "$W/tree" "$W/img.sqsh"
mkdir -p "$W/tree/bin" "$W/tree/proc" "$W/tree/dev" "$W/tree/tmp"
cp "$BUSYBOX" "$W/tree/bin/busybox"
for a in sh cat xargs wc tar; do ln -s busybox "$W/tree/bin/$a"; done
python3 - "$SRC" "$W/tree/data" "$NFILES" "$W/list" <<'EOF'
import os, random, shutil, stat, sys
src, dst, n, listf = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
files = []
for d, dirs, names in os.walk(src):
    dirs.sort()
    for f in sorted(names):
        p = os.path.join(d, f)
        try:
            st = os.lstat(p)
        except OSError:
            continue
        # Names xargs would split (busybox xargs has no -d) are left out.
        plain = not any(c.isspace() or c in "'\"\\" for c in p)
        if plain and stat.S_ISREG(st.st_mode) and 0 < st.st_size <= 65536 and st.st_mode & 0o004:
            files.append(p)
pick = random.Random(42).sample(files, min(n, len(files)))
out = []
for p in pick:
    rel = os.path.relpath(p, src)
    os.makedirs(os.path.join(dst, os.path.dirname(rel)), exist_ok=True)
    shutil.copyfile(p, os.path.join(dst, rel))
    out.append("data/" + rel)
random.Random(7).shuffle(out)
open(listf, "w").write("\n".join(out) + "\n")
dirs = {os.path.dirname(r) for r in out}
print(f"{len(out)} files of {len(files)} candidates in {len(dirs)} directories, {sum(os.path.getsize(os.path.join(os.path.dirname(dst), r)) for r in out)} bytes")
EOF
chmod -R a+rX "$W"
"$MKSQUASHFS" "$W/tree" "$W/img.sqsh" -noappend -quiet -no-progress -comp zstd >/dev/null
echo "image: $(du -k "$W/img.sqsh" | cut -f1) KiB zstd; machine: $(nproc) CPUs, $(uname -r)"

as_user() { # setpriv execs in place: no PAM session in the measured time
    setpriv --reuid="$BENCH_USER" --regid="$(id -g "$BENCH_USER")" --init-groups \
        env -i HOME="$(getent passwd "$BENCH_USER" | cut -d: -f6)" PATH=/usr/sbin:/usr/bin:/sbin:/bin sh -c "$1"
}
ms() { local t0; t0=$(date +%s%N); "$@"; echo $((($(date +%s%N) - t0) / 1000000)) >&3; }
RAND='cd / && xargs cat | wc -c'
TAR='tar cf - data | wc -c'
prep() { # tool: the state each run starts from
    case $1 in
    gpurun | baseline) cat "$W/img.sqsh" >/dev/null ;; # the image in the page cache, as after a first run
    extracted) evict_tree "$W/tree" ;;
    esac
}
run() { # tool workload
    local cmd=$RAND
    [ "$2" = tar ] && cmd="cd / && $TAR"
    case $1 in
    gpurun) as_user "$GPURUN exec $W/img.sqsh sh -c '$cmd' <$W/list" ;;
    baseline) as_user "$BASELINE exec $W/img.sqsh sh -c '$cmd' <$W/list" ;;
    extracted) as_user "unshare -Urm chroot $W/tree sh -c '$cmd' <$W/list" ;;
    esac
}
for wl in rand tar; do
    for t in "${TOOLS[@]}"; do run "$t" "$wl" >/dev/null; done # warm-up
    for rep in $(seq "$REPS"); do
        for t in "${TOOLS[@]}"; do
            prep "$t"
            bytes=$( { ms run "$t" "$wl"; } 3>"$W/t" )
            echo "$wl $t $(cat "$W/t") $bytes"
        done
    done
done | tee "$W/results.txt" | python3 -c '
import sys, statistics as st
by = {}
for l in sys.stdin:
    wl, t, ms, b = l.split()
    by.setdefault((wl, t), []).append((int(ms), b))
for wl in ("rand", "tar"):
    e = st.median(x[0] for x in by[(wl, "extracted")])
    want = {x[1] for x in by[(wl, "extracted")]}
    for t in ("gpurun", "baseline"):
        if (wl, t) in by:
            g = st.median(x[0] for x in by[(wl, t)])
            same = {x[1] for x in by[(wl, t)]} == want
            print(f"{wl}: {t} {g:.0f} ms, extracted {e:.0f} ms, {t} / extracted = {g / e:.2f}" + ("" if same else "  (bytes differ!)"))
'

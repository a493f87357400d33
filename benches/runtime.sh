#!/usr/bin/env bash
# gpurun runtime benchmark: start-up and file-heavy reads, side by side with peers.
#
#   sudo benches/runtime.sh            # from the repository root, after `cargo build --release`
#
# Runs as root only for setup (debootstrap, mksquashfs, unsquashfs, page-cache control); every
# measured command runs as the unprivileged $BENCH_USER. Tools are interleaved (A B C A B C ...)
# so that load from other work on the machine hits all of them alike. See benches/README.md.
#
# Environment (defaults in brackets):
#   BENCH_DIR     cache of rootfs, image, extracted tree [/var/tmp/gpurun-bench]
#   BENCH_USER    unprivileged user that runs everything measured [gpuruntest]
#   GPURUN        gpurun binary [target/release/gpurun]
#   REPS          reps per tool for each read workload [7]
#   START_ROUNDS  interleaved hyperfine rounds for start-up [5]
#   START_RUNS    runs per tool in each round [20]
#   NFILES, SEED  random small-file read: file count and seed [4000, 42] (minbase has ~4900 such files)
#   OUT           results directory [$BENCH_DIR/results-<UTC time>]
set -euo pipefail
# shellcheck source=benches/lib.sh
. "$(dirname "$0")/lib.sh"

BENCH_DIR=${BENCH_DIR:-/var/tmp/gpurun-bench}
BENCH_USER=${BENCH_USER:-gpuruntest}
GPURUN_SRC=${GPURUN:-target/release/gpurun}
REPS=${REPS:-7}
START_ROUNDS=${START_ROUNDS:-5}
START_RUNS=${START_RUNS:-20}
NFILES=${NFILES:-4000}
SEED=${SEED:-42}
SUITE=${SUITE:-start,read} # which parts to run
OUT=${OUT:-$BENCH_DIR/results-$(date -u +%Y%m%dT%H%M%SZ)}

[ "$(id -u)" = 0 ] || die "run as root (setup only; measured commands run as $BENCH_USER)"
id "$BENCH_USER" >/dev/null 2>&1 || die "no user $BENCH_USER (useradd -m $BENCH_USER)"
for t in debootstrap mksquashfs unsquashfs hyperfine squashfuse_ll ch-run python3 runuser; do
    command -v "$t" >/dev/null || die "$t not installed"
done
[ -x "$GPURUN_SRC" ] || die "no gpurun binary at $GPURUN_SRC (cargo build --release)"
chmod 666 /dev/fuse

ROOTFS=$BENCH_DIR/rootfs
IMG=$BENCH_DIR/debian.sqsh
EXT=$BENCH_DIR/extracted
LIST=$BENCH_DIR/rand-$NFILES-$SEED.list
BIN=$BENCH_DIR/bin
MNT=$BENCH_DIR/mnt
mkdir -p "$BENCH_DIR" "$BIN" "$MNT" "$OUT"
chmod 755 "$BENCH_DIR" "$BIN" "$MNT"

# --- setup (root) -------------------------------------------------------------------------
if [ ! -d "$ROOTFS" ]; then
    echo "== debootstrap --variant=minbase bookworm (once)"
    rm -rf "$ROOTFS.tmp"
    debootstrap --variant=minbase bookworm "$ROOTFS.tmp" http://deb.debian.org/debian >"$BENCH_DIR/debootstrap.log"
    mv "$ROOTFS.tmp" "$ROOTFS"
fi
if [ ! -f "$IMG" ] || [ "$ROOTFS" -nt "$IMG" ]; then
    echo "== mksquashfs -comp zstd"
    mksquashfs "$ROOTFS" "$IMG.tmp" -comp zstd -noappend -quiet
    mv "$IMG.tmp" "$IMG"
    rm -rf "$EXT"
fi
chmod 644 "$IMG"
if [ ! -d "$EXT" ]; then
    echo "== unsquashfs into $EXT"
    unsquashfs -q -d "$EXT.tmp" "$IMG" >/dev/null
    mv "$EXT.tmp" "$EXT"
fi
if [ ! -f "$LIST" ]; then
    # Regular files of 1 B .. 64 KiB that anyone may read, chosen with a fixed seed. Not /root
    # (0700), not /etc:
    # the launchers put their own passwd, group, hosts... there, and the bytes read would differ.
    python3 - "$EXT" "$NFILES" "$SEED" >"$LIST" <<'EOF'
import os, random, stat, sys
root, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
files = []
for d, _, names in os.walk(root):
    for f in names:
        p = os.path.join(d, f)
        st = os.lstat(p)
        rel = os.path.relpath(p, root)
        if stat.S_ISREG(st.st_mode) and 0 < st.st_size <= 65536 and st.st_mode & 0o004 \
                and "\n" not in p and not rel.startswith(("etc/", "root/")):
            files.append(rel)
files.sort()
rnd = random.Random(seed)
pick = rnd.sample(files, min(n, len(files)))
sys.stderr.write(f"random list: {len(pick)} of {len(files)} candidate files\n")
print("\n".join(pick))
EOF
fi
chmod 644 "$LIST"
install -m 755 "$GPURUN_SRC" "$BIN/gpurun"
GPURUN=$BIN/gpurun
# Timer that runs as the user: microseconds and the command's stdout (a byte count).
cat >"$BIN/timeit" <<'EOF'
#!/bin/bash
s=$(date +%s%N); out=$("$@"); rc=$?; e=$(date +%s%N)
echo "$(( (e - s) / 1000 )) ${out:-0} $rc"
EOF
chmod 755 "$BIN/timeit"

# Page-cache state before each read rep: image file cached, extracted tree's file data evicted.
cache_image() { cat "$IMG" >/dev/null; }
evict_extracted() { evict_tree "$EXT"; }

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "host: $(uname -srm), $(nproc) CPUs, $(free -g | awk '/Mem:/{print $2}') GiB RAM"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "gpurun: $GPURUN_SRC (sha256 $(sha256sum "$GPURUN_SRC" | cut -c1-12)), tree $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(git diff --quiet 2>/dev/null || echo '(dirty)')"
    echo "/dev: $(ls /dev | wc -l) entries$(ls /dev | grep -q '^nvidia' && echo ', has nvidia* nodes: gpurun builds a filtered /dev, one bind per entry')"
    echo "ch-run: $(USER=root ch-run --version 2>&1)"
    echo "squashfuse_ll: $(dpkg-query -W -f '${Version}' squashfuse 2>/dev/null || echo '?')"
    echo "image: $(du -m "$IMG" | cut -f1) MB zstd, $(find "$EXT" -xdev | wc -l) entries, /usr $(du -sm "$EXT/usr" | cut -f1) MB"
    echo "random list: $(wc -l <"$LIST") files, $(tr '\n' '\0' <"$LIST" | (cd "$EXT" && xargs -0 cat) | wc -c) bytes"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/env.txt"

# Sanity: every tool runs and sees the same image.
as_user "$GPURUN" exec "$IMG" true || die "gpurun exec failed"
as_user ch-run "$IMG" -- true || die "ch-run on the .sqsh failed"

# --- start-up: hyperfine -N, rounds with the tool order rotated -----------------------------
if [[ $SUITE == *start* ]]; then
    names=(gpurun ch-run unshare)
    cmds=("$GPURUN exec $IMG true" "ch-run $IMG -- true" "unshare -Urm true")
    for r in $(seq "$START_ROUNDS"); do
        args=()
        for k in 0 1 2; do
            i=$(((k + r) % 3))
            args+=(-n "${names[$i]}" "${cmds[$i]}")
        done
        echo "== start-up round $r/$START_ROUNDS"
        as_user hyperfine -N --style basic --warmup 3 --runs "$START_RUNS" \
            --export-json "/tmp/gpurun-bench-start-$r.json" "${args[@]}" >/dev/null
        mv "/tmp/gpurun-bench-start-$r.json" "$OUT/start-$r.json"
    done
fi

# --- reads: fresh mount per rep, every tool running the image's own tar/xargs/cat ----------
# squashfuse_ll and the extracted tree run in a chroot with the host /dev bound, as the two
# launchers give (xargs wants /dev/null).
TAR='tar cf - -C / usr | wc -c'
RAND='cd / && xargs -d "\n" cat | wc -c'
read_cmd() { # tool workload -> command for the user
    local w=$1 s
    case $2 in tar) s=$TAR ;; rand) s=$RAND ;; esac
    case $w in
    gpurun) echo "$GPURUN exec $IMG sh -c '$s'" ;;
    ch-run) echo "ch-run $IMG -- sh -c '$s'" ;;
    squashfuse_ll) echo "unshare -Urm sh -c 'squashfuse_ll $IMG $MNT || exit 1; mount --rbind /dev $MNT/dev; chroot $MNT sh -c '\\''$s'\\''; r=\$?; umount -l $MNT; exit \$r'" ;;
    extracted) echo "unshare -Urm sh -c 'mount --rbind /dev $EXT/dev; chroot $EXT sh -c '\\''$s'\\'''" ;;
    esac
}
if [[ $SUITE == *read* ]]; then
    tools=(gpurun squashfuse_ll ch-run extracted)
    printf 'workload\ttool\trep\tusec\tbytes\trc\n' >"$OUT/reads.tsv"
    for wl in tar rand; do
        for rep in $(seq "$REPS"); do
            for k in 0 1 2 3; do
                t=${tools[$(((k + rep) % 4))]}
                cache_image
                [ "$t" = extracted ] && evict_extracted
                if [ "$wl" = rand ]; then
                    res=$(as_user "$BIN/timeit" bash -c "$(read_cmd "$t" "$wl")" <"$LIST")
                else
                    res=$(as_user "$BIN/timeit" bash -c "$(read_cmd "$t" "$wl")" </dev/null)
                fi
                read -r us bytes rc <<<"$res"
                printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$wl" "$t" "$rep" "$us" "$bytes" "$rc" >>"$OUT/reads.tsv"
                printf '  %-5s %-14s rep %s: %6.3f s %s bytes rc %s\n' "$wl" "$t" "$rep" "$(awk "BEGIN{print $us/1e6}")" "$bytes" "$rc"
            done
        done
    done
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/env.txt"

# --- summary -----------------------------------------------------------------------------
python3 - "$OUT" "$(wc -l <"$LIST")" <<'EOF' | tee "$OUT/summary.md"
import glob, json, os, statistics as st, sys
out, nfiles = sys.argv[1], int(sys.argv[2])
print(open(os.path.join(out, "env.txt")).read().strip().replace("\n", "  \n"))
times = {}
for f in sorted(glob.glob(os.path.join(out, "start-*.json"))):
    for r in json.load(open(f))["results"]:
        times.setdefault(r["command"], []).extend(r["times"])
if times:
    g = st.median(times["gpurun"])
    print("\n### `exec true` start-up (hyperfine -N, medians of all runs)\n")
    print("| tool | runs | median ms | mean ms | min ms | time / gpurun |")
    print("|---|---|---|---|---|---|")
    for n in ["gpurun", "ch-run", "unshare"]:
        t = times[n]
        print(f"| {n} | {len(t)} | {st.median(t)*1e3:.2f} | {st.mean(t)*1e3:.2f} | {min(t)*1e3:.2f} | {st.median(t)/g:.2f}× |")
    print(f"\ngpurun / ch-run = {g/st.median(times['ch-run']):.2f} (target ≤ 0.5)")
tsv = os.path.join(out, "reads.tsv")
if os.path.exists(tsv):
    rows = [l.rstrip("\n").split("\t") for l in open(tsv)][1:]
    for wl, title in [("tar", "`tar cf - -C / usr | wc -c`"),
                      ("rand", f"{nfiles} random files ≤ 64 KiB, `xargs cat | wc -c`")]:
        by = {}
        for w, t, rep, us, b, rc in rows:
            if w == wl:
                by.setdefault(t, []).append((int(us) / 1e6, int(b), rc))
        if not by:
            continue
        g = st.median(x[0] for x in by["gpurun"])
        print(f"\n### read: {title} (fresh mount each rep, medians)\n")
        print("| tool | reps | median s | min s | MB/s | files/s | bytes | time / gpurun |")
        print("|---|---|---|---|---|---|---|---|")
        for t in ["gpurun", "squashfuse_ll", "ch-run", "extracted"]:
            if t not in by:
                continue
            s = st.median(x[0] for x in by[t])
            b = st.median(x[1] for x in by[t])
            bad = sum(1 for x in by[t] if x[2] != "0")
            files = f"{nfiles/s:.0f}" if wl == "rand" else "–"
            print(f"| {t} | {len(by[t])}{f' ({bad} rc≠0)' if bad else ''} | {s:.3f} | {min(x[0] for x in by[t]):.3f} | {b/s/1e6:.0f} | {files} | {b:.0f} | {s/g:.2f}× |")
EOF
echo "raw results: $OUT"

#!/bin/bash
# Run every fuzz target for SECONDS each (default 120), seeded from what the tests use.
# A dedicated check, not part of every CI run: needs nightly and `cargo install cargo-fuzz`.
# Crashes land in fuzz/artifacts/TARGET/; the script exits non-zero when any target failed.
set -u -o pipefail
secs=${1:-120}
cd "$(dirname "$0")"
seeds=$(mktemp -d)
trap 'rm -rf "$seeds"' EXIT

# Seeds: the shapes the tests feed each parser.
mkdir -p corpus/reference corpus/flatten corpus/sqfs corpus/ldcache corpus/devices corpus/require corpus/lzo
for r in nvcr.io/nvidia/pytorch:24.05-py3 ubuntu 127.0.0.1:5000/a/b:v1 \
    "alpine@sha256:$(printf '%064d' 0)" localhost/x:y; do
    printf '%s' "$r" > "corpus/reference/$(printf '%s' "$r" | sha1sum | cut -c1-16)"
done
i=0
for v in 0 1,0 GPU-1a1b all none void "" 3,-1,0 MIG-5d1b 00000000:18:00.0; do
    printf '%s' "$v" > "corpus/devices/seed$i"; i=$((i + 1))
done
i=0
for v in "cuda>=12.4" "cuda>=14.0 driver>=580" "arch=9.0,brand=tesla" "12.4 12.4.1" "cuda<13 brand!=geforce"; do
    printf '%s' "$v" > "corpus/require/seed$i"; i=$((i + 1))
done
[ -r /etc/ld.so.cache ] && cp /etc/ld.so.cache corpus/ldcache/host
mkdir -p "$seeds/root/d/e"
echo hi > "$seeds/root/d/f"
ln -s ../../etc "$seeds/root/d/up"
ln "$seeds/root/d/f" "$seeds/root/d/h"
echo x > "$seeds/root/d/e/.wh.gone"
touch "$seeds/root/d/e/.wh..wh..opq"
tar -C "$seeds/root" -cf corpus/flatten/plain.tar d
# a one-byte split prefix then the layer (see fuzz_targets/flatten.rs)
printf '\377' | cat - corpus/flatten/plain.tar > corpus/flatten/split.tar
gzip -c corpus/flatten/plain.tar > corpus/flatten/plain.tar.gz
for c in gzip zstd lz4 xz lzo; do
    mksquashfs "$seeds/root" "corpus/sqfs/$c.sqsh" -comp "$c" -noappend -quiet -no-progress \
        >/dev/null 2>&1 || true
done
tar -C "$seeds/root" -cf - d | tar2sqfs -q -f corpus/sqfs/tar2sqfs.sqsh >/dev/null 2>&1 || true

# LZO streams (a limit byte first): literals, a run, a back reference, the end marker
printf '\021\026hello\021\000\000' > corpus/lzo/literals
printf '\021\022x\040\000\005\000\000\021\000\000' > corpus/lzo/run
printf '\021\025abcd\154\000\021\000\000' > corpus/lzo/m2

status=0
for t in reference flatten sqfs ldcache devices require lzo; do
    echo "== $t: ${secs}s"
    # -rss_limit_mb: a bounded reader must stay small; -timeout: one input must not hang.
    if ! cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" \
        -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 2>&1 | tail -n 25; then
        status=1
    fi
done
rm -f /dev/shm/gpurun-fuzz-sqfs.*
exit $status

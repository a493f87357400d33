#!/bin/bash
# Interleaved A/B of the random-read workload of runtime.sh (4,000 files through `xargs cat`)
# for several gpurun builds, plus the extracted tree; prints the median and min of each, in s.
#
#   sudo benches/reads-ab.sh REPS /path/gpurun-a /path/gpurun-b ...
#
# Needs runtime.sh's work files in /var/tmp/gpurun-bench (run it once first).
. "$(dirname "$0")/lib.sh"
REPS=$1; shift
IMG=/var/tmp/gpurun-bench/debian.sqsh; EXT=/var/tmp/gpurun-bench/extracted; LIST=/var/tmp/gpurun-bench/rand-4000-42.list; BIN=/var/tmp/gpurun-bench/bin
RAND='cd / && xargs -d "\n" cat | wc -c'
as_user() { (cd / && runuser -u gpuruntest -- env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin USER=gpuruntest HOME=/home/gpuruntest "$@"); }
tools=("$@" extracted)
n=${#tools[@]}
rm -f /tmp/rab.*
for rep in $(seq $REPS); do
  for k in $(seq 0 $((n-1))); do
    i=$(((k+rep)%n)); t=${tools[$i]}
    cat $IMG >/dev/null
    if [ "$t" = extracted ]; then evict_tree $EXT; c="unshare -Urm sh -c 'mount --rbind /dev $EXT/dev; chroot $EXT sh -c '\\''$RAND'\\'''"
    else c="$t exec $IMG sh -c '$RAND'"; fi
    res=$(as_user $BIN/timeit bash -c "$c" <$LIST)
    echo "$res" | awk '{print $1}' >> /tmp/rab.$i
  done
done
for i in $(seq 0 $((n-1))); do python3 -c "import sys,statistics as s;v=[int(x)/1e6 for x in open('/tmp/rab.$i')];print(f'med {s.median(v):.3f} min {min(v):.3f}  ${tools[$i]}')"; done

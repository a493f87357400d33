#!/bin/bash
# One first start of the first-start bench's image with a timeline: its stderr lines stamped,
# then per 0.5 s the machine's busy % and the CPU ticks of the pull's threads by name (100 a
# second a core). As root after first-start.sh (or .fsbench/device-run.sh) made the image:
#   sudo [BIN=gpurun] [STORE=registry dir] [OUT=dir] [PULL_THREADS=n] benches/first-start-timeline.sh
# (PULL_THREADS: the pull's GPURUN_PULL_THREADS, e.g. parts on a machine of fewer cores, for a profile)
set -u
P=/var/tmp/fsbench; FS=/var/tmp/gpurun-bench/first-start; U=${BENCH_USER:-ubuntu}
BIN=${BIN:-$P/gpurun-new}; T=/var/tmp/tl; rm -rf $T; mkdir -p $T; chmod 755 $T
STORE=${STORE:-$(ls -d $FS/image-*/registry | head -1)}
printf 'version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:50499\n  secret: x\n' "$STORE" > $T/reg.yml
PATH=$P/bin:$PATH setsid docker-registry serve $T/reg.yml > $T/reg.log 2>&1 < /dev/null &
sleep 1
W=$T/w; install -d -o $U -m 700 $W; runuser -u $U -- mkdir -p $W/cache $W/tmp $W/xdg
sync; echo 3 > /proc/sys/vm/drop_caches
python3 - $BIN > $T/samples.txt <<'PY' &
import os, sys, time
exe = sys.argv[1]; t0 = time.time(); last = {}; prev = None
def stat():
    v = list(map(int, open('/proc/stat').readline().split()[1:]))
    return sum(v), v[3] + v[4]
while time.time() - t0 < 60:
    tot, idle = stat()
    threads = {}
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try:
            if os.readlink(f'/proc/{p}/exe').split(' (')[0] != exe: continue
            for t in os.listdir(f'/proc/{p}/task'):
                s = open(f'/proc/{p}/task/{t}/stat').read()
                comm = s[s.index('(') + 1:s.rindex(')')]; f = s[s.rindex(')') + 2:].split()
                threads[(p, t, comm)] = int(f[11]) + int(f[12])
        except OSError: pass
    if prev:
        busy = 100 * (1 - (idle - prev[1]) / max(1, tot - prev[0]))
        by = {}
        for k, v in threads.items():
            by[k[2]] = by.get(k[2], 0) + v - last.get(k, v)
        top = ' '.join(f'{c}={n}' for c, n in sorted(by.items(), key=lambda x: -x[1]) if n > 0)
        print(f'{time.time() - t0:6.2f} busy {busy:5.1f}% ticks: {top}', flush=True)
    prev = (tot, idle); last = threads
    time.sleep(0.5)
PY
S=$!
t0=$EPOCHREALTIME
runuser -u $U -- env -i ${PULL_THREADS:+GPURUN_PULL_THREADS=$PULL_THREADS} PATH=$P/bin:/usr/bin:/bin HOME=$W XDG_RUNTIME_DIR=$W/xdg TMPDIR=$W/tmp GPURUN_CACHEDIR=$W/cache \
    $BIN exec docker://127.0.0.1:50499/bench/torch:latest python3 -c 'import torch; print(torch.__version__)' 2>&1 |
    while IFS= read -r l; do n=$EPOCHREALTIME; printf '%7.2f %s\n' "$(python3 -c "print($n - $t0)")" "$l"; done > $T/lines.txt
sleep 2; kill $S; pkill -f "docker-registry serve $T/reg.yml"
{ cat $T/lines.txt; echo; cat $T/samples.txt; } > ${OUT:-$T}/timeline.txt
cat $T/lines.txt

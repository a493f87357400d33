#!/usr/bin/env bash
# Image-server start-up and cost, side by side with ch-run, on the medium Debian image:
#   true   `exec true`: gpurun's first start (the user's image servers stopped before each run)
#          and attached start (a container of the same image running throughout), ch-run on the
#          .sqsh, and `unshare -Urm true` (the floor). ROUNDS rounds of `hyperfine -N`, RUNS runs
#          per tool each; the attached runs in a round of their own (the holding container would
#          make every start an attached one), the two kinds of round alternating.
#   burst  BURST starts of `exec true` at once, the wall time of the whole batch: gpurun first
#          start (servers stopped before each batch; how many servers are left after it is
#          counted: one per user and image is the aim), gpurun attached, ch-run. ROUNDS rounds
#          of BATCHES batches per tool, interleaved.
#   idle   one import-heavy start, then the user's gpurun processes left once it has exited
#          (image servers waiting for the next container): their RSS, CPU time and context
#          switches, sampled every second for IDLE_SECS; "no server" when none is left.
#
#   sudo benches/server.sh
#   sudo SUITE=idle IDLE_SECS=10 benches/server.sh
#
# Environment [default]: SUITE [true,burst,idle], ROUNDS [5], RUNS [20], BURST [16],
# BATCHES [4], IDLE_SECS [60], BENCH_DIR, BENCH_USER, GPURUN, OUT (as imports.sh). Writes
# OUT/server-*.{json,tsv,md} and OUT/server.md.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SUITE=${SUITE:-true,burst,idle}
ROUNDS=${ROUNDS:-5}
RUNS=${RUNS:-20}
BURST=${BURST:-16}
BATCHES=${BATCHES:-4}
IDLE_SECS=${IDLE_SECS:-60}
bench_setup ch-run hyperfine mksquashfs debootstrap unshare
pydeb_image
IMG=$PYDEB.sqsh
cleanup() { holder_stop; stop_servers || true; }
trap cleanup EXIT
env_header | tee "$OUT/server-env.txt"
as_user "$GPURUN" exec "$IMG" true || die "gpurun exec $IMG true failed"
as_user ch-run "$IMG" -- true || die "ch-run $IMG -- true failed"

# --- exec true ---------------------------------------------------------------------------
hyper() { # hyperfine ROUND NAME CMD PREPARE [NAME CMD PREPARE]...: one round, as the user
    local r=$1 args=() preps=(); shift
    while [ $# -gt 0 ]; do args+=(-n "$1" "$2"); preps+=(--prepare "$3"); shift 3; done
    as_user hyperfine -N --style none --warmup 3 --runs "$RUNS" "${preps[@]}" \
        --export-json "$RUN/hf.json" "${args[@]}" >/dev/null 2>"$RUN/hf.err" ||
        die "hyperfine failed: $(tail -3 "$RUN/hf.err")"
    python3 - "$r" "$RUN/hf.json" >>"$OUT/server-true.tsv" <<'PY'
import json, sys
for res in json.load(open(sys.argv[2]))["results"]:
    for i, (t, rc) in enumerate(zip(res["times"], res["exit_codes"])):
        print(f"{sys.argv[1]}.{i}\t{res['command']}\texec true\t{t * 1e6:.0f}\t{rc}")
PY
    cat "$RUN/hf.json" >>"$OUT/server-true.json"
}
attached() { holder_start "$IMG"; hyper "$1" gpurun-attached "$GPURUN exec $IMG true" true; holder_stop; }
if [[ $SUITE == *true* ]]; then
    printf 'rep\ttool\tphase\tusec\trc\n' >"$OUT/server-true.tsv"
    : >"$OUT/server-true.json"
    first=(gpurun-first "$GPURUN exec $IMG true" "$BIN/stop-servers")
    ch=(ch-run "ch-run $IMG -- true" true)
    floor=(unshare "unshare -Urm true" true)
    for r in $(seq "$ROUNDS"); do
        echo "== exec true, round $r/$ROUNDS"
        if [ $((r % 2)) = 0 ]; then attached "$r"; fi
        case $((r % 3)) in
        0) hyper "$r" "${first[@]}" "${ch[@]}" "${floor[@]}" ;;
        1) hyper "$r" "${ch[@]}" "${floor[@]}" "${first[@]}" ;;
        2) hyper "$r" "${floor[@]}" "${first[@]}" "${ch[@]}" ;;
        esac
        if [ $((r % 2)) = 1 ]; then attached "$r"; fi
    done
    stop_servers
fi

# --- BURST starts at once ----------------------------------------------------------------
cat >"$BIN/burst" <<'PY'
#!/usr/bin/python3
# burst N CMD...: N copies of CMD started at once; microseconds until the last ends, worst rc
import subprocess, sys, time
n, argv = int(sys.argv[1]), sys.argv[2:]
t = time.perf_counter()
ps = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(n)]
rc = max(abs(p.wait()) for p in ps)
print(f"{(time.perf_counter() - t) * 1e6:.0f} {rc}")
PY
chmod 755 "$BIN/burst"
batch() { # batch REP TOOL CMD...
    local rep=$1 t=$2 us rc; shift 2
    read -r us rc <<<"$(as_user "$BIN/burst" "$BURST" "$@")"
    printf '%s\t%s\t%s at once\t%s\t%s\n' "$rep" "$t" "$BURST" "$us" "$rc" >>"$OUT/server-burst.tsv"
}
if [[ $SUITE == *burst* ]]; then
    printf 'rep\ttool\tphase\tusec\trc\n' >"$OUT/server-burst.tsv"
    : >"$OUT/server-burst-servers.txt"
    for r in $(seq "$ROUNDS"); do
        echo "== $BURST starts at once, round $r/$ROUNDS"
        for b in $(seq "$BATCHES"); do
            if [ $(((r + b) % 2)) = 0 ]; then
                batch "$r.$b" ch-run ch-run "$IMG" -- true
            fi
            stop_servers
            batch "$r.$b" gpurun-first "$GPURUN" exec "$IMG" true
            "$BIN/servers" | wc -l >>"$OUT/server-burst-servers.txt"
            if [ $(((r + b) % 2)) = 1 ]; then
                batch "$r.$b" ch-run ch-run "$IMG" -- true
            fi
        done
        stop_servers
        holder_start "$IMG"
        for b in $(seq "$BATCHES"); do batch "$r.$b" gpurun-attached "$GPURUN" exec "$IMG" true; done
        holder_stop
    done
    stop_servers
fi

# --- an idle server ----------------------------------------------------------------------
if [[ $SUITE == *idle* ]]; then
    echo "== idle image server, $IDLE_SECS s"
    stop_servers
    as_user "$GPURUN" exec "$IMG" python3 -c "$PYDEB_IMPORTS" || die "the import start failed"
    sleep 1
    as_user "$GPURUN" ps >"$OUT/server-idle-ps.txt" 2>&1 || true
    python3 - "$IDLE_SECS" "$BENCH_USER" $("$BIN/servers") >"$OUT/server-idle.txt" <<'PY'
import os, sys, time
secs, user, pids = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
if not pids:
    print(f"no server: no gpurun process of {user} is left once its container has exited")
    sys.exit()
hz = os.sysconf("SC_CLK_TCK")
def sample():
    rss = cpu = ctx = 0
    for p in pids:
        try:
            st = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            cpu += int(st[11]) + int(st[12])
            rss += next(int(l.split()[1]) for l in open(f"/proc/{p}/status") if l.startswith("VmRSS:"))
            for t in os.listdir(f"/proc/{p}/task"):
                for l in open(f"/proc/{p}/task/{t}/status"):
                    if l.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")):
                        ctx += int(l.split()[1])
        except (OSError, StopIteration):
            pass
    return rss, cpu, ctx
first = sample(); rss = [first[0]]
for _ in range(secs):
    time.sleep(1)
    rss.append(sample()[0])
last = sample()
alive = sum(os.path.exists(f"/proc/{p}") for p in pids)
print(f"{len(pids)} server process(es) ({alive} still alive after {secs} s): pids {' '.join(pids)}")
print(f"RSS: {first[0] / 1024:.1f} MiB at start, {last[0] / 1024:.1f} MiB at end, max {max(rss) / 1024:.1f} MiB")
print(f"CPU: {(last[1] - first[1]) / hz:.2f} s in {secs} s ({(last[1] - first[1]) / hz / secs * 100:.2f} %); "
      f"context switches: {last[2] - first[2]}")
PY
    stop_servers
fi

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/server-env.txt"
{
    sed 's/$/  /' "$OUT/server-env.txt"
    if [ -f "$OUT/server-true.tsv" ] && [[ $SUITE == *true* ]]; then
        echo
        echo "### \`exec true\`: $ROUNDS rounds × $RUNS runs (hyperfine -N); per-run ratios pair the i-th runs of a round"
        summarize "$OUT/server-true.tsv" ch-run gpurun-first gpurun-attached ch-run unshare
    fi
    if [[ $SUITE == *burst* ]]; then
        echo
        echo "### $BURST starts of \`exec true\` at once: wall time of the batch, $ROUNDS rounds × $BATCHES batches"
        summarize "$OUT/server-burst.tsv" ch-run gpurun-first gpurun-attached ch-run
        echo
        echo "servers left after a batch of first starts: $(sort -n "$OUT/server-burst-servers.txt" | uniq -c | awk '{printf "%s%s in %s batches", s, $2, $1; s="; "}')"
    fi
    if [[ $SUITE == *idle* ]]; then
        echo
        echo "### idle image server"
        echo
        cat "$OUT/server-idle.txt"
    fi
} | tee "$OUT/server.md"
echo "raw results: $OUT"

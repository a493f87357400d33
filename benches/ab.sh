#!/bin/bash
# Interleaved A/B start-up: ROUNDS rounds, each timing every command in turn (RUNS runs after 3
# warm-ups; hyperfine -N where installed, else a plain timer, as on the GPU machine); prints
# each round's medians, then each command's median, its ratio to the first command (the median
# of the rounds' ratios) and the range of those ratios: a difference inside it is noise.
#
#   benches/ab.sh ROUNDS RUNS "gpurun-a exec IMG true" "gpurun-b exec IMG true" ...
R=$1; N=$2; shift 2
median_ms() {  # CMD RUNS
  if command -v hyperfine >/dev/null; then
    hyperfine -N -w 3 -r "$2" --export-json /tmp/ab.json "$1" >/dev/null 2>&1
    python3 -c "import json;print('%.2f'%(json.load(open('/tmp/ab.json'))['results'][0]['median']*1000))"
    return
  fi
  python3 - "$1" "$2" <<'PY'
import shlex, statistics, subprocess, sys, time
cmd, n, t = shlex.split(sys.argv[1]), int(sys.argv[2]), []
for i in range(3 + n):
    s = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if i >= 3:
        t.append(time.perf_counter() - s)
print('%.2f' % (statistics.median(t) * 1000))
PY
}
for r in $(seq "$R"); do
  line="round $r:"
  for c in "$@"; do
    line="$line $(median_ms "$c" "$N")"
  done
  echo "$line"
done | tee /tmp/ab.out
python3 - "$@" <<'PY'
import sys, statistics
rows=[list(map(float,l.split(':')[1].split())) for l in open('/tmp/ab.out')]
for i,c in enumerate(sys.argv[1:]):
    col=[r[i] for r in rows]; ratios=[r[i]/r[0] for r in rows]
    print(f"{statistics.median(col):7.2f} ms  ratio-to-first {statistics.median(ratios):.3f}"
          f" (rounds {min(ratios):.3f}-{max(ratios):.3f})  {c}")
PY

#!/bin/bash
# Interleaved A/B start-up: ROUNDS rounds of `hyperfine -N` over each command in turn; prints
# each round's medians, then each command's median and its ratio to the first command.
#
#   benches/ab.sh ROUNDS RUNS "gpurun-a exec IMG true" "gpurun-b exec IMG true" ...
R=$1; N=$2; shift 2
for r in $(seq $R); do
  line="round $r:"
  for c in "$@"; do
    hyperfine -N -w 3 -r $N --export-json /tmp/ab.json "$c" >/dev/null 2>&1
    m=$(python3 -c "import json;print('%.2f'%(json.load(open('/tmp/ab.json'))['results'][0]['median']*1000))")
    line="$line $m"
  done
  echo "$line"
done | tee /tmp/ab.out
python3 - "$@" <<'PY'
import sys, statistics
rows=[list(map(float,l.split(':')[1].split())) for l in open('/tmp/ab.out')]
for i,c in enumerate(sys.argv[1:]):
    col=[r[i] for r in rows]; base=[r[0] for r in rows]
    print(f"{statistics.median(col):7.2f} ms  ratio-to-first {statistics.median([a/b for a,b in zip(col,base)]):.3f}  {c}")
PY

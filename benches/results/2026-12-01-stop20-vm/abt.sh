#!/bin/bash
# abt.sh ROUNDS RUNS "cmd1" ... : interleaved hyperfine rounds; all runs pooled: median mean p90 max (ms)
R=$1; N=$2; shift 2
rm -f /tmp/abt.*.times
for r in $(seq $R); do
  i=0
  for c in "$@"; do
    hyperfine -N -w 2 -r $N --export-json /tmp/abt.json "$c" >/dev/null 2>&1
    python3 -c "import json;print('\n'.join(str(t*1000) for t in json.load(open('/tmp/abt.json'))['results'][0]['times']))" >> /tmp/abt.$i.times
    i=$((i+1))
  done
done
i=0
for c in "$@"; do
  python3 - /tmp/abt.$i.times "$c" <<'PY'
import sys,statistics as st
v=sorted(float(x) for x in open(sys.argv[1]))
print(f"med {st.median(v):7.2f}  mean {st.mean(v):7.2f}  p90 {v[int(len(v)*0.9)]:7.2f}  max {v[-1]:7.2f}  {sys.argv[2]}")
PY
  i=$((i+1))
done

#!/bin/bash
# usage: kill-loop.sh GPURUN N [all] — SIGKILL gpurun (or, with "all", every process of the
# test user at once, as a cgroup kill does) at random times during a read-heavy run
G=$1; N=${2:-30}; MODE=${3:-gpurun}; IMG=/var/tmp/gpurun-bench/debian.sqsh
hung=0
for i in $(seq 1 $N); do
  cd /tmp
  setpriv --reuid=1001 --regid=1001 --clear-groups env HOME=/tmp $G exec $IMG sh -c "${WORK:-find / -xdev -type f 2>/dev/null | xargs cat > /dev/null 2>&1}" 2>/dev/null &
  P=$!
  sleep 0.$((RANDOM % 9 + 1))$((RANDOM % 10))
  if [ "$MODE" = all ]; then pkill -9 -u 1001; else kill -9 $P 2>/dev/null; fi
  ok=0
  for t in $(seq 1 50); do
    if ! pgrep -u 1001 > /dev/null; then ok=1; break; fi
    sleep 0.1
  done
  if [ $ok = 0 ]; then
    hung=$((hung+1))
    echo "iteration $i: left behind:"
    for p in $(pgrep -u 1001); do
      echo "== $p $(cat /proc/$p/comm) $(awk '{print $3}' /proc/$p/stat)"
      for t in /proc/$p/task/*; do echo "-- task $(basename $t) $(cat $t/comm) $(awk '{print $3}' $t/stat)"; cat $t/stack 2>/dev/null | head -6; done
    done
    for a in /sys/fs/fuse/connections/*/abort; do [ "$(stat -c %u $a)" = 1001 ] && echo 1 > $a; done
    sleep 1; pkill -9 -u 1001; sleep 0.5
  fi
  wait $P 2>/dev/null
done
echo "hung $hung of $N"

#!/bin/bash
# SIGKILL gpurun (or, with "all", every process of the bench user at once, as a cgroup kill
# does) at random times during a read-heavy run, and report any process left behind (D state).
#
#   sudo benches/kill-loop.sh GPURUN [N=30] [gpurun|all]
#
# Environment: IMG [/var/tmp/gpurun-bench/debian.sqsh, made by runtime.sh], BENCH_USER
# [gpuruntest], WORK [find / -xdev -type f | xargs cat: the command run in the container].
G=$1; N=${2:-30}; MODE=${3:-gpurun}; IMG=${IMG:-/var/tmp/gpurun-bench/debian.sqsh}
U=$(id -u "${BENCH_USER:-gpuruntest}")
hung=0
for i in $(seq 1 $N); do
  cd /tmp
  setpriv --reuid=$U --regid=$U --clear-groups env HOME=/tmp $G exec $IMG sh -c "${WORK:-find / -xdev -type f 2>/dev/null | xargs cat > /dev/null 2>&1}" 2>/dev/null &
  P=$!
  sleep 0.$((RANDOM % 9 + 1))$((RANDOM % 10))
  if [ "$MODE" = all ]; then pkill -9 -u $U; else kill -9 $P 2>/dev/null; fi
  ok=0
  for t in $(seq 1 50); do
    if ! pgrep -u $U > /dev/null; then ok=1; break; fi
    sleep 0.1
  done
  if [ $ok = 0 ]; then
    hung=$((hung+1))
    echo "iteration $i: left behind:"
    for p in $(pgrep -u $U); do
      echo "== $p $(cat /proc/$p/comm) $(awk '{print $3}' /proc/$p/stat)"
      for t in /proc/$p/task/*; do echo "-- task $(basename $t) $(cat $t/comm) $(awk '{print $3}' $t/stat)"; cat $t/stack 2>/dev/null | head -6; done
    done
    for a in /sys/fs/fuse/connections/*/abort; do [ "$(stat -c %u $a)" = "$U" ] && echo 1 > $a; done
    sleep 1; pkill -9 -u $U; sleep 0.5
  fi
  wait $P 2>/dev/null
done
echo "hung $hung of $N"

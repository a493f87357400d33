set -x
I=/var/tmp/gpurun-bench/debian.sqsh
O=/var/tmp/stop15
cd /tmp
echo "== quiet exec true (8 rounds x 30)"; runuser -u gpuruntest -- bash /tmp/abt.sh 8 30 "/tmp/g0 exec $I true" "/tmp/g8 exec $I true" "ch-run $I -- true" 2>&1 | tail -3
echo "== quiet exec apt-get --version (4 x 15)"; runuser -u gpuruntest -- bash /tmp/abt.sh 4 15 "/tmp/g0 exec $I apt-get --version" "/tmp/g8 exec $I apt-get --version" "ch-run $I -- apt-get --version" 2>&1 | tail -3
echo "== two CPU-bound processes (normal priority), exec true (4 x 20)"; (bash /tmp/spin.sh normal 400 &); sleep 0.5
runuser -u gpuruntest -- bash /tmp/abt.sh 4 20 "/tmp/g0 exec $I true" "/tmp/g8 exec $I true" "ch-run $I -- true" 2>&1 | tail -3
echo "== same load, apt-get --version (3 x 10)"; runuser -u gpuruntest -- bash /tmp/abt.sh 3 10 "/tmp/g0 exec $I apt-get --version" "/tmp/g8 exec $I apt-get --version" "ch-run $I -- apt-get --version" 2>&1 | tail -3
pkill -f "timeout 400"; sleep 1
echo "== two idle-priority (SCHED_IDLE) CPU-bound processes, exec true (4 x 20)"; (bash /tmp/spin.sh idle 400 &); sleep 0.5
runuser -u gpuruntest -- bash /tmp/abt.sh 4 20 "/tmp/g0 exec $I true" "/tmp/g8 exec $I true" "ch-run $I -- true" 2>&1 | tail -3
pkill -f "timeout 400"; sleep 1
echo "== 8 starts at once, batch time (3 x 15)"; runuser -u gpuruntest -- bash /tmp/abt.sh 3 15 "bash /tmp/par.sh 8 /tmp/g0 exec $I true" "bash /tmp/par.sh 8 /tmp/g8 exec $I true" "bash /tmp/par.sh 8 ch-run $I -- true" 2>&1 | tail -3
echo "== random reads, benches/reads.sh tree (3 x 5, medians of rounds)"; runuser -u gpuruntest -- bash /tmp/ab.sh 3 5 "bash /tmp/rand.sh /tmp/g0" "bash /tmp/rand.sh /tmp/g8" 2>&1 | tail -2

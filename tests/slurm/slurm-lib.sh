# Sourced by cluster.sh and multinode.sh, the two test clusters: their daemons, by pid file,
# and the slurm.conf lines they share. The caller defines log().

# A pid is alive when /proc/PID exists and is not a zombie (a zombie still passes `kill -0`,
# and PID 1 here is not a fast reaper).
alive() {
  local p=${1:-}; [ -n "$p" ] && [ -r "/proc/$p/stat" ] || return 1
  local st; st=$(sed -E 's/^[0-9]+ \(.*\) ([A-Z]).*/\1/' "/proc/$p/stat" 2>/dev/null) || return 1
  [ "$st" != Z ] && [ "$st" != X ]
}
pid_of() { if [ -s "$1" ]; then cat "$1"; fi; }
stop_pid() {  # name pid
  local p=$2; alive "$p" || return 0
  kill "$p" 2>/dev/null || true
  for _ in $(seq 100); do alive "$p" || { log "$1 ($p) stopped"; return 0; }; sleep 0.1; done
  log "$1 ($p) ignored SIGTERM for 10s, sending SIGKILL"; kill -9 "$p" 2>/dev/null || true
}

# slurm.conf lines of both clusters: munge, one slurmd user, a select that shares nodes by core,
# no accounting, and nodes that trust their node line over the probed hardware (CI machines
# differ) and come back by themselves after being down.
conf_common() {
  cat <<EOF
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
EOF
}

#!/usr/bin/env bash
# A single-node Slurm cluster with fake GPUs, for gpurun's Slurm tests and benches.
#
#   cluster.sh start [v1|none [PLUGIN.so [ARG...]]]
#                                install (apt) + configure + start munged, slurmctld, slurmd;
#                                with a SPANK plugin: "required PLUGIN.so ARG..." in
#                                /etc/slurm/plugstack.conf.d/zz-gpurun-ci.conf (srun, sbatch and
#                                slurmstepd read it at each start: no daemon restart)
#   cluster.sh stop [--purge]    cancel jobs, stop the daemons this script started;
#                                --purge also removes state, fake devices and configs
#   cluster.sh status            print the node state and the cgroup mode
#
# Modes: v1   proctrack/cgroup + task/cgroup with ConstrainDevices=yes (cgroup v1 hierarchies;
#             Slurm 22.05's cgroup/v2 plugin refuses hosts with any v1 hierarchy mounted)
#        none proctrack/linuxproc + task/none: GPU variables set, nothing confined
#        (default: v1 when the v1 devices+freezer controllers are mounted, else none)
#
# Fake GPUs are char devices 195:N (/dev/nvidiaN) plus /dev/nvidiactl (195:255): with no NVIDIA
# driver open() gives ENXIO when the devices cgroup allows the node and EPERM when it denies it.
# Run as root. Idempotent: a running cluster with the same config is only re-checked; a changed
# config (other mode, other plugins) restarts the daemons.
#
# Environment (all optional):
#   SLURM_CI_DIR      state/log/pid directory               (default /tmp/gpurun-slurm)
#   SLURM_CI_SPOOL    slurmd's spool directory, where the PMIx server sockets live; like on
#                     a real node it is not under /tmp      (default /var/spool/gpurun-slurmd)
#   SLURM_CI_GPUS     number of fake GPUs                   (default 4)
#   SLURM_CI_CPUS     CPUs of the node (may exceed the real ones: the node line is trusted;
#                     4 lets a 2-task step run beside a 1-task job)  (default 4)
#   SLURM_CI_TIMEOUT  seconds to wait for the node to become idle (default 60)
set -euo pipefail

DIR=${SLURM_CI_DIR:-/tmp/gpurun-slurm}
SPOOL=${SLURM_CI_SPOOL:-/var/spool/gpurun-slurmd}
NGPU=${SLURM_CI_GPUS:-4}
NCPU=${SLURM_CI_CPUS:-4}
TIMEOUT=${SLURM_CI_TIMEOUT:-60}
ETC=/etc/slurm
SPANKCONF=$ETC/plugstack.conf.d/zz-gpurun-ci.conf
MARK='# written by gpurun tests/slurm/cluster.sh'
T0=$(date +%s%N)

log() { printf '[cluster %5dms] %s\n' $((($(date +%s%N) - T0) / 1000000)) "$*"; }
die() { log "ERROR: $*"; exit 1; }

. "$(dirname "$0")/slurm-lib.sh"   # alive, pid_of, stop_pid, conf_common
v1_ok() { [ -w /sys/fs/cgroup/devices/devices.deny ] && [ -d /sys/fs/cgroup/freezer ]; }

apt_retry() {  # apt with the dpkg lock possibly held by someone else
  local i
  for i in 1 2 3 4 5; do
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 "$@" && return 0
    log "apt-get $1 failed (lock busy?), retry $i/5"; sleep 5
  done
  return 1
}

install_pkgs() {
  local p need=""
  # libpmix-dev: mpi/pmix dlopen()s the unversioned libpmix.so; without it `srun --mpi=pmix` fails
  for p in slurmctld slurmd slurm-client munge libslurm-dev libpmix-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need="$need $p"
  done
  [ -n "$need" ] || return 0
  log "installing:$need"
  if [ -z "$(apt-cache policy slurmd 2>/dev/null | awk '/Candidate:/{print $2}' | grep -v none)" ]; then
    apt_retry update -qq || die "apt-get update failed"
  fi
  # shellcheck disable=SC2086 # word splitting of the package list is wanted
  apt_retry install -y -qq --no-install-recommends $need >"$DIR/apt.log" 2>&1 \
    || { apt_retry update -qq && apt_retry install -y -qq --no-install-recommends $need >>"$DIR/apt.log" 2>&1; } \
    || die "apt-get install failed, see $DIR/apt.log"
  log "installed"
}

mkdev() {  # path minor: create a fake NVIDIA node, never touch a real one
  if [ -e "$1" ]; then
    [ "$(stat -c '%F %t:%T' "$1")" = "character special file c3:$(printf '%x' "$2")" ] \
      || die "$1 exists and is not char 195:$2 (real GPU? refusing to touch it)"
  else
    mknod -m 0666 "$1" c 195 "$2"; echo "$1" >> "$DIR/created-devices"
  fi
}

write_if_changed() {  # file: content on stdin; sets changed=1 when it differs
  cat > "$1.new"
  if cmp -s "$1.new" "$1"; then rm -f "$1.new"; else mv "$1.new" "$1"; changed=1; fi
}

start() {
  local mode=${1:-auto}
  shift || true
  [ "$(id -u)" = 0 ] || die "must run as root"
  alive "$(pid_of "${MN_DIR:-/var/lib/gpurun-multinode}/slurmctld.pid")" \
    && die "the multi-node cluster (tests/slurm/multinode.sh) is running and uses $ETC: stop it first"
  mkdir -p "$DIR"/{ctld,log} "$SPOOL"
  install_pkgs
  case "$mode" in
    auto) if v1_ok; then mode=v1; else mode=none; fi ;;
    v1) v1_ok || die "cgroup v1 devices/freezer controllers are not mounted" ;;
    none) ;;
    *) die "mode must be v1 or none" ;;
  esac
  chown -R slurm:slurm "$DIR/ctld"
  chmod 755 "$DIR"

  local already=0
  if alive "$(pid_of "$DIR/slurmctld.pid")" && alive "$(pid_of "$DIR/slurmd.pid")" \
     && timeout 10 sinfo -h >/dev/null 2>&1; then
    already=1
  else
    stop_pid slurmd "$(pid_of "$DIR/slurmd.pid")"; stop_pid slurmctld "$(pid_of "$DIR/slurmctld.pid")"
    rm -f "$DIR/slurmd.pid" "$DIR/slurmctld.pid"
  fi

  local i; for i in $(seq 0 $((NGPU - 1))); do mkdev "/dev/nvidia$i" "$i"; done
  mkdev /dev/nvidiactl 255
  [ -f "$DIR/created-devices" ] && sort -u -o "$DIR/created-devices" "$DIR/created-devices"

  local node proctrack task ver
  node=$(hostname -s); ver=$(slurmd -V | awk '{print $2}')
  if [ "$mode" = v1 ]; then proctrack=proctrack/cgroup; task=task/cgroup
  else proctrack=proctrack/linuxproc; task=task/none; fi
  if [ -f "$ETC/slurm.conf" ] && ! grep -q "^$MARK" "$ETC/slurm.conf"; then
    cp -n "$ETC/slurm.conf" "$ETC/slurm.conf.pre-gpurun-ci"
  fi
  mkdir -p "$ETC/plugstack.conf.d"
  changed=0
  write_if_changed "$ETC/slurm.conf" <<EOF
$MARK (Slurm $ver, cgroup mode: $mode)
ClusterName=ci
SlurmctldHost=$node(127.0.0.1)
$(conf_common)
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$SPOOL
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=$proctrack
TaskPlugin=$task
# an extern step per job, where the SPANK plugin keeps the job's image servers
PrologFlags=contain
GresTypes=gpu
NodeName=$node NodeAddr=127.0.0.1 CPUs=$NCPU Boards=1 SocketsPerBoard=1 CoresPerSocket=$NCPU ThreadsPerCore=1 RealMemory=1000 Gres=gpu:$NGPU State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  write_if_changed "$ETC/gres.conf" <<EOF
$MARK: fake GPUs, no NVML
AutoDetect=off
NodeName=$node Name=gpu File=/dev/nvidia[0-$((NGPU - 1))]
EOF
  write_if_changed "$ETC/cgroup.conf" <<EOF
$MARK (read only when TaskPlugin/ProctrackType use cgroups)
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainDevices=yes
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainSwapSpace=no
EOF
  grep -qs "include $ETC/plugstack.conf.d/\*.conf" "$ETC/plugstack.conf" \
    || echo "include $ETC/plugstack.conf.d/*.conf" >> "$ETC/plugstack.conf"
  # srun, sbatch and slurmstepd read plugstack.conf afresh, slurmd only when it starts (the
  # plugin's job epilog): a change restarts the daemons below
  if [ $# -gt 0 ]; then
    [ -r "$1" ] || die "SPANK plugin $1 not readable"
    local so; so=$(realpath "$1"); shift
    write_if_changed "$SPANKCONF" <<<"required $so $*"
    log "SPANK plugin: $(cat "$SPANKCONF")"
  elif [ -e "$SPANKCONF" ]; then
    rm -f "$SPANKCONF"; changed=1
  fi
  log "configs in $ETC (node $node, $NCPU cpus, $NGPU fake gpus, cgroup=$mode, changed=$changed)"
  if [ "$already" = 1 ] && [ "$changed" = 1 ]; then
    log "config changed while running: restarting daemons"
    stop_pid slurmd "$(pid_of "$DIR/slurmd.pid")"; stop_pid slurmctld "$(pid_of "$DIR/slurmctld.pid")"
    already=0
  fi

  [ -s /etc/munge/munge.key ] || { mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null \
    || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none; }
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
    runuser -u munge -- /usr/sbin/munged
    cp /run/munge/munged.pid "$DIR/munged.pid"   # stop only stops a munged we started
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n | unmunge >/dev/null || die "munged does not work"
    log "munged started (pid $(cat "$DIR/munged.pid"))"
  fi

  if [ "$already" = 0 ]; then
    # fresh controller/node state on a cold start: job ids restart at 1 and a recovered
    # "idle" node state cannot fake readiness before slurmd registers
    rm -rf "${DIR:?}"/ctld/* "${SPOOL:?}"/*
    /usr/sbin/slurmctld || die "slurmctld failed, see $DIR/log/slurmctld.log"
    /usr/sbin/slurmd || die "slurmd failed, see $DIR/log/slurmd.log"
    for _ in $(seq 50); do [ -s "$DIR/slurmd.pid" ] && [ -s "$DIR/slurmctld.pid" ] && break; sleep 0.1; done
    log "slurmctld $(pid_of "$DIR/slurmctld.pid"), slurmd $(pid_of "$DIR/slurmd.pid") started"
  fi

  local state=""
  for _ in $(seq $((TIMEOUT * 5))); do
    state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
    case "$state" in idle|mixed|allocated) break ;; esac
    for f in slurmctld slurmd; do alive "$(pid_of "$DIR/$f.pid")" || die "$f died: $(tail -3 "$DIR/log/$f.log")"; done
    sleep 0.2
  done
  case "$state" in idle|mixed|allocated) ;; *) sinfo -R; die "node $node is '$state' after ${TIMEOUT}s; see $DIR/log/" ;; esac
  local out; out=$(timeout 30 srun -N1 -t 1 hostname) || die "srun hostname failed"
  log "srun hostname -> $out; ready (Slurm $ver, cgroup=$mode, $DIR)"
}

stop() {
  local ctld jobs
  ctld=$(pid_of "$DIR/slurmctld.pid")
  if alive "$ctld" && jobs=$(timeout 5 squeue -h -o %i 2>/dev/null) && [ -n "$jobs" ]; then
    log "cancelling jobs: $(echo "$jobs" | tr '\n' ' ')"
    # shellcheck disable=SC2086 # one job id per word
    scancel $jobs || true
    for _ in $(seq 50); do [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  stop_pid slurmd "$(pid_of "$DIR/slurmd.pid")"
  stop_pid slurmctld "$ctld"
  if [ -s "$DIR/munged.pid" ]; then stop_pid munged "$(cat "$DIR/munged.pid")"; rm -f "$DIR/munged.pid"; fi
  rm -f "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$SPANKCONF"
  if [ "${1:-}" = --purge ]; then
    if [ -s "$DIR/created-devices" ]; then
      while read -r d; do case "$d" in /dev/nvidia*) rm -f "$d" ;; esac; done < "$DIR/created-devices"
    fi
    local f
    for f in slurm.conf gres.conf cgroup.conf; do
      if grep -qs "^$MARK" "$ETC/$f"; then rm -f "$ETC/$f"; fi
    done
    if [ -f "$ETC/slurm.conf.pre-gpurun-ci" ]; then mv "$ETC/slurm.conf.pre-gpurun-ci" "$ETC/slurm.conf"; fi
    rm -rf "${DIR:?}" "${SPOOL:?}"
    log "purged $DIR, fake devices and configs"
  fi
}

status() {
  sinfo -h -o '%n %T' 2>/dev/null || { echo "not running"; return 1; }
  awk '/^TaskPlugin=/{print ($0 ~ /cgroup/) ? "cgroup mode: v1" : "cgroup mode: none"}' "$ETC/slurm.conf"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop "${2:-}" ;;
  status) status ;;
  *) echo "usage: $0 start [v1|none [PLUGIN.so [ARG...]]] | stop [--purge] | status" >&2; exit 2 ;;
esac

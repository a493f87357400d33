#!/usr/bin/env bash
# A Slurm cluster of N compute nodes on this one machine, for gpurun's multi-node tests and
# benches. Each node is a slurmd in its own network, UTS and mount namespace: its own hostname
# (n1..nN) and address on a bridge, its own /tmp, /var/tmp and /dev/shm (node-local disks),
# while homes, the source tree and the rest of the file system are shared (a parallel file
# system); a plugin or gpurun under /tmp, /var/tmp or /dev/shm (a checkout there) is bound into
# each node at its own path. One slurmctld and one munged (on a socket of their own) serve all nodes; no cgroups.
#
#   multinode.sh start N [PLUGIN.so [ARG...]]
#                           the cluster, with "required PLUGIN.so ARG..." as plugstack.conf
#                           (default: this checkout's target/debug/libspank_gpurun.so
#                           gpurun=target/debug/gpurun); srun/sbatch/sinfo then reach it with
#                           the default configuration ($ETC/slurm.conf)
#   multinode.sh stop       cancel jobs, stop every daemon and process on the nodes, remove the
#                           namespaces, links, mounts and files made, restore $ETC as it was
#   multinode.sh status     nodes and their state, namespaces, the registry
#   multinode.sh env        shell assignments for tests: MN_NODES, MN_REGISTRY, MN_REGISTRY_LOG,
#                           MN_CA_BUNDLE (the nodes' CA bundle, for the login side), MN_PLUGSTACK…
#   multinode.sh exec NODE CMD...       run CMD as root in NODE's namespaces
#   multinode.sh kill-slurmd NODE       SIGKILL NODE's slurmd (its steps keep running)
#   multinode.sh start-slurmd NODE      start NODE's slurmd again, wait until the node is back
#
# A registry (docker-registry, TLS with a CA made at start) listens on the bridge address,
# port 5000; the nodes trust that CA (their /etc/ssl/certs/ca-certificates.crt has it), the
# login side finds it in $DIR/registry/trust/ca.crt (skopeo --dest-cert-dir). Its request log
# is $DIR/registry/registry.log. All traffic stays on the bridge, in the namespaces and on
# loopback.
#
# Run as root. The single-node cluster (tests/slurm/cluster.sh) also writes $ETC: start refuses
# while it runs (exit 3), and cluster.sh refuses while this one runs.
#
# Environment (all optional):
#   MN_DIR      state, logs, pid files, the munge socket; not under /tmp, which the
#               nodes do not share                          (default /var/lib/gpurun-multinode)
#   MN_SPOOL    slurmd spool directories, one per node     (default /var/spool/gpurun-multinode)
#   MN_NET      the first three octets of the test network (default 10.77.0; bridge .1,
#               node i at .(10+i))
#   MN_ETC      the Slurm configuration directory          (default /etc/slurm)
#   MN_CPUS     CPUs per node (the node line is trusted)   (default 4)
#   MN_SLURMD_TIMEOUT  seconds before slurmctld declares a silent node down (default 10)
#   MN_TIMEOUT  seconds to wait for the nodes              (default 60)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${MN_DIR:-/var/lib/gpurun-multinode}
SPOOL=${MN_SPOOL:-/var/spool/gpurun-multinode}
NET=${MN_NET:-10.77.0}
ETC=${MN_ETC:-/etc/slurm}
NCPU=${MN_CPUS:-4}
SLURMD_TIMEOUT=${MN_SLURMD_TIMEOUT:-10}
TIMEOUT=${MN_TIMEOUT:-60}
BR=gpmnbr          # the bridge; node i: network namespace gpmn$i, host end of its veth gpmnv$i
NSD=$DIR/ns        # node i's mount and UTS namespaces, kept by bind mounts: n$i.mnt, n$i.uts
REG_PORT=5000
SINGLE_DIR=${SLURM_CI_DIR:-/tmp/gpurun-slurm}   # tests/slurm/cluster.sh's
export SLURM_CONF=$ETC/slurm.conf
T0=$(date +%s%N)

log() { printf '[multinode %5dms] %s\n' $((($(date +%s%N) - T0) / 1000000)) "$*"; }
die() { log "ERROR: $1"; exit "${2:-1}"; }

. "$(dirname "$0")/slurm-lib.sh"   # alive, pid_of, stop_pid, conf_common
nodes() { cat "$DIR/nodes" 2>/dev/null || true; }        # n1 n2 …, one a line
node_index() { case "$1" in n[0-9]*) echo "${1#n}" ;; *) die "no node $1" ;; esac; }
in_node() {  # node cmd...: root, in the node's network, UTS and mount namespaces
  local i; i=$(node_index "$1"); shift
  [ -e "$NSD/n$i.mnt" ] || die "node n$i does not exist (multinode.sh start)"
  nsenter --net="/run/netns/gpmn$i" --uts="$NSD/n$i.uts" --mount="$NSD/n$i.mnt" -- "$@"
}
running() { alive "$(pid_of "$DIR/slurmctld.pid")"; }

# ------------------------------------------------------------------ refusing to clash
single_node_running() {
  alive "$(pid_of "$SINGLE_DIR/slurmctld.pid")" || alive "$(pid_of "$SINGLE_DIR/slurmd.pid")"
}
check_free() {
  single_node_running && die "the single-node cluster (tests/slurm/cluster.sh) is running and uses $ETC: stop it first (tests/slurm/cluster.sh stop)" 3
  # (zombies of daemons just stopped do not count: PID 1 here is not a fast reaper)
  local p other=""
  for p in $(pgrep -x slurmctld; pgrep -x slurmd); do alive "$p" && other="$other $p"; done
  [ -z "$other" ] || die "other Slurm daemons are running (pids$other): stop them first" 3
  if ip -4 -o addr show | grep -v " $BR " | grep -q " inet $NET\."; then
    die "the test network $NET.0/24 is already used on this machine: set MN_NET" 3
  fi
}

# ------------------------------------------------------------------ configuration
save_etc() {  # once: what $ETC held before, restored by stop
  [ -e "$DIR/etc-saved" ] && return 0
  if [ -d "$ETC" ]; then cp -a "$ETC" "$DIR/etc-saved"; else mkdir "$DIR/etc-saved"; touch "$DIR/etc-absent"; fi
}
restore_etc() {
  [ -d "$DIR/etc-saved" ] || return 0
  if [ -e "$DIR/etc-absent" ]; then rm -rf "$ETC"
  else find "$ETC" -mindepth 1 -delete; cp -a "$DIR/etc-saved/." "$ETC/"; fi
  rm -rf "$DIR/etc-saved" "$DIR/etc-absent"
  log "restored $ETC"
}
write_conf() {  # n plugin-line
  local n=$1 host ver i
  host=$(hostname -s); ver=$(slurmd -V | awk '{print $2}')
  find "$ETC" -mindepth 1 -delete 2>/dev/null || mkdir -p "$ETC"
  {
    echo "# written by gpurun tests/slurm/multinode.sh (Slurm $ver, $n nodes, no cgroups)"
    cat <<EOF
ClusterName=gpurun-mn
SlurmctldHost=$host($NET.1)
$(conf_common)
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$SPOOL/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/%n.slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/%n.slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# a killed slurmd is declared down sooner (the fault tests: about 28 s after the kill, the
# ping cycle adds to it), and scancel escalates to SIGKILL sooner
SlurmdTimeout=$SLURMD_TIMEOUT
KillWait=5
# an extern step per job on each node, where the SPANK plugin keeps the job's image servers
PrologFlags=contain
PlugStackConfig=$ETC/plugstack.conf
EOF
    for i in $(seq "$n"); do
      echo "NodeName=n$i NodeAddr=$NET.$((10 + i)) CPUs=$NCPU Boards=1 SocketsPerBoard=1 CoresPerSocket=$NCPU ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } > "$ETC/slurm.conf"
  echo "$2" > "$ETC/plugstack.conf"
  chmod 644 "$ETC/slurm.conf" "$ETC/plugstack.conf"
}

# ------------------------------------------------------------------ munge, on its own socket
start_munge() {
  local m=$DIR/munge
  alive "$(pid_of "$m/munged.pid")" && return 0
  install -d -o munge -g munge -m 0755 "$m"
  if [ ! -s "$m/munge.key" ]; then
    mungekey --create --keyfile="$m/munge.key" 2>/dev/null \
      || dd if=/dev/urandom of="$m/munge.key" bs=1 count=1024 status=none
  fi
  chown munge:munge "$m/munge.key"; chmod 0400 "$m/munge.key"
  runuser -u munge -- /usr/sbin/munged --socket="$m/munge.socket" --key-file="$m/munge.key" \
    --pid-file="$m/munged.pid" --log-file="$m/munged.log" --seed-file="$m/munged.seed"
  for _ in $(seq 50); do munge -S "$m/munge.socket" -n 2>/dev/null | unmunge -S "$m/munge.socket" >/dev/null 2>&1 && break; sleep 0.1; done
  munge -S "$m/munge.socket" -n | unmunge -S "$m/munge.socket" >/dev/null || die "munged does not work, see $m/munged.log"
  log "munged started (pid $(pid_of "$m/munged.pid"), socket $m/munge.socket)"
}

# ------------------------------------------------------------------ network and nodes
make_network() {  # n
  local i
  ip link show "$BR" >/dev/null 2>&1 || {
    ip link add "$BR" type bridge
    ip addr add "$NET.1/24" dev "$BR"
    ip link set "$BR" up
  }
  for i in $(seq "$1"); do
    ip netns list | grep -qx "gpmn$i\( .*\)\?" && continue
    ip netns add "gpmn$i"
    ip link add "gpmnv$i" type veth peer name eth0 netns "gpmn$i"
    ip link set "gpmnv$i" master "$BR"; ip link set "gpmnv$i" up
    ip -n "gpmn$i" addr add "$NET.$((10 + i))/24" dev eth0
    ip -n "gpmn$i" link set eth0 up; ip -n "gpmn$i" link set lo up
  done
}
# The node's hosts file names every node (MPI, gloo and MASTER_ADDR resolve node names) and the
# controller's host, at its bridge address; its CA bundle trusts the test registry's CA.
node_files() {  # n
  local i
  { echo "127.0.0.1 localhost"; echo "$NET.1 $(hostname -s)"
    for i in $(seq "$1"); do echo "$NET.$((10 + i)) n$i"; done; } > "$DIR/hosts"
  cat /etc/ssl/certs/ca-certificates.crt "$DIR/registry/trust/ca.crt" > "$DIR/ca-certificates.crt"
  chmod 644 "$DIR/hosts" "$DIR/ca-certificates.crt"
}
# Node i's mount and UTS namespaces, kept by bind mounts in $NSD (a private mount, so they can
# be bind-mounted there). Inside: its hostname, node-local tmpfs, its hosts and CA files; it
# drops its copies of $NSD and /run/netns so that no node holds another's namespaces. The
# directories of $DIR/keep-paths (the plugin's and gpurun's, where they lie under a node-local
# directory) are bound in at their own paths before the tmpfs hides them.
make_node() {  # i
  local i=$1
  [ -e "$NSD/n$i.mnt" ] && return 0
  touch "$NSD/n$i.mnt" "$NSD/n$i.uts"
  nsenter --net="/run/netns/gpmn$i" unshare --mount="$NSD/n$i.mnt" --uts="$NSD/n$i.uts" \
    --propagation private sh -euc '
      hostname "n$1"
      umount -l "$2"; umount -l /run/netns 2>/dev/null || true
      k=0; while read -r p; do
        mkdir -p "$3/keep/$k"; mount --bind "$p" "$3/keep/$k"; k=$((k + 1))
      done < "$3/keep-paths"
      for d in /tmp /var/tmp /dev/shm; do mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$d"; done
      k=0; while read -r p; do
        mkdir -p "$p"; mount --move "$3/keep/$k" "$p"; k=$((k + 1))
      done < "$3/keep-paths"
      mount --bind "$3/hosts" /etc/hosts
      mount --bind "$3/ca-certificates.crt" /etc/ssl/certs/ca-certificates.crt' - "$i" "$NSD" "$DIR"
}
# The directories of the plugstack line's absolute paths that lie under a node-local directory
# (a checkout under /tmp): slurmd must load the plugin there, and the steps run gpurun there.
keep_paths() {  # plugin-line
  local w p
  for w in $1; do
    p=${w#*=}
    case "$p" in /tmp/*|/var/tmp/*|/dev/shm/*) dirname "$p" ;; esac
  done | sort -u > "$DIR/keep-paths"
}
make_nodes() {  # n
  local i
  if ! mountpoint -q "$NSD"; then
    mkdir -p "$NSD"; mount --bind "$NSD" "$NSD"; mount --make-private "$NSD"
  fi
  for i in $(seq "$1"); do make_node "$i"; done
  seq "$1" | sed 's/^/n/' > "$DIR/nodes"
}

# ------------------------------------------------------------------ registry
start_registry() {
  local r=$DIR/registry
  alive "$(pid_of "$r/registry.pid")" && return 0
  mkdir -p "$r/trust" "$r/data"
  if [ ! -s "$r/trust/ca.crt" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj "/CN=gpurun multinode test CA" \
      -keyout "$r/ca.key" -out "$r/trust/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$NET.1" -keyout "$r/server.key" \
      -out "$r/server.csr" 2>/dev/null
    printf 'subjectAltName=IP:%s\n' "$NET.1" > "$r/san.ext"
    openssl x509 -req -in "$r/server.csr" -CA "$r/trust/ca.crt" -CAkey "$r/ca.key" \
      -CAcreateserial -days 7 -extfile "$r/san.ext" -out "$r/server.crt" 2>/dev/null
  fi
  cat > "$r/config.yml" <<EOF
version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $r/data
  delete:
    enabled: true
http:
  addr: $NET.1:$REG_PORT
  tls:
    certificate: $r/server.crt
    key: $r/server.key
EOF
  chmod 600 "$r/ca.key" "$r/server.key"; chown -R nobody:nogroup "$r/data" "$r/server.key"
  chmod 755 "$r" "$r/trust"
  : > "$r/registry.log"; chmod 644 "$r/registry.log" "$r/trust/ca.crt"
  setpriv --reuid=nobody --regid=nogroup --clear-groups docker-registry serve "$r/config.yml" \
    >> "$r/registry.log" 2>&1 &
  echo $! > "$r/registry.pid"
  for _ in $(seq 100); do
    curl -sf --cacert "$r/trust/ca.crt" -o /dev/null "https://$NET.1:$REG_PORT/v2/" && break; sleep 0.1
  done
  curl -sf --cacert "$r/trust/ca.crt" -o /dev/null "https://$NET.1:$REG_PORT/v2/" \
    || die "the registry does not answer on $NET.1:$REG_PORT, see $r/registry.log"
  log "registry on https://$NET.1:$REG_PORT (pid $(cat "$r/registry.pid"))"
}

# ------------------------------------------------------------------ daemons
start_slurmd() {  # node
  local n=$1
  mkdir -p "$SPOOL/$n"
  in_node "$n" env SLURM_CONF="$SLURM_CONF" /usr/sbin/slurmd -N "$n" \
    || die "slurmd of $n failed, see $DIR/log/$n.slurmd.log"
}
wait_nodes() {  # node...: until each is idle, mixed or allocated
  local n st all
  for _ in $(seq $((TIMEOUT * 5))); do
    all=1
    for n in "$@"; do
      st=$(sinfo -h -n "$n" -o %T 2>/dev/null || true)
      case "$st" in idle|mixed|allocated|completing) ;; *) all=0 ;; esac
    done
    [ "$all" = 1 ] && return 0
    alive "$(pid_of "$DIR/slurmctld.pid")" || die "slurmctld died: $(tail -3 "$DIR/log/slurmctld.log")"
    sleep 0.2
  done
  sinfo -N; die "nodes not ready after ${TIMEOUT}s; see $DIR/log/"
}

start() {
  local n=${1:-}; shift || true
  [ "$(id -u)" = 0 ] || die "must run as root"
  case "$n" in [1-9]|[1-9][0-9]) ;; *) die "usage: multinode.sh start N (N nodes, 1..99)" 2 ;; esac
  local plugin
  if [ $# -gt 0 ]; then
    [ -r "$1" ] || die "SPANK plugin $1 not readable"
    plugin="required $(realpath "$1") ${*:2}"
  else
    local so=$ROOT/target/debug/libspank_gpurun.so g=$ROOT/target/debug/gpurun
    [ -r "$so" ] && [ -x "$g" ] || die "no $so or $g: cargo build --workspace first"
    plugin="required $so gpurun=$g"
  fi
  for c in slurmctld slurmd munged docker-registry openssl nsenter unshare ip; do
    command -v "$c" >/dev/null || die "$c is missing: bash tests/setup-machine.sh"
  done
  if running && [ "$(nodes | wc -l)" = "$n" ] && grep -qxF "$plugin" "$ETC/plugstack.conf" 2>/dev/null; then
    log "already running with $n nodes"; wait_nodes $(nodes); return 0
  fi
  running && { log "running with another configuration: restarting"; stop; }
  check_free
  mkdir -p "$DIR"/{ctld,log} "$SPOOL"; chmod 755 "$DIR"
  chown slurm:slurm "$DIR/ctld"
  save_etc
  write_conf "$n" "$plugin"
  start_munge
  make_network "$n"
  start_registry
  node_files "$n"
  keep_paths "$plugin"
  make_nodes "$n"
  rm -rf "${DIR:?}"/ctld/* "${SPOOL:?}"/*   # fresh state: job ids from 1, no recovered node state
  /usr/sbin/slurmctld || die "slurmctld failed, see $DIR/log/slurmctld.log"
  local node; for node in $(nodes); do start_slurmd "$node"; done
  wait_nodes $(nodes)
  local out want
  out=$(timeout 30 srun -N "$n" -t 1 hostname | sort -V | tr '\n' ' ') || die "srun -N$n hostname failed"
  want=$(nodes | tr '\n' ' ')
  [ "$out" = "$want" ] || die "srun -N$n hostname gave '$out', want '$want'"
  log "srun -N$n hostname -> $out; ready ($n nodes on $BR $NET.0/24, $DIR)"
}

# ------------------------------------------------------------------ stopping
kill_node_processes() {  # i: everything left in the node's network namespace
  local i=$1 pids left
  pids=$(ip netns pids "gpmn$i" 2>/dev/null | tr '\n' ' ')
  [ -n "$pids" ] || return 0
  log "n$i: stopping processes $pids"
  # shellcheck disable=SC2086 # one pid per word
  kill $pids 2>/dev/null || true
  for _ in $(seq 50); do
    left=""; for p in $pids; do alive "$p" && left="$left $p"; done
    [ -z "$left" ] && return 0; sleep 0.1
  done
  log "n$i: SIGKILL to$left"
  # shellcheck disable=SC2086
  kill -9 $left 2>/dev/null || true
}
stop() {
  local jobs i
  if running && jobs=$(timeout 5 squeue -h -o %i 2>/dev/null) && [ -n "$jobs" ]; then
    log "cancelling jobs: $(echo "$jobs" | tr '\n' ' ')"
    # shellcheck disable=SC2086 # one job id per word
    scancel $jobs || true
    for _ in $(seq 50); do [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  local f; for f in "$DIR"/n*.slurmd.pid; do [ -e "$f" ] && stop_pid "slurmd $(basename "$f" .slurmd.pid)" "$(pid_of "$f")"; done
  for i in $(ip netns list 2>/dev/null | awk '{print $1}' | sed -n 's/^gpmn\([0-9][0-9]*\)$/\1/p'); do
    kill_node_processes "$i"
    ip link del "gpmnv$i" 2>/dev/null || true
    ip netns del "gpmn$i"
  done
  stop_pid slurmctld "$(pid_of "$DIR/slurmctld.pid")"
  stop_pid registry "$(pid_of "$DIR/registry/registry.pid")"
  stop_pid munged "$(pid_of "$DIR/munge/munged.pid")"
  ip link show "$BR" >/dev/null 2>&1 && ip link del "$BR"
  if mountpoint -q "$NSD" 2>/dev/null; then
    for f in "$NSD"/*; do mountpoint -q "$f" && umount "$f"; done
    umount "$NSD"
  fi
  restore_etc
  rm -rf "${DIR:?}" "${SPOOL:?}"
  log "stopped; namespaces, links, mounts and $DIR removed"
}

status() {
  running || { echo "not running"; return 1; }
  sinfo -N -h -o '%N %T %c' 2>/dev/null
  ip netns list | grep '^gpmn' || true
  echo "registry: https://$NET.1:$REG_PORT (pid $(pid_of "$DIR/registry/registry.pid"))"
}

env_vars() {
  running || { echo "multinode.sh: not running" >&2; return 1; }
  echo "MN_NODES='$(nodes | tr '\n' ' ' | sed 's/ $//')'"
  echo "MN_REGISTRY=$NET.1:$REG_PORT"
  echo "MN_REGISTRY_CA_DIR=$DIR/registry/trust"
  echo "MN_REGISTRY_LOG=$DIR/registry/registry.log"
  echo "MN_CA_BUNDLE=$DIR/ca-certificates.crt"
  echo "MN_LOG_DIR=$DIR/log"
  echo "MN_PLUGSTACK=$ETC/plugstack.conf"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop ;;
  status) status ;;
  env) env_vars ;;
  exec) [ $# -ge 3 ] || die "usage: multinode.sh exec NODE CMD..." 2; shift; n=$1; shift; in_node "$n" "$@" ;;
  kill-slurmd)
    p=$(pid_of "$DIR/${2:?node}.slurmd.pid"); alive "$p" || die "no slurmd running on $2"
    kill -9 "$p"; log "$2: slurmd ($p) killed" ;;
  start-slurmd)
    alive "$(pid_of "$DIR/${2:?node}.slurmd.pid")" && die "slurmd of $2 is running"
    start_slurmd "$2"; wait_nodes "$2"; log "$2: slurmd back ($(sinfo -h -n "$2" -o %T))" ;;
  *) echo "usage: $0 start N [PLUGIN.so [ARG...]] | stop | status | env | exec NODE CMD... | kill-slurmd NODE | start-slurmd NODE" >&2; exit 2 ;;
esac

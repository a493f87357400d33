#!/bin/bash
# SIGKILL gpurun, its image server, its container's init, or every process of the bench user at
# once (as a cgroup kill does), at random times during a start and a read-heavy run, N times;
# after each, report any process left in D state or any container process left behind; at the
# end, with the server stopped, any process or FUSE connection of the user's left.
#
#   sudo benches/kill-loop.sh GPURUN [N=100]
#
# Environment: IMG [/var/tmp/gpurun-bench/debian.sqsh], BENCH_USER [gpurunbench: a user of this
# loop's own, made when missing, whose every process it kills], WORKS (the commands run in the
# container, one a line, taken in turn) [a Python start if the image has python3, and a read of
# every file under /usr], SEED [$RANDOM].
G=$1; N=${2:-100}; IMG=${IMG:-/var/tmp/gpurun-bench/debian.sqsh}
U=${BENCH_USER:-gpurunbench}
id "$U" >/dev/null 2>&1 || useradd -m -s /bin/sh "$U"
UID_=$(id -u "$U")
RANDOM=${SEED:-$RANDOM}
[ -x "$G" ] && [ -r "$IMG" ] || { echo "usage: IMG=IMAGE $0 GPURUN [N]" >&2; exit 2; }
if [ -z "${WORKS:-}" ]; then
  WORKS=$'find /usr -xdev -type f 2>/dev/null | xargs cat > /dev/null 2>&1'
  unsquashfs -l "$IMG" 2>/dev/null | grep -q 'usr/bin/python3$' &&
    WORKS=$'python3 -c "import json, email, http.client, decimal; import numpy" 2>/dev/null || true\n'"$WORKS"
fi
mapfile -t work <<<"$WORKS"
as_user() { setpriv --reuid="$UID_" --regid="$UID_" --clear-groups env -i PATH=/usr/bin:/bin HOME=/tmp GPURUN_SERVER_IDLE=1m "$@"; }
conns() { find /sys/fs/fuse/connections -mindepth 1 -maxdepth 1 -uid "$UID_" | wc -l; }
mountpoint -q /sys/fs/fuse/connections || mount -t fusectl fusectl /sys/fs/fuse/connections
as_user "$G" -q stop >/dev/null
sleep 0.5
base=$(conns)
# Processes of the user in D state now and still a second later (a read of the image from disk
# is a moment of D state, not a hang).
d_now() { for p in $(pgrep -u "$UID_"); do [ "$(awk '{print $3}' /proc/$p/stat 2>/dev/null)" = D ] && echo "$p"; done; }
in_d() {
  local first; first=$(d_now); [ -n "$first" ] || return 0
  sleep 1
  for p in $(d_now); do grep -qx "$p" <<<"$first" && echo "$p $(cat /proc/$p/comm)"; done
}
left() { pgrep -u "$UID_" -a | grep -v "gpurun serve" || true; }
hung=0; stranded=0; declare -A killed
targets=(gpurun server container all)
for i in $(seq 1 "$N"); do
  t=${targets[$((RANDOM % 4))]}; w=${work[$((i % ${#work[@]}))]}
  killed[$t]=$(( ${killed[$t]:-0} + 1 ))
  (cd /tmp && as_user "$G" exec "$IMG" sh -c "$w" >/dev/null 2>&1) &
  P=$!
  sleep "0.$((RANDOM % 9))$((RANDOM % 10))"
  gp=$(pgrep -u "$UID_" -xf "$G exec .*" -n)
  case $t in
    gpurun) [ -n "$gp" ] && kill -9 "$gp" ;;
    server) pkill -9 -u "$UID_" -f "gpurun serve --image $IMG" ;;
    container) [ -n "$gp" ] && for c in $(cat /proc/"$gp"/task/*/children 2>/dev/null); do kill -9 "$c"; done ;;
    all) pkill -9 -u "$UID_" ;;
  esac
  ok=0
  for _ in $(seq 50); do [ -z "$(left)" ] && { ok=1; break; }; sleep 0.1; done
  d=$(in_d)
  if [ -n "$d" ]; then
    hung=$((hung + 1)); echo "iteration $i ($t): in D state: $d"
    for p in $(echo "$d" | awk '{print $1}'); do head -5 /proc/$p/stack; done
  fi
  if [ $ok = 0 ]; then
    stranded=$((stranded + 1)); echo "iteration $i ($t): left behind: $(left | tr '\n' ';')"
  fi
  if [ -n "$d" ] || [ $ok = 0 ]; then
    for a in /sys/fs/fuse/connections/*/abort; do [ "$(stat -c %u "$a")" = "$UID_" ] && echo 1 > "$a"; done
    pkill -9 -u "$UID_"; sleep 0.5
  fi
  wait "$P" 2>/dev/null
done
as_user "$G" -q stop >/dev/null
for _ in $(seq 50); do [ -z "$(pgrep -u "$UID_")" ] && [ "$(conns)" -le "$base" ] && break; sleep 0.1; done
rest=$(pgrep -u "$UID_" -a)
echo "kills: gpurun ${killed[gpurun]:-0}, server ${killed[server]:-0}, container ${killed[container]:-0}, all ${killed[all]:-0}"
echo "in D state after $hung of $N; processes left after $stranded of $N"
echo "at the end: $(conns) FUSE connections (before: $base); processes left: ${rest:-none}"

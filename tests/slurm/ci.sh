#!/usr/bin/env bash
# The Slurm part of CI, as root, after `cargo build --workspace`: for each cgroup mode (v1 with
# ConstrainDevices, then none) start the single-node cluster with the SPANK plugin of this build
# and run tests/slurm/run-tests.sh as the unprivileged test user; stop the cluster at the end.
# Then the same plugin on a 3-node cluster (tests/slurm/multinode.sh) and its tests
# (tests/slurm/multinode-tests.sh, jobs as the test user).
# Prints one "N passed, N failed" line per mode; exit status 1 when a test failed.
#   GPURUN_TEST_USER (default gpuruntest), SLURM_CI_MODES (default "v1 none"),
#   SLURM_CI_MULTINODE (default 1; 0 skips the 3-node cluster)
set -uo pipefail
cd "$(dirname "$0")/../.."
U=${GPURUN_TEST_USER:-gpuruntest}
SO=$PWD/target/debug/libspank_gpurun.so
GPURUN=$PWD/target/debug/gpurun
[ "$(id -u)" = 0 ] || { echo "tests/slurm/ci.sh: run as root (it starts Slurm)" >&2; exit 2; }
[ -r "$SO" ] && [ -x "$GPURUN" ] || { echo "build first: cargo build --workspace" >&2; exit 2; }
id "$U" >/dev/null 2>&1 || useradd -m -s /bin/sh "$U"
# A cache directory another user made first, for the shared-node case of run-tests.sh.
SQUATTED=$(mktemp -d /var/tmp/gpurun-squatted.XXXXXX)
chmod 0777 "$SQUATTED"; chown "${GPURUN_OTHER_USER:-gpurunother}" "$SQUATTED" 2>/dev/null || chown nobody "$SQUATTED"
# A Debian image of this machine's apt and dpkg and a package source for it, for the package
# installs under --container-remap-root (the package's file needs root to be made).
APT_DIR=$(mktemp -d /var/tmp/gpurun-apt.XXXXXX); chmod 755 "$APT_DIR"
APT_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
if tests/fakeroot/make-apt-image.sh "$APT_DIR" "$APT_PORT" >"$APT_DIR/make.log" 2>&1 \
    && mksquashfs "$APT_DIR/rootfs" "$APT_DIR/debian.sqsh" -noappend -quiet -no-progress >/dev/null; then
  chmod -R a+rX "$APT_DIR"
else
  echo "tests/fakeroot/make-apt-image.sh failed:"; cat "$APT_DIR/make.log"
fi
# A file of the test user's in a directory of root's, which the user cannot remove: a step's
# environment names it as the job's image copy, and the step's end must leave it.
VICTIM_DIR=$(mktemp -d /var/tmp/gpurun-rootdir.XXXXXX); chmod 755 "$VICTIM_DIR"
install -o "$U" -m 0644 /dev/null "$VICTIM_DIR/keep.sqsh"
# The old fixed place of named containers, made first by another user: nothing depends on it.
install -d -o "${GPURUN_OTHER_USER:-gpurunother}" -m 0700 "/tmp/gpurun-containers-$(id -u "$U")" 2>/dev/null || true
trap 'rm -rf "$SQUATTED" "$APT_DIR" "$VICTIM_DIR" "/tmp/gpurun-containers-$(id -u "$U")"' EXIT
status=0; summary=()
for mode in ${SLURM_CI_MODES:-v1 none}; do
  echo "=== Slurm, cgroup mode $mode"
  if ! tests/slurm/cluster.sh start "$mode" "$SO" "gpurun=$GPURUN"; then
    summary+=("$mode: cluster did not start"); status=1; continue
  fi
  runuser -u "$U" -- env GPURUN="$GPURUN" SQUATTED_CACHE="$SQUATTED" APT_DIR="$APT_DIR" APT_PORT="$APT_PORT" \
    ROOT_DIR_FILE="$VICTIM_DIR/keep.sqsh" \
    tests/slurm/run-tests.sh | tee "/tmp/gpurun-slurm-tests-$mode.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  summary+=("$mode: $(tail -n 1 "/tmp/gpurun-slurm-tests-$mode.log")")
done
# slurmd reads plugstack.conf only when it starts: `gpurun doctor` says whether it has loaded
# the plugin, and says so once its line is newer than slurmd (the plugin's own line for such a
# node is table-tested in slurm/src/step_start.rs)
echo "=== Slurm, doctor"
doctor() { runuser -u "$U" -- "$GPURUN" doctor 2>&1 | grep -A1 'Slurm plugin'; }
d=0
# the line as a site leaves it: older than slurmd's start
touch -d "@$(( $(date +%s) - 3600 ))" /etc/slurm/plugstack.conf.d/zz-gpurun-ci.conf
doctor | grep -q 'slurmd (pid [0-9]*) started after' || { d=$((d + 1)); doctor; }
touch /etc/slurm/plugstack.conf.d/zz-gpurun-ci.conf
doctor | grep -q 'restart slurmd' || { d=$((d + 1)); doctor; }
[ "$d" = 0 ] || status=1
summary+=("doctor: $((2 - d)) passed, $d failed")
tests/slurm/cluster.sh stop
# Then 3 nodes in namespaces of this machine (tests/slurm/multinode.sh), without cgroups.
if [ "${SLURM_CI_MULTINODE:-1}" = 1 ]; then
  echo "=== Slurm, 3 nodes"
  t0=$(date +%s)
  # The plugin and gpurun from a directory under /tmp, of which each node has its own: the
  # cluster must bind it in, as it must a checkout there.
  BIN=$(mktemp -d /tmp/gpurun-ci-bin.XXXXXX); chmod 755 "$BIN"; cp "$SO" "$GPURUN" "$BIN/"
  if tests/slurm/multinode.sh start 3 "$BIN/${SO##*/}" "gpurun=$BIN/gpurun"; then
    GPURUN_TEST_USER=$U GPURUN=$BIN/gpurun tests/slurm/multinode-tests.sh | tee /tmp/gpurun-slurm-tests-multinode.log
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    summary+=("3 nodes: $(tail -n 1 /tmp/gpurun-slurm-tests-multinode.log)")
  else
    summary+=("3 nodes: cluster did not start"); status=1
  fi
  tests/slurm/multinode.sh stop; rm -rf "$BIN"
  summary+=("3 nodes: $(( $(date +%s) - t0 )) s with the cluster's start and stop")
fi
printf '=== Slurm tests\n'; printf '%s\n' "${summary[@]}"
exit "$status"

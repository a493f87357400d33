#!/usr/bin/env bash
# Root-only machine setup shared by tests/ci.sh and tests/demo.sh: Debian packages, the
# unprivileged test user, and /dev/fuse at mode 0666 as distributions ship it.
set -euo pipefail
TEST_USER=${TEST_USER:-gpuruntest}
# A second user, for the tests of what one user on a shared node can do to another's gpurun.
OTHER_USER=${OTHER_USER:-gpurunother}
PACKAGES=(
  squashfs-tools squashfs-tools-ng busybox-static attr fuse3 util-linux
  # --overlay's fallback where the kernel refuses overlayfs in a user namespace
  fuse-overlayfs
  docker-registry skopeo umoci apache2-utils curl openssl python3 ca-certificates
  gcc libc6-dev
  # the completion scripts are run in the shells they are for
  zsh fish
  munge slurmctld slurmd slurm-client libslurm-dev libpmix-dev
  # a real MPI program in the Slurm tests (Debian's Open MPI uses the same PMIx as Slurm)
  openmpi-bin libopenmpi-dev
  # podman:// images (tests/podman.rs): rootless podman, its uid maps
  podman uidmap
  # the multi-node Slurm tests: nodes in network namespaces (tests/slurm/multinode.sh), PyTorch
  # DDP over gloo on CPU across them (tests/slurm/torch-image.sh)
  iproute2 python3-torch
)
if [ "$(id -u)" != 0 ]; then
  echo "$0 sets up the machine (apt, a test user, /dev/fuse): run it as root" >&2
  exit 2
fi
missing=()
for p in "${PACKAGES[@]}" ${EXTRA_PACKAGES:-}; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi
for u in "$TEST_USER" "$OTHER_USER"; do
  id "$u" >/dev/null 2>&1 || useradd -m -s /bin/sh "$u"
done
chmod 0666 /dev/fuse
# The tests count live FUSE connections; /sys/fs/fuse/connections lists them only with fusectl.
grep -qw fusectl /proc/mounts || mount -t fusectl fusectl /sys/fs/fuse/connections || true

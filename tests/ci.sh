#!/usr/bin/env bash
# Every test gpurun has, on a fresh Debian 12 machine, as root (CI runs exactly this).
# Root only sets the machine up (packages, the unprivileged test user, /dev/fuse 0666 as
# distributions ship it, fake GPU nodes, Slurm); every container is run by the test user.
set -euo pipefail
cd "$(dirname "$0")/.."

TEST_USER=gpuruntest
PACKAGES=(
  squashfs-tools squashfs-tools-ng busybox-static attr fuse3 util-linux
  docker-registry skopeo apache2-utils curl python3 ca-certificates
  gcc libc6-dev
  munge slurmctld slurmd slurm-client libslurm-dev
)

if [ "$(id -u)" != 0 ]; then
  echo "tests/ci.sh sets up the machine (apt, a test user, Slurm): run it as root" >&2
  exit 2
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi

id "$TEST_USER" >/dev/null 2>&1 || useradd -m -s /bin/sh "$TEST_USER"
chmod 0666 /dev/fuse
# The test user must be able to read the build (tests run gpurun from target/).
chmod o+rx "$PWD" || true

export CARGO_TERM_COLOR=never
cargo build --workspace --all-targets --locked
cargo test --workspace --locked -- --test-threads=2

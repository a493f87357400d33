#!/usr/bin/env bash
# Every test gpurun has, on a fresh Debian 12 machine, as root (CI runs exactly this).
# Root only sets the machine up (packages, the unprivileged test user, /dev/fuse 0666 as
# distributions ship it, fake GPU nodes, Slurm); every container is run by the test user.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/setup-machine.sh
# The test users run gpurun from target/ and the Slurm scripts from the checkout: a checkout
# they cannot reach (under /root, mode 0700) is tested from a copy they can.
if ! runuser -u "${TEST_USER:-gpuruntest}" -- test -x "$PWD/tests"; then
  chmod o+rx "$PWD" 2>/dev/null || true
  if ! runuser -u "${TEST_USER:-gpuruntest}" -- test -x "$PWD/tests"; then
    copy=$(mktemp -d /var/tmp/gpurun-ci.XXXXXX); chmod 755 "$copy"
    echo "tests/ci.sh: $PWD is out of the test users' reach; testing a copy in $copy"
    tar -C "$PWD" --exclude=./target -cf - . | tar -C "$copy" -xf -
    exec bash "$copy/tests/ci.sh"
  fi
fi

export CARGO_TERM_COLOR=never
cargo fmt --all --check
cargo build --workspace --all-targets --locked
# the lints (every unsafe block says why it is sound, among them) hold in CI too
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked -- --test-threads=2
# Real Slurm (cgroup v1 ConstrainDevices, then no cgroups), with the SPANK plugin of this build.
bash tests/slurm/ci.sh

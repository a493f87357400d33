#!/usr/bin/env bash
# Every test gpurun has, on a fresh Debian 12 machine, as root (CI runs exactly this).
# Root only sets the machine up (packages, the unprivileged test user, /dev/fuse 0666 as
# distributions ship it, fake GPU nodes, Slurm); every container is run by the test user.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tests/setup-machine.sh
# The test user must be able to read the build (tests run gpurun from target/).
chmod o+rx "$PWD" || true

export CARGO_TERM_COLOR=never
cargo build --workspace --all-targets --locked
cargo test --workspace --locked -- --test-threads=2
# Real Slurm (cgroup v1 ConstrainDevices, then no cgroups), with the SPANK plugin of this build.
bash tests/slurm/ci.sh

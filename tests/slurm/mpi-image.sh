#!/usr/bin/env bash
# Build a squashfs image holding a real Open MPI program and its run-time closure, from this
# machine's own Open MPI (Debian's openmpi-bin / libopenmpi-dev, built against the same PMIx as
# Slurm's mpi_pmix plugin): no network, no root.
#
#   tests/slurm/mpi-image.sh OUT.sqsh
#
# The program (mpi-hello.c beside this script) does MPI_Init, an Allreduce and a ring
# Sendrecv, so a pass means the ranks found each other through Slurm's PMIx server and moved
# data. The image has the binary, every shared library it and Open MPI's and PMIx's plugins
# need (ldd closure), the plugin directories and Open MPI's config and help files.
set -euo pipefail
OUT=${1:?usage: mpi-image.sh OUT.sqsh}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/image-lib.sh"
command -v mpicc >/dev/null || { echo "mpi-image.sh: mpicc not found (apt-get install libopenmpi-dev openmpi-bin)" >&2; exit 2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-mpi-image.XXXXXX")
trap 'rm -rf "$W"' EXIT
R=$W/rootfs
rootfs_init "$R"
mpicc -O2 -o "$R/usr/bin/mpi-hello" "$HERE/mpi-hello.c"
echo mpi > "$R/etc/gpurun-mpi-marker"

# Open MPI and PMIx load their components from these directories at run time.
plugins=("$ML/openmpi" "$ML/pmix2" "$ML/hwloc")
for d in "${plugins[@]}" /usr/share/openmpi /usr/share/pmix /etc/openmpi; do
    [ -e "$d" ] || continue
    mkdir -p "$R$(dirname "$d")"; cp -a "$d" "$R$(dirname "$d")/"
done
mapfile -t objs < <(echo "$R/usr/bin/mpi-hello"; find "${plugins[@]}" -name '*.so*' -type f 2>/dev/null)
copy_libs "$R" "${objs[@]}" >/dev/null
squash "$R" "$OUT"

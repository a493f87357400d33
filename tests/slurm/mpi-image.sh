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
# need (ldd closure), the plugin directories and Open MPI's config and help files, laid out
# merged-/usr like Debian, with busybox as /usr/bin/sh.
set -euo pipefail
OUT=${1:?usage: mpi-image.sh OUT.sqsh}
HERE=$(cd "$(dirname "$0")" && pwd)
command -v mpicc >/dev/null || { echo "mpi-image.sh: mpicc not found (apt-get install libopenmpi-dev openmpi-bin)" >&2; exit 2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-mpi-image.XXXXXX")
trap 'rm -rf "$W"' EXIT
R=$W/rootfs
ML=/usr/lib/x86_64-linux-gnu
mkdir -p "$R"/usr/{bin,lib64,lib/x86_64-linux-gnu} "$R"/{etc,tmp,proc,sys,dev,root,home}
ln -s usr/bin "$R/bin"; ln -s usr/lib "$R/lib"; ln -s usr/lib64 "$R/lib64"

mpicc -O2 -o "$R/usr/bin/mpi-hello" "$HERE/mpi-hello.c"
cp /bin/busybox "$R/usr/bin/"; ln -s busybox "$R/usr/bin/sh"
echo mpi > "$R/etc/gpurun-mpi-marker"
echo 'root:x:0:0:root:/root:/bin/sh' > "$R/etc/passwd"; echo 'root:x:0:' > "$R/etc/group"

# Open MPI and PMIx load their components from these directories at run time.
plugins=("$ML/openmpi" "$ML/pmix2" "$ML/hwloc")
for d in "${plugins[@]}" /usr/share/openmpi /usr/share/pmix /etc/openmpi; do
    [ -e "$d" ] || continue
    mkdir -p "$R$(dirname "$d")"; cp -a "$d" "$R$(dirname "$d")/"
done
# Every library the program and the plugins need, under the name the loader asks for (the
# soname ldd prints), in the multiarch directory; the loader itself where PT_INTERP points.
mapfile -t objs < <(echo "$R/usr/bin/mpi-hello"; find "${plugins[@]}" -name '*.so*' -type f 2>/dev/null)
ldd "${objs[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
while read -r lib; do
    [ -e "$R$ML/$(basename "$lib")" ] || cp -L "$lib" "$R$ML/"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$R/usr/lib64/"

mksquashfs "$R" "$OUT.tmp" -noappend -quiet -no-progress -all-root -comp zstd >/dev/null
mv "$OUT.tmp" "$OUT"

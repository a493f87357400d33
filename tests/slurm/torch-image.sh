#!/usr/bin/env bash
# Build a squashfs image with Python and PyTorch (CPU, the gloo backend) from this machine's
# own Debian packages (python3-torch): no network, no root.
#
#   tests/slurm/torch-image.sh OUT.sqsh
#
# What goes in is what a DistributedDataParallel run needs, found by doing one here: a
# one-rank gloo process group, DDP around a layer, a backward pass and an optimizer step.
# The image gets the Python packages that run imported (whole), the standard library, the ldd
# closure of the interpreter, of bash and of every extension module, and the libraries the run
# loaded besides; `python` is python3, as in PyTorch images.
set -euo pipefail
OUT=${1:?usage: torch-image.sh OUT.sqsh}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/image-lib.sh"
PY=/usr/bin/python3
"$PY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null \
    || { echo "torch-image.sh: no PyTorch with gloo for $PY (apt-get install python3-torch)" >&2; exit 2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-torch-image.XXXXXX")
trap 'rm -rf "$W"' EXIT
R=$W/rootfs
rootfs_init "$R"

# The files of the modules a DDP step imports ("py PATH") and the libraries it maps ("so PATH").
"$PY" - "$W" >"$W/used" <<'PY'
import os, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo", init_method=f"file://{sys.argv[1]}/store", rank=0, world_size=1)
model = DDP(torch.nn.Linear(4, 2))
torch.optim.SGD(model.parameters(), lr=0.1).zero_grad()
model(torch.randn(3, 4)).sum().backward()
dist.destroy_process_group()
for line in open("/proc/self/maps"):
    path = line.split()[-1]
    if path.startswith("/") and ".so" in path:
        print("so", path)
for m in list(sys.modules.values()):
    if getattr(m, "__file__", None):
        print("py", os.path.realpath(m.__file__))
PY

stdlib=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')   # /usr/lib/python3.11
# the standard library without its tests, IDLE, tkinter and the build config
tar -C / --exclude="${stdlib#/}/test" --exclude="${stdlib#/}/idlelib" --exclude="${stdlib#/}/tkinter" \
    --exclude="${stdlib#/}/config-*" --exclude="${stdlib#/}/ensurepip" -cf - "${stdlib#/}" | tar -C "$R" -xf -
[ -d "/etc/$(basename "$stdlib")" ] && cp -a "/etc/$(basename "$stdlib")" "$R/etc/"
# each top-level package or module imported from outside the standard library, whole
sed -n 's/^py //p' "$W/used" | grep -E '/(dist|site)-packages/' |
    sed -E 's,^(.*/(dist|site)-packages)/([^/]+).*,\1/\3,' | sort -u |
while read -r top; do
    mkdir -p "$R$(dirname "$top")"; cp -a "$top" "$R$(dirname "$top")/"
done
# libraries: the closure of the interpreter, bash and every extension module, under their
# sonames; then those the run mapped that are not in it (dlopen()ed), at their own paths
cp -L "$PY" "$R/usr/bin/python3"; ln -s python3 "$R/usr/bin/python"
cp -L /bin/bash "$R/usr/bin/bash"
mapfile -t objs < <(echo "$R/usr/bin/python3" "$R/usr/bin/bash"; find "$R/usr/lib" -name '*.so*' -type f)
copy_libs "$R" "${objs[@]}" | sort -u >"$W/closure"
sed -n 's/^so //p' "$W/used" | sort -u | while read -r so; do
    grep -qxF "$(realpath "$so")" "$W/closure" && continue
    mkdir -p "$R$(dirname "$so")"; [ -e "$R$so" ] || cp -L "$so" "$R$so"
done
# Symlinks of the copied packages to a library the image has (torch/lib/libX.so ->
# ../../../../x86_64-linux-gnu/libX.so.1.13 -> libX.so.1.13.0): their chain as on this machine.
{ sed -n 's/^so //p' "$W/used" | xargs realpath; cat "$W/closure"; } | sort -u >"$W/libs"
find "$R" -xtype l | while read -r l; do
    p=${l#"$R"}
    grep -qxF "$(realpath "$p")" "$W/libs" || continue
    while [ -L "$p" ]; do
        t=$(readlink "$p"); case $t in /*) ;; *) t=$(realpath -s "$(dirname "$p")/$t") ;; esac
        mkdir -p "$R$(dirname "$t")"
        [ -e "$R$t" ] || [ -L "$R$t" ] || cp -P "$t" "$R$t"
        p=$t
    done
done
echo torch > "$R/etc/gpurun-torch-marker"
squash "$R" "$OUT"

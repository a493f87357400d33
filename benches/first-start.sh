#!/usr/bin/env bash
# First start of a never-seen image (issue 35): the time from the command to the first line of
# output of `python3 -c 'import torch; print(torch.__version__)'` (and of `python3 -c 'print(1)'`)
# from a registry on loopback, with nothing of the image on the machine, side by side:
#
#   sudo NEW=target/release/gpurun benches/first-start.sh            # REPS=3, both commands
#   sudo NEW=… REPS=5 TOOLS="new old" CMDS=torch benches/first-start.sh
#   GPU machine (no network): benches/device-bundle.sh here, then there
#   NEW=… BUNDLE=.fsbench IMAGE=venv BENCH_USER=ubuntu benches/first-start.sh   (device-run.sh)
#
# Tools, each in an empty work directory (its cache, storage, output) removed after it, the page
# cache dropped before it (sync; echo 3 > drop_caches), run as BENCH_USER:
#   old     OLD pull docker://REF -o x.sqsh, then OLD exec x.sqsh CMD (gpurun before issue 35)
#   new     NEW exec docker://REF CMD (the cache is GPURUN_CACHEDIR in the work directory)
#   prev    the same with PREV, another build (an A/B of two builds in one run)
#   podman  podman pull, then podman run --rm --network none --runtime runc (rootless, storage in
#           the work directory; runc, as crun refuses hybrid cgroup hierarchies)
#   ch      skopeo copy to an OCI layout, umoci unpack --rootless, mksquashfs -comp zstd
#           -Xcompression-level 3 (gpurun's level: the same compression work), ch-run x.sqsh
#           (what enroot and Apptainer do)
#   floor   all the image's blobs read from the registry to nowhere (in parallel, cold), plus a
#           warm start of CMD: NEW exec of a finished .sqsh of the image, its second start
# Each rep runs every command with every tool, in an order rotated by one each rep. A run's
# times: to its first line of stdout (which must be the expected one), and to its command's exit
# (a background conversion that outlives the command is not waited for; anything of the tool left
# is then ended). Summary: medians, min–max, NEW / each other tool.
#
# Images (made once, kept in BENCH_DIR):
#   IMAGE=torch  benches/torch.sh's bench/torch:latest (3 layers, 3.26 GB gzip, the CUDA wheels
#                layer 2.2 GB); torch.sh is run to make it if it is missing
#   IMAGE=venv   made here from VENV's PyTorch (a GPU machine without network): layer 1 the base
#                interpreter, its standard library and the host libraries it and torch load
#                (ldd); layer 2 the site-packages entries `import torch` loads (torch, nvidia,
#                triton…), placed in the base interpreter's own site-packages; layer 3 more of
#                VENV's packages, largest first, up to REST_MB of tar; gzip -6 (pigz if found,
#                one member either way), pushed to a docker-registry on loopback
#
# Environment [default]: NEW [target/release/gpurun], OLD [.bench/gpurun-old], PREV [none], REPS [3], TOOLS
# [old new podman ch floor], CMDS [torch py], IMAGE [torch], VENV [/opt/torch/.venv], REST_MB
# [2000], BUNDLE [none: peers from PATH; else a folder made by device-bundle.sh], TIMEOUT [900 s
# a run], MACHINE [h100x1-style name from nvidia-smi, else Ncpu], RESULTS [benches/results/latest],
# CONTINUE [0; 1: add this run's reps, numbered after the last run's of this IMAGE, to that run's
# results and summarize them all: a set split over several calls of a time-limited machine],
# BENCH_DIR [/var/tmp/gpurun-bench], BENCH_USER [gpuruntest]. Writes
# RESULTS/first-start-MACHINE.txt (every run, environment) and .md (the tables), and the raw TSV in
# BENCH_DIR/first-start/results-IMAGE-<time>/. Per-rep ratios pair runs of the same rep. Holds /tmp/gpurun-itest.lock (the bench user is shared
# with the integration tests). Disk: image + registry + up to 3× the image during a run.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH

NEW=${NEW:-target/release/gpurun}
OLD=${OLD:-.bench/gpurun-old}
PREV=${PREV:-}
REPS=${REPS:-3}
read -r -a TOOLS <<<"${TOOLS:-old new podman ch floor}"
read -r -a CMDS <<<"${CMDS:-torch py}"
IMAGE=${IMAGE:-torch}
VENV=${VENV:-/opt/torch/.venv}
REST_MB=${REST_MB:-2000}
TIMEOUT=${TIMEOUT:-900}
RESULTS=${RESULTS:-$HERE/results/latest}
BENCH_DIR=${BENCH_DIR:-/var/tmp/gpurun-bench}
BENCH_USER=${BENCH_USER:-gpuruntest}
if [ -n "${BUNDLE:-}" ]; then
    BUNDLE=$(cd "$BUNDLE" && pwd)
    PATH=$BUNDLE/bin:$PATH
fi
if [ -z "${MACHINE:-}" ]; then
    gpus=$(nvidia-smi -L 2>/dev/null || true)
    if [ -n "$gpus" ]; then
        MACHINE=$(echo "$gpus" | grep -o -m1 '[HABL][0-9]\{2,3\}' | tr A-Z a-z)x$(echo "$gpus" | grep -c '^GPU')
    else
        MACHINE=$(nproc)cpu
    fi
fi

[ "$(id -u)" = 0 ] || die "run as root (setup only; measured commands run as $BENCH_USER)"
id "$BENCH_USER" >/dev/null 2>&1 || die "no user $BENCH_USER (bash tests/setup-machine.sh)"
[ -x "$NEW" ] || die "no gpurun at NEW=$NEW (cargo build --release, or set NEW)"
[ -x "$OLD" ] || die "no gpurun at OLD=$OLD"
case " ${TOOLS[*]} " in *" prev "*) [ -x "$PREV" ] || die "tool prev: no gpurun at PREV=$PREV" ;; esac
for t in python3 runuser docker-registry skopeo umoci mksquashfs ch-run podman runc tar; do
    command -v "$t" >/dev/null || die "$t not found (apt-get install it; charliecloud-runtime has ch-run)"
done

FS=$BENCH_DIR/first-start
BIN=$FS/bin
W=$FS/work
OUTDIR=$FS/results-$IMAGE-$(date -u +%Y%m%dT%H%M%SZ)
REP0=0
if [ "${CONTINUE:-0}" = 1 ]; then
    OUTDIR=$(ls -d "$FS/results-$IMAGE-"* 2>/dev/null | tail -1)
    [ -n "$OUTDIR" ] || die "CONTINUE=1: no earlier run of IMAGE=$IMAGE in $FS"
    REP0=$(awk -F'\t' 'NR > 1 && $1 > m {m = $1} END {print m + 0}' "$OUTDIR/first-start.tsv")
fi
mkdir -p "$FS" "$BIN" "$OUTDIR" "$RESULTS"
chmod 755 "$BENCH_DIR" "$FS" "$BIN"
chmod 666 /dev/fuse
install -m 755 "$NEW" "$BIN/gpurun-new"
install -m 755 "$OLD" "$BIN/gpurun-old"
[ -z "$PREV" ] || install -m 755 "$PREV" "$BIN/gpurun-prev"
TSV=$OUTDIR/first-start.tsv
LOG=$OUTDIR/first-start.txt
REG_PID=
cleanup() {
    [ -z "$REG_PID" ] || kill "$REG_PID" 2>/dev/null || true
    end_tools
    rm -rf "$W"
}
trap cleanup EXIT

# first-line ERRFILE TIMEOUT CMD...: runs CMD, stdout read here; prints microseconds to its first
# line and to CMD's exit, its status and the line. CMD's stderr goes to ERRFILE. Whatever keeps
# stdout open after CMD exits (a background server) is not waited for.
cat >"$BIN/first-line" <<'PY'
#!/usr/bin/env python3
import os, signal, subprocess, sys, threading, time
err, limit, cmd = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
t0 = time.monotonic()
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(err, "ab"), start_new_session=True)
threading.Timer(limit, lambda: os.killpg(p.pid, signal.SIGKILL)).start()
line = p.stdout.readline()
t1 = time.monotonic()
threading.Thread(target=p.stdout.read, daemon=True).start()
rc = p.wait()
t2 = time.monotonic()
first = int((t1 - t0) * 1e6) if line else -1
print(first, int((t2 - t0) * 1e6), rc, line.decode(errors="replace").strip()[:60] or "-", flush=True)
os._exit(0)
PY
# read-blobs URL...: every URL read to nowhere, all at once; prints microseconds and bytes.
cat >"$BIN/read-blobs" <<'PY'
#!/usr/bin/env python3
import sys, threading, time, urllib.request
total = [0]
def get(url):
    with urllib.request.urlopen(url) as r:
        while b := r.read(1 << 20):
            total[0] += len(b)
t0 = time.monotonic()
ts = [threading.Thread(target=get, args=(u,)) for u in sys.argv[1:]]
for t in ts: t.start()
for t in ts: t.join()
print(int((time.monotonic() - t0) * 1e6), total[0])
PY
chmod 755 "$BIN/first-line" "$BIN/read-blobs"

# --- the image ---------------------------------------------------------------------------------
# venv_image DIR: IMAGE=venv's OCI layout in DIR/oci (tag t), from VENV (see the header).
venv_image() {
    local d=$1 py=$VENV/bin/python3 z="gzip -6"
    command -v pigz >/dev/null && z="pigz -6"
    rm -rf "$d"; mkdir -p "$d/base" "$d/oci"
    [ -x "$py" ] || die "no python at $py (set VENV)"
    echo "== image from $VENV: layers (once)"
    # What import torch loads, under the venv's site-packages: top-level entries; and the rest.
    "$py" - "$d" <<'PY'
import json, os, re, sys, sysconfig, subprocess
import torch  # noqa: F401  (what it loads is what the image must hold)
d = sys.argv[1]
site = sysconfig.get_paths()["purelib"]
base = os.path.realpath(sys._base_executable)
need = set()
paths = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
paths += [l.split()[-1] for l in open("/proc/self/maps") if "/" in l]
for p in paths:
    if p and p.startswith(site + "/"):
        need.add(os.path.relpath(p, site).split("/")[0])
names = os.listdir(site)
need |= {n for n in names if n.endswith((".dist-info", ".pth")) or (n.endswith(".py") and os.path.isfile(os.path.join(site, n)))}
need.discard("__pycache__")
info = json.loads(subprocess.check_output([base, "-I", "-c",
    "import json, sys, sysconfig; p = sysconfig.get_paths(); "
    "print(json.dumps({'stdlib': p['stdlib'], 'platstdlib': p['platstdlib'], 'purelib': p['purelib'], 'exe': sys.executable}))"]))
info.update(site=site, base=base, need=sorted(need), rest=sorted(set(names) - need - {"__pycache__"}))
json.dump(info, open(f"{d}/info.json", "w"), indent=1)
PY
    local site purelib
    site=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["site"])' "$d/info.json")
    purelib=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["purelib"])' "$d/info.json")
    # Layer 1: the interpreter, its standard library and every host library that it, its
    # extension modules and the torch layer's libraries load, at their real directories.
    python3 - "$d" <<'PY'
import json, os, shutil, subprocess, sys
d = sys.argv[1]; info = json.load(open(f"{d}/info.json")); root = f"{d}/base"
site = info["site"]
def put(src):  # copy src (links followed) to its real directory's place in root
    dst = root + os.path.join(os.path.realpath(os.path.dirname(src)), os.path.basename(src))
    if not os.path.exists(dst):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)
objs = [info["base"], shutil.which("dash") or "/bin/sh"]
skip = ("test", "__pycache__", "idlelib", "tkinter", "turtledemo", "dist-packages", "site-packages")
for top in (info["stdlib"], info["platstdlib"]):
    if not os.path.isdir(root + top):  # the host's own packages stay out: only the venv's go in
        shutil.copytree(top, root + top, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*skip))
    for dp, ds, fs in os.walk(top):
        ds[:] = [x for x in ds if x not in skip]
        objs += [os.path.join(dp, f) for f in fs if ".so" in f]
for n in info["need"]:
    for dp, _, fs in os.walk(os.path.join(site, n)):
        objs += [os.path.join(dp, f) for f in fs if ".so" in f]
libs = set()
env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
for i in range(0, len(objs), 200):
    out = subprocess.run(["ldd"] + objs[i:i + 200], capture_output=True, text=True, env=env).stdout
    for l in out.splitlines():
        w = l.split()
        p = w[2] if len(w) >= 4 and w[1] == "=>" else (w[0] if w and w[0].startswith("/") else None)
        # the driver's libraries are the launcher's to bind, never the image's
        if (p and os.path.isabs(p) and not p.startswith((site + "/", "/usr/local/nvidia", "/usr/local/cuda"))
                and not os.path.basename(p).startswith(("libcuda.", "libnvidia-")) and os.path.exists(p)):
            libs.add(p)
for p in sorted(libs) + objs[:2]:
    put(p)
for link, to in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")):
    if os.path.islink("/" + link) and not os.path.lexists(f"{root}/{link}"):
        os.makedirs(f"{root}/{to}", exist_ok=True); os.symlink(to, f"{root}/{link}")
real_base = root + os.path.join(os.path.realpath(os.path.dirname(info["base"])), os.path.basename(info["base"]))
for name in ("python3", "python"):
    os.makedirs(f"{root}/usr/local/bin", exist_ok=True)
    if not os.path.lexists(f"{root}/usr/local/bin/{name}"):
        os.symlink(real_base[len(root):], f"{root}/usr/local/bin/{name}")
dash = root + os.path.join(os.path.realpath(os.path.dirname(objs[1])), os.path.basename(objs[1]))
if not os.path.lexists(f"{root}/usr/bin/sh"):
    os.makedirs(f"{root}/usr/bin", exist_ok=True); os.symlink(os.path.basename(dash), f"{root}/usr/bin/sh")
os.makedirs(root + info["purelib"], exist_ok=True)
for dd in ("dev", "proc", "sys", "tmp", "root", "home", "etc", "var/tmp", "run"):
    os.makedirs(f"{root}/{dd}", exist_ok=True)
os.chmod(f"{root}/tmp", 0o1777); os.chmod(f"{root}/var/tmp", 0o1777)
open(f"{root}/etc/passwd", "w").write("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n")
open(f"{root}/etc/group", "w").write("root:x:0:\nnogroup:x:65534:\n")
PY
    local tarx=(--owner=0 --group=0 --numeric-owner --sort=name)
    tar -C "$d/base" "${tarx[@]}" -cf - . | $z >"$d/1.tar.gz"
    rm -rf "$d/base"
    local dest=${purelib#/}
    python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["need"]))' "$d/info.json" >"$d/need"
    tar -C "$site" "${tarx[@]}" --transform "s,^,$dest/," -cf - -T "$d/need" | $z >"$d/2.tar.gz"
    # Layer 3: more of the venv (an NGC image holds more than torch), largest first up to REST_MB.
    python3 - "$d" "$REST_MB" <<'PY' >"$d/rest"
import json, os, sys
info = json.load(open(f"{sys.argv[1]}/info.json")); cap = int(sys.argv[2]) << 20
def size(p):
    if not os.path.isdir(p) or os.path.islink(p):
        return os.lstat(p).st_size
    return sum(os.lstat(os.path.join(dp, f)).st_size for dp, _, fs in os.walk(p) for f in fs)
sized = sorted(((size(os.path.join(info["site"], n)), n) for n in info["rest"]), reverse=True)
total = 0
for s, n in sized:
    if total + s <= cap:
        total += s; print(n)
PY
    if [ -s "$d/rest" ]; then
        tar -C "$site" "${tarx[@]}" --transform "s,^,$dest/," -cf - -T "$d/rest" | $z >"$d/3.tar.gz"
    fi
    python3 - "$d" <<'PY'
import gzip, hashlib, json, os, sys, zlib
d = sys.argv[1]; L = f"{d}/oci"; os.makedirs(f"{L}/blobs/sha256")
def put(data=None, path=None):
    h = hashlib.sha256()
    if path:
        with open(path, "rb") as f:
            for b in iter(lambda: f.read(1 << 22), b""): h.update(b)
        os.rename(path, f"{L}/blobs/sha256/{h.hexdigest()}")
    else:
        h.update(data); open(f"{L}/blobs/sha256/{h.hexdigest()}", "wb").write(data)
    return {"digest": f"sha256:{h.hexdigest()}", "size": os.path.getsize(f"{L}/blobs/sha256/{h.hexdigest()}")}
layers, diffs = [], []
for n in (1, 2, 3):
    p = f"{d}/{n}.tar.gz"
    if not os.path.exists(p): continue
    h, z = hashlib.sha256(), zlib.decompressobj(31)
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 22), b""): h.update(z.decompress(b))
    diffs.append(f"sha256:{h.hexdigest()}")
    layers.append(dict(put(path=p), mediaType="application/vnd.oci.image.layer.v1.tar+gzip"))
cfg = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": diffs},
       "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["python3"]}}
c = dict(put(json.dumps(cfg).encode()), mediaType="application/vnd.oci.image.config.v1+json")
m = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json", "config": c, "layers": layers}
md = put(json.dumps(m).encode())
open(f"{L}/oci-layout", "w").write('{"imageLayoutVersion":"1.0.0"}')
json.dump({"schemaVersion": 2, "manifests": [dict(md, mediaType=m["mediaType"],
           annotations={"org.opencontainers.image.ref.name": "t"})]}, open(f"{L}/index.json", "w"))
PY
}

IMG_DIR=$FS/image-$IMAGE
case $IMAGE in
torch)
    if [ ! -d "$BENCH_DIR/torch/registry" ]; then
        SUITE=none OUT=$OUTDIR/torch-setup BENCH_DIR=$BENCH_DIR GPURUN=$NEW "$HERE/torch.sh"
    fi
    STORE=$BENCH_DIR/torch/registry
    ;;
venv)
    STORE=$IMG_DIR/registry
    if [ ! -d "$STORE" ]; then
        venv_image "$IMG_DIR/build"
        mkdir -p "$STORE.tmp"
        start_registry "$STORE.tmp" "$IMG_DIR"
        skopeo --insecure-policy copy --quiet --dest-tls-verify=false "oci:$IMG_DIR/build/oci:t" "docker://$REG/bench/torch:latest"
        kill "$REG_PID"; wait "$REG_PID" 2>/dev/null || true; REG_PID=
        mv "$STORE.tmp" "$STORE"
        rm -rf "$IMG_DIR/build"
    fi
    ;;
*) die "IMAGE=$IMAGE: torch or venv" ;;
esac
mkdir -p "$IMG_DIR"
start_registry "$STORE" "$IMG_DIR"
REF=$REG/bench/torch:latest
MANIFEST=$(python3 -c 'import sys, urllib.request as u; r = u.Request(sys.argv[1], headers={"Accept": "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"}); print(u.urlopen(r).read().decode())' \
    "http://$REG/v2/bench/torch/manifests/latest")
read -r -a BLOBS < <(echo "$MANIFEST" | python3 -c 'import json, sys; m = json.load(sys.stdin); print(" ".join(sys.argv[1] + x["digest"] for x in [m["config"]] + m["layers"]))' "http://$REG/v2/bench/torch/blobs/")
IMAGE_LINE=$(echo "$MANIFEST" | python3 -c 'import json, sys; l = [x["size"] for x in json.load(sys.stdin)["layers"]]; print(f"{len(l)} layers, {sum(l) / 1e9:.2f} GB gzip (" + ", ".join(f"{x / 1e9:.2f}" for x in l) + " GB)")')

# --- the runs ----------------------------------------------------------------------------------
declare -A COMMAND=([torch]="python3 -c 'import torch; print(torch.__version__)'" [py]="python3 -c 'print(1)'")
declare -A EXPECT=([torch]='^[0-9]+\.[0-9]+' [py]='^1$')
declare -A LABEL=([torch]="import torch" [py]="print(1)")
PODMAN_CONF=$FS/containers.conf
# podman: the bundle's conmon and runc where carried; seccomp as Debian ships it.
{
    echo "[engine]"
    echo 'cgroup_manager = "cgroupfs"'
    echo 'events_logger = "file"'
    if [ -n "${BUNDLE:-}" ]; then
        echo "conmon_path = [\"$BUNDLE/bin/conmon\"]"
        echo "[engine.runtimes]"
        echo "runc = [\"$BUNDLE/bin/runc\"]"
        echo "[containers]"
        echo "seccomp_profile = \"$BUNDLE/share/seccomp.json\""
    fi
} >"$PODMAN_CONF"
chmod 644 "$PODMAN_CONF"
POLICY=${BUNDLE:+$BUNDLE/share/policy.json}
POLICY=${POLICY:-/etc/containers/policy.json}

tool_cmd() { # tool_cmd TOOL CMDKEY: the shell command of a run, in $W as the user
    local c=${COMMAND[$2]} p="podman --root $W/root --runroot $W/runroot --tmpdir $W/tmp --storage-driver overlay"
    case $1 in
    old) echo "$BIN/gpurun-old pull -q docker://$REF -o $W/x.sqsh && exec $BIN/gpurun-old exec $W/x.sqsh $c" ;;
    new) echo "exec $BIN/gpurun-new exec docker://$REF $c" ;;
    prev) echo "exec $BIN/gpurun-prev exec docker://$REF $c" ;;
    podman) echo "$p pull -q --signature-policy $POLICY --tls-verify=false $REF >/dev/null &&
                  exec $p run --rm --network none --runtime runc --pull never $REF $c" ;;
    ch) echo "skopeo --insecure-policy copy --quiet --src-tls-verify=false docker://$REF oci:$W/oci:t &&
              umoci unpack --rootless --image $W/oci:t $W/bundle >/dev/null &&
              mksquashfs $W/bundle/rootfs $W/x.sqsh -comp zstd -Xcompression-level 3 -noappend -quiet -no-progress >/dev/null &&
              exec ch-run $W/x.sqsh -- $c" ;;
    floor) echo "exec $BIN/gpurun-new exec $IMG_DIR/ref.sqsh $c" ;;
    esac
}
user_env() { # the environment of every run: all per-user state in the work directory
    echo PATH="${BUNDLE:+$BUNDLE/bin:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" USER="$BENCH_USER" HOME="$W/home" XDG_CACHE_HOME="$W/cache-xdg" \
        XDG_CONFIG_HOME="$W/config" XDG_DATA_HOME="$W/data" XDG_RUNTIME_DIR="$W/xdg" TMPDIR="$W/tmp" \
        GPURUN_CACHEDIR="$W/cache" CONTAINERS_CONF="$PODMAN_CONF"
}
timed() { # timed SHELLCMD: "first_us exit_us rc line" of SHELLCMD as the user; stderr in $W.err
    local e
    read -r -a e < <(user_env)
    (cd / && "$BIN/first-line" "$W.err" "$TIMEOUT" runuser -u "$BENCH_USER" -- env -i "${e[@]}" bash -c "$1") ||
        echo "-1 -1 98 first-line-failed"
}
# end_tools: whatever of the tools outlives a run (image servers of the bench's gpurun copies,
# podman's pause process): TERM, then KILL after 10 s. Only processes of those files or pid files.
end_tools() {
    local pids p e f i
    for f in "$W"/xdg/libpod/tmp/pause.pid "$W"/tmp/pause.pid; do
        [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
    done
    for i in $(seq 100); do
        pids=
        for p in /proc/[0-9]*; do
            e=$(readlink "$p/exe" 2>/dev/null) || continue
            case ${e% (deleted)} in "$BIN"/gpurun-old | "$BIN"/gpurun-new | "$BIN"/gpurun-prev) pids+=" ${p#/proc/}" ;; esac
        done
        [ -n "$pids" ] || return 0
        if [ "$i" = 1 ]; then kill -TERM $pids 2>/dev/null; elif [ "$i" = 100 ]; then kill -KILL $pids 2>/dev/null; fi
        sleep 0.1
    done
}
fresh_work() {
    end_tools
    rm -rf "$W"
    install -d -o "$BENCH_USER" -m 700 "$W"
    (cd / && runuser -u "$BENCH_USER" -- mkdir -p "$W/home" "$W/tmp" "$W/xdg" "$W/cache" "$W/config" "$W/data")
}
secs() { if [ "$1" -lt 0 ]; then echo -; else awk "BEGIN{printf \"%.2f\", $1 / 1e6}"; fi; }
run_one() { # run_one REP TOOL CMDKEY: one timed run, a line in TSV and LOG
    local rep=$1 t=$2 k=$3 first exit rc line extra=
    fresh_work
    rm -f "$W.err"
    drop_caches
    if [ "$t" = floor ]; then
        local blob_us bytes
        read -r blob_us bytes < <((cd / && runuser -u "$BENCH_USER" -- "$BIN/read-blobs" "${BLOBS[@]}"))
        timed "$(tool_cmd floor "$k")" >/dev/null # the first start: the image now warm
        read -r first exit rc line < <(timed "$(tool_cmd floor "$k")")
        [ "$first" -lt 0 ] || first=$((first + blob_us))
        exit=$((exit + blob_us))
        extra=" (blobs $((bytes / 1000000)) MB in $(awk "BEGIN{printf \"%.2f\", $blob_us / 1e6}") s)"
    else
        read -r first exit rc line < <(timed "$(tool_cmd "$t" "$k")")
    fi
    # no first line, or not the expected one: a failed run
    if [ "$rc" = 0 ] && { [ "$first" -lt 0 ] || ! [[ $line =~ ${EXPECT[$k]} ]]; }; then rc=99; fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rep" "$t" "$k" "$first" "$exit" "$rc" "$line" >>"$TSV"
    printf 'rep %s %-6s %-12s first line %7s s, exit %7s s, rc %s, "%s"%s\n' "$rep" "$t" "${LABEL[$k]}" \
        "$(secs "$first")" "$(secs "$exit")" "$rc" "$line" "$extra" | tee -a "$LOG"
    [ "$rc" = 0 ] || tail -3 "$W.err" 2>/dev/null | sed 's/^/    /' | tee -a "$LOG"
    { echo "== rep $rep $t $k: rc $rc"; cat "$W.err" 2>/dev/null; } >>"$OUTDIR/stderr.log"
    rm -f "$W.err"
    end_tools
    rm -rf "$W"
}

echo "== waiting for /tmp/gpurun-itest.lock (the bench user's processes are ended between runs)"
exec 8>/tmp/gpurun-itest.lock
flock 8
{
    [ "$REP0" = 0 ] || echo "# continued, reps after $REP0:"
    echo "# first-start: $(date -u '+%F %T UTC'); $(uname -r); $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); $(free -g | awk '/Mem:/{print $2}') GiB; machine $MACHINE"
    echo "# uptime before: $(uptime)"
    echo "# new: $NEW ($("$BIN/gpurun-new" version | awk '/^commit/{print $2}'), sha256 $(sha256sum "$BIN/gpurun-new" | cut -c1-12)); old: $OLD ($("$BIN/gpurun-old" version | awk '/^commit/{print $2}'))${PREV:+; prev: $PREV ($("$BIN/gpurun-prev" version | awk '/^commit/{print $2}'))}"
    echo "# image: $IMAGE, bench/torch:latest, $IMAGE_LINE"
    echo "# peers: $(skopeo --version); umoci $(umoci --version | awk '{print $NF}'); $(mksquashfs -version 2>&1 | head -1); ch-run $(USER=root ch-run --version 2>&1); $(podman --version)"
    echo "# reps $REPS, tools ${TOOLS[*]}, order rotated each rep; commands: $(for k in "${CMDS[@]}"; do printf '%s; ' "${COMMAND[$k]}"; done)"
} | tee -a "$LOG"
[ "$REP0" != 0 ] || printf 'rep\ttool\tcmd\tfirst_us\texit_us\trc\tline\n' >"$TSV"

if [ ! -f "$IMG_DIR/ref.sqsh" ]; then
    echo "== the finished .sqsh for the floor's warm start (once per image)" | tee -a "$LOG"
    fresh_work
    (cd / && runuser -u "$BENCH_USER" -- env GPURUN_CACHEDIR="$W/cache" "$BIN/gpurun-old" pull -q "docker://$REF" -o "$W/x.sqsh")
    mv "$W/x.sqsh" "$IMG_DIR/ref.sqsh"; chown root: "$IMG_DIR/ref.sqsh"; chmod 644 "$IMG_DIR/ref.sqsh"
fi
for k in "${CMDS[@]}"; do # the image works: every command prints what it must
    fresh_work
    read -r first _ rc line < <(timed "$(tool_cmd floor "$k")")
    [ "$rc" = 0 ] && [[ $line =~ ${EXPECT[$k]} ]] || die "${COMMAND[$k]} fails in the image: $(tail -3 "$W.err")"
    echo "== ${COMMAND[$k]} in the image: $line" | tee -a "$LOG"
done
end_tools

n=${#TOOLS[@]}
for rep in $(seq "$REPS"); do
    for k in "${CMDS[@]}"; do
        for i in $(seq 0 $((n - 1))); do run_one "$((REP0 + rep))" "${TOOLS[$(((i + rep - 1) % n))]}" "$k"; done
    done
done
echo "# uptime after: $(uptime)" | tee -a "$LOG"

# Medians and ranges per command and tool; NEW / each other tool (per-rep ratios' range too).
python3 - "$TSV" "$IMAGE_LINE" "$MACHINE" <<'PY' | tee "$OUTDIR/first-start.md" | tee -a "$LOG"
import statistics as st, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
label = {"torch": "import torch", "py": "print(1)"}
print(f"\n### first start of bench/torch:latest ({sys.argv[2]}), {sys.argv[3]}: seconds to the first line of output\n")
print("| command | tool | runs | first line: median | min–max | exit: median | new / tool (per-rep range) |")
print("|---|---|---|---|---|---|---|")
for k in dict.fromkeys(r[2] for r in rows):
    ok = {}
    bad = {}
    for rep, t, kk, first, ex, rc, *_ in rows:
        if kk != k: continue
        if rc == "0": ok.setdefault(t, {})[rep] = (int(first) / 1e6, int(ex) / 1e6)
        else: bad[t] = bad.get(t, 0) + 1
    new = ok.get("new", {})
    for t in dict.fromkeys(r[1] for r in rows):
        v = ok.get(t, {})
        n = f"{len(v)}" + (f" ({bad[t]} failed)" if t in bad else "")
        if not v:
            print(f"| {label.get(k, k)} | {t} | {n} | – | – | – | – |"); continue
        f = [x[0] for x in v.values()]; e = [x[1] for x in v.values()]
        ratio = "–"
        if new and t != "new":
            pr = sorted(new[r][0] / v[r][0] for r in v if r in new)
            ratio = f"{st.median(x[0] for x in new.values()) / st.median(f):.2f}×" + (f" ({pr[0]:.2f}–{pr[-1]:.2f})" if pr else "")
        print(f"| {label.get(k, k)} | {t} | {n} | {st.median(f):.2f} | {min(f):.2f}–{max(f):.2f} | {st.median(e):.2f} | {ratio} |")
PY
cp "$LOG" "$RESULTS/first-start-$MACHINE.txt"
cp "$OUTDIR/first-start.md" "$RESULTS/first-start-$MACHINE.md"
echo "== $RESULTS/first-start-$MACHINE.{txt,md}; raw: $OUTDIR"

#!/usr/bin/env bash
# The main job end to end on a fresh Debian 12 machine (run as root: it installs packages and
# starts a local registry; gpurun itself runs as the unprivileged user gpuruntest):
#   build gpurun -> build a small OCI image from busybox-static -> push it to a local registry
#   -> `gpurun pull` it into one squashfs file -> `gpurun exec` and `gpurun run` it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/setup-machine.sh
cargo build --release --locked
GPURUN=$PWD/target/release/gpurun
chmod o+rx "$PWD" "$PWD/target" "$PWD/target/release" || true

W=$(mktemp -d /var/tmp/gpurun-demo.XXXXXX)
chmod 755 "$W"
trap 'kill $REG_PID 2>/dev/null || true; rm -rf "$W"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
  "$W/storage" "$PORT" > "$W/registry.yml"
docker-registry serve "$W/registry.yml" > "$W/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/v2/" && break; sleep 0.1; done

echo "== building demo/busybox:latest (busybox-static) and pushing it to 127.0.0.1:$PORT"
cd "$W"
umoci init --layout oci >/dev/null
umoci new --image oci:demo >/dev/null
umoci unpack --rootless --image oci:demo bundle >/dev/null
mkdir -p bundle/rootfs/bin bundle/rootfs/etc
cp /bin/busybox bundle/rootfs/bin/busybox
for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "bundle/rootfs/bin/$a"; done
umoci repack --image oci:demo bundle >/dev/null
echo 'PRETTY_NAME="gpurun demo (busybox)"' > bundle/rootfs/etc/os-release
umoci repack --image oci:demo bundle >/dev/null
umoci config --image oci:demo --config.env GREETING=hello-from-the-image \
  --config.entrypoint /bin/sh --config.cmd=-c --config.cmd='echo "$GREETING, args: $0 $*"; cat /etc/os-release' >/dev/null
skopeo copy -q --dest-tls-verify=false oci:oci:demo "docker://127.0.0.1:$PORT/demo/busybox:latest"
cd - >/dev/null

U=$W/user  # what the unprivileged user writes: the cache and the image
install -d -o gpuruntest -g gpuruntest "$U"
as_user() { setpriv --reuid=gpuruntest --regid=gpuruntest --init-groups -- env -i HOME=/home/gpuruntest USER=gpuruntest PATH=/usr/bin:/bin GPURUN_CACHEDIR="$U/cache" "$@"; }
echo "== gpurun pull (as gpuruntest)"
( cd "$U" && as_user "$GPURUN" pull "docker://127.0.0.1:$PORT/demo/busybox:latest" -o "$U/busybox.sqsh" )
unsquashfs -s "$U/busybox.sqsh" | head -3
echo "== gpurun exec"
( cd "$U" && as_user "$GPURUN" exec "$U/busybox.sqsh" sh -c 'id; cat /etc/os-release; echo "$GREETING"; ls /' )
echo "== gpurun run"
( cd "$U" && as_user "$GPURUN" run "$U/busybox.sqsh" )
echo "== gpurun exec docker://… (cached by manifest digest)"
( cd "$U" && as_user "$GPURUN" -q exec "docker://127.0.0.1:$PORT/demo/busybox:latest" echo ok from the cache )
echo "demo: all steps passed"

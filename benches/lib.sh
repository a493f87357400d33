# Shared by the benchmark scripts (sourced, not run).

# Drop a tree's file data from the page cache, as a fresh node would have it (root: any file).
evict_tree() {
    python3 - "$1" <<'PY'
import os, sys
for d, _, names in os.walk(sys.argv[1]):
    for f in names:
        try:
            fd = os.open(os.path.join(d, f), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
PY
}

# --- the warm-start benchmarks (imports.sh, torch.sh, server.sh) ----------------------------
# They share: BENCH_DIR (cached images), BENCH_USER (runs everything measured), OUT (results),
# the bench's own copy of gpurun (image servers are found as the user's processes of that file),
# the medium Debian image and these helpers.

die() { echo "${0##*/}: $*" >&2; exit 1; }

as_user() {
    (cd / && runuser -u "$BENCH_USER" -- env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        USER="$BENCH_USER" HOME="$(getent passwd "$BENCH_USER" | cut -d: -f6)" "$@")
}

# bench_setup TOOL... : checks, directories, helper scripts and the copy of gpurun in $BIN.
bench_setup() {
    BENCH_DIR=${BENCH_DIR:-/var/tmp/gpurun-bench}
    BENCH_USER=${BENCH_USER:-gpuruntest}
    OUT=${OUT:-$BENCH_DIR/results-$(date -u +%Y%m%dT%H%M%SZ)}
    local src=${GPURUN:-target/release/gpurun} t
    [ "$(id -u)" = 0 ] || die "run as root (setup only; measured commands run as $BENCH_USER)"
    id "$BENCH_USER" >/dev/null 2>&1 || die "no user $BENCH_USER (bash tests/setup-machine.sh)"
    for t in python3 runuser "$@"; do
        command -v "$t" >/dev/null || die "$t not installed (apt-get install the package that has it)"
    done
    [ -x "$src" ] || die "no gpurun binary at $src (cargo build --release, or set GPURUN)"
    chmod 666 /dev/fuse
    BIN=$BENCH_DIR/bin
    RUN=$BENCH_DIR/run # the user's scratch: error logs, holder state, pull work
    mkdir -p "$BENCH_DIR" "$BIN" "$OUT"
    chmod 755 "$BENCH_DIR" "$BIN"
    install -d -o "$BENCH_USER" -m 755 "$RUN"
    install -m 755 "$src" "$BIN/gpurun.new" && mv "$BIN/gpurun.new" "$BIN/gpurun"
    GPURUN=$BIN/gpurun
    GPURUN_REV="$(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (dirty)')"
    # time-us ERRFILE CMD...: microseconds and exit status of CMD; its output dropped, stderr kept.
    cat >"$BIN/time-us" <<'SH'
#!/bin/bash
err=$1; shift
s=$EPOCHREALTIME; "$@" >/dev/null 2>>"$err"; rc=$?; e=$EPOCHREALTIME
echo "$((${e/./} - ${s/./})) $rc"
SH
    # The user's live processes of the bench's gpurun, one pid a line. With no container running,
    # these are idle image servers.
    cat >"$BIN/servers" <<SH
#!/bin/bash
for p in /proc/[0-9]*; do
    [ "\$(stat -c %u "\$p" 2>/dev/null)" = "$(id -u "$BENCH_USER")" ] || continue
    e=\$(readlink "\$p/exe" 2>/dev/null) || continue
    [ "\${e% (deleted)}" = "$GPURUN" ] && echo "\${p#/proc/}"
done
exit 0
SH
    # Ends the user's idle image servers (SIGTERM, then SIGKILL after 5 s), so the next start is
    # a first start. Run only while no container of the bench's gpurun is running.
    cat >"$BIN/stop-servers" <<SH
#!/bin/bash
pids=\$("$BIN/servers")
[ -n "\$pids" ] || exit 0
kill -TERM \$pids 2>/dev/null
for _ in \$(seq 50); do
    left=\$("$BIN/servers" | grep -Fx "\$pids") || exit 0
    sleep 0.1
done
kill -KILL \$left 2>/dev/null; exit 0
SH
    # chroot-run ROOT CMD... (as root of a user namespace): the host's /dev, /proc and /sys bound
    # into ROOT, then CMD in a chroot; the launcher-free way to run a command in a tree.
    # chroot-run --squashfuse IMG ROOT CMD...: the same over `squashfuse_ll IMG ROOT`.
    cat >"$BIN/chroot-run" <<'SH'
#!/bin/sh
img=
if [ "$1" = --squashfuse ]; then img=$2; shift 2; fi
root=$1; shift
[ -z "$img" ] || squashfuse_ll "$img" "$root" || exit 125
for d in dev proc sys; do mount --rbind "/$d" "$root/$d" || exit 125; done
[ -n "$img" ] || exec chroot "$root" "$@"
chroot "$root" "$@"; r=$?
umount -l "$root"; exit $r
SH
    chmod 755 "$BIN/time-us" "$BIN/servers" "$BIN/stop-servers" "$BIN/chroot-run"
}

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# start_registry STORAGE STATE_DIR: Debian's docker-registry on a free loopback port, serving
# STORAGE (its config and log in STATE_DIR); sets REG (host:port) and REG_PID.
start_registry() {
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    printf 'version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n  secret: bench-only\n' \
        "$1" "$port" >"$2/registry.yml"
    docker-registry serve "$2/registry.yml" >"$2/registry.log" 2>&1 &
    REG_PID=$! REG=127.0.0.1:$port
    for _ in $(seq 100); do # python, not curl: the GPU machine may have no curl
        python3 -c 'import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=1)' "http://$REG/v2/" 2>/dev/null && return 0
        sleep 0.1
    done
    die "docker-registry did not start: $(tail -1 "$2/registry.log")"
}

# stop_servers: as the user, so that it can only reach the user's own processes.
stop_servers() { as_user "$BIN/stop-servers"; }

# holder_start IMG / holder_stop: a long-running container of IMG (`sh -c 'echo up; exec cat'`
# on a FIFO), so that starts in between attach to its image server; holder_stop closes the FIFO,
# the container exits and gpurun with it.
HOLDER_PID=
holder_start() {
    local fifo=$RUN/holder.fifo i
    rm -f "$fifo" "$RUN/holder.out"; mkfifo -m 600 "$fifo"
    as_user "$GPURUN" exec "$1" sh -c 'echo up; exec cat >/dev/null' <"$fifo" >"$RUN/holder.out" 2>&1 &
    HOLDER_PID=$!
    exec 9>"$fifo"
    for i in $(seq 600); do
        grep -qx up "$RUN/holder.out" 2>/dev/null && return 0
        kill -0 "$HOLDER_PID" 2>/dev/null || break
        sleep 0.1
    done
    die "the holding container of $1 did not start: $(tail -1 "$RUN/holder.out" 2>/dev/null)"
}
holder_stop() {
    [ -n "$HOLDER_PID" ] || return 0
    exec 9>&-
    wait "$HOLDER_PID" 2>/dev/null || true
    HOLDER_PID=
    rm -f "$RUN/holder.fifo"
}

# pydeb_image: the medium Debian image: minbase bookworm with python3-numpy from apt, squashed
# as runtime.sh's (zstd, 128 KiB blocks) to $PYDEB.sqsh; $PYDEB/rootfs is also the base of the
# torch image.
PYDEB_IMPORTS="import numpy, json, email, http.client, decimal"
pydeb_image() {
    PYDEB=$BENCH_DIR/pydeb
    mkdir -p "$PYDEB"
    if [ ! -d "$PYDEB/rootfs" ]; then
        echo "== debootstrap --variant=minbase --include=python3-numpy bookworm (once)"
        rm -rf "$PYDEB/rootfs.tmp"
        debootstrap --variant=minbase --include=python3-numpy bookworm "$PYDEB/rootfs.tmp" \
            http://deb.debian.org/debian >"$PYDEB/debootstrap.log" || die "debootstrap failed: $PYDEB/debootstrap.log"
        mv "$PYDEB/rootfs.tmp" "$PYDEB/rootfs"
    fi
    if [ ! -f "$PYDEB.sqsh" ] || [ "$PYDEB/rootfs" -nt "$PYDEB.sqsh" ]; then
        echo "== mksquashfs $PYDEB.sqsh"
        mksquashfs "$PYDEB/rootfs" "$PYDEB.sqsh.tmp" -comp zstd -noappend -quiet -no-progress
        mv "$PYDEB.sqsh.tmp" "$PYDEB.sqsh"
    fi
    chmod 644 "$PYDEB.sqsh"
}

# env_header: what every summary starts with.
env_header() {
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); host: $(uname -sr), $(nproc) CPUs, $(free -g | awk '/Mem:/{print $2}') GiB"
    echo "gpurun: tree $GPURUN_REV, sha256 $(sha256sum "$GPURUN" | cut -c1-12); ch-run $(USER=root ch-run --version 2>&1); squashfuse $(dpkg-query -W -f '${Version}' squashfuse 2>/dev/null)"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# summarize TSV REF[,REF2…] [TOOL…]: one markdown table per phase of TSV (tab-separated: rep tool
# phase usec rc) with each tool's median, quartiles, range, and its ratio of medians to each REF;
# in brackets the quartiles of the per-rep ratios (tools interleaved: a rep's runs are neighbours
# in time). Rows in the order of the TOOLs given, else as they come. Runs with rc != 0 are
# counted and left out.
summarize() {
    python3 - "$@" <<'PY'
import statistics as st, sys
tsv, refs = sys.argv[1], sys.argv[2].split(",")
rows = [l.rstrip("\n").split("\t") for l in open(tsv) if l.strip() and not l.startswith("rep\t")]
order = list(dict.fromkeys(sys.argv[3:] + [x[1] for x in rows]))
def q(v, p):
    v = sorted(v); k = (len(v) - 1) * p; i = int(k)
    return v[i] + (v[min(i + 1, len(v) - 1)] - v[i]) * (k - i)
def ms(x):
    return f"{x / 1000:.0f}" if x >= 100_000 else f"{x / 1000:.1f}"
for ph in dict.fromkeys(r[2] for r in rows):
    ok, bad = {}, {}
    for rep, tool, p, us, rc in rows:
        if p == ph and rc == "0":
            ok.setdefault(tool, {})[rep] = float(us)
        elif p == ph:
            bad[tool] = bad.get(tool, 0) + 1
    print(f"\n| {ph} | runs | median ms | p25–p75 | min–max |" + "".join(f" / {r} |" for r in refs))
    print("|---|---|---|---|---|" + "---|" * len(refs))
    for tool in order:
        v = ok.get(tool, {})
        n = f"{len(v)}" + (f" ({bad[tool]} failed)" if tool in bad else "")
        if not v:
            print(f"| {tool} | {n} |" + " – |" * (3 + len(refs)))
            continue
        x = list(v.values())
        line = f"| {tool} | {n} | {ms(st.median(x))} | {ms(q(x, .25))}–{ms(q(x, .75))} | {ms(min(x))}–{ms(max(x))} |"
        for ref in refs:
            r = ok.get(ref, {})
            pair = [v[k] / r[k] for k in v if k in r]
            line += f" {st.median(x) / st.median(r.values()):.2f}× ({q(pair, .25):.2f}–{q(pair, .75):.2f}) |" if pair else " – |"
        print(line)
PY
}

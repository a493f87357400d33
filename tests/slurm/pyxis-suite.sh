#!/usr/bin/env bash
# pyxis's own test suite (NVIDIA/pyxis: tests/*.bats and tests/sbatch/) against gpurun's SPANK
# plugin on the single-node cluster of cluster.sh, by hand, never in CI (docs/pyxis-suite.md).
#
#   tests/slurm/pyxis-suite.sh PYXIS_DIR [FILE...]
#
# PYXIS_DIR is a checkout of pyxis; FILE (workdir.bats, sbatch/sbatch.bats...) runs only those
# files, the default every one. Run as root, with the cluster started with the plugin
# (cluster.sh start MODE PLUGIN.so gpurun=GPURUN). It:
#   - installs Debian's bats when missing;
#   - starts a docker-registry on 127.0.0.1 and pushes stand-ins of the images the suite names,
#     built from this machine's files (pyxis-images.sh), and lists the names left without one;
#   - copies the suite and changes only its image references, to that registry in enroot's
#     REGISTRY#IMAGE form (127.0.0.1:PORT#ubuntu:24.04; a reference that names its registry
#     REGISTRY/IMAGE keeps that form);
#   - runs each file with bats as the test user, as pyxis's README says: tests/*.bats each in an
#     allocation of its own (salloc --overcommit, here of the whole node), tests/sbatch without;
#     PYXIS_SUITE_ALLOC=test gives each test of tests/*.bats an allocation of its own instead.
# Writes results/FILE.tap (bats's TAP, with each failed test's output), results/FILE.err and
# results/suite.tap under $PYXIS_SUITE_DIR (default /var/tmp/gpurun-pyxis-suite); prints one line
# per file and one for the whole. Exit status 1 when a test failed.
#   GPURUN_TEST_USER (default gpuruntest), PYXIS_SUITE_TIMEOUT (seconds a test may take, 300)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/pyxis-images.sh"
U=${GPURUN_TEST_USER:-gpuruntest}
W=${PYXIS_SUITE_DIR:-/var/tmp/gpurun-pyxis-suite}
PYXIS=${1:?usage: pyxis-suite.sh PYXIS_DIR [FILE...]}
shift
die() { echo "pyxis-suite.sh: $*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || die "run as root (it builds images from this machine's files and runs the suite as $U)"
[ -r "$PYXIS/tests/common.bash" ] || die "$PYXIS is not a pyxis checkout (no tests/common.bash)"
id "$U" >/dev/null 2>&1 || die "no user $U (tests/setup-machine.sh makes it)"
for c in docker-registry skopeo umoci dpkg-deb curl; do
    command -v "$c" >/dev/null || die "$c is missing (tests/setup-machine.sh installs it)"
done
if ! command -v bats >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bats >/dev/null \
        || die "apt-get install bats failed"
fi
timeout 10 sinfo -h >/dev/null 2>&1 || die "no Slurm cluster answers: tests/slurm/cluster.sh start v1 PLUGIN.so gpurun=GPURUN"
srun --help 2>/dev/null | grep -q -- --container-image= \
    || die "srun has no --container-image: start the cluster with gpurun's plugin (cluster.sh start v1 PLUGIN.so gpurun=GPURUN)"
# the gpurun the plugin runs (its plugstack.conf line's gpurun=)
GPURUN=$(sed -n 's/.*[[:space:]]gpurun=\([^[:space:]]*\).*/\1/p' /etc/slurm/plugstack.conf.d/*.conf 2>/dev/null | head -1)
[ -x "${GPURUN:-}" ] || die "no gpurun= in /etc/slurm/plugstack.conf.d/: start the cluster with gpurun=GPURUN"

rm -rf "$W"; mkdir -p "$W/results"; chmod 755 "$W"
UHOME=$(getent passwd "$U" | cut -d: -f6)
reg_pid="" mq="" mqdir=""
trap '[ -z "$reg_pid" ] || kill "$reg_pid" 2>/dev/null; rm -rf "$W/rootfs"; [ -z "$mq" ] || umount /dev/mqueue; [ -z "$mqdir" ] || rmdir /dev/mqueue' EXIT
# The host's POSIX message queues at /dev/mqueue, as systemd mounts them on a usual host
# (unshare_ipc.bats compares the container's with them); until the end where this machine lacks them.
if ! mountpoint -q /dev/mqueue; then
    [ -d /dev/mqueue ] || { mkdir /dev/mqueue && mqdir=1; }
    mount -t mqueue mqueue /dev/mqueue && mq=1 \
        || echo "no /dev/mqueue: unshare_ipc.bats's /dev/mqueue test cannot pass" >&2
fi

# ------------------------------------------------------------------ registry and stand-ins
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
REG=127.0.0.1:$port
printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n' \
    "$W/registry" "$REG" > "$W/registry.yml"
docker-registry serve "$W/registry.yml" > "$W/registry.log" 2>&1 & reg_pid=$!
for _ in $(seq 100); do curl -sf -o /dev/null "http://$REG/v2/" && break; sleep 0.1; done
curl -sf -o /dev/null "http://$REG/v2/" || die "docker-registry did not start (see $W/registry.log)"

# The stand-ins, by the images the suite names (grep container-image in its files).
build_standins() {
    local v t
    for v in 12.04 14.04 16.04 18.04 20.04 22.04 24.04 26.04; do
        label_image "ubuntu:$v" /usr/lib/os-release "$(ubuntu_os_release "$v")"
    done
    label_image ubuntu:latest /usr/lib/os-release "$(ubuntu_os_release 24.04)"
    label_image centos:5 /etc/redhat-release 'CentOS release 5.11 (Final)'
    label_image centos:6 /etc/redhat-release 'CentOS release 6.10 (Final)'
    label_image centos:7 /etc/redhat-release 'CentOS Linux release 7.9.2009 (Core)'
    label_image centos:8 /etc/redhat-release 'CentOS Linux release 8.4.2105'
    for t in 10.2-base 11.8.0-base-ubuntu20.04 11.8.0-base-ubuntu22.04 12.5.1-runtime-ubuntu24.04 \
             12.9.1-base-ubuntu24.04 12.9.1-runtime-ubuntu24.04; do
        cuda_image "nvidia/cuda:$t"
    done
    dind_image docker:26.1.0-dind-rootless
    pytorch_image nvidia/pytorch:20.02-py3 1.5.0a0+3bbb36e
    pytorch_image nvidia/pytorch:22.04-py3 1.12.0a0+bd13bc6
    pytorch_image pytorch/pytorch:1.8.1-cuda11.1-cudnn8-runtime 1.8.1
    tool_image redis:5.0.8 /usr/local/bin/redis-server
    tool_image rabbitmq:3.8.3 /opt/rabbitmq/sbin/rabbitmqctl /opt/rabbitmq/sbin
    # the suite's digest reference is of zstd layers: the same, with this image's digest
    ZSTD_DIGEST=$(zstd_copy ubuntu:24.04 rapidsai/devcontainers)
}
OCI=$W/oci STANDINS=$W/standins
: > "$STANDINS"
t0=$(date +%s)
base_rootfs "$W/rootfs"
echo "apt repository in the images: $(apt_repo "$W/rootfs" | tr '\n' ' ')"
oci_base "$W/rootfs"
build_standins
echo "$(wc -l < "$STANDINS") stand-in images in $REG, built in $(( $(date +%s) - t0 )) s"

# ------------------------------------------------------------------ the suite, rewritten
# Only image references change: after --container-image, PYXIS_CONTAINER_IMAGE= and docker://
# (enroot import), a name, REGISTRY#NAME or REGISTRY/NAME becomes this registry's; a path, a
# variable and dockerd:// stay. In an #SBATCH line Slurm reads an unquoted # as the start of a
# comment, so there the registry is written REGISTRY/NAME.
rewrite() {  # FILE
    REG=$REG ZSTD="rapidsai/devcontainers=$ZSTD_DIGEST" perl -pi -e '
        sub digest { my $n = shift; my ($r, $d) = split /=/, $ENV{ZSTD};
            $n =~ s/\@sha256:[0-9a-f]+$/\@$d/ if $n =~ /^\Q$r\E\@/; $n }
        sub img { my ($r, $sep) = @_;
            return "docker://" . img($1, $sep) if $r =~ m{^docker://(.*)};
            return $r if $r =~ m{^[a-z]+://};
            return "$ENV{REG}$sep" . digest($1) if $r =~ /#(.*)/;
            my ($host, $name) = $r =~ m{^([^/]+)/(.*)};
            return "$ENV{REG}/" . digest($name) if defined $host && $host =~ /[.:]|^localhost$/;
            return "$ENV{REG}$sep" . digest($r) }
        my $sep = /^#SBATCH/ ? "/" : "#";
        s{(--container-image[= ]|PYXIS_CONTAINER_IMAGE=|docker://)([A-Za-z0-9][A-Za-z0-9._:/#\@+-]*)}{$1 . img($2, $sep)}ge' "$1"
}
S=$W/suite
mkdir -p "$S"; cp -r "$PYXIS/tests" "$S/"
for f in "$S"/tests/*.bats "$S"/tests/sbatch/*.bats; do rewrite "$f"; done
# the references no stand-in answers: their tests fail at the pull
missing=$(grep -rhoE "$REG[#/][^ \"']+" "$S/tests" | sed -E "s,^$REG[#/],,; s,^([^:@]+)$,\1:latest," |
    sort -u | grep -vxF -f "$STANDINS" | tr '\n' ' ' || true)
echo "no stand-in for: ${missing:-none}"
mkdir -p "$W/cache"
chown -R "$U" "$S" "$W/cache" "$W/results"
# A warm cache, as on a node where these images ran before: a test that gives its first step a
# few seconds before the next (exec.bats) then times the run, not this machine's conversion.
t0=$(date +%s)
while read -r name; do
    runuser -u "$U" -- env -i HOME="$UHOME" PATH=/usr/bin:/bin GPURUN_CACHEDIR="$W/cache" \
        "$GPURUN" exec "docker://$REG/$name" true </dev/null >/dev/null 2>&1 \
        || echo "warming the cache: $name did not run" >&2
done < "$STANDINS"
echo "cache warmed in $(( $(date +%s) - t0 )) s"

# ------------------------------------------------------------------ run
# tests/*.bats in an allocation of the whole node each (the suite's srun steps, named
# containers and "next step" arithmetic are the job's), tests/sbatch as its own jobs. Its tests
# that join a running container start the second step beside the first without --overlap, which
# Slurm >= 20.11 queues until the first ends: SLURM_OVERLAP=1 (srun's variable for it) lets
# every step share the allocation's CPUs, as those tests assume.
results() { echo "$W/results/$(tr / _ <<<"${1%.bats}")"; }  # FILE: its results' name, less .tap

# bats --tap ARG... as the test user in the suite's directory; in an allocation of the whole
# node with ALLOC=1. The suite assumes a site whose roots are writable by default (enroot's
# ENROOT_ROOTFS_WRITABLE=yes: it installs packages as remapped root without
# --container-writable): gpurun's writable_root setting, here through its variable.
user_bats() {  # ALLOC ARG...
    local alloc=()
    [ "$1" = 0 ] || alloc=(salloc -N1 --exclusive --overcommit -t 60 -J pyxis-suite)
    shift
    runuser -u "$U" -- env -i HOME="$UHOME" USER="$U" LOGNAME="$U" SHELL=/bin/bash \
        PATH=/usr/local/bin:/usr/bin:/bin GPURUN_CACHEDIR="$W/cache" SLURM_OVERLAP=1 \
        GPURUN_WRITABLE_ROOT=1 \
        BATS_TEST_TIMEOUT="${PYXIS_SUITE_TIMEOUT:-300}" \
        bash -c 'cd "$1" && shift && exec "$@"' - "$S" "${alloc[@]}" bats --tap "$@" </dev/null
}

# Each test of FILE in an allocation of its own, as one TAP stream. bats --filter matches the
# name as the file spells it (\$TERM), so that is what the pattern quotes.
run_each() {  # FILE
    local i=0 name
    sed -n -E 's/^@test "(.*)" \{.*$/\1/p' "$S/tests/$1" > "$W/names"
    echo "1..$(grep -c . "$W/names")"
    while IFS= read -r name; do
        i=$((i + 1))
        user_bats 1 --filter "^$(sed 's/[][\.*^$()+?{}|]/\\&/g' <<<"$name")\$" "tests/$1" |
            sed -E "/^1\.\.[0-9]+$/d; s/^(not )?ok 1 /\1ok $i /"
    done < "$W/names"
}

run_file() {  # FILE (relative to tests/)
    local f=$1 out
    out=$(results "$f")
    case $f in
        sbatch/*) user_bats 0 "tests/$f" ;;
        *) if [ "${PYXIS_SUITE_ALLOC:-file}" = test ]; then run_each "$f"; else user_bats 1 "tests/$f"; fi ;;
    esac > "$out.tap" 2> "$out.err" || true
    summarize "$f" "$out.tap"
}

# FILE: N ok, N not ok, N skipped (of the plan's N)
summarize() {  # NAME TAP
    local plan ok bad skip
    plan=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$2" | head -1)
    ok=$(grep -c '^ok ' "$2" || true); bad=$(grep -c '^not ok ' "$2" || true)
    skip=$(grep -c '^ok .* # skip' "$2" || true)
    printf '%-24s %3d ok, %3d not ok, %3d skipped (of %s)\n' "$1:" $((ok - skip)) "$bad" "$skip" "${plan:-no TAP plan: see ${2%.tap}.err}"
    TOTAL_OK=$((TOTAL_OK + ok - skip)); TOTAL_BAD=$((TOTAL_BAD + bad)); TOTAL_SKIP=$((TOTAL_SKIP + skip))
}

TOTAL_OK=0 TOTAL_BAD=0 TOTAL_SKIP=0
if [ $# -gt 0 ]; then files=("$@"); else
    files=($(cd "$S/tests" && ls -- *.bats sbatch/*.bats))
fi
for f in "${files[@]}"; do
    [ -f "$S/tests/$f" ] || die "no tests/$f in $PYXIS"
    run_file "$f"
    { printf '# file: %s\n' "$f"; cat "$(results "$f").tap"; } >> "$W/results/suite.tap"
done
echo "pyxis suite: $TOTAL_OK ok, $TOTAL_BAD not ok, $TOTAL_SKIP skipped ($W/results/suite.tap)"
[ "$TOTAL_BAD" = 0 ]

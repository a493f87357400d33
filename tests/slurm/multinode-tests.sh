#!/usr/bin/env bash
# gpurun in Slurm jobs that span nodes, on the cluster of tests/slurm/multinode.sh (3 nodes):
#
#   --container-image (the SPANK plugin) and per-task `gpurun exec` on every node, each task in
#     the image and on its own node; a real Open MPI program across the nodes (Slurm's PMIx);
#     PyTorch DistributedDataParallel over gloo across 2 nodes, through the example
#     slurm/examples/pytorch-ddp.sbatch and through the plugin; a docker:// image from the
#     test network's registry (and how often each node fetched each blob: printed, a baseline)
#   faults: scancel during a 3-node step, a node's slurmd killed during one, a task that
#     crashes on one node; after each, on every node: no process of the test user, no FUSE or
#     namespace mount, no state directory of the plugin
#
# Run as root: the jobs and containers are the test user's (GPURUN_TEST_USER, default
# gpuruntest; files in its home, which every node shares); root only kills and restarts a
# node's slurmd and looks into each node's namespaces (multinode.sh exec).
# Ends with "N passed, N failed"; exit status 1 when a test failed. The work directory is
# removed when all passed.
# Environment: GPURUN (default target/debug/gpurun of this checkout).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MN=$ROOT/tests/slurm/multinode.sh
U=${GPURUN_TEST_USER:-gpuruntest}
GPURUN=${GPURUN:-$ROOT/target/debug/gpurun}
pass=0; fail=0
ok()  { pass=$((pass + 1)); echo "PASS $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
res() { if [ "$1" = 0 ]; then ok "$2"; else bad "$2"; fi; }
T0=$(date +%s)
section() { echo "--- $* (at $(( $(date +%s) - T0 )) s)"; }

[ "$(id -u)" = 0 ] || { echo "run as root (it kills and restarts a node's slurmd); jobs run as $U" >&2; exit 2; }
[ -x "$GPURUN" ] || { echo "no gpurun at $GPURUN (cargo build, or set GPURUN)" >&2; exit 2; }
env_lines=$(bash "$MN" env) || { echo "no multi-node cluster (tests/slurm/multinode.sh start 3)" >&2; exit 2; }
eval "$env_lines"
read -ra NODES <<<"$MN_NODES"
[ "${#NODES[@]}" -ge 3 ] || { echo "needs 3 nodes, the cluster has ${#NODES[@]}" >&2; exit 2; }
UHOME=$(getent passwd "$U" | cut -d: -f6)
W=$UHOME/gpurun-multinode-tests
T=(-t 2)   # every job: two minutes at most

# The test user, with a clean environment, in W; gpurun of this build first on PATH.
as_user() {
  (cd "$W" && setpriv --reuid="$U" --regid="$(id -g "$U")" --init-groups -- env -i \
    PATH="$(dirname "$GPURUN"):/usr/local/bin:/usr/bin:/bin" HOME="$UHOME" USER="$U" LOGNAME="$U" \
    SHELL=/bin/sh LANG=C.UTF-8 "$@")
}
rm -rf "$W"; install -d -o "$U" -g "$(id -g "$U")" "$W"; cd "$W" || exit 2
echo "nodes: $MN_NODES, user: $U, gpurun: $GPURUN, work: $W"

# --------------------------------------------------------------- what a job leaves on a node
# Prints one line per thing left on a node: a process of the test user, a FUSE or nsfs mount in
# the node's mount namespace, a state directory of the plugin in the node's /tmp.
leftovers() {
  local n i p uid
  for n in "${NODES[@]}"; do
    i=${n#n}
    for p in $(ip netns pids "gpmn$i" 2>/dev/null); do
      uid=$(awk '/^Uid:/{print $2}' "/proc/$p/status" 2>/dev/null) || continue
      [ "$uid" = "$(id -u "$U")" ] && echo "$n: process $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-80)"
    done
    bash "$MN" exec "$n" sh -c '
      awk -v n="$1" '\''$0 ~ / - (fuse|fuse\.[^ ]*|nsfs) / {print n ": mount " $5}'\'' /proc/self/mountinfo
      for d in /tmp/gpurun-spank.*; do [ -e "$d" ] && echo "$1: state directory $d"; done' - "$n"
  done
}
# CHECK-NAME: wait (up to 30 s) until no node has anything left; say how long it took.
clean_after() {
  local t0 left
  t0=$(date +%s%N)
  for _ in $(seq 150); do left=$(leftovers); [ -z "$left" ] && break; sleep 0.2; done
  [ -z "$left" ]; res $? "$1: nothing left on any node ($(( ($(date +%s%N) - t0) / 1000000 )) ms after the step ended)${left:+: $(echo "$left" | head -5 | tr '\n' ';')}"
}
# Start a step in the background: NAME SRUN-ARGS... (its tasks should touch NAME.started.NODE)
bg_step() {
  local name=$1; shift
  as_user srun -J "$name" "${T[@]}" "$@" >"$W/$name.out" 2>"$W/$name.err" &
  bg_pid=$!
}
wait_started() {  # NAME COUNT: until COUNT tasks have said so (60 s at most)
  for _ in $(seq 300); do [ "$(ls "$W/$1".started.* 2>/dev/null | wc -l)" -ge "$2" ] && return 0; sleep 0.2; done
  return 1
}
wait_pid() {  # PID SECONDS: whether it exited within SECONDS
  for _ in $(seq $(($2 * 5))); do kill -0 "$1" 2>/dev/null || { wait "$1" 2>/dev/null; return 0; }; sleep 0.2; done
  return 1
}
jobid() { squeue -h -n "$1" -o %i | head -1; }
hosts_of() { sed -n 's/.*host=\([^ ]*\).*/\1/p' "$1" | sort -u | tr '\n' ' ' | sed 's/ $//'; }

# --------------------------------------------------------------- images
R=$W/rootfs
mkdir -p "$R"/{bin,etc,tmp,proc,sys,dev,root,home}
cp /bin/busybox "$R/bin/"
for a in $("$R/bin/busybox" --list); do [ "$a" = busybox ] || ln -s busybox "$R/bin/$a"; done
echo 'root:x:0:0:root:/root:/bin/sh' > "$R/etc/passwd"; echo 'root:x:0:' > "$R/etc/group"
echo image > "$R/etc/gpurun-test-marker"
# what a task prints: its host, the node Slurm ran it on, its rank, whether it is in the image
printf '#!/bin/sh\necho "host=$(hostname) node=$SLURMD_NODENAME rank=$SLURM_PROCID marker=$(cat /etc/gpurun-test-marker 2>/dev/null || echo host)"\n' > "$R/probe"
chmod 755 "$R/probe"; chown -R "$U" "$R"
as_user mksquashfs "$R" img.sqsh -noappend -quiet -no-progress -all-root >/dev/null || { echo "mksquashfs failed" >&2; exit 2; }
IMG=$W/img.sqsh

# --------------------------------------------------------------- every task on its node, in the image
section "tasks across nodes"
as_user srun "${T[@]}" -N3 --container-image="$IMG" hostname >host.out 2>host.err
[ "$(sort host.out | tr '\n' ' ')" = "n1 n2 n3 " ]; res $? "srun -N3 --container-image hostname: n1 n2 n3 ($(sort host.out | tr '\n' ' '))" || cat host.err
as_user srun "${T[@]}" -N3 --container-image="$IMG" /probe >plug.out 2>plug.err
[ "$(grep -c 'marker=image' plug.out)" = 3 ] && [ "$(hosts_of plug.out)" = "n1 n2 n3" ] \
  && [ -z "$(awk '{split($1, h, "="); split($2, n, "="); if (h[2] != n[2]) print}' plug.out)" ]
res $? "srun -N3 --container-image: 3 tasks in the image, each on its own node ($(hosts_of plug.out))" || cat plug.out plug.err
as_user srun "${T[@]}" -N3 -n6 --ntasks-per-node=2 gpurun exec "$IMG" /probe >exec.out 2>exec.err
[ "$(grep -c 'marker=image' exec.out)" = 6 ] && [ "$(hosts_of exec.out)" = "n1 n2 n3" ] \
  && [ "$(sed -n 's/.*host=\([^ ]*\).*/\1/p' exec.out | sort | uniq -c | awk '{print $1}' | sort -u)" = 2 ]
res $? "srun -N3 -n6 gpurun exec: 6 tasks in the image, 2 on each node" || cat exec.out exec.err
cat > steps.sbatch <<EOF
#!/bin/sh
#SBATCH -N3
#SBATCH --container-image=$IMG
#SBATCH -t 2
#SBATCH -o $W/steps.out
echo "batch host=\$(hostname) marker=\$(cat /etc/gpurun-test-marker 2>/dev/null || echo host)"
srun /probe
srun /probe
EOF
as_user sbatch --wait -Q steps.sbatch >/dev/null 2>&1
grep -q '^batch host=n1 marker=host$' steps.out && [ "$(grep -c 'marker=image' steps.out)" = 6 ] \
  && [ "$(grep '^host=' steps.out | sort | uniq -c | awk '{print $1}' | sort -u)" = 2 ]
res $? "sbatch -N3 --container-image: the batch script on n1's host, its two steps in the image on n1 n2 n3" || cat steps.out
as_user srun "${T[@]}" -N3 sh -c 'readlink /proc/self/ns/net; ls /tmp | wc -l' >ns.out 2>&1
[ "$(grep -c net: ns.out | tr -d ' ')" = 3 ] && [ "$(grep net: ns.out | sort -u | wc -l)" = 3 ]
res $? "each node is its own network namespace"
clean_after "after the steps above"

# --------------------------------------------------------------- MPI
section "Open MPI across nodes (PMIx)"
MPIIMG=$W/mpi.sqsh
as_user bash "$ROOT/tests/slurm/mpi-image.sh" "$MPIIMG" 2>mpi-image.err || { cat mpi-image.err; MPIIMG=; }
mpi_case() {  # NAME DESCRIPTION: 6 ranks on 3 nodes, Allreduce sum 15, each got its left neighbour's rank
  local r ok=0
  for r in 0 1 2 3 4 5; do
    grep -q "^rank=$r size=6 sum=15 from=$(( (r + 5) % 6 )) image=yes host=n" "$1.out" || ok=1
  done
  [ "$ok" = 0 ] && [ "$(hosts_of "$1.out")" = "n1 n2 n3" ] && ! grep -q 'PMIX ERROR' "$1.err"
  res $? "$2: 6 ranks on n1 n2 n3, Allreduce sum 15, ring Sendrecv, all in the image" || cat "$1.out" "$1.err"
}
if [ -n "$MPIIMG" ]; then
  as_user srun "${T[@]}" -N3 -n6 --ntasks-per-node=2 --mpi=pmix gpurun exec \
    --env OMPI_MCA_btl_vader_single_copy_mechanism=none "$MPIIMG" mpi-hello >mpi.out 2>mpi.err
  mpi_case mpi "srun --mpi=pmix gpurun exec, Open MPI across 3 nodes"
  as_user srun "${T[@]}" -N3 -n6 --ntasks-per-node=2 --mpi=pmix --container-image="$MPIIMG" mpi-hello >pmpi.out 2>pmpi.err
  mpi_case pmpi "srun --mpi=pmix --container-image, Open MPI across 3 nodes"
else
  bad "the Open MPI test image could not be built (tests/slurm/mpi-image.sh)"
fi

# --------------------------------------------------------------- PyTorch DDP
section "PyTorch DistributedDataParallel across 2 nodes (gloo, CPU)"
ddp_case() {  # FILE DESCRIPTION
  grep -q '^rank 0/2 on n1 CPU (gloo)$' "$1" && grep -q '^rank 1/2 on n2 CPU (gloo)$' "$1" \
    && grep -q '^all_reduce sum 1, expected 1: OK$' "$1" \
    && grep -q 'parameters equal on all ranks: OK$' "$1" && grep -q '^gradients equal on all ranks: OK$' "$1"
  res $? "$2: ranks on n1 and n2, DDP steps, parameters and gradients equal on both" || cat "$1"
}
if as_user bash "$ROOT/tests/slurm/torch-image.sh" "$W/torch.sqsh" 2>torch-image.err; then
  cp "$ROOT"/slurm/examples/{pytorch-ddp.sbatch,ddp_check.py} "$W/"; chown "$U" "$W"/{pytorch-ddp.sbatch,ddp_check.py}
  # the example as it is, sized for this cluster on the command line: 2 nodes, a task each, no GPU
  as_user env IMAGE="$W/torch.sqsh" sbatch --wait -Q --ntasks-per-node=1 --cpus-per-task=1 \
    --gpus-per-task=0 --time=3 pytorch-ddp.sbatch >/dev/null 2>sbatch-ddp.err
  out=$(ls "$W"/gpurun-ddp-*.out 2>/dev/null | head -1)
  ddp_case "${out:-/dev/null}" "slurm/examples/pytorch-ddp.sbatch (srun gpurun exec)"
  # the example's plugin variant
  as_user env MASTER_ADDR=n1 MASTER_PORT=29511 srun "${T[@]}" -N2 --ntasks-per-node=1 \
    --container-image="$W/torch.sqsh" --container-mounts="$W" bash -c '
      export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID
      exec python "$0"' "$W/ddp_check.py" >pddp.out 2>pddp.err
  ddp_case pddp.out "srun -N2 --container-image, DDP (the example's plugin variant)"
else
  cat torch-image.err; bad "the PyTorch test image could not be built (tests/slurm/torch-image.sh)"
fi
clean_after "after the MPI and DDP steps"

# --------------------------------------------------------------- docker:// from the test network
section "--container-image=docker://$MN_REGISTRY/… in a 3-node step"
REF=$MN_REGISTRY/gpurun/multinode:t
if as_user sh -c "umoci init --layout oci && umoci new --image oci:t && umoci unpack --rootless --image oci:t bundle \
     && cp -a '$R/.' bundle/rootfs/ && umoci repack --image oci:t bundle \
     && skopeo copy -q --dest-cert-dir '$MN_REGISTRY_CA_DIR' oci:oci:t 'docker://$REF'" >push.log 2>&1; then
  blobs=$(as_user skopeo inspect --raw --cert-dir "$MN_REGISTRY_CA_DIR" "docker://$REF" | grep -o 'sha256:[0-9a-f]*' | sort -u)
  # fetches of the image's blobs, by blob, since the log line LINE
  fetches() {
    tail -n +"$(( $1 + 1 ))" "$MN_REGISTRY_LOG" | grep -o '"GET /v2/gpurun/multinode/blobs/sha256:[0-9a-f]*' \
      | sed 's/.*blobs\///' | sort | uniq -c | awk '{printf "%s×%s ", substr($2, 8, 12), $1}'
  }
  for cache in node shared; do
    # a fresh cache per run: node-local (the default's place, /var/tmp) or one in the shared home
    if [ $cache = node ]; then c=/var/tmp/gpurun-mn-cache.$$; else c=$W/shared-cache; fi
    mark=$(wc -l <"$MN_REGISTRY_LOG")
    as_user env GPURUN_CACHEDIR="$c" srun "${T[@]}" -N3 --container-image="docker://$REF" /probe >reg-$cache.out 2>reg-$cache.err
    [ "$(grep -c 'marker=image' reg-$cache.out)" = 3 ] && [ "$(hosts_of reg-$cache.out)" = "n1 n2 n3" ]
    res $? "--container-image=docker://$REF, $cache cache: 3 tasks in the image on n1 n2 n3" || cat reg-$cache.out reg-$cache.err
    echo "  registry fetches per blob with a $cache cache ($(echo "$blobs" | wc -l) blobs): $(fetches "$mark")"
  done
  mark=$(wc -l <"$MN_REGISTRY_LOG")
  as_user env GPURUN_CACHEDIR=/var/tmp/gpurun-mn-cache-exec.$$ srun "${T[@]}" -N3 -n6 --ntasks-per-node=2 \
    gpurun exec "docker://$REF" /probe >reg-exec.out 2>reg-exec.err
  [ "$(grep -c 'marker=image' reg-exec.out)" = 6 ] && [ "$(hosts_of reg-exec.out)" = "n1 n2 n3" ]
  res $? "srun -N3 -n6 gpurun exec docker://$REF: 6 tasks in the image on n1 n2 n3" || cat reg-exec.out reg-exec.err
  echo "  registry fetches per blob, gpurun exec per task, node caches: $(fetches "$mark")"
else
  cat push.log; bad "could not push the test image to $MN_REGISTRY"
fi

# --------------------------------------------------------------- faults
section "faults"
wait_idle() { for _ in $(seq 300); do [ -z "$(squeue -h)" ] && return 0; sleep 0.2; done; return 1; }
for how in plugin exec; do
  if [ $how = plugin ]; then run=(--container-image="$IMG"); else run=(gpurun exec "$IMG"); fi
  wait_idle
  bg_step "cancel-$how" -N3 "${run[@]}" sh -c "touch $W/cancel-$how.started.\$SLURMD_NODENAME; exec sleep 300"
  wait_started "cancel-$how" 3; res $? "scancel ($how): the 3-node step runs"
  # the check below sees a running step's processes (and the plugin's state) on every node
  seen=$(leftovers | cut -d: -f1 | sort -u | tr '\n' ' ')
  [ "$seen" = "n1 n2 n3 " ]; res $? "scancel ($how): while the step runs, its processes are seen on n1 n2 n3 ($seen)"
  scancel "$(jobid "cancel-$how")"
  wait_pid "$bg_pid" 30; res $? "scancel ($how): srun ends"
  clean_after "scancel during a 3-node step ($how)"
done

wait_idle
bg_step kill -N3 --container-image="$IMG" sh -c "touch $W/kill.started.\$SLURMD_NODENAME; exec sleep 300"
if wait_started kill 3; then
  ok "slurmd killed: the 3-node step runs"
  t0=$(date +%s)
  bash "$MN" kill-slurmd n2 >/dev/null
  wait_pid "$bg_pid" 60; res $? "slurmd of n2 killed during the step: srun ends ($(( $(date +%s) - t0 )) s; $(grep -m1 -o 'error: .*' "$W/kill.err"))"
  # the step's slurmstepd on n2 outlives its slurmd; the slurmd that comes back ends it
  echo "  left on n2 while its slurmd is away: $(leftovers | grep '^n2:' | cut -d' ' -f2- | cut -c1-40 | tr '\n' ';')"
  bash "$MN" start-slurmd n2 >/dev/null; res $? "n2's slurmd is back, the node is up again ($(sinfo -h -n n2 -o %T))"
  clean_after "a node's slurmd killed during a step"
else
  bad "slurmd killed: the 3-node step did not start"; cat "$W/kill.err"
fi

for how in plugin exec; do
  if [ $how = plugin ]; then run=(--container-image="$IMG"); else run=(gpurun exec "$IMG"); fi
  wait_idle
  t0=$(date +%s)
  # the task on the second node segfaults; --kill-on-bad-exit ends the step for the others
  as_user srun -J "crash-$how" "${T[@]}" -N3 -K1 "${run[@]}" sh -c \
    '[ "$SLURM_NODEID" = 1 ] && { sleep 1; kill -SEGV $$; }; exec sleep 300' >"crash-$how.out" 2>"crash-$how.err"
  rc=$?
  [ "$rc" != 0 ] && [ $(( $(date +%s) - t0 )) -lt 60 ]; res $? "a task crashing on n2 ($how): the step ends (rc=$rc, $(grep -m1 -o 'task 1: .*' "crash-$how.err"))"
  clean_after "a task crashed on one node ($how)"
done

echo "multi-node tests took $(( $(date +%s) - T0 )) s"
# the images (the PyTorch one is 230 MB) stay only for looking into a failure
[ "$fail" = 0 ] && rm -rf "$W"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]

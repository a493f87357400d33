#!/usr/bin/env bash
# gpurun in Slurm jobs that span nodes, on the cluster of tests/slurm/multinode.sh (3 nodes):
#
#   --container-image (the SPANK plugin) and per-task `gpurun exec` on every node, each task in
#     the image and on its own node; a real Open MPI program across the nodes (Slurm's PMIx);
#     PyTorch DistributedDataParallel over gloo across 2 nodes, through the example
#     slurm/examples/pytorch-ddp.sbatch and through the plugin; a docker:// image from the
#     test network's registry pulled once per job (the registry's log counts the manifest and
#     each blob): by srun, sent with sbcast (the default) or read from a shared cache
#     (pull=shared), by the batch step for all the steps of an sbatch job; each node pulling
#     (pull=node) as the baseline; errors of a cache or directory the nodes lack
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
# Returns the status it was given, so that `res $? "…" || cat details` shows them on a failure.
res() { if [ "$1" = 0 ]; then ok "$2"; else bad "$2"; return 1; fi; }
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
# the node's mount namespace, a state directory of the plugin in the node's /tmp, a copy of a
# job's image that sbcast made in its /var/tmp.
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
      for d in /tmp/gpurun-spank.*; do [ -e "$d" ] && echo "$1: state directory $d"; done
      for f in /var/tmp/gpurun-job.*; do [ -e "$f" ] && echo "$1: image copy $f"; done' - "$n"
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
# every mount point a default container needs, so that its root is the image server's own mount
mkdir -p "$R"/{bin,etc,tmp,proc,sys,dev,root,home,var/tmp} "$R$UHOME"
touch "$R"/etc/{hosts,resolv.conf,localtime}
cp /bin/busybox "$R/bin/"
for a in $("$R/bin/busybox" --list); do [ "$a" = busybox ] || ln -s busybox "$R/bin/$a"; done
echo 'root:x:0:0:root:/root:/bin/sh' > "$R/etc/passwd"; echo 'root:x:0:' > "$R/etc/group"
# Slurm's commands inside look up its user (SlurmUser)
getent passwd slurm >> "$R/etc/passwd"; getent group slurm >> "$R/etc/group"
echo image > "$R/etc/gpurun-test-marker"
# A batch script with #SBATCH --container-image runs in the image, as with pyxis: its sruns need
# Slurm's commands inside. Here the host's /usr, Slurm's configuration, munge's socket and this
# build's plugin are bound in (the image's /lib64 and /lib point into /usr).
ln -s usr/lib64 "$R/lib64"; ln -s usr/lib "$R/lib"
MUNGE_DIR=$(sed -n 's|^AuthInfo=.*socket=\(.*\)/[^/]*$|\1|p' "${SLURM_CONF:-/etc/slurm/slurm.conf}")
SLURM_IN=/usr:/usr,/etc/slurm:/etc/slurm,${MUNGE_DIR:-/run/munge}:${MUNGE_DIR:-/run/munge},$(dirname "$GPURUN"):$(dirname "$GPURUN")
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
#SBATCH --container-mounts=$SLURM_IN
#SBATCH -t 2
#SBATCH -o $W/steps.out
echo "batch host=\$(hostname) marker=\$(cat /etc/gpurun-test-marker 2>/dev/null || echo host)"
/usr/bin/srun /probe
/usr/bin/srun /probe
EOF
as_user sbatch --wait -Q steps.sbatch >/dev/null 2>&1
grep -q '^batch host=n1 marker=image$' steps.out && [ "$(grep -c '^host=.*marker=image' steps.out)" = 6 ] \
  && [ "$(grep '^host=' steps.out | sort | uniq -c | awk '{print $1}' | sort -u)" = 2 ]
res $? "sbatch -N3 --container-image: the batch script in the image on n1, its two steps in it on n1 n2 n3" || cat steps.out
as_user srun "${T[@]}" -N3 sh -c 'readlink /proc/self/ns/net; ls /tmp | wc -l' >ns.out 2>&1
[ "$(grep -c net: ns.out | tr -d ' ')" = 3 ] && [ "$(grep net: ns.out | sort -u | wc -l)" = 3 ]
res $? "each node is its own network namespace"
# a site's default in plugstack.conf: remap_root=1 (pyxis sites get it from enroot's
# ENROOT_REMAP_ROOT); srun and each step read plugstack.conf afresh
PLUG0=$(cat "$MN_PLUGSTACK"); echo "$PLUG0 remap_root=1" > "$MN_PLUGSTACK"
out=$(as_user srun "${T[@]}" -N3 --container-image="$IMG" id -u 2>/dev/null | sort | uniq -c | awk '{print $1 "x" $2}')
out2=$(as_user srun "${T[@]}" -N1 --container-image="$IMG" --no-container-remap-root id -u 2>/dev/null)
echo "$PLUG0" > "$MN_PLUGSTACK"
[ "$out" = 3x0 ] && [ "$out2" = "$(id -u "$U")" ]
res $? "plugstack.conf remap_root=1: root inside on every node, unless --no-container-remap-root ($out, $out2)"
clean_after "after the steps above"

# --------------------------------------------------------------- one image mount per node per job
# The job's image server (one per node and image for the whole job, kept in the job's extern
# step): after each of an sbatch job's 3 steps, each node runs one server of the image, the same
# process after every step; the tasks of every step have its file system as their root.
section "sbatch -N3, 3 steps of --container-image: one image mount per node per job"
cat > mounts.sbatch <<EOF
#!/bin/sh
#SBATCH -N3
#SBATCH -t 2
#SBATCH -o $W/mounts.out
for s in 1 2 3; do
  srun --container-image=$IMG sh -c "echo step=\$s host=\\\$(hostname) dev=\\\$(stat -c %d /) \\\$(grep -c ' / / .* - fuse' /proc/self/mountinfo)"
  touch $W/mounts.done\$s; while [ ! -e $W/mounts.go\$s ]; do sleep 0.1; done
done
EOF
# the image servers of IMG on each node: "n1:PID n2:PID n3:PID"
servers() {
  local n p
  for n in "${NODES[@]}"; do
    for p in $(ip netns pids "gpmn${n#n}"); do
      tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q "^gpurun serve --image $IMG " && printf '%s:%s ' "$n" "$p"
    done
  done
}
as_user sbatch --wait -Q mounts.sbatch >/dev/null 2>&1 & job=$!
seen=()
for s in 1 2 3; do
  for _ in $(seq 300); do [ -e "$W/mounts.done$s" ] && break; sleep 0.2; done
  seen+=("$(servers)"); touch "$W/mounts.go$s"
done
wait "$job"
[[ "${seen[0]}" =~ ^n1:[0-9]+\ n2:[0-9]+\ n3:[0-9]+\ $ ]] && [ "${seen[1]}" = "${seen[0]}" ] && [ "${seen[2]}" = "${seen[0]}" ]
res $? "3 steps on n1 n2 n3: one image server per node, the same after every step (${seen[*]})"
# per node: the root file system's device in each step
devs=$(for n in "${NODES[@]}"; do echo "$n:$(sed -n "s/^step=[0-9] host=$n dev=\([0-9]*\).*/\1/p" mounts.out | sort -u | tr '\n' ',')"; done | tr '\n' ' ')
[ "$(grep -c '^step=.* 1$' mounts.out)" = 9 ] \
  && [ "$(for n in "${NODES[@]}"; do sed -n "s/^step=[0-9] host=$n dev=\([0-9]*\).*/\1/p" mounts.out | sort -u | wc -l; done | sort -u)" = 1 ]
res $? "3 steps: each node's tasks have the server's file system as their root, the same in every step ($devs)" || cat mounts.out
clean_after "the job's image servers gone with the job"

# --------------------------------------------------------------- MPI
section "Open MPI across nodes (PMIx)"
MPIIMG=$W/mpi.sqsh
as_user bash "$ROOT/tests/slurm/mpi-image.sh" "$MPIIMG" 2>mpi-image.err || { cat mpi-image.err; MPIIMG=; }
# The Slurm daemons' log lines written since log_mark NAME: what a failed step's nodes said.
log_mark() { wc -l "$MN_LOG_DIR"/*.log | awk '$2 != "total" {print $2, $1}' > "$1.marks"; }
logs_since() {
  local f n
  while read -r f n; do tail -n +"$((n + 1))" "$f" | sed "s|^|${f##*/}: |"; done < "$1.marks"
}
mpi_case() {  # NAME DESCRIPTION: 6 ranks on 3 nodes, Allreduce sum 15, each got its left neighbour's rank
  local r ok=0
  for r in 0 1 2 3 4 5; do
    grep -q "^rank=$r size=6 sum=15 from=$(( (r + 5) % 6 )) image=yes host=n" "$1.out" || ok=1
  done
  [ "$ok" = 0 ] && [ "$(hosts_of "$1.out")" = "n1 n2 n3" ] && ! grep -q 'PMIX ERROR' "$1.err"
  res $? "$2: 6 ranks on n1 n2 n3, Allreduce sum 15, ring Sendrecv, all in the image" && return
  echo "srun: $(cat "$1.rc"); its output and errors:"; cat "$1.out" "$1.err"
  echo "what the Slurm daemons logged meanwhile:"; logs_since "$1"
}
if [ -n "$MPIIMG" ]; then
  log_mark mpi; t=$SECONDS
  as_user srun "${T[@]}" -N3 -n6 --ntasks-per-node=2 --mpi=pmix gpurun exec \
    --env OMPI_MCA_btl_vader_single_copy_mechanism=none "$MPIIMG" mpi-hello >mpi.out 2>mpi.err
  echo "exit status $? after $((SECONDS - t)) s" > mpi.rc
  mpi_case mpi "srun --mpi=pmix gpurun exec, Open MPI across 3 nodes"
  log_mark pmpi; t=$SECONDS
  as_user srun "${T[@]}" -N3 -n6 --ntasks-per-node=2 --mpi=pmix --container-image="$MPIIMG" mpi-hello >pmpi.out 2>pmpi.err
  echo "exit status $? after $((SECONDS - t)) s" > pmpi.rc
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
section "--container-image=docker://$MN_REGISTRY/… in 3-node jobs: one pull per job"
REF=$MN_REGISTRY/gpurun/multinode:t
if as_user sh -c "umoci init --layout oci && umoci new --image oci:t && umoci unpack --rootless --image oci:t bundle \
     && cp -a '$R/.' bundle/rootfs/ && umoci repack --image oci:t bundle \
     && skopeo copy -q --dest-cert-dir '$MN_REGISTRY_CA_DIR' oci:oci:t 'docker://$REF'" >push.log 2>&1; then
  blobs=$(as_user skopeo inspect --raw --cert-dir "$MN_REGISTRY_CA_DIR" "docker://$REF" | grep -o 'sha256:[0-9a-f]*' | sort -u)
  # GET requests of the image's manifest and of each blob since the log line LINE, from the
  # registry's access log: "manifest×N 1a2b3c4d5e6f×N …"
  fetches() {
    local log b
    log=$(tail -n +"$(( $1 + 1 ))" "$MN_REGISTRY_LOG" | grep -o '"GET /v2/gpurun/multinode/[^ ]*')
    printf 'manifest×%s' "$(grep -c /manifests/ <<<"$log")"
    for b in $blobs; do printf ' %s×%s' "${b:7:12}" "$(grep -c "/blobs/$b" <<<"$log")"; done
  }
  # every count in fetches' line (from its field FIRST on) is N
  all_are() { [ "$(fetches "$1" | cut -d' ' -f"$2"- | tr ' ' '\n' | sed 's/.*×//' | sort -u)" = "$3" ]; }
  # images converted: in srun's cache (this machine's /var/tmp), and in the caches in the nodes'
  # /var/tmp since the count NODE_IMAGES was taken
  images_here() { ls "$1"/images/*.sqsh 2>/dev/null | wc -l; }
  images_on_nodes() {
    local n t=0
    for n in "${NODES[@]}"; do t=$((t + $(bash "$MN" exec "$n" sh -c 'ls /var/tmp/*/images/*.sqsh 2>/dev/null | wc -l'))); done
    echo $((t - ${NODE_IMAGES:-0}))
  }
  # what each task ran: its host, and the image file of its container
  step_cmd=(sh -c '/probe; echo "image=$GPURUN_CONTAINER"')
  images_of() { sed -n 's/^image=//p' "$1" | sort -u; }
  # srun (on this machine, the login side) trusts the registry's CA as the nodes do
  login=(env SSL_CERT_FILE="$MN_CA_BUNDLE")
  PLUG=$(cat "$MN_PLUGSTACK")
  plugin_args() { echo "$PLUG $*" > "$MN_PLUGSTACK"; }   # srun and each step read it afresh

  # the default, pull=sbcast: srun pulls, sbcast copies the file to the step's nodes
  c=/var/tmp/gpurun-mn-login.$$.1; mark=$(wc -l <"$MN_REGISTRY_LOG"); NODE_IMAGES=0; NODE_IMAGES=$(images_on_nodes)
  as_user "${login[@]}" GPURUN_CACHEDIR="$c" srun "${T[@]}" -N3 --container-image="docker://$REF" "${step_cmd[@]}" >reg-sbcast.out 2>reg-sbcast.err
  img=$(images_of reg-sbcast.out)
  [ "$(grep -c 'marker=image' reg-sbcast.out)" = 3 ] && [ "$(hosts_of reg-sbcast.out)" = "n1 n2 n3" ] \
    && [[ "$img" =~ ^/var/tmp/gpurun-job\.[0-9]+\.([0-9]+|job|srun)\.[0-9a-f]{16}\.sqsh$ ]]
  res $? "pull=sbcast: 3 tasks on n1 n2 n3 run one sbcast copy of the image ($img)" || cat reg-sbcast.out reg-sbcast.err
  all_are "$mark" 1 1; res $? "pull=sbcast: the manifest and each blob fetched once per job ($(fetches "$mark"))"
  [ "$(images_here "$c")" = 1 ] && [ "$(images_on_nodes)" = 0 ]
  res $? "pull=sbcast: converted once, by srun (images: $(images_here "$c") in srun's cache, $(images_on_nodes) on the nodes)"
  clean_after "pull=sbcast: the step's copies removed at its end"

  # pull=shared: srun pulls into a cache every node reads (the test user's home); a second
  # job fetches only the manifest
  plugin_args pull=shared pull_cache=%h/gpurun-multinode-tests/job-cache
  for run in 1 2; do
    mark=$(wc -l <"$MN_REGISTRY_LOG")
    as_user "${login[@]}" srun "${T[@]}" -N3 --container-image="docker://$REF" "${step_cmd[@]}" >reg-shared$run.out 2>reg-shared$run.err
    img=$(images_of reg-shared$run.out)
    [ "$(grep -c 'marker=image' reg-shared$run.out)" = 3 ] && [ "$(hosts_of reg-shared$run.out)" = "n1 n2 n3" ] \
      && [[ "$img" == "$W"/job-cache/images/*.sqsh ]]
    res $? "pull=shared, job $run: 3 tasks on n1 n2 n3 run srun's one file in the shared cache ($img)" || cat reg-shared$run.out reg-shared$run.err
    if [ $run = 1 ]; then
      all_are "$mark" 1 1; res $? "pull=shared: the manifest and each blob fetched once per job ($(fetches "$mark"))"
    else
      all_are "$mark" 2 0 && [ "$(fetches "$mark" | cut -d' ' -f1)" = manifest×1 ]
      res $? "pull=shared, a second job: the manifest fetched, the image reused from the cache ($(fetches "$mark"))"
    fi
  done
  [ "$(images_here "$W/job-cache")" = 1 ] && [ "$(images_on_nodes)" = 0 ]
  res $? "pull=shared: converted once (images: $(images_here "$W/job-cache") in the shared cache, $(images_on_nodes) on the nodes)"

  # pull=node, as pyxis + enroot: each node pulls and converts
  plugin_args pull=node
  c=/var/tmp/gpurun-mn-cache.$$; mark=$(wc -l <"$MN_REGISTRY_LOG"); NODE_IMAGES=0; NODE_IMAGES=$(images_on_nodes)
  as_user env GPURUN_CACHEDIR="$c" srun "${T[@]}" -N3 --container-image="docker://$REF" /probe >reg-node.out 2>reg-node.err
  [ "$(grep -c 'marker=image' reg-node.out)" = 3 ] && [ "$(hosts_of reg-node.out)" = "n1 n2 n3" ] \
    && all_are "$mark" 1 3 && [ "$(images_on_nodes)" = 3 ]
  res $? "pull=node: each node fetches and converts ($(fetches "$mark"); $(images_on_nodes) images on the nodes)" || cat reg-node.out reg-node.err
  mark=$(wc -l <"$MN_REGISTRY_LOG")
  as_user env GPURUN_CACHEDIR="$W/shared-cache" srun "${T[@]}" -N3 --container-image="docker://$REF" /probe >reg-nodeshared.out 2>&1
  echo "  pull=node with GPURUN_CACHEDIR on the shared home (flock across nodes): $(fetches "$mark")"

  # errors: a pull_cache the nodes do not share; an sbcast_dir the nodes lack
  plugin_args pull=shared pull_cache=/var/tmp/%u-jobs.$$
  as_user "${login[@]}" srun "${T[@]}" -N3 --container-image="docker://$REF" /probe >reg-bad1.out 2>reg-bad1.err
  rc=$?
  [ $rc = 125 ] && [ "$(grep -c '^gpurun: the image srun pulled, .*is it on a file system every node shares?' reg-bad1.err)" = 3 ] \
    && ! grep -q marker= reg-bad1.out
  res $? "pull=shared, pull_cache not shared: status 125, one line per node ($(grep -m1 '^gpurun:' reg-bad1.err | cut -c1-150))" || cat reg-bad1.err
  rm -rf /var/tmp/"$U"-jobs.$$
  plugin_args sbcast_dir=/nonexistent
  as_user "${login[@]}" GPURUN_CACHEDIR="$W/shared-cache" srun "${T[@]}" -N3 --container-image="docker://$REF" /probe >reg-bad2.out 2>reg-bad2.err
  rc=$?
  [ $rc != 0 ] && grep -q "error: gpurun: sbcast of the job's image to /nonexistent/gpurun-job\..*failed" reg-bad2.err \
    && ! grep -q marker= reg-bad2.out
  res $? "sbcast_dir the nodes lack: srun fails before the tasks (rc=$rc, $(grep -m1 'gpurun: sbcast' reg-bad2.err | cut -c1-110))" || cat reg-bad2.err
  echo "$PLUG" > "$MN_PLUGSTACK"
  clean_after "after the pulls above"

  # #SBATCH --container-image=docker://…: pulled (and sent) once for the job, before the
  # script starts; both its steps run that copy
  c=/var/tmp/gpurun-mn-login.$$.2; mark=$(wc -l <"$MN_REGISTRY_LOG")
  cat > regsteps.sbatch <<EOF
#!/bin/sh
#SBATCH -N3
#SBATCH --container-image=docker://$REF
#SBATCH --container-mounts=$SLURM_IN
#SBATCH -t 2
#SBATCH -o $W/regsteps.out
/usr/bin/srun sh -c '/probe; echo "image=\$GPURUN_CONTAINER"'
/usr/bin/srun sh -c '/probe; echo "image=\$GPURUN_CONTAINER"'
EOF
  job=$(as_user "${login[@]}" GPURUN_CACHEDIR="$c" sbatch --parsable --wait regsteps.sbatch 2>regsteps.err)
  img=$(images_of regsteps.out)
  [ "$(grep -c 'marker=image' regsteps.out)" = 6 ] && [ "$(hosts_of regsteps.out)" = "n1 n2 n3" ] \
    && [[ "$img" =~ ^/var/tmp/gpurun-job\.$job\.([0-9]+|job|srun)\.[0-9a-f]{16}\.sqsh$ ]]
  res $? "sbatch -N3 --container-image=docker://, 2 steps: all 6 tasks run one copy ($img)" || cat regsteps.out regsteps.err
  all_are "$mark" 1 1; res $? "sbatch, 2 steps: the manifest and each blob fetched once per job ($(fetches "$mark"))"
  sent=$(cat "$MN_LOG_DIR"/n*.slurmd.log | grep -c "sbcast req_uid=.* job_id=$job fname=.* block_no=1$")
  [ "$sent" = 3 ]; res $? "sbatch, 2 steps: sbcast sent the image once to each node ($sent files)"
  clean_after "sbatch with a registry image: the job's copies removed by its epilog"

  # srun lines with a registry image of their own, in a job (as under salloc): each srun pulls
  # (the manifest; blobs and conversion from its cache) and sends a copy before its step, which
  # removes it at its end
  c=/var/tmp/gpurun-mn-login.$$.3; mark=$(wc -l <"$MN_REGISTRY_LOG")
  cat > srunsteps.sbatch <<EOF
#!/bin/sh
#SBATCH -N3
#SBATCH -t 2
#SBATCH -o $W/srunsteps.out
srun --container-image=docker://$REF sh -c '/probe; echo "image=\$GPURUN_CONTAINER"'
echo "copies after step 1: \$(ls /var/tmp | grep -c '^gpurun-job\.')"
srun --container-image=docker://$REF sh -c '/probe; echo "image=\$GPURUN_CONTAINER"'
EOF
  as_user "${login[@]}" GPURUN_CACHEDIR="$c" sbatch --wait srunsteps.sbatch >/dev/null 2>srunsteps.err
  [ "$(grep -c 'marker=image' srunsteps.out)" = 6 ] && [ "$(images_of srunsteps.out | wc -l)" = 2 ] \
    && grep -q '^copies after step 1: 0$' srunsteps.out
  res $? "sbatch, 2 srun lines with a registry image: a copy per step, gone when its step ends ($(grep copies srunsteps.out))" || cat srunsteps.out srunsteps.err
  all_are "$mark" 2 1 && [ "$(fetches "$mark" | cut -d' ' -f1)" = manifest×2 ]
  res $? "sbatch, 2 srun lines: each blob fetched once, the manifest once per srun ($(fetches "$mark"))"
  clean_after "sbatch with srun lines of a registry image"

  mark=$(wc -l <"$MN_REGISTRY_LOG")
  as_user env GPURUN_CACHEDIR=/var/tmp/gpurun-mn-cache-exec.$$ srun "${T[@]}" -N3 -n6 --ntasks-per-node=2 \
    gpurun exec "docker://$REF" /probe >reg-exec.out 2>reg-exec.err
  [ "$(grep -c 'marker=image' reg-exec.out)" = 6 ] && [ "$(hosts_of reg-exec.out)" = "n1 n2 n3" ]
  res $? "srun -N3 -n6 gpurun exec docker://$REF: 6 tasks in the image on n1 n2 n3" || cat reg-exec.out reg-exec.err
  echo "  registry fetches, gpurun exec per task, node caches: $(fetches "$mark")"
  rm -rf /var/tmp/gpurun-mn-login.$$.*
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

#!/usr/bin/env bash
# Import-heavy Python starts, cold and warm, side by side: gpurun against the kernel's squashfs,
# ch-run, squashfuse_ll and the extracted tree, all on the same .sqsh file.
#
#   sudo benches/imports.sh                   # medium Debian image: numpy, json, email, http.client, decimal
#   sudo IMAGE=torch benches/imports.sh       # `import torch` (benches/torch.sh builds that image)
#
# Each rep runs every tool once, in an order rotated by one each rep; for each tool a cold start
# (sync; echo 3 > drop_caches, as root: the page, dentry and inode caches of the image and the
# host's binaries gone) then a warm start (the same start again). Times are the command's wall
# time as the user sees it (bash $EPOCHREALTIME around it), as $BENCH_USER.
#
# Tools:
#   gpurun-first     every start a first start: the user's image servers stopped before each
#   gpurun           servers stopped before the cold start only; the warm start is the same start
#                    again, as a user repeats a job (it may attach to the cold start's server)
#   gpurun-attached  a container of the same image runs throughout; both starts attach to it
#   kernel           the .sqsh loop-mounted by root (kernel squashfs), then as the user
#                    `unshare -Urm` + bind /dev /proc /sys + chroot: no launcher, so the file
#                    system's cost shows alone
#   ch-run           ch-run on the .sqsh (its built-in squashfuse)
#   squashfuse_ll    squashfuse_ll mounted in `unshare -Urm`, then the same chroot as kernel
#   extracted        the same chroot on an unsquashfs of the image (local disk)
#
# Environment [default]: IMAGE [py] or torch, REPS [10], TOOLS [all, in the order above],
# KEEP_EXTRACTED [0: torch's extracted tree is deleted after the run; 1 keeps it], BENCH_DIR
# [/var/tmp/gpurun-bench], BENCH_USER [gpuruntest], GPURUN [target/release/gpurun],
# OUT [$BENCH_DIR/results-<UTC time>]. Writes OUT/imports-IMAGE.tsv, .log and .md.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

IMAGE=${IMAGE:-py}
REPS=${REPS:-10}
read -r -a TOOLS <<<"${TOOLS:-gpurun-first gpurun gpurun-attached kernel ch-run squashfuse_ll extracted}"
KEEP_EXTRACTED=${KEEP_EXTRACTED:-0}
bench_setup ch-run squashfuse_ll unsquashfs mksquashfs debootstrap unshare

case $IMAGE in
py)
    pydeb_image
    IMG=$PYDEB.sqsh EXT=$PYDEB/extracted IMPORTS=$PYDEB_IMPORTS KEEP_EXTRACTED=1 ;;
torch)
    IMG=$BENCH_DIR/torch/torch.sqsh EXT=$BENCH_DIR/torch/extracted IMPORTS="import torch"
    [ -f "$IMG" ] || die "no $IMG: run benches/torch.sh first (it builds, pushes and pulls the image)" ;;
*) die "IMAGE=$IMAGE: say py or torch" ;;
esac
KMNT=$BENCH_DIR/kmnt-$IMAGE FMNT=$BENCH_DIR/fmnt
mkdir -p "$KMNT" "$FMNT"
chmod 755 "$KMNT" "$FMNT"
if [ ! -d "$EXT" ] || [ "$IMG" -nt "$EXT" ]; then
    echo "== unsquashfs $IMG into $EXT"
    rm -rf "$EXT" "$EXT.tmp"
    unsquashfs -q -no-progress -d "$EXT.tmp" "$IMG" >/dev/null
    mv "$EXT.tmp" "$EXT"
fi

cleanup() {
    holder_stop
    stop_servers || true
    mountpoint -q "$KMNT" && umount "$KMNT"
    [ "$KEEP_EXTRACTED" = 1 ] || rm -rf "$EXT"
}
trap cleanup EXIT
mountpoint -q "$KMNT" || mount -t squashfs -o loop,ro "$IMG" "$KMNT"

# cmd TOOL CODE: the command line of TOOL running `python3 -c CODE`, in the array CMD
cmd() {
    case $1 in
    gpurun*) CMD=("$GPURUN" exec "$IMG" python3 -c "$2") ;;
    kernel) CMD=(unshare -Urm "$BIN/chroot-run" "$KMNT" python3 -c "$2") ;;
    ch-run) CMD=(ch-run "$IMG" -- python3 -c "$2") ;;
    squashfuse_ll) CMD=(unshare -Urm "$BIN/chroot-run" --squashfuse "$IMG" "$FMNT" python3 -c "$2") ;;
    extracted) CMD=(unshare -Urm "$BIN/chroot-run" "$EXT" python3 -c "$2") ;;
    *) die "unknown tool $1" ;;
    esac
}

NAME=imports-$IMAGE
LOG=$OUT/$NAME.log TSV=$OUT/$NAME.tsv
{
    env_header
    echo "image: $IMG, $(du -m "$IMG" | cut -f1) MB, $(find "$EXT" -xdev | wc -l) entries"
    echo "command: python3 -c \"$IMPORTS\"; $REPS reps, cold then warm, tools rotated each rep"
} | tee "$LOG"
# Sanity: every tool runs the import and loads the same modules.
for t in "${TOOLS[@]}"; do
    [ "$t" = gpurun-attached ] && holder_start "$IMG"
    cmd "$t" "import sys; $IMPORTS; print(len(sys.modules))"
    n=$(as_user "${CMD[@]}" 2>"$RUN/err") || die "$t failed: $(tail -3 "$RUN/err")"
    holder_stop
    echo "$t: $n modules loaded" | tee -a "$LOG"
done

printf 'rep\ttool\tphase\tusec\trc\n' >"$TSV"
for rep in $(seq "$REPS"); do
    for k in $(seq 0 $((${#TOOLS[@]} - 1))); do
        t=${TOOLS[$(((k + rep) % ${#TOOLS[@]}))]}
        cmd "$t" "$IMPORTS"
        case $t in
        gpurun | gpurun-first) stop_servers ;;
        gpurun-attached) stop_servers; holder_start "$IMG" ;;
        esac
        for phase in cold warm; do
            [ "$t" = gpurun-first ] && stop_servers
            [ "$phase" = cold ] && drop_caches
            read -r us rc <<<"$(as_user "$BIN/time-us" "$RUN/err-$t" "${CMD[@]}")"
            printf '%s\t%s\t%s\t%s\t%s\n' "$rep" "$t" "$phase" "$us" "$rc" >>"$TSV"
            printf 'rep %s %-16s %s %8.1f ms rc %s\n' "$rep" "$t" "$phase" "$(awk "BEGIN{print $us / 1000}")" "$rc" >>"$LOG"
        done
        holder_stop
    done
    echo "rep $rep/$REPS done ($(cut -d' ' -f1 /proc/loadavg) load)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG"
for t in "${TOOLS[@]}"; do
    [ -s "$RUN/err-$t" ] && { echo "stderr of $t (last lines):"; tail -3 "$RUN/err-$t"; } | tee -a "$LOG"
    rm -f "$RUN/err-$t"
done

refs=kernel
[[ " ${TOOLS[*]} " == *" ch-run "* ]] && refs+=,ch-run
{
    sed 's/$/  /' <(grep -v '^rep ' "$LOG")
    echo
    echo "### python3 -c \"$IMPORTS\": cold and warm starts, ratios of medians (per-rep ratios p25–p75)"
    summarize "$TSV" "$refs" "${TOOLS[@]}"
} | tee "$OUT/$NAME.md"
echo "raw results: $OUT"

#!/bin/bash
# Starts of a Python that imports a few hundred modules, and of `true`, cold and warm: gpurun
# (a first start, which makes the image server, and a start attached to it) against an older
# gpurun (one FUSE mount per start), ch-run on the same .sqsh, the kernel's squashfs
# (loop-mounted here, as root) and the extracted tree; the per-start mechanisms of the older
# gpurun one by one, where that build has its GPURUN_AB_NO_* switches; an idle server's memory
# and CPU. Interleaved, through benches/ab-starts.sh.
#
#   sudo IMG=python.sqsh NEW=target/release/gpurun [OLD=/path/gpurun-older] [CH_RUN=DIR] \
#        [ROUNDS=12] benches/warm-starts.sh
#
# IMG: a squashfs with python3 (the Debian image of benches/README.md). CH_RUN: a directory with
# ch-run and, in lib/, its libraries, where it is not installed. PARTS [mech,python,true,idle].
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${IMG:?IMG=python image}" "${NEW:?NEW=gpurun}"
U=${BENCH_USER:-gpuruntest}
id "$U" >/dev/null 2>&1 || useradd -m "$U"
chmod 666 /dev/fuse
W=${WORK:-/var/tmp/gpurun-warm-starts}; mkdir -p "$W"; chmod 755 "$W"
export BENCH_USER=$U IMG GPURUN=$NEW ROUNDS=${ROUNDS:-12}
PARTS=${PARTS:-mech,python,true,idle}
IMPORTS=${IMPORTS:-json, email, email.mime.multipart, email.parser, http.client, http.server, decimal, asyncio, logging, logging.handlers, argparse, unittest, xml.etree.ElementTree, xml.dom.minidom, concurrent.futures, multiprocessing, urllib.request, sqlite3, csv, tarfile, zipfile, shutil, subprocess, threading, socketserver, pdb, inspect, dataclasses, typing, pathlib, uuid, hashlib, random, statistics, fractions, difflib, textwrap, pprint, pickle, copy, tempfile, glob, fnmatch, gzip, bz2, lzma, base64, calendar, datetime, configparser, ctypes, ssl}
PY="python3 -c 'import $IMPORTS'"
CHRUN=ch-run
if [ -n "${CH_RUN:-}" ]; then CHRUN="LD_LIBRARY_PATH=$CH_RUN/lib $CH_RUN/ch-run"; fi
if ! (cd /tmp && setpriv --reuid="$U" --regid="$U" --init-groups env -i PATH=/usr/bin:/bin USER="$U" HOME=/tmp \
        sh -c "$CHRUN $IMG -- true"); then
  echo "(ch-run does not run here: its column is left out)"; CHRUN=
fi
K=$W/ksq; X=$W/extracted; mkdir -p "$K"
# The kernel's squashfs and the extracted tree, where this kernel mounts squashfs on a loop.
if ! mountpoint -q "$K" && ! mount -t squashfs -o loop,ro "$IMG" "$K"; then
  echo "(no loop-mounted squashfs here: the kernel and extracted-tree columns are left out)"; K=
fi
[ -z "$K" ] || [ -d "$X" ] || cp -a "$K" "$X"
kcold="cold,prep=umount $K 2>/dev/null; mount -t squashfs -o loop,ro IMG $K"
kwarm="warm,prep=if ! mountpoint -q $K; then mount -t squashfs -o loop,ro IMG $K; fi"
[ -z "$K" ] || export EVICT=$X
ab() { echo "== $1"; shift; OUT=$W/$1.tsv bash "$here/ab-starts.sh" "${@:2}"; }
if [[ $PARTS == *mech* ]] && [ -n "${OLD:-}" ]; then
  off="GPURUN_AB_NO_WARM=1 GPURUN_AB_NO_KEPT_BLOCKS=1 GPURUN_AB_NO_KEPT_READS=1 GPURUN_AB_NO_LINGER=1 GPURUN_AB_NO_STORE=1 GPURUN_AB_NO_PUSHER=1 GPURUN_AB_NO_PROVIDE=1 GPURUN_AB_NO_ABSENT=1"
  v=()
  for st in cold warm; do
    v+=("all mechanisms|$st|$OLD exec IMG $PY" "none|$st|$off $OLD exec IMG $PY")
    for m in WARM KEPT_BLOCKS KEPT_READS LINGER STORE PUSHER PROVIDE ABSENT; do
      v+=("no ${m,,}|$st|GPURUN_AB_NO_$m=1 $OLD exec IMG $PY")
    done
  done
  ab "the older gpurun's per-start mechanisms, a Python start" mech "${v[@]}"
fi
if [[ $PARTS == *python* ]]; then
  v=("gpurun first start|cold|$NEW exec IMG $PY")
  [ -n "${OLD:-}" ] && v+=("older gpurun|cold|$OLD exec IMG $PY")
  [ -n "$CHRUN" ] && v+=("ch-run|cold|$CHRUN IMG -- $PY")
  [ -n "$K" ] && v+=("kernel squashfs|$kcold|unshare -r chroot $K $PY"
                     "extracted tree|cold|unshare -r chroot $X $PY")
  v+=("gpurun attached|warm|$NEW exec IMG $PY")
  [ -n "${OLD:-}" ] && v+=("older gpurun|warm|$OLD exec IMG $PY")
  [ -n "$CHRUN" ] && v+=("ch-run|warm|$CHRUN IMG -- $PY")
  [ -n "$K" ] && v+=("kernel squashfs|$kwarm|unshare -r chroot $K $PY"
                     "extracted tree|warm|unshare -r chroot $X $PY")
  ab "a Python start, side by side" python "${v[@]}"
fi
if [[ $PARTS == *true* ]]; then
  v=()
  [ -n "$CHRUN" ] && v+=("ch-run|warm|$CHRUN IMG -- true")
  v+=("gpurun attached|warm|$NEW exec IMG true")
  [ -n "${OLD:-}" ] && v+=("older gpurun|warm|$OLD exec IMG true")
  v+=("gpurun first start|fresh|$NEW exec IMG true")
  RUNS=${TRUE_RUNS:-10} ab "exec true" true "${v[@]}"
fi
if [[ $PARTS == *idle* ]]; then
  echo "== an idle image server"
  as_user() { setpriv --reuid="$U" --regid="$U" --init-groups env -i PATH=/usr/bin:/bin HOME=/tmp "$@"; }
  as_user "$NEW" -q stop
  (cd /tmp && as_user "$NEW" exec "$IMG" sh -c "$PY" >/dev/null)
  pid=$(pgrep -u "$U" -f "gpurun serve --image $IMG" | head -1)
  sleep 2
  t0=$(awk '{print $14 + $15}' "/proc/$pid/stat"); sleep 30; t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  echo "idle server $pid: RSS $(awk '/VmRSS/ {print $2, $3}' "/proc/$pid/status") after a Python start; CPU ticks over 30 s idle: $((t1 - t0))"
  as_user "$NEW" -q stop
fi
[ -z "$K" ] || umount "$K"

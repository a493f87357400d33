#!/bin/bash
# Interleaved A/B of container starts, cold and warm: ROUNDS rounds, each running every variant
# RUNS times [1] in a rotated order (a round's time is the median of its runs); prints each
# variant's median over the rounds, its spread (min-max) and the median of its per-round ratios
# (and their spread) to the first variant of the same state.
#
#   sudo IMG=/path/image.sqsh ROUNDS=12 benches/ab-starts.sh \
#       "main|cold|/tmp/gpurun-main exec IMG python3 -c 'import numpy'" \
#       "new first|cold|target/release/gpurun exec IMG python3 -c 'import numpy'" \
#       "new attached|warm|target/release/gpurun exec IMG python3 -c 'import numpy'"
#
# A variant is NAME|STATE|COMMAND, IMG in COMMAND replaced by $IMG; the command runs as
# $BENCH_USER [gpuruntest] from /tmp (leading NAME=VALUE words are its environment). STATE:
#   cold   the user's image servers stopped (`$GPURUN stop`), and the image file, the user's gpurun
#          cache and EVICT [the extracted tree, if any] evicted from the page cache
#   fresh  the user's image servers stopped, nothing evicted (a first start on a warm node)
#   warm   the command run once, untimed, first
# and optionally ",prep=SHELL": a root command run (untimed) before the command, e.g. a fresh
# loop mount for a kernel squashfs. Commands run at nice $NICE [-10], ahead of other work on a
# shared machine. Raw times in $OUT [/tmp/ab-starts.tsv].
set -euo pipefail
. "$(dirname "$0")/lib.sh"
U=${BENCH_USER:-gpuruntest}
UID_=$(id -u "$U")
: "${IMG:?IMG=image file}"
GPURUN=${GPURUN:-$(dirname "$0")/../target/release/gpurun}
CACHE=${CACHE:-/var/tmp/gpurun-$UID_}
export BENCH_USER=$U IMG GPURUN CACHE ROUNDS=${ROUNDS:-12} RUNS=${RUNS:-1} OUT=${OUT:-/tmp/ab-starts.tsv}
python3 - "$@" <<'PY'
import os, statistics, subprocess, sys, time
user, img, gpurun = os.environ["BENCH_USER"], os.environ["IMG"], os.environ["GPURUN"]
variants = [v.split("|", 2) for v in sys.argv[1:]]
# NICE [-10]: measured commands at a higher priority than other work on a shared machine.
as_user = ["nice", "-n", os.environ.get("NICE", "-10"), "setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups",
           "env", "-i", "PATH=/usr/bin:/bin:/usr/sbin:/sbin", f"HOME=/home/{user}", f"USER={user}"]

def evict(path):
    for d, _, names in os.walk(path) if os.path.isdir(path) else [(os.path.dirname(path), [], [os.path.basename(path)])]:
        for f in names:
            try:
                fd = os.open(os.path.join(d, f), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)

def run(cmd, env):
    full = as_user + [f"{k}={v}" for k, v in env] + ["sh", "-c", cmd]
    t = time.perf_counter()
    p = subprocess.run(full, cwd="/tmp", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {cmd}: {p.stderr.decode()}")
    return dt

def env_and_cmd(c):
    env, words = [], c.replace("IMG", img).split(" ")
    while words and "=" in words[0] and words[0].split("=")[0].isupper():
        env.append(tuple(words.pop(0).split("=", 1)))
    return env, " ".join(words)

def prepare(state, cmd, env):
    kind, _, prep = state.partition(",prep=")
    if kind in ("cold", "fresh"):
        subprocess.run(as_user + [gpurun, "-q", "stop"], stdout=subprocess.DEVNULL)
    if kind == "cold":
        for p in [img, os.environ["CACHE"]] + os.environ.get("EVICT", "").split():
            evict(p)
    if prep:
        subprocess.run(["sh", "-c", prep.replace("IMG", img)], check=True)
    if kind == "warm":
        run(cmd, env)

times = {i: [] for i in range(len(variants))}
rounds = int(os.environ["ROUNDS"])
for r in range(rounds):
    order = list(range(len(variants)))
    order = order[r % len(order):] + order[:r % len(order)]
    for i in order:
        name, state, cmd = variants[i]
        env, cmd = env_and_cmd(cmd)
        each = []
        for _ in range(int(os.environ["RUNS"])):
            prepare(state, cmd, env)
            each.append(run(cmd, env))
        times[i].append(statistics.median(each))
    print(f"round {r + 1}: " + " ".join(f"{times[i][-1] * 1000:.1f}" for i in range(len(variants))), flush=True)
with open(os.environ["OUT"], "w") as f:
    for i, (name, state, cmd) in enumerate(variants):
        f.write("\t".join([name, state] + [f"{t * 1e6:.0f}" for t in times[i]]) + "\n")
first = {}
for i, (name, state, _) in enumerate(variants):
    state = state.split(",")[0]
    first.setdefault(state, i)
    base = times[first[state]]
    ratios = [a / b for a, b in zip(times[i], base)]
    t = times[i]
    print(f"{name:<28} {state:<4} median {statistics.median(t) * 1000:7.1f} ms "
          f"(min {min(t) * 1000:.1f}, max {max(t) * 1000:.1f})  "
          f"ratio to {variants[first[state]][0]}: {statistics.median(ratios):.3f} "
          f"({min(ratios):.2f}-{max(ratios):.2f})")
PY

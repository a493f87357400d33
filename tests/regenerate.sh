#!/bin/sh
# Regenerate completions/ and man/ from the clap definitions (tests/ux.rs checks they are current).
set -eu
cd "$(dirname "$0")/.."
cargo build --quiet
bin=target/debug/gpurun
$bin completions bash > completions/gpurun.bash
$bin completions zsh > completions/_gpurun
$bin completions fish > completions/gpurun.fish
rm -rf man && $bin man man

#!/bin/bash
# On the GPU machine: bench/l2_ahead.cu, what a skinny matmul gains from
# weights asked of L2 while the GPU's memory is idle, and what a prefetch
# costs a latency-bound kernel beside it (docs/decisions.md, "Weights into
# L2 during the decode: measured, removed"). Log under $OUT.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/reel-l2-out}
mkdir -p "$OUT"
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
B=/tmp/reel-l2-build
timeout 300 bash -c "meson setup $B -Dcuda=enabled -Dbuildtype=release -Dtests=false >/dev/null && ninja -C $B -j16 bench/bench_l2_ahead" \
    >"$OUT/l2-build.log" 2>&1 || { tail -20 "$OUT/l2-build.log"; exit 1; }
timeout 120 "$B/bench/bench_l2_ahead" 20 2>&1 | tee "$OUT/l2-probe.md"

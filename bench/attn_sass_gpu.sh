#!/bin/bash
# On the GPU machine: Nsight Compute's per-instruction counts (SASS, executed
# instructions and stall samples a line) of the decode kernel at one
# bench_attention row, from a build bench/variants_ab.sh made.
#   bench/attn_sass_gpu.sh BUILD-NAME ROW   (CSV under $OUT)
set -u
cd "$(dirname "$0")/.."
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/reel-sass-out}
mkdir -p "$OUT"
B=/tmp/reel-var-$1
timeout 200 ncu --clock-control none --kernel-name "regex:attn_decode" --launch-count 1 --section SourceCounters \
    --section WarpStateStats -f -o /tmp/dm-sass "$B/bench/bench_attention" 1 "$2" >/dev/null 2>&1 || echo "ncu failed: $?"
ncu -i /tmp/dm-sass.ncu-rep --page source --csv --print-source sass >"$OUT/sass-row$2.csv" 2>"$OUT/sass-row$2.err"
echo "sass lines: $(wc -l <"$OUT/sass-row$2.csv")"; head -c 600 "$OUT/sass-row$2.err"

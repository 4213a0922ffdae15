#!/bin/bash
# On the GPU machine, one call: the one-kernel decode to 64 tokens
# (-DREEL_ATTN_ONE_KERNEL_ROWS=64; main: 32) where their blocks fit one wave
# (GQA models: 64 tokens of 2 or 4 kv heads): bench_attention's decode rows,
# then bench_decode's replayed step at hidden 1024 with 4 and 2 kv heads.
set -u -o pipefail
cd "$(dirname "$0")/.."
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/reel-step-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
V=("main:" "ok64:-DREEL_ATTN_ONE_KERNEL_ROWS=64")
REEL_AB_PROGRAM=bench_attention REEL_AB_ARGS="20 decode" bench/variants_ab.sh "${V[@]}" | tee "$OUT/attn-ab-ok64.md"
for kv in 4 2; do
    echo "=== kv heads $kv"
    REEL_AB_HIDDEN=1024 REEL_AB_BATCHES=${REEL_AB_BATCHES:-32,48,64} REEL_AB_CONTEXTS=${REEL_AB_CONTEXTS:-128,2048} \
        REEL_AB_DECODE_ARGS="--kv-heads $kv" bench/variants_ab.sh "${V[@]}"
done | tee "$OUT/step-ab-ok64.md"

#!/bin/bash
# On the GPU machine, one call: a cap on the decode's chunk count
# (-DREEL_ATTN_CHUNK_CAP, ops/cuda/attn_decode.cu; 0, no cap, is main)
# at 8 (the in-block combine's most, so small batches merge in the decode
# kernel) and at 16 with the in-block combine to 16: bench_attention's
# decode rows, then bench_decode's replayed step at hidden 1024.
set -u -o pipefail
cd "$(dirname "$0")/.."
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/reel-step-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
V=("main:" "cap8:-DREEL_ATTN_CHUNK_CAP=8" "cap16:-DREEL_ATTN_CHUNK_CAP=16 -DREEL_ATTN_INBLOCK_MAX=16")
REEL_AB_PROGRAM=bench_attention REEL_AB_ARGS="20 decode" bench/variants_ab.sh "${V[@]}" | tee "$OUT/attn-ab-cap.md"
REEL_AB_HIDDEN=1024 REEL_AB_BATCHES=${REEL_AB_BATCHES:-1,8} REEL_AB_CONTEXTS=${REEL_AB_CONTEXTS:-2048,8192} \
    REEL_AB_DECODE_ARGS="--max-context 8192" bench/variants_ab.sh "${V[@]}" | tee "$OUT/step-ab-cap.md"

#!/bin/bash
# On the GPU machine, one call: the decode's one-chunk rule for short tokens
# (REEL_ATTN_WHOLE_KEYS, ops/attn_chunks.h) at 256 (the default), off (0)
# and 512: bench_attention's decode rows at contexts 128, 256 and 512 (the
# token of a point has as many keys as its context), then bench_decode's
# replayed step at hidden 1024, batches 1, 8, 64, contexts 128 (tokens of
# 129 to about 240 keys) and 300 (301 to about 420).
set -u -o pipefail
cd "$(dirname "$0")/.."
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/reel-step-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
V=("w256:" "w0:-DREEL_ATTN_WHOLE_KEYS=0" "w512:-DREEL_ATTN_WHOLE_KEYS=512")
REEL_AB_PROGRAM=bench_attention REEL_AB_ARGS="20 decode ${REEL_WHOLE_CTXS:-128,256,512}" bench/variants_ab.sh "${V[@]}" |
    tee "$OUT/attn-ab-whole.md"
REEL_AB_HIDDEN=1024 REEL_AB_BATCHES=${REEL_AB_BATCHES:-1,8,64} REEL_AB_CONTEXTS=${REEL_AB_CONTEXTS:-128,300} \
    bench/variants_ab.sh "${V[@]}" | tee "$OUT/step-ab-whole.md"

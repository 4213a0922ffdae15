#!/bin/bash
# On the GPU machine, one call: the one-chunk bound where a block takes 4
# query heads or more (REEL_ATTN_WHOLE_KEYS_GQA, ops/attn_chunks.h) at 256
# (main), 512 and 1024: bench_attention's decode rows at contexts 512 and
# 1024 (and 2048), then bench_decode's replayed step at hidden 1024 with 4 and 2 kv
# heads, batches 1, 8, 64, contexts 300 and 700 (tokens of 301-420 and
# 701-820 keys). A fourth build: the combine's first partials loaded with its
# log-sum-exps (-DREEL_ATTN_COMBINE_PREFETCH=1, ops/cuda/attn_decode.cu).
set -u -o pipefail
cd "$(dirname "$0")/.."
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/reel-step-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
V=("main:" "g512:-DREEL_ATTN_WHOLE_KEYS_GQA=512" "g1024:-DREEL_ATTN_WHOLE_KEYS_GQA=1024" "cpf:-DREEL_ATTN_COMBINE_PREFETCH=1")
REEL_AB_PROGRAM=bench_attention REEL_AB_ARGS="20 decode 512,1024,2048" bench/variants_ab.sh "${V[@]}" | tee "$OUT/attn-ab-gqa.md"
for kv in 4 2; do
    echo "=== kv heads $kv"
    REEL_AB_HIDDEN=1024 REEL_AB_BATCHES=${REEL_AB_BATCHES:-1,8,64} REEL_AB_CONTEXTS=${REEL_AB_CONTEXTS:-300,700} \
        REEL_AB_DECODE_ARGS="--kv-heads $kv" bench/variants_ab.sh "${V[@]}"
done | tee "$OUT/step-ab-gqa.md"
echo "=== kv heads 16, context 2048 (the combine kernel at batch 1)"
REEL_AB_HIDDEN=1024 REEL_AB_BATCHES=1,8 REEL_AB_CONTEXTS=2048 bench/variants_ab.sh "main:" "cpf:" | tee -a "$OUT/step-ab-gqa.md"

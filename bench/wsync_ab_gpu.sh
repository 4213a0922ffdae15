#!/bin/bash
# On the GPU machine, one call: the decode's warp-level tile waits
# (REEL_ATTN_DM_WSYNC, the default) against a block barrier a tile
# (-DREEL_ATTN_DM_WSYNC=0): the CUDA demo's checksums of both builds (the
# same bits expected), bench_attention's decode rows, then the step. The
# warp waits were not taken (docs/decisions.md): both builds come from a copy
# of this tree with bench/results/attn-dm-wsync.patch applied.
set -u -o pipefail
cd "$(dirname "$0")/.."
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/reel-step-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
SRC=/tmp/reel-wsync-src
rm -rf "$SRC" && mkdir -p "$SRC" &&
    tar --exclude='./build*' --exclude=./.devdeps --exclude=./.git -cf - . | tar -xf - -C "$SRC" &&
    (cd "$SRC" && patch -s -p1 <bench/results/attn-dm-wsync.patch) || { echo "patch failed"; exit 1; }
REEL_AB_PROGRAM=bench_attention REEL_AB_ARGS="20 decode" bench/variants_ab.sh "ws@$SRC:" "bar@$SRC:-DREEL_ATTN_DM_WSYNC=0" | tee "$OUT/attn-ab-wsync.md"
for n in ws bar; do
    ninja -C /tmp/reel-var-$n tools/reel >/dev/null 2>&1 || echo "reel tool build failed: $n"
    echo "--- demo checksums, $n"
    timeout 60 /tmp/reel-var-$n/tools/reel demo --backend cuda --quiet 2>&1 | grep -E "checksum|rror"
    timeout 120 /tmp/reel-var-$n/tools/reel demo --backend cuda --quiet --layers 8 --hidden 1024 --heads 16 --ffn 4096 \
        --vocab 32000 --max-context 2048 2>&1 | grep -E "checksum|rror"
done
REEL_AB_HIDDEN="${REEL_AB_HIDDEN:-2048 1024}" REEL_AB_BATCHES=${REEL_AB_BATCHES:-1,8,32,64} REEL_AB_CONTEXTS=128,2048 \
    bench/variants_ab.sh "ws@$SRC:" "bar@$SRC:-DREEL_ATTN_DM_WSYNC=0" | tee "$OUT/step-ab-wsync.md"

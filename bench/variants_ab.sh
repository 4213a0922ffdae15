#!/bin/bash
# On the GPU machine: bench_decode's replayed step (GPU time) for several
# builds, each with its own -D flags (to nvcc and cc) and, after an @, its
# own source tree (an older snapshot; this tree without one), same run.
#   bench/variants_ab.sh "name:-DFLAG=1 -DOTHER=2" "base:" "old@/path/to/snapshot:" ...
# (REEL_AB_HIDDEN="1024", REEL_AB_BATCHES=1,8, REEL_AB_CONTEXTS=128,2048; REEL_AB_DECODE_ARGS:
# more bench_decode options, e.g. "--max-context 8192")
# REEL_AB_PROGRAM=bench_prefill_gemm builds and runs that program instead
# (its whole table, REEL_AB_ARGS its arguments), e.g. the matmul workspace:
#   REEL_AB_PROGRAM=bench_prefill_gemm bench/variants_ab.sh \
#       "ws4:-DREEL_CUDA_WS_HOPPER_MIB=4" "ws32:-DREEL_CUDA_WS_HOPPER_MIB=32"
# or the two prefill kernels:
#   REEL_AB_PROGRAM=bench_attention REEL_AB_ARGS="20 prefill" bench/variants_ab.sh \
#       "wgmma:" "sync:-DREEL_ATTN_PREFILL_SYNC"
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/reel-step-out}
mkdir -p "$OUT"
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
prog=${REEL_AB_PROGRAM:-bench_decode}
for v in "$@"; do
    spec=${v%%:*} args=${v#*:}
    name=${spec%%@*} src=.
    [ "$spec" != "$name" ] && src=${spec#*@}
    d=/tmp/reel-var-$name
    [ -d "$d" ] || (cd "$src" && meson setup "$d" -Dcuda=enabled -Dbuildtype=release -Dtests=false \
        ${args:+"-Dcuda_args=$args" "-Dc_args=$args"}) \
        >"$OUT/var-setup-$name.log" 2>&1 || { tail -20 "$OUT/var-setup-$name.log"; exit 1; }
    timeout 300 ninja -C "$d" "bench/$prog" >"$OUT/var-build-$name.log" 2>&1 || { tail -20 "$OUT/var-build-$name.log"; exit 1; }
done
if [ "$prog" != bench_decode ]; then
    for v in "$@"; do
        spec=${v%%:*}
        name=${spec%%@*}
        echo "--- $prog, $spec (${v#*:})"
        timeout 300 "/tmp/reel-var-$name/bench/$prog" ${REEL_AB_ARGS:-} | tee "$OUT/$prog-$name.md"
    done
    exit 0
fi
for h in ${REEL_AB_HIDDEN:-1024}; do
    for v in "$@"; do
        spec=${v%%:*}
        name=${spec%%@*}
        echo "--- hidden $h, $spec (${v#*:})"
        timeout 200 "/tmp/reel-var-$name/bench/bench_decode" --hidden "$h" --ffn $((4 * h)) --batches "${REEL_AB_BATCHES:-1,8}" \
            --contexts "${REEL_AB_CONTEXTS:-128,2048}" --steps 100 --no-eager --no-logits --dir /tmp/reel-ab ${REEL_AB_DECODE_ARGS:-} 2>"$OUT/var-run-$name-h$h.err" | grep -E "^\| [0-9]" \
            || { echo "bench_decode failed:"; grep -v "^bench_decode: context" "$OUT/var-run-$name-h$h.err" | tail -5; }
        # the replay plan's device memory, each context (bench/decode.c's plan and process lines)
        grep -E "^(plan|process) " /tmp/reel-ab/reel_decode.txt | grep -oE "^(plan|process)|context=[0-9]+|arena_bytes=[0-9]+|stream_ws_bytes=[0-9]+|dev_other_bytes=-?[0-9]+|once_dev_bytes=-?[0-9]+" | paste -sd' ' | sed 's/ plan/\nplan/g; s/ process/\nprocess/g'
    done
done

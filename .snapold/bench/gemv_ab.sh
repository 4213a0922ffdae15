#!/bin/bash
# On the GPU machine: the decode step with the skinny-matmul impl's rule
# (tree A, bench/step_gpu.sh's build: every [N, K] weight at up to 16 rows)
# against tree B, built with REEL_AB_ARGS (default -DREEL_GEMV_NARROW=1:
# the first, narrower rule), same run, bench_decode's GPU time.
#   bench/gemv_ab.sh   (REEL_AB_HIDDEN="1024 2048", REEL_AB_BATCHES=1,8, REEL_AB_CONTEXTS=128,2048,
#                       REEL_AB_ARGS=-DREEL_GEMV_NARROW=1)
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/reel-step-out}
mkdir -p "$OUT"
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
A=/tmp/reel-step-build B=/tmp/reel-step-b
for t in "$A:" "$B:${REEL_AB_ARGS:--DREEL_GEMV_NARROW=1}"; do
    d=${t%%:*} args=${t#*:}
    [ -d "$d" ] || meson setup "$d" -Dcuda=enabled -Dbuildtype=release -Dtests=false ${args:+-Dcuda_args=$args} \
        >"$OUT/ab-setup.log" 2>&1 || { tail -20 "$OUT/ab-setup.log"; exit 1; }
    timeout 300 ninja -C "$d" bench/bench_decode >"$OUT/ab-build.log" 2>&1 || { tail -20 "$OUT/ab-build.log"; exit 1; }
done
for h in ${REEL_AB_HIDDEN:-1024 2048}; do
    for d in "$A" "$B"; do
        echo "--- hidden $h, $d"
        timeout 200 "$d/bench/bench_decode" --hidden "$h" --ffn $((4 * h)) --batches "${REEL_AB_BATCHES:-1,8}" \
            --contexts "${REEL_AB_CONTEXTS:-128,2048}" --steps 100 --dir /tmp/reel-ab 2>/dev/null | grep -E "^\| [0-9]"
    done
done

#!/bin/bash
# On the GPU machine, one call: main verified (bench/gpu.sh without the
# sanitizer phases, whose kernels this does not touch), then the argmax's
# cluster split against the one-block kernel (-DREEL_ARGMAX_CLUSTER=1):
# compute-sanitizer over the argmax test, the kernel timelines of the decode
# step at batches 1 and 8 (bench/trace.sh) and the replayed step's GPU time
# (bench/variants_ab.sh), both builds in the call.
set -u -o pipefail
cd "$(dirname "$0")/.."
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/reel-argmax-out}
mkdir -p "$OUT"
export OUT
date -u
REEL_GPU_TORCH_CHAIN=0 REEL_GPU_SANITIZE=0 REEL_GPU_OTHER=0 timeout 400 bash bench/gpu.sh >"$OUT/gpu.txt" 2>&1
echo "bench/gpu.sh: exit $?"
grep -vE "^\| (decode|prefill) " "$OUT/gpu.txt" | tail -70
B=/tmp/reel-gpu-build
for tool in memcheck racecheck; do
    timeout 60 compute-sanitizer --tool $tool --target-processes all "$B/tests/gpu/test_gpu_ops" --filter='*argmax*' 2>&1 |
        grep -E "SUMMARY|Synthesis|FAIL"
done
REEL_AB_BATCHES=1,8,64 REEL_AB_CONTEXTS=128 timeout 240 bench/variants_ab.sh "main:" "am1:-DREEL_ARGMAX_CLUSTER=1" |
    tee "$OUT/step-ab-argmax.md"
for v in main am1; do
    timeout 60 bash bench/trace.sh "$OUT/trace-$v.md" "/tmp/reel-var-$v/bench/bench_decode" --hidden 1024 --ffn 4096 \
        --batches 1,8 --contexts 128 --steps 100 --no-eager --no-logits --dir /tmp/reel-tr >/dev/null 2>&1
    echo "--- $v: argmax in the timeline"
    grep -iE "^## graph|argmax" "$OUT/trace-$v.md" | head -8
done
date -u

#!/bin/bash
# On the GPU machine, one call: the argmax's cluster split (ops/cuda/rows.cu)
# against one block a row (-DREEL_ARGMAX_CLUSTER=1). Builds main with the
# tests, runs the gpu suite, compute-sanitizer memcheck and racecheck over the
# argmax test, the decode step beside PyTorch (bench_decode, which loads its
# seeded checkpoint through the safetensors loader, and bench/torch_model.py
# on the same checkpoint), then both builds' kernel timelines of the replayed
# decode step (bench/trace.sh) and their step times (bench/variants_ab.sh).
set -u -o pipefail
cd "$(dirname "$0")/.."
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/reel-argmax-out}
mkdir -p "$OUT"
export OUT
B=/tmp/reel-gpu-build
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
rm -rf "$B"
timeout 240 bash -c "meson setup '$B' -Dcuda=enabled -Dbuildtype=release && ninja -C '$B' -j$(nproc)" \
    >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
echo "built $(date -u +%T)"
timeout 150 meson test -C "$B" --no-rebuild --suite gpu --num-processes 4 --print-errorlogs >"$OUT/test-gpu.log" 2>&1
echo "meson test --suite gpu: exit $?"
grep -E "^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped|Timeout):|\[FAIL\]" "$OUT/test-gpu.log" | head -40
for tool in memcheck racecheck; do
    timeout 60 compute-sanitizer --tool $tool --target-processes all "$B/tests/gpu/test_gpu_ops" --filter='*argmax*' 2>&1 |
        grep -E "SUMMARY|Synthesis|FAIL"
done
timeout 120 "$B/bench/bench_decode" --batches 1,8,64 --contexts 128,2048 --dir /tmp/reel-decode >"$OUT/bench-decode.md" 2>&1
echo "bench_decode: exit $?"
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_model.py --dir /tmp/reel-decode >>"$OUT/bench-decode.md" 2>&1
echo "torch_model.py: exit $?"
tail -25 "$OUT/bench-decode.md"
echo "=== A/B $(date -u +%T)"
REEL_AB_BATCHES=1,8,64 REEL_AB_CONTEXTS=128 timeout 200 bench/variants_ab.sh "main:" "am1:-DREEL_ARGMAX_CLUSTER=1" |
    tee "$OUT/step-ab-argmax.md"
for v in main am1; do
    timeout 60 bash bench/trace.sh "$OUT/trace-$v.md" "/tmp/reel-var-$v/bench/bench_decode" --hidden 1024 --ffn 4096 \
        --batches 1,8 --contexts 128 --steps 100 --no-eager --no-logits --dir /tmp/reel-tr >/dev/null 2>&1
    echo "--- $v: argmax in the timeline"
    grep -iE "^## graph|argmax" "$OUT/trace-$v.md" | head -8
done
date -u

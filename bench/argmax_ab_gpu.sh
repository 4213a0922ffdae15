#!/bin/bash
# On the GPU machine, one call: the argmax's cluster split (ops/cuda/rows.cu,
# the default) against one block a row (-DREEL_ARGMAX_CLUSTER=1), most important first, so
# a call cut short still brings back the first phases: the argmax test and
# compute-sanitizer over it; the op alone from both builds (bench_argmax)
# beside torch.argmax on the same shapes (bench/torch_argmax.py); both
# builds' kernel timelines of the replayed decode step at vocab 128256
# (bench/trace.sh); the whole gpu suite; the decode step beside
# PyTorch (bench_decode loads its seeded checkpoint through the safetensors
# loader, bench/torch_model.py the same checkpoint); both builds' step times
# (bench/variants_ab.sh).
set -u -o pipefail
cd "$(dirname "$0")/.."
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/reel-argmax-out}
mkdir -p "$OUT"
export OUT
B=/tmp/reel-gpu-build A=/tmp/reel-var-one
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
rm -rf "$B" "$A"
# $B: main (the cluster split), with the tests; $A: one block a row, the benchmarks alone.
meson setup "$B" -Dcuda=enabled -Dbuildtype=release >"$OUT/setup.log" 2>&1 &&
    meson setup "$A" -Dcuda=enabled -Dbuildtype=release -Dtests=false \
        -Dcuda_args=-DREEL_ARGMAX_CLUSTER=1 -Dc_args=-DREEL_ARGMAX_CLUSTER=1 >>"$OUT/setup.log" 2>&1 ||
    { tail -20 "$OUT/setup.log"; exit 1; }
timeout 200 ninja -C "$B" tests/gpu/test_gpu_ops bench/bench_decode bench/bench_argmax >"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
echo "built $(date -u +%T)"
timeout 60 "$B/tests/gpu/test_gpu_ops" 2>&1 | tail -3
for tool in memcheck racecheck; do
    timeout 60 compute-sanitizer --tool $tool --target-processes all "$B/tests/gpu/test_gpu_ops" --filter='*argmax*' 2>&1 |
        grep -E "SUMMARY|Synthesis|FAIL"
done
timeout 200 ninja -C "$A" bench/bench_decode bench/bench_argmax >"$OUT/build-main.log" 2>&1 || { tail -20 "$OUT/build-main.log"; exit 1; }
echo "=== the op alone $(date -u +%T)"
for v in "main:$B" "one:$A"; do
    timeout 60 "${v#*:}/bench/bench_argmax" 50 | tee "$OUT/argmax-${v%%:*}.md"
done
timeout 90 python3 bench/torch_argmax.py 50 | tee "$OUT/argmax-torch.md"
for v in "main:$B" "one:$A"; do
    timeout 60 bash bench/trace.sh "$OUT/trace-${v%%:*}.md" "${v#*:}/bench/bench_decode" --hidden 1024 --ffn 4096 \
        --vocab 128256 --batches 1,8 --contexts 128 --steps 100 --no-eager --no-logits --dir /tmp/reel-tr >/dev/null 2>&1
    echo "--- ${v%%:*}: argmax in the timeline"
    grep -iE "^## graph|argmax" "$OUT/trace-${v%%:*}.md" | head -6
done
echo "=== the gpu suite $(date -u +%T)"
timeout 200 ninja -C "$B" >>"$OUT/build.log" 2>&1 &&
    timeout 150 meson test -C "$B" --no-rebuild --suite gpu --num-processes 4 --print-errorlogs >"$OUT/test-gpu.log" 2>&1
echo "meson test --suite gpu: exit $?"
grep -E "^(Ok|Fail|Skipped|Timeout):|\[FAIL\]" "$OUT/test-gpu.log" | head -20
timeout 120 "$B/bench/bench_decode" --batches 1,8,64 --contexts 128,2048 --dir /tmp/reel-decode >"$OUT/bench-decode.md" 2>&1
echo "bench_decode: exit $?"
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_model.py --dir /tmp/reel-decode >>"$OUT/bench-decode.md" 2>&1
echo "torch_model.py: exit $?"
tail -22 "$OUT/bench-decode.md"
ln -sfn "$B" /tmp/reel-var-main
REEL_AB_BATCHES=1,8,64 REEL_AB_CONTEXTS=128 REEL_AB_DECODE_ARGS="--vocab 128256" timeout 120 bench/variants_ab.sh "main:" "one:" | tee "$OUT/step-ab-argmax.md"
date -u

#!/bin/bash
# On the GPU machine: builds the attention tests and benchmark only, runs
# them, then PyTorch's SDPA on the same shapes. Logs under $OUT.
#   bench/attn_gpu.sh [tests|reel|bench|all] [sanitize]
# tests: the tests; reel: reel's benchmark alone; bench: it and PyTorch's.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/reel-attn-out}
mkdir -p "$OUT"
what=${1:-all}
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
B=/tmp/reel-attn-build
if [ ! -f $B/build.ninja ]; then
    meson setup $B -Dcuda=enabled -Dbuildtype=release >"$OUT/setup.log" 2>&1 || { tail -30 "$OUT/setup.log"; exit 1; }
fi
timeout 300 ninja -C $B -j16 tests/gpu/test_gpu_attention tests/gpu/test_gpu_ops bench/bench_attention \
    >"$OUT/build.log" 2>&1 || { grep -E "error|FAILED" -A5 "$OUT/build.log" | head -60; exit 1; }
if [ "$what" = tests ] || [ "$what" = all ] || [ "$what" = reel ]; then
    echo "=== test_gpu_attention"
    timeout 240 $B/tests/gpu/test_gpu_attention --jobs 4 2>&1 | tail -40
    echo "=== test_gpu_ops"
    timeout 120 $B/tests/gpu/test_gpu_ops --filter '*attention*' 2>&1 | tail -20
fi
if [ "${2:-}" = sanitize ]; then
    echo "=== compute-sanitizer memcheck / racecheck (attention)"
    timeout 200 compute-sanitizer --tool memcheck $B/tests/gpu/test_gpu_attention --jobs 1 --filter '*mixed*' 2>&1 | tail -8
    timeout 200 compute-sanitizer --tool racecheck $B/tests/gpu/test_gpu_attention --jobs 1 --filter '*guards*' 2>&1 | tail -8
fi
if [ "$what" = bench ] || [ "$what" = reel ] || [ "$what" = all ]; then
    echo "=== bench_attention"
    timeout 200 $B/bench/bench_attention 20 2>&1 | tee "$OUT/bench-attention.md"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
    echo "=== torch"
    PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_attention.py 20 2>&1 | tee "$OUT/torch-attention.md"
fi

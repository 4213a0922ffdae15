#!/bin/bash
# On the GPU machine (see ../shared/device/README.md): builds reel with CUDA
# in a fresh /tmp build, runs the gpu test suite, the benchmarks and the
# other suites, and leaves the logs under $OUT (/tmp/reel-gpu-out when unset). Each
# phase has a time limit so the logs come back even when one hangs.
#   REEL_GPU_SANITIZE=1  also run the gpu op tests under compute-sanitizer
#   REEL_GPU_SANITIZE=attention  only the attention tests under it
#   REEL_GPU_OTHER=0     skip the non-gpu suites
#   REEL_GPU_TORCH_CHAIN=0, REEL_GPU_DECODE=0  skip the PyTorch chain, the decode step
#   REEL_GPU_MATRIX=1    only the decode matrix (bench/decode_matrix.sh): builds
#                        bench_decode alone, runs the matrix, and stops there
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/reel-gpu-out}
mkdir -p "$OUT"
B=/tmp/reel-gpu-build
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
jobs=$(nproc)

phase() { echo; echo "=== $* ($(date +%T))"; }

phase device
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee "$OUT/device.txt"

if [ "${REEL_GPU_MATRIX:-0}" = 1 ]; then
    phase build bench_decode
    rm -rf "$B"
    timeout 300 bash -c "meson setup '$B' -Dcuda=enabled -Dbuildtype=release -Dtests=false && ninja -C '$B' -j$jobs bench/bench_decode" \
        >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED: bench_decode"; exit 1; }
    tail -1 "$OUT/build.log"
    phase decode matrix
    bash bench/decode_matrix.sh "$B"
    rc=$?
    phase done
    exit $rc
fi

phase build
rm -rf "$B"
# -k 0: a target that fails (someone's work in progress) does not stop the
# others; the run goes on when the gpu suite and the bench were built.
timeout 240 bash -c "meson setup '$B' -Dcuda=enabled -Dbuildtype=release && ninja -C '$B' -k 0 -j$jobs" \
    >"$OUT/build.log" 2>&1
build_rc=$?
grep -E "^FAILED|error:" "$OUT/build.log" | head -20
tail -2 "$OUT/build.log"
for t in tests/gpu/test_gpu_ops tests/gpu/test_gpu_attention tests/gpu/test_gpu_backend tests/gpu/test_gpu_plan \
         tests/gpu/test_gpu_replay tests/gpu/test_gpu_memory bench/bench_chain bench/bench_attention; do
    [ -x "$B/$t" ] || { echo "BUILD FAILED: $t missing (ninja exit $build_rc)"; exit 1; }
done
[ $build_rc = 0 ] || echo "BUILD INCOMPLETE (ninja exit $build_rc): running what was built"

phase gpu tests
timeout 200 meson test -C "$B" --no-rebuild --suite gpu --print-errorlogs --num-processes 4 >"$OUT/test-gpu.log" 2>&1
echo "meson test --suite gpu: exit $?"
grep -E "^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped|Timeout):" "$OUT/test-gpu.log"
# Criterion's own lines name each failing test and assertion.
grep -E "\[----\]|\[FAIL\]|Synthesis" "$OUT/test-gpu.log" | head -60
cp "$B/meson-logs/testlog.txt" "$OUT/testlog-gpu.txt" 2>/dev/null

phase bench chain
timeout 120 "$B/bench/bench_chain" 30 2>&1 | tee "$OUT/bench-chain.md"

phase pytorch on the same chain
if [ "${REEL_GPU_TORCH_CHAIN:-1}" = 0 ]; then
    echo "skipped (REEL_GPU_TORCH_CHAIN=0)"
elif python3 -c "import torch" 2>/dev/null; then
    timeout 120 python3 bench/torch_chain.py 30 2>&1 | tee "$OUT/bench-torch-chain.md"
else
    echo "no PyTorch on this machine"
fi

phase bench attention
timeout 200 "$B/bench/bench_attention" 20 2>&1 | tee "$OUT/bench-attention.md"
if python3 -c "import torch" 2>/dev/null; then
    PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_attention.py 20 2>&1 | tee "$OUT/bench-torch-attention.md"
fi

phase bench decode
# The decode step of the 8 x 1024 Llama-style model, reel (bench/decode.c) beside
# PyTorch eager, CUDA graph and torch.compile + graph (bench/torch_model.py) on
# the same weights; the combined table is the last one in bench-decode.md.
if [ "${REEL_GPU_DECODE:-1}" = 0 ]; then
    echo "skipped (REEL_GPU_DECODE=0)"
elif [ -x "$B/bench/bench_decode" ]; then
    timeout 300 "$B/bench/bench_decode" --dir /tmp/reel-decode 2>&1 | tee "$OUT/bench-decode.md"
    echo "bench_decode: exit $?"
    if python3 -c "import torch" 2>/dev/null && [ -f /tmp/reel-decode/reel_decode.txt ]; then
        PYTHONUNBUFFERED=1 timeout 600 python3 bench/torch_model.py --dir /tmp/reel-decode 2>&1 |
            tee -a "$OUT/bench-decode.md"
        echo "torch_model.py: exit $?"
    fi
else
    echo "bench_decode was not built"
fi

phase reel check on cuda
[ -x "$B/tools/reel" ] && timeout 90 "$B/tools/reel" check --backend cuda --quiet 2>&1 | tee "$OUT/check-cuda.md"

phase demo on cuda and host
for be in cuda host; do
    [ -x "$B/tools/reel" ] || { echo "tools/reel was not built"; break; }
    echo "--- reel demo --backend $be"
    timeout 60 "$B/tools/reel" demo --backend "$be" --quiet 2>&1
    echo "exit $?"
done >"$OUT/demo.log" 2>&1
# The decode benchmark model of the attention issue (8 layers, hidden 1024,
# 16 heads of 64, ffn 4096, vocab 32000, bf16).
echo "--- reel demo --backend cuda, 8 x 1024 model" >>"$OUT/demo.log"
timeout 120 "$B/tools/reel" demo --backend cuda --quiet --layers 8 --hidden 1024 --heads 16 --ffn 4096 \
    --vocab 32000 --max-context 2048 >>"$OUT/demo.log" 2>&1
echo "exit $?" >>"$OUT/demo.log"
grep -E "^--- |backend|replays|eager steps|step latency|compile|checksum|^exit|rror" "$OUT/demo.log"

san=${REEL_GPU_SANITIZE:-0}
if [ "$san" != 0 ] && command -v compute-sanitizer >/dev/null; then
    # memcheck: out-of-bounds and misaligned accesses; racecheck: shared
    # memory races (top-k, attention). Criterion forks each test: follow them.
    for run in "memcheck test_gpu_ops" "memcheck test_gpu_plan" "racecheck test_gpu_ops" \
               "memcheck test_gpu_attention *guards*" "racecheck test_gpu_attention */mixed_batch*" \
               "racecheck test_gpu_attention *long_prefills*" "memcheck test_gpu_attention *long_prefills*" \
               "memcheck test_gpu_attention *one_kernel*" "racecheck test_gpu_attention *one_kernel_guards*" \
               "memcheck test_gpu_attention *persistent_decode_guards*" "racecheck test_gpu_attention *persistent_decode_guards*"; do
        set -f; set -- $run; set +f
        [ "$san" = attention ] && [ "$2" != test_gpu_attention ] && continue
        filter=${3:+--filter=$3}
        phase "compute-sanitizer $1, $2"
        timeout 200 compute-sanitizer --tool "$1" --target-processes all --error-exitcode 3 \
            "$B/tests/gpu/$2" --jobs 8 $filter >>"$OUT/sanitizer.log" 2>&1
        echo "compute-sanitizer $1 $2: exit $?"
    done
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard|\[FAIL\]|Synthesis" "$OUT/sanitizer.log" |
        sort | uniq -c | head -40
fi

if [ "${REEL_GPU_OTHER:-1}" = 1 ]; then
    phase other suites
    timeout 150 meson test -C "$B" --no-rebuild --no-suite gpu --num-processes "$jobs" >"$OUT/test-other.log" 2>&1
    echo "meson test --no-suite gpu: exit $?"
    grep -E "^(Ok|Fail|Skipped|Timeout):| FAIL | TIMEOUT " "$OUT/test-other.log"
fi
phase done

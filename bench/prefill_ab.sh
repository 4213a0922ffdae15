#!/bin/bash
# On the GPU machine: bench_prefill_gemm built against two (or more) matmul
# workspace sizes per stream, run one after the other in one call.
#   bench/prefill_ab.sh [MiB ...]        (default: 4 32)
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/reel-prefill-out}
mkdir -p "$OUT"
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
sizes=${*:-4 32}
for s in $sizes; do
    d=/tmp/reel-ws-$s
    [ -d "$d" ] || meson setup "$d" -Dcuda=enabled -Dbuildtype=release -Dtests=false \
        "-Dc_args=-DREEL_CUDA_WS_HOPPER_MIB=$s" >"$OUT/ws-setup-$s.log" 2>&1 || { tail -20 "$OUT/ws-setup-$s.log"; exit 1; }
    timeout 300 ninja -C "$d" bench/bench_prefill_gemm >"$OUT/ws-build-$s.log" 2>&1 || { tail -20 "$OUT/ws-build-$s.log"; exit 1; }
done
for s in $sizes; do
    echo "--- workspace $s MiB a stream"
    timeout 250 "/tmp/reel-ws-$s/bench/bench_prefill_gemm" 50 | tee "$OUT/prefill-ws-$s.md"
done

#!/bin/bash
# On the GPU machine: one focused iteration on the decode step. Builds a
# release tree (everything, -k 0), runs the gpu tests named by
# REEL_STEP_TESTS (meson test names, default the matmul, fusion and Hugging
# Face ones), then bench_decode on the 8-layer model (hidden REEL_STEP_HIDDEN,
# 1024; ffn 4x) at REEL_STEP_BATCHES x REEL_STEP_CONTEXTS with the fused
# q/k/v projection and (REEL_STEP_AB=1) with three separate ones (skipped at
# REEL_STEP_BENCH=0), and (REEL_STEP_NCU=1) Nsight Compute's time of each
# kernel of the steps at batch REEL_STEP_NCU_BATCH (1), or
# (REEL_STEP_NCU_SECTIONS) the named sections of the matching kernels.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/reel-step-out}
mkdir -p "$OUT"
B=/tmp/reel-step-build
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ ! -d "$B" ]; then
    meson setup "$B" -Dcuda=enabled -Dbuildtype=release >"$OUT/setup.log" 2>&1 || { tail -20 "$OUT/setup.log"; exit 1; }
fi
timeout 400 ninja -C "$B" -k 0 -j"$(nproc)" >"$OUT/build.log" 2>&1
echo "ninja: exit $?"; grep -E "^FAILED|error" "$OUT/build.log" | head -20
tests=${REEL_STEP_TESTS:-gpu_gemv gpu_fuse gpu_fuse_rope gpu_replay gpu_hf_check gpu_ops}
if [ "$tests" != none ]; then
    timeout 200 meson test -C "$B" --no-rebuild --print-errorlogs $tests >"$OUT/test.log" 2>&1
    echo "meson test $tests: exit $?"
    grep -E "^ *[0-9]+/[0-9]+ |\[FAIL\]|Synthesis" "$OUT/test.log" | head -40
fi
batches=${REEL_STEP_BATCHES:-1,8,64}
contexts=${REEL_STEP_CONTEXTS:-128,2048}
model=(--hidden "${REEL_STEP_HIDDEN:-1024}" --ffn $((4 * ${REEL_STEP_HIDDEN:-1024})))
[ "${REEL_STEP_BENCH:-1}" = 0 ] || for qkv in 1 ${REEL_STEP_AB:+0}; do
    echo "--- bench_decode, REEL_BENCH_QKV=$qkv"
    REEL_BENCH_QKV=$qkv timeout 200 "$B/bench/bench_decode" "${model[@]}" --batches "$batches" --contexts "$contexts" \
        --steps "${REEL_STEP_STEPS:-100}" --dir /tmp/reel-step-$qkv 2>"$OUT/decode-$qkv.log" | tee "$OUT/decode-$qkv.md"
    tail -3 "$OUT/decode-$qkv.log"
done
if [ -n "${REEL_STEP_NCU_SECTIONS:-}" ]; then
    # Nsight Compute's sections (e.g. "WarpStateStats MemoryWorkloadAnalysis
    # SpeedOfLight") for REEL_STEP_NCU_KERNELS launches of the kernels whose
    # name matches REEL_STEP_NCU_KERNEL (a regex), after skipping
    # REEL_STEP_NCU_SKIP of them: the details page, kept whole in $OUT.
    sec=()
    for x in $REEL_STEP_NCU_SECTIONS; do sec+=(--section "$x"); done
    echo "--- ncu sections ($REEL_STEP_NCU_SECTIONS) of ${REEL_STEP_NCU_KERNEL:-.}, batch ${REEL_STEP_NCU_BATCH:-1}"
    timeout 300 ncu --clock-control none "${sec[@]}" -k "regex:${REEL_STEP_NCU_KERNEL:-.}" \
        --launch-skip "${REEL_STEP_NCU_SKIP:-0}" --launch-count "${REEL_STEP_NCU_KERNELS:-3}" \
        "$B/bench/bench_decode" "${model[@]}" --batches "${REEL_STEP_NCU_BATCH:-1}" --contexts "${REEL_STEP_NCU_CONTEXT:-128}" --steps 2 --warmup 1 \
        --dir /tmp/reel-step-ncu >"$OUT/ncu-sections.txt" 2>"$OUT/ncu.log"
    echo "ncu: exit $?"
    grep -E "^  [a-z_:<>0-9, ]+\(|Section:|Duration|Throughput|Stall|Warp Cycles|Eligible|Issued|Achieved|Registers|L2 Hit|Mem Busy|Max Bandwidth" "$OUT/ncu-sections.txt" | head -120
fi
if [ "${REEL_STEP_NCU:-0}" = 1 ]; then
    echo "--- ncu: every kernel of the last replayed batch-1 steps, context ${REEL_STEP_NCU_CONTEXT:-128}"
    timeout 200 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
        --launch-skip "${REEL_STEP_NCU_SKIP:-0}" --launch-count "${REEL_STEP_NCU_COUNT:-400}" \
        "$B/bench/bench_decode" "${model[@]}" --batches "${REEL_STEP_NCU_BATCH:-1}" --contexts "${REEL_STEP_NCU_CONTEXT:-128}" --steps 2 --warmup 1 \
        --dir /tmp/reel-step-ncu >"$OUT/ncu.csv" 2>"$OUT/ncu.log"
    echo "ncu: exit $?"
    python3 - "$OUT/ncu.csv" "${REEL_STEP_NCU_LAST:-75}" <<'PY'
import csv, sys, collections
lines = open(sys.argv[1]).read().splitlines()
start = [i for i, l in enumerate(lines) if l.startswith('"ID"')][0]
rows = list(csv.reader(lines[start:]))
h = rows[0]; rows = [r for r in rows[1:] if r and r[0].isdigit()]
ki, ti, gi, bi = (h.index(x) for x in ("Kernel Name", "gpu__time_duration.sum", "Grid Size", "Block Size"))
tot = collections.OrderedDict()
last = rows[-int(sys.argv[2]):]
for r in last:
    k = r[ki].split("(")[0][:60] + " " + r[gi] + "x" + r[bi]
    tot.setdefault(k, []).append(float(r[ti].replace(",", "")) / 1000.0)
print(f"last {len(last)} kernels (ncu flushes the caches before each): name grid x block | calls | us median | us total")
for k, v in sorted(tot.items(), key=lambda kv: -sum(kv[1])):
    v2 = sorted(v); print(f"{k} | {len(v)} | {v2[len(v2)//2]:.2f} | {sum(v):.1f}")
print(f"total {sum(sum(v) for v in tot.values()):.1f} us")
PY
fi

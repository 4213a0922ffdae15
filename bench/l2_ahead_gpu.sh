#!/bin/bash
# On the GPU machine, one call: the L2 hint's probe (bench/l2_ahead.cu), its
# test on the GPU (test_gpu_attention's hint and replay tests), and the
# decode step with the hint, without it, and with it issued at the decode's
# end (bench/variants_ab.sh builds).
#   bench/l2_ahead_gpu.sh        (REEL_AB_HIDDEN, REEL_AB_BATCHES, REEL_AB_CONTEXTS as there)
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/reel-l2-out}
mkdir -p "$OUT"
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
B=/tmp/reel-l2-build
echo "=== build ($(date +%T))"
# The builds with the hint (after the decode's wait, and at its end), for the
# A/B, alongside; the A/B's "off" build (the default) is $B.
(meson setup /tmp/reel-var-on -Dcuda=enabled -Dbuildtype=release -Dtests=false \
    "-Dcuda_args=-DREEL_L2_AHEAD_PCT=50" "-Dc_args=-DREEL_L2_AHEAD_PCT=50" && ninja -C /tmp/reel-var-on -j6 bench/bench_decode) \
    >"$OUT/l2-build-on.log" 2>&1 &
(meson setup /tmp/reel-var-end -Dcuda=enabled -Dbuildtype=release -Dtests=false \
    "-Dcuda_args=-DREEL_L2_AHEAD_PCT=50 -DREEL_L2_AHEAD_AT_END=1" "-Dc_args=-DREEL_L2_AHEAD_PCT=50 -DREEL_L2_AHEAD_AT_END=1" && ninja -C /tmp/reel-var-end -j6 bench/bench_decode) \
    >"$OUT/l2-build-end.log" 2>&1 &
timeout 300 bash -c "meson setup $B -Dcuda=enabled -Dbuildtype=release >/dev/null && ninja -C $B -j8 bench/bench_l2_ahead bench/bench_decode tests/gpu/test_gpu_attention" \
    >"$OUT/l2-build.log" 2>&1 || { tail -20 "$OUT/l2-build.log"; exit 1; }
ln -sfn $B /tmp/reel-var-off
echo "=== bench_l2_ahead ($(date +%T))"
timeout 120 "$B/bench/bench_l2_ahead" 20 >"$OUT/l2-probe.md" 2>&1
echo "exit $?"
grep -E "^# |idle -> o|^\| (o|gate/up|q/k/v|down) |loads \|" "$OUT/l2-probe.md" | awk -F'|' 'NF < 8 {print; next} {print $2"|"$4"|"$5"|"$6"|"$9"|"$10"|"$11"|"$12"|"$13}'
echo "=== test_gpu_attention ($(date +%T))"
timeout 150 "$B/tests/gpu/test_gpu_attention" --jobs 4 --filter '*@(l2_ahead|replay_equals|one_kernel_decode_matches|persistent_decode_matches)*' 2>&1 | grep -E "FAIL|Synthesis|Assert" | head -20
echo "=== step A/B ($(date +%T))"
wait
bash bench/variants_ab.sh "off:" "on:-DREEL_L2_AHEAD_PCT=50" "end:-DREEL_L2_AHEAD_PCT=50 -DREEL_L2_AHEAD_AT_END=1" 2>&1 | grep -v "^plan\|^process" | tee "$OUT/l2-ab.txt"
echo "=== done ($(date +%T))"

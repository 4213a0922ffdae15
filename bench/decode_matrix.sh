#!/bin/bash
# The decode matrix, reel beside PyTorch in one call (docs/benchmarks.md):
# 8 layers, hidden 1024 and 2048 (16 heads, ffn 4 x hidden, vocab 32000, bf16);
# batches 1..64 (reel's buckets); contexts 128, 2048, 8192; per point reel
# replay and eager (bench_decode), torch eager, CUDA graph and torch.compile +
# hand-captured graph (bench/torch_model.py), host wall and GPU time per step.
# Writes $OUT/decode_matrix.csv (and copies it to bench/results/ when
# REEL_MATRIX_KEEP=1), the markdown table, the logs, and the plots when
# matplotlib is there. Exits 1 when any point disagrees or a step failed.
#   usage: bench/decode_matrix.sh BUILD_DIR
#   REEL_MATRIX_HIDDEN="1024 2048"  REEL_MATRIX_BATCHES=1,2,4,8,16,32,64
#   REEL_MATRIX_CONTEXTS=128,2048,8192  REEL_MATRIX_STEPS=200  REEL_MATRIX_WARMUP=20
#   REEL_MATRIX_LAYERS=8  REEL_MATRIX_EAGER_BUDGET=2 (s of torch eager a point)
set -u -o pipefail
cd "$(dirname "$0")/.."
B=${1:?usage: bench/decode_matrix.sh BUILD_DIR}
OUT=${OUT:-/tmp/reel-gpu-out}
mkdir -p "$OUT"
hidden=${REEL_MATRIX_HIDDEN:-1024 2048}
batches=${REEL_MATRIX_BATCHES:-1,2,4,8,16,32,64}
contexts=${REEL_MATRIX_CONTEXTS:-128,2048,8192}
steps=${REEL_MATRIX_STEPS:-200}
warmup=${REEL_MATRIX_WARMUP:-20}
layers=${REEL_MATRIX_LAYERS:-8}
budget=${REEL_MATRIX_EAGER_BUDGET:-2}
py=${PYTHON:-python3}
csv="$OUT/decode_matrix.csv"
rm -f "$csv"
[ -x "$B/bench/bench_decode" ] || { echo "decode_matrix: $B/bench/bench_decode was not built"; exit 1; }
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
    nvcc --version 2>/dev/null | grep -i release | sed 's/^/nvcc: /'
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | grep -q . && echo '(with changes)')"
    echo "points: hidden $hidden x batches $batches x contexts $contexts, $steps steps after $warmup"
} | tee "$OUT/decode_matrix_machine.txt"
have_torch=0
$py -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null && have_torch=1
[ $have_torch = 1 ] || echo "decode_matrix: no PyTorch with CUDA here: reel's columns only"
rc=0
for h in $hidden; do
    dir=/tmp/reel-matrix-$h
    rm -rf "$dir"
    echo "--- hidden $h: bench_decode ($(date +%T))"
    timeout 400 "$B/bench/bench_decode" --layers "$layers" --hidden "$h" --heads 16 --ffn $((4 * h)) --vocab 32000 \
        --batches "$batches" --contexts "$contexts" --steps "$steps" --warmup "$warmup" --dir "$dir" \
        >"$OUT/decode_matrix_reel_h$h.md" 2>"$OUT/decode_matrix_reel_h$h.log"
    r=$?
    cat "$OUT/decode_matrix_reel_h$h.md"
    tail -3 "$OUT/decode_matrix_reel_h$h.log"
    [ $r = 0 ] || { echo "bench_decode hidden $h: exit $r"; rc=1; }
    grep "^plan " "$dir/reel_decode.txt" >"$OUT/decode_matrix_plans_h$h.txt" 2>/dev/null
    if [ $have_torch = 1 ] && [ -f "$dir/reel_decode.txt" ]; then
        echo "--- hidden $h: torch_model.py ($(date +%T))"
        PYTHONUNBUFFERED=1 timeout 400 $py bench/torch_model.py --dir "$dir" --csv "$csv" --append \
            --eager-budget-s "$budget" --profile >"$OUT/decode_matrix_torch_h$h.md" \
            2>"$OUT/decode_matrix_torch_h$h.log"
        r=$?
        tail -4 "$OUT/decode_matrix_torch_h$h.log"
        [ $r = 0 ] || { echo "torch_model.py hidden $h: exit $r"; rc=1; }
    fi
    rm -rf "$dir/model" "$dir"/logits_*.f32
done
if [ -s "$csv" ]; then
    $py bench/decode_table.py "$csv" >"$OUT/decode_matrix_table.md" && cat "$OUT/decode_matrix_table.md"
    if $py -c "import matplotlib" 2>/dev/null; then
        $py bench/decode_plot.py "$csv" --out "$OUT"
    else
        echo "no matplotlib here: plot from the fetched CSV with python3 bench/decode_plot.py decode_matrix.csv"
    fi
    [ "${REEL_MATRIX_KEEP:-0}" = 1 ] && cp "$csv" bench/results/decode_matrix.csv
fi
echo "decode_matrix: exit $rc"
exit $rc

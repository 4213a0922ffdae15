#!/bin/bash
# On the GPU machine, one call: bench_decode beside bench/torch_model.py on
# checkpoints with q/k/v biases and tied embeddings (bench_decode --qkv-bias
# --tied writes them as Qwen2 checkpoints): the 8 x 1024 model of the matrix,
# then a model of Qwen2-0.5B's shape (24 layers, hidden 896, 14 heads, 2 kv
# heads, ffn 4864, vocab 151936). Each run fails when reel's ids or logits
# leave bf16 tolerance of PyTorch eager's. REEL_BT_BATCHES, REEL_BT_CONTEXTS
# and REEL_BT_QWEN_CONTEXTS trim the points.
set -u -o pipefail
cd "$(dirname "$0")/.."
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
OUT=${OUT:-/tmp/reel-bias-tied-out}
mkdir -p "$OUT"
B=/tmp/reel-bias-tied-build
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -d "$B" ] || meson setup "$B" -Dcuda=enabled -Dbuildtype=release -Dtests=false >/dev/null 2>&1
timeout 200 ninja -C "$B" bench/bench_decode >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
rc=0
run() { # name, bench_decode arguments
    local name=$1 dir=/tmp/reel-bt-$1
    shift
    rm -rf "$dir"
    echo "=== $name: bench_decode $* ($(date -u +%T))"
    timeout 150 "$B/bench/bench_decode" "$@" --qkv-bias --tied --steps 50 --dir "$dir" >"$OUT/$name.md" 2>&1 ||
        { echo "bench_decode $name: exit $?"; rc=1; }
    PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_model.py --dir "$dir" >>"$OUT/$name.md" 2>&1 ||
        { echo "torch_model.py $name: exit $?"; rc=1; }
    grep -E "^reel decode step|^# batch|^\| [0-9]|^\| batch|^floor|Error|error" "$OUT/$name.md" | tail -16
    rm -rf "$dir/model"
}
run h1024 --batches ${REEL_BT_BATCHES:-1,8,64} --contexts ${REEL_BT_CONTEXTS:-128,2048}
run qwen2-0.5b-shape --layers 24 --hidden 896 --heads 14 --kv-heads 2 --ffn 4864 --vocab 151936 \
    --batches ${REEL_BT_BATCHES:-1,8,64} --contexts ${REEL_BT_QWEN_CONTEXTS:-2048}
date -u
exit $rc

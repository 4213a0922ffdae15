#!/bin/bash
# bench/gpu.sh: the one driver for the GPU machine (../shared/device/README.md).
# It runs in the repository root there, builds a release tree with CUDA in $B and
# runs the phases named on its command line, in that order, each under its own
# time limit. Logs go to $OUT (/tmp/reel-gpu-out when unset); results go to
# $OUT/results, named WHAT_DEVICE_DATE_COMMIT.EXT (decode_h200_2026-12-06_674cb1c.md)
# and, for .md/.txt/.log, opened by one comment line with the device, NVIDIA
# driver, CUDA, commit, date and phase. Each phase writes its files as it goes, so a
# call cut short keeps what finished ($OUT/phases.txt lists each phase's exit).
# To keep a result, copy it from $OUT/results into bench/results/.
#
#   bench/gpu.sh [PHASE...] [-- AB-SPEC...]
#   bench/gpu.sh help
# No phase: build test chain attention decode check demo other.
# The commit comes from REEL_COMMIT, else `git rev-parse` (the GPU machine's copy of
# the tree has no .git: pass it, e.g. REEL_COMMIT=674cb1c bash bench/gpu.sh decode).
#
# Phases (what each needs beyond the build; each builds the targets it runs):
#   build          a fresh release build of everything (-k 0: a broken target does not stop the others)
#   test           meson test --suite gpu (Criterion from .devdeps)
#   sanitize       compute-sanitizer memcheck/racecheck over the gpu op, plan and attention tests (REEL_SANITIZE=attention: those only)
#   other          the non-gpu suites in the same build
#   chain          bench_chain (replay overhead) beside bench/torch_chain.py (PyTorch)
#   attention      bench_attention beside bench/torch_attention.py (PyTorch SDPA)
#   decode         bench_decode beside bench/torch_model.py, 8 x 1024 model (PyTorch; REEL_DECODE_ARGS more bench_decode options)
#   matrix         the decode matrix: bench_decode + torch_model.py over hidden x batch x context; CSV, table, plots with matplotlib
#   bias-tied      bench_decode --qkv-bias --tied beside torch_model.py: the 8 x 1024 model and a Qwen2-0.5B-shaped one (PyTorch)
#   shapes         the decode step at real model shapes (issue 48): per shape bench_decode --shape beside torch_model.py over
#                  batches 1..256 (as far as the card holds the KV cache) x contexts 128, 2048, 8192, each shape its own
#                  sub-step with its own CSV and tables; then the headline table (bench/decode_table.py --headline)
#   shapes-quick   one shape (REEL_SHAPES_QUICK, llama-3.2-1b), batches 1, 8, 64 at context 2048: a first look
#   moe            the MoE decode step (issue 44): bench_decode --shape qwen3-30b-a3b (16 of 48 layers) and mixtral-8x7b
#                  (4 of 32) beside torch_model.py (transformers' expert loop eager; gathered or dense experts under a
#                  CUDA graph and torch.compile + graph) at batches 1,2,4,8,16,32,64, context 2048, each shape a
#                  sub-step as in shapes (decode-moe-NAME .md and .csv), then the headline (both floors). About 5
#                  minutes of device time after the build (an estimate, not yet measured: 21 + 12 GB of seeded
#                  checkpoint written and loaded twice, torch.compile of both formulations a shape); run it in a call
#                  of its own, or one shape a call (REEL_MOE_SHAPES)
#   loop           reel_step_n against a host loop of single steps (issue 47): bench_decode --loop 1,8,64 on the
#                  8 x 1024 toy (batches 1, 8, 64, context 128) and the Llama-3.2-1B shape (batch 1, 8, context
#                  2048): per-step wall, device time and overhead, tokens compared (about 2 minutes)
#   argmax         bench_argmax beside bench/torch_argmax.py (PyTorch)
#   sample         bench_sample beside bench/torch_sample.py (PyTorch: softmax + multinomial, topk, sort + cumsum)
#   gemv           bench_gemv: the skinny-matmul kernel against cuBLASLt (and its CSV)
#   prefill-gemm   bench_prefill_gemm: prefill-sized matmuls in a replayed plan
#   kv-pattern     bench_kv_pattern: HBM read patterns of the decode and the gemv
#   l2-ahead       bench_l2_ahead: weights prefetched into L2 while HBM idles (the hint measured and removed)
#   checker        bench_checker: the hazard checker's time and memory per access (host only; minutes at full scale)
#   soak           bench_soak on cuda (REEL_SOAK_ARGS; default 10^6 steps of the demo model, about 4 minutes)
#   check          reel check --backend cuda
#   demo           reel demo on cuda and host, and the 8 x 1024 model on cuda
#   trace          kernel timeline of bench_decode's replayed graphs (CUPTI headers; bench/trace/kernel_trace.c)
#   ncu-step       Nsight Compute (ncu): every kernel's time in a replayed decode step, or REEL_NCU_SECTIONS of them
#   ncu-attention  ncu: reel's decode kernel beside SDPA's (bench/torch_sdpa_point.py) at REEL_NCU_POINTS (PyTorch)
#   ab             the builds after "--" side by side in one run, NAME[@TREE]:FLAGS each (FLAGS to nvcc and cc;
#                  TREE another source tree, e.g. an older snapshot); REEL_AB_PROGRAM (bench_decode) is timed
#
# Settings (environment):
#   OUT (/tmp/reel-gpu-out)  REEL_GPU_BUILD (/tmp/reel-gpu-build)  REEL_GPU_SETUP_ARGS (more meson setup options)
#   REEL_COMMIT  the commit to name results with
#   decode:    REEL_DECODE_ARGS; REEL_BENCH_QKV=0 (read by bench_decode): three q/k/v projections, not the fused one
#   matrix:    REEL_MATRIX_HIDDEN="1024 2048" REEL_MATRIX_BATCHES=1,2,4,8,16,32,64 REEL_MATRIX_CONTEXTS=128,2048,8192
#              REEL_MATRIX_STEPS=200 REEL_MATRIX_WARMUP=20 REEL_MATRIX_LAYERS=8 REEL_MATRIX_EAGER_BUDGET=2 (s of torch eager a point)
#   bias-tied: REEL_BT_BATCHES=1,8,64 REEL_BT_CONTEXTS=128,2048 REEL_BT_QWEN_CONTEXTS=2048
#   shapes:    REEL_SHAPES="llama-3.2-1b llama-3.1-8b qwen2.5-7b" REEL_SHAPES_BATCHES=1,2,4,8,16,32,64,128,256
#              REEL_SHAPES_CONTEXTS=128,2048,8192 REEL_SHAPES_STEPS=20 REEL_SHAPES_WARMUP=5
#              REEL_SHAPES_EAGER=0 (1: reel's eager plan too: one more copy of the weights on the card)
#              REEL_SHAPES_ONE_PLAN=0 (1: bench_decode --one-plan, the replay plan alone over its own KV cache:
#              one batch further a context, no logits check) REEL_SHAPES_EAGER_BUDGET=0.3 (s of torch eager a
#              point, 10 steps at least) REEL_SHAPES_ARGS (more bench_decode options) REEL_SHAPES_TORCH_ARGS
#              (more torch_model.py options, e.g. --flex-max-ctas -1) REEL_SHAPES_REEL_TIMEOUT=300
#              REEL_SHAPES_TORCH_TIMEOUT=420 (s a shape); shapes-quick: REEL_SHAPES_QUICK=llama-3.2-1b;
#              REEL_BENCH_FREE_GB=N (read by bench_decode): size the batches for N GB free, as a smaller card would
#   moe:       REEL_MOE_SHAPES="qwen3-30b-a3b mixtral-8x7b" REEL_MOE_BATCHES=1,2,4,8,16,32,64 REEL_MOE_CONTEXTS=2048
#              REEL_MOE_ARGS (more bench_decode options, e.g. --layers 24) REEL_MOE_TORCH_ARGS="--flex-max-ctas -1"
#              (torch_model.py's options: flex_attention off, as its compile a batch costs a minute a shape and
#              attention is a few % of a MoE step's bytes; set it empty to try flex; e.g. --moe-ties lowest)
#              REEL_MOE_REEL_TIMEOUT=150 REEL_MOE_TORCH_TIMEOUT=240 (s a shape); steps, warm-up, eager plan and eager
#              budget as shapes (REEL_SHAPES_STEPS ...)
#   attention: REEL_ATTN_REPS=20 REEL_ATTN_ROWS (bench_attention's pick: decode, prefill, a row index; then contexts)
#   soak: REEL_SOAK_ARGS   checker: REEL_CHECKER_ARGS ("all"), REEL_BENCH_BUDGET_S (120 s a pattern)
#   trace:     REEL_TRACE_ARGS (bench_decode options) REEL_TRACE_BUILD (another build, e.g. /tmp/reel-ab-NAME) REEL_TRACE_MIN (20)
#   ncu-step:  REEL_NCU_HIDDEN=1024 REEL_NCU_BATCH=1 REEL_NCU_CONTEXT=128 REEL_NCU_SKIP=0 REEL_NCU_COUNT=400 REEL_NCU_LAST=75;
#              REEL_NCU_SECTIONS="WarpStateStats SpeedOfLight ..." with REEL_NCU_KERNEL (regex) and REEL_NCU_KERNELS=3 launches
#   ncu-attention: REEL_NCU_POINTS="ROW:H:HKV:DH:BATCH:CONTEXT ..." (ROW: bench_attention's row index);
#              REEL_NCU_SECTIONS (sections of reel's kernels instead of the stall breakdown), REEL_NCU_SASS=1 (per-instruction CSV)
#   both ncu:  REEL_NCU_BUILD (another build to profile, e.g. /tmp/reel-ab-NAME)
#   ab:        REEL_AB_PROGRAM=bench_decode|bench_attention|bench_prefill_gemm|bench_argmax|bench_sample|bench_gemv REEL_AB_ARGS (its arguments,
#              for programs other than bench_decode) REEL_AB_HIDDEN="1024" REEL_AB_BATCHES=1,8 REEL_AB_CONTEXTS=128,2048
#              REEL_AB_DECODE_ARGS (more bench_decode options) REEL_AB_ROUNDS=1 (each build run this many times, in turn)
# Older switches still honoured: REEL_GPU_MATRIX=1 (only the matrix), REEL_GPU_SANITIZE=1|attention (adds sanitize),
# REEL_GPU_OTHER=0 (drops other).
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/reel-gpu-out}
RES=$OUT/results
mkdir -p "$RES"
export OUT
B=${REEL_GPU_BUILD:-/tmp/reel-gpu-build}
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
jobs=$(nproc)
PHASES="build test sanitize other chain attention decode matrix bias-tied shapes shapes-quick moe loop argmax sample gemv
prefill-gemm kv-pattern l2-ahead checker soak check demo trace ncu-step ncu-attention ab"

# ---- arguments ---------------------------------------------------------------------------------
want=() AB_SPECS=()
while [ $# -gt 0 ]; do
    case $1 in
    --) shift; AB_SPECS=("$@"); break ;;
    help | -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) want+=("$1"); shift ;;
    esac
done
if [ ${#want[@]} = 0 ]; then
    if [ "${REEL_GPU_MATRIX:-0}" = 1 ]; then
        want=(matrix)
    else
        want=(build test chain attention decode check demo)
        [ "${REEL_GPU_SANITIZE:-0}" != 0 ] && want+=(sanitize)
        [ "${REEL_GPU_OTHER:-1}" = 0 ] || want+=(other)
        [ "${REEL_GPU_SANITIZE:-0}" = attention ] && export REEL_SANITIZE=attention
    fi
fi
for p in "${want[@]}"; do
    [[ " $(echo $PHASES) " == *" $p "* ]] || { echo "gpu.sh: no phase '$p' (phases: $(echo $PHASES); help: bench/gpu.sh help)"; exit 2; }
done
for p in "${want[@]}"; do
    [ "$p" = ab ] && [ ${#AB_SPECS[@]} = 0 ] && { echo "gpu.sh: ab needs builds after --, e.g. -- 'base:' 'x:-DFOO=1'"; exit 2; }
done

# ---- the machine, the commit, result files -----------------------------------------------------
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
GPU_DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
CUDA_VER=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
DEV=$(sed 's/^NVIDIA //' <<<"$GPU_NAME" | awk '{print tolower($1)}' | tr -cd 'a-z0-9')
DEV=${DEV:-nogpu}
COMMIT=${REEL_COMMIT:-}
if [ -z "$COMMIT" ] && COMMIT=$(git rev-parse --short HEAD 2>/dev/null); then
    [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && COMMIT=$COMMIT-dirty
fi
COMMIT=${COMMIT:-unknown}
DAY=$(date -u +%F)
PHASE=none

# result WHAT EXT: a new file under $RES named WHAT_DEVICE_DATE_COMMIT.EXT (a -2, -3 ... after
# WHAT when taken); .md, .txt and .log files get the header line, CSVs carry it in their name.
result() {
    local what=$1 ext=$2 n=1 f
    f="$RES/${what}_${DEV}_${DAY}_${COMMIT}.$ext"
    while [ -e "$f" ]; do n=$((n + 1)); f="$RES/${what}-${n}_${DEV}_${DAY}_${COMMIT}.$ext"; done
    local meta="device: ${GPU_NAME:-none}; nvidia driver: ${GPU_DRIVER:--}; cuda: ${CUDA_VER:--}; commit: $COMMIT;"
    meta="$meta date: $(date -u '+%F %H:%M UTC'); by: bench/gpu.sh $PHASE"
    case $ext in
    md) echo "<!-- $meta -->" >"$f" ;;
    txt | log) echo "# $meta" >"$f" ;;
    *) : >"$f" ;;
    esac
    echo "$f"
}
HAVE_TORCH=
have_torch() { # PyTorch with CUDA, asked once
    [ -n "$HAVE_TORCH" ] ||
        HAVE_TORCH=$(python3 -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null || echo 0)
    [ "$HAVE_TORCH" = 1 ]
}

setup() { # [BUILD_DIR [SOURCE_DIR [FLAGS [MESON_OPTION...]]]]
    local d=${1:-$B} src=${2:-$ROOT} flags=${3:-} log
    shift $(($# < 3 ? $# : 3))
    [ -f "$d/build.ninja" ] && return 0
    log="$OUT/setup-$(basename "$d").log"
    (cd "$src" && meson setup "$d" -Dcuda=enabled -Dbuildtype=release ${REEL_GPU_SETUP_ARGS:-} "$@" \
        ${flags:+"-Dcuda_args=$flags" "-Dc_args=$flags"}) >"$log" 2>&1 ||
        { tail -20 "$log"; echo "SETUP FAILED: $d"; rm -rf "$d"; return 1; }
}
need() { # TARGET...: builds them in $B
    setup || return 1
    timeout 400 ninja -C "$B" -j"$jobs" "$@" >>"$OUT/build.log" 2>&1 ||
        { grep -E "^FAILED|error" "$OUT/build.log" | tail -20; echo "BUILD FAILED: $*"; return 1; }
}
need_all() { # everything that builds (-k 0); fails only when nothing new could be built
    setup || return 1
    timeout 500 ninja -C "$B" -k 0 -j"$jobs" >>"$OUT/build.log" 2>&1
    local rc=$?
    [ $rc = 0 ] || { grep -E "^FAILED|error:" "$OUT/build.log" | head -20; echo "BUILD INCOMPLETE (ninja exit $rc)"; }
    return 0
}

# ---- phases --------------------------------------------------------------------------------------
ph_build() {
    rm -rf "$B"
    : >"$OUT/build.log"
    setup || return 1
    timeout 500 ninja -C "$B" -k 0 -j"$jobs" >>"$OUT/build.log" 2>&1
    local rc=$?
    grep -E "^FAILED|error:" "$OUT/build.log" | head -20
    tail -2 "$OUT/build.log"
    [ $rc = 0 ] || echo "BUILD INCOMPLETE (ninja exit $rc): the phases after run what was built"
    return $rc
}

ph_test() {
    need_all || return 1
    timeout 300 meson test -C "$B" --no-rebuild --suite gpu --print-errorlogs --num-processes 4 >"$OUT/test-gpu.log" 2>&1
    local rc=$?
    echo "meson test --suite gpu: exit $rc"
    grep -E "^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped|Timeout):" "$OUT/test-gpu.log"
    # Criterion's own lines name each failing test and assertion.
    grep -E "\[----\]|\[FAIL\]|Synthesis" "$OUT/test-gpu.log" | head -60
    cp "$B/meson-logs/testlog.txt" "$OUT/testlog-gpu.txt" 2>/dev/null
    return $rc
}

ph_sanitize() {
    command -v compute-sanitizer >/dev/null || { echo "no compute-sanitizer here"; return 1; }
    need tests/gpu/test_gpu_ops tests/gpu/test_gpu_plan tests/gpu/test_gpu_attention || return 1
    local run rc=0 r
    # memcheck: out-of-bounds and misaligned accesses; racecheck: shared memory races
    # (top-k, attention). Criterion forks each test: follow them.
    for run in "memcheck test_gpu_ops" "memcheck test_gpu_plan" "racecheck test_gpu_ops" \
        "memcheck test_gpu_attention *guards*" "racecheck test_gpu_attention */mixed_batch*" \
        "racecheck test_gpu_attention *long_prefills*" "memcheck test_gpu_attention *long_prefills*" \
        "memcheck test_gpu_attention *one_kernel*" "racecheck test_gpu_attention *one_kernel_guards*" \
        "memcheck test_gpu_attention *persistent_decode_guards*" "racecheck test_gpu_attention *persistent_decode_guards*"; do
        set -f; set -- $run; set +f
        [ "${REEL_SANITIZE:-all}" = attention ] && [ "$2" != test_gpu_attention ] && continue
        echo "--- compute-sanitizer $1, $2 ${3:-} ($(date -u +%T))" >>"$OUT/sanitizer.log"
        timeout 200 compute-sanitizer --tool "$1" --target-processes all --error-exitcode 3 \
            "$B/tests/gpu/$2" --jobs 8 ${3:+--filter=$3} >>"$OUT/sanitizer.log" 2>&1
        r=$?
        echo "compute-sanitizer $1 $2 ${3:-}: exit $r"
        [ $r = 0 ] || rc=1
    done
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard|\[FAIL\]|Synthesis" "$OUT/sanitizer.log" | sort | uniq -c | head -40
    return $rc
}

ph_other() {
    need_all || return 1
    timeout 200 meson test -C "$B" --no-rebuild --no-suite gpu --num-processes "$jobs" >"$OUT/test-other.log" 2>&1
    local rc=$?
    echo "meson test --no-suite gpu: exit $rc"
    grep -E "^(Ok|Fail|Skipped|Timeout):| FAIL | TIMEOUT " "$OUT/test-other.log"
    return $rc
}

ph_chain() {
    need bench/bench_chain || return 1
    local f rc
    f=$(result chain md)
    timeout 150 "$B/bench/bench_chain" 30 2>&1 | tee -a "$f"
    rc=$?
    if have_torch; then
        f=$(result torch-chain md)
        timeout 120 python3 bench/torch_chain.py 30 2>&1 | tee -a "$f" || rc=1
    else
        echo "no PyTorch with CUDA here: reel's side only"
    fi
    return $rc
}

ph_attention() {
    need bench/bench_attention || return 1
    local f rc reps=${REEL_ATTN_REPS:-20}
    f=$(result attention md)
    timeout 250 "$B/bench/bench_attention" "$reps" ${REEL_ATTN_ROWS:-} 2>&1 | tee -a "$f"
    rc=$?
    if have_torch; then
        f=$(result torch-attention md)
        PYTHONUNBUFFERED=1 timeout 250 python3 bench/torch_attention.py "$reps" 2>&1 | tee -a "$f" || rc=1
    fi
    return $rc
}

ph_decode() {
    need bench/bench_decode || return 1
    local f rc dir=/tmp/reel-decode
    rm -rf "$dir"
    f=$(result decode md)
    # reel's table first, then PyTorch's and the combined one (bench/torch_model.py).
    timeout 300 "$B/bench/bench_decode" --dir "$dir" ${REEL_DECODE_ARGS:-} 2>&1 | tee -a "$f"
    rc=$?
    echo "bench_decode: exit $rc"
    if [ $rc = 0 ] && have_torch; then
        PYTHONUNBUFFERED=1 timeout 400 python3 bench/torch_model.py --dir "$dir" --csv "$(result decode csv)" 2>&1 | tee -a "$f"
        local r=$?
        echo "torch_model.py: exit $r"
        [ $r = 0 ] || rc=1
    fi
    rm -rf "$dir/model"
    return $rc
}

# The decode matrix, reel beside PyTorch (docs/benchmarks.md): 8 layers, hidden 1024 and
# 2048 (16 heads, ffn 4 x hidden, vocab 32000, bf16); batches 1..64 (reel's buckets);
# contexts 128, 2048, 8192; per point reel replay and eager (bench_decode), torch eager, CUDA
# graph and torch.compile + hand-captured graph (bench/torch_model.py), host wall and GPU time
# per step. Fails when any point disagrees or a step failed. Both hidden sizes take longer
# than one 600 s device call: one call each (REEL_MATRIX_HIDDEN=1024, then 2048), and
# bench/decode_table.py takes both CSVs.
ph_matrix() {
    need bench/bench_decode || return 1
    local hidden=${REEL_MATRIX_HIDDEN:-1024 2048} batches=${REEL_MATRIX_BATCHES:-1,2,4,8,16,32,64}
    local contexts=${REEL_MATRIX_CONTEXTS:-128,2048,8192} steps=${REEL_MATRIX_STEPS:-200}
    local warmup=${REEL_MATRIX_WARMUP:-20} layers=${REEL_MATRIX_LAYERS:-8} budget=${REEL_MATRIX_EAGER_BUDGET:-2}
    local what=decode-matrix csv table torch=0 rc=0 r h dir
    [ -n "${REEL_MATRIX_HIDDEN:-}" ] && what=decode-matrix-h$(echo $hidden | tr ' ' '-')
    csv=$(result "$what" csv)
    table=$(result "$what" md)
    echo "points: hidden $hidden x batches $batches x contexts $contexts, $steps steps after $warmup"
    have_torch && torch=1
    [ $torch = 1 ] || echo "no PyTorch with CUDA here: reel's columns only (no CSV)"
    for h in $hidden; do
        dir=/tmp/reel-matrix-$h
        rm -rf "$dir"
        echo "--- hidden $h: bench_decode ($(date -u +%T))"
        timeout 400 "$B/bench/bench_decode" --layers "$layers" --hidden "$h" --heads 16 --ffn $((4 * h)) --vocab 32000 \
            --batches "$batches" --contexts "$contexts" --steps "$steps" --warmup "$warmup" --dir "$dir" \
            >"$OUT/matrix-reel-h$h.md" 2>"$OUT/matrix-reel-h$h.log"
        r=$?
        cat "$OUT/matrix-reel-h$h.md"
        tail -3 "$OUT/matrix-reel-h$h.log"
        [ $r = 0 ] || { echo "bench_decode hidden $h: exit $r"; rc=1; }
        grep "^plan " "$dir/reel_decode.txt" >"$OUT/matrix-plans-h$h.txt" 2>/dev/null
        if [ $torch = 1 ] && [ -f "$dir/reel_decode.txt" ]; then
            echo "--- hidden $h: torch_model.py ($(date -u +%T))"
            PYTHONUNBUFFERED=1 timeout 400 python3 bench/torch_model.py --dir "$dir" --csv "$csv" --append \
                --eager-budget-s "$budget" --profile >"$OUT/matrix-torch-h$h.md" 2>"$OUT/matrix-torch-h$h.log"
            r=$?
            tail -4 "$OUT/matrix-torch-h$h.log"
            [ $r = 0 ] || { echo "torch_model.py hidden $h: exit $r"; rc=1; }
        fi
        rm -rf "$dir/model" "$dir"/logits_*.f32
    done
    if [ -s "$csv" ]; then
        python3 bench/decode_table.py "$csv" >>"$table" && cat "$table"
        if python3 -c "import matplotlib" 2>/dev/null; then
            python3 bench/decode_plot.py "$csv" --out "$OUT/plots"
        else
            echo "no matplotlib here: plot from the fetched CSV with python3 bench/decode_plot.py CSV"
        fi
    else
        rm -f "$csv" "$table"
    fi
    return $rc
}

# bench_decode beside torch_model.py on checkpoints with q/k/v biases and tied embeddings
# (bench_decode --qkv-bias --tied writes them as Qwen2 checkpoints). Fails when reel's ids or
# logits leave bf16 tolerance of PyTorch eager's.
ph_bias_tied() {
    need bench/bench_decode || return 1
    have_torch || { echo "no PyTorch with CUDA here"; return 1; }
    local rc=0
    bt() { # name, bench_decode arguments
        local name=$1 dir=/tmp/reel-bt-$1 f
        shift
        rm -rf "$dir"
        f=$(result "bias-tied-$name" md)
        echo "=== $name: bench_decode $* ($(date -u +%T))"
        timeout 150 "$B/bench/bench_decode" "$@" --qkv-bias --tied --steps 50 --dir "$dir" >>"$f" 2>&1 ||
            { echo "bench_decode $name: exit $?"; rc=1; }
        PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_model.py --dir "$dir" >>"$f" 2>&1 ||
            { echo "torch_model.py $name: exit $?"; rc=1; }
        grep -E "^reel decode step|^# batch|^\| [0-9]|^\| batch|^floor|Error|error" "$f" | tail -16
        rm -rf "$dir/model"
    }
    bt h1024 --batches "${REEL_BT_BATCHES:-1,8,64}" --contexts "${REEL_BT_CONTEXTS:-128,2048}"
    bt qwen2-0.5b-shape --layers 24 --hidden 896 --heads 14 --kv-heads 2 --ffn 4864 --vocab 151936 \
        --batches "${REEL_BT_BATCHES:-1,8,64}" --contexts "${REEL_BT_QWEN_CONTEXTS:-2048}"
    return $rc
}

# The decode step at real model shapes (issue 48). shape_step NAME BATCHES CONTEXTS WHAT: bench_decode --shape NAME
# writes the seeded checkpoint (config.json as the real model's, random bf16 weights) and times reel's replay (and
# skips, with a line saying so, the batches whose KV cache does not fit the card at a context), then
# bench/torch_model.py runs PyTorch eager, CUDA graph and torch.compile + graph on the same checkpoint and points.
# Results: WHAT-NAME_DEVICE_DATE_COMMIT.md (reel's table, PyTorch's, the shape's tables) and .csv; logs in $OUT.
# The checkpoint (up to 16 GB) is removed after each shape.
shape_step() {
    local name=$1 batches=$2 contexts=$3 what=$4 dir=/tmp/reel-shapes-$1 md csv r rc=0 t0
    local steps=${REEL_SHAPES_STEPS:-20} warmup=${REEL_SHAPES_WARMUP:-5} eager=--no-eager
    [ "${REEL_SHAPES_EAGER:-0}" = 1 ] && eager=
    [ "${REEL_SHAPES_ONE_PLAN:-0}" = 1 ] && eager=--one-plan
    t0=$(date +%s)
    rm -rf "$dir"
    md=$(result "$what-$name" md)
    echo "--- $name: bench_decode --batches $batches --contexts $contexts ($(date -u +%T))"
    timeout "${REEL_SHAPES_REEL_TIMEOUT:-300}" "$B/bench/bench_decode" --shape "$name" --batches "$batches" \
        --contexts "$contexts" --steps "$steps" --warmup "$warmup" $eager --dir "$dir" ${REEL_SHAPES_ARGS:-} \
        >"$OUT/$what-reel-$name.md" 2>"$OUT/$what-reel-$name.log"
    r=$?
    cat "$OUT/$what-reel-$name.md" >>"$md"
    grep -E "seeded weights|fit|skipped|prefill of|no batch|rror|disagree" "$OUT/$what-reel-$name.log" | cut -c1-220
    [ $r = 0 ] || { echo "bench_decode $name: exit $r"; rc=1; }
    if have_torch && grep -q "^case " "$dir/reel_decode.txt" 2>/dev/null; then
        csv=$(result "$what-$name" csv)
        echo "--- $name: torch_model.py ($(date -u +%T), $(($(date +%s) - t0)) s in)"
        PYTHONUNBUFFERED=1 timeout "${REEL_SHAPES_TORCH_TIMEOUT:-420}" python3 bench/torch_model.py --dir "$dir" \
            --csv "$csv" --eager-budget-s "${REEL_SHAPES_EAGER_BUDGET:-0.3}" --eager-min-steps 10 \
            ${REEL_SHAPES_TORCH_ARGS:-} >"$OUT/$what-torch-$name.md" 2>"$OUT/$what-torch-$name.log"
        r=$?
        cat "$OUT/$what-torch-$name.md" >>"$md"
        grep -E "^# (checkpoint|context|eager|batch [0-9]+ context [0-9]+: (wall|experts))|flex|Error|error|FAILED|Traceback" \
            "$OUT/$what-torch-$name.log" | cut -c1-240 | tail -40
        [ $r = 0 ] || { echo "torch_model.py $name: exit $r"; tail -5 "$OUT/$what-torch-$name.log"; rc=1; }
        if [ -s "$csv" ]; then
            { echo; python3 bench/decode_table.py "$csv"; } >>"$md"
            python3 bench/decode_table.py --headline "$csv"
            SHAPE_CSVS+=("$csv")
        else
            rm -f "$csv"
        fi
    elif ! have_torch; then
        echo "no PyTorch with CUDA here: reel's side only"
    fi
    rm -rf "$dir"
    echo "$name: $(($(date +%s) - t0)) s"
    return $rc
}

# Every shape, one sub-step each (a call cut short keeps the shapes that finished, each with its CSV),
# then the headline over the CSVs of this call.
ph_shapes() {
    need bench/bench_decode || return 1
    local name rc=0 f
    SHAPE_CSVS=()
    for name in ${REEL_SHAPES:-llama-3.2-1b llama-3.1-8b qwen2.5-7b}; do
        shape_step "$name" "${REEL_SHAPES_BATCHES:-1,2,4,8,16,32,64,128,256}" "${REEL_SHAPES_CONTEXTS:-128,2048,8192}" \
            decode-shapes || rc=1
    done
    if [ ${#SHAPE_CSVS[@]} -gt 0 ]; then
        f=$(result decode-shapes-headline md)
        python3 bench/decode_table.py --headline "${SHAPE_CSVS[@]}" >>"$f"
        echo "headline of ${#SHAPE_CSVS[@]} shape(s): $f"
    fi
    return $rc
}

ph_shapes_quick() {
    need bench/bench_decode || return 1
    SHAPE_CSVS=()
    shape_step "${REEL_SHAPES_QUICK:-llama-3.2-1b}" 1,8,64 2048 decode-shapes-quick
}

# The MoE shapes (issue 44), one sub-step each as in shapes (their seeded checkpoints, 21 and 12 GB, removed after
# each), then the headline of this call's CSVs with both floors and the issue's targets.
ph_moe() {
    need bench/bench_decode || return 1
    local name rc=0 f
    SHAPE_CSVS=()
    for name in ${REEL_MOE_SHAPES:-qwen3-30b-a3b mixtral-8x7b}; do
        REEL_SHAPES_ARGS=${REEL_MOE_ARGS:-} REEL_SHAPES_TORCH_ARGS=${REEL_MOE_TORCH_ARGS---flex-max-ctas -1} \
            REEL_SHAPES_REEL_TIMEOUT=${REEL_MOE_REEL_TIMEOUT:-150} \
            REEL_SHAPES_TORCH_TIMEOUT=${REEL_MOE_TORCH_TIMEOUT:-240} \
            shape_step "$name" "${REEL_MOE_BATCHES:-1,2,4,8,16,32,64}" "${REEL_MOE_CONTEXTS:-2048}" decode-moe || rc=1
    done
    if [ ${#SHAPE_CSVS[@]} -gt 0 ]; then
        f=$(result decode-moe-headline md)
        python3 bench/decode_table.py --headline "${SHAPE_CSVS[@]}" >>"$f"
        echo "headline of ${#SHAPE_CSVS[@]} shape(s): $f"
    fi
    return $rc
}

# One op alone beside its PyTorch counterpart: NAME (bench/bench_NAME and
# bench/torch_NAME.py), REPLAYS, TIMEOUT in seconds for each.
beside_torch() {
    local name=$1 replays=$2 limit=$3 f rc
    need "bench/bench_$name" || return 1
    f=$(result "$name" md)
    timeout "$limit" "$B/bench/bench_$name" "$replays" 2>&1 | tee -a "$f"
    rc=$?
    if have_torch; then
        f=$(result "torch-$name" md)
        timeout "$limit" python3 "bench/torch_$name.py" "$replays" 2>&1 | tee -a "$f" || rc=1
    fi
    return $rc
}

ph_argmax() { beside_torch argmax 50 90; }

ph_sample() { beside_torch sample 30 300; }

ph_gemv() {
    need bench/bench_gemv || return 1
    local f rc tmp=$OUT/gemv.tmp
    mkdir -p "$tmp"
    f=$(result gemv md)
    OUT=$tmp timeout 300 "$B/bench/bench_gemv" 20 2>&1 | tee -a "$f"
    rc=$?
    [ -f "$tmp/gemv.csv" ] && mv "$tmp/gemv.csv" "$(result gemv csv)"
    rm -rf "$tmp"
    return $rc
}

ph_loop() {
    need bench/bench_decode || return 1
    local f rc=0
    export REEL_DEVICE_LOOP=1 # the WHILE-node loops (off by default on CUDA until a run has shown them)
    f=$(result loop md)
    rm -rf /tmp/reel-loop
    timeout 200 "$B/bench/bench_decode" --dir /tmp/reel-loop --batches 1,8,64 --contexts 128 --steps 20 --warmup 5 \
        --no-eager --no-logits --loop 1,8,64 2>&1 | tee -a "$f" || rc=1
    rm -rf /tmp/reel-loop
    timeout 300 "$B/bench/bench_decode" --dir /tmp/reel-loop --shape llama-3.2-1b --batches 1,8 --contexts 2048 \
        --steps 20 --warmup 5 --no-eager --no-logits --loop 1,8,64 2>&1 | tee -a "$f" || rc=1
    rm -rf /tmp/reel-loop
    return $rc
}

simple() { # WHAT TARGET TIMEOUT ARGS...: one program, its output as a result
    local what=$1 target=$2 limit=$3 f
    shift 3
    need "bench/$target" || return 1
    f=$(result "$what" md)
    timeout "$limit" "$B/bench/$target" "$@" 2>&1 | tee -a "$f"
}
ph_prefill_gemm() { simple prefill-gemm bench_prefill_gemm 200 50; }
ph_kv_pattern() { simple kv-pattern bench_kv_pattern 200 9; }
ph_l2_ahead() { simple l2-ahead bench_l2_ahead 150 20; }
ph_checker() { simple checker bench_checker 500 ${REEL_CHECKER_ARGS:-all}; }

ph_soak() {
    need bench/bench_soak || return 1
    local f
    f=$(result soak log)
    timeout 500 "$B/bench/bench_soak" ${REEL_SOAK_ARGS:---backend cuda --model demo --steps 1000000} 2>&1 | tee -a "$f"
}

ph_check() {
    need tools/reel || return 1
    local f
    f=$(result check-cuda md)
    timeout 120 "$B/tools/reel" check --backend cuda --quiet 2>&1 | tee -a "$f"
}

ph_demo() {
    need tools/reel || return 1
    local f rc=0 be r
    f=$(result demo log)
    for be in cuda host; do
        echo "--- reel demo --backend $be" >>"$f"
        timeout 90 "$B/tools/reel" demo --backend "$be" --quiet >>"$f" 2>&1
        r=$?
        echo "exit $r" >>"$f"
        [ $r = 0 ] || rc=1
    done
    # The decode benchmark's model (8 layers, hidden 1024, 16 heads of 64, ffn 4096, vocab 32000, bf16).
    echo "--- reel demo --backend cuda, 8 x 1024 model" >>"$f"
    timeout 120 "$B/tools/reel" demo --backend cuda --quiet --layers 8 --hidden 1024 --heads 16 --ffn 4096 \
        --vocab 32000 --max-context 2048 >>"$f" 2>&1
    r=$?
    echo "exit $r" >>"$f"
    [ $r = 0 ] || rc=1
    grep -E "^--- |backend|replays|eager steps|step latency|compile|checksum|^exit|rror" "$f"
    return $rc
}

# The kernel timeline of bench_decode's replayed graphs: bench/trace/kernel_trace.c built
# against CUPTI (the toolkit's, else the pip package's) and injected into the program; one
# table per graph replayed at least REEL_TRACE_MIN (20) times.
ph_trace() {
    local build=${REEL_TRACE_BUILD:-$B} lib=/tmp/reel-kernel-trace.so cupti="" d libdir f tmp=$OUT/trace.tmp rc
    [ "$build" = "$B" ] && { need bench/bench_decode || return 1; }
    [ -x "$build/bench/bench_decode" ] || { echo "no $build/bench/bench_decode"; return 1; }
    for d in /usr/local/cuda /usr/local/cuda/extras/CUPTI \
        "$(python3 -c 'import nvidia.cuda_cupti, os; print(os.path.dirname(nvidia.cuda_cupti.__file__))' 2>/dev/null)"; do
        [ -n "$d" ] && [ -f "$d/include/cupti.h" ] && { cupti=$d; break; }
    done
    [ -n "$cupti" ] || { echo "trace: no CUPTI headers found"; return 1; }
    libdir=$cupti/lib64
    ls "$libdir"/libcupti.so* >/dev/null 2>&1 || libdir=$cupti/lib
    cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -shared -fPIC -I"$cupti/include" -I/usr/local/cuda/include \
        bench/trace/kernel_trace.c -o "$lib" "$(ls "$libdir"/libcupti.so* | head -1)" -Wl,-rpath,"$libdir" || return 1
    local args=${REEL_TRACE_ARGS:---hidden 1024 --ffn 4096 --batches 1,64 --contexts 2048 --steps 100 --no-eager --no-logits}
    f=$(result trace-decode md)
    echo "<!-- bench_decode $args ($build) -->" >>"$f"
    CUDA_INJECTION64_PATH=$lib REEL_TRACE_OUT=$tmp timeout 300 "$build/bench/bench_decode" $args --dir /tmp/reel-trace \
        >"$OUT/trace-bench_decode.log" 2>&1
    rc=$?
    tail -3 "$OUT/trace-bench_decode.log"
    [ -f "$tmp" ] && cat "$tmp" >>"$f" && rm -f "$tmp"
    grep -E "^## graph" "$f"
    rm -rf /tmp/reel-trace/model
    return $rc
}

# Nsight Compute over a few replayed decode steps: every kernel's time (ncu serializes the
# kernels and flushes the caches before each, so the sum is above the replay's time), or
# with REEL_NCU_SECTIONS the named sections of the kernels matching REEL_NCU_KERNEL.
ph_ncu_step() {
    local build=${REEL_NCU_BUILD:-$B} h=${REEL_NCU_HIDDEN:-1024} f rc
    [ "$build" = "$B" ] && { need bench/bench_decode || return 1; }
    command -v ncu >/dev/null || { echo "no ncu here"; return 1; }
    local model=(--hidden "$h" --ffn $((4 * h)) --batches "${REEL_NCU_BATCH:-1}" --contexts "${REEL_NCU_CONTEXT:-128}"
        --steps 2 --warmup 1 --dir /tmp/reel-ncu)
    if [ -n "${REEL_NCU_SECTIONS:-}" ]; then
        local sec=() x
        for x in $REEL_NCU_SECTIONS; do sec+=(--section "$x"); done
        f=$(result ncu-step-sections txt)
        echo "# sections $REEL_NCU_SECTIONS of ${REEL_NCU_KERNEL:-.}, bench_decode ${model[*]}" >>"$f"
        timeout 400 ncu --clock-control none "${sec[@]}" -k "regex:${REEL_NCU_KERNEL:-.}" \
            --launch-skip "${REEL_NCU_SKIP:-0}" --launch-count "${REEL_NCU_KERNELS:-3}" \
            "$build/bench/bench_decode" "${model[@]}" >>"$f" 2>"$OUT/ncu.log"
        rc=$?
        grep -E "^  [a-z_:<>0-9, ]+\(|Section:|Duration|Throughput|Stall|Warp Cycles|Eligible|Issued|Achieved|Registers|L2 Hit|Mem Busy|Max Bandwidth" "$f" | head -120
        return $rc
    fi
    timeout 400 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
        --launch-skip "${REEL_NCU_SKIP:-0}" --launch-count "${REEL_NCU_COUNT:-400}" \
        "$build/bench/bench_decode" "${model[@]}" >"$OUT/ncu-step.csv" 2>"$OUT/ncu.log"
    rc=$?
    echo "ncu: exit $rc"
    f=$(result ncu-step md)
    echo "<!-- bench_decode ${model[*]} ($build) -->" >>"$f"
    python3 - "$OUT/ncu-step.csv" "${REEL_NCU_LAST:-75}" <<'PY' | tee -a "$f"
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
print(f"last {len(last)} kernels (ncu flushes the caches before each)\n")
print("| kernel grid x block | calls | us median | us total |\n| --- | --- | --- | --- |")
for k, v in sorted(tot.items(), key=lambda kv: -sum(kv[1])):
    v2 = sorted(v); print(f"| {k} | {len(v)} | {v2[len(v2)//2]:.2f} | {sum(v):.1f} |")
print(f"\ntotal {sum(sum(v) for v in tot.values()):.1f} us")
PY
    return $rc
}

# Nsight Compute at bench_attention points: the stall breakdown of reel's decode kernel
# beside PyTorch SDPA's kernel on the same shape (bench/torch_sdpa_point.py); with
# REEL_NCU_SECTIONS those sections of reel's kernels instead; with REEL_NCU_SASS=1 also the
# decode kernel's per-instruction counts (SASS, executed instructions and stall samples a line).
ph_ncu_attention() {
    local build=${REEL_NCU_BUILD:-$B} p row h hkv dh b c f rc=0 x
    [ "$build" = "$B" ] && { need bench/bench_attention || return 1; }
    command -v ncu >/dev/null || { echo "no ncu here"; return 1; }
    local M="smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_selected,smsp__inst_executed.sum,dram__bytes_read.sum,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__cycles_active.avg"
    local sec=()
    for x in ${REEL_NCU_SECTIONS:-}; do sec+=(--section "$x"); done
    filt() { grep -v "^==PROF==" | grep -vE "^ +-+$|^ *$"; }
    f=$(result ncu-attention txt)
    for p in ${REEL_NCU_POINTS:-8:16:16:64:64:8192 34:32:32:128:64:8192}; do
        IFS=: read -r row h hkv dh b c <<<"$p"
        echo "=== ncu reel, bench_attention row $row ($h/$hkv heads of $dh, batch $b, context $c)" | tee -a "$f"
        if [ ${#sec[@]} -gt 0 ]; then
            timeout 200 ncu --clock-control none --kernel-name "regex:${REEL_NCU_KERNEL:-attn_decode|attn_prefill}" \
                --launch-count 1 "${sec[@]}" "$build/bench/bench_attention" 1 "$row" 2>&1 | filt >>"$f" || rc=1
            continue
        fi
        timeout 200 ncu --clock-control none --kernel-name "regex:attn_decode" --launch-count 1 --metrics "$M" \
            "$build/bench/bench_attention" 1 "$row" 2>&1 | filt >>"$f" || rc=1
        if have_torch; then
            echo "=== ncu SDPA, same shape" | tee -a "$f"
            timeout 200 ncu --clock-control none --kernel-name "regex:^(?!.*(elementwise|distribution|vectorized|fill|copy)).*" \
                --launch-skip 2 --launch-count 1 --metrics "$M" \
                python3 bench/torch_sdpa_point.py "$h" "$hkv" "$dh" "$b" "$c" 2>&1 | filt >>"$f" || rc=1
        fi
        if [ "${REEL_NCU_SASS:-0}" = 1 ]; then
            timeout 200 ncu --clock-control none --kernel-name "regex:attn_decode" --launch-count 1 --section SourceCounters \
                --section WarpStateStats -f -o /tmp/reel-ncu-sass "$build/bench/bench_attention" 1 "$row" >/dev/null 2>&1 ||
                { echo "ncu (sass): failed"; rc=1; }
            x=$(result "ncu-attention-sass-row$row" csv)
            ncu -i /tmp/reel-ncu-sass.ncu-rep --page source --csv --print-source sass >"$x" 2>"$OUT/ncu-sass.err"
            echo "sass lines: $(wc -l <"$x") ($x)"
        fi
    done
    grep -E "^===|stalled|inst_executed|dram__bytes|duration|warps_active|grid_size|registers_per|occupancy_limit|Duration|Throughput|Stall|Achieved" "$f" | head -80
    return $rc
}

# Builds side by side: each NAME[@TREE]:FLAGS is built into /tmp/reel-ab-NAME (FLAGS to nvcc
# and cc; TREE a source tree of its own, this one without), then REEL_AB_PROGRAM of each
# build runs in turn, REEL_AB_ROUNDS times, in the same call; the raw tables and one table
# of every build's figure against the first build's.
ph_ab() {
    local prog=${REEL_AB_PROGRAM:-bench_decode} rounds=${REEL_AB_ROUNDS:-1} v spec name src flags d f raw r h
    local names=()
    for v in "${AB_SPECS[@]}"; do
        spec=${v%%:*} flags=
        [[ $v == *:* ]] && flags=${v#*:}
        name=${spec%%@*} src=$ROOT
        [ "$spec" != "$name" ] && src=${spec#*@}
        d=/tmp/reel-ab-$name
        [ -f "$d/build.ninja" ] && [ "$(cat "$d/.ab-spec" 2>/dev/null)" != "$v" ] && rm -rf "$d"
        setup "$d" "$src" "$flags" -Dtests=false || return 1
        echo "$v" >"$d/.ab-spec"
        timeout 400 ninja -C "$d" -j"$jobs" "bench/$prog" >"$OUT/ab-build-$name.log" 2>&1 ||
            { tail -20 "$OUT/ab-build-$name.log"; echo "BUILD FAILED: $v"; return 1; }
        names+=("$name")
        echo "built $v"
    done
    raw=$OUT/ab-$prog-raw.md
    : >"$raw"
    for r in $(seq 1 "$rounds"); do
        if [ "$prog" = bench_decode ]; then
            for h in ${REEL_AB_HIDDEN:-1024}; do
                for v in "${AB_SPECS[@]}"; do
                    name=${v%%:*}; name=${name%%@*}
                    echo "--- $name, round $r, hidden $h: ${v#*:}" | tee -a "$raw"
                    timeout 250 "/tmp/reel-ab-$name/bench/bench_decode" --hidden "$h" --ffn $((4 * h)) \
                        --batches "${REEL_AB_BATCHES:-1,8}" --contexts "${REEL_AB_CONTEXTS:-128,2048}" --steps 100 \
                        --no-eager --no-logits --dir /tmp/reel-ab ${REEL_AB_DECODE_ARGS:-} 2>"$OUT/ab-run-$name.err" |
                        grep -E "^\| [0-9]" | tee -a "$raw" ||
                        { echo "bench_decode failed:"; grep -v "^bench_decode: context" "$OUT/ab-run-$name.err" | tail -5; }
                    # the replay plan's device memory, each context (bench/decode.c's plan and process lines)
                    grep -E "^(plan|process) " /tmp/reel-ab/reel_decode.txt 2>/dev/null |
                        grep -oE "^(plan|process)|context=[0-9]+|arena_bytes=[0-9]+|stream_ws_bytes=[0-9]+|dev_other_bytes=-?[0-9]+|once_dev_bytes=-?[0-9]+" |
                        paste -sd' ' | sed 's/ plan/\nplan/g; s/ process/\nprocess/g' >>"$raw"
                    rm -rf /tmp/reel-ab/model
                done
            done
        else
            for v in "${AB_SPECS[@]}"; do
                name=${v%%:*}; name=${name%%@*}
                echo "--- $name, round $r: ${v#*:}" | tee -a "$raw"
                timeout 300 "/tmp/reel-ab-$name/bench/$prog" ${REEL_AB_ARGS:-} 2>&1 | tee -a "$raw"
            done
        fi
    done
    f=$(result "ab-${prog#bench_}" md)
    { for v in "${AB_SPECS[@]}"; do echo "<!-- build: $v -->"; done
      echo
      python3 - "$raw" "$prog" <<'PY'
# One row a point, one column a build (its figure, the mean over rounds), then each build over the first.
import collections, re, sys
raw, prog = sys.argv[1], sys.argv[2]
# program: (key cells, figure cell, the figure's name); bench_decode's rows also carry the hidden size
key_n, val_i, label = {"bench_decode": (2, 3, "replay gpu us"), "bench_attention": (6, 6, "reel us/layer"),
                       "bench_prefill_gemm": (3, 3, "device us"), "bench_argmax": (2, 4, "hot us"),
                       "bench_sample": (3, 5, "hot us")}.get(prog, (0, 0, ""))
if not key_n:
    sys.exit(0)
vals, names, head, hidden = collections.defaultdict(list), [], None, ""
for line in open(raw):
    m = re.match(r"^--- (\S+), round \d+(?:, hidden (\d+))?", line)
    if m:
        hidden = m.group(2) or ""
        if m.group(1) not in names:
            names.append(m.group(1))
        continue
    if not line.startswith("| ") or line.startswith("| ---"):
        continue
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) <= val_i:
        continue
    try:
        v = float(cells[val_i])
    except ValueError:
        head = head or cells[:key_n]
        continue
    vals[(hidden,) + tuple(cells[:key_n]), names[-1]].append(v)
keys = list(dict.fromkeys(k for k, _ in vals))
if not keys or len(names) < 2:
    sys.exit(0)
first = names[0]
cols = ["hidden", "batch", "context"] if prog == "bench_decode" else (head or [f"key {i + 1}" for i in range(key_n)])
print(f"{label}, mean over rounds; each build over {first}\n")
print("| " + " | ".join(cols + names + [f"{n} / {first}" for n in names[1:]]) + " |")
print("|" + " --- |" * (len(cols) + 2 * len(names) - 1))
for k in keys:
    mean = {n: sum(vals[k, n]) / len(vals[k, n]) if vals[k, n] else None for n in names}
    row = list(k) if prog == "bench_decode" else list(k[1:])
    row += ["-" if mean[n] is None else f"{mean[n]:.2f}" for n in names]
    row += ["-" if not mean[first] or mean[n] is None else f"{mean[n] / mean[first]:.3f}" for n in names[1:]]
    print("| " + " | ".join(row) + " |")
PY
      echo
      cat "$raw"; } >>"$f"
    awk '/^\| /{p=1} p&&/^$/{exit} p' "$f"
}

# ---- run -----------------------------------------------------------------------------------------
echo "gpu.sh: ${GPU_NAME:-no GPU} (driver ${GPU_DRIVER:--}, CUDA ${CUDA_VER:--}), commit $COMMIT; phases: ${want[*]}"
[ "$COMMIT" = unknown ] && echo "gpu.sh: no commit known (no .git here): pass REEL_COMMIT to name the results"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv >"$OUT/device.txt" 2>&1
status=0
for PHASE in "${want[@]}"; do
    echo
    echo "=== $PHASE ($(date -u +%T))"
    t0=$(date +%s)
    "ph_${PHASE//-/_}"
    rc=$?
    echo "$PHASE: exit $rc, $(($(date +%s) - t0)) s" | tee -a "$OUT/phases.txt"
    [ $rc = 0 ] || status=1
done
echo
echo "=== done ($(date -u +%T)); results in $RES:"
ls "$RES"
exit $status

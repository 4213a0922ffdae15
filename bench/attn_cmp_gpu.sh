#!/bin/bash
# On the GPU machine, one call: bench_attention's decode rows for several
# builds (bench/variants_ab.sh specs, e.g. "base:" "sub2:-DREEL_ATTN_DM_SUB64=2"),
# then Nsight Compute's stall breakdown of reel's decode and of PyTorch's
# SDPA kernel at the points REEL_CMP_POINTS names (bench_attention row:H:HKV:DH:BATCH:CONTEXT).
#   bench/attn_cmp_gpu.sh SPEC...
set -u -o pipefail
cd "$(dirname "$0")/.."
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
REEL_AB_PROGRAM=bench_attention REEL_AB_ARGS="${REEL_CMP_ARGS:-20 decode}" bench/variants_ab.sh "$@"
first=${1%%:*}
first=${first%%@*}
M="smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_selected,smsp__inst_executed.sum,dram__bytes_read.sum,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__cycles_active.avg"
filt() { grep -v "^==PROF==" | grep -E "stalled|inst_executed|dram__bytes|duration|warps_active|grid_size|registers_per|occupancy_limit|wavefronts|cycles_active|Kernel|attn_|flash|fmha|cudnn|sm90|kernel" | head -40; }
for p in ${REEL_CMP_POINTS:-8:16:16:64:64:8192 34:32:32:128:64:8192}; do
    IFS=: read -r row h hkv dh b c <<<"$p"
    echo "=== ncu reel, bench_attention row $row ($h/$hkv heads of $dh, batch $b, context $c)"
    timeout 150 ncu --clock-control none --kernel-name "regex:attn_decode" --launch-count 1 --metrics "$M" \
        "/tmp/reel-var-$first/bench/bench_attention" 1 "$row" 2>&1 | filt
    echo "=== ncu SDPA, same shape"
    timeout 150 ncu --clock-control none --kernel-name "regex:^(?!.*(elementwise|distribution|vectorized|fill|copy)).*" \
        --launch-skip 2 --launch-count 1 --metrics "$M" python3 bench/torch_sdpa_point.py "$h" "$hkv" "$dh" "$b" "$c" 2>&1 | filt
done

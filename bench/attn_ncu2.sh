#!/bin/bash
# On the GPU machine: Nsight Compute's stall breakdown for one kernel of one
# bench_attention point.  attn_ncu2.sh POINT KERNEL-REGEX
set -u
B=${B:-/tmp/reel-attn-build}
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
[ -x $B/bench/bench_attention ] || bench/attn_gpu.sh none >/dev/null
ncu --clock-control none --kernel-name "regex:$2" --launch-count 1 --section SpeedOfLight --section WarpStateStats \
    --section ComputeWorkloadAnalysis --section InstructionStats --metrics smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_no_instructions,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
    $B/bench/bench_attention 1 "$1" 2>&1 | grep -v "^==PROF==" | grep -vE "^ +-+$|^ *$" | head -70

#!/bin/bash
# On the GPU machine: Nsight Compute on one point of bench_attention for the
# attention kernels (after bench/attn_gpu.sh built it).  attn_ncu.sh POINT [KERNEL-REGEX]
set -u
B=${B:-/tmp/reel-attn-build}
[ -f .devdeps/env.sh ] && source .devdeps/env.sh
export PATH=/usr/local/cuda/bin:$PATH
[ -x $B/bench/bench_attention ] || bench/attn_gpu.sh none >/dev/null
ncu --clock-control none --kernel-name "regex:${2:-attn_decode|attn_prefill}" --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --section LaunchStats --section SchedulerStats $B/bench/bench_attention 1 "$1" 2>&1 | grep -v "^==PROF==" | \
    grep -E "attn_|Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Stall|Warp Cycles|Eligible|Issued|Block Limit|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth|DRAM|Shared Memory Config|Grid Size|Waves" | head -60

#!/bin/bash
# On the GPU machine: the decode step of this tree (A) against tree B, built
# with REEL_AB_ARGS (default -DREEL_GEMV_NARROW=1: the skinny-matmul impl's
# first, narrower rule) or, with REEL_AB_SRC_B=DIR, from another source tree
# (an older snapshot) without flags; same run, bench_decode's GPU time.
# bench/variants_ab.sh runs it:
#   bench/gemv_ab.sh   (REEL_AB_HIDDEN="1024 2048", REEL_AB_BATCHES=1,8, REEL_AB_CONTEXTS=128,2048,
#                       REEL_AB_ARGS=-DREEL_GEMV_NARROW=1, or REEL_AB_SRC_B=DIR)
set -u
src_b=${REEL_AB_SRC_B:-}
args_b=${REEL_AB_ARGS:--DREEL_GEMV_NARROW=1}
[ -n "$src_b" ] && args_b=
REEL_AB_HIDDEN=${REEL_AB_HIDDEN:-1024 2048} exec bash "$(dirname "$0")/variants_ab.sh" "ab-a:" "ab-b${src_b:+@$src_b}:$args_b"

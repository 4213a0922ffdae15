#!/bin/sh
# reel demo --pp-env / --dcp-env: the ranks as N processes started the way a
# launcher starts them (RANK, WORLD_SIZE, MASTER_PORT) serve the seeded
# workload with the token checksum of one process, for N = 2 and 4: pipeline
# stages (bf16), DCP attention over the ranks (f32: in bf16 each rank's
# partial attention is rounded before the combine, so tokens may part), and
# CP, each step's tokens split over the ranks (bf16; --fit: inside the limits).
reel=$1 mode=${2:-pp}
args="--backend host --quiet --layers 4 --hidden 64 --heads 4 --vocab 256 --block-size 8 --buckets 1,2,4,8,16 --max-context 64 --max-seqs 4 --requests 12"
[ "$mode" = dcp ] && args="$args --dtype f32"
[ "$mode" = cp ] && args="$args --fit"
one=$("$reel" demo $args | sed -n 's/.*token checksum *//p')
[ -n "$one" ] || { echo "pp_env.sh: no checksum from one process"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for n in 2 4; do
    port=$((20001 + ($$ * 2 + n) % 20000 * 2))
    pids=""
    r=0
    while [ $r -lt $n ]; do
        RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$reel" demo $args --$mode-env > "$dir/$n.$r" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    for p in $pids; do
        wait "$p" || { echo "pp_env.sh: a rank of $n failed:"; cat "$dir"/$n.*; exit 1; }
    done
    got=$(sed -n 's/.*token checksum *//p' "$dir/$n.0")
    if [ "$got" != "$one" ]; then
        echo "pp_env.sh: $mode over $n processes gave checksum '$got', one process '$one'"
        cat "$dir/$n.0"
        exit 1
    fi
    grep -q "followed stage 0's" "$dir/$n.1" || { echo "pp_env.sh: rank 1 of $n did not follow:"; cat "$dir/$n.1"; exit 1; }
    echo "pp_env.sh: $mode over $n processes: checksum $got, as one process"
done

#!/bin/sh
# examples/ranks as N processes started the way a shell launcher (or torchrun)
# starts them: every rank must exit 0 (its world sum and pair gather right).
exe=$1 n=${2:-4}
port=$((20001 + $$ % 20000 * 2))
pids=""
r=0
while [ $r -lt "$n" ]; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port REEL_BACKEND=host "$exe" &
    pids="$pids $!"
    r=$((r + 1))
done
rc=0
for p in $pids; do
    wait "$p" || rc=1
done
exit $rc

#!/bin/sh
# Sums meson test's closing counts over the logs given and prints
# "N passed, N failed, N skipped". A missing log (its build failed) counts as
# a failure. Exit status 1 when anything failed.
pass=0 fail=0 skip=0
for log in "$@"; do
    if [ ! -f "$log" ] || ! grep -q '^Ok:' "$log"; then
        echo "no test results in $log (did its build fail?)" >&2
        fail=$((fail + 1))
        continue
    fi
    eval "$(awk '
        /^Ok:/ || /^Expected Fail:/ { p += $NF }
        /^Fail:/ || /^Unexpected Pass:/ || /^Timeout:/ { f += $NF }
        /^Skipped:/ { s += $NF }
        END { printf "p=%d f=%d s=%d\n", p, f, s }' "$log")"
    pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + s))
done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]

#!/bin/sh
# The README's commands print no configure or build output (issue 12): `make
# build` on this build folder prints nothing of meson or ninja and keeps it in
# BUILD/make.log; `make demo`'s first line is the summary's; a build that fails
# says where its log is. Usage: test_make.sh SRC BUILD
set -u
src=$1 build=$2
command -v make >/dev/null 2>&1 || { echo "skip: no make"; exit 77; }
fail=0
out=$(make -s -C "$src" BUILD="$build" build 2>&1) || { echo "FAIL  make build: $out"; exit 1; }
if printf '%s\n' "$out" | grep -Eqi 'ninja|meson|compiling|linking'; then
    echo "FAIL  make build printed build output:"; printf '%s\n' "$out"; fail=1
else echo "ok    make build prints no build output"; fi
if grep -q ninja "$build/make.log" 2>/dev/null; then echo "ok    $build/make.log keeps it"
else echo "FAIL  no ninja output in $build/make.log"; fail=1; fi

first=$(REEL_BACKEND=host make -s -C "$src" BUILD="$build" demo \
        DEMO_ARGS="--layers 1 --hidden 32 --heads 1 --vocab 64 --requests 2 --quiet" 2>&1 | head -n 1)
case $first in
"reel demo:"*) echo "ok    make demo starts with the summary" ;;
*) echo "FAIL  make demo's first line: $first"; fail=1 ;;
esac

bad=$(mktemp -d)
out=$(make -s -C "$src" BUILD="$bad/b" MESON_ARGS=-Dno_such_option=1 build 2>&1) && fail=1
if printf '%s\n' "$out" | grep -q "$bad/b/make.log"; then echo "ok    a failed build names its log"
else echo "FAIL  a failed build does not name its log:"; printf '%s\n' "$out"; fail=1; fi
rm -rf "$bad"
exit $fail

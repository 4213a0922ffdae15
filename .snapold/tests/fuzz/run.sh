#!/bin/bash
# The CI fuzz step (`make test`, `make test-fuzz`): builds the libFuzzer
# targets with clang into BUILD (default build-fuzz) and runs each for
# SECONDS (default 45) from a copy of its seed corpus, all at once. New
# inputs stay in BUILD/fuzz-corpus-*; a crash, leak or broken invariant is
# saved as BUILD/fuzz-artifacts/<target>-crash-* and fails the step (replay
# it with BUILD/tests/fuzz/fuzz_<target> FILE). Without clang's libFuzzer
# runtime the step is skipped with a message, not failed.
# Usage: tests/fuzz/run.sh [BUILD] [SECONDS]
set -u
build=${1:-build-fuzz}
secs=${2:-45}
src=$(cd "$(dirname "$0")/../.." && pwd)
cd "$src"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }' > "$probe/p.c"
if ! command -v clang >/dev/null 2>&1; then
    echo "reel: fuzz step skipped: clang is not installed (apt-get install clang)"
    exit 0
fi
if ! clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >/dev/null 2>&1; then
    echo "reel: fuzz step skipped: clang cannot link -fsanitize=fuzzer (its libFuzzer runtime is missing: the compiler-rt package of this clang, e.g. libclang-rt-14-dev)"
    exit 0
fi
mkdir -p "$build"
log=$build/make.log
echo "reel: building $build with clang (configure and build output: $log)"
{ if [ ! -f "$build/build.ninja" ]; then
      rm -rf "$build/meson-private"
      CC=clang meson setup "$build" -Dfuzz=true -Dcuda=disabled -Dallocator=system \
          -Db_sanitize=address,undefined -Db_lundef=false
  fi && ninja -C "$build" tests/fuzz/fuzz_graph tests/fuzz/fuzz_step tests/fuzz/fuzz_safetensors; } > "$log" 2>&1 \
  || { tail -n 40 "$log" >&2; echo "reel: building $build failed; the whole log is $log" >&2; exit 1; }
mkdir -p "$build/fuzz-artifacts"
pids=()
for t in graph step safetensors; do
    corpus=$build/fuzz-corpus-$t
    mkdir -p "$corpus"
    cp -n tests/fuzz/corpus_$t/* "$corpus/" 2>/dev/null
    "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/fuzz-artifacts/$t-" "$corpus" > "$build/fuzz-$t.log" 2>&1 &
    pids+=($!)
done
rc=0
i=0
for t in graph step safetensors; do
    if wait "${pids[$i]}"; then
        echo "fuzz_$t: $(grep -E '^#[0-9]+.*DONE' "$build/fuzz-$t.log" | tail -1 | sed 's/^#\([0-9]*\).*DONE */\1 runs, /')"
    else
        rc=1
        grep -E 'invariant broken|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|SUMMARY' "$build/fuzz-$t.log" | head -5 >&2
        echo "reel: fuzz_$t found a failure; log $build/fuzz-$t.log, input in $build/fuzz-artifacts/" >&2
    fi
    i=$((i + 1))
done
exit $rc

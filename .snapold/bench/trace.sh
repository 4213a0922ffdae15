#!/bin/bash
# On the GPU machine: the kernel timeline of a program's replayed graphs.
#   bench/trace.sh OUT.md PROGRAM [ARGS...]
# builds bench/trace/kernel_trace.c against CUPTI (the toolkit's, else the
# pip package's), runs PROGRAM with it injected, and writes the table of
# every graph replayed at least REEL_TRACE_MIN (20) times to OUT.md.
set -u -o pipefail
out=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
lib=/tmp/reel-kernel-trace.so
cupti=""
for d in /usr/local/cuda /usr/local/cuda/extras/CUPTI \
    "$(python3 -c 'import nvidia.cuda_cupti, os; print(os.path.dirname(nvidia.cuda_cupti.__file__))' 2>/dev/null)"; do
    [ -n "$d" ] && [ -f "$d/include/cupti.h" ] && { cupti=$d; break; }
done
[ -n "$cupti" ] || { echo "trace.sh: no CUPTI headers found" >&2; exit 1; }
libdir=$cupti/lib64; ls "$libdir"/libcupti.so* >/dev/null 2>&1 || libdir=$cupti/lib
cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -shared -fPIC -I"$cupti/include" -I/usr/local/cuda/include \
    "$here/trace/kernel_trace.c" -o "$lib" "$(ls "$libdir"/libcupti.so* | head -1)" -Wl,-rpath,"$libdir" || exit 1
CUDA_INJECTION64_PATH=$lib REEL_TRACE_OUT=$out "$@"

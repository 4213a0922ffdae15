"""PyTorch on the same chain as bench/chain.cu: N kernels each adding 1.0 to
4096 floats, eager (x.add_(1)) and captured (torch.cuda.CUDAGraph), medians
of repeats, in microseconds per kernel. Run on the GPU machine beside
bench_chain so the figures come from the same machine and day:
    python3 bench/torch_chain.py [repeats]
"""
import statistics
import sys
import time

import torch


def time_gpu(fn, repeats):
    """Median over repeats of CUDA-event time around fn, and of wall time
    (launch + sync), in microseconds."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    gpu, wall = [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e6)
        gpu.append(start.elapsed_time(end) * 1e3)
    return statistics.median(gpu), statistics.median(wall)


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    x = torch.zeros(4096, device="cuda", dtype=torch.float32)
    print(f"PyTorch {torch.__version__}, {torch.cuda.get_device_name()}; median of {repeats}\n")
    print("| N | variant | gpu us/node | wall us/node | setup ms | result |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in (10, 100, 1000):
        def chain():
            for _ in range(n):
                x.add_(1.0)

        for _ in range(3):
            chain()  # warm-up
        x.zero_()
        g_e, w_e = time_gpu(chain, repeats)
        ok_e = float(x[0]) == float(n * repeats)
        x.zero_()
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        t0 = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            chain()  # warm-up on the side stream, as torch recommends
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):
                chain()
        torch.cuda.synchronize()
        setup_ms = (time.perf_counter() - t0) * 1e3
        x.zero_()
        g_g, w_g = time_gpu(graph.replay, repeats)
        expect = float(n * repeats)
        ok = "ok" if float(x[0]) == expect else f"got {float(x[0])}, want {expect}"
        print(f"| {n} | torch eager add_ | {g_e / n:.3f} | {w_e / n:.3f} | | {'ok' if ok_e else 'bad'} |")
        print(f"| {n} | torch CUDAGraph replay | {g_g / n:.3f} | {w_g / n:.3f} | {setup_ms:.2f} | {ok} |")


if __name__ == "__main__":
    main()

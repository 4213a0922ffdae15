"""The timing the PyTorch counterparts of bench/*.cu share (bench/torch_argmax.py,
bench/torch_sample.py): a torch.cuda.CUDAGraph of n launches, the median over
replays of CUDA-event time per launch, as bench/graph_timer.cuh times reel."""
import statistics

import torch


def time_graph(fn, n, replays):
    """fn(i) for i < n captured in one graph; median us per launch."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(n):  # warm-up outside the capture
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(n):
            fn(i)
    for _ in range(3):
        g.replay()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = []
    for _ in range(replays):
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        t.append(a.elapsed_time(b) * 1e3 / n)
    return statistics.median(t)

"""PyTorch's scaled_dot_product_attention on contiguous K/V, the shapes of
bench/attention.cu, timed the same way: L layers' K/V (together past the
L2), one call per layer captured in a CUDA graph, median of replays / L.
Decode: q [B, H, 1, D] over k, v [B, Hkv, ctx, D]; prefill: q [1, H, Q, D]
over ctx keys, causal aligned to the last key (causal_lower_right).
    python3 bench/torch_attention.py [reps]"""
import math
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
dev = torch.device("cuda")


def point(h, hkv, dh, batch, qlen, ctx):
    kv_bytes = 2 * batch * ctx * hkv * dh * 2
    layers = int(max(2, min(64, math.ceil(256e6 / kv_bytes))))
    q = torch.randn(batch, h, qlen, dh, device=dev, dtype=torch.bfloat16)
    ks = [torch.randn(batch, hkv, ctx, dh, device=dev, dtype=torch.bfloat16) for _ in range(layers)]
    vs = [torch.randn(batch, hkv, ctx, dh, device=dev, dtype=torch.bfloat16) for _ in range(layers)]
    mask = causal_lower_right(qlen, ctx) if qlen > 1 else None

    def run():
        for k, v in zip(ks, vs):
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=hkv != h)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    ts = []
    for r in range(reps + 3):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        if r >= 3:
            ts.append(e0.elapsed_time(e1) * 1e3 / layers)
    del ks, vs, g
    torch.cuda.empty_cache()
    ts.sort()
    return ts[len(ts) // 2], kv_bytes


print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
print("| kind | dh | H/Hkv | batch | q tokens | context | torch us/layer | TB/s |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for dh, h in ((64, 16), (128, 32)):
    for gq in (1, 8):
        hkv = h // gq
        pts = [(b, 1, c) for b in (1, 8, 64) for c in (128, 2048, 8192)]
        pts += [(1, qn, c) for qn in (512, 2048) for c in (2048, 8192)]
        for b, qn, c in pts:
            us, kvb = point(h, hkv, dh, b, qn, c)
            kind = "prefill" if qn > 1 else "decode"
            print(f"| {kind} | {dh} | {h}/{hkv} | {b} | {qn * b} | {c} | {us:.2f} | {kvb / us / 1e6:.2f} |", flush=True)

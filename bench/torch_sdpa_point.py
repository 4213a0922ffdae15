"""One decode point of PyTorch's scaled_dot_product_attention (the shapes of
bench/torch_attention.py), called a few times, for Nsight Compute to profile
beside reel's kernel (`bench/gpu.sh ncu-attention`).
    python3 bench/torch_sdpa_point.py H HKV DH BATCH CONTEXT"""
import sys

import torch
import torch.nn.functional as F

h, hkv, dh, batch, ctx = (int(a) for a in sys.argv[1:6])
dev = torch.device("cuda")
q = torch.randn(batch, h, 1, dh, device=dev, dtype=torch.bfloat16)
k = torch.randn(batch, hkv, ctx, dh, device=dev, dtype=torch.bfloat16)
v = torch.randn(batch, hkv, ctx, dh, device=dev, dtype=torch.bfloat16)
for _ in range(3):
    F.scaled_dot_product_attention(q, k, v, enable_gqa=hkv != h)
torch.cuda.synchronize()
print(f"sdpa point h={h} hkv={hkv} dh={dh} batch={batch} context={ctx}: done")

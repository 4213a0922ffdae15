"""PyTorch's sampling on the shapes and parameter sets of bench/sample.cu
(rows x vocab of bf16 logits uniform in [-8, 8)), timed the same way: a
torch.cuda.CUDAGraph of L launches, the median over replays of CUDA-event
time per launch. hot: the same logits every launch (in L2); cold: rotating
over copies larger than L2 together.

What a serving stack runs in PyTorch for each mode:
  greedy      torch.argmax
  plain       softmax(x / T) + torch.multinomial
  top_k 50    torch.topk, softmax over the k, multinomial, gather
  top_p 0.9   sort, softmax, cumsum, mask, multinomial, gather
  min_p 0.05  softmax, the row max, mask, multinomial
  k 40 p 0.95 min_p 0.02, mixed
              the general path with per-row tensors (vLLM's shape): sort the
              row once, top_k's threshold by gather, top_p by cumsum, min_p by
              the max, multinomial, gather
Each result is checked to be a token of its row (0 <= t < V). Run on the GPU
machine beside bench_sample:
    python3 bench/torch_sample.py [replays [vocab,vocab,...]]
"""
import sys
import time

import torch

from torch_graph_timer import time_graph


def plain(x, t):
    return torch.multinomial(torch.softmax(x.float() / t, dim=-1), 1).squeeze(-1)


def top_k(x, t, k):
    v, i = torch.topk(x.float() / t, k, dim=-1)
    return i.gather(-1, torch.multinomial(torch.softmax(v, dim=-1), 1)).squeeze(-1)


def top_p(x, t, p):
    v, i = torch.sort(x.float() / t, dim=-1, descending=True)
    probs = torch.softmax(v, dim=-1)
    cum = torch.cumsum(probs, dim=-1)
    probs = probs.masked_fill(cum - probs >= p, 0.0)  # keep the fewest whose mass reaches p
    return i.gather(-1, torch.multinomial(probs, 1)).squeeze(-1)


def min_p(x, t, mp):
    probs = torch.softmax(x.float() / t, dim=-1)
    probs = probs.masked_fill(probs < mp * probs.amax(dim=-1, keepdim=True), 0.0)
    return torch.multinomial(probs, 1).squeeze(-1)


def general(x, temp, tp, mp, tk):
    """Per-row temperature, top_p, min_p, top_k tensors ([rows]); temperature 0: greedy."""
    greedy = torch.argmax(x, dim=-1)
    xs = x.float() / torch.where(temp > 0, temp, torch.ones_like(temp)).unsqueeze(-1)
    v, i = torch.sort(xs, dim=-1, descending=True)
    k = torch.where(tk > 0, tk, torch.full_like(tk, x.shape[-1])).long().clamp(max=x.shape[-1])
    kth = v.gather(-1, (k - 1).unsqueeze(-1))
    v = v.masked_fill(v < kth, float("-inf"))
    probs = torch.softmax(v, dim=-1)
    probs = probs.masked_fill(probs < mp.unsqueeze(-1) * probs[:, :1], 0.0)
    cum = torch.cumsum(probs, dim=-1)
    probs = probs.masked_fill(cum - probs >= tp.unsqueeze(-1) * cum[:, -1:], 0.0)
    drawn = i.gather(-1, torch.multinomial(probs, 1)).squeeze(-1)
    return torch.where(temp > 0, drawn, greedy)


MODES = [("greedy", (0.0, 1.0, 0.0, 0)), ("plain", (1.0, 1.0, 0.0, 0)), ("top_k 50", (0.8, 1.0, 0.0, 50)),
         ("top_p 0.9", (0.8, 0.9, 0.0, 0)), ("min_p 0.05", (1.0, 1.0, 0.05, 0)),
         ("k 40 p 0.95 min_p 0.02", (0.7, 0.95, 0.02, 40)), ("mixed", None)]


def sampler(name, prm, rows):
    if name == "greedy":
        return lambda x: torch.argmax(x, dim=-1)
    if name == "plain":
        return lambda x: plain(x, prm[0])
    if name == "top_k 50":
        return lambda x: top_k(x, prm[0], prm[3])
    if name == "top_p 0.9":
        return lambda x: top_p(x, prm[0], prm[1])
    if name == "min_p 0.05":
        return lambda x: min_p(x, prm[0], prm[2])
    per_row = [MODES[r % (len(MODES) - 1)][1] if prm is None else prm for r in range(rows)]
    cols = [torch.tensor([p[j] for p in per_row], device="cuda", dtype=torch.float32) for j in range(4)]
    return lambda x: general(x, *cols)


def main():
    replays = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    vocabs = [int(v) for v in sys.argv[2].split(",")] if len(sys.argv) > 2 else [32000, 128256, 152064]
    print(f"# torch_sample: PyTorch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {replays} replays a timing\n")
    print("| mode | rows | vocab | KB | torch hot us | torch cold us | cold TB/s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    failed = False
    gen = torch.Generator(device="cuda").manual_seed(11)
    for vocab in vocabs:
        for rows in (1, 8, 64, 256):
            nbytes = rows * vocab * 2
            ncopies = max(2, (150 << 20) // nbytes + 1)
            xs = [(torch.rand(rows, vocab, device="cuda", generator=gen) * 16 - 8).to(torch.bfloat16)
                  for _ in range(ncopies)]
            for name, prm in MODES:
                fn = sampler(name, prm, rows)
                outs = [None] * max(ncopies, 20)

                def hot(i):
                    outs[i] = fn(xs[0])

                def cold(i):
                    outs[i] = fn(xs[i % ncopies])

                t_hot = time_graph(hot, 20, replays)
                n_cold = max(ncopies, 20)
                t_cold = time_graph(cold, n_cold, replays)
                torch.cuda.synchronize()
                out = outs[n_cold - 1]
                ok = out.shape == (rows,) and bool(((out >= 0) & (out < vocab)).all())
                failed |= not ok
                print(f"| {name} | {rows} | {vocab} | {nbytes / 1024:.0f} | {t_hot:.2f} | {t_cold:.2f} | "
                      f"{nbytes / (t_cold * 1e-6) / 1e12:.2f} |{'' if ok else ' BAD TOKENS'}", flush=True)
                del outs
            del xs
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

"""PyTorch's half of the decode-step benchmark (bench/decode.c is reel's).

Reads bench_decode's results (DIR/reel_decode.txt, DIR/logits_*.f32) and the
checkpoint it ran, a Hugging Face Llama directory (config.json and
model.safetensors: the seeded DIR/model, or the one its --model named; the
config line's model= field says which), runs the same model loaded from the
same checkpoint, the same prompt tokens and the same decode steps, checks
that both sides agree, and writes one CSV row per (batch, context) with both
sides' figures (`bench/gpu.sh matrix` gathers them into
$OUT/results/decode-matrix_DEVICE_DATE_COMMIT.csv):

    bench_decode --dir DIR && python3 bench/torch_model.py --dir DIR

Per context C, as bench_decode does: the largest batch's sequences are
prefilled to C tokens (eager, untimed) into one cache; batch B uses sequences
0 .. B-1 (views of it). Per batch: warm-up + timed decode steps, step i at
position C + i fed the prompt token there (teacher forcing), each timed as a
serving loop pays it: host wall (the token ids and position copied up into a
static buffer, the step, the next ids back on the host) and GPU time (CUDA
events before the upload and after the download). Variants:
  torch eager      the step in plain PyTorch; attention is
                   F.scaled_dot_product_attention over the cache sliced to
                   [:C+i+1] (no mask). Not cuDNN's SDPA, which plans anew for
                   every key length (40 ms a step): flash, memory-efficient,
                   math, flash over K/V gathered into contiguous buffers and
                   the default list are timed at the first point and the
                   fastest is the baseline (--eager-attention to fix one).
                   Timed for at most --eager-budget-s a point (20 steps at
                   least; the CSV says how many).
  torch graph      the same step captured by hand into a torch.cuda.CUDAGraph
                   per batch (all batches of a context in one memory pool,
                   largest first, as reel captures its buckets); attention
                   runs over a fixed length L with a boolean mask (key j <=
                   position) computed inside the graph
  torch.compile    the fixed-length step compiled (mode --compile-mode,
   + graph         default 'default'; not 'reduce-overhead', which silently
                   skips its graphs when the KV cache is a mutated input)
                   and its graphs captured by hand the same way
Capture time (warm-up + capture of every batch; torch.compile's compile is
in its warm-up) and the pool's bytes (torch.cuda.memory_reserved across the
captures) are in the CSV beside reel's compile, capture and memory figures.
The new k and v go into the cache with `cache[:, :, pos] = x` (index_put_,
the idiom gpt-fast uses, which inductor keeps in place). q, k and v come from
one fused [q; k; v] matmul and gate/up from one, as a PyTorch user writes it;
rmsnorm, rope and silu-and-mul compute in float32 and round to bf16 as reel
does; rope's angles are computed in float64, as reel's are.

Correctness, failing loudly (exit 1, the CSV still written): the next ids of
every step of reel's replay plan against torch eager's, counted as agreeing
when reel's id is within --tie-tol of torch's top logit (bf16 flips
near-ties); the graph variants' ids against torch eager's the same way; the
first step's logits of reel's logits plan against torch eager's (max abs
difference at most --max-logit-diff).

Without CUDA (testing this file on a CPU) it runs torch eager only and says so.
"""
import argparse
import contextlib
import csv
import datetime
import json
import os
import statistics
import struct
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

try:  # PyTorch >= 2.3
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    SDPBackend = sdpa_kernel = None

MASK64 = (1 << 64) - 1


def mix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def bench_token(seed, s, p, vocab):
    """The prompt token of sequence s at position p (decode.c's bench_token)."""
    return mix64(((seed + 1) ^ (s << 32) ^ p) & MASK64) % vocab


# ---- files written by bench_decode ------------------------------------------

def f32(x):
    """x rounded to float32, as bench_decode holds rms_norm_eps and rope_theta."""
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def read_safetensors(path):
    """One .safetensors file: {name: tensor} on the CPU. safetensors' own
    reader when it is installed, else the header read here (8-byte little
    endian length, JSON, the data) and torch.frombuffer."""
    try:
        from safetensors.torch import load_file
    except ImportError:
        load_file = None
    if load_file is not None:
        return load_file(path)
    with open(path, "rb") as f:
        raw = bytearray(f.read())  # torch.frombuffer wants a writable buffer
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(bytes(raw[8:8 + n]))
    header.pop("__metadata__", None)
    kinds = {"BF16": (torch.int16, torch.bfloat16, 2), "F16": (torch.float16, None, 2),
             "F32": (torch.float32, None, 4)}
    out = {}
    for name, h in header.items():
        if h["dtype"] not in kinds:
            sys.exit(f"{path}: {name} is {h['dtype']}: the model is bf16")
        rd, view, size = kinds[h["dtype"]]
        begin, end = h["data_offsets"]
        numel = 1
        for d in h["shape"]:
            numel *= d
        if end - begin != numel * size or 8 + n + end > len(raw):
            sys.exit(f"{path}: {name}: its data_offsets do not hold {h['dtype']} {h['shape']}")
        t = torch.frombuffer(raw, dtype=rd, count=numel, offset=8 + n + begin) if numel else torch.empty(0, dtype=rd)
        out[name] = (t.view(view) if view else t).reshape(h["shape"])
    return out


def load_checkpoint(mdir, rcfg, device):
    """The Hugging Face Llama or Qwen2 checkpoint in mdir (config.json;
    model.safetensors or an index and its shards) as (cfg, w) under this
    script's names. Biases and tied embeddings as bench_decode reads them:
    Qwen2 has q/k/v biases, Llama's attention_bias puts one on q, k, v and o.
    block_size and the seed of the prompt tokens are bench_decode's
    (reel_decode.txt's config line, rcfg), the model's sizes must be the ones
    it ran."""
    with open(os.path.join(mdir, "config.json")) as f:
        hc = json.load(f)
    get = lambda k, d=None: d if hc.get(k) is None else hc[k]
    mtype = get("model_type", "")
    if mtype not in ("llama", "qwen2") or get("rope_scaling") is not None or get("mlp_bias", False):
        sys.exit(f"{mdir}/config.json: model_type {mtype!r}, rope scaling or MLP biases: "
                 "not the model bench_decode runs")
    o_bias = bool(get("attention_bias", False))
    qkv_bias, tied = o_bias or mtype == "qwen2", bool(get("tie_word_embeddings", False))
    heads = hc["num_attention_heads"]
    cfg = dict(layers=hc["num_hidden_layers"], hidden=hc["hidden_size"], heads=heads,
               kv_heads=get("num_key_value_heads", heads), head_dim=get("head_dim", hc["hidden_size"] // heads),
               ffn=hc["intermediate_size"], vocab=hc["vocab_size"], block_size=int(rcfg["block_size"]),
               eps=f32(get("rms_norm_eps", 1e-6)), theta=f32(get("rope_theta", 10000.0)), seed=int(rcfg["seed"]),
               qkv_bias=qkv_bias, o_bias=o_bias, tied=tied)
    for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab"):
        if str(cfg[k]) != rcfg.get(k):
            sys.exit(f"{mdir}/config.json: {k} {cfg[k]}, but bench_decode ran {k}={rcfg.get(k)}")
    for k in ("qkv_bias", "o_bias", "tied"):
        if str(int(cfg[k])) != rcfg.get(k, "0"):
            sys.exit(f"{mdir}/config.json: {k} {cfg[k]}, but bench_decode ran {k}={rcfg.get(k, '0')}")
    index = os.path.join(mdir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    t = {}
    for name in files:
        t.update(read_safetensors(os.path.join(mdir, name)))

    def tensor(name, shape):
        if name not in t:
            sys.exit(f"{mdir}: no tensor {name}")
        x = t.pop(name)
        if x.dtype != torch.bfloat16 or list(x.shape) != shape:
            sys.exit(f"{mdir}: {name} is {x.dtype} {list(x.shape)}, the model wants torch.bfloat16 {shape}")
        return x.to(device)

    D, V, Fd = cfg["hidden"], cfg["vocab"], cfg["ffn"]
    Q, KV = cfg["heads"] * cfg["head_dim"], cfg["kv_heads"] * cfg["head_dim"]
    w = {"embed": tensor("model.embed_tokens.weight", [V, D]), "final_norm": tensor("model.norm.weight", [D])}
    w["lm_head"] = w["embed"] if tied else tensor("lm_head.weight", [V, D])
    for i in range(cfg["layers"]):
        p, q = f"model.layers.{i}.", f"l{i}."
        w[q + "attn_norm"] = tensor(p + "input_layernorm.weight", [D])
        w[q + "wq"] = tensor(p + "self_attn.q_proj.weight", [Q, D])
        w[q + "wk"] = tensor(p + "self_attn.k_proj.weight", [KV, D])
        w[q + "wv"] = tensor(p + "self_attn.v_proj.weight", [KV, D])
        if qkv_bias:
            w[q + "bqkv"] = torch.cat([tensor(p + "self_attn.q_proj.bias", [Q]),
                                       tensor(p + "self_attn.k_proj.bias", [KV]),
                                       tensor(p + "self_attn.v_proj.bias", [KV])], 0).contiguous()
        w[q + "wo"] = tensor(p + "self_attn.o_proj.weight", [D, Q])
        w[q + "bo"] = tensor(p + "self_attn.o_proj.bias", [D]) if o_bias else None
        w[q + "ffn_norm"] = tensor(p + "post_attention_layernorm.weight", [D])
        # one [2F, D] weight, gate rows first: silu(x W[:F]^T) * (x W[F:]^T)
        w[q + "w_gate_up"] = torch.cat([tensor(p + "mlp.gate_proj.weight", [Fd, D]),
                                        tensor(p + "mlp.up_proj.weight", [Fd, D])], 0).contiguous()
        w[q + "w_down"] = tensor(p + "mlp.down_proj.weight", [D, Fd])
    return cfg, w


def parse_kv(fields):
    out = {}
    for f in fields:
        k, _, v = f.partition("=")
        out[k] = v
    return out


def load_reel(path):
    """reel_decode.txt: config, plan lines by context, case lines by (batch,
    context), tokens by (batch, context) in step order."""
    cfg, plans, cases, tokens = {}, {}, {}, {}
    with open(path) as f:
        for line in f:
            if line.startswith("config "):  # model=<path> last: a path may hold spaces
                head, _, model = line.rstrip("\n").partition(" model=")
                cfg = parse_kv(head.split()[1:])
                if model:
                    cfg["model"] = model
                continue
            head, _, rest = line.partition(" : ")
            fields = head.split()
            if not fields:
                continue
            kv = parse_kv(fields[1:])
            if fields[0] == "plan":
                plans[int(kv["context"])] = kv
            elif fields[0] == "process":
                cfg["process_once_dev_bytes"] = kv.get("once_dev_bytes")
            elif fields[0] == "case":
                cases[(int(kv["batch"]), int(kv["context"]))] = kv
            elif fields[0] == "tokens":
                key = (int(kv["batch"]), int(kv["context"]))
                tokens.setdefault(key, []).append([int(x) for x in rest.split()])
    if not cfg:
        sys.exit(f"{path}: no config line: not written by bench_decode")
    return cfg, plans, cases, tokens


# ---- the model --------------------------------------------------------------

class Model:
    def __init__(self, cfg, w, device):
        self.c = cfg
        self.dev = device
        L = cfg["layers"]
        self.H, self.Hkv, self.Dh = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
        self.Q, self.KV, self.F = self.H * self.Dh, self.Hkv * self.Dh, cfg["ffn"]
        self.eps = cfg["eps"]
        self.contig_kv = False
        self.embed, self.final_norm, self.lm_head = w["embed"], w["final_norm"], w["lm_head"]
        self.layers = []
        for i in range(L):
            p = f"l{i}."
            self.layers.append(dict(
                attn_norm=w[p + "attn_norm"],
                wqkv=torch.cat([w[p + "wq"], w[p + "wk"], w[p + "wv"]], 0).contiguous(),
                bqkv=w.get(p + "bqkv"), wo=w[p + "wo"], bo=w[p + "bo"], ffn_norm=w[p + "ffn_norm"],
                wgu=w[p + "w_gate_up"], wd=w[p + "w_down"]))
        half = self.Dh // 2
        # reel: pos * theta^(-2i / rot_dim), in double
        self.inv_freq = cfg["theta"] ** (-2.0 * torch.arange(half, dtype=torch.float64, device=device) / self.Dh)

    @staticmethod
    def proj(x, w, b):
        """x W^T, then the bias added to the bf16 product (as reel adds it)."""
        y = F.linear(x, w)
        return y if b is None else y + b

    def rmsnorm(self, x, w):
        xf = x.float()
        r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * r * w.float()).to(x.dtype)

    def cos_sin(self, pos):
        ang = pos.to(torch.float64)[:, None] * self.inv_freq[None, :]
        return ang.cos().float(), ang.sin().float()

    @staticmethod
    def rope(x, cos, sin):
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half].float(), x[..., half:].float()
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)

    def new_cache(self, B, S):
        z = lambda: torch.zeros(B, self.Hkv, S, self.Dh, dtype=torch.bfloat16, device=self.dev)
        return [z() for _ in self.layers], [z() for _ in self.layers]

    def attend(self, q, k, v, mask=None, causal=False):
        if self.Hkv != self.H:
            k = k.repeat_interleave(self.H // self.Hkv, dim=1)
            v = v.repeat_interleave(self.H // self.Hkv, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        # PyTorch < 2.0 (only to test this file on a CPU)
        s = (q.float() @ k.float().transpose(-1, -2)) / (q.shape[-1] ** 0.5)
        if causal:
            mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return (s.softmax(-1) @ v.float()).to(q.dtype)

    def mlp(self, h, lw):
        x = self.rmsnorm(h, lw["ffn_norm"])
        gu = F.linear(x, lw["wgu"])
        g, u = gu[..., :self.F], gu[..., self.F:]
        f = (F.silu(g.float()) * u.float()).to(h.dtype)
        return h + F.linear(f, lw["wd"])

    @torch.no_grad()
    def prefill(self, kc, vc, seqs, tok, a):
        """Positions [a, a + n) of sequences seqs (a slice), tok [len, n]."""
        g, n = tok.shape
        b = a + n
        h = F.embedding(tok, self.embed)
        cos, sin = self.cos_sin(torch.arange(a, b, device=self.dev))
        cos, sin = cos[None, :, None, :], sin[None, :, None, :]
        mask = None
        if a > 0:
            mask = torch.arange(b, device=self.dev)[None, :] <= torch.arange(a, b, device=self.dev)[:, None]
        for i, lw in enumerate(self.layers):
            x = self.rmsnorm(h, lw["attn_norm"])
            qkv = self.proj(x, lw["wqkv"], lw["bqkv"])
            q = self.rope(qkv[..., :self.Q].reshape(g, n, self.H, self.Dh), cos, sin).transpose(1, 2)
            k = self.rope(qkv[..., self.Q:self.Q + self.KV].reshape(g, n, self.Hkv, self.Dh), cos, sin)
            v = qkv[..., self.Q + self.KV:].reshape(g, n, self.Hkv, self.Dh)
            kc[i][seqs, :, a:b] = k.transpose(1, 2)
            vc[i][seqs, :, a:b] = v.transpose(1, 2)
            o = self.attend(q, kc[i][seqs, :, :b], vc[i][seqs, :, :b], mask=mask, causal=a == 0)
            h = h + self.proj(o.transpose(1, 2).reshape(g, n, self.Q), lw["wo"], lw["bo"])
            h = self.mlp(h, lw)

    @torch.no_grad()
    def decode(self, buf, kc, vc, n=None, L=None):
        """One decode step. buf int64 [B + 1]: the B token ids, then the
        position (the same for every sequence). Attention over [:n] (eager,
        n a Python int) or over a fixed [:L] with a mask (for graphs).
        Returns (next ids [B], logits [B, vocab])."""
        B = buf.shape[0] - 1
        tok, pos = buf[:B], buf[B:]
        h = F.embedding(tok, self.embed)
        cos, sin = self.cos_sin(pos)
        cos, sin = cos[:, None, :], sin[:, None, :]
        mask = None
        if L is not None:
            mask = (torch.arange(L, device=buf.device) <= pos).view(1, 1, 1, L)
        for i, lw in enumerate(self.layers):
            x = self.rmsnorm(h, lw["attn_norm"])
            qkv = self.proj(x, lw["wqkv"], lw["bqkv"])
            q = self.rope(qkv[:, :self.Q].reshape(B, self.H, self.Dh), cos, sin)
            k = self.rope(qkv[:, self.Q:self.Q + self.KV].reshape(B, self.Hkv, self.Dh), cos, sin)
            v = qkv[:, self.Q + self.KV:].reshape(B, self.Hkv, self.Dh)
            kc[i][:, :, pos] = k.unsqueeze(2)
            vc[i][:, :, pos] = v.unsqueeze(2)
            m = L if L is not None else n
            kk, vv = kc[i][:, :, :m], vc[i][:, :, :m]
            if self.contig_kv and L is None:  # eager: K/V gathered into contiguous buffers first
                kk, vv = kk.contiguous(), vv.contiguous()
            o = self.attend(q.unsqueeze(2), kk, vv, mask=mask)
            h = h + self.proj(o.reshape(B, self.Q), lw["wo"], lw["bo"])
            h = self.mlp(h, lw)
        h = self.rmsnorm(h, self.final_norm)
        logits = F.linear(h, self.lm_head)
        return logits.argmax(-1), logits


# ---- driving it -------------------------------------------------------------

def prefill_all(model, kc, vc, cfg, B, lo, hi, max_tokens):
    n = hi - lo
    if n <= 0:
        return
    group = max(1, max_tokens // n)
    for s0 in range(0, B, group):
        s1 = min(B, s0 + group)
        tok = torch.tensor([[bench_token(cfg["seed"], s, p, cfg["vocab"]) for p in range(lo, hi)]
                            for s in range(s0, s1)], dtype=torch.int64, device=model.dev)
        model.prefill(kc, vc, slice(s0, s1), tok, lo)


def step_inputs(cfg, B, C, N, pin):
    """Host buffers [B + 1] (ids, then position) of the N steps from C."""
    out = []
    for i in range(N):
        ids = [bench_token(cfg["seed"], s, C + i, cfg["vocab"]) for s in range(B)]
        t = torch.tensor(ids + [C + i], dtype=torch.int64)
        out.append(t.pin_memory() if pin else t)
    return out


class Timed:
    """Medians of a serving loop's steps: host wall (ids up, step, next ids
    back on the host) and device time (CUDA events from before the upload to
    after the download, as reel_plan_time_steps records)."""

    def __init__(self, cuda, B):
        self.cuda = cuda
        if cuda:
            self.ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            self.host = torch.empty(B, dtype=torch.int64).pin_memory()

    def run(self, run, static, inputs, warmup, keep_logits=False, budget_s=None):
        """Steps through inputs; with budget_s, stops timing once the timed
        steps would pass it (at least 20 timed). Returns (wall us, gpu us,
        ids of every step run, first logits on the host, kept logits,
        timed steps)."""
        walls, gpus, ids, first, kept = [], [], [], None, []
        if self.cuda:
            torch.cuda.synchronize()
        t_start = None
        for i, inp in enumerate(inputs):
            t0 = time.perf_counter()
            if self.cuda:
                self.ev[0].record()
                static.copy_(inp, non_blocking=True)
                nxt, logits = run(i)
                self.host.copy_(nxt, non_blocking=True)
                self.ev[1].record()
                self.ev[1].synchronize()
                host = self.host.tolist()
            else:
                static.copy_(inp)
                nxt, logits = run(i)
                host = nxt.tolist()
            t = time.perf_counter() - t0
            if i == 0:
                first = logits.float().cpu()
            if keep_logits:
                kept.append(logits)
            ids.append(host)
            if i >= warmup:
                if t_start is None:
                    t_start = time.perf_counter()
                walls.append(t * 1e6)
                if self.cuda:
                    gpus.append(self.ev[0].elapsed_time(self.ev[1]) * 1e3)
                if budget_s and len(walls) >= 20 and time.perf_counter() - t_start > budget_s:
                    break
        med = lambda v: statistics.median(v) if v else None
        return med(walls), med(gpus), ids, first, kept, len(walls)


def capture_buckets(fns, statics, inputs0, pool_handle):
    """Captures one graph per batch (largest first, as reel does), all in one
    memory pool, each after three warm-up calls on a side stream (where
    torch.compile compiles). Returns ({B: (graph, outputs)}, seconds in all,
    seconds in the capture blocks alone, pool bytes: the segments the caching
    allocator holds for the pool after the captures, from its snapshot; where
    the snapshot does not name pools, what it reserved across the captures,
    with its cache emptied first so blocks freed earlier are not reused
    unseen)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    r0 = torch.cuda.memory_reserved()
    graphs, cap_s = {}, 0.0
    t0 = time.perf_counter()
    for B in sorted(fns, reverse=True):
        statics[B].copy_(inputs0[B])  # warm-up writes the first step's k/v: the step rewrites the same
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fns[B]()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        tc = time.perf_counter()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool_handle):
            out = fns[B]()
        torch.cuda.synchronize()
        cap_s += time.perf_counter() - tc
        graphs[B] = (g, out)
    total = time.perf_counter() - t0
    return graphs, total, cap_s, pool_bytes(pool_handle, torch.cuda.memory_reserved() - r0)


def pool_bytes(pool_handle, fallback):
    """Bytes of the caching allocator's segments that belong to the pool."""
    try:
        segs = torch.cuda.memory_snapshot()
    except Exception:
        return fallback
    want = tuple(pool_handle)
    mine = [sg["total_size"] for sg in segs if tuple(sg.get("segment_pool_id") or ()) == want]
    return sum(mine) if mine else fallback


def agree(a, b):
    same = total = 0
    for ra, rb in zip(a, b):
        for x, y in zip(ra, rb):
            same += x == y
            total += 1
    return same / total if total else float("nan"), same, total


def near_agree(ids, logits, tol):
    """Fraction of ids whose logit in torch eager's step is within tol of
    torch's max (a flip of a near-tie counts as agreement)."""
    ok = total = 0
    for r, l in zip(ids, logits):
        lf = l.float()
        idx = torch.tensor(r, dtype=torch.int64, device=lf.device)[:, None]
        gap = lf.max(-1).values - lf.gather(1, idx)[:, 0]
        ok += int((gap <= tol).sum())
        total += len(r)
    return ok / total if total else float("nan")


# The eager variant's attention. cuDNN's SDPA (first on the H200's list)
# builds an execution plan for each new key length, and the key length is
# new at every decode step: 39-47 ms a step on the H200 (2026-12-01, 8
# layers). The candidates below are timed at the first point and the
# fastest is the eager baseline (all their times are printed).
EAGER_CANDIDATES = ["flash", "efficient", "math", "flash+contiguous", "default"]


def eager_context(name):
    if name == "default" or sdpa_kernel is None:
        return contextlib.nullcontext()
    b = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
         "math": SDPBackend.MATH}[name.split("+")[0]]
    return sdpa_kernel([b])


def pick_eager(model, kc, vc, static, inputs, C, B, cuda, log):
    """Times 12 eager steps (median of the last 8) with each SDPA choice;
    returns the fastest that runs and a note with every time."""
    if not cuda:
        return "default", "cpu"
    times = {}
    for name in EAGER_CANDIDATES:
        model.contig_kv = name.endswith("+contiguous")
        try:
            with eager_context(name):
                tm = Timed(cuda, B)
                us, _, _, _, _, _ = tm.run(lambda i: model.decode(static, kc, vc, n=C + i + 1), static,
                                           inputs[:12], 4)
            times[name] = us
        except RuntimeError as e:  # a backend that refuses these shapes
            times[name] = None
            log(f"eager attention {name}: refused ({str(e).splitlines()[0][:120]})")
    model.contig_kv = False
    ok = {k: v for k, v in times.items() if v is not None}
    if not ok:
        sys.exit("torch eager: no SDPA backend runs the decode step")
    best = min(ok, key=ok.get)
    note = "eager SDPA us/step at batch %d context %d: " % (B, C) + ", ".join(
        f"{k} {'-' if v is None else f'{v:.0f}'}" for k, v in times.items())
    return best, note


def profile_eager(model, kc, vc, static, inputs, C, log):
    """One profile of three eager steps: where an eager step's time goes
    (host launch overhead or kernels), printed for the notes."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i in range(3):
                static.copy_(inputs[i])
                model.decode(static, kc, vc, n=C + i + 1)[0].cpu()
        log("torch eager profile (3 steps):\n" +
            prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
    except Exception as e:  # the profile is a note, never the measurement
        log(f"torch eager profile failed: {e}")


def machine_info(cuda):
    info = {"machine": "cpu", "driver": "", "cuda": str(torch.version.cuda or ""), "torch": torch.__version__}
    if cuda:
        info["machine"] = torch.cuda.get_device_name()
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout.strip().splitlines()
            info["driver"] = out[0] if out else ""
        except (OSError, subprocess.SubprocessError):
            pass
    return info


COLUMNS = ["machine", "driver", "cuda", "torch", "date", "layers", "hidden", "heads", "ffn", "vocab", "batch",
           "context", "steps", "reel_replay_us", "reel_replay_gpu_us", "reel_eager_us", "reel_eager_gpu_us",
           "torch_eager_us", "torch_eager_gpu_us", "torch_eager_steps", "torch_graph_us", "torch_graph_gpu_us",
           "torch_compile_us", "torch_compile_gpu_us", "floor_us", "floor_tbps", "replay_over_compile",
           "replay_over_floor", "eager_over_torch_eager", "ids_agree", "ids_near_agree", "max_logit_diff",
           "torch_graph_near_agree", "torch_compile_near_agree", "reel_compile_ms", "reel_capture_ms",
           "reel_arena_bytes", "reel_static_bytes", "reel_graph_bytes", "reel_dev_other_bytes",
           "reel_graph_mem_reserved", "reel_process_once_bytes",
           "torch_graph_capture_s", "torch_graph_capture_only_s", "torch_graph_pool_bytes",
           "torch_compile_capture_s", "torch_compile_capture_only_s", "torch_compile_pool_bytes",
           "eager_attention", "ok"]


def fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/reel-decode")
    ap.add_argument("--batches", help="subset, e.g. 1,64 (default: every batch reel ran)")
    ap.add_argument("--contexts", help="subset, e.g. 128")
    ap.add_argument("--variants", default="eager,graph,compile")
    ap.add_argument("--compile-mode", default="default")
    ap.add_argument("--eager-budget-s", type=float, default=3.0,
                    help="time the eager variant at most this long a point (at least 20 steps); 0: all steps")
    ap.add_argument("--eager-attention", default="auto", choices=["auto"] + EAGER_CANDIDATES,
                    help="SDPA choice of the eager variant (auto: the fastest at the first point)")
    ap.add_argument("--prefill-tokens", type=int, default=16384)
    ap.add_argument("--min-agree", type=float, default=0.97,
                    help="fail when fewer ids than this agree within --tie-tol")
    ap.add_argument("--tie-tol", type=float, default=0.0625,
                    help="an id counts as agreeing when torch eager's logit for it is this close to its max")
    ap.add_argument("--max-logit-diff", type=float, default=0.25,
                    help="fail when reel's first-step logits differ from torch eager's by more")
    ap.add_argument("--csv", help="write the rows here (default DIR/decode.csv)")
    ap.add_argument("--append", action="store_true", help="append to --csv (header only when new)")
    ap.add_argument("--profile", action="store_true", help="profile three eager steps at the first point")
    a = ap.parse_args()

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    rpath = os.path.join(a.dir, "reel_decode.txt")
    if not os.path.exists(rpath):
        sys.exit(f"torch_model.py: {rpath} is missing: run bench_decode --dir {a.dir} first")
    rcfg, rplans, rcases, rtokens = load_reel(rpath)
    mdir = rcfg.get("model") or os.path.join(a.dir, "model")
    if not os.path.exists(os.path.join(mdir, "config.json")):
        sys.exit(f"torch_model.py: the checkpoint {mdir} (config.json) is missing: run bench_decode --dir {a.dir} first")
    cfg, w = load_checkpoint(mdir, rcfg, dev)
    steps, warmup = int(rcfg["steps"]), int(rcfg["warmup"])
    N = steps + warmup
    variants = a.variants.split(",") if cuda else ["eager"]
    if not cuda:
        print("torch_model.py: CUDA is not available: torch eager only, on the CPU (a check of this script, "
              "not a measurement)", file=sys.stderr)
    pick = lambda s: None if not s else {int(x) for x in s.split(",")}
    want_b, want_c = pick(a.batches), pick(a.contexts)
    keys = sorted(k for k in rcases if (not want_b or k[0] in want_b) and (not want_c or k[1] in want_c))
    if not keys:
        sys.exit(f"torch_model.py: no reel cases to compare in {a.dir}")
    model = Model(cfg, w, dev)
    if cuda:
        torch._dynamo.config.cache_size_limit = 64
    log = lambda m: print(m, file=sys.stderr, flush=True)

    info = machine_info(cuda)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"decode step, reel beside PyTorch {info['torch']} on {info['machine']} (driver {info['driver']}, "
          f"CUDA {info['cuda']}; reel backend {rcfg.get('backend')}), {date}")
    print(f"model: {cfg['layers']} layers, hidden {cfg['hidden']}, {cfg['heads']} heads of {cfg['head_dim']} "
          f"({cfg['kv_heads']} kv), ffn {cfg['ffn']}, vocab {cfg['vocab']}, bf16; same checkpoint ({mdir}), "
          f"prompt seed {cfg['seed']}")
    print(f"per step: host wall (ids up, step, next ids back) and gpu (events around it), medians of {steps} "
          f"after {warmup} warm-up; torch.compile mode {a.compile_mode}\n", flush=True)

    rows, bad = [], []
    eager_choice = None if a.eager_attention == "auto" else a.eager_attention
    compiled = torch.compile(Model.decode, mode=a.compile_mode) if "compile" in variants else None
    for C in sorted({k[1] for k in keys}):
        Bs = sorted(k[0] for k in keys if k[1] == C)
        maxB = Bs[-1]
        S = (C + N + 1 + 15) // 16 * 16
        L = S
        kc, vc = model.new_cache(maxB, S)
        t0 = time.perf_counter()
        prefill_all(model, kc, vc, cfg, maxB, 0, C, a.prefill_tokens)
        if cuda:
            torch.cuda.synchronize()
        log(f"# context {C}: prefill of {maxB} x {C} in {time.perf_counter() - t0:.1f} s")
        views = {B: ([k[:B] for k in kc], [v[:B] for v in vc]) for B in Bs}
        statics = {B: torch.zeros(B + 1, dtype=torch.int64, device=dev) for B in Bs}
        inputs = {B: step_inputs(cfg, B, C, N, cuda) for B in Bs}
        plan = rplans.get(C, {})

        if eager_choice is None:
            B0 = Bs[0]
            eager_choice, note = pick_eager(model, *views[B0], statics[B0], inputs[B0], C, B0, cuda, log)
            log(f"# {note}; eager baseline: {eager_choice}")
            print(f"eager attention: {eager_choice} ({note})\n")
        if a.profile and cuda:
            profile_eager(model, *views[Bs[0]], statics[Bs[0]], inputs[Bs[0]], C, log)
            a.profile = False

        caps = {}
        for var in ("graph", "compile"):
            if var not in variants:
                continue
            if var == "graph":
                fns = {B: (lambda B=B: model.decode(statics[B], *views[B], L=L)) for B in Bs}
            else:
                fns = {B: (lambda B=B: compiled(model, statics[B], *views[B], L=L)) for B in Bs}
            graphs, tot_s, cap_s, pool = capture_buckets(fns, statics, {B: inputs[B][0] for B in Bs},
                                                         torch.cuda.graph_pool_handle())
            caps[var] = (graphs, tot_s, cap_s, pool)
            log(f"# context {C}: torch {var}: {len(graphs)} buckets in {tot_s:.1f} s (capture blocks "
                f"{cap_s * 1e3:.0f} ms), pool {pool / 2**20:.1f} MiB")

        for B in Bs:
            st, ins = statics[B], inputs[B]
            tm = Timed(cuda, B)
            res = {}
            model.contig_kv = eager_choice.endswith("+contiguous")
            with eager_context(eager_choice):
                e_us, e_gpu, e_ids, e_first, kept, e_n = tm.run(
                    lambda i: model.decode(st, *views[B], n=C + i + 1), st, ins, warmup, keep_logits=True,
                    budget_s=a.eager_budget_s or None)
            model.contig_kv = False
            for var, (graphs, _, _, _) in caps.items():
                g, out = graphs[B]
                res[var] = tm.run(lambda i: (g.replay(), out)[1], st, ins, warmup)
            rc = rcases[(B, C)]
            reel_ids = rtokens.get((B, C), [])
            n_e = len(e_ids)
            frac, same, total = agree(reel_ids[:n_e], e_ids)
            near = near_agree(reel_ids[:n_e], kept, a.tie_tol)
            self_near = {var: near_agree(r[2][:n_e], kept, a.tie_tol) for var, r in res.items()}
            del kept
            lpath = os.path.join(a.dir, f"logits_b{B}_c{C}.f32")
            maxdiff = None
            if os.path.exists(lpath):
                rl = torch.frombuffer(bytearray(open(lpath, "rb").read()), dtype=torch.float32).reshape(B, -1)
                maxdiff = (rl - e_first).abs().max().item()
            ok = bool(total) and near >= a.min_agree and (maxdiff is None or maxdiff <= a.max_logit_diff)
            if not ok:
                bad.append(f"batch {B} context {C}: reel vs torch eager ids {same}/{total}, within tolerance "
                           f"{near:.3f}, max logit diff {fmt(maxdiff, 4)}")
            for var, f in self_near.items():
                if f < a.min_agree:
                    ok = False
                    bad.append(f"batch {B} context {C}: torch {var} vs torch eager {f:.3f} within tolerance")
            fl = float(rc["floor_us"])
            rr, rg = float(rc["replay_us"]), float(rc.get("replay_gpu_us", -1))
            re_, reg = float(rc["eager_us"]), float(rc.get("eager_gpu_us", -1))
            tc = res.get("compile", (None,))[0]
            pos_or_none = lambda v: v if v >= 0 else None
            gb = plan.get("graph_bytes") if plan.get("graph_bytes_known") == "1" else None
            row = dict(info, date=date, layers=cfg["layers"], hidden=cfg["hidden"], heads=cfg["heads"],
                       ffn=cfg["ffn"], vocab=cfg["vocab"], batch=B, context=C, steps=steps,
                       reel_replay_us=rr, reel_replay_gpu_us=pos_or_none(rg), reel_eager_us=pos_or_none(re_),
                       reel_eager_gpu_us=pos_or_none(reg), torch_eager_us=e_us, torch_eager_gpu_us=e_gpu,
                       torch_eager_steps=e_n, torch_graph_us=res.get("graph", (None,))[0],
                       torch_graph_gpu_us=res.get("graph", (None, None))[1], torch_compile_us=tc,
                       torch_compile_gpu_us=res.get("compile", (None, None))[1], floor_us=fl,
                       floor_tbps=rcfg.get("floor_tbps") if rcfg.get("floor_measured") == "1" else None,
                       replay_over_compile=rr / tc if tc else None, replay_over_floor=rr / fl,
                       eager_over_torch_eager=re_ / e_us if re_ >= 0 and e_us else None,
                       ids_agree=frac, ids_near_agree=near, max_logit_diff=maxdiff,
                       torch_graph_near_agree=self_near.get("graph"),
                       torch_compile_near_agree=self_near.get("compile"),
                       reel_compile_ms=plan.get("reel_compile_ms"), reel_capture_ms=plan.get("capture_ms"),
                       reel_arena_bytes=plan.get("arena_bytes"), reel_static_bytes=plan.get("static_bytes"),
                       reel_graph_bytes=gb, reel_dev_other_bytes=plan.get("dev_other_bytes"),
                       reel_process_once_bytes=rcfg.get("process_once_dev_bytes"),
                       reel_graph_mem_reserved=plan.get("graph_mem_reserved"),
                       torch_graph_capture_s=caps["graph"][1] if "graph" in caps else None,
                       torch_graph_capture_only_s=caps["graph"][2] if "graph" in caps else None,
                       torch_graph_pool_bytes=caps["graph"][3] if "graph" in caps else None,
                       torch_compile_capture_s=caps["compile"][1] if "compile" in caps else None,
                       torch_compile_capture_only_s=caps["compile"][2] if "compile" in caps else None,
                       torch_compile_pool_bytes=caps["compile"][3] if "compile" in caps else None,
                       eager_attention=eager_choice + ("" if e_n == steps else f" ({e_n} steps timed)"),
                       ok=int(ok))
            rows.append(row)
            log(f"# batch {B} context {C}: wall us reel {rr:.1f} / {re_:.1f}, torch eager {fmt(e_us)} ({e_n} steps) "
                f"graph {fmt(row['torch_graph_us'])} compile {fmt(tc)}; gpu us reel {rg:.1f} / {reg:.1f}, torch "
                f"{fmt(e_gpu)} / {fmt(row['torch_graph_gpu_us'])} / {fmt(row['torch_compile_gpu_us'])}; ids "
                f"{same}/{total}, near {near:.3f}, max |logit diff| {fmt(maxdiff, 4)}"
                f"{'' if ok else '  DISAGREE'}")
        caps = None
        kc = vc = views = None  # frees the cache (and the graphs) before the next context
        if cuda:
            torch.cuda.empty_cache()

    print("| batch | context | reel replay us | reel eager us | torch eager us | torch graph us | "
          "torch.compile + graph us | floor us | replay / compile+graph | replay / floor | "
          "reel eager / torch eager | ids agree | near-tie agree | max abs logit diff |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['batch']} | {r['context']} | {fmt(r['reel_replay_us'])} | {fmt(r['reel_eager_us'])} | "
              f"{fmt(r['torch_eager_us'])} | {fmt(r['torch_graph_us'])} | {fmt(r['torch_compile_us'])} | "
              f"{fmt(r['floor_us'])} | {fmt(r['replay_over_compile'], 2)} | {fmt(r['replay_over_floor'], 2)} | "
              f"{fmt(r['eager_over_torch_eager'], 2)} | {r['ids_agree']:.3f} | {r['ids_near_agree']:.3f} | "
              f"{fmt(r['max_logit_diff'], 4)} |")
    csv_path = a.csv or os.path.join(a.dir, "decode.csv")
    new = not (a.append and os.path.exists(csv_path) and os.path.getsize(csv_path) > 0)
    with open(csv_path, "w" if new else "a", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        if new:
            wr.writeheader()
        for r in rows:
            wr.writerow({k: ("" if v is None else v) for k, v in r.items()})
    print(f"\nrows written to {csv_path}")
    if bad:
        print("\nFAILED: reel and PyTorch disagree:\n  " + "\n  ".join(bad), file=sys.stderr)
        print("\nFAILED: reel and PyTorch disagree (see stderr)")
        sys.exit(1)


if __name__ == "__main__":
    main()

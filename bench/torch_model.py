"""PyTorch's half of the decode-step benchmark (bench/decode.c is reel's).

Reads bench_decode's results (DIR/reel_decode.txt, DIR/logits_*.f32) and the
checkpoint it ran (a Hugging Face Llama, Qwen2, Qwen3, Qwen3-MoE or Mixtral
directory, config.json and model.safetensors: the seeded DIR/model, or the
one its --model named; the config line's model= field says which), builds the
same model from that config.json (grouped-query attention, llama3 rope
scaling, Qwen2's q/k/v biases, Qwen3's q/k norms, tied embeddings, the
experts of a mixture of experts), loads the same weights, runs the same
prompt tokens and the same decode steps, checks that both sides agree, and
writes one CSV row per (batch, context) with both sides' figures
(`bench/gpu.sh matrix`, `bench/gpu.sh shapes` and `bench/gpu.sh moe` gather
them; bench/decode_table.py makes the tables):

    bench_decode --dir DIR && python3 bench/torch_model.py --dir DIR

A point bench_decode skipped because it does not fit the device (its "skip"
lines) is a row too, with the reason and no figures.

The step. Per context C, as bench_decode does: the largest batch's sequences
are prefilled to C tokens (untimed; SDPA is_causal with enable_gqa) into one
cache per layer, K and V [maxB, kv_heads, S, head_dim] bf16 (S: C plus the
steps, rounded up to 16); batch B uses sequences 0 .. B-1 (views). A step is
start (embedding, rope angles, the mask) and per layer pre (residual add,
rmsnorm, one fused [q; k; v] matmul and its bias, rope of q and k, the new k
and v written into the cache at the position with `cache[:, :, pos] = x`,
the index_put_ gpt-fast uses, which inductor keeps in place), attention,
post (o projection, residual, rmsnorm, one fused gate/up matmul, silu*mul,
down), then final (residual, rmsnorm, lm head, argmax). rmsnorm, rope and
silu-and-mul compute in float32 and round to bf16 as reel does; rope's
angles are pos x inv_freq in float64, inv_freq as reel's models layer has it
(models/rope.c): theta^(-2i/d) without scaling; llama3 as transformers'
_compute_llama3_parameters, in float64, then rounded to float32 (the table
reel rotates with). Per batch: warm-up + timed decode steps, step i at
position C + i fed the prompt token there (teacher forcing), each timed as a
serving loop pays it: host wall (the ids and the position copied up into a
static buffer, the step, the next ids back on the host) and GPU time (CUDA
events before the upload and after the download).

Attention never expands K/V to the query heads. "grouped": the query heads
of one kv head as the rows of one query, q [B, kv_heads, H / kv_heads,
head_dim] against the cache's [B, kv_heads, L, head_dim]: plain multi-head
shapes, so every SDPA backend reads each K/V row once for all its query
heads. "gqa": F.scaled_dot_product_attention(enable_gqa=True) on q
[B, H, 1, head_dim]. "flex": flex_attention (torch.compile only, below).
  torch eager      over the cache sliced to [:C+i+1], no mask. Each SDPA
                   choice (flash, efficient, cudnn, math, default; grouped or
                   gqa) is timed over whole eager steps at the first point
                   and the fastest is the eager baseline (--eager-attention
                   to fix one; cuDNN plans anew for every key length, so for
                   every step, and loses). Timed for at most --eager-budget-s
                   a point (--eager-min-steps at least; the CSV says how many).
  torch graph      the step captured by hand into a torch.cuda.CUDAGraph per
                   batch (all batches of a context in one memory pool, largest
                   first, as reel captures its buckets). Attention runs over
                   the fixed length L = S with an additive mask (0, or -inf
                   for keys past the position) computed inside the graph: the
                   fixed length is what lets a graph serve every step; L is
                   under C + steps + 16, so the masked tail is a few percent
                   of the K/V read at C >= 2048. At each point every SDPA
                   choice (efficient, cudnn, math; grouped, gqa) is timed on
                   its own (a CUDA graph of the attention of every layer on
                   this point's cache, replayed; its output checked against
                   float32 first) and the fastest runs in the step
                   (--graph-attention to fix one).
  torch.compile    start, pre, post and final each torch.compile'd (mode
   + graph         --compile-mode, default 'default', not 'reduce-overhead',
                   which silently skips its graphs when the KV cache is a
                   mutated input; dynamic shapes, so one compile serves every
                   batch above 1 and every context), attention between them,
                   and the step captured by hand the same way. Compiled per
                   layer piece, not as one 16- to 32-layer graph: the same
                   kernels (inductor fuses nothing into SDPA or a cuBLAS
                   matmul, and the residual add still lands in the next
                   rmsnorm's kernel), in seconds instead of minutes of
                   compile. Attention: the fastest at the point of the SDPA
                   choices and flex_attention (--compile-attention to fix
                   one).
flex_attention is torch.compile'd on its own per batch: its flex-decoding
kernel, which splits the keys of one (sequence, kv head) over several blocks,
wants a static batch (the length stays dynamic). The mask is a score_mod
adding the same 0 / -inf vector. It is tried where batch x kv_heads is under
--flex-max-ctas (default twice the SMs): there a kernel with one block per
(sequence, kv head) leaves SMs idle; above, splitting has nothing to add.
Which attention each variant ran, and every choice's time at the point, are
in the CSV (attn_graph, attn_compile, attn_candidates) and the log.

Why this baseline was slow before (H100, 2026-12-06, the Llama-3.2-1B shape
at batch 64, context 2048: CUDA graph 28.4 ms, torch.compile + graph 15.2
ms, for 4.3 GB of K/V, 1.4 ms at 3 TB/s): attention expanded K and V to all
32 query heads with repeat_interleave in every layer of every step, before
an SDPA over the fixed length. Per step that reads 4.4 GB and writes 17.7 GB
of copies, which SDPA then reads again: about 40 GB instead of 4.4, 13 ms at
3 TB/s before any other work. torch.compile turns the expansion into one
fused copy kernel (15.2 ms: the 13 ms plus the weights); eager PyTorch runs
it as an index_select gather per layer, slower still (28.4 ms). Grouping the
query heads removes the copy: K/V are read once, by whichever SDPA kernel
measures fastest at the point.

Capture time (warm-up + capture of every batch; torch.compile's compile is in
its warm-up) and the pool's bytes (torch.cuda.memory_reserved across the
captures) are in the CSV beside reel's compile, capture and memory figures.

Mixture of experts (issue 44; model_type qwen3_moe or mixtral). A MoE
layer's post is the router as transformers' Qwen3MoeSparseMoeBlock and
MixtralSparseMoeBlock run it (the router's linear in bf16, softmax in
float32, top-k, renormalized when norm_topk_prob says so, always for
Mixtral), then the experts, stacked at load as [E, 2F, D] gate/up (each
expert's gate rows, then its up rows) and [E, D, F] down, in one of three
formulations (Model.moe; each expert's silu*mul in float32 and the weighted
sum of a token's k outputs in float32, as reel computes them):
  loop    transformers' eager forward: the experts some token chose, found on
          the host (nonzero: a sync), each one's tokens gathered, its MLP, an
          index_add_ back. Data-dependent shapes: it cannot be captured, so
          the eager variant only (and every prefill: the least work for
          thousands of tokens).
  gather  each token's k experts gathered from the stacks (index_select:
          [B k, 2F, D] and [B k, D, F]) and batched matrix-vector products
          (bmm): fixed shapes, capture-safe, what a PyTorch user writes for a
          captured decode step at small batch. It reads and writes B k
          experts' weights, so it is tried only where one layer's gather is
          at most --moe-gather-gb (1 GB: Qwen3-30B-A3B's shape to batch 8,
          Mixtral's at batch 1).
  dense   every expert on every token, weighted by a dense [B, E] routing
          matrix that is 0 where an expert was not chosen: one GEMM for every
          expert's gate/up ([B, D] x [D, E 2F]), the weight folded into
          silu*mul, one bmm over the experts for down, the sum over experts in
          float32. Fixed shapes, capture-safe; reads every expert once, E/k
          times the work (tried where experts x batch is at most
          --moe-dense-max, 8192).
The eager variant times every formulation that may run at the point over a
few whole eager steps and keeps the fastest; the graph and compile variants
capture gather and dense (each its own torch.compile'd post) and keep the
faster graph at the point (--moe-reps replays each); --moe-eager,
--moe-graph, --moe-compile fix one. The CSV says which ran (moe_eager,
moe_graph, moe_compile) and every time (moe_candidates: eager, host wall us
a step; graph and compile, device us a replay), and carries
bench_decode's two floors (floor_us: the experts B tokens are expected to
choose; floor_all_us: every expert).

Correctness, failing loudly (exit 1, the CSV still written): the next ids of
every step of reel's replay plan against torch eager's, counted as agreeing
when reel's id is within --tie-tol of torch's top logit (bf16 flips
near-ties); the graph variants' ids against torch eager's the same way; the
first step's logits of reel's logits plan against torch eager's (max abs
difference at most --max-logit-diff). A MoE model's routing makes two
correct implementations part: the router's logits are bf16, so the k-th and
(k+1)-th expert of a token are often equal or one bf16 step apart (at 128
experts choosing 8, an exact tie in about 5% of token-layers), and where a
one-ulp difference upstream swaps them, that token's output moves by a whole
expert's share, its logits by up to ~0.4 (on the CPU, 8 layers of 128/8
experts, reel's host backend against this file: 1 row in 8; a model without
the renormalization it should have moves every logit, ~0.5 agreement).
So for a MoE model the ids must agree (within --tie-tol) at --moe-min-agree
(0.8; seen on the CPU: 0.89-1.0 a point, batch 1's 18 ids the noisiest) and
the logit check is the fraction of the first step's logits within
--max-logit-diff, at least --moe-logits-within (0.95), the largest
difference reported (logits_within, max_logit_diff). Exact ties: reel ranks
equal logits by the lower expert id; torch.topk on CUDA gathers the ties at
the k-th value in index order (so the same), on the CPU not: --moe-ties
lowest breaks them as reel does (a key below bf16's resolution).

Without CUDA (testing this file on a CPU) it runs torch eager only and says
so; on a PyTorch without scaled_dot_product_attention (< 2.0) attention is
computed in plain ops there.
"""
import argparse
import contextlib
import csv
import datetime
import json
import math
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
try:  # PyTorch >= 2.5
    from torch.nn.attention.flex_attention import flex_attention
except ImportError:
    flex_attention = None

MASK64 = (1 << 64) - 1
HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


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


def read_safetensors(path, device):
    """One .safetensors file: {name: tensor}. safetensors' own reader when it
    is installed (straight onto the device), else the header read here
    (8-byte little endian length, JSON, the data) and torch.frombuffer."""
    try:
        from safetensors.torch import load_file
    except ImportError:
        load_file = None
    if load_file is not None:
        try:
            return load_file(path, device=str(device))
        except TypeError:  # an old safetensors without device=
            return {k: v.to(device) for k, v in load_file(path).items()}
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
        out[name] = ((t.view(view) if view else t).reshape(h["shape"])).to(device)
    return out


def read_rope(hc, mdir):
    """config.json's rope: (rope_theta, None) without scaling, or (rope_theta,
    dict) for llama3 (factor, low_freq_factor, high_freq_factor,
    original_max_position_embeddings). rope_scaling or transformers 5's
    rope_parameters; any other rope type is not built here."""
    theta = hc.get("rope_theta")
    rs = hc.get("rope_scaling")
    if rs is None:
        rs = hc.get("rope_parameters")
    if rs is not None and not isinstance(rs, dict):
        sys.exit(f"{mdir}/config.json: rope_scaling {rs!r} is not an object")
    if rs and rs.get("rope_theta") is not None:
        theta = rs["rope_theta"]
    theta = f32(10000.0 if theta is None else theta)
    kind = (rs or {}).get("rope_type", (rs or {}).get("type", "default"))
    if kind in (None, "default"):
        return theta, None
    if kind != "llama3":
        sys.exit(f"{mdir}/config.json: rope type {kind!r}: this script builds default and llama3 rope")
    try:
        return theta, dict(factor=float(rs["factor"]), low=float(rs["low_freq_factor"]),
                           high=float(rs["high_freq_factor"]), orig=int(rs["original_max_position_embeddings"]))
    except (KeyError, TypeError, ValueError):
        sys.exit(f"{mdir}/config.json: rope_scaling llama3 wants factor, low_freq_factor, high_freq_factor and "
                 "original_max_position_embeddings")


def rope_inv_freq(cfg):
    """The rope's inverse frequencies as reel's models layer has them
    (models/rope.c), a list of float64. No scaling: theta^(-2i/d), reel's
    rope op's own formula. llama3: transformers' _compute_llama3_parameters
    over 1 / theta^(2i/d), in float64, then rounded to float32, the table
    reel_rope_freq rotates with."""
    d, theta, sc = cfg["head_dim"], cfg["theta"], cfg["rope"]
    half = d // 2
    if sc is None:
        return [theta ** (-2.0 * i / d) for i in range(half)]
    factor, lo, hi, old = sc["factor"], sc["low"], sc["high"], float(sc["orig"])
    low_wavelen, high_wavelen = old / lo, old / hi
    out = []
    for i in range(half):
        f = 1.0 / (theta ** ((2.0 * i) / d))
        wavelen = 2.0 * math.pi / f
        llama = f / factor if wavelen > low_wavelen else f
        if not wavelen < high_wavelen and not wavelen > low_wavelen:
            smooth = (old / wavelen - lo) / (hi - lo)
            llama = (1.0 - smooth) * llama / factor + smooth * llama
        out.append(f32(llama))
    return out


def load_checkpoint(mdir, rcfg, device):
    """The Hugging Face Llama or Qwen2 checkpoint in mdir (config.json;
    model.safetensors or an index and its shards) as (cfg, w) under this
    script's names, q/k/v and gate/up already fused. Biases and tied
    embeddings as bench_decode reads them: Qwen2 has q/k/v biases, Llama's
    attention_bias puts one on q, k, v and o. block_size and the seed of the
    prompt tokens are bench_decode's (reel_decode.txt's config line, rcfg);
    the model's sizes must be the ones it ran."""
    with open(os.path.join(mdir, "config.json")) as f:
        hc = json.load(f)
    get = lambda k, d=None: d if hc.get(k) is None else hc[k]
    mtype = get("model_type", "")
    if mtype not in ("llama", "qwen2", "qwen3", "qwen3_moe", "mixtral") or get("mlp_bias", False):
        sys.exit(f"{mdir}/config.json: model_type {mtype!r} or MLP biases: not a model this script builds")
    if (mtype.startswith("qwen") and get("use_sliding_window", False)) or (mtype == "mixtral" and
                                                                            get("sliding_window") is not None):
        sys.exit(f"{mdir}/config.json: a sliding window: not built here")
    theta, rope = read_rope(hc, mdir)
    o_bias = bool(get("attention_bias", False)) and mtype != "mixtral"
    qkv_bias, tied = o_bias or mtype == "qwen2", bool(get("tie_word_embeddings", False))
    heads = hc["num_attention_heads"]
    layers = hc["num_hidden_layers"]
    # Mixture of experts (Qwen3MoeConfig, MixtralConfig): which layers have experts, how many, how routed
    experts = topk = moe_ffn = 0
    norm_topk, moe = False, [False] * layers
    if mtype == "qwen3_moe":
        experts, topk = get("num_experts", 128), get("num_experts_per_tok", 8)
        moe_ffn, norm_topk = get("moe_intermediate_size", 768), bool(get("norm_topk_prob", False))
        step, only = get("decoder_sparse_step", 1), set(get("mlp_only_layers", []))
        moe = [experts > 0 and i not in only and (i + 1) % step == 0 for i in range(layers)]
    elif mtype == "mixtral":
        experts, topk = get("num_local_experts", 8), get("num_experts_per_tok", 2)
        moe_ffn, norm_topk, moe = hc["intermediate_size"], True, [True] * layers
    cfg = dict(layers=layers, hidden=hc["hidden_size"], heads=heads,
               kv_heads=get("num_key_value_heads", heads),
               head_dim=get("head_dim", 128 if mtype.startswith("qwen3") else hc["hidden_size"] // heads),
               ffn=hc["intermediate_size"], vocab=hc["vocab_size"], block_size=int(rcfg["block_size"]),
               eps=f32(get("rms_norm_eps", 1e-6)), theta=theta, rope=rope, seed=int(rcfg["seed"]),
               qkv_bias=qkv_bias, o_bias=o_bias, tied=tied, model_type=mtype, qk_norm=mtype.startswith("qwen3"),
               experts=experts if any(moe) else 0, experts_per_token=topk if any(moe) else 0,
               expert_ffn=moe_ffn if any(moe) else 0, norm_topk=norm_topk, moe=moe)
    if any(moe) and not 1 <= topk <= experts:
        sys.exit(f"{mdir}/config.json: {topk} experts a token of {experts}")
    for k in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab"):
        if str(cfg[k]) != rcfg.get(k):
            sys.exit(f"{mdir}/config.json: {k} {cfg[k]}, but bench_decode ran {k}={rcfg.get(k)}")
    for k in ("qkv_bias", "o_bias", "tied", "qk_norm"):
        if str(int(cfg[k])) != rcfg.get(k, "0"):
            sys.exit(f"{mdir}/config.json: {k} {cfg[k]}, but bench_decode ran {k}={rcfg.get(k, '0')}")
    for k in ("experts", "experts_per_token", "expert_ffn"):
        if str(cfg[k]) != rcfg.get(k, "0"):
            sys.exit(f"{mdir}/config.json: {k} {cfg[k]}, but bench_decode ran {k}={rcfg.get(k, '0')}")
    if cfg["heads"] % cfg["kv_heads"]:
        sys.exit(f"{mdir}/config.json: {cfg['heads']} heads over {cfg['kv_heads']} kv heads")
    index = os.path.join(mdir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    t = {}
    for name in files:
        t.update(read_safetensors(os.path.join(mdir, name), device))

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
        # one [Q + 2 KV, D] weight, q rows first, then k, then v, as a PyTorch user fuses them
        w[q + "wqkv"] = torch.cat([tensor(p + "self_attn.q_proj.weight", [Q, D]),
                                   tensor(p + "self_attn.k_proj.weight", [KV, D]),
                                   tensor(p + "self_attn.v_proj.weight", [KV, D])], 0).contiguous()
        w[q + "bqkv"] = None
        if qkv_bias:
            w[q + "bqkv"] = torch.cat([tensor(p + "self_attn.q_proj.bias", [Q]),
                                       tensor(p + "self_attn.k_proj.bias", [KV]),
                                       tensor(p + "self_attn.v_proj.bias", [KV])], 0).contiguous()
        w[q + "wo"] = tensor(p + "self_attn.o_proj.weight", [D, Q])
        w[q + "bo"] = tensor(p + "self_attn.o_proj.bias", [D]) if o_bias else None
        w[q + "q_norm"] = tensor(p + "self_attn.q_norm.weight", [cfg["head_dim"]]) if cfg["qk_norm"] else None
        w[q + "k_norm"] = tensor(p + "self_attn.k_norm.weight", [cfg["head_dim"]]) if cfg["qk_norm"] else None
        w[q + "ffn_norm"] = tensor(p + "post_attention_layernorm.weight", [D])
        if cfg["moe"][i]:
            # the router [E, D], and the experts stacked as a PyTorch user stacks them (transformers 5's
            # Qwen3MoeExperts): gate/up [E, 2F, D] (each expert's gate rows, then its up rows), down [E, D, F]
            E, Fe = cfg["experts"], cfg["expert_ffn"]
            blk, names = (("block_sparse_moe", ("w1", "w3", "w2")) if mtype == "mixtral" else
                          ("mlp", ("gate_proj", "up_proj", "down_proj")))
            w[q + "router"] = tensor(f"{p}{blk}.gate.weight", [E, D])
            gu = torch.empty(E, 2 * Fe, D, dtype=torch.bfloat16, device=device)
            dn = torch.empty(E, D, Fe, dtype=torch.bfloat16, device=device)
            for e in range(E):
                x = f"{p}{blk}.experts.{e}."
                gu[e, :Fe] = tensor(x + names[0] + ".weight", [Fe, D])
                gu[e, Fe:] = tensor(x + names[1] + ".weight", [Fe, D])
                dn[e] = tensor(x + names[2] + ".weight", [D, Fe])
            w[q + "experts_gate_up"], w[q + "experts_down"] = gu, dn
            continue
        # one [2F, D] weight, gate rows first: silu(x W[:F]^T) * (x W[F:]^T)
        w[q + "w_gate_up"] = torch.cat([tensor(p + "mlp.gate_proj.weight", [Fd, D]),
                                        tensor(p + "mlp.up_proj.weight", [Fd, D])], 0).contiguous()
        w[q + "w_down"] = tensor(p + "mlp.down_proj.weight", [D, Fd])
    t.clear()
    return cfg, w


def parse_kv(fields):
    out = {}
    for f in fields:
        k, _, v = f.partition("=")
        out[k] = v
    return out


def load_reel(path):
    """reel_decode.txt: config, plan lines by context, case lines by (batch,
    context), tokens by (batch, context) in step order, skipped points by
    (batch, context) with their reason."""
    cfg, plans, cases, tokens, skips = {}, {}, {}, {}, {}
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
            elif fields[0] == "skip":
                skips[(int(kv["batch"]), int(kv["context"]))] = rest.strip() or "skipped"
            elif fields[0] == "tokens":
                key = (int(kv["batch"]), int(kv["context"]))
                tokens.setdefault(key, []).append([int(x) for x in rest.split()])
    if not cfg:
        sys.exit(f"{path}: no config line: not written by bench_decode")
    return cfg, plans, cases, tokens, skips


# ---- attention ----------------------------------------------------------------

def sdpa(q, k, v, mask=None, causal=False, gqa=False):
    """F.scaled_dot_product_attention (enable_gqa when q has more heads than
    k). On a PyTorch without it, or without enable_gqa, the same in plain
    ops with K/V repeated: only to test this file on a CPU, never a
    baseline."""
    if HAVE_SDPA and (not gqa or q.shape[1] == k.shape[1]):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    if HAVE_SDPA:
        try:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)
        except TypeError:  # PyTorch < 2.5: no enable_gqa
            if q.is_cuda:
                raise
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    if HAVE_SDPA:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.float()
    return (s.softmax(-1) @ v.float()).to(q.dtype)


def _flex_grouped(q, k, v, mvec):
    """flex_attention with the step's mask vector (0 or -inf a key) added to
    every score; compiled on its own (Model.flex)."""
    def score_mod(score, b, h, m, n):
        return score + mvec[n]
    return flex_attention(q, k, v, score_mod=score_mod)


SDPA_BACKENDS = {}
if SDPBackend is not None:
    SDPA_BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                     "math": SDPBackend.MATH}
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        SDPA_BACKENDS["cudnn"] = SDPBackend.CUDNN_ATTENTION


class Attn:
    """One way to run a step's attention, "BACKEND/LAYOUT": BACKEND an SDPA
    backend (flash, efficient, cudnn, math; default: SDPA's own pick) or
    flex; LAYOUT grouped (q [B, kv_heads, H / kv_heads, d]) or gqa
    (enable_gqa on q [B, H, 1, d]). ctx() pins the backend: the caller holds
    it around a whole step, a run or a capture (never a kernel of its own)."""

    def __init__(self, name, model):
        self.name, self.m = name, model
        self.backend, _, self.layout = name.partition("/")
        if self.layout not in ("grouped", "gqa") or (self.backend not in SDPA_BACKENDS and
                                                    self.backend not in ("default", "flex")):
            raise ValueError(f"attention {name!r}: not BACKEND/grouped or BACKEND/gqa of a backend this "
                             f"PyTorch has ({', '.join(sorted(SDPA_BACKENDS))}, default, flex)")
        if self.backend == "flex" and (flex_attention is None or self.layout != "grouped"):
            raise ValueError(f"attention {name!r}: flex_attention is not in this PyTorch, or not grouped")

    def ctx(self):
        if self.backend in ("default", "flex") or sdpa_kernel is None:
            return contextlib.nullcontext()
        return sdpa_kernel([SDPA_BACKENDS[self.backend]])

    def __call__(self, q, k, v, mvec):
        """q [B, H, d]; k, v [B, kv_heads, L, d]; mvec None (k and v are the
        exact keys) or [L] bf16, 0 or -inf a key. Returns [B, H * d]."""
        m, B = self.m, q.shape[0]
        if self.backend == "flex":
            o = m.flex(q.view(B, m.Hkv, m.G, m.Dh), k, v, mvec)
        elif self.layout == "grouped":
            mask = None if mvec is None else mvec.view(1, 1, 1, -1)
            o = sdpa(q.view(B, m.Hkv, m.G, m.Dh), k, v, mask=mask)
        else:
            mask = None if mvec is None else mvec.view(1, 1, 1, -1)
            o = sdpa(q.view(B, m.H, 1, m.Dh), k, v, mask=mask, gqa=True)
        return o.reshape(B, m.Q)


# The eager variant's choices, timed over whole eager steps at the first
# point. cuDNN's SDPA (first on the H100's and H200's list) builds an
# execution plan for each new key length, and the key length is new at
# every decode step (39-47 ms a step on the H200, 2026-12-01, 8 layers).
EAGER_CANDIDATES = ["flash/gqa", "flash/grouped", "efficient/grouped", "efficient/gqa", "cudnn/gqa",
                    "math/grouped", "default/gqa"]
# The fixed-length masked choices, timed at every point on the attention
# alone: the graph variant runs the fastest SDPA one, the compile variant
# the fastest of all (flex included).
GRAPH_CANDIDATES = ["efficient/grouped", "efficient/gqa", "cudnn/grouped", "cudnn/gqa", "math/grouped"]
COMPILE_EXTRA = ["flex/grouped"]


def usable(names, model):
    """The names this PyTorch has, without the gqa twins when every query
    head has its own kv head (grouped and gqa are then the same)."""
    out = []
    for n in names:
        if model.G == 1 and n.endswith("/gqa") and n.replace("/gqa", "/grouped") in names:
            continue
        try:
            Attn(n, model)
        except ValueError:
            continue
        out.append(n)
    return out


# ---- the model ----------------------------------------------------------------

class Model:
    def __init__(self, cfg, w, device):
        self.c = cfg
        self.dev = device
        self.H, self.Hkv, self.Dh = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
        self.G = self.H // self.Hkv
        self.Q, self.KV, self.F = self.H * self.Dh, self.Hkv * self.Dh, cfg["ffn"]
        self.eps = cfg["eps"]
        self.embed, self.final_norm, self.lm_head = w["embed"], w["final_norm"], w["lm_head"]
        self.E, self.K, self.Fe = cfg["experts"], cfg["experts_per_token"], cfg["expert_ffn"]
        self.norm_topk = cfg["norm_topk"]
        self.is_moe = any(cfg["moe"])
        self.ties_lowest = False  # --moe-ties lowest (route)
        # id x 2^-17: a relative step under bf16's 2^-8, so no two different bf16 logits swap
        self.tie_key = torch.arange(max(self.E, 1), dtype=torch.float32, device=device) * 2.0 ** -17
        self.layers = []
        for i in range(cfg["layers"]):
            p = f"l{i}."
            lw = dict(attn_norm=w[p + "attn_norm"], wqkv=w[p + "wqkv"], bqkv=w[p + "bqkv"], wo=w[p + "wo"],
                      bo=w[p + "bo"], q_norm=w[p + "q_norm"], k_norm=w[p + "k_norm"], ffn_norm=w[p + "ffn_norm"],
                      moe=cfg["moe"][i])
            if lw["moe"]:
                lw.update(router=w[p + "router"], egu=w[p + "experts_gate_up"], ed=w[p + "experts_down"])
                lw["egu_flat"] = lw["egu"].view(self.E * 2 * self.Fe, self.c["hidden"])  # every expert, one GEMM
            else:
                lw.update(wgu=w[p + "w_gate_up"], wd=w[p + "w_down"])
            self.layers.append(lw)
        self.inv_freq = torch.tensor(rope_inv_freq(cfg), dtype=torch.float64, device=device)
        self._flex = None
        self.flex_broken = False  # set when flex_attention failed once: not tried again

    def flex(self, q, k, v, mvec):
        """flex_attention over the grouped query, torch.compile'd on its own
        (flex-decoding wants a static batch: one compile a batch size; the
        length dims are marked dynamic)."""
        if self._flex is None:
            self._flex = torch.compile(_flex_grouped)
        for t, d in ((k, 2), (v, 2), (mvec, 0)):
            torch._dynamo.maybe_mark_dynamic(t, d)
        with torch._dynamo.config.patch(automatic_dynamic_shapes=False):
            return self._flex(q, k, v, mvec)

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

    # The step's pieces: plain methods for eager and the plain graph,
    # torch.compile'd for the compile variant (Pieces).
    def start(self, buf, L):
        """buf int64 [B + 1]: the B token ids, then the position (the same
        for every sequence). Returns the hidden state, a zero residual for
        the first layer's pre, the position, cos and sin [1, 1, d/2] and,
        with L, the mask vector [L] (0 for keys up to the position, -inf
        past it)."""
        B = buf.shape[0] - 1
        tok, pos = buf[:B], buf[B:]
        h = F.embedding(tok, self.embed)
        cos, sin = self.cos_sin(pos)
        mvec = None
        if L is not None:
            ar = torch.arange(L, device=buf.device)
            mvec = torch.zeros(L, dtype=torch.bfloat16, device=buf.device).masked_fill(ar > pos, float("-inf"))
        return h, torch.zeros_like(h), pos, cos[:, None, :], sin[:, None, :], mvec

    def pre(self, h, r, lw, kc, vc, pos, cos, sin):
        """The residual add of the layer before (r: its MLP's output), the
        norm, q/k/v, rope, and k and v into the cache at pos. Returns the
        residual stream and q [B, H, d]."""
        B = h.shape[0]
        h = h + r
        x = self.rmsnorm(h, lw["attn_norm"])
        qkv = self.proj(x, lw["wqkv"], lw["bqkv"])
        q = self.rope(self.head_norm(qkv[:, :self.Q].reshape(B, self.H, self.Dh), lw["q_norm"]), cos, sin)
        k = self.rope(self.head_norm(qkv[:, self.Q:self.Q + self.KV].reshape(B, self.Hkv, self.Dh), lw["k_norm"]),
                      cos, sin)
        v = qkv[:, self.Q + self.KV:].reshape(B, self.Hkv, self.Dh)
        kc[:, :, pos] = k.unsqueeze(2)
        vc[:, :, pos] = v.unsqueeze(2)
        return h, q

    def post(self, h, o, lw):
        """o projection and residual, norm, gate/up, silu*mul, down. Returns
        the residual stream and the MLP's output (added by the next pre)."""
        h = h + self.proj(o, lw["wo"], lw["bo"])
        x = self.rmsnorm(h, lw["ffn_norm"])
        gu = F.linear(x, lw["wgu"])
        f = (F.silu(gu[:, :self.F].float()) * gu[:, self.F:].float()).to(h.dtype)
        return h, F.linear(f, lw["wd"])

    # A MoE model's post: the dense one in a layer without experts; with
    # experts, the router and one of three formulations of the experts
    # (MOE_IMPLS), each its own function so torch.compile keeps each apart.
    def _post_moe(self, h, o, lw, impl):
        if not lw["moe"]:
            return self.post(h, o, lw)
        h = h + self.proj(o, lw["wo"], lw["bo"])
        x = self.rmsnorm(h, lw["ffn_norm"])
        return h, self.moe(x, lw, impl)

    def post_loop(self, h, o, lw):
        return self._post_moe(h, o, lw, "loop")

    def post_gather(self, h, o, lw):
        return self._post_moe(h, o, lw, "gather")

    def post_dense(self, h, o, lw):
        return self._post_moe(h, o, lw, "dense")

    def head_norm(self, x, w):
        """Qwen3's RMSNorm of each head (q_norm, k_norm) over the last dim; x as is without one."""
        return x if w is None else self.rmsnorm(x, w)

    @staticmethod
    def silu_mul(gu, scale=None):
        """silu(gate) * up over the last dim (gate first), in float32, times scale (float32, broadcast) when
        given, rounded to bf16 once."""
        n = gu.shape[-1] // 2
        f = F.silu(gu[..., :n].float()) * gu[..., n:].float()
        return (f if scale is None else f * scale).to(gu.dtype)

    def route(self, x, lw):
        """The router as transformers' Qwen3MoeSparseMoeBlock and MixtralSparseMoeBlock run it: logits in
        bf16 (one linear), softmax in float32, top-k, renormalized (norm_topk_prob; Mixtral always). Returns
        (weights [T, k] float32, ids [T, k] int64), best first."""
        logits = F.linear(x, lw["router"]).float()
        p = torch.softmax(logits, -1)
        if self.ties_lowest:  # a key below bf16's resolution: equal logits rank by the lower expert id
            ids = torch.topk(logits - logits.abs() * self.tie_key, self.K, -1).indices
            w = p.gather(1, ids)
        else:
            w, ids = torch.topk(p, self.K, -1)
        if self.norm_topk:
            w = w / w.sum(-1, keepdim=True)
        return w, ids

    def moe(self, x, lw, impl):
        """The MoE block of x [T, D] (bf16): route, then the experts as impl computes them; each expert's
        SwiGLU in bf16 matmuls, silu*mul in float32, the k outputs weighted and summed in float32."""
        w, ids = self.route(x, lw)
        T, D, E, k = x.shape[0], x.shape[1], self.E, self.K
        if impl == "loop":
            # (a) transformers' eager forward: loop over the experts some token chose (found on the host),
            # each expert's tokens gathered, its MLP, index_add_ back. Data-dependent shapes: eager only.
            out = torch.zeros(T, D, dtype=torch.float32, device=x.device)
            mask = F.one_hot(ids, E).permute(2, 1, 0)  # [E, k, T]
            for e in (mask.sum((-1, -2)) > 0).nonzero().flatten().tolist():
                slot, tok = torch.where(mask[e])
                y = F.linear(self.silu_mul(F.linear(x[tok], lw["egu"][e])), lw["ed"][e])
                out.index_add_(0, tok, y.float() * w[tok, slot, None])
            return out.to(x.dtype)
        if impl == "gather":
            # (b) each token's k experts gathered ([T k, 2F, D] and [T k, D, F], index_select on the
            # stacked weights) and batched matrix-vector products: fixed shapes, capture-safe; reads (and
            # writes) T k experts' weights, so for small T only (--moe-gather-gb)
            flat = ids.reshape(-1)
            xr = x.unsqueeze(1).expand(T, k, D).reshape(T * k, D, 1)
            f = self.silu_mul(torch.bmm(lw["egu"].index_select(0, flat), xr).squeeze(-1))  # [T k, F]
            y = torch.bmm(lw["ed"].index_select(0, flat), f.unsqueeze(-1)).squeeze(-1)  # [T k, D]
            return (y.view(T, k, D).float() * w.unsqueeze(-1)).sum(1).to(x.dtype)
        # (c) every expert on every token, weighted by a dense routing matrix (0 where not chosen): one
        # GEMM for every expert's gate/up, the weight folded into silu*mul, one batched GEMM over the
        # experts for down, the sum over experts in float32. Fixed shapes; reads every expert once.
        dense = torch.zeros(T, E, dtype=torch.float32, device=x.device).scatter(1, ids, w)
        f = self.silu_mul(F.linear(x, lw["egu_flat"]).view(T, E, 2 * self.Fe), dense.unsqueeze(-1))  # [T, E, F]
        y = torch.bmm(f.transpose(0, 1), lw["ed"].transpose(1, 2))  # [E, T, D]
        return y.sum(0, dtype=torch.float32).to(x.dtype)

    def final(self, h, r):
        h = self.rmsnorm(h + r, self.final_norm)
        logits = F.linear(h, self.lm_head)
        return logits.argmax(-1), logits

    @torch.no_grad()
    def step(self, pieces, attn, buf, kc, vc, n=None, L=None):
        """One decode step: attention over [:n] (eager, n a Python int) or
        over a fixed [:L] with the mask (graphs). Returns (next ids [B],
        logits [B, vocab])."""
        h, r, pos, cos, sin, mvec = pieces.start(self, buf, L)
        for i, lw in enumerate(self.layers):
            h, q = pieces.pre(self, h, r, lw, kc[i], vc[i], pos, cos, sin)
            if L is None:
                k, v = kc[i][:, :, :n], vc[i][:, :, :n]
            else:
                k, v = kc[i][:, :, :L], vc[i][:, :, :L]
            h, r = pieces.post(self, h, attn(q, k, v, mvec), lw)
        return pieces.final(self, h, r)

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
            q = self.rope(self.head_norm(qkv[..., :self.Q].reshape(g, n, self.H, self.Dh), lw["q_norm"]), cos,
                          sin).transpose(1, 2)
            k = self.rope(self.head_norm(qkv[..., self.Q:self.Q + self.KV].reshape(g, n, self.Hkv, self.Dh),
                                         lw["k_norm"]), cos, sin)
            v = qkv[..., self.Q + self.KV:].reshape(g, n, self.Hkv, self.Dh)
            kc[i][seqs, :, a:b] = k.transpose(1, 2)
            vc[i][seqs, :, a:b] = v.transpose(1, 2)
            o = sdpa(q, kc[i][seqs, :, :b], vc[i][seqs, :, :b], mask=mask, causal=a == 0, gqa=True)
            h = h + self.proj(o.transpose(1, 2).reshape(g, n, self.Q), lw["wo"], lw["bo"])
            x = self.rmsnorm(h, lw["ffn_norm"])
            if lw["moe"]:  # transformers' loop over the experts: the least work for thousands of tokens
                h = h + self.moe(x.reshape(g * n, -1), lw, "loop").view(g, n, -1)
                continue
            gu = F.linear(x, lw["wgu"])
            f = (F.silu(gu[..., :self.F].float()) * gu[..., self.F:].float()).to(h.dtype)
            h = h + F.linear(f, lw["wd"])


class Pieces:
    """The step's pieces (Model.start, pre, post, final): the plain methods,
    or each torch.compile'd with dynamic shapes (one compile for every batch
    above 1 and every length, one more for batch 1). moe: a MoE model's
    experts (MOE_IMPLS; post is then Model.post_<moe>); share: Pieces whose
    start, pre and final this one reuses (compiled once for every moe)."""

    def __init__(self, compile_mode=None, moe=None, share=None):
        self.moe = moe
        for nm in ("start", "pre", "final"):
            fn = getattr(Model, nm)
            setattr(self, nm, getattr(share, nm) if share is not None else
                    fn if compile_mode is None else torch.compile(fn, mode=compile_mode, dynamic=True))
        fn = Model.post if moe is None else getattr(Model, "post_" + moe)
        self.post = fn if compile_mode is None else torch.compile(fn, mode=compile_mode, dynamic=True)


# The experts of a MoE layer (Model.moe): "loop" (transformers' eager forward; not capturable), "gather" (each
# token's experts gathered, batched matrix-vector products) and "dense" (every expert on every token, masked).
MOE_IMPLS = ("loop", "gather", "dense")
PLAIN = Pieces()
PLAIN_MOE = {m: Pieces(moe=m) for m in MOE_IMPLS}


def moe_allowed(model, impl, B, gather_gb, dense_max):
    """Whether impl runs at batch B: gather while its gathered weights (B k experts, one layer at a time) stay
    under gather_gb GB, dense while experts x B is at most dense_max; loop always."""
    if impl == "gather":
        return B * model.K * 3 * model.Fe * model.c["hidden"] * 2 <= gather_gb * 1e9
    if impl == "dense":
        return model.E * B <= dense_max
    return True


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

    def run(self, run, static, inputs, warmup, keep_logits=False, budget_s=None, min_steps=20):
        """Steps through inputs; with budget_s, stops timing once the timed
        steps would pass it (at least min_steps timed). Returns (wall us, gpu
        us, ids of every step run, first logits on the host (keep_logits),
        kept logits, timed steps)."""
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
            if keep_logits:
                if i == 0:
                    first = logits.float().cpu()
                kept.append(logits)
            ids.append(host)
            if i >= warmup:
                if t_start is None:
                    t_start = time.perf_counter()
                walls.append(t * 1e6)
                if self.cuda:
                    gpus.append(self.ev[0].elapsed_time(self.ev[1]) * 1e3)
                if budget_s and len(walls) >= min_steps and time.perf_counter() - t_start > budget_s:
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


def first_line(e):
    s = str(e).strip().splitlines()
    return (s[0] if s else type(e).__name__)[:160]


def time_attention(model, names, kc, vc, B, C, L, reps, log):
    """Each choice's time for one step's attention (every layer, on this
    point's cache: the first B sequences, the position C, length L with the
    mask), as a CUDA graph of it replayed (median of reps after one), after
    its output at layer 0 was checked against float32 attention (first 4
    sequences). Returns {name: (us or None, why not)}."""
    m = model
    gen = torch.Generator(device=model.dev)
    gen.manual_seed(1000 + B)
    q = torch.randn(B, m.H, m.Dh, generator=gen, device=model.dev, dtype=torch.float32).to(torch.bfloat16)
    ar = torch.arange(L, device=model.dev)
    mvec = torch.zeros(L, dtype=torch.bfloat16, device=model.dev).masked_fill(ar > C, float("-inf"))
    ks, vs = [k[:B, :, :L] for k in kc], [v[:B, :, :L] for v in vc]
    nr = min(B, 4)
    qg = q[:nr].float().view(nr, m.Hkv, m.G, m.Dh)
    s = (qg @ ks[0][:nr].float().transpose(-1, -2)) / math.sqrt(m.Dh) + mvec.float()
    ref = (s.softmax(-1) @ vs[0][:nr].float()).reshape(nr, m.Q)
    lim = 0.02 + 0.02 * ref.abs().max().item()
    del s, qg
    out = {}
    ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
    pool = torch.cuda.graph_pool_handle()
    for name in names:
        a = Attn(name, model)
        g = None
        try:
            with a.ctx():
                o = a(q, ks[0], vs[0], mvec)
            err = (o[:nr].float() - ref).abs().max().item()
            if not err <= lim:
                out[name] = (None, f"wrong: max |diff| {err:.3g} > {lim:.3g}")
                continue
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), a.ctx():
                for i in range(len(ks)):
                    a(q, ks[i], vs[i], mvec)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with a.ctx(), torch.cuda.graph(g, pool=pool):
                for i in range(len(ks)):
                    a(q, ks[i], vs[i], mvec)
            g.replay()
            t = []
            for _ in range(reps):
                ev[0].record()
                g.replay()
                ev[1].record()
                ev[1].synchronize()
                t.append(ev[0].elapsed_time(ev[1]) * 1e3)
            out[name] = (statistics.median(t), "")
        except Exception as e:  # a backend that refuses these shapes, a compile that fails
            out[name] = (None, first_line(e))
            if name.startswith("flex/"):
                log(f"# flex_attention failed at batch {B}: {first_line(e)}; not tried again")
                model.flex_broken = True
        finally:
            del g
    return out


def time_replays(g, reps):
    """Median device time of reps replays of a captured graph (after one), us."""
    ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
    g.replay()
    t = []
    for _ in range(reps):
        ev[0].record()
        g.replay()
        ev[1].record()
        ev[1].synchronize()
        t.append(ev[0].elapsed_time(ev[1]) * 1e3)
    return statistics.median(t)


def best(times, names):
    ok = [(t[0], n) for n, t in times.items() if n in names and t[0] is not None]
    return min(ok)[1] if ok else None


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


def pick_eager(model, pieces, kc, vc, static, inputs, C, B, cuda, log):
    """Times 10 eager steps (median of the last 6) with each SDPA choice;
    returns the fastest that runs and a note with every time."""
    if not cuda:
        return "default/grouped", "cpu"
    times = {}
    n = min(10, len(inputs))
    for name in usable(EAGER_CANDIDATES, model):
        a = Attn(name, model)
        try:
            with a.ctx():
                tm = Timed(cuda, B)
                us, _, _, _, _, _ = tm.run(lambda i: model.step(pieces, a, static, kc, vc, n=C + i + 1), static,
                                           inputs[:n], min(4, n - 1))
            times[name] = us
        except Exception as e:  # a backend that refuses these shapes
            times[name] = None
            log(f"eager attention {name}: refused ({first_line(e)})")
    ok = {k: v for k, v in times.items() if v is not None}
    if not ok:
        sys.exit("torch eager: no SDPA backend runs the decode step")
    best_name = min(ok, key=ok.get)
    note = "eager SDPA us/step at batch %d context %d: " % (B, C) + ", ".join(
        f"{k} {'-' if v is None else f'{v:.0f}'}" for k, v in times.items())
    return best_name, note


def profile_eager(model, pieces, attn, kc, vc, static, inputs, C, log):
    """One profile of three eager steps: where an eager step's time goes
    (host launch overhead or kernels), printed for the notes."""
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, attn.ctx():
            for i in range(3):
                static.copy_(inputs[i])
                model.step(pieces, attn, static, kc, vc, n=C + i + 1)[0].cpu()
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


COLUMNS = ["machine", "driver", "cuda", "torch", "date", "shape", "layers", "hidden", "heads", "kv_heads",
           "head_dim", "ffn", "vocab", "batch", "context", "steps", "reel_replay_us", "reel_replay_gpu_us",
           "reel_eager_us", "reel_eager_gpu_us", "torch_eager_us", "torch_eager_gpu_us", "torch_eager_steps",
           "torch_graph_us", "torch_graph_gpu_us", "torch_compile_us", "torch_compile_gpu_us", "floor_us",
           "floor_tbps", "replay_over_compile", "replay_over_floor", "eager_over_torch_eager", "ids_agree",
           "ids_near_agree", "max_logit_diff", "torch_graph_near_agree", "torch_compile_near_agree",
           "reel_compile_ms", "reel_capture_ms", "reel_arena_bytes", "reel_static_bytes", "reel_graph_bytes",
           "reel_dev_other_bytes", "reel_graph_mem_reserved", "reel_process_once_bytes",
           "torch_graph_capture_s", "torch_graph_capture_only_s", "torch_graph_pool_bytes",
           "torch_compile_capture_s", "torch_compile_capture_only_s", "torch_compile_pool_bytes",
           "eager_attention", "attn_graph", "attn_graph_us", "attn_compile", "attn_compile_us", "attn_candidates",
           "experts", "experts_per_token", "expert_ffn", "floor_all_us", "replay_over_floor_all", "moe_eager",
           "moe_graph", "moe_compile", "moe_candidates", "logits_within", "skipped", "ok"]


def torch_fit(model, cfg, Bs, C, S, N, prefill_tokens, moe_scratch=0.0):
    """The batches of context C whose PyTorch side fits what the device has
    free: the K/V cache [maxB, kv_heads, S, d] of every layer, the prefill's
    activations (--prefill-tokens tokens; a MoE layer's: k experts' ffn a
    token), the logits eager keeps for the agreement check, 2 GB for the
    graph pools, moe_scratch bytes (the gathered experts of one layer) and
    what nothing counts. Returns (batches that fit, [(batch, why) dropped])."""
    free, _ = torch.cuda.mem_get_info()
    free += torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
    D, V = cfg["hidden"], cfg["vocab"]
    Fd = max(cfg["ffn"] if not all(cfg["moe"]) else 0, cfg["experts_per_token"] * cfg["expert_ffn"])
    qkv = (cfg["heads"] + 2 * cfg["kv_heads"]) * cfg["head_dim"]
    Bs, dropped = list(Bs), []
    while Bs:
        B = Bs[-1]
        kv = 2 * cfg["layers"] * B * cfg["kv_heads"] * S * cfg["head_dim"] * 2
        act = min(prefill_tokens, B * C) * (12 * Fd + 16 * D + 2 * qkv)
        need = kv + act + (N + 4) * B * V * 2 + 2e9 + moe_scratch
        if need <= free:
            break
        dropped.append((B, f"PyTorch needs {need / 1e9:.1f} GB (KV cache {kv / 1e9:.1f} GB), "
                           f"{free / 1e9:.1f} GB free"))
        Bs.pop()
    return Bs, dropped


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
                    help="time the eager variant at most this long a point (at least --eager-min-steps); 0: all")
    ap.add_argument("--eager-min-steps", type=int, default=20)
    ap.add_argument("--eager-attention", default="auto",
                    help="the eager variant's attention, BACKEND/LAYOUT (auto: the fastest at the first point)")
    ap.add_argument("--graph-attention", default="auto",
                    help="the graph variant's attention, BACKEND/LAYOUT (auto: the fastest SDPA choice at each point)")
    ap.add_argument("--compile-attention", default="auto",
                    help="the compile variant's attention (auto: the fastest choice, flex included, at each point)")
    ap.add_argument("--attn-reps", type=int, default=3, help="replays timed per attention choice and point")
    ap.add_argument("--flex-max-ctas", type=int, default=0,
                    help="try flex_attention where batch x kv_heads is below this (0: twice the SMs; -1: never)")
    ap.add_argument("--moe-eager", default="auto", choices=("auto",) + MOE_IMPLS,
                    help="a MoE model's experts in the eager variant (auto: the fastest at each point of loop, "
                         "gather and dense)")
    ap.add_argument("--moe-graph", default="auto", choices=("auto", "gather", "dense"),
                    help="a MoE model's experts in the graph variant (auto: the faster at each point)")
    ap.add_argument("--moe-compile", default="auto", choices=("auto", "gather", "dense"),
                    help="a MoE model's experts in the compile variant (auto: the faster at each point)")
    ap.add_argument("--moe-gather-gb", type=float, default=1.0,
                    help="try gather where one layer's gathered expert weights (batch x k experts) are at most this")
    ap.add_argument("--moe-dense-max", type=int, default=8192, help="try dense where experts x batch is at most this")
    ap.add_argument("--moe-reps", type=int, default=5, help="replays timed per MoE choice, variant and point")
    ap.add_argument("--prefill-tokens", type=int, default=8192)
    ap.add_argument("--min-agree", type=float, default=0.97,
                    help="fail when fewer ids than this agree within --tie-tol")
    ap.add_argument("--tie-tol", type=float, default=0.0625,
                    help="an id counts as agreeing when torch eager's logit for it is this close to its max")
    ap.add_argument("--max-logit-diff", type=float, default=0.25,
                    help="fail when reel's first-step logits differ from torch eager's by more")
    ap.add_argument("--moe-min-agree", type=float, default=0.8,
                    help="a MoE model's --min-agree (routing flips between correct implementations move rows)")
    ap.add_argument("--moe-logits-within", type=float, default=0.95,
                    help="a MoE model's logit check: fail when fewer of the first step's logits than this are "
                         "within --max-logit-diff (instead of failing on the largest difference)")
    ap.add_argument("--moe-ties", default="topk", choices=("topk", "lowest"),
                    help="the router's top-k: torch.topk over the float32 softmax as transformers (topk), or exact "
                         "ties of the bf16 logits broken by the lowest expert id as reel does (lowest; torch.topk "
                         "on the CPU does not)")
    ap.add_argument("--csv", help="write the rows here (default DIR/decode.csv)")
    ap.add_argument("--append", action="store_true", help="append to --csv (header only when new)")
    ap.add_argument("--profile", action="store_true", help="profile three eager steps at the first point")
    a = ap.parse_args()

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    rpath = os.path.join(a.dir, "reel_decode.txt")
    if not os.path.exists(rpath):
        sys.exit(f"torch_model.py: {rpath} is missing: run bench_decode --dir {a.dir} first")
    rcfg, rplans, rcases, rtokens, rskips = load_reel(rpath)
    mdir = rcfg.get("model") or os.path.join(a.dir, "model")
    if not os.path.exists(os.path.join(mdir, "config.json")):
        sys.exit(f"torch_model.py: the checkpoint {mdir} (config.json) is missing: run bench_decode --dir {a.dir} first")
    log = lambda m: print(m, file=sys.stderr, flush=True)
    t_load = time.perf_counter()
    cfg, w = load_checkpoint(mdir, rcfg, dev)
    model = Model(cfg, w, dev)
    model.ties_lowest = a.moe_ties == "lowest"
    del w
    log(f"# checkpoint {mdir} loaded in {time.perf_counter() - t_load:.1f} s")
    steps, warmup = int(rcfg["steps"]), int(rcfg["warmup"])
    N = steps + warmup
    variants = a.variants.split(",") if cuda else ["eager"]
    if not cuda:
        print("torch_model.py: CUDA is not available: torch eager only, on the CPU (a check of this script, "
              "not a measurement)", file=sys.stderr)
    pick = lambda s: None if not s else {int(x) for x in s.split(",")}
    want_b, want_c = pick(a.batches), pick(a.contexts)
    sel = lambda k: (not want_b or k[0] in want_b) and (not want_c or k[1] in want_c)
    keys = sorted(k for k in rcases if sel(k))
    skipped = sorted(k for k in rskips if sel(k))
    if not keys and not skipped:
        sys.exit(f"torch_model.py: no reel cases to compare in {a.dir}")
    for nm in (a.eager_attention, a.graph_attention, a.compile_attention):
        if nm != "auto":
            Attn(nm, model)  # a name this PyTorch cannot run is refused before anything runs
    if cuda:
        for k in ("cache_size_limit", "recompile_limit"):
            if hasattr(torch._dynamo.config, k):
                setattr(torch._dynamo.config, k, 64)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        flex_ctas = 2 * sms if a.flex_max_ctas == 0 else a.flex_max_ctas

    info = machine_info(cuda)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    shape = rcfg.get("shape", "")
    rope = "default" if cfg["rope"] is None else "llama3 x%g" % cfg["rope"]["factor"]
    print(f"decode step, reel beside PyTorch {info['torch']} on {info['machine']} (driver {info['driver']}, "
          f"CUDA {info['cuda']}; reel backend {rcfg.get('backend')}), {date}")
    print(f"model{f' ({shape})' if shape else ''}: {cfg['layers']} layers, hidden {cfg['hidden']}, {cfg['heads']} "
          f"heads of {cfg['head_dim']} ({cfg['kv_heads']} kv), ffn {cfg['ffn']}, vocab {cfg['vocab']}, bf16, rope "
          f"theta {cfg['theta']:g} {rope}{', q/k/v biases' if cfg['qkv_bias'] else ''}"
          f"{', tied' if cfg['tied'] else ''}{', q/k norms' if cfg['qk_norm'] else ''}; same checkpoint ({mdir}), "
          f"prompt seed {cfg['seed']}")
    if model.is_moe:
        print(f"mixture of experts: {sum(cfg['moe'])} of {cfg['layers']} layers, {model.E} experts of ffn "
              f"{model.Fe}, {model.K} a token{', renormalized' if model.norm_topk else ''}; the experts: eager "
              f"{a.moe_eager}, graph {a.moe_graph}, compile {a.moe_compile} (auto: the fastest at the point)")
    print(f"per step: host wall (ids up, step, next ids back) and gpu (events around it), medians of {steps} "
          f"after {warmup} warm-up; torch.compile mode {a.compile_mode}\n", flush=True)

    rows, bad = [], []
    csv_path = a.csv or os.path.join(a.dir, "decode.csv")
    new = not (a.append and os.path.exists(csv_path) and os.path.getsize(csv_path) > 0)
    csv_file = open(csv_path, "w" if new else "a", newline="")
    wr = csv.DictWriter(csv_file, fieldnames=COLUMNS, extrasaction="ignore")
    if new:
        wr.writeheader()

    def out_row(r):
        """A row, written at once: a run cut short keeps the points it finished."""
        rows.append(r)
        wr.writerow({k: ("" if v is None else v) for k, v in r.items()})
        csv_file.flush()

    def skip_row(B, C, why):
        return dict(info, date=date, shape=shape, layers=cfg["layers"], hidden=cfg["hidden"], heads=cfg["heads"],
                    kv_heads=cfg["kv_heads"], head_dim=cfg["head_dim"], ffn=cfg["ffn"], vocab=cfg["vocab"],
                    batch=B, context=C, steps=steps, skipped=why, ok="skip")

    eager_choice = None if a.eager_attention == "auto" else a.eager_attention
    moe = model.is_moe
    allowed = lambda m, B: moe_allowed(model, m, B, a.moe_gather_gb, a.moe_dense_max)

    def moe_choices(var, B):
        """The experts' formulations a variant tries at batch B ([None] for a dense model)."""
        if not moe:
            return [None]
        fixed = {"eager": a.moe_eager, "graph": a.moe_graph, "compile": a.moe_compile}[var]
        if fixed != "auto":
            return [fixed]
        if var == "eager":
            return [m for m in MOE_IMPLS if allowed(m, B)] if cuda else ["loop"]
        return [m for m in ("gather", "dense") if allowed(m, B)] or ["dense"]

    plain = PLAIN_MOE if moe else {None: PLAIN}
    compiled = {}
    if "compile" in variants:
        for m in ([None] if not moe else [a.moe_compile] if a.moe_compile != "auto" else ["gather", "dense"]):
            compiled[m] = Pieces(a.compile_mode, m, share=next(iter(compiled.values()), None))
    graph_names = usable(GRAPH_CANDIDATES, model) if cuda else []
    for C in sorted({k[1] for k in keys}):
        try:
            Bs = sorted(k[0] for k in keys if k[1] == C)
            S = (C + N + 1 + 15) // 16 * 16
            L = S
            if cuda:
                Bs, dropped = torch_fit(model, cfg, Bs, C, S, N, a.prefill_tokens, a.moe_gather_gb * 1e9 if moe else 0)
                for B, why in dropped:
                    log(f"# batch {B} context {C}: {why}")
                    out_row(skip_row(B, C, why))
                if not Bs:
                    continue
            maxB = Bs[-1]
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

            # the attention of the eager variant, timed with its first (a MoE model's: loop) experts
            pieces0 = plain[moe_choices("eager", Bs[0])[0]]
            if eager_choice is None:
                B0 = Bs[0]
                eager_choice, note = pick_eager(model, pieces0, *views[B0], statics[B0], inputs[B0], C, B0, cuda,
                                                log)
                log(f"# {note}; eager baseline: {eager_choice}")
                print(f"eager attention: {eager_choice} ({note})\n")
            eager_attn = Attn(eager_choice, model)
            if a.profile and cuda:
                profile_eager(model, pieces0, eager_attn, *views[Bs[0]], statics[Bs[0]], inputs[Bs[0]], C, log)
                a.profile = False

            # The attention of the graph and compile variants, at each point.
            choice, attn_times = {}, {}
            for B in Bs:
                names = [] if not cuda else list(graph_names)
                if "compile" in variants and a.compile_attention == "auto" and not model.flex_broken and \
                        flex_ctas > 0 and B * model.Hkv < flex_ctas:
                    names += usable(COMPILE_EXTRA, model)
                need = (("graph" in variants and a.graph_attention == "auto") or
                        ("compile" in variants and a.compile_attention == "auto"))
                t0 = time.perf_counter()
                times = time_attention(model, names, *views[B], B, C, L, a.attn_reps, log) if need and names else {}
                attn_times[B] = times
                g = a.graph_attention if a.graph_attention != "auto" else best(times, graph_names)
                c = a.compile_attention if a.compile_attention != "auto" else best(times, names)
                if cuda and (g is None or c is None):  # nothing timed ran: SDPA's own pick, untimed
                    log(f"# batch {B} context {C}: no attention choice ran alone ({times}): default/grouped")
                    g, c = g or "default/grouped", c or g or "default/grouped"
                choice[B] = (g, c)
                if times:
                    log(f"# batch {B} context {C}: attention us a step " + ", ".join(
                        f"{n} {fmt(t[0])}" + (f" ({t[1]})" if t[1] else "") for n, t in times.items()) +
                        f"; graph: {g}, compile: {c} ({time.perf_counter() - t0:.1f} s)")

            # Each variant's graphs, one capture of every batch per formulation of the experts (a dense model:
            # one). caps[(var, moe)] = (graphs, seconds, capture seconds, pool bytes).
            caps = {}
            for var in ("graph", "compile"):
                if var not in variants:
                    continue
                for m in dict.fromkeys(x for B in Bs for x in moe_choices(var, B)):
                    mBs = [B for B in Bs if m in moe_choices(var, B)]
                    for attempt in (0, 1):
                        fns = {}
                        for B in mBs:
                            at = Attn(choice[B][0 if var == "graph" else 1], model)
                            pieces = plain[m] if var == "graph" else compiled[m]

                            def run(B=B, at=at, pieces=pieces):
                                with at.ctx():
                                    return model.step(pieces, at, statics[B], *views[B], L=L)
                            fns[B] = run
                        try:
                            graphs, tot_s, cap_s, pool = capture_buckets(
                                fns, statics, {B: inputs[B][0] for B in mBs}, torch.cuda.graph_pool_handle())
                        except Exception as e:  # a variant that fails is left out of the rows, not the whole run
                            again = var == "compile" and attempt == 0 and any(choice[B][1] != choice[B][0] for B in Bs)
                            log(f"# context {C}: torch {var}{f' ({m} experts)' if m else ''} failed: {first_line(e)}"
                                + ("; again with the graph variant's attention" if again else "; left out"))
                            torch.cuda.synchronize()
                            torch.cuda.empty_cache()
                            if not again:
                                break
                            choice = {B: (choice[B][0], choice[B][0]) for B in Bs}
                            continue
                        caps[(var, m)] = (graphs, tot_s, cap_s, pool)
                        log(f"# context {C}: torch {var}{f' ({m} experts)' if m else ''}: {len(graphs)} buckets in "
                            f"{tot_s:.1f} s (capture blocks {cap_s * 1e3:.0f} ms), pool {pool / 2**20:.1f} MiB")
                        break

            for B in Bs:
                st, ins = statics[B], inputs[B]
                tm = Timed(cuda, B)
                res, moe_pick, moe_times = {}, {}, {}
                # a MoE model's eager experts: each formulation over a few whole eager steps, the fastest kept
                cands = moe_choices("eager", B)
                if len(cands) > 1:
                    moe_times["eager"] = {}
                    for m in cands:
                        with eager_attn.ctx():
                            moe_times["eager"][m] = tm.run(
                                lambda i: model.step(plain[m], eager_attn, st, *views[B], n=C + i + 1), st,
                                ins[:min(6, len(ins))], 2)[0]
                moe_pick["eager"] = (min(cands, key=lambda m: moe_times["eager"][m] or math.inf)
                                     if "eager" in moe_times else cands[0])
                with eager_attn.ctx():
                    e_us, e_gpu, e_ids, e_first, kept, e_n = tm.run(
                        lambda i: model.step(plain[moe_pick["eager"]], eager_attn, st, *views[B], n=C + i + 1), st,
                        ins, warmup, keep_logits=True, budget_s=a.eager_budget_s or None,
                        min_steps=a.eager_min_steps)
                for var in ("graph", "compile"):
                    got = {m: caps[(var, m)] for m in moe_choices(var, B) if (var, m) in caps and
                           B in caps[(var, m)][0]}
                    if not got:
                        continue
                    if len(got) > 1:  # the faster formulation of the experts at this point
                        moe_times[var] = {m: time_replays(c[0][B][0], a.moe_reps) for m, c in got.items()}
                        moe_pick[var] = min(moe_times[var], key=moe_times[var].get)
                    else:
                        moe_pick[var] = next(iter(got))
                    g, out = got[moe_pick[var]][0][B]
                    res[var] = tm.run(lambda i: (g.replay(), out)[1], st, ins, warmup) + (got[moe_pick[var]],)
                if moe_times:
                    log(f"# batch {B} context {C}: experts us a step " + "; ".join(
                        f"{v}: " + ", ".join(f"{m} {fmt(t)}" for m, t in d.items()) + f" -> {moe_pick[v]}"
                        for v, d in moe_times.items()))
                rc = rcases[(B, C)]
                reel_ids = rtokens.get((B, C), [])
                n_e = len(e_ids)
                frac, same, total = agree(reel_ids[:n_e], e_ids)
                near = near_agree(reel_ids[:n_e], kept, a.tie_tol)
                self_near = {var: near_agree(r[2][:n_e], kept, a.tie_tol) for var, r in res.items()}
                del kept
                lpath = os.path.join(a.dir, f"logits_b{B}_c{C}.f32")
                maxdiff = within = None
                if os.path.exists(lpath):
                    rl = torch.frombuffer(bytearray(open(lpath, "rb").read()), dtype=torch.float32).reshape(B, -1)
                    diff = (rl - e_first).abs()
                    maxdiff, within = diff.max().item(), (diff <= a.max_logit_diff).float().mean().item()
                    del diff
                # A MoE model: routing flips between correct implementations move whole rows (see the top)
                min_agree = a.moe_min_agree if moe else a.min_agree
                logits_ok = maxdiff is None or (within >= a.moe_logits_within if moe else maxdiff <= a.max_logit_diff)
                ok = bool(total) and near >= min_agree and logits_ok
                if not ok:
                    bad.append(f"batch {B} context {C}: reel vs torch eager ids {same}/{total}, within tolerance "
                               f"{near:.3f}, max logit diff {fmt(maxdiff, 4)}, logits within {a.max_logit_diff}: "
                               f"{fmt(within, 4)}")
                for var, f in self_near.items():
                    if f < min_agree:
                        ok = False
                        bad.append(f"batch {B} context {C}: torch {var} vs torch eager {f:.3f} within tolerance")
                fl = float(rc["floor_us"])
                rr, rg = float(rc["replay_us"]), float(rc.get("replay_gpu_us", -1))
                re_, reg = float(rc["eager_us"]), float(rc.get("eager_gpu_us", -1))
                tc = res.get("compile", (None,))[0]
                cap = lambda var, i: res[var][6][i] if var in res else None  # the capture of the run's graphs
                pos_or_none = lambda v: v if v >= 0 else None
                gb = plan.get("graph_bytes") if plan.get("graph_bytes_known") == "1" else None
                times = attn_times.get(B, {})
                g_name, c_name = choice[B]
                row = dict(info, date=date, shape=shape, layers=cfg["layers"], hidden=cfg["hidden"], heads=cfg["heads"],
                           kv_heads=cfg["kv_heads"], head_dim=cfg["head_dim"], ffn=cfg["ffn"], vocab=cfg["vocab"],
                           batch=B, context=C, steps=steps, reel_replay_us=rr, reel_replay_gpu_us=pos_or_none(rg),
                           reel_eager_us=pos_or_none(re_), reel_eager_gpu_us=pos_or_none(reg), torch_eager_us=e_us,
                           torch_eager_gpu_us=e_gpu, torch_eager_steps=e_n, torch_graph_us=res.get("graph", (None,))[0],
                           torch_graph_gpu_us=res.get("graph", (None, None))[1], torch_compile_us=tc,
                           torch_compile_gpu_us=res.get("compile", (None, None))[1], floor_us=fl,
                           floor_tbps=rcfg.get("floor_tbps") if rcfg.get("floor_measured") == "1" else None,
                           replay_over_compile=rr / tc if tc else None, replay_over_floor=rr / fl,
                           eager_over_torch_eager=re_ / e_us if re_ >= 0 and e_us else None,
                           ids_agree=frac, ids_near_agree=near, max_logit_diff=maxdiff, logits_within=within,
                           torch_graph_near_agree=self_near.get("graph"),
                           torch_compile_near_agree=self_near.get("compile"),
                           reel_compile_ms=plan.get("reel_compile_ms"), reel_capture_ms=plan.get("capture_ms"),
                           reel_arena_bytes=plan.get("arena_bytes"), reel_static_bytes=plan.get("static_bytes"),
                           reel_graph_bytes=gb, reel_dev_other_bytes=plan.get("dev_other_bytes"),
                           reel_process_once_bytes=rcfg.get("process_once_dev_bytes"),
                           reel_graph_mem_reserved=plan.get("graph_mem_reserved"),
                           torch_graph_capture_s=cap("graph", 1), torch_graph_capture_only_s=cap("graph", 2),
                           torch_graph_pool_bytes=cap("graph", 3), torch_compile_capture_s=cap("compile", 1),
                           torch_compile_capture_only_s=cap("compile", 2), torch_compile_pool_bytes=cap("compile", 3),
                           eager_attention=eager_choice + ("" if e_n == steps else f" ({e_n} steps timed)"),
                           attn_graph=g_name if "graph" in res else None,
                           attn_graph_us=times.get(g_name, (None,))[0] if "graph" in res else None,
                           attn_compile=c_name if "compile" in res else None,
                           attn_compile_us=times.get(c_name, (None,))[0] if "compile" in res else None,
                           attn_candidates="; ".join(f"{n} {fmt(t[0])}" for n, t in times.items()) or None,
                           ok=int(ok))
                if moe:
                    fla = float(rc.get("floor_all_us", fl))
                    row.update(experts=model.E, experts_per_token=model.K, expert_ffn=model.Fe, floor_all_us=fla,
                               replay_over_floor_all=rr / fla, moe_eager=moe_pick.get("eager"),
                               moe_graph=moe_pick.get("graph"), moe_compile=moe_pick.get("compile"),
                               moe_candidates="; ".join(f"{v}: " + ", ".join(f"{m} {fmt(t)}" for m, t in d.items())
                                                        for v, d in moe_times.items()) or None)
                out_row(row)
                log(f"# batch {B} context {C}: wall us reel {rr:.1f} / {re_:.1f}, torch eager {fmt(e_us)} ({e_n} steps) "
                    f"graph {fmt(row['torch_graph_us'])} compile {fmt(tc)}; gpu us reel {rg:.1f} / {reg:.1f}, torch "
                    f"{fmt(e_gpu)} / {fmt(row['torch_graph_gpu_us'])} / {fmt(row['torch_compile_gpu_us'])}; ids "
                    f"{same}/{total}, near {near:.3f}, max |logit diff| {fmt(maxdiff, 4)} (within "
                    f"{a.max_logit_diff}: {fmt(within, 4)}){'' if ok else '  DISAGREE'}")
            caps = None
            kc = vc = views = None  # frees the cache (and the graphs) before the next context
            if cuda:
                torch.cuda.empty_cache()
        except Exception as e:  # one context that fails (out of memory, a kernel refused) costs its rows only
            if not cuda:
                raise
            log(f"# context {C}: PyTorch failed: {first_line(e)}; its points are left out")
            bad.append(f"context {C}: PyTorch failed: {first_line(e)}")
            kc = vc = views = caps = None
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    for B, C in skipped:
        out_row(skip_row(B, C, rskips[(B, C)]))
    csv_file.close()
    rows.sort(key=lambda r: (int(r["context"]), int(r["batch"])))

    print("| batch | context | reel replay us | reel eager us | torch eager us | torch graph us | "
          "torch.compile + graph us | floor us | replay / compile+graph | replay / floor | "
          "reel eager / torch eager | ids agree | near-tie agree | max abs logit diff | attention graph / compile"
          + ("; experts eager / graph / compile" if moe else "") + " |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r.get("skipped"):
            print(f"| {r['batch']} | {r['context']} | does not fit: {r['skipped']} |" + " |" * 12)
            continue
        print(f"| {r['batch']} | {r['context']} | {fmt(r['reel_replay_us'])} | {fmt(r['reel_eager_us'])} | "
              f"{fmt(r['torch_eager_us'])} | {fmt(r['torch_graph_us'])} | {fmt(r['torch_compile_us'])} | "
              f"{fmt(r['floor_us'])} | {fmt(r['replay_over_compile'], 2)} | {fmt(r['replay_over_floor'], 2)} | "
              f"{fmt(r['eager_over_torch_eager'], 2)} | {r['ids_agree']:.3f} | {r['ids_near_agree']:.3f} | "
              f"{fmt(r['max_logit_diff'], 4)} | {r.get('attn_graph') or '-'} / {r.get('attn_compile') or '-'}"
              + (f"; experts {r.get('moe_eager') or '-'} / {r.get('moe_graph') or '-'} / "
                 f"{r.get('moe_compile') or '-'}" if moe else "") + " |")
    print(f"\nrows written to {csv_path}")
    if bad:
        print("\nFAILED: reel and PyTorch disagree:\n  " + "\n  ".join(bad), file=sys.stderr)
        print("\nFAILED: reel and PyTorch disagree (see stderr)")
        sys.exit(1)


if __name__ == "__main__":
    main()

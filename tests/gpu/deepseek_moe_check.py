#!/usr/bin/env python3
"""reel's mixture-of-experts ops against transformers' DeepseekV3MoE, the MoE
block alone (DeepSeek's attention is not built yet; GPU machine).

It builds transformers' DeepseekV3MoE (DeepSeek V3's block: a sigmoid router
with a choice bias, e_score_correction_bias, experts in n_group groups of
which the topk_group with the best top-2 sums are kept, the others' choice
values set to 0.0, the top-k chosen, their sigmoid scores renormalized
(+1e-20) and scaled by routed_scaling_factor, plus a shared expert) in float32
with a small config (hidden 128, 32 routed experts of ffn 64, 4 a token, 8
groups of which 4 are kept, 1 shared expert, scaling 2.5), every weight and
the bias drawn at random (transformers starts the bias at zero), and for
each case below writes the input x, transformers' output y and every weight
under transformers' names (model.layers.3.mlp.experts.<e>.gate_proj.weight,
...; transformers 5 holds the experts fused and is split back into the
per-expert tensors of the hub's checkpoints) to a safetensors file, runs
`moe_block FILE OUT --backend B ...` (tests/models/moe_block.c: the block
built with reel_moe_route, reel_moe_ffn and the shared expert's matmuls), and
checks max |reel - hf| <= 1e-4 * max |hf|.

Cases:
- random, T = 64, 1 and 7 tokens: x ~ N(0, 1); rows where the routing is
  within 1e-5 of a tie (the k-th and (k+1)-th choice values, or the kept and
  the next group's scores, in a float64 reference) are drawn again, so a
  difference is never a legitimate tie broken the other way;
- bias-choice: the router's weight is zero, so every logit is 0 and every
  score 0.5: the groups and the experts are chosen by the bias alone
  (distinct values, margins of at least 1e-5 too);
- bias-masked: likewise, with three kept groups of one expert with a large
  bias (and three below -0.5), one kept group all below -0.5 and four groups
  left out: the fourth choice must be an expert of a group left out (its
  choice value masked to 0.0 beats the kept experts' negative ones, as
  DeepSeek V3's masked_fill(..., 0.0) has it), not one of the kept group's.
  The experts of the groups left out share their weights, so which of those
  equal 0.0 values is taken does not change y.
Before reel runs, transformers' output is compared with a float64 reference
of the rules above, computed from the per-expert tensors written to the
file (1e-4 too): that checks the routing as this script understands it and
the experts' layout it split. Exits 1 saying what differed, 77 (skip) when
torch, transformers, DeepseekV3MoE or (with --backend cuda) a GPU is
missing.

Usage: tests/gpu/deepseek_moe_check.py --moe-block build/tests/models/moe_block [--backend cuda] [--keep DIR]
"""
import argparse
import copy
import inspect
import os
import struct
import subprocess
import sys
import tempfile

CFG = dict(hidden_size=128, n_routed_experts=32, num_experts_per_tok=4, n_group=8, topk_group=4,
           moe_intermediate_size=64, n_shared_experts=1, routed_scaling_factor=2.5, norm_topk_prob=True)
PREFIX = "model.layers.3.mlp."  # DeepSeek V3's first layer with experts (first_k_dense_replace 3)
RTOL = 1e-4
TIE_MIN = 1e-5
SEED = 4321


def fail(msg):
    print("deepseek_moe_check: FAIL: " + msg, flush=True)
    sys.exit(1)


def skip(msg):
    print("deepseek_moe_check: SKIP: " + msg, flush=True)
    sys.exit(77)


def make_block(device):
    import torch
    try:
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Config, DeepseekV3MoE
    except ImportError as e:
        skip("this transformers has no DeepseekV3MoE (%s)" % e)
    # intermediate_size (the dense layers' MLP, not in this block) is set to
    # the experts' too, whichever of the two a version's experts read.
    cfg = DeepseekV3Config(hidden_act="silu", intermediate_size=CFG["moe_intermediate_size"], num_hidden_layers=4,
                           first_k_dense_replace=3, **CFG)
    try:  # transformers 5 dispatches the experts by this; a bare module has no model to set it
        cfg._experts_implementation = "eager"
    except (AttributeError, ValueError):
        pass
    block = DeepseekV3MoE(cfg)
    print("deepseek_moe_check: DeepseekV3MoE.forward%s, experts %s" %
          (inspect.signature(block.forward), type(block.experts).__name__), flush=True)
    torch.manual_seed(SEED)
    with torch.no_grad():  # every weight N(0, 1/fan_in): outputs of order 1
        for _, p in block.named_parameters():
            p.normal_(0.0, p.shape[-1] ** -0.5)
        block.gate.e_score_correction_bias.normal_(0.0, 0.1)
    return block.to(device).float().eval()


def block_tensors(block):
    """The block's tensors under transformers' checkpoint names (PREFIX +
    state_dict name), float32 on the CPU; transformers 5's fused experts
    (experts.gate_up_proj [E, 2F, H], each expert's gate rows then its up
    rows, and experts.down_proj [E, H, F]) split into the per-expert
    tensors."""
    E, F, H = CFG["n_routed_experts"], CFG["moe_intermediate_size"], CFG["hidden_size"]
    # Copies (safetensors refuses tensors that share memory; and the cases
    # change the block's weights).
    sd = {k: v.detach().float().cpu().clone() for k, v in block.state_dict().items()}
    if "experts.gate_up_proj" in sd:
        gu, dn = sd.pop("experts.gate_up_proj"), sd.pop("experts.down_proj")
        if tuple(gu.shape) != (E, 2 * F, H) or tuple(dn.shape) != (E, H, F):
            fail("fused experts of shapes %s and %s, expected [%d, %d, %d] and [%d, %d, %d]" %
                 (tuple(gu.shape), tuple(dn.shape), E, 2 * F, H, E, H, F))
        for e in range(E):
            sd["experts.%d.gate_proj.weight" % e] = gu[e, :F].clone()
            sd["experts.%d.up_proj.weight" % e] = gu[e, F:].clone()
            sd["experts.%d.down_proj.weight" % e] = dn[e].clone()
    want = {"gate.weight", "gate.e_score_correction_bias"}
    for part in ("gate_proj", "up_proj", "down_proj"):
        want.add("shared_experts.%s.weight" % part)
        want.update("experts.%d.%s.weight" % (e, part) for e in range(E))
    if set(sd) != want:
        fail("the block's tensors are not the expected ones: extra %s, missing %s" %
             (sorted(set(sd) - want)[:6], sorted(want - set(sd))[:6]))
    return {PREFIX + k: v for k, v in sd.items()}


def load_block(block, w):
    """Writes per-expert tensors w (block_tensors' form) back into block."""
    import torch
    E, F = CFG["n_routed_experts"], CFG["moe_intermediate_size"]
    with torch.no_grad():
        block.gate.weight.copy_(w[PREFIX + "gate.weight"])
        block.gate.e_score_correction_bias.copy_(w[PREFIX + "gate.e_score_correction_bias"])
        for part in ("gate_proj", "up_proj", "down_proj"):
            getattr(block.shared_experts, part).weight.copy_(w[PREFIX + "shared_experts.%s.weight" % part])
        fused = getattr(block.experts, "gate_up_proj", None)
        for e in range(E):
            g, u, d = (w[PREFIX + "experts.%d.%s.weight" % (e, p)] for p in ("gate_proj", "up_proj", "down_proj"))
            if fused is not None:
                block.experts.gate_up_proj[e, :F].copy_(g)
                block.experts.gate_up_proj[e, F:].copy_(u)
                block.experts.down_proj[e].copy_(d)
            else:
                block.experts[e].gate_proj.weight.copy_(g)
                block.experts[e].up_proj.weight.copy_(u)
                block.experts[e].down_proj.weight.copy_(d)


def reference(w, x):
    """DeepSeek V3's block in float64 from per-expert tensors w, on x [T, H]:
    (y [T, H], the row's smallest routing margin: between the kept and the
    next group's scores, and between the k-th and (k+1)-th choice values)."""
    import torch
    E, K, G, TG = CFG["n_routed_experts"], CFG["num_experts_per_tok"], CFG["n_group"], CFG["topk_group"]
    x = x.double().cpu()
    T = x.shape[0]
    W = {k[len(PREFIX):]: v.double() for k, v in w.items()}
    s = torch.sigmoid(x @ W["gate.weight"].T)
    c = s + W["gate.e_score_correction_bias"]
    group = c.view(T, G, E // G).topk(2, dim=-1).values.sum(dim=-1)
    gsorted = group.sort(dim=-1, descending=True).values
    kept = torch.zeros(T, G, dtype=torch.bool).scatter_(1, group.topk(TG, dim=-1).indices, True)
    c = c.masked_fill(~kept.repeat_interleave(E // G, dim=1), 0.0)
    csorted = c.sort(dim=-1, descending=True).values
    margin = csorted[:, K - 1] - csorted[:, K]
    if TG < G:
        margin = torch.minimum(margin, gsorted[:, TG - 1] - gsorted[:, TG])
    ids = c.topk(K, dim=-1).indices
    wts = s.gather(1, ids)
    if CFG["norm_topk_prob"]:
        wts = wts / (wts.sum(dim=-1, keepdim=True) + 1e-20)
    wts = wts * CFG["routed_scaling_factor"]

    def mlp(v, pre):
        g, u, d = (W[pre + p + ".weight"] for p in ("gate_proj", "up_proj", "down_proj"))
        return (torch.nn.functional.silu(v @ g.T) * (v @ u.T)) @ d.T

    y = mlp(x, "shared_experts.")
    for t in range(T):
        for j in range(K):
            y[t] += wts[t, j] * mlp(x[t], "experts.%d." % int(ids[t, j]))
    return y, margin


def draw_x(w, T, gen):
    """x ~ N(0, 1) [T, H], rows within TIE_MIN of a routing tie drawn again."""
    import torch
    x = torch.randn(T, CFG["hidden_size"], generator=gen)
    for _ in range(100):
        _, margin = reference(w, x)
        near = (margin < TIE_MIN).nonzero().flatten()
        if near.numel() == 0:
            return x
        x[near] = torch.randn(near.numel(), CFG["hidden_size"], generator=gen)
    fail("could not draw %d rows away from routing ties" % T)


def bias_choice(w, gen):
    """Router weight zero (all logits 0, all scores 0.5), a distinct bias
    that decides the groups and the experts with margins of TIE_MIN."""
    import torch
    E = CFG["n_routed_experts"]
    w[PREFIX + "gate.weight"].zero_()
    for _ in range(100):
        w[PREFIX + "gate.e_score_correction_bias"] = torch.randn(E, generator=gen) * 0.5
        _, margin = reference(w, torch.zeros(1, CFG["hidden_size"]))
        if float(margin[0]) >= TIE_MIN:
            return w
    fail("could not draw a bias away from routing ties")


def bias_masked(w):
    """Router weight zero; groups of 4: groups 0-2 one expert with bias 10, 9,
    8 and three at -2 (choice -1.5), group 3 all at -1.6 (-1.1), groups 4-7
    all at -2 (group score -3.0: left out, their choice values 0.0). The
    choice: the three large ones, then an expert of groups 4-7 (0.0 beats
    -1.1), whose experts all share expert 16's weights."""
    import torch
    E, GS = CFG["n_routed_experts"], CFG["n_routed_experts"] // CFG["n_group"]
    w[PREFIX + "gate.weight"].zero_()
    bias = torch.full((E,), -2.0)
    for g, big in enumerate((10.0, 9.0, 8.0)):
        bias[g * GS + 1] = big
    bias[3 * GS:4 * GS] = -1.6
    w[PREFIX + "gate.e_score_correction_bias"] = bias
    for e in range(4 * GS + 1, E):
        for p in ("gate_proj", "up_proj", "down_proj"):
            w[PREFIX + "experts.%d.%s.weight" % (e, p)] = w[PREFIX + "experts.%d.%s.weight" % (4 * GS, p)].clone()
    return w


def rel_err(a, b):
    scale = float(b.abs().max())
    return float((a - b).abs().max()) / scale, scale


def run_case(name, block, w, x, args, device):
    import torch
    from safetensors.torch import save_file
    T, H = x.shape
    load_block(block, w)
    with torch.no_grad():
        y = block(x.to(device).unsqueeze(0))
    if isinstance(y, tuple):
        y = y[0]
    y = y.reshape(T, H).float().cpu()
    ref, margin = reference(w, x)
    rel, scale = rel_err(ref, y.double())
    if not rel <= RTOL:
        fail("%s: transformers' output differs from this script's float64 reference of DeepSeek V3's routing by "
             "%.3g of its scale (tolerance %.3g; smallest routing margin %.3g): the routing or the experts' layout "
             "is not what this script assumes" % (name, rel, RTOL, float(margin.min())))
    d = os.path.join(args.keep or tempfile.mkdtemp(prefix="reel-dsmoe-"), name)
    os.makedirs(d, exist_ok=True)
    path, out = os.path.join(d, "block.safetensors"), os.path.join(d, "reel-y.f32")
    tensors = dict(w)
    tensors["x"] = x.float().contiguous()
    tensors["y"] = y.contiguous()
    save_file(tensors, path, metadata={"format": "pt"})
    cmd = [args.moe_block, path, out, "--backend", args.backend,
           "--experts", str(CFG["n_routed_experts"]), "--topk", str(CFG["num_experts_per_tok"]),
           "--groups", str(CFG["n_group"]), "--topk-group", str(CFG["topk_group"]),
           "--ffn", str(CFG["moe_intermediate_size"]),
           "--shared-ffn", str(CFG["moe_intermediate_size"] * CFG["n_shared_experts"]),
           "--scaling", repr(CFG["routed_scaling_factor"]), "--renorm", "1" if CFG["norm_topk_prob"] else "0",
           "--tokens", str(T), "--hidden", str(H)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail("%s: moe_block exited %d: %s\n%s%s" % (name, r.returncode, " ".join(cmd), r.stdout, r.stderr))
    with open(out, "rb") as f:
        raw = f.read()
    if len(raw) != T * H * 4:
        fail("%s: %s has %d bytes, expected %d x %d float32" % (name, out, len(raw), T, H))
    got = torch.tensor(struct.unpack("<%df" % (T * H), raw)).view(T, H)
    rel, scale = rel_err(got, y)
    worst = int((got - y).abs().max(dim=1).values.argmax())
    print("%-12s T=%-3d max |reel - hf| %.4g (%.3g of max |hf| %.4g, worst row %d), tolerance %.3g; "
          "smallest routing margin %.3g" % (name, T, rel * scale, rel, scale, worst, RTOL, float(margin.min())),
          flush=True)
    if not rel <= RTOL:
        fail("%s: reel differs from transformers by %.3g of the output's scale at row %d (tolerance %.3g)" %
             (name, rel, worst, RTOL))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--moe-block", default=os.path.join("build", "tests", "models", "moe_block"))
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--keep", help="keep the files under this directory")
    ap.add_argument("--only", help="run one case by name")
    args = ap.parse_args()
    try:
        import torch
        import transformers
        import safetensors  # noqa: F401
    except ImportError as e:
        skip(str(e))
    if args.backend == "cuda" and not torch.cuda.is_available():
        skip("no CUDA device")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if not os.access(args.moe_block, os.X_OK):
        fail("no moe_block program at %s (--moe-block)" % args.moe_block)
    print("deepseek_moe_check: transformers %s, torch %s, %s" %
          (transformers.__version__, torch.__version__,
           torch.cuda.get_device_name() if device == "cuda" else "cpu"), flush=True)
    block = make_block(device)
    base = block_tensors(block)
    gen = torch.Generator().manual_seed(SEED)
    cases = []
    for T in (64, 1, 7):
        cases.append(("random-%d" % T, base, draw_x(base, T, gen)))
    cases.append(("bias-choice", bias_choice(copy.deepcopy(base), gen), torch.randn(8, CFG["hidden_size"],
                                                                                      generator=gen)))
    cases.append(("bias-masked", bias_masked(copy.deepcopy(base)), torch.randn(8, CFG["hidden_size"],
                                                                                  generator=gen)))
    for name, w, x in cases:
        if args.only and args.only != name:
            continue
        run_case(name, block, w, x, args, device)
    print("deepseek_moe_check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

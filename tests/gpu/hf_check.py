#!/usr/bin/env python3
"""reel against transformers on Hugging Face checkpoints of each family the
models layer builds (GPU machine).

For each configuration it builds a small randomly initialised model with
transformers (LlamaForCausalLM, plain and with llama3 rope scaling,
MistralForCausalLM, Qwen2ForCausalLM with its q/k/v biases,
Qwen3ForCausalLM with its q/k norms and an explicit head_dim, plain and
with yarn rope scaling, and the mixture-of-experts families:
Qwen3MoeForCausalLM with 16 experts, 4 a token, renormalized or not, one of
its 3 layers dense (mlp_only_layers), and MixtralForCausalLM with 8 experts,
2 a token, both run by transformers' eager loop over the experts), saves it
with save_pretrained(safe_serialization=True) (the experts one tensor each,
as the hub's checkpoints have them: checked), runs `reel demo --model DIR
--prompt ... --generate 32 --logits FILE` (reel's models layer:
include/reel/models.h), and checks
- every row's logits (the prompt's and each fed token's) agree with
  transformers' on the same tokens (teacher-forced on reel's sequence) within
  the dtype's tolerance: max |reel - hf| <= rtol * max |hf| (bf16 0.04, f16
  0.02, f32 1e-3, TF32 off in torch);
- each of the 32 greedy tokens is transformers' argmax on that history, or
  one of its top two where those two are closer than the tolerance (a tie at
  this precision); how long the two free-running greedy loops agree is
  printed.
The rope scalings use a short original length (64 or 128 positions), so
that their bands and ramps fall inside the 40 positions checked: a wrong
table moves the logits by far more than the tolerance.
Routing flips (the MoE configurations): where two experts' router logits
nearly tie at the top-k boundary, two correct implementations can choose
differently at bf16 precision (reel's router input differs from
transformers' by bf16 rounding), and then that token's hidden state, its
logits and, through attention, later rows differ by more than the dtype
tolerance. So, in bf16 only, the MoE configurations report the fraction of
rows within the tolerance and require most of them (MOE_MIN_ROWS, 75%);
every row past the tolerance must be explained by a router near-tie
(transformers' k-th and (k+1)-th router logits of some layer closer than
the tolerance times the row's largest |router logit|) at that row or an
earlier one (said which), else it fails; its greedy token is then not
checked. In float32 every row must be within the tolerance, as for the
dense families. A configuration whose model class this transformers lacks
(Qwen3 before 4.51; Qwen3-MoE, Mixtral, DeepSeek V3) is skipped and said so;
every configuration runs, and the failed ones are named at the end. Nothing is
downloaded. Exits 1 and says what differed on any failure, 77 (skip) when
torch, transformers or a GPU is missing.

Usage: tests/gpu/hf_check.py [--reel build/tools/reel] [--backend cuda] [--keep DIR] [--only NAME]
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

RTOL = {"bfloat16": 0.04, "float16": 0.02, "float32": 1e-3}
# bf16 MoE configurations: the least fraction of rows within the tolerance
# (the others must each follow a router near-tie; see above).
MOE_MIN_ROWS = 0.75

QWEN3_MOE = {"head_dim": 64, "num_hidden_layers": 3, "num_experts": 16, "num_experts_per_tok": 4,
             "moe_intermediate_size": 128, "norm_topk_prob": True, "mlp_only_layers": [1], "decoder_sparse_step": 1}
MIXTRAL = {"num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 256}
# DeepSeek V3 (multi-head latent attention, sigmoid-routed grouped experts and
# a shared expert), shrunk: 4 heads of nope 32 + rope 16, latent 64, q rank
# 96, values 32; 16 experts in 4 groups (2 kept), 4 a token, ffn 128; layer 0
# dense (first_k_dense_replace 1); DeepSeek's yarn (factor 4 here, mscale and
# mscale_all_dim 1: the softmax scale's mscale^2).
DEEPSEEK = {"num_hidden_layers": 3, "num_key_value_heads": 4, "kv_lora_rank": 64, "q_lora_rank": 96,
            "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "n_routed_experts": 16,
            "n_shared_experts": 1, "num_experts_per_tok": 4, "moe_intermediate_size": 128, "n_group": 4,
            "topk_group": 2, "routed_scaling_factor": 2.5, "norm_topk_prob": True, "first_k_dense_replace": 1,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                             "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}}
MOE_KINDS = ("qwen3_moe", "mixtral", "deepseek_v3")

CONFIGS = [
    # name, class, dtype, extra config
    ("llama-bf16", "llama", "bfloat16", {}),
    ("llama-bf16-tied", "llama", "bfloat16", {"tie_word_embeddings": True}),
    ("llama-f32", "llama", "float32", {}),
    # Llama 3.1's rope scaling with its bands moved into the checked positions
    ("llama3-rope-bf16", "llama", "bfloat16",
     {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 64}, "rope_theta": 500000.0}),
    ("llama3-rope-f32", "llama", "float32",
     {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 64}, "rope_theta": 500000.0}),
    # Mistral v0.1's window (4096) is past every context here: accepted
    ("mistral-bf16", "mistral", "bfloat16", {"sliding_window": 4096}),
    ("qwen2-bf16-bias", "qwen2", "bfloat16", {}),
    # Qwen3: q_norm and k_norm per head, head_dim 128 (4 heads: 512 != hidden 256)
    ("qwen3-bf16", "qwen3", "bfloat16", {"head_dim": 128, "tie_word_embeddings": True}),
    ("qwen3-f32", "qwen3", "float32", {"head_dim": 128}),
    # yarn with factor = max_position_embeddings / original (every transformers
    # version reads the factor the same way then)
    ("qwen3-yarn-bf16", "qwen3", "bfloat16",
     {"head_dim": 64, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}}),
    # Mixture of experts. Qwen3-MoE (Qwen3-30B-A3B's rules, shrunk): 16 experts
    # of ffn 128, 4 a token, renormalized; 3 layers, the middle one dense
    # (mlp_only_layers, the dense MLP of intermediate_size 512) between two
    # with experts. Mixtral: 8 experts of ffn 256 (intermediate_size), 2 a token.
    ("qwen3-moe-bf16", "qwen3_moe", "bfloat16", dict(QWEN3_MOE, tie_word_embeddings=True)),
    ("qwen3-moe-f32", "qwen3_moe", "float32", QWEN3_MOE),
    ("qwen3-moe-f32-unnormed", "qwen3_moe", "float32", dict(QWEN3_MOE, norm_topk_prob=False)),
    ("mixtral-bf16", "mixtral", "bfloat16", MIXTRAL),
    ("mixtral-f32", "mixtral", "float32", MIXTRAL),
    ("deepseek-v3-f32", "deepseek_v3", "float32", DEEPSEEK),
    ("deepseek-v3-bf16", "deepseek_v3", "bfloat16", DEEPSEEK),
    # q through one projection (q_lora_rank null), no rope scaling, neox pairs
    ("deepseek-v3-f32-qproj", "deepseek_v3", "float32",
     dict(DEEPSEEK, q_lora_rank=None, rope_scaling=None, rope_interleave=False)),
]

SHAPE = dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=512, vocab_size=1000, max_position_embeddings=512, rms_norm_eps=1e-5,
             rope_theta=10000.0)
PROMPT = [17, 401, 3, 999, 250, 64, 128, 7]
STEPS = 32


def fail(msg):
    print("hf_check: FAIL: " + msg, flush=True)
    sys.exit(1)


def build_model(kind, dtype, extra, seed):
    import torch
    import transformers as tf
    kw = dict(SHAPE, **extra)
    # A wider init than the default 0.02 keeps the top logits apart, so a
    # greedy token is decided by the model, not by the last bf16 bit.
    kw.update(initializer_range=0.1, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if kind == "llama":
        cfg = tf.LlamaConfig(**kw)
        cls = tf.LlamaForCausalLM
    elif kind == "mistral":
        cfg = tf.MistralConfig(**kw)
        cls = tf.MistralForCausalLM
    elif kind == "qwen2":
        cfg = tf.Qwen2Config(use_sliding_window=False, **kw)
        cls = tf.Qwen2ForCausalLM
    elif kind == "qwen3":
        cfg = tf.Qwen3Config(use_sliding_window=False, **kw)
        cls = tf.Qwen3ForCausalLM
    elif kind == "qwen3_moe":
        cfg = tf.Qwen3MoeConfig(use_sliding_window=False, **kw)
        cls = tf.Qwen3MoeForCausalLM
    elif kind == "mixtral":
        cfg = tf.MixtralConfig(**kw)
        cls = tf.MixtralForCausalLM
    elif kind == "deepseek_v3":
        cfg = tf.DeepseekV3Config(**kw)
        cls = tf.DeepseekV3ForCausalLM
    else:
        raise ValueError("unknown kind " + kind)
    torch.manual_seed(seed)
    model = cls(cfg)
    if kind in MOE_KINDS and hasattr(model, "set_experts_implementation"):
        # transformers 5 may dispatch the experts to grouped GEMMs; the
        # reference here is its plain loop over the experts.
        model.set_experts_implementation("eager")
    if kind == "qwen2":  # biases are zero-initialised: make them count
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0.0, 0.5)
    with torch.no_grad():  # the norms start at 1: make their weights count too
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
        if kind == "deepseek_v3":  # the choice bias starts at 0: make it count
            for layer in model.model.layers:
                gate = getattr(layer.mlp, "gate", None)
                if gate is not None and hasattr(gate, "e_score_correction_bias"):
                    gate.e_score_correction_bias.normal_(0.0, 0.1)
    return model.to(getattr(torch, dtype)).cuda().eval()


def hf_greedy(model):
    import torch
    ids = torch.tensor([PROMPT], device="cuda")
    out = []
    with torch.no_grad():
        for _ in range(STEPS):
            logits = model(ids).logits[0, -1].float()
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]], device="cuda")], dim=1)
        full = model(ids[:, :-1]).logits[0].float()  # rows of prompt + fed tokens
    return out, full


def run_reel(reel, backend, d, logits_path):
    cmd = [reel, "demo", "--model", d, "--backend", backend, "--quiet", "--prompt", ",".join(map(str, PROMPT)),
           "--generate", str(STEPS), "--logits", logits_path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        fail("reel exited %d: %s\n%s%s" % (r.returncode, " ".join(cmd), r.stdout, r.stderr))
    for line in r.stdout.splitlines():
        line = line.strip()
        if line.startswith("generated"):
            return [int(t) for t in line.split(":", 1)[1].split()], r.stdout
    fail("no 'generated' line in reel's output:\n" + r.stdout)


def read_logits(path, rows, vocab):
    import torch
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) != rows * vocab * 4:
        fail("%s: %d bytes, expected %d rows x %d float32" % (path, len(raw), rows, vocab))
    return torch.tensor(struct.unpack("<%df" % (rows * vocab), raw)).view(rows, vocab).cuda()


# A layer-0 expert tensor under the names the hub's checkpoints use (and
# reel's models layer reads): transformers 5 holds the experts fused in
# memory and writes them back one tensor each (save_original_format).
EXPERT_NAME = {"qwen3_moe": "model.layers.0.mlp.experts.0.gate_proj.weight",
               "mixtral": "model.layers.0.block_sparse_moe.experts.0.w1.weight",
               "deepseek_v3": "model.layers.1.mlp.experts.0.gate_proj.weight"}


def check_saved_experts(name, kind, d):
    from safetensors import safe_open
    keys = []
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".safetensors"):
            with safe_open(os.path.join(d, fn), framework="pt") as f:
                keys.extend(f.keys())
    if EXPERT_NAME[kind] not in keys:
        fail("%s: the saved checkpoint has no %s (reel reads the experts one tensor each, as the hub's "
             "checkpoints have them); its expert tensors: %s" %
             (name, EXPERT_NAME[kind], sorted(k for k in keys if ".experts." in k)[:4]))


def moe_routers(model, experts):
    """(layer, router) of each layer with experts: the module with a weight of
    [experts, hidden] at mlp.gate (Qwen3-MoE; Mixtral in transformers 5) or
    block_sparse_moe.gate (Mixtral before 5)."""
    found = []
    for i, layer in enumerate(model.model.layers):
        for attr in ("block_sparse_moe", "mlp"):
            gate = getattr(getattr(layer, attr, None), "gate", None)
            w = getattr(gate, "weight", None)
            if w is not None and w.dim() == 2 and tuple(w.shape) == (experts, model.config.hidden_size):
                found.append((i, gate))
                break
    return found


def router_near_ties(routers, inputs, topk, tol, rows):
    """{row: [(layer, margin, scale)]}: the rows where some router's k-th and
    (k+1)-th logits (transformers' own, recomputed from the router's input:
    the same linear in the model's dtype) are within tol times the row's
    largest |router logit|, where a bf16 difference can flip the choice."""
    import torch
    ties = {}
    for layer, gate in routers:
        got = inputs.get(layer, [])
        if len(got) != 1:
            fail("layer %d's router ran %d times in one forward pass, expected once" % (layer, len(got)))
        with torch.no_grad():
            x = got[0].reshape(-1, gate.weight.shape[1])
            logits = torch.nn.functional.linear(x, gate.weight).float()
        if logits.shape[0] != rows:
            fail("layer %d's router saw %d rows, expected %d" % (layer, logits.shape[0], rows))
        top = torch.topk(logits, topk + 1, dim=-1).values
        margin = (top[:, topk - 1] - top[:, topk]).tolist()
        scale = logits.abs().max(dim=-1).values.tolist()
        for r in range(rows):
            if margin[r] <= tol * scale[r]:
                ties.setdefault(r, []).append((layer, margin[r], scale[r]))
    return ties


def teacher_forced(model, ids, routers):
    """transformers' logits on ids, and the input of each router."""
    import torch
    inputs, handles = {}, []
    for layer, gate in routers:
        def hook(mod, args, kwargs, layer=layer):
            x = args[0] if args else next(iter(kwargs.values()))
            inputs.setdefault(layer, []).append(x.detach())
        handles.append(gate.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            logits = model(ids).logits[0].float()
    finally:
        for h in handles:
            h.remove()
    return logits, inputs


def describe_ties(ties, r):
    return ", ".join("layer %d margin %.3g of max |router logit| %.3g" % t for t in ties.get(r, [])) or "none"


def check(name, kind, dtype, extra, args, seed):
    import torch
    moe = kind in MOE_KINDS
    model = build_model(kind, dtype, extra, seed)
    d = os.path.join(args.keep or tempfile.mkdtemp(prefix="reel-hf-"), name)
    model.save_pretrained(d, safe_serialization=True)
    if moe:
        check_saved_experts(name, kind, d)
    hf_tokens, hf_logits = hf_greedy(model)
    logits_path = os.path.join(d, "reel-logits.bin")
    reel_tokens, out = run_reel(args.reel, args.backend, d, logits_path)
    rows = len(PROMPT) + STEPS - 1
    rl = read_logits(logits_path, rows, SHAPE["vocab_size"])
    if len(reel_tokens) != STEPS:
        fail("%s: reel generated %d tokens, expected %d" % (name, len(reel_tokens), STEPS))
    tol = RTOL[dtype]
    routers, ties = [], {}
    if moe:
        experts = extra["num_experts"] if kind == "qwen3_moe" else extra["num_local_experts"]
        layers = extra.get("num_hidden_layers", SHAPE["num_hidden_layers"])
        want = [i for i in range(layers) if i not in extra.get("mlp_only_layers", [])]
        routers = moe_routers(model, experts)
        if [i for i, _ in routers] != want:
            fail("%s: found routers in layers %s, expected %s" % (name, [i for i, _ in routers], want))
    # Logits on the same history: transformers teacher-forced on reel's tokens
    # (after a tie the two greedy runs feed different tokens, and their later
    # rows are not comparable).
    ids = torch.tensor([PROMPT + reel_tokens[:-1]], device="cuda")
    hf_on_reel, router_inputs = teacher_forced(model, ids, routers)
    if moe:
        ties = router_near_ties(routers, router_inputs, extra["num_experts_per_tok"], tol, rows)
    scale = float(hf_on_reel.abs().max())
    diff = (rl - hf_on_reel).abs()
    row_err = [e / scale for e in diff.max(dim=1).values.tolist()]
    past = [r for r in range(rows) if not row_err[r] <= tol]
    # Rows past the tolerance at a routing flip (bf16 MoE only): each at or
    # after a router near-tie, and most rows within.
    excused = {}
    if moe and dtype != "float32":
        for r in past:
            before = [t for t in ties if t <= r]
            if not before:
                fail("%s: row %d differs by %.3g of the logits' scale (tolerance %.3g), and no router has a "
                     "near-tie at or before it" % (name, r, row_err[r], tol))
            excused[r] = ("its own router near-tie (%s)" % describe_ties(ties, r) if r in ties else
                          "after the router near-tie of row %d (%s)" % (max(before), describe_ties(ties, max(before))))
        within = rows - len(past)
        print("%-22s %d of %d rows (%.0f%%) within the tolerance; router near-ties at rows %s" %
              (name, within, rows, 100.0 * within / rows, sorted(ties)), flush=True)
        for r in sorted(excused):
            print("%-22s   row %d past it (%.3g of the scale): %s" % (name, r, row_err[r], excused[r]), flush=True)
        if within < MOE_MIN_ROWS * rows:
            fail("%s: only %d of %d rows within the tolerance (at least %.0f%% wanted)" %
                 (name, within, rows, 100 * MOE_MIN_ROWS))
    kept = [r for r in range(rows) if r not in excused]
    worst_row = max(kept, key=lambda r: row_err[r])
    rel = row_err[worst_row]
    print("%-22s logits max |reel - hf| %.4g (%.3g of max |logit| %.3g, worst row %d%s), tolerance %.3g" %
          (name, rel * scale, rel, scale, worst_row, ", rows at a routing flip left out" if excused else "", tol),
          flush=True)
    if not rel <= tol:
        fail("%s: logits differ by %.3g of their scale at row %d (tolerance %.3g)%s" %
             (name, rel, worst_row, tol, "; router near-ties at that row: " + describe_ties(ties, worst_row)
              if moe else ""))
    # Greedy tokens: reel's pick is transformers' argmax on the same history,
    # except where transformers' own top two are closer than the tolerance
    # (a tie at this precision: either pick is greedy), and, in bf16 MoE, at
    # a row left out above (a routing flip).
    ties_greedy, flips = 0, 0
    for k in range(STEPS):
        r = len(PROMPT) - 1 + k
        row = hf_on_reel[r]
        top2 = torch.topk(row, 2)
        best = int(top2.indices[0])
        margin = float(top2.values[0] - top2.values[1])
        if reel_tokens[k] == best:
            continue
        if r in excused:
            flips += 1
            continue
        if margin <= 2 * tol * scale and float(row[reel_tokens[k]]) >= float(top2.values[1]):
            ties_greedy += 1
            continue
        fail("%s: greedy token %d differs: reel %d, transformers %d on the same history (top-2 margin %.4g)\n"
             "  reel: %s\n  hf free-running: %s" % (name, k, reel_tokens[k], best, margin, reel_tokens, hf_tokens))
    same = next((i for i in range(STEPS) if reel_tokens[i] != hf_tokens[i]), STEPS)
    print("%-22s %d greedy tokens agree (%d at a tie within tolerance%s); free-running runs equal for %d tokens" %
          (name, STEPS - flips, ties_greedy, ", %d more differ at a routing flip" % flips if flips else "", same),
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reel", default=os.path.join("build", "tools", "reel"))
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--keep", help="save the checkpoints under this directory")
    ap.add_argument("--only", help="run one configuration by name")
    args = ap.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        print("hf_check: SKIP: %s" % e)
        return 77
    if not torch.cuda.is_available():
        print("hf_check: SKIP: no CUDA device")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if not os.access(args.reel, os.X_OK):
        fail("no reel binary at %s (--reel)" % args.reel)
    print("hf_check: transformers %s, torch %s, %s" % (transformers.__version__, torch.__version__,
                                                      torch.cuda.get_device_name()), flush=True)
    classes = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
               "qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM", "mixtral": "MixtralForCausalLM",
               "deepseek_v3": "DeepseekV3ForCausalLM"}
    skipped, failed = [], []
    for i, (name, kind, dtype, extra) in enumerate(CONFIGS):
        if args.only and args.only != name:
            continue
        if not hasattr(transformers, classes[kind]):
            print("%-22s SKIP: transformers %s has no %s" % (name, transformers.__version__, classes[kind]),
                  flush=True)
            skipped.append(name)
            continue
        try:  # every configuration runs; a failure is said as it happens and counted
            check(name, kind, dtype, extra, args, 1234 + i)
        except SystemExit:
            failed.append(name)
    if skipped:
        print("hf_check: skipped %s" % ", ".join(skipped))
    if failed:
        print("hf_check: FAILED %s" % ", ".join(failed))
        return 1
    print("hf_check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

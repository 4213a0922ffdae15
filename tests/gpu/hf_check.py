#!/usr/bin/env python3
"""reel against transformers on Hugging Face checkpoints of each family the
models layer builds (GPU machine).

For each configuration it builds a small randomly initialised model with
transformers (LlamaForCausalLM, plain and with llama3 rope scaling,
MistralForCausalLM, Qwen2ForCausalLM with its q/k/v biases,
Qwen3ForCausalLM with its q/k norms and an explicit head_dim, plain and
with yarn rope scaling), saves it with save_pretrained(safe_serialization=
True), runs `reel demo --model DIR --prompt ... --generate 32 --logits FILE`
(reel's models layer: include/reel/models.h), and checks
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
table moves the logits by far more than the tolerance. A configuration
whose model class this transformers lacks (Qwen3 before 4.51) is skipped
and said so. Nothing is downloaded. Exits 1 and says what differed on any
failure, 77 (skip) when torch, transformers or a GPU is missing.

Usage: tests/gpu/hf_check.py [--reel build/tools/reel] [--backend cuda] [--keep DIR]
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

RTOL = {"bfloat16": 0.04, "float16": 0.02, "float32": 1e-3}

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
    else:
        cfg = tf.Qwen3Config(use_sliding_window=False, **kw)
        cls = tf.Qwen3ForCausalLM
    torch.manual_seed(seed)
    model = cls(cfg)
    if kind == "qwen2":  # biases are zero-initialised: make them count
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0.0, 0.5)
    with torch.no_grad():  # the norms start at 1: make their weights count too
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
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


def check(name, kind, dtype, extra, args, seed):
    import torch
    model = build_model(kind, dtype, extra, seed)
    d = os.path.join(args.keep or tempfile.mkdtemp(prefix="reel-hf-"), name)
    model.save_pretrained(d, safe_serialization=True)
    hf_tokens, hf_logits = hf_greedy(model)
    logits_path = os.path.join(d, "reel-logits.bin")
    reel_tokens, out = run_reel(args.reel, args.backend, d, logits_path)
    rows = len(PROMPT) + STEPS - 1
    rl = read_logits(logits_path, rows, SHAPE["vocab_size"])
    if len(reel_tokens) != STEPS:
        fail("%s: reel generated %d tokens, expected %d" % (name, len(reel_tokens), STEPS))
    # Logits on the same history: transformers teacher-forced on reel's tokens
    # (after a tie the two greedy runs feed different tokens, and their later
    # rows are not comparable).
    with torch.no_grad():
        ids = torch.tensor([PROMPT + reel_tokens[:-1]], device="cuda")
        hf_on_reel = model(ids).logits[0].float()
    scale = float(hf_on_reel.abs().max())
    diff = (rl - hf_on_reel).abs()
    err = float(diff.max())
    rel = err / scale
    worst_row = int(diff.max(dim=1).values.argmax())
    print("%-18s logits max |reel - hf| %.4g (%.3g of max |logit| %.3g, worst row %d), tolerance %.3g" %
          (name, err, rel, scale, worst_row, RTOL[dtype]), flush=True)
    if not rel <= RTOL[dtype]:
        fail("%s: logits differ by %.3g of their scale (tolerance %.3g)" % (name, rel, RTOL[dtype]))
    # Greedy tokens: reel's pick is transformers' argmax on the same history,
    # except where transformers' own top two are closer than the tolerance
    # (a tie at this precision: either pick is greedy).
    ties = 0
    for k in range(STEPS):
        row = hf_on_reel[len(PROMPT) - 1 + k]
        top2 = torch.topk(row, 2)
        best = int(top2.indices[0])
        margin = float(top2.values[0] - top2.values[1])
        if reel_tokens[k] == best:
            continue
        if margin <= 2 * RTOL[dtype] * scale and float(row[reel_tokens[k]]) >= float(top2.values[1]):
            ties += 1
            continue
        fail("%s: greedy token %d differs: reel %d, transformers %d on the same history (top-2 margin %.4g)\n"
             "  reel: %s\n  hf free-running: %s" % (name, k, reel_tokens[k], best, margin, reel_tokens, hf_tokens))
    same = next((i for i in range(STEPS) if reel_tokens[i] != hf_tokens[i]), STEPS)
    print("%-18s %d greedy tokens agree (%d at a tie within tolerance); free-running runs equal for %d tokens" %
          (name, STEPS, ties, same), flush=True)


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
               "qwen3": "Qwen3ForCausalLM"}
    skipped = []
    for i, (name, kind, dtype, extra) in enumerate(CONFIGS):
        if args.only and args.only != name:
            continue
        if not hasattr(transformers, classes[kind]):
            print("%-18s SKIP: transformers %s has no %s" % (name, transformers.__version__, classes[kind]),
                  flush=True)
            skipped.append(name)
            continue
        check(name, kind, dtype, extra, args, 1234 + i)
    if skipped:
        print("hf_check: skipped %s" % ", ".join(skipped))
    print("hf_check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())

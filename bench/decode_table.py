"""Markdown tables of the decode benchmark from its CSVs (bench/torch_model.py's rows:
`bench/gpu.sh matrix`, one CSV a device call when the hidden sizes ran in separate
calls; `bench/gpu.sh shapes`, one CSV a model shape).

    python3 bench/decode_table.py bench/results/decode-matrix_h200_2026-12-06_674cb1c.csv   # prints
    python3 bench/decode_table.py CSV... --into docs/benchmarks.md      # replaces the
        block between <!-- decode-matrix:begin --> and <!-- decode-matrix:end -->
    python3 bench/decode_table.py --headline decode-shapes-*.csv        # the headline only
    python3 bench/decode_table.py CSV... --headline-into docs/benchmarks.md   # replaces the
        block between <!-- decode-shapes:begin --> and <!-- decode-shapes:end -->

The headline (rows with a model shape, issue 48): per shape, every (batch, context)
with reel's replay and torch.compile + graph (host wall of a serving-loop step, ms),
their ratio, the floor ((weights + K/V bytes) / the copy bandwidth bench_decode
measured) and reel over it, the attention PyTorch ran there; the points that do not
fit the device, per context; then the issue's targets, each met or missed by how
much. A mixture-of-experts shape (issue 44: qwen3-30b-a3b, mixtral-8x7b; `bench/gpu.sh
moe`) has both of bench_decode's floors (the experts B tokens are expected to choose,
and every expert) and reel over each, the experts' formulation PyTorch ran beside its
attention, and issue 44's targets (batch 1 within 1.5x the floor, every batch within
0.7x torch.compile + graph). The full tables: step time per point (host wall and GPU, every variant, the
floor and the ratios), then per (model, context) the compile and capture time of all
buckets and the memory of the plans against PyTorch's graph pools, then issue 8's
targets (for the hidden-size matrix). Standard library only.
"""
import argparse
import csv
import re
import sys

BEGIN, END = "<!-- decode-matrix:begin -->", "<!-- decode-matrix:end -->"
HBEGIN, HEND = "<!-- decode-shapes:begin -->", "<!-- decode-shapes:end -->"
SHAPES = {"llama-3.2-1b": "Llama-3.2-1B", "llama-3.1-8b": "Llama-3.1-8B", "qwen2.5-7b": "Qwen2.5-7B",
          "qwen3-30b-a3b": "Qwen3-30B-A3B", "mixtral-8x7b": "Mixtral-8x7B", "toy": "toy"}
# issue 48's batch-1 floor targets
FLOOR_B1 = {"llama-3.2-1b": 1.4, "llama-3.1-8b": 1.25, "qwen2.5-7b": 1.25}
# the mixture-of-experts shapes (issue 44): the real model's layers (bench_decode runs fewer)
MOE_REAL_LAYERS = {"qwen3-30b-a3b": 48, "mixtral-8x7b": 32}
# issue 44's targets: reel / floor (the chosen experts') at batch 1, reel / torch.compile + graph at every batch
MOE_FLOOR_B1, MOE_OVER_COMPILE = 1.5, 0.7


def num(r, k):
    v = r.get(k, "")
    try:
        return float(v) if v not in ("", None) else None
    except ValueError:
        return None


def f(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}"


def ratio(a, b):
    return a / b if a is not None and b else None


def mib(v):
    return "-" if v is None or v < 0 else f"{v / 2**20:.1f}"


def shaped(rows):
    """Rows of the model shapes (bench_decode --shape), not the hidden-size matrix."""
    return any(r.get("shape") not in (None, "", "custom", "checkpoint") for r in rows)


def is_moe(r):
    """A row of a mixture-of-experts model (torch_model.py's experts column)."""
    return (num(r, "experts") or 0) > 0 or r.get("shape") in MOE_REAL_LAYERS


def floor_cell(r, key="floor_us", scale=1.0, nd=1):
    """The floor; a MoE row's as 'expected / all experts'."""
    v = lambda k: None if num(r, k) is None else num(r, k) / scale
    return f(v(key), nd) + (f" / {f(v('floor_all_us'), nd)}" if is_moe(r) and num(r, "floor_all_us") else "")


def model(r):
    """A row's model: its shape's name, else its hidden size."""
    sh = r.get("shape")
    return SHAPES.get(sh, sh) if sh not in (None, "", "custom", "checkpoint") else r["hidden"]


def tables(rows):
    out = []
    skipped = [r for r in rows if r.get("skipped")]
    rows = [r for r in rows if not r.get("skipped")]
    if not rows:
        return "no point ran: " + ", ".join(f"{model(r)} b{r['batch']} c{r['context']}" for r in skipped)
    r0 = rows[0]
    what = (f"{r0['layers']} layers, 16 heads, ffn 4 x hidden, vocab {r0['vocab']}, bf16" if not shaped(rows) else
            "the model shapes of the headline, bf16")
    col = "model" if shaped(rows) else "hidden"
    out.append(f"{r0['machine']} (driver {r0['driver']}, CUDA {r0['cuda']}), PyTorch {r0['torch']}, {r0['date']}; "
               f"{what}; medians of "
               f"{r0['steps']} steps. wall: host time of a serving-loop step (ids up, step, next ids back); "
               f"gpu: CUDA events around it. floor: (weights + K/V read) / " +
               (f"{float(r0['floor_tbps']):.2f} TB/s (the device's copy bandwidth, measured by bench_decode)."
                if r0.get("floor_tbps") else "4.25 TB/s (the H200's copy bandwidth)."))
    out.append("")
    out.append(f"| {col} | batch | context | reel replay wall / gpu us | reel eager wall / gpu us | "
               "torch eager wall / gpu us | torch graph wall / gpu us | torch.compile + graph wall / gpu us | "
               f"floor us{' (MoE: expected / all experts)' if any(is_moe(r) for r in rows) else ''} | "
               "replay / compile | replay / floor | reel eager / torch eager | ids agree (near-tie) | "
               "max logit diff |")
    out.append("| " + " | ".join(["---"] * 14) + " |")
    for r in rows:
        te = f(num(r, "torch_eager_us"))
        if r.get("torch_eager_steps") and r["torch_eager_steps"] != r["steps"]:
            te += f" ({r['torch_eager_steps']} steps)"
        out.append(
            f"| {model(r)} | {r['batch']} | {r['context']} | {f(num(r, 'reel_replay_us'))} / "
            f"{f(num(r, 'reel_replay_gpu_us'))} | {f(num(r, 'reel_eager_us'))} / {f(num(r, 'reel_eager_gpu_us'))} | "
            f"{te} / {f(num(r, 'torch_eager_gpu_us'))} | {f(num(r, 'torch_graph_us'))} / "
            f"{f(num(r, 'torch_graph_gpu_us'))} | {f(num(r, 'torch_compile_us'))} / "
            f"{f(num(r, 'torch_compile_gpu_us'))} | {floor_cell(r)} | "
            f"{f(num(r, 'replay_over_compile'), 2)} | {f(num(r, 'replay_over_floor'), 2)} | "
            f"{f(num(r, 'eager_over_torch_eager'), 2)} | {f(num(r, 'ids_agree'), 3)} "
            f"({f(num(r, 'ids_near_agree'), 3)}) | {f(num(r, 'max_logit_diff'), 4)} |")
    out.append("")
    out.append("Compile and capture of every bucket (reel: reel_compile of the replay plan, all its graphs; "
               "PyTorch: warm-up + capture of a graph per batch, torch.compile's compile in its warm-up) and "
               "device memory besides weights and KV cache (reel: the arena, the step region, and what the plan "
               "took on the device beyond params and states at compile, cudaMemGetInfo; PyTorch: the pool's "
               "bytes, torch.cuda.memory_reserved across the captures):")
    out.append("")
    out.append(f"| {col} | context | reel compile ms (capture ms) | torch graph capture s | torch.compile + capture s "
               "(capture blocks s) | reel arena MiB | reel static MiB | reel device MiB beyond params and "
               "states | reel graph-node memory MiB | torch graph pool MiB | torch.compile pool MiB |")
    out.append("| " + " | ".join(["---"] * 11) + " |")
    seen = set()
    for r in rows:
        k = (model(r), r["context"])
        if k in seen:
            continue
        seen.add(k)
        out.append(
            f"| {model(r)} | {r['context']} | {f(num(r, 'reel_compile_ms'), 0)} ({f(num(r, 'reel_capture_ms'), 0)}) "
            f"| {f(num(r, 'torch_graph_capture_s'), 2)} | {f(num(r, 'torch_compile_capture_s'), 1)} "
            f"({f(num(r, 'torch_compile_capture_only_s'), 2)}) | {mib(num(r, 'reel_arena_bytes'))} | "
            f"{mib(num(r, 'reel_static_bytes'))} | {mib(num(r, 'reel_dev_other_bytes'))} | "
            f"{mib(num(r, 'reel_graph_mem_reserved'))} | {mib(num(r, 'torch_graph_pool_bytes'))} | "
            f"{mib(num(r, 'torch_compile_pool_bytes'))} |")
    once = sorted({mib(num(r, "reel_process_once_bytes")) for r in rows if num(r, "reel_process_once_bytes") is not None})
    if once:
        out.append("")
        out.append("reel once a process, before any plan (the context's cuBLAS handle and cuBLAS's first kernels, "
                   f"not in the column beyond params and states): {', '.join(once)} MiB")
    if skipped:
        out.append("")
        out.append("Not run, not fitting the device: " + ", ".join(
            f"{model(r)} batch {r['batch']} context {r['context']}" for r in skipped))
    if not shaped(rows):
        out.append("")
        out.extend(targets(rows))
    return "\n".join(out)


def gb_of(reason, what):
    """'needs 95.1 GB' or '79.1 GB free' out of bench_decode's skip reason."""
    m = re.search(r"needs ([0-9.]+) GB" if what == "need" else r"([0-9.]+) GB free", reason or "")
    return m.group(1) if m else None


def headline(rows):
    """Issue 48's headline: per shape, every point's reel replay and
    torch.compile + graph (host wall, ms), their ratio, the floor, reel over
    the floor, PyTorch's attention; what does not fit; the targets."""
    rows = [r for r in rows if r.get("shape") not in (None, "", "custom", "checkpoint")]
    if not rows:
        return "no rows of a model shape (bench_decode --shape)"
    ran = [r for r in rows if not r.get("skipped")]
    r0 = ran[0] if ran else rows[0]
    tbps = {r.get("floor_tbps") for r in ran if r.get("floor_tbps")}
    floor = (f"{float(min(tbps)):.2f} TB/s" if len(tbps) == 1 else
             f"{min(float(t) for t in tbps):.2f}-{max(float(t) for t in tbps):.2f} TB/s") if tbps else "4.25 TB/s (not measured)"
    out = [f"{r0['machine']} (driver {r0['driver']}, CUDA {r0['cuda']}), PyTorch {r0['torch']}, {r0['date']}; random "
           f"bf16 weights written as Hugging Face checkpoints, read by both sides; medians of {r0['steps']} steps. "
           "ms: host wall of a serving-loop step (ids up, step, next ids back). reel: replay of its captured graph; "
           "torch: torch.compile + hand-captured CUDA graph, attention (last column) the fastest at the point of SDPA's "
           "backends (K/V never expanded: grouped query heads or enable_gqa) and flex_attention. floor: (weights + "
           f"K/V bytes read) / the copy bandwidth bench_decode measured ({floor})."]
    if any(is_moe(r) for r in rows):
        out[0] += (" Mixture of experts (issue 44): layers reduced to fit the card; the seeded routers spread tokens "
                   "over the experts about uniformly. Two floors: 'expected' reads the dense weights (attention, "
                   "norms, routers, lm head) and the experts B tokens are expected to choose, each k of E uniformly: "
                   "E (1 - (1 - k/E)^B) a layer (exact at batch 1: the k chosen, the issue's floor); 'all' reads every "
                   "expert. torch's experts (last column, after the attention): the faster at the point of gathering "
                   "each token's experts (index_select + bmm) and every expert on every token under a routing mask "
                   "(one GEMM + bmm); transformers' loop over experts cannot be captured (eager only).")
    order = list(SHAPES)
    shapes = sorted({r["shape"] for r in rows}, key=lambda x: (order.index(x) if x in order else len(order), x))
    for sh in shapes:
        rs = sorted((r for r in rows if r["shape"] == sh), key=lambda r: (int(r["context"]), int(r["batch"])))
        r = next((x for x in rs if not x.get("skipped")), rs[0])
        moe = any(is_moe(x) for x in rs)
        ncol = 10 if moe else 8
        out.append("")
        if moe:
            real = MOE_REAL_LAYERS.get(sh)
            out.append(f"**{SHAPES.get(sh, sh)}**: {r['layers']}{f' of its {real}' if real else ''} layers, hidden "
                       f"{r['hidden']}, {r['heads']} / {r['kv_heads']} heads of {r['head_dim']}, "
                       f"{r.get('experts') or '?'} experts of ffn {r.get('expert_ffn') or '?'}, "
                       f"{r.get('experts_per_token') or '?'} a token, vocab {r['vocab']}")
        else:
            out.append(f"**{SHAPES.get(sh, sh)}**: {r['layers']} layers, hidden {r['hidden']}, {r['heads']} / "
                       f"{r['kv_heads']} heads of {r['head_dim']}, ffn {r['ffn']}, vocab {r['vocab']}")
        out.append("")
        if moe:
            out.append("| batch | context | reel replay ms | torch.compile + graph ms | reel / torch | floor ms "
                       "(expected experts) | floor ms (all experts) | reel / floor | reel / floor (all) | torch "
                       "attention; experts |")
        else:
            out.append("| batch | context | reel replay ms | torch.compile + graph ms | reel / torch | floor ms | "
                       "reel / floor | torch attention |")
        out.append("| " + " | ".join(["---"] * ncol) + " |")
        for C in sorted({int(x["context"]) for x in rs}):
            at = [x for x in rs if int(x["context"]) == C]
            for x in at:
                if x.get("skipped"):
                    continue
                ms = lambda k: None if num(x, k) is None else num(x, k) / 1e3
                cells = [x["batch"], str(C), f(ms("reel_replay_us"), 3), f(ms("torch_compile_us"), 3),
                         f(num(x, "replay_over_compile"), 2), f(ms("floor_us"), 3)]
                if moe:
                    cells += [f(ms("floor_all_us"), 3), f(num(x, "replay_over_floor"), 2),
                              f(num(x, "replay_over_floor_all"), 2),
                              f"{x.get('attn_compile') or '-'}; {x.get('moe_compile') or '-'}"]
                else:
                    cells += [f(num(x, "replay_over_floor"), 2), x.get("attn_compile") or "-"]
                out.append("| " + " | ".join(cells) + " |")
            sk = [x for x in at if x.get("skipped")]
            if sk:
                need = [gb_of(x["skipped"], "need") for x in sk]
                free = gb_of(sk[0]["skipped"], "free")
                span = need[0] if need[0] == need[-1] else f"{need[0]}-{need[-1]}"
                who = "PyTorch " if sk[0]["skipped"].startswith("PyTorch") else ""
                why = f"{who}needs {span} GB, {free} GB free" if need[0] and need[-1] and free else sk[0]["skipped"]
                out.append(f"| {', '.join(x['batch'] for x in sk)} | {C} | does not fit ({why}) |" + " |" * (ncol - 3))
        ok = [x for x in rs if not x.get("skipped")]
        out.append("")
        out.extend(moe_targets(ok) if moe else shape_targets(sh, ok))
    return "\n".join(out)


def shape_targets(sh, rows):
    """Issue 48's decode targets on one shape's rows: the worst point of each."""
    out = []

    def worst(pred, key, label, limit):
        pts = [(num(r, key), r) for r in rows if pred(r) and num(r, key) is not None]
        if not pts:
            out.append(f"- {label}: no data")
            return
        v, r = max(pts, key=lambda p: p[0])
        met = "met" if v <= limit else f"missed by {v / limit:.2f}x"
        out.append(f"- {label} <= {limit}: worst {v:.2f} (batch {r['batch']}, context {r['context']}): {met}")

    b = lambda r: int(r["batch"])
    worst(lambda r: b(r) <= 8, "replay_over_compile", "reel / torch.compile + graph at batch <= 8", 0.7)
    worst(lambda r: b(r) >= 16, "replay_over_compile", "reel / torch.compile + graph at batch >= 16", 0.9)
    if sh in FLOOR_B1:
        worst(lambda r: b(r) == 1, "replay_over_floor", "reel / floor at batch 1", FLOOR_B1[sh])
    bad = [r for r in rows if r.get("ok") != "1"]
    out.append(f"- agreement with PyTorch eager: {len(rows) - len(bad)} of {len(rows)} points"
               + ("" if not bad else ": not " + ", ".join(f"b{r['batch']} c{r['context']}" for r in bad)))
    return out


def moe_targets(rows):
    """Issue 44's decode targets on one MoE shape's rows: the worst point of each."""
    out = []

    def worst(pred, key, label, limit):
        pts = [(num(r, key), r) for r in rows if pred(r) and num(r, key) is not None]
        if not pts:
            out.append(f"- {label}: no data")
            return
        v, r = max(pts, key=lambda p: p[0])
        met = "met" if v <= limit else f"missed by {v / limit:.2f}x"
        out.append(f"- {label} <= {limit}: worst {v:.2f} (batch {r['batch']}, context {r['context']}): {met}")

    worst(lambda r: int(r["batch"]) == 1, "replay_over_floor",
          "reel / floor (the chosen experts, dense weights, K/V) at batch 1", MOE_FLOOR_B1)
    worst(lambda r: True, "replay_over_compile", "reel / torch.compile + graph at every batch", MOE_OVER_COMPILE)
    bad = [r for r in rows if r.get("ok") != "1"]
    out.append(f"- agreement with PyTorch eager (MoE: ids within the near-tie tolerance, logits mostly within it; "
               f"torch_model.py): {len(rows) - len(bad)} of {len(rows)} points"
               + ("" if not bad else ": not " + ", ".join(f"b{r['batch']} c{r['context']}" for r in bad)))
    return out


def targets(rows):
    """The issue's targets on these rows: the worst point of each, met or not."""
    out = ["Targets (issue 8), worst point of each:", ""]

    def worst(pred, key, label, limit):
        pts = [(num(r, key), r) for r in rows if pred(r) and num(r, key) is not None]
        if not pts:
            out.append(f"- {label}: no data")
            return
        v, r = max(pts, key=lambda p: p[0])
        met = "met" if v <= limit else f"missed by {v / limit:.2f}x"
        out.append(f"- {label} <= {limit}: worst {v:.2f} (hidden {r['hidden']}, batch {r['batch']}, context "
                   f"{r['context']}): {met}")

    b = lambda r: int(r["batch"])
    worst(lambda r: b(r) <= 8, "replay_over_compile", "reel replay / torch.compile + graph at batch <= 8", 0.5)
    worst(lambda r: True, "replay_over_compile", "reel replay / torch.compile + graph, every point", 1.0)
    worst(lambda r: b(r) == 1 and r["context"] == "2048", "replay_over_floor",
          "reel replay / floor at batch 1, context 2048", 2.0)
    worst(lambda r: b(r) == 64 and r["context"] == "2048", "replay_over_floor",
          "reel replay / floor at batch 64, context 2048", 1.3)
    worst(lambda r: True, "eager_over_torch_eager", "reel eager / torch eager", 0.7)
    mem = []
    for r in rows:
        a, p = num(r, "reel_dev_other_bytes"), num(r, "torch_compile_pool_bytes") or num(r, "torch_graph_pool_bytes")
        if a is not None and a >= 0 and p:
            mem.append((a / p, r))
    if mem:
        v, r = max(mem, key=lambda m: m[0])
        out.append(f"- reel's graph memory / PyTorch's graph pool <= 1.0: worst {v:.2f} (hidden {r['hidden']}, "
                   f"context {r['context']}): {'met' if v <= 1.0 else f'missed by {v:.2f}x'}")
    bad = [r for r in rows if r.get("ok") != "1"]
    out.append(f"- agreement: {len(rows) - len(bad)} of {len(rows)} points agree"
               + ("" if not bad else ": " + ", ".join(f"h{r['hidden']} b{r['batch']} c{r['context']}" for r in bad)))
    return out


def replace_block(path, begin, end, text, what, n):
    doc = open(path).read()
    if begin not in doc or end not in doc:
        sys.exit(f"{path}: no {begin} ... {end} block to replace")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    open(path, "w").write(head + begin + "\n" + text + "\n" + end + tail)
    print(f"{path}: {what} block replaced ({n} rows)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--into", help="a markdown file whose decode-matrix block is replaced by the full tables")
    ap.add_argument("--headline", action="store_true", help="print the shapes' headline table only")
    ap.add_argument("--headline-into", help="a markdown file whose decode-shapes block is replaced by the headline")
    a = ap.parse_args()
    rows = []
    for path in a.csv:
        with open(path, newline="") as fh:
            rows += list(csv.DictReader(fh))
    if not rows:
        sys.exit(f"{' '.join(a.csv)}: no rows")
    order = list(SHAPES)
    rows.sort(key=lambda r: (order.index(r["shape"]) if r.get("shape") in order else len(order), r.get("shape") or "",
                             int(r["hidden"]), int(r["context"]), int(r["batch"])))
    if a.headline_into:
        replace_block(a.headline_into, HBEGIN, HEND, headline(rows), "decode shapes", len(rows))
    if a.into:
        replace_block(a.into, BEGIN, END, tables(rows), "decode matrix", len(rows))
    if a.headline_into or a.into:
        return
    if a.headline:
        print(headline(rows))
    elif shaped(rows):
        print(headline(rows) + "\n\n" + tables(rows))
    else:
        print(tables(rows))


if __name__ == "__main__":
    main()

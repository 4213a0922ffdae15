"""Markdown tables of the decode matrix from its CSVs (`bench/gpu.sh matrix`; one CSV
a device call when the hidden sizes ran in separate calls).

    python3 bench/decode_table.py bench/results/decode-matrix_h200_2026-12-06_674cb1c.csv   # prints
    python3 bench/decode_table.py CSV... --into docs/benchmarks.md      # replaces the
        block between <!-- decode-matrix:begin --> and <!-- decode-matrix:end -->

Tables: step time per point (host wall and GPU, every variant, the floor and
the ratios the targets are written in), then per (hidden, context) the compile
and capture time of all buckets and the memory of the plans against PyTorch's
graph pools, then the targets, each met or missed by how much. Standard
library only.
"""
import argparse
import csv
import sys

BEGIN, END = "<!-- decode-matrix:begin -->", "<!-- decode-matrix:end -->"


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


def tables(rows):
    out = []
    r0 = rows[0]
    out.append(f"{r0['machine']} (driver {r0['driver']}, CUDA {r0['cuda']}), PyTorch {r0['torch']}, {r0['date']}; "
               f"{r0['layers']} layers, 16 heads, ffn 4 x hidden, vocab {r0['vocab']}, bf16; medians of "
               f"{r0['steps']} steps. wall: host time of a serving-loop step (ids up, step, next ids back); "
               f"gpu: CUDA events around it. floor: (weights + K/V read) / " +
               (f"{float(r0['floor_tbps']):.2f} TB/s (the device's copy bandwidth, measured by bench_decode)."
                if r0.get("floor_tbps") else "4.25 TB/s (the H200's copy bandwidth)."))
    out.append("")
    out.append("| hidden | batch | context | reel replay wall / gpu us | reel eager wall / gpu us | "
               "torch eager wall / gpu us | torch graph wall / gpu us | torch.compile + graph wall / gpu us | "
               "floor us | replay / compile | replay / floor | reel eager / torch eager | ids agree (near-tie) | "
               "max logit diff |")
    out.append("| " + " | ".join(["---"] * 14) + " |")
    for r in rows:
        te = f(num(r, "torch_eager_us"))
        if r.get("torch_eager_steps") and r["torch_eager_steps"] != r["steps"]:
            te += f" ({r['torch_eager_steps']} steps)"
        out.append(
            f"| {r['hidden']} | {r['batch']} | {r['context']} | {f(num(r, 'reel_replay_us'))} / "
            f"{f(num(r, 'reel_replay_gpu_us'))} | {f(num(r, 'reel_eager_us'))} / {f(num(r, 'reel_eager_gpu_us'))} | "
            f"{te} / {f(num(r, 'torch_eager_gpu_us'))} | {f(num(r, 'torch_graph_us'))} / "
            f"{f(num(r, 'torch_graph_gpu_us'))} | {f(num(r, 'torch_compile_us'))} / "
            f"{f(num(r, 'torch_compile_gpu_us'))} | {f(num(r, 'floor_us'))} | "
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
    out.append("| hidden | context | reel compile ms (capture ms) | torch graph capture s | torch.compile + capture s "
               "(capture blocks s) | reel arena MiB | reel static MiB | reel device MiB beyond params and "
               "states | reel graph-node memory MiB | torch graph pool MiB | torch.compile pool MiB |")
    out.append("| " + " | ".join(["---"] * 11) + " |")
    seen = set()
    for r in rows:
        k = (r["hidden"], r["context"])
        if k in seen:
            continue
        seen.add(k)
        out.append(
            f"| {r['hidden']} | {r['context']} | {f(num(r, 'reel_compile_ms'), 0)} ({f(num(r, 'reel_capture_ms'), 0)}) "
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
    out.append("")
    out.extend(targets(rows))
    return "\n".join(out)


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--into", help="a markdown file whose decode-matrix block is replaced")
    a = ap.parse_args()
    rows = []
    for path in a.csv:
        with open(path, newline="") as fh:
            rows += list(csv.DictReader(fh))
    if not rows:
        sys.exit(f"{' '.join(a.csv)}: no rows")
    rows.sort(key=lambda r: (int(r["hidden"]), int(r["context"]), int(r["batch"])))
    text = tables(rows)
    if not a.into:
        print(text)
        return
    doc = open(a.into).read()
    if BEGIN not in doc or END not in doc:
        sys.exit(f"{a.into}: no {BEGIN} ... {END} block to replace")
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    open(a.into, "w").write(head + BEGIN + "\n" + text + "\n" + END + tail)
    print(f"{a.into}: decode matrix block replaced ({len(rows)} rows)")


if __name__ == "__main__":
    main()

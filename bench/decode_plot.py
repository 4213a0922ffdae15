"""Plots of the decode matrix from its CSVs (`bench/gpu.sh matrix`): for each
hidden size, step time against batch, one panel per context, host wall on the
top row and GPU time below, every variant, and the bandwidth floor dashed.

    python3 bench/decode_plot.py bench/results/decode-matrix_h200_2026-12-06_674cb1c.csv --out docs/img

writes decode_matrix_h<hidden>.png there. Needs matplotlib (Agg backend).
"""
import argparse
import csv
import os
import sys

VARIANTS = [("reel_replay", "reel replay", "C0", "-"), ("reel_eager", "reel eager", "C0", ":"),
            ("torch_eager", "torch eager", "C3", ":"), ("torch_graph", "torch CUDA graph", "C2", "--"),
            ("torch_compile", "torch.compile + graph", "C1", "-")]


def num(v):
    try:
        return float(v) if v not in ("", None) else None
    except ValueError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("decode_plot.py: matplotlib is not installed (Debian: apt-get install python3-matplotlib)")
    rows = []
    for path in a.csv:
        with open(path, newline="") as fh:
            rows += list(csv.DictReader(fh))
    if not rows:
        sys.exit(f"{' '.join(a.csv)}: no rows")
    os.makedirs(a.out, exist_ok=True)
    for h in sorted({int(r["hidden"]) for r in rows}):
        hr = [r for r in rows if int(r["hidden"]) == h]
        ctxs = sorted({int(r["context"]) for r in hr})
        fig, axes = plt.subplots(2, len(ctxs), figsize=(4.2 * len(ctxs), 7), squeeze=False, sharex=True)
        for j, c in enumerate(ctxs):
            pts = sorted((r for r in hr if int(r["context"]) == c), key=lambda r: int(r["batch"]))
            bs = [int(r["batch"]) for r in pts]
            for i, timing in enumerate(("us", "gpu_us")):
                ax = axes[i][j]
                for key, label, color, style in VARIANTS:
                    ys = [num(r.get(f"{key}_{timing}")) for r in pts]
                    xy = [(b, y) for b, y in zip(bs, ys) if y is not None]
                    if xy:
                        ax.plot(*zip(*xy), style, color=color, marker="o", ms=3, label=label)
                ax.plot(bs, [num(r["floor_us"]) for r in pts], "--", color="k", lw=1, label="bandwidth floor")
                ax.set_xscale("log", base=2)
                ax.set_yscale("log")
                ax.set_xticks(bs)
                ax.set_xticklabels([str(b) for b in bs])
                ax.grid(True, which="both", alpha=0.3)
                ax.set_title(f"context {c}, {'host wall' if timing == 'us' else 'GPU time'}", fontsize=10)
                if j == 0:
                    ax.set_ylabel("us per decode step")
                if i == 1:
                    ax.set_xlabel("batch")
        axes[0][0].legend(fontsize=7)
        r0 = hr[0]
        fig.suptitle(f"decode step, {r0['layers']} layers, hidden {h}, bf16: reel vs PyTorch on {r0['machine']} "
                     f"({r0['date']})", fontsize=11)
        fig.tight_layout()
        path = os.path.join(a.out, f"decode_matrix_h{h}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(f"decode_plot.py: {path}")


if __name__ == "__main__":
    main()

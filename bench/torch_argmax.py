"""torch.argmax on the shapes of bench/argmax.cu (rows x vocab of bf16
logits), timed the same way: a torch.cuda.CUDAGraph of L launches, the
median over replays of CUDA-event time per launch. hot: the same logits
every launch (in L2); cold: rotating over copies larger than L2 together.
Each result is checked against torch.argmax on the host (lowest index of
the maximum). Run on the GPU machine beside bench_argmax:
    python3 bench/torch_argmax.py [replays]
"""
import sys
import time

import torch

from torch_graph_timer import time_graph


def main():
    replays = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    print(f"# torch_argmax: PyTorch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {replays} replays a timing\n")
    print("| rows | vocab | KB | torch hot us | torch cold us | cold TB/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    failed = False
    gen = torch.Generator(device="cuda").manual_seed(11)
    for vocab in (32000, 128256, 151936):
        for rows in (1, 8, 64):
            nbytes = rows * vocab * 2
            ncopies = max(2, (150 << 20) // nbytes + 1)
            xs = [(torch.rand(rows, vocab, device="cuda", generator=gen) * 2 - 1).to(torch.bfloat16)
                  for _ in range(ncopies)]
            outs = [None] * max(ncopies, 20)

            def hot(i):
                outs[i] = torch.argmax(xs[0], dim=-1)

            def cold(i):
                outs[i] = torch.argmax(xs[i % ncopies], dim=-1)

            t_hot = time_graph(hot, 20, replays)
            n_cold = max(ncopies, 20)
            t_cold = time_graph(cold, n_cold, replays)
            torch.cuda.synchronize()
            ref = torch.argmax(xs[(n_cold - 1) % ncopies].cpu().float(), dim=-1)
            ok = torch.equal(outs[n_cold - 1].cpu(), ref)
            failed |= not ok
            print(f"| {rows} | {vocab} | {nbytes / 1024:.0f} | {t_hot:.2f} | {t_cold:.2f} | "
                  f"{nbytes / (t_cold * 1e-6) / 1e12:.2f} |{'' if ok else ' MISMATCH'}")
            del xs, outs
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

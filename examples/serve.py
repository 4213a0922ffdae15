#!/usr/bin/env python3
"""A serving loop in Python over reel (docs/python.md): requests arrive, are
prefilled in one step each, and decode together in continuous batches; when
no request is waiting, the running ones decode in bursts of reel_step_n
(many steps in one launch, docs/loop.md). Prints each request's tokens.

  serve.py CHECKPOINT_DIR [--backend host|cuda] [--requests 6] [--generate 16] [--burst 8]
"""
import argparse

import numpy as np

import reel

BS = 16  # KV block size


class Request:
    def __init__(self, rid, prompt, n, blocks):
        self.id, self.prompt, self.n, self.blocks = rid, prompt, n, blocks
        self.out = []
        self.ctx = 0  # tokens in the cache

    def slot(self, pos):
        return self.blocks[pos // BS] * BS + pos % BS


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--generate", type=int, default=16)
    ap.add_argument("--burst", type=int, default=8)
    a = ap.parse_args()

    ctx = reel.Context(a.backend)
    m = reel.Model.open(ctx, a.model)
    vocab = m.info()["vocab"]
    max_ctx, seqs = 256, 8
    stride = max_ctx // BS
    plan = m.compile(buckets=[1, 2, 4, 8, 16, 32, 64], max_context=max_ctx, max_seqs=seqs, block_size=BS,
                     num_blocks=seqs * stride)
    m.close()
    free = list(range(seqs * stride))
    rng = np.random.default_rng(1)
    waiting = [Request(i, [int(x) for x in rng.integers(0, vocab, 4 + 3 * i)], a.generate, None)
               for i in range(a.requests)]
    running, done = [], []
    while waiting or running:
        if waiting and len(running) < seqs:  # admit one: a prefill step of its whole prompt
            r = waiting.pop(0)
            need = (len(r.prompt) + r.n + BS - 1) // BS
            r.blocks, free = free[:need], free[need:]
            T = len(r.prompt)
            plan.set_input("tokens", np.array(r.prompt, np.int32))
            plan.step(num_tokens=T, num_seqs=1, query_start=[0, T], positions=list(range(T)),
                      slot_mapping=[r.slot(p) for p in range(T)], context_lens=[T],
                      block_tables=[r.blocks + [-1] * (stride - len(r.blocks))])
            r.ctx = T
            r.out.append(plan.output("next_token").tolist()[-1])
            running.append(r)
            continue
        B = len(running)
        info = dict(num_tokens=B, num_seqs=B, query_start=list(range(B + 1)),
                    positions=[r.ctx for r in running], slot_mapping=[r.slot(r.ctx) for r in running],
                    context_lens=[r.ctx + 1 for r in running],
                    block_tables=[r.blocks + [-1] * (stride - len(r.blocks)) for r in running])
        plan.set_input("tokens", np.array([r.out[-1] for r in running], np.int32))
        if not waiting and a.burst > 1:  # nobody to admit: a burst in one launch
            left = [r.n - len(r.out) for r in running]
            rows, steps = plan.step_n(a.burst, "tokens", "next_token", max_new_tokens=left, **info)
            for q, r in enumerate(running):
                r.out += [rows[i][q] for i in range(steps[q])]
                r.ctx += steps[q]
        else:
            plan.step(**info)
            nxt = np.from_dlpack(plan.output("next_token"))
            for q, r in enumerate(running):
                r.out.append(int(nxt[q]))
                r.ctx += 1
        for r in [r for r in running if len(r.out) >= r.n]:
            running.remove(r)
            free += r.blocks
            done.append(r)
    for r in sorted(done, key=lambda r: r.id):
        print("request %d: %s" % (r.id, " ".join(map(str, r.out))))
    st = plan.stats()
    print("steps %d (replays %d, in reel_step_n bursts %d)" % (st["steps"], st["replays"], st["loop_steps"]))
    plan.close()
    ctx.close()


if __name__ == "__main__":
    main()

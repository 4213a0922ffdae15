#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus_graph,
corpus_step and corpus_safetensors): small programs in each target's byte format, so libFuzzer
starts from graphs that compile and steps that run. Run from anywhere;
the files are committed (regenerate after changing a target's format)."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- fuzz_graph: indices into the target's tables --------------------------
DIM = {"T": 0, 0: 1, 1: 2, 2: 3, 3: 4, 4: 5, 8: 6, 16: 7, 32: 12, 64: 13, 7: 14, 5: 19, 6: 11, "huge": 16, "max": 17}
NAME = {n: i for i, n in enumerate("abcdef")}
F32, F16, BF16, I32 = 0, 1, 2, 3
TOK = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 8: 6, 16: 7, 17: 8, 33: 9, 64: 10, 100: 11}
BUCKET = {1: 0, 2: 1, 4: 2, 8: 3, 16: 4, 3: 5}
LIMIT = {"undef": 0, 0: 1, 1: 2, 4: 3, 8: 4, 16: 5, 64: 6}
META = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 7: 6, 8: 7, -1: 8, 16: 11}


class G:
    def __init__(self):
        self.b = []
        self.n = 0  # pool size
        self.kinds = []  # per leaf the fuzzer tracks: the bytes a step reads for it

    def leaf(self, kind, name, dt, dims, extra=(), refused=False):
        self.b += [kind, NAME[name], dt, len(dims)] + [DIM[d] for d in dims]
        if refused:  # the builder refuses it: nothing more is read
            return -1
        # a step sets an input (mode 0, fill byte), writes a deferred parameter (the same), keeps a state
        self.kinds.append([0, 3] if kind == 0 or (kind == 1 and 1 in extra) else [0])
        if kind == 0:
            self.b.append(0)  # dims not NULL
        if kind == 1:
            self.b += list(extra) or [0]  # 0: bind (then the data's fill byte), 1: defer
            if self.b[-1] == 0:
                self.b.append(3)
        self.n += 1
        return self.n - 1

    def inp(self, name, dims, dt=F32): return self.leaf(0, name, dt, dims)
    def param(self, name, dims, dt=F32, defer=False): return self.leaf(1, name, dt, dims, [1 if defer else 0])
    def state(self, name, dims, dt=F32): return self.leaf(2, name, dt, dims)

    def op(self, code, *args, results=1):
        self.b += [code] + list(args)
        self.n += results
        return self.n - 1

    def positions(self): return self.op(3)
    def out(self, name, t): self.b += [16, NAME[name], t]
    def stream(self, t, s): self.b += [20, t, s + 1]

    def compile(self, buckets=(1, 4, 16), ctx="undef", seqs="undef", flags=0):
        self.b += [23, 0, len(buckets) + 1] + [BUCKET[x] for x in buckets] + [0, LIMIT[ctx], LIMIT[seqs], flags]
        self.b.append(0)  # keep the graph

    def steps(self, steps, leaves):
        self.b.append(len(steps))
        for (tokens, seqs, have, arrays, stride, bt, tr) in steps:
            self.b += [TOK[tokens], TOK[seqs], have]
            self.b += arrays  # positions, query_start, slots, context_lens: mode byte (2: then values)
            self.b.append(stride + 1)
            self.b += bt  # block tables, the same way
            for k in self.kinds:
                self.b += k
            self.b += [tr, 0]

    def bytes(self): return bytes(x & 0xFF for x in self.b)


def simple_steps(tokens_list, leaves, tr=0):
    # positions given (have bit 1, mode 0: 0..n-1), no sequence arrays
    return [(t, 0, 1, [0], 0, [], tr) for t in tokens_list]


def graph_seeds():
    seeds = {}
    T4 = ["T", 4]
    g = G(); a = g.inp("a", T4); b = g.inp("b", T4); g.out("a", g.op(6, a, b)); g.compile()
    g.steps(simple_steps([1, 3, 17], 2), 2); seeds["add"] = g
    g = G(); a = g.inp("a", T4); w = g.param("b", [4]); g.out("a", g.op(7, a, w)); g.compile(flags=1)
    g.steps(simple_steps([2, 33], 1), 1); seeds["mul_row_strict"] = g
    g = G(); a = g.inp("a", T4); w = g.param("b", [4, 8]); g.out("a", g.op(5, a, w, 0)); g.compile(buckets=(2, 8))
    g.steps(simple_steps([2, 5], 1, tr=3), 1); seeds["matmul_trace_trim"] = g
    g = G(); a = g.inp("a", T4); w = g.param("b", [8, 4]); g.out("a", g.op(5, a, w, 1)); g.compile(flags=2)
    g.steps(simple_steps([4], 1), 1); seeds["matmul_t_nocapture"] = g
    g = G(); a = g.inp("a", T4); w = g.param("b", [4], defer=True); g.out("a", g.op(8, a, w, 0)); g.compile()
    g.steps(simple_steps([3, 3], 1), 2); seeds["rmsnorm_deferred"] = g
    g = G(); a = g.inp("a", ["T", 8]); g.out("a", g.op(9, a)); g.compile(flags=4)
    g.steps(simple_steps([4, 1], 1), 1); seeds["silu_hazards"] = g
    g = G(); a = g.inp("a", ["T", 8]); p = g.positions(); g.out("a", g.op(10, a, p, META[4], META[4], 0)); g.compile()
    g.steps(simple_steps([4, 16], 1), 1); seeds["rope"] = g
    g = G(); a = g.inp("a", ["T", 16]); s = g.op(11, a); g.out("a", s); g.out("b", g.op(12, s)); g.compile()
    g.steps(simple_steps([1, 8], 1), 1); seeds["softmax_argmax"] = g
    g = G(); tab = g.param("a", [16, 4]); ids = g.inp("b", ["T"], I32); g.out("a", g.op(4, tab, ids)); g.compile()
    g.steps(simple_steps([3], 2), 2); seeds["embedding"] = g
    g = G(); a = g.inp("a", T4, F16); b = g.inp("b", T4, F16); g.out("a", g.op(6, a, b)); g.compile()
    g.steps(simple_steps([2], 2), 2); seeds["add_f16"] = g
    g = G(); a = g.inp("a", T4, BF16); w = g.param("c", [4], BF16); g.out("a", g.op(7, a, w)); g.compile()
    g.steps(simple_steps([5], 2), 2); seeds["mul_bf16"] = g
    # two streams joined
    g = G(); a = g.inp("a", T4); b = g.inp("b", T4); x = g.op(6, a, b); g.stream(x, 1); y = g.op(7, a, b)
    g.stream(y, 2); g.out("a", g.op(6, x, y)); g.compile(); g.steps(simple_steps([4, 9 - 1], 2), 2); seeds["streams"] = g
    # top-k with lengths, no page table
    g = G(); s = g.inp("a", ["T", 16]); ln = g.inp("b", ["T"], I32)
    g.out("a", g.op(14, s, ln, 255, META[4], META[1])); g.compile(); g.steps(simple_steps([2], 2), 2); seeds["topk"] = g
    g = G(); s = g.inp("a", ["T", 16]); ln = g.inp("b", ["T"], I32); pt = g.inp("c", ["T", 4], I32)
    g.out("a", g.op(14, s, ln, pt, META[4], META[4])); g.compile(); g.steps(simple_steps([2], 3), 3); seeds["topk_paged"] = g
    # lse_combine: outs [T, 2, 8], lses [T, 2, 2], 2 heads
    g = G(); o = g.inp("a", ["T", 2, 8]); l = g.inp("b", ["T", 2, 2])
    g.b += [15, o, l, META[2], 0]; g.n += 2; g.out("a", g.n - 2); g.out("b", g.n - 1); g.compile()
    g.steps(simple_steps([3], 2), 2); seeds["lse_combine"] = g
    # paged attention: q [T,8] (2 heads of 4), k v [T,4], caches [8,4,1,4]
    for name, steps in {
        # one sequence of 3 new tokens: query_start {0, 3}, positions and slots 0..2, context 3, blocks {0, 1}
        "attn_prefill": [(3, 1, 0x1f, [0, 2, META[0], META[3], 0, 2, META[3]], 2, [0], 0)],
        # then a decode token at position 3 (slot 3)
        "attn_prefill_decode": [(3, 1, 0x1f, [0, 2, META[0], META[3], 0, 2, META[3]], 2, [0], 0),
                                (1, 1, 0x1f, [2, META[3], 2, META[0], META[1], 2, META[3], 2, 4], 2, [0], 0)],
        "attn_garbage": [(4, 2, 0x1f, [2, 3, 1, 2, 16, 2, 0, 7, 8, 2, 1, 4, 2, 1, 3, 0], 3, [2, 5, 0, 1, 2, 3, 4, 5], 0)],
        "attn_eager": [(33, 2, 0x1f, [0, 0, 0, 0], 4, [0], 1)],
    }.items():
        g = G(); q = g.inp("a", ["T", 8]); k = g.inp("b", T4); v = g.inp("c", T4)
        kc = g.state("d", [8, 4, 1, 4]); vc = g.state("e", [8, 4, 1, 4])
        g.b += [13, q, k, v, kc, vc, META[2], META[1], META[4], META[4], 0, 0]; g.n += 1
        g.out("a", g.n - 1); g.compile(ctx=16, seqs=4); g.steps(steps, 5); seeds[name] = g
    # shapes that must be refused: zero and huge dims, a bad dtype, out of range handles
    g = G(); g.inp("a", ["T", 0]); g.leaf(1, "b", F32, ["huge", "huge"], refused=True)
    g.leaf(2, "c", F32, ["max", 4], refused=True); g.leaf(1, "d", F32, ["huge", 4, 4]); g.leaf(2, "e", F32, [64, "huge"]); g.compile(); seeds["zero_huge"] = g
    g = G(); g.leaf(0, "a", 4, ["T", 4]); g.out("a", 255); g.compile(); seeds["bad_dtype"] = g
    g = G(); a = g.inp("a", ["T", 0]); g.out("a", g.op(9, a)); g.compile(); g.steps(simple_steps([2], 1), 1); seeds["zero_width"] = g
    g = G(); a = g.inp("a", T4); g.out("a", a); g.compile(buckets=(4, 2)); seeds["buckets_descending"] = g
    g = G(); a = g.inp("a", T4); g.out("a", g.op(11, a)); g.compile(); g.steps(simple_steps([100, 64], 1), 1); seeds["past_buckets"] = g
    # found by fuzz_graph: op spans taken after tracing starts and before any
    # span (a refused first step) passed NULL to memmove (UBSan)
    g = G(); a = g.inp("a", T4); g.out("a", g.op(11, a)); g.compile()
    g.steps([(0, 0, 0, [], 0, [], 0x41)], 1); seeds["take_spans_before_any_span"] = g  # trace on, take 2
    return {k: v.bytes() for k, v in seeds.items()}


# ---- fuzz_step: num_tokens, num_seqs, stride, null mask, then arrays -------
def step_bytes(tokens, seqs, stride, qs, pos, slot, lens, bt, nulls=0):
    b = [tokens, seqs, stride, nulls]
    for arr in (qs, pos, slot, lens, bt):
        b += [(v + 1) & 0x3F for v in arr]  # small values: byte - 1
    return b


def step_seeds():
    s = {}
    s["prefill"] = [1] + step_bytes(3, 1, 4, [0, 3], [0, 1, 2], [0, 1, 2], [3], [0, 1, 2, 3])
    s["decode_two"] = [1] + step_bytes(2, 2, 2, [0, 1, 2], [4, 0], [4, 12], [5, 1], [0, 1, 3, 4])
    s["mixed"] = [1] + step_bytes(4, 2, 2, [0, 3, 4], [0, 1, 2, 5], [16, 17, 18, 5], [3, 6], [4, 5, 1, 0])
    s["slot_none"] = [1] + step_bytes(2, 1, 1, [0, 2], [0, 1], [-1, -1], [2], [0])
    s["dup_slots"] = [1] + step_bytes(2, 1, 1, [0, 2], [0, 1], [3, 3], [2], [0])
    s["bad_block"] = [1] + step_bytes(1, 1, 1, [0, 1], [0], [0], [1], [8])
    s["ctx_over"] = [1] + step_bytes(1, 1, 8, [0, 1], [17], [2], [18], [0, 1, 2, 3, 4, 5, 6, 7])
    s["qs_bad"] = [1] + step_bytes(3, 2, 1, [0, 2, 1], [0, 1, 0], [0, 1, 4], [2, 1], [0, 1])
    s["pos_past_ctx"] = [1] + step_bytes(1, 1, 1, [0, 1], [5], [5], [2], [1])
    s["stride_zero"] = [1] + step_bytes(1, 1, 0, [0, 1], [0], [0], [1], [0])
    s["nulls"] = [1] + step_bytes(2, 1, 1, [0, 2], [0, 1], [0, 1], [2], [0], nulls=0x1f)
    s["zero_tokens"] = [1] + step_bytes(0, 1, 1, [0, 0], [], [], [0], [0])
    s["eager_many"] = [1] + step_bytes(17, 1, 5, [0, 17], list(range(17)), list(range(17)), [17], [0, 1, 2, 3, 4])
    s["seqs_over"] = [1] + step_bytes(5, 5, 1, [0, 1, 2, 3, 4, 5], [0] * 5, [0, 4, 8, 12, 16], [1] * 5, [0, 1, 2, 3, 4])
    s["slot_past"] = [1] + step_bytes(1, 1, 1, [0, 1], [0], [32], [1], [0])
    s["four_steps"] = ([4] + step_bytes(2, 1, 2, [0, 2], [0, 1], [0, 1], [2], [0, 1]) +
                       step_bytes(1, 1, 2, [0, 1], [2], [2], [3], [0, 1]) +
                       step_bytes(1, 1, 2, [0, 1], [3], [9], [4], [0, 9]) +
                       step_bytes(1, 1, 2, [0, 1], [3], [3], [4], [0, 1]))
    return {k: bytes(x & 0xFF for x in v) for k, v in s.items()}


# ---- fuzz_safetensors: a mode byte, then a file (even) or an index and a shard (odd)
def st_file(tensors, meta=None, pad=True):
    """tensors: [(name, dtype, shape, data bytes)] stored back to back."""
    import json
    import struct
    h, at, blob = {}, 0, b""
    if meta is not None:
        h["__metadata__"] = meta
    for name, dt, shape, data in tensors:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + len(data)]}
        at += len(data)
        blob += data
    hj = json.dumps(h, separators=(",", ":")).encode()
    if pad:
        hj += b" " * (-len(hj) % 8)
    return struct.pack("<Q", len(hj)) + hj + blob


def safetensors_seeds():
    import struct
    f32 = lambda *v: struct.pack("<%df" % len(v), *v)
    w = ("w", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6))
    s = {
        "one_param": b"\0" + st_file([w], {"format": "pt"}),
        "mixed": b"\0" + st_file([w, ("b", "BF16", [2], b"\x80\x3f\x00\xc0"), ("n", "I64", [], b"\7" + b"\0" * 7),
                                  ("e", "F16", [0, 4], b"")]),
        "truncated": b"\0" + st_file([w])[:-5],
        "gap": b"\0" + st_file([w]) + b"xx",
        "bad_json": b"\0" + struct.pack("<Q", 6) + b'{"a":[',
    }
    index = b'{"metadata":{},"weight_map":{"w":"s.safetensors"}}'
    s["index"] = b"\1" + struct.pack(">H", len(index)) + index + st_file([w])
    wrong = b'{"weight_map":{"w":"t.safetensors"}}'
    s["index_wrong_shard"] = b"\1" + struct.pack(">H", len(wrong)) + wrong + st_file([w])
    return s


def write(folder, seeds):
    d = os.path.join(HERE, folder)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, "seed_" + name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write("corpus_graph", graph_seeds())
    write("corpus_step", step_seeds())
    write("corpus_safetensors", safetensors_seeds())

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
FLT = {1e-5: 0, 0.0: 1, -1.0: 2, 1e30: 3, 10000.0: 4, 0.5: 5, 1.0: 6}
STRICT, NO_CAPTURE, CHECK_HAZARDS, PDL, NO_FUSE = 1, 2, 4, 8, 32  # compile flags byte
SMALL_I32 = 0x45  # a fill byte: int32 data -1..7 (ids, lengths, page entries a step accepts)


class G:
    def __init__(self):
        self.b = []
        self.n = 0  # pool size
        self.kinds = []  # per leaf the fuzzer tracks: the bytes a step reads for it

    def leaf(self, kind, name, dt, dims, extra=(), refused=False, fill=3):
        self.b += [kind, NAME[name], dt, len(dims)] + [DIM[d] for d in dims]
        if refused:  # the builder refuses it: nothing more is read
            return -1
        # a step sets an input (mode 0, fill byte), writes a deferred parameter (the same), keeps a state
        self.kinds.append([0, fill] if kind == 0 or (kind == 1 and 1 in extra) else [0])
        if kind == 0:
            self.b.append(0)  # dims not NULL
        if kind == 1:
            self.b += list(extra) or [0]  # 0: bind (then the data's fill byte), 1: defer
            if self.b[-1] == 0:
                self.b.append(3)
        self.n += 1
        return self.n - 1

    def inp(self, name, dims, dt=F32, fill=3): return self.leaf(0, name, dt, dims, fill=fill)
    def param(self, name, dims, dt=F32, defer=False): return self.leaf(1, name, dt, dims, [1 if defer else 0])
    def state(self, name, dims, dt=F32): return self.leaf(2, name, dt, dims)

    def op(self, code, *args, results=1):
        self.b += [code] + list(args)
        self.n += results
        return self.n - 1

    def positions(self): return self.op(3)
    def matmul(self, x, w, t=0): return self.op(5, x, w, t)
    def add(self, a, b): return self.op(6, a, b)
    def rmsnorm(self, x, w): return self.op(8, x, w, FLT[1e-5])
    def rope(self, x, pos, hd=4, rd=4): return self.op(10, x, pos, META[hd], META[rd], FLT[10000.0])
    def view(self, x, col, n): return self.op(22, 0, x, 255, META[col], META[n])
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
    # ---- the differential oracles: each of these steps, so it runs again with no_capture and
    # with no_fuse flipped. One seed per fusion of runtime/fuse.c and fuse_rope.c (fused in
    # the run as given, not in the no_fuse run), steps in and past the buckets (17: eager).
    # matmul + add of a row (BIAS epilogue), both weight layouts, f32 and bf16
    for name, wt, dims, dt in (("fuse_matmul_bias", 0, [4, 8], F32), ("fuse_matmul_bias_t", 1, [8, 4], F32),
                               ("fuse_matmul_bias_bf16", 1, [8, 4], BF16)):
        g = G(); x = g.inp("a", T4, dt); w = g.param("b", dims, dt); bias = g.param("c", [8], dt)
        g.out("a", g.add(g.matmul(x, w, wt), bias)); g.compile(); g.steps(simple_steps([3, 17], 1), 1); seeds[name] = g
    # matmul [T, 8] + silu_and_mul (SILU_MUL epilogue)
    g = G(); x = g.inp("a", T4); w = g.param("b", [8, 4]); g.out("a", g.op(9, g.matmul(x, w, 1))); g.compile()
    g.steps(simple_steps([2, 17], 1), 1); seeds["fuse_matmul_silu"] = g
    # add + rmsnorm of the sum (add_rmsnorm), the sum an output too; f32 and bf16
    for name, dt in (("fuse_add_rmsnorm", F32), ("fuse_add_rmsnorm_bf16", BF16)):
        g = G(); a = g.inp("a", ["T", 8], dt); b = g.inp("b", ["T", 8], dt); w = g.param("c", [8], dt)
        sm = g.add(a, b); g.out("a", g.rmsnorm(sm, w)); g.out("b", sm); g.compile()
        g.steps(simple_steps([3, 17], 2), 2); seeds[name] = g
    # rmsnorm whose rows only a matmul reads (the RMSNORM prologue)
    g = G(); x = g.inp("a", ["T", 8]); w = g.param("b", [8]); m = g.param("c", [8, 4])
    g.out("a", g.matmul(g.rmsnorm(x, w), m)); g.compile(); g.steps(simple_steps([4, 1, 17], 1), 1)
    seeds["fuse_rmsnorm_matmul"] = g
    # add + rmsnorm + matmul (ADD_RMSNORM prologue), the sum read again after the matmul
    g = G(); a = g.inp("a", ["T", 8]); b = g.inp("b", ["T", 8]); w = g.param("c", [8]); m = g.param("d", [4, 8])
    sm = g.add(a, b); y = g.matmul(g.rmsnorm(sm, w), m, 1); g.out("a", g.add(y, g.op(9, sm))); g.compile()
    g.steps(simple_steps([3, 16], 2), 2); seeds["fuse_add_rmsnorm_matmul"] = g
    # a matmul whose every reader is a view, the views tiling its columns (3 segments)
    g = G(); x = g.inp("a", T4); w = g.param("b", [8, 4]); y = g.matmul(x, w, 1)
    v1 = g.view(y, 0, 3); v2 = g.view(y, 3, 4); v3 = g.view(y, 7, 1)
    g.out("a", v1); g.out("b", v2); g.out("c", v3); g.compile(); g.steps(simple_steps([2, 17], 1), 1)
    seeds["fuse_matmul_views"] = g
    # the same graph, no_fuse as given: the fused plan is the variant
    g = G(); x = g.inp("a", T4); w = g.param("b", [8, 4]); y = g.matmul(x, w, 1)
    g.out("a", g.view(y, 0, 4)); g.out("b", g.view(y, 4, 4)); g.compile(flags=NO_FUSE)
    g.steps(simple_steps([3], 1), 1); seeds["no_fuse_given_views"] = g
    # a layer: qkv matmul split by views, rope on q and k fused into the attention, o matmul
    # with a bias, add + rmsnorm; prefill of 3 then a decode (a bucket's replay and eager)
    attn_steps = [(3, 1, 0x1f, [0, 2, META[0], META[3], 0, 2, META[3]], 2, [0], 0),
                  (1, 1, 0x1f, [2, META[3], 2, META[0], META[1], 2, META[3], 2, 4], 2, [0], 0)]
    g = G(); h = g.inp("a", ["T", 8]); wqkv = g.param("b", [16, 8]); kc = g.state("c", [8, 4, 1, 4])
    vc = g.state("d", [8, 4, 1, 4]); wo = g.param("e", [8, 8]); bo = g.param("f", [8])
    kvq = g.matmul(h, wqkv, 1)  # [T, 16]: k, v, q (columns the target's table has)
    k = g.view(kvq, 0, 4); v = g.view(kvq, 4, 4); q = g.view(kvq, 8, 8)
    pos = g.positions(); rq = g.rope(q, pos); rk = g.rope(k, pos)
    g.b += [13, rq, rk, v, kc, vc, META[2], META[1], META[4], META[4], FLT[0.0], 0]; g.n += 1; att = g.n - 1
    o = g.add(g.matmul(att, wo, 1), bo); g.out("a", g.rmsnorm(g.add(o, h), bo)); g.compile(ctx=16, seqs=4)
    g.steps(attn_steps, 6); seeds["fuse_layer_rope_attention"] = g
    # rope on q and k fused into the attention, the rotated q also an output
    g = G(); q = g.inp("a", ["T", 8]); k = g.inp("b", T4); v = g.inp("c", T4)
    kc = g.state("d", [8, 4, 1, 4]); vc = g.state("e", [8, 4, 1, 4]); pos = g.positions()
    rq = g.rope(q, pos); rk = g.rope(k, pos)
    g.b += [13, rq, rk, v, kc, vc, META[2], META[1], META[4], META[4], FLT[0.0], 0]; g.n += 1
    g.out("a", g.n - 1); g.out("b", rq); g.compile(ctx=16, seqs=4); g.steps(attn_steps, 5)
    seeds["fuse_rope_attention"] = g
    # the same, eager as given (no_capture): the captured plan is the variant; hazards checked
    g = G(); q = g.inp("a", ["T", 8]); k = g.inp("b", T4); v = g.inp("c", T4)
    kc = g.state("d", [8, 4, 1, 4]); vc = g.state("e", [8, 4, 1, 4]); pos = g.positions()
    g.b += [13, g.rope(q, pos), g.rope(k, pos), v, kc, vc, META[2], META[1], META[4], META[4], FLT[0.0], 0]
    g.n += 1; g.out("a", g.n - 1); g.compile(ctx=16, seqs=4, flags=NO_CAPTURE | CHECK_HAZARDS)
    g.steps(attn_steps, 5); seeds["no_capture_given_rope_attention"] = g
    # top-k with a page table a step accepts (small entries), beside an argmax
    g = G(); sc = g.inp("a", ["T", 16]); ln = g.inp("b", ["T"], I32, fill=SMALL_I32)
    pt = g.inp("c", ["T", 4], I32, fill=SMALL_I32)
    g.out("a", g.op(14, sc, ln, pt, META[4], META[4])); g.out("b", g.op(12, sc)); g.compile()
    g.steps(simple_steps([3, 17], 3), 3); seeds["topk_paged_accepted"] = g
    # the builder's other ops: rope with a table, per-head rmsnorm, sampling
    g = G(); x = g.inp("a", ["T", 8]); inv = g.param("b", [2]); pos = g.positions()
    g.out("a", g.op(22, 1, x, pos, inv, META[4], FLT[1.0])); g.compile(); g.steps(simple_steps([3, 17], 1), 1)
    seeds["rope_freq"] = g
    g = G(); x = g.inp("a", ["T", 8]); w = g.param("b", [4])
    g.out("a", g.op(22, 2, x, w, FLT[1e-5])); g.compile(); g.steps(simple_steps([2, 17], 1), 1)
    seeds["rmsnorm_heads"] = g
    g = G(); lg = g.inp("a", ["T", 16]); pr = g.inp("b", ["T", 4]); rng = g.inp("c", ["T", 4], I32, fill=SMALL_I32)
    g.out("a", g.op(22, 3, lg, pr, rng)); g.compile(); g.steps(simple_steps([2, 17], 3), 3); seeds["sample"] = g
    # mixture of experts: 4 experts of 2 (ffn 4) over x [T, 8], softmax routing renormalized, then the experts;
    # and sigmoid routing with a bias in 2 groups of 2, keeping 1
    for name, mode, bias_dims in (("moe_softmax", 4, None), ("moe_sigmoid_groups", 1 | 4 | 8 | 32, [4])):
        g = G(); x = g.inp("a", ["T", 8]); wr = g.param("b", [4, 8])
        bias = g.param("c", bias_dims) if bias_dims else 0
        gu = g.param("d", [32, 8]); dn = g.param("e", [32, 4])
        lg = g.matmul(x, wr, 1)
        args = [22, 4, lg, bias, mode, META[4], META[2]] + ([META[2], META[1]] if mode & 8 else [])
        g.b += args; g.n += 2
        ids, wt = g.n - 2, g.n - 1
        g.out("a", g.op(22, 5, x, ids, wt, gu, dn, META[4])); g.compile(); g.steps(simple_steps([3, 17], 1), 1)
        seeds[name] = g
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


# ---- fuzz_step: num_tokens, num_seqs, stride, null mask, then arrays, then top-k
# score_tab, len_tab and page_tab of fuzz_step.c, by value
SCORE = {0.0: 0, 1.0: 1, -1.0: 2, 2.0: 3, 0.5: 5, "-0": 6, "nan": 7, "-inf": 8, "inf": 9, 1e30: 10, -1e30: 11,
         "denorm": 12, 3.0: 13}
LEN = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6, 7: 7, 8: 8, 9: 9, -1: 10, "min": 11, "max": 12}
EDGE = 715827882  # INT32_MAX = 3 * EDGE + 1: offsets 0 and 1 of the page map inside, 2 past
PAGE_EDGE = [EDGE, EDGE + 1, EDGE - 1, "max", "min", -1, -2, 1 << 29, 1 << 30, 0, 7, 1 << 20]


def page_byte(v):
    """A page entry: small values (-1..62) as byte - 1, the edges of page_tab by index (top bit)."""
    if isinstance(v, int) and -1 <= v <= 62 and v not in (EDGE, EDGE + 1, EDGE - 1):
        return (v + 1) & 0x3F
    i = PAGE_EDGE.index(v)
    return next(b for b in range(0x80, 0x100) if b % len(PAGE_EDGE) == i)


def topk_bytes(scores=None, lens=None, pages=None, no_pt=False):
    """The step's top-k part: a mode byte, then rows x 8 scores, rows lengths, rows x 4 page entries
    (each given or left to the target's pattern)."""
    mode = (1 if scores else 0) | (2 if lens else 0) | (4 if pages else 0) | (8 if no_pt else 0)
    b = [mode]
    for row in scores or []:
        assert len(row) == 8
        b += [SCORE[v] for v in row]
    b += [LEN[v] for v in lens or []]
    for row in pages or []:
        assert len(row) == 4
        b += [page_byte(v) for v in row]
    return b


def step_bytes(tokens, seqs, stride, qs, pos, slot, lens, bt, nulls=0, topk=None):
    b = [tokens, seqs, stride, nulls]
    for arr in (qs, pos, slot, lens, bt):
        b += [(v + 1) & 0x3F for v in arr]  # small values: byte - 1
    return b + (topk if topk is not None else [0])


def prefill3(topk):
    """The prefill seed's step (3 tokens of one sequence into slots 0..2, valid) with these top-k inputs."""
    return [1] + step_bytes(3, 1, 4, [0, 3], [0, 1, 2], [0, 1, 2], [3], [0, 1, 2, 3], topk=topk)


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
    # the first byte is the number of steps less one
    s["four_steps"] = ([3] + step_bytes(2, 1, 2, [0, 2], [0, 1], [0, 1], [2], [0, 1]) +
                       step_bytes(1, 1, 2, [0, 1], [2], [2], [3], [0, 1]) +
                       step_bytes(1, 1, 2, [0, 1], [3], [9], [4], [0, 9]) +
                       step_bytes(1, 1, 2, [0, 1], [3], [3], [4], [0, 1]))
    # top-k beside the attention (scores [T, 8], pages of 3, page table [T, 4], k 4). Refused
    # for its page table: every other input of the step is valid, so its K/V write would
    # store the tokens; the caches must come out unchanged.
    mixed = [[1.0, "nan", 2.0, 2.0, "-inf", 0.5, 1.0, 3.0], [0.0, "-0", 0.0, "inf", "nan", 1e30, -1e30, "denorm"],
             ["nan"] * 8]
    s["topk_page_past_int32"] = prefill3(topk_bytes(pages=[["max", 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3]]))
    s["topk_page_min_and_max"] = prefill3(topk_bytes(pages=[[0, 1, 2, 3], [1 << 30, 1 << 29, "max", "min"], [4, 5, 6, 7]]))
    # EDGE on page 1 maps candidate 5 (offset 2) to INT32_MAX + 1: selected (the row's best)
    s["topk_edge_offset_selected"] = prefill3(topk_bytes(
        scores=[[0.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0]] * 3, pages=[[0, EDGE, 1, 2]] * 3))
    # ... a candidate, not selected (the fixed step checks every candidate: refused there; an
    # older kernel maps only what it selects)
    s["topk_edge_offset_candidate"] = prefill3(topk_bytes(
        scores=[[3.0, 3.0, 3.0, 3.0, 2.0, -1.0, 0.0, 0.0]] * 3, pages=[[0, EDGE, 1, 2]] * 3))
    # ... past the row's length (5): no candidate maps past, accepted; offsets 0 and 1 of the
    # page give INT32_MAX - 1 and INT32_MAX
    s["topk_edge_offset_past_length"] = prefill3(topk_bytes(
        scores=[[0.0, 0.0, 0.0, 3.0, 3.0, 3.0, 0.0, 0.0]] * 3, lens=[5, 5, 5], pages=[[0, EDGE, 1, 2]] * 3))
    s["topk_edge_page_last"] = prefill3(topk_bytes(pages=[[0, 1, EDGE, 3], [0, 1, EDGE, 3], [EDGE - 1, 0, EDGE, 2]]))
    # the spare page (3) covers no candidate: whatever it holds, accepted
    s["topk_spare_page_past_int32"] = prefill3(topk_bytes(pages=[[0, 1, 2, "max"], [0, 1, 2, EDGE + 1], [0, 1, 2, "min"]]))
    s["topk_negative_pages"] = prefill3(topk_bytes(pages=[[-1, -2, "min", 0], [-1, -1, -1, -1], [5, -2, 6, 7]]))
    s["topk_scores_lengths"] = prefill3(topk_bytes(scores=mixed, lens=[8, 9, "max"], pages=[[0, 1, 2, 3]] * 3))
    s["topk_lengths_edges"] = prefill3(topk_bytes(scores=mixed, lens=[-1, "min", 0], pages=[[0, 1, 2, 3]] * 3))
    s["topk_ties"] = prefill3(topk_bytes(scores=[[1.0] * 8, [2.0, 1.0] * 4, ["-inf"] * 8], lens=[8, 6, 3],
                                         pages=[[0, 0, 0, 0], [3, 3, 1, 1], [0, 1, 2, 3]]))
    s["topk_page_table_unset"] = prefill3(topk_bytes(no_pt=True))
    # an eager step (17 tokens, past the buckets) refused for one row's page
    pages17 = [[0, 1, 2, 3]] * 16 + [["max", 1, 2, 3]]
    s["topk_page_past_int32_eager"] = [1] + step_bytes(17, 1, 5, [0, 17], list(range(17)), list(range(17)), [17],
                                                       [0, 1, 2, 3, 4], topk=topk_bytes(pages=pages17))
    # prefill, a decode refused for its page table, a decode accepted
    s["topk_refused_between"] = ([2] + step_bytes(2, 1, 2, [0, 2], [0, 1], [0, 1], [2], [0, 1]) +
                                 step_bytes(1, 1, 2, [0, 1], [2], [2], [3], [0, 1],
                                            topk=topk_bytes(pages=[[EDGE + 1, EDGE + 1, EDGE + 1, 0]])) +
                                 step_bytes(1, 1, 2, [0, 1], [2], [2], [3], [0, 1],
                                            topk=topk_bytes(pages=[[EDGE - 1, 0, EDGE, 0]])))
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

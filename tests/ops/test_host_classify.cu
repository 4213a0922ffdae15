/* The decode's token classification in two halves (ops/cuda/attention.cuh,
 * attn_decode_classify_pre / _fin): the tensor-core decode reads a chunk's
 * block ids between them, from what _pre computed without the context
 * length. Pinned here, on the host (the helpers are __host__ __device__; no
 * GPU is needed), over every guard's edge: the halves give exactly the
 * one-step classification the kernels had (attn_token_ok, then the
 * chunking); a chunk that attends is spec with the same keys; and a spec
 * chunk's block ids lie inside its sequence's row of the block table, so
 * reading them before the guard never reads outside the table. */
#include <criterion/criterion.h>

#include <vector>

#include "ops/cuda/attention.cuh"

using namespace reel_cu;

/* The classification as one step (what the kernels did before the split). */
static attn_dec_tok one_step(const reel_meta_view &m, const attn_geom &g, int64_t t, int64_t rows, int c,
                             int nchunks, bool skip_runs)
{
    attn_dec_tok d = {};
    d.run = skip_runs && attn_in_run(m, t, rows);
    if (d.run)
        return d;
    int32_t p, clen = 0;
    d.ok = attn_token_ok(m, g, t, &d.seq, &p);
    if (d.ok == 1 && p < 0)
        d.ok = 0;
    d.nact = d.ok == 1 ? attn_chunking(g, p, nchunks, &clen) : 1;
    d.attend = d.ok == 1 && c < d.nact;
    if (d.attend) {
        d.k0 = c * clen;
        d.k1 = p + 1 < d.k0 + clen ? p + 1 : d.k0 + clen;
    }
    return d;
}

static attn_geom geom(int32_t bs, reel_dcp_view dcp, int64_t dh = 64)
{
    attn_geom g = {};
    g.dh = dh;
    g.bs = bs;
    g.bs_shift = -1;
    for (int s = 0; s < 31; s++)
        if ((int32_t)1 << s == bs)
            g.bs_shift = s;
    g.dcp = dcp;
    return g;
}

static reel_meta_view meta(int32_t *pos, int32_t *slot, int32_t *tok_seq, int32_t *lens, std::vector<int32_t> &tables,
                           int32_t max_seqs, int32_t max_blocks, int32_t max_context)
{
    reel_meta_view m = {};
    m.positions = pos;
    m.slot_mapping = slot;
    m.token_seq = tok_seq;
    m.context_lens = lens;
    m.block_tables = tables.data();
    m.max_seqs = max_seqs;
    m.max_blocks = max_blocks;
    m.max_context = max_context;
    return m;
}

static long check_geometry(const attn_geom &g)
{
    const int32_t max_seqs = 3, max_blocks = 9;
    const int32_t ctxs[] = {0, 1, 15, 16, 17, 127, 128, 129, 140, 200};
    const int32_t seqs[] = {-3, -1, 0, 2, 3};
    const int32_t poss[] = {-5, -1, 0, 1, 14, 15, 16, 17, 63, 64, 65, 126, 127, 128, 139, 143, 144, 199, 250};
    const int nchunk_set[] = {1, 2, 3, 8, 33};
    std::vector<int32_t> tables((size_t)max_seqs * max_blocks, 0);
    long checked = 0;
    for (int32_t max_context : {128, 144, 4096})
        for (int32_t ctx : ctxs)
            for (int32_t s : seqs)
                for (int32_t p : poss) {
                    /* One token; its sequence's context length is ctx (every row the same). */
                    int32_t tok_seq[1] = {s}, pos[1] = {p}, slot[1] = {0};
                    int32_t lens[max_seqs] = {ctx, ctx, ctx};
                    const reel_meta_view m = meta(pos, slot, tok_seq, lens, tables, max_seqs, max_blocks, max_context);
                    for (int nchunks : nchunk_set)
                        for (int c = 0; c <= nchunks; c++) {
                            const attn_dec_tok want = one_step(m, g, 0, 1, c, nchunks, false);
                            attn_dec_tok pre = attn_decode_classify_pre(m, g, 0, 1, c, nchunks, false);
                            const attn_dec_tok spec = pre;
                            attn_decode_classify_fin(m, g, c, &pre);
                            const attn_dec_tok &got = pre;
                            cr_assert_eq(got.run, want.run);
                            cr_assert_eq(got.ok, want.ok, "s %d p %d ctx %d max %d bs %ld dcp %d/%d/%d", s, p, ctx,
                                         max_context, (long)g.bs, g.dcp.n, g.dcp.r, g.dcp.i);
                            cr_assert_eq(got.nact, want.nact, "s %d p %d ctx %d c %d n %d", s, p, ctx, c, nchunks);
                            cr_assert_eq(got.attend, want.attend, "s %d p %d ctx %d c %d n %d", s, p, ctx, c,
                                         nchunks);
                            cr_assert_eq(got.seq, want.seq);
                            if (want.attend) {
                                cr_assert(spec.spec, "an attending chunk is spec (s %d p %d c %d)", s, p, c);
                                cr_assert_eq(spec.k0, want.k0);
                                cr_assert_eq(spec.k1, want.k1);
                            }
                            if (spec.spec) {
                                /* The ids _pre lets a kernel read: inside the row. */
                                cr_assert(spec.seq >= 0 && spec.seq < max_seqs);
                                cr_assert(spec.k0 >= 0 && spec.k0 < spec.k1);
                                cr_assert(attn_blk(g, spec.k1 - 1) < max_blocks, "block %d of %d",
                                          attn_blk(g, spec.k1 - 1), max_blocks);
                            }
                            checked++;
                        }
                }
    return checked;
}

Test(classify, halves_equal_the_one_step_guard)
{
    long n = 0;
    for (int32_t bs : {16, 32, 24})
        for (int64_t dh : {64, 128})
            n += check_geometry(geom(bs, reel_dcp_view{1, 0, 1}, dh));
    cr_assert_gt(n, 10000);
}

/* The chunk length: a multiple of 64 keys, at least attn_min_chunk(g)
 * (REEL_ATTN_MIN_CHUNK below head dim 128, REEL_ATTN_MIN_CHUNK_DH128 from
 * it), the token's keys over as few of the launch's chunks as that leaves. */
static void check_chunking(const attn_geom &g, int32_t min)
{
    cr_assert_eq(attn_min_chunk(g), min);
    for (int32_t p : {0, 63, 64, 127, 128, 199, 1023, 8190})
        for (int n : {1, 2, 3, 4, 8, 33}) {
            int32_t len = 0;
            const int used = attn_chunking(g, p, n, &len);
            int32_t want = ((p + 1 + n - 1) / n + 63) / 64 * 64;
            if (want < min)
                want = min;
            cr_assert_eq(len, want, "p %d n %d dh %ld", p, n, (long)g.dh);
            cr_assert_eq(used, (p + 1 + len - 1) / len);
            cr_assert(used >= 1 && used <= n);
        }
}

Test(classify, a_chunk_holds_the_head_dims_least_keys)
{
    check_chunking(geom(16, reel_dcp_view{1, 0, 1}, 64), REEL_ATTN_MIN_CHUNK);
    check_chunking(geom(16, reel_dcp_view{1, 0, 1}, 128), REEL_ATTN_MIN_CHUNK_DH128);
}

/* A launch past one wave sets its own least length (attn_decode_chunks):
 * the device's chunking takes it, at both head dims, and a token of a
 * short context then uses one chunk. */
Test(classify, a_chunk_holds_the_launchs_least_keys)
{
    for (int64_t dh : {64, 128}) {
        attn_geom g = geom(16, reel_dcp_view{1, 0, 1}, dh);
        g.min_chunk = REEL_ATTN_MIN_CHUNK_WAVES;
        check_chunking(g, REEL_ATTN_MIN_CHUNK_WAVES);
        int32_t len = 0;
        cr_assert_eq(attn_chunking(g, 199, 3, &len), 1, "200 keys: one chunk of %d", len);
        cr_assert_eq(attn_chunking(g, 2048, 3, &len), 3, "2049 keys: still three");
        cr_assert_eq(len, 704);
    }
}

/* A token of at most whole_keys keys takes one chunk of its keys rounded
 * up to whole tiles (at least the least length), at any chunk count; a
 * longer one is cut exactly as without the rule. */
Test(classify, a_short_token_takes_one_chunk)
{
    for (int64_t dh : {64, 128})
        for (int32_t least : {64, 256}) {
            attn_geom g0 = geom(16, reel_dcp_view{1, 0, 1}, dh);
            g0.min_chunk = least;
            attn_geom g1 = g0;
            g1.whole_keys = REEL_ATTN_WHOLE_KEYS > 0 ? REEL_ATTN_WHOLE_KEYS : 256;
            for (int32_t p = 0; p < 3000; p++)
                for (int n : {1, 2, 3, 4, 8, 33}) {
                    int32_t l0 = 0, l1 = 0;
                    const int u0 = attn_chunking(g0, p, n, &l0), u1 = attn_chunking(g1, p, n, &l1);
                    if (p + 1 > g1.whole_keys) {
                        cr_assert(u0 == u1 && l0 == l1, "%d keys past the rule: %d x %d against %d x %d", p + 1,
                                  u0, l0, u1, l1);
                        continue;
                    }
                    int32_t want = (p + 1 + 63) / 64 * 64;
                    if (want < least)
                        want = least;
                    cr_assert(u1 == 1 && l1 == want, "%d keys, %d chunks: %d x %d", p + 1, n, u1, l1);
                }
        }
}

/* reel_attn_fit_chunks drops only chunks no token reaches: for every
 * launch size and limit, each key count up to the limit is cut into the
 * same chunks of the same length at the fitted count as at the wave rule's
 * (with its least length); the dropped ones were never used. */
Test(classify, fitted_chunks_cut_every_context_alike)
{
    const int64_t slots = 3 * 132;
    for (int64_t units : {16, 128, 256, 400, 512, 1024})
        for (int64_t max_context : {1, 64, 129, 240, 256, 257, 768, 2160, 8192}) {
            const int64_t n = reel_attn_wave_chunks(units, slots, 128);
            int32_t least = 0;
            const int64_t fit = reel_attn_fit_chunks(units, slots, n, 64, 256, max_context, &least);
            cr_assert(fit >= 1 && fit <= n);
            attn_geom g0 = geom(16, reel_dcp_view{1, 0, 1}, 128), g1 = g0;
            g0.min_chunk = reel_attn_least_chunk(units, slots, n, 64, 256);
            g1.min_chunk = least;
            for (int32_t p = 0; p < max_context; p++) {
                int32_t l0 = 0, l1 = 0;
                const int u0 = attn_chunking(g0, p, (int)n, &l0), u1 = attn_chunking(g1, p, (int)fit, &l1);
                cr_assert(u0 == u1 && l0 == l1, "units %lld, limit %lld, %d keys: %d x %d against %d x %d",
                          (long long)units, (long long)max_context, p + 1, u0, l0, u1, l1);
            }
        }
    int32_t least = 0;
    cr_assert_eq(reel_attn_fit_chunks(512, slots, 3, 64, 256, 240, &least), 1, "batch 32 of 16 kv heads, 240 keys");
    cr_assert_eq(least, 256);
    cr_assert_eq(reel_attn_fit_chunks(256, slots, 3, 64, 256, 240, &least), 1, "batch 16: one wave unsplit");
    cr_assert_eq(least, 256, "the least length of 3 chunks");
    cr_assert_eq(reel_attn_fit_chunks(512, slots, 3, 64, 256, 2160, &least), 3, "a long limit keeps them");
}

Test(classify, halves_equal_the_one_step_guard_under_dcp)
{
    /* Two and three ranks, interleaves 1 and 16: a rank may own none of a
     * token's keys (an empty shard: (0, -inf), not a breach). */
    for (reel_dcp_view d : {reel_dcp_view{2, 0, 1}, reel_dcp_view{2, 1, 16}, reel_dcp_view{3, 2, 16}})
        for (int32_t bs : {16, 24})
            check_geometry(geom(bs, d));
}

Test(classify, runs_are_classified_before_anything_is_read)
{
    /* With skip_runs a token of a multi-token run is the prefill kernel's:
     * neither half reads its guard or gives it keys. */
    int32_t tok_seq[3] = {0, 0, 1}, pos[3] = {5, 6, 9}, slot[3] = {0, 0, 0}, lens[2] = {7, 10};
    std::vector<int32_t> tables(2 * 4, 0);
    const reel_meta_view m = meta(pos, slot, tok_seq, lens, tables, 2, 4, 64);
    const attn_geom g = geom(16, reel_dcp_view{1, 0, 1});
    for (int64_t t = 0; t < 3; t++) {
        attn_dec_tok d = attn_decode_classify_pre(m, g, t, 3, 0, 2, true);
        cr_assert_eq(d.run, t < 2);
        cr_assert_eq(d.spec, t == 2);
        attn_decode_classify_fin(m, g, 0, &d);
        const attn_dec_tok want = one_step(m, g, t, 3, 0, 2, true);
        cr_assert_eq(d.run, want.run);
        cr_assert_eq(d.attend, want.attend);
        cr_assert_eq(d.ok, want.ok);
    }
}

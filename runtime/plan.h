/* Internal (L5): the compiled plan and its executor state, and the executor's
 * files, one per concept: compile.c (the pipeline), schedule.c (streams,
 * events, waits, PDL), layout.c (the planner problem, binding), staging.c
 * (the step region), issue.c (one walk with sinks), check.c (the hazard
 * checker's sink), capture.c, step.c (validation, one choose_layout), and
 * plan_io.c (inputs, params, states, outputs, stats, placement). */
#ifndef REEL_EXEC_PLAN_H
#define REEL_EXEC_PLAN_H

#include <time.h>

#include "backend/ctx.h"
#include "graph/ir.h"
#include "ops/op.h"
#include "backend/backend.h"

/* Where every tensor of one execution lives, and the launches resolved
 * against it. Bucket layouts share the plan's static region and arena; an
 * eager step beyond the fixed limits gets an overflow layout of its own. */
typedef struct reel_layout {
    int64_t rows;               /* token rows every token tensor has here */
    int32_t max_tokens, max_seqs, max_blocks;
    int32_t max_context;        /* the context limit kernels enforce here */
    char *arena;                /* device */
    size_t *act_off;            /* [ntensors] arena offsets of ACT tensors */
    size_t arena_bytes, lower_bound, node_bound;
    char *stat_dev, *stat_host; /* static region and its pinned staging mirror */
    size_t stat_bytes;
    size_t *in_off;             /* [ntensors] static offsets of INPUT tensors */
    size_t off_err, off_cnt, off_pos, off_slot, off_tseq, off_ctx, off_bt;
    size_t cnt_bytes;           /* the attention counters at off_cnt */
    reel_meta_view meta;        /* device pointers into stat_dev */
    struct reel_ws_block *arena_blk; /* overflow layouts: the arena's workspace block */
    reel_launch *launches;      /* [nnodes], in schedule order */
    reel_shape *shapes;         /* [nnodes * (MAX_IN + MAX_OUT)] backing the launches */
    int *new_wait_start, *new_wait_from; /* cross-stream waits (data and planner edges), CSR by node */
    unsigned char *rec;         /* [nnodes] record the node's event after it */
} reel_layout;

/* The KV cache one paged-attention op reads and writes. */
typedef struct reel_kv_geom {
    int32_t block_size, blocks;
    int64_t slots;
    int node;                   /* the first op (schedule index) with this geometry */
} reel_kv_geom;

typedef struct reel_plan_debug {
    unsigned fail_capture_mask;  /* bucket indices whose capture is made to fail */
    int not_capturable_node;     /* treat this node's impl as not capturable (-1: none) */
    bool skip_dispatch_guard;    /* replay even past max_context (tests the kernel guard) */
    int drop_waits_of;           /* node index + 1 whose cross-stream waits are dropped
                                    (a seeded missing edge for the checker); 0: none */
    int fail_launch_of;          /* node index + 1 whose launch fails (REEL_E_BACKEND); 0: none */
    int64_t fail_out_rows;       /* output buffers of this many rows or more cannot be
                                    allocated (pinned memory ran out); 0: none */
    bool no_fuse;                /* compile without the fusion passes (runtime/fuse.h) */
    bool dev_spans;              /* op spans by device timers even where the backend has a
                                    span hook (tests the CUDA path on the host backend) */
    bool planner_exhaustive;     /* the memory planner's all-pairs reference
                                    (reel_mem_problem.exhaustive): the same plan, slower */
    bool no_device_loop;         /* reel_step_n loops on the host even where the backend
                                    has device loops (tests the host loop) */
} reel_plan_debug;

/* A plan is two things kept apart: the schedule, fixed when compile returns
 * (the graph in schedule order, kernels, streams and events, the bucket
 * layouts and their graphs; what several ranks running one model must agree
 * on, and what the collective-sequence check covers: collective.c), and the serving
 * loop's state that calls between and during steps write (inputs, outputs,
 * the overflow layout, stats, the checker). Only reel_plan_bind_state and
 * reel_plan_write_param touch the schedule's memory after compile: they
 * re-point a state (and re-capture) or write a parameter, never the order. */
struct reel_plan {
    reel_ctx *ctx;
    reel_err *err;               /* the context's error buffer */
    reel_backend *be;
    reel_compile_opts opts;
    reel_plan_debug dbg;

    /* ---- the schedule (immutable after compile) ---------------------------- */
    struct {
        /* The graph, copied; nodes in schedule order. */
        int ntensors;
        reel_tinfo *tensors;
        int nnodes;
        reel_node *nodes;
        int noutputs;
        reel_goutput *outputs;
        const reel_op_impl **impl;   /* [nnodes] */
        char (*fused)[48];           /* [nnodes] what the fusion pass folded into each (fuse.c) */
        bool has_attention;
        int32_t attn_cnt_words;      /* meta.attn_cnt words a stream (0: no attention) */
        bool checks_limits;          /* some kernel may write the error word */
        bool host_checks;            /* a paged top-k or input expert ids: the step checks them (step.c) */
        int32_t block_size;          /* smallest block size of the attention ops */
        reel_dcp_view dcp;           /* the attention ops' DCP layout (n 1: none): the
                                        step's block tables are this rank's pages,
                                        reel_plan_local_len of a context long */
        /* Each distinct KV-cache geometry of the attention ops, and the
         * first op of it: a step is checked against every one before
         * anything runs (one op's cache cannot stand for another's). */
        int nkv;
        reel_kv_geom *kv;            /* [nkv] */
        /* What a step walks, found at compile instead of scanning every
         * tensor (parameters and activations included) three times a step. */
        int ninputs;
        uint32_t *input_ids;         /* [ninputs] INPUT tensors */
        /* The activations in id order and each one's last use (a node, or
         * nnodes for a graph output), for reel_plan_placement. */
        int nacts;
        uint32_t *act_ids;           /* [nacts] */
        int *act_last;               /* [ntensors] */
        /* The leaves (inputs, parameters, states: unique names) sorted by
         * name, for the lookups by name of set_input and write_param. */
        int nleaves;
        struct reel_plan_leaf *leaves;

        /* Streams and the events ordering them. */
        int nstreams;
        reel_stream *streams[REEL_MAX_STREAMS];
        reel_event **node_ev;        /* [nnodes]: recorded after the node, or NULL */
        reel_event *fork_ev, *join_ev[REEL_MAX_STREAMS];
        int *first_on_stream;        /* [nstreams] first node of each stream (-1) */
        int *last_on_stream;

        /* Memory every bucket shares. */
        void **tensor_ptr;           /* [ntensors] PARAM and STATE device pointers */
        bool *state_borrowed;        /* [ntensors] state bound to caller memory */
        char *arena;
        size_t arena_bytes;
        char *stat_dev, *stat_host;  /* the static region (staging.c lays it out) */
        size_t stat_bytes;
        size_t ws_plan_bytes;        /* the streams' kernel workspaces reserved (schedule.c) */

        /* Buckets. */
        int nbuckets;
        int32_t buckets[REEL_MAX_BUCKETS];
        reel_layout bucket[REEL_MAX_BUCKETS];
        reel_exec_graph *graph[REEL_MAX_BUCKETS];
        reel_fallback bucket_reason[REEL_MAX_BUCKETS]; /* why a bucket cannot replay */
        reel_fallback plan_reason;   /* a reason that holds for every bucket */

        /* The communicator (collective.c): a reference held until destroy. */
        reel_comm *comm;
        int ncomm_ops;               /* nodes that go through it */
        struct reel_coll_desc *coll_desc; /* [ncoll_desc] the sequence, issue order */
        int ncoll_desc;
        bool comm_agreed;            /* the compile exchange took place */
        bool comm_verified;          /* ... and every rank passed it */
    };

    /* ---- the serving loop's state (written by set_input, step, trim, ...) --- */
    struct {
        bool warming;                /* the capture's warm-up runs (reel_launch.tune) */
        bool *param_written;         /* [ntensors] deferred params written */
        int params_unwritten;        /* deferred parameters not written yet */
        /* Inputs the caller set for the next step (host copies). */
        char **stash;                /* [ntensors] for INPUT tensors */
        size_t *stash_cap;
        int64_t *stash_rows;         /* -1: not set */
        bool *staged;                /* [ntensors] the input sits in the static staging
                                        (set_input wrote it in place), not in stash */
        char *out_host;              /* pinned: err word, then each output at max rows */
        size_t *out_off;             /* [noutputs] */
        size_t out_bytes;
        int64_t out_cap_rows;        /* rows out_host holds per output */
        int64_t out_rows;            /* rows of the last step's outputs */

        /* The overflow layout for eager steps past the fixed limits (cached,
         * grown when a larger step comes). */
        reel_layout over;
        bool over_valid;

        reel_fallback last_fallback;
        reel_plan_stats st;

        /* Device time of steps (reel_plan_time_steps): timers recorded on
         * stream 0 before the upload and after the download. */
        struct reel_event *timer[2];
        bool timed_valid;            /* last_device_us is the last step's */
        double last_device_us;

        /* The stream-aware workspace allocator: eager steps past the fixed
         * limits take their arena from it (deferred frees across streams). */
        struct reel_ws *ws;
        /* Pinned staging (inputs, metadata, outputs) from a jemalloc arena
         * over page-locked extents. */
        struct reel_pinned *pinned;

        /* The hazard checker, when the plan runs under it (check_hazards). */
        struct reel_checker *chk;

        /* Op spans recorded for traces (reel_plan_trace_ops; introspect.c). */
        struct reel_span_buf *spans;

        /* reel_step_n's control and token buffers and loop graphs (loop.c). */
        struct reel_loop_state *loop;
    };
};

/* step.c: what reel_step and reel_step_n (loop.c) share. */
typedef struct reel_step_need {
    int32_t max_ctx;     /* longest context of the step */
    int32_t max_blocks;  /* block-table entries the longest context needs */
} reel_step_need;
/* The step's arguments, inputs and host-checked limits (nothing runs). */
reel_status reel_step_check(reel_plan *p, const reel_step_info *s, reel_step_need *need);
/* Sequence q's first blocks_for(len) block-table entries, in every cache. */
reel_status reel_step_check_blocks(reel_plan *p, const reel_step_info *s, int32_t q, int32_t len);
/* Replay or eager (with the reason), and the layout the step runs in. */
reel_status reel_step_choose(reel_plan *p, const reel_step_info *s, const reel_step_need *need, reel_fallback *why,
                             int *bucket, const reel_layout **L);
/* A step that failed with work issued: drains the streams, keeps the message. */
reel_status reel_step_failed(reel_plan *p, reel_status st);
/* The bookkeeping of steps that ran: inputs consumed, outputs of n rows, stats. */
void reel_step_done(reel_plan *p, reel_fallback why, int32_t n, uint64_t steps);

/* loop.c: reel_step_n's buffers and loop graphs (one per bucket, at first
 * use); reset after a state moved (the graphs point at it), freed at destroy. */
void reel_plan_loop_reset(reel_plan *p);
void reel_plan_loop_free(reel_plan *p);

/* Compile with internal test hooks. */
reel_status reel_compile_debug(reel_graph *g, const reel_compile_opts *opts, const reel_plan_debug *dbg,
                               reel_plan **out);

/* Every offset of the arena and the static region is a multiple of this. */
#define REEL_PLAN_ALIGN 256
static inline size_t reel_align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }
static inline double reel_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
static inline const char *reel_plan_tname(const reel_plan *p, uint32_t t) { return p->tensors[t].name; }
/* Block-table entries a context of len tokens needs; in 64 bits, as len
 * may be close to INT32_MAX (len >= 1, bs >= 1: the result fits). */
static inline int32_t reel_blocks_for(int32_t len, int32_t bs) { return (int32_t)(((int64_t)len + bs - 1) / bs); }
/* The slots a sequence of context len takes in this rank's cache: len, or
 * under DCP the positions this rank owns (ops/attn_layout.h). */
static inline int32_t reel_plan_local_len(const reel_plan *p, int32_t len)
{
    return reel_dcp_local_count(p->dcp, len);
}

/* Where tensor t lives in layout L (device memory). */
static inline void *reel_plan_tensor_dev(const reel_plan *p, const reel_layout *L, uint32_t t)
{
    switch (p->tensors[t].kind) {
    case REEL_T_ACT: return L->arena + L->act_off[t];
    case REEL_T_INPUT: return L->stat_dev + L->in_off[t];
    case REEL_T_META: return L->stat_dev + (p->tensors[t].meta_slots ? L->off_slot : L->off_pos);
    default: return p->tensor_ptr[t];
    }
}

/* Who calls whom (no circle): compile -> schedule, layout, staging, capture;
 * capture -> issue, staging, layout; step -> staging, layout, issue;
 * layout -> schedule, staging; issue -> check (a sink). */

/* issue.c: one walk over the plan, with sinks. */
typedef struct reel_issue_sink {
    reel_status (*record)(reel_plan *p, reel_event *e, int stream);
    reel_status (*wait)(reel_plan *p, int stream, reel_event *e);
    reel_status (*node)(reel_plan *p, const reel_layout *L, int node);
} reel_issue_sink;
extern const reel_issue_sink reel_issue_launch; /* issue.c: to the backend's streams */
extern const reel_issue_sink reel_issue_check;  /* check.c: to the hazard checker */
/* Walks every node of the plan against layout L, with the fork/join and
 * cross-stream events, telling each of the n sinks in order. */
reel_status reel_plan_issue_to(reel_plan *p, const reel_layout *L, const reel_issue_sink *const *sinks, int n);
/* The eager path, also what is captured: the launch sink alone. */
reel_status reel_plan_issue(reel_plan *p, const reel_layout *L);

/* schedule.c: streams, events, edges, waits, PDL. */
reel_status reel_schedule_streams(reel_plan *p);
/* Data and state edges of the schedule plus one sink edge per stream
 * (allocated; REEL_E_OOM without a message). */
reel_status reel_schedule_edges(const reel_plan *p, int **from, int **to, int *nedges);
reel_status reel_schedule_waits(reel_plan *p, reel_layout *L, const int *from, const int *to, int ne,
                                const int *new_from, const int *new_to, int nnew);
bool reel_schedule_pdl(const reel_plan *p, const reel_layout *L, int i);
/* The default PDL decision for one launch: its grid is at most
 * REEL_PDL_MAX_WAVES waves of the device's multiprocessors. */
#define REEL_PDL_MAX_WAVES 1
bool reel_schedule_pdl_by_grid(const reel_op_impl *impl, const reel_launch *l, const reel_device_caps *caps);
reel_status reel_plan_ensure_events(reel_plan *p, const reel_layout *L);

/* node.c, the floor of runtime/ (it calls no other file of the folder):
 * "add (node 3 -> 'h')" and "op 'add' (node 3 -> 'h')", one label format;
 * node i's operand shapes with token dimensions set to rows. */
const char *reel_plan_node_label(const reel_plan *p, int i, char *buf, size_t len);
const char *reel_plan_node_name(const reel_plan *p, int i, char *buf, size_t len);
void reel_plan_node_shapes(const reel_plan *p, int i, int64_t rows, reel_shape *in, reel_shape *out);

/* budget.c: the plan's memory, known before any of it is allocated, against
 * what the backend can give now: REEL_E_OOM naming the largest parts. */
reel_status reel_plan_budget(reel_plan *p);
/* The same parts into a reel_plan_memory (reel_compile_estimate). */
reel_status reel_plan_estimate(const reel_plan *p, reel_plan_memory *out);

/* layout.c: the planner problem, offsets, launches. */
reel_status reel_layout_build(reel_plan *p, reel_layout *L, int64_t rows, int32_t stat_tokens, int32_t max_seqs,
                              int32_t max_blocks, bool allocate);
reel_status reel_layout_bind(reel_plan *p, reel_layout *L, char *arena, char *stat_dev, char *stat_host);
void reel_layout_free(reel_plan *p, reel_layout *L, bool owns_memory);

/* staging.c: the one owner of the step region. */
void reel_staging_layout(reel_plan *p, reel_layout *L, int32_t max_tokens, int32_t max_seqs, int32_t max_blocks);
void reel_staging_bind(reel_layout *L, char *stat_dev, char *stat_host, int32_t attn_cnt_words);
void reel_staging_meta_range(const reel_layout *L, const char **dev, size_t *bytes);
/* Writes the step (s NULL: an empty one) into L's pinned staging; returns
 * the bytes to upload. */
size_t reel_staging_fill(reel_plan *p, const reel_layout *L, const reel_step_info *s);
reel_status reel_staging_upload(reel_plan *p, const reel_layout *L, size_t bytes);
/* Fills the static region with a padded (empty) step and uploads it. */
reel_status reel_plan_upload_padding(reel_plan *p, const reel_layout *L);
/* Sizes the pinned output buffer for rows per output. */
reel_status reel_plan_out_reserve(reel_plan *p, int64_t rows);
reel_status reel_staging_download(reel_plan *p, const reel_layout *L, int32_t n);
/* Destroys the step timers (reel_plan_time_steps); plan_io.c. */
void reel_plan_timers_free(reel_plan *p);
int32_t reel_staging_error_word(const reel_plan *p);
/* Where set_input writes input t in place: its rows in the pinned staging
 * that every bucket shares (valid for rows up to the largest bucket). */
char *reel_staging_input_slot(reel_plan *p, uint32_t t);
reel_status reel_staging_refused(reel_plan *p, int32_t code, const reel_layout *L);

/* collective.c: the communicator of a plan. */
/* Takes the reference on opts.comm (right after the options are read, so
 * that any later failure can tell the other ranks). */
void reel_plan_comm_hold(reel_plan *p);
/* Checks every collective op against it (group size,
 * peers, one stream); a graph with collectives needs one. */
reel_status reel_plan_comm_bind(reel_plan *p);
/* The cross-rank exchange before the warm-up: the collective sequence, the
 * buckets and the capture decision (plan_reason may change). */
reel_status reel_plan_comm_agree(reel_plan *p);
/* Compile failed: tells the other ranks, keeping this rank's message. */
void reel_plan_comm_failed(reel_plan *p);
/* The communicator's asynchronous error, and the step's wait for its work. */
reel_status reel_plan_comm_poll(reel_plan *p);
reel_status reel_plan_comm_sync(reel_plan *p);
void reel_plan_comm_release(reel_plan *p);

/* fuse.c: the fusion pass over the copied graph, before kernel choice. */
reel_status reel_plan_fuse(reel_plan *p);

/* capture.c */
reel_status reel_capture_all(reel_plan *p);

/* plan_io.c */
int reel_plan_find_tensor(const reel_plan *p, const char *name, reel_tensor_kind kind);
/* Copies bytes of host data to byte offset of parameter t (a part of it: a
 * checkpoint's tensors stacked into one fused parameter); complete marks
 * the parameter written. The caller checked the bounds (an invariant here). */
reel_status reel_plan_write_param_part(reel_plan *p, int t, size_t offset, const void *data, size_t bytes,
                                       bool complete);
/* Fills act_ids, act_last and leaves once the graph is copied. */
reel_status reel_plan_index_tensors(reel_plan *p);

/* introspect.c: node info, the plan's memory, op spans. */
void reel_plan_trace_free(reel_plan *p);
/* Device op spans of an eager step (backends without a span hook): begin
 * before the step's ops are issued, a mark before and after each node's
 * launch, end after the step (ok: it succeeded and its work is done). */
void reel_plan_dev_spans_begin(reel_plan *p);
void reel_plan_dev_span_mark(reel_plan *p, const reel_layout *L, int i, bool after);
void reel_plan_dev_spans_end(reel_plan *p, bool ok);

/* check.c: the hazard checker's side of a step. */
reel_status reel_plan_check_open(reel_plan *p);
void reel_plan_check_close(reel_plan *p);
/* The step's upload (writes the static region) and download (reads outputs). */
reel_status reel_plan_check_upload(reel_plan *p, const reel_layout *L, size_t bytes);
reel_status reel_plan_check_download(reel_plan *p, const reel_layout *L, int32_t rows);
/* Ends the step: REEL_E_HAZARD with the first report when any was found. */
reel_status reel_plan_check_end(reel_plan *p);
/* Ends a step that failed after its upload, once its streams were drained. */
void reel_plan_check_abort(reel_plan *p);
#endif

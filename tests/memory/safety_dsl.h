/* Test helper: small programs of alloc / free / use / record / wait / sync
 * on several streams, run on the hazard checker (no kernels), and the
 * hazards they must produce, pair by pair. */
#ifndef REEL_TESTS_MEMORY_SAFETY_DSL_H
#define REEL_TESTS_MEMORY_SAFETY_DSL_H

#include <criterion/criterion.h>
#include <string.h>

#include "reel/memory.h"

typedef enum { P_ALLOC, P_FREE, P_USE, P_OP, P_REC, P_WAIT, P_ESYNC, P_HSYNC, P_STEP } pkind;

typedef struct pstep {
    pkind k;
    uint64_t s;         /* stream key (REEL_CHECK_HOST for the host) */
    int slot;           /* allocation slot, event key or step number */
    uint64_t addr, size;
    const char *name;   /* op name or allocation description */
    bool w;
    uint32_t space;
} pstep;

typedef struct pexp {
    reel_hazard_kind k;
    const char *first, *second;         /* op names */
    const char *first_alloc, *second_alloc;  /* NULL: not checked */
} pexp;

#define HOST REEL_CHECK_HOST
#define ALLOC(s, slot, addr, size, name) { P_ALLOC, (s), (slot), (addr), (size), (name), false, 0 }
#define FREE(s, slot) { P_FREE, (s), (slot), 0, 0, NULL, false, 0 }
/* a free of a freed allocation: refused with REEL_E_HAZARD */
#define FREE_AGAIN(s, slot) { P_FREE, (s), (slot), 0, 0, NULL, true, 0 }
#define WR(s, slot, name) { P_USE, (s), (slot), 0, 0, (name), true, 0 }
#define RD(s, slot, name) { P_USE, (s), (slot), 0, 0, (name), false, 0 }
#define WR_AT(s, slot, off, size, name) { P_USE, (s), (slot), (off), (size), (name), true, 0 }
#define RD_AT(s, slot, off, size, name) { P_USE, (s), (slot), (off), (size), (name), false, 0 }
#define OPW(s, space, addr, size, name) { P_OP, (s), -1, (addr), (size), (name), true, (space) }
#define OPR(s, space, addr, size, name) { P_OP, (s), -1, (addr), (size), (name), false, (space) }
#define REC(s, ev) { P_REC, (s), (ev), 0, 0, NULL, false, 0 }
#define WAIT(s, ev) { P_WAIT, (s), (ev), 0, 0, NULL, false, 0 }
#define ESYNC(ev) { P_ESYNC, 0, (ev), 0, 0, NULL, false, 0 }
#define HSYNC(s) { P_HSYNC, (s), 0, 0, 0, NULL, false, 0 }
#define STEP(n) { P_STEP, 0, (n), 0, 0, NULL, false, 0 }

#define STEPS(...) (const pstep[]){ __VA_ARGS__ }, sizeof((const pstep[]){ __VA_ARGS__ }) / sizeof(pstep)
#define HAZARDS(...) (const pexp[]){ __VA_ARGS__ }, sizeof((const pexp[]){ __VA_ARGS__ }) / sizeof(pexp)
#define NO_HAZARD NULL, 0

#define PSLOTS 16

static inline void prog_run(reel_checker *c, const pstep *p, size_t n)
{
    uint64_t id[PSLOTS] = { 0 }, size[PSLOTS] = { 0 };
    for (size_t i = 0; i < n; i++) {
        const pstep *x = &p[i];
        reel_status st = REEL_OK;
        switch (x->k) {
        case P_ALLOC:
            size[x->slot] = x->size;
            st = reel_checker_alloc(c, x->s, 0, x->addr, x->size, x->name, &id[x->slot]);
            break;
        case P_FREE: st = reel_checker_free(c, x->s, id[x->slot]); break;
        case P_USE:
            st = reel_checker_use(c, x->s, x->name, id[x->slot], x->addr, x->size ? x->size : size[x->slot] - x->addr, x->w);
            break;
        case P_OP: {
            reel_check_access a = { REEL_CHECK_ACCESS_HEAD, .space = x->space, .addr = x->addr, .bytes = x->size, .write = x->w };
            st = reel_checker_op(c, x->s, x->name, 1, &a);
            break;
        }
        case P_REC: st = reel_checker_event_record(c, (uint64_t)x->slot, x->s); break;
        case P_WAIT: st = reel_checker_event_wait(c, x->s, (uint64_t)x->slot); break;
        case P_ESYNC: st = reel_checker_event_sync(c, (uint64_t)x->slot); break;
        case P_HSYNC: st = reel_checker_host_sync(c, x->s); break;
        case P_STEP: reel_checker_begin(c, x->slot); break;
        }
        reel_status want = x->k == P_FREE && x->w ? REEL_E_HAZARD : REEL_OK;
        cr_assert_eq(st, want, "program step %zu: %s, expected %s", i, reel_status_str(st), reel_status_str(want));
    }
}

/* Runs the program and requires exactly the expected hazards, in order. */
static inline void prog_check(const pstep *p, size_t n, const pexp *e, size_t ne)
{
    reel_checker *c;
    cr_assert_eq(reel_checker_create(NULL, &c), REEL_OK);
    prog_run(c, p, n);
    size_t nh;
    const reel_hazard *h = reel_checker_hazards(c, &nh);
    char line[512];
    cr_assert_eq(nh, ne, "%zu hazards, expected %zu; first: %s", nh, ne,
                 nh ? reel_hazard_format(h, line, sizeof line) : "(none)");
    for (size_t i = 0; i < ne; i++) {
        reel_hazard_format(&h[i], line, sizeof line);
        cr_assert_eq(h[i].kind, e[i].k, "hazard %zu: %s", i, line);
        cr_assert_str_eq(h[i].first.op, e[i].first, "hazard %zu: %s", i, line);
        cr_assert_str_eq(h[i].second.op, e[i].second, "hazard %zu: %s", i, line);
        if (e[i].first_alloc)
            cr_assert_str_eq(h[i].first.alloc, e[i].first_alloc, "hazard %zu: %s", i, line);
        if (e[i].second_alloc)
            cr_assert_str_eq(h[i].second.alloc, e[i].second_alloc, "hazard %zu: %s", i, line);
    }
    reel_checker_destroy(c);
}

#endif

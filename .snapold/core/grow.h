/* Internal (L0): growth. One rule for every growing array and limit in reel:
 * at least what is needed, and at least twice what there was, so n
 * appends cost O(n) and a limit that keeps growing is rebuilt a
 * logarithmic number of times. */
#ifndef REEL_CORE_GROW_H
#define REEL_CORE_GROW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Makes *arr (of *cap elements of elem bytes, host memory from
 * core/halloc.h) hold at least need elements: doubles from 16. False, with
 * *arr and *cap unchanged, when memory runs out. */
bool reel_grow(void **arr, size_t *cap, size_t need, size_t elem);

/* A limit grown from have to fit want: have if it already does, else the
 * larger of want and twice have (at most cap, cap >= want). */
static inline int64_t reel_grow_i64(int64_t have, int64_t want, int64_t cap)
{
    if (want <= have)
        return have;
    int64_t twice = have > cap / 2 ? cap : 2 * have;
    return twice > want ? twice : want;
}

#endif

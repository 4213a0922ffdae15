/* Internal (L0): compressed sparse rows, the one way reel groups edges by a
 * node (successors, predecessors, waits, planner neighbours):
 *
 *     int start[n + 1] = {0};
 *     reel_csr_count(start, key, ne);         // once per edge list
 *     reel_csr_offsets(start, n);
 *     reel_csr_place(start, key, val, ne, out); // same lists, same order
 *     reel_csr_restore(start, n);
 *     // row v: out[start[v] .. start[v + 1]), in edge order
 */
#ifndef REEL_CORE_CSR_H
#define REEL_CORE_CSR_H

/* start[key[e] + 1]++ for each of the ne edges. */
static inline void reel_csr_count(int *start, const int *key, int ne)
{
    for (int e = 0; e < ne; e++)
        start[key[e] + 1]++;
}

/* Counts to row offsets: start[v] becomes the first slot of row v. */
static inline void reel_csr_offsets(int *start, int n)
{
    for (int v = 0; v < n; v++)
        start[v + 1] += start[v];
}

/* out[start[key[e]]++] = val[e]: each row in edge order; start[v] ends at
 * the end of row v. */
static inline void reel_csr_place(int *start, const int *key, const int *val, int ne, int *out)
{
    for (int e = 0; e < ne; e++)
        out[start[key[e]]++] = val[e];
}

/* After the places: start[v] back at the first slot of row v. */
static inline void reel_csr_restore(int *start, int n)
{
    for (int v = n; v > 0; v--)
        start[v] = start[v - 1];
    start[0] = 0;
}

#endif

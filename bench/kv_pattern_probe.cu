/* How fast HBM serves the read patterns of reel's two bandwidth kernels,
 * apart from their arithmetic: a read-only kernel walks 1 GiB as a cache of
 * [keys, heads, row bytes] and each block reads 16 KB tiles of one head
 * (rows of `row` bytes at a stride of heads x row: the paged decode's K/V
 * at 128 and 256 bytes), or the same bytes as contiguous tiles (heads = 1,
 * SDPA's); 64-byte rows at a 4 KB stride are the skinny matmul's warp
 * loads. Blocks per SM are capped with unused dynamic shared memory (the
 * decode holds 3 blocks of 4 warps an SM), and a last group asks for none
 * and sets the carve-out (L1 against shared memory) instead.
 *
 *   bench_kv_pattern [reps]   prints one line per (row, heads, blocks an SM, carve-out) */
#include <algorithm>
#include <vector>

#include "bench/bench_cuda.cuh"

enum { THREADS = 128, TILE_BYTES = 16384, TILES = 8 };

/* Block b reads head b % heads of keys [CHUNK_KEYS (b / heads), + CHUNK_KEYS):
 * each tile is 16 KB, TILE_BYTES / ROW rows of ROW bytes, ROW / 16 threads a row, two tiles of
 * loads in flight a thread. */
template <int ROW>
__global__ void __launch_bounds__(THREADS) kv_read(const char *base, int heads, unsigned *sink)
{
    constexpr int TILE_KEYS = TILE_BYTES / ROW, CHUNK_KEYS = TILES * TILE_KEYS;
    constexpr int PER = TILE_KEYS * ROW / 16 / THREADS; /* 16-byte loads a thread a tile */
    constexpr int LPR = ROW / 16;
    const int h = blockIdx.x % heads;
    const int64_t k0 = (int64_t)(blockIdx.x / heads) * CHUNK_KEYS;
    const int64_t stride = (int64_t)heads * ROW;
    const char *p = base + k0 * stride + (int64_t)h * ROW;
    uint32_t acc = 0;
    uint4 a[PER], b[PER];
    auto load = [&](uint4(&r)[PER], int tile) {
#pragma unroll
        for (int i = 0; i < PER; i++) {
            int e = i * THREADS + threadIdx.x, key = tile * TILE_KEYS + e / LPR, off = (e % LPR) * 16;
            r[i] = ld_once16(p + key * stride + off);
        }
    };
    auto use = [&](const uint4(&r)[PER]) {
#pragma unroll
        for (int i = 0; i < PER; i++)
            acc ^= r[i].x ^ r[i].y ^ r[i].z ^ r[i].w;
    };
    load(a, 0);
#pragma unroll 1
    for (int t = 0; t < TILES; t += 2) {
        if (t + 1 < TILES)
            load(b, t + 1);
        use(a);
        if (t + 2 < TILES)
            load(a, t + 2);
        if (t + 1 < TILES)
            use(b);
    }
    if (heads < 0)
        *sink = acc;
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <int ROW>
static void run(const char *buf, size_t bytes, int heads, int per_sm, int reps, unsigned *sink, int carve = -1)
{
    const int64_t CHUNK_KEYS = (int64_t)TILES * TILE_BYTES / ROW;
    int64_t keys = (int64_t)(bytes / ((size_t)heads * ROW)) / CHUNK_KEYS * CHUNK_KEYS;
    int blocks = (int)(keys / CHUNK_KEYS * heads);
    size_t read = (size_t)keys * heads * ROW;
    int smem_max = 0;
    CK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
    size_t smem = per_sm > 0 ? (size_t)(smem_max / per_sm) - 1024 : 0;
    if (smem > 48 * 1024)
        CK(cudaFuncSetAttribute(kv_read<ROW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CK(cudaFuncSetAttribute(kv_read<ROW>, cudaFuncAttributePreferredSharedMemoryCarveout, carve));
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kv_read<ROW>, THREADS, smem));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> us;
    for (int r = 0; r < reps + 2; r++) {
        CK(cudaEventRecord(e0));
        kv_read<ROW><<<blocks, THREADS, smem>>>(buf, heads, sink);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 2)
            us.push_back(ms * 1e3);
    }
    double m = median(us);
    char cv[16];
    snprintf(cv, sizeof cv, carve < 0 ? "default" : "%d%%", carve);
    printf("| %d | %d | %d | %d | %s | %d | %.1f | %.2f |\n", ROW, heads, per_sm > 0 ? per_sm : occ, occ * THREADS / 32,
           cv, blocks, m, read / m / 1e6);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? std::max(3, atoi(argv[1])) : 9;
    size_t bytes = (size_t)1 << 30;
    char *buf = NULL;
    unsigned *sink = NULL;
    CK(cudaMalloc(&buf, bytes));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(buf, 1, bytes));
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    printf("paged K/V read pattern probe, 1 GiB, %d SMs, %d reps\n", sms, reps);
    printf("| row bytes | heads (stride = heads x row) | blocks an SM | warps an SM | carve-out | grid | us | TB/s |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    /* 64-byte rows at a 4 KB stride: the skinny matmul's pattern (4
     * threads a weight row, 8 rows a warp load, K = 2048 in bf16). */
    const int occs[] = {3, 4, 0};
    for (int o : occs) {
        for (int h : {1, 8, 64})
            run<64>(buf, bytes, h, o, reps, sink);
        for (int h : {1, 32}) {
            run<128>(buf, bytes, h, o, reps, sink);
            run<256>(buf, bytes, h, o, reps, sink);
        }
    }
    /* No shared memory asked for: the carve-out (L1 against shared memory)
     * alone, at the kernel's own occupancy. */
    for (int cv : {0, 50, 100})
        for (int h : {1, 64})
            run<64>(buf, bytes, h, 0, reps, sink, cv);
    CK(cudaFree(buf));
    CK(cudaFree(sink));
    return 0;
}

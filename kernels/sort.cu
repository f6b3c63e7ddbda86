// Stable least-significant-digit radix sort of (u64 key, u32 value) pairs,
// eight bits a pass (`digit` masks the last pass's bits when fewer are
// sorted; crates/engine/src/gpu/sort.rs drives it): cudarc has
// no CUB. Per pass:
//
//   radix_histogram  each block counts the digits of its tile of TILE pairs;
//   (scan.cu)        an exclusive scan of the counts laid out digit-major
//                    ([digit][block]) gives every (digit, block) its first
//                    output position;
//   radix_scatter    each block writes its tile, 256 pairs at a time in
//                    input order: a pair's place among equal digits of its
//                    warp from __match_any_sync, then the counts of the
//                    warps before it, then those of the rounds before.
//
// Stable: within a block pairs go out in input order, and blocks in block
// order within each digit.
//
// Compiled at run time with NVRTC (no headers: only built-ins).

typedef unsigned long long u64;
typedef unsigned int u32;

#define THREADS 256  // = the number of digits
#define WARPS (THREADS / 32)
#define TILE (THREADS * 16)

extern "C" __global__ void __launch_bounds__(THREADS) radix_histogram(const u64 *__restrict__ keys, u64 n, u32 shift,
                                                                      u32 digit, u32 *__restrict__ hist) {
    __shared__ u32 h[THREADS];
    h[threadIdx.x] = 0;
    __syncthreads();
    const u64 start = (u64)blockIdx.x * TILE, end = min(start + TILE, n);
    for (u64 i = start + threadIdx.x; i < end; i += THREADS) atomicAdd(&h[(keys[i] >> shift) & digit], 1u);
    __syncthreads();
    hist[(u64)threadIdx.x * gridDim.x + blockIdx.x] = h[threadIdx.x];
}

extern "C" __global__ void __launch_bounds__(THREADS) radix_scatter(const u64 *__restrict__ keys, const u32 *__restrict__ vals,
                                                                    u64 n, u32 shift, u32 digit, const u64 *__restrict__ offsets,
                                                                    u64 *__restrict__ keys_out, u32 *__restrict__ vals_out) {
    __shared__ u64 base[THREADS];
    __shared__ u32 counts[WARPS][THREADS];
    const u32 t = threadIdx.x, warp = t / 32, lane = t % 32;
    base[t] = offsets[(u64)t * gridDim.x + blockIdx.x];
    const u64 start = (u64)blockIdx.x * TILE, end = min(start + TILE, n);
    for (u64 round = start; round < end; round += THREADS) {
        for (u32 w = 0; w < WARPS; w++) counts[w][t] = 0;
        __syncthreads();
        const u64 i = round + t;
        const bool valid = i < end;
        const u64 k = valid ? keys[i] : 0;
        // Past the end: a digit of its own, matching no one.
        const u32 d = valid ? (u32)((k >> shift) & digit) : THREADS + lane;
        const u32 peers = __match_any_sync(0xffffffffu, d);
        const u32 rank = __popc(peers & ((1u << lane) - 1));
        if (valid && rank == 0) counts[warp][d] = __popc(peers);
        __syncthreads();
        if (valid) {
            u64 at = base[d] + rank;
            for (u32 w = 0; w < warp; w++) at += counts[w][d];
            keys_out[at] = k;
            vals_out[at] = vals[i];
        }
        __syncthreads();
        u32 total = 0;
        for (u32 w = 0; w < WARPS; w++) total += counts[w][t];
        base[t] += total;
        __syncthreads();
    }
}

// Batched lower bound in a sorted u64 array: for each query q, the first
// index i with keys[i] >= q (n when q is above every key).
//
// This is gpuindex's GPU floor: every index structure must beat it on the GPU.
// Two variants, both exact:
//   sorted_lower_bound            plain branchless binary search;
//   sorted_lower_bound_splitters  the top levels come from a splitter table
//                                 staged in shared memory (one 4-byte-bank
//                                 friendly array per block), the rest from
//                                 global memory.
// Each thread carries QPT independent queries through the same number of
// steps (a branchless search over a fixed length takes the same path length
// for every query), so their loads are in flight together.
//
// Compiled at run time with NVRTC (no headers: only built-ins).

typedef unsigned long long u64;

#define QPT 4

__device__ __forceinline__ u64 load_key(const u64 *__restrict__ keys, u64 i) {
    return __ldg(keys + i);
}

// queries[i] for i = t + j*T, j < QPT: coalesced across the threads of a warp.
extern "C" __global__ void sorted_lower_bound(const u64 *__restrict__ keys, u64 n,
                                              const u64 *__restrict__ queries, u64 m,
                                              u64 *__restrict__ out) {
    const u64 threads = (u64)gridDim.x * blockDim.x;
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < m; t += threads * QPT) {
        u64 q[QPT], base[QPT];
        bool live[QPT];
#pragma unroll
        for (int j = 0; j < QPT; j++) {
            u64 i = t + (u64)j * threads;
            live[j] = i < m;
            q[j] = live[j] ? queries[i] : 0;
            base[j] = 0;
        }
        if (n == 0) {
#pragma unroll
            for (int j = 0; j < QPT; j++)
                if (live[j]) out[t + (u64)j * threads] = 0;
            continue;
        }
        u64 len = n;
        while (len > 1) {
            u64 half = len >> 1;
#pragma unroll
            for (int j = 0; j < QPT; j++)
                base[j] = (load_key(keys, base[j] + half - 1) < q[j]) ? base[j] + half : base[j];
            len -= half;
        }
#pragma unroll
        for (int j = 0; j < QPT; j++)
            if (live[j]) out[t + (u64)j * threads] = base[j] + (load_key(keys, base[j]) < q[j]);
    }
}

// splitters[s] = keys[min((s+1)*step, n) - 1] for s < nsplit = ceil(n/step):
// the last key of each segment of `step` keys. Requires n > 0.
// Dynamic shared memory: nsplit * 8 bytes.
extern "C" __global__ void sorted_lower_bound_splitters(const u64 *__restrict__ keys, u64 n,
                                                        const u64 *__restrict__ splitters,
                                                        unsigned nsplit, u64 step,
                                                        const u64 *__restrict__ queries, u64 m,
                                                        u64 *__restrict__ out) {
    extern __shared__ u64 sp[];
    for (unsigned s = threadIdx.x; s < nsplit; s += blockDim.x) sp[s] = splitters[s];
    __syncthreads();

    const u64 threads = (u64)gridDim.x * blockDim.x;
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < m; t += threads * QPT) {
        u64 q[QPT], base[QPT];
        bool live[QPT], above[QPT];
#pragma unroll
        for (int j = 0; j < QPT; j++) {
            u64 i = t + (u64)j * threads;
            live[j] = i < m;
            q[j] = live[j] ? queries[i] : 0;
            base[j] = 0;
        }
        // Level 1: which segment, from shared memory.
        unsigned slen = nsplit;
        while (slen > 1) {
            unsigned half = slen >> 1;
#pragma unroll
            for (int j = 0; j < QPT; j++)
                base[j] = (sp[base[j] + half - 1] < q[j]) ? base[j] + half : base[j];
            slen -= half;
        }
#pragma unroll
        for (int j = 0; j < QPT; j++) {
            u64 seg = base[j] + (sp[base[j]] < q[j]);
            above[j] = seg == nsplit;  // above every key
            base[j] = (above[j] ? nsplit - 1 : seg) * step;
        }
        // Level 2: inside the segment. Every segment is searched as if it
        // had `step` keys; indices past n read keys[n-1], which is >= q for
        // any query that landed in the last segment, so it acts as +inf.
        u64 len = step;
        while (len > 1) {
            u64 half = len >> 1;
#pragma unroll
            for (int j = 0; j < QPT; j++) {
                u64 i = base[j] + half - 1;
                i = i < n ? i : n - 1;
                base[j] = (load_key(keys, i) < q[j]) ? base[j] + half : base[j];
            }
            len -= half;
        }
#pragma unroll
        for (int j = 0; j < QPT; j++) {
            if (!live[j]) continue;
            u64 i = base[j] < n ? base[j] : n - 1;
            u64 r = base[j] + (load_key(keys, i) < q[j]);
            out[t + (u64)j * threads] = above[j] ? n : r;
        }
    }
}

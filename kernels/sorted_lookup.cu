// Batched lower bound in a sorted u64 array: for each query q, the first
// index i with keys[i] >= q (n when q is above every key).
//
// This is gpuindex's GPU floor: every index structure must beat it on the GPU.
// Two variants, both exact:
//   sorted_lower_bound          branchless binary search over the whole array;
//   sorted_lower_bound_sampled  binary search over a sample (the last key of
//                               every `stride` keys, small enough to stay in
//                               L2), then over one `stride`-key window of the
//                               array: a query touches ~log2(stride) sectors
//                               of DRAM instead of ~log2(n) - 20.
// Each thread carries Q = 4 independent queries (8 measured slower on an
// H100: more registers, fewer threads) through the same number of steps
// (a branchless search over a fixed length takes the same path length for
// every query), so their loads are in flight together. Query i of thread t
// is t + j*T (j < Q, T threads): coalesced across a warp.
//
// Compiled at run time with NVRTC (no headers: only built-ins).

typedef unsigned long long u64;

__device__ __forceinline__ u64 ld(const u64 *__restrict__ a, u64 i) { return __ldg(a + i); }

// Advances base[] of Q queries through a branchless search of `len` values
// of `a` starting at base[j]; indices past `last` read a[last] (callers
// guarantee a[last] >= q for every query whose window runs past it, so the
// clamp acts as +inf). Leaves the lower bound inside the window in base[].
template <int Q>
__device__ __forceinline__ void search(const u64 *__restrict__ a, u64 last, u64 len, const u64 (&q)[Q],
                                       u64 (&base)[Q]) {
    while (len > 1) {
        u64 half = len >> 1;
#pragma unroll
        for (int j = 0; j < Q; j++) {
            u64 i = base[j] + half - 1;
            i = i < last ? i : last;
            base[j] = (ld(a, i) < q[j]) ? base[j] + half : base[j];
        }
        len -= half;
    }
#pragma unroll
    for (int j = 0; j < Q; j++) {
        u64 i = base[j] < last ? base[j] : last;
        base[j] += (ld(a, i) < q[j]);
    }
}

template <int Q>
__device__ __forceinline__ void plain(const u64 *__restrict__ keys, u64 n, const u64 *__restrict__ queries,
                                      u64 m, u64 *__restrict__ out) {
    const u64 threads = (u64)gridDim.x * blockDim.x;
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < m; t += threads * Q) {
        u64 q[Q], base[Q];
#pragma unroll
        for (int j = 0; j < Q; j++) {
            u64 i = t + (u64)j * threads;
            q[j] = i < m ? queries[i] : 0;
            base[j] = 0;
        }
        if (n > 0) search<Q>(keys, n - 1, n, q, base);
#pragma unroll
        for (int j = 0; j < Q; j++) {
            u64 i = t + (u64)j * threads;
            if (i < m) out[i] = base[j];
        }
    }
}

// sample[s] = keys[min((s+1)*stride, n) - 1] for s < ns = ceil(n/stride).
// Requires n > 0.
template <int Q>
__device__ __forceinline__ void sampled(const u64 *__restrict__ keys, u64 n, const u64 *__restrict__ sample,
                                        u64 ns, u64 stride, const u64 *__restrict__ queries, u64 m,
                                        u64 *__restrict__ out) {
    const u64 threads = (u64)gridDim.x * blockDim.x;
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < m; t += threads * Q) {
        u64 q[Q], base[Q];
        bool above[Q];
#pragma unroll
        for (int j = 0; j < Q; j++) {
            u64 i = t + (u64)j * threads;
            q[j] = i < m ? queries[i] : 0;
            base[j] = 0;
        }
        // Which window: the first sample >= q (ns when q is above every key).
        search<Q>(sample, ns - 1, ns, q, base);
#pragma unroll
        for (int j = 0; j < Q; j++) {
            above[j] = base[j] == ns;
            base[j] = (above[j] ? ns - 1 : base[j]) * stride;
        }
        // Inside the window; the last window may run past n, where the clamp
        // reads keys[n-1] >= q.
        search<Q>(keys, n - 1, stride, q, base);
#pragma unroll
        for (int j = 0; j < Q; j++) {
            u64 i = t + (u64)j * threads;
            if (i < m) out[i] = above[j] ? n : base[j];
        }
    }
}

extern "C" __global__ void sorted_lower_bound(const u64 *__restrict__ keys, u64 n, const u64 *__restrict__ queries,
                                              u64 m, u64 *__restrict__ out) {
    plain<4>(keys, n, queries, m, out);
}

extern "C" __global__ void sorted_lower_bound_sampled(const u64 *__restrict__ keys, u64 n,
                                                      const u64 *__restrict__ sample, u64 ns, u64 stride,
                                                      const u64 *__restrict__ queries, u64 m,
                                                      u64 *__restrict__ out) {
    sampled<4>(keys, n, sample, ns, stride, queries, m, out);
}

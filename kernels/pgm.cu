// G-Learned index lookups (crates/engine/src/pgm/): a PGM-index over sorted
// u64 keys, one thread per query. The segments of every level are three
// parallel arrays (first key, slope, predicted position at the first key),
// bottom level first; levels[2l], levels[2l+1] = offset and length of level l.
//
//   pgm_predict       the bottom level's prediction of each query, for the
//                     host's last mile over keys kept in host memory;
//   pgm_lower_bound   the whole lower bound, with the keys on the device.
//
// Both find the bottom segment by descending every level (the paper's
// complete query: a window of +-eps_inner around each prediction) or, with
// `concise`, by a binary search of the whole bottom level. Every window
// search widens (doubling) until the answer's neighbours bound the query,
// as the CPU's does (pgm/mod.rs): a model off by any amount costs time,
// never a wrong position.
//
// Compiled at run time with NVRTC (no headers: only built-ins).

typedef unsigned long long u64;

__device__ __forceinline__ u64 ld(const u64 *__restrict__ a, u64 i) { return __ldg(a + i); }

// Segment s's prediction for k (>= its first key), clamped as the CPU's
// (pgm/mod.rs): to at most the next segment's prediction at its own first
// key (`end`: one past the last segment of s's level), at least its own,
// and to [0, len).
__device__ __forceinline__ u64 predict(const u64 *__restrict__ first, const double *__restrict__ slope,
                                       const double *__restrict__ icpt, u64 s, u64 end, u64 k, u64 len) {
    double p = __ldg(icpt + s) + __ldg(slope + s) * (double)(k - ld(first, s));
    if (s + 1 < end) p = fmin(p, __ldg(icpt + s + 1));
    p = fmax(p, __ldg(icpt + s));
    p = fmin(fmax(p, 0.0), (double)(len - 1));
    return (u64)p;
}

// The last i < n with a[i] <= k (a[0] <= k), from the window [lo, hi).
__device__ __forceinline__ u64 rightmost_le(const u64 *__restrict__ a, u64 n, u64 k, u64 lo, u64 hi) {
    lo = lo < n - 1 ? lo : n - 1;
    hi = hi < lo + 1 ? lo + 1 : (hi > n ? n : hi);
    u64 w = 1;
    while (lo > 0 && ld(a, lo) > k) {
        lo = lo > w ? lo - w : 0;
        w *= 2;
    }
    while (hi < n && ld(a, hi) <= k) {
        hi = hi + w < n ? hi + w : n;
        w *= 2;
    }
    u64 len = hi - lo;
    while (len > 0) {
        const u64 half = len >> 1;
        if (ld(a, lo + half) <= k) {
            lo += half + 1;
            len -= half + 1;
        } else {
            len = half;
        }
    }
    return lo - 1;
}

// The first i < n with keys[i] >= q (n if none), from the window [lo, hi).
__device__ __forceinline__ u64 lower_bound_in(const u64 *__restrict__ keys, u64 n, u64 q, u64 lo, u64 hi) {
    lo = lo < n ? lo : n;
    hi = hi < lo ? lo : (hi > n ? n : hi);
    u64 w = 1;
    while (lo > 0 && ld(keys, lo - 1) >= q) {
        lo = lo > w ? lo - w : 0;
        w *= 2;
    }
    while (hi < n && ld(keys, hi) < q) {
        hi = hi + w < n ? hi + w : n;
        w *= 2;
    }
    u64 len = hi - lo;
    while (len > 0) {
        const u64 half = len >> 1;
        if (ld(keys, lo + half) < q) {
            lo += half + 1;
            len -= half + 1;
        } else {
            len = half;
        }
    }
    return lo;
}

// The bottom segment for k (>= the first key).
__device__ __forceinline__ u64 bottom_segment(const u64 *__restrict__ first, const double *__restrict__ slope,
                                              const double *__restrict__ icpt, const u64 *__restrict__ levels,
                                              unsigned nlevels, u64 eps_inner, int concise, u64 k) {
    if (concise) return rightmost_le(first, ld(levels, 1), k, 0, ld(levels, 1));
    u64 s = ld(levels, 2 * (nlevels - 1));
    for (int l = (int)nlevels - 1; l >= 1; l--) {
        const u64 off = ld(levels, 2 * (l - 1)), len = ld(levels, 2 * (l - 1) + 1);
        const u64 end = ld(levels, 2 * l) + ld(levels, 2 * l + 1);
        const u64 p = predict(first, slope, icpt, s, end, k, len);
        const u64 lo = p > eps_inner + 1 ? p - eps_inner - 1 : 0;
        s = off + rightmost_le(first + off, len, k, lo, p + eps_inner + 2);
    }
    return s;
}

extern "C" __global__ void pgm_predict(const u64 *__restrict__ first, const double *__restrict__ slope,
                                       const double *__restrict__ icpt, const u64 *__restrict__ levels,
                                       unsigned nlevels, u64 eps_inner, int concise, u64 n,
                                       const u64 *__restrict__ queries, u64 m, u64 *__restrict__ out) {
    const u64 first_key = ld(first, 0);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += (u64)gridDim.x * blockDim.x) {
        u64 k = queries[i];
        k = k > first_key ? k : first_key;
        const u64 s = bottom_segment(first, slope, icpt, levels, nlevels, eps_inner, concise, k);
        out[i] = predict(first, slope, icpt, s, ld(levels, 1), k, n);
    }
}

extern "C" __global__ void pgm_lower_bound(const u64 *__restrict__ first, const double *__restrict__ slope,
                                           const double *__restrict__ icpt, const u64 *__restrict__ levels,
                                           unsigned nlevels, u64 eps_inner, int concise, u64 eps,
                                           const u64 *__restrict__ keys, u64 n, const u64 *__restrict__ queries,
                                           u64 m, u64 *__restrict__ out) {
    const u64 first_key = ld(keys, 0);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += (u64)gridDim.x * blockDim.x) {
        const u64 q = queries[i];
        if (q <= first_key) {
            out[i] = 0;
            continue;
        }
        const u64 s = bottom_segment(first, slope, icpt, levels, nlevels, eps_inner, concise, q);
        const u64 p = predict(first, slope, icpt, s, ld(levels, 1), q, n);
        out[i] = lower_bound_in(keys, n, q, p > eps + 1 ? p - eps - 1 : 0, p + eps + 2);
    }
}

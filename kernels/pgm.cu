// G-Learned index lookups (crates/engine/src/pgm/): a PGM-index over sorted
// u64 keys, one thread per query. The segments of every level are three
// parallel arrays (first key, slope, predicted position at the first key),
// bottom level first; levels[2l], levels[2l+1] = offset and length of level l.
//
//   pgm_predict       the bottom level's prediction of each query, for the
//                     host's last mile over keys kept in host memory;
//   pgm_lower_bound   the whole lower bound, with the keys on the device;
//   pgm_fit_chunks    the model's construction (below).
//
// Both lookups may first stage segments in shared memory (`Model`).
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

// The model's segments: global memory, and a copy in shared memory of
// those from `staged` on (the paper's staging: the whole model when it
// fits the block's budget, else the levels above the bottom, else none;
// `staged` is then the segment count).
struct Model {
    const u64 *__restrict__ first;
    const double *__restrict__ slope;
    const double *__restrict__ icpt;
    const u64 *sf;
    const double *ss, *si;
    u64 staged;
    __device__ __forceinline__ u64 f(u64 s) const { return s >= staged ? sf[s - staged] : ld(first, s); }
    __device__ __forceinline__ double sl(u64 s) const { return s >= staged ? ss[s - staged] : __ldg(slope + s); }
    __device__ __forceinline__ double ic(u64 s) const { return s >= staged ? si[s - staged] : __ldg(icpt + s); }
};

// Copies the staged segments into the block's shared memory; every thread
// of the block calls it (it synchronises the block).
__device__ __forceinline__ Model stage(const u64 *first, const double *slope, const double *icpt, u64 total, u64 staged) {
    extern __shared__ u64 smem[];
    const u64 ns = total - staged;
    u64 *sf = smem;
    double *ss = (double *)(smem + ns), *si = (double *)(smem + 2 * ns);
    for (u64 j = threadIdx.x; j < ns; j += blockDim.x) {
        sf[j] = ld(first, staged + j);
        ss[j] = __ldg(slope + staged + j);
        si[j] = __ldg(icpt + staged + j);
    }
    __syncthreads();
    return Model{first, slope, icpt, sf, ss, si, staged};
}

// Segment s's prediction for k (>= its first key), clamped as the CPU's
// (pgm/mod.rs): to at most the next segment's prediction at its own first
// key (`end`: one past the last segment of s's level), at least its own,
// and to [0, len).
__device__ __forceinline__ u64 predict(const Model &m, u64 s, u64 end, u64 k, u64 len) {
    double p = m.ic(s) + m.sl(s) * (double)(k - m.f(s));
    if (s + 1 < end) p = fmin(p, m.ic(s + 1));
    p = fmax(p, m.ic(s));
    p = fmin(fmax(p, 0.0), (double)(len - 1));
    return (u64)p;
}

// The last i < n with first[off + i] <= k (first[off] <= k), from the
// window [lo, hi).
__device__ __forceinline__ u64 rightmost_le(const Model &m, u64 off, u64 n, u64 k, u64 lo, u64 hi) {
    lo = lo < n - 1 ? lo : n - 1;
    hi = hi < lo + 1 ? lo + 1 : (hi > n ? n : hi);
    u64 w = 1;
    while (lo > 0 && m.f(off + lo) > k) {
        lo = lo > w ? lo - w : 0;
        w *= 2;
    }
    while (hi < n && m.f(off + hi) <= k) {
        hi = hi + w < n ? hi + w : n;
        w *= 2;
    }
    u64 len = hi - lo;
    while (len > 0) {
        const u64 half = len >> 1;
        if (m.f(off + lo + half) <= k) {
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
__device__ __forceinline__ u64 bottom_segment(const Model &m, const u64 *__restrict__ levels, unsigned nlevels,
                                              u64 eps_inner, int concise, u64 k) {
    if (concise) return rightmost_le(m, 0, ld(levels, 1), k, 0, ld(levels, 1));
    u64 s = ld(levels, 2 * (nlevels - 1));
    for (int l = (int)nlevels - 1; l >= 1; l--) {
        const u64 off = ld(levels, 2 * (l - 1)), len = ld(levels, 2 * (l - 1) + 1);
        const u64 end = ld(levels, 2 * l) + ld(levels, 2 * l + 1);
        const u64 p = predict(m, s, end, k, len);
        const u64 lo = p > eps_inner + 1 ? p - eps_inner - 1 : 0;
        s = off + rightmost_le(m, off, len, k, lo, p + eps_inner + 2);
    }
    return s;
}

// Segments in all levels (the last level's end).
__device__ __forceinline__ u64 segments(const u64 *__restrict__ levels, unsigned nlevels) {
    return ld(levels, 2 * (nlevels - 1)) + ld(levels, 2 * (nlevels - 1) + 1);
}

extern "C" __global__ void pgm_predict(const u64 *__restrict__ first, const double *__restrict__ slope,
                                       const double *__restrict__ icpt, const u64 *__restrict__ levels,
                                       unsigned nlevels, u64 eps_inner, int concise, u64 staged, u64 n,
                                       const u64 *__restrict__ queries, u64 m, u64 *__restrict__ out) {
    const Model md = stage(first, slope, icpt, segments(levels, nlevels), staged);
    const u64 first_key = ld(first, 0);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += (u64)gridDim.x * blockDim.x) {
        u64 k = queries[i];
        k = k > first_key ? k : first_key;
        const u64 s = bottom_segment(md, levels, nlevels, eps_inner, concise, k);
        out[i] = predict(md, s, ld(levels, 1), k, n);
    }
}

extern "C" __global__ void pgm_lower_bound(const u64 *__restrict__ first, const double *__restrict__ slope,
                                           const double *__restrict__ icpt, const u64 *__restrict__ levels,
                                           unsigned nlevels, u64 eps_inner, int concise, u64 staged, u64 eps,
                                           const u64 *__restrict__ keys, u64 n, const u64 *__restrict__ queries,
                                           u64 m, u64 *__restrict__ out) {
    const Model md = stage(first, slope, icpt, segments(levels, nlevels), staged);
    const u64 first_key = ld(keys, 0);
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += (u64)gridDim.x * blockDim.x) {
        const u64 q = queries[i];
        if (q <= first_key) {
            out[i] = 0;
            continue;
        }
        const u64 s = bottom_segment(md, levels, nlevels, eps_inner, concise, q);
        const u64 p = predict(md, s, ld(levels, 1), q, n);
        out[i] = lower_bound_in(keys, n, q, p > eps + 1 ? p - eps - 1 : 0, p + eps + 2);
    }
}

// ---------------------------------------------------------------------------
// Construction: the bottom level fitted in chunks, one thread per chunk
// (Theorem 1: each chunk costs at most one segment over the sequential
// fit). The same points and the same streaming PLA as the CPU's
// (pgm/mod.rs `bottom_points`, pgm/pla.rs): exact 128-bit coordinates,
// and the final line in round-to-nearest double operations without
// contraction, so the segments are bit for bit the CPU's with the same
// chunks. Each thread keeps its hulls in its own `hull_cap` slots of
// `scratch`; a chunk whose hulls or segments outgrow their room raises its
// `overflow` flag and the host fits it instead.

typedef __int128 i128;

struct HullPoint {
    u64 x;
    long long y;
};

struct Pt {
    i128 x, y;
};

__device__ __forceinline__ Pt pt(HullPoint h) { return Pt{(i128)h.x, (i128)h.y}; }
__device__ __forceinline__ HullPoint hp(Pt p) { return HullPoint{(u64)p.x, (long long)p.y}; }
__device__ __forceinline__ Pt sub(Pt a, Pt b) { return Pt{a.x - b.x, a.y - b.y}; }
// a < b as slopes (both dx > 0).
__device__ __forceinline__ bool less(Pt a, Pt b) { return a.y * b.x < b.y * a.x; }
__device__ __forceinline__ i128 cross(Pt o, Pt a, Pt b) {
    const Pt oa = sub(a, o), ob = sub(b, o);
    return oa.x * ob.y - oa.y * ob.x;
}

struct Fit {
    i128 eps;
    HullPoint *upper, *lower;
    unsigned cap, un, ln, us, ls;
    u64 points, first;
    Pt rect[4];
    bool overflow;
};

__device__ __forceinline__ void push(HullPoint *h, unsigned *len, Pt p, Fit &f) {
    if (*len >= f.cap) {
        f.overflow = true;
        return;
    }
    h[(*len)++] = hp(p);
}

// pla.rs `Pla::add`.
__device__ bool fit_add(Fit &f, u64 x, u64 y) {
    const Pt p1 = Pt{(i128)x, (i128)y + f.eps}, p2 = Pt{(i128)x, (i128)y - f.eps};
    if (f.points == 0) {
        f.first = x;
        f.rect[0] = p1;
        f.rect[1] = p2;
        f.un = f.ln = f.us = f.ls = 0;
        push(f.upper, &f.un, p1, f);
        push(f.lower, &f.ln, p2, f);
        f.points = 1;
        return true;
    }
    if (f.points == 1) {
        f.rect[2] = p2;
        f.rect[3] = p1;
        push(f.upper, &f.un, p1, f);
        push(f.lower, &f.ln, p2, f);
        f.points = 2;
        return true;
    }
    const Pt slope1 = sub(f.rect[2], f.rect[0]), slope2 = sub(f.rect[3], f.rect[1]);
    if (less(sub(p1, f.rect[2]), slope1) || less(slope2, sub(p2, f.rect[3]))) return false;
    if (less(sub(p1, f.rect[1]), slope2)) {
        Pt min = sub(pt(f.lower[f.ls]), p1);
        unsigned at = f.ls;
        for (unsigned i = f.ls + 1; i < f.ln; i++) {
            const Pt v = sub(pt(f.lower[i]), p1);
            if (less(min, v)) break;
            min = v;
            at = i;
        }
        f.rect[1] = pt(f.lower[at]);
        f.rect[3] = p1;
        f.ls = at;
        unsigned end = f.un;
        while (end >= f.us + 2 && cross(pt(f.upper[end - 2]), pt(f.upper[end - 1]), p1) <= 0) end--;
        f.un = end;
        push(f.upper, &f.un, p1, f);
    }
    if (less(slope1, sub(p2, f.rect[0]))) {
        Pt max = sub(pt(f.upper[f.us]), p2);
        unsigned at = f.us;
        for (unsigned i = f.us + 1; i < f.un; i++) {
            const Pt v = sub(pt(f.upper[i]), p2);
            if (less(v, max)) break;
            max = v;
            at = i;
        }
        f.rect[0] = pt(f.upper[at]);
        f.rect[2] = p2;
        f.us = at;
        unsigned end = f.ln;
        while (end >= f.ls + 2 && cross(pt(f.lower[end - 2]), pt(f.lower[end - 1]), p2) >= 0) end--;
        f.ln = end;
        push(f.lower, &f.ln, p2, f);
    }
    f.points++;
    return true;
}

// pla.rs `Pla::line`, written to segment slot `at`.
__device__ void fit_line(Fit &f, u64 *sf, double *ss, double *si, u64 at) {
    const u64 points = f.points;
    f.points = 0;
    const Pt p0 = f.rect[0], p1 = f.rect[1], p2 = f.rect[2], p3 = f.rect[3];
    sf[at] = f.first;
    if (points == 1) {
        ss[at] = 0.0;
        si[at] = (double)((p0.y + p1.y) / 2);
        return;
    }
    const Pt s1 = sub(p2, p0), s2 = sub(p3, p1);
    const double slope =
        __ddiv_rn(__dadd_rn(__ddiv_rn((double)s1.y, (double)s1.x), __ddiv_rn((double)s2.y, (double)s2.x)), 2.0);
    const i128 a = s1.x * s2.y - s1.y * s2.x;
    double ix = 0.0, iy = 0.0;
    if (a != 0) {
        const i128 b = (p1.x - p0.x) * (p3.y - p1.y) - (p1.y - p0.y) * (p3.x - p1.x);
        ix = __ddiv_rn(__dmul_rn((double)b, (double)s1.x), (double)a);
        iy = __ddiv_rn(__dmul_rn((double)b, (double)s1.y), (double)a);
    }
    ss[at] = slope;
    si[at] = __dsub_rn(__dadd_rn((double)p0.y, iy), __dmul_rn(__dadd_rn((double)(p0.x - (i128)f.first), ix), slope));
}

// Chunk c = keys[starts[c], starts[c+1]) (each start a first occurrence):
// its segments into slots [base[c], base[c+1]), their number in count[c].
extern "C" __global__ void pgm_fit_chunks(const u64 *__restrict__ keys, u64 n, const u64 *__restrict__ starts,
                                          unsigned nchunks, u64 eps, HullPoint *__restrict__ scratch,
                                          unsigned hull_cap, const u64 *__restrict__ base, u64 *__restrict__ sf,
                                          double *__restrict__ ss, double *__restrict__ si,
                                          unsigned *__restrict__ count, int *__restrict__ overflow) {
    const unsigned c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= nchunks) return;
    Fit f;
    f.eps = (i128)eps;
    f.upper = scratch + (u64)c * 2 * hull_cap;
    f.lower = f.upper + hull_cap;
    f.cap = hull_cap;
    f.points = 0;
    f.overflow = false;
    const u64 from = ld(starts, c), to = ld(starts, c + 1), b = ld(base, c), room = ld(base, c + 1) - b;
    u64 segs = 0;
    // pgm/mod.rs `bottom_points`: each distinct key at its first position;
    // after a run of duplicates, the next key value at the run's end (when
    // the key after the run is not that value). A run is skipped by
    // galloping to its end, not key by key (Zipf keys repeat by millions).
    for (u64 i = from; i < to && !f.overflow;) {
        const u64 x = ld(keys, i);
        u64 lo = i, hi = i + 1, step = 1;
        while (hi < to && ld(keys, hi) == x) {
            lo = hi;
            hi = hi + step < to ? hi + step : to;
            step *= 2;
        }
        while (hi - lo > 1) {
            const u64 mid = lo + (hi - lo) / 2;
            if (ld(keys, mid) == x) lo = mid;
            else hi = mid;
        }
        const u64 e = lo;  // the run's last position
        u64 px[2], py[2];
        int np = 0;
        px[np] = x;
        py[np++] = i;
        if (e > i) {
            const bool has_next = e + 1 < n;
            const u64 next = has_next ? ld(keys, e + 1) : 0;
            if (x != ~0ULL && (!has_next || next != x + 1)) {
                px[np] = x + 1;
                py[np++] = e + 1;
            }
        }
        for (int j = 0; j < np && !f.overflow; j++) {
            if (!fit_add(f, px[j], py[j])) {
                if (segs >= room) {
                    f.overflow = true;
                    break;
                }
                fit_line(f, sf, ss, si, b + segs++);
                fit_add(f, px[j], py[j]);
            }
        }
        i = e + 1;
    }
    if (!f.overflow && f.points > 0) {
        if (segs >= room) f.overflow = true;
        else fit_line(f, sf, ss, si, b + segs++);
    }
    count[c] = f.overflow ? 0 : (unsigned)segs;
    overflow[c] = f.overflow ? 1 : 0;
}

// Moves chunk c's segments (one block per chunk) from slot base[c] to
// position at[c] of the packed level.
extern "C" __global__ void pgm_pack_segments(const u64 *__restrict__ base, const unsigned *__restrict__ count,
                                             const u64 *__restrict__ at, const u64 *__restrict__ sf,
                                             const double *__restrict__ ss, const double *__restrict__ si,
                                             u64 *__restrict__ df, double *__restrict__ ds, double *__restrict__ di) {
    const unsigned c = blockIdx.x;
    const u64 from = ld(base, c), to = ld(at, c), m = count[c];
    for (u64 j = threadIdx.x; j < m; j += blockDim.x) {
        df[to + j] = sf[from + j];
        ds[to + j] = ss[from + j];
        di[to + j] = si[from + j];
    }
}

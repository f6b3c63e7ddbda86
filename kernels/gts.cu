// GTS on the GPU (Zhu et al., SIGMOD 2024): batched exact kNN and range
// search over the balanced pivot tree, level by level with (query, node)
// pairs as the unit of work (crates/engine/src/gts/gpu.rs drives it):
//
//   pivot distances of every pair -> per-query kNN bound from the k-th
//   nearest pivot of the level -> children that pass the ring test, counted,
//   scanned and written as the next level's pairs -> at the leaves, one
//   block per query computes exact distances of the objects its leaves
//   hold (after the per-object pivot-distance filter) and keeps its k
//   nearest, or all within the radius.
//
// Distances are the CPU's (gts/metric.rs) bit for bit: sums in float8 over
// eight fixed lanes (here: eight threads of a warp, one lane each), the
// lanes added in the same fixed tree, the tail in order, with explicit
// round-to-nearest intrinsics (no fused multiply-add). Pruning bounds are
// loosened as on the CPU, with room for this GPU's acos/cos rounding.
//
// Compiled at run time with NVRTC (no headers: only built-ins).

typedef unsigned long long u64;
typedef unsigned int u32;

#define L2 1
#define L1 2
#define COSINE 3
#define LEVENSHTEIN 5
#define MAX_CHARS 255  // metric.rs's MAX_CHARS
#define RELATIVE_SLACK 1e-9
#define ANGLE_SLACK 1e-6
#define PI 3.141592653589793
#define INF __longlong_as_double(0x7ff0000000000000ULL)

// Candidates a leaf block keeps before it sorts them down to k (k <= 1024).
#define CAP 2048
// Objects a 256-thread block measures at once (eight threads each).
#define PER_ROUND 32

struct Node {  // 32 bytes, as gts/tree.rs
    double min, max;
    u64 offset, size;
};

// ------------------------------------------------------------ distances

// The term summed for each element: 0 squared difference, 1 absolute
// difference, 2 product.
template <int OP>
__device__ __forceinline__ double term(float a, float b) {
    double x = (double)a, y = (double)b;
    if (OP == 0) {
        double d = __dsub_rn(x, y);
        return __dmul_rn(d, d);
    }
    if (OP == 1) return fabs(__dsub_rn(x, y));
    return __dmul_rn(x, y);
}

// metric.rs's lane_sum by the eight threads of one group (lane l of
// mask): lane l sums elements l, l + 8, ... in order; the lanes combine as
// ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)) (each step adds partners, and
// addition commutes, so every lane holds the same bits); then the tail.
template <int OP>
__device__ __forceinline__ double lane_sum(const float *a, const float *b, u32 dim, u32 l, u32 mask) {
    double acc = 0.0;
    const u32 chunks = dim / 8;
    for (u32 c = 0; c < chunks; c++) acc = __dadd_rn(acc, term<OP>(a[c * 8 + l], b[c * 8 + l]));
    acc = __dadd_rn(acc, __shfl_xor_sync(mask, acc, 1));
    acc = __dadd_rn(acc, __shfl_xor_sync(mask, acc, 2));
    acc = __dadd_rn(acc, __shfl_xor_sync(mask, acc, 4));
    for (u32 i = chunks * 8; i < dim; i++) acc = __dadd_rn(acc, term<OP>(a[i], b[i]));
    return acc;
}

// metric.rs's edit_distance_within: zero-padded strings of at most
// MAX_CHARS characters; the common prefix and suffix, then one row of the
// dynamic program over the shorter, stopping once the distance must
// exceed `bound` (returning a lower bound above it). Each of a group's
// eight threads computes it.
__device__ __forceinline__ double edit_distance_within(const float *a, const float *b, u32 dim, double bound) {
    u32 m = 0, n = 0;
    while (m < dim && a[m] != 0.0f) m++;
    while (n < dim && b[n] != 0.0f) n++;
    u32 p = 0;
    while (p < m && p < n && a[p] == b[p]) p++;
    while (m > p && n > p && a[m - 1] == b[n - 1]) m--, n--;
    a += p, b += p, m -= p, n -= p;
    if (m < n) {
        const float *t = a;
        a = b, b = t;
        u32 x = m;
        m = n, n = x;
    }
    if ((double)(m - n) > bound) return (double)(m - n);
    unsigned short row[MAX_CHARS + 1];
    for (u32 j = 0; j <= n; j++) row[j] = j;
    for (u32 i = 0; i < m; i++) {
        const float ca = a[i];
        u32 diag = row[0];
        row[0] = i + 1;
        const int left = (int)(m - i - 1);
        int lb = (int)row[0] + abs(left - (int)n);
        for (u32 j = 0; j < n; j++) {
            const u32 up = row[j + 1];
            const u32 v = min(min(up + 1, row[j] + 1u), diag + (ca != b[j] ? 1u : 0u));
            row[j + 1] = v;
            diag = up;
            lb = min(lb, (int)v + abs(left - (int)(n - j - 1)));
        }
        if ((double)lb > bound) return (double)lb;
    }
    return (double)row[n];
}

// Metric::distance(q, v): qn and vn are the squared norms (cosine only).
__device__ __forceinline__ double distance(u32 metric, const float *q, double qn, const float *v, double vn, u32 dim, u32 l,
                                           u32 mask) {
    if (metric == LEVENSHTEIN) return edit_distance_within(q, v, dim, INF);
    if (metric == L2) return __dsqrt_rn(lane_sum<0>(q, v, dim, l, mask));
    if (metric == L1) return lane_sum<1>(q, v, dim, l, mask);
    double c = __ddiv_rn(lane_sum<2>(q, v, dim, l, mask), __dmul_rn(__dsqrt_rn(qn), __dsqrt_rn(vn)));
    c = c < -1.0 ? -1.0 : (c > 1.0 ? 1.0 : c);  // f64::clamp: NaN stays NaN
    return __dsub_rn(1.0, c);
}

// Metric::to_metric: the angle for cosine.
__device__ __forceinline__ double to_metric(u32 metric, double d) {
    if (metric != COSINE) return d;
    double c = 1.0 - d;
    return acos(c < -1.0 ? -1.0 : (c > 1.0 ? 1.0 : c));
}

// Metric::lower_bound: a tree-metric lower bound in operator units,
// loosened for rounding.
__device__ __forceinline__ double lower_bound(u32 metric, double lb, double scale) {
    lb = lb - RELATIVE_SLACK * scale;
    if (metric == COSINE) {
        double angle = lb - ANGLE_SLACK;
        if (angle <= 0.0) return 0.0;
        return fmax(1.0 - cos(fmin(angle, PI)) - 1e-15, 0.0);
    }
    return fmax(lb, 0.0);
}

__device__ __forceinline__ double ring_bound(u32 metric, double dq, double mn, double mx) {
    return lower_bound(metric, fmax(fmax(mn - dq, dq - mx), 0.0), dq + mx);
}

// ------------------------------------------------------------ per level

// Squared norms of n vectors (cosine), eight threads each.
extern "C" __global__ void gts_norms(const float *__restrict__ v, u64 n, u32 dim, double *__restrict__ out) {
    const u32 l = threadIdx.x & 7, mask = 0xffu << (threadIdx.x & 24);
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 8; i < n; i += (u64)gridDim.x * blockDim.x / 8) {
        const float *x = v + i * dim;
        double s = lane_sum<2>(x, x, dim, l, mask);
        if (l == 0) out[i] = s;
    }
}

// For each (query, internal node) pair: the distance of the query to the
// node's pivot, in operator units for the kNN bound (infinite when no
// object of the node's subtree holds the pivot any more) and in the tree
// metric for the ring tests of its children.
extern "C" __global__ void gts_pivot_dist(const float *__restrict__ queries, const double *__restrict__ qnorms,
                                          const float *__restrict__ pivots, const unsigned char *__restrict__ held, u32 dim,
                                          u32 metric, const u32 *__restrict__ pair_q, const u32 *__restrict__ pair_node,
                                          u64 npairs, double *__restrict__ d_op, double *__restrict__ d_metric) {
    const u32 l = threadIdx.x & 7, mask = 0xffu << (threadIdx.x & 24);
    for (u64 i = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 8; i < npairs; i += (u64)gridDim.x * blockDim.x / 8) {
        const u32 q = pair_q[i], node = pair_node[i];
        const float *p = pivots + (u64)node * dim;
        double pn = metric == COSINE ? lane_sum<2>(p, p, dim, l, mask) : 0.0;
        double d = distance(metric, queries + (u64)q * dim, metric == COSINE ? qnorms[q] : 0.0, p, pn, dim, l, mask);
        if (l == 0) {
            d_op[i] = held[node] ? d : INF;
            d_metric[i] = to_metric(metric, d);
        }
    }
}

// seg[q] = the first pair of query q (pairs are in query order); seg[m] =
// npairs. One thread per pair boundary.
extern "C" __global__ void gts_segments(const u32 *__restrict__ pair_q, u64 npairs, u32 m, u64 *__restrict__ seg) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i <= npairs; i += (u64)gridDim.x * blockDim.x) {
        const u32 lo = i == 0 ? 0 : pair_q[i - 1] + 1;
        const u32 hi = i == npairs ? m : pair_q[i];
        for (u32 q = lo; q <= hi && (i < npairs || q <= m); q++) seg[q] = i;
    }
}

// One block per query: the k-th smallest of its pairs' pivot distances
// (distinct objects: the nodes of a level own disjoint ranges, and each
// pivot is an object of its node), which bounds its k-th nearest neighbour
// from above: dk = min(dk, that). A radix select on the bits of
// non-negative doubles, eight bits a pass.
extern "C" __global__ void gts_kth(const double *__restrict__ d_op, const u64 *__restrict__ seg, u32 k, double *__restrict__ dk) {
    __shared__ u32 hist[256];
    __shared__ u64 prefix, mask;
    __shared__ u32 want;
    const u32 q = blockIdx.x;
    const u64 a = seg[q], b = seg[q + 1];
    if (b - a < k) return;
    if (threadIdx.x == 0) {
        prefix = 0;
        mask = 0;
        want = k;
    }
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (u32 i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        for (u64 i = a + threadIdx.x; i < b; i += blockDim.x) {
            u64 key = (u64)__double_as_longlong(d_op[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            u32 bucket = 0, below = 0;
            while (below + hist[bucket] < want) below += hist[bucket++];
            want -= below;
            prefix |= (u64)bucket << shift;
            mask |= (u64)255 << shift;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) dk[q] = fmin(dk[q], __longlong_as_double((long long)prefix));
}

// For each pair (query, internal node): its children that may hold an
// answer (non-empty, ring bound within the query's bound). Counts them
// when off is NULL; otherwise writes them as the next level's pairs from
// off[i], each with this pair's pivot distance as its parent's.
extern "C" __global__ void gts_expand(const u32 *__restrict__ pair_q, const u32 *__restrict__ pair_node,
                                      const double *__restrict__ d_metric, u64 npairs, const Node *__restrict__ nodes, u32 fanout,
                                      u32 metric, const double *__restrict__ bound, u32 *__restrict__ counts,
                                      const u64 *__restrict__ off, u32 *__restrict__ out_q, u32 *__restrict__ out_node,
                                      double *__restrict__ out_dp) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < npairs; i += (u64)gridDim.x * blockDim.x) {
        const u32 q = pair_q[i];
        const double dq = d_metric[i], r = bound[q];
        u64 at = off ? off[i] : 0;
        u32 n = 0;
        for (u32 j = 0; j < fanout; j++) {
            const u32 c = pair_node[i] * fanout + j + 1;
            const Node nd = nodes[c];
            if (nd.size == 0 || ring_bound(metric, dq, nd.min, nd.max) > r) continue;
            if (off) {
                out_q[at] = q;
                out_node[at] = c;
                out_dp[at] = dq;
                at++;
            }
            n++;
        }
        if (!off) counts[i] = n;
    }
}

// ------------------------------------------------------------ leaves

// The objects a query's leaf pairs hold, eight threads an object,
// PER_ROUND at a time (edit distance: a thread an object, blockDim.x at a
// time): calls visit(position, distance) for those that
// pass the pivot-distance filter against bound() (read once a round) and
// are within it. Without pairs (pair_node NULL), every one of the n
// objects (brute force). Rounds are block-wide (between rounds the block
// synchronises and may call between()).
template <typename Bound, typename Visit, typename Between>
__device__ __forceinline__ void for_objects(u32 q, const float *qv, double qn, u32 dim, u32 metric, const float *vectors,
                                            const double *norms, const double *pdist, const Node *nodes,
                                            const u32 *pair_node, const double *pair_dp, const u64 *seg, u64 n, Bound bound,
                                            Visit visit, Between between) {
    const u32 g = threadIdx.x / 8, l = threadIdx.x & 7, mask = 0xffu << (threadIdx.x & 24);
    const u64 a = pair_node ? seg[q] : 0, b = pair_node ? seg[q + 1] : 1;
    for (u64 p = a; p < b; p++) {
        u32 node = 0;
        u64 start = 0, size = n;
        double dp = 0.0;
        if (pair_node) {
            node = pair_node[p];
            dp = pair_dp[p];
            start = nodes[node].offset;
            size = nodes[node].size;
        }
        // The root as the only leaf has no routing pivot.
        const bool filter = pair_node && node != 0;
        // Edit distance has no lanes to share: every thread takes an object
        // of its own (blockDim.x a round; the host leaves room for them).
        const bool own = metric == LEVENSHTEIN;
        const u32 step = own ? blockDim.x : PER_ROUND, mine = own ? threadIdx.x : g;
        for (u64 base = 0; base < size; base += step) {
            between();
            const double r = bound();
            const u64 o = start + base + mine;
            if (base + mine < size) {
                const double pd = filter ? pdist[o] : 0.0;
                if (!filter || lower_bound(metric, fabs(pd - dp), pd + dp) <= r) {
                    if (own) {
                        const double d = edit_distance_within(qv, vectors + o * dim, dim, r);
                        if (d <= r) visit(o, d);
                    } else {
                        const double d = distance(metric, qv, qn, vectors + o * dim, metric == COSINE ? norms[o] : 0.0, dim, l, mask);
                        if (d <= r && l == 0) visit(o, d);
                    }
                }
            }
            __syncthreads();
        }
    }
}

__device__ __forceinline__ bool before(double da, u64 ia, double db, u64 ib) {
    return da < db || (da == db && ia < ib);
}

// Sorts the first n candidates by (distance, id) (bitonic, padded to a
// power of two with infinities) and keeps the first k of them.
__device__ void sort_keep(double *cd, u64 *cid, u32 *count, u32 k) {
    const u32 n = *count;
    u32 size = 1;
    while (size < n) size <<= 1;
    for (u32 i = n + threadIdx.x; i < size; i += blockDim.x) {
        cd[i] = INF;
        cid[i] = ~0ULL;
    }
    __syncthreads();
    for (u32 span = 2; span <= size; span <<= 1) {
        for (u32 stride = span / 2; stride > 0; stride >>= 1) {
            for (u32 i = threadIdx.x; i < size / 2; i += blockDim.x) {
                const u32 x = 2 * i - (i & (stride - 1)), y = x + stride;
                const bool up = (x & span) == 0;
                if (before(cd[y], cid[y], cd[x], cid[x]) == up) {
                    double t = cd[x];
                    cd[x] = cd[y];
                    cd[y] = t;
                    u64 u = cid[x];
                    cid[x] = cid[y];
                    cid[y] = u;
                }
            }
            __syncthreads();
        }
    }
    if (threadIdx.x == 0 && n > k) *count = k;
    __syncthreads();
}

// Query q's k nearest of the n candidates: sorted, cut to k, written to
// out_d/out_id[q * k ..] with their number in out_n[q].
__device__ void write_nearest(double *cd, u64 *cid, u32 *count, u32 k, u32 q, double *out_d, u64 *out_id, u32 *out_n) {
    sort_keep(cd, cid, count, k);
    for (u32 i = threadIdx.x; i < *count; i += blockDim.x) {
        out_d[(u64)q * k + i] = cd[i];
        out_id[(u64)q * k + i] = cid[i];
    }
    if (threadIdx.x == 0) out_n[q] = *count;
}

// One block (256 threads) per query: its k nearest objects among its leaf
// pairs (or all objects), by (distance, id), into out_d/out_id[q * k ..]
// and their number into out_n[q]. Candidates within the bound gather in
// shared memory; when they pass `keep_at` they are sorted, cut to k, and
// the k-th becomes the bound.
extern "C" __global__ void gts_knn_leaves(const float *__restrict__ queries, const double *__restrict__ qnorms, u32 dim,
                                          u32 metric, const float *__restrict__ vectors, const double *__restrict__ norms,
                                          const double *__restrict__ pdist, const u64 *__restrict__ ids,
                                          const Node *__restrict__ nodes, const u32 *__restrict__ pair_node,
                                          const double *__restrict__ pair_dp, const u64 *__restrict__ seg, u64 n, u32 k,
                                          u32 keep_at, const double *__restrict__ dk, double *__restrict__ out_d,
                                          u64 *__restrict__ out_id, u32 *__restrict__ out_n) {
    __shared__ double cd[CAP];
    __shared__ u64 cid[CAP];
    __shared__ u32 count;
    __shared__ double limit;
    const u32 q = blockIdx.x;
    if (threadIdx.x == 0) {
        count = 0;
        limit = dk ? dk[q] : INF;
    }
    __syncthreads();
    for_objects(
        q, queries + (u64)q * dim, metric == COSINE ? qnorms[q] : 0.0, dim, metric, vectors, norms, pdist, nodes, pair_node, pair_dp,
        seg, n, [&]() { return limit; },
        [&](u64 o, double d) {
            u32 slot = atomicAdd(&count, 1u);
            cd[slot] = d;
            cid[slot] = ids[o];
        },
        [&]() {
            if (count > keep_at) {
                sort_keep(cd, cid, &count, k);
                if (threadIdx.x == 0 && count == k) limit = fmin(limit, cd[k - 1]);
                __syncthreads();
            }
        });
    write_nearest(cd, cid, &count, k, q, out_d, out_id, out_n);
}

// One block per query: every object within its radius among its leaf pairs,
// appended as (query, id, distance) at a global cursor; only the first
// cap are written (the cursor counts them all, so the host can retry).
extern "C" __global__ void gts_range_leaves(const float *__restrict__ queries, const double *__restrict__ qnorms, u32 dim,
                                            u32 metric, const float *__restrict__ vectors, const double *__restrict__ norms,
                                            const double *__restrict__ pdist, const u64 *__restrict__ ids,
                                            const Node *__restrict__ nodes, const u32 *__restrict__ pair_node,
                                            const double *__restrict__ pair_dp, const u64 *__restrict__ seg, u64 n,
                                            const double *__restrict__ radius, u64 cap, u64 *__restrict__ cursor, u32 *__restrict__ out_q,
                                            u64 *__restrict__ out_id, double *__restrict__ out_d) {
    const u32 q = blockIdx.x;
    const double r = radius[q];
    for_objects(
        q, queries + (u64)q * dim, metric == COSINE ? qnorms[q] : 0.0, dim, metric, vectors, norms, pdist, nodes, pair_node, pair_dp,
        seg, n, [&]() { return r; },
        [&](u64 o, double d) {
            u64 slot = atomicAdd(cursor, 1ULL);
            if (slot < cap) {
                out_q[slot] = q;
                out_id[slot] = ids[o];
                out_d[slot] = d;
            }
        },
        []() {});
}

// ------------------------------------------- L2 brute force: bound, recheck
//
// Where the tree prunes little (high dimensions), kNN by L2 over every
// object: a matrix-multiply pass in float4 gives each (query, object) an
// approximate squared distance a = |q|^2 + |o|^2 - 2 q.o with a proven
// error bound E, each block keeps for each of its queries the objects that
// may still be among the k nearest (a - E <= the k-th smallest a + E seen),
// and a recheck computes the exact distances of those candidates only.
//
// E: the float4 dot product of n terms is off by at most gamma_n |q||o| <=
// gamma_n (|q|^2 + |o|^2) / 2 (gamma_n = n u / (1 - n u), u = 2^-24, any
// order, fused or not); twice that in a, plus three roundings of at most
// u (|q|^2 + |o|^2) each (the norms and the sum are float8, a is stored
// as float4). E = (n + 16) 2^-23 (|q|^2 + |o|^2) is at least twice all of
// it for n <= 16,000; plus (n + 16) 2^-125 for products and sums that
// underflow (denormals flushed or not). Where a is not finite in float4
// (huge coordinates), it is stored as NaN: bounds -inf and +inf, so the
// object stays a candidate (and a query with too many is answered by the
// tree instead).

#define FQ 32      // queries per block
#define FO 128     // objects per tile
#define FD 32      // dimensions per step
#define FCAP 64    // candidates a block keeps per query
#define OVERFLOW 0xffffffffu

// E = rel (|q|^2 + |o|^2) + ab, the kernel's own (the host passes it:
// float4 products give rel = (n + 16) 2^-23, ab = (n + 16) 2^-125).
struct Bound {
    double rel, ab;
};

__device__ __forceinline__ double bound_e(Bound b, double qsq, double osq) {
    return b.rel * (qsq + osq) + b.ab;
}

__device__ __forceinline__ double lower(float a, Bound b, double qsq, double osq) {
    return isnan(a) ? -INF : (double)a - bound_e(b, qsq, osq);
}

__device__ __forceinline__ double upper(float a, Bound b, double qsq, double osq) {
    return isnan(a) ? INF : (double)a + bound_e(b, qsq, osq);
}

// A warp's query: the k-th smallest upper bound a + E of its candidates
// (infinite below k), then only those whose lower bound a - E is within
// it are kept. Ranks by counting (at most FCAP^2 comparisons a flush).
__device__ void warp_flush(float *cd, u32 *co, u32 *cnt, double *thr, double *scratch, u32 k, Bound bd, double qsq,
                           const double *osq) {
    const u32 lane = threadIdx.x & 31;
    const u32 c = *cnt;
    for (u32 i = lane; i < c; i += 32) scratch[i] = upper(cd[i], bd, qsq, osq[co[i]]);
    __syncwarp();
    double t = *thr;
    if (c >= k) {
        for (u32 i = lane; i < c; i += 32) {
            u32 below = 0;
            for (u32 j = 0; j < c; j++) below += scratch[j] < scratch[i] || (scratch[j] == scratch[i] && j < i);
            if (below == k - 1) scratch[FCAP] = scratch[i];
        }
        __syncwarp();
        t = fmin(t, scratch[FCAP]);
    }
    // Compact in place, in order.
    u32 kept = 0;
    for (u32 base = 0; base < c; base += 32) {
        const u32 i = base + lane;
        float d = 0;
        u32 o = 0;
        bool keep = false;
        if (i < c) {
            d = cd[i];
            o = co[i];
            keep = lower(d, bd, qsq, osq[o]) <= t;
        }
        const u32 ballot = __ballot_sync(0xffffffffu, keep);
        __syncwarp();
        if (keep) {
            const u32 at = kept + __popc(ballot & ((1u << lane) - 1));
            cd[at] = d;
            co[at] = o;
        }
        kept += __popc(ballot);
        __syncwarp();
    }
    if (lane == 0) {
        *cnt = kept;
        *thr = t;
    }
    __syncwarp();
}

// One round of warp admission for a query: lane's candidate (d, o), if
// `valid`, goes into the query's list (cd, co, *cnt) when its lower bound
// is within *thr; a full list is flushed first (tightening *thr). False
// once the query overflowed (more than FCAP - 32 stayed uncertain).
__device__ __forceinline__ bool admit(float d, u32 o, bool valid, double on, float *cd, u32 *co, u32 *cnt, double *thr,
                                      double *scratch, u32 k, Bound bd, double qn, const double *osq) {
    const u32 lane = threadIdx.x & 31;
    bool in = valid && lower(d, bd, qn, on) <= *thr;
    u32 ballot = __ballot_sync(0xffffffffu, in);
    if (!ballot) return true;
    if (*cnt + __popc(ballot) > FCAP) {
        warp_flush(cd, co, cnt, thr, scratch, k, bd, qn, osq);
        // Again against the tightened bound.
        in = in && lower(d, bd, qn, on) <= *thr;
        ballot = __ballot_sync(0xffffffffu, in);
        if (*cnt + __popc(ballot) > FCAP) {
            if (lane == 0) *cnt = OVERFLOW;
            __syncwarp();
            return false;
        }
    }
    const u32 at = *cnt + __popc(ballot & ((1u << lane) - 1));
    __syncwarp();
    if (in) {
        cd[at] = d;
        co[at] = o;
    }
    __syncwarp();
    if (lane == 0) *cnt += __popc(ballot);
    __syncwarp();
    return true;
}

// A filter block's end: each query's list flushed and written to its
// (query, slice) slot with its count and threshold.
__device__ __forceinline__ void write_slots(float (*cd)[FCAP], u32 (*co)[FCAP], u32 *cnt, double *thr,
                                            double (*scratch)[FCAP + 1], u32 q0, u32 m, u32 sl, u32 slices, u32 k,
                                            Bound bd, const double *qsq, const double *osq, float *out_d, u32 *out_o,
                                            u32 *out_n, double *out_t) {
    const u32 warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (u32 q = warp; q < FQ; q += 8) {
        if (q0 + q >= m) continue;
        const u64 slot = (u64)(q0 + q) * slices + sl;
        if (cnt[q] != OVERFLOW) warp_flush(cd[q], co[q], &cnt[q], &thr[q], scratch[warp], k, bd, qsq[q0 + q], osq);
        const u32 c = cnt[q];
        for (u32 i = lane; c != OVERFLOW && i < c; i += 32) {
            out_d[slot * FCAP + i] = cd[q][i];
            out_o[slot * FCAP + i] = co[q][i];
        }
        if (lane == 0) {
            out_n[slot] = c;
            out_t[slot] = thr[q];
        }
    }
}

// Four consecutive floats of row `row` (of `dim`) from dimension d, zero
// past the row's end: one 16-byte load where rows are 16-byte aligned.
__device__ __forceinline__ float4 load4(const float *__restrict__ rows, u64 row, u32 dim, u32 d) {
    const float *p = rows + row * dim + d;
    if ((dim & 3) == 0 && d < dim) return *reinterpret_cast<const float4 *>(p);
    return make_float4(d < dim ? p[0] : 0.0f, d + 1 < dim ? p[1] : 0.0f, d + 2 < dim ? p[2] : 0.0f, d + 3 < dim ? p[3] : 0.0f);
}

// Block b: query tile b % tiles (FQ queries) against the objects of slice
// b / tiles ([s * slice, (s + 1) * slice); the tiles of one slice run side
// by side and share its objects in L2). Out: for each (query, slice), up to
// FCAP candidate positions with their approximate squared distances, and
// their number (OVERFLOW when more than FCAP - 32 stayed uncertain: the
// host answers that query another way).
//
// Thread (warp w, lane l) sums the dot products of queries 4w..4w+3 with
// objects 4l..4l+3 of each object tile, and warp w admits its own four
// queries' candidates straight from those registers. Warps whose queries
// are all past m (a small batch) only help load the tiles.
extern "C" __global__ void __launch_bounds__(256) gts_l2_filter(
    const float *__restrict__ queries, const double *__restrict__ qsq, u32 m, const float *__restrict__ vectors,
    const double *__restrict__ osq, u64 n, u32 dim, u64 slice, u32 slices, u32 k, double rel, double ab,
    float *__restrict__ out_d, u32 *__restrict__ out_o, u32 *__restrict__ out_n, double *__restrict__ out_t) {
    const Bound bd = {rel, ab};
    __shared__ __align__(16) float qs[FD][FQ];
    __shared__ __align__(16) float os[FD][FO + 4];
    __shared__ float cd[FQ][FCAP];
    __shared__ u32 co[FQ][FCAP];
    __shared__ u32 cnt[FQ];
    __shared__ double thr[FQ];
    __shared__ double scratch[8][FCAP + 1];
    const u32 t = threadIdx.x, warp = t >> 5, lane = t & 31;
    const u32 tiles = (m + FQ - 1) / FQ;
    const u32 q0 = blockIdx.x % tiles * FQ, sl = blockIdx.x / tiles;
    const u64 start = (u64)sl * slice, end = min(n, start + slice);
    // Whether this warp has a query of the batch.
    const bool mine = q0 + warp * 4 < m;
    if (t < FQ) {
        cnt[t] = 0;
        thr[t] = INF;
    }
    for (u64 tile = start; tile < end; tile += FO) {
        float acc[4][4] = {{0}};
        for (u32 c = 0; c < dim; c += FD) {
            // Warp w stores dimensions 4w..4w+3 of the 32 queries, lanes
            // on consecutive queries (conflict-free).
            {
                const float4 v = q0 + lane < m ? load4(queries, q0 + lane, dim, c + 4 * warp) : make_float4(0, 0, 0, 0);
                qs[4 * warp][lane] = v.x;
                qs[4 * warp + 1][lane] = v.y;
                qs[4 * warp + 2][lane] = v.z;
                qs[4 * warp + 3][lane] = v.w;
            }
            // Lanes on consecutive objects, four dimensions each.
#pragma unroll
            for (u32 e = t; e < FO * (FD / 4); e += 256) {
                const u32 o = e % FO, d = 4 * (e / FO);
                const float4 v = tile + o < end ? load4(vectors, tile + o, dim, c + d) : make_float4(0, 0, 0, 0);
                os[d][o] = v.x;
                os[d + 1][o] = v.y;
                os[d + 2][o] = v.z;
                os[d + 3][o] = v.w;
            }
            __syncthreads();
            if (mine) {
#pragma unroll 8
                for (u32 d = 0; d < FD; d++) {
                    // One 16-byte load each (shared-memory loads, not
                    // FMAs, bound this loop; the queries' is a broadcast).
                    const float4 b = *reinterpret_cast<const float4 *>(&os[d][lane * 4]);
                    const float4 q4 = *reinterpret_cast<const float4 *>(&qs[d][warp * 4]);
                    const float a[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        acc[i][0] += a[i] * b.x;
                        acc[i][1] += a[i] * b.y;
                        acc[i][2] += a[i] * b.z;
                        acc[i][3] += a[i] * b.w;
                    }
                }
            }
            __syncthreads();
        }
        if (!mine) continue;
        double on[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const u64 o = tile + lane * 4 + j;
            on[j] = o < end ? osq[o] : 0.0;
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const u32 q = warp * 4 + i;
            if (q0 + q >= m || cnt[q] == OVERFLOW) continue;
            const double qn = qsq[q0 + q];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const u64 o = tile + lane * 4 + j;
                const double v = qn + on[j] - 2.0 * (double)acc[i][j];
                const float d = isfinite(acc[i][j]) && v <= 3.4028234663852886e38 ? (float)v : __int_as_float(0x7fc00000);
                if (!admit(d, (u32)o, o < end, on[j], cd[q], co[q], &cnt[q], &thr[q], scratch[warp], k, bd, qn, osq)) break;
            }
        }
    }
    __syncthreads();
    write_slots(cd, co, cnt, thr, scratch, q0, m, sl, slices, k, bd, qsq, osq, out_d, out_o, out_n, out_t);
}

// The same filter on FP64 tensor cores (sm_90: mma m16n8k8 in f64), for
// Hopper. The float4 inputs are exact in float8 and each multiply-add of
// the instruction rounds as a float8 fused multiply-add (PTX ISA, mma,
// "Precision and rounding"), so the dot product is off by at most
// gamma_n |q||o| with u = 2^-53, and a is float8 until it is stored as
// float4: E = 2^-22 (|q|^2 + |o|^2) (twice the float4 rounding of a <=
// 2 (|q|^2 + |o|^2), which dwarfs the rest for n <= 16,000) plus 2^-140
// for a stored as a denormal. The host passes it as (rel, ab); the recheck
// uses the same. A bound 72 times tighter than the float4 kernel's at 128
// dimensions, and the multiply-adds at the tensor cores' rate.
//
// Warp w multiplies the block's 32 queries with objects 16w..16w+15 of each
// object tile (2 x 2 mma tiles a step of 8 dimensions); lane (g, t) holds
// queries g + 8i and objects 2t, 2t + 1, 8 + 2t, 9 + 2t. A quick test in
// registers (lower bound within the query's threshold, with twice E to
// cover a's float4 rounding; thresholds only fall, so a stale one admits
// more, never fewer) finds the tiles with candidates; only those write
// their a into shared memory for the warps' admission.
#define MQ_PAD 36   // doubles per query row (conflict-free A fragments)
#define MO_PAD 36   // floats per object row (conflict-free B fragments)
#define MA_PAD 136  // floats per row of the tile of a (conflict-free pairs)

__device__ __forceinline__ void mma_f64(double *c, const double *a, const double *b) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+d"(c[0]), "+d"(c[1]), "+d"(c[2]), "+d"(c[3])
                 : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
#endif
}

// The MMA filter's admission of a tile of a ([FQ][MA_PAD], objects from
// `tile`): warp w takes queries w, w + 8, .. that had a hit. Out of line:
// it runs on few tiles, and inlined its registers would crowd the
// multiply's.
__device__ __noinline__ void admit_tile(const float *at, const u32 *hit, u64 tile, u64 end, u32 q0, float (*cd)[FCAP],
                                        u32 (*co)[FCAP], u32 *cnt, double *thr, double (*scratch)[FCAP + 1], u32 k,
                                        Bound bd, const double *qsq, const double *osq) {
    const u32 warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (u32 q = warp; q < FQ; q += 8) {
        if (!hit[q] || cnt[q] == OVERFLOW) continue;
        const double qn = qsq[q0 + q];
        for (u32 base = 0; base < FO; base += 32) {
            const u64 o = tile + base + lane;
            const double on = o < end ? osq[o] : 0.0;
            if (!admit(at[q * MA_PAD + base + lane], (u32)o, o < end, on, cd[q], co[q], &cnt[q], &thr[q], scratch[warp], k, bd, qn,
                       osq))
                break;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256, 2) gts_l2_filter_mma(
    const float *__restrict__ queries, const double *__restrict__ qsq, u32 m, const float *__restrict__ vectors,
    const double *__restrict__ osq, u64 n, u32 dim, u64 slice, u32 slices, u32 k, double rel, double ab,
    float *__restrict__ out_d, u32 *__restrict__ out_o, u32 *__restrict__ out_n, double *__restrict__ out_t) {
#if __CUDA_ARCH__ >= 900
    const Bound bd = {rel, ab};
    __shared__ __align__(16) double qs[FQ][MQ_PAD];
    // The object tile [FO][MO_PAD], then the tile of a [FQ][MA_PAD].
    __shared__ __align__(16) float tb[FO * MO_PAD];
    __shared__ float cd[FQ][FCAP];
    __shared__ u32 co[FQ][FCAP];
    __shared__ u32 cnt[FQ], hit[FQ];
    __shared__ double thr[FQ];
    __shared__ double scratch[8][FCAP + 1];
    const u32 t = threadIdx.x, warp = t >> 5, lane = t & 31, g = lane >> 2, tg = lane & 3;
    const u32 tiles = (m + FQ - 1) / FQ;
    const u32 q0 = blockIdx.x % tiles * FQ, sl = blockIdx.x / tiles;
    const u64 start = (u64)sl * slice, end = min(n, start + slice);
    if (t < FQ) {
        cnt[t] = 0;
        hit[t] = 0;
        thr[t] = INF;
    }
    double qn[4];
#pragma unroll
    for (int i = 0; i < 4; i++) qn[i] = q0 + g + 8 * i < m ? qsq[q0 + g + 8 * i] : 0.0;
    // The next chunk's queries and objects, loaded into registers while the
    // tensor cores work on this one: a float4 of query t / 8, dimensions
    // 4 (t % 8).., and four of objects (t + 256 r) / 8, eight lanes a row.
    float4 pq, po[4];
    auto fetch = [&](u64 tile, u32 c) {
        const u32 q = t >> 3, d = 4 * (t & 7);
        pq = q0 + q < m ? load4(queries, q0 + q, dim, c + d) : make_float4(0, 0, 0, 0);
#pragma unroll
        for (u32 r = 0; r < 4; r++) {
            const u32 o = (t + 256 * r) >> 3;
            po[r] = tile + o < end ? load4(vectors, tile + o, dim, c + d) : make_float4(0, 0, 0, 0);
        }
    };
    if (start < end) fetch(start, 0);
    for (u64 tile = start; tile < end; tile += FO) {
        double acc[2][2][4] = {};
        for (u32 c = 0; c < dim; c += FD) {
            {
                const u32 q = t >> 3, d = 4 * (t & 7);
                *reinterpret_cast<double2 *>(&qs[q][d]) = make_double2(pq.x, pq.y);
                *reinterpret_cast<double2 *>(&qs[q][d + 2]) = make_double2(pq.z, pq.w);
#pragma unroll
                for (u32 r = 0; r < 4; r++) *reinterpret_cast<float4 *>(&tb[((t + 256 * r) >> 3) * MO_PAD + d]) = po[r];
            }
            __syncthreads();
            if (c + FD < dim) fetch(tile, c + FD);
            else if (tile + FO < end) fetch(tile + FO, 0);
#pragma unroll 1
            for (u32 ks = 0; ks < FD; ks += 8) {
                double a[2][4], b[2][2];
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    a[mt][0] = qs[mt * 16 + g][ks + tg];
                    a[mt][1] = qs[mt * 16 + g + 8][ks + tg];
                    a[mt][2] = qs[mt * 16 + g][ks + tg + 4];
                    a[mt][3] = qs[mt * 16 + g + 8][ks + tg + 4];
                }
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    const float *row = &tb[(warp * 16 + nt * 8 + g) * MO_PAD + ks];
                    b[nt][0] = row[tg];
                    b[nt][1] = row[tg + 4];
                }
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int nt = 0; nt < 2; nt++) mma_f64(acc[mt][nt], a[mt], b[nt]);
            }
            __syncthreads();
        }
        // acc[mt][nt][r]: query g + 8 (2 mt + r / 2), object
        // 16 warp + 8 nt + 2 tg + r % 2 of the tile.
        double on[2][2], th[4];
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const u64 o = tile + warp * 16 + nt * 8 + 2 * tg + j;
                on[nt][j] = o < end ? osq[o] : 0.0;
            }
#pragma unroll
        for (int i = 0; i < 4; i++) th[i] = thr[g + 8 * i];
        bool any = false;
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int i = mt * 2 + r / 2, j = r % 2;
                    const u64 o = tile + warp * 16 + nt * 8 + 2 * tg + j;
                    const double v = qn[i] + on[nt][j] - 2.0 * acc[mt][nt][r];
                    const bool pass = o < end && q0 + g + 8 * i < m &&
                                      (!(v <= 3.4028234663852886e38) || v - 2.0 * bound_e(bd, qn[i], on[nt][j]) <= th[i]);
                    if (pass) {
                        hit[g + 8 * i] = 1;
                        any = true;
                    }
                }
        if (!__syncthreads_or(any)) continue;
        float *at = tb;  // every warp is past its last read of the objects
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < 2; nt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int i = mt * 2 + h;
                    float f[2];
#pragma unroll
                    for (int j = 0; j < 2; j++) {
                        const double v = qn[i] + on[nt][j] - 2.0 * acc[mt][nt][2 * h + j];
                        f[j] = v <= 3.4028234663852886e38 ? (float)v : __int_as_float(0x7fc00000);
                    }
                    *reinterpret_cast<float2 *>(&at[(g + 8 * i) * MA_PAD + warp * 16 + nt * 8 + 2 * tg]) = make_float2(f[0], f[1]);
                }
        __syncthreads();
        admit_tile(at, hit, tile, end, q0, cd, co, cnt, thr, scratch, k, bd, qsq, osq);
        __syncthreads();
        if (t < FQ) hit[t] = 0;
    }
    __syncthreads();
    write_slots(cd, co, cnt, thr, scratch, q0, m, sl, slices, k, bd, qsq, osq, out_d, out_o, out_n, out_t);
#else
    __trap();  // the host takes this kernel on sm_90 only
#endif
}

// One block per query: the candidates of all its slices whose lower bound
// is within the smallest of the slices' thresholds (each slice's is the
// k-th smallest upper bound of k of its objects, so the k-th nearest lies
// within every one), cut again by the k-th smallest upper bound among
// them, then exact distances, the k nearest by (distance, id) into
// out_d/out_id[q * k ..] and their number into out_n[q] (OVERFLOW when a
// slice overflowed or more than CAP candidates pass).
extern "C" __global__ void __launch_bounds__(256) gts_l2_recheck(
    const float *__restrict__ queries, const double *__restrict__ qsq, u32 dim, const float *__restrict__ vectors,
    const double *__restrict__ osq, const u64 *__restrict__ ids, u32 slices, const float *__restrict__ in_d,
    const u32 *__restrict__ in_o, const u32 *__restrict__ in_n, const double *__restrict__ in_t, u32 k, double rel,
    double ab, double *__restrict__ out_d, u64 *__restrict__ out_id, u32 *__restrict__ out_n) {
    const Bound bd = {rel, ab};
    __shared__ double cd[CAP];
    __shared__ u64 cid[CAP];
    __shared__ u32 count, overflow;
    __shared__ double limit;
    __shared__ double warp_t[8];
    __shared__ u32 warp_over[8];
    const u32 q = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const double qn = qsq[q];
    // The smallest threshold, and whether a slice overflowed.
    double t0 = INF;
    u32 over = 0;
    for (u32 s = threadIdx.x; s < slices; s += blockDim.x) {
        const u64 slot = (u64)q * slices + s;
        if (in_n[slot] == OVERFLOW) over = 1;
        else t0 = fmin(t0, in_t[slot]);
    }
    for (u32 o = 16; o > 0; o >>= 1) t0 = fmin(t0, __shfl_xor_sync(0xffffffffu, t0, o));
    over = __any_sync(0xffffffffu, over);
    if (lane == 0) {
        warp_t[warp] = t0;
        warp_over[warp] = over;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = INF;
        u32 o = 0;
        for (u32 w = 0; w < blockDim.x / 32; w++) {
            t = fmin(t, warp_t[w]);
            o |= warp_over[w];
        }
        limit = t;
        overflow = o;
        count = 0;
    }
    __syncthreads();
    if (overflow) {
        if (threadIdx.x == 0) out_n[q] = OVERFLOW;
        return;
    }
    // Gather (upper bound, slot) of the candidates within it, a warp a slice.
    t0 = limit;
    for (u32 s = warp; s < slices; s += blockDim.x / 32) {
        const u64 first = ((u64)q * slices + s) * FCAP;
        const u32 c = in_n[(u64)q * slices + s];
        for (u32 i = lane; i < c; i += 32) {
            const u64 slot = first + i;
            const float a = in_d[slot];
            const double on = osq[in_o[slot]];
            if (lower(a, bd, qn, on) <= t0) {
                const u32 at = atomicAdd(&count, 1u);
                if (at < CAP) {
                    cd[at] = upper(a, bd, qn, on);
                    cid[at] = slot;
                }
            }
        }
    }
    __syncthreads();
    if (count > CAP) {
        if (threadIdx.x == 0) out_n[q] = OVERFLOW;
        return;
    }
    const u32 total = count;
    sort_keep(cd, cid, &count, CAP);  // by (upper bound, slot)
    if (threadIdx.x == 0) limit = total >= k ? cd[k - 1] : INF;
    __syncthreads();
    // Keep (as positions) those whose lower bound is within it, compacted
    // in place (a round reads its slots before any is written).
    const double t = limit;
    if (threadIdx.x == 0) count = 0;
    for (u32 base = 0; base < total; base += blockDim.x) {
        const u32 i = base + threadIdx.x;
        u64 o = 0;
        bool keep = false;
        if (i < total) {
            o = in_o[cid[i]];
            keep = lower(in_d[cid[i]], bd, qn, osq[o]) <= t;
        }
        __syncthreads();
        if (keep) cid[atomicAdd(&count, 1u)] = o;
        __syncthreads();
    }
    const u32 keep_n = count;
    // The exact distances of the kept candidates, eight threads each.
    const u32 g = threadIdx.x / 8, l = threadIdx.x & 7, mask = 0xffu << (threadIdx.x & 24);
    const float *qv = queries + (u64)q * dim;
    for (u32 base = 0; base < keep_n; base += PER_ROUND) {
        const u32 i = base + g;
        if (i < keep_n) {
            const u64 o = cid[i];
            const double d = distance(L2, qv, 0.0, vectors + o * dim, 0.0, dim, l, mask);
            if (l == 0) {
                cd[i] = d;
                cid[i] = ids[o];
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) count = keep_n;
    __syncthreads();
    write_nearest(cd, cid, &count, k, q, out_d, out_id, out_n);
}

// ------------------------------------------------------------ build
//
// The tree of gts/tree.rs built level by level (gts/gpu_build.rs drives
// it, as the paper's Alg. 1-3): each node's pivot by farthest-first
// traversal, every position's distance to its node's pivot in one kernel,
// then one global sort of the level by (node, distance, object): objects
// scattered by number, then radix passes over the distance's bits, then
// over the node's (sort.cu). The distances are the CPU's bit for bit, in
// the operator's units: for cosine the host turns them into angles (with
// its own acos, which the GPU's may round otherwise; the angle orders as
// 1 - cos does).

#define NONE32 0xffffffffu

// The level's node holding position p: the last of its `count` nodes
// whose offset is at most p (offsets ascend from 0; an empty node shares
// its offset with the next non-empty one, which comes after it).
__device__ __forceinline__ u32 node_at(const u64 *off, u32 count, u64 p) {
    u32 lo = 0, hi = count;
    while (hi - lo > 1) {
        const u32 mid = (lo + hi) / 2;
        if (off[mid] <= p) lo = mid;
        else hi = mid;
    }
    return lo;
}

// f64::total_cmp's order as u64 bits.
__device__ __forceinline__ u64 order_bits(double x) {
    const u64 b = (u64)__double_as_longlong(x);
    return b >> 63 ? ~b : b | (1ull << 63);
}

// The root level's start: every object at its own position, no pivot yet.
extern "C" __global__ void gts_build_init(u32 *__restrict__ order, double *__restrict__ nearest, u64 n) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        order[i] = (u32)i;
        nearest[i] = INF;
    }
}

// One block per node of the level: its pivot, the object farthest from
// every ancestor pivot (the first such position on ties; the middle one
// at the root), as an object number (piv) and a vector (pivots, zeros
// for an empty node).
extern "C" __global__ void __launch_bounds__(256) gts_build_pivots(const float *__restrict__ vectors, u32 dim,
                                                                   const u32 *__restrict__ order, const double *__restrict__ nearest,
                                                                   const u64 *__restrict__ off, const u64 *__restrict__ size, u32 root,
                                                                   u32 *__restrict__ piv, float *__restrict__ pivots) {
    __shared__ double bv[256];
    __shared__ u64 bi[256];
    __shared__ u32 obj;
    const u32 node = blockIdx.x, t = threadIdx.x;
    const u64 a = off[node], s = size[node], none = ~0ull;
    double best = 0.0;
    u64 at = none;
    if (!root)
        for (u64 i = t; i < s; i += blockDim.x) {
            const double x = nearest[a + i];
            if (at == none || x > best) best = x, at = i;
        }
    bv[t] = best, bi[t] = at;
    __syncthreads();
    for (u32 half = blockDim.x / 2; half > 0; half /= 2) {
        if (t < half) {
            const double v2 = bv[t + half];
            const u64 i2 = bi[t + half];
            if (i2 != none && (bi[t] == none || v2 > bv[t] || (v2 == bv[t] && i2 < bi[t]))) bv[t] = v2, bi[t] = i2;
        }
        __syncthreads();
    }
    if (t == 0) {
        obj = s == 0 ? NONE32 : order[a + (root ? s / 2 : bi[0])];
        piv[node] = obj;
    }
    __syncthreads();
    for (u32 j = t; j < dim; j += blockDim.x) pivots[(u64)node * dim + j] = obj == NONE32 ? 0.0f : vectors[(u64)obj * dim + j];
}

// Every position's distance to its node's pivot (eight threads a
// position; edit distance: one), which also lowers the
// position's farthest-first distance; and the level's sort input: keys
// (the distance's order bits) and values (the position) by object
// number, so that a stable sort by key leaves ties in object order.
extern "C" __global__ void gts_build_distances(const float *__restrict__ vectors, const double *__restrict__ norms, u32 dim,
                                               u32 metric, const u32 *__restrict__ order, u64 n, const u64 *__restrict__ off,
                                               u32 count, const u32 *__restrict__ piv, double *__restrict__ dist,
                                               double *__restrict__ nearest, u64 *__restrict__ keys, u32 *__restrict__ vals) {
    const bool own = metric == LEVENSHTEIN;
    const u32 per = own ? 1 : 8, l = own ? 0 : threadIdx.x & 7, mask = own ? 0xffffffffu : 0xffu << (threadIdx.x & 24);
    const u64 stride = (u64)gridDim.x * blockDim.x / per;
    for (u64 p = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / per; p < n; p += stride) {
        const u32 o = order[p], pv = piv[node_at(off, count, p)];
        const bool cos = metric == COSINE;
        const double d =
            distance(metric, vectors + (u64)o * dim, cos ? norms[o] : 0.0, vectors + (u64)pv * dim, cos ? norms[pv] : 0.0, dim, l, mask);
        if (l == 0) {
            dist[p] = d;
            nearest[p] = fmin(nearest[p], d);
            keys[o] = order_bits(d);
            vals[o] = (u32)p;
        }
    }
}

// keys[i] = the level's node of position vals[i] (the sort's last passes).
extern "C" __global__ void gts_build_node_keys(const u32 *__restrict__ vals, u64 n, const u64 *__restrict__ off, u32 count,
                                               u64 *__restrict__ keys) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) keys[i] = node_at(off, count, vals[i]);
}

// The level in its sorted order: position i takes what position perm[i] held.
extern "C" __global__ void gts_build_gather(const u32 *__restrict__ perm, u64 n, const u32 *__restrict__ order,
                                            const double *__restrict__ dist, const double *__restrict__ nearest,
                                            u32 *__restrict__ order_out, double *__restrict__ pdist_out,
                                            double *__restrict__ nearest_out) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u32 p = perm[i];
        order_out[i] = order[p];
        pdist_out[i] = dist[p];
        nearest_out[i] = nearest[p];
    }
}

// Each child's ring: the distances of its first and last (sorted)
// positions to the parent's pivot ([inf, -inf] when empty).
extern "C" __global__ void gts_build_rings(const double *__restrict__ pdist, const u64 *__restrict__ off,
                                           const u64 *__restrict__ size, u64 m, double *__restrict__ out) {
    for (u64 c = (u64)blockIdx.x * blockDim.x + threadIdx.x; c < m; c += (u64)gridDim.x * blockDim.x) {
        const u64 s = size[c];
        out[2 * c] = s ? pdist[off[c]] : INF;
        out[2 * c + 1] = s ? pdist[off[c] + s - 1] : -INF;
    }
}

// ------------------------------------------------------------ low dimensions
//
// A warp per query, as the CPU searches (gts/search.rs's knn_one, depth
// first instead of best first): at each internal node the pivot's
// distance, then the children whose ring bound (at least their parent's)
// is within the k-th distance found so far, nearest first on a stack; at
// a leaf its objects through the pivot-distance filter, each within the
// bound kept among the k nearest by (distance, id). Where a search opens
// a few small leaves (a few dimensions), this costs a query a few hundred
// distances and no launch per level; the level-synchronous descent above
// pays a scan and a launch per level and a block per query at the leaves.

#define DEPTH_K 32       // gpu.rs's DEPTH_MAX_K
#define DEPTH_STACK 128  // gpu.rs's DEPTH_STACK

// metric.rs's lane_sum on one thread: eight accumulators summed in the
// same tree, then the tail in order (the same bits as lane_sum).
template <int OP>
__device__ __forceinline__ double lane_sum_one(const float *a, const float *b, u32 dim) {
    double acc[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    const u32 chunks = dim / 8;
    for (u32 c = 0; c < chunks; c++)
#pragma unroll
        for (u32 l = 0; l < 8; l++) acc[l] = __dadd_rn(acc[l], term<OP>(a[c * 8 + l], b[c * 8 + l]));
    double s = __dadd_rn(__dadd_rn(__dadd_rn(acc[0], acc[1]), __dadd_rn(acc[2], acc[3])),
                         __dadd_rn(__dadd_rn(acc[4], acc[5]), __dadd_rn(acc[6], acc[7])));
    for (u32 i = chunks * 8; i < dim; i++) s = __dadd_rn(s, term<OP>(a[i], b[i]));
    return s;
}

// Metric::distance on one thread (vectors only).
__device__ __forceinline__ double distance_one(u32 metric, const float *q, double qn, const float *v, double vn, u32 dim) {
    if (metric == L2) return __dsqrt_rn(lane_sum_one<0>(q, v, dim));
    if (metric == L1) return lane_sum_one<1>(q, v, dim);
    double c = __ddiv_rn(lane_sum_one<2>(q, v, dim), __dmul_rn(__dsqrt_rn(qn), __dsqrt_rn(vn)));
    c = c < -1.0 ? -1.0 : (c > 1.0 ? 1.0 : c);
    return __dsub_rn(1.0, c);
}

// One answer as gts/gpu/depth.rs's Pair: id, then distance.
struct Pair {
    u64 id;
    double d;
};

// Query q is warp q of the grid (four a block): the warp shares one
// stack in shared memory (each entry a node, its key, its parent pivot's
// distance); the k nearest so far lie across the lanes (lane i the i-th,
// in (distance, id) order); at an internal node lane j measures child j
// (fanout <= 32) and the children within the bound go on the stack
// farthest first; at a leaf the lanes take 32 objects a round, and those
// within the bound are inserted one at a time. Out: m * k Pairs (query
// q's first), then m counts; a cosine query's norm is taken here (the
// same bits as gts_norms).
extern "C" __global__ void __launch_bounds__(128) gts_knn_depth(
    const float *__restrict__ queries, u32 m, u32 dim, u32 metric,
    const float *__restrict__ pivots, const Node *__restrict__ nodes, u32 fanout, u32 internal,
    const float *__restrict__ vectors, const double *__restrict__ norms, const double *__restrict__ pdist,
    const u64 *__restrict__ ids, u32 k, Pair *__restrict__ out) {
    __shared__ u32 sn[4][DEPTH_STACK];
    __shared__ double sk[4][DEPTH_STACK], sdp[4][DEPTH_STACK];
    const u32 w = threadIdx.x / 32, lane = threadIdx.x % 32, full = 0xffffffffu;
    const u32 q = blockIdx.x * 4 + w;
    if (q >= m) return;  // (a whole warp)
    const bool cos = metric == COSINE;
    const float *qv = queries + (u64)q * dim;
    const double qn = cos ? lane_sum_one<2>(qv, qv, dim) : 0.0;
    double bd = INF;  // lane i: the i-th nearest so far
    u64 bi = ~0ull;
    u32 cnt = 0;
    int top = 1;
    if (lane == 0) sn[w][0] = 0, sk[w][0] = 0.0, sdp[w][0] = 0.0;
    __syncwarp();
    while (top > 0) {
        top--;
        const u32 node = sn[w][top];
        const double key = sk[w][top], dp = sdp[w][top];
        __syncwarp();
        double bound = cnt < k ? INF : __shfl_sync(full, bd, k - 1);
        if (key > bound) continue;
        if (node >= internal) {
            const Node nd = nodes[node];
            for (u64 base = 0; base < nd.size; base += 32) {
                const u64 o = nd.offset + base + lane;
                double d = INF;
                u64 id = 0;
                bool mine = base + lane < nd.size;
                // (The root as the only leaf has no routing pivot.)
                if (mine && node != 0) {
                    const double pd = pdist[o];
                    mine = lower_bound(metric, fabs(pd - dp), pd + dp) <= bound;
                }
                if (mine) {
                    d = distance_one(metric, qv, qn, vectors + o * dim, cos ? norms[o] : 0.0, dim);
                    id = ids[o];
                    mine = d <= bound;
                }
                // Each in turn into the lanes' sorted list.
                for (u32 left = __ballot_sync(full, mine); left; left &= left - 1) {
                    const u32 src = __ffs(left) - 1;
                    const double x = __shfl_sync(full, d, src);
                    const u64 xi = __shfl_sync(full, id, src);
                    const u32 at = __popc(__ballot_sync(full, lane < cnt && before(bd, bi, x, xi)));
                    const double up = __shfl_up_sync(full, bd, 1);
                    const u64 upi = __shfl_up_sync(full, bi, 1);
                    if (at < k) {
                        if (lane == at) bd = x, bi = xi;
                        else if (lane > at && lane < k) bd = up, bi = upi;
                        cnt = min(cnt + 1, k);
                    }
                }
                bound = cnt < k ? INF : __shfl_sync(full, bd, k - 1);
            }
            continue;
        }
        const float *p = pivots + (u64)node * dim;
        const double dq = to_metric(metric, distance_one(metric, qv, qn, p, cos ? lane_sum_one<2>(p, p, dim) : 0.0, dim));
        double ck = INF;
        bool pass = false;
        if (lane < fanout) {
            const Node nd = nodes[node * fanout + lane + 1];
            ck = fmax(ring_bound(metric, dq, nd.min, nd.max), key);
            pass = nd.size > 0 && ck <= bound;
        }
        const u32 passing = __ballot_sync(full, pass);
        // Farthest first: a child's place is the number of passing
        // children farther than it (ties: the later child first).
        u32 rank = 0;
        for (u32 j = 0; j < fanout; j++) {
            const double cj = __shfl_sync(full, ck, j);
            rank += (passing >> j & 1) && (cj > ck || (cj == ck && j > lane));
        }
        if (pass) sn[w][top + rank] = node * fanout + lane + 1, sk[w][top + rank] = ck, sdp[w][top + rank] = dq;
        top += __popc(passing);
        __syncwarp();
    }
    if (lane < cnt) out[(u64)q * k + lane] = Pair{bi, bd};
    if (lane == 0) ((u32 *)(out + (u64)m * k))[q] = cnt;
}

// The objects within r of query qv, a warp walking the tree depth first
// as gts_knn_depth does (the children whose ring bound is within r, in
// any order) on its stack (sn, sdp); each round of 32 objects goes to
// emit(found, mine, id, d): the ballot of lanes with an answer, and this
// lane's.
template <class Emit>
__device__ __forceinline__ void range_walk(const float *qv, double qn, double r, u32 dim, u32 metric,
                                           const float *__restrict__ pivots, const Node *__restrict__ nodes, u32 fanout,
                                           u32 internal, const float *__restrict__ vectors, const double *__restrict__ norms,
                                           const double *__restrict__ pdist, const u64 *__restrict__ ids, u32 *sn,
                                           double *sdp, Emit &emit) {
    const u32 lane = threadIdx.x % 32, full = 0xffffffffu;
    const bool cos = metric == COSINE;
    int top = 1;
    if (lane == 0) sn[0] = 0, sdp[0] = 0.0;
    __syncwarp();
    while (top > 0) {
        top--;
        const u32 node = sn[top];
        const double dp = sdp[top];
        __syncwarp();
        if (node >= internal) {
            const Node nd = nodes[node];
            for (u64 base = 0; base < nd.size; base += 32) {
                const u64 o = nd.offset + base + lane;
                bool mine = base + lane < nd.size;
                double d = INF;
                // (The root as the only leaf has no routing pivot.)
                if (mine && node != 0) {
                    const double pd = pdist[o];
                    mine = lower_bound(metric, fabs(pd - dp), pd + dp) <= r;
                }
                if (mine) {
                    d = distance_one(metric, qv, qn, vectors + o * dim, cos ? norms[o] : 0.0, dim);
                    mine = d <= r;
                }
                const u32 found = __ballot_sync(full, mine);
                if (found) emit(found, mine, mine ? ids[o] : 0, d);
            }
            continue;
        }
        const float *p = pivots + (u64)node * dim;
        const double dq = to_metric(metric, distance_one(metric, qv, qn, p, cos ? lane_sum_one<2>(p, p, dim) : 0.0, dim));
        bool pass = false;
        if (lane < fanout) {
            const Node nd = nodes[node * fanout + lane + 1];
            pass = nd.size > 0 && ring_bound(metric, dq, nd.min, nd.max) <= r;
        }
        const u32 passing = __ballot_sync(full, pass);
        if (pass) {
            const int at = top + __popc(passing & ((1u << lane) - 1));
            sn[at] = node * fanout + lane + 1, sdp[at] = dq;
        }
        top += __popc(passing);
        __syncwarp();
    }
}

// Writes a warp's answers in order from out, up to limit of them, and
// counts them all.
struct Emit {
    Pair *out;
    u32 limit, count;
    __device__ void operator()(u32 found, bool mine, u64 id, double d) {
        const u32 slot = count + __popc(found & ((1u << (threadIdx.x % 32)) - 1));
        if (mine && slot < limit) out[slot] = Pair{id, d};
        count += __popc(found);
    }
};

// The tree's arguments of a range walk, as the kernels take them.
#define WALK_PARAMS                                                                                                      \
    const float *__restrict__ queries, const double *__restrict__ radius, u32 dim, u32 metric,                          \
        const float *__restrict__ pivots, const Node *__restrict__ nodes, u32 fanout, u32 internal,                     \
        const float *__restrict__ vectors, const double *__restrict__ norms, const double *__restrict__ pdist,          \
        const u64 *__restrict__ ids
#define WALK_ARGS(q, emit)                                                                                               \
    queries + (u64)(q) * dim, metric == COSINE ? lane_sum_one<2>(queries + (u64)(q) * dim, queries + (u64)(q) * dim, dim) \
                                               : 0.0,                                                                    \
        radius[q], dim, metric, pivots, nodes, fanout, internal, vectors, norms, pdist, ids, sn[threadIdx.x / 32],      \
        sdp[threadIdx.x / 32], emit

// Range search, first pass: query q (warp q of the grid, four a block)
// counts its answers into counts[q] and keeps the first `spare` of them
// at dense + q * spare.
extern "C" __global__ void __launch_bounds__(128) gts_range_count(WALK_PARAMS, u32 m, u32 spare, Pair *__restrict__ dense,
                                                                 u32 *__restrict__ counts) {
    __shared__ u32 sn[4][DEPTH_STACK];
    __shared__ double sdp[4][DEPTH_STACK];
    const u32 q = blockIdx.x * 4 + threadIdx.x / 32;
    if (q >= m) return;  // (a whole warp)
    Emit e{dense + (u64)q * spare, spare, 0};
    range_walk(WALK_ARGS(q, e));
    if (threadIdx.x % 32 == 0) counts[q] = e.count;
}

// Lane i's Pair p (pad: past the query's answers) after a bitonic sort
// over the warp by id, pads last.
__device__ __forceinline__ Pair warp_sort_by_id(Pair p, bool pad) {
    const u32 lane = threadIdx.x % 32, full = 0xffffffffu;
    for (u32 size = 2; size <= 32; size <<= 1)
        for (u32 j = size >> 1; j > 0; j >>= 1) {
            const u64 oid = __shfl_xor_sync(full, p.id, j);
            const double od = __shfl_xor_sync(full, p.d, j);
            const bool opad = __shfl_xor_sync(full, pad, j);
            const bool other_less = oid < p.id || (oid == p.id && opad < pad);
            // The lower lane of a pair keeps the smaller in an ascending run.
            const bool keep_small = ((lane & j) == 0) == ((lane & size) == 0);
            if (other_less == keep_small && (oid != p.id || opad != pad)) p = Pair{oid, od}, pad = opad;
        }
    return p;
}

// Second pass, queries q0 .. q0 + m: query q's answers go to out + off[q]
// - base, copied from dense by id where the first pass kept them all,
// else found again by the same walk (in tree order: the host sorts them).
extern "C" __global__ void __launch_bounds__(128) gts_range_place(WALK_PARAMS, u32 q0, u32 m, u32 spare,
                                                                 const Pair *__restrict__ dense, const u32 *__restrict__ counts,
                                                                 const u64 *__restrict__ off, u64 base, Pair *__restrict__ out) {
    __shared__ u32 sn[4][DEPTH_STACK];
    __shared__ double sdp[4][DEPTH_STACK];
    const u32 i = blockIdx.x * 4 + threadIdx.x / 32;
    if (i >= m) return;  // (a whole warp)
    const u32 q = q0 + i, n = counts[q];
    Pair *to = out + (off[q] - base);
    if (n <= spare) {
        // By id (spare <= 32: an answer a lane; lanes past n sort last).
        const u32 lane = threadIdx.x % 32;
        const Pair p = warp_sort_by_id(lane < n ? dense[(u64)q * spare + lane] : Pair{~0ull, 0.0}, lane >= n);
        if (lane < n) to[lane] = p;
        return;
    }
    Emit e{to, n, 0};
    range_walk(WALK_ARGS(q, e));
}

// A small batch's range search in one pass: query q (warp q, four a
// block) counts its answers into counts[q] and, where the room left holds
// them, writes them to out + place[q], a place claimed from *cursor: by
// id where they are at most 32, else found again by a second walk (in
// tree order: the host sorts them). place[q] = ~0 (no room left) leaves
// the query to the two passes above.
extern "C" __global__ void __launch_bounds__(128) gts_range_direct(WALK_PARAMS, u32 m, Pair *__restrict__ out,
                                                                  u64 room, u64 *__restrict__ cursor,
                                                                  u64 *__restrict__ place, u32 *__restrict__ counts) {
    __shared__ u32 sn[4][DEPTH_STACK];
    __shared__ double sdp[4][DEPTH_STACK];
    __shared__ Pair keep[4][32];
    const u32 w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const u32 q = blockIdx.x * 4 + w;
    if (q >= m) return;  // (a whole warp)
    Emit e{keep[w], 32, 0};
    range_walk(WALK_ARGS(q, e));
    __syncwarp();
    const u32 n = e.count;
    u64 at = 0;
    if (n > 0) {
        if (lane == 0) {
            at = atomicAdd((unsigned long long *)cursor, (unsigned long long)n);
            at = at + n <= room ? at : ~0ull;
        }
        at = __shfl_sync(0xffffffffu, at, 0);
    }
    if (at != ~0ull && n <= 32) {
        const Pair p = warp_sort_by_id(lane < n ? keep[w][lane] : Pair{~0ull, 0.0}, lane >= n);
        if (lane < n) out[at + lane] = p;
    } else if (at != ~0ull) {
        Emit again{out + at, n, 0};
        range_walk(WALK_ARGS(q, again));
    }
    if (lane == 0) place[q] = at, counts[q] = n;
}

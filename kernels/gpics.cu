// G-PICS on the GPU (Lewis & Tu): the PR quadtree built level by level
// with one thread per point, and batched queries in two steps (Step I: one
// thread per query registers it with the leaves it may touch; Step II: one
// thread per (query, leaf) pair, in leaf order, tests the points of the
// query's x-window of the leaf, whose points are kept in x order). Outputs are sized
// by a count pass and a scan, then written: nothing is capped.
//
// Predicates are PostgreSQL's, computed with explicit round-to-nearest
// intrinsics (no fused multiply-add), so that answers equal the CPU's bit
// for bit (crates/engine/src/gpics/geom.rs).
//
// Compiled at run time with NVRTC (no headers: only built-ins).

typedef unsigned long long u64;
typedef unsigned int u32;

#define NONE 0xffffffffu
#define EPSILON 1.0e-6
#define TILE 512
// A traversal stack: 3 entries a level for MAX_HEIGHT levels (gpics/tree.rs).
#define TRAVERSAL_STACK 386

struct Node {            // 64 bytes, as gpics/tree.rs
    double b[4];         // lx, ly, hx, hy
    u32 child[4];
    u32 start, count, leaf, depth;
};

struct GQuery {          // 40 bytes, as gpics/gpu.rs
    u32 kind, pad;       // 0 range, 1 within, 2 point
    double a, b, c, d;   // range: lx ly hx hy; within: x y r; point: x y
};

// The quadrant rule shared with the CPU build (tree.rs, `quadrant`).
__device__ __forceinline__ u32 quadrant(const double *b, double x, double y) {
    double cx = __dmul_rn(0.5, __dadd_rn(b[0], b[2]));
    double cy = __dmul_rn(0.5, __dadd_rn(b[1], b[3]));
    return (x >= cx ? 1u : 0u) | (y >= cy ? 2u : 0u);
}

// PostgreSQL's pg_hypot.
__device__ __forceinline__ double pg_hypot(double x, double y) {
    if (isinf(x) || isinf(y)) return __longlong_as_double(0x7ff0000000000000ULL);
    if (isnan(x) || isnan(y)) return __longlong_as_double(0x7ff8000000000000ULL);
    x = fabs(x);
    y = fabs(y);
    if (x < y) { double t = x; x = y; y = t; }
    if (y == 0.0) return x;
    double yx = __ddiv_rn(y, x);
    return __dmul_rn(x, __dsqrt_rn(__dadd_rn(1.0, __dmul_rn(yx, yx))));
}

// A lower bound of the distance from (x, y) to any point in box b, as
// geom.rs `Rect::min_dist`: pg_hypot, which does not overflow where the
// squares would, less a relative slack for its rounding. Prunes only.
__device__ __forceinline__ double box_bound(const double *b, double x, double y) {
    double dx = fmax(fmax(b[0] - x, 0.0), x - b[2]);
    double dy = fmax(fmax(b[1] - y, 0.0), y - b[3]);
    return pg_hypot(dx, dy) * (1.0 - 1e-12);
}

__device__ __forceinline__ bool fp_eq(double a, double b) {
    return a == b || fabs(__dsub_rn(a, b)) <= EPSILON;
}

__device__ __forceinline__ bool matches(const GQuery &q, double x, double y) {
    if (q.kind == 0) return q.c >= x && q.a <= x && q.d >= y && q.b <= y;
    if (q.kind == 1) return pg_hypot(__dsub_rn(q.a, x), __dsub_rn(q.b, y)) <= q.c;
    if (isnan(q.a) || isnan(q.b) || isnan(x) || isnan(y)) {
        bool ex = (isnan(q.a) && isnan(x)) || q.a == x;
        bool ey = (isnan(q.b) && isnan(y)) || q.b == y;
        return ex && ey;
    }
    return fp_eq(q.a, x) && fp_eq(q.b, y);
}

// Conservative: may a node with box b hold an answer (slack for rounding).
__device__ __forceinline__ bool may_touch(const GQuery &q, const double *b) {
    if (q.kind == 0) return q.a <= b[2] && b[0] <= q.c && q.b <= b[3] && b[1] <= q.d;
    if (q.kind == 1) {
        return box_bound(b, q.a, q.b) <= q.c * (1.0 + 1e-12) + 1e-300;
    }
    double e = EPSILON * (1.0 + 1e-9);
    return q.a - e <= b[2] && b[0] <= q.a + e && q.b - e <= b[3] && b[1] <= q.b + e;
}

// ---------------------------------------------------------------- build

// Counts the points of every splitting node by quadrant.
extern "C" __global__ void gpics_count(const double *__restrict__ x, const double *__restrict__ y, u64 n,
                                       const u32 *__restrict__ at, const u32 *__restrict__ split_no,
                                       const Node *__restrict__ nodes, u32 *__restrict__ counts) {
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (u64)gridDim.x * blockDim.x) {
        u32 a = at[t];
        if (a == NONE) continue;
        u32 q = quadrant(nodes[a].b, x[t], y[t]);
        atomicAdd(&counts[split_no[a] * 4 + q], 1u);
    }
}

// Moves every point one level down, or into its leaf's slice.
extern "C" __global__ void gpics_move(const double *__restrict__ x, const double *__restrict__ y,
                                      const u64 *__restrict__ id, u64 n, u32 *__restrict__ at,
                                      const u32 *__restrict__ split_no, const Node *__restrict__ nodes,
                                      u32 *__restrict__ cursor, double *__restrict__ ox,
                                      double *__restrict__ oy, u64 *__restrict__ oid) {
    for (u64 t = (u64)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += (u64)gridDim.x * blockDim.x) {
        u32 a = at[t];
        if (a == NONE || split_no[a] == NONE) continue;
        u32 c = nodes[a].child[quadrant(nodes[a].b, x[t], y[t])];
        if (nodes[c].leaf != 0) {
            u32 pos = nodes[c].start + atomicAdd(&cursor[c], 1u);
            ox[pos] = x[t];
            oy[pos] = y[t];
            oid[pos] = id[t];
            at[t] = NONE;
        } else {
            at[t] = c;
        }
    }
}

// --------------------------------------------------------------- Step I

// Visits the leaves a query may touch; `visit(leaf number)`. The odd leaf
// (points outside the tree) is number `tree_leaves` when present.
template <typename F>
__device__ __forceinline__ void descend(const Node *__restrict__ nodes, bool has_tree, bool has_odd, u32 tree_leaves,
                                        const GQuery &q, F visit) {
    if (has_tree) {
        u32 stack[TRAVERSAL_STACK];
        int top = 0;
        stack[top++] = 0;
        while (top > 0) {
            const Node &n = nodes[stack[--top]];
            if (!may_touch(q, n.b)) continue;
            if (n.leaf != 0) {
                visit(n.leaf - 1);
            } else {
                for (int c = 3; c >= 0; c--)
                    if (n.child[c] != NONE) stack[top++] = n.child[c];
            }
        }
    }
    if (has_odd) visit(tree_leaves);
}

extern "C" __global__ void gpics_register_count(const Node *__restrict__ nodes, u32 has_tree, u32 has_odd,
                                                u32 tree_leaves, const GQuery *__restrict__ queries, u64 m,
                                                u32 *__restrict__ qcount, u32 *__restrict__ lcount) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += (u64)gridDim.x * blockDim.x) {
        GQuery q = queries[i];
        u32 c = 0;
        descend(nodes, has_tree, has_odd, tree_leaves, q, [&](u32 l) {
            c++;
            atomicAdd(&lcount[l], 1u);
        });
        qcount[i] = c;
    }
}

extern "C" __global__ void gpics_register_fill(const Node *__restrict__ nodes, u32 has_tree, u32 has_odd,
                                               u32 tree_leaves, const GQuery *__restrict__ queries, u64 m,
                                               const u64 *__restrict__ qoff, const u64 *__restrict__ loff,
                                               u32 *__restrict__ lcursor, u32 *__restrict__ pair_query,
                                               u32 *__restrict__ pair_leaf, u32 *__restrict__ leaf_pairs) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += (u64)gridDim.x * blockDim.x) {
        GQuery q = queries[i];
        u64 p = qoff[i];
        descend(nodes, has_tree, has_odd, tree_leaves, q, [&](u32 l) {
            pair_query[p] = (u32)i;
            pair_leaf[p] = l;
            leaf_pairs[loff[l] + atomicAdd(&lcursor[l], 1u)] = (u32)p;
            p++;
        });
    }
}

// -------------------------------------------------------------- Step II

// The first position of xs[0..n) where pred fails (pred holds on a prefix).
template <typename P> __device__ __forceinline__ u32 partition_point(const double *xs, u32 n, P pred) {
    u32 lo = 0, hi = n;
    while (lo < hi) {
        u32 mid = (lo + hi) >> 1;
        if (pred(xs[mid])) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// The x-window [a, b) of a leaf sorted by x that holds every match of q,
// from the predicates' own subtractions and comparisons (geom.rs,
// `x_window`).
__device__ __forceinline__ void x_window(const GQuery &q, const double *xs, u32 n, u32 &a, u32 &b) {
    const double qa = q.a, qc = q.c;
    if (q.kind == 0) {
        a = partition_point(xs, n, [&](double x) { return x < qa; });
        b = partition_point(xs, n, [&](double x) { return x <= qc; });
    } else if (q.kind == 1) {
        a = partition_point(xs, n, [&](double x) { return __dsub_rn(qa, x) > qc; });
        b = partition_point(xs, n, [&](double x) { return __dsub_rn(qa, x) >= -qc; });
    } else {
        a = partition_point(xs, n, [&](double x) { return __dsub_rn(qa, x) > EPSILON; });
        b = partition_point(xs, n, [&](double x) { return __dsub_rn(qa, x) >= -EPSILON; });
    }
    if (b < a) b = a;
}

// One thread per (query, leaf) pair, taken in leaf order (neighbouring
// threads read the same leaf): the pair's x-window of its leaf (all of
// the odd leaf) is tested point by point. With `out` null, counts each
// pair's matches into pair_count; else writes the matching points' ids
// (positions where `ids` is null) at out[pair_off[p]...].
extern "C" __global__ void gpics_process(const double *__restrict__ x, const double *__restrict__ y,
                                         const u32 *__restrict__ leaf_start, const u32 *__restrict__ leaf_count,
                                         u32 tree_leaves, const u32 *__restrict__ leaf_pairs,
                                         const u32 *__restrict__ pair_leaf, const u32 *__restrict__ pair_query,
                                         const GQuery *__restrict__ queries, u64 pairs, u32 *__restrict__ pair_count,
                                         const u64 *__restrict__ pair_off, u64 *__restrict__ out,
                                         const u64 *__restrict__ ids) {
    for (u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x; k < pairs; k += (u64)gridDim.x * blockDim.x) {
        const u32 p = leaf_pairs[k], l = pair_leaf[p];
        const GQuery q = queries[pair_query[p]];
        const u32 start = leaf_start[l], count = leaf_count[l];
        u32 a = 0, b = count;
        if (l < tree_leaves) x_window(q, x + start, count, a, b);
        if (out) {
            u64 w = pair_off[p];
            if (pair_off[p + 1] == w) continue;
            for (u32 j = a; j < b; j++)
                if (matches(q, x[start + j], y[start + j])) out[w++] = ids ? ids[start + j] : (u64)start + j;
        } else {
            u32 c = 0;
            for (u32 j = a; j < b; j++) c += matches(q, x[start + j], y[start + j]);
            pair_count[p] = c;
        }
    }
}

// Result offsets per query: res_off[i] = pair_off[qoff[i]].
extern "C" __global__ void gpics_query_offsets(const u64 *__restrict__ qoff, const u64 *__restrict__ pair_off, u64 m,
                                               u64 *__restrict__ res_off) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i <= m; i += (u64)gridDim.x * blockDim.x)
        res_off[i] = pair_off[qoff[i]];
}

// ------------------------------------------------------------------ kNN
//
// Exact k nearest neighbours, one warp per query (gpics/knn.rs is the same
// walk on the CPU): depth first over the tree, nearest child first, a node
// pruned when its box lies farther than the k-th best; in a leaf (points
// in x order) the 32 points around the query's x first, then the x-window
// of the k-th distance; a leaf of one repeated point offers its first k
// (sorted by (x, y, id): the smallest ids). The k best (distance key, id,
// position) are a sorted list spread over the warp's registers (element
// r * 32 + lane in register r of that lane); a candidate is inserted with
// one ballot and one shift. Out go the positions (the host recomputes the
// distances). Non-finite queries are left to the host (count 0).

#define KNN_WARPS 4
#define FULL_MASK 0xffffffffu

// keys.rs `encode_f64`: the total order of float8 as unsigned integers.
__device__ __forceinline__ u64 dist_key(double d) {
    u64 b = isnan(d) ? 0x7ff8000000000000ULL : (u64)__double_as_longlong(d);
    return (b >> 63) ? ~b : (b | (1ULL << 63));
}

__device__ __forceinline__ double key_dist(u64 k) {
    return __longlong_as_double((long long)((k >> 63) ? (k & ~(1ULL << 63)) : ~k));
}


template <int R> struct KnnList {
    u64 key[R], id[R];
    u32 pos[R];        // the point's position in the arrays
    u32 count, k;
    bool full;
    u64 tkey, tid;     // the k-th, once full
    double thr, thr2;  // its distance, and its square where the cheap test may use it (else -1)

    __device__ __forceinline__ void init(u32 k_) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            key[r] = id[r] = ~0ULL;
            pos[r] = NONE;
        }
        count = 0;
        k = k_;
        full = false;
        thr = __longlong_as_double(0x7ff0000000000000ULL);
        thr2 = -1.0;
    }

    __device__ __forceinline__ bool better(u64 ck, u64 ci) const {
        return !full || ck < tkey || (ck == tkey && ci < tid);
    }

    __device__ __forceinline__ bool surely_beyond(double dx, double dy) const {
        return thr2 >= 0.0 && __dadd_rn(__dmul_rn(dx, dx), __dmul_rn(dy, dy)) > thr2 * (1.0 + 1e-12);
    }

    // Every lane calls with the same candidate.
    __device__ __forceinline__ void insert(u64 ck, u64 ci, u32 cp) {
        const u32 lane = threadIdx.x & 31;
        u32 at = 0;
#pragma unroll
        for (int r = 0; r < R; r++) at += __popc(__ballot_sync(FULL_MASK, key[r] < ck || (key[r] == ck && id[r] < ci)));
#pragma unroll
        for (int r = R - 1; r >= 0; r--) {
            u64 uk = __shfl_up_sync(FULL_MASK, key[r], 1), ui = __shfl_up_sync(FULL_MASK, id[r], 1);
            u32 up = __shfl_up_sync(FULL_MASK, pos[r], 1);
            if (r > 0) {
                u64 ck2 = __shfl_sync(FULL_MASK, key[r > 0 ? r - 1 : 0], 31);
                u64 ci2 = __shfl_sync(FULL_MASK, id[r > 0 ? r - 1 : 0], 31);
                u32 cp2 = __shfl_sync(FULL_MASK, pos[r > 0 ? r - 1 : 0], 31);
                if (lane == 0) { uk = ck2; ui = ci2; up = cp2; }
            }
            u32 idx = r * 32 + lane;
            if (idx > at) { key[r] = uk; id[r] = ui; pos[r] = up; }
            else if (idx == at) { key[r] = ck; id[r] = ci; pos[r] = cp; }
        }
        if (count < k) count++;
        if (count >= k) {
            full = true;
            const u32 last = k - 1;
            u64 a = key[0], b = id[0];
#pragma unroll
            for (int r = 1; r < R; r++)
                if ((u32)r == last / 32) { a = key[r]; b = id[r]; }
            tkey = __shfl_sync(FULL_MASK, a, last % 32);
            tid = __shfl_sync(FULL_MASK, b, last % 32);
            thr = key_dist(tkey);
            double t2 = thr * thr;
            thr2 = (isfinite(t2) && t2 >= 1e-290) ? t2 : -1.0;
        }
    }
};

// Offers positions [from, to) of a leaf's points (the leaf's first at
// `base`), less [skip_a, skip_b).
template <int R>
__device__ __forceinline__ void knn_offer(KnnList<R> &best, const double *__restrict__ x, const double *__restrict__ y,
                                          const u64 *__restrict__ id, u32 base, double qx, double qy, u32 from,
                                          u32 to, u32 skip_a, u32 skip_b) {
    const u32 lane = threadIdx.x & 31;
    for (u32 c = from; c < to; c += 32) {
        const u32 j = c + lane;
        bool cand = false;
        u64 ck = 0, ci = 0;
        if (j < to && (j < skip_a || j >= skip_b)) {
            double px = x[j], py = y[j];
            double dx = __dsub_rn(qx, px), dy = __dsub_rn(qy, py);
            if (!best.surely_beyond(dx, dy)) {
                ck = dist_key(pg_hypot(dx, dy));
                if (!best.full || ck <= best.tkey) {
                    ci = id[j];
                    cand = best.better(ck, ci);
                }
            }
        }
        u32 mask = __ballot_sync(FULL_MASK, cand);
        while (mask) {
            const int l = __ffs(mask) - 1;
            mask &= mask - 1;
            const u64 k2 = __shfl_sync(FULL_MASK, ck, l), i2 = __shfl_sync(FULL_MASK, ci, l);
            const u32 p2 = base + c + l;
            if (best.better(k2, i2)) best.insert(k2, i2, p2);
        }
    }
}

template <int R>
__device__ __forceinline__ void knn_batch(const Node *__restrict__ nodes, const double *__restrict__ x,
                                          const double *__restrict__ y, const u64 *__restrict__ id,
                                          const double *__restrict__ qs, u64 m, u32 k, u32 *__restrict__ out_pos,
                                          u32 *__restrict__ out_count) {
    __shared__ u32 stacks[KNN_WARPS][TRAVERSAL_STACK];
    const u32 warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    u32 *stack = stacks[warp];
    for (u64 q = (u64)blockIdx.x * KNN_WARPS + warp; q < m; q += (u64)gridDim.x * KNN_WARPS) {
        const double qx = qs[2 * q], qy = qs[2 * q + 1];
        KnnList<R> best;
        best.init(k);
        if (isfinite(qx) && isfinite(qy)) {
            int top = 0;
            if (lane == 0) stack[0] = 0;
            __syncwarp();
            top = 1;
            while (top > 0) {
                const Node &n = nodes[stack[--top]];
                __syncwarp();
                if (best.full && dist_key(box_bound(n.b, qx, qy)) > best.tkey) continue;
                if (n.leaf != 0) {
                    const double *xs = x + n.start, *ys = y + n.start;
                    const u64 *ids = id + n.start;
                    const u32 len = n.count;
                    // One repeated point (sorted by (x, y, id)): its first k.
                    if (len > 1 && __double_as_longlong(xs[0]) == __double_as_longlong(xs[len - 1]) &&
                        __double_as_longlong(ys[0]) == __double_as_longlong(ys[len - 1])) {
                        knn_offer(best, xs, ys, ids, n.start, qx, qy, 0, min(len, k), 0, 0);
                        continue;
                    }
                    u32 at = partition_point(xs, len, [&](double px) { return px < qx; });
                    u32 c0 = at >= 16 ? at - 16 : 0;
                    if (c0 + 32 > len) c0 = len > 32 ? len - 32 : 0;
                    const u32 c1 = min(c0 + 32, len);
                    knn_offer(best, xs, ys, ids, n.start, qx, qy, c0, c1, 0, 0);
                    u32 a = 0, b = len;
                    if (best.full) {
                        const double r = best.thr;
                        a = partition_point(xs, len, [&](double px) { return __dsub_rn(qx, px) > r; });
                        b = partition_point(xs, len, [&](double px) { return __dsub_rn(qx, px) >= -r; });
                        if (b < a) b = a;
                    }
                    knn_offer(best, xs, ys, ids, n.start, qx, qy, a, b, c0, c1);
                    continue;
                }
                // Children farthest first on the stack, so the nearest is walked next.
                double cb[4];
                u32 cn[4];
                int nk = 0;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const u32 ch = n.child[c];
                    if (ch == NONE) continue;
                    const double d = box_bound(nodes[ch].b, qx, qy);
                    if (best.full && dist_key(d) > best.tkey) continue;
                    int i = nk++;
                    while (i > 0 && cb[i - 1] < d) { cb[i] = cb[i - 1]; cn[i] = cn[i - 1]; i--; }
                    cb[i] = d;
                    cn[i] = ch;
                }
                if (lane == 0)
                    for (int i = 0; i < nk; i++) stack[top + i] = cn[i];
                __syncwarp();
                top += nk;
            }
        }
        const u32 cnt = best.count;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const u32 idx = r * 32 + lane;
            if (idx < cnt) out_pos[q * k + idx] = best.pos[r];
        }
        if (lane == 0) out_count[q] = cnt;
    }
}

#define KNN_KERNEL(NAME, R)                                                                                         \
    extern "C" __global__ void __launch_bounds__(KNN_WARPS * 32)                                                    \
        NAME(const Node *__restrict__ nodes, const double *__restrict__ x, const double *__restrict__ y,            \
             const u64 *__restrict__ id, const double *__restrict__ qs, u64 m, u32 k, u32 *__restrict__ out_pos,   \
             u32 *__restrict__ out_count) {                                                                        \
        knn_batch<R>(nodes, x, y, id, qs, m, k, out_pos, out_count);                                               \
    }
KNN_KERNEL(gpics_knn_32, 1)
KNN_KERNEL(gpics_knn_64, 2)
KNN_KERNEL(gpics_knn_128, 4)

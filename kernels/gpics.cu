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
        double dx = fmax(fmax(b[0] - q.a, 0.0), q.a - b[2]);
        double dy = fmax(fmax(b[1] - q.b, 0.0), q.b - b[3]);
        return sqrt(dx * dx + dy * dy) <= q.c * (1.0 + 1e-12) + 1e-300;
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

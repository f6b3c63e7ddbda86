// HB+-tree inner search on the GPU (Shahvarani & Jacobsen, SIGMOD'16).
// A team of 8 threads walks one query down the inner levels: each thread
// loads one key of the 64-byte node (one coalesced transaction), and a warp
// ballot finds the first key >= query (lower-bound separators; the last slot
// is always MAX, so some thread always fires). A warp carries 4 queries.
// The output is a leaf reference for the CPU's leaf step.
//
// Compiled at run time with NVRTC (no headers: only built-ins).

typedef unsigned long long u64;

#define TEAM 8

// First slot of this team's 8 keys with q <= key, from a warp ballot.
__device__ __forceinline__ unsigned first_geq(u64 key, u64 q) {
    unsigned ballot = __ballot_sync(0xffffffffu, q <= key);
    unsigned mine = (ballot >> (threadIdx.x & 24)) & 0xffu;
    return __ffs(mine) - 1;
}

// Implicit layout: nodes of 8 keys, breadth-first; child j of node i at the
// next level is node 8i+j; offsets[l] = first node of level l. Writes the
// leaf number of each query.
extern "C" __global__ void hb_implicit_descend(const u64 *__restrict__ nodes, const u64 *__restrict__ offsets,
                                               unsigned height, const u64 *__restrict__ queries, u64 m,
                                               unsigned *__restrict__ out) {
    const unsigned lane = threadIdx.x & (TEAM - 1);
    const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const u64 warps = ((u64)gridDim.x * blockDim.x) / 32;
    const unsigned team = (threadIdx.x & 31) / TEAM;
    // The loop condition is the same for the whole warp (ballots need all 32).
    for (u64 base = warp * 4; base < m; base += warps * 4) {
        const u64 qi = base + team;
        const bool live = qi < m;
        const u64 q = live ? queries[qi] : 0;
        u64 node = 0;
        for (unsigned l = 0; l < height; l++) {
            const u64 key = __ldg(nodes + (__ldg(offsets + l) + node) * TEAM + lane);
            node = node * TEAM + first_geq(key, q);
        }
        if (live && lane == 0) out[qi] = (unsigned)node;
    }
}

// Regular layout: a node is 17 lines (136 u64): line 0 holds the 8 index keys
// (index s = largest key of key line s), lines 1..8 the 64 keys, lines 9..16
// the 64 child references. `height` inner levels from `root`; the last level
// is paired with the big leaves, so the answer is (node << 6) | slot.
#define NODE_U64 136
extern "C" __global__ void hb_regular_descend(const u64 *__restrict__ nodes, unsigned root, unsigned height,
                                              const u64 *__restrict__ queries, u64 m,
                                              unsigned *__restrict__ out) {
    const unsigned lane = threadIdx.x & (TEAM - 1);
    const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const u64 warps = ((u64)gridDim.x * blockDim.x) / 32;
    const unsigned team = (threadIdx.x & 31) / TEAM;
    for (u64 base = warp * 4; base < m; base += warps * 4) {
        const u64 qi = base + team;
        const bool live = qi < m;
        const u64 q = live ? queries[qi] : 0;
        u64 node = root;
        unsigned slot = 0;
        for (unsigned l = 0; l < height; l++) {
            const u64 *n = nodes + node * NODE_U64;
            const unsigned s = first_geq(__ldg(n + lane), q);
            const unsigned j = first_geq(__ldg(n + TEAM + s * TEAM + lane), q);
            slot = s * TEAM + j;
            if (l + 1 < height) node = __ldg(n + 9 * TEAM + slot);
        }
        if (live && lane == 0) out[qi] = (unsigned)(node << 6) | slot;
    }
}

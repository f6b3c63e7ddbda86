// CuART lookups (crates/engine/src/art): one thread per query. A link
// carries its target's kind, so each load's address and size are known
// before it is issued: a node's 16-byte header and the part of its body
// the next byte needs (one key word, one index byte, one child slot), never
// the whole 656-byte N48 or 2 KB N256. Layouts match art/mod.rs.
//
// A query is a record of `stride` words: its length, then its bytes
// zero-padded (so a leaf's key, zero-padded too, compares a word at a
// time); or, where every query of the batch has one length `fixed`, the
// bytes alone. A query longer than the record holds is answered ON_HOST.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;

#define KIND(l) ((u32)((l) >> 56))
#define INDEX(l) ((l) & ((1ull << 56) - 1))
#define TOMBSTONE (1ull << 55)
#define VALUE_MASK (TOMBSTONE - 1)
#define NOT_FOUND (~0ull)
#define ON_HOST (~0ull - 1)

enum { EMPTY = 0, N4 = 1, N16 = 2, N48 = 3, N256 = 4, LEAF8 = 5, LEAF16 = 6, LEAF32 = 7, LEAF_LONG = 8 };

// Record sizes in bytes.
#define N4_SIZE 64
#define N16_SIZE 160
#define N48_SIZE 656
#define N256_SIZE 2064

// Byte j of a 16-byte load (a header, or N16's keys).
__device__ __forceinline__ u32 byte_of(uint4 h, u32 j) {
    u32 w = j < 4 ? h.x : j < 8 ? h.y : j < 12 ? h.z : h.w;
    return (w >> (8 * (j & 3))) & 0xff;
}

__device__ __forceinline__ bool words_equal(const u64* __restrict__ a, const u64* __restrict__ b, u64 len) {
    for (u64 j = 0; j < (len + 7) / 8; j++) {
        if (a[j] != b[j]) return false;
    }
    return true;
}

struct Tree {
    u32 lut_depth;
    const u64* lut;
    const u8* n4;
    const u8* n16;
    const u8* n48;
    const u8* n256;
    u64* leaf8;
    u64* leaf16;
    u64* leaf32;
    u64* leaf_long;
    const u64* tails;
};

// The tree's arguments, in DeviceArt's order.
#define TREE_PARAMS                                                                                                                      \
    u32 lut_depth, const u64 *lut, const u8 *n4, const u8 *n16, const u8 *n48, const u8 *n256, u64 *leaf8, u64 *leaf16, u64 *leaf32, \
        u64 *leaf_long, const u64 *tails
#define TREE {lut_depth, lut, n4, n16, n48, n256, leaf8, leaf16, leaf32, leaf_long, tails}

// The meta word of leaf `link`.
__device__ __forceinline__ u64* meta_of(const Tree& t, u64 link) {
    const u64 x = INDEX(link);
    switch (KIND(link)) {
        case LEAF8: return t.leaf8 + x * 2 + 1;
        case LEAF16: return t.leaf16 + x * 4 + 2;
        case LEAF32: return t.leaf32 + x * 6 + 4;
        default: return t.leaf_long + x * 8 + 4;
    }
}

// The child of inner node `link` (record at `node`) for byte `b`, or 0:
// one 8- or 16-byte key load for N4 and N16, one index byte for N48, one
// slot for N256.
__device__ __forceinline__ u64 child_of(const Tree& t, u64 link, const u8* node, u32 b) {
    const u32 kind = KIND(link);
    const u32 count = ((const unsigned short*)node)[2];
    if (kind == N4) {
        const u64 ks = *(const u64*)(node + 16);
        for (u32 j = 0; j < count; j++) {
            if (((ks >> (8 * j)) & 0xff) == b) return ((const u64*)(node + 24))[j];
        }
        return 0;
    }
    if (kind == N16) {
        const uint4 ks = *(const uint4*)(node + 16);
        for (u32 j = 0; j < count; j++) {
            if (byte_of(ks, j) == b) return ((const u64*)(node + 32))[j];
        }
        return 0;
    }
    if (kind == N48) {
        const u32 s = node[16 + b];
        return s ? ((const u64*)(node + 272))[s - 1] : 0;
    }
    return ((const u64*)(node + 16))[b];
}

// Query i's length and its bytes (as words); false if it does not fit
// its record.
__device__ __forceinline__ bool record(const u64* queries, u64 i, u32 stride, u32 fixed, u64& len, const u64*& words) {
    const u64* q = queries + i * stride;
    len = fixed ? fixed : q[0];
    words = fixed ? q : q + 1;
    return fixed || len <= (u64)(stride - 1) * 8;
}

// The leaf that holds exactly query i (tombstoned or not), 0 if none,
// ON_HOST if the query does not fit its record.
__device__ u64 find_leaf(const Tree& t, const u64* __restrict__ queries, u64 i, u32 stride, u32 fixed) {
    u64 len;
    const u64* qw;
    if (!record(queries, i, stride, fixed, len, qw)) return ON_HOST;
    const u8* key = (const u8*)qw;
    u32 slot = 0;
    for (u32 j = 0; j < t.lut_depth; j++) slot = slot << 8 | (j < len ? key[j] : 0);
    u64 link = t.lut[slot];
    u64 d = t.lut_depth;
    for (;;) {
        const u32 kind = KIND(link);
        const u64 x = INDEX(link);
        if (kind == EMPTY) return 0;
        if (kind == LEAF8) {
            const u64* l = t.leaf8 + x * 2;
            return (l[1] >> 56) == len && l[0] == qw[0] ? link : 0;
        }
        if (kind == LEAF16) {
            const u64* l = t.leaf16 + x * 4;
            return (l[2] >> 56) == len && words_equal(l, qw, len) ? link : 0;
        }
        if (kind == LEAF32) {
            const u64* l = t.leaf32 + x * 6;
            return (l[4] >> 56) == len && words_equal(l, qw, len) ? link : 0;
        }
        if (kind == LEAF_LONG) {
            const u64* l = t.leaf_long + x * 8;
            return l[5] == len && words_equal(l, qw, 32) && words_equal(t.tails + l[6] / 8, qw + 4, len - 32) ? link : 0;
        }
        const u8* node = kind == N4 ? t.n4 + x * N4_SIZE : kind == N16 ? t.n16 + x * N16_SIZE : kind == N48 ? t.n48 + x * N48_SIZE : t.n256 + x * N256_SIZE;
        const uint4 h = *(const uint4*)node;
        const u64 p = h.x;
        // Every key below is longer than d + p.
        if (len <= d + p) return 0;
        bool same = true;
#pragma unroll
        for (u32 j = 0; j < 10; j++) {
            if (j < p && byte_of(h, 6 + j) != key[d + j]) same = false;
        }
        if (!same) return 0;
        d += p;
        link = child_of(t, link, node, key[d++]);
    }
}

// The value of each query, NOT_FOUND (absent or deleted) or ON_HOST.
extern "C" __global__ void art_lookup(TREE_PARAMS, const u64* __restrict__ queries, u32 stride, u32 fixed, u64 m, u64* __restrict__ out) {
    const Tree t = TREE;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < m; i += (u64)gridDim.x * blockDim.x) {
        const u64 link = find_leaf(t, queries, i, stride, fixed);
        if (link == 0 || link == ON_HOST) {
            out[i] = link == 0 ? NOT_FOUND : ON_HOST;
        } else {
            const u64 meta = *meta_of(t, link);
            out[i] = (meta & TOMBSTONE) ? NOT_FOUND : (meta & VALUE_MASK);
        }
    }
}

// The child of inner node `link` with the smallest byte >= `from`, or 0.
__device__ u64 next_child(const Tree& t, u64 link, u32 from) {
    const u64 x = INDEX(link);
    const u32 kind = KIND(link);
    if (kind == N4 || kind == N16) {
        const u8* node = kind == N4 ? t.n4 + x * N4_SIZE : t.n16 + x * N16_SIZE;
        const u64* child = (const u64*)(node + (kind == N4 ? 24 : 32));
        const u32 count = ((const unsigned short*)node)[2];
        for (u32 j = 0; j < count; j++) {
            if (node[16 + j] >= from) return child[j];
        }
        return 0;
    }
    if (kind == N48) {
        const u8* node = t.n48 + x * N48_SIZE;
        for (u32 c = from; c < 256; c++) {
            const u32 s = node[16 + c];
            if (s) return ((const u64*)(node + 272))[s - 1];
        }
        return 0;
    }
    const u64* child = (const u64*)(t.n256 + x * N256_SIZE + 16);
    for (u32 c = from; c < 256; c++) {
        if (child[c]) return child[c];
    }
    return 0;
}

__device__ u64 leftmost_leaf(const Tree& t, u64 link) {
    while (KIND(link) < LEAF8) link = next_child(t, link, 0);
    return link;
}

__device__ u64 leaf_len(const Tree& t, u64 leaf) {
    return KIND(leaf) == LEAF_LONG ? t.leaf_long[INDEX(leaf) * 8 + 5] : (*meta_of(t, leaf) >> 56);
}

__device__ u32 leaf_byte(const Tree& t, u64 leaf, u64 j) {
    const u64 x = INDEX(leaf);
    switch (KIND(leaf)) {
        case LEAF8: return ((const u8*)(t.leaf8 + x * 2))[j];
        case LEAF16: return ((const u8*)(t.leaf16 + x * 4))[j];
        case LEAF32: return ((const u8*)(t.leaf32 + x * 6))[j];
        default: {
            const u64* l = t.leaf_long + x * 8;
            return j < 32 ? ((const u8*)l)[j] : ((const u8*)(t.tails + l[6] / 8))[j - 32];
        }
    }
}

__device__ u64 first_value(const Tree& t, u64 link) {
    return *meta_of(t, leftmost_leaf(t, link)) & VALUE_MASK;
}

// The value of the first key >= the query (Art::lower_bound: one descent
// keeping the deepest subtree met that follows the path), ON_HOST if it
// does not fit its record. `slots`: the root table's occupied slots.
extern "C" __global__ void art_lower_bound(TREE_PARAMS, const u32* __restrict__ slots, u64 nslots, u64 n, const u64* __restrict__ queries,
                                           u32 stride, u32 fixed, u64 m, u64* __restrict__ out) {
    const Tree t = TREE;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < m; i += (u64)gridDim.x * blockDim.x) {
        u64 len;
        const u64* qw;
        if (!record(queries, i, stride, fixed, len, qw)) {
            out[i] = ON_HOST;
            continue;
        }
        const u8* key = (const u8*)qw;
        u32 slot = 0;
        for (u32 j = 0; j < t.lut_depth; j++) slot = slot << 8 | (j < len ? key[j] : 0);
        u64 link = t.lut[slot], d = t.lut_depth, after = 0, result = NOT_FOUND;
        if (len < t.lut_depth) {
            if (link) result = first_value(t, link);
            link = 0;
        }
        while (link) {
            if (KIND(link) >= LEAF8) {
                // Leaf key against the query, byte by byte, then by length.
                const u64 llen = leaf_len(t, link);
                int c = 0;
                for (u64 j = 0; j < llen && j < len && c == 0; j++) c = (int)leaf_byte(t, link, j) - (int)key[j];
                if (c == 0) c = llen < len ? -1 : llen > len ? 1 : 0;
                if (c >= 0) result = *meta_of(t, link) & VALUE_MASK;
                break;
            }
            const u8* node = KIND(link) == N4 ? t.n4 + INDEX(link) * N4_SIZE
                             : KIND(link) == N16 ? t.n16 + INDEX(link) * N16_SIZE
                             : KIND(link) == N48 ? t.n48 + INDEX(link) * N48_SIZE
                                                 : t.n256 + INDEX(link) * N256_SIZE;
            const u64 p = *(const u32*)node;
            // The query's bytes d..d+p against the full prefix (a leaf's
            // bytes when longer than the inline 10).
            const u64 leaf = p > 10 ? leftmost_leaf(t, link) : 0;
            int c = 0;
            u64 j = 0;
            for (; j < p && d + j < len && c == 0; j++) c = (int)key[d + j] - (int)(p > 10 ? leaf_byte(t, leaf, d + j) : node[6 + j]);
            if (c == 0 && d + p >= len) c = -1;  // the query ends inside or at the prefix: before every key here
            if (c < 0) {
                result = first_value(t, link);
                break;
            }
            if (c > 0) break;
            d += p;
            const u32 b = key[d];
            const u64 next = b < 255 ? next_child(t, link, b + 1) : 0;
            if (next) after = next;
            link = child_of(t, link, node, b);
            d++;
        }
        if (result == NOT_FOUND) {
            if (after) {
                result = first_value(t, after);
            } else {
                // The next occupied slot after this one.
                u64 lo = 0, hi = nslots;
                while (lo < hi) {
                    const u64 mid = (lo + hi) / 2;
                    if (slots[mid] <= slot) lo = mid + 1; else hi = mid;
                }
                result = lo < nslots ? first_value(t, t.lut[slots[lo]]) : n;
            }
        }
        out[i] = result;
    }
}

// Batched value updates, the paper's two stages (last writer wins):
// stage 1 finds each query's leaf and keeps, per leaf, the highest batch
// position that names it, in an open-addressing table (linear probing,
// 64-bit CAS on the leaf link, atomicMax on the position; cleared before
// every batch, at least twice the batch). The kernel boundary is the
// grid-wide barrier. Stage 2: the thread holding that position writes.
#define EMPTY_SLOT (~0ull)

__device__ __forceinline__ u64 mix(u64 x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

extern "C" __global__ void art_update_locate(TREE_PARAMS, const u64* __restrict__ queries, u32 stride, u32 fixed, u64 m, u64* __restrict__ locs,
                                             u64* table_keys, u32* table_pos, u64 mask) {
    const Tree t = TREE;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < m; i += (u64)gridDim.x * blockDim.x) {
        const u64 link = find_leaf(t, queries, i, stride, fixed);
        locs[i] = link == ON_HOST ? 0 : link;
        if (link == 0 || link == ON_HOST) continue;
        for (u64 h = mix(link) & mask;; h = (h + 1) & mask) {
            const u64 prev = atomicCAS(&table_keys[h], EMPTY_SLOT, link);
            if (prev == EMPTY_SLOT || prev == link) {
                atomicMax(&table_pos[h], (u32)i);
                break;
            }
        }
    }
}

// `values[i]`: a new value (clears the tombstone), or TOMBSTONE alone (a
// delete: sets it, keeps the value). Counts the leaves written.
extern "C" __global__ void art_update_write(TREE_PARAMS, const u64* __restrict__ locs, const u64* __restrict__ values, u64 m,
                                           const u64* __restrict__ table_keys, const u32* __restrict__ table_pos, u64 mask,
                                           unsigned long long* written) {
    const Tree t = TREE;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < m; i += (u64)gridDim.x * blockDim.x) {
        const u64 link = locs[i];
        if (link == 0) continue;
        u64 h = mix(link) & mask;
        while (table_keys[h] != link) h = (h + 1) & mask;
        if (table_pos[h] != (u32)i) continue;
        u64* meta = meta_of(t, link);
        const u64 v = values[i];
        *meta = v == TOMBSTONE ? (*meta | TOMBSTONE) : ((*meta & ~(TOMBSTONE | VALUE_MASK)) | v);
        atomicAdd(written, 1ull);
    }
}

// The floor: binary search over the sorted keys (data, ends as in
// ByteKeys), byte by byte. Answers the key's rank or NOT_FOUND.
extern "C" __global__ void sorted_strings_lookup(const u8* __restrict__ data, const u64* __restrict__ ends, u64 n,
                                                 const u64* __restrict__ queries, u32 stride, u32 fixed, u64 m, u64* __restrict__ out) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < m; i += (u64)gridDim.x * blockDim.x) {
        u64 len;
        const u64* qw;
        if (!record(queries, i, stride, fixed, len, qw)) {
            out[i] = ON_HOST;
            continue;
        }
        const u8* key = (const u8*)qw;
        u64 lo = 0, hi = n;
        int found = 0;
        while (lo < hi) {
            const u64 mid = (lo + hi) / 2;
            const u64 s = mid ? ends[mid - 1] : 0, e = ends[mid];
            const u64 klen = e - s;
            int c = 0;
            for (u64 j = 0; j < klen && j < len && c == 0; j++) c = (int)data[s + j] - (int)key[j];
            if (c == 0) c = klen < len ? -1 : klen > len ? 1 : 0;
            if (c < 0) {
                lo = mid + 1;
            } else {
                hi = mid;
                if (c == 0) found = 1;
            }
        }
        out[i] = found ? lo : NOT_FOUND;
    }
}

// The partial refresh: record i of `src` (`words` 8-byte words each) goes
// to record at[i] of `dst`, one word per thread.
extern "C" __global__ void art_scatter(u64* __restrict__ dst, const u64* __restrict__ src, const u64* __restrict__ at, u64 n, u32 words) {
    const u64 total = n * words;
    for (u64 t = blockIdx.x * (u64)blockDim.x + threadIdx.x; t < total; t += (u64)gridDim.x * blockDim.x) {
        const u64 r = t / words, w = t % words;
        dst[at[r] * words + w] = src[t];
    }
}

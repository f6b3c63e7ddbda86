// CuART lookups (crates/engine/src/art): one thread per query. A link
// carries its target's kind, so each load's address and size are known
// before it is issued: a node's 16-byte header and the part of its body
// the next byte needs (one key word, one index byte, one child slot), never
// the whole 656-byte N48 or 2 KB N256. Layouts match art/mod.rs.
//
// A query is a record of `stride` words: its length, then its bytes
// zero-padded (so a leaf's key, zero-padded too, compares a word at a
// time). A query longer than the record holds is answered ON_HOST.

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

__device__ __forceinline__ u32 header_byte(uint4 h, u32 j) {
    u32 w = j < 4 ? h.x : j < 8 ? h.y : j < 12 ? h.z : h.w;
    return (w >> (8 * (j & 3))) & 0xff;
}

__device__ __forceinline__ bool words_equal(const u64* __restrict__ a, const u64* __restrict__ b, u64 len) {
    for (u64 j = 0; j < (len + 7) / 8; j++) {
        if (a[j] != b[j]) return false;
    }
    return true;
}

__device__ __forceinline__ u64 answer(u64 meta) {
    return (meta & TOMBSTONE) ? NOT_FOUND : (meta & VALUE_MASK);
}

extern "C" __global__ void art_lookup(const u64* __restrict__ lut, u32 lut_depth, const u8* __restrict__ n4, const u8* __restrict__ n16,
                                      const u8* __restrict__ n48, const u8* __restrict__ n256, const u64* __restrict__ leaf8,
                                      const u64* __restrict__ leaf16, const u64* __restrict__ leaf32, const u64* __restrict__ leaf_long,
                                      const u64* __restrict__ tails, const u64* __restrict__ queries, u32 stride, u64 m,
                                      u64* __restrict__ out) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < m; i += (u64)gridDim.x * blockDim.x) {
        const u64* q = queries + i * stride;
        const u64 len = q[0];
        if (len > (u64)(stride - 1) * 8) {
            out[i] = ON_HOST;
            continue;
        }
        const u64* qw = q + 1;
        const u8* key = (const u8*)qw;
        u32 slot = 0;
        for (u32 j = 0; j < lut_depth; j++) slot = slot << 8 | (j < len ? key[j] : 0);
        u64 link = lut[slot];
        u64 d = lut_depth;
        u64 result = NOT_FOUND;
        for (;;) {
            const u32 kind = KIND(link);
            const u64 x = INDEX(link);
            if (kind == EMPTY) break;
            if (kind == LEAF8) {
                const u64* l = leaf8 + x * 2;
                const u64 meta = l[1];
                if ((meta >> 56) == len && l[0] == qw[0]) result = answer(meta);
                break;
            }
            if (kind == LEAF16) {
                const u64* l = leaf16 + x * 4;
                const u64 meta = l[2];
                if ((meta >> 56) == len && words_equal(l, qw, len)) result = answer(meta);
                break;
            }
            if (kind == LEAF32) {
                const u64* l = leaf32 + x * 6;
                const u64 meta = l[4];
                if ((meta >> 56) == len && words_equal(l, qw, len)) result = answer(meta);
                break;
            }
            if (kind == LEAF_LONG) {
                const u64* l = leaf_long + x * 8;
                if (l[5] == len && words_equal(l, qw, 32) && words_equal(tails + l[6] / 8, qw + 4, len - 32)) result = answer(l[4]);
                break;
            }
            const u8* node = kind == N4 ? n4 + x * N4_SIZE : kind == N16 ? n16 + x * N16_SIZE : kind == N48 ? n48 + x * N48_SIZE : n256 + x * N256_SIZE;
            const uint4 h = *(const uint4*)node;
            const u64 p = h.x;
            // Every key below is longer than d + p.
            if (len <= d + p) break;
            bool same = true;
#pragma unroll
            for (u32 j = 0; j < 10; j++) {
                if (j < p && header_byte(h, 6 + j) != key[d + j]) same = false;
            }
            if (!same) break;
            d += p;
            const u32 b = key[d++];
            const u32 count = h.y & 0xffff;
            link = 0;
            if (kind == N4) {
                const u64 ks = *(const u64*)(node + 16);
                for (u32 j = 0; j < count; j++) {
                    if (((ks >> (8 * j)) & 0xff) == b) {
                        link = ((const u64*)(node + 24))[j];
                        break;
                    }
                }
            } else if (kind == N16) {
                const uint4 ks = *(const uint4*)(node + 16);
                for (u32 j = 0; j < count; j++) {
                    if (header_byte(ks, j) == b) {
                        link = ((const u64*)(node + 32))[j];
                        break;
                    }
                }
            } else if (kind == N48) {
                const u32 s = node[16 + b];
                if (s) link = ((const u64*)(node + 272))[s - 1];
            } else {
                link = ((const u64*)(node + 16))[b];
            }
        }
        out[i] = result;
    }
}

// The floor: binary search over the sorted keys (data, ends as in
// ByteKeys), byte by byte. Answers the key's rank or NOT_FOUND.
extern "C" __global__ void sorted_strings_lookup(const u8* __restrict__ data, const u64* __restrict__ ends, u64 n,
                                                 const u64* __restrict__ queries, u32 stride, u64 m, u64* __restrict__ out) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < m; i += (u64)gridDim.x * blockDim.x) {
        const u64* q = queries + i * stride;
        const u64 len = q[0];
        if (len > (u64)(stride - 1) * 8) {
            out[i] = ON_HOST;
            continue;
        }
        const u8* key = (const u8*)(q + 1);
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

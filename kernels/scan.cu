// Exclusive prefix sums of u32 counts into u64 offsets, shared by every
// structure that sizes its outputs by a count pass (crates/engine/src/gpu/scan.rs).
//
// Compiled at run time with NVRTC (no headers: only built-ins).

typedef unsigned long long u64;
typedef unsigned int u32;

// Exclusive scan, first level: each block scans 1024 values (4 per
// thread) into out (u64) and writes its total to block_sum.
extern "C" __global__ void scan_blocks(const u32 *__restrict__ in, u64 n, u64 *__restrict__ out, u64 *__restrict__ block_sum) {
    __shared__ u64 s[256];
    const u64 base = (u64)blockIdx.x * 1024 + threadIdx.x * 4;
    u64 v[4], local = 0;
    for (int i = 0; i < 4; i++) {
        v[i] = base + i < n ? in[base + i] : 0;
        local += v[i];
    }
    s[threadIdx.x] = local;
    __syncthreads();
    for (int d = 1; d < 256; d <<= 1) {
        u64 t = threadIdx.x >= d ? s[threadIdx.x - d] : 0;
        __syncthreads();
        s[threadIdx.x] += t;
        __syncthreads();
    }
    u64 run = s[threadIdx.x] - local;
    for (int i = 0; i < 4; i++) {
        if (base + i < n) out[base + i] = run;
        run += v[i];
    }
    if (threadIdx.x == 255) block_sum[blockIdx.x] = s[255];
}

// Second level: adds each block's offset; out[n] = total.
extern "C" __global__ void scan_add(u64 *__restrict__ out, u64 n, const u64 *__restrict__ block_off, u64 total) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        out[i] += block_off[i / 1024];
    if (blockIdx.x == 0 && threadIdx.x == 0) out[n] = total;
}

//! The device radix sort against a stable sort on the host: random and
//! duplicate-heavy keys, partial key widths (stability on the bits left
//! out), sizes around its tile.

mod common;

use gpuindex_engine::gpu::sort::{f64_order_bits, sort_pairs};
use gpuindex_engine::rng::SplitMix64;

#[test]
fn gpu_radix_sort_is_a_stable_sort() {
    let Some(gpu) = common::gpu_or_skip("gpu_radix_sort_is_a_stable_sort") else { return };
    let stream = gpu.new_stream().unwrap();
    let mut rng = SplitMix64::new(8);
    for n in [0usize, 1, 2, 255, 4095, 4096, 4097, 100_000, 1 << 20] {
        for (what, bits) in [("full", 64u32), ("12 bits", 12), ("8 bits", 8), ("33 bits", 33)] {
            let keys: Vec<u64> = (0..n)
                .map(|i| match i % 3 {
                    0 => rng.next_u64(),
                    1 => rng.below(5),
                    _ => u64::MAX - rng.below(3),
                })
                .collect();
            let vals: Vec<u32> = (0..n as u32).collect();
            let (k, v) = sort_pairs(&gpu, &stream, gpu.upload(&keys).unwrap(), gpu.upload(&vals).unwrap(), n, bits).unwrap();
            let (k, v) = (k.download().unwrap(), v.download().unwrap());
            let mask = if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 };
            let mut want: Vec<(u64, u32)> = keys.iter().copied().zip(vals).collect();
            want.sort_by_key(|&(key, _)| key & mask);
            let got: Vec<(u64, u32)> = k[..n].iter().copied().zip(v[..n].iter().copied()).collect();
            assert!(got == want, "n = {n}, {what}: the device sort differs from a stable sort");
        }
    }
}

#[test]
fn f64_order_bits_order_as_total_cmp() {
    let xs = [f64::NEG_INFINITY, -1e300, -1.0, -f64::MIN_POSITIVE, -0.0, 0.0, 5e-324, 1.0, 1e300, f64::INFINITY, f64::NAN];
    for a in xs {
        for b in xs {
            assert_eq!(f64_order_bits(a).cmp(&f64_order_bits(b)), a.total_cmp(&b), "{a} {b}");
        }
    }
}

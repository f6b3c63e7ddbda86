//! The sorted-array lower bound: CPU against an oracle, GPU against CPU, on
//! random data with duplicates and extremes.

mod common;

use gpuindex_engine::executor::{submit, Device, ExecOptions, Policy};
use gpuindex_engine::gpu::Schedule;
use gpuindex_engine::rng::SplitMix64;
use gpuindex_engine::sorted_array::{lower_bound, GpuSearch, LowerBound, SortedKeys};

fn oracle(keys: &[u64], q: u64) -> u64 {
    keys.partition_point(|&k| k < q) as u64
}

/// Sorted keys drawn from a small range (many duplicates) or the full range,
/// sometimes with 0 and u64::MAX.
fn random_keys(rng: &mut SplitMix64, n: usize) -> Vec<u64> {
    let narrow = rng.below(2) == 0;
    let mut keys: Vec<u64> = (0..n).map(|_| if narrow { rng.below(n as u64 / 4 + 1) * 3 } else { rng.next_u64() }).collect();
    if n > 2 && rng.below(2) == 0 {
        keys[0] = 0;
        keys[1] = u64::MAX;
    }
    keys.sort_unstable();
    keys
}

/// Queries that hit, miss between keys, fall below and above everything.
fn random_queries(rng: &mut SplitMix64, keys: &[u64], m: usize) -> Vec<u64> {
    (0..m)
        .map(|i| match i % 6 {
            0 if !keys.is_empty() => keys[rng.below(keys.len() as u64) as usize],
            1 if !keys.is_empty() => keys[rng.below(keys.len() as u64) as usize].wrapping_add(1),
            2 => 0,
            3 => u64::MAX,
            4 => rng.below(1000),
            _ => rng.next_u64(),
        })
        .collect()
}

const SIZES: &[usize] = &[0, 1, 2, 3, 7, 64, 1000, 2047, 2048, 2049, 4097, 100_003, 1 << 20];

#[test]
fn unsorted_input_is_rejected() {
    assert_eq!(SortedKeys::new(vec![1, 3, 2]).err().map(|e| e.position), Some(1));
    assert!(SortedKeys::new(vec![]).is_ok());
    assert!(SortedKeys::new(vec![5, 5, 5]).is_ok());
}

#[test]
fn cpu_matches_oracle() {
    let mut rng = SplitMix64::new(1);
    for &n in SIZES {
        for _ in 0..3 {
            let keys = random_keys(&mut rng, n);
            let qs = random_queries(&mut rng, &keys, 5000);
            let sk = SortedKeys::new(keys.clone()).unwrap();
            let mut out = vec![u64::MAX; qs.len()];
            sk.lower_bound_cpu(&qs, &mut out);
            for (q, got) in qs.iter().zip(&out) {
                assert_eq!(*got, oracle(&keys, *q), "n={n} q={q}");
                assert_eq!(lower_bound(&keys, *q) as u64, *got);
            }
        }
    }
}

#[test]
fn gpu_matches_cpu() {
    let Some(gpu) = common::gpu_or_skip("gpu_matches_cpu") else { return };
    let mut rng = SplitMix64::new(2);
    for (i, &n) in SIZES.iter().chain(&[5_000_000]).enumerate() {
        let keys = random_keys(&mut rng, n);
        let stride = [32, 1, 5, 4096][i % 4];
        let sk = SortedKeys::new(keys).unwrap().with_sample_stride(stride);
        for m in [0usize, 1, 5, 1000, 100_000] {
            let qs = random_queries(&mut rng, sk.keys(), m);
            let mut want = vec![0; m];
            sk.lower_bound_cpu(&qs, &mut want);
            for variant in GpuSearch::ALL {
                for sched in [
                    Schedule::default(),
                    Schedule { chunk: 1, in_flight: 1 },
                    Schedule { chunk: 777, in_flight: 2 },
                    Schedule { chunk: 4096, in_flight: 3 },
                ] {
                    if sched.chunk < 100 && m > 1000 {
                        continue; // a million one-query chunks proves nothing more
                    }
                    let mut got = vec![u64::MAX; m];
                    sk.lower_bound_gpu(&gpu, &qs, &mut got, variant, sched).unwrap();
                    assert_eq!(got, want, "n={n} m={m} stride={stride} {variant:?} {sched:?}");
                }
            }
        }
    }
}

#[test]
fn executor_policies_agree() {
    let mut rng = SplitMix64::new(3);
    let keys = random_keys(&mut rng, 50_000);
    let sk = SortedKeys::new(keys).unwrap();
    let qs = random_queries(&mut rng, sk.keys(), 20_000);
    let job = LowerBound::new(&sk);
    let cpu = submit(&ExecOptions { policy: Policy::Cpu, min_gpu_batch: 0 }, &job, &qs).unwrap();
    assert_eq!(cpu.device, Device::Cpu);
    let auto = submit(&ExecOptions { policy: Policy::Auto, min_gpu_batch: 1 }, &job, &qs).unwrap();
    assert_eq!(auto.output, cpu.output);
    let small = submit(&ExecOptions { policy: Policy::Auto, min_gpu_batch: 1 << 30 }, &job, &qs).unwrap();
    assert_eq!(small.device, Device::Cpu);
    assert!(small.cpu_reason.unwrap().contains("below gpuindex.gpu_min_batch"));
    let forced = submit(&ExecOptions { policy: Policy::Gpu, min_gpu_batch: 0 }, &job, &qs);
    match common::gpu_or_skip("executor_policies_agree") {
        Some(_) => {
            assert_eq!(auto.device, Device::Gpu);
            let forced = forced.unwrap();
            assert_eq!(forced.device, Device::Gpu);
            assert_eq!(forced.output, cpu.output);
        }
        None => {
            assert_eq!(auto.device, Device::Cpu);
            assert!(auto.cpu_reason.is_some());
            let e = forced.unwrap_err();
            assert!(e.to_string().starts_with("no usable GPU"), "{e}");
        }
    }
}

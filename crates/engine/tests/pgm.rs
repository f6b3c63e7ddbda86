//! The G-Learned index (gpuindex_engine::pgm): GPU lookups equal the CPU's
//! and binary search, for both strategies and both placements of the keys,
//! on random, sequential, duplicate-heavy and extreme keys.

mod common;

use gpuindex_engine::gpu::Schedule;
use gpuindex_engine::pgm::gpu::{choose, lower_bound_gpu, predict_gpu, DevicePgm, Strategy};
use gpuindex_engine::pgm::{Pgm, StreamFit};
use gpuindex_engine::rng::SplitMix64;
use gpuindex_engine::sorted_array::lower_bound;

fn key_sets(r: &mut SplitMix64, n: usize) -> Vec<(&'static str, Vec<u64>)> {
    let mut random: Vec<u64> = (0..n).map(|_| r.next_u64()).collect();
    random.sort_unstable();
    let sequential: Vec<u64> = (0..n as u64).map(|i| 1_700_000_000_000_000 + i * 1_000_000).collect();
    let mut zipf: Vec<u64> = (0..n).map(|_| 1_000_000 / (1 + r.next_u64() % 1_000_000)).collect();
    zipf.sort_unstable();
    let mut extremes = vec![0, 0, u64::MAX, u64::MAX];
    extremes.extend((0..n as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
    extremes.sort_unstable();
    vec![("random", random), ("sequential", sequential), ("zipf duplicates", zipf), ("extremes", extremes), ("one key", vec![42])]
}

#[test]
fn gpu_lookups_equal_the_cpu_and_binary_search() {
    let Some(gpu) = common::gpu_or_skip("gpu_lookups_equal_the_cpu_and_binary_search") else { return };
    let mut r = SplitMix64::new(9);
    for (name, keys) in key_sets(&mut r, 1 << 20) {
        let mut queries: Vec<u64> = (0..100_000).map(|_| keys[r.next_u64() as usize % keys.len()]).collect();
        queries.extend((0..100_000).map(|_| r.next_u64()));
        queries.extend([0, 1, u64::MAX, u64::MAX - 1, keys[0], keys[keys.len() - 1]]);
        let want: Vec<u64> = queries.iter().map(|&q| lower_bound(&keys, q) as u64).collect();
        for (eps, eps_inner) in [(16, 4), (128, 4)] {
            let pgm = Pgm::build(&keys, eps, eps_inner);
            let mut cpu = vec![0; queries.len()];
            pgm.lower_bound_cpu(&keys, &queries, &mut cpu);
            assert!(cpu == want, "{name}: CPU");
            for on_device in [false, true] {
                let dev = DevicePgm::upload(&gpu, &pgm, on_device.then_some(&keys[..])).unwrap();
                for strategy in Strategy::ALL {
                    let mut got = vec![0; queries.len()];
                    let sched = Schedule { chunk: 65_536, in_flight: 2 };
                    lower_bound_gpu(&gpu, &pgm, &dev, &keys, &queries, &mut got, strategy, sched).unwrap();
                    let bad = got.iter().zip(&want).position(|(a, b)| a != b);
                    assert!(
                        bad.is_none(),
                        "{name} eps {eps} keys on device {on_device} {strategy:?}: query {:?}",
                        bad.map(|i| (queries[i], got[i], want[i]))
                    );
                }
                choose(&gpu, &pgm, &dev, &keys, &queries[..10_000]).unwrap();
            }
        }
    }
}

#[test]
fn a_model_off_by_far_is_still_exact_on_the_gpu() {
    let Some(gpu) = common::gpu_or_skip("a_model_off_by_far_is_still_exact_on_the_gpu") else { return };
    let mut r = SplitMix64::new(4);
    let (_, keys) = key_sets(&mut r, 100_000).swap_remove(0);
    let mut pgm = Pgm::build(&keys, 8, 4);
    pgm.slope.iter_mut().for_each(|s| *s *= 3.0);
    let queries: Vec<u64> = (0..50_000).map(|_| r.next_u64()).collect();
    let want: Vec<u64> = queries.iter().map(|&q| lower_bound(&keys, q) as u64).collect();
    for on_device in [false, true] {
        let dev = DevicePgm::upload(&gpu, &pgm, on_device.then_some(&keys[..])).unwrap();
        let mut got = vec![0; queries.len()];
        lower_bound_gpu(&gpu, &pgm, &dev, &keys, &queries, &mut got, Strategy::Complete, Schedule::default()).unwrap();
        assert!(got == want, "keys on device {on_device}");
    }
}

/// The GPU's predictions (gpu_learned's batches: the host finishes on its
/// pages) are the CPU's, within a rounding step, and a fresh model's are
/// within ε of every stored key's first position; keys near 2^63 too, where
/// SQL's int8 keys are encoded.
#[test]
fn gpu_predictions_are_the_cpus() {
    let Some(gpu) = common::gpu_or_skip("gpu_predictions_are_the_cpus") else { return };
    let mut r = SplitMix64::new(12);
    let mut sets = key_sets(&mut r, 1 << 18);
    sets.push(("int8 codes", (0..1u64 << 18).map(|i| (1 << 63) + i * 2 + (i * 7919) % 3).collect()));
    for (name, keys) in sets {
        let mut fit = StreamFit::new(16, 4);
        keys.iter().for_each(|&k| fit.push(k));
        let pgm = fit.finish();
        let dev = DevicePgm::upload(&gpu, &pgm, None).unwrap();
        let mut queries: Vec<u64> = keys.iter().step_by(3).copied().collect();
        queries.extend((0..10_000).map(|_| r.next_u64()));
        let mut got = vec![0; queries.len()];
        predict_gpu(&gpu, &pgm, &dev, &queries, &mut got, Schedule::default()).unwrap();
        for (&q, &g) in queries.iter().zip(&got) {
            let cpu = pgm.predict_position(q) as u64;
            assert!(g.abs_diff(cpu) <= 1, "{name}: q {q}: GPU {g}, CPU {cpu}");
            if keys.binary_search(&q).is_ok() {
                let first = lower_bound(&keys, q) as u64;
                assert!(g.abs_diff(first) <= 17, "{name}: q {q}: GPU {g}, first position {first}");
            }
        }
    }
}

/// The GPU build (one thread per chunk) is the CPU's chunked build segment
/// for segment, bit for bit, on every key set, several ε and chunk
/// lengths; a gently curving set grows hulls past a thread's room, so its
/// chunks are fitted on the host.
#[test]
fn gpu_build_is_the_cpus_chunked_build() {
    let Some(gpu) = common::gpu_or_skip("gpu_build_is_the_cpus_chunked_build") else { return };
    let mut r = SplitMix64::new(21);
    let mut sets = key_sets(&mut r, 1 << 19);
    sets.push(("int8 codes", (0..1u64 << 19).map(|i| (1 << 63) + i * 2 + (i * 7919) % 3).collect()));
    sets.push(("gentle curve", (0..1u64 << 19).map(|i| (i << 24) + i * i).collect()));
    sets.push(("empty", Vec::new()));
    for (name, keys) in sets {
        for eps in [1usize, 16, 128] {
            for chunk in [1usize << 10, 1 << 16, 1 << 20] {
                let want = Pgm::build_chunked(&keys, eps, 4, chunk);
                let got = gpuindex_engine::pgm::gpu::build_gpu(&gpu, &keys, None, eps, 4, chunk).unwrap();
                let bits = |p: &Pgm| -> Vec<(u64, u64, u64)> {
                    (0..p.first.len()).map(|i| (p.first[i], p.slope[i].to_bits(), p.intercept[i].to_bits())).collect()
                };
                assert_eq!(got.levels, want.levels, "{name} eps {eps} chunk {chunk}: levels");
                let (g, w) = (bits(&got), bits(&want));
                let bad = g.iter().zip(&w).position(|(a, b)| a != b);
                assert!(bad.is_none(), "{name} eps {eps} chunk {chunk}: segment {:?}", bad.map(|i| (g[i], w[i])));
            }
        }
    }
}

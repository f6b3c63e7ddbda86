//! HB+-tree: both layouts against oracles (sorted array, BTreeMap), updates
//! and ranges, and the GPU inner search against the CPU's on random and
//! real-shaped (`datasets::KeySet`) keys.

mod common;

use gpuindex_engine::datasets::KeySet;
use gpuindex_engine::gpu::Schedule;
use gpuindex_engine::hbtree::implicit::{Hit, ImplicitTree};
use gpuindex_engine::hbtree::regular::{MirrorSync, RegularTree, Update};
use gpuindex_engine::rng::SplitMix64;
use std::collections::BTreeMap;
use std::sync::Mutex;

fn sorted_keys(rng: &mut SplitMix64, n: usize, dups: bool) -> Vec<u64> {
    let mut k: Vec<u64> = (0..n).map(|_| if dups { rng.below(n as u64 / 3 + 1) } else { rng.next_u64() }).collect();
    if n > 3 && rng.below(2) == 0 {
        k[0] = u64::MAX;
        k[1] = 0;
    }
    k.sort_unstable();
    if !dups {
        k.dedup();
    }
    k
}

fn queries(rng: &mut SplitMix64, keys: &[u64], m: usize) -> Vec<u64> {
    (0..m)
        .map(|i| match i % 5 {
            0 | 1 if !keys.is_empty() => keys[rng.below(keys.len() as u64) as usize],
            2 => [0, 1, u64::MAX, u64::MAX - 1][rng.below(4) as usize],
            3 if !keys.is_empty() => keys[rng.below(keys.len() as u64) as usize].wrapping_add(1),
            _ => rng.next_u64(),
        })
        .collect()
}

fn oracle_hit(keys: &[u64], values: &[u64], q: u64) -> Hit {
    let p = keys.partition_point(|&k| k < q);
    Hit { position: p as u64, value: (p < keys.len() && keys[p] == q).then(|| values[p]) }
}

const SIZES: &[usize] = &[0, 1, 3, 4, 5, 31, 32, 33, 257, 4096, 100_000, 1 << 20];

#[test]
fn implicit_matches_sorted_array() {
    let mut rng = SplitMix64::new(11);
    for &n in SIZES {
        for dups in [false, true] {
            let keys = sorted_keys(&mut rng, n, dups);
            let values: Vec<u64> = (0..keys.len() as u64).map(|i| i * 7 + 1).collect();
            let t = ImplicitTree::build(&keys, &values).unwrap();
            let qs = queries(&mut rng, &keys, 20_000);
            let mut out = vec![Hit::default(); qs.len()];
            t.search_cpu(&qs, &mut out);
            for (q, h) in qs.iter().zip(&out) {
                assert_eq!(*h, oracle_hit(&keys, &values, *q), "n={n} q={q}");
                assert_eq!(t.search(*q), *h);
            }
            // ranges: every key in [lo, hi]
            for _ in 0..50 {
                let (a, b) = (qs[rng.below(qs.len() as u64) as usize], qs[rng.below(qs.len() as u64) as usize]);
                let (lo, hi) = (a.min(b), a.max(b));
                let got: Vec<u64> = t.range(lo, hi).map(|(k, _)| k).collect();
                let want: Vec<u64> = keys.iter().copied().filter(|&k| lo <= k && k <= hi).collect();
                assert_eq!(got, want);
            }
        }
    }
    assert!(ImplicitTree::build(&[2, 1], &[0, 0]).is_err());
}

/// The real-shaped key sets (Zipf duplicates, jittered timestamps, all of
/// int8), encoded as gpu_btree does (sign bit flipped), on the CPU against
/// the sorted array and on the GPU against the CPU.
#[test]
fn implicit_on_real_shaped_keys() {
    let gpu = common::gpu_or_skip("implicit_on_real_shaped_keys");
    let mut rng = SplitMix64::new(13);
    for set in KeySet::ALL {
        let mut keys: Vec<u64> = set.keys(300_000, 5).into_iter().map(|k| (k as u64) ^ (1 << 63)).collect();
        keys.sort_unstable();
        let values: Vec<u64> = (0..keys.len() as u64).collect();
        let t = ImplicitTree::build(&keys, &values).unwrap();
        let qs = queries(&mut rng, &keys, 50_000);
        let mut got = vec![Hit::default(); qs.len()];
        t.search_cpu(&qs, &mut got);
        for (q, h) in qs.iter().zip(&got) {
            assert_eq!(*h, oracle_hit(&keys, &values, *q), "{} q={q}", set.name());
        }
        if let Some(gpu) = &gpu {
            let mut on_gpu = vec![Hit::default(); qs.len()];
            t.search_gpu(gpu, &qs, &mut on_gpu, Schedule::default()).unwrap();
            assert_eq!(on_gpu, got, "{}: GPU differs from CPU", set.name());
        }
    }
}

#[test]
fn implicit_gpu_matches_cpu() {
    let Some(gpu) = common::gpu_or_skip("implicit_gpu_matches_cpu") else { return };
    let mut rng = SplitMix64::new(12);
    for &n in SIZES.iter().chain(&[5_000_000]) {
        let keys = sorted_keys(&mut rng, n, n % 2 == 0);
        let values: Vec<u64> = keys.iter().map(|k| k ^ 0x5555).collect();
        let t = ImplicitTree::build(&keys, &values).unwrap();
        for m in [0usize, 1, 7, 5000, 300_000] {
            let qs = queries(&mut rng, &keys, m);
            let mut want = vec![Hit::default(); m];
            t.search_cpu(&qs, &mut want);
            for sched in [Schedule::default(), Schedule { chunk: 1000, in_flight: 1 }, Schedule { chunk: 4096, in_flight: 2 }] {
                let mut got = vec![Hit { position: u64::MAX, value: Some(1) }; m];
                t.search_gpu(&gpu, &qs, &mut got, sched).unwrap();
                assert_eq!(got, want, "n={n} m={m} {sched:?}");
            }
        }
    }
}

fn random_updates(rng: &mut SplitMix64, n: usize, space: u64) -> Vec<Update> {
    (0..n)
        .map(|_| {
            let k = rng.below(space);
            if rng.below(4) == 0 {
                Update::Delete(k)
            } else {
                Update::Insert(k, rng.next_u64())
            }
        })
        .collect()
}

fn apply_oracle(m: &mut BTreeMap<u64, u64>, ups: &[Update]) {
    for u in ups {
        match *u {
            Update::Insert(k, v) => {
                m.insert(k, v);
            }
            Update::Delete(k) => {
                m.remove(&k);
            }
        }
    }
}

fn check_against(t: &RegularTree, m: &BTreeMap<u64, u64>, rng: &mut SplitMix64) {
    t.check().unwrap();
    assert_eq!(t.len(), m.len());
    assert_eq!(t.entries(), m.iter().map(|(&k, &v)| (k, v)).collect::<Vec<_>>());
    for _ in 0..200 {
        let q = rng.below(1 << 20);
        assert_eq!(t.get(q), m.get(&q).copied(), "get {q}");
        let hi = q + rng.below(5000);
        assert_eq!(t.range(q, hi), m.range(q..=hi).map(|(&k, &v)| (k, v)).collect::<Vec<_>>());
    }
}

#[test]
fn regular_updates_match_btreemap() {
    let mut rng = SplitMix64::new(13);
    // one by one, with splits up to several levels (small key space keeps deletes hitting)
    let mut t = RegularTree::new();
    let mut m = BTreeMap::new();
    for round in 0..6 {
        let ups = random_updates(&mut rng, 40_000, 1 << (14 + round));
        t.parallel_threshold = usize::MAX;
        t.apply(&ups, None).unwrap();
        apply_oracle(&mut m, &ups);
        check_against(&t, &m, &mut rng);
        // the parallel method on the same tree
        let ups = random_updates(&mut rng, 60_000, 1 << (14 + round));
        t.parallel_threshold = 1;
        t.apply(&ups, None).unwrap();
        apply_oracle(&mut m, &ups);
        check_against(&t, &m, &mut rng);
    }
    assert!(t.height() >= 3, "the test should grow a tree of 3+ levels, got {}", t.height());
}

#[test]
fn regular_bulk_load_then_update() {
    let mut rng = SplitMix64::new(14);
    for &n in &[0usize, 1, 255, 256, 257, 20_000, 300_000] {
        for (leaf_fill, node_fill) in [(256, 64), (192, 48), (3, 2)] {
            if leaf_fill == 3 && n > 20_000 {
                continue;
            }
            let keys: Vec<u64> = sorted_keys(&mut rng, n, false)
                .into_iter()
                .map(|k| k >> 44)
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let values: Vec<u64> = keys.iter().map(|k| k + 1).collect();
            let mut t = RegularTree::bulk_load(&keys, &values, leaf_fill, node_fill);
            let mut m: BTreeMap<u64, u64> = keys.iter().map(|&k| (k, k + 1)).collect();
            check_against(&t, &m, &mut rng);
            let ups = random_updates(&mut rng, 5000, 1 << 20);
            t.apply(&ups, None).unwrap();
            apply_oracle(&mut m, &ups);
            check_against(&t, &m, &mut rng);
        }
    }
}

#[test]
fn regular_gpu_matches_cpu_through_updates() {
    let Some(gpu) = common::gpu_or_skip("regular_gpu_matches_cpu_through_updates") else { return };
    let mut rng = SplitMix64::new(15);
    let keys: Vec<u64> = (0..2_000_000u64).map(|i| i * 3).collect();
    let values: Vec<u64> = keys.iter().map(|k| k ^ 77).collect();
    let mut t = RegularTree::bulk_load(&keys, &values, 192, 48);
    t.upload(&gpu).unwrap();
    let mut m: BTreeMap<u64, u64> = keys.iter().map(|&k| (k, k ^ 77)).collect();
    let mut per_node = 0;
    let mut whole = 0;
    for round in 0..6 {
        let n = [100, 5000, 200_000, 10, 70_000, 1][round];
        let ups = random_updates(&mut rng, n, 6_000_000);
        t.parallel_threshold = 50_000;
        match t.apply(&ups, Some(&gpu)).unwrap() {
            MirrorSync::PerNode { .. } => per_node += 1,
            MirrorSync::WholeSegment { .. } => whole += 1,
            MirrorSync::None => panic!("mirror not synced"),
        }
        apply_oracle(&mut m, &ups);
        t.check().unwrap();
        let qs: Vec<u64> = (0..300_000).map(|_| rng.below(6_000_001)).collect();
        let mut want = vec![None; qs.len()];
        t.search_cpu(&qs, &mut want);
        for (q, w) in qs.iter().zip(&want).take(2000) {
            assert_eq!(*w, m.get(q).copied());
        }
        let mut got = vec![Some(u64::MAX); qs.len()];
        t.search_gpu(&gpu, &qs, &mut got, Schedule { chunk: 1 << 16, in_flight: 2 }).unwrap();
        assert_eq!(got, want, "round {round}");
        // ranges: GPU start + CPU walk == CPU only
        let ranges: Vec<(u64, u64)> = qs.iter().take(20_000).map(|&q| (q, q + rng.below(300))).collect();
        let sums = |gpu_side: bool| {
            let acc: Vec<Mutex<(u64, u64)>> = (0..ranges.len()).map(|_| Mutex::new((0, 0))).collect();
            let visit = |i: usize, k: u64, v: u64| {
                let mut a = acc[i].lock().unwrap();
                a.0 += 1;
                a.1 = a.1.wrapping_add(k ^ v);
            };
            if gpu_side {
                t.ranges_gpu(&gpu, &ranges, Schedule::default(), visit).unwrap();
            } else {
                t.ranges_cpu(&ranges, visit);
            }
            acc.into_iter().map(|m| m.into_inner().unwrap()).collect::<Vec<_>>()
        };
        let cpu = sums(false);
        assert_eq!(sums(true), cpu);
        for (i, &(lo, hi)) in ranges.iter().enumerate().take(500) {
            assert_eq!(cpu[i].0, m.range(lo..=hi).count() as u64);
        }
    }
    assert!(per_node > 0 && whole > 0, "both sync methods must have run");
}

use super::gpu::{lookup_gpu, search_gpu, DeviceArt, DeviceSortedStrings, Format, Op, Records};
use super::*;
use crate::datasets::StringSet;
use crate::rng::SplitMix64;

#[test]
fn records_have_the_kernels_layout() {
    use std::mem::size_of;
    assert_eq!(
        [size_of::<Header>(), size_of::<Node4>(), size_of::<Node16>(), size_of::<Node48>(), size_of::<Node256>()],
        [16, 64, 160, 656, 2064]
    );
    assert_eq!([size_of::<Leaf8>(), size_of::<Leaf16>(), size_of::<Leaf32>(), size_of::<LeafLong>()], [16, 32, 48, 64]);
}

#[test]
fn records_hold_the_queries() {
    let uuids = StringSet::Uuid.keys(1000, 2);
    let f = Format::for_queries(&uuids);
    assert_eq!(f, Format { width: 16, fixed: true });
    let r = Records::new(&uuids, f);
    let bytes: Vec<u8> = r.words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    assert_eq!(bytes, uuids.parts().0);
    let mixed: ByteKeys = [&b"abc"[..], b"", &[9u8; 20], &[1u8; 300]].into_iter().collect();
    let f = Format::for_queries(&mixed);
    assert!(!f.fixed && f.width >= 24 && f.width < 300);
    let r = Records::new(&mixed, f);
    let stride = f.stride();
    for (i, q) in mixed.iter().enumerate() {
        let rec = &r.words[i * stride..(i + 1) * stride];
        assert_eq!(rec[0], q.len() as u64);
        let body: Vec<u8> = rec[1..].iter().flat_map(|w| w.to_ne_bytes()).collect();
        if q.len() <= f.width {
            assert_eq!(&body[..q.len()], q);
            assert!(body[q.len()..].iter().all(|&b| b == 0));
        }
    }
    assert_eq!(Format::exact(&mixed), None);
}

/// Queries for `keys`: every key, keys with a byte changed, cut short or
/// extended, fresh keys of the set, and odd ones.
fn queries(set: StringSet, keys: &ByteKeys, seed: u64) -> ByteKeys {
    let mut rng = SplitMix64::new(seed);
    let mut q: ByteKeys = keys.iter().collect();
    let fresh = set.keys(keys.len() / 2 + 10, seed ^ 0xabc);
    for k in fresh.iter() {
        q.push(k);
    }
    for _ in 0..keys.len() {
        let mut k = keys.get(rng.below(keys.len() as u64) as usize).to_vec();
        match rng.below(3) {
            0 => {
                let at = rng.below(k.len() as u64) as usize;
                k[at] = k[at].wrapping_add(1 + rng.below(255) as u8);
            }
            1 => k.truncate(rng.below(k.len() as u64) as usize),
            _ => k.extend((0..1 + rng.below(40)).map(|_| rng.next_u64() as u8)),
        }
        q.push(&k);
    }
    for odd in [&b""[..], b"\0", b"\xff\xff\xff\xff", &[0u8; 300], &[0xffu8; 40]] {
        q.push(odd);
    }
    q
}

/// Every lookup and lower bound against the sorted array.
fn check(keys: &ByteKeys, queries: &ByteKeys, lut_depth: usize) -> Art {
    let art = build(keys, lut_depth).expect("build");
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(art.get(k), Some(i as u64), "key {i} {k:?}");
    }
    let mut out = vec![0; queries.len()];
    art.lookup_cpu(queries, &mut out);
    for (i, q) in queries.iter().enumerate() {
        let lb = keys.lower_bound(q);
        let exact = lb < keys.len() && keys.get(lb) == q;
        assert_eq!(out[i], if exact { lb as u64 } else { NOT_FOUND }, "lookup {q:?} (depth {lut_depth})");
        assert_eq!(art.lower_bound(q), lb as u64, "lower bound {q:?} (depth {lut_depth})");
    }
    art
}

#[test]
fn every_set_and_root_table_depth_equals_the_sorted_array() {
    for set in StringSet::ALL {
        let keys = set.keys(6000, 7).sorted_unique();
        let q = queries(set, &keys, 11);
        for depth in 0..=3 {
            let art = check(&keys, &q, depth);
            assert_eq!(art.n, keys.len());
        }
    }
}

#[test]
fn prefix_ranges_hold_the_keys_with_the_prefix() {
    let raw: Vec<Vec<u8>> = StringSet::Urls.keys(20_000, 3).iter().map(|k| k.to_vec()).collect();
    let keys: ByteKeys = raw.iter().map(|k| k.as_slice()).collect::<ByteKeys>().sorted_unique();
    let art = build(&keys, 2).unwrap();
    let mut prefixes: Vec<Vec<u8>> =
        vec![b"".to_vec(), b"https://www.site1".to_vec(), b"https://www.site12.".to_vec(), b"zzz".to_vec(), vec![0xff]];
    prefixes.extend(keys.iter().step_by(97).map(|k| k[..k.len() / 2].to_vec()));
    for p in &prefixes {
        let (lo, hi) = art.prefix_range(p);
        let want: Vec<usize> = (0..keys.len()).filter(|&i| keys.get(i).starts_with(p)).collect();
        assert_eq!((lo, hi), want.first().map_or((lo, lo), |&f| (f as u64, f as u64 + want.len() as u64)), "{p:?}");
    }
}

#[test]
fn shapes_that_stress_the_layout() {
    let mut cases: Vec<(&str, Vec<Vec<u8>>)> = Vec::new();
    cases.push(("none", vec![]));
    cases.push(("one", vec![b"only\0".to_vec()]));
    // A chain as deep as the keys are long: "a\0", "aa\0", ...
    cases.push(("chain", (1..400).map(|i| [vec![b'a'; i], vec![0]].concat()).collect()));
    // Prefixes far past the inline 10 bytes, and keys past 32 and 256 bytes.
    let long = |tail: u32| [vec![b'x'; 300], tail.to_be_bytes().to_vec()].concat();
    cases.push(("long shared prefix", (0..3000).map(long).collect()));
    // Every fan-out: 2..=256 children under one node.
    for fan in [2usize, 4, 5, 16, 17, 48, 49, 256] {
        cases.push(("fan-out", (0..fan).map(|b| vec![b'p', b as u8, b'q']).collect()));
    }
    // Short keys beside the root table's depth.
    cases.push(("short", vec![vec![1], vec![2, 0], vec![2, 1, 0], vec![3, 3, 3, 3]]));
    for (name, mut raw) in cases {
        raw.sort();
        let keys: ByteKeys = raw.iter().map(|k| k.as_slice()).collect();
        let mut q = queries(StringSet::Random, &keys, 3);
        if keys.is_empty() {
            q.push(b"x");
        }
        for depth in 0..=3 {
            let art = check(&keys, &q, depth);
            if name == "fan-out" && keys.len() == 256 && depth < 2 {
                assert_eq!(art.n256.len(), 1);
            }
        }
    }
}

#[test]
fn build_refuses_unsorted_and_prefix_keys() {
    let k = |v: &[&[u8]]| v.iter().copied().collect::<ByteKeys>();
    assert_eq!(build(&k(&[b"b", b"a"]), 2).unwrap_err(), BuildError::NotSorted(1));
    assert_eq!(build(&k(&[b"a", b"a"]), 2).unwrap_err(), BuildError::NotSorted(1));
    assert_eq!(build(&k(&[b"a", b"ab"]), 2).unwrap_err(), BuildError::Prefix(1));
    assert_eq!(build(&k(&[b"a"]), 4).unwrap_err(), BuildError::LutDepth(4));
    assert_eq!(build_with_values(&k(&[b"a"]), &[1 << 55], 1).unwrap_err(), BuildError::Value(0));
}

#[test]
fn parallel_parts_join_into_one_tree() {
    // Big enough for several parts (4096 keys or more each).
    let keys = StringSet::Urls.keys(120_000, 5).sorted_unique();
    let q = queries(StringSet::Urls, &keys, 6);
    for depth in [1, 3] {
        check(&keys, &q, depth);
    }
}

#[test]
fn gpu_lookups_are_the_cpus() {
    let Ok(gpu) = crate::gpu::gpu() else {
        assert!(!crate::gpu_required(), "GPUINDEX_REQUIRE_GPU=1 but no GPU");
        return;
    };
    for set in StringSet::ALL {
        let keys = set.keys(50_000, 21).sorted_unique();
        let mut q = queries(set, &keys, 22);
        q.push(&[7u8; 600]);
        // A batch of one key length (uuids) travels without length words.
        let same_length: ByteKeys = keys.iter().chain(set.keys(5000, 23).iter()).filter(|k| k.len() == 16).collect();
        for depth in [0, 2, 3] {
            let art = build(&keys, depth).unwrap();
            let dev = DeviceArt::upload(&gpu, &art).unwrap();
            if set == StringSet::Uuid {
                let format = Format::for_queries(&same_length);
                assert_eq!(format, Format { width: 16, fixed: true });
                let (mut cpu, mut out) = (vec![0; same_length.len()], vec![0; same_length.len()]);
                art.lookup_cpu(&same_length, &mut cpu);
                lookup_gpu(&gpu, &art, &dev, &same_length, format, &mut out, crate::gpu::Schedule::default()).unwrap();
                assert_eq!(out, cpu, "fixed uuid records");
                assert!(cpu.contains(&NOT_FOUND) && cpu.iter().any(|&v| v != NOT_FOUND));
            }
            let mut cpu = vec![0; q.len()];
            art.lookup_cpu(&q, &mut cpu);
            for format in [Format::for_queries(&q), Format { width: 16, fixed: false }, Format { width: 40, fixed: false }] {
                let mut out = vec![0; q.len()];
                let schedule = crate::gpu::Schedule { chunk: 7777, in_flight: 3 };
                lookup_gpu(&gpu, &art, &dev, &q, format, &mut out, schedule).unwrap();
                assert_eq!(out, cpu, "{} depth {depth} {format:?}", set.name());
                search_gpu(&gpu, &art, &dev, Op::LowerBound, &q, format, &mut out, schedule).unwrap();
                let bounds: Vec<u64> = q.iter().map(|k| art.lower_bound(k)).collect();
                assert_eq!(out, bounds, "lower bounds, {} depth {depth} {format:?}", set.name());
                let floor = DeviceSortedStrings::upload(&gpu, &keys).unwrap();
                floor.lookup_gpu(&gpu, &keys, &q, format, &mut out, schedule).unwrap();
                assert_eq!(out, cpu, "floor, {} {format:?}", set.name());
            }
        }
    }
}

/// A batch of updates and deletes with repeats and absent keys.
fn update_batch(keys: &ByteKeys, m: usize, seed: u64) -> (ByteKeys, Vec<u64>) {
    let mut rng = SplitMix64::new(seed);
    let mut batch = ByteKeys::new();
    let mut values = Vec::new();
    for _ in 0..m {
        match rng.below(10) {
            0 => batch.push(b"\x01absent"),
            // A few hot keys, updated many times in one batch.
            1 | 2 => batch.push(keys.get(rng.below(8) as usize)),
            _ => batch.push(keys.get(rng.below(keys.len() as u64) as usize)),
        }
        values.push(if rng.below(4) == 0 { gpu::DELETE } else { rng.below(VALUE_MASK) });
    }
    (batch, values)
}

#[test]
fn updates_last_writer_wins_and_deletes_hide_keys() {
    let keys = StringSet::Words.keys(3000, 4).sorted_unique();
    let mut art = build(&keys, 1).unwrap();
    let (batch, values) = update_batch(&keys, 5000, 8);
    let written = art.update(&batch, &values);
    let mut last = std::collections::HashMap::new();
    for (i, k) in batch.iter().enumerate() {
        if keys.lower_bound(k) < keys.len() && keys.get(keys.lower_bound(k)) == k {
            last.insert(k.to_vec(), values[i]);
        }
    }
    assert_eq!(written, last.len() as u64);
    for (r, k) in keys.iter().enumerate() {
        let want = match last.get(k) {
            None => Some(r as u64),
            Some(&v) if v == gpu::DELETE => None,
            Some(&v) => Some(v),
        };
        assert_eq!(art.get(k), want, "{k:?}");
        // Lower bounds keep answering from stored values, deleted or not.
        if let Some(v) = want {
            assert_eq!(art.lower_bound(k), v);
        }
    }
}

#[test]
fn gpu_updates_are_the_cpus() {
    let Ok(gpu) = crate::gpu::gpu() else {
        assert!(!crate::gpu_required(), "GPUINDEX_REQUIRE_GPU=1 but no GPU");
        return;
    };
    for set in StringSet::ALL {
        let keys = set.keys(40_000, 31).sorted_unique();
        let mut art = build(&keys, 2).unwrap();
        let mut dev = DeviceArt::upload(&gpu, &art).unwrap();
        for round in 0..3 {
            let (batch, values) = update_batch(&keys, 30_000, 40 + round);
            let recs = Records::new(&batch, Format::exact(&batch).unwrap());
            let on_gpu = dev.update(&gpu, &recs, &values).unwrap();
            assert_eq!(on_gpu, art.update(&batch, &values), "{} round {round}", set.name());
        }
        let q = queries(set, &keys, 9);
        let (mut cpu, mut out) = (vec![0; q.len()], vec![0; q.len()]);
        art.lookup_cpu(&q, &mut cpu);
        lookup_gpu(&gpu, &art, &dev, &q, Format::for_queries(&q), &mut out, crate::gpu::Schedule::default()).unwrap();
        assert_eq!(out, cpu, "{}", set.name());
        assert!(cpu.iter().filter(|&&v| v == NOT_FOUND).count() > q.len() / 3);
    }
}

/// Builds from every other key of `all` (sorted), inserts the rest in a
/// random order, each with its rank in `all` as value, so that lookups
/// and lower bounds must equal the sorted array's.
fn built_then_inserted(all: &ByteKeys, depth: usize, seed: u64) -> Art {
    let (built, values): (ByteKeys, Vec<u64>) = {
        let idx: Vec<usize> = (0..all.len()).step_by(2).collect();
        (idx.iter().map(|&i| all.get(i)).collect(), idx.iter().map(|&i| i as u64).collect())
    };
    let mut art = build_with_values(&built, &values, depth).unwrap();
    let mut rest: Vec<usize> = (1..all.len()).step_by(2).collect();
    SplitMix64::new(seed).shuffle(&mut rest);
    for &i in &rest {
        assert_eq!(art.insert(all.get(i), i as u64), Ok(true), "insert {:?}", all.get(i));
    }
    // Re-inserting a key sets its value (here: the same one).
    for i in (0..all.len()).step_by(7) {
        assert_eq!(art.insert(all.get(i), i as u64), Ok(false));
    }
    assert_eq!(art.n, all.len());
    art
}

#[test]
fn inserts_equal_a_build_of_all_keys() {
    for set in StringSet::ALL {
        let all = set.keys(8000, 12).sorted_unique();
        let q = queries(set, &all, 13);
        for depth in 0..=3 {
            let art = built_then_inserted(&all, depth, 14);
            for (i, k) in all.iter().enumerate() {
                assert_eq!(art.get(k), Some(i as u64), "{} depth {depth}: {k:?}", set.name());
            }
            for qk in q.iter() {
                let lb = all.lower_bound(qk);
                let exact = lb < all.len() && all.get(lb) == qk;
                assert_eq!(art.get(qk), exact.then_some(lb as u64), "{qk:?}");
                assert_eq!(art.lower_bound(qk), lb as u64, "lower bound {qk:?}");
            }
        }
    }
}

#[test]
fn inserts_grow_every_node_kind_and_split_long_prefixes() {
    // One node taking 256 children one at a time: N4, N16, N48, N256.
    let mut art = build(&ByteKeys::new(), 0).unwrap();
    for b in (0..=255u8).rev() {
        art.insert(&[b'p', b, b'q'], b as u64).unwrap();
    }
    assert_eq!((art.n256.len(), art.free[N4 as usize].len(), art.free[N16 as usize].len(), art.free[N48 as usize].len()), (1, 1, 1, 1));
    for b in 0..=255u8 {
        assert_eq!(art.get(&[b'p', b, b'q']), Some(b as u64));
    }
    // A new N4 reuses the grown-out record.
    art.insert(b"z1", 1000).unwrap();
    art.insert(b"z2", 1001).unwrap();
    assert_eq!(art.free[N4 as usize].len(), 0);
    assert_eq!(art.get(b"z2"), Some(1001));
    // Prefixes of 300 bytes split at every distance, keys past 32 bytes.
    let mut art = build(&ByteKeys::new(), 2).unwrap();
    let key = |at: usize, b: u8| {
        let mut k = vec![b'x'; 300];
        k[at] = b;
        k
    };
    let mut all = vec![];
    for at in [299, 5, 150, 10, 11, 2, 0, 40] {
        for b in [b'a', b'y'] {
            art.insert(&key(at, b), 0).unwrap();
            all.push(key(at, b));
        }
    }
    all.sort();
    let keys: ByteKeys = all.iter().map(|k| k.as_slice()).collect();
    for (i, k) in keys.iter().enumerate() {
        art.insert(k, i as u64).unwrap();
    }
    let q = queries(StringSet::Random, &keys, 1);
    for qk in q.iter() {
        let lb = keys.lower_bound(qk);
        assert_eq!(art.lower_bound(qk), lb as u64, "{qk:?}");
        assert_eq!(art.get(qk), (lb < keys.len() && keys.get(lb) == qk).then_some(lb as u64));
    }
    // Keys that are prefixes of others are refused, the tree unchanged.
    assert_eq!(art.insert(&[b'x'; 100], 1), Err(InsertError::Prefix));
    assert_eq!(art.insert(&[key(0, b'a'), vec![1]].concat(), 1), Err(InsertError::Prefix));
    assert_eq!(art.insert(b"q", 1 << 55), Err(InsertError::Value));
    assert_eq!(art.n, keys.len());
}

#[test]
fn gpu_refresh_after_inserts_is_the_cpu() {
    let Ok(gpu) = crate::gpu::gpu() else {
        assert!(!crate::gpu_required(), "GPUINDEX_REQUIRE_GPU=1 but no GPU");
        return;
    };
    for set in StringSet::ALL {
        let all = set.keys(60_000, 50).sorted_unique();
        let half: ByteKeys = (0..all.len()).step_by(2).map(|i| all.get(i)).collect();
        let mut art = build(&half, 2).unwrap();
        let mut dev = DeviceArt::upload(&gpu, &art).unwrap();
        let q = queries(set, &all, 51);
        let format = Format::for_queries(&q);
        // A few inserts: a partial copy; then many: arrays outgrow their room.
        for (round, step) in [(0, 301), (1, 2)] {
            for i in (1..all.len()).step_by(step) {
                art.insert(all.get(i), (1 << 40) + i as u64).unwrap();
            }
            let copied = dev.refresh(&gpu, &mut art).unwrap();
            // A few inserts send a fraction of the tree (the written
            // records, and the root table's occupied-slot list whole).
            if round == 0 {
                assert!(copied * 4 < art.bytes(), "{} of {} bytes copied", copied, art.bytes());
            }
            assert!(art.dirty.is_empty());
            let (mut cpu, mut out) = (vec![0; q.len()], vec![0; q.len()]);
            art.lookup_cpu(&q, &mut cpu);
            lookup_gpu(&gpu, &art, &dev, &q, format, &mut out, crate::gpu::Schedule::default()).unwrap();
            assert_eq!(out, cpu, "{} round {round}", set.name());
            search_gpu(&gpu, &art, &dev, Op::LowerBound, &q, format, &mut out, crate::gpu::Schedule::default()).unwrap();
            let bounds: Vec<u64> = q.iter().map(|k| art.lower_bound(k)).collect();
            assert_eq!(out, bounds, "lower bounds, {} round {round}", set.name());
        }
    }
}

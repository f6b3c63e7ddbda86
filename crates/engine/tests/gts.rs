//! GTS against brute force: k nearest, range, and the full distance order,
//! for every metric, on uniform, clustered and duplicate-heavy vectors of
//! several dimensions, and on trees of every height.

use gpuindex_engine::datasets::normal;
use gpuindex_engine::gts::metric::{string_vector, MAX_CHARS};
use gpuindex_engine::gts::search::{
    knn, knn_one, knn_rows, knn_wide, range, range_each, range_one, range_rows, range_rows_capped, Objects,
};
use gpuindex_engine::gts::{Metric, Nearest, Params, Tree, Vectors};
use gpuindex_engine::rng::SplitMix64;

const METRICS: [Metric; 3] = [Metric::L2, Metric::L1, Metric::Cosine];

#[derive(Clone, Copy, Debug)]
enum Shape {
    Uniform,
    /// Gaussian clusters of very different sizes.
    Clustered,
    /// Few distinct vectors, each repeated many times.
    Duplicates,
}

fn vectors(shape: Shape, n: usize, dim: usize, seed: u64) -> Vectors {
    let mut rng = SplitMix64::new(seed);
    let centres: Vec<Vec<f32>> = (0..20).map(|_| (0..dim).map(|_| (rng.unit() * 20.0 - 10.0) as f32).collect()).collect();
    let mut v = Vectors::new(dim);
    for i in 0..n {
        let x: Vec<f32> = match shape {
            Shape::Uniform => (0..dim).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect(),
            Shape::Clustered => {
                let c = &centres[(rng.unit() * rng.unit() * 20.0) as usize];
                c.iter().map(|&c| c + (normal(&mut rng) * 0.3) as f32).collect()
            }
            Shape::Duplicates => centres[rng.below(7) as usize].clone(),
        };
        v.push(&x, i as u64 * 3 + 1);
    }
    v
}

fn brute(m: Metric, v: &Vectors, q: &[f32]) -> Vec<(u64, f64)> {
    let mut all: Vec<(u64, f64)> = (0..v.len()).map(|i| (v.ids[i], m.distance(q, v.get(i)))).collect();
    all.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    all
}

fn check(shape: Shape, n: usize, dim: usize, fanout: usize) {
    let v = vectors(shape, n, dim, n as u64 + dim as u64);
    let queries = vectors(Shape::Clustered, 12, dim, 99);
    check_set(&v, &queries.data, &METRICS, fanout, &format!("{shape:?} n={n} dim={dim} fanout={fanout}"));
}

/// Every search of trees over `v` (one per metric) equals brute force for
/// `queries` and one indexed vector.
fn check_set(v: &Vectors, queries: &[f32], metrics: &[Metric], fanout: usize, what: &str) {
    let (n, dim) = (v.len(), v.dim);
    for &m in metrics {
        let tree = Tree::build(m, v, Params { fanout });
        let objects = Objects::of(&tree, v);
        let s = &tree.shape;
        let what = format!("{what} height={} {}", s.height, m.name());
        let mut qs = queries.to_vec();
        // Queries that are indexed vectors (distance 0 to themselves).
        if n > 0 {
            qs.extend_from_slice(v.get(n / 3));
        }
        let all_knn = knn(s, &objects, &qs, 10);
        // Every core on one query (edit distance takes it; any metric must
        // give the same).
        for (qi, q) in qs.chunks(dim).enumerate() {
            for k in [1, 10, 57] {
                assert_eq!(knn_wide(s, &objects, q, k), knn_one(s, &objects, q, k), "{what}: knn_wide, k={k}, query {qi}");
            }
        }
        for (qi, q) in qs.chunks(dim).enumerate() {
            let want = brute(m, v, q);
            for k in [1, 10, 57] {
                assert_eq!(knn_one(s, &objects, q, k), want[..k.min(n)].to_vec(), "{what}: knn k={k} query {qi}");
            }
            assert_eq!(all_knn[qi], want[..10.min(n)].to_vec(), "{what}: batch knn query {qi}");
            let mut it = Nearest::new(s, q);
            let order: Vec<(u64, f64)> = std::iter::from_fn(|| it.next(s, &objects)).collect();
            assert_eq!(order, want, "{what}: full order, query {qi}");
            let r = want.get(want.len() / 20).map_or(1.0, |h| h.1);
            let mut within: Vec<(u64, f64)> = want.iter().copied().filter(|h| h.1 <= r).collect();
            within.sort_by_key(|h| h.0);
            assert_eq!(range_one(s, &objects, q, r), within, "{what}: range r={r} query {qi}");
        }
        let r = 1.0;
        for (qi, got) in range(s, &objects, &qs, r).into_iter().enumerate() {
            assert_eq!(got, range_one(s, &objects, &qs[qi * dim..(qi + 1) * dim], r));
        }
    }
}

/// `n` generated words as strings of `width` characters (longer ones cut).
fn words(n: usize, width: usize, seed: u64) -> Vectors {
    let mut rng = SplitMix64::new(seed);
    let mut v = Vectors::new(width);
    for i in 0..n {
        let w = gpuindex_engine::datasets::word(&mut rng);
        v.push(&string_vector(w.chars().take(width).map(|c| c as u32), width).expect("cut to fit"), i as u64 * 3 + 1);
    }
    v
}

#[test]
fn edit_distance_search_equals_brute_force() {
    for (n, width, fanout) in [(0, 8, 4), (1, 8, 4), (300, 12, 3), (5000, 24, 20), (3000, MAX_CHARS, 10)] {
        let v = words(n, width, n as u64 + 7);
        check_set(&v, &words(12, width, 99).data, &[Metric::Levenshtein], fanout, &format!("words n={n} width={width} fanout={fanout}"));
        // Queries longer than the tree's strings (padded to a wider width).
        let tree = Tree::build(Metric::Levenshtein, &v, Params { fanout });
        let objects = Objects::of(&tree, &v);
        let wide = width + 9;
        let qs: Vec<f32> = (0..5).flat_map(|i| string_vector((0..wide as u32 - i).map(|c| 97 + c % 3), wide).expect("fits")).collect();
        let radii = vec![6.0; 5];
        let got = knn_rows(&tree.shape, &objects, &qs, wide, 10);
        let within = range_rows(&tree.shape, &objects, &qs, wide, &radii);
        for (i, q) in qs.chunks(wide).enumerate() {
            let want = brute(Metric::Levenshtein, &v, q);
            assert_eq!(got[i], want[..10.min(n)].to_vec(), "words n={n}: a query of {wide} characters");
            let mut w: Vec<(u64, f64)> = want.into_iter().filter(|h| h.1 <= 6.0).collect();
            w.sort_by_key(|h| h.0);
            assert_eq!(within[i], w, "words n={n}: range of a query of {wide} characters");
        }
    }
}

#[test]
fn trees_of_every_height_answer_exactly() {
    for n in [0, 1, 5, 19, 20, 400, 401, 3000] {
        check(Shape::Uniform, n, 3, 4);
    }
}

#[test]
fn uniform_clustered_and_duplicate_vectors() {
    for shape in [Shape::Uniform, Shape::Clustered, Shape::Duplicates] {
        for dim in [1, 2, 17, 128] {
            check(shape, 5000, dim, 20);
        }
    }
}

#[test]
fn small_fanouts_and_large_coordinates() {
    check(Shape::Clustered, 4000, 8, 2);
    let mut v = vectors(Shape::Uniform, 3000, 4, 5);
    for x in v.data.iter_mut().step_by(7) {
        *x *= 1e30;
    }
    let q = v.get(17).to_vec();
    for m in METRICS {
        let tree = Tree::build(m, &v, Params { fanout: 5 });
        let objects = Objects::of(&tree, &v);
        assert_eq!(knn_one(&tree.shape, &objects, &q, 25), brute(m, &v, &q)[..25].to_vec(), "{}", m.name());
    }
}

#[test]
fn the_build_is_balanced() {
    let v = vectors(Shape::Duplicates, 10_000, 16, 1);
    let tree = Tree::build(Metric::L2, &v, Params { fanout: 10 });
    let s = &tree.shape;
    assert_eq!(s.height, 3);
    for leaf in s.leaves() {
        assert_eq!(s.nodes[leaf].size, 10, "leaf {leaf}");
    }
    let mut seen = tree.order.clone();
    seen.sort();
    assert_eq!(seen, (0..10_000).collect::<Vec<u32>>());
}

mod common;

use gpuindex_engine::gts::gpu::{DeviceTree, FlatAnswers, Way, DEPTH_MAX_K, FILTER_MAX_K};
use gpuindex_engine::gts::Shape as TreeShape;

/// The tree's objects less those `drop` picks, leaves remapped as the
/// extension's image does after VACUUM (pivot objects may be gone).
fn without(shape: &TreeShape, objects: &Objects, drop: impl Fn(u64) -> bool) -> (TreeShape, Objects) {
    let mut s = shape.clone();
    let mut o = Objects { v: Vectors::new(objects.v.dim), pdist: Vec::new() };
    for leaf in s.leaves() {
        let (start, n) = (o.v.len(), s.nodes[leaf]);
        for p in n.offset as usize..(n.offset + n.size) as usize {
            if !drop(objects.v.ids[p]) {
                o.v.push(objects.v.get(p), objects.v.ids[p]);
                o.pdist.push(objects.pdist[p]);
            }
        }
        s.nodes[leaf].offset = start as u64;
        s.nodes[leaf].size = (o.v.len() - start) as u64;
    }
    (s, o)
}

/// GPU kNN, range and brute force equal the CPU's answers bit for bit.
fn check_gpu(gpu: &gpuindex_engine::gpu::Gpu, s: &TreeShape, objects: &Objects, qs: &[f32], what: &str, budget: Option<usize>) {
    let mut dev = DeviceTree::upload(gpu, s, objects).unwrap_or_else(|e| panic!("{what}: upload: {e}"));
    if let Some(b) = budget {
        dev.limit_memory(b);
    }
    for k in [1, 10, 16, 57, 1024] {
        let want = knn(s, objects, qs, k);
        assert_eq!(dev.knn(gpu, qs, k).unwrap(), want, "{what}: gpu knn k={k}");
        assert_eq!(dev.knn_by(gpu, qs, k, Way::Tree).unwrap(), want, "{what}: gpu knn by the tree k={k}");
        if k == 10 {
            assert_eq!(dev.knn_by(gpu, qs, k, Way::Naive).unwrap(), want, "{what}: gpu brute force k={k}");
        }
        if s.metric == Metric::L2 && k <= FILTER_MAX_K {
            assert_eq!(dev.knn_by(gpu, qs, k, Way::Filter).unwrap(), want, "{what}: gpu bounded brute force k={k}");
            assert_eq!(dev.knn_by(gpu, qs, k, Way::FilterFloat4).unwrap(), want, "{what}: gpu float4 bounded brute force k={k}");
        }
        if s.metric != Metric::Levenshtein && k <= DEPTH_MAX_K && s.fanout <= 32 && s.fanout * s.height.max(1) < 128 {
            assert_eq!(dev.knn_by(gpu, qs, k, Way::Depth).unwrap(), want, "{what}: gpu per-query search k={k}");
        }
    }
    let dim = s.dim.max(1);
    for frac in [0.001, 0.05, 0.5] {
        let q0 = &qs[..dim];
        let all = knn(s, objects, q0, objects.v.len().max(1));
        let r = all[0].get((all[0].len() as f64 * frac) as usize).map_or(1.0, |h| h.1);
        let want = range(s, objects, qs, r);
        assert_eq!(dev.range(gpu, qs, r).unwrap(), want, "{what}: gpu range r={r}");
        let radii = vec![r; qs.len() / dim];
        assert_eq!(dev.range_each_by(gpu, qs, &radii, Way::Tree).unwrap(), want, "{what}: gpu range by the tree r={r}");
        if s.metric != Metric::Levenshtein && s.fanout <= 32 && s.fanout * s.height.max(1) < 128 {
            assert_eq!(dev.range_each_by(gpu, qs, &radii, Way::Depth).unwrap(), want, "{what}: gpu range per query r={r}");
        }
    }
    // A radius of its own for each query.
    let all = knn(s, objects, &qs[..dim], objects.v.len().max(1));
    let radii: Vec<f64> = (0..qs.len() / dim).map(|i| all[0].get(i * 37 % all[0].len().max(1)).map_or(1.0, |h| h.1)).collect();
    assert_eq!(dev.range_each(gpu, qs, &radii).unwrap(), range_each(s, objects, qs, &radii), "{what}: gpu range, a radius each");
}

#[test]
fn gpu_search_equals_cpu_search() {
    let Some(gpu) = common::gpu_or_skip("gpu_search_equals_cpu_search") else { return };
    let cases: Vec<(Shape, usize, usize, usize)> = vec![
        (Shape::Uniform, 0, 3, 4),
        (Shape::Uniform, 1, 3, 4),
        (Shape::Uniform, 19, 3, 4),
        (Shape::Uniform, 401, 3, 4),
        (Shape::Clustered, 4000, 8, 2),
        (Shape::Uniform, 5000, 1, 20),
        (Shape::Clustered, 5000, 17, 20),
        (Shape::Duplicates, 5000, 2, 20),
        (Shape::Clustered, 20000, 128, 20),
        (Shape::Uniform, 8000, 128, 10),
    ];
    for (shape, n, dim, fanout) in cases {
        let v = vectors(shape, n, dim, n as u64 * 7 + dim as u64);
        let mut qs = vectors(Shape::Clustered, 300, dim, 99).data;
        if n > 0 {
            qs.extend_from_slice(v.get(n / 3));
        }
        for m in METRICS {
            let tree = Tree::build(m, &v, Params { fanout });
            let objects = Objects::of(&tree, &v);
            let what = format!("{shape:?} n={n} dim={dim} fanout={fanout} height={} {}", tree.shape.height, m.name());
            check_gpu(&gpu, &tree.shape, &objects, &qs, &what, None);
            // Deletions took a fifth of the objects and every pivot's own
            // object out of the leaves.
            let pivots: Vec<Vec<u32>> =
                (0..tree.shape.internal()).map(|i| tree.shape.pivot(i).iter().map(|x| x.to_bits()).collect()).collect();
            let is_pivot = |id: u64| {
                let i = v.ids.iter().position(|&x| x == id).expect("an id");
                pivots.iter().any(|p| v.get(i).iter().zip(p).all(|(a, b)| a.to_bits() == *b))
            };
            let (s2, o2) = without(&tree.shape, &objects, |id| id % 5 == 0 || (n <= 5000 && is_pivot(id)));
            check_gpu(&gpu, &s2, &o2, &qs, &format!("{what}, after deletions"), None);
        }
    }
    for (n, width, fanout) in [(1, 8, 4), (3000, 16, 4), (20000, 32, 20), (4000, MAX_CHARS, 10)] {
        let v = words(n, width, n as u64);
        let mut qs = words(300, width, 98).data;
        qs.extend_from_slice(v.get(n / 3));
        let tree = Tree::build(Metric::Levenshtein, &v, Params { fanout });
        let objects = Objects::of(&tree, &v);
        let what = format!("words n={n} width={width} fanout={fanout} height={}", tree.shape.height);
        check_gpu(&gpu, &tree.shape, &objects, &qs, &what, None);
        let (s2, o2) = without(&tree.shape, &objects, |id| id % 5 == 0);
        check_gpu(&gpu, &s2, &o2, &qs, &format!("{what}, after deletions"), None);
    }
}

/// Batches of several chunks through the flat answers (one buffer reused
/// for every batch): kNN, and range with one chunk whose answers outgrow
/// its pinned room between chunks that fit (their order kept), with and
/// without a budget that cuts the slow way into runs.
#[test]
fn gpu_flat_answers_over_chunks() {
    let Some(gpu) = common::gpu_or_skip("gpu_flat_answers_over_chunks") else { return };
    let v = vectors(Shape::Clustered, 50_000, 2, 5);
    let qs = vectors(Shape::Clustered, 140_000, 2, 6).data;
    let m = qs.len() / 2;
    for metric in METRICS {
        let tree = Tree::build(metric, &v, Params { fanout: 20 });
        let objects = Objects::of(&tree, &v);
        let s = &tree.shape;
        let mut dev = DeviceTree::upload(&gpu, s, &objects).expect("upload");
        let mut flat = FlatAnswers::default();
        for k in [1, 10, 32] {
            dev.knn_into(&gpu, &qs, k, &mut flat).expect("knn_into");
            assert_eq!(flat.nested(), knn(s, &objects, &qs, k), "{}: knn_into k={k}", metric.name());
        }
        let all = knn(s, &objects, &qs[..2], 400);
        let (small, large) = (all[0][9].1, all[0][399].1);
        // Queries 70,000 .. 80,000 (inside the second of three chunks)
        // find ~400 each.
        let radii: Vec<f64> = (0..m).map(|i| if (70_000..80_000).contains(&i) { large } else { small }).collect();
        let want = range_each(s, &objects, &qs, &radii);
        for budget in [None, Some(64 << 10)] {
            if let Some(b) = budget {
                dev.limit_memory(b);
            }
            dev.range_each_into(&gpu, &qs, &radii, &mut flat).expect("range_each_into");
            assert_eq!(flat.queries(), m);
            assert_eq!(flat.nested(), want, "{}: range_each_into, budget {budget:?}", metric.name());
        }
        // A small batch (one pass): queries with exactly 32 answers, 33
        // and ~400 (left to the two passes) among ones with ~10.
        let sm = 12_000;
        let near = knn(s, &objects, &qs[..16], 400);
        let mut radii: Vec<f64> = (0..sm).map(|i| if i % 97 == 5 { large } else { small }).collect();
        radii[..4].copy_from_slice(&[near[0][31].1, near[1][32].1, near[2][399].1, near[3][0].1]);
        let want = range_each(s, &objects, &qs[..sm * 2], &radii);
        assert!(want.iter().any(|w| w.len() == 32) && want.iter().any(|w| w.len() > 32));
        for budget in [64 << 10, 1 << 30] {
            dev.limit_memory(budget);
            dev.range_each_into(&gpu, &qs[..sm * 2], &radii, &mut flat).expect("range_each_into, one pass");
            assert_eq!(flat.nested(), want, "{}: range_each_into, one pass, budget {budget}", metric.name());
        }
        // 28 answers a query: more than the one pass's room (16 a query
        // on average, rounded up to a power of two in bytes) holds.
        let radii: Vec<f64> = knn(s, &objects, &qs[..sm * 2], 28).iter().map(|a| a[27].1).collect();
        let want = range_each(s, &objects, &qs[..sm * 2], &radii);
        let fit: usize = want.iter().map(Vec::len).filter(|&n| n <= 32).sum();
        assert!(fit > (sm * 16 * 16).next_power_of_two() / 16, "{fit}");
        let mut fresh = FlatAnswers::default();
        dev.range_each_into(&gpu, &qs[..sm * 2], &radii, &mut fresh).expect("range_each_into, past the room");
        assert_eq!(fresh.nested(), want, "{}: range_each_into, past the room", metric.name());
        // The same answers again into its grown memory, and kNN after.
        dev.range_each_into(&gpu, &qs[..sm * 2], &radii, &mut fresh).expect("range_each_into, grown");
        assert_eq!(fresh.nested(), want, "{}: range_each_into, grown", metric.name());
        dev.knn_into(&gpu, &qs[..sm * 2], 10, &mut fresh).expect("knn_into, one launch");
        assert_eq!(fresh.nested(), knn(s, &objects, &qs[..sm * 2], 10), "{}: knn_into, one launch", metric.name());
    }
}

/// Range batches past a cap on their answers stop and say how many they
/// found (never fewer than the cap, never more than all), on the CPU and
/// on the GPU's ways: the per-query walk in one pass (small batches) and
/// in chunks, and the tree (32 dimensions); at the cap they answer whole.
#[test]
fn range_batches_stop_past_their_cap() {
    let gpu = common::gpu_or_skip("range_batches_stop_past_their_cap (GPU part)");
    for (dim, n, m) in [(2, 50_000, 40_000), (2, 50_000, 3_000), (32, 10_000, 1_000)] {
        let v = vectors(Shape::Clustered, n, dim, 5);
        let qs = vectors(Shape::Clustered, m, dim, 6).data;
        let tree = Tree::build(Metric::L2, &v, Params { fanout: 20 });
        let objects = Objects::of(&tree, &v);
        let s = &tree.shape;
        let near = knn(s, &objects, &qs[..dim], 200);
        // Some queries find ~200, the rest ~10.
        let radii: Vec<f64> = (0..m).map(|i| if i % 7 == 3 { near[0][199].1 } else { near[0][9].1 }).collect();
        let want = range_rows(s, &objects, &qs, dim, &radii);
        let total: usize = want.iter().map(Vec::len).sum();
        let what = format!("dim {dim}, {m} queries, {total} answers");
        assert_eq!(range_rows_capped(s, &objects, &qs, dim, &radii, total).as_ref(), Ok(&want), "{what}: CPU at the cap");
        for cap in [total - 1, total / 10] {
            let n = range_rows_capped(s, &objects, &qs, dim, &radii, cap).expect_err("CPU past the cap");
            assert!(n > cap && n <= total, "{what}: CPU, cap {cap}: {n}");
        }
        let n = range_rows_capped(s, &objects, &qs, dim, &radii, total / 10).unwrap_err();
        assert!(n < total, "{what}: the CPU stops early ({n})");
        let Some(gpu) = &gpu else { continue };
        let dev = DeviceTree::upload(gpu, s, &objects).expect("upload");
        assert_eq!(dev.range_each_capped(gpu, &qs, &radii, total).expect("gpu").as_ref(), Ok(&want), "{what}: GPU at the cap");
        for cap in [total - 1, total / 10] {
            let n = dev.range_each_capped(gpu, &qs, &radii, cap).expect("gpu").expect_err("GPU past the cap");
            assert!(n > cap && n <= total, "{what}: GPU, cap {cap}: {n}");
        }
        if m > 16_384 {
            // In chunks: it stops after the first chunk past the cap.
            let n = dev.range_each_capped(gpu, &qs, &radii, total / 10).expect("gpu").unwrap_err();
            assert!(n < total, "{what}: the GPU stops early ({n})");
        }
        // The batch after one that stopped answers whole.
        assert_eq!(dev.range_each(gpu, &qs, &radii).expect("gpu"), want, "{what}: GPU after a stop");
    }
}

#[test]
fn gpu_batches_split_into_groups_that_fit() {
    let Some(gpu) = common::gpu_or_skip("gpu_batches_split_into_groups_that_fit") else { return };
    let v = vectors(Shape::Uniform, 30_000, 4, 3);
    let qs = vectors(Shape::Uniform, 2000, 4, 4).data;
    let tree = Tree::build(Metric::L2, &v, Params { fanout: 8 });
    let objects = Objects::of(&tree, &v);
    // Room for a few thousand pairs or answers at a time.
    check_gpu(&gpu, &tree.shape, &objects, &qs, "256 KiB budget", Some(256 << 10));
}

#[test]
fn gpu_bounded_brute_force_on_small_batches() {
    let Some(gpu) = common::gpu_or_skip("gpu_bounded_brute_force_on_small_batches") else { return };
    // A batch of a few queries spreads its objects over hundreds of slices;
    // duplicates put thousands of equal bounds across them (past the
    // recheck's room: those queries go to the tree).
    for (shape, n, dim) in [(Shape::Clustered, 300_000, 16), (Shape::Uniform, 200_000, 5), (Shape::Duplicates, 200_000, 8)] {
        let v = vectors(shape, n, dim, 31);
        let tree = Tree::build(Metric::L2, &v, Params { fanout: 20 });
        let objects = Objects::of(&tree, &v);
        let dev = DeviceTree::upload(&gpu, &tree.shape, &objects).expect("upload");
        let mut qs = vectors(Shape::Clustered, 40, dim, 32).data;
        qs.extend_from_slice(v.get(n / 2));
        for m in [1, 2, 41] {
            let q = &qs[(41 - m) * dim..];
            for k in [1, 10, FILTER_MAX_K] {
                let want = knn(&tree.shape, &objects, q, k);
                assert_eq!(dev.knn_by(&gpu, q, k, Way::Filter).unwrap(), want, "{shape:?} n={n} m={m} k={k}");
                assert_eq!(dev.knn_by(&gpu, q, k, Way::FilterFloat4).unwrap(), want, "{shape:?} n={n} m={m} k={k}: float4");
            }
        }
    }
}

#[test]
fn gpu_search_on_extreme_scales() {
    let Some(gpu) = common::gpu_or_skip("gpu_search_on_extreme_scales") else { return };
    // Far from the origin (float4 bounds too loose: queries overflow to the
    // tree), outliers whose products overflow float4, and coordinates whose
    // products underflow.
    let scales: [(&str, fn(usize, f32) -> f32); 3] =
        [("offset 1e4", |_, x| 1e4 + x), ("outliers 1e30", |i, x| if i % 7 == 0 { x * 1e30 } else { x }), ("tiny 1e-30", |_, x| x * 1e-30)];
    for (name, f) in scales {
        let mut v = vectors(Shape::Clustered, 6000, 24, 11);
        for (i, x) in v.data.iter_mut().enumerate() {
            *x = f(i, *x);
        }
        let mut qs = vectors(Shape::Clustered, 100, 24, 12).data;
        for (i, x) in qs.iter_mut().enumerate() {
            *x = f(i, *x);
        }
        qs.extend_from_slice(v.get(77));
        for m in METRICS {
            let tree = Tree::build(m, &v, Params { fanout: 10 });
            let objects = Objects::of(&tree, &v);
            check_gpu(&gpu, &tree.shape, &objects, &qs, &format!("{name} {}", m.name()), None);
        }
    }
}

#[test]
fn bounded_brute_force_equals_the_tree() {
    use gpuindex_engine::gts::bounded;
    let mut cases: Vec<(String, Vectors)> = Vec::new();
    for (shape, dim) in [(Shape::Uniform, 1), (Shape::Clustered, 17), (Shape::Duplicates, 4), (Shape::Clustered, 128)] {
        cases.push((format!("{shape:?} dim={dim}"), vectors(shape, 5000, dim, 21)));
    }
    for (name, f) in [("offset 1e4", 1e4f32), ("scale 1e30", 1e30), ("scale 1e-30", 1e-30)] {
        let mut v = vectors(Shape::Clustered, 3000, 24, 22);
        for (i, x) in v.data.iter_mut().enumerate() {
            *x = if f == 1e4 {
                *x + f
            } else if f == 1e30 && i % 7 != 0 {
                *x
            } else {
                *x * f
            };
        }
        cases.push((name.to_string(), v));
    }
    for (name, v) in cases {
        let tree = Tree::build(Metric::L2, &v, Params { fanout: 10 });
        let objects = Objects::of(&tree, &v);
        let norms = bounded::norms(&objects);
        let mut qs: Vec<f32> = v.data[..v.dim * 40].to_vec();
        qs.extend(vectors(Shape::Uniform, 40, v.dim, 23).data);
        for k in [1, 10, 100] {
            assert_eq!(bounded::knn_l2(&objects, &norms, &qs, k), knn(&tree.shape, &objects, &qs, k), "{name}: k = {k}");
        }
        // One query alone (every core on its slices).
        assert_eq!(bounded::knn_l2(&objects, &norms, &qs[..v.dim], 10), knn(&tree.shape, &objects, &qs[..v.dim], 10), "{name}: one query");
    }
}

/// The GPU build is the CPU build bit for bit (nodes, rings, pivots,
/// order, pivot distances) for L2, L1 and edit distance, on every shape,
/// trees of every height, empty and undersized nodes; for cosine (where
/// distances sharing an angle may be ordered otherwise) the same layout,
/// pivot distances the CPU's to the bit, rings that hold every object,
/// and searches equal to the CPU tree's.
#[test]
fn gpu_build_is_the_cpus_build() {
    let Some(gpu) = common::gpu_or_skip("gpu_build_is_the_cpus_build") else { return };
    use gpuindex_engine::gts::gpu_build::build_gpu;
    let bits = |t: &Tree| {
        let s = &t.shape;
        let nodes: Vec<(u64, u64, u64, u64)> = s.nodes.iter().map(|x| (x.min.to_bits(), x.max.to_bits(), x.offset, x.size)).collect();
        let pivots: Vec<u32> = s.pivots.iter().map(|x| x.to_bits()).collect();
        let pdist: Vec<u64> = t.pdist.iter().map(|x| x.to_bits()).collect();
        (s.height, nodes, pivots, t.order.clone(), pdist)
    };
    let mut sets: Vec<(String, Vectors, Vec<Metric>, usize)> = Vec::new();
    for (shape, n, dim, fanout) in [
        (Shape::Uniform, 0, 3, 4),
        (Shape::Uniform, 15, 3, 4),
        (Shape::Uniform, 16, 3, 4),
        (Shape::Uniform, 401, 3, 4),
        (Shape::Clustered, 4000, 8, 2),
        (Shape::Uniform, 5000, 1, 20),
        (Shape::Clustered, 5000, 17, 20),
        (Shape::Duplicates, 50_000, 2, 20),
        (Shape::Clustered, 20_000, 128, 20),
        (Shape::Uniform, 200_000, 16, 8),
    ] {
        let v = vectors(shape, n, dim, n as u64 * 11 + dim as u64);
        sets.push((format!("{shape:?} n={n} dim={dim} fanout={fanout}"), v, METRICS.to_vec(), fanout));
    }
    for (n, width, fanout) in [(3000, 16, 4), (20_000, 32, 20), (4000, MAX_CHARS, 10)] {
        sets.push((format!("words n={n} width={width} fanout={fanout}"), words(n, width, n as u64 + 5), vec![Metric::Levenshtein], fanout));
    }
    for (what, v, metrics, fanout) in &sets {
        for &m in metrics {
            let what = format!("{what} {}", m.name());
            let want = Tree::build(m, v, Params { fanout: *fanout });
            let got = build_gpu(&gpu, m, v, Params { fanout: *fanout }).expect("gpu build");
            if m != Metric::Cosine {
                assert!(bits(&got) == bits(&want), "{what}: the GPU build differs from the CPU's");
                continue;
            }
            let s = &got.shape;
            assert_eq!((s.height, s.nodes.len()), (want.shape.height, want.shape.nodes.len()), "{what}: layout");
            let mut seen = got.order.clone();
            seen.sort_unstable();
            assert!(seen.iter().copied().eq(0..v.len() as u32), "{what}: order is not a permutation");
            for c in 1..s.nodes.len() {
                let (node, parent) = (s.nodes[c], (c - 1) / s.fanout);
                assert_eq!((node.offset, node.size), (want.shape.nodes[c].offset, want.shape.nodes[c].size), "{what}: node {c}");
                for p in node.offset..node.offset + node.size {
                    let d = m.metric_distance(v.get(got.order[p as usize] as usize), s.pivot(parent));
                    assert!(d >= node.min && d <= node.max, "{what}: node {c} ring [{}, {}] misses {d}", node.min, node.max);
                    if c >= s.internal() {
                        assert_eq!(d.to_bits(), got.pdist[p as usize].to_bits(), "{what}: pivot distance at {p}");
                    }
                }
            }
            let qs = vectors(Shape::Clustered, 20, v.dim, 77).data;
            let (og, ow) = (Objects::of(&got, v), Objects::of(&want, v));
            assert_eq!(knn(s, &og, &qs, 10), knn(&want.shape, &ow, &qs, 10), "{what}: kNN over the GPU-built tree");
        }
    }
}

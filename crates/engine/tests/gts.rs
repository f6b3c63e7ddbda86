//! GTS against brute force: k nearest, range, and the full distance order,
//! for every metric, on uniform, clustered and duplicate-heavy vectors of
//! several dimensions, and on trees of every height.

use gpuindex_engine::datasets::normal;
use gpuindex_engine::gts::search::{knn, knn_one, range, range_one, Objects};
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
    for m in METRICS {
        let tree = Tree::build(m, &v, Params { fanout });
        let objects = Objects::of(&tree, &v);
        let s = &tree.shape;
        let what = format!("{shape:?} n={n} dim={dim} fanout={fanout} height={} {}", s.height, m.name());
        let mut qs = queries.data.clone();
        // Queries that are indexed vectors (distance 0 to themselves).
        if n > 0 {
            qs.extend_from_slice(v.get(n / 3));
        }
        let all_knn = knn(s, &objects, &qs, 10);
        for (qi, q) in qs.chunks(dim).enumerate() {
            let want = brute(m, &v, q);
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

//! G-PICS quadtree: CPU build and two-step queries against brute force on
//! uniform, clustered, duplicated, border, non-finite and real-shaped
//! (`datasets::PointSet::Cities`) points; GPU build
//! and queries against the CPU's.

mod common;

use gpuindex_engine::datasets::PointSet;
use gpuindex_engine::gpics::geom::distance;
use gpuindex_engine::gpics::{Hits, Params, Points, QuadTree, Query, Rect};
use gpuindex_engine::rng::SplitMix64;

fn unit(rng: &mut SplitMix64) -> f64 {
    rng.next_u64() as f64 / u64::MAX as f64
}

/// `n` points of a given shape; ids are 1000 + index.
pub fn dataset(rng: &mut SplitMix64, n: usize, shape: u32) -> Points {
    let mut p = Points::default();
    for i in 0..n {
        let (x, y) = match shape {
            0 => (unit(rng) * 1000.0, unit(rng) * 1000.0),
            1 => {
                // clusters: 8 centres, tight spread
                let c = (rng.below(8) as f64) * 117.0;
                (c + unit(rng) * 0.5, 500.0 - c / 2.0 + unit(rng) * 0.5)
            }
            2 => (rng.below(64) as f64 * 0.5, rng.below(64) as f64 * 0.5), // grid: duplicates, borders
            4 => match rng.below(100) {
                // skew: far outliers, exact duplicates by the thousand, a
                // city 1e-9 wide in a country 1e15 wide, points on a road
                0 => ([-1e15, 1e15][rng.below(2) as usize], 1e15),
                1..=20 => (0.0, 0.0),
                21..=40 => (333.0 + unit(rng) * 1e-9, 777.0 + unit(rng) * 1e-9),
                41..=55 => {
                    let t = unit(rng) * 1000.0;
                    (t, 0.5 * t + 3.0)
                }
                _ => (unit(rng) * 1000.0, unit(rng) * 1000.0),
            },
            5 => PointSet::Cities.point(rng, i as u64),
            // huge coordinates: squared gaps overflow float8
            6 => ((unit(rng) * 2.0 - 1.0) * 1e200, (unit(rng) * 2.0 - 1.0) * 1e200),
            _ => match rng.below(40) {
                0 => (f64::NAN, unit(rng)),
                1 => (f64::INFINITY, 3.0),
                2 => (-1e300, 1e300),
                _ => (unit(rng) * 10.0 - 5.0, unit(rng) * 10.0 - 5.0),
            },
        };
        p.push(x, y, 1000 + i as u64);
    }
    p
}

/// kNN centres: uniform in the data's square, stored points (on
/// duplicates, in the city, on outliers), far and huge points, NaN and
/// infinite ones.
fn knn_queries(rng: &mut SplitMix64, pts: &Points, m: usize) -> Vec<(f64, f64)> {
    let mut qp: Vec<(f64, f64)> = (0..m).map(|_| (unit(rng) * 1000.0, unit(rng) * 1000.0)).collect();
    for _ in 0..m / 3 {
        if !pts.is_empty() {
            let i = rng.below(pts.len() as u64) as usize;
            qp.push((pts.x[i], pts.y[i]));
        }
    }
    qp.extend([(0.0, 0.0), (333.0, 777.0), (1e15, 1e15), (-1e300, 1e300), (1e300, -1e300), (-3e-300, 5e-300)]);
    qp.extend([(f64::NAN, 1.0), (3.0, f64::INFINITY), (f64::NEG_INFINITY, f64::NAN)]);
    qp
}

fn random_queries(rng: &mut SplitMix64, pts: &Points, m: usize) -> Vec<Query> {
    let pick = |rng: &mut SplitMix64| {
        let i = rng.below(pts.len().max(1) as u64) as usize;
        if pts.is_empty() {
            (0.0, 0.0)
        } else {
            (pts.x[i], pts.y[i])
        }
    };
    (0..m)
        .map(|i| {
            let (x, y) = pick(rng);
            let (x, y) = if x.is_finite() && y.is_finite() { (x, y) } else { (1.0, 1.0) };
            // Sizes in proportion where coordinates are huge (shape 6).
            let s = if x.abs().max(y.abs()) > 1e100 { 1e197 } else { 1.0 };
            match i % 5 {
                0 => {
                    let (w, h) = (unit(rng) * 50.0 * s, unit(rng) * 50.0 * s);
                    Query::Range(Rect::from_corners(x - w, y - h, x + w * unit(rng), y + h))
                }
                1 => Query::Range(Rect::from_corners(x, y, x, y)), // a degenerate box on a point
                2 => Query::Within { x, y, r: [0.0, 0.5, 3.0, 40.0][rng.below(4) as usize] * s },
                3 => Query::Point { x: x + [0.0, 9e-7, -1e-6, 2e-6][rng.below(4) as usize], y },
                _ => Query::Within { x: x + 0.25 * s, y: y - 0.25 * s, r: unit(rng) * 20.0 * s },
            }
        })
        .collect()
}

fn brute(pts: &Points, q: &Query) -> Vec<u64> {
    let mut v: Vec<u64> = (0..pts.len()).filter(|&i| q.matches(pts.x[i], pts.y[i])).map(|i| pts.id[i]).collect();
    v.sort_unstable();
    v
}

const CASES: &[(usize, u32, Params)] = &[
    (0, 0, Params { mc: 16, mh: 8 }),
    (1, 0, Params { mc: 16, mh: 8 }),
    (5000, 0, Params { mc: 16, mh: 8 }),
    (5000, 1, Params { mc: 16, mh: 6 }),
    (5000, 2, Params { mc: 8, mh: 10 }),
    (3000, 3, Params { mc: 32, mh: 12 }),
    (60_000, 0, Params { mc: 64, mh: 14 }),
    (60_000, 1, Params { mc: 1024, mh: 14 }),
    (60_000, 4, Params { mc: 64, mh: 128 }),
    (60_000, 5, Params { mc: 64, mh: 128 }),
    (4000, 6, Params { mc: 16, mh: 128 }),
];

/// Skewed data (shape 4) leaves no leaf over capacity except where its
/// points cannot be told apart in float8 (the duplicates), and queries
/// near the outliers, the city and the duplicates answer exactly.
#[test]
fn skewed_data_keeps_leaves_bounded() {
    let mut rng = SplitMix64::new(29);
    let pts = dataset(&mut rng, 200_000, 4);
    let t = QuadTree::build_cpu(&pts, Params::default());
    t.check().unwrap();
    for &l in &t.leaves {
        let n = &t.nodes[l as usize];
        if n.count as usize > 1024 {
            let s = n.start as usize..(n.start + n.count) as usize;
            let (x0, y0) = (t.pts.x[s.start], t.pts.y[s.start]);
            assert!(t.pts.x[s.clone()].iter().zip(&t.pts.y[s]).all(|(&x, &y)| x == x0 && y == y0), "leaf of {} distinct points", n.count);
        }
    }
    assert!(t.nodes.iter().map(|n| n.depth).max().unwrap() as usize <= gpuindex_engine::gpics::tree::MAX_HEIGHT);
    let mut qs = random_queries(&mut rng, &pts, 300);
    qs.push(Query::Range(Rect::from_corners(333.0, 777.0, 333.0 + 5e-10, 777.0 + 5e-10)));
    qs.push(Query::Within { x: 0.0, y: 0.0, r: 1e-300 });
    qs.push(Query::Range(Rect::from_corners(-2e15, 0.0, 0.0, 2e15)));
    let hits = t.search_cpu(&qs).sorted();
    for (i, q) in qs.iter().enumerate() {
        assert_eq!(hits.of(i), brute(&pts, q).as_slice(), "{q:?}");
    }
}

/// The kernels' traversal stack is the engine's.
#[test]
fn kernel_stack_matches() {
    let src = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../kernels/gpics.cu"));
    assert!(src.contains(&format!("#define TRAVERSAL_STACK {}", gpuindex_engine::gpics::tree::TRAVERSAL_STACK)));
}

#[test]
fn cpu_queries_match_brute_force() {
    let mut rng = SplitMix64::new(21);
    for &(n, shape, params) in CASES {
        let pts = dataset(&mut rng, n, shape);
        let t = QuadTree::build_cpu(&pts, params);
        t.check().unwrap();
        assert_eq!(t.len(), n);
        let qs = random_queries(&mut rng, &pts, 400);
        let hits = t.search_cpu(&qs).sorted();
        for (i, q) in qs.iter().enumerate() {
            assert_eq!(hits.of(i), brute(&pts, q).as_slice(), "n={n} shape={shape} {q:?}");
        }
        // Bounded: past the limit, the count and nothing gathered.
        let total = hits.ids.len() as u64;
        assert_eq!(t.search_cpu_bounded(&qs, total).map(Hits::sorted), Ok(hits), "n={n}: at the limit");
        if total > 0 {
            assert_eq!(t.search_cpu_bounded(&qs, total - 1), Err(total), "n={n}: past the limit");
        }
    }
}

/// Bulk updates (deletes, moves, inserts, points in empty quadrants and
/// outside the root) leave a valid tree that answers like brute force
/// over the current points, and small updates rewrite few leaves.
#[test]
fn bulk_updates_match_brute_force() {
    let mut rng = SplitMix64::new(33);
    for &(n, shape, params) in CASES {
        let mut current = dataset(&mut rng, n, shape);
        let mut t = QuadTree::build_cpu(&current, params);
        let mut next_id = 1_000_000u64;
        for round in 0..4 {
            let share = [0.001, 0.05, 0.3, 0.05][round];
            let changes = ((current.len() as f64 * share) as usize).max(1);
            // Deletes (some become moves: reinserted nearby with the same id).
            let mut deleted = Vec::new();
            let mut inserts = Points::default();
            let mut keep = vec![true; current.len()];
            for _ in 0..changes.min(current.len()) {
                let i = rng.below(current.len() as u64) as usize;
                if !keep[i] {
                    continue;
                }
                keep[i] = false;
                deleted.push(current.id[i]);
                if rng.below(2) == 0 {
                    let (x, y) = (current.x[i] + unit(&mut rng) - 0.5, current.y[i] + unit(&mut rng) - 0.5);
                    inserts.push(x, y, current.id[i]);
                }
            }
            let fresh = dataset(&mut rng, changes, shape);
            for i in 0..fresh.len() {
                inserts.push(fresh.x[i], fresh.y[i], next_id);
                next_id += 1;
            }
            if round == 3 {
                inserts.push(1e6, -1e6, next_id); // outside the root: rebuilt
                next_id += 1;
            }
            let mut now = Points::default();
            for i in (0..current.len()).filter(|&i| keep[i]) {
                now.push(current.x[i], current.y[i], current.id[i]);
            }
            for i in 0..inserts.len() {
                now.push(inserts.x[i], inserts.y[i], inserts.id[i]);
            }
            current = now;
            let leaves_before = t.leaves.len();
            let rewritten = t.update_cpu(&inserts, &deleted);
            t.check().unwrap_or_else(|e| panic!("n={n} shape={shape} round {round}: {e}"));
            assert_eq!(t.len(), current.len(), "n={n} shape={shape} round {round}");
            if round == 0 && n >= 60_000 && params.mc <= 64 {
                let r = rewritten.expect("no point outside the root");
                assert!(r * 5 < leaves_before, "0.1% of points changed but {r} of {leaves_before} leaves were rewritten");
            }
            let qs = random_queries(&mut rng, &current, 300);
            let hits = t.search_cpu(&qs).sorted();
            for (i, q) in qs.iter().enumerate() {
                assert_eq!(hits.of(i), brute(&current, q).as_slice(), "n={n} shape={shape} round {round} {q:?}");
            }
        }
    }
}

#[test]
fn cpu_knn_matches_brute_force() {
    let mut rng = SplitMix64::new(22);
    for &(n, shape, params) in CASES {
        let pts = dataset(&mut rng, n, shape);
        let t = QuadTree::build_cpu(&pts, params);
        let qp = knn_queries(&mut rng, &pts, 60);
        let sorted: Vec<Vec<(u64, u64, f64)>> = qp
            .iter()
            .map(|&(x, y)| {
                let mut all: Vec<(u64, u64, f64)> = (0..n)
                    .map(|j| {
                        let d = distance(x, y, pts.x[j], pts.y[j]);
                        (gpuindex_engine::keys::encode_f64(d), pts.id[j], d)
                    })
                    .collect();
                all.sort_unstable_by_key(|a| (a.0, a.1));
                all
            })
            .collect();
        for k in [1usize, 7, 100, n + 3] {
            let got = t.knn_cpu(&qp, k);
            for (i, &(x, y)) in qp.iter().enumerate() {
                let all = &sorted[i][..k.min(n)];
                let (ids, dists) = got.of(i);
                let want_ids: Vec<u64> = all.iter().map(|a| a.1).collect();
                assert_eq!(ids, want_ids.as_slice(), "n={n} shape={shape} k={k} q=({x},{y})");
                for (d, a) in dists.iter().zip(all) {
                    assert!(d.to_bits() == a.2.to_bits() || (d.is_nan() && a.2.is_nan()));
                }
            }
        }
    }
}

#[test]
fn gpu_build_and_queries_match_cpu() {
    let Some(gpu) = common::gpu_or_skip("gpu_build_and_queries_match_cpu") else { return };
    let mut rng = SplitMix64::new(23);
    let mut cases = CASES.to_vec();
    cases.push((2_000_000, 0, Params { mc: 1024, mh: 14 }));
    cases.push((1_000_000, 1, Params { mc: 256, mh: 16 }));
    cases.push((1_000_000, 4, Params::default()));
    for (n, shape, params) in cases {
        let pts = dataset(&mut rng, n, shape);
        let cpu = QuadTree::build_cpu(&pts, params);
        let g = QuadTree::build_gpu(&gpu, &pts, params).unwrap();
        g.check().unwrap();
        assert_eq!(g.nodes, cpu.nodes, "n={n} shape={shape}: same nodes");
        for l in 0..g.leaves.len() {
            let slice = |t: &QuadTree| {
                let nd = &t.nodes[t.leaves[l] as usize];
                let mut v = t.pts.id[nd.start as usize..(nd.start + nd.count) as usize].to_vec();
                v.sort_unstable();
                v
            };
            assert_eq!(slice(&g), slice(&cpu), "leaf {l}");
        }
        let qs = random_queries(&mut rng, &pts, 3000);
        let want = cpu.search_cpu(&qs).sorted();
        let got = g.search_gpu(&gpu, &qs).unwrap().sorted();
        // A CPU-built tree uploaded on demand answers the same.
        assert_eq!(cpu.search_gpu(&gpu, &qs).unwrap().sorted(), want, "n={n} shape={shape}: uploaded CPU tree");
        assert_eq!(got, want, "n={n} shape={shape}: GPU search");
        // Bounded: past the limit, the count and nothing gathered.
        let total = want.ids.len() as u64;
        assert_eq!(g.search_gpu_bounded(&gpu, &qs, total).unwrap().map(Hits::sorted), Ok(want.clone()), "n={n}: at the limit");
        if total > 0 {
            assert_eq!(g.search_gpu_bounded(&gpu, &qs, total - 1).unwrap(), Err(total), "n={n}: past the limit");
        }
        let qp = knn_queries(&mut rng, &pts, 500);
        for k in [1usize, 10, 33, 64, 100, 128, 129] {
            let (got, want) = (g.knn_gpu(&gpu, &qp, k).unwrap(), cpu.knn_cpu(&qp, k));
            // Equal ids, and distances equal bit for bit (NaN for NaN).
            let same = |q: usize| {
                let ((gi, gd), (wi, wd)) = (got.of(q), want.of(q));
                gi == wi && gd.iter().zip(wd).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()))
            };
            if let Some(q) = (0..qp.len()).find(|&q| !same(q)) {
                panic!("n={n} shape={shape} k={k}: GPU kNN of {:?} is {:?}, the CPU's {:?}", qp[q], got.of(q), want.of(q));
            }
        }
    }
}

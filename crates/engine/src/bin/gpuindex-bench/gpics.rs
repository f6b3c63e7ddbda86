//! G-PICS: build (GPU vs the same level-by-level build on all cores) and
//! batched queries of each kind (GPU vs the same algorithm on all cores:
//! the two steps for range, within and point queries, the per-query walk
//! for kNN; vs an R-tree, rstar, queried on all cores), every GPU answer
//! checked against the CPU's.

use crate::util::*;
use crate::Args;
use gpuindex_engine::datasets::PointSet;
use gpuindex_engine::gpics::{Params, Points, QuadTree, Query, Rect};
use gpuindex_engine::gpu::Gpu;
use gpuindex_engine::rng::SplitMix64;
use rayon::prelude::*;
use rstar::{primitives::GeomWithData, RTree, AABB};
use std::time::Instant;

type RPoint = GeomWithData<[f64; 2], u64>;

fn unit(rng: &mut SplitMix64) -> f64 {
    rng.next_u64() as f64 / u64::MAX as f64
}

/// Uniform on [0, 1000)², clustered (64 Gaussian-ish blobs), or the
/// real-shaped `cities` set.
fn points(n: usize, shape: &str, seed: u64) -> Points {
    let mut rng = SplitMix64::new(seed);
    let centres: Vec<(f64, f64)> = (0..64).map(|_| (unit(&mut rng) * 1000.0, unit(&mut rng) * 1000.0)).collect();
    let mut p = Points { x: Vec::with_capacity(n), y: Vec::with_capacity(n), id: Vec::with_capacity(n) };
    for i in 0..n {
        let (x, y) = match shape {
            "cities" => PointSet::Cities.point(&mut rng, i as u64),
            "clustered" => {
                let (cx, cy) = centres[rng.below(64) as usize];
                let s = 5.0 * (unit(&mut rng) + unit(&mut rng) + unit(&mut rng) - 1.5);
                let t = 5.0 * (unit(&mut rng) + unit(&mut rng) + unit(&mut rng) - 1.5);
                (cx + s, cy + t)
            }
            _ => (unit(&mut rng) * 1000.0, unit(&mut rng) * 1000.0),
        };
        p.push(x, y, i as u64);
    }
    p
}

/// Queries centred on stored points; `h` is the box half-side and the
/// circle radius (the clustered data is ~400x denser where points are, so
/// it gets smaller queries: a 4M batch of 1x1 boxes there would return
/// billions of rows).
fn queries(kind: &str, pts: &Points, m: usize, h: f64, seed: u64) -> Vec<Query> {
    let mut rng = SplitMix64::new(seed);
    (0..m)
        .map(|_| {
            let i = rng.below(pts.len() as u64) as usize;
            let (x, y) = (pts.x[i], pts.y[i]);
            match kind {
                "range" => Query::Range(Rect::from_corners(x - h, y - h, x + h, y + h)),
                "within" => Query::Within { x, y, r: h },
                _ => Query::Point { x, y },
            }
        })
        .collect()
}

fn rtree_answers(t: &RTree<RPoint>, qs: &[Query]) -> usize {
    qs.par_iter()
        .map(|q| match *q {
            Query::Range(r) => t.locate_in_envelope(&AABB::from_corners([r.lx, r.ly], [r.hx, r.hy])).count(),
            Query::Within { x, y, r } => t.locate_within_distance([x, y], r * r).count(),
            Query::Point { x, y } => {
                let e = gpuindex_engine::gpics::geom::EPSILON;
                t.locate_in_envelope(&AABB::from_corners([x - e, y - e], [x + e, y + e])).count()
            }
        })
        .sum()
}

/// Moves 1%, 5% and 10% of the points by a small step and applies that as
/// one bulk update, against rebuilding (the build times measured above).
fn updates(pts: &Points, params: Params, shape: &str, cpu_build: f64, gpu_build: f64) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for share in [0.01, 0.05, 0.10] {
        let mut rng = SplitMix64::new(31);
        let m = (pts.len() as f64 * share) as usize;
        let mut moved = Points::default();
        let mut deleted = Vec::with_capacity(m);
        for _ in 0..m {
            let i = rng.below(pts.len() as u64) as usize;
            deleted.push(pts.id[i]);
            moved.push(pts.x[i] + unit(&mut rng) - 0.5, pts.y[i] + unit(&mut rng) - 0.5, pts.id[i]);
        }
        deleted.sort_unstable();
        deleted.dedup();
        let mut tree = QuadTree::build_cpu(pts, params);
        let t = Instant::now();
        let rewritten = tree.update_cpu(&moved, &deleted);
        let secs = t.elapsed().as_secs_f64();
        rows.push(vec![
            shape.to_string(),
            format!("{:.0}%", share * 100.0),
            format!("{secs:.3}"),
            rewritten.map_or("rebuilt (point outside the root)".into(), |r| format!("{r} of {}", tree.leaves.len())),
            format!("{cpu_build:.3}"),
            ratio(cpu_build, secs),
            format!("{gpu_build:.3}"),
            ratio(gpu_build, secs),
        ]);
    }
    rows
}

/// `knn_only`: the builds and the kNN rows alone (`gpics-knn`).
pub fn run(args: &Args, gpu: Option<&Gpu>, knn_only: bool) {
    let n = if args.n_given { args.n[0] } else { 16_000_000 };
    let batches: Vec<usize> = if args.batch_given { args.batch.clone() } else { vec![1_000, 16_000, 256_000, 4_000_000] };
    let params = Params::default();
    let mut build_rows = Vec::new();
    let mut rows = Vec::new();
    let mut update_rows = Vec::new();
    for shape in ["uniform", "clustered", "cities"] {
        let pts = points(n, shape, 5);
        let t = Instant::now();
        let cpu = QuadTree::build_cpu(&pts, params);
        let cpu_build = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let rt = RTree::bulk_load((0..n).map(|i| RPoint::new([pts.x[i], pts.y[i]], pts.id[i])).collect());
        let rtree_build = t.elapsed().as_secs_f64();
        let mut gpu_build = f64::NAN;
        let gtree = gpu.map(|g| {
            let t = Instant::now();
            let tree = QuadTree::build_gpu(g, &pts, params).expect("gpu build");
            gpu_build = t.elapsed().as_secs_f64();
            assert_eq!(tree.nodes, cpu.nodes, "GPU and CPU builds differ");
            tree
        });
        build_rows.push(vec![
            shape.to_string(),
            format!("{n}"),
            format!("{}", cpu.leaves.len()),
            format!("{}", cpu.height()),
            format!("{:.3}", cpu_build),
            format!("{:.3}", gpu_build),
            ratio(cpu_build, gpu_build),
            format!("{:.3}", rtree_build),
        ]);
        if !knn_only {
            update_rows.extend(updates(&pts, params, shape, cpu_build, gpu_build));
        }
        for kind in ["range", "within", "point"].into_iter().filter(|_| !knn_only) {
            for &m in &batches {
                let qs = queries(kind, &pts, m, if shape == "uniform" { 0.5 } else { 0.025 }, 9 + m as u64);
                let mut want = Default::default();
                let cpu_t = median_secs(args.reps, || want = cpu.search_cpu(&qs));
                let want = want.sorted();
                let answers = want.ids.len();
                let rtree_t = median_secs(args.reps, || {
                    let c = rtree_answers(&rt, &qs);
                    assert!(kind == "point" || c == answers || kind == "within", "rstar disagrees on {kind}");
                });
                let mut gpu_t = f64::NAN;
                if let (Some(g), Some(gt)) = (gpu, gtree.as_ref()) {
                    let mut got = Default::default();
                    gpu_t = median_secs(args.reps, || got = gt.search_gpu(g, &qs).expect("gpu search"));
                    assert!(got.sorted() == want, "GPU answers differ from the CPU's ({kind}, {m})");
                }
                rows.push(vec![
                    shape.to_string(),
                    kind.to_string(),
                    format!("{m}"),
                    format!("{:.1}", answers as f64 / m as f64),
                    rate(m as f64 / cpu_t),
                    rate(m as f64 / rtree_t),
                    rate(m as f64 / gpu_t),
                    ratio(cpu_t, gpu_t),
                    ratio(rtree_t, gpu_t),
                ]);
            }
        }
        // kNN centres anywhere in the square, and on stored points (where
        // users' queries fall on real-shaped data: in the cities).
        for (centres, &m) in ["anywhere", "stored"].iter().flat_map(|c| batches.iter().filter(|&&m| m <= 256_000).map(move |m| (c, m))) {
            let mut rng = SplitMix64::new(77);
            let qp: Vec<(f64, f64)> = (0..m)
                .map(|_| {
                    if *centres == "stored" {
                        let i = rng.below(n as u64) as usize;
                        (pts.x[i], pts.y[i])
                    } else {
                        (unit(&mut rng) * 1000.0, unit(&mut rng) * 1000.0)
                    }
                })
                .collect();
            let mut want = Default::default();
            let cpu_t = median_secs(args.reps, || want = cpu.knn_cpu(&qp, 10));
            let rtree_t = median_secs(args.reps, || {
                let _: usize = qp.par_iter().map(|&(x, y)| rt.nearest_neighbor_iter(&[x, y]).take(10).count()).sum();
            });
            let mut gpu_t = f64::NAN;
            if let (Some(g), Some(gt)) = (gpu, gtree.as_ref()) {
                let mut got = Default::default();
                gpu_t = median_secs(args.reps, || got = gt.knn_gpu(g, &qp, 10).expect("gpu knn"));
                assert!(got == want, "GPU kNN differs from the CPU's");
            }
            rows.push(vec![
                shape.to_string(),
                format!("kNN, k = 10, centres {centres}"),
                format!("{m}"),
                "10.0".into(),
                rate(m as f64 / cpu_t),
                rate(m as f64 / rtree_t),
                rate(m as f64 / gpu_t),
                ratio(cpu_t, gpu_t),
                ratio(rtree_t, gpu_t),
            ]);
        }
    }
    table(
        &format!("G-PICS quadtree build (MC = {}, MH = {}): seconds", params.mc, params.mh),
        &["data", "points", "leaves", "height", "CPU build, all cores", "GPU build", "CPU/GPU", "R-tree bulk load (rstar, 1 core)"],
        &build_rows,
    );
    if !knn_only {
        table(
            "G-PICS bulk update (a share of the points moved: deleted and reinserted nearby, same id): seconds",
            &[
                "data",
                "moved",
                "update, all cores",
                "leaves rewritten",
                "rebuild, all cores",
                "rebuild/update",
                "GPU rebuild",
                "GPU rebuild/update",
            ],
            &update_rows,
        );
    }
    table(
        "G-PICS batched queries: queries/s (GPU: end to end, queries up and answers down)",
        &["data", "query", "batch", "answers per query", "CPU, all cores", "R-tree (rstar), all cores", "GPU", "GPU/CPU", "GPU/R-tree"],
        &rows,
    );
    println!("\n(range: boxes of side 1 (uniform) or 0.05 (clustered, cities), within: r = 0.5 or 0.025, point: ~= on stored points, kNN: k = 10; points in [0, 1000)^2; cities: datasets::PointSet::Cities, outliers up to 1e15 away.)");
}

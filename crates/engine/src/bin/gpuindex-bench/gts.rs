//! GTS: exact kNN (k = 10) and range queries on float4 vectors, the GPU
//! search against the same tree searched on all cores and against exact
//! brute force on the GPU (the floor: every distance in float8 by the leaf
//! kernel, and bounded by a float4 matrix-multiply pass then rechecked),
//! for batches of 1 to 100K queries. "GTS GPU" is the level-synchronous
//! search, "warp per query" the depth-first one (`Way::Depth`). "engine" is what `DeviceTree::knn`
//! picks, answering a vector per query; "flat answers" the same search
//! answering into one flat buffer kept between batches (`knn_into`,
//! `range_each_into`). Every GPU answer is checked: GTS on the GPU against
//! the CPU's on a prefix of each batch, every other GPU way against GTS on
//! the GPU.
//!
//!   gpuindex-bench gts [--n 1e6] [--dim 128] [--batch 1,100,1e4,1e5] [--set clustered|uniform]

use crate::util::*;
use crate::Args;
use gpuindex_engine::datasets::VectorSet;
use gpuindex_engine::gpu::Gpu;
use gpuindex_engine::gts::bounded;
use gpuindex_engine::gts::gpu::{DeviceTree, FlatAnswers, Way};
use gpuindex_engine::gts::search::{self, Objects};
use gpuindex_engine::gts::{Metric, Params, Tree, Vectors};
use std::time::Instant;

/// CPU searches stop after this long per measure (the rate is of the
/// queries done; the GPU's answers are checked against those).
const CPU_SECONDS: f64 = 4.0;
/// The plain brute force runs on at most this many queries of a batch.
const BRUTE_MAX: usize = 10_000;

pub fn secs(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

/// Runs `f` on growing prefixes of `queries` (rows of `dim`) until it
/// has taken CPU_SECONDS or done all; returns (queries done, seconds, answers).
pub fn cpu_prefix<T>(queries: &[f32], dim: usize, f: impl Fn(&[f32]) -> Vec<T>) -> (usize, f64, Vec<T>) {
    let m = queries.len() / dim;
    let (mut done, mut took, mut out) = (0, 0.0, Vec::new());
    let mut step = 16.min(m).max(1);
    while done < m && took < CPU_SECONDS {
        let end = (done + step).min(m);
        let t = Instant::now();
        out.extend(f(&queries[done * dim..end * dim]));
        took += t.elapsed().as_secs_f64();
        done = end;
        step *= 2;
    }
    (done, took, out)
}

/// `cpu_prefix`, and where it did the whole batch in well under
/// CPU_SECONDS, the batch's time as the median of `reps` runs of it as one
/// call (the 16-core run of the batch itself, steadier than one pass of
/// growing prefixes).
pub fn cpu_batch<T>(reps: usize, queries: &[f32], dim: usize, f: impl Fn(&[f32]) -> Vec<T>) -> (usize, f64, Vec<T>) {
    let (done, took, out) = cpu_prefix(queries, dim, &f);
    if done * dim < queries.len() || took * (reps + 1) as f64 > CPU_SECONDS {
        return (done, took, out);
    }
    (done, median_secs(reps, || drop(f(queries))), out)
}

/// The tree of `v` built on all cores, its objects, and its copy on the
/// GPU where there is one; prints the "tree" table (build and upload).
pub fn build_tree(metric: Metric, v: &Vectors, gpu: Option<&Gpu>) -> (Tree, Objects, Option<DeviceTree>) {
    let t = Instant::now();
    let tree = Tree::build(metric, v, Params { fanout: 20 });
    let build = t.elapsed().as_secs_f64();
    let objects = Objects::of(&tree, v);
    let s = &tree.shape;
    let mut rows = vec![vec!["CPU build, all cores (s)".into(), format!("{build:.2}")]];
    rows.push(vec!["height / leaves".into(), format!("{} / {}", s.height, s.leaves().len())]);
    let dev = gpu.map(|g| {
        let t = Instant::now();
        let d = DeviceTree::upload(g, s, &objects).expect("upload");
        rows.push(vec!["GPU upload (s)".into(), format!("{:.3}", t.elapsed().as_secs_f64())]);
        rows.push(vec!["device bytes (MiB)".into(), format!("{}", d.bytes() >> 20)]);
        d
    });
    table("tree", &["measure", "value"], &rows);
    (tree, objects, dev)
}

pub fn run(args: &Args, gpu: Option<&Gpu>) {
    let n = if args.n_given { args.n[0] } else { 1_000_000 };
    let batches = if args.batch_given { args.batch.clone() } else { vec![1, 100, 10_000, 100_000] };
    let dim = args.dim;
    let sets: Vec<VectorSet> = match &args.set {
        Some(s) => vec![VectorSet::parse(s).unwrap_or_else(|| panic!("--set clustered|uniform, not {s}"))],
        None => VectorSet::ALL.to_vec(),
    };
    let k = 10;
    for set in sets {
        println!("\n## GTS, {} vectors of {dim} floats, {}, L2, k = {k}", n, set.name());
        let data = VectorSet::vectors(set, n, dim, 1);
        let v = Vectors { dim, ids: (0..n as u64).collect(), data };
        let (tree, objects, dev) = build_tree(Metric::L2, &v, gpu);
        drop(v);
        let norms = bounded::norms(&objects);
        let s = &tree.shape;
        let mut knn_rows = Vec::new();
        let mut range_rows = Vec::new();
        for &m in &batches {
            let qs = VectorSet::vectors(set, m, dim, 1000 + m as u64);
            // The radius: the median 10th-neighbour distance of a few queries.
            let sample = search::knn(s, &objects, &qs[..dim * m.min(64)], k);
            let mut tenth: Vec<f64> = sample.iter().filter_map(|a| a.last().map(|h| h.1)).collect();
            tenth.sort_by(|a, b| a.total_cmp(b));
            let r = tenth[tenth.len() / 2];
            let (cpu_n, cpu_s, cpu_knn) = cpu_batch(args.reps, &qs, dim, |q| search::knn(s, &objects, q, k));
            let (cpu_rn, cpu_rs, cpu_range) = cpu_batch(args.reps, &qs, dim, |q| search::range(s, &objects, q, r));
            let (cpu_bn, cpu_bs, cpu_bounded) = cpu_prefix(&qs, dim, |q| bounded::knn_l2(&objects, &norms, q, k));
            let both = cpu_bn.min(cpu_n);
            assert_eq!(cpu_bounded[..both], cpu_knn[..both], "{}: CPU bounded brute force != CPU GTS (m = {m})", set.name());
            let (mut g_tree, mut g_filter, mut g_naive, mut g_auto, mut g_range) = (f64::NAN, f64::NAN, f64::NAN, f64::NAN, f64::NAN);
            let (mut g_depth, mut g_range_tree, mut g_flat, mut g_range_flat) = (f64::NAN, f64::NAN, f64::NAN, f64::NAN);
            let mut visited = String::from("-");
            if let (Some(g), Some(d)) = (gpu, &dev) {
                let _ = d.knn(g, &qs[..dim], k); // warm-up (kernels compiled, pools made)
                let mut tree = Vec::new();
                g_tree = secs(|| tree = d.knn_by(g, &qs, k, Way::Tree).expect("gpu knn"));
                assert_eq!(tree[..cpu_n], cpu_knn[..], "{}: GPU kNN != CPU kNN (m = {m})", set.name());
                let mut got = Vec::new();
                g_filter = secs(|| got = d.knn_by(g, &qs, k, Way::Filter).expect("gpu bounded brute force"));
                assert_eq!(got, tree, "{}: GPU bounded brute force != GPU GTS (m = {m})", set.name());
                let mut depth = None;
                g_depth = secs(|| depth = d.knn_by(g, &qs, k, Way::Depth).ok());
                match depth {
                    Some(got) => assert_eq!(got, tree, "{}: GPU warp-per-query kNN != GPU GTS (m = {m})", set.name()),
                    None => g_depth = f64::NAN,
                }
                drop(got); // (dropping a vector per query is not the search's time)
                let mut got = Vec::new();
                g_auto = secs(|| got = d.knn(g, &qs, k).expect("gpu knn"));
                assert_eq!(got, tree, "{}: GPU kNN (auto) != GPU GTS (m = {m})", set.name());
                // Flat answers into a buffer kept from the batch before
                // (here the warm-up's).
                let mut flat = FlatAnswers::default();
                g_flat = median_secs(args.reps, || d.knn_into(g, &qs, k, &mut flat).expect("gpu knn, flat"));
                assert!(flat.nested() == tree, "{}: GPU kNN (flat) != GPU GTS (m = {m})", set.name());
                drop(got);
                let mut got = Vec::new();
                let bm = m.min(BRUTE_MAX);
                g_naive = secs(|| got = d.knn_by(g, &qs[..bm * dim], k, Way::Naive).expect("gpu brute force")) * m as f64 / bm as f64;
                assert_eq!(got[..], tree[..bm], "{}: GPU brute force != GPU GTS (m = {m})", set.name());
                let mut within = Vec::new();
                g_range = secs(|| within = d.range(g, &qs, r).expect("gpu range"));
                let mut levels = Vec::new();
                g_range_tree = secs(|| levels = d.range_each_by(g, &qs, &vec![r; m], Way::Tree).expect("gpu range by the tree"));
                assert_eq!(levels, within, "{}: GPU range by the tree != GPU range (m = {m})", set.name());
                assert_eq!(within[..cpu_rn], cpu_range[..], "{}: GPU range != CPU range (m = {m})", set.name());
                let radii = vec![r; m];
                g_range_flat = median_secs(args.reps, || d.range_each_into(g, &qs, &radii, &mut flat).expect("gpu range, flat"));
                assert!(flat.nested() == within, "{}: GPU range (flat) != GPU range (m = {m})", set.name());
                visited = format!("{:.1}", within.iter().map(|w| w.len()).sum::<usize>() as f64 / m as f64);
            }
            let q = |secs: f64| m as f64 / secs;
            let cq = cpu_n as f64 / cpu_s;
            let cb = cpu_bn as f64 / cpu_bs;
            let floor = q(g_filter).max(q(g_naive));
            knn_rows.push(vec![
                m.to_string(),
                rate(cq),
                rate(cb),
                rate(q(g_tree)),
                rate(q(g_depth)),
                rate(q(g_naive)),
                rate(q(g_filter)),
                rate(q(g_auto)),
                rate(q(g_flat)),
                ratio(q(g_auto), cq.max(cb)),
                ratio(q(g_flat), cq.max(cb)),
                ratio(q(g_auto), floor),
                format!("{cpu_n} / {cpu_bn}"),
            ]);
            let (cr, gr) = (cpu_rn as f64 / cpu_rs, m as f64 / g_range);
            let gf = q(g_range_flat);
            range_rows.push(vec![
                m.to_string(),
                format!("{r:.3}"),
                visited,
                rate(cr),
                rate(q(g_range_tree)),
                rate(gr),
                rate(gf),
                ratio(gr, cr),
                ratio(gf, cr),
            ]);
        }
        table(
            &format!("kNN, k = {k} (queries/s; transfers included)"),
            &[
                "batch",
                "GTS CPU",
                "bounded brute force CPU",
                "GTS GPU",
                "GTS GPU, warp per query",
                "brute force GPU",
                "bounded brute force GPU",
                "engine GPU",
                "engine GPU, flat answers",
                "engine/best CPU",
                "engine flat/best CPU",
                "engine/best GPU brute force",
                "CPU queries run (GTS / bounded)",
            ],
            &knn_rows,
        );
        table(
            "range, radius = median 10th-neighbour distance (queries/s)",
            &[
                "batch",
                "radius",
                "answers/query",
                "GTS CPU",
                "GTS GPU, level by level",
                "engine GPU",
                "engine GPU, flat answers",
                "engine/CPU",
                "engine flat/CPU",
            ],
            &range_rows,
        );
    }
}

/// `gts-build`: the tree built on all cores against the same tree built
/// on the GPU (end to end: vectors up, order, distances and pivots down),
/// L2 and cosine, for each --n (default 1e5,1e6,1e7) of --dim floats. The
/// L2 trees are asserted equal bit for bit; cosine's are checked by the
/// engine's tests (acos may round otherwise on the GPU).
pub fn build_bench(args: &Args, gpu: Option<&Gpu>) {
    use gpuindex_engine::gts::gpu_build::build_gpu;
    use rayon::prelude::*;
    let sizes = if args.n_given { args.n.clone() } else { vec![100_000, 1_000_000, 10_000_000] };
    let set = args
        .set
        .as_deref()
        .map_or(VectorSet::Clustered, |s| VectorSet::parse(s).unwrap_or_else(|| panic!("--set clustered|uniform, not {s}")));
    let dim = args.dim;
    let reps = args.reps.clamp(1, 3);
    let mut rows = Vec::new();
    if let Some(g) = gpu {
        // Warm-up: the stream and the first allocations.
        let v = Vectors { dim, ids: (0..1000).collect(), data: VectorSet::vectors(set, 1000, dim, 1) };
        build_gpu(g, Metric::L2, &v, Params { fanout: 20 }).expect("gpu build");
    }
    for &n in &sizes {
        // Generated in chunks on all cores (seeded by chunk).
        let chunk = 100_000;
        let data: Vec<f32> = (0..n.div_ceil(chunk))
            .into_par_iter()
            .flat_map_iter(|c| VectorSet::vectors(set, chunk.min(n - c * chunk), dim, 7 + c as u64))
            .collect();
        let v = Vectors { dim, ids: (0..n as u64).collect(), data };
        for metric in [Metric::L2, Metric::Cosine] {
            let params = Params { fanout: 20 };
            let median = |f: &mut dyn FnMut() -> f64| {
                let mut t: Vec<f64> = (0..reps).map(|_| f()).collect();
                t.sort_by(f64::total_cmp);
                t[reps / 2]
            };
            let mut cpu = None;
            let cpu_s = median(&mut || secs(|| cpu = Some(Tree::build(metric, &v, params))));
            let cpu = cpu.expect("built");
            let gpu_s = gpu.map_or(f64::NAN, |g| {
                let mut got = None;
                let s = median(&mut || secs(|| got = Some(build_gpu(g, metric, &v, params).expect("gpu build"))));
                let got = got.expect("built");
                if metric != Metric::Cosine {
                    let same = got.order == cpu.order
                        && got.pdist.iter().zip(&cpu.pdist).all(|(a, b)| a.to_bits() == b.to_bits())
                        && got.shape.pivots.iter().zip(&cpu.shape.pivots).all(|(a, b)| a.to_bits() == b.to_bits())
                        && got.shape.nodes == cpu.shape.nodes;
                    assert!(same, "n = {n}: the GPU-built {} tree differs from the CPU's", metric.name());
                }
                s
            });
            // What the build's copy of the vectors alone takes.
            let up_s = gpu.map_or(f64::NAN, |g| median(&mut || secs(|| drop(g.upload_staged(&v.data).expect("upload")))));
            rows.push(vec![
                size_label(n),
                metric.name().into(),
                format!("{} / {}", cpu.shape.height, cpu.shape.leaves().len()),
                format!("{cpu_s:.3}"),
                if gpu_s.is_nan() { "-".into() } else { format!("{gpu_s:.3}") },
                if up_s.is_nan() { "-".into() } else { format!("{up_s:.3}") },
                ratio(cpu_s, gpu_s),
            ]);
        }
    }
    table(
        &format!("GTS build, {} vectors of {dim} floats, fanout 20 (seconds, median of {reps})", set.name()),
        &["n", "metric", "height / leaves", "CPU, all cores", "GPU (transfers included)", "of which vectors up", "GPU/CPU"],
        &rows,
    );
}

/// `gts-small`: the service's case, small batches of L2 kNN (k = 10) by
/// the bounded brute force on the GPU (`Way::FilterFloat4`, and
/// `Way::Filter`, the engine's kernel for the GPU): median and 90th
/// percentile of --reps calls (default 5; use 50 or more) per batch size
/// (default 1,8,16,32,40,48,64,128,1000), on --n (1e6) vectors of --dim
/// floats, each answer checked against the CPU's bounded brute force.
pub fn small_bench(args: &Args, gpu: Option<&Gpu>) {
    let Some(g) = gpu else {
        println!("gts-small needs a GPU");
        return;
    };
    let n = if args.n_given { args.n[0] } else { 1_000_000 };
    let batches = if args.batch_given { args.batch.clone() } else { vec![1, 8, 16, 32, 40, 48, 64, 128, 1000] };
    let (dim, k, set) = (args.dim, 10, args.set.as_deref().and_then(VectorSet::parse).unwrap_or(VectorSet::Clustered));
    println!("\n## Bounded brute force on the GPU, {n} vectors of {dim} floats, {}, k = {k}, {} calls each", set.name(), args.reps);
    let v = Vectors { dim, ids: (0..n as u64).collect(), data: VectorSet::vectors(set, n, dim, 1) };
    let (_, objects, dev) = build_tree(Metric::L2, &v, Some(g));
    let (dev, norms) = (dev.expect("device tree"), bounded::norms(&objects));
    let mut rows = Vec::new();
    for &m in &batches {
        let qs = VectorSet::vectors(set, m, dim, 1000 + m as u64);
        let want = bounded::knn_l2(&objects, &norms, &qs, k);
        let mut row = vec![m.to_string()];
        for way in [Way::FilterFloat4, Way::Filter] {
            let mut times: Vec<f64> = (0..args.reps.max(1) + 1)
                .map(|_| {
                    let mut got = Vec::new();
                    let t = secs(|| got = dev.knn_by(g, &qs, k, way).expect("gpu bounded brute force"));
                    assert_eq!(got, want, "GPU bounded brute force ({way:?}) != CPU (m = {m})");
                    t
                })
                .skip(1) // warm-up
                .collect();
            times.sort_by(f64::total_cmp);
            let (p50, p90) = (times[times.len() / 2], times[times.len() * 9 / 10]);
            row.extend([format!("{:.3}", p50 * 1e3), format!("{:.3}", p90 * 1e3), rate(m as f64 / p50)]);
        }
        rows.push(row);
    }
    let head = ["batch", "float4 p50 ms", "p90 ms", "queries/s", "engine p50 ms", "p90 ms", "queries/s"];
    table("one call (ms) and queries/s at the median: the float4 kernel and the engine's (float8 tensor cores on sm_90)", &head, &rows);
}

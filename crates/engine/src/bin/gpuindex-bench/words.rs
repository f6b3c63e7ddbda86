//! GTS by edit distance: exact kNN (k = 10) over a dictionary's words, the
//! GPU search against the same tree searched on all cores, against brute
//! force on all cores (every distance: what a sequential scan computes, on
//! every core) and on the GPU, for batches of 1 to 10K queries. Queries are
//! dictionary words with 0 to 2 random edits (typos). Every GPU answer is
//! checked against the CPU's.
//!
//!   gpuindex-bench words [--set FILE (default /usr/share/dict/words)] [--batch 1,100,1000,1e4]

use crate::gts::{build_tree, cpu_prefix, secs};
use crate::util::*;
use crate::Args;
use gpuindex_engine::datasets::typo;
use gpuindex_engine::gpu::Gpu;
use gpuindex_engine::gts::gpu::Way;
use gpuindex_engine::gts::metric::string_vector;
use gpuindex_engine::gts::search;
use gpuindex_engine::gts::{Metric, Vectors};
use gpuindex_engine::rng::SplitMix64;
use rayon::prelude::*;

pub fn run(args: &Args, gpu: Option<&Gpu>) {
    let path = args.set.clone().unwrap_or_else(|| "/usr/share/dict/words".into());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e} (install wamerican, or --set FILE)"));
    let words: Vec<&str> = text.lines().map(str::trim).filter(|w| !w.is_empty()).collect();
    let width = words.iter().map(|w| w.chars().count()).max().unwrap_or(1);
    let batches = if args.batch_given { args.batch.clone() } else { vec![1, 100, 1000, 10_000] };
    let k = 10;
    println!("\n## GTS by edit distance, {} words of {path} (longest {width} characters), k = {k}", words.len());
    let mut v = Vectors::new(width);
    for (i, w) in words.iter().enumerate() {
        v.push(&string_vector(w.chars().map(|c| c as u32), width).expect("fits"), i as u64);
    }
    let (tree, objects, dev) = build_tree(Metric::Levenshtein, &v, gpu);
    let s = &tree.shape;
    let brute = |q: &[f32]| -> Vec<Vec<(u64, f64)>> {
        q.chunks(width)
            .map(|q| {
                let mut all: Vec<(u64, f64)> =
                    (0..v.len()).into_par_iter().map(|i| (v.ids[i], Metric::Levenshtein.distance(q, v.get(i)))).collect();
                all.par_sort_unstable_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
                all.truncate(k);
                all
            })
            .collect()
    };
    let mut knn_rows = Vec::new();
    for &m in &batches {
        let mut rng = SplitMix64::new(77 + m as u64);
        let mut qs = Vec::with_capacity(m * width);
        while qs.len() < m * width {
            let (w, edits) = (words[rng.below(words.len() as u64) as usize], rng.below(3));
            let q = typo(&mut rng, w, edits);
            if let Some(x) = string_vector(q.chars().map(|c| c as u32), width) {
                qs.extend(x);
            }
        }
        let (cpu_n, cpu_s, cpu_knn) = cpu_prefix(&qs, width, |q| search::knn(s, &objects, q, k));
        let (bn, bs, bf) = cpu_prefix(&qs, width, brute);
        assert_eq!(bf[..bn.min(cpu_n)], cpu_knn[..bn.min(cpu_n)], "CPU brute force != CPU GTS (m = {m})");
        let (mut g_tree, mut g_naive) = (f64::NAN, f64::NAN);
        if let (Some(g), Some(d)) = (gpu, &dev) {
            let _ = d.knn(g, &qs[..width], k); // warm-up (kernels compiled)
            let mut got = Vec::new();
            g_tree = secs(|| got = d.knn_by(g, &qs, k, Way::Tree).expect("gpu knn"));
            assert_eq!(got[..cpu_n], cpu_knn[..], "GPU kNN != CPU kNN (m = {m})");
            let mut naive = Vec::new();
            g_naive = secs(|| naive = d.knn_by(g, &qs, k, Way::Naive).expect("gpu brute force"));
            assert_eq!(naive, got, "GPU brute force != GPU GTS (m = {m})");
        }
        let q = |secs: f64| m as f64 / secs;
        let (cq, cb) = (cpu_n as f64 / cpu_s, bn as f64 / bs);
        knn_rows.push(vec![
            m.to_string(),
            rate(cb),
            rate(cq),
            rate(q(g_naive)),
            rate(q(g_tree)),
            ratio(q(g_tree), cq.max(cb)),
            ratio(q(g_tree), q(g_naive)),
            format!("{cpu_n} / {bn}"),
        ]);
    }
    table(
        &format!("kNN by edit distance, k = {k} (queries/s; transfers included)"),
        &[
            "batch",
            "brute force CPU",
            "GTS CPU",
            "brute force GPU",
            "GTS GPU",
            "GTS GPU/best CPU",
            "GTS GPU/brute force GPU",
            "CPU queries run (GTS / brute)",
        ],
        &knn_rows,
    );
}

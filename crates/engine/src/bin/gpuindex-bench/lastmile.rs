//! The host's side of a lookup batch with the keys in host memory, alone
//! (no GPU: the inner search and the predictions are computed on the CPU
//! beforehand and not timed), to bound what any keys-on-host design can
//! reach on this machine:
//!
//! - the HB+-tree's leaf step (one random leaf line a query), in the
//!   batch's order and with the queries sorted;
//! - PGM's last mile (a window of 2ε + 3 keys around the predicted
//!   position), in the batch's order and in predicted-position order (what
//!   a GPU sort of the batch before the last mile would give), and the
//!   scatter of sorted answers back into the batch's order;
//! - a parallel streaming read of the keys (the ceiling of a sorted sweep:
//!   a batch dense enough that its windows cover every line reads them all).
//!
//! Unique keys with random gaps, present-key queries (the HB+-tree's
//! workload, as `pgm`'s keys-on-host table). Every answer is checked.

use crate::util::*;
use crate::Args;
use gpuindex_engine::hbtree::implicit::{Hit, ImplicitTree};
use gpuindex_engine::hbtree::leaf::leaf_step_par;
use gpuindex_engine::pgm::{Pgm, DEFAULT_EPS_INNER};
use gpuindex_engine::rng::SplitMix64;
use rayon::prelude::*;

pub fn run(args: &Args) {
    let ns = if args.n_given { args.n.clone() } else { vec![100_000_000, 1 << 28] };
    let ms = if args.batch_given { args.batch.clone() } else { vec![10_000_000, 1 << 24] };
    let mut rows = Vec::new();
    for &n in &ns {
        let keys = unique_keys(n, 3);
        let mut r = SplitMix64::new(4);
        let stream = n as f64 * 8.0
            / median_secs(args.reps, || {
                let x = keys.par_chunks(1 << 16).map(|c| c.iter().fold(0, |a, &k| a ^ k)).reduce(|| 0, |a, b| a ^ b);
                std::hint::black_box(x);
            });
        let values: Vec<u64> = keys.iter().map(|k| k ^ 1).collect();
        let hb = ImplicitTree::build(&keys, &values).expect("sorted");
        drop(values);
        let models: Vec<Pgm> = [16, 64].into_iter().map(|eps| Pgm::build(&keys, eps, DEFAULT_EPS_INNER)).collect();
        for &m in &ms {
            let qs: Vec<u64> = (0..m).map(|_| keys[r.below(n as u64) as usize]).collect();
            let mut order: Vec<u32> = (0..m as u32).collect();
            order.par_sort_unstable_by_key(|&i| qs[i as usize]);
            let sorted = |v: &[u64]| -> Vec<u64> { order.par_iter().map(|&i| v[i as usize]).collect() };
            let sq = sorted(&qs);
            let mut refs = vec![0u32; m];
            let mut hits = vec![Hit::default(); m];
            let mut leaf_step = |qs: &[u64]| {
                hb.inner.descend_cpu(qs, &mut refs);
                let rate = m as f64 / median_secs(args.reps, || leaf_step_par(&hb.leaves, &refs, qs, &mut hits));
                assert!(hits.iter().zip(qs).all(|(h, q)| h.value == Some(q ^ 1)), "HB+-tree answers wrong");
                rate
            };
            let mut row =
                vec![size_label(n), size_label(m), format!("{:.0} GB/s", stream / 1e9), rate(leaf_step(&qs)), rate(leaf_step(&sq))];
            for pgm in &models {
                let ps: Vec<u64> = qs.par_iter().map(|&q| pgm.predict_position(q) as u64).collect();
                let mut out = vec![0u64; m];
                let mut last_mile = |qs: &[u64], ps: &[u64]| {
                    let rate = m as f64 / median_secs(args.reps, || pgm.last_mile(&keys, qs, ps, &mut out));
                    assert!(out.iter().zip(qs).all(|(&p, &q)| keys[p as usize] == q), "PGM answers wrong");
                    rate
                };
                let (random, in_order) = (last_mile(&qs, &ps), last_mile(&sq, &sorted(&ps)));
                // `out` holds the sorted batch's answers: each to its
                // query's slot (a random write a query).
                let mut back = vec![0u64; m];
                let scatter = m as f64
                    / median_secs(args.reps, || {
                        let at = back.as_mut_ptr() as usize;
                        order.par_chunks(1 << 14).zip(out.par_chunks(1 << 14)).for_each(|(o, a)| {
                            for (&i, &p) in o.iter().zip(a) {
                                // SAFETY: `order` is a permutation of 0..m:
                                // each slot of `back` is written once.
                                unsafe { *(at as *mut u64).add(i as usize) = p };
                            }
                        });
                    });
                assert!(back.iter().zip(&qs).all(|(&p, &q)| keys[p as usize] == q), "scatter wrong");
                row.extend([rate(random), rate(in_order), rate(scatter)]);
            }
            rows.push(row);
        }
    }
    table(
        "Keys in host memory, the host's side alone (all cores), present-key queries: queries/s",
        &[
            "n",
            "batch",
            "stream read of the keys",
            "HB+ leaf step",
            "HB+ leaf step, queries sorted",
            "PGM ε 16 last mile",
            "ε 16, in predicted order",
            "ε 16, sorted answers scattered back",
            "PGM ε 64 last mile",
            "ε 64, in predicted order",
            "ε 64, scattered back",
        ],
        &rows,
    );
}

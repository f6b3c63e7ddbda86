//! Sorting a batch's matches into heap order: rayon's parallel comparison
//! sort (what the join and the batch functions did) against
//! `heap_order::sort` (packed codes radix-sorted on all threads; the
//! comparison sort below 2^17 matches a thread). Matches as an index walk
//! gives them: (TID, row) of a 10^7-row table (54,000 heap pages), each
//! row's TIDs ascending ("by key": 131,072 runs, a Zipf-like join's
//! matches), as a Zipf-like join's walk gives them ("Zipf": a few long
//! runs, many of one), or in random order ("random"). Every result is checked
//! against the comparison sort's. Also rayon's merge sort (which finds
//! sorted runs). For the walks' orders, whose ties (one TID's rows) come
//! in ascending order, also `heap_order::sort_by_tid` (the TIDs alone
//! sorted as codes), and the same as codes at any size.

use crate::util::*;
use crate::Args;
use gpuindex_engine::heap_order;
use gpuindex_engine::rng::SplitMix64;
use rayon::prelude::*;
use std::time::Instant;

fn median_ms(reps: usize, input: &[(u64, u32)], f: impl Fn(&mut Vec<(u64, u32)>)) -> (f64, Vec<(u64, u32)>) {
    let mut t = Vec::new();
    let mut out = Vec::new();
    for _ in 0..reps.max(1) {
        let mut v = input.to_vec();
        let s = Instant::now();
        f(&mut v);
        t.push(s.elapsed().as_secs_f64() * 1e3);
        out = v;
    }
    t.sort_by(|a, b| a.total_cmp(b));
    (t[t.len() / 2], out)
}

pub fn run(args: &Args) {
    let ns = if args.batch_given { args.batch.clone() } else { vec![100_000, 1_000_000, 4_000_000] };
    let mut rows = Vec::new();
    for &n in &ns {
        let mut r = SplitMix64::new(9);
        let tid = |r: &mut SplitMix64| r.below(54_000) << 16 | (1 + r.below(185));
        let random: Vec<(u64, u32)> = (0..n).map(|_| (tid(&mut r), r.below(131_072) as u32)).collect();
        let mut by_key: Vec<(u64, u32)> = (0..n).map(|i| (tid(&mut r), (i * 131_072 / n) as u32)).collect();
        by_key.par_chunk_by_mut(|a, b| a.1 == b.1).for_each(|c| c.sort_unstable());
        let zipf = zipf_runs(n, &mut r, tid);
        for (name, input) in [("by key", &by_key), ("Zipf", &zipf), ("random", &random)] {
            let (old, want) = median_ms(args.reps, input, |v| v.par_sort_unstable());
            let (new, got) = median_ms(args.reps, input, |v| heap_order::sort(v));
            assert!(got == want, "heap_order::sort differs from the comparison sort");
            let (merge, got) = median_ms(args.reps, input, |v| v.par_sort());
            assert!(got == want, "the merge sort differs from the comparison sort");
            let mut row =
                vec![size_label(n), name.into(), format!("{old:.2}"), format!("{merge:.2}"), format!("{new:.2}"), ratio(old, new)];
            if name != "random" {
                let (t, got) = median_ms(args.reps, input, |v| heap_order::sort_by_tid(v));
                assert!(got == want, "heap_order::sort_by_tid differs from the comparison sort");
                let (codes, got) = median_ms(args.reps, input, |v| heap_order::sort_as(v, 0, true));
                assert!(got == want, "codes by TID differ from the comparison sort");
                row.extend([format!("{t:.2} ({})", ratio(new, t)), format!("{codes:.2} ({})", ratio(old, codes))]);
            } else {
                row.extend(["-".into(), "-".into()]);
            }
            rows.push(row);
        }
    }
    table(
        "Matches into heap order (ms, medians)",
        &[
            "matches",
            "order",
            "par_sort_unstable",
            "par_sort (merges runs)",
            "heap_order::sort",
            "speed-up",
            "sort_by_tid (vs sort)",
            "codes by TID at any size (vs par_sort_unstable)",
        ],
        &rows,
    );
}

/// `n` matches as a Zipf-like join's index walk gives them: 131,072 keys
/// in a random order, the i-th most frequent holding about i^-1.2 of the
/// rows (the largest ~a fifth), each key's TIDs ascending.
fn zipf_runs(n: usize, r: &mut SplitMix64, tid: impl Fn(&mut SplitMix64) -> u64) -> Vec<(u64, u32)> {
    let keys = 131_072usize;
    let weight: Vec<f64> = (1..=keys).map(|i| (i as f64).powf(-1.2)).collect();
    let total: f64 = weight.iter().sum();
    let mut order: Vec<usize> = (0..keys).collect();
    r.shuffle(&mut order);
    let mut out = Vec::with_capacity(n);
    for (row, &rank) in order.iter().enumerate() {
        let len = ((weight[rank] / total * n as f64) as usize).max(1);
        let start = out.len();
        out.extend((0..len).map(|_| (tid(r), row as u32)));
        out[start..].sort_unstable();
    }
    out
}

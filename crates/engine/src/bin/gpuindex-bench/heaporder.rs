//! Sorting a batch's matches into heap order: rayon's parallel comparison
//! sort (what the join and the batch functions did) against
//! `heap_order::sort` (packed codes radix-sorted on all threads; the
//! comparison sort below 2^17 matches a thread). Matches as an index walk
//! gives them: (TID, row) of a 10^7-row table (54,000 heap pages), each
//! row's TIDs ascending ("by key": 131,072 runs, a Zipf-like join's
//! matches), or in random order ("random"). Every result is checked
//! against the comparison sort's. For "by key", whose ties (one TID's
//! rows) come in ascending order, also `heap_order::sort_by_tid` (the
//! TIDs alone sorted as codes).

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
        for (name, input) in [("by key", &by_key), ("random", &random)] {
            let (old, want) = median_ms(args.reps, input, |v| v.par_sort_unstable());
            let (new, got) = median_ms(args.reps, input, |v| heap_order::sort(v));
            assert!(got == want, "heap_order::sort differs from the comparison sort");
            let by_tid = if name == "by key" {
                let (t, got) = median_ms(args.reps, input, |v| heap_order::sort_by_tid(v));
                assert!(got == want, "heap_order::sort_by_tid differs from the comparison sort");
                format!("{t:.2} ({})", ratio(new, t))
            } else {
                "-".into()
            };
            rows.push(vec![size_label(n), name.into(), format!("{old:.2}"), format!("{new:.2}"), ratio(old, new), by_tid]);
        }
    }
    table(
        "Matches into heap order (ms, medians)",
        &["matches", "order", "par_sort_unstable", "heap_order::sort", "speed-up", "sort_by_tid (vs sort)"],
        &rows,
    );
}

//! HB+-tree (implicit and regular) against the CPU-only tree built from the
//! same pieces and against the GPU sorted-array floor; bucket size and
//! schedule sweep; update batches with both mirror-sync methods.

use crate::util::*;
use crate::Args;
use gpuindex_engine::gpu::{Gpu, Schedule};
use gpuindex_engine::hbtree::implicit::{Hit, ImplicitTree};
use gpuindex_engine::hbtree::regular::{MirrorSync, RegularTree, Update};
use gpuindex_engine::rng::SplitMix64;
use gpuindex_engine::sorted_array::{GpuSearch, SortedKeys};
use std::time::Instant;

/// The paper's workload: every query hits, in random order.
fn hit_queries(keys: &[u64], m: usize, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    (0..m).map(|_| keys[rng.below(keys.len() as u64) as usize]).collect()
}

fn secs(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

pub fn run(args: &Args, gpu: Option<&Gpu>) {
    let ns = if args.n_given { args.n.clone() } else { (23..=28).map(|e| 1usize << e).collect() };
    let m = if args.batch_given { *args.batch.iter().max().unwrap() } else { 1 << 24 };
    let sched = Schedule::default();
    let mut rows = Vec::new();
    let mut sizes = Vec::new();
    let sweep_n = *ns.iter().filter(|&&n| n <= 1 << 26).max().unwrap_or(&ns[0]);
    for &n in &ns {
        let keys = unique_keys(n, 1);
        let values: Vec<u64> = keys.iter().map(|k| k.wrapping_mul(0x9E37_79B9)).collect();
        let qs = hit_queries(&keys, m, 2);
        let mut build = [0f64; 2];
        let mut imp = None;
        build[0] = secs(|| imp = Some(ImplicitTree::build(&keys, &values).unwrap()));
        let imp = imp.unwrap();
        let mut reg = None;
        build[1] = secs(|| reg = Some(RegularTree::bulk_load(&keys, &values, 256, 64)));
        let mut reg = reg.unwrap();
        let want: Vec<u64> = qs.iter().map(|q| q.wrapping_mul(0x9E37_79B9)).collect();
        let mut hits = vec![Hit::default(); m];
        let cpu_imp = m as f64 / median_secs(args.reps, || imp.search_cpu(&qs, &mut hits));
        assert!(hits.iter().zip(&want).all(|(h, w)| h.value == Some(*w)), "implicit CPU answers wrong");
        let mut vals = vec![None; m];
        let cpu_reg = m as f64 / median_secs(args.reps, || reg.search_cpu(&qs, &mut vals));
        assert!(vals.iter().zip(&want).all(|(v, w)| *v == Some(*w)), "regular CPU answers wrong");
        let (mut hb_imp, mut hb_reg, mut inner_dev, mut floor_dev, mut floor_xfer) = (f64::NAN, f64::NAN, f64::NAN, f64::NAN, f64::NAN);
        if let Some(g) = gpu {
            let mut got = vec![Hit::default(); m];
            hb_imp = m as f64 / median_secs(args.reps, || imp.search_gpu(g, &qs, &mut got, sched).expect("hb implicit"));
            assert!(got == hits, "HB+ implicit != CPU");
            reg.upload(g).expect("upload regular");
            let mut got = vec![None; m];
            hb_reg = m as f64 / median_secs(args.reps, || reg.search_gpu(g, &qs, &mut got, sched).expect("hb regular"));
            assert!(got == vals, "HB+ regular != CPU");
            // The implicit inner search alone, queries and answers on the device.
            let dq = g.upload(&qs).unwrap();
            let dout = g.alloc::<u32>(m).unwrap();
            let stream = g.new_stream().unwrap();
            inner_dev = m as f64
                / median_device_secs(g, &stream, args.reps, || imp.inner.launch_descend(g, &stream, dq.ptr(), dout.ptr(), m)).unwrap();
            // The floor: sorted array, sampled binary search.
            let sk = SortedKeys::new(keys.clone()).unwrap();
            let dpos = g.alloc::<u64>(m).unwrap();
            floor_dev = m as f64
                / median_device_secs(g, &stream, args.reps, || sk.launch(g, &stream, GpuSearch::Sampled, dq.ptr(), dpos.ptr(), m)).unwrap();
            let mut pos = vec![0u64; m];
            floor_xfer = m as f64 / median_secs(args.reps, || sk.lower_bound_gpu(g, &qs, &mut pos, GpuSearch::Sampled, sched).unwrap());
            if n == sweep_n {
                bucket_sweep(g, &imp, &reg, &qs, &hits, &vals, args.reps);
            }
        }
        let (ii, il) = imp.sizes();
        let (ri, rl) = reg.sizes();
        sizes.push(vec![
            size_label(n),
            format!("{:.1}", ii as f64 / 1048576.0),
            format!("{:.0}", il as f64 / 1048576.0),
            format!("{:.2}", build[0]),
            format!("{:.1}", ri as f64 / 1048576.0),
            format!("{:.0}", rl as f64 / 1048576.0),
            format!("{:.2}", build[1]),
            format!("{}", reg.height()),
        ]);
        rows.push(vec![
            size_label(n),
            rate(cpu_imp),
            rate(hb_imp),
            ratio(hb_imp, cpu_imp),
            rate(cpu_reg),
            rate(hb_reg),
            ratio(hb_reg, cpu_reg),
            rate(inner_dev),
            rate(floor_dev),
            rate(floor_xfer),
        ]);
        if n == sweep_n {
            update_batches(gpu, &mut reg, &keys, args.reps);
        }
    }
    table(
        &format!("HB+-tree lookups, u64 keys and values, batch of {m} hits in random order: queries/s"),
        &[
            "n keys",
            "CPU implicit tree",
            "HB+ implicit",
            "HB+/CPU",
            "CPU regular tree",
            "HB+ regular",
            "HB+/CPU",
            "GPU inner search only (on device)",
            "GPU floor, sorted array (on device)",
            "GPU floor incl. transfers",
        ],
        &rows,
    );
    println!("\n(CPU trees: all cores, groups of 16 queries per thread with prefetching. HB+: the GPU walks the inner");
    println!(
        "levels, the CPU searches the leaves on all cores; transfers included, buckets of {} with {} in flight.)",
        sched.chunk, sched.in_flight
    );
    table(
        "Sizes (MiB) and bulk-build times (s)",
        &[
            "n keys",
            "implicit I-seg",
            "implicit L-seg",
            "implicit build",
            "regular I-seg",
            "regular L-seg",
            "regular build",
            "regular height",
        ],
        &sizes,
    );
}

/// Bucket size and schedule (sequential / double-buffered / 3 in flight).
fn bucket_sweep(g: &Gpu, imp: &ImplicitTree, reg: &RegularTree, qs: &[u64], hits: &[Hit], vals: &[Option<u64>], reps: usize) {
    let mut rows = Vec::new();
    for chunk in [1usize << 13, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22] {
        let mut row = vec![format!("{chunk}")];
        for in_flight in [1, 2, 3] {
            let s = Schedule { chunk, in_flight };
            let mut got = vec![Hit::default(); qs.len()];
            let r = qs.len() as f64 / median_secs(reps, || imp.search_gpu(g, qs, &mut got, s).unwrap());
            assert!(got == hits);
            row.push(rate(r));
        }
        for in_flight in [1, 2] {
            let s = Schedule { chunk, in_flight };
            let mut got = vec![None; qs.len()];
            let r = qs.len() as f64 / median_secs(reps, || reg.search_gpu(g, qs, &mut got, s).unwrap());
            assert!(got == vals);
            row.push(rate(r));
        }
        rows.push(row);
    }
    table(
        &format!("HB+ bucket size and schedule, n = {}, queries/s", imp.len()),
        &[
            "bucket",
            "implicit sequential",
            "implicit double-buffered",
            "implicit 3 in flight",
            "regular sequential",
            "regular double-buffered",
        ],
        &rows,
    );
}

/// Batches of inserts and deletes into the regular tree, each applied
/// sequentially with per-node mirror copies and in parallel with a
/// whole-segment copy.
fn update_batches(gpu: Option<&Gpu>, reg: &mut RegularTree, keys: &[u64], reps: usize) {
    let Some(g) = gpu else { return };
    let mut rng = SplitMix64::new(3);
    let mut rows = Vec::new();
    for b in [1usize << 10, 1 << 14, 1 << 16, 1 << 17, 1 << 18, 1 << 20] {
        let mut row = vec![format!("{b}")];
        for parallel in [false, true] {
            reg.parallel_threshold = if parallel { 1 } else { usize::MAX };
            let mut times = Vec::new();
            let mut report = MirrorSync::None;
            for _ in 0..reps.clamp(1, 3) {
                // half inserts of new keys (odd: the base keys are spaced), half deletes of present ones
                let ups: Vec<Update> = (0..b)
                    .map(|i| {
                        let k = keys[rng.below(keys.len() as u64) as usize];
                        if i % 2 == 0 {
                            Update::Insert(k ^ 1, k)
                        } else {
                            Update::Delete(k)
                        }
                    })
                    .collect();
                let t = Instant::now();
                report = reg.apply(&ups, Some(g)).unwrap();
                times.push(t.elapsed().as_secs_f64());
            }
            times.sort_by(|a, b| a.total_cmp(b));
            row.push(format!("{:.2} ms", times[times.len() / 2] * 1e3));
            row.push(match report {
                MirrorSync::PerNode { nodes } => format!("{nodes} nodes"),
                MirrorSync::WholeSegment { bytes } => format!("{} MiB", bytes >> 20),
                MirrorSync::None => "-".into(),
            });
        }
        rows.push(row);
    }
    reg.check().expect("regular tree invariants after the update batches");
    table(
        &format!("Regular HB+ update batches (n = {}), applied and mirrored: time per batch", keys.len()),
        &["batch", "sequential + per-node copies", "copied", "parallel + whole segment", "copied"],
        &rows,
    );
}

/// Where HB+'s time goes: the CPU leaf step alone (prefetch distance and
/// task size swept), and the GPU side alone (inner search with transfers,
/// no leaf step).
pub fn leafstep(args: &Args, gpu: Option<&Gpu>) {
    use gpuindex_engine::hbtree::leaf::leaf_step_par_tuned;
    let ns = if args.n_given { args.n.clone() } else { vec![1 << 23, 1 << 28] };
    let m = 1 << 24;
    let mut rows = Vec::new();
    for &n in &ns {
        let keys = unique_keys(n, 1);
        let values: Vec<u64> = keys.iter().map(|k| k.wrapping_mul(0x9E37_79B9)).collect();
        let imp = ImplicitTree::build(&keys, &values).unwrap();
        let qs = hit_queries(&keys, m, 2);
        let mut refs = vec![0u32; m];
        imp.inner.descend_cpu(&qs, &mut refs);
        let mut out = vec![Hit::default(); m];
        let mut row = vec![size_label(n)];
        for (ahead, piece) in [(0, 1024), (8, 1024), (16, 1024), (32, 1024), (64, 1024), (32, 16384)] {
            let r = m as f64 / median_secs(args.reps, || leaf_step_par_tuned(&imp.leaves, &refs, &qs, &mut out, ahead, piece));
            row.push(rate(r));
        }
        let gpu_only =
            gpu.map(|g| m as f64 / median_secs(args.reps, || imp.inner.descend_gpu(g, &qs, Schedule::default(), |_, _| {}).unwrap()));
        row.push(rate(gpu_only.unwrap_or(f64::NAN)));
        rows.push(row);
    }
    table(
        "HB+ implicit: CPU leaf step alone (queries/s, all cores) and GPU side alone",
        &[
            "n keys",
            "no prefetch",
            "ahead 8",
            "ahead 16",
            "ahead 32",
            "ahead 64",
            "ahead 32, 16K per task",
            "GPU inner + transfers, no leaf step",
        ],
        &rows,
    );
}

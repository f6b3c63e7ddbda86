//! The G-Learned index (PGM on the GPU) against the sorted-array floor (the
//! same keys, sampled binary search on the GPU; binary search on all
//! cores) and, with the keys in host memory, the HB+-tree: lookups/s with
//! the keys on the device (kernel time, queries and answers on the device;
//! and end to end through the pinned pipeline) and with the keys on the
//! host (the GPU predicts, the host finishes, end to end). Every answer is
//! checked against binary search.
//!
//! Key sets: "gaps" (ascending, random gaps < 2^12, some duplicates),
//! "uniform" (random u64), "sequential" (timestamps a millisecond apart),
//! "zipf" (heavy duplicates), and with `--set` the real-shaped int8 sets
//! ("int8-uniform", "int8-zipf", "int8-timestamps", "int8-random");
//! queries: half present keys, half uniform over the key range.

use crate::util::*;
use crate::Args;
use gpuindex_engine::datasets::KeySet;
use gpuindex_engine::gpu::{Gpu, Schedule};
use gpuindex_engine::hbtree::implicit::{Hit, ImplicitTree};
use gpuindex_engine::pgm::gpu::{build_gpu as build_gpu_chunks, choose, lower_bound_gpu, DevicePgm, Strategy, GPU_CHUNK};
use gpuindex_engine::pgm::{Pgm, DEFAULT_EPS_INNER};
use gpuindex_engine::rng::SplitMix64;
use gpuindex_engine::sorted_array::{GpuSearch, SortedKeys};
use std::time::Instant;

/// The bottom ε of the keys-on-host comparison.
const HOST_EPS: usize = 16;

fn key_set(name: &str, n: usize) -> Vec<u64> {
    let mut r = SplitMix64::new(17);
    let mut keys: Vec<u64> = match name {
        "gaps" => return sorted_keys(n, 42),
        "uniform" => (0..n).map(|_| r.next_u64()).collect(),
        "sequential" => return (0..n as u64).map(|i| 1_700_000_000_000 + i).collect(),
        "zipf" => (0..n).map(|_| (n as u64) / (1 + r.below(n as u64))).collect(),
        // The real-shaped int8 sets (datasets::KeySet, as the SQL benches
        // and tests use them), in SQL's order-preserving encoding.
        other => match other.strip_prefix("int8-").and_then(KeySet::parse) {
            Some(set) => set.keys(n, 1).into_iter().map(|k| (k as u64) ^ (1 << 63)).collect(),
            None => {
                panic!("unknown key set {other} (gaps, uniform, sequential, zipf, int8-uniform, int8-zipf, int8-timestamps, int8-random)")
            }
        },
    };
    keys.par_sort_unstable();
    keys
}

use rayon::prelude::*;

fn build_gpu(
    g: &Gpu,
    keys: &[u64],
    dk: Option<&gpuindex_engine::gpu::DeviceBuffer<u64>>,
    eps: usize,
    inner: usize,
) -> Result<Pgm, gpuindex_engine::gpu::GpuError> {
    build_gpu_chunks(g, keys, dk, eps, inner, GPU_CHUNK)
}

fn check(what: &str, want: &[u64], got: &[u64]) {
    if let Some(i) = want.iter().zip(got).position(|(a, b)| a != b) {
        eprintln!("MISMATCH in {what} at query {i}: binary search {} got {}", want[i], got[i]);
        std::process::exit(1);
    }
}

pub fn run(args: &Args, gpu: Option<&Gpu>) {
    let ns = if args.n_given { args.n.clone() } else { vec![10_000_000, 100_000_000] };
    let m = if args.batch_given { *args.batch.iter().max().unwrap() } else { 10_000_000 };
    let sets: Vec<String> = args.set.as_deref().unwrap_or("gaps,uniform,sequential,zipf").split(',').map(String::from).collect();
    let mut rows = Vec::new();
    let mut models = Vec::new();
    for set in &sets {
        for &n in &ns {
            let keys = key_set(set, n);
            let qs = queries(&keys, m, 7);
            let sk = SortedKeys::new(keys).expect("sorted");
            let keys = sk.keys();
            let mut want = vec![0u64; m];
            let floor_cpu = m as f64 / median_secs(args.reps, || sk.lower_bound_cpu(&qs, &mut want));
            let dkeys = gpu.map(|g| g.upload(keys).expect("upload"));
            for eps in [16usize, 64, 128] {
                let t = Instant::now();
                let pgm = Pgm::build(keys, eps, DEFAULT_EPS_INNER);
                let build = t.elapsed().as_secs_f64();
                let mut model = vec![
                    set.clone(),
                    size_label(n),
                    eps.to_string(),
                    format!("{build:.3}"),
                    pgm.levels.iter().map(|l| l.len.to_string()).collect::<Vec<_>>().join(" / "),
                    format!("{:.1} KiB", pgm.bytes() as f64 / 1024.0),
                    format!("{:.3}%", 100.0 * pgm.bytes() as f64 / (n * 8) as f64),
                ];
                if let (Some(g), Some(dk)) = (gpu, &dkeys) {
                    // The GPU build (chunks of GPU_CHUNK keys, one thread
                    // each), checked against the CPU's build of the same
                    // chunks; timed with the keys on the device, and with
                    // their upload.
                    let gpu_model = build_gpu(g, keys, Some(dk), eps, DEFAULT_EPS_INNER).expect("GPU build");
                    let cpu_same = Pgm::build_chunked(keys, eps, DEFAULT_EPS_INNER, GPU_CHUNK);
                    let same = gpu_model.first == cpu_same.first
                        && gpu_model.slope.iter().zip(&cpu_same.slope).all(|(a, b)| a.to_bits() == b.to_bits())
                        && gpu_model.intercept.iter().zip(&cpu_same.intercept).all(|(a, b)| a.to_bits() == b.to_bits());
                    if !same {
                        eprintln!("MISMATCH: the GPU build differs from the CPU's chunked build ({set}, {n}, eps {eps})");
                        std::process::exit(1);
                    }
                    let on_device = median_secs(args.reps, || drop(build_gpu(g, keys, Some(dk), eps, DEFAULT_EPS_INNER)));
                    let with_upload = median_secs(args.reps, || drop(build_gpu(g, keys, None, eps, DEFAULT_EPS_INNER)));
                    model.extend([
                        format!("{on_device:.3}"),
                        format!("{with_upload:.3}"),
                        ratio(build, on_device),
                        gpu_model.levels[0].len.to_string(),
                    ]);
                }
                models.push(model);
                let mut got = vec![0u64; m];
                let cpu = m as f64 / median_secs(args.reps, || pgm.lower_bound_cpu(keys, &qs, &mut got));
                check("PGM CPU", &want, &got);
                let mut row = vec![set.clone(), size_label(n), eps.to_string(), rate(floor_cpu), rate(cpu)];
                if let Some(g) = gpu {
                    let sched = Schedule { chunk: m.min(1 << 20), in_flight: 3 };
                    // Keys on the device: kernel time, then end to end.
                    let dev = DevicePgm::upload(g, &pgm, Some(keys)).expect("upload");
                    let strategy = choose(g, &pgm, &dev, keys, &qs[..m.min(1 << 16)]).expect("choose");
                    let dq = g.upload(&qs).unwrap();
                    let dout = g.alloc::<u64>(m).unwrap();
                    let stream = g.new_stream().unwrap();
                    let mut on_device = Vec::new();
                    for s in Strategy::ALL {
                        let secs =
                            median_device_secs(g, &stream, args.reps, || dev.launch(g, &pgm, &stream, s, dq.ptr(), dout.ptr(), m)).unwrap();
                        check(&format!("PGM {s:?} on device"), &want, &dout.download().unwrap());
                        on_device.push(m as f64 / secs);
                    }
                    let floor_dev = m as f64
                        / median_device_secs(g, &stream, args.reps, || sk.launch(g, &stream, GpuSearch::Sampled, dq.ptr(), dout.ptr(), m))
                            .unwrap();
                    let e2e =
                        m as f64 / median_secs(args.reps, || lower_bound_gpu(g, &pgm, &dev, keys, &qs, &mut got, strategy, sched).unwrap());
                    check("PGM keys on device, pipeline", &want, &got);
                    let floor_e2e =
                        m as f64 / median_secs(args.reps, || sk.lower_bound_gpu(g, &qs, &mut got, GpuSearch::Sampled, sched).unwrap());
                    check("floor pipeline", &want, &got);
                    drop(dev);
                    // Keys on the host: the GPU predicts, the host finishes.
                    let host = DevicePgm::upload(g, &pgm, None).expect("upload");
                    let strategy_h = choose(g, &pgm, &host, keys, &qs[..m.min(1 << 16)]).expect("choose");
                    let hosted = m as f64
                        / median_secs(args.reps, || lower_bound_gpu(g, &pgm, &host, keys, &qs, &mut got, strategy_h, sched).unwrap());
                    check("PGM keys on host", &want, &got);
                    let staged = |s: Strategy, r: f64| if s.staged_from(&pgm) < pgm.first.len() { rate(r) } else { "-".into() };
                    let best = on_device.iter().copied().fold(0.0, f64::max);
                    row.extend([
                        rate(floor_dev),
                        rate(on_device[0]),
                        rate(on_device[1]),
                        staged(Strategy::CompleteStaged, on_device[2]),
                        staged(Strategy::ConciseStaged, on_device[3]),
                        ratio(best, floor_dev),
                        rate(floor_e2e),
                        rate(e2e),
                        rate(hosted),
                        format!("{strategy:?} / {strategy_h:?}"),
                    ]);
                }
                rows.push(row);
            }
        }
    }
    table(
        "G-Learned models (bottom ε as given, inner ε 4; built on all cores, chunks of 2^20 keys; on the GPU, chunks of 2^16, one thread each, equal to the CPU's build of those chunks)",
        &[
            "keys",
            "n",
            "ε",
            "build, all cores (s)",
            "segments per level, bottom first",
            "model",
            "model / keys",
            "GPU build, keys on device (s)",
            "GPU build with the keys' upload (s)",
            "GPU build speed-up over all cores (keys on device)",
            "GPU bottom segments",
        ],
        &models,
    );
    table(
        &format!("Lower bounds, {m:.0e} queries (half present keys): queries/s; every answer checked against binary search"),
        &[
            "keys",
            "n",
            "ε",
            "binary search, all cores",
            "PGM, all cores",
            "floor GPU on device",
            "PGM GPU complete, on device",
            "PGM GPU concise, on device",
            "complete, staged in shared memory",
            "concise, staged",
            "PGM best / floor, on device",
            "floor GPU end to end",
            "PGM GPU end to end",
            "PGM GPU, keys on host (GPU predicts, host finishes)",
            "chosen (device / host keys)",
        ],
        &rows,
    );
    if let Some(g) = gpu {
        hb_compare(g, &ns, m, args.reps);
    }
    println!("\n(\"on device\": queries and answers in GPU memory, kernel time by CUDA events; \"end to end\": pageable host");
    println!("queries to host answers through the pinned pipeline, chunks of min(batch, 2^20), 3 in flight.)");
}

/// Keys in host memory: PGM (the GPU predicts, the host finishes) against
/// the HB+-tree (inner nodes on the GPU, leaves on the host), unique keys,
/// every query a present key (the HB+-tree's workload).
fn hb_compare(g: &Gpu, ns: &[usize], m: usize, reps: usize) {
    let mut rows = Vec::new();
    for &n in ns {
        let keys = unique_keys(n, 3);
        let mut r = SplitMix64::new(4);
        let qs: Vec<u64> = (0..m).map(|_| keys[r.below(n as u64) as usize]).collect();
        let sched = Schedule::default();
        let values: Vec<u64> = keys.iter().map(|k| k ^ 1).collect();
        let hb = ImplicitTree::build(&keys, &values).expect("sorted");
        let mut hits = vec![Hit::default(); m];
        let hb_rate = m as f64 / median_secs(reps, || hb.search_gpu(g, &qs, &mut hits, sched).expect("hb"));
        assert!(hits.iter().zip(&qs).all(|(h, q)| h.value == Some(q ^ 1)), "HB+-tree answers wrong");
        drop(hb);
        // A small bottom ε: the host's windows are then a few cache lines.
        let pgm = Pgm::build(&keys, HOST_EPS, DEFAULT_EPS_INNER);
        let host = DevicePgm::upload(g, &pgm, None).expect("upload");
        let mut pos = vec![0u64; m];
        let pgm_rate =
            m as f64 / median_secs(reps, || lower_bound_gpu(g, &pgm, &host, &keys, &qs, &mut pos, Strategy::Complete, sched).unwrap());
        assert!(pos.iter().zip(&qs).all(|(&p, &q)| keys[p as usize] == q), "PGM answers wrong");
        rows.push(vec![size_label(n), rate(hb_rate), rate(pgm_rate), ratio(pgm_rate, hb_rate)]);
    }
    table(
        &format!("Keys in host memory, unique keys, {m:.0e} present-key queries, end to end: lookups/s"),
        &["n", "HB+-tree (implicit)", "PGM ε 16 (GPU predicts, host finishes)", "PGM / HB+"],
        &rows,
    );
}

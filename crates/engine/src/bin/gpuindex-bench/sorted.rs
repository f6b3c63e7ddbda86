//! Sorted-array lower bound: CPU (all cores) vs GPU, transfers excluded
//! (queries and results on the device) and included (pinned pipeline).

use crate::util::*;
use crate::Args;
use gpuindex_engine::gpu::{Gpu, GpuError, Schedule};
use gpuindex_engine::sorted_array::{GpuSearch, SortedKeys};
use std::time::Instant;

fn check(what: &str, want: &[u64], got: &[u64]) {
    if let Some(i) = want.iter().zip(got).position(|(a, b)| a != b) {
        eprintln!("MISMATCH in {what} at query {i}: CPU {} GPU {}", want[i], got[i]);
        std::process::exit(1);
    }
    assert_eq!(want.len(), got.len(), "{what}: length");
}

/// On-device q/s of one variant (queries and outputs already on the device).
fn device_rate(gpu: &Gpu, sk: &SortedKeys, v: GpuSearch, qs: &[u64], want: &[u64], reps: usize) -> Result<f64, GpuError> {
    let dq = gpu.upload(qs)?;
    let dout = gpu.alloc::<u64>(qs.len())?;
    let stream = gpu.new_stream()?;
    let secs = median_device_secs(gpu, &stream, reps, || sk.launch(gpu, &stream, v, dq.ptr(), dout.ptr(), qs.len()))?;
    check(&format!("{v:?} on device"), want, &dout.download()?);
    Ok(qs.len() as f64 / secs)
}

pub fn run(args: &Args, gpu: Option<&Gpu>) {
    let mut rows = Vec::new();
    let mut sweep_input = None;
    for &n in &args.n {
        let t = Instant::now();
        let sk = SortedKeys::new(sorted_keys(n, 42)).expect("sorted");
        let gen = t.elapsed().as_secs_f64();
        let upload = gpu.map(|g| {
            let t = Instant::now();
            let img = sk.device_image(g).expect("upload");
            (t.elapsed().as_secs_f64() * 1e3, img.bytes())
        });
        eprintln!(
            "n = {n}: keys generated in {gen:.2} s{}",
            upload.map(|(ms, b)| format!(", device image {} MiB uploaded in {ms:.1} ms", b >> 20)).unwrap_or_default()
        );
        for &m in &args.batch {
            let qs = queries(sk.keys(), m, 7 + m as u64);
            let mut want = vec![0u64; m];
            let cpu = m as f64 / median_secs(args.reps, || sk.lower_bound_cpu(&qs, &mut want));
            let (mut plain, mut split, mut xfer) = (f64::NAN, f64::NAN, f64::NAN);
            if let Some(g) = gpu {
                plain = device_rate(g, &sk, GpuSearch::Plain, &qs, &want, args.reps).expect("gpu plain");
                split = device_rate(g, &sk, GpuSearch::Splitters, &qs, &want, args.reps).expect("gpu splitters");
                let best = if split >= plain { GpuSearch::Splitters } else { GpuSearch::Plain };
                let sched = Schedule { chunk: m.min(1 << 20), in_flight: 2 };
                let mut got = Vec::new();
                xfer = m as f64
                    / median_secs(args.reps, || got = sk.lower_bound_gpu(g, &qs, best, sched).expect("gpu pipeline"));
                check("pipeline", &want, &got);
            }
            let best_dev = plain.max(split);
            rows.push(vec![
                format!("{n:.0e}"),
                format!("{m:.0e}"),
                rate(cpu),
                rate(plain),
                rate(split),
                rate(xfer),
                ratio(best_dev, cpu),
                ratio(xfer, cpu),
            ]);
            if n == *args.n.iter().max().unwrap() && m == *args.batch.iter().max().unwrap() {
                sweep_input = Some((qs, want));
            }
        }
        if let (Some(g), Some((qs, want))) = (gpu, sweep_input.take()) {
            pipeline_sweep(g, &sk, &qs, &want, args.reps);
        }
    }
    table(
        "Sorted u64 array, lower bound: queries/s (median of runs; GPU answers checked against the CPU's)",
        &[
            "n keys",
            "batch",
            "CPU all cores",
            "GPU plain, on device",
            "GPU splitters, on device",
            "GPU incl. transfers",
            "GPU/CPU on device",
            "GPU/CPU incl. transfers",
        ],
        &rows,
    );
}

/// Chunk size and chunks in flight for the largest batch, transfers included.
fn pipeline_sweep(gpu: &Gpu, sk: &SortedKeys, qs: &[u64], want: &[u64], reps: usize) {
    let mut rows = Vec::new();
    for chunk in [1usize << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22] {
        let mut row = vec![format!("{chunk}")];
        for in_flight in [1, 2, 3] {
            let sched = Schedule { chunk, in_flight };
            let mut got = Vec::new();
            let secs = median_secs(reps, || {
                got = sk.lower_bound_gpu(gpu, qs, GpuSearch::Splitters, sched).expect("gpu pipeline")
            });
            check("pipeline sweep", want, &got);
            row.push(rate(qs.len() as f64 / secs));
        }
        rows.push(row);
    }
    table(
        &format!("Pipeline schedule, n = {:.0e}, batch = {:.0e}, transfers included: queries/s", sk.len() as f64, qs.len() as f64),
        &["chunk", "sequential (1 in flight)", "double-buffered (2)", "3 in flight"],
        &rows,
    );
}

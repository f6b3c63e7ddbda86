//! Sorted-array lower bound: CPU (all cores) vs GPU, transfers excluded
//! (queries and results on the device) and included (pinned pipeline).

use crate::util::*;
use crate::Args;
use gpuindex_engine::gpu::{Gpu, GpuError, Schedule};
use gpuindex_engine::sorted_array::{GpuSearch, SortedKeys};
use std::time::Instant;

fn check(what: &str, want: &[u64], got: &[u64]) {
    assert_eq!(want.len(), got.len(), "{what}: length");
    if let Some(i) = want.iter().zip(got).position(|(a, b)| a != b) {
        eprintln!("MISMATCH in {what} at query {i}: CPU {} GPU {}", want[i], got[i]);
        std::process::exit(1);
    }
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

/// Transfers-included q/s: pageable queries in, results into a reused buffer.
fn pipeline_rate(gpu: &Gpu, sk: &SortedKeys, v: GpuSearch, s: Schedule, qs: &[u64], want: &[u64], reps: usize) -> f64 {
    let mut got = vec![0u64; qs.len()];
    let secs = median_secs(reps, || sk.lower_bound_gpu(gpu, qs, &mut got, v, s).expect("gpu pipeline"));
    check(&format!("{v:?} pipeline {s:?}"), want, &got);
    qs.len() as f64 / secs
}

pub fn run(args: &Args, gpu: Option<&Gpu>) {
    let mut rows = Vec::new();
    let n_max = *args.n.iter().max().unwrap();
    let m_max = *args.batch.iter().max().unwrap();
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
            let mut dev = [f64::NAN; 2];
            let mut xfer = f64::NAN;
            if let Some(g) = gpu {
                for (r, v) in dev.iter_mut().zip(GpuSearch::ALL) {
                    *r = device_rate(g, &sk, v, &qs, &want, args.reps).expect("gpu on device");
                }
                let best = GpuSearch::ALL[(0..2).max_by(|&a, &b| dev[a].total_cmp(&dev[b])).unwrap()];
                xfer = pipeline_rate(g, &sk, best, Schedule { chunk: m.min(1 << 20), in_flight: 2 }, &qs, &want, args.reps);
                if n == n_max && m == m_max {
                    sweeps(g, &sk, &qs, &want, args.reps);
                }
            }
            let best_dev = dev.iter().copied().fold(f64::NAN, f64::max);
            let mut row = vec![format!("{n:.0e}"), format!("{m:.0e}"), rate(cpu)];
            row.extend(dev.iter().map(|&r| rate(r)));
            row.extend([rate(xfer), ratio(best_dev, cpu), ratio(xfer, cpu)]);
            rows.push(row);
        }
    }
    table(
        "Sorted u64 array, lower bound: queries/s (median of runs; every GPU answer checked against the CPU's)",
        &[
            "n keys",
            "batch",
            "CPU all cores",
            "GPU plain",
            "GPU sampled",
            "GPU best, incl. transfers",
            "best GPU/CPU on device",
            "GPU/CPU incl. transfers",
        ],
        &rows,
    );
    println!("\n(\"on device\": queries and results in GPU memory, kernel time by CUDA events; \"incl. transfers\":");
    println!("wall time from pageable host queries to host results, pinned double-buffered pipeline, chunks of min(batch, 2^20).)");
}

/// For the largest array and batch: the sample stride, then the pipeline schedule.
fn sweeps(gpu: &Gpu, sk: &SortedKeys, qs: &[u64], want: &[u64], reps: usize) {
    let mut rows = Vec::new();
    for stride in [8usize, 16, 32, 64, 128] {
        let s = SortedKeys::new(sk.keys().to_vec()).unwrap().with_sample_stride(stride);
        let mut row = vec![format!("{stride}")];
        row.push(rate(device_rate(gpu, &s, GpuSearch::Sampled, qs, want, reps).expect("stride sweep")));
        rows.push(row);
    }
    table(
        &format!("Sample stride, n = {:.0e}, batch = {:.0e}, on device: queries/s", sk.len() as f64, qs.len() as f64),
        &["stride", "sampled"],
        &rows,
    );
    let mut rows = Vec::new();
    for chunk in [1usize << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22] {
        let mut row = vec![format!("{chunk}")];
        for in_flight in [1, 2, 3] {
            row.push(rate(pipeline_rate(gpu, sk, GpuSearch::Sampled, Schedule { chunk, in_flight }, qs, want, reps)));
        }
        rows.push(row);
    }
    table(
        &format!("Pipeline schedule, n = {:.0e}, batch = {:.0e}, transfers included: queries/s", sk.len() as f64, qs.len() as f64),
        &["chunk", "sequential (1 in flight)", "double-buffered (2)", "3 in flight"],
        &rows,
    );
}

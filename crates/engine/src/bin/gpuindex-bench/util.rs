//! Timing, data generation and table printing shared by the benchmarks.

use gpuindex_engine::gpu::{Gpu, GpuError};
use gpuindex_engine::rng::SplitMix64;
use std::sync::Arc;

pub use gpuindex_engine::timing::median_secs;

/// Median device time of `reps` runs of `enqueue` on `stream`, timed with
/// CUDA events (one warm-up run first), in seconds.
pub fn median_device_secs(
    gpu: &Gpu,
    stream: &Arc<cudarc::driver::CudaStream>,
    reps: usize,
    mut enqueue: impl FnMut() -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    gpu.guarded(|| {
        let err = gpuindex_engine::gpu::driver_error;
        enqueue()?;
        stream.synchronize().map_err(err("cuStreamSynchronize"))?;
        let ctx = gpu.context();
        let mut t = Vec::with_capacity(reps);
        for _ in 0..reps.max(1) {
            let a = ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(err("cuEventCreate"))?;
            let b = ctx.new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(err("cuEventCreate"))?;
            a.record(stream).map_err(err("cuEventRecord"))?;
            enqueue()?;
            b.record(stream).map_err(err("cuEventRecord"))?;
            b.synchronize().map_err(err("cuEventSynchronize"))?;
            t.push(a.elapsed_ms(&b).map_err(err("cuEventElapsedTime"))? as f64 / 1e3);
        }
        t.sort_by(|a, b| a.total_cmp(b));
        Ok(t[t.len() / 2])
    })
}

/// `n` ascending keys with random gaps (some zero: duplicates), from a random base.
pub fn sorted_keys(n: usize, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    let mut k = rng.below(1 << 40);
    (0..n)
        .map(|_| {
            k += rng.below(1 << 12);
            k
        })
        .collect()
}

/// `n` ascending unique keys with random gaps (1 to 1024), from a random
/// base: the HB+-tree's workload (and the keys-on-host comparisons').
pub fn unique_keys(n: usize, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    let mut k = rng.below(1 << 32);
    (0..n)
        .map(|_| {
            k += 1 + rng.below(1 << 10);
            k
        })
        .collect()
}

/// `m` queries over `keys`: half present keys, half uniform over the key range.
pub fn queries(keys: &[u64], m: usize, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    let (lo, hi) = (keys.first().copied().unwrap_or(0), keys.last().copied().unwrap_or(u64::MAX));
    (0..m)
        .map(|i| if i % 2 == 0 && !keys.is_empty() { keys[rng.below(keys.len() as u64) as usize] } else { lo + rng.below(hi - lo + 1) })
        .collect()
}

/// "1.23e9"-style rate.
pub fn rate(x: f64) -> String {
    if x.is_finite() && x > 0.0 {
        format!("{x:.2e}")
    } else {
        "-".into()
    }
}

pub fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 && a > 0.0 {
        format!("{:.1}x", a / b)
    } else {
        "-".into()
    }
}

/// Prints a Markdown table.
pub fn table(title: &str, header: &[&str], rows: &[Vec<String>]) {
    println!("\n### {title}\n");
    println!("| {} |", header.join(" | "));
    println!("|{}|", header.iter().map(|_| "---:").collect::<Vec<_>>().join("|"));
    for r in rows {
        println!("| {} |", r.join(" | "));
    }
}

/// Parses "1e6,1e7" or "1000000" lists.
pub fn parse_sizes(s: &str) -> Vec<usize> {
    s.split(',').map(|x| x.trim().parse::<f64>().unwrap_or_else(|_| panic!("bad size {x}")) as usize).collect()
}

/// "2^23" for powers of two, "1e7" otherwise.
pub fn size_label(n: usize) -> String {
    if n.is_power_of_two() {
        format!("2^{}", n.trailing_zeros())
    } else {
        format!("{n:.0e}")
    }
}

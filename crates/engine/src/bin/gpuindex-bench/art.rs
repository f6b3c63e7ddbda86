//! CuART (the flat radix tree) against the sorted string array: lookups/s
//! of the tree on the GPU (kernel only, queries and answers on the device;
//! end to end from query records in host memory through the pinned
//! pipeline; and with the records' encoding counted), of the same tree on
//! all cores, of binary search over the sorted keys on all cores and on the
//! GPU (the floor), for root tables of 0 to 3 bytes; and batched value
//! updates on all cores and on the GPU. Every answer is checked against
//! the CPU's binary search (updates: the GPU's tree against the CPU's).
//!
//! Key sets (`--set`, datasets::StringSet): uuid, urls, words, random;
//! queries: half keys of the index, half fresh keys of the same set.

use crate::util::*;
use crate::Args;
use gpuindex_engine::art::gpu::{lookup_gpu, search_gpu, DeviceArt, DeviceSortedStrings, Format, Op, Records, DELETE};
use gpuindex_engine::art::{build, ByteKeys, NOT_FOUND};
use gpuindex_engine::datasets::StringSet;
use gpuindex_engine::gpu::{Gpu, Schedule};
use gpuindex_engine::rng::SplitMix64;
use rayon::prelude::*;
use std::time::Instant;

fn check(what: &str, want: &[u64], got: &[u64]) {
    if let Some(i) = want.iter().zip(got).position(|(a, b)| a != b) {
        eprintln!("MISMATCH in {what} at query {i}: binary search {} got {}", want[i], got[i]);
        std::process::exit(1);
    }
}

fn mib(bytes: usize) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

/// Kernel time of `launch(queries, out)` over records already on the device.
fn kernel_secs(
    g: &Gpu,
    reps: usize,
    recs: &Records,
    launch: impl Fn(&std::sync::Arc<cudarc::driver::CudaStream>, u64, u64) -> Result<(), gpuindex_engine::gpu::GpuError>,
) -> f64 {
    let dq = g.upload(&recs.words).expect("upload queries");
    let dout = g.alloc::<u64>(recs.len()).expect("alloc answers");
    let stream = g.new_stream().expect("stream");
    median_device_secs(g, &stream, reps, || launch(&stream, dq.ptr(), dout.ptr())).expect("kernel")
}

pub fn run(args: &Args, gpu: Option<&Gpu>) {
    let ns = if args.n_given { args.n.clone() } else { vec![10_000_000] };
    let m = if args.batch_given { *args.batch.iter().max().unwrap() } else { 10_000_000 };
    let sets: Vec<StringSet> = args
        .set
        .as_deref()
        .unwrap_or("uuid,urls,words,random")
        .split(',')
        .map(|s| StringSet::parse(s).unwrap_or_else(|| panic!("unknown set {s} (uuid, urls, words, random)")))
        .collect();
    let schedule = Schedule::default();
    let mut shapes = Vec::new();
    let mut rows = Vec::new();
    let mut updates = Vec::new();
    let mut bounds = Vec::new();
    for &set in &sets {
        for &n in &ns {
            let keys = set.keys(n, 1).sorted_unique();
            let fresh = set.keys(m / 2, 99);
            let mut rng = SplitMix64::new(5);
            let queries: ByteKeys =
                (0..m).map(|i| if i % 2 == 0 { keys.get(rng.below(keys.len() as u64) as usize) } else { fresh.get(i / 2) }).collect();
            let exact = |q: &[u8]| keys.position(q).map_or(NOT_FOUND, |i| i as u64);
            let mut want = vec![0u64; m];
            let sorted_cpu =
                m as f64 / median_secs(args.reps, || want.par_iter_mut().enumerate().for_each(|(i, w)| *w = exact(queries.get(i))));
            let format = Format::for_queries(&queries);
            let recs = Records::new(&queries, format);
            let floor = gpu.map(|g| {
                let dev = DeviceSortedStrings::upload(g, &keys).expect("upload");
                let mut out = vec![0u64; m];
                let e2e =
                    m as f64 / median_secs(args.reps, || dev.lookup_gpu(g, &keys, &queries, format, &mut out, schedule).expect("floor"));
                check("the GPU floor", &want, &out);
                let kernel = m as f64 / kernel_secs(g, args.reps, &recs, |s, q, o| dev.launch(g, s, q, recs.format, o, m));
                (kernel, e2e)
            });
            let key_bytes = keys.data_bytes();
            for depth in 0..=3 {
                let t = Instant::now();
                let art = build(&keys, depth).expect("build");
                let build_secs = t.elapsed().as_secs_f64();
                shapes.push(vec![
                    set.name().into(),
                    size_label(keys.len()),
                    mib(key_bytes),
                    depth.to_string(),
                    format!("{build_secs:.2}"),
                    format!("{} / {} / {} / {}", art.n4.len(), art.n16.len(), art.n48.len(), art.n256.len()),
                    format!("{} / {} / {} / {}", art.leaf8.len(), art.leaf16.len(), art.leaf32.len(), art.leaf_long.len()),
                    mib(art.lut.len() * 8),
                    mib(art.bytes()),
                ]);
                let mut got = vec![0u64; m];
                let cpu = m as f64 / median_secs(args.reps, || art.lookup_cpu(&queries, &mut got));
                check("the CPU tree", &want, &got);
                let mut row =
                    vec![set.name().into(), size_label(keys.len()), record_label(format), depth.to_string(), rate(sorted_cpu), rate(cpu)];
                if let (Some(g), Some((floor_kernel, floor_e2e))) = (gpu, floor) {
                    let dev = DeviceArt::upload(g, &art).expect("upload");
                    let kernel = m as f64 / kernel_secs(g, args.reps, &recs, |s, q, o| dev.launch(g, s, Op::Lookup, q, recs.format, o, m));
                    let e2e = m as f64
                        / median_secs(args.reps, || lookup_gpu(g, &art, &dev, &queries, format, &mut got, schedule).expect("lookup"));
                    check("the GPU tree", &want, &got);
                    // Lower bounds (ranges, prefixes): the sorted array's
                    // positions are the ranks the tree stores.
                    let mut lb_want = vec![0u64; m];
                    let lb_sorted = m as f64
                        / median_secs(args.reps, || {
                            lb_want.par_iter_mut().enumerate().for_each(|(i, w)| *w = keys.lower_bound(queries.get(i)) as u64)
                        });
                    let lb_cpu = m as f64
                        / median_secs(args.reps, || got.par_iter_mut().enumerate().for_each(|(i, o)| *o = art.lower_bound(queries.get(i))));
                    check("the CPU tree's lower bounds", &lb_want, &got);
                    let lb_gpu = m as f64
                        / median_secs(args.reps, || {
                            search_gpu(g, &art, &dev, Op::LowerBound, &queries, format, &mut got, schedule).expect("lower bounds")
                        });
                    check("the GPU tree's lower bounds", &lb_want, &got);
                    bounds.push(vec![
                        set.name().into(),
                        size_label(keys.len()),
                        depth.to_string(),
                        rate(lb_sorted),
                        rate(lb_cpu),
                        rate(lb_gpu),
                        ratio(lb_gpu, lb_cpu),
                        ratio(lb_gpu, lb_sorted),
                    ]);
                    row.extend([
                        rate(floor_kernel),
                        rate(floor_e2e),
                        rate(kernel),
                        rate(e2e),
                        ratio(kernel, floor_kernel),
                        ratio(e2e, cpu),
                        ratio(e2e, sorted_cpu),
                    ]);
                } else {
                    row.extend(std::iter::repeat_n("-".to_string(), 7));
                }
                rows.push(row);
            }
            if let Some(g) = gpu {
                updates.push(update_row(g, args.reps, set, &keys, &queries));
            }
        }
    }
    table(
        "CuART trees (build on all cores from sorted keys)",
        &[
            "set",
            "keys",
            "key MiB",
            "root table bytes",
            "build s",
            "N4 / N16 / N48 / N256",
            "leaves 8 / 16 / 32 / long",
            "root table MiB",
            "tree MiB",
        ],
        &shapes,
    );
    table(
        &format!("CuART lookups/s, {m} queries (half hits); GPU end to end: queries encoded into the pinned pipeline's buffers, sent, answered, returned"),
        &[
            "set",
            "keys",
            "record bytes",
            "root table bytes",
            "sorted array, CPU",
            "tree, CPU",
            "sorted array, GPU kernel",
            "sorted array, GPU",
            "tree, GPU kernel",
            "tree, GPU",
            "kernel vs floor",
            "GPU vs CPU tree",
            "GPU vs CPU sorted",
        ],
        &rows,
    );
    table(
        "CuART lower bounds/s (the first key >= each query: ranges and prefix searches), same queries; GPU end to end",
        &["set", "keys", "root table bytes", "sorted array, CPU", "tree, CPU", "tree, GPU", "GPU vs CPU tree", "GPU vs CPU sorted"],
        &bounds,
    );
    table(
        &format!("CuART batched value updates (two stages, last writer wins; a quarter deletes), batches of {UPDATE_BATCH}; then structural inserts on the host and the device copy's partial refresh; root table of 2 bytes"),
        &[
            "set",
            "keys",
            "leaves written",
            "CPU updates/s",
            "GPU updates/s (records and values uploaded)",
            "GPU vs CPU",
            &format!("new keys of {INSERTS} inserted"),
            "CPU inserts/s (1 thread)",
            "refresh MiB sent (time)",
            "tree MiB",
        ],
        &updates,
    );
}

const UPDATE_BATCH: usize = 1 << 22;

/// Updates/s of one batch (random keys of the index, repeats included) on
/// all cores and on the device copy; then checks that lookups on both
/// agree.
fn update_row(g: &Gpu, reps: usize, set: StringSet, keys: &ByteKeys, queries: &ByteKeys) -> Vec<String> {
    let mut rng = SplitMix64::new(77);
    let batch: ByteKeys = (0..UPDATE_BATCH).map(|_| keys.get(rng.below(keys.len() as u64) as usize)).collect();
    let values: Vec<u64> = (0..UPDATE_BATCH).map(|i| if i % 4 == 0 { DELETE } else { rng.below(1 << 40) }).collect();
    let mut art = build(keys, 2).expect("build");
    let mut dev = DeviceArt::upload(g, &art).expect("upload");
    let mut written = 0;
    let cpu = UPDATE_BATCH as f64 / median_secs(reps, || written = art.update(&batch, &values));
    let mut on_gpu = 0;
    let gpu_secs = median_secs(reps, || {
        let recs = Records::new(&batch, Format::exact(&batch).expect("keys fit a record"));
        on_gpu = dev.update(g, &recs, &values).expect("update");
    });
    if on_gpu != written {
        eprintln!("MISMATCH: the GPU wrote {on_gpu} leaves, the CPU {written}");
        std::process::exit(1);
    }
    // Structural inserts of fresh keys on the host (one thread, as ART's
    // insert is), then the device copy refreshed with what they wrote (not
    // with the updates above: the device made them itself).
    art.dirty = Default::default();
    let fresh = set.keys(INSERTS, 1234);
    let t = Instant::now();
    let mut added = 0;
    for k in fresh.iter() {
        added += art.insert(k, 1 << 50).expect("insert") as usize;
    }
    let insert_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let copied = dev.refresh(g, &mut art).expect("refresh");
    let refresh_secs = t.elapsed().as_secs_f64();
    let (mut want, mut got) = (vec![0; queries.len()], vec![0; queries.len()]);
    art.lookup_cpu(queries, &mut want);
    lookup_gpu(g, &art, &dev, queries, Format::for_queries(queries), &mut got, Schedule::default()).expect("lookup");
    check("lookups after updates and inserts", &want, &got);
    let gpu = UPDATE_BATCH as f64 / gpu_secs;
    vec![
        set.name().into(),
        size_label(keys.len()),
        written.to_string(),
        rate(cpu),
        rate(gpu),
        ratio(gpu, cpu),
        added.to_string(),
        rate(INSERTS as f64 / insert_secs),
        format!("{} ({} ms)", mib(copied), (refresh_secs * 1e3).round()),
        mib(art.bytes()),
    ]
}

const INSERTS: usize = 100_000;

/// Bytes a query takes on the bus ("16 fixed": the bytes alone).
fn record_label(f: Format) -> String {
    if f.fixed {
        format!("{} fixed", f.width)
    } else {
        (8 + f.width).to_string()
    }
}

//! The warp-per-query searches (gts.cu's gts_knn_depth, gts_range_count
//! and gts_range_place) for few dimensions, with their answers flat.
//!
//! There a batch's search takes about a millisecond per 10^5 queries on
//! an H100 and moving its answers costs more: a vector per query, filled
//! in fresh memory on one thread, took 4-20 ms (docs/bench/gts-2d-1e7-h100.md).
//! So both searches run in chunks through pinned buffers, each chunk's
//! answers going over the bus while the next one is searched, into one
//! flat buffer the caller may keep between batches; a small batch (kNN
//! or range) runs in one launch whose kernel writes into that buffer's
//! page-locked memory itself.

use super::flat::{FlatAnswers, Pair};
use super::{DeviceTree, Limit};
use crate::gpu::kernels::GTS;
use crate::gpu::pipeline::{cast, cast_mut, Slot};
use crate::gpu::{copy_parallel, Gpu, GpuError, Schedule};
use crate::launch;
use cudarc::driver::CudaStream;
use rayon::prelude::*;
use std::mem::size_of;
use std::sync::Arc;

/// The most queries a chunk of the pipelines takes.
const CHUNK: usize = 1 << 16;
/// The largest kNN answer (bytes) a kernel writes straight into pinned
/// memory in one launch (`knn_direct`), and the largest range chunk's
/// (`range_place_all`): at 10^4 2-d kNN queries (1.6 MB) that
/// ran 2.6e7-2.8e7 queries/s on the H100 host where chunks ran 1.4e7-2.8e7;
/// at 10^5 (16 MB) chunks overlapping their downloads ran 5.8e7 where one
/// launch ran 5.4e7.
const DIRECT_MAX: usize = 4 << 20;
/// Answers the first range pass keeps per query (gts.cu's `spare`, at
/// most 32: the place kernel sorts them a lane each).
const SPARE: usize = 32;
/// Answers per query a range chunk's pinned buffer has room for on
/// average (more: the chunk's answers come back the slow way).
const ROOM: usize = 16;
/// The most queries of a range batch searched in one pass
/// (`range_direct`).
const DIRECT_RANGE: usize = 1 << 14;
/// gts_range_direct's place of a query it left to the two passes.
const LEFT: u64 = u64::MAX;

/// Queries a chunk of a batch of m takes: two chunks or more, so that the
/// bus and the host overlap the search (each chunk costs the host a fixed
/// share too: at 10^5 2-d queries on the H100 host, two chunks ran range
/// searches 1.3x as fast as four), none too small to fill the GPU.
fn chunk(m: usize) -> usize {
    m.div_ceil(2).clamp(2048, CHUNK)
}

/// Range chunk layout in a slot's buffers, in bytes, for chunks of up to
/// `cap` queries. In: queries, radii, offsets. Out: counts, then room for
/// cap * ROOM answers.
struct RangeLayout {
    cap: usize,
    radii: usize,
    off: usize,
    in_bytes: usize,
    pairs: usize,
    out_bytes: usize,
}

impl RangeLayout {
    fn new(dim: usize, cap: usize) -> RangeLayout {
        let radii = (cap * dim * 4).next_multiple_of(16);
        let off = radii + cap * 8;
        let pairs = (cap * 4).next_multiple_of(16);
        RangeLayout { cap, radii, off, in_bytes: off + (cap + 1) * 8, pairs, out_bytes: pairs + cap * ROOM * size_of::<Pair>() }
    }
}

impl DeviceTree {
    /// The tree's arguments of the warp-per-query kernels: internal nodes,
    /// pivots, nodes, fanout, vectors, norms, pivot distances, ids.
    fn walk_args(&self) -> (u32, u64, u64, u32, u64, u64, u64, u64) {
        let internal = crate::gts::tree::internal_nodes(self.fanout, self.height) as u32;
        let tree = (self.pivots.ptr(), self.nodes.ptr(), self.fanout as u32);
        (internal, tree.0, tree.1, tree.2, self.vectors.ptr(), self.norms.ptr(), self.pdist.ptr(), self.ids.ptr())
    }

    /// kNN (k <= `DEPTH_MAX_K`) by a warp per query descending the tree
    /// depth first, appended to `out`.
    pub(super) fn knn_depth(&self, gpu: &Gpu, queries: &[f32], k: usize, out: &mut FlatAnswers) -> Result<(), GpuError> {
        let (dim, m) = (self.dim, queries.len() / self.dim);
        let (dim32, metric, k32) = (dim as u32, self.metric as u32, k as u32);
        let (internal, pp, nodep, fanout, vp, nop, pdp, idp) = self.walk_args();
        // Per query: k answers (the chunk's first), then a count.
        let record = k * size_of::<Pair>() + 4;
        let fill = |at: usize, dst: &mut [f32]| copy_parallel(dst, &queries[at * dim..at * dim + dst.len()]);
        let launch = |stream: &Arc<CudaStream>, qp: u64, op: u64, n: usize| {
            let n32 = n as u32;
            launch!(
                gpu,
                stream,
                GTS,
                "gts_knn_depth",
                (n.div_ceil(4), 128, 0),
                [qp, n32, dim32, metric, pp, nodep, fanout, internal, vp, nop, pdp, idp, k32, op]
            )
        };
        if m * record <= DIRECT_MAX {
            return self.knn_direct(gpu, queries, k, launch, out);
        }
        let consume = |_: usize, bytes: &[u8]| {
            let n = bytes.len() / record;
            let pairs = cast::<Pair>(bytes, n * k);
            let counts = cast::<u32>(&bytes[n * k * size_of::<Pair>()..], n);
            let base = out.host_len();
            if counts.iter().all(|&c| c as usize == k) {
                out.append(pairs);
                (1..=n).for_each(|i| out.end_at(base + i * k));
            } else {
                // Fewer than k objects in the tree.
                for (i, &c) in counts.iter().enumerate() {
                    out.append(&pairs[i * k..i * k + c as usize]);
                    out.end_at(out.host_len());
                }
            }
        };
        // (A chunk's answers kept to 16 MiB of pinned memory a slot.)
        let schedule = Schedule { chunk: chunk(m).min((16 << 20) / record).max(1), in_flight: 3 };
        gpu.pipeline_records(m, dim, record, schedule, fill, launch, consume)
    }

    /// A batch in one launch whose kernel writes its answers (k a query,
    /// then the counts) straight into `out`'s page-locked memory: no
    /// download or copy after the kernel and no chunks, whose fixed costs
    /// dominate a small batch.
    fn knn_direct(
        &self,
        gpu: &Gpu,
        queries: &[f32],
        k: usize,
        launch: impl Fn(&Arc<CudaStream>, u64, u64, usize) -> Result<(), GpuError>,
        out: &mut FlatAnswers,
    ) -> Result<(), GpuError> {
        let (dim, m) = (self.dim, queries.len() / self.dim);
        let in_bytes = m * dim * size_of::<f32>();
        let mut slots = gpu.guarded(|| gpu.take_slots(1, in_bytes, 16))?;
        let result = gpu.guarded(|| {
            let s = &mut slots[0];
            copy_parallel(cast_mut::<f32>(s.host_in.as_mut_slice(), m * dim), queries);
            s.dev_in.write_async(&s.host_in.as_slice()[..in_bytes], &s.stream)?;
            let to = out.pinned_for(gpu, m * (k * size_of::<Pair>() + 4))?.device_ptr()?;
            launch(&s.stream, s.dev_in.ptr(), to, m)?;
            s.stream.synchronize().map_err(crate::gpu::driver_error("cuStreamSynchronize"))
        });
        gpu.return_slots(slots);
        result?;
        let counts = cast::<u32>(&out.pinned_bytes()[m * k * size_of::<Pair>()..], m);
        let span: Vec<(usize, usize)> = counts.iter().enumerate().map(|(i, &c)| (i * k, i * k + c as usize)).collect();
        out.placed(m * k, span);
        Ok(())
    }

    /// Range search by a warp per query walking the tree depth first, each
    /// query's answers by id, appended to `out`: a small batch in one pass,
    /// a larger one in two.
    pub(super) fn range_depth(
        &self,
        gpu: &Gpu,
        queries: &[f32],
        radii: &[f64],
        budget: usize,
        limit: &Limit,
        out: &mut FlatAnswers,
    ) -> Result<(), GpuError> {
        if radii.len() <= DIRECT_RANGE {
            self.range_direct(gpu, queries, radii, budget, limit, out)
        } else {
            self.range_depth_chunks(gpu, queries, radii, budget, limit, out)
        }
    }

    /// The two passes of a range batch, in chunks on three slots,
    /// three stages apart: while chunk i is counted on the device, the
    /// host takes chunk i-1's counts to offsets and has its answers packed
    /// and sent back, then files chunk i-2's answers.
    /// Past `limit` (counted before a chunk's answers are placed) it stops.
    fn range_depth_chunks(
        &self,
        gpu: &Gpu,
        queries: &[f32],
        radii: &[f64],
        budget: usize,
        limit: &Limit,
        out: &mut FlatAnswers,
    ) -> Result<(), GpuError> {
        let (dim, m, step) = (self.dim, radii.len(), chunk(radii.len()));
        let lay = RangeLayout::new(dim, step);
        let chunks: Vec<usize> = (0..m).step_by(step).collect();
        let ways = chunks.len().min(3);
        // The first pass's answers, per slot (device only): the tree's
        // kept buffer, or one of this batch's own while another batch
        // holds that.
        let need = ways * step * SPARE;
        let mut kept = self.range_scratch.try_lock();
        let own;
        let dense = match kept.as_deref_mut() {
            Some(slot) => {
                if slot.as_ref().is_none_or(|b| b.len() < need) {
                    *slot = None;
                    *slot = Some(gpu.alloc::<Pair>(need)?);
                }
                slot.as_ref().expect("allocated above").ptr()
            }
            None => {
                own = gpu.alloc::<Pair>(need)?;
                own.ptr()
            }
        };
        let dense_of = |si: usize| dense + (si * step * SPARE * size_of::<Pair>()) as u64;
        let mut slots = gpu.guarded(|| gpu.take_slots(ways, lay.in_bytes, lay.out_bytes))?;
        let result = gpu.guarded(|| {
            // (slot, queries) counted; (slot, queries, answers) on their way back.
            let mut counted: Option<(usize, usize)> = None;
            let mut placed: Option<(usize, usize, usize)> = None;
            for ci in 0..=chunks.len() {
                if let Some(&at) = chunks.get(ci) {
                    let (n, si) = (step.min(m - at), ci % ways);
                    self.range_count(gpu, &mut slots[si], &lay, dense_of(si), &queries[at * dim..(at + n) * dim], &radii[at..at + n])?;
                }
                // Chunk i-1's answers go on the bus before chunk i-2's are
                // filed, so that the two overlap.
                let mut before = placed.take();
                if let Some((si, n)) = counted.take() {
                    let found = self.range_place_all(gpu, &mut slots[si], &lay, dense_of(si), n)?;
                    if !limit.take(found.as_ref().map_or_else(|off| off[n] as usize, |&total| total)) {
                        // Past the limit nothing more is taken; the slots
                        // finish what is in flight before they go back.
                        for s in &slots {
                            s.stream.synchronize().map_err(crate::gpu::driver_error("cuStreamSynchronize"))?;
                        }
                        return Ok(());
                    }
                    match found {
                        Ok(total) => placed = Some((si, n, total)),
                        Err(off) => {
                            // In order: the chunk before first.
                            if let Some((si, n, total)) = before.take() {
                                finish(&slots[si], &lay, n, total, out)?;
                            }
                            self.range_slow(gpu, &slots[si], &lay, dense_of(si), &off, budget, out)?
                        }
                    }
                }
                if let Some((si, n, total)) = before {
                    finish(&slots[si], &lay, n, total, out)?;
                }
                counted = chunks.get(ci).map(|&at| (ci % ways, step.min(m - at)));
            }
            if let Some((si, n, total)) = placed {
                finish(&slots[si], &lay, n, total, out)?;
            }
            Ok(())
        });
        gpu.return_slots(slots);
        result
    }

    /// A small range batch in one pass: one launch whose kernel takes each
    /// query's answers to a place of `out`'s page-locked memory (claimed
    /// from a cursor, so in any order of the queries), and their place and
    /// count to a slot's; the queries it leaves (no room left) go through
    /// the two passes as a batch of their own. The two passes cost a small
    /// batch two kernels' latency, the counts' round trip and a copy of the
    /// answers; H100 host, 10^4 2-d queries: ~160 us against ~480 us.
    fn range_direct(
        &self,
        gpu: &Gpu,
        queries: &[f32],
        radii: &[f64],
        budget: usize,
        limit: &Limit,
        out: &mut FlatAnswers,
    ) -> Result<(), GpuError> {
        let (dim, m) = (self.dim, radii.len());
        // In: queries, radii, the cursor (zero). Out: places, counts.
        let radii_at = (m * dim * 4).next_multiple_of(16);
        let cursor_at = radii_at + m * 8;
        let counts_at = m * 8;
        let mut slots = gpu.guarded(|| gpu.take_slots(1, cursor_at + 8, counts_at + m * 4))?;
        let result = gpu.guarded(|| {
            let s = &mut slots[0];
            let host = s.host_in.as_mut_slice();
            copy_parallel(cast_mut::<f32>(host, queries.len()), queries);
            cast_mut::<f64>(&mut host[radii_at..], m).copy_from_slice(radii);
            cast_mut::<u64>(&mut host[cursor_at..], 1)[0] = 0;
            s.dev_in.write_async(&s.host_in.as_slice()[..cursor_at + 8], &s.stream)?;
            let (dim32, metric, m32) = (dim as u32, self.metric as u32, m as u32);
            let (internal, pp, nodep, fanout, vp, nop, pdp, idp) = self.walk_args();
            let (qp, rp, cursorp) = (s.dev_in.ptr(), s.dev_in.ptr() + radii_at as u64, s.dev_in.ptr() + cursor_at as u64);
            let placep = s.host_out.device_ptr()?;
            let countp = placep + counts_at as u64;
            // Room for ROOM answers a query on average (kept between batches).
            let to = out.pinned_for(gpu, m * ROOM * size_of::<Pair>())?;
            let room = (to.len() / size_of::<Pair>()) as u64;
            let top = to.device_ptr()?;
            launch!(
                gpu,
                s.stream,
                GTS,
                "gts_range_direct",
                (m.div_ceil(4), 128, 0),
                [qp, rp, dim32, metric, pp, nodep, fanout, internal, vp, nop, pdp, idp, m32, top, room, cursorp, placep, countp]
            )?;
            s.stream.synchronize().map_err(crate::gpu::driver_error("cuStreamSynchronize"))
        });
        let rest = result.map(|()| {
            let host = slots[0].host_out.as_slice();
            let (place, counts) = (cast::<u64>(host, m), cast::<u32>(&host[counts_at..], m));
            let mut placed = 0;
            let span: Vec<(usize, usize)> = place
                .iter()
                .zip(counts)
                .map(|(&at, &c)| match at {
                    LEFT => (0, 0),
                    at => {
                        placed += c as usize;
                        (at as usize, at as usize + c as usize)
                    }
                })
                .collect();
            out.placed(placed, span);
            // The kernel sorted the answers it kept; longer runs, found
            // again by a walk, are sorted here.
            for q in (0..m).filter(|&q| place[q] != LEFT && counts[q] as usize > SPARE) {
                by_id(out.placed_mut(q));
            }
            ((0..m).filter(|&q| place[q] == LEFT).collect::<Vec<usize>>(), placed)
        });
        gpu.return_slots(slots);
        let (rest, placed) = rest?;
        // (What it placed is bounded by the room it was given.)
        if !limit.take(placed) || rest.is_empty() {
            return Ok(());
        }
        let sub_q: Vec<f32> = rest.iter().flat_map(|&q| &queries[q * dim..(q + 1) * dim]).copied().collect();
        let sub_r: Vec<f64> = rest.iter().map(|&q| radii[q]).collect();
        let mut sub = FlatAnswers::default();
        self.range_depth_chunks(gpu, &sub_q, &sub_r, budget, limit, &mut sub)?;
        if limit.over().is_some() {
            return Ok(());
        }
        for (i, &q) in rest.iter().enumerate() {
            let span = out.place_rest(gpu, sub.query(i))?;
            out.set_span(q, span);
        }
        Ok(())
    }

    /// A range chunk's first pass on `slot`: its queries and radii up, each
    /// query's answers counted (up to SPARE kept), the counts on their way
    /// back.
    fn range_count(
        &self,
        gpu: &Gpu,
        slot: &mut Slot,
        lay: &RangeLayout,
        densep: u64,
        queries: &[f32],
        radii: &[f64],
    ) -> Result<(), GpuError> {
        let n = radii.len();
        let host = slot.host_in.as_mut_slice();
        copy_parallel(cast_mut::<f32>(host, queries.len()), queries);
        cast_mut::<f64>(&mut host[lay.radii..], n).copy_from_slice(radii);
        slot.dev_in.write_async(&slot.host_in.as_slice()[..lay.radii + n * 8], &slot.stream)?;
        let (dim, metric, n32, spare) = (self.dim as u32, self.metric as u32, n as u32, SPARE as u32);
        let (internal, pp, nodep, fanout, vp, nop, pdp, idp) = self.walk_args();
        let (qp, rp) = (slot.dev_in.ptr(), slot.dev_in.ptr() + lay.radii as u64);
        let countp = slot.dev_out.ptr();
        launch!(
            gpu,
            slot.stream,
            GTS,
            "gts_range_count",
            (n.div_ceil(4), 128, 0),
            [qp, rp, dim, metric, pp, nodep, fanout, internal, vp, nop, pdp, idp, n32, spare, densep, countp]
        )?;
        slot.dev_out.read_async(&mut slot.host_out.as_mut_slice()[..n * 4], &slot.stream)
    }

    /// A counted chunk of n queries on `slot`: Ok(its answers' count) when
    /// they are packed and on their way to the slot's pinned buffer,
    /// Err(its offsets) when they do not fit it (`range_slow`'s turn).
    fn range_place_all(
        &self,
        gpu: &Gpu,
        slot: &mut Slot,
        lay: &RangeLayout,
        densep: u64,
        n: usize,
    ) -> Result<Result<usize, Vec<u64>>, GpuError> {
        slot.stream.synchronize().map_err(crate::gpu::driver_error("cuStreamSynchronize"))?;
        // Offsets from the counts (u64: one query may find every object).
        let mut off = Vec::with_capacity(n + 1);
        off.push(0u64);
        for &c in cast::<u32>(slot.host_out.as_slice(), n) {
            off.push(off[off.len() - 1] + c as u64);
        }
        let total = off[n] as usize;
        cast_mut::<u64>(&mut slot.host_in.as_mut_slice()[lay.off..], n + 1).copy_from_slice(&off);
        slot.dev_in.write_at_async(lay.off, &slot.host_in.as_slice()[lay.off..lay.off + (n + 1) * 8], &slot.stream)?;
        if total > lay.cap * ROOM {
            return Ok(Err(off));
        }
        let bytes = total * size_of::<Pair>();
        // A small chunk's answers go straight into the slot's pinned
        // memory (as `knn_direct`'s). H100 host: batches of 10^4 ran
        // 2.1e7 q/s this way against 1.4e7-1.9e7 with a download after the
        // kernel; chunks of 8 MB ran 5-15% slower this way.
        if bytes <= DIRECT_MAX {
            self.range_place(gpu, slot, lay, densep, 0, n, 0, slot.host_out.device_ptr()? + lay.pairs as u64)?;
            return Ok(Ok(total));
        }
        self.range_place(gpu, slot, lay, densep, 0, n, 0, slot.dev_out.ptr() + lay.pairs as u64)?;
        slot.dev_out.read_range_async(lay.pairs, &mut slot.host_out.as_mut_slice()[lay.pairs..lay.pairs + bytes], &slot.stream)?;
        Ok(Ok(total))
    }

    /// gts_range_place for queries first .. first + len of the chunk on
    /// `slot` (after its first pass and offsets), query q's answers to
    /// `to` + (off[q] - base) pairs.
    #[allow(clippy::too_many_arguments)]
    fn range_place(
        &self,
        gpu: &Gpu,
        slot: &Slot,
        lay: &RangeLayout,
        densep: u64,
        first: usize,
        len: usize,
        base: u64,
        to: u64,
    ) -> Result<(), GpuError> {
        let (dim, metric, spare, q0, len32) = (self.dim as u32, self.metric as u32, SPARE as u32, first as u32, len as u32);
        let (internal, pp, nodep, fanout, vp, nop, pdp, idp) = self.walk_args();
        let (qp, rp, offp) = (slot.dev_in.ptr(), slot.dev_in.ptr() + lay.radii as u64, slot.dev_in.ptr() + lay.off as u64);
        let countp = slot.dev_out.ptr();
        launch!(
            gpu,
            slot.stream,
            GTS,
            "gts_range_place",
            (len.div_ceil(4), 128, 0),
            [qp, rp, dim, metric, pp, nodep, fanout, internal, vp, nop, pdp, idp, q0, len32, spare, densep, countp, offp, base, to]
        )
    }

    /// A chunk whose answers (at offsets `off`) outgrow its slot: runs of
    /// its queries whose answers fit `budget` bytes (at least one query),
    /// each placed into a device buffer of its own and downloaded.
    #[allow(clippy::too_many_arguments)]
    fn range_slow(
        &self,
        gpu: &Gpu,
        slot: &Slot,
        lay: &RangeLayout,
        densep: u64,
        off: &[u64],
        budget: usize,
        out: &mut FlatAnswers,
    ) -> Result<(), GpuError> {
        let n = off.len() - 1;
        let per = (budget / size_of::<Pair>()).max(1) as u64;
        let mut a = 0;
        while a < n {
            let mut b = a + 1;
            while b < n && off[b + 1] - off[a] <= per {
                b += 1;
            }
            let len = (off[b] - off[a]) as usize;
            let dev = gpu.alloc::<Pair>(len.max(1))?;
            self.range_place(gpu, slot, lay, densep, a, b - a, off[a], dev.ptr())?;
            let got = dev.download_first(len)?;
            let base = out.host_len();
            out.append(&got);
            for i in a..b {
                let (x, y) = (base + (off[i] - off[a]) as usize, base + (off[i + 1] - off[a]) as usize);
                by_id(&mut out.host_mut()[x..y]);
                out.end_at(y);
            }
            a = b;
        }
        Ok(())
    }
}

/// A query's range answers by id (the walk finds them in tree order).
fn by_id(answers: &mut [Pair]) {
    answers.sort_unstable_by_key(|p| p.id);
}

/// Appends a range chunk's answers from its slot's pinned buffer, each
/// query's by id.
fn finish(slot: &Slot, lay: &RangeLayout, n: usize, total: usize, out: &mut FlatAnswers) -> Result<(), GpuError> {
    slot.stream.synchronize().map_err(crate::gpu::driver_error("cuStreamSynchronize"))?;
    let host = slot.host_out.as_slice();
    let counts = cast::<u32>(host, n);
    let base = out.host_len();
    out.append(cast::<Pair>(&host[lay.pairs..], total));
    let mut end = base;
    for &c in counts {
        end += c as usize;
        out.end_at(end);
    }
    // The place kernel sorted the runs it copied; the longer ones, found
    // again by a walk, are sorted here.
    let mut rest = &mut out.host_mut()[base..];
    let mut runs = Vec::new();
    for &c in counts {
        let (run, tail) = rest.split_at_mut(c as usize);
        if c as usize > SPARE {
            runs.push(run);
        }
        rest = tail;
    }
    // (On all cores only where it pays for waking them.)
    if runs.iter().map(|r| r.len()).sum::<usize>() < 1 << 16 {
        runs.into_iter().for_each(by_id);
    } else {
        runs.into_par_iter().for_each(by_id);
    }
    Ok(())
}

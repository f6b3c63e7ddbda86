//! The bounded brute force on the GPU (kernels/gts.cu's filters and
//! `gts_l2_recheck`): which filter kernel and error bound the device
//! takes, how the objects are sliced over its multiprocessors, and for
//! small batches (the service's epochs, single index scans) buffers kept
//! from call to call, so that such a batch costs one upload, three
//! launches and one download.

use super::{nearest, Answers, Ask, DeviceTree, Group, Way, BLOCK, OVERFLOW};
use crate::gpu::{kernels::GTS, DeviceBuffer, Gpu, GpuError, PinnedBuffer};
use crate::launch;
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// gts.cu's FQ, FO and FCAP.
const FILTER_QUERIES: usize = 32;
const FILTER_OBJECTS: usize = 128;
const FILTER_CAP: usize = 64;
/// The fewest objects a slice gets.
const FILTER_MIN_SLICE: usize = 1024;
/// The largest k of the bounded brute force (its per-query buffer of
/// FILTER_CAP must keep k and room for a warp's 32 more).
pub const FILTER_MAX_K: usize = 16;
/// Batches of up to this many queries run in the kept buffers (`Space`);
/// larger ones allocate their own (their allocations are a small part of
/// their time, and a kept buffer of their size would hold memory).
pub(super) const SMALL_BATCH: usize = 256;

/// A filter kernel's name and its bound's (rel, ab): E = rel (|q|^2 +
/// |o|^2) + ab (gts.cu derives both).
pub(super) type Filter = (&'static str, (f64, f64));

/// The filter for `gpu`: float8 products on the tensor cores of sm_90
/// (`gts_l2_filter_mma`: a bound 72 times tighter at 128 dimensions, and
/// products at the tensor cores' rate), float4 products elsewhere
/// (consumer cards of sm_86/89 have no float8 tensor cores, and the
/// instruction's shape needs sm_90).
pub(super) fn filter_kernel(gpu: &Gpu, dim: usize) -> Filter {
    if gpu.info().compute_capability.0 == 9 {
        ("gts_l2_filter_mma", (f64::powi(2.0, -22), f64::powi(2.0, -140)))
    } else {
        float4_filter(dim)
    }
}

/// The float4 filter (`Way::FilterFloat4` takes it on any GPU).
pub(super) fn float4_filter(dim: usize) -> Filter {
    let n = (dim + 16) as f64;
    ("gts_l2_filter", (n * f64::powi(2.0, -23), n * f64::powi(2.0, -125)))
}

/// How many slices to cut the objects into for `tiles` query tiles (one
/// block each per slice) on a device holding `resident` blocks at once:
/// the fewest whose rounds of blocks, per slice's share of the work, come
/// within 10% of the best (more slices mean more candidates to hold and
/// recheck), at most `max` (at least one). A small batch then fills the
/// device in one round: a batch of up to 32 queries took 4 x SMs slices,
/// two rounds where three blocks fit an SM, half its time idle.
fn slices_for(tiles: usize, resident: usize, max: usize) -> usize {
    let resident = resident.max(1);
    let cost = |s: usize| (tiles * s).div_ceil(resident) as f64 / s as f64;
    let range = 1..=max.clamp(1, 8 * resident);
    let best = range.clone().map(cost).fold(f64::INFINITY, f64::min);
    range.into_iter().find(|&s| cost(s) <= best * 1.1).unwrap_or(1)
}

/// A batch's slicing: (slice length, slices).
fn slicing(gpu: &Gpu, tree: &DeviceTree, m: usize, filter: Filter) -> Result<(usize, usize), GpuError> {
    let tiles = m.div_ceil(FILTER_QUERIES);
    let want = slices_for(tiles, gpu.resident_blocks(&GTS, filter.0, BLOCK as u32)?, tree.objects / FILTER_MIN_SLICE);
    let slice = tree.objects.div_ceil(want).max(FILTER_MIN_SLICE).next_multiple_of(FILTER_OBJECTS);
    Ok((slice, tree.objects.div_ceil(slice)))
}

/// Device addresses of one batch's buffers: its queries and their squared
/// norms, the candidates per (query, slice), and the answers.
struct Buffers {
    queries: u64,
    qnorms: u64,
    cand_d: u64,
    cand_o: u64,
    cand_n: u64,
    cand_t: u64,
    out_d: u64,
    out_id: u64,
    out_n: u64,
}

/// Launches the filter and the recheck for `m` queries on `stream`.
#[allow(clippy::too_many_arguments)]
fn launch_filter(
    gpu: &Gpu,
    tree: &DeviceTree,
    stream: &Arc<CudaStream>,
    m: usize,
    k: usize,
    (slice, slices): (usize, usize),
    (kernel, (rel, ab)): Filter,
    b: &Buffers,
) -> Result<(), GpuError> {
    let (qp, qnp, m32, vp, osp, n64, dim) =
        (b.queries, b.qnorms, m as u32, tree.vectors.ptr(), tree.norms.ptr(), tree.objects as u64, tree.dim as u32);
    let (slice64, slices32, k32, cdp, cop, cnp, ctp) = (slice as u64, slices as u32, k as u32, b.cand_d, b.cand_o, b.cand_n, b.cand_t);
    let blocks = m.div_ceil(FILTER_QUERIES) * slices;
    launch!(
        gpu,
        stream,
        GTS,
        kernel,
        (blocks, BLOCK, 0),
        [qp, qnp, m32, vp, osp, n64, dim, slice64, slices32, k32, rel, ab, cdp, cop, cnp, ctp]
    )?;
    let (idp, odp, oip, onp) = (tree.ids.ptr(), b.out_d, b.out_id, b.out_n);
    launch!(
        gpu,
        stream,
        GTS,
        "gts_l2_recheck",
        (m, BLOCK, 0),
        [qp, qnp, dim, vp, osp, idp, slices32, cdp, cop, cnp, ctp, k32, rel, ab, odp, oip, onp]
    )
}

/// Buffers kept by a tree for small batches, grown as needed: the
/// queries in pinned memory and on the device, the candidates, and the
/// answers (distances, ids, counts) in one device buffer read back in
/// one copy.
pub(super) struct Space {
    stream: Arc<CudaStream>,
    host_q: PinnedBuffer<f32>,
    host_out: PinnedBuffer<u8>,
    queries: DeviceBuffer<f32>,
    qnorms: DeviceBuffer<f64>,
    cand_d: DeviceBuffer<f32>,
    cand_o: DeviceBuffer<u32>,
    cand_n: DeviceBuffer<u32>,
    cand_t: DeviceBuffer<f64>,
    out: DeviceBuffer<u8>,
}

/// Answer bytes of `m` queries: FILTER_MAX_K (distance, id) places and a
/// count each.
fn out_bytes(m: usize) -> usize {
    m * FILTER_MAX_K * 16 + m * 4
}

impl Space {
    /// Room for `m` queries and `slots` (query, slice) candidate lists.
    fn new(gpu: &Gpu, m: usize, dim: usize, slots: usize) -> Result<Space, GpuError> {
        let ctx = gpu.context();
        Ok(Space {
            stream: gpu.new_stream()?,
            host_q: PinnedBuffer::alloc(ctx, m * dim)?,
            host_out: PinnedBuffer::alloc(ctx, out_bytes(m))?,
            queries: gpu.alloc(m * dim)?,
            qnorms: gpu.alloc(m)?,
            cand_d: gpu.alloc(slots * FILTER_CAP)?,
            cand_o: gpu.alloc(slots * FILTER_CAP)?,
            cand_n: gpu.alloc(slots)?,
            cand_t: gpu.alloc(slots)?,
            out: gpu.alloc(out_bytes(m))?,
        })
    }

    fn fits(&self, m: usize, dim: usize, slots: usize) -> bool {
        self.queries.len() >= m * dim && self.cand_n.len() >= slots && self.out.len() >= out_bytes(m)
    }
}

impl DeviceTree {
    /// kNN by L2 over every object, bounded then rechecked; a query whose
    /// candidates overflowed (a bound too loose for the data's scale) is
    /// answered by the tree instead. None when the candidates would not
    /// fit `budget`.
    pub(super) fn filtered(&self, gpu: &Gpu, g: &Group, k: usize, budget: usize, filter: Filter) -> Result<Option<Answers>, GpuError> {
        let m = g.m;
        let (slice, slices) = slicing(gpu, self, m, filter)?;
        if m.saturating_mul(slices * (FILTER_CAP * 8 + 16)) > budget {
            return Ok(None);
        }
        let cand_d = gpu.alloc::<f32>(m * slices * FILTER_CAP)?;
        let cand_o = gpu.alloc::<u32>(m * slices * FILTER_CAP)?;
        let cand_n = gpu.alloc::<u32>(m * slices)?;
        let cand_t = gpu.alloc::<f64>(m * slices)?;
        let out_d = gpu.alloc::<f64>(m * k)?;
        let out_id = gpu.alloc::<u64>(m * k)?;
        let out_n = gpu.alloc::<u32>(m)?;
        let b = Buffers {
            queries: g.queries.ptr(),
            qnorms: g.qnorms.ptr(),
            cand_d: cand_d.ptr(),
            cand_o: cand_o.ptr(),
            cand_n: cand_n.ptr(),
            cand_t: cand_t.ptr(),
            out_d: out_d.ptr(),
            out_id: out_id.ptr(),
            out_n: out_n.ptr(),
        };
        launch_filter(gpu, self, &g.stream, m, k, (slice, slices), filter, &b)?;
        let found = nearest(gpu, &out_d, &out_id, &out_n, k)?;
        self.rest_by_tree(gpu, g.host, k, found).map(Some)
    }

    /// The same for a batch of at most `SMALL_BATCH` queries in the tree's
    /// kept buffers (a few MB: candidate lists for the most (query, slice)
    /// pairs a small batch has); None when they are in use by another
    /// thread (the caller takes the way above).
    pub(super) fn filtered_small(&self, gpu: &Gpu, queries: &[f32], k: usize, filter: Filter) -> Result<Option<Answers>, GpuError> {
        let Some(mut space) = self.space.try_lock() else { return Ok(None) };
        let (dim, m) = (self.dim, queries.len() / self.dim);
        let (slice, slices) = slicing(gpu, self, m, filter)?;
        if !space.as_ref().is_some_and(|s| s.fits(m, dim, m * slices)) {
            // Room for every small batch on this device, at once.
            *space = None;
            let mut slots = m * slices;
            for tiles in 1..=SMALL_BATCH / FILTER_QUERIES {
                slots = slots.max(tiles * FILTER_QUERIES * slicing(gpu, self, tiles * FILTER_QUERIES, filter)?.1);
            }
            *space = Some(Space::new(gpu, m.max(SMALL_BATCH), dim, slots)?);
        }
        let s = space.as_mut().expect("made above");
        s.host_q.as_mut_slice()[..queries.len()].copy_from_slice(queries);
        s.queries.write_async(&s.host_q.as_slice()[..queries.len()], &s.stream)?;
        let (qp, m64, dim32, np) = (s.queries.ptr(), m as u64, dim as u32, s.qnorms.ptr());
        launch!(gpu, s.stream, GTS, "gts_norms", (super::grid(m, BLOCK / 8, gpu), BLOCK, 0), [qp, m64, dim32, np])?;
        let out = s.out.ptr();
        let b = Buffers {
            queries: qp,
            qnorms: np,
            cand_d: s.cand_d.ptr(),
            cand_o: s.cand_o.ptr(),
            cand_n: s.cand_n.ptr(),
            cand_t: s.cand_t.ptr(),
            out_d: out,
            out_id: out + (m * k * 8) as u64,
            out_n: out + (m * k * 16) as u64,
        };
        launch_filter(gpu, self, &s.stream, m, k, (slice, slices), filter, &b)?;
        let bytes = m * k * 16 + m * 4;
        s.out.read_async(&mut s.host_out.as_mut_slice()[..bytes], &s.stream)?;
        super::sync(gpu, &s.stream)?;
        let h = &s.host_out.as_slice()[..bytes];
        let word = |at: usize| u64::from_ne_bytes(h[at..at + 8].try_into().unwrap());
        let found = (0..m)
            .map(|q| {
                let at = m * k * 16 + q * 4;
                let c = u32::from_ne_bytes(h[at..at + 4].try_into().unwrap());
                let hit = |i: usize| (word((m * k + q * k + i) * 8), f64::from_bits(word((q * k + i) * 8)));
                (c != OVERFLOW).then(|| (0..c as usize).map(hit).collect())
            })
            .collect();
        drop(space);
        self.rest_by_tree(gpu, queries, k, found).map(Some)
    }

    /// The answers `found`, those of queries that overflowed (None) by the
    /// tree.
    fn rest_by_tree(&self, gpu: &Gpu, queries: &[f32], k: usize, found: Vec<Option<Vec<(u64, f64)>>>) -> Result<Answers, GpuError> {
        let overflowed: Vec<usize> = (0..found.len()).filter(|&q| found[q].is_none()).collect();
        let mut answers: Answers = found.into_iter().map(Option::unwrap_or_default).collect();
        if !overflowed.is_empty() {
            let qs: Vec<f32> = overflowed.iter().flat_map(|&q| &queries[q * self.dim..(q + 1) * self.dim]).copied().collect();
            let again = self.batch(gpu, &qs, Ask::Knn(k), Way::Tree)?;
            for (q, a) in overflowed.into_iter().zip(again) {
                answers[q] = a;
            }
        }
        Ok(answers)
    }
}

#[cfg(test)]
mod tests {
    use super::slices_for;

    #[test]
    fn slices_fill_the_device_in_few_rounds() {
        // One tile: one round of all resident blocks.
        assert!((240..=264).contains(&slices_for(1, 264, 976)));
        // Two tiles: half as many slices each.
        assert!((120..=132).contains(&slices_for(2, 264, 976)));
        // Many tiles: a few slices, within 10% of the best rounds.
        let s = slices_for(313, 264, 976);
        assert!(s <= 8, "{s}");
        assert!((313 * s).div_ceil(264) as f64 / s as f64 <= 1.1 * 313.0 / 264.0 + 1e-9);
        // Few objects: at most `max`, at least one.
        assert_eq!(slices_for(1, 264, 3), 3);
        assert_eq!(slices_for(1, 264, 0), 1);
    }
}

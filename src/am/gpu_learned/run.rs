//! The run as one searchable array over its data pages: its metapage and
//! model, read once per backend and generation (cached; each use reads
//! the metapage's generation), and the search for a key's lower bound, which starts at the
//! model's prediction (the CPU's, or the GPU's for a batch) and checks it
//! against the pages' first and last keys, moving as far as it must: a
//! prediction is a hint, never trusted for rows.

use super::page::*;
use crate::am::common::cache;
use crate::am::gpu_btree::leaf_step::Tally;
use crate::am::gpu_btree::page::{Exclusive, Shared};
use crate::storage::{RecentPages, Tid, Xlog};
use gpuindex_engine::executor::BatchJob;
use gpuindex_engine::gpu::{Gpu, GpuError, Schedule};
use gpuindex_engine::pgm::gpu::{predict_gpu, DevicePgm};
use gpuindex_engine::pgm::{Level, Pgm};
use pgrx::pg_sys;
use std::sync::{Arc, Mutex};

/// Probes ahead of the one searched whose first reads are prefetched.
const PREFETCH_PROBES: usize = 4;

pub struct Run {
    pub meta: RunMeta,
    pub pgm: Pgm,
    /// The run page index at which each extent starts.
    starts: Vec<usize>,
    /// The first position of each data page, then n.
    firsts: Vec<u64>,
    device: Mutex<Option<Arc<DevicePgm>>>,
}

impl cache::Image for Run {
    fn generation(&self) -> u64 {
        self.meta.generation
    }
    fn host_bytes(&self) -> usize {
        self.pgm.bytes() + self.firsts.len() * 8
    }
    fn device_bytes(&self) -> usize {
        self.device.lock().expect("not poisoned").as_ref().map_or(0, |d| d.bytes())
    }
}

/// The generation of the run (and delta) of index `rel` now.
pub fn generation(rel: pg_sys::Relation) -> u64 {
    run_meta(Shared::lock(rel, RUN_META_BLOCK).page()).generation
}

/// The run of index `rel` this backend read last, if any, without
/// reading the metapage: maybe of an older generation, which the caller
/// checks (`generation`) before trusting it.
pub fn cached(rel: pg_sys::Relation) -> Option<Arc<Run>> {
    cache::lookup::<Run>(rel, "learned run")
}

/// The current run of index `rel`: cached, or read from its pages.
pub fn get(rel: pg_sys::Relation) -> Arc<Run> {
    current(rel).0
}

/// `get`, and whether the delta's key tree may hold entries now (the
/// metapage's `delta_clear`, from the same read; the run's own `meta`
/// keeps the value of when it was cached).
pub fn current(rel: pg_sys::Relation) -> (Arc<Run>, bool) {
    let meta = run_meta(Shared::lock(rel, RUN_META_BLOCK).page());
    (of_meta(rel, meta), meta.delta_has_keys())
}

/// Clears `delta_clear` before a key goes into the delta, where it is set
/// (one WAL record, by the first key insert after a build or merge).
pub fn note_delta_key(rel: pg_sys::Relation) {
    if run_meta(Shared::lock(rel, RUN_META_BLOCK).page()).delta_has_keys() {
        return;
    }
    let g = Exclusive::lock(rel, RUN_META_BLOCK);
    let mut m = run_meta(g.page());
    if m.delta_has_keys() {
        // Another insert was first.
        return;
    }
    m.delta_clear = 0;
    let x = Xlog::start(rel);
    x.register(&g, false).set_header(m);
    x.finish();
}

fn of_meta(rel: pg_sys::Relation, meta: RunMeta) -> Arc<Run> {
    if let Some(run) = cache::lookup::<Run>(rel, "learned run").filter(|r| r.meta.generation == meta.generation) {
        return run;
    }
    cache::remove(rel, "learned run");
    let mut starts = Vec::with_capacity(meta.extents().len());
    let mut pages = 0usize;
    for e in meta.extents() {
        starts.push(pages);
        pages += e[1] as usize;
    }
    let (data_pages, model_pages) = (meta.data_pages as usize, meta.model_pages as usize);
    if pages != data_pages + model_pages + meta.directory_pages as usize {
        learned_corrupted(format!(
            "extents of {pages} pages for {data_pages} data, {model_pages} model and {} directory pages",
            meta.directory_pages
        ));
    }
    let mut run = Run { meta, pgm: Pgm::default(), starts, firsts: Vec::with_capacity(data_pages + 1), device: Mutex::new(None) };
    if meta.has_directory() {
        for j in 0..meta.directory_pages as usize {
            let g = Shared::lock(rel, run.block(data_pages + model_pages + j));
            run.firsts.extend_from_slice(directory_page_firsts(g.page()));
        }
    } else {
        run.firsts.extend((0..data_pages).map(|i| (i * RUN_CAPACITY) as u64));
    }
    run.firsts.push(meta.n);
    if run.firsts.len() != data_pages + 1 || (data_pages > 0 && run.firsts[0] != 0) || run.firsts.windows(2).any(|w| w[0] >= w[1]) {
        learned_corrupted(format!("a directory of {} pages for {data_pages} data pages of {} entries", run.firsts.len() - 1, meta.n));
    }
    let mut pgm = Pgm { eps: meta.eps as usize, eps_inner: meta.eps_inner as usize, n: meta.n as usize, ..Pgm::default() };
    for j in 0..meta.model_pages as usize {
        let g = Shared::lock(rel, run.block(meta.data_pages as usize + j));
        for (f, s, i) in model_page_segments(g.page()) {
            pgm.first.push(f);
            pgm.slope.push(s);
            pgm.intercept.push(i);
        }
    }
    pgm.levels = meta.levels[..meta.nlevels as usize].iter().map(|l| Level { offset: l[0] as usize, len: l[1] as usize }).collect();
    let sane = pgm.first.len() == meta.segments as usize
        && pgm.levels.iter().all(|l| l.offset + l.len <= pgm.first.len())
        && (meta.n == 0) == pgm.levels.is_empty()
        && pgm.levels.last().is_none_or(|l| l.len == 1);
    if !sane {
        learned_corrupted(format!("a model of {} segments in {} levels, {} expected", pgm.first.len(), meta.nlevels, meta.segments));
    }
    run.pgm = pgm;
    cache::store(rel, "learned run", run)
}

impl Run {
    pub fn n(&self) -> usize {
        self.meta.n as usize
    }

    pub fn pages(&self) -> usize {
        self.meta.data_pages as usize
    }

    /// The first position of data page i (n for i = pages).
    pub fn first(&self, i: usize) -> usize {
        self.firsts[i] as usize
    }

    /// The data page holding position p < n: a gallop from where full
    /// plain pages would put it (there it is, whatever the table's size,
    /// for unique keys; run pages move it a little), where a binary search
    /// of the directory (1.4 MB at 10^8 rows) misses the cache at each of
    /// its last steps.
    pub fn page_of(&self, p: usize) -> usize {
        debug_assert!(p < self.n());
        let f = &self.firsts;
        let at = |i: usize| f[i] as usize <= p;
        let mut i = (p / RUN_CAPACITY).min(f.len() - 2);
        if at(i) {
            // The last page starting at or before p, at or after i.
            let mut step = 1;
            while i + step < f.len() && at(i + step) {
                i += step;
                step *= 2;
            }
            let end = (i + step).min(f.len());
            i + f[i..end].partition_point(|&x| x as usize <= p) - 1
        } else {
            let mut step = 1;
            let mut hi = i;
            while hi >= step && !at(hi - step) {
                hi -= step;
                step *= 2;
            }
            let lo = hi.saturating_sub(step);
            lo + f[lo..hi].partition_point(|&x| x as usize <= p) - 1
        }
    }

    /// The block of the run's page `i` (data pages first, then model).
    pub fn block(&self, i: usize) -> u32 {
        let e = self.starts.partition_point(|&s| s <= i) - 1;
        self.meta.extents[e][0] + (i - self.starts[e]) as u32
    }

    /// Data page `i`, share-locked, pinned through `recent` (the index's
    /// memory of its buffers: a batch reads thousands of pages).
    pub fn page(&self, recent: &mut RecentPages, i: usize) -> Shared {
        assert!(i < self.pages());
        let block = self.block(i);
        recent.lock_shared(block)
    }

    /// Asks the CPU for what the search of probe `j + PREFETCH_PROBES`
    /// (`hints`: the batch's predicted positions) will read first, where
    /// the page's buffer is remembered: its buffer header, special area,
    /// the window's keys and the TID at the hint. A batch asks while it
    /// searches probe j, so that those misses overlap (at 10^8 rows each
    /// probe reads its own page).
    pub fn prefetch_ahead(&self, recent: &RecentPages, hints: &[u64], j: usize) {
        let Some(&hint) = hints.get(j + PREFETCH_PROBES) else { return };
        if self.n() == 0 {
            return;
        }
        let hint = hint as usize;
        let i = self.page_of(hint.min(self.n() - 1));
        recent.prefetch_known(self.block(i), |page| prefetch_near(page, hint.saturating_sub(self.first(i)), self.pgm.eps));
    }

    /// The model's guess of q's position (CPU).
    pub fn predict(&self, q: u64) -> usize {
        self.pgm.predict_position(q)
    }

    /// The first position holding a key >= q (n if none), from the
    /// predicted position `hint`: the first page whose last key is >= q,
    /// found by galloping from the hint's page, then searched.
    pub fn lower_bound(&self, recent: &mut RecentPages, q: u64, hint: usize) -> usize {
        self.lower_bound_page(recent, q, hint).0
    }

    /// `lower_bound`, and the data page holding the position (its index
    /// and the page, still locked) where there is one: a scan goes on to
    /// read it without looking it up again.
    pub fn lower_bound_page(&self, recent: &mut RecentPages, q: u64, hint: usize) -> (usize, Option<(usize, Shared)>) {
        let pages = self.pages();
        if pages == 0 {
            return (0, None);
        }
        let eps = self.pgm.eps;
        // The hint as a slot of page i (clamped into the page by the window).
        let near = |i: usize| hint.saturating_sub(self.first(i));
        let found = |i: usize, g: Shared| {
            let (slot, count) = {
                let p = RunPage::new(g.page());
                (p.lower_bound_near(q, near(i), eps), p.count())
            };
            (self.first(i) + slot, (slot < count).then_some((i, g)))
        };
        let last_key = |recent: &mut RecentPages, i: usize| self.page(recent, i).page().special().high;
        // The answer's page: the least i with last_key(i) >= q. Where the
        // predicted page's fences bound q it is that page (every earlier
        // page ends at or below its first key): one page read.
        let h = self.page_of(hint.min(self.n() - 1));
        let high = {
            let g = self.page(recent, h);
            prefetch_near(g.page(), near(h), eps);
            let s = g.page().special();
            if (s.low < q || h == 0) && (q <= s.high || h + 1 == pages) {
                return found(h, g);
            }
            s.high
        };
        // Else gallop left or right from h, then bisect: (lo, hi] holds it.
        let (mut lo, mut hi): (isize, isize);
        if high >= q {
            hi = h as isize;
            let mut step = 1;
            lo = hi - 1;
            while lo >= 0 && last_key(recent, lo as usize) >= q {
                hi = lo;
                lo -= step;
                step *= 2;
            }
            lo = lo.max(-1);
        } else {
            lo = h as isize;
            let mut step = 1;
            hi = lo + 1;
            while (hi as usize) < pages && last_key(recent, hi as usize) < q {
                lo = hi;
                hi += step;
                step *= 2;
            }
            hi = hi.min(pages as isize);
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if last_key(recent, mid as usize) >= q {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        let i = hi as usize;
        if i == pages {
            return (self.n(), None);
        }
        found(i, self.page(recent, i))
    }

    /// Every live entry whose key is one of the ascending distinct
    /// `codes` (hints: their predicted positions), into `out` in key
    /// order: the codes a page holds are searched under one lock of it,
    /// each from where the last ended (as a scan loads a page for every
    /// `= ANY` point on it); a code past the page is sought from its hint.
    /// Stops, after a page, once `out` holds more than `cap` entries. With
    /// a `tally`, a key's entries on all-visible heap pages are counted
    /// there instead (where none of them is dead).
    pub fn collect_all_equal(
        &self,
        rel: pg_sys::Relation,
        codes: &[u64],
        hints: &[u64],
        out: &mut Vec<(u64, Tid)>,
        cap: usize,
        mut tally: Option<&mut Tally>,
    ) {
        let mut take = |p: &RunPage, from: usize, to: usize, probe: usize, out: &mut Vec<(u64, Tid)>| match tally.as_deref_mut() {
            Some(t) if !p.any_dead(from, to) => t.take(p, from..to, probe, out),
            _ => p.copy_live(from, to, out),
        };
        let recent = &mut RecentPages::of(rel);
        let mut j = 0;
        while j < codes.len() && out.len() <= cap {
            self.prefetch_ahead(recent, hints, j);
            // None: no key >= codes[j], nor any later code.
            let (pos, Some((mut i, mut g))) = self.lower_bound_page(recent, codes[j], hints[j] as usize) else { return };
            let mut at = pos - self.first(i);
            loop {
                let (last, continues) = {
                    let p = RunPage::new(g.page());
                    let last = p.s.high;
                    while j < codes.len() && codes[j] < last {
                        let start = p.lower_bound_from(at, codes[j]);
                        at = p.upper_bound_from(start, codes[j]);
                        take(&p, start, at, j, out);
                        j += 1;
                    }
                    // The page's last key: its entries run to the page's
                    // end and may go on over the next pages.
                    let on = j < codes.len() && codes[j] == last;
                    if on {
                        let start = p.lower_bound_from(at, last);
                        take(&p, start, p.count(), j, out);
                    }
                    (last, on)
                };
                if !continues || out.len() > cap {
                    break;
                }
                if i + 1 == self.pages() {
                    j += 1;
                    break;
                }
                drop(g);
                i += 1;
                g = self.page(recent, i);
                at = 0;
                if RunPage::new(g.page()).s.low != last {
                    // The run ended with the page before.
                    j += 1;
                }
            }
        }
    }

    fn device(&self, gpu: &Gpu) -> Result<Arc<DevicePgm>, GpuError> {
        let mut slot = self.device.lock().expect("not poisoned");
        if let Some(d) = slot.as_ref() {
            return Ok(d.clone());
        }
        let d = Arc::new(DevicePgm::upload(gpu, &self.pgm, None)?);
        *slot = Some(d.clone());
        Ok(d)
    }
}

/// The model's predictions for a batch of keys, on the CPU (all cores) or
/// the GPU.
pub struct Predictions<'a>(pub &'a Run);

impl BatchJob for Predictions<'_> {
    type Query = u64;
    type Output = u64;

    fn run_cpu(&self, queries: &[u64]) -> Vec<u64> {
        use rayon::prelude::*;
        queries.par_iter().with_min_len(4096).map(|&q| self.0.predict(q) as u64).collect()
    }

    fn run_gpu(&self, gpu: &Gpu, queries: &[u64]) -> Result<Vec<u64>, GpuError> {
        let mut out = vec![0; queries.len()];
        predict_gpu(gpu, &self.0.pgm, &*self.0.device(gpu)?, queries, &mut out, Schedule::default())?;
        Ok(out)
    }
}

/// Predicted positions of the ascending `keys` of index `rel`: from the
/// GPU service where it pays (`service::predictions`), else through the
/// batch executor.
pub fn predictions(rel: pg_sys::Relation, run: &Run, keys: &[u64], what: &'static str) -> Vec<u64> {
    if run.n() == 0 {
        return vec![0; keys.len()];
    }
    if let Some(p) = super::service::predictions(rel, run, keys, what) {
        return p;
    }
    crate::batch::submit(what, &Predictions(run), keys)
}

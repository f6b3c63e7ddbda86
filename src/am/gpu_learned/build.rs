//! The build: (key, TID) from the heap into the external sort (within
//! `maintenance_work_mem`, as gpu_btree's), then one pass over the sorted
//! entries that packs the run's data pages and fits the model as the keys
//! stream by (`StreamFit`: the model's memory is its segments), then the
//! model and directory pages (`write_run`, which merges use too). NULLs
//! go to the delta's NULL chain; the delta starts as one empty leaf. No
//! WAL per page: the common build logs every page.

use super::page::*;
use crate::am::common::HeapRows;
use crate::am::gpu_btree::build::write_nulls;
use crate::am::gpu_btree::keys;
use crate::am::gpu_btree::page::*;
use crate::storage::{new_page_in, Fork, TempFile, Tid};
use gpuindex_engine::external_sort::ExternalSorter;
use gpuindex_engine::pgm::{StreamFit, DEFAULT_EPS_INNER};
use pgrx::pg_sys;

/// The run's bottom ε: a window of 2ε + 3 entries spans at most two data
/// pages, and the engine's bench found 16 the fastest last mile.
pub const EPS: usize = 16;

pub fn key_type(index: pg_sys::Relation) -> pg_sys::Oid {
    crate::am::common::key_type(index, "gpu_learned")
}

pub fn build(index: pg_sys::Relation, fork: Fork, rows: Option<&HeapRows>) -> f64 {
    let typ = key_type(index);
    if keys::family_of(typ).is_none() {
        crate::error::raise(
            pgrx::prelude::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("gpu_learned does not support type {}", crate::error::type_name(typ)),
            "gpu_learned indexes int2, int4, int8, float4, float8, date, timestamp and timestamptz columns.",
        );
    }
    // SAFETY: a GUC variable read in the backend's thread.
    let bytes = unsafe { pg_sys::maintenance_work_mem } as usize * 1024;
    let mut entries = ExternalSorter::<(u64, Tid), _>::new(TempFile::new(), bytes / 8 * 7);
    let mut nulls = ExternalSorter::<Tid, _>::new(TempFile::new(), bytes / 8);
    if let Some(rows) = rows {
        rows.scan(index, |tid, value| match value {
            Some(v) => entries.push((keys::encode(v, typ), tid)),
            None => nulls.push(tid),
        });
    }
    let ((entries, key_stats), (nulls, null_stats)) = (entries.finish(), nulls.finish());
    let mut meta = new_page_in(index, fork);
    let mut run_meta_page = new_page_in(index, fork);
    let mut root = new_page_in(index, fork);
    assert_eq!((meta.block(), run_meta_page.block()), (META_BLOCK, RUN_META_BLOCK));
    {
        let mut p = root.page_mut_unlogged();
        p.init(special(KIND_LEAF, 0, LEFTMOST | RIGHTMOST, 0, u64::MAX));
        leaf_set(&mut p, &[], &[]);
    }
    root.mark_dirty();
    let (null_head, null_tail) = write_nulls(index, fork, nulls);
    let m = Meta { null_head, null_tail, ..Meta::new(root.block()) };
    init_meta(&mut meta.page_mut_unlogged(), &m);
    meta.mark_dirty();
    let rm = write_run(&mut BuildPages { index, fork }, entries);
    init_run_meta(&mut run_meta_page.page_mut_unlogged(), rm);
    run_meta_page.mark_dirty();
    (key_stats.records + null_stats.records) as f64
}

/// Where a run's pages go: new pages of a build (which logs them all at
/// its end), or a merge's (`merge.rs`).
pub trait PageSink {
    /// Writes the run's next page with `fill`; returns its block.
    fn write(&mut self, fill: &dyn Fn(&mut PageMut)) -> u32;
}

struct BuildPages {
    index: pg_sys::Relation,
    fork: Fork,
}

impl PageSink for BuildPages {
    fn write(&mut self, fill: &dyn Fn(&mut PageMut)) -> u32 {
        let mut g = new_page_in(self.index, self.fork);
        fill(&mut g.page_mut_unlogged());
        g.mark_dirty();
        g.block()
    }
}

/// Writes the sorted entries as a run: its data pages, fitting the model
/// as the keys stream by, then its model and directory pages. Returns the
/// run's metapage (generation and retired extents left to the caller).
pub fn write_run(sink: &mut dyn PageSink, entries: impl Iterator<Item = (u64, Tid)>) -> RunMeta {
    let mut fit = StreamFit::new(EPS, DEFAULT_EPS_INNER);
    // (A build or merge leaves the delta's key tree empty.)
    let mut rm = RunMeta { eps: EPS as u32, eps_inner: DEFAULT_EPS_INNER as u32, generation: 1, delta_clear: 1, ..RunMeta::default() };
    let mut extents = Vec::new();
    // The first position of each data page, for the directory.
    let mut firsts = Vec::new();
    let (mut keys, mut tids) = (Vec::with_capacity(RUN_PAGE_CAPACITY), Vec::with_capacity(RUN_PAGE_CAPACITY));
    let mut entries = entries.peekable();
    while entries.peek().is_some() {
        keys.clear();
        tids.clear();
        // A plain page's worth, or more while they are all one key (a run
        // page, which ends where its key does).
        while let Some(&(k, t)) = entries.peek() {
            let n = keys.len();
            if n >= RUN_CAPACITY && (n == RUN_PAGE_CAPACITY || keys[0] != k) {
                break;
            }
            entries.next();
            fit.push(k);
            keys.push(k);
            tids.push(t);
        }
        push_block(&mut extents, sink.write(&|p| run_page_set(p, &keys, &tids)));
        firsts.push(rm.n);
        rm.data_pages += 1;
        rm.n += keys.len() as u64;
    }
    let pgm = fit.finish();
    if pgm.levels.len() > MAX_MODEL_LEVELS {
        learned_corrupted(format!("a model of {} levels", pgm.levels.len()));
    }
    rm.nlevels = pgm.levels.len() as u32;
    for (d, l) in rm.levels.iter_mut().zip(&pgm.levels) {
        *d = [l.offset as u32, l.len as u32];
    }
    rm.segments = pgm.first.len() as u32;
    let segments: Vec<(u64, f64, f64)> = (0..pgm.first.len()).map(|i| (pgm.first[i], pgm.slope[i], pgm.intercept[i])).collect();
    for chunk in segments.chunks(SEGMENTS_PER_PAGE) {
        push_block(&mut extents, sink.write(&|p| model_page_set(p, chunk)));
        rm.model_pages += 1;
    }
    for chunk in firsts.chunks(DIRECTORY_PER_PAGE) {
        push_block(&mut extents, sink.write(&|p| directory_page_set(p, chunk)));
        rm.directory_pages += 1;
    }
    if !set_extents(&mut rm.extents, &mut rm.nextents, &extents) {
        learned_corrupted(format!("a run in {} extents", extents.len()));
    }
    rm
}

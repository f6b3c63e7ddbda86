//! Batches of equality probes (`gpu_learned_probe`, `gpuindex_search`, the
//! batched join): the run's lower bounds start from one batch of model
//! predictions on the GPU (or all CPU cores) and finish on the pages; the
//! delta is probed as gpu_btree probes (its mirror). Rows are those
//! visible to the caller's snapshot, in heap order.

use super::run;
use crate::am::common::search::{self, Batch, BatchSearch, Counted, Hits};
use crate::am::common::OpenIndex;
use crate::am::gpu_btree::leaf_step::Tally;
use crate::am::gpu_btree::page::{Leaf, Shared};
use crate::am::gpu_btree::probe::{probe_batch, probe_function};
use crate::am::gpu_btree::tree::Tree;
use crate::storage::Tid;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rayon::slice::ParallelSliceMut;

/// Every live (code, TID) of the run and the delta whose code is one of
/// the ascending distinct `codes`, in code order, less those a `tally`
/// counts; past `cap` entries, how many it found when it stopped.
pub fn probe(
    index: pg_sys::Relation,
    codes: &[u64],
    what: &'static str,
    cap: usize,
    mut tally: Option<&mut Tally>,
) -> Result<Vec<(u64, Tid)>, usize> {
    // The run and the delta of one generation: the delta is read between
    // two reads of it (as a scan starts, `scan.rs`).
    loop {
        let (run, delta_has_keys) = run::current(index);
        let hints = run::predictions(index, &run, codes, what);
        let mut out = Vec::with_capacity(codes.len());
        // (A generation read again counts again.)
        if let Some(t) = tally.as_deref_mut() {
            t.counted = 0;
        }
        run.collect_all_equal(index, codes, &hints, &mut out, cap, tally.as_deref_mut());
        if out.len() > cap {
            return Err(out.len());
        }
        // The delta, unless its key tree is clear or an empty root leaf
        // (rows a snapshot sees were there when it was taken).
        if delta_has_keys {
            let tree = Tree::new(index);
            let m = tree.meta();
            if m.root_level > 0 || Leaf::new(Shared::lock(index, m.root).page()).count() > 0 {
                let found = out.len();
                out.extend(
                    crate::am::gpu_btree::mirror::probe(&tree, codes, what, cap - found, tally.as_deref_mut()).map_err(|n| found + n)?,
                );
            }
        }
        if run::generation(index) == run.meta.generation {
            out.par_sort_unstable();
            return Ok(out);
        }
    }
}

impl BatchSearch for super::GpuLearned {
    const NAME: &'static str = "gpu_learned";

    /// Equality only; ranges are index scans.
    fn search(open: &OpenIndex, batch: &Batch) -> Result<Hits, search::TooMany> {
        probe_batch(Self::NAME, open, batch, None, find(open, batch)).map(|(rest, _)| rest)
    }

    /// The run's pages and the delta's leaves count a key's entries on
    /// all-visible heap pages as they are walked (`Tally`).
    fn count(open: &OpenIndex, batch: &Batch, visible: &mut dyn FnMut(u32) -> bool) -> Result<Counted, search::TooMany> {
        probe_batch(Self::NAME, open, batch, Some(visible), find(open, batch)).map(|(rest, counted)| Counted { counted, rest })
    }

    fn joins(strategy: u16) -> bool {
        strategy == pg_sys::BTEqualStrategyNumber as u16
    }

    fn nearest(_strategy: u16) -> bool {
        false
    }
}

/// gpu_learned's search of ascending distinct codes (`probe_batch`'s
/// `find`).
fn find<'a>(
    open: &'a OpenIndex,
    batch: &'a Batch,
) -> impl FnOnce(&[u64], usize, Option<&mut Tally>) -> Result<Vec<(u64, Tid)>, usize> + 'a {
    |codes, cap, tally| probe(open.index, codes, batch.what, cap, tally)
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    requires = [functions::estimate::gpuindex_batch_rows],
    sql = "CREATE FUNCTION gpu_learned_probe(index regclass, keys anyarray) RETURNS TABLE (ord bigint, ctid tid)
    VOLATILE PARALLEL SAFE STRICT SUPPORT gpuindex_batch_rows LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_learned_probe(index: pg_sys::Oid, keys: pgrx::datum::AnyArray, fcinfo: pg_sys::FunctionCallInfo) {
    probe_function(index, keys, "gpu_learned", "gpu_learned_probe", fcinfo)
}

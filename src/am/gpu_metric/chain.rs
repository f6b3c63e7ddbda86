//! Runs of entry pages linked by `right`: reading them, and appending an
//! entry to a chain (aminsert: the delta for vectors, the NULL chain).

use super::page::*;
use super::page::{Exclusive, Shared};
use crate::storage::Xlog;
use gpuindex_engine::gts::Metric;
use pgrx::pg_sys;
use std::borrow::Cow;

/// Calls `f` with each entry of the run starting at `block`.
pub fn for_run(rel: pg_sys::Relation, dim: usize, mut block: u32, mut f: impl FnMut(&Entry)) {
    while block != NONE {
        let g = Shared::lock(rel, block);
        let (entries, s) = entries(g.page(), dim);
        entries.for_each(|e| f(&e));
        block = s.right;
    }
}

/// The blocks of the run starting at `block`.
pub fn run_blocks(rel: pg_sys::Relation, mut block: u32) -> Vec<u32> {
    let mut out = Vec::new();
    while block != NONE {
        out.push(block);
        block = Shared::lock(rel, block).page().special().right;
    }
    out
}

/// Appends a row to the delta, or to the NULL chain (`v` None, entries
/// without a vector): the metapage and the tail page in one WAL record,
/// with a new tail page when it is full. The metapage's exclusive lock
/// orders concurrent appends. The first vector of an index built empty
/// sets its dimension; any other dimension is an ERROR (`fit_row`).
pub fn append(index: pg_sys::Relation, metric: Metric, tid: u64, v: Option<Cow<[f32]>>) {
    let meta = Exclusive::lock(index, META_BLOCK);
    let mut m = read_meta(meta.page());
    let v = v.map(|v| {
        if m.dim == 0 {
            m.dim = v.len() as u32;
        }
        super::build::fit_row(metric, v, m.dim as usize)
    });
    let dim = if v.is_some() { m.dim as usize } else { 0 };
    let e = Entry { tid, pdist: 0.0, v: v.as_deref().unwrap_or(&[]) };
    let c = if v.is_some() { &mut m.delta } else { &mut m.nulls };
    let tail = Exclusive::lock(index, c.tail);
    let used = entry_count(&tail.page());
    let fresh = (used >= entries_per_page(dim)).then(|| new_page(index));
    let x = Xlog::start(index);
    let mut mp = x.register(&meta, false);
    let mut tp = x.register(&tail, false);
    c.entries += 1;
    match &fresh {
        Some(f) => {
            let mut fp = x.register(f, true);
            fp.init(special(KIND_CHAIN));
            put_entry(&mut fp, dim, 0, &e);
            tp.update_special(|s| s.right = f.block());
            c.tail = f.block();
            c.pages += 1;
        }
        None => put_entry(&mut tp, dim, used, &e),
    }
    write_meta(&mut mp, &m);
    x.finish();
}

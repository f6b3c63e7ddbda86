//! Runs of entry pages linked by `right`: reading them, and appending an
//! entry to a chain (aminsert: the delta for vectors, the NULL chain).

use super::page::*;
use super::page::{Exclusive, Shared};
use crate::storage::Xlog;
use gpuindex_engine::gts::Metric;
use pgrx::pg_sys;
use std::borrow::Cow;

/// Calls `f` with each entry of the run starting at `block` (a wide
/// entry's vector joined from its continuation pages, read after its own
/// page: they are written before it is linked, and change only when a
/// rebuild replaces the whole run).
pub fn for_run(rel: pg_sys::Relation, dim: usize, mut block: u32, mut f: impl FnMut(&Entry)) {
    let wide = continuation_pages(dim) > 0;
    let mut joined = Vec::new();
    while block != NONE {
        let head = {
            let g = Shared::lock(rel, block);
            let (mut entries, s) = entries(g.page(), dim);
            block = s.right;
            if !wide {
                entries.for_each(|e| f(&e));
                continue;
            }
            // A wide entry's own page; or none: a continuation page (its
            // entry read already, or removed).
            entries.next().map(|e| {
                joined.clear();
                joined.extend_from_slice(e.v);
                (e.tid, e.pdist)
            })
        };
        let Some((tid, pdist)) = head else { continue };
        while joined.len() < dim {
            let g = Shared::lock(rel, block);
            let (part, s) = continued(g.page(), dim - joined.len());
            joined.extend_from_slice(part);
            block = s.right;
        }
        f(&Entry { tid, pdist, v: &joined });
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
    let full = used >= entries_per_page(dim) || is_continued(&tail.page());
    let fresh = full.then(|| new_page(index));
    // A wide entry's continuation pages, back to front, each in a record
    // of its own before the entry's page links them (a crash between
    // leaves them unreachable: VACUUM frees such pages).
    let continued: Vec<Exclusive> = continued_parts(e.v).map(|_| new_page(index)).collect();
    let mut next = NONE;
    for (g, part) in continued.iter().zip(continued_parts(e.v)).rev() {
        let x = Xlog::start(index);
        let mut p = x.register(g, true);
        p.init(special(KIND_CHAIN));
        put_continued(&mut p, part);
        p.update_special(|s| s.right = next);
        x.finish();
        next = g.block();
    }
    let x = Xlog::start(index);
    let mut mp = x.register(&meta, false);
    let mut tp = x.register(&tail, false);
    c.entries += 1;
    let mut host = match &fresh {
        Some(f) => {
            let mut fp = x.register(f, true);
            fp.init(special(KIND_CHAIN));
            tp.update_special(|s| s.right = f.block());
            (c.tail, c.pages) = (f.block(), c.pages + 1);
            fp
        }
        None => tp,
    };
    put_entry(&mut host, dim, if fresh.is_some() { 0 } else { used }, &e);
    if let Some(last) = continued.last() {
        host.update_special(|s| s.right = next);
        (c.tail, c.pages) = (last.block(), c.pages + continued.len() as u32);
    }
    write_meta(&mut mp, &m);
    x.finish();
}

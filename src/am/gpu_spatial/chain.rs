//! Chains of entry pages beside the tree (linked by `right`): appending
//! an entry (aminsert), and reading them.

use super::page::*;
use super::page::{Exclusive, Shared};
use crate::storage::Xlog;
use pgrx::pg_sys;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Delta,
    Odd,
}

fn chain(m: &mut Meta, which: Which) -> &mut Chain {
    match which {
        Which::Delta => &mut m.delta,
        Which::Odd => &mut m.odd,
    }
}

/// The chain an entry belongs to: the delta for finite points, the odd
/// chain for NULLs and non-finite points.
pub fn which(e: &Entry) -> Which {
    if !e.is_null() && e.x.is_finite() && e.y.is_finite() {
        Which::Delta
    } else {
        Which::Odd
    }
}

/// Appends one entry to its chain: the metapage (counts, tail) and the
/// tail page in one WAL record, plus a new tail page when it is full. The
/// metapage's exclusive lock orders concurrent appends (as hash's does).
/// Returns the metapage as it is after the append.
pub fn append(index: pg_sys::Relation, e: Entry) -> Meta {
    let meta = Exclusive::lock(index, META_BLOCK);
    let mut m = read_meta(meta.page());
    let c = chain(&mut m, which(&e));
    let tail = Exclusive::lock(index, c.tail);
    let full = entries(tail.page()).0.len() >= ENTRY_CAPACITY;
    let fresh = full.then(|| new_page(index));
    let x = Xlog::start(index);
    let mut mp = x.register(&meta, false);
    let mut tp = x.register(&tail, false);
    c.entries += 1;
    match &fresh {
        Some(f) => {
            let mut fp = x.register(f, true);
            fp.init(special(KIND_DELTA));
            set_entries(&mut fp, &[e]);
            tp.update_special(|s| s.right = f.block());
            c.tail = f.block();
            c.pages += 1;
        }
        None => push_entry(&mut tp, e),
    }
    write_meta(&mut mp, &m);
    x.finish();
    m
}

/// Calls `f` with the entries of each page of a chain.
pub fn for_chain(rel: pg_sys::Relation, c: Chain, mut f: impl FnMut(&[Entry])) {
    let mut block = c.head;
    while block != NONE {
        let g = Shared::lock(rel, block);
        let (e, s) = entries(g.page());
        f(e);
        block = s.right;
    }
}

/// Calls `f` with the entries of every chain scans read beside the tree.
pub fn for_chains(rel: pg_sys::Relation, m: &Meta, mut f: impl FnMut(&[Entry])) {
    for c in m.chains() {
        for_chain(rel, c, &mut f);
    }
}

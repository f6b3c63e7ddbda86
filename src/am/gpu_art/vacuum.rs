//! VACUUM: the leaves left to right, each under a cleanup lock (no scan
//! is returning its entries: index-only scans keep their page pinned),
//! rewritten without the entries of dead rows in one record. Splits
//! only move entries right, so a concurrent split cannot hide any from
//! the walk. Empty leaves stay in the tree (reused by later inserts); the
//! overflow chains of removed long keys are freed.

use super::long;
use super::page::*;
use super::tree::Tree;
use crate::storage::Xlog;
use pgrx::pg_sys;

pub fn bulk_delete(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult, dead: &dyn Fn(Tid) -> bool) {
    let mut block = Tree::new(index).leftmost(0).block();
    let mut freed = false;
    loop {
        let g = Exclusive::lock_for_cleanup(index, block);
        let n = Node::new(g.page());
        let (kept, removed): (Vec<(Stored, u64)>, Vec<_>) = (0..n.count()).map(|i| n.entry(i)).partition(|&(_, tid)| !dead(tid));
        let removed_long: Vec<OwnedStored> = removed.iter().filter(|(k, _)| k.long).map(|&(k, _)| k.to_owned()).collect();
        let removed = removed.len();
        stats.tuples_removed += removed as f64;
        stats.num_index_tuples += kept.len() as f64;
        let (rightmost, right) = (n.rightmost(), n.s.right);
        if removed > 0 {
            // The record changes a copy of the page (GenericXLog's), so the
            // kept keys, read from the page itself, stay valid meanwhile.
            let x = Xlog::start(index);
            set_entries(&mut x.register(&g, false), &kept, (!rightmost).then(|| n.high()), n.low());
            x.finish();
        }
        drop(g);
        for k in &removed_long {
            long::free(index, k.stored());
            freed = true;
        }
        if rightmost {
            if freed {
                crate::storage::recycle::vacuum_fsm(index);
            }
            return;
        }
        block = right;
    }
}

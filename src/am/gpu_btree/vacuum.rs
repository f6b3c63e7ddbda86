//! VACUUM: ambulkdelete removes the entries of dead heap tuples, leaf by
//! leaf and NULL page by NULL page (one WAL record per changed page);
//! the common amvacuumcleanup reports the index's size. Empty pages are kept (no page
//! deletion yet): their fence keys keep every mirror hint valid.

use super::page::Exclusive;
use super::page::*;
use super::tree::Tree;
use crate::storage::Xlog;
use pgrx::pg_sys;

pub fn bulk_delete(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult, dead: &dyn Fn(Tid) -> bool) {
    let tree = Tree::new(index);
    let m = tree.meta();
    let (mut removed, mut kept) = (0f64, 0f64);
    let mut block = m.leftmost[0];
    while block != NONE {
        // SAFETY: VACUUM's interrupt and cost-delay check.
        unsafe { pg_sys::vacuum_delay_point() };
        let page = Exclusive::lock(index, block);
        let l = Leaf::new(page.page());
        let (keys, tids): (Vec<u64>, Vec<Tid>) = (0..l.count()).map(|i| (l.keys()[i], l.tid(i))).filter(|&(_, t)| !dead(t)).unzip();
        removed += (l.count() - keys.len()) as f64;
        kept += keys.len() as f64;
        let next = if l.rightmost() { NONE } else { l.s.right };
        if keys.len() != l.count() {
            let x = Xlog::start(index);
            leaf_set(&mut x.register(&page, false), &keys, &tids);
            x.finish();
        }
        block = next;
    }
    let mut block = m.null_head;
    while block != NONE {
        let page = Exclusive::lock(index, block);
        let n = Nulls::new(page.page());
        let tids: Vec<Tid> = (0..n.count()).map(|i| n.tid(i)).filter(|&t| !dead(t)).collect();
        removed += (n.count() - tids.len()) as f64;
        kept += tids.len() as f64;
        let next = n.s.right;
        if tids.len() != n.count() {
            let x = Xlog::start(index);
            nulls_set(&mut x.register(&page, false), &tids);
            x.finish();
        }
        block = next;
    }
    stats.tuples_removed += removed;
    stats.num_index_tuples = kept;
}

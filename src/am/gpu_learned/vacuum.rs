//! VACUUM of the run: entries of dead heap tuples get their dead bit, in
//! place (positions, and so the model, stay valid; a rebuild drops them),
//! each data page under a cleanup lock (which waits for index-only scans'
//! pins), one WAL record per changed page. The delta is vacuumed as a
//! gpu_btree is.

use super::page::*;
use super::run;
use crate::am::gpu_btree::page::Exclusive;
use crate::storage::{Tid, Xlog};
use pgrx::pg_sys;

/// Marks the run's entries `dead` says are gone; returns (removed, kept).
pub fn bulk_delete_run(index: pg_sys::Relation, dead: &dyn Fn(Tid) -> bool) -> (f64, f64) {
    let run = run::get(index);
    let (mut removed, mut kept) = (0f64, 0f64);
    for i in 0..run.pages() {
        // SAFETY: VACUUM's interrupt and cost-delay check.
        unsafe { pg_sys::vacuum_delay_point() };
        let page = Exclusive::lock_for_cleanup(index, run.block(i));
        let p = RunPage::new(page.page());
        let live: Vec<usize> = (0..p.count()).filter(|&s| !p.dead(s)).collect();
        let newly: Vec<usize> = live.iter().copied().filter(|&s| dead(p.tid(s))).collect();
        removed += newly.len() as f64;
        kept += (live.len() - newly.len()) as f64;
        if !newly.is_empty() {
            let x = Xlog::start(index);
            let mut mp = x.register(&page, false);
            newly.iter().for_each(|&s| set_dead(&mut mp, s));
            x.finish();
        }
    }
    (removed, kept)
}

//! A summing plan's rows (`count`'s aggregate paths, an inner join
//! without quals whose sums read columns of fixed width): each match's
//! visible row located on its pinned page (`PageFetch::locate`) and its
//! summed columns read there (`Totals::add_row`), without making the
//! joined row: what the rows would add to, at a few tens of nanoseconds a
//! match. A row with NULLs is taken apart in the heap slot instead.

use super::aggregate::Totals;
use super::exec::State;
use pgrx::pg_sys;
use std::time::Instant;

impl State {
    /// Sums every match of the join into `totals`: a fused call's chunks
    /// (under a parallel plan, this participant's ranges of its matches),
    /// or each chunk of outer rows probed in the index, piece by piece.
    ///
    /// # Safety
    /// The node's contexts, table and the query's snapshot; `row_offsets`
    /// set.
    pub(super) unsafe fn sum_rows(&mut self, econtext: *mut pg_sys::ExprContext, snapshot: pg_sys::Snapshot, totals: &mut Totals) {
        // SAFETY: the caller's contract.
        unsafe {
            loop {
                pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
                if self.fused.is_some() {
                    if self.outer_done {
                        return;
                    }
                    self.load_fused(econtext);
                } else {
                    let keys = self.load(econtext);
                    if self.rows > 0 {
                        self.probe(keys);
                    }
                }
                if self.rows == 0 {
                    return;
                }
                loop {
                    self.sum_matches(snapshot, totals);
                    if self.fused.is_some() || !self.next_piece() {
                        break;
                    }
                    self.start_matches();
                }
            }
        }
    }

    /// Sums the current piece's matches (`matches`, in heap order).
    unsafe fn sum_matches(&mut self, snapshot: pg_sys::Snapshot, totals: &mut Totals) {
        let offsets = self.row_offsets.take().expect("row offsets");
        let matches = std::mem::take(&mut self.matches);
        // SAFETY: the caller's; a located row is read while its page
        // stays pinned (until the next one is located).
        unsafe {
            for (i, &(tid, row)) in matches.iter().enumerate() {
                if i % 4096 == 4095 {
                    pg_sys::check_for_interrupts!();
                }
                let started = self.timed.then(Instant::now);
                let upcoming = matches[i + 1..].iter().map(|m| m.0);
                self.pages.prefetch_upcoming(upcoming.clone());
                if let Some(v) = self.pages.locate(self.heap, snapshot, tid, upcoming) {
                    if !totals.add_row(&offsets, self.pages.row(v).0) {
                        self.pages.store(self.heap, self.heap_slot, v);
                        crate::slot::getsomeattrs(self.heap_slot, self.heap_deform);
                        self.fill_scan(row as usize, true);
                        let scan = self.scan_slot;
                        totals.add(&self.aggs, (*scan).tts_values, (*scan).tts_isnull);
                    }
                }
                self.stats.fetches += 1;
                if let Some(t) = started {
                    self.stats.heap_time += t.elapsed();
                }
            }
        }
        self.matches = matches;
        self.row_offsets = Some(offsets);
    }
}

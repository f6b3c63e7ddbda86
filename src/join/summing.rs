//! A summing plan's rows (`count`'s aggregate paths, an inner join
//! without quals whose sums read columns of fixed width): each match's
//! visible row located on its pinned page (`PageFetch::locate`) and its
//! summed columns read there (`Totals::add_row`), without making the
//! joined row: what the rows would add to, at a few tens of nanoseconds a
//! match. A row with NULLs is taken apart in the heap slot instead.
//! Where a window of matches is dense (a few thousand on a hundred pages),
//! its pages are pinned together and its rows read on every core.

use super::aggregate::{RowOffsets, Totals};
use super::exec::State;
use super::heap::{PinnedRow, PinnedRows};
use crate::storage::Tid;
use pgrx::pg_sys;

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

    /// Sums the current piece's matches (`matches`, in heap order), a
    /// window at a time: a window dense enough is summed on every core
    /// while the next one's pages are pinned and resolved here
    /// (`sum_pinned`), a sparse one row by row here.
    unsafe fn sum_matches(&mut self, snapshot: pg_sys::Snapshot, totals: &mut Totals) {
        let offsets = self.row_offsets.take().expect("row offsets");
        let matches = std::mem::take(&mut self.matches);
        let mut summing: Option<Summing> = None;
        // Two windows are pinned at once: a small share of shared_buffers
        // however small it is set.
        // SAFETY: a global set at startup.
        let window_pages = (unsafe { pg_sys::NBuffers } as usize / 64).clamp(1, WINDOW_PAGES);
        let mut start = 0;
        while start < matches.len() {
            pg_sys::check_for_interrupts!();
            let end = window_end(&matches, start, window_pages);
            // SAFETY: the caller's.
            self.time_heap(|s| unsafe {
                if end - start >= PINNED_MIN_ROWS {
                    let next = s.sum_pinned(&matches, start..end, &offsets, snapshot);
                    if let Some(last) = summing.replace(next) {
                        s.finish(last, &matches, totals);
                    }
                } else {
                    if let Some(last) = summing.take() {
                        s.finish(last, &matches, totals);
                    }
                    s.sum_one_by_one(&matches, start..end, &offsets, snapshot, totals);
                }
            });
            self.stats.fetches += (end - start) as u64;
            start = end;
        }
        if let Some(last) = summing {
            // SAFETY: the caller's.
            self.time_heap(|s| unsafe { s.finish(last, &matches, totals) });
        }
        self.matches = matches;
        self.row_offsets = Some(offsets);
    }

    /// Sums `matches[range]` one row at a time, prefetching ahead.
    unsafe fn sum_one_by_one(
        &mut self,
        matches: &[(Tid, u32)],
        range: std::ops::Range<usize>,
        offsets: &RowOffsets,
        snapshot: pg_sys::Snapshot,
        totals: &mut Totals,
    ) {
        // SAFETY: the caller's; a located row is read while its page
        // stays pinned (until the next one is located).
        unsafe {
            for i in range {
                let (tid, row) = matches[i];
                let upcoming = matches[i + 1..].iter().map(|m| m.0);
                self.pages.prefetch_upcoming(upcoming.clone());
                if let Some(v) = self.pages.locate(self.heap, snapshot, tid, upcoming) {
                    if !totals.add_row(offsets, self.pages.row(v).0) {
                        self.pages.store(self.heap, self.heap_slot, v);
                        self.add_taken_apart(row, totals);
                    }
                }
            }
        }
    }

    /// Starts summing `matches[window]` with its pages pinned together:
    /// the pages' TIDs resolved here, the rows read on every core (each
    /// row a cache miss: a participant's rows, read one by one on its
    /// thread, were most of a Zipf sum's time).
    unsafe fn sum_pinned(
        &mut self,
        matches: &[(Tid, u32)],
        window: std::ops::Range<usize>,
        offsets: &RowOffsets,
        snapshot: pg_sys::Snapshot,
    ) -> Summing {
        // SAFETY: the caller's; the rows are read while their pages stay
        // pinned (until `finish` has the sums).
        let mut pinned = unsafe { self.pages.pin_window(self.heap, snapshot, &matches[window.clone()]) };
        let rows = std::mem::take(&mut pinned.rows);
        let offsets = offsets.clone();
        let (send, sums) = std::sync::mpsc::sync_channel(1);
        crate::batch::ensure_cpu_pool();
        rayon::spawn(move || {
            // A panic here would abort the process: it is sent instead.
            let _ = send.send(std::panic::catch_unwind(|| sum_rows_on_pool(&rows, &offsets)));
        });
        Summing { pinned, sums, window_start: window.start }
    }

    /// Adds a window's sums (`sum_pinned`) to `totals`, its rows with
    /// NULLs taken apart here, and drops its pins.
    unsafe fn finish(&mut self, s: Summing, matches: &[(Tid, u32)], totals: &mut Totals) {
        let (sum, unfit) = match s.sums.recv() {
            Ok(Ok(r)) => r,
            _ => pgrx::error!("gpuindex: a window of rows was not summed"),
        };
        totals.merge(sum);
        // SAFETY: the caller's; the window's pages are still pinned.
        unsafe {
            for r in &unfit {
                self.pages.store_pinned(self.heap, self.heap_slot, &s.pinned, r);
                self.add_taken_apart(matches[s.window_start + r.at as usize].1, totals);
            }
        }
        self.pages.unpin(s.pinned);
    }

    /// Adds the row stored in the heap slot, taken apart there (a row
    /// `add_row` cannot read), joined with outer row `row`.
    unsafe fn add_taken_apart(&mut self, row: u32, totals: &mut Totals) {
        // SAFETY: the caller's stored heap row.
        unsafe {
            crate::slot::getsomeattrs(self.heap_slot, self.heap_deform);
            self.fill_scan(row as usize, true);
            let scan = self.scan_slot;
            totals.add(&self.aggs, (*scan).tts_values, (*scan).tts_isnull);
        }
    }
}

/// A window: at most this many matches, on at most `WINDOW_PAGES` pages
/// (pinned together), fewer where shared_buffers holds fewer than 64
/// times as many.
const WINDOW_ROWS: usize = 1 << 16;
const WINDOW_PAGES: usize = 128;
/// A window with fewer matches is summed row by row: the pool's start
/// would cost more than its rows (a sparse window's rows are a page
/// each, prefetched across pages by `sum_one_by_one`).
const PINNED_MIN_ROWS: usize = 4096;
/// Rows a pool task sums, and how far ahead it prefetches them.
const ROWS_A_TASK: usize = 2048;
const PREFETCH_AHEAD: usize = 8;

/// A window being summed on the pool: its pinned pages, and where its
/// sums and its rows with NULLs come. An ERROR before `finish` releases
/// the pins while the pool may still read the pages: shared buffers (or
/// this backend's local ones), mapped for the process's life, whose sums
/// nobody takes.
struct Summing {
    pinned: PinnedRows,
    sums: std::sync::mpsc::Receiver<std::thread::Result<(Totals, Vec<PinnedRow>)>>,
    window_start: usize,
}

/// What `rows` (of pinned pages) add to, on every core, and those of them
/// `add_row` cannot read.
fn sum_rows_on_pool(rows: &[PinnedRow], offsets: &RowOffsets) -> (Totals, Vec<PinnedRow>) {
    use rayon::prelude::*;
    rows.par_chunks(ROWS_A_TASK)
        .map(|rows| {
            let (mut sum, mut unfit) = (Totals::default(), Vec::new());
            for (i, r) in rows.iter().enumerate() {
                if let Some(next) = rows.get(i + PREFETCH_AHEAD) {
                    crate::storage::prefetch(next.addr as *const u8);
                }
                // SAFETY: a visible row of a window whose pages stay pinned
                // until its sums are taken.
                if !unsafe { sum.add_row(offsets, r.addr as *const pg_sys::HeapTupleHeaderData) } {
                    unfit.push(*r);
                }
            }
            (sum, unfit)
        })
        .reduce(
            || (Totals::default(), Vec::new()),
            |(mut a, mut ua), (b, ub)| {
                a.merge(b);
                ua.extend(ub);
                (a, ua)
            },
        )
}

/// Where the window of `matches` starting at `start` ends.
fn window_end(matches: &[(Tid, u32)], start: usize, max_pages: usize) -> usize {
    let (mut pages, mut block) = (0, u64::MAX);
    for (i, m) in matches.iter().enumerate().skip(start).take(WINDOW_ROWS) {
        if m.0 >> 16 != block {
            block = m.0 >> 16;
            pages += 1;
            if pages > max_pages {
                return i;
            }
        }
    }
    (start + WINDOW_ROWS).min(matches.len())
}

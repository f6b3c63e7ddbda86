//! A counting plan's searches (`count`'s aggregate paths, an inner join
//! without quals): where the node trusts the visibility map, the index
//! counts the matches it finds on all-visible heap pages in its own walk
//! (`BatchSearch::count`: a key held by millions of rows is not made
//! millions of rows), and the rest are checked as rows.

use super::exec::{no_bulk_delete_since, State};
use crate::am::common::search::{self, Batch, Counted, TooMany};
use crate::am::common::{bulk_deletes, OpenIndex};
use crate::storage::{tid_from, Tid};
use pgrx::pg_sys;
use std::time::Instant;

impl State {
    /// `piece` of a batch of index `open`, counted where the node trusts
    /// the visibility map, else every match a row. The map is read while
    /// the search still finds entries (an insert after a page's read may
    /// add one): each page said all-visible is read again once the search
    /// is over, with the index's bulk-delete count (as `count_visible`
    /// reads them), and a page that changed makes the piece searched again
    /// as rows.
    pub(super) unsafe fn count_piece(&mut self, open: &OpenIndex, piece: &Batch) -> Result<Counted, TooMany> {
        let searcher = search::searcher(open.am).expect("a searchable index");
        let every_match = |piece: &Batch| (searcher.search)(open, piece).map(|rest| Counted { counted: 0, rest });
        if !self.trusts_map {
            return every_match(piece);
        }
        let (heap, index, since) = (self.heap, self.index, self.bulk_deletes);
        let all_visible = &mut self.all_visible;
        all_visible.forget();
        let mut said = Vec::new();
        let counted = (searcher.count)(open, piece, &mut |block| {
            all_visible.kept(block).unwrap_or_else(|| {
                // SAFETY: the node's open heap. (The bulk deletes are read
                // with the second look.)
                let answer = unsafe { all_visible.read(heap, block, || true) };
                if answer {
                    said.push(block);
                }
                answer
            })
        })?;
        all_visible.forget();
        // SAFETY: the node's open heap.
        if said.iter().all(|&block| unsafe { all_visible.check(heap, block, || no_bulk_delete_since(index, since)) }) {
            Ok(counted)
        } else {
            every_match(piece)
        }
    }

    /// A counting plan's inner join without quals over an index (`next`):
    /// how many rows the join would emit, a chunk of outer rows at a time,
    /// each chunk's batch counted (`count_piece`) and the rest of its
    /// matches checked against the snapshot.
    pub(super) unsafe fn count_chunks(&mut self, econtext: *mut pg_sys::ExprContext, snapshot: pg_sys::Snapshot) -> u64 {
        let mut n = 0;
        loop {
            // SAFETY: the node's contexts, table and snapshot.
            unsafe {
                pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
                let keys = self.load(econtext);
                if self.rows == 0 {
                    return n;
                }
                self.stats.chunks += 1;
                self.stats.probes += keys.len() as u64;
                if keys.is_empty() {
                    continue;
                }
                self.bulk_deletes = bulk_deletes::finished(self.index);
                let open = OpenIndex::for_plan(self.heap, self.index, self.am, self.heap_order);
                let batch = self.batch_of(&keys);
                let mut pieces = search::Pieces::new(&batch);
                loop {
                    let started = Instant::now();
                    let found = pieces.next_by(|range| self.count_piece(&open, &Batch { queries: &keys[range], ..batch }));
                    let Some(Counted { counted, rest }) = found else { break };
                    self.note_batch(started);
                    self.stats.extra_pieces += pieces.split_off() as u64;
                    self.stats.matches += counted + rest.rows.len() as u64;
                    self.stats.counted += counted;
                    let mut tids: Vec<Tid> = rest.rows.iter().map(|r| tid_from(r.1)).collect();
                    if self.heap_order && !tids.is_sorted() {
                        tids.sort_unstable();
                    }
                    self.start_matches();
                    n += counted + self.count_visible(tids.len(), |i| tids[i], snapshot);
                }
            }
        }
    }
}

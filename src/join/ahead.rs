//! The next chunk of a LATERAL top-k join, read while this one's rows are
//! fetched: its outer rows in memory of their own, and its first search
//! posted ahead to where the index's batches are answered (the GPU
//! service), which searches it meanwhile. When the chunk comes up its
//! search finds the answer waiting (the request is matched by its
//! queries: `service::client::answer_ahead`).
//!
//! On the H200 host a parallel kNN join's participant waited ~1.1 ms for
//! each chunk's answer (1,041 centres) and then fetched its rows for
//! ~5 ms; with the waits hidden the join took 36.5 against 40.2 ms
//! (medians in turn, docs/bench/knn-lateral-parallel-h200-lookahead.md).
//!
//! A chunk read ahead is the participant's from then on (a parallel outer
//! scan hands its rows to no one else): at most one chunk ahead, so the
//! join holds two chunks' outer rows, and the last chunks of a parallel
//! plan may end up less evenly shared.

use super::exec::State;
use crate::am::common::search::{self, Batch};
use crate::am::common::OpenIndex;
use pgrx::pg_sys;

/// A chunk's outer rows (as `State` holds the current one's) and its
/// queries.
pub(super) struct Chunk {
    cxt: pg_sys::MemoryContext,
    rows: usize,
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
    matched: Vec<bool>,
    keys: Vec<(i64, pg_sys::Datum)>,
}

impl Chunk {
    fn new(parent: pg_sys::MemoryContext) -> Chunk {
        // SAFETY: a child of the node's memory, freed with it.
        let cxt =
            unsafe { pg_sys::AllocSetContextCreateInternal(parent, c"GpuIndexJoin next chunk".as_ptr(), 0, 8 * 1024, 8 * 1024 * 1024) };
        Chunk { cxt, rows: 0, values: Vec::new(), nulls: Vec::new(), matched: Vec::new(), keys: Vec::new() }
    }
}

impl State {
    /// Exchanges the current chunk's rows and memory with `c`'s.
    fn swap_chunk(&mut self, c: &mut Chunk) {
        std::mem::swap(&mut self.chunk_cxt, &mut c.cxt);
        std::mem::swap(&mut self.rows, &mut c.rows);
        std::mem::swap(&mut self.values, &mut c.values);
        std::mem::swap(&mut self.nulls, &mut c.nulls);
        std::mem::swap(&mut self.matched, &mut c.matched);
    }

    /// Reads the next chunk now and posts its first search (`k` nearest
    /// rows a query), where the index's access method answers it
    /// elsewhere (judged by `current`, this chunk's first batch); nothing
    /// at the end of the outer side.
    ///
    /// # Safety
    /// In the node's execution, as `State::load`; `current`'s queries are
    /// the current chunk's.
    pub(super) unsafe fn read_ahead(&mut self, econtext: *mut pg_sys::ExprContext, open: &OpenIndex, current: &Batch) {
        let searcher = search::searcher(self.am).expect("a searchable index");
        if self.outer_done || self.ahead.is_some() {
            return;
        }
        if !(searcher.ahead)(open, current) {
            // Nothing hides the next search: whole chunks from here.
            if self.grow_while_ahead {
                self.next_chunk = self.chunk_size;
            }
            return;
        }
        // SAFETY: the node's memory, the chunk's parent.
        let mut c = self.spare.take().unwrap_or_else(|| Chunk::new(unsafe { pg_sys::MemoryContextGetParent(self.chunk_cxt) }));
        self.swap_chunk(&mut c);
        // SAFETY: the caller's contract.
        c.keys = unsafe { self.load(econtext) };
        self.swap_chunk(&mut c);
        // What the chunk's first round will ask (`run_top_k`).
        let pending = super::nearest::answerable_keys(self.key_type, &c.keys);
        if !pending.is_empty() {
            (searcher.post_ahead)(open, &Batch { queries: &pending, ..*current });
        }
        self.ahead = Some(c);
    }

    /// Makes the chunk read ahead, if any, the current one: its queries,
    /// or None where there is none.
    pub(super) fn take_ahead(&mut self) -> Option<Vec<(i64, pg_sys::Datum)>> {
        let mut c = self.ahead.take()?;
        self.swap_chunk(&mut c);
        let keys = std::mem::take(&mut c.keys);
        // (Its memory, now the chunk before's, is reset when reused.)
        self.spare = Some(c);
        Some(keys)
    }

    /// Forgets the chunk read ahead (a rescan reads the outer side anew).
    pub(super) fn drop_ahead(&mut self) {
        if let Some(c) = self.ahead.take() {
            self.spare = Some(c);
        }
    }
}

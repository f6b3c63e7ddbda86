//! A batch function's call as the node's outer side (`path::fused_call`,
//! `FROM probe(index, keys) p JOIN t ON t.ctid = p.ctid`): the node runs
//! the call's search itself and takes its matches as outer rows.

use super::exec::{State, SMALL_CHUNK};
use super::handout::{Handout, Taken};
use crate::am::common::bulk_deletes;
use crate::am::common::search::{self, Batch, Counted};
use crate::functions::call::Fusable;
use crate::list::{self, is_a};
use crate::storage::{tid_from, Tid};
use pgrx::pg_sys::{self, NodeTag};
use std::time::Instant;

/// A batch function's call as the node's outer side (`path::fused_call`):
/// its search is run here, over the call's arguments, and each match
/// becomes a row of the call, (ord, the TID of the visible row the fetch
/// finds), joined with that row. What the function would return is
/// exactly those rows (the function's in heap order, the node's in its
/// `heap_order`), each checked against the snapshot once (by the fetch,
/// following HOT chains as the function's visibility pass does), the
/// table's policies among the match quals.
pub(super) struct Fused {
    pub(super) call: &'static Fusable,
    args: Vec<*mut pg_sys::ExprState>,
    /// The call's columns each outer target column is (1: ord, 2: ctid).
    columns: Vec<i16>,
    /// Scan-tuple columns that hold the call's ctid: the fetched row's.
    pub(super) ctid_cols: Vec<usize>,
    /// Holds the evaluated arguments and the queries of the call being
    /// searched (reset at a rescan).
    cxt: pg_sys::MemoryContext,
    searching: Option<Searching>,
    /// Under a parallel plan (`handout`): whether this participant
    /// searches the call (None until it asks), whether it has handed out
    /// every piece, and the range of matches it took last.
    searcher: Option<bool>,
    searched: bool,
    mine: Vec<(Tid, i64)>,
    /// The searcher, once the shared matches are taken: it joins the
    /// pieces `gpuindex.batch_work_mem` kept out of the handout alone.
    alone: bool,
}

/// A fused call being searched: the call (for the plan node), its pieces
/// (`search::Pieces`: memory stays bounded whatever it matches), the
/// current piece's matches (TID, position) in the node's order, and how
/// many were taken into chunks.
struct Searching {
    call: crate::functions::call::Call,
    pieces: search::Pieces,
    matches: Vec<(Tid, i64)>,
    taken: usize,
}

impl Fused {
    /// The fused call of `outer_plan` (a FunctionScan of one call of
    /// `call`, as the planner found it, whose target columns are its own),
    /// its arguments evaluated in `parent`; None where the plan is not of
    /// that shape (the node then runs the child as an ordinary TID probe).
    ///
    /// # Safety
    /// The node's outer plan and state, during BeginCustomScan.
    pub(super) unsafe fn begin(
        call: &'static Fusable,
        outer_plan: *mut pg_sys::Plan,
        parent: *mut pg_sys::PlanState,
        colmap: &[i32],
    ) -> Option<Fused> {
        // SAFETY: the caller's contract.
        unsafe {
            if !is_a(outer_plan, NodeTag::T_FunctionScan) || !(*outer_plan).qual.is_null() {
                return None;
            }
            let scan = outer_plan.cast::<pg_sys::FunctionScan>();
            let functions = list::ptrs::<pg_sys::RangeTblFunction>((*scan).functions);
            if functions.len() != 1 || (*scan).funcordinality || !is_a((*functions[0]).funcexpr, NodeTag::T_FuncExpr) {
                return None;
            }
            let expr = (*functions[0]).funcexpr.cast::<pg_sys::FuncExpr>();
            let columns: Vec<i16> = list::ptrs::<pg_sys::TargetEntry>((*outer_plan).targetlist)
                .into_iter()
                .map(|te| if is_a((*te).expr, NodeTag::T_Var) { (*(*te).expr.cast::<pg_sys::Var>()).varattno } else { 0 })
                .collect();
            let mut used = colmap.iter().filter(|&&m| m > 0).map(|&m| columns.get(m as usize - 1).copied().unwrap_or(0));
            if !used.all(|a| a == 1 || a == 2) {
                return None;
            }
            let ctid_cols = colmap.iter().enumerate().filter(|&(_, &m)| m > 0 && columns[m as usize - 1] == 2).map(|(c, _)| c).collect();
            let args = list::ptrs::<pg_sys::Expr>((*expr).args).into_iter().map(|a| pg_sys::ExecInitExpr(a, parent)).collect();
            let cxt = pg_sys::AllocSetContextCreateInternal(
                pg_sys::CurrentMemoryContext,
                c"GpuIndexJoin call".as_ptr(),
                0,
                8 * 1024,
                8 * 1024 * 1024,
            );
            Some(Fused {
                call,
                args,
                columns,
                ctid_cols,
                cxt,
                searching: None,
                searcher: None,
                searched: false,
                mine: Vec::new(),
                alone: false,
            })
        }
    }

    /// Makes the call ready (ERRORs as the function raises them) over the
    /// node's `index` of `heap`, its matches in heap order or not: None
    /// where an argument is NULL (the functions are strict: no rows).
    ///
    /// # Safety
    /// In `econtext`, the node's; in the call's memory context.
    unsafe fn start(
        &self,
        econtext: *mut pg_sys::ExprContext,
        heap: pg_sys::Relation,
        index: pg_sys::Relation,
        heap_order: bool,
    ) -> Option<Searching> {
        // SAFETY: the caller's contract; the arguments are evaluated in the
        // call's memory context, which outlives the search.
        unsafe {
            let mut args = Vec::with_capacity(self.args.len());
            for &a in &self.args {
                let mut isnull = false;
                let d = pg_sys::ffi::pg_guard_ffi_boundary(|| crate::slot::in_guard::eval_expr(a, econtext, &mut isnull));
                if isnull {
                    return None;
                }
                args.push(d);
            }
            let call = (self.call.call)(&args);
            // The planner saw a constant index of this table; its OID
            // is a dependency of the plan, which a DROP invalidates.
            if (*call.open.heap).rd_id != (*heap).rd_id {
                pgrx::error!("gpuindex: GpuIndexJoin: the batch function's index is no longer an index of the joined table");
            }
            let call = call.for_plan(heap, index, heap_order);
            let pieces = search::Pieces::new(&call.batch(true));
            Some(Searching { call, pieces, matches: Vec::new(), taken: 0 })
        }
    }

    /// Forgets the call's search (its arguments may change at a rescan).
    ///
    /// # Safety
    /// Outside the call's memory context.
    pub(super) unsafe fn reset(&mut self) {
        self.searching = None;
        (self.searcher, self.searched, self.alone) = (None, false, false);
        self.mine.clear();
        // SAFETY: the call's context, nothing in it referenced any more.
        unsafe { pg_sys::MemoryContextReset(self.cxt) };
    }
}

impl State {
    /// Makes the fused call ready at its first chunk (`Fused::start`).
    unsafe fn start_fused(&mut self, f: &mut Fused, econtext: *mut pg_sys::ExprContext) {
        if f.searching.is_some() {
            return;
        }
        // SAFETY: the node's index and contexts.
        unsafe {
            self.bulk_deletes = bulk_deletes::finished(self.index);
            let caller = pg_sys::CurrentMemoryContext;
            pg_sys::CurrentMemoryContext = f.cxt;
            f.searching = f.start(econtext, self.heap, self.index, self.heap_order);
            pg_sys::CurrentMemoryContext = caller;
        }
        self.stats.probes += f.searching.as_ref().map_or(0, |s| s.call.queries.len() as u64);
    }

    /// `search` of the fused call's next piece (None when every piece was
    /// searched), in the chunk's memory, timed as the index's.
    unsafe fn search_fused_piece<T>(
        &mut self,
        s: &mut Searching,
        search: impl FnOnce(&mut State, &mut Searching) -> Option<T>,
    ) -> Option<T> {
        if s.pieces.done() {
            return None;
        }
        let started = Instant::now();
        // SAFETY: the node's chunk context, current while the piece is
        // searched.
        let found = unsafe {
            let caller = pg_sys::CurrentMemoryContext;
            pg_sys::CurrentMemoryContext = self.chunk_cxt;
            let found = search(self, s);
            pg_sys::CurrentMemoryContext = caller;
            found
        };
        self.stats.extra_pieces += (found.is_some() && s.pieces.split_off()) as u64;
        self.note_batch(started);
        found
    }

    /// The fused call's next piece of matches, as (position, TID) rows.
    unsafe fn next_fused_piece(&mut self, s: &mut Searching) -> Option<Vec<(i64, pg_sys::ItemPointerData)>> {
        // SAFETY: the node's.
        unsafe { self.search_fused_piece(s, |_, s| s.pieces.next(&s.call.open, &s.call.batch(true))).map(|h| h.rows) }
    }

    /// The fused call's next piece, counted (`count_piece`).
    unsafe fn next_fused_count(&mut self, s: &mut Searching) -> Option<Counted> {
        // SAFETY: the node's.
        unsafe {
            self.search_fused_piece(s, |node, s| {
                let batch = s.call.batch(true);
                s.pieces.next_by(|range| node.count_piece(&s.call.open, &Batch { queries: &batch.queries[range], ..batch }))
            })
        }
    }

    /// A counting plan's inner join without quals over a fused call
    /// (`next`): how many of the call's matches are rows the snapshot
    /// sees, piece by piece, none made an outer row.
    pub(super) unsafe fn count_fused(&mut self, econtext: *mut pg_sys::ExprContext, snapshot: pg_sys::Snapshot) -> u64 {
        let mut f = self.fused.take().expect("a fused call");
        let mut n = 0;
        // SAFETY: the node's contexts, table and snapshot.
        unsafe {
            pg_sys::MemoryContextReset(self.chunk_cxt);
            self.start_fused(&mut f, econtext);
            if let Some(s) = f.searching.as_mut() {
                while let Some(Counted { counted, rest }) = self.next_fused_count(s) {
                    let rows = rest.rows;
                    self.stats.chunks += 1;
                    self.stats.matches += counted + rows.len() as u64;
                    self.stats.counted += counted;
                    self.start_matches();
                    n += counted + self.count_visible(rows.len(), |i| tid_from(rows[i].1), snapshot);
                    pg_sys::MemoryContextReset(self.chunk_cxt);
                }
            }
        }
        self.fused = Some(f);
        n
    }

    /// The next chunk of a fused call's matches, as outer rows each with
    /// its one match (the call made ready at the first, its pieces
    /// searched as the chunks reach them; under a parallel plan, this
    /// participant's next range of them, `take_shared`).
    pub(super) unsafe fn load_fused(&mut self, econtext: *mut pg_sys::ExprContext) {
        // SAFETY: the node's contexts and table.
        unsafe {
            pg_sys::MemoryContextReset(self.chunk_cxt);
            // (Out of the node while the chunk is filled; an ERROR ends
            // the query.)
            let mut f = self.fused.take().expect("a fused call");
            // Some(done) where the chunk is a range of shared matches.
            let mut shared = None;
            if self.shares_matches() && !f.alone {
                if self.take_shared(&mut f, econtext) {
                    shared = Some(false);
                } else if f.searching.as_ref().is_some_and(|s| s.taken < s.matches.len() || !s.pieces.done()) {
                    f.alone = true;
                } else {
                    shared = Some(true);
                }
            }
            let (chunk, done) = if let Some(done) = shared {
                (&f.mine[..], done)
            } else {
                self.start_fused(&mut f, econtext);
                let mut done = true;
                if let Some(s) = f.searching.as_mut() {
                    // The next piece once this one's matches are taken.
                    while s.taken == s.matches.len() {
                        let Some(rows) = self.next_fused_piece(s) else { break };
                        s.matches = crate::batch::par_map(rows, |(ord, t)| (tid_from(t), ord));
                        s.taken = 0;
                    }
                    done = s.pieces.done();
                }
                let all = f.searching.as_ref().map_or(&[][..], |s| &s.matches[..]);
                let taken = f.searching.as_ref().map_or(0, |s| s.taken);
                let chunk = &all[taken..(taken + self.chunk_size).min(all.len())];
                (chunk, done && taken + chunk.len() == all.len())
            };
            // Filled whole, not row by row: a fifth of a serial Zipf sum's
            // backend thread went to pushing these a value at a time.
            let width = self.stored_atts.len();
            self.values.clear();
            self.values.resize(chunk.len() * width, pg_sys::Datum::from(0usize));
            for (k, &att) in self.stored_atts.iter().enumerate() {
                // (The ctid is the fetched row's: `fill_scan`.)
                if f.columns[att - 1] == 1 {
                    for (v, &(_, ord)) in self.values.iter_mut().skip(k).step_by(width).zip(chunk) {
                        *v = ord.into();
                    }
                }
            }
            self.nulls.clear();
            self.nulls.resize(chunk.len() * width, false);
            self.matched.clear();
            self.matched.resize(chunk.len(), false);
            self.matches.clear();
            self.matches.extend(chunk.iter().enumerate().map(|(row, &(tid, _))| (tid, row as u32)));
            self.rows = chunk.len();
            self.outer_done = done;
            if let Some(s) = f.searching.as_mut().filter(|_| shared.is_none()) {
                s.taken += self.rows;
            }
            self.fused = Some(f);
            self.stats.chunks += 1;
            self.stats.matches += self.rows as u64;
            self.start_matches();
        }
    }

    /// Whether this participant shares a fused call's matches with the
    /// others of a parallel plan (`handout`); a parallel-aware plan run
    /// without a parallel query (a cursor's) runs as one.
    pub(super) fn shares_matches(&self) -> bool {
        !self.shared.is_null() && !self.dsa.is_null()
    }

    /// This participant's next range of the call's matches, in `f.mine`
    /// (`Handout::take`): the call searched here first, every piece handed
    /// out, if this participant was the first to ask; false when no
    /// shared match is left.
    unsafe fn take_shared(&mut self, f: &mut Fused, econtext: *mut pg_sys::ExprContext) -> bool {
        // SAFETY: the parallel query's memory, live until this process
        // shuts down; the node's contexts and table.
        unsafe {
            let h = &(*self.shared).handout;
            let searcher = *f.searcher.get_or_insert_with(|| h.become_searcher());
            let (participants, most) = ((*self.shared).participants().max(1), self.chunk_size as u64);
            // A guided schedule: half of an equal share of what is left.
            let size = |left: u64| (left / (2 * participants)).clamp(SMALL_CHUNK as u64, most.max(SMALL_CHUNK as u64));
            f.mine.clear();
            let budget = crate::guc::BATCH_WORK_MEM.get().max(0) as u64 * 1024;
            while searcher && !f.searched {
                if f.searching.is_none() {
                    self.start_fused(f, econtext);
                    h.began(self.bulk_deletes);
                    // The first matches go out after a small share of the
                    // search, so the others fetch while it goes on.
                    if let Some(s) = f.searching.as_mut() {
                        s.call.in_key_order();
                        let n = s.call.queries.len();
                        s.pieces = search::Pieces::growing(n, (n / 16).max(1024));
                    }
                }
                let Some(s) = f.searching.as_mut() else { break };
                if let Some(rows) = self.next_fused_piece(s) {
                    let each = |&(ord, t): &(i64, pg_sys::ItemPointerData)| (tid_from(t), ord);
                    let out = h.publish(self.dsa, &rows, each, budget);
                    if out < rows.len() {
                        // Kept for this participant alone (`alone`).
                        (s.matches, s.taken) = (rows[out..].iter().map(each).collect(), 0);
                        break;
                    }
                }
                if s.pieces.done() {
                    break;
                }
            }
            if searcher && !f.searched {
                f.searched = true;
                h.finish();
            }
            let got = loop {
                match h.take(self.dsa, size, &mut f.mine) {
                    Taken::Some(bulk_deletes) => {
                        self.bulk_deletes = bulk_deletes;
                        break true;
                    }
                    Taken::Done => break false,
                    Taken::Wait => h.sleep(),
                }
            };
            Handout::end_sleep();
            got
        }
    }
}

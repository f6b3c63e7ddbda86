//! Execution. Each chunk: up to `gpuindex.join_chunk` outer rows copied
//! into the chunk's memory, their queries (the probe's outer side) sent to
//! the index as one batch (GPU or all cores; in `search::Pieces` where its
//! matches would not fit `gpuindex.batch_work_mem`), the matches
//! sorted by TID and fetched in that order with the query's snapshot
//! (`heap.rs`: a page pinned and locked once for all its TIDs, HOT chains,
//! visibility, predicate locks), each fetched row joined with every outer row
//! that matched it. Then, for left and anti joins, the outer rows of the
//! chunk that matched nothing. No row is kept between chunks.
//!
//! A pair is a match when the match quals pass (the inner table's quals,
//! its policies first, then the join clauses with the probe clause as an
//! exact recheck); a semi join emits an outer row at its first match, an
//! anti join only rows without one, a left join null-extends them; the
//! plan's qual then filters what comes out, as in ExecNestLoop.

use super::all_visible::AllVisible;
use super::fused::Fused;
use super::plan::{Private, COUNTED};
use super::NAME;
use crate::am::common::bulk_deletes;
use crate::am::common::search::{self, Ask, Batch};
use crate::am::common::OpenIndex;
use crate::list::{self, is_a};
use crate::storage::{tid_from, Tid};
use crate::visibility::line_pointers_answer;
use gpuindex_engine::executor::Device;
use pgrx::pg_sys::{self, NodeTag};
use pgrx::prelude::*;
use pgrx::PgMemoryContexts;
use std::ffi::CString;
use std::time::{Duration, Instant};

static mut EXEC_METHODS: pg_sys::CustomExecMethods = pg_sys::CustomExecMethods {
    CustomName: NAME.as_ptr(),
    BeginCustomScan: Some(begin),
    ExecCustomScan: Some(next),
    EndCustomScan: Some(end),
    ReScanCustomScan: Some(rescan),
    MarkPosCustomScan: None,
    RestrPosCustomScan: None,
    EstimateDSMCustomScan: Some(estimate_dsm),
    InitializeDSMCustomScan: Some(initialize_dsm),
    ReInitializeDSMCustomScan: Some(reinitialize_dsm),
    InitializeWorkerCustomScan: Some(initialize_worker),
    ShutdownCustomScan: Some(shutdown),
    ExplainCustomScan: Some(super::explain::explain),
};

/// The node: PostgreSQL's state first, then ours.
#[repr(C)]
struct JoinNode {
    css: pg_sys::CustomScanState,
    state: *mut State,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Read the next chunk (or end).
    Load,
    /// Join the fetched rows with their outer rows.
    Matches,
    /// Emit the chunk's unmatched outer rows (left and anti joins).
    Unmatched,
}

#[derive(Default, Clone)]
pub(super) struct Stats {
    pub(super) chunks: u64,
    pub(super) probes: u64,
    pub(super) matches: u64,
    /// Matches the index counted in its walk (`BatchSearch::count`), of
    /// `matches`.
    pub(super) counted: u64,
    pub(super) fetches: u64,
    pub(super) removed_by_join_filter: u64,
    pub(super) gpu_batches: u64,
    /// Searches beyond one a batch: its pieces (`search::Pieces`).
    pub(super) extra_pieces: u64,
    pub(super) index_time: Duration,
    pub(super) heap_time: Duration,
}

pub(super) struct State {
    pub(super) outer: *mut pg_sys::PlanState,
    pub(super) heap: pg_sys::Relation,
    /// Null for a TID probe (`inner.ctid = outer_expression`).
    pub(super) index: pg_sys::Relation,
    pub(super) am: &'static str,
    pub(super) pages: super::heap::PageFetch,
    /// No inner column is read: a match on a page the visibility map has
    /// all-visible is a visible row without a heap fetch (MVCC snapshots
    /// below SERIALIZABLE, as `visibility::line_pointers_answer`).
    pub(super) index_only: bool,
    /// Index-only under a snapshot whose line pointers answer (the query's
    /// snapshot and isolation level, fixed for the node's life): the
    /// visibility map is consulted before any fetch.
    pub(super) trusts_map: bool,
    /// The visibility map's answers for an index-only join's matches.
    pub(super) all_visible: AllVisible,
    /// Matches are searched into heap order, so that a page's fetches
    /// share one pin and lock. Not where few are fetched: an index-only
    /// join under an MVCC snapshot below SERIALIZABLE of a table whose
    /// statistics have nine pages in ten all-visible (sorting 2.3M
    /// matches was a fifth of such a count's time).
    pub(super) heap_order: bool,
    /// The index's bulk deletes finished when the chunk's search began
    /// (`bulk_deletes`: the visibility map is trusted while it holds).
    pub(super) bulk_deletes: Option<u64>,
    pub(super) heap_slot: *mut pg_sys::TupleTableSlot,
    /// Holds a copied outer row while it is taken apart.
    pub(super) outer_slot: *mut pg_sys::TupleTableSlot,
    pub(super) scan_slot: *mut pg_sys::TupleTableSlot,
    /// Columns of the scan tuple.
    pub(super) natts: usize,
    pub(super) key: *mut pg_sys::ExprState,
    /// The key is the stored outer column `k`: read, not evaluated.
    pub(super) key_col: Option<usize>,
    /// Every outer column is passed by value: rows are read from the
    /// child's slot without copying them.
    pub(super) outer_byval: bool,
    /// EXPLAIN ANALYZE with timing: heap fetches are timed.
    pub(super) timed: bool,
    pub(super) key_type: pg_sys::Oid,
    pub(super) matching: *mut pg_sys::ExprState,
    pub(super) jointype: pg_sys::JoinType::Type,
    pub(super) strategy: u16,
    /// The outer columns kept for each row of a chunk (ascending).
    pub(super) stored_atts: Vec<usize>,
    /// (scan column, index in `stored_atts`) and (scan column, inner
    /// attribute: of the table, or of the top-k subquery's output).
    pub(super) outer_cols: Vec<(usize, usize)>,
    pub(super) inner_cols: Vec<(usize, usize)>,
    /// Scan columns of the inner table's ctid (the fetched row's TID).
    pub(super) inner_ctid_cols: Vec<usize>,
    /// An aggregating plan's aggregates (`count`, `aggregate`): the joined
    /// rows are counted or summed, not emitted, and one row holds them.
    pub(super) aggs: Vec<super::aggregate::Agg>,
    /// An aggregating plan of an inner join without quals whose sums read
    /// inner columns of fixed width: each match's row is summed straight
    /// from its page (`summing`).
    pub(super) row_offsets: Option<super::aggregate::RowOffsets>,
    /// An aggregating plan has emitted its row (reset by a rescan).
    counted: bool,
    /// A joined row is put into the scan tuple: something reads it (not
    /// a plan that only counts, without quals).
    fills: bool,
    /// Where the inner columns are read: the heap slot, or the top-k
    /// subquery's stored rows.
    pub(super) inner_slot: *mut pg_sys::TupleTableSlot,
    /// Attributes of each fetched row taken apart at once (for a top-k
    /// subquery its expressions take them apart as they need).
    pub(super) heap_deform: i32,
    pub(super) top: Option<super::nearest::TopKState>,
    /// A TID probe over a batch function's call that the node searches
    /// itself (`path::fused_call`).
    pub(super) fused: Option<Fused>,
    pub(super) chunk_size: usize,
    /// The first chunk's outer rows and the next one's: `chunk_size`, or
    /// in the leader of a parallel plan `SMALL_CHUNK` and doubling up to
    /// it, and in a LATERAL top-k join `SMALL_CHUNK` and growing by
    /// `TOP_K_GROWTH` up to it while its searches are posted ahead
    /// (`grow_while_ahead`; else the next is `chunk_size`).
    first_chunk: usize,
    pub(super) next_chunk: usize,
    pub(super) grow_while_ahead: bool,
    pub(super) chunk_cxt: pg_sys::MemoryContext,
    /// The next chunk, read ahead (`ahead.rs`), and the memory of the one
    /// before it, for the next read ahead.
    pub(super) ahead: Option<super::ahead::Chunk>,
    pub(super) spare: Option<super::ahead::Chunk>,

    // The chunk.
    phase: Phase,
    pub(super) outer_done: bool,
    pub(super) rows: usize,
    /// The rows' outer columns (`stored_atts` order), pointing into the
    /// rows copied into `chunk_cxt`.
    pub(super) values: Vec<pg_sys::Datum>,
    pub(super) nulls: Vec<bool>,
    pub(super) matched: Vec<bool>,
    /// (TID, row), in TID order (`heap_order`) or as found.
    pub(super) matches: Vec<(Tid, u32)>,
    /// The chunk's queries, and its pieces still to search (`probe`).
    keys: Vec<(i64, pg_sys::Datum)>,
    pieces: Option<search::Pieces>,
    pub(super) cursor: usize,
    /// The TID in `heap_slot`, and whether a visible row was found there.
    pub(super) fetched: Option<(Tid, bool)>,
    pub(super) unmatched: usize,
    /// Rows emitted since the per-row memory was last reset.
    pub(super) since_reset: u32,
    /// Whether the node's projection only copies scan columns
    /// (`slot::projects_columns`): then it runs without pgrx's guard.
    projects_columns: bool,
    /// Under a parallel-aware plan: the workers' counters in shared memory
    /// (until this process shuts down), and in the leader their sum, taken
    /// then.
    pub(super) shared: *const super::parallel::Shared,
    /// The parallel query's area (null outside one): where a fused call's
    /// matches are handed out.
    pub(super) dsa: *mut pg_sys::dsa_area,
    /// How many of the leader's remembered buffers of the inner table
    /// `estimate_dsm` made room for.
    buffers_for_workers: usize,
    workers: Stats,
    pub(super) stats: Stats,
}

#[pg_guard]
pub unsafe extern "C-unwind" fn create_state(_cscan: *mut pg_sys::CustomScan) -> *mut pg_sys::Node {
    // SAFETY: a zeroed node of our size; ExecInitCustomScan fills the rest.
    unsafe {
        let node = pg_sys::palloc0(std::mem::size_of::<JoinNode>()).cast::<JoinNode>();
        (*node).css.ss.ps.type_ = NodeTag::T_CustomScanState;
        (*node).css.methods = &raw const EXEC_METHODS;
        node.cast()
    }
}

/// The access method of an open index, if it answers batches.
fn searcher_name(index: pg_sys::Relation) -> &'static str {
    // SAFETY: an open index.
    let relam = unsafe { (*(*index).rd_rel).relam };
    crate::am::SEARCHABLE
        .iter()
        .find(|s| {
            let name = CString::new(s.name).expect("no NUL");
            // SAFETY: a catalog lookup.
            unsafe { pg_sys::get_index_am_oid(name.as_ptr(), true) == relam }
        })
        .map(|s| s.name)
        .unwrap_or_else(|| pgrx::error!("gpuindex: GpuIndexJoin: the index is no longer a gpuindex index"))
}

/// A TID probe's matches, (TID, row) in TID order: the rows' TIDs that
/// can name a row of the table (an offset from 1, a block it has), as a
/// TID scan keeps them (`heapam_tuple_tid_valid`); the page says the rest.
///
/// # Safety
/// `heap` open; `keys` tid datums.
unsafe fn tid_matches(heap: pg_sys::Relation, keys: &[(i64, pg_sys::Datum)]) -> Vec<(Tid, u32)> {
    // SAFETY: the caller's contract.
    unsafe {
        let blocks = pg_sys::RelationGetNumberOfBlocksInFork(heap, pg_sys::ForkNumber::MAIN_FORKNUM) as u64;
        let mut matches: Vec<(Tid, u32)> = keys
            .iter()
            .map(|&(row, d)| (tid_from(*d.cast_mut_ptr::<pg_sys::ItemPointerData>()), row as u32))
            .filter(|&(t, _)| t & 0xffff != 0 && t >> 16 < blocks)
            .collect();
        crate::visibility::sort(&mut matches);
        matches
    }
}

/// The scan column a key expression reads when it is just that column
/// (after setrefs: a Var of INDEX_VAR) and the column comes from the outer
/// side.
unsafe fn outer_column(key: *mut pg_sys::Expr, colmap: &[i32]) -> Option<usize> {
    // SAFETY: an expression node of the plan.
    unsafe {
        let e = super::path::strip_relabel(key);
        if !is_a(e, NodeTag::T_Var) || (*e.cast::<pg_sys::Var>()).varno != pg_sys::INDEX_VAR {
            return None;
        }
        let col = (*e.cast::<pg_sys::Var>()).varattno as usize - 1;
        (colmap.get(col).copied().unwrap_or(0) > 0).then_some(col)
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn begin(node: *mut pg_sys::CustomScanState, estate: *mut pg_sys::EState, eflags: i32) {
    // SAFETY: the executor's node and state; the plan was made by plan.rs.
    unsafe {
        let cscan = (*node).ss.ps.plan.cast::<pg_sys::CustomScan>();
        let p = Private::read((*cscan).custom_private);
        let exprs = list::ptrs::<pg_sys::Expr>((*cscan).custom_exprs);
        let outer_plan = list::ptrs::<pg_sys::Plan>((*cscan).custom_plans)[0];
        let outer = pg_sys::ExecInitNode(outer_plan, estate, eflags);
        (*node).custom_ps = list::of_ptrs(&[outer]);
        let lock = pg_sys::AccessShareLock as i32;
        let heap = pg_sys::table_open(p.heap, lock);
        // A TID probe reads no index, unless it runs its outer call's search.
        let fused = p.fused.and_then(|f| Fused::begin(&crate::functions::call::FUSABLE[f], outer_plan, node.cast(), &p.colmap));
        let by_tid = p.index == pg_sys::InvalidOid || (p.fused.is_some() && fused.is_none());
        let index = if by_tid { std::ptr::null_mut() } else { pg_sys::index_open(p.index, lock) };
        let table = &raw mut (*estate).es_tupleTable;
        let heap_slot = pg_sys::table_slot_create(heap, table);
        let outer_slot = pg_sys::ExecAllocTableSlot(table, pg_sys::ExecGetResultType(outer), &pg_sys::TTSOpsMinimalTuple);
        let parent = node.cast::<pg_sys::PlanState>();
        let am = if by_tid { "" } else { searcher_name(index) };
        let exact = search::searcher(am).is_some_and(|s| (s.distance_is_value)());
        let top = p.top.as_ref().map(|t| super::nearest::TopKState::begin(t, estate, outer, heap, exact));
        let mut stored_atts: Vec<usize> = p.colmap.iter().filter(|&&m| m > 0).map(|&m| m as usize).collect();
        stored_atts.extend(top.iter().flat_map(|t| t.outer_atts()));
        stored_atts.sort_unstable();
        stored_atts.dedup();
        let stored = |att: usize| stored_atts.binary_search(&att).expect("stored");
        let (mut outer_cols, mut inner_cols, mut inner_ctid_cols) = (Vec::new(), Vec::new(), Vec::new());
        let aggs = match p.colmap.iter().position(|&m| m == COUNTED) {
            Some(first) => super::aggregate::of_plan((*cscan).custom_scan_tlist, first),
            None => Vec::new(),
        };
        for (col, &m) in p.colmap.iter().enumerate() {
            match m {
                COUNTED => {}
                1.. => outer_cols.push((col, stored(m as usize))),
                0 => inner_ctid_cols.push(col),
                _ => inner_cols.push((col, (-m) as usize)),
            }
        }
        let scan_slot = (*node).ss.ss_ScanTupleSlot;
        let key_col = outer_column(exprs[0], &p.colmap).map(|col| stored(p.colmap[col] as usize));
        let outer_desc = pg_sys::ExecGetResultType(outer);
        let outer_byval = stored_atts.iter().all(|&att| (*(*outer_desc).attrs.as_ptr().add(att - 1)).attbyval);
        let max_inner = inner_cols.iter().map(|c| c.1 as i32).max().unwrap_or(0);
        let chunk_size = chunk_size((*node).ss.ps.plan, outer);
        let leads = (*(*node).ss.ps.plan).parallel_aware && !super::parallel::in_worker();
        // A top-k join's first search cannot be posted ahead: a small
        // first chunk waits little for it, and the next, twice as big, is
        // searched while this one's rows are fetched.
        let grow_while_ahead = p.top.is_some() && !leads;
        let first_chunk = if leads || grow_while_ahead { chunk_size.min(SMALL_CHUNK) } else { chunk_size };
        // The visibility map is heapam's.
        let index_only = p.index_only && (*heap).rd_tableam == pg_sys::GetHeapamTableAmRoutine();
        let trusts_map = index_only && line_pointers_answer((*estate).es_snapshot);
        let pages = super::heap::PageFetch::begin(heap, heap_slot, by_tid);
        let plain = p.jointype == pg_sys::JoinType::JOIN_INNER && exprs[1].is_null() && (*cscan).scan.plan.qual.is_null();
        let row_offsets = (super::aggregate::reads_rows(&aggs) && plain && p.top.is_none() && pages.locates())
            .then(|| {
                let att_of = |col| inner_cols.iter().find(|c: &&(usize, usize)| c.0 == col).map(|c| c.1);
                super::aggregate::RowOffsets::of(&aggs, (*heap).rd_att, att_of)
            })
            .flatten();
        let state = State {
            outer,
            heap,
            index,
            am,
            // (A fused call's matches are index entries: HOT chains.)
            pages,
            index_only,
            trusts_map,
            all_visible: AllVisible::new(),
            heap_order: !(trusts_map && mostly_all_visible(heap)),
            bulk_deletes: None,
            heap_slot,
            outer_slot,
            scan_slot,
            natts: (*(*scan_slot).tts_tupleDescriptor).natts as usize,
            key: pg_sys::ExecInitExpr(exprs[0], parent),
            key_col,
            outer_byval,
            timed: false,
            key_type: pg_sys::exprType(exprs[0].cast()),
            matching: pg_sys::ExecInitQual(exprs[1].cast(), parent),
            jointype: p.jointype,
            strategy: p.strategy,
            inner_slot: top.as_ref().map_or(heap_slot, |t| t.mslot),
            heap_deform: if top.is_some() || p.index_only { 0 } else { max_inner },
            stored_atts,
            outer_cols,
            inner_cols,
            inner_ctid_cols,
            fills: aggs.is_empty() || super::aggregate::reads_rows(&aggs) || !exprs[1].is_null() || !(*cscan).scan.plan.qual.is_null(),
            aggs,
            row_offsets,
            counted: false,
            top,
            fused,
            chunk_size,
            first_chunk,
            next_chunk: first_chunk,
            grow_while_ahead,
            chunk_cxt: pg_sys::AllocSetContextCreateInternal(
                pg_sys::CurrentMemoryContext,
                c"GpuIndexJoin chunk".as_ptr(),
                0,
                8 * 1024,
                8 * 1024 * 1024,
            ),
            ahead: None,
            spare: None,
            phase: Phase::Load,
            outer_done: false,
            rows: 0,
            values: Vec::new(),
            nulls: Vec::new(),
            matched: Vec::new(),
            matches: Vec::new(),
            cursor: 0,
            fetched: None,
            unmatched: 0,
            keys: Vec::new(),
            pieces: None,
            since_reset: 0,
            projects_columns: crate::slot::projects_columns((*node).ss.ps.ps_ProjInfo, (*cscan).scan.plan.targetlist),
            shared: std::ptr::null(),
            dsa: std::ptr::null_mut(),
            buffers_for_workers: 0,
            workers: Stats::default(),
            stats: Stats::default(),
        };
        // Dropped with the query's memory, on error too (EndCustomScan is
        // not called then).
        (*node.cast::<JoinNode>()).state = PgMemoryContexts::CurrentMemoryContext.leak_and_drop_on_delete(state);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn estimate_dsm(node: *mut pg_sys::CustomScanState, _pcxt: *mut pg_sys::ParallelContext) -> pg_sys::Size {
    // SAFETY: the node's state; the node began before.
    let st = unsafe { state(node) };
    st.buffers_for_workers = st.pages.with_known_buffers(|b| b.len());
    super::parallel::Shared::size(st.buffers_for_workers)
}

#[pg_guard]
unsafe extern "C-unwind" fn initialize_dsm(
    node: *mut pg_sys::CustomScanState,
    pcxt: *mut pg_sys::ParallelContext,
    coordinate: *mut std::ffi::c_void,
) {
    // SAFETY: the node's share of the parallel query's memory, sized by
    // `estimate_dsm` for this many buffers; the node began before.
    unsafe {
        let st = state(node);
        st.dsa = (*(*node).ss.ps.state).es_query_dsa;
        let room = st.buffers_for_workers;
        let (workers, rows_each) = ((*pcxt).nworkers, (*(*st.outer).plan).plan_rows);
        st.shared = st.pages.with_known_buffers(|b| super::parallel::Shared::init(coordinate, &b[..b.len().min(room)], workers, rows_each));
    }
}

/// A rescan of the parallel plan: its outer side is read anew. (The
/// workers' counters add up over rescans, as EXPLAIN's loops do.)
#[pg_guard]
unsafe extern "C-unwind" fn reinitialize_dsm(
    node: *mut pg_sys::CustomScanState,
    _pcxt: *mut pg_sys::ParallelContext,
    coordinate: *mut std::ffi::c_void,
) {
    // SAFETY: the share `initialize_dsm` set up, in the same area.
    unsafe { super::parallel::Shared::rescan(coordinate.cast(), state(node).dsa) };
}

#[pg_guard]
unsafe extern "C-unwind" fn initialize_worker(
    node: *mut pg_sys::CustomScanState,
    _toc: *mut pg_sys::shm_toc,
    coordinate: *mut std::ffi::c_void,
) {
    // SAFETY: the share the leader initialised (`initialize_dsm`).
    unsafe {
        let st = state(node);
        st.shared = coordinate.cast();
        st.dsa = (*(*node).ss.ps.state).es_query_dsa;
        st.pages.seed((*st.shared).buffers());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shutdown(node: *mut pg_sys::CustomScanState) {
    // SAFETY: the node's state; `shared` is live until the Gather above
    // shuts down, after this node.
    unsafe {
        let st = state(node);
        let Some(shared) = std::ptr::replace(&mut st.shared, std::ptr::null()).as_ref() else { return };
        if super::parallel::in_worker() {
            shared.add(&st.stats);
        } else {
            st.workers = st.workers.plus(&shared.sum());
        }
    }
}

/// `gpuindex.join_chunk`; under a Gather at most a quarter of the outer
/// rows a participant expects (at least `SMALL_CHUNK`), and in the
/// leader growing to that from `SMALL_CHUNK` (`next_chunk`): a
/// partial outer scan hands out its pages as fast as they are asked for,
/// so the leader, first to run, would take a small outer side whole, and
/// join it alone, while the workers start. (Each chunk of a worker's is a
/// search, through the GPU service where one answers: few and large.)
///
/// # Safety
/// The node's plan and its outer side's state.
unsafe fn chunk_size(plan: *mut pg_sys::Plan, outer: *mut pg_sys::PlanState) -> usize {
    let chunk = crate::guc::JOIN_CHUNK.get().max(1) as usize;
    // SAFETY: the caller's contract.
    unsafe {
        if !(*plan).parallel_aware {
            return chunk;
        }
        chunk.min(((*(*outer).plan).plan_rows / 4.0).max(SMALL_CHUNK as f64) as usize)
    }
}

/// A first chunk that grows (`State::first_chunk`), and the least chunk
/// of a partial outer side.
pub(super) const SMALL_CHUNK: usize = 64;

/// How much each chunk of a LATERAL top-k join grows on the one before
/// while its searches are posted ahead. Each chunk's candidates are
/// fetched in a heap-order pass of their own, so a page holding
/// candidates of several chunks is pinned and resolved once for each:
/// 10^4 centres over 10^7 points (k = 10) took 8 chunks and 83K page pins
/// doubling, 4 chunks and 72K growing eightfold (51K in one chunk). The
/// GPU service answers ~8 times as many queries as the backend fetches
/// the rows of in the same time (H200 host), so the next chunk's search
/// stays hidden; sixteenfold (58K pins) left ~3 ms of the last chunk's
/// search unhidden once rows were read off their pages (`nearest::Direct`).
const TOP_K_GROWTH: usize = 8;

pub(super) unsafe fn state<'a>(node: *mut pg_sys::CustomScanState) -> &'a mut State {
    // SAFETY: set by `begin` for the node's lifetime.
    unsafe { &mut *(*node.cast::<JoinNode>()).state }
}

fn tup_is_null(slot: *mut pg_sys::TupleTableSlot) -> bool {
    // SAFETY: a slot pointer from the executor.
    slot.is_null() || unsafe { (*slot).tts_flags as u32 & pg_sys::TTS_FLAG_EMPTY != 0 }
}

impl State {
    /// The name of the batch function a fused call searches, if any.
    pub(super) fn fused_call(&self) -> Option<&'static str> {
        self.fused.as_ref().map(|f| f.call.name)
    }

    /// The counters of every participant that has shut down, and this
    /// process's.
    pub(super) fn all_stats(&self) -> Stats {
        self.stats.plus(&self.workers)
    }

    fn semi_or_anti(&self) -> bool {
        matches!(self.jointype, pg_sys::JoinType::JOIN_SEMI | pg_sys::JoinType::JOIN_ANTI)
    }

    fn emits_unmatched(&self) -> bool {
        matches!(self.jointype, pg_sys::JoinType::JOIN_LEFT | pg_sys::JoinType::JOIN_ANTI)
    }

    /// Fills the scan tuple with outer row `row` and the fetched inner row
    /// (or NULLs). Every column is written each time and the virtual slot
    /// never owns memory, so it is stored in place (what ExecClearTuple
    /// and ExecStoreVirtualTuple would do, without two calls a row).
    pub(super) unsafe fn fill_scan(&self, row: usize, with_inner: bool) {
        // SAFETY: slots of this node; the scan slot has a column per
        // colmap entry; the heap slot is deformed up to `heap_deform`.
        unsafe {
            let scan = self.scan_slot;
            let (values, nulls) = ((*scan).tts_values, (*scan).tts_isnull);
            let n = self.stored_atts.len();
            for &(col, k) in &self.outer_cols {
                *values.add(col) = self.values[row * n + k];
                *nulls.add(col) = self.nulls[row * n + k];
            }
            if let Some(f) = &self.fused {
                for &col in &f.ctid_cols {
                    *values.add(col) = crate::srf::tid_datum(&(*self.heap_slot).tts_tid);
                }
            }
            for &col in &self.inner_ctid_cols {
                *values.add(col) = crate::srf::tid_datum(&(*self.heap_slot).tts_tid);
                *nulls.add(col) = !with_inner;
            }
            let h = self.inner_slot;
            for &(col, att) in &self.inner_cols {
                // (An index-only join's inner columns are read by nothing.)
                if with_inner && !self.index_only {
                    *values.add(col) = *(*h).tts_values.add(att - 1);
                    *nulls.add(col) = *(*h).tts_isnull.add(att - 1);
                } else {
                    *nulls.add(col) = true;
                }
            }
            (*scan).tts_flags &= !(pg_sys::TTS_FLAG_EMPTY as u16);
            (*scan).tts_nvalid = self.natts as i16;
        }
    }

    /// ResetExprContext, once every 64 rows: the quals and the projection
    /// allocate there, and a returned row need only last until the next
    /// call, so resetting less often only holds a few rows' garbage
    /// longer, for one call in 64 instead of one a row.
    unsafe fn reset_row_memory(&mut self, econtext: *mut pg_sys::ExprContext) {
        self.since_reset += 1;
        if self.since_reset >= 64 {
            self.since_reset = 0;
            // SAFETY: the node's expression context.
            unsafe { pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory) };
        }
    }

    /// Reads the next chunk of outer rows and their queries.
    pub(super) unsafe fn load(&mut self, econtext: *mut pg_sys::ExprContext) -> Vec<(i64, pg_sys::Datum)> {
        // Rows read under one guard: pgrx's guard of each call (a
        // sigsetjmp and a thread check, ~20 ns) was a few percent of a
        // 10^6-row join.
        const BLOCK: usize = 1024;
        // SAFETY: the node's slots and contexts.
        unsafe {
            pg_sys::MemoryContextReset(self.chunk_cxt);
            self.rows = 0;
            self.values.clear();
            self.nulls.clear();
            self.matched.clear();
            let mut keys = Vec::new();
            let max_outer = self.stored_atts.last().copied().unwrap_or(0) as i32;
            let mut size = self.next_chunk;
            let growth = if self.grow_while_ahead { TOP_K_GROWTH } else { 2 };
            self.next_chunk = size.saturating_mul(growth).min(self.chunk_size);
            // SAFETY: live until this process shuts down, after its last
            // chunk.
            let shared = self.shared.as_ref();
            if let Some(sh) = shared {
                size = sh.chunk_rows(size, SMALL_CHUNK);
            }
            while !self.outer_done && self.rows < size {
                let end = (self.rows + BLOCK).min(size);
                // Every call in `load_row` is unguarded and its frames hold
                // nothing with a destructor: an ERROR there (the child's
                // plan, the key's expression) returns here as from one
                // guarded call.
                pg_sys::ffi::pg_guard_ffi_boundary(|| while self.rows < end && self.load_row(econtext, max_outer, &mut keys) {});
            }
            if let Some(sh) = shared {
                sh.read(self.rows);
            }
            keys
        }
    }

    /// Reads one outer row into the chunk (and its query into `keys`);
    /// false at the end of the outer side.
    ///
    /// # Safety
    /// Inside a guard (`slot::in_guard`).
    unsafe fn load_row(&mut self, econtext: *mut pg_sys::ExprContext, max_outer: i32, keys: &mut Vec<(i64, pg_sys::Datum)>) -> bool {
        use crate::slot::in_guard;
        // SAFETY: the caller's contract; the child is run in the caller's
        // memory context, copies go to the chunk's.
        unsafe {
            let slot = in_guard::exec_proc_node(self.outer);
            if tup_is_null(slot) {
                self.outer_done = true;
                return false;
            }
            let caller = pg_sys::CurrentMemoryContext;
            // By-reference values must outlive the child's slot: a copy of
            // the row in the chunk's memory holds them.
            let from = if self.outer_byval {
                slot
            } else {
                pg_sys::CurrentMemoryContext = self.chunk_cxt;
                let copy = in_guard::copy_minimal_tuple(slot);
                pg_sys::CurrentMemoryContext = caller;
                in_guard::store_minimal_tuple(copy, self.outer_slot)
            };
            in_guard::getsomeattrs(from, max_outer);
            for &att in &self.stored_atts {
                self.values.push(*(*from).tts_values.add(att - 1));
                self.nulls.push(*(*from).tts_isnull.add(att - 1));
            }
            let n = self.stored_atts.len();
            let (key, isnull) = match self.key_col {
                Some(k) => (self.values[self.rows * n + k], self.nulls[self.rows * n + k]),
                None => {
                    self.fill_scan(self.rows, false);
                    (*econtext).ecxt_scantuple = self.scan_slot;
                    // A computed query is allocated with the chunk.
                    pg_sys::CurrentMemoryContext = self.chunk_cxt;
                    let mut isnull = false;
                    let key = in_guard::eval_expr(self.key, econtext, &mut isnull);
                    pg_sys::CurrentMemoryContext = caller;
                    (key, isnull)
                }
            };
            // A NULL query matches nothing (the operators are strict).
            if !isnull {
                keys.push((self.rows as i64, key));
            }
            self.matched.push(false);
            self.rows += 1;
            true
        }
    }

    /// `f`, its time counted as the heap's where the node is timed.
    pub(super) fn time_heap<R>(&mut self, f: impl FnOnce(&mut State) -> R) -> R {
        let started = self.timed.then(Instant::now);
        let r = f(self);
        if let Some(t) = started {
            self.stats.heap_time += t.elapsed();
        }
        r
    }

    /// Records a batch search that started at `started`: its time, and
    /// whether it ran on the GPU.
    pub(super) fn note_batch(&mut self, started: Instant) {
        self.stats.index_time += started.elapsed();
        if crate::batch::last_batch().is_some_and(|b| b.device == Device::Gpu) {
            self.stats.gpu_batches += 1;
        }
    }

    /// Sends the chunk's queries to the index as one batch (in pieces
    /// where its matches would not fit `gpuindex.batch_work_mem`: each
    /// outer row's matches are in one piece, searched as the matches
    /// before it are taken).
    pub(super) unsafe fn probe(&mut self, keys: Vec<(i64, pg_sys::Datum)>) {
        self.matches.clear();
        self.pieces = None;
        self.stats.chunks += 1;
        self.stats.probes += keys.len() as u64;
        if self.index.is_null() {
            // SAFETY: the node's open table; TID datums.
            self.matches = unsafe { tid_matches(self.heap, &keys) };
            self.stats.matches += self.matches.len() as u64;
        } else if !keys.is_empty() {
            self.bulk_deletes = bulk_deletes::finished(self.index);
            self.keys = keys;
            self.pieces = Some(search::Pieces::new(&self.batch()));
            // SAFETY: as the caller's.
            unsafe { self.next_piece() };
        }
        self.start_matches();
    }

    /// The batch of the chunk's queries.
    fn batch(&self) -> Batch<'_> {
        self.batch_of(&self.keys)
    }

    /// The batch of queries `keys` of the chunk's outer rows.
    pub(super) fn batch_of<'a>(&self, keys: &'a [(i64, pg_sys::Datum)]) -> Batch<'a> {
        Batch { ask: Ask::Matches(self.strategy), query_type: self.key_type, queries: keys, what: "GpuIndexJoin", heap_order: true }
    }

    /// Searches the chunk's next piece into `matches` (`heap_order`); false
    /// when every piece has been searched.
    pub(super) unsafe fn next_piece(&mut self) -> bool {
        let Some(mut pieces) = self.pieces.take() else { return false };
        let started = Instant::now();
        let open = OpenIndex::for_plan(self.heap, self.index, self.am, self.heap_order);
        let Some(hits) = pieces.next(&open, &self.batch()) else { return false };
        self.stats.extra_pieces += pieces.split_off() as u64;
        self.pieces = Some(pieces);
        self.matches = hits.rows.into_iter().map(|(row, t)| (tid_from(t), row as u32)).collect();
        if self.heap_order {
            crate::visibility::sort(&mut self.matches);
        }
        self.note_batch(started);
        self.stats.matches += self.matches.len() as u64;
        true
    }

    /// Starts taking `matches` from their first.
    pub(super) fn start_matches(&mut self) {
        self.all_visible.forget();
        // SAFETY: the node's fetch.
        unsafe { self.pages.reset() };
        self.cursor = 0;
        self.unmatched = 0;
        self.fetched = None;
    }

    /// The next match of the chunk: Some(Some(row)) with its inner row in
    /// `inner_slot`, Some(None) for one that is not a match after all (a
    /// row the snapshot does not see, or an outer row a semi or anti join
    /// is done with), None at the end.
    unsafe fn next_match(&mut self, snapshot: pg_sys::Snapshot) -> Option<Option<usize>> {
        // SAFETY: the node's slots; the chunk's matches or stored rows.
        unsafe {
            if self.cursor % 4096 == 4095 {
                pg_sys::check_for_interrupts!();
            }
            if let Some(top) = &self.top {
                let &(row, at) = top.stored.get(self.cursor)?;
                // Rows were stored in heap order and come back by rank:
                // each a cache miss unless asked for a few rows ahead.
                if let Some(&(_, ahead)) = top.stored.get(self.cursor + 8) {
                    top.prefetch(ahead);
                }
                self.cursor += 1;
                top.load(at);
                return Some(Some(row as usize));
            }
            while self.cursor == self.matches.len() {
                if !self.next_piece() {
                    return None;
                }
                self.start_matches();
            }
            let &(tid, row) = self.matches.get(self.cursor)?;
            // Matches come in heap order (or as found), their outer rows
            // in any: each row's stored values are a cache miss (a tenth
            // of a join's time in a profile) unless asked for a few
            // matches ahead.
            if let Some(&(_, ahead)) = self.matches.get(self.cursor + 8) {
                let n = self.stored_atts.len();
                crate::storage::prefetch(self.values.as_ptr().wrapping_add(ahead as usize * n));
                crate::storage::prefetch(self.nulls.as_ptr().wrapping_add(ahead as usize * n));
                crate::storage::prefetch(self.matched.as_ptr().wrapping_add(ahead as usize));
            }
            self.cursor += 1;
            let row = row as usize;
            if self.semi_or_anti() && self.matched[row] {
                return Some(None);
            }
            // (Moved out while the fetch borrows the node.)
            let matches = std::mem::take(&mut self.matches);
            let found = self.fetch(tid, snapshot, matches[self.cursor..].iter().map(|m| m.0));
            self.matches = matches;
            if !found {
                return Some(None);
            }
            Some(Some(row))
        }
    }

    /// Fetches the visible row at `tid` (the visible member of its HOT
    /// chain) into the heap slot; false if there is none. `upcoming`: the
    /// TIDs fetched next, in order.
    pub(super) unsafe fn fetch(&mut self, tid: Tid, snapshot: pg_sys::Snapshot, upcoming: impl Iterator<Item = Tid> + Clone) -> bool {
        if let Some((t, found)) = self.fetched {
            if t == tid {
                return found;
            }
        }
        // SAFETY: the node's open heap.
        if self.trusts_map && unsafe { self.all_visible(tid) } {
            self.fetched = Some((tid, true));
            return true;
        }
        // SAFETY: the index fetch of this node's table, the query's snapshot.
        let found = self.time_heap(|s| unsafe {
            let found = s.pages.fetch(s.heap, s.heap_slot, snapshot, tid, upcoming);
            if found && s.heap_deform > 0 {
                crate::slot::getsomeattrs(s.heap_slot, s.heap_deform);
            }
            found
        });
        self.stats.fetches += 1;
        self.fetched = Some((tid, found));
        found
    }

    /// The visible row at `tid` (its HOT chain's member) located on its
    /// pinned page, not stored in the heap slot (`store_located` does
    /// that); None if there is none. Where `pages.locates()`.
    ///
    /// # Safety
    /// As `fetch`.
    pub(super) unsafe fn locate(
        &mut self,
        tid: Tid,
        snapshot: pg_sys::Snapshot,
        upcoming: impl Iterator<Item = Tid> + Clone,
    ) -> Option<pg_sys::ItemPointerData> {
        // (The heap slot keeps whatever row it held.)
        self.fetched = None;
        self.stats.fetches += 1;
        // SAFETY: the caller's contract.
        self.time_heap(|s| unsafe {
            s.pages.prefetch_upcoming(upcoming.clone());
            s.pages.locate(s.heap, snapshot, tid, upcoming)
        })
    }

    /// The row `locate` found for `tid` into the heap slot, as `fetch`
    /// stores it.
    ///
    /// # Safety
    /// `v` from the last `locate`, of `tid`.
    pub(super) unsafe fn store_located(&mut self, tid: Tid, v: pg_sys::ItemPointerData) {
        // SAFETY: the caller's contract; the node's slot.
        unsafe {
            self.pages.store(self.heap, self.heap_slot, v);
            if self.heap_deform > 0 {
                crate::slot::getsomeattrs(self.heap_slot, self.heap_deform);
            }
        }
        self.fetched = Some((tid, true));
    }

    /// How many of the chunk's matches after the cursor are rows the
    /// snapshot sees (taking them all: an inner join that counts its rows
    /// and has no quals).
    unsafe fn count_rest(&mut self, snapshot: pg_sys::Snapshot) -> u64 {
        let matches = std::mem::take(&mut self.matches);
        let rest = &matches[self.cursor..];
        // SAFETY: the node's fetch, the query's snapshot.
        let n = unsafe { self.count_visible(rest.len(), |i| rest[i].0, snapshot) };
        self.cursor = matches.len();
        self.matches = matches;
        n
    }

    /// How many of `n` matches (the TID of each: `tid(i)`, in the order
    /// fetched) are rows the snapshot sees. Where the visibility map is
    /// trusted, a run of matches on one all-visible page is counted at
    /// once (a Zipf key's matches come a few dozen a page).
    pub(super) unsafe fn count_visible(&mut self, n: usize, tid: impl Fn(usize) -> Tid, snapshot: pg_sys::Snapshot) -> u64 {
        let (mut count, mut i, mut check_at) = (0, 0, 0);
        while i < n {
            if i >= check_at {
                pg_sys::check_for_interrupts!();
                check_at = i + 4096;
            }
            let t = tid(i);
            // SAFETY: the node's open heap.
            if self.trusts_map && unsafe { self.all_visible(t) } {
                let start = i;
                i += 1;
                while i < n && tid(i) >> 16 == t >> 16 {
                    i += 1;
                }
                count += (i - start) as u64;
                continue;
            }
            // SAFETY: the node's fetch, the query's snapshot.
            count += unsafe { self.fetch(t, snapshot, (i + 1..n).map(&tid)) } as u64;
            i += 1;
        }
        count
    }

    /// Whether `tid`'s page is all-visible and no bulk delete of the
    /// index finished since the search (`AllVisible::check`).
    unsafe fn all_visible(&mut self, tid: Tid) -> bool {
        let (index, since) = (self.index, self.bulk_deletes);
        // SAFETY: the node's open heap.
        unsafe { self.all_visible.check(self.heap, (tid >> 16) as u32, || no_bulk_delete_since(index, since)) }
    }
}

/// Whether no bulk delete of `index` finished since the search began
/// (`since`), read after the visibility map: then no entry it found can
/// have been removed, its line pointer made unused and its page
/// all-visible meanwhile (an index-only scan's leaf pin, which the search
/// does not keep). Without shared memory, never.
pub(super) fn no_bulk_delete_since(index: pg_sys::Relation, since: Option<u64>) -> bool {
    since.is_some() && bulk_deletes::finished(index) == since
}

/// Whether the table's statistics have nine in ten of its pages
/// all-visible (`heap_order`).
///
/// # Safety
/// `heap` open.
unsafe fn mostly_all_visible(heap: pg_sys::Relation) -> bool {
    // SAFETY: the caller's open relation.
    let rel = unsafe { &*(*heap).rd_rel };
    rel.relpages > 0 && f64::from(rel.relallvisible) >= 0.9 * f64::from(rel.relpages)
}

/// The node's output for the scan tuple now in its expression context.
unsafe fn project(node: *mut pg_sys::CustomScanState, scan: *mut pg_sys::TupleTableSlot) -> *mut pg_sys::TupleTableSlot {
    // SAFETY: the node's projection, set up by ExecInitCustomScan; one
    // that only copies columns has nothing to raise.
    unsafe {
        let proj = (*node).ss.ps.ps_ProjInfo;
        if proj.is_null() {
            scan
        } else if state(node).projects_columns {
            crate::slot::project_columns(proj)
        } else {
            pg_sys::ExecProject(proj)
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn next(node: *mut pg_sys::CustomScanState) -> *mut pg_sys::TupleTableSlot {
    // SAFETY: the executor's node, begun by `begin`.
    unsafe {
        let st = state(node);
        if st.aggs.is_empty() {
            return if next_row(node) { project(node, st.scan_slot) } else { std::ptr::null_mut() };
        }
        // An aggregating plan: every row the join would emit counted or
        // summed, then one row with the aggregates.
        if st.counted {
            return std::ptr::null_mut();
        }
        let mut totals = super::aggregate::Totals::default();
        let snapshot = (*(*node).ss.ps.state).es_snapshot;
        // An inner join without quals that only counts: every match that
        // is a row counts, a fused call's and an index's counted in their
        // searches (a TID probe's, the rest of each chunk's). A fused
        // call's matches shared by a parallel plan's participants are
        // counted as each takes them.
        let whole = !st.fills && st.jointype == pg_sys::JoinType::JOIN_INNER && st.top.is_none();
        let instrument = (*node).ss.ps.instrument;
        st.timed = !instrument.is_null() && (*instrument).need_timer;
        if st.row_offsets.is_some() {
            st.sum_rows((*node).ss.ps.ps_ExprContext, snapshot, &mut totals);
        } else if whole && st.fused.is_some() && !st.shares_matches() {
            totals.rows = st.count_fused((*node).ss.ps.ps_ExprContext, snapshot) as i64;
        } else if whole && st.fused.is_none() && !st.index.is_null() {
            totals.rows = st.count_chunks((*node).ss.ps.ps_ExprContext, snapshot) as i64;
        } else {
            while next_row(node) {
                let st = state(node);
                let scan = st.scan_slot;
                totals.add(&st.aggs, (*scan).tts_values, (*scan).tts_isnull);
                if whole && st.phase == Phase::Matches {
                    totals.rows += st.count_rest(snapshot) as i64;
                }
            }
        }
        let st = state(node);
        st.counted = true;
        let scan = st.scan_slot;
        for col in 0..st.natts {
            *(*scan).tts_isnull.add(col) = true;
        }
        for (i, agg) in st.aggs.iter().enumerate() {
            let (value, null) = totals.value(i, agg);
            *(*scan).tts_values.add(agg.col) = value;
            *(*scan).tts_isnull.add(agg.col) = null;
        }
        (*scan).tts_flags &= !(pg_sys::TTS_FLAG_EMPTY as u16);
        (*scan).tts_nvalid = st.natts as i16;
        (*(*node).ss.ps.ps_ExprContext).ecxt_scantuple = scan;
        project(node, scan)
    }
}

/// Runs the join to its next row that passes the plan's quals, in the
/// scan tuple (`fills`) of the node's expression context; false at the
/// end.
///
/// # Safety
/// The executor's node, begun by `begin`.
unsafe fn next_row(node: *mut pg_sys::CustomScanState) -> bool {
    // SAFETY: the caller's contract.
    unsafe {
        let st = state(node);
        let econtext = (*node).ss.ps.ps_ExprContext;
        let qual = (*node).ss.ps.qual;
        let snapshot = (*(*node).ss.ps.state).es_snapshot;
        loop {
            match st.phase {
                Phase::Load => {
                    if st.outer_done && st.ahead.is_none() {
                        return false;
                    }
                    // (The instrumentation is set up after BeginCustomScan.)
                    let instrument = (*node).ss.ps.instrument;
                    st.timed = !instrument.is_null() && (*instrument).need_timer;
                    pg_sys::MemoryContextReset((*econtext).ecxt_per_tuple_memory);
                    if st.fused.is_some() {
                        st.load_fused(econtext);
                        if st.rows == 0 {
                            return false;
                        }
                        st.phase = Phase::Matches;
                        continue;
                    }
                    let keys = match st.take_ahead() {
                        Some(keys) => keys,
                        None => st.load(econtext),
                    };
                    if st.rows == 0 {
                        return false;
                    }
                    if st.top.is_some() {
                        st.run_top_k(keys, snapshot, econtext);
                    } else {
                        st.probe(keys);
                    }
                    st.phase = Phase::Matches;
                }
                Phase::Matches => {
                    let Some(row) = st.next_match(snapshot) else {
                        st.phase = if st.emits_unmatched() { Phase::Unmatched } else { Phase::Load };
                        continue;
                    };
                    let Some(row) = row else { continue };
                    if st.fills {
                        st.fill_scan(row, true);
                        st.reset_row_memory(econtext);
                        (*econtext).ecxt_scantuple = st.scan_slot;
                    }
                    if !st.matching.is_null() && !pg_sys::ExecQual(st.matching, econtext) {
                        st.stats.removed_by_join_filter += 1;
                        continue;
                    }
                    st.matched[row] = true;
                    if st.jointype == pg_sys::JoinType::JOIN_ANTI {
                        continue;
                    }
                    if !qual.is_null() && !pg_sys::ExecQual(qual, econtext) {
                        filtered(node);
                        continue;
                    }
                    return true;
                }
                Phase::Unmatched => {
                    let Some(row) = (st.unmatched..st.rows).find(|&r| !st.matched[r]) else {
                        st.phase = Phase::Load;
                        continue;
                    };
                    st.unmatched = row + 1;
                    if st.fills {
                        st.fill_scan(row, false);
                        st.reset_row_memory(econtext);
                        (*econtext).ecxt_scantuple = st.scan_slot;
                    }
                    if !qual.is_null() && !pg_sys::ExecQual(qual, econtext) {
                        filtered(node);
                        continue;
                    }
                    return true;
                }
            }
        }
    }
}

/// InstrCountFiltered1: a row the plan's qual removed.
unsafe fn filtered(node: *mut pg_sys::CustomScanState) {
    // SAFETY: the node's instrumentation, when EXPLAIN ANALYZE set it up.
    unsafe {
        let instr = (*node).ss.ps.instrument;
        if !instr.is_null() {
            (*instr).nfiltered1 += 1.0;
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn rescan(node: *mut pg_sys::CustomScanState) {
    // SAFETY: the executor's node. ExecReScan passes changed parameters
    // to lefttree/righttree only, not to custom children.
    unsafe {
        let st = state(node);
        let changed = (*node).ss.ps.chgParam;
        if !changed.is_null() {
            pg_sys::UpdateChangedParamSet(st.outer, changed);
        }
        // With changed parameters the child rescans at its next call.
        if (*st.outer).chgParam.is_null() {
            pg_sys::ExecReScan(st.outer);
        }
        st.phase = Phase::Load;
        st.outer_done = false;
        st.counted = false;
        st.drop_ahead();
        st.rows = 0;
        st.next_chunk = st.first_chunk;
        if let Some(f) = st.fused.as_mut() {
            // Its arguments may have changed with the parameters.
            f.reset();
        }
        st.matches.clear();
        st.pieces = None;
        st.fetched = None;
        pg_sys::ExecClearTuple(st.heap_slot);
        st.pages.reset();
        st.all_visible.release();
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn end(node: *mut pg_sys::CustomScanState) {
    // SAFETY: the executor's node; its relations were opened by `begin`
    // (their locks are held to the end of the transaction).
    unsafe {
        let st = state(node);
        pg_sys::ExecEndNode(st.outer);
        pg_sys::ExecClearTuple(st.heap_slot);
        st.pages.end();
        st.all_visible.release();
        if !st.index.is_null() {
            pg_sys::index_close(st.index, pg_sys::NoLock as i32);
        }
        pg_sys::table_close(st.heap, pg_sys::NoLock as i32);
    }
}

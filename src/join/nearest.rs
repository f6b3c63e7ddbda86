//! LATERAL top-k subqueries, execution (`lateral` says which): for a
//! chunk of outer rows, one nearest batch of `k` candidates per outer row
//! (the index's order: distance, then TID), the candidates fetched in TID
//! order with the query's snapshot, the subquery's quals evaluated on each
//! (with the outer row), its select list on those that pass (stored with
//! the chunk); an outer row whose `k` candidates leave fewer than `k`
//! passing is asked again with twice as many. Where the batch's distances
//! are not the ordering operator's own (`BatchSearch::order_bound`:
//! pgvector's float4 sums), the candidates are ranked by the ORDER BY
//! value itself, and a row is done only when its k-th value is at most
//! the bound of the last candidate's distance (no row left out can come
//! before it); else it is asked again with twice as many. Outer rows the index cannot
//! answer are answered by the subquery's own definition, over one heap
//! scan for the chunk: a NULL query (every distance is NULL), a point query
//! with a non-finite coordinate (every distance is infinite or NaN), and a
//! query for which the index runs out of rows before `k` pass (rows whose
//! column is NULL come last, as in the ORDER BY).

use super::exec::State;
use super::plan::TopKPlan;
use crate::am::common::search::{self, Ask, Batch};
use crate::am::common::OpenIndex;
use crate::storage::tid_from;
use pgrx::pg_sys;
use std::time::Instant;

/// A stored output row of the subquery: its place in `TopKState::values`.
type Stored = u32;

pub struct TopKState {
    pub k: usize,
    pub op: pg_sys::Oid,
    quals: *mut pg_sys::ExprState,
    proj: *mut pg_sys::ProjectionInfo,
    /// Where the select list repeats the ORDER BY expression and the
    /// index's distances are its values (`BatchSearch::distance_is_value`):
    /// the select list with a NULL in those places (`known`), for rows
    /// whose finite distance is put there instead (point_distance and
    /// pg_hypot were 7.5% of a kNN join's samples in a backend, locally);
    /// else null.
    proj_known: *mut pg_sys::ProjectionInfo,
    known: Vec<usize>,
    order: *mut pg_sys::ExprState,
    /// The projection's output, and stored rows read back.
    slot: *mut pg_sys::TupleTableSlot,
    pub mslot: *mut pg_sys::TupleTableSlot,
    /// The stored rows' columns, `width` a row: by-value datums as they
    /// are, others copied into the chunk's memory (no tuple is formed for
    /// a row, nor taken apart again when it is returned).
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
    width: usize,
    /// The columns passed by reference, with their type's length.
    by_ref: Vec<(usize, i16)>,
    /// The outer row, for OUTER_VAR references.
    outer_row: *mut pg_sys::TupleTableSlot,
    econtext: *mut pg_sys::ExprContext,
    /// Outer columns the subquery's expressions read.
    atts: Vec<usize>,
    /// Each of them with its place among the node's stored columns.
    cols: Vec<(usize, usize)>,
    /// The places of those passed by reference (their values point into
    /// the chunk's memory, at random for rows taken in heap order).
    ref_cols: Vec<usize>,
    /// The select list read off each fetched row, with no projection,
    /// where it can be (`Direct::of`).
    direct: Option<Direct>,
    /// A row's attribute offsets, where `Direct` finds them per row.
    offsets: Vec<usize>,
    /// The chunk's output: (outer row, subquery row), by row then rank.
    pub stored: Vec<(u32, Stored)>,
    pub rounds: u64,
    pub scanned: u64,
    since_reset: u32,
}

/// The OUTER_VAR attributes `node` reads.
unsafe fn outer_atts(node: *mut pg_sys::Node) -> Vec<usize> {
    // SAFETY: a planned expression tree.
    unsafe {
        crate::list::ptrs::<pg_sys::Var>(pg_sys::pull_var_clause(node, 0))
            .into_iter()
            .filter(|&v| (*v).varno == pg_sys::OUTER_VAR)
            .map(|v| (*v).varattno as usize)
            .collect()
    }
}

impl TopKState {
    /// # Safety
    /// At BeginCustomScan; `outer` is the node's outer child, `heap` its
    /// open table.
    pub unsafe fn begin(
        t: &TopKPlan,
        estate: *mut pg_sys::EState,
        outer: *mut pg_sys::PlanState,
        heap: pg_sys::Relation,
        exact: bool,
    ) -> TopKState {
        // SAFETY: the caller's contract. The expressions are built without
        // a parent: they read the fetched row's slot, not the node's scan
        // slot, so no slot type may be assumed.
        unsafe {
            let table = &raw mut (*estate).es_tupleTable;
            let desc = pg_sys::ExecTypeFromTL(t.tlist);
            let slot = pg_sys::ExecAllocTableSlot(table, desc, &pg_sys::TTSOpsVirtual);
            let width = (*desc).natts as usize;
            let by_ref = (0..width)
                .map(|i| &*(*desc).attrs.as_ptr().add(i))
                .enumerate()
                .filter(|(_, a)| !a.attbyval)
                .map(|(i, a)| (i, a.attlen))
                .collect();
            let econtext = pg_sys::CreateExprContext(estate);
            let mut atts = outer_atts(t.quals.cast());
            atts.extend(outer_atts(t.tlist.cast()));
            atts.extend(outer_atts(t.order.cast()));
            atts.sort_unstable();
            atts.dedup();
            let build = |tlist| pg_sys::ExecBuildProjectionInfo(tlist, econtext, slot, std::ptr::null_mut(), std::ptr::null_mut());
            let known: Vec<usize> = if exact && pg_sys::exprType(t.order.cast()) == pg_sys::FLOAT8OID {
                crate::list::ptrs::<pg_sys::TargetEntry>(t.tlist)
                    .into_iter()
                    .enumerate()
                    .filter(|&(_, te)| pg_sys::equal((*te).expr.cast(), t.order.cast()))
                    .map(|(i, _)| i)
                    .collect()
            } else {
                Vec::new()
            };
            let proj_known = if known.is_empty() {
                std::ptr::null_mut()
            } else {
                let tlist = pg_sys::copyObjectImpl(t.tlist.cast()).cast::<pg_sys::List>();
                for &i in &known {
                    let te = crate::list::ptrs::<pg_sys::TargetEntry>(tlist)[i];
                    (*te).expr = pg_sys::makeNullConst(pg_sys::FLOAT8OID, -1, pg_sys::InvalidOid).cast();
                }
                build(tlist)
            };
            let direct = Direct::of(t, &known, (*heap).rd_att);
            TopKState {
                k: t.k,
                op: t.op,
                quals: pg_sys::ExecInitQual(t.quals, std::ptr::null_mut()),
                proj: build(t.tlist),
                proj_known,
                known,
                order: pg_sys::ExecInitExpr(t.order, std::ptr::null_mut()),
                slot,
                mslot: pg_sys::ExecAllocTableSlot(table, desc, &pg_sys::TTSOpsVirtual),
                values: Vec::new(),
                nulls: Vec::new(),
                width,
                by_ref,
                outer_row: pg_sys::ExecAllocTableSlot(table, pg_sys::ExecGetResultType(outer), &pg_sys::TTSOpsVirtual),
                econtext,
                atts,
                cols: Vec::new(),
                ref_cols: Vec::new(),
                direct,
                offsets: Vec::new(),
                stored: Vec::new(),
                rounds: 0,
                scanned: 0,
                since_reset: 0,
            }
        }
    }

    pub fn outer_atts(&self) -> impl Iterator<Item = usize> + '_ {
        self.atts.iter().copied()
    }

    /// Stores the select list read off `row`, a visible row of the table
    /// on its pinned page (`len` bytes), with the distance `known`
    /// (`Direct`; values passed by reference copied into `chunk`); None,
    /// storing nothing, where the row has NULLs or too few columns, its
    /// columns run past its length, or the distance is read and not
    /// finite.
    ///
    /// # Safety
    /// `row` a heap row of `len` bytes, pinned; `d` of this state; `chunk`
    /// the chunk's memory.
    unsafe fn store_direct(
        &mut self,
        d: &Direct,
        row: *const pg_sys::HeapTupleHeaderData,
        len: u32,
        known: Option<f64>,
        chunk: pg_sys::MemoryContext,
    ) -> Option<Stored> {
        if d.known && known.is_none() {
            return None;
        }
        // SAFETY: the caller's row: its header, and data of the lengths
        // the descriptor gives at the offsets found (no NULL before them).
        unsafe {
            let natts = u32::from((*row).t_infomask2) & pg_sys::HEAP_NATTS_MASK;
            if u32::from((*row).t_infomask) & pg_sys::HEAP_HASNULL != 0 || natts < d.last_att {
                return None;
            }
            let hoff = (*row).t_hoff as usize;
            let data = row.cast::<u8>().add(hoff);
            if d.walk.as_ref().is_some_and(|w| !w.offsets(data, (len as usize).saturating_sub(hoff), &mut self.offsets)) {
                return None;
            }
            let at = self.values.len();
            for c in &d.cols {
                self.values.push(match *c {
                    None => pg_sys::Datum::from(known.unwrap_or_default().to_bits()),
                    Some(c) => {
                        let p = data.add(match c.at {
                            At::Fixed(off) => off,
                            At::Walked(i) => self.offsets[i],
                        });
                        if c.byval {
                            super::aggregate::by_value(p, c.len)
                        } else {
                            crate::slot::datum_copy_in(chunk, pg_sys::Datum::from(p), c.len)
                        }
                    }
                });
            }
            self.nulls.resize(at + d.cols.len(), false);
            Some((at / self.width.max(1)) as Stored)
        }
    }

    /// Starts loading stored row `at`'s columns (a hint).
    pub fn prefetch(&self, at: Stored) {
        crate::storage::prefetch(self.values.as_ptr().wrapping_add(at as usize * self.width));
    }

    /// Stored row `at` into `mslot`. Every column is written and the
    /// virtual slot owns no memory, so it is stored in place (as the
    /// node's scan slot is).
    pub unsafe fn load(&self, at: Stored) {
        let (w, at) = (self.width, at as usize * self.width);
        // SAFETY: a virtual slot of the subquery's descriptor, `width`
        // columns.
        unsafe {
            let slot = self.mslot;
            std::ptr::copy_nonoverlapping(self.values[at..at + w].as_ptr(), (*slot).tts_values, w);
            std::ptr::copy_nonoverlapping(self.nulls[at..at + w].as_ptr(), (*slot).tts_isnull, w);
            (*slot).tts_flags &= !(pg_sys::TTS_FLAG_EMPTY as u16);
            (*slot).tts_nvalid = w as i16;
        }
    }
}

/// A select list read off the fetched row. Where the subquery has no
/// quals and each column of its select list is the index's distance (the
/// ORDER BY value, `TopKState::known`) or a column of the table
/// (`id, p, name, p <-> c AS d`), a passing candidate's values are read
/// from its row on the pinned page, with no slot, deforming or projection
/// (with the calls around them, a fifth of a kNN join's backend in a
/// profile); those passed by reference are copied into the chunk's
/// memory, as the projection's are. A column after fixed-width ones only
/// lies at a fixed offset in a row without NULLs; the offsets of those
/// from the first of variable width to the last one read are found in
/// each row as PostgreSQL's deforming finds them (`Walk::offsets`). A row
/// with NULLs or fewer columns, or a distance that is not finite, goes
/// through the projection.
#[derive(Clone)]
struct Direct {
    /// Per column: None for the distance, else the table's column.
    cols: Vec<Option<Col>>,
    /// Where a column of variable width comes before the last one read.
    walk: Option<Walk>,
    /// The last attribute read; whether the distance is.
    last_att: u32,
    known: bool,
}

#[derive(Clone, Copy)]
struct Col {
    at: At,
    /// Its type's length (-1: varlena) and whether it is passed by value.
    len: i16,
    byval: bool,
}

/// Where a column lies in a row's data: at a fixed offset (no column of
/// variable width before it), or where the walk finds it (its place in
/// `Walk::offsets`).
#[derive(Clone, Copy)]
enum At {
    Fixed(usize),
    Walked(usize),
}

impl Direct {
    /// # Safety
    /// At BeginCustomScan: `known` the columns of `t`'s select list that
    /// repeat its ORDER BY value, `desc` its table's descriptor.
    unsafe fn of(t: &TopKPlan, known: &[usize], desc: pg_sys::TupleDesc) -> Option<Direct> {
        if !t.quals.is_null() {
            return None;
        }
        // Per column: None for the distance, else (attribute from 0,
        // length, by value).
        let (mut read, mut last_att) = (Vec::new(), 0);
        // SAFETY: the plan's select list and the table's descriptor.
        unsafe {
            let attr = |i: usize| &*(*desc).attrs.as_ptr().add(i);
            for (i, te) in crate::list::ptrs::<pg_sys::TargetEntry>(t.tlist).into_iter().enumerate() {
                if known.contains(&i) {
                    read.push(None);
                    continue;
                }
                let v = (*te).expr.cast::<pg_sys::Var>();
                if !crate::list::is_a((*te).expr, pg_sys::NodeTag::T_Var)
                    || matches!((*v).varno, pg_sys::OUTER_VAR | pg_sys::INNER_VAR)
                    || (*v).varattno < 1
                    || (*v).varattno as i32 > (*desc).natts
                {
                    return None;
                }
                let att = (*v).varattno as usize;
                let (len, byval) = (attr(att - 1).attlen, attr(att - 1).attbyval);
                if byval && !matches!(len, 1 | 2 | 4 | 8) {
                    return None;
                }
                read.push(Some((att - 1, len, byval)));
                last_att = last_att.max(att as u32);
            }
            let walk = match (0..last_att as usize).find(|&i| attr(i).attlen <= 0) {
                None => None,
                Some(first) => {
                    let start = match first {
                        0 => 0,
                        _ => super::aggregate::fixed_offset(desc, first).map(|(off, len)| off + len as usize)?,
                    };
                    let atts = (first..last_att as usize).map(|i| (attr(i).attlen, super::aggregate::align_of(attr(i).attalign)));
                    Some(Walk { first, start, atts: atts.collect() })
                }
            };
            // (A cstring column, attlen -2, is not read here.)
            if walk.iter().flat_map(|w| &w.atts).any(|&(len, _)| len < -1 || len == 0) {
                return None;
            }
            // (A column without a fixed offset comes at or after the walk's
            // first.)
            let place = |att: usize| match super::aggregate::fixed_offset(desc, att + 1) {
                Some((off, _)) => At::Fixed(off),
                None => At::Walked(att - walk.as_ref().map_or(0, |w| w.first)),
            };
            let cols: Vec<Option<Col>> = read.into_iter().map(|r| r.map(|(att, len, byval)| Col { at: place(att), len, byval })).collect();
            Some(Direct { known: cols.iter().any(Option::is_none), cols, walk, last_att })
        }
    }
}

/// The attributes from the first of variable width (`first`, its data at
/// or after `start`, past the fixed-width ones before it) to the last one
/// read: the (length, alignment) of each.
#[derive(Clone)]
struct Walk {
    first: usize,
    start: usize,
    atts: Vec<(i16, usize)>,
}

impl Walk {
    /// The offset of each attribute of the walk in a row's `data` (`size`
    /// bytes, no NULLs) into `offsets` (from `first`), as heap_deform_tuple
    /// finds them: a varlena is aligned unless its first byte is not
    /// padding (a short header, which is not aligned). False where they run
    /// past the row.
    ///
    /// # Safety
    /// `data` a heap row's data of `size` bytes, of the descriptor the walk
    /// was made for.
    unsafe fn offsets(&self, data: *const u8, size: usize, offsets: &mut Vec<usize>) -> bool {
        offsets.clear();
        let mut off = self.start;
        for &(len, align) in &self.atts {
            // SAFETY: offsets checked against the row's size before each read.
            unsafe {
                if len != -1 || off >= size || *data.add(off) == 0 {
                    off = off.next_multiple_of(align);
                }
                if off >= size {
                    return false;
                }
                offsets.push(off);
                off += if len > 0 { len as usize } else { pgrx::varlena::varsize_any(data.add(off).cast()) };
            }
        }
        off <= size
    }
}

/// The queries of `keys` the index can answer (`answerable`), in order.
pub(super) fn answerable_keys(key_type: pg_sys::Oid, keys: &[(i64, pg_sys::Datum)]) -> Vec<(i64, pg_sys::Datum)> {
    // SAFETY: non-NULL queries of the key's type.
    keys.iter().copied().filter(|k| unsafe { answerable(key_type, k.1) }).collect()
}

/// Whether the index can answer a query: a point's coordinates must be
/// finite (the distance from any other is then a number).
unsafe fn answerable(key_type: pg_sys::Oid, key: pg_sys::Datum) -> bool {
    if key_type != pg_sys::POINTOID {
        return true;
    }
    // SAFETY: a non-NULL point datum.
    let p = unsafe { &*key.cast_mut_ptr::<pg_sys::Point>() };
    p.x.is_finite() && p.y.is_finite()
}

/// A candidate: its order (NULL last, then NaN after every number, as
/// float8 sorts), its rank or scan position, the stored row.
type Ranked = ((bool, u64), u64, Stored);

/// No stored row: the candidate did not pass.
const NOT_PASSED: Stored = Stored::MAX;

/// The subquery's ORDER BY value of the row `passes` set up, as an order
/// key.
unsafe fn order_value(top: &mut TopKState) -> (bool, u64) {
    let mut null = false;
    // SAFETY: the expression context `passes` filled.
    let d = unsafe { pg_sys::ExecEvalExprSwitchContext(top.order, top.econtext, &mut null) };
    order_key(null, f64::from_bits(d.value() as u64))
}

fn order_key(null: bool, d: f64) -> (bool, u64) {
    let d = if d.is_nan() {
        f64::NAN
    } else if d == 0.0 {
        0.0
    } else {
        d
    };
    (null, gpuindex_engine::keys::encode_f64(d))
}

impl State {
    /// Runs the top-k subquery for the chunk's outer rows; its output goes
    /// to `top.stored`. Once the first round's answer is in, the next
    /// chunk is read and its first round posted (`read_ahead`).
    pub(super) unsafe fn run_top_k(
        &mut self,
        keys: Vec<(i64, pg_sys::Datum)>,
        snapshot: pg_sys::Snapshot,
        econtext: *mut pg_sys::ExprContext,
    ) {
        let mut top = self.top.take().expect("a top-k node");
        // (The chunk's memory, where their copies were, was reset.)
        top.values.clear();
        top.nulls.clear();
        if top.cols.len() != top.atts.len() {
            top.cols = top.atts.iter().map(|&a| (a, self.stored_atts.binary_search(&a).expect("a stored column"))).collect();
            // SAFETY: the outer row slot's descriptor has every attribute
            // the subquery reads.
            let desc = unsafe { (*top.outer_row).tts_tupleDescriptor };
            let by_ref = |att: usize| unsafe { !(*(*desc).attrs.as_ptr().add(att - 1)).attbyval };
            top.ref_cols = top.cols.iter().filter(|c| by_ref(c.0)).map(|c| c.1).collect();
        }
        let (n, k) = (self.rows, top.k);
        // Each finished outer row's results, (row, stored row) in rank
        // order, rows in any order (sorted by row at the end).
        // (Not sized by n * k: k may be far above what the table holds.)
        let mut finals: Vec<(u32, Stored)> = Vec::new();
        // One row's passing candidates, in order.
        let mut r: Vec<Ranked> = Vec::new();
        // Rows the index cannot answer: NULL or non-finite queries first.
        let mut pending = answerable_keys(self.key_type, &keys);
        let mut ahead = true;
        let mut by_index = vec![false; n];
        for p in &pending {
            by_index[p.0 as usize] = true;
        }
        let mut by_scan: Vec<usize> = (0..n).filter(|&r| !by_index[r]).collect();
        let mut want = k;
        let bound = search::searcher(self.am).expect("a searchable index").order_bound;
        while !pending.is_empty() {
            top.rounds += 1;
            self.stats.probes += pending.len() as u64;
            let open = OpenIndex::for_plan(self.heap, self.index, self.am, true);
            let ask = Ask::Nearest { strategy: self.strategy, k: want };
            let batch = Batch { ask, query_type: self.key_type, queries: &pending, what: "GpuIndexJoin", heap_order: false };
            // (In pieces where the candidates would not fit
            // gpuindex.batch_work_mem: each row's in one.)
            let mut pieces = search::Pieces::new(&batch);
            // Each row's farthest candidate, and how many it has.
            let mut last = vec![0f64; n];
            let mut count = vec![0u32; n];
            // Where each row's candidates start among the piece's.
            let mut place = vec![0usize; n];
            let mut again = Vec::new();
            loop {
                let started = Instant::now();
                let Some(hits) = pieces.next(&open, &batch) else { break };
                self.note_batch(started);
                if std::mem::take(&mut ahead) {
                    // SAFETY: the node's execution.
                    unsafe { self.read_ahead(econtext, &open, &batch) };
                }
                self.stats.extra_pieces += pieces.split_off() as u64;
                let part = &pending[pieces.last()];
                let Some(&(_, first)) = part.first() else { continue };
                let rechecked = bound(open.index, first, 0.0).is_some();
                for (&(row, _), &d) in hits.rows.iter().zip(hits.distances.as_deref().unwrap_or_default()) {
                    last[row as usize] = last[row as usize].max(d);
                }
                // Each row's candidates come nearest first: their rank.
                let mut cands: Vec<(u64, u32, u32)> = hits
                    .rows
                    .iter()
                    .map(|&(row, t)| {
                        let r = &mut count[row as usize];
                        *r += 1;
                        (tid_from(t), row as u32, *r - 1)
                    })
                    .collect();
                self.stats.matches += cands.len() as u64;
                // (ORDER BY value when rechecked, rank, stored row) of the
                // candidates that pass, each at its row's place (the part's
                // rows in order) plus its rank: by row and rank with no
                // sort (sorting 10^4 of them took 0.5 ms a parallel chunk).
                let mut at = 0;
                for &(row, _) in part {
                    place[row as usize] = at;
                    at += count[row as usize] as usize;
                }
                debug_assert_eq!(at, cands.len(), "every candidate is of a row of the part");
                // Their distances at the same places, where the select
                // list takes them (`TopKState::known`).
                let mut distance = Vec::new();
                if let (false, false, Some(ds)) = (rechecked, top.known.is_empty(), hits.distances.as_deref()) {
                    distance = vec![f64::NAN; cands.len()];
                    for (&(_, row, rank), &d) in cands.iter().zip(ds) {
                        distance[place[row as usize] + rank as usize] = d;
                    }
                }
                crate::visibility::sort(&mut cands);
                // (Rows read off their pages: a heap table's, fetched.)
                let direct = top.direct.clone().filter(|_| !rechecked && self.pages.locates() && !self.trusts_map);
                // Each candidate's stored row where it passed (at its
                // place), and its ORDER BY value where rechecked: kept
                // small, as they are written in heap order.
                let mut passed: Vec<Stored> = vec![NOT_PASSED; cands.len()];
                let mut values: Vec<(bool, u64)> = if rechecked { vec![(false, 0); cands.len()] } else { Vec::new() };
                top.values.reserve(cands.len() * top.width);
                top.nulls.reserve(cands.len() * top.width);
                // SAFETY: the node's fetch.
                unsafe { self.pages.reset() };
                let width = self.stored_atts.len();
                for (i, &(tid, row, rank)) in cands.iter().enumerate() {
                    if i % 4096 == 4095 {
                        pgrx::check_for_interrupts!();
                    }
                    // Candidates come in heap order, their outer rows in any:
                    // the row's values asked for ahead, and then what its
                    // values passed by reference point to (a select list
                    // read off the rows reads neither).
                    if let Some(&(_, ahead, _)) = cands.get(i + 16).filter(|_| direct.is_none()) {
                        crate::storage::prefetch(self.values.as_ptr().wrapping_add(ahead as usize * width));
                    }
                    if let Some(&(_, ahead, rank)) = cands.get(i + 8) {
                        for &c in top.ref_cols.iter().filter(|_| direct.is_none()) {
                            crate::storage::prefetch(self.values[ahead as usize * width + c].cast_mut_ptr::<u8>());
                        }
                        // Its places among the candidates, by row and rank:
                        // random in heap order (the loads of its distance
                        // were a seventh of the backend's samples in a
                        // local profile).
                        // (Not where a vector is empty: an address in no
                        // mapping costs a page walk each time.)
                        let at = place[ahead as usize] + rank as usize;
                        if !distance.is_empty() {
                            crate::storage::prefetch(distance.as_ptr().wrapping_add(at));
                        }
                        crate::storage::prefetch(passed.as_ptr().wrapping_add(at));
                        if rechecked {
                            crate::storage::prefetch(values.as_ptr().wrapping_add(at));
                        }
                    }
                    let at = place[row as usize] + rank as usize;
                    let known = distance.get(at).copied().filter(|d| d.is_finite());
                    let upcoming = cands[i + 1..].iter().map(|c| c.0);
                    // SAFETY: the node's fetch and slots; a located row
                    // stays pinned until the next is located.
                    let fetched = match &direct {
                        Some(d) => match unsafe { self.locate(tid, snapshot, upcoming) } {
                            None => false,
                            Some(v) => match unsafe {
                                {
                                    let (row, len) = self.pages.row(v);
                                    top.store_direct(d, row, len, known, self.chunk_cxt)
                                }
                            } {
                                Some(s) => {
                                    passed[at] = s;
                                    continue;
                                }
                                None => {
                                    unsafe { self.store_located(tid, v) };
                                    true
                                }
                            },
                        },
                        None => unsafe { self.fetch(tid, snapshot, upcoming) },
                    };
                    if fetched {
                        if let Some((value, s)) = unsafe { self.accept(&mut top, row as usize, rechecked, known) } {
                            passed[at] = s;
                            if rechecked {
                                values[at] = value;
                            }
                        }
                    }
                }
                for &(row, key) in part {
                    let (start, had) = (place[row as usize], count[row as usize] as usize);
                    // The row's passing candidates by ORDER BY value and
                    // rank (in rank order already unless rechecked).
                    r.clear();
                    r.extend(
                        (start..start + had)
                            .filter(|&j| passed[j] != NOT_PASSED)
                            .map(|j| (values.get(j).copied().unwrap_or((false, 0)), (j - start) as u64, passed[j])),
                    );
                    if rechecked {
                        r.sort_unstable();
                    }
                    let ran_out = had < want;
                    // Rechecked: done when nothing beyond the last candidate
                    // (distance >= its) can have a smaller value than the k-th.
                    let settled = || {
                        !rechecked
                            || ran_out
                            || bound(open.index, key, last[row as usize]).is_some_and(|b| r[k - 1].0 <= order_key(false, b))
                    };
                    if r.len() >= k && settled() {
                        finals.extend(r[..k].iter().map(|p| (row as u32, p.2)));
                    } else if ran_out {
                        // The index ran out: NULL columns may still come.
                        by_scan.push(row as usize);
                    } else {
                        again.push((row, key));
                    }
                }
            }
            pending = again;
            want = want.saturating_mul(2);
        }
        if !by_scan.is_empty() {
            // SAFETY: the node's table, slots and snapshot.
            unsafe { self.scan_for(&mut top, &by_scan, &mut finals, snapshot) };
        }
        // By outer row, each row's in rank order (a stable sort; rows
        // answered in one round are in order already).
        if !finals.is_sorted_by_key(|f| f.0) {
            finals.sort_by_key(|f| f.0);
        }
        top.stored = finals;
        self.top = Some(top);
        self.stats.chunks += 1;
        self.cursor = 0;
        self.unmatched = 0;
    }

    /// Evaluates the subquery's quals on the fetched row (in the heap
    /// slot) with outer row `row`; if they pass, its ORDER BY value (when
    /// `ordered`; else a constant) and its select list, stored (`known`:
    /// the ORDER BY value, as `project` takes it).
    unsafe fn accept(&mut self, top: &mut TopKState, row: usize, ordered: bool, known: Option<f64>) -> Option<((bool, u64), Stored)> {
        // SAFETY: the subquery's expressions, slots and memory.
        unsafe {
            if !self.passes(top, row) {
                return None;
            }
            let value = if ordered { order_value(top) } else { (false, 0) };
            Some((value, self.project(top, known)))
        }
    }

    /// Whether the fetched row (in the heap slot) passes the subquery's
    /// quals with outer row `row` (whose columns it also sets up).
    unsafe fn passes(&self, top: &mut TopKState, row: usize) -> bool {
        // SAFETY: the subquery's expressions and slots.
        unsafe {
            self.fill_outer_row(top, row);
            top.reset_row_memory();
            (*top.econtext).ecxt_scantuple = self.heap_slot;
            (*top.econtext).ecxt_outertuple = top.outer_row;
            top.quals.is_null() || pg_sys::ExecQual(top.quals, top.econtext)
        }
    }

    /// The subquery's select list over the row `passes` accepted, stored
    /// (values passed by reference copied into the chunk's memory: they
    /// may point into the heap page or the row's expression memory). A
    /// `known` ORDER BY value (a finite distance) is taken where the
    /// select list repeats the expression (`TopKState::known`).
    unsafe fn project(&self, top: &mut TopKState, known: Option<f64>) -> Stored {
        // SAFETY: as `passes`, right after it; the projection fills every
        // column of its virtual slot.
        unsafe {
            let (slot, w) = (top.slot, top.width);
            match known {
                Some(d) if !top.proj_known.is_null() => {
                    pg_sys::ExecProject(top.proj_known);
                    for &i in &top.known {
                        *(*slot).tts_values.add(i) = pg_sys::Datum::from(d.to_bits());
                        *(*slot).tts_isnull.add(i) = false;
                    }
                }
                _ => {
                    pg_sys::ExecProject(top.proj);
                }
            }
            let at = top.values.len();
            top.values.extend_from_slice(std::slice::from_raw_parts((*slot).tts_values, w));
            top.nulls.extend_from_slice(std::slice::from_raw_parts((*slot).tts_isnull, w));
            for &(i, len) in &top.by_ref {
                if !top.nulls[at + i] {
                    top.values[at + i] = crate::slot::datum_copy_in(self.chunk_cxt, top.values[at + i], len);
                }
            }
            (at / w.max(1)) as Stored
        }
    }

    /// The outer row's columns the subquery reads, into `top.outer_row`.
    unsafe fn fill_outer_row(&self, top: &TopKState, row: usize) {
        // SAFETY: a virtual slot of the outer child's descriptor, every
        // column the expressions read written before each use.
        unsafe {
            let slot = top.outer_row;
            let n = self.stored_atts.len();
            for &(att, i) in &top.cols {
                *(*slot).tts_values.add(att - 1) = self.values[row * n + i];
                *(*slot).tts_isnull.add(att - 1) = self.nulls[row * n + i];
            }
            (*slot).tts_flags &= !(pg_sys::TTS_FLAG_EMPTY as u16);
            (*slot).tts_nvalid = (*(*slot).tts_tupleDescriptor).natts as i16;
        }
    }

    /// The subquery by its definition, for `rows`: one heap scan, each
    /// visible row that passes a row's quals ranked by the ORDER BY value
    /// (NULL last), the `k` first kept.
    unsafe fn scan_for(&mut self, top: &mut TopKState, rows: &[usize], finals: &mut Vec<(u32, Stored)>, snapshot: pg_sys::Snapshot) {
        // SAFETY: a scan of the node's table with the query's snapshot,
        // into the heap slot (the index fetch's cached row is forgotten).
        unsafe {
            top.scanned += rows.len() as u64;
            let k = top.k;
            let mut best: Vec<Vec<Ranked>> = vec![Vec::new(); rows.len()];
            let scan = pg_sys::table_beginscan(self.heap, snapshot, 0, std::ptr::null_mut());
            self.fetched = None;
            let mut seq = 0u64;
            while pg_sys::table_scan_getnextslot(scan, pg_sys::ScanDirection::ForwardScanDirection, self.heap_slot) {
                seq += 1;
                if seq.is_multiple_of(1024) {
                    pgrx::check_for_interrupts!();
                }
                for (j, &row) in rows.iter().enumerate() {
                    // The quals first: the ORDER BY value of a row they
                    // reject (a row the policies hide) is never computed.
                    if !self.passes(top, row) {
                        continue;
                    }
                    let key = order_value(top);
                    let b = &mut best[j];
                    if b.len() >= k && b.iter().all(|x| x.0 <= key) {
                        continue;
                    }
                    b.push((key, seq, self.project(top, None)));
                    if b.len() > k {
                        b.sort_unstable_by_key(|x| (x.0, x.1));
                        b.truncate(k);
                    }
                }
            }
            pg_sys::table_endscan(scan);
            self.fetched = None;
            for (j, &row) in rows.iter().enumerate() {
                let b = &mut best[j];
                b.sort_unstable_by_key(|x| (x.0, x.1));
                finals.extend(b.iter().map(|x| (row as u32, x.2)));
            }
        }
    }
}

impl TopKState {
    /// As the node's own: the subquery's expressions allocate in their
    /// context's per-row memory.
    unsafe fn reset_row_memory(&mut self) {
        self.since_reset += 1;
        if self.since_reset >= 64 {
            self.since_reset = 0;
            // SAFETY: the subquery's expression context.
            unsafe { pg_sys::MemoryContextReset((*self.econtext).ecxt_per_tuple_memory) };
        }
    }
}

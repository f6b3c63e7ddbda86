//! The join's estimate, in the planner's units, from what execution does:
//!
//! - the outer side, once;
//! - the batch: per outer row a descent (log2 of the index's entries
//!   comparisons) and per match a copy, priced as one CPU would run them
//!   (the GPU or all cores only make it cheaper); for a TID probe, the
//!   sort of each chunk's TIDs;
//! - the heap: each chunk's matches fetched in TID order. The pages read
//!   over all chunks are PostgreSQL's estimate for that many fetches
//!   (Mackert-Lohman with the cache, as index_pages_fetched gives a
//!   repeated inner index scan); each costs as in a bitmap heap scan of
//!   one chunk, between a random and a sequential read as the share of the
//!   table a chunk reads grows; plus a tuple per match. A join that reads
//!   no inner column skips the all-visible share of the pages;
//! - the match quals on every match, the other quals and the output on
//!   every row out;
//! - for a LATERAL top-k subquery, the matches are the k candidates of
//!   each outer row, each also paying the subquery's quals and select list
//!   (candidates the quals reject make the node ask again: not priced),
//!   and its heap fetches are priced as PostgreSQL prices them in the
//!   subquery's own plan (a share of a full index scan's);
//! - reading the index into the backend's copy where it holds none and
//!   no GPU service answers (`BatchSearch::load_cost`), once, as a ski
//!   rental (`load`: nothing once earlier statements forwent as much); by
//!   each participant of a partial path, whole (a parallel worker starts
//!   without, every time);
//! - a fused call's matches shared among parallel participants
//!   (`Sharing::Matches`): the search whole, the pages read whole, the
//!   CPU's work per match divided among them (as cost_bitmap_heap_scan
//!   and cost_seqscan divide theirs). Its large constants reach the
//!   workers as values, not plan text (`sent`): nothing priced per byte.
//!
//! No row comes out before the first chunk is probed and fetched, so the
//! startup cost holds the first chunk's share and the load.

use super::plan::{clauses, index_only, match_quals, matches_are_entries, split_quals, PathPrivate};
use pgrx::pg_sys;

/// What a join path costs (`estimate`).
pub struct Estimate {
    pub startup: f64,
    pub total: f64,
    /// What a counting plan of it (`count`) does not pay: an inner join
    /// without other quals that reads no inner column counts each match
    /// on an all-visible page, in the index's walk or by the map, rather
    /// than making it a heap tuple (an operator's cost where the rows pay
    /// a tuple's).
    pub counted: f64,
    /// The load of the index's copy that `total` holds.
    pub load: f64,
}

/// How a path's participants share its work (`estimate`).
#[derive(Clone, Copy, PartialEq)]
pub enum Sharing {
    /// One process joins the whole outer side.
    Serial,
    /// Each participant joins its share of a partial outer path.
    Outer,
    /// One participant runs the fused call's search and all of them take
    /// shares of its matches (`handout::Handout`), this many in the
    /// planner's count (get_parallel_divisor). As PostgreSQL prices a
    /// parallel bitmap heap scan, the share divides the CPU's work (the
    /// tuples, the quals, the output) and not the pages read.
    Matches(f64),
}

/// The costs of the join `path` of `outer_path` with its inner side,
/// giving `rows` rows (a parallel path's: its share of the join's).
///
/// # Safety
/// Planner structures of one planning call.
pub unsafe fn estimate(
    root: *mut pg_sys::PlannerInfo,
    joinrel: *mut pg_sys::RelOptInfo,
    outer_path: *mut pg_sys::Path,
    path: &PathPrivate,
    rows: f64,
    sharing: Sharing,
) -> Estimate {
    let PathPrivate { restrictlist, probe, jointype, innerrel } = *path;
    // SAFETY: the caller's contract; cost GUCs read in the backend.
    unsafe {
        let (cpu_operator, cpu_tuple) = (pg_sys::cpu_operator_cost, pg_sys::cpu_tuple_cost);
        let chunk = crate::guc::JOIN_CHUNK.get().max(1) as f64;
        let outer_rows = (*outer_path).rows.max(1.0);
        let chunks = (outer_rows / chunk).ceil();
        // The table the index is on: the inner one, or the subquery's.
        let table = probe.top.as_ref().map_or(innerrel, |t| t.table);
        let tuples = (*table).tuples.max(1.0);
        let pages = ((*table).pages as f64).max(1.0);
        let (matches, per_candidate) = match &probe.top {
            None => {
                let selectivity =
                    || pg_sys::clause_selectivity(root, probe.rinfo.cast(), 0, pg_sys::JoinType::JOIN_INNER, std::ptr::null_mut());
                // (The keys' matches are the whole call's: not a partial
                // outer path's share.)
                let keyed = probe.keyed.filter(|_| sharing != Sharing::Outer);
                (keyed.unwrap_or_else(|| outer_rows * tuples * selectivity()).max(0.0), 0.0)
            }
            Some(t) => {
                let mut sub = pg_sys::QualCost::default();
                pg_sys::cost_qual_eval(&mut sub, t.quals, root);
                let mut select = pg_sys::QualCost::default();
                for te in crate::list::ptrs::<pg_sys::TargetEntry>(t.tlist) {
                    let mut c = pg_sys::QualCost::default();
                    pg_sys::cost_qual_eval_node(&mut c, (*te).expr.cast(), root);
                    select.per_tuple += c.per_tuple;
                }
                (outer_rows * (t.k as f64).min(tuples), sub.per_tuple + select.per_tuple)
            }
        };

        // A TID probe's batch is the sort of its chunk's TIDs.
        let (descent, index_pages) = if probe.by_tid() {
            ((outer_rows / chunks).max(2.0).log2(), 0.0)
        } else {
            ((*probe.index).tuples.max(2.0).log2() + 1.0, (*probe.index).pages as f64)
        };
        let batch = outer_rows * descent * cpu_operator + matches * cpu_operator;

        let (mut random, mut seq) = (0.0, 0.0);
        pg_sys::get_tablespace_page_costs((*table).reltablespace, &mut random, &mut seq);
        let fetched = |tuples: f64| pg_sys::index_pages_fetched(tuples, pages as pg_sys::BlockNumber, index_pages, root);
        let (join_quals, other_quals) = split_quals(jointype, restrictlist, (*joinrel).relids);
        let (matching_list, other_list) = (match_quals(innerrel, &join_quals, probe.rinfo), clauses(&other_quals));
        let mut matching = pg_sys::QualCost::default();
        pg_sys::cost_qual_eval(&mut matching, matching_list, root);
        let mut other = pg_sys::QualCost::default();
        pg_sys::cost_qual_eval(&mut other, other_list, root);

        let chunk_pages = fetched(matches / chunks);
        let per_page = if chunk_pages >= 2.0 { random - (random - seq) * (chunk_pages / pages).min(1.0).sqrt() } else { random };
        // Index-only: pages the visibility map has all-visible are not read
        // (as cost_index prices an index-only scan), except in a
        // SERIALIZABLE transaction, whose node trusts no map and fetches
        // every match (`line_pointers_answer`): planned in one, a plan is
        // priced as it will run there.
        let read = [(*(*joinrel).reltarget).exprs.cast(), matching_list.cast(), other_list.cast()];
        let trusted = pg_sys::XactIsoLevel != pg_sys::XACT_SERIALIZABLE as i32;
        let entries = matches_are_entries(probe.by_tid(), probe.fused.is_some(), probe.key, &read);
        let unread = if trusted && probe.top.is_none() && entries && index_only(innerrel, &read) { (*table).allvisfrac } else { 0.0 };
        let share = if let Sharing::Matches(divisor) = sharing { divisor } else { 1.0 };
        let heap = match &probe.top {
            None => fetched(matches) * (1.0 - unread) * per_page + matches * cpu_tuple / share,
            // As PostgreSQL prices the subquery it replaces: its ordered
            // index scan under LIMIT k costs k/tuples of a scan of every
            // row, whose heap reads are every page at random cost (the
            // fetches' share of the whole table's). Priced as a bitmap
            // heap scan of every chunk's candidates instead, 10K outer
            // rows over 10^7 points came to twice the LATERAL nested loop
            // the planner then chose, which ran 2.5x slower (H100 host).
            Some(_) => matches * (fetched(tuples) * random / tuples + cpu_tuple),
        };
        let target = &(*(*joinrel).reltarget).cost;
        let quals = (matching.per_tuple + other.per_tuple + per_candidate) * matches / share + matching.startup + other.startup;
        let output = target.startup + rows * (cpu_tuple + target.per_tuple);

        // Reading the index into this backend's copy, before the first
        // chunk.
        let searcher = if probe.by_tid() { None } else { super::path::searcher_of((*probe.index).relam) };
        let partial = sharing == Sharing::Outer;
        let load = searcher.map_or(0.0, |s| {
            let index = pg_sys::index_open((*probe.index).indexoid, pg_sys::NoLock as i32);
            let cost = (s.load_cost)(index, !partial);
            pg_sys::index_close(index, pg_sys::NoLock as i32);
            if partial {
                cost
            } else {
                super::load::priced((*probe.index).indexoid, cost)
            }
        });
        let (outer_startup, outer_total) = ((*outer_path).startup_cost, (*outer_path).total_cost);
        let total = outer_total + load + batch + heap + quals + output;
        let startup = outer_startup + load + (total - load - outer_startup) / chunks;
        let whole = jointype == pg_sys::JoinType::JOIN_INNER && matching_list.is_null() && other_list.is_null();
        let counted = if whole { matches * unread * (cpu_tuple - cpu_operator) } else { 0.0 };
        Estimate { startup, total, counted, load }
    }
}

//! The planner side: wherever the inner side of a join is a table with a
//! gpuindex index that a join clause can probe in batches, the hook offers
//! a `GpuIndexJoin` path beside the built-in joins; its cost decides.
//!
//! A clause probes an index when it is `inner_column OP outer_expression`
//! (or its commuted form), the column is the index's first key, and OP is
//! an operator of the index's family whose strategy the access method
//! answers in batches (`BatchSearch::joins`). The outer expression is
//! evaluated once per outer row, so it must not be volatile.

use super::{cost, plan, NAME};
use crate::am::common::search::Searcher;
use crate::guc;
use crate::list::{self, is_a};
use pgrx::pg_sys::{self, NodeTag};
use pgrx::prelude::*;

static mut PREV_HOOK: pg_sys::set_join_pathlist_hook_type = None;

pub static mut PATH_METHODS: pg_sys::CustomPathMethods = pg_sys::CustomPathMethods {
    CustomName: NAME.as_ptr(),
    PlanCustomPath: Some(plan::plan_custom_path),
    ReparameterizeCustomPathByChild: None,
};

/// Chains the hook.
///
/// # Safety
/// From `_PG_init`, once.
pub unsafe fn install() {
    // SAFETY: the caller's contract (a single-threaded backend).
    unsafe {
        PREV_HOOK = pg_sys::set_join_pathlist_hook;
        pg_sys::set_join_pathlist_hook = Some(hook);
    }
}

/// How the node finds its matches: a join clause of the inner table that
/// probes an index (`rinfo`, `index`), a LATERAL top-k subquery (`top`), or
/// `inner.ctid = outer_expression` (`rinfo`, no index: the outer side's
/// TIDs are the matches, fetched in TID order as the batch functions'
/// rows are joined back).
pub struct Probe {
    /// The probe clause; null for a top-k subquery.
    pub rinfo: *mut pg_sys::RestrictInfo,
    /// Null for a TID probe.
    pub index: *mut pg_sys::IndexOptInfo,
    pub strategy: u16,
    /// Each outer row's query: the clause's or the ordering's outer side.
    pub key: *mut pg_sys::Expr,
    pub top: Option<super::lateral::TopK>,
    /// A TID probe whose outer side is a batch function's call over an
    /// index of the inner table (`fused_call`): that index, whose search
    /// the node runs itself, and the function's place in `call::FUSABLE`.
    pub fused: Option<(pg_sys::Oid, usize)>,
    /// The matches its outer side's constant keys hold, where the
    /// statistics tell them (`keyed_matches`).
    pub keyed: Option<f64>,
}

impl Probe {
    pub fn by_tid(&self) -> bool {
        self.index.is_null()
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn hook(
    root: *mut pg_sys::PlannerInfo,
    joinrel: *mut pg_sys::RelOptInfo,
    outerrel: *mut pg_sys::RelOptInfo,
    innerrel: *mut pg_sys::RelOptInfo,
    jointype: pg_sys::JoinType::Type,
    extra: *mut pg_sys::JoinPathExtraData,
) {
    // SAFETY: the planner's own arguments; the previous hook is called
    // behind pgrx's boundary (its ERRORs become panics here).
    unsafe {
        if let Some(prev) = PREV_HOOK {
            pg_sys::ffi::pg_guard_ffi_boundary(|| prev(root, joinrel, outerrel, innerrel, jointype, extra));
        }
        if guc::ENABLE_JOIN.get() {
            offer(root, joinrel, outerrel, innerrel, jointype, (*extra).restrictlist);
        }
    }
}

/// The join types the node runs: the inner side is never the preserved
/// one (no right or full joins), and it is not made unique first.
pub fn supported(jointype: pg_sys::JoinType::Type) -> bool {
    use pg_sys::JoinType::*;
    matches!(jointype, JOIN_INNER | JOIN_LEFT | JOIN_SEMI | JOIN_ANTI)
}

/// Left and anti joins tell join clauses (which decide a match) from
/// clauses pushed down from WHERE (which filter joined rows).
pub fn is_outer(jointype: pg_sys::JoinType::Type) -> bool {
    use pg_sys::JoinType::*;
    matches!(jointype, JOIN_LEFT | JOIN_ANTI)
}

/// RINFO_IS_PUSHED_DOWN.
///
/// # Safety
/// A RestrictInfo of a join of `joinrelids`.
pub unsafe fn pushed_down(rinfo: *mut pg_sys::RestrictInfo, joinrelids: *mut pg_sys::Bitmapset) -> bool {
    // SAFETY: the caller's contract.
    unsafe { (*rinfo).is_pushed_down || !pg_sys::bms_is_subset((*rinfo).required_relids, joinrelids) }
}

unsafe fn offer(
    root: *mut pg_sys::PlannerInfo,
    joinrel: *mut pg_sys::RelOptInfo,
    outerrel: *mut pg_sys::RelOptInfo,
    innerrel: *mut pg_sys::RelOptInfo,
    jointype: pg_sys::JoinType::Type,
    restrictlist: *mut pg_sys::List,
) {
    // SAFETY: planner structures of this planning call.
    unsafe {
        let parse = (*root).parse;
        // Row locks and UPDATE/DELETE would need EvalPlanQual rechecks.
        if !supported(jointype) || (*parse).commandType != pg_sys::CmdType::CMD_SELECT || !(*parse).rowMarks.is_null() {
            return;
        }
        if !(*joinrel).lateral_relids.is_null() {
            return;
        }
        let outer_path = (*outerrel).cheapest_total_path;
        if outer_path.is_null() || !(*outer_path).param_info.is_null() {
            return;
        }
        let clauses = list::ptrs::<pg_sys::RestrictInfo>(restrictlist);
        if clauses.iter().any(|&r| (*r).pseudoconstant) {
            return;
        }
        let probe = if is_plain_table(root, innerrel) {
            find_tid_probe(root, joinrel, outerrel, innerrel, jointype, &clauses)
                .or_else(|| find_probe(joinrel, outerrel, innerrel, jointype, &clauses))
        } else if matches!(jointype, pg_sys::JoinType::JOIN_INNER | pg_sys::JoinType::JOIN_LEFT) {
            super::lateral::find(root, (*(*outer_path).pathtarget).exprs, innerrel).map(|top| Probe {
                rinfo: std::ptr::null_mut(),
                index: top.index,
                strategy: top.strategy,
                key: top.key,
                top: Some(top),
                fused: None,
                keyed: None,
            })
        } else {
            None
        };
        let Some(mut probe) = probe else { return };
        probe.keyed = keyed_matches(root, outerrel, &probe);
        // A TID probe is answered by the fetch itself: its clause's ctid
        // is not a column the node supplies.
        let read: Vec<_> = clauses.iter().copied().filter(|&r| !(probe.by_tid() && r == probe.rinfo)).collect();
        if !vars_supported(joinrel, innerrel, outer_path, &read) {
            return;
        }
        let private = plan::PathPrivate { restrictlist, probe: &probe, jointype, innerrel };
        let parallel_safe = parallel_safe(root, joinrel, outerrel, innerrel, &probe, restrictlist);
        // (PostgreSQL's own verdict for a plain inner table; see
        // `parallel_safe` for a top-k subquery.)
        (*joinrel).consider_parallel |= parallel_safe;
        // An inner join's rows are its matches that pass the inner table's
        // own quals, where the keys tell the matches better than
        // PostgreSQL's join estimate (`keyed_matches`).
        let rows = match probe.keyed {
            Some(m) if jointype == pg_sys::JoinType::JOIN_INNER && clauses.len() == 1 => {
                (m * (*innerrel).rows / (*innerrel).tuples.max(1.0)).max(1.0).round()
            }
            _ => (*joinrel).rows,
        };
        let (serial, load) = new_path(root, joinrel, outer_path, &private, rows, cost::Sharing::Serial);
        if load > 0.0 {
            super::load::lost((*probe.index).indexoid, load, (*serial).path.total_cost, cheapest_unparameterized(joinrel));
        }
        (*serial).path.parallel_safe = parallel_safe && (*outer_path).parallel_safe;
        pg_sys::add_path(joinrel, super::count::keep(joinrel, serial).cast());
        // Under a Gather, each participant joins its share of a partial
        // outer path (the inner side is probed whole by each).
        let partial = list::ptrs::<pg_sys::Path>((*outerrel).partial_pathlist).first().copied();
        if let Some(outer) = partial.or_else(|| partial_scan_of_small(root, outerrel)) {
            if parallel_safe && (*outer).param_info.is_null() {
                let rows = ((*joinrel).rows / parallel_divisor((*outer).parallel_workers)).max(1.0).round();
                let (path, _) = new_path(root, joinrel, outer, &private, rows, cost::Sharing::Outer);
                (*path).path.parallel_safe = true;
                // Parallel-aware to sum its counters for EXPLAIN ANALYZE
                // in shared memory (`parallel`) and to keep its chunks
                // small enough to share (`exec::chunk_size`).
                (*path).path.parallel_aware = true;
                (*path).path.parallel_workers = (*outer).parallel_workers;
                pg_sys::add_partial_path(joinrel, path.cast());
            }
        } else if probe.fused.is_some() && parallel_safe && (*outer_path).parallel_safe {
            add_shared_matches_path(root, joinrel, innerrel, outer_path, &private);
        }
    }
}

/// Under a Gather, a fused call searched by one participant and its
/// matches fetched by all (`handout::Handout`), with as many workers as
/// PostgreSQL gives a parallel scan of the heap pages they read. One
/// backend fetches ~5M rows a second (H200 host): a call matching a third
/// of a table's rows (Zipf keys) spends nearly all its time there.
///
/// # Safety
/// Planner structures of this planning call; `outer_path` a fused call's.
unsafe fn add_shared_matches_path(
    root: *mut pg_sys::PlannerInfo,
    joinrel: *mut pg_sys::RelOptInfo,
    innerrel: *mut pg_sys::RelOptInfo,
    outer_path: *mut pg_sys::Path,
    private: &plan::PathPrivate,
) {
    // SAFETY: the caller's contract; planner GUCs.
    unsafe {
        // (Each of the call's rows is a match.)
        let pages = pg_sys::index_pages_fetched((*outer_path).rows, (*innerrel).pages, 0.0, root);
        let workers = pg_sys::compute_parallel_worker(innerrel, pages, -1.0, pg_sys::max_parallel_workers_per_gather);
        if workers <= 0 {
            return;
        }
        let divisor = parallel_divisor(workers);
        let rows = ((*joinrel).rows / divisor).max(1.0).round();
        let (path, _) = new_path(root, joinrel, outer_path, private, rows, cost::Sharing::Matches(divisor));
        (*path).path.parallel_safe = true;
        (*path).path.parallel_aware = true;
        (*path).path.parallel_workers = workers;
        pg_sys::add_partial_path(joinrel, path.cast());
    }
}

/// Whether the join may run in parallel workers. For a plain inner table,
/// PostgreSQL's verdict on the join. A LIMIT subquery is never parallel
/// safe to PostgreSQL (its rows' order may differ between workers), but
/// the node answers a top-k subquery itself, the same rows in every
/// process: there what it evaluates decides, as PostgreSQL decides for a
/// join (build_join_rel): the outer side, the join's clauses and output,
/// and the subquery's quals, select list and ordering.
///
/// # Safety
/// Planner structures of this planning call.
unsafe fn parallel_safe(
    root: *mut pg_sys::PlannerInfo,
    joinrel: *mut pg_sys::RelOptInfo,
    outerrel: *mut pg_sys::RelOptInfo,
    innerrel: *mut pg_sys::RelOptInfo,
    probe: &Probe,
    restrictlist: *mut pg_sys::List,
) -> bool {
    // SAFETY: the caller's contract.
    unsafe {
        let Some(t) = &probe.top else { return (*joinrel).consider_parallel && (*innerrel).consider_parallel };
        let safe = |n: *mut std::ffi::c_void| pg_sys::is_parallel_safe(root, n.cast());
        (*outerrel).consider_parallel
            && safe(restrictlist.cast())
            && safe((*(*joinrel).reltarget).exprs.cast())
            && [t.quals.cast(), t.tlist.cast(), t.key.cast(), t.order.cast()].into_iter().all(safe)
    }
}

/// A parallel sequential scan of a plain outer table too small for
/// PostgreSQL to give it one (below `min_parallel_table_scan_size`), with
/// `max_parallel_workers_per_gather` workers (or the table's
/// `parallel_workers`): a join's work per outer row can be worth workers
/// however few the rows (a kNN LATERAL of 10^4 centres fetches 10^5 rows
/// from random heap pages), and the join's cost decides. Only where the
/// shared buffers are in huge pages (`huge_pages`): a new process's first
/// touch of each 4 kB page of them is a page fault, and on the H200 host
/// that tripled a worker's heap reads, leaving that kNN join no faster in
/// parallel (61-95 ms against 58-82) where with huge pages it ran in
/// 44-53.
unsafe fn partial_scan_of_small(root: *mut pg_sys::PlannerInfo, rel: *mut pg_sys::RelOptInfo) -> Option<*mut pg_sys::Path> {
    // SAFETY: planner structures; planner GUCs.
    unsafe {
        let mut workers = pg_sys::max_parallel_workers_per_gather;
        if (*rel).rel_parallel_workers >= 0 {
            workers = workers.min((*rel).rel_parallel_workers);
        }
        if workers <= 0 || !(*rel).consider_parallel || !is_plain_table(root, rel) || !shared_memory_in_huge_pages() {
            return None;
        }
        Some(pg_sys::create_seqscan_path(root, rel, std::ptr::null_mut(), workers))
    }
}

/// Whether this backend maps huge pages (Linux: `HugetlbPages` in
/// /proc/self/status): the shared buffers are its only ones (read once a
/// backend, which has read shared buffers before it plans).
fn shared_memory_in_huge_pages() -> bool {
    thread_local! {
        static HUGE: bool = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("HugetlbPages:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .is_some_and(|kb| kb > 0)
        });
    }
    HUGE.with(|h| *h)
}

/// The share of a parallel plan's rows one participant handles
/// (costsize.c's get_parallel_divisor).
fn parallel_divisor(workers: i32) -> f64 {
    let mut divisor = workers as f64;
    // SAFETY: a planner GUC.
    if unsafe { pg_sys::parallel_leader_participation } {
        let leader = 1.0 - 0.3 * workers as f64;
        if leader > 0.0 {
            divisor += leader;
        }
    }
    divisor
}

/// The total cost of the cheapest path of `joinrel` planned so far that
/// takes no parameters (infinite where there is none), a partial path
/// priced under the Gather PostgreSQL will put over it
/// (generate_gather_paths' rows, cost_gather's costs): where a parallel
/// plan would win, a join that lost to it did not lose only for its load.
///
/// # Safety
/// A RelOptInfo of this planning call.
unsafe fn cheapest_unparameterized(joinrel: *mut pg_sys::RelOptInfo) -> f64 {
    // SAFETY: the caller's contract; the cost GUCs are the backend's.
    unsafe {
        let whole = list::ptrs::<pg_sys::Path>((*joinrel).pathlist).into_iter().map(|p| (p, (*p).total_cost));
        let gathered = list::ptrs::<pg_sys::Path>((*joinrel).partial_pathlist).into_iter().map(|p| {
            let rows = (*p).rows * (*p).parallel_workers as f64;
            (p, (*p).total_cost + pg_sys::parallel_setup_cost + pg_sys::parallel_tuple_cost * rows)
        });
        whole.chain(gathered).filter(|&(p, _)| (*p).param_info.is_null()).map(|(_, cost)| cost).fold(f64::INFINITY, f64::min)
    }
}

/// A GpuIndexJoin path over `outer_path` returning `rows` rows, and the
/// load of the index's copy its cost holds.
unsafe fn new_path(
    root: *mut pg_sys::PlannerInfo,
    joinrel: *mut pg_sys::RelOptInfo,
    outer_path: *mut pg_sys::Path,
    private: &plan::PathPrivate,
    rows: f64,
    sharing: cost::Sharing,
) -> (*mut pg_sys::CustomPath, f64) {
    // SAFETY: planner structures of this planning call.
    unsafe {
        let cost::Estimate { startup, total, counted, load } = cost::estimate(root, joinrel, outer_path, private, rows, sharing);
        let path = pg_sys::palloc0(std::mem::size_of::<pg_sys::CustomPath>()).cast::<pg_sys::CustomPath>();
        let p = &mut (*path).path;
        p.type_ = NodeTag::T_CustomPath;
        p.pathtype = NodeTag::T_CustomScan;
        p.parent = joinrel;
        p.pathtarget = (*joinrel).reltarget;
        p.rows = rows;
        p.startup_cost = startup;
        p.total_cost = total;
        (*path).flags = pg_sys::CUSTOMPATH_SUPPORT_PROJECTION;
        (*path).custom_paths = list::of_ptrs(&[outer_path]);
        // (Planner memory, as the items before it: `plan::PATH_ITEMS`.)
        let saving = pg_sys::palloc(std::mem::size_of::<f64>()).cast::<f64>();
        *saving = counted;
        (*path).custom_private = pg_sys::lappend(private.to_list(), saving.cast());
        (*path).methods = &raw const PATH_METHODS;
        (path, load)
    }
}

/// A plain table (or materialized view), without inheritance children,
/// sampling or lateral references: the node reads an inner one only by
/// TID; an outer one may be scanned in parallel.
unsafe fn is_plain_table(root: *mut pg_sys::PlannerInfo, rel: *mut pg_sys::RelOptInfo) -> bool {
    // SAFETY: planner structures.
    unsafe {
        if (*rel).reloptkind != pg_sys::RelOptKind::RELOPT_BASEREL
            || (*rel).rtekind != pg_sys::RTEKind::RTE_RELATION
            || !(*rel).lateral_relids.is_null()
        {
            return false;
        }
        let rte = *(*root).simple_rte_array.add((*rel).relid as usize);
        let kind = (*rte).relkind as u8;
        (kind == pg_sys::RELKIND_RELATION || kind == pg_sys::RELKIND_MATVIEW) && (*rte).tablesample.is_null() && !(*rte).inh
    }
}

/// The clauses that decide a match (a left or anti join's clauses pushed
/// down from WHERE filter joined rows instead).
///
/// # Safety
/// Planner structures of the join.
unsafe fn deciding<'a>(
    joinrel: *mut pg_sys::RelOptInfo,
    jointype: pg_sys::JoinType::Type,
    clauses: &'a [*mut pg_sys::RestrictInfo],
) -> impl Iterator<Item = *mut pg_sys::RestrictInfo> + 'a {
    // SAFETY: the caller's contract.
    clauses.iter().copied().filter(move |&r| !(is_outer(jointype) && unsafe { pushed_down(r, (*joinrel).relids) }))
}

/// The first clause that probes an index of the inner table.
unsafe fn find_probe(
    joinrel: *mut pg_sys::RelOptInfo,
    outerrel: *mut pg_sys::RelOptInfo,
    innerrel: *mut pg_sys::RelOptInfo,
    jointype: pg_sys::JoinType::Type,
    clauses: &[*mut pg_sys::RestrictInfo],
) -> Option<Probe> {
    // SAFETY: planner structures.
    unsafe {
        for index in list::ptrs::<pg_sys::IndexOptInfo>((*innerrel).indexlist) {
            let ix = &*index;
            if ix.ncolumns < 1 || *ix.indexkeys <= 0 || ix.hypothetical || (!ix.indpred.is_null() && !ix.predOK) {
                continue;
            }
            let Some(searcher) = searcher_of(ix.relam) else { continue };
            for rinfo in deciding(joinrel, jointype, clauses) {
                if let Some((strategy, key)) = probe_clause(rinfo, (*innerrel).relid, (*outerrel).relids, ix, searcher) {
                    return Some(Probe { rinfo, index, strategy, key, top: None, fused: None, keyed: None });
                }
            }
        }
        None
    }
}

/// The matches of an equality probe whose outer side is `unnest` of a
/// constant array and whose key is that function's column, per key from
/// the index's statistics, as a fused call's rows are
/// (`estimate::rows_of_keys`). PostgreSQL's estimate of such a join has
/// no statistics of the function's column and takes each key for the
/// inner column's average rows a value, which on Zipf keys ANALYZE's
/// distinct count makes ~55x too many (10^7 rows, 131,072 keys: 185M
/// estimated, 3.4M found); the join as written was then planned as a
/// merge join over a whole index scan (4.2 s against 0.5 s locally).
///
/// # Safety
/// Planner structures of this planning call.
unsafe fn keyed_matches(root: *mut pg_sys::PlannerInfo, outerrel: *mut pg_sys::RelOptInfo, probe: &Probe) -> Option<f64> {
    // SAFETY: the caller's contract; catalog lookups.
    unsafe {
        if probe.top.is_some() || probe.by_tid() || (*outerrel).rtekind != pg_sys::RTEKind::RTE_FUNCTION {
            return None;
        }
        let clause = (*probe.rinfo).clause.cast::<pg_sys::Node>();
        if !is_a(clause, NodeTag::T_OpExpr)
            || pg_sys::get_oprrest((*clause.cast::<pg_sys::OpExpr>()).opno) != pg_sys::Oid::from(pg_sys::F_EQSEL)
        {
            return None;
        }
        let key = strip_relabel(probe.key).cast::<pg_sys::Var>();
        if !is_a(key, NodeTag::T_Var) || (*key).varno as u32 != (*outerrel).relid || (*key).varattno != 1 || (*key).varlevelsup != 0 {
            return None;
        }
        let rte = *(*root).simple_rte_array.add((*outerrel).relid as usize);
        let [f] = list::ptrs::<pg_sys::RangeTblFunction>((*rte).functions)[..] else { return None };
        let call = (*f).funcexpr.cast::<pg_sys::FuncExpr>();
        if !is_a(call, NodeTag::T_FuncExpr) || (*call).funcid != pg_sys::Oid::from(pg_sys::F_UNNEST_ANYARRAY) {
            return None;
        }
        let [keys] = list::ptrs::<pg_sys::Node>((*call).args)[..] else { return None };
        crate::functions::estimate::rows_of_keys((*probe.index).indexoid, keys)
    }
}

/// The first clause `inner.ctid = outer_expression` (either way round):
/// the batch functions' rows joined back to their table.
unsafe fn find_tid_probe(
    root: *mut pg_sys::PlannerInfo,
    joinrel: *mut pg_sys::RelOptInfo,
    outerrel: *mut pg_sys::RelOptInfo,
    innerrel: *mut pg_sys::RelOptInfo,
    jointype: pg_sys::JoinType::Type,
    clauses: &[*mut pg_sys::RestrictInfo],
) -> Option<Probe> {
    // SAFETY: planner structures.
    unsafe {
        for rinfo in deciding(joinrel, jointype, clauses) {
            let Some((opno, key)) = outer_side(rinfo, (*innerrel).relid, (*outerrel).relids, pg_sys::SelfItemPointerAttributeNumber) else {
                continue;
            };
            if opno == pg_sys::Oid::from(pg_sys::TIDEqualOperator) && pg_sys::exprType(key.cast()) == pg_sys::TIDOID && stable(key) {
                let fused = fused_call(root, outerrel, innerrel, jointype, key);
                return Some(Probe { rinfo, index: std::ptr::null_mut(), strategy: 0, key, top: None, fused, keyed: None });
            }
        }
        None
    }
}

/// The index whose search a TID probe runs itself, where the outer side
/// is exactly a batch function's call joined back by ctid: `FROM
/// gpu_learned_probe('index', keys) p JOIN t ON t.ctid = p.ctid` (or any
/// `call::Fusable`), the index a constant of the inner table, the key the
/// call's ctid column, nothing else read of the call but its columns, no
/// filter on its rows, an inner or semi join. The node then reads each
/// matched row once (the function would read it to check visibility and
/// the join again to fetch it) and keeps no tuplestore. Left and anti
/// joins are not fused: a match the snapshot does not see is no row of the
/// function, where the join would null-extend or emit it.
unsafe fn fused_call(
    root: *mut pg_sys::PlannerInfo,
    outerrel: *mut pg_sys::RelOptInfo,
    innerrel: *mut pg_sys::RelOptInfo,
    jointype: pg_sys::JoinType::Type,
    key: *mut pg_sys::Expr,
) -> Option<(pg_sys::Oid, usize)> {
    use pg_sys::JoinType::*;
    // SAFETY: planner structures.
    unsafe {
        let none = None;
        let rel = &*outerrel;
        if !matches!(jointype, JOIN_INNER | JOIN_SEMI)
            || rel.reloptkind != pg_sys::RelOptKind::RELOPT_BASEREL
            || rel.rtekind != pg_sys::RTEKind::RTE_FUNCTION
            || !rel.baserestrictinfo.is_null()
            || !rel.lateral_relids.is_null()
        {
            return none;
        }
        let rte = *(*root).simple_rte_array.add(rel.relid as usize);
        let functions = list::ptrs::<pg_sys::RangeTblFunction>((*rte).functions);
        if functions.len() != 1 || (*rte).funcordinality || !is_a((*functions[0]).funcexpr, NodeTag::T_FuncExpr) {
            return none;
        }
        let call = (*functions[0]).funcexpr.cast::<pg_sys::FuncExpr>();
        let Some(function) = crate::functions::call::Fusable::of((*call).funcid) else {
            return none;
        };
        let index_arg = strip_relabel(list::ptrs::<pg_sys::Expr>((*call).args)[0]);
        if !is_a(index_arg, NodeTag::T_Const) || (*index_arg.cast::<pg_sys::Const>()).constisnull {
            return none;
        }
        let index = pg_sys::Oid::from((*index_arg.cast::<pg_sys::Const>()).constvalue.value() as u32);
        let inner_table = (**(*root).simple_rte_array.add((*innerrel).relid as usize)).relid;
        if pg_sys::IndexGetRelation(index, true) != inner_table {
            return none;
        }
        // The key is the call's ctid (its second column); the node makes
        // its columns, ord and ctid, and nothing else of it.
        let is_call_column = |e: *mut pg_sys::Expr, attnos: &[i16]| {
            let e = strip_relabel(e);
            is_a(e, NodeTag::T_Var) && {
                let v = &*e.cast::<pg_sys::Var>();
                v.varno as pg_sys::Index == rel.relid && v.varlevelsup == 0 && attnos.contains(&v.varattno)
            }
        };
        let target = list::ptrs::<pg_sys::Expr>((*rel.reltarget).exprs);
        if !is_call_column(key, &[2]) || !target.iter().all(|&e| is_call_column(e, &[1, 2])) {
            return none;
        }
        Some((index, function))
    }
}

/// The access method of index AM `relam`, if it answers batches.
pub fn searcher_of(relam: pg_sys::Oid) -> Option<&'static Searcher> {
    crate::am::SEARCHABLE.iter().find(|s| {
        let name = std::ffi::CString::new(s.name).expect("no NUL");
        // SAFETY: a catalog lookup.
        unsafe { pg_sys::get_index_am_oid(name.as_ptr(), true) == relam }
    })
}

/// `e` without binary-compatible relabelling.
///
/// # Safety
/// `e` is an expression node.
pub unsafe fn strip_relabel(mut e: *mut pg_sys::Expr) -> *mut pg_sys::Expr {
    // SAFETY: the caller's contract.
    unsafe {
        while is_a(e, NodeTag::T_RelabelType) {
            e = (*e.cast::<pg_sys::RelabelType>()).arg;
        }
        e
    }
}

/// Whether `e` is the inner table's column `attno`.
unsafe fn is_column(e: *mut pg_sys::Expr, relid: pg_sys::Index, attno: i32) -> bool {
    // SAFETY: expression nodes of a clause.
    unsafe {
        let e = strip_relabel(e);
        if !is_a(e, NodeTag::T_Var) {
            return false;
        }
        let v = &*e.cast::<pg_sys::Var>();
        v.varno as pg_sys::Index == relid && v.varlevelsup == 0 && v.varattno as i32 == attno
    }
}

/// (operator, outer side) when `rinfo` is `inner column attno OP outer
/// expression`, commuted to put the column on the left.
unsafe fn outer_side(
    rinfo: *mut pg_sys::RestrictInfo,
    inner_relid: pg_sys::Index,
    outer_relids: *mut pg_sys::Bitmapset,
    attno: i32,
) -> Option<(pg_sys::Oid, *mut pg_sys::Expr)> {
    // SAFETY: planner structures.
    unsafe {
        let clause = (*rinfo).clause;
        if !is_a(clause, NodeTag::T_OpExpr) {
            return None;
        }
        let op = &*clause.cast::<pg_sys::OpExpr>();
        let args = list::ptrs::<pg_sys::Expr>(op.args);
        if args.len() != 2 {
            return None;
        }
        let from_outer = |relids: *mut pg_sys::Bitmapset| !pg_sys::bms_is_empty(relids) && pg_sys::bms_is_subset(relids, outer_relids);
        let (opno, key) = if is_column(args[0], inner_relid, attno) && from_outer((*rinfo).right_relids) {
            (op.opno, args[1])
        } else if is_column(args[1], inner_relid, attno) && from_outer((*rinfo).left_relids) {
            (pg_sys::get_commutator(op.opno), args[0])
        } else {
            return None;
        };
        (opno != pg_sys::InvalidOid).then_some((opno, key))
    }
}

/// Whether an outer expression gives one value per outer row: evaluated
/// once per row, it must not be volatile.
unsafe fn stable(key: *mut pg_sys::Expr) -> bool {
    // SAFETY: an expression node.
    unsafe { !pg_sys::contain_volatile_functions(key.cast()) && !pg_sys::contain_subplans(key.cast()) }
}

/// (strategy, outer side) when `rinfo` probes index `ix`.
unsafe fn probe_clause(
    rinfo: *mut pg_sys::RestrictInfo,
    inner_relid: pg_sys::Index,
    outer_relids: *mut pg_sys::Bitmapset,
    ix: &pg_sys::IndexOptInfo,
    searcher: &Searcher,
) -> Option<(u16, *mut pg_sys::Expr)> {
    // SAFETY: planner structures.
    unsafe {
        let (opno, key) = outer_side(rinfo, inner_relid, outer_relids, *ix.indexkeys)?;
        let strategy = pg_sys::get_op_opfamily_strategy(opno, *ix.opfamily);
        if strategy <= 0 || !(searcher.joins)(strategy as u16) || !stable(key) {
            return None;
        }
        Some((strategy as u16, key))
    }
}

/// Whether every column the join needs is one the node can supply: inner
/// user columns and ctid (no other system column, no whole row), outer
/// columns the outer path returns, and no placeholder expressions.
unsafe fn vars_supported(
    joinrel: *mut pg_sys::RelOptInfo,
    innerrel: *mut pg_sys::RelOptInfo,
    outer_path: *mut pg_sys::Path,
    clauses: &[*mut pg_sys::RestrictInfo],
) -> bool {
    // SAFETY: planner structures.
    unsafe {
        let mut exprs: Vec<*mut pg_sys::Node> = vec![(*(*joinrel).reltarget).exprs.cast()];
        exprs.extend(clauses.iter().map(|&r| (*r).clause.cast()));
        exprs.extend(list::ptrs::<pg_sys::RestrictInfo>((*innerrel).baserestrictinfo).into_iter().map(|r| (*r).clause.cast()));
        let outer_target = (*(*outer_path).pathtarget).exprs;
        for e in exprs {
            for v in list::ptrs::<pg_sys::Var>(pg_sys::pull_var_clause(e, pg_sys::PVC_INCLUDE_PLACEHOLDERS as i32)) {
                if !is_a(v, NodeTag::T_Var) || (*v).varlevelsup != 0 {
                    return false;
                }
                let ok = if (*v).varno as pg_sys::Index == (*innerrel).relid {
                    (*v).varattno > 0 || (*v).varattno as i32 == pg_sys::SelfItemPointerAttributeNumber
                } else {
                    pg_sys::list_member(outer_target, v.cast())
                };
                if !ok {
                    return false;
                }
            }
        }
        true
    }
}

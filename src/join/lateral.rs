//! The LATERAL top-k pattern, planner side:
//!
//! ```sql
//! FROM o [LEFT] JOIN LATERAL (SELECT ... FROM t [WHERE ...]
//!                             ORDER BY t.col <-> o.q LIMIT k) s ON ...
//! ```
//!
//! where `<->` is an ordering operator of a gpuindex index on `t.col`
//! whose access method answers nearest batches (gpu_spatial, gpu_metric).
//! The subquery is one plain table, no grouping, aggregates, windows,
//! DISTINCT, set operations, sublinks, row locks or OFFSET, and `LIMIT k`
//! a constant; its WHERE clause (and the table's row-level security
//! policies, evaluated first) may read the outer row. The node then runs
//! the subquery for a whole chunk of outer rows at once: one nearest batch
//! (`k` candidates per query, widened past candidates the quals or the
//! snapshot reject), the table's rows fetched in TID order, the quals and
//! the subquery's select list evaluated on each, the first `k` that pass
//! kept per outer row, in distance order.
//!
//! The subquery's expressions are taken from its parse tree (the plan the
//! planner made for it is not used): planned here (`expression_planner`),
//! with the table's columns read from the fetched row (the scan tuple of
//! their own expression context) and the outer row's columns as OUTER_VAR
//! references to the outer plan's output.

use crate::list::{self, is_a};
use pgrx::pg_sys::{self, NodeTag};

/// A LATERAL top-k subquery the node can run in batches.
pub struct TopK {
    /// The index on the subquery's table (from the subquery's planner info).
    pub index: *mut pg_sys::IndexOptInfo,
    pub strategy: u16,
    /// The ordering's query side, as an expression of the outer rels.
    pub key: *mut pg_sys::Expr,
    pub k: i64,
    /// The ordering operator, the table's column on its left, and the
    /// ORDER BY expression (raw).
    pub op: pg_sys::Oid,
    pub order: *mut pg_sys::Expr,
    /// The subquery's table.
    pub heap: pg_sys::Oid,
    /// The table's policies then the WHERE clause (implicit AND), and the
    /// select list: raw, as in the subquery's parse tree.
    pub quals: *mut pg_sys::List,
    pub tlist: *mut pg_sys::List,
    /// The subquery's table, as its planner saw it (rows, pages).
    pub table: *mut pg_sys::RelOptInfo,
}

/// The top-k subquery of `innerrel`, if it has the pattern's shape and an
/// index that answers it.
///
/// # Safety
/// Planner structures of this planning call.
pub unsafe fn find(root: *mut pg_sys::PlannerInfo, outer_target: *mut pg_sys::List, innerrel: *mut pg_sys::RelOptInfo) -> Option<TopK> {
    // SAFETY: the caller's contract.
    unsafe {
        if (*innerrel).reloptkind != pg_sys::RelOptKind::RELOPT_BASEREL
            || (*innerrel).rtekind != pg_sys::RTEKind::RTE_SUBQUERY
            || (*innerrel).subroot.is_null()
        {
            return None;
        }
        let rte = *(*root).simple_rte_array.add((*innerrel).relid as usize);
        let q = (*rte).subquery;
        if !(*rte).lateral || q.is_null() || !plain_select(q) {
            return None;
        }
        // One table, planned as a plain base relation (no children).
        let rtable = list::ptrs::<pg_sys::RangeTblEntry>((*q).rtable);
        let from = list::ptrs::<pg_sys::Node>((*(*q).jointree).fromlist);
        if rtable.len() != 1 || from.len() != 1 || !is_a(from[0], NodeTag::T_RangeTblRef) {
            return None;
        }
        let subroot = (*innerrel).subroot;
        if (*subroot).simple_rel_array_size < 2 {
            return None;
        }
        let (table, trte) = (*(*subroot).simple_rel_array.add(1), *(*subroot).simple_rte_array.add(1));
        if table.is_null() || (*trte).rtekind != pg_sys::RTEKind::RTE_RELATION || (*trte).inh || !(*trte).tablesample.is_null() {
            return None;
        }
        let kind = (*trte).relkind as u8;
        if kind != pg_sys::RELKIND_RELATION && kind != pg_sys::RELKIND_MATVIEW {
            return None;
        }
        // ORDER BY <column> <op> <outer expression> LIMIT <constant>.
        let k = limit_of(q)?;
        let sorts = list::ptrs::<pg_sys::SortGroupClause>((*q).sortClause);
        if sorts.len() != 1 || (*sorts[0]).nulls_first || (*sorts[0]).sortop != pg_sys::Oid::from(pg_sys::Float8LessOperator) {
            return None;
        }
        let order = (*pg_sys::get_sortgroupclause_tle(sorts[0], (*q).targetList)).expr;
        if !is_a(order, NodeTag::T_OpExpr) || pg_sys::exprType(order.cast()) != pg_sys::FLOAT8OID {
            return None;
        }
        let op = &*order.cast::<pg_sys::OpExpr>();
        let args = list::ptrs::<pg_sys::Expr>(op.args);
        if args.len() != 2 {
            return None;
        }
        let column_of = |e: *mut pg_sys::Expr| {
            let e = super::path::strip_relabel(e);
            let v = e.cast::<pg_sys::Var>();
            (is_a(e, NodeTag::T_Var) && (*v).varlevelsup == 0 && (*v).varno == 1).then(|| (*v).varattno as i32)
        };
        let outer_only = |e: *mut pg_sys::Expr| !pg_sys::contain_vars_of_level(e.cast(), 0);
        let (column, opno, key) = match (column_of(args[0]), column_of(args[1])) {
            (Some(c), _) if outer_only(args[1]) => (c, op.opno, args[1]),
            (_, Some(c)) if outer_only(args[0]) => (c, pg_sys::get_commutator(op.opno), args[0]),
            _ => return None,
        };
        if opno == pg_sys::InvalidOid || pg_sys::contain_volatile_functions(key.cast()) || !pg_sys::contain_vars_of_level(key.cast(), 1) {
            return None;
        }
        let mut quals = list::ptrs::<pg_sys::Node>((*rtable[0]).securityQuals);
        if !(*(*q).jointree).quals.is_null() {
            quals.push((*(*q).jointree).quals);
        }
        let quals = list::of_ptrs(&quals);
        let tlist = (*q).targetList;
        // Every expression: columns of the table or of the outer rels the
        // outer path returns, nothing the node cannot evaluate.
        if !outer_vars_found(quals.cast(), outer_target)
            || !outer_vars_found(tlist.cast(), outer_target)
            || !outer_vars_found(order.cast(), outer_target)
        {
            return None;
        }
        let key = pg_sys::copyObjectImpl(key.cast()).cast::<pg_sys::Expr>();
        pg_sys::IncrementVarSublevelsUp(key.cast(), -1, 1);
        for index in list::ptrs::<pg_sys::IndexOptInfo>((*table).indexlist) {
            let ix = &*index;
            if ix.ncolumns < 1 || *ix.indexkeys != column || ix.hypothetical || !ix.indpred.is_null() || !ix.amcanorderbyop {
                continue;
            }
            let Some(searcher) = super::path::searcher_of(ix.relam) else { continue };
            if let Some(strategy) = ordering_strategy(opno, *ix.opfamily).filter(|&s| (searcher.nearest)(s)) {
                return Some(TopK { index, strategy, key, k, op: opno, order, heap: (*trte).relid, quals, tlist, table });
            }
        }
        None
    }
}

/// A SELECT with nothing but a WHERE clause, one ORDER BY and a LIMIT.
unsafe fn plain_select(q: *mut pg_sys::Query) -> bool {
    // SAFETY: a parse tree.
    unsafe {
        let q = &*q;
        q.commandType == pg_sys::CmdType::CMD_SELECT
            && !q.hasAggs
            && !q.hasWindowFuncs
            && !q.hasTargetSRFs
            && !q.hasSubLinks
            && !q.hasDistinctOn
            && !q.hasRecursive
            && !q.hasModifyingCTE
            && !q.hasForUpdate
            && q.cteList.is_null()
            && q.groupClause.is_null()
            && q.groupingSets.is_null()
            && q.havingQual.is_null()
            && q.windowClause.is_null()
            && q.distinctClause.is_null()
            && q.setOperations.is_null()
            && q.rowMarks.is_null()
            && q.limitOffset.is_null()
            && q.limitOption == pg_sys::LimitOption::LIMIT_OPTION_COUNT
    }
}

/// `LIMIT k` as a positive int8 constant (the parser leaves `LIMIT 10`
/// as int8(10): folded here).
unsafe fn limit_of(q: *mut pg_sys::Query) -> Option<i64> {
    // SAFETY: a parse tree; folding works on a copy.
    unsafe {
        let limit = (*q).limitCount;
        if limit.is_null() || pg_sys::contain_volatile_functions(limit) {
            return None;
        }
        let c = pg_sys::eval_const_expressions(std::ptr::null_mut(), pg_sys::copyObjectImpl(limit.cast()).cast()).cast::<pg_sys::Const>();
        if !is_a(c, NodeTag::T_Const) || (*c).constisnull || (*c).consttype != pg_sys::INT8OID {
            return None;
        }
        let k = (*c).constvalue.value() as i64;
        (k >= 1).then_some(k)
    }
}

/// The strategy of ordering operator `op` in `family`.
fn ordering_strategy(op: pg_sys::Oid, family: pg_sys::Oid) -> Option<u16> {
    // SAFETY: a catalog-cache lookup, released before returning.
    unsafe {
        let tup = pg_sys::SearchSysCache3(
            pg_sys::SysCacheIdentifier::AMOPOPID as i32,
            pg_sys::Datum::from(op),
            pg_sys::Datum::from(pg_sys::AMOP_ORDER),
            pg_sys::Datum::from(family),
        );
        if tup.is_null() {
            return None;
        }
        let strategy = (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_amop>(tup)).amopstrategy as u16;
        pg_sys::ReleaseSysCache(tup);
        Some(strategy)
    }
}

/// What the walkers look at and find.
struct Walk {
    /// The outer rels' columns available (the outer path's target, or the
    /// outer plan's target list as Vars).
    outer: Vec<*mut pg_sys::Var>,
    /// Rewrite: level-1 Vars become OUTER_VAR references to `outer`.
    rewrite: bool,
    ok: bool,
}

unsafe extern "C-unwind" fn walk(node: *mut pg_sys::Node, context: *mut std::ffi::c_void) -> bool {
    // SAFETY: called by expression_tree_walker with our context.
    unsafe {
        if node.is_null() {
            return false;
        }
        let w = &mut *context.cast::<Walk>();
        match (*node).type_ {
            NodeTag::T_Var => {
                let v = node.cast::<pg_sys::Var>();
                match (*v).varlevelsup {
                    // The table's own columns (no system or whole-row ones).
                    0 => w.ok &= (*v).varattno > 0,
                    1 => {
                        (*v).varlevelsup = 0;
                        let at = w.outer.iter().position(|&o| pg_sys::equal(o.cast(), v.cast()));
                        (*v).varlevelsup = 1;
                        match at {
                            Some(i) if w.rewrite => {
                                (*v).varlevelsup = 0;
                                (*v).varno = pg_sys::OUTER_VAR;
                                (*v).varattno = (i + 1) as i16;
                            }
                            Some(_) => {}
                            None => w.ok = false,
                        }
                    }
                    _ => w.ok = false,
                }
                false
            }
            NodeTag::T_SubLink
            | NodeTag::T_SubPlan
            | NodeTag::T_Aggref
            | NodeTag::T_WindowFunc
            | NodeTag::T_GroupingFunc
            | NodeTag::T_PlaceHolderVar
            | NodeTag::T_Query => {
                w.ok = false;
                true
            }
            _ => pg_sys::expression_tree_walker(node, Some(walk), context),
        }
    }
}

/// Whether every outer column `node` reads (level-1 Vars) is in
/// `outer_target`, and nothing in it is beyond the node.
unsafe fn outer_vars_found(node: *mut pg_sys::Node, outer_target: *mut pg_sys::List) -> bool {
    let outer = unsafe { list::ptrs::<pg_sys::Node>(outer_target) }
        .into_iter()
        .filter(|&e| unsafe { is_a(e, NodeTag::T_Var) })
        .map(|e| e.cast::<pg_sys::Var>())
        .collect();
    let mut w = Walk { outer, rewrite: false, ok: true };
    // SAFETY: an expression tree (a List of them) of the parse tree.
    unsafe { pg_sys::expression_tree_walker(node, Some(walk), (&raw mut w).cast()) };
    w.ok
}

/// A planned copy of `node` (a qual List or a target list) for execution:
/// constants folded, operators' functions looked up, and the outer rels'
/// columns turned into OUTER_VAR references to `outer_tlist` (the outer
/// plan's target list). Its dependencies go into the plan's.
///
/// # Safety
/// Planner structures; `node` passed `find`.
pub unsafe fn planned(root: *mut pg_sys::PlannerInfo, node: *mut pg_sys::Node, outer_tlist: *mut pg_sys::List) -> *mut pg_sys::Node {
    // SAFETY: the caller's contract.
    unsafe {
        let glob = (*root).glob;
        let planned =
            if is_a(node, NodeTag::T_List) && list::ptrs::<pg_sys::Node>(node.cast()).iter().all(|&e| is_a(e, NodeTag::T_TargetEntry)) {
                // A target list: plan each entry's expression.
                let entries = list::ptrs::<pg_sys::TargetEntry>(node.cast());
                let copies: Vec<*mut pg_sys::TargetEntry> = entries
                    .into_iter()
                    .map(|te| {
                        let c = pg_sys::copyObjectImpl(te.cast()).cast::<pg_sys::TargetEntry>();
                        (*c).expr = pg_sys::expression_planner_with_deps((*c).expr, &mut (*glob).relationOids, &mut (*glob).invalItems);
                        c
                    })
                    .collect();
                list::of_ptrs(&copies).cast::<pg_sys::Node>()
            } else {
                pg_sys::expression_planner_with_deps(node.cast(), &mut (*glob).relationOids, &mut (*glob).invalItems).cast()
            };
        let outer = list::ptrs::<pg_sys::TargetEntry>(outer_tlist)
            .into_iter()
            .map(|te| if is_a((*te).expr, NodeTag::T_Var) { (*te).expr.cast::<pg_sys::Var>() } else { std::ptr::null_mut() })
            .collect();
        let mut w = Walk { outer, rewrite: true, ok: true };
        pg_sys::expression_tree_walker(planned, Some(walk), (&raw mut w).cast());
        if !w.ok {
            pgrx::error!("gpuindex: GpuIndexJoin: a column the LATERAL subquery reads is not in its outer plan");
        }
        planned
    }
}

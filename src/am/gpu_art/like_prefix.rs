//! `col LIKE 'abc%'` on a gpu_art index, answered exactly by the index.
//!
//! PostgreSQL's LIKE support turns the clause into the range `col >= 'abc'
//! AND col < 'abd'` and, being generic over access methods, marks it lossy:
//! the LIKE stays as a filter run on every row the index returns (a fifth
//! of a wide prefix count's time). A pattern that is a literal prefix
//! followed only by `%`s matches exactly the values that start with the
//! prefix's bytes (LIKE compares bytewise under a deterministic collation,
//! and `%`, `_` and `\` are ASCII, never part of a multibyte character in
//! a server encoding), which is what gpu_art's prefix strategy answers.
//! So a planner hook rewrites such index clauses of gpu_art paths to
//! `col ^@ 'abc'`, not lossy, and the plan has no filter. Other patterns
//! keep PostgreSQL's range and filter; bitmap scans keep the LIKE as their
//! recheck (their plan takes its quals from the clause itself).

use super::keys::{value_bytes, KeyKind};
use crate::list;
use pgrx::pg_sys::{self, NodeTag};
use pgrx::prelude::*;

static mut PREV_HOOK: pg_sys::set_rel_pathlist_hook_type = None;

/// Chains the hook (from `_PG_init`, once).
pub fn install() {
    // SAFETY: from _PG_init, in a single-threaded backend: the chain is
    // saved before it is replaced.
    unsafe {
        PREV_HOOK = pg_sys::set_rel_pathlist_hook;
        pg_sys::set_rel_pathlist_hook = Some(hook);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn hook(
    root: *mut pg_sys::PlannerInfo,
    rel: *mut pg_sys::RelOptInfo,
    rti: pg_sys::Index,
    rte: *mut pg_sys::RangeTblEntry,
) {
    // SAFETY: the planner's own arguments; the previous hook is called
    // behind pgrx's boundary.
    unsafe {
        if let Some(prev) = PREV_HOOK {
            pg_sys::ffi::pg_guard_ffi_boundary(|| prev(root, rel, rti, rte));
        }
        if (*rel).indexlist.is_null() {
            return;
        }
        let am = pg_sys::get_index_am_oid(c"gpu_art".as_ptr(), true);
        let paths = list::ptrs::<pg_sys::Path>((*rel).pathlist).into_iter().chain(list::ptrs((*rel).partial_pathlist));
        for path in paths.filter(|&p| list::is_a(p, NodeTag::T_IndexPath)) {
            let path = path.cast::<pg_sys::IndexPath>();
            if (*(*path).indexinfo).relam == am {
                for clause in list::ptrs::<pg_sys::IndexClause>((*path).indexclauses) {
                    make_exact(root, (*path).indexinfo, clause);
                }
            }
        }
    }
}

/// The prefix of a LIKE pattern that is a literal prefix followed only
/// by `%`s (at least one); None for any other pattern.
fn literal_prefix(pattern: &[u8]) -> Option<&[u8]> {
    let end = pattern.iter().position(|b| matches!(b, b'%' | b'_' | b'\\'))?;
    (end > 0 && pattern[end..].iter().all(|&b| b == b'%')).then_some(&pattern[..end])
}

/// Replaces the lossy range PostgreSQL derived from `col LIKE 'abc%'`
/// by the exact `col ^@ 'abc'`; leaves any other clause alone.
///
/// # Safety
/// An index clause of a path on gpu_art index `index`, in planning.
unsafe fn make_exact(root: *mut pg_sys::PlannerInfo, index: *mut pg_sys::IndexOptInfo, clause: *mut pg_sys::IndexClause) {
    // SAFETY: the caller's contract; nodes are checked before they are
    // read as their types.
    unsafe {
        let rinfo = (*clause).rinfo;
        let like = (*rinfo).clause.cast::<pg_sys::OpExpr>();
        if !(*clause).lossy || !list::is_a(like, NodeTag::T_OpExpr) || (*like).opno != pg_sys::Oid::from(pg_sys::OID_TEXT_LIKE_OP) {
            return;
        }
        let pattern = list::ptrs::<pg_sys::Const>((*like).args)[1];
        if !list::is_a(pattern, NodeTag::T_Const) || (*pattern).constisnull || (*pattern).consttype != pg_sys::TEXTOID {
            return;
        }
        let Some(prefix) = literal_prefix(value_bytes((*pattern).constvalue, KeyKind::Text)) else { return };
        // The index key as PostgreSQL's derived quals have it.
        let Some(&derived) = list::ptrs::<pg_sys::RestrictInfo>((*clause).indexquals).first() else { return };
        let range = (*derived).clause.cast::<pg_sys::OpExpr>();
        if !list::is_a(range, NodeTag::T_OpExpr) {
            return;
        }
        let column = (*clause).indexcol as usize;
        let family = *(*index).opfamily.add(column);
        let op = pg_sys::get_opfamily_member(family, pg_sys::TEXTOID, pg_sys::TEXTOID, super::PREFIX_STRATEGY as i16);
        if op == pg_sys::InvalidOid {
            return;
        }
        let text = pg_sys::cstring_to_text_with_len(prefix.as_ptr().cast(), prefix.len() as i32);
        let value = pg_sys::makeConst(pg_sys::TEXTOID, -1, (*pattern).constcollid, -1, pg_sys::Datum::from(text), false, false);
        let key = list::ptrs::<pg_sys::Expr>((*range).args)[0];
        let starts = pg_sys::make_opclause(op, pg_sys::BOOLOID, false, key, value.cast(), pg_sys::InvalidOid, (*range).inputcollid);
        let qual = crate::compat::simple_restrictinfo(root, starts, (*rinfo).security_level);
        (*clause).indexquals = list::of_ptrs(&[qual]);
        (*clause).lossy = false;
    }
}

//! The one way a SQL function (batch search, join, merge, check) opens an
//! index: it checks that the index is of the expected access method and
//! that the caller may do what the function does, as PostgreSQL checks the
//! equivalent statement, before it reads a page:
//!
//! - `Access::Read` (batch searches: TIDs, distances, counts of rows):
//!   SELECT on the table, or on every column the index reads (its key
//!   columns, the columns of its expressions and of its predicate), which
//!   is what an index scan of the same query needs; checked by the
//!   executor's own routine. Where row-level security applies to the
//!   caller, every row returned must pass the table's policies
//!   (`OpenIndex::visible`); with `row_security = off` that is an ERROR, as
//!   for a SELECT.
//! - `Access::Maintain` (functions that change an index): ownership of the
//!   table, as REINDEX.
//! - `Access::Verify` (`gpu_*_check`): none here; like amcheck's, those
//!   functions are revoked from PUBLIC by the extension script, so a
//!   superuser grants them deliberately.
//!
//! - `OpenIndex::for_plan` (a plan node that probes the index, the batched
//!   join): the executor checked the query's privileges on the table when
//!   it started (ExecCheckPermissions, as for an index scan), and the
//!   planner put the table's policies among the node's quals, which it
//!   evaluates on every row it fetches; the node fetches rows itself with
//!   the query's snapshot, so `visible` leaves every match to it.
//!
//! Privileges are checked before any lock is taken (a role without access
//! cannot queue a lock on the table), then the table and the index are
//! locked, table first, as the executor locks them. Both are closed when
//! the `OpenIndex` is dropped (but those of `for_plan`, which the plan node
//! closes).

use crate::visibility::HeapOrdered;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Maintain,
    Verify,
}

pub struct OpenIndex {
    pub index: pg_sys::Relation,
    pub heap: pg_sys::Relation,
    lock: pg_sys::LOCKMODE,
    /// Row-level security applies to the caller: rows returned are
    /// filtered by the table's policies.
    pub policies: bool,
    /// The index's access method.
    pub am: &'static str,
    /// Opened by `for_plan`: matches are not filtered, relations not closed here.
    for_plan: bool,
    /// `for_plan`'s matches are sorted into heap order.
    heap_order: bool,
}

fn rel_name(oid: pg_sys::Oid) -> String {
    // SAFETY: get_rel_name returns a palloc'd name or NULL.
    unsafe {
        let n = pg_sys::get_rel_name(oid);
        if n.is_null() {
            format!("relation with OID {}", oid.to_u32())
        } else {
            CStr::from_ptr(n).to_string_lossy().into_owned()
        }
    }
}

fn not_of_am(oid: pg_sys::Oid, ams: &[&str]) -> ! {
    let (what, using) = match ams {
        [am] => (am.to_string(), am.to_string()),
        [first @ .., last] => ("gpuindex".to_string(), format!("{} or {last}", first.join(", "))),
        [] => ("gpuindex".to_string(), String::new()),
    };
    crate::error::raise(
        PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
        format!("\"{}\" is not a {what} index", rel_name(oid)),
        format!("Pass an index created with USING {using}."),
    )
}

/// The table's columns the index reads, as the executor's selectedCols.
///
/// # Safety
/// `index` is open.
unsafe fn indexed_columns(index: pg_sys::Relation) -> *mut pg_sys::Bitmapset {
    // SAFETY: the caller keeps this function's contract (# Safety).
    unsafe {
        let offset = pg_sys::FirstLowInvalidHeapAttributeNumber;
        let mut cols: *mut pg_sys::Bitmapset = std::ptr::null_mut();
        let ix = &*(*index).rd_index;
        let keys = ix.indkey.values.as_slice(ix.indnatts as usize);
        for &attno in keys.iter().filter(|&&a| a != 0) {
            cols = pg_sys::bms_add_member(cols, attno as i32 - offset);
        }
        // Expression columns and the predicate of a partial index (varno 1 is
        // the table in both).
        pg_sys::pull_varattnos(pg_sys::RelationGetIndexExpressions(index).cast(), 1, &mut cols);
        pg_sys::pull_varattnos(pg_sys::RelationGetIndexPredicate(index).cast(), 1, &mut cols);
        cols
    }
}

impl OpenIndex {
    /// Opens index `oid` of access method `am` for `access`, under `lock`
    /// (AccessShareLock to read; what the function needs to change).
    pub fn open(oid: pg_sys::Oid, am: &'static str, access: Access, lock: pg_sys::LOCKMODE) -> OpenIndex {
        Self::open_of(oid, &[am], access, lock)
    }

    /// Opens index `oid`, of any of the access methods `ams`, as `open`.
    pub fn open_of(oid: pg_sys::Oid, ams: &[&'static str], access: Access, lock: pg_sys::LOCKMODE) -> OpenIndex {
        // SAFETY: catalog lookups and relation opens from a backend.
        unsafe {
            let heap_oid = pg_sys::IndexGetRelation(oid, true);
            if heap_oid == pg_sys::InvalidOid {
                not_of_am(oid, ams);
            }
            // A partitioned index has no pages of its own: each partition's
            // index holds the entries (and its TIDs name rows of that
            // partition only).
            if pg_sys::get_rel_relkind(oid) == pg_sys::RELKIND_PARTITIONED_INDEX as std::ffi::c_char {
                // (Its name as the hint's SQL takes it: qualified, quoted.)
                let qualified = pg_sys::quote_qualified_identifier(
                    pg_sys::get_namespace_name(pg_sys::get_rel_namespace(oid)),
                    pg_sys::get_rel_name(oid),
                );
                let literal = CStr::from_ptr(pg_sys::quote_literal_cstr(qualified)).to_string_lossy();
                crate::error::raise(
                    PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
                    format!("\"{}\" is a partitioned index", rel_name(oid)),
                    format!("Pass the index of each partition: SELECT relid FROM pg_partition_tree({literal}) WHERE isleaf."),
                );
            }
            let relkind = pg_sys::get_rel_relkind(heap_oid);
            let user = pg_sys::GetUserId();
            let table_select =
                pg_sys::pg_class_aclcheck(heap_oid, user, pg_sys::ACL_SELECT as pg_sys::AclMode) == pg_sys::AclResult::ACLCHECK_OK;
            match access {
                Access::Read => {
                    // Before any lock: a role with no privilege on the table
                    // and none on any of its columns is refused here.
                    if !table_select
                        && pg_sys::pg_attribute_aclcheck_all(
                            heap_oid,
                            user,
                            pg_sys::ACL_SELECT as pg_sys::AclMode,
                            pg_sys::AclMaskHow::ACLMASK_ANY,
                        ) != pg_sys::AclResult::ACLCHECK_OK
                    {
                        pg_sys::aclcheck_error(
                            pg_sys::AclResult::ACLCHECK_NO_PRIV,
                            pg_sys::get_relkind_objtype(relkind),
                            pg_sys::get_rel_name(heap_oid),
                        );
                    }
                }
                Access::Maintain => {
                    if !crate::compat::is_owner(heap_oid) {
                        pg_sys::aclcheck_error(
                            pg_sys::AclResult::ACLCHECK_NOT_OWNER,
                            pg_sys::get_relkind_objtype(relkind),
                            pg_sys::get_rel_name(heap_oid),
                        );
                    }
                }
                Access::Verify => {}
            }
            let heap = pg_sys::table_open(heap_oid, lock);
            let index = pg_sys::index_open(oid, lock);
            let mut opened = OpenIndex { index, heap, lock, policies: false, am: "", for_plan: false, heap_order: true };
            // The index may have been dropped and its OID reused while we
            // waited for the locks.
            if (*(*index).rd_index).indrelid != heap_oid {
                crate::error::raise(
                    PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
                    format!("index \"{}\" changed while it was being opened", rel_name(oid)),
                    "Run the statement again.",
                );
            }
            let relam = (*(*index).rd_rel).relam;
            let am_oid = |am: &str| pg_sys::get_index_am_oid(std::ffi::CString::new(am).unwrap().as_ptr(), true);
            opened.am = ams.iter().copied().find(|&am| am_oid(am) == relam).unwrap_or_else(|| not_of_am(oid, ams));
            if access == Access::Read {
                // The definitive check, column privileges included.
                crate::compat::check_select(heap_oid, relkind, indexed_columns(index));
                // RLS_ENABLED: policies apply. With row_security = off this
                // raises "query would be affected by row-level security
                // policy", as a SELECT would.
                opened.policies =
                    pg_sys::check_enable_rls(heap_oid, pg_sys::InvalidOid, false) == pg_sys::CheckEnableRlsResult::RLS_ENABLED as i32;
                // Policies are applied by a query of the rows' ctids, which
                // column privileges do not cover (as `SELECT ctid` is
                // refused to such a role).
                if opened.policies && !table_select {
                    crate::error::raise(
                        PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
                        format!(
                            "row-level security on table \"{}\" needs SELECT on the whole table for gpuindex batch functions",
                            rel_name(heap_oid)
                        ),
                        "Query through the index with a normal WHERE clause, which applies the policies, or grant SELECT on the table.",
                    );
                }
            }
            opened
        }
    }

    /// `index` of access method `am` on `heap`, both opened and locked by
    /// a plan node that checks visibility and policies itself (see the
    /// module's comment), and wants its matches in heap order or (not
    /// `heap_order`: an index-only join that fetches few) as found.
    pub fn for_plan(heap: pg_sys::Relation, index: pg_sys::Relation, am: &'static str, heap_order: bool) -> OpenIndex {
        OpenIndex { index, heap, lock: pg_sys::NoLock as i32, policies: false, am, for_plan: true, heap_order }
    }

    /// Whether `visible` filters matches (a batch function's call) rather
    /// than passing every one (a plan node, which checks them itself).
    pub fn checks_visibility(&self) -> bool {
        !self.for_plan
    }

    /// Whether `visible` passes matches as they come (a plan node that
    /// takes them as found): a caller may then make the rows itself.
    pub fn passes_as_found(&self) -> bool {
        self.for_plan && !self.heap_order
    }

    /// Of (TID, position) matches found in the index: the rows visible to
    /// the caller's snapshot and allowed by the table's policies, as
    /// (position, TID) in heap order (see `visibility::visible`); for a
    /// plan node (`for_plan`), every match, in heap order where it asks.
    pub fn visible(&self, matches: Vec<(crate::storage::Tid, i64)>) -> Vec<(i64, pg_sys::ItemPointerData)> {
        if self.passes_as_found() {
            return as_rows(matches);
        }
        self.visible_sorted(HeapOrdered::sort(matches))
    }

    /// `visible`, of matches sorted already.
    pub fn visible_sorted(&self, matches: HeapOrdered) -> Vec<(i64, pg_sys::ItemPointerData)> {
        if self.for_plan {
            return as_rows(matches.into_vec());
        }
        // SAFETY: the heap is open and locked; called inside a transaction.
        let rows = unsafe { crate::visibility::visible(self.heap, matches) };
        if self.policies {
            super::policies::filter(self.heap, rows)
        } else {
            rows
        }
    }
}

/// Matches as a plan node's rows, (position, TID): on all cores (a serial
/// pass over 2.5M took ~10 ms on the H200 host).
fn as_rows(matches: Vec<(crate::storage::Tid, i64)>) -> Vec<(i64, pg_sys::ItemPointerData)> {
    crate::batch::par_map(matches, |(t, p)| (p, crate::storage::tid_to(t)))
}

impl Drop for OpenIndex {
    fn drop(&mut self) {
        // An ERROR unwinding: transaction abort releases both.
        if std::thread::panicking() || self.for_plan {
            return;
        }
        // SAFETY: opened by `open` with this lock.
        unsafe {
            pg_sys::index_close(self.index, self.lock);
            pg_sys::table_close(self.heap, self.lock);
        }
    }
}

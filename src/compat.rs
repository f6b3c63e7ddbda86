//! Every PostgreSQL-version-specific field and call, in one place. PG 15
//! is built and tested; the pg16/pg17 arms follow those versions' headers
//! (renamed relfilenode fields, ExecCheckPermissions with RTEPermissionInfo,
//! object_ownercheck) and are kept behind cfg.

use pgrx::pg_sys;

/// The relation's file number: a REINDEX, TRUNCATE or VACUUM FULL gives a
/// new one.
pub fn relfilenode(rel: pg_sys::Relation) -> pg_sys::Oid {
    file_key(rel).2
}

/// The relation's files: tablespace, database, file number.
pub fn file_key(rel: pg_sys::Relation) -> (pg_sys::Oid, pg_sys::Oid, pg_sys::Oid) {
    // SAFETY: a field of an open relation.
    unsafe {
        #[cfg(feature = "pg15")]
        {
            let n = (*rel).rd_node;
            (n.spcNode, n.dbNode, n.relNode)
        }
        #[cfg(not(feature = "pg15"))]
        {
            let n = (*rel).rd_locator;
            (n.spcOid, n.dbOid, n.relNumber)
        }
    }
}

/// Pins `buffer` if it holds `block` of the relation's main fork
/// (ReadRecentBuffer); false, with nothing pinned, if it does not.
/// Without pgrx's guard: callers run it under their own
/// (`unguarded::guarded`).
///
/// # Safety
/// `buffer` a shared buffer number; a backend; under a guard.
pub unsafe fn read_recent_buffer(rel: pg_sys::Relation, block: u32, buffer: pg_sys::Buffer) -> bool {
    // SAFETY: the caller's contract; ReadRecentBuffer checks the buffer's
    // tag under its header lock before pinning.
    unsafe {
        #[cfg(feature = "pg15")]
        {
            crate::unguarded::ReadRecentBuffer((*rel).rd_node, pg_sys::ForkNumber::MAIN_FORKNUM, block, buffer)
        }
        #[cfg(not(feature = "pg15"))]
        {
            crate::unguarded::ReadRecentBuffer((*rel).rd_locator, pg_sys::ForkNumber::MAIN_FORKNUM, block, buffer)
        }
    }
}

/// Whether the relation's current file was created in this transaction
/// (RelationNeedsWAL's second half: such files are synced at commit).
pub fn file_created_in_this_transaction(rel: pg_sys::Relation) -> bool {
    // SAFETY: fields of an open relation.
    unsafe {
        #[cfg(feature = "pg15")]
        {
            (*rel).rd_createSubid != 0 || (*rel).rd_firstRelfilenodeSubid != 0
        }
        #[cfg(not(feature = "pg15"))]
        {
            (*rel).rd_createSubid != 0 || (*rel).rd_firstRelfilelocatorSubid != 0
        }
    }
}

/// Whether the current user owns the relation (or is a superuser).
pub fn is_owner(relid: pg_sys::Oid) -> bool {
    // SAFETY: catalog lookups from a backend.
    unsafe {
        #[cfg(feature = "pg15")]
        {
            pg_sys::pg_class_ownercheck(relid, pg_sys::GetUserId())
        }
        #[cfg(not(feature = "pg15"))]
        {
            pg_sys::object_ownercheck(pg_sys::RelationRelationId, relid, pg_sys::GetUserId())
        }
    }
}

/// The executor's own permission check of `SELECT <columns> FROM ONLY
/// relid` for the current user (table or column privileges, and any
/// ExecutorCheckPerms hook such as sepgsql); raises PostgreSQL's
/// "permission denied" ERROR when it fails. `columns` are attribute
/// numbers offset by FirstLowInvalidHeapAttributeNumber, as the executor
/// keeps them.
///
/// # Safety
/// A backend inside a transaction; `columns` palloc'd or NULL.
pub unsafe fn check_select(relid: pg_sys::Oid, relkind: std::ffi::c_char, columns: *mut pg_sys::Bitmapset) {
    // SAFETY: the caller keeps this function's contract (# Safety).
    unsafe {
        #[cfg(feature = "pg15")]
        {
            let rte = pg_sys::palloc0(std::mem::size_of::<pg_sys::RangeTblEntry>()) as *mut pg_sys::RangeTblEntry;
            (*rte).type_ = pg_sys::NodeTag::T_RangeTblEntry;
            (*rte).rtekind = pg_sys::RTEKind::RTE_RELATION;
            (*rte).relid = relid;
            (*rte).relkind = relkind;
            (*rte).rellockmode = pg_sys::AccessShareLock as i32;
            (*rte).requiredPerms = pg_sys::ACL_SELECT as pg_sys::AclMode;
            (*rte).selectedCols = columns;
            pg_sys::ExecCheckRTPerms(pg_sys::lappend(std::ptr::null_mut(), rte.cast()), true);
        }
        #[cfg(not(feature = "pg15"))]
        {
            let _ = relkind;
            let p = pg_sys::palloc0(std::mem::size_of::<pg_sys::RTEPermissionInfo>()) as *mut pg_sys::RTEPermissionInfo;
            (*p).type_ = pg_sys::NodeTag::T_RTEPermissionInfo;
            (*p).relid = relid;
            (*p).requiredPerms = pg_sys::ACL_SELECT as pg_sys::AclMode;
            (*p).selectedCols = columns;
            pg_sys::ExecCheckPermissions(std::ptr::null_mut(), pg_sys::lappend(std::ptr::null_mut(), p.cast()), true);
        }
    }
}

/// A RestrictInfo for an index qual a planner hook derived (make_simple_restrictinfo
/// with the original clause's security level).
///
/// # Safety
/// In planning; `clause` a boolean expression.
pub unsafe fn simple_restrictinfo(
    root: *mut pg_sys::PlannerInfo,
    clause: *mut pg_sys::Expr,
    security_level: pg_sys::Index,
) -> *mut pg_sys::RestrictInfo {
    let none = std::ptr::null_mut();
    // SAFETY: the caller's contract.
    unsafe {
        #[cfg(feature = "pg15")]
        {
            pg_sys::make_restrictinfo(root, clause, true, false, false, security_level, none, none, none)
        }
        #[cfg(not(feature = "pg15"))]
        {
            pg_sys::make_restrictinfo(root, clause, true, false, false, false, security_level, none, none, none)
        }
    }
}

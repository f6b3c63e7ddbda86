//! WAL helpers shared by gpuindex's own records: whether a relation needs
//! WAL, and critical sections.

use pgrx::pg_sys;

/// RelationNeedsWAL(): permanent, and either WAL is archived/streamed or
/// the relation was not created in this transaction (subtransaction id 0
/// is InvalidSubTransactionId; otherwise PostgreSQL syncs
/// the file at commit instead).
pub fn needs_wal(rel: pg_sys::Relation) -> bool {
    // SAFETY: fields of an open relation and a global set at startup.
    unsafe {
        let r = &*rel;
        (*r.rd_rel).relpersistence == pg_sys::RELPERSISTENCE_PERMANENT as std::ffi::c_char
            && (pg_sys::wal_level >= pg_sys::WalLevel::WAL_LEVEL_REPLICA as i32 || !crate::compat::file_created_in_this_transaction(rel))
    }
}

/// Runs `f` as a critical section (an ERROR inside becomes a PANIC, so a
/// half-made change is never left in shared buffers). `f` must not fail.
pub fn critical<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: START_CRIT_SECTION / END_CRIT_SECTION.
    unsafe { pg_sys::CritSectionCount += 1 };
    let r = f();
    // SAFETY: as above.
    unsafe { pg_sys::CritSectionCount -= 1 };
    r
}

//! Bulk deletes finished per index, counted in shared memory (when
//! gpuindex is preloaded).
//!
//! An index-only scan keeps the pin of the leaf its entries came from, so
//! VACUUM (whose bulk delete takes a cleanup lock on every leaf) cannot
//! remove them, mark their rows' line pointers unused and set the pages
//! all-visible before the scan has returned them. A batch releases its
//! leaves once searched; before it trusts the visibility map for a match
//! (GpuIndexJoin's index-only joins), it checks that no bulk delete of the
//! index has finished since its search began: VACUUM marks line pointers
//! unused and pages all-visible only after its bulk deletes return.

use pgrx::pg_sys;
use std::sync::atomic::{fence, Ordering};

/// The counter `index` shares (indexes of one slot only cost each other
/// heap fetches).
fn slot(index: pg_sys::Relation) -> usize {
    // SAFETY: an open relation; MyDatabaseId is set in a backend.
    let (db, oid) = unsafe { (pg_sys::MyDatabaseId.to_u32() as u64, (*index).rd_id.to_u32() as u64) };
    ((db << 32 | oid).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize % crate::service::shmem::BULK_DELETE_SLOTS
}

/// How many bulk deletes of `index` (or of an index sharing its counter)
/// have finished; None without shared memory (nothing can then be
/// trusted).
pub fn finished(index: pg_sys::Relation) -> Option<u64> {
    let shared = crate::service::shmem::shared()?;
    // After whatever the caller read before (the visibility map's bit).
    fence(Ordering::SeqCst);
    Some(shared.bulk_deletes[slot(index)].load(Ordering::SeqCst))
}

/// Counts a bulk delete of `index` as finished (before VACUUM goes on to
/// mark line pointers unused).
pub fn note_finished(index: pg_sys::Relation) {
    if let Some(shared) = crate::service::shmem::shared() {
        shared.bulk_deletes[slot(index)].fetch_add(1, Ordering::SeqCst);
    }
}

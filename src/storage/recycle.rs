//! Page recycling through the free space map, as nbtree does it: a page an
//! access method frees keeps its contents (scans that reached it before
//! still read it) and a safe xid, the next full transaction id when it was
//! freed. Once no snapshot can be older than that xid, VACUUM records the
//! page in the FSM; a writer that needs a page takes one from there before
//! extending the relation.
//!
//! Standbys run queries whose snapshots the primary does not see, so each
//! reuse is WAL-logged with the page's safe xid first, and replay cancels
//! the standby queries that could still read the old contents. The record
//! is nbtree's XLOG_BTREE_REUSE_PAGE: its redo does exactly that and
//! nothing else (no block reference, no btree page is touched), and a core
//! record needs no custom resource manager, so reuse works without
//! `shared_preload_libraries`.

use super::buffer::{read, Exclusive};
use super::page::{PageMut, SpecialArea};
use super::xlog::Xlog;
use pgrx::pg_sys;
use std::marker::PhantomData;

/// The safe xid of a page freed now.
pub fn safe_xid_now() -> u64 {
    // SAFETY: reads the shared counter under its lock.
    unsafe { pg_sys::ReadNextFullTransactionId().value }
}

/// Whether no snapshot, here or (through the reuse record) on a standby,
/// can still reach a page freed at `safe_xid`.
pub fn removable(safe_xid: u64) -> bool {
    // SAFETY: a plain horizon test.
    unsafe { pg_sys::GlobalVisCheckRemovableFullXid(std::ptr::null_mut(), pg_sys::FullTransactionId { value: safe_xid }) }
}

/// Records a free page in the FSM (VACUUM; `vacuum_fsm` publishes them).
pub fn record_free(rel: pg_sys::Relation, block: u32) {
    // SAFETY: an open index relation.
    unsafe { pg_sys::RecordFreeIndexPage(rel, block) }
}

/// Makes the pages recorded by `record_free` visible to other backends.
pub fn vacuum_fsm(rel: pg_sys::Relation) {
    // SAFETY: an open index relation.
    unsafe { pg_sys::IndexFreeSpaceMapVacuum(rel) }
}

/// nbtree's xl_btree_reuse_page (access/nbtxlog.h, PostgreSQL 15).
#[repr(C)]
struct ReusePage {
    node: pg_sys::RelFileNode,
    block: u32,
    latest_removed_full_xid: pg_sys::FullTransactionId,
}
const XLOG_BTREE_REUSE_PAGE: u8 = 0xD0;

pub fn log_reuse(rel: pg_sys::Relation, block: u32, safe_xid: u64) {
    // SAFETY: a record with main data only, as _bt_allocbuf writes it.
    unsafe {
        let needs_wal = (*(*rel).rd_rel).relpersistence == pg_sys::RELPERSISTENCE_PERMANENT as std::ffi::c_char;
        if !needs_wal || pg_sys::wal_level < pg_sys::WalLevel::WAL_LEVEL_REPLICA as i32 {
            return;
        }
        let mut rec = ReusePage { node: (*rel).rd_node, block, latest_removed_full_xid: pg_sys::FullTransactionId { value: safe_xid } };
        pg_sys::XLogBeginInsert();
        pg_sys::XLogRegisterData(&mut rec as *mut ReusePage as *mut std::ffi::c_char, std::mem::size_of::<ReusePage>() as i32);
        pg_sys::XLogInsert(pg_sys::RmgrIds::RM_BTREE_ID as u8, XLOG_BTREE_REUSE_PAGE);
    }
}

/// The safe xid of a page that no scan can reach once freed (gpu_art's
/// overflow pages, read only under the lock of the leaf holding their
/// entry): reusable at once, without a reuse record.
pub const REUSABLE_NOW: u64 = 0;

/// A free page from the FSM, exclusively locked for the caller to
/// initialise (as a new page, with a full image): one `freed_at` names
/// the safe xid of (None: not free, e.g. reused by another backend since
/// VACUUM recorded it; `REUSABLE_NOW`), or one never initialised. None when the FSM has
/// no such page: extend the relation then.
pub fn reuse_page<S: SpecialArea>(rel: pg_sys::Relation, freed_at: impl Fn(&super::PageRef<S>) -> Option<u64>) -> Option<Exclusive<S>> {
    loop {
        // SAFETY: FSM and buffer-manager calls; a page is only taken when
        // its lock is free (no waiting while the caller holds others).
        unsafe {
            let block = pg_sys::GetFreeIndexPage(rel);
            if block == pg_sys::InvalidBlockNumber {
                return None;
            }
            let buf = read(rel, block);
            if pg_sys::ConditionalLockBuffer(buf) {
                let g = Exclusive::<S> { buf, _special: PhantomData };
                let page = g.page();
                if page.is_new() {
                    return Some(g);
                }
                if let Some(xid) = freed_at(&page).filter(|&x| x == REUSABLE_NOW || removable(x)) {
                    if xid != REUSABLE_NOW {
                        log_reuse(rel, block, xid);
                    }
                    return Some(g);
                }
            } else {
                pg_sys::ReleaseBuffer(buf);
            }
        }
    }
}

/// Frees pages at the current safe xid: `mark` flags each one (in its
/// access method's special area), a few pages per WAL record. Their
/// contents stay for scans already reading them.
pub fn free_pages<S: SpecialArea>(rel: pg_sys::Relation, blocks: &[u32], mark: impl Fn(&mut PageMut<S>, u64)) {
    let xid = safe_xid_now();
    for group in blocks.chunks(4) {
        let pages: Vec<Exclusive<S>> = group.iter().map(|&b| Exclusive::lock(rel, b)).collect();
        let x = Xlog::start(rel);
        for g in &pages {
            mark(&mut x.register(g, false), xid);
        }
        x.finish();
    }
}

//! gpu_btree's own WAL record for the hot path, a leaf insert without a
//! split: (position, key, TID) against the leaf, replayed by a custom
//! resource manager. GenericXLog would log a page delta instead (half a
//! page on average, since entries shift), and diffing the page costs more
//! than the insert. Splits and everything rarer stay on GenericXLog.
//!
//! The record goes through the extension's resource manager
//! (`storage::rmgr`), which exists only when gpuindex is loaded by
//! shared_preload_libraries; without it, leaf inserts use GenericXLog too.
//! A server that wrote these records needs gpuindex preloaded to recover.

use super::page::{leaf_insert, tid_from, tid_to, Tid};
use super::page::{Exclusive, PageMut};
use crate::storage::{rmgr, wal};
use pgrx::pg_sys;

const LEAF_INSERT: u8 = 0x10;

#[repr(C, packed)]
#[derive(Clone, Copy)]
struct LeafInsert {
    pos: u16,
    key: u64,
    tid: pg_sys::ItemPointerData,
}

pub const CLIENT: rmgr::Client = rmgr::Client { records: &[(LEAF_INSERT, c"GPU_BTREE_LEAF_INSERT")], redo, desc };

/// Inserts an entry into a leaf with room, in place, logged with our own
/// record (callers check `rmgr::available()` and the room first).
pub fn leaf_insert_logged(rel: pg_sys::Relation, leaf: &mut Exclusive, pos: usize, key: u64, tid: Tid) {
    let logged = wal::needs_wal(rel);
    let buffer = leaf.buffer();
    wal::critical(|| {
        leaf.mark_dirty();
        let mut page = leaf.page_mut_in_place();
        leaf_insert(&mut page, pos, key, tid);
        if logged {
            let rec = LeafInsert { pos: pos as u16, key, tid: tid_to(tid) };
            // SAFETY: a packed plain struct viewed as its bytes.
            let bytes = unsafe { std::slice::from_raw_parts(&rec as *const LeafInsert as *const u8, std::mem::size_of::<LeafInsert>()) };
            page.set_lsn(rmgr::log(LEAF_INSERT, buffer, bytes));
        }
    });
}

fn record(data: &[u8]) -> Option<LeafInsert> {
    // SAFETY: read unaligned from a slice of the right length.
    (data.len() == std::mem::size_of::<LeafInsert>()).then(|| unsafe { std::ptr::read_unaligned(data.as_ptr() as *const LeafInsert) })
}

fn redo(record_state: *mut pg_sys::XLogReaderState, _info: u8, data: &[u8]) {
    let Some(rec) = record(data) else { pgrx::error!("gpu_btree redo: leaf insert of {} bytes", data.len()) };
    // SAFETY: the redo protocol: the block is read, locked, changed,
    // stamped and released here.
    unsafe {
        let mut buf: pg_sys::Buffer = 0;
        if pg_sys::XLogReadBufferForRedo(record_state, 0, &mut buf) == pg_sys::XLogRedoAction::BLK_NEEDS_REDO {
            let mut page = PageMut::new(pg_sys::BufferGetPage(buf) as *mut u8);
            leaf_insert(&mut page, rec.pos as usize, rec.key, tid_from(rec.tid));
            page.set_lsn((*record_state).EndRecPtr);
            pg_sys::MarkBufferDirty(buf);
        }
        if buf != 0 {
            pg_sys::UnlockReleaseBuffer(buf);
        }
    }
}

fn desc(_info: u8, data: &[u8]) -> String {
    match record(data) {
        Some(rec) => {
            let (pos, key) = (rec.pos, rec.key);
            format!("pos {pos} key {key:#x}")
        }
        None => format!("bad leaf insert of {} bytes", data.len()),
    }
}

//! gpu_btree's own WAL record for the hot path, a leaf insert without a
//! split: (position, key, TID) against the leaf, replayed by a custom
//! resource manager. GenericXLog would log a page delta instead (half a
//! page on average, since entries shift), and diffing the page costs more
//! than the insert. Splits and everything rarer stay on GenericXLog.
//!
//! Custom resource managers exist only when loaded by
//! shared_preload_libraries (recovery must be able to replay them); without
//! it, leaf inserts use GenericXLog too. A server that wrote these records
//! needs gpuindex preloaded to recover.

use super::page::{leaf_insert, tid_from, tid_to, Tid};
use crate::storage::{wal, Exclusive, PageMut};
use pgrx::pg_sys;
use std::sync::atomic::{AtomicBool, Ordering};

/// gpuindex's resource manager id (custom ids are 128..=255; 128 is
/// reserved for experiments).
pub const RMGR_ID: u8 = 173;
const LEAF_INSERT: u8 = 0x10;

static REGISTERED: AtomicBool = AtomicBool::new(false);

#[repr(C, packed)]
#[derive(Clone, Copy)]
struct LeafInsert {
    pos: u16,
    key: u64,
    tid: pg_sys::ItemPointerData,
}

static mut RMGR: pg_sys::RmgrData = pg_sys::RmgrData {
    rm_name: c"gpuindex".as_ptr(),
    rm_redo: Some(redo),
    rm_desc: Some(desc),
    rm_identify: Some(identify),
    rm_startup: None,
    rm_cleanup: None,
    rm_mask: None,
    rm_decode: None,
};

/// Registers the resource manager (from _PG_init, when preloading).
pub fn register() {
    // SAFETY: flags set by PostgreSQL at startup; the rmgr data is static.
    unsafe {
        if pg_sys::process_shared_preload_libraries_in_progress {
            pg_sys::RegisterCustomRmgr(RMGR_ID, std::ptr::addr_of_mut!(RMGR));
            REGISTERED.store(true, Ordering::Relaxed);
        }
    }
}

pub fn available() -> bool {
    REGISTERED.load(Ordering::Relaxed)
}

/// Inserts an entry into a leaf with room, in place, logged with our own
/// record (callers check `available()` and the room first).
pub fn leaf_insert_logged(rel: pg_sys::Relation, leaf: &mut Exclusive, pos: usize, key: u64, tid: Tid) {
    let logged = wal::needs_wal(rel);
    let buffer = leaf.buffer();
    wal::critical(|| {
        leaf.mark_dirty();
        let mut page = leaf.page_mut_in_place();
        leaf_insert(&mut page, pos, key, tid);
        if logged {
            let mut rec = LeafInsert { pos: pos as u16, key, tid: tid_to(tid) };
            // SAFETY: standard XLogInsert protocol inside a critical section.
            unsafe {
                pg_sys::XLogBeginInsert();
                pg_sys::XLogRegisterBuffer(0, buffer, pg_sys::REGBUF_STANDARD as u8);
                pg_sys::XLogRegisterData(&mut rec as *mut LeafInsert as *mut std::ffi::c_char, std::mem::size_of::<LeafInsert>() as i32);
                let lsn = pg_sys::XLogInsert(RMGR_ID, LEAF_INSERT);
                page.set_lsn(lsn);
            }
        }
    });
}

unsafe fn main_data(record: *mut pg_sys::XLogReaderState) -> (u8, *const u8, usize) {
    let r = &*(*record).record;
    (r.header.xl_info & 0xF0, r.main_data as *const u8, r.main_data_len as usize)
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    let (info, data, len) = main_data(record);
    if info != LEAF_INSERT || len != std::mem::size_of::<LeafInsert>() {
        pgrx::error!("gpuindex redo: unknown record (info {info:#x}, {len} bytes)");
    }
    let rec = std::ptr::read_unaligned(data as *const LeafInsert);
    let mut buf: pg_sys::Buffer = 0;
    if pg_sys::XLogReadBufferForRedo(record, 0, &mut buf) == pg_sys::XLogRedoAction::BLK_NEEDS_REDO {
        let mut page = PageMut::new(pg_sys::BufferGetPage(buf) as *mut u8);
        leaf_insert(&mut page, rec.pos as usize, rec.key, tid_from(rec.tid));
        page.set_lsn((*record).EndRecPtr);
        pg_sys::MarkBufferDirty(buf);
    }
    if buf != 0 {
        pg_sys::UnlockReleaseBuffer(buf);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn desc(buf: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    let (info, data, len) = main_data(record);
    if info == LEAF_INSERT && len == std::mem::size_of::<LeafInsert>() {
        let rec = std::ptr::read_unaligned(data as *const LeafInsert);
        let (pos, key) = (rec.pos, rec.key);
        let text = std::ffi::CString::new(format!("pos {pos} key {key:#x}")).unwrap_or_default();
        pg_sys::appendStringInfoString(buf, text.as_ptr());
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const std::ffi::c_char {
    if info & 0xF0 == LEAF_INSERT {
        c"LEAF_INSERT".as_ptr()
    } else {
        std::ptr::null()
    }
}

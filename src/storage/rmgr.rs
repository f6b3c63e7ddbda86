//! gpuindex's custom WAL resource manager, one for the extension,
//! registered once (from _PG_init when preloaded: recovery must be able to
//! replay it). Access methods log their hot-path records through it; each
//! record type (the rmgr-private high nibble of xl_info) belongs to one
//! access method, listed in `CLIENTS`, whose `redo` replays it. Everything
//! rarer goes through GenericXLog, which needs no preloading.
//!
//! `rm_mask` masks what GenericXLog's does (LSN, checksum, and the unused
//! space between pd_lower and pd_upper, which gpuindex's pages keep exact),
//! so `wal_consistency_checking = 'gpuindex'` can compare replayed pages.

use pgrx::pg_sys;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

/// gpuindex's resource manager id (custom ids are 128..=255; 128 is
/// reserved for experiments).
pub const RMGR_ID: u8 = 173;

/// An access method's records.
pub struct Client {
    /// (xl_info & 0xF0, name) of each record type it writes.
    pub records: &'static [(u8, &'static CStr)],
    /// Replays one of its records (main data as given to `log`).
    pub redo: fn(record: *mut pg_sys::XLogReaderState, info: u8, data: &[u8]),
    /// Describes a record for pg_waldump.
    pub desc: fn(info: u8, data: &[u8]) -> String,
}

/// Every access method with records of its own; record types are unique
/// across them (checked by `register`).
const CLIENTS: &[&Client] = &[&crate::am::gpu_btree::wal::CLIENT];

static REGISTERED: AtomicBool = AtomicBool::new(false);

fn client_of(info: u8) -> Option<&'static Client> {
    CLIENTS.iter().copied().find(|c| c.records.iter().any(|r| r.0 == info & 0xF0))
}

static mut RMGR: pg_sys::RmgrData = pg_sys::RmgrData {
    rm_name: c"gpuindex".as_ptr(),
    rm_redo: Some(redo),
    rm_desc: Some(desc),
    rm_identify: Some(identify),
    rm_startup: None,
    rm_cleanup: None,
    rm_mask: Some(mask),
    rm_decode: None,
};

/// Registers the resource manager (from _PG_init, when preloading).
pub fn register() {
    let mut seen = std::collections::HashSet::new();
    for r in CLIENTS.iter().flat_map(|c| c.records) {
        assert!(r.0 & 0x0F == 0 && seen.insert(r.0), "gpuindex record type {:#x} reused or outside the high nibble", r.0);
    }
    // SAFETY: flags set by PostgreSQL at startup; the rmgr data is static.
    unsafe {
        if pg_sys::process_shared_preload_libraries_in_progress {
            pg_sys::RegisterCustomRmgr(RMGR_ID, std::ptr::addr_of_mut!(RMGR));
            REGISTERED.store(true, Ordering::Relaxed);
        }
    }
}

/// Whether records can be written (the rmgr is registered).
pub fn available() -> bool {
    REGISTERED.load(Ordering::Relaxed)
}

/// Logs a record of type `info` changing `buffer` (block 0 of the record)
/// with main data `data`; returns its LSN. Call inside the critical
/// section that changed the page.
pub fn log(info: u8, buffer: pg_sys::Buffer, data: &[u8]) -> pg_sys::XLogRecPtr {
    // SAFETY: the standard XLogInsert protocol; the data outlives the call.
    unsafe {
        pg_sys::XLogBeginInsert();
        pg_sys::XLogRegisterBuffer(0, buffer, pg_sys::REGBUF_STANDARD as u8);
        pg_sys::XLogRegisterData(data.as_ptr() as *mut std::ffi::c_char, data.len() as i32);
        pg_sys::XLogInsert(RMGR_ID, info)
    }
}

/// # Safety
/// A record being decoded or replayed.
unsafe fn main_data<'a>(record: *mut pg_sys::XLogReaderState) -> (u8, &'a [u8]) {
    // SAFETY: as the caller's.
    unsafe {
        let r = &*(*record).record;
        let data =
            if r.main_data.is_null() { &[][..] } else { std::slice::from_raw_parts(r.main_data as *const u8, r.main_data_len as usize) };
        (r.header.xl_info & 0xF0, data)
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn redo(record: *mut pg_sys::XLogReaderState) {
    // SAFETY: replaying this record.
    let (info, data) = unsafe { main_data(record) };
    match client_of(info) {
        Some(c) => (c.redo)(record, info, data),
        None => pgrx::error!("gpuindex redo: unknown record type {info:#x}"),
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn desc(buf: pg_sys::StringInfo, record: *mut pg_sys::XLogReaderState) {
    // SAFETY: decoding this record.
    let (info, data) = unsafe { main_data(record) };
    if let Some(c) = client_of(info) {
        let text = std::ffi::CString::new((c.desc)(info, data)).unwrap_or_default();
        // SAFETY: appends to the caller's buffer.
        unsafe { pg_sys::appendStringInfoString(buf, text.as_ptr()) };
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn identify(info: u8) -> *const std::ffi::c_char {
    client_of(info).and_then(|c| c.records.iter().find(|r| r.0 == info & 0xF0)).map_or(std::ptr::null(), |r| r.1.as_ptr())
}

extern "C-unwind" {
    fn mask_page_lsn_and_checksum(page: pg_sys::Page);
    fn mask_unused_space(page: pg_sys::Page);
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn mask(page: *mut std::ffi::c_char, _block: pg_sys::BlockNumber) {
    // SAFETY: a page image given by wal_consistency_checking.
    unsafe {
        mask_page_lsn_and_checksum(page as pg_sys::Page);
        mask_unused_space(page as pg_sys::Page);
    }
}

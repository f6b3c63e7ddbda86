//! PostgreSQL functions declared here without pgrx's per-call guard.
//!
//! pgrx wraps every `pg_sys` function in a guard (a sigsetjmp, and its own
//! copy of the guard's code at each function): a single index lookup made
//! seven such calls, ~1 us of its time, and their code was a fifth of the
//! instruction-cache misses gpu_art's lookup adds to btree's. Calls made
//! back to back go through one guard instead (`guarded`: an ERROR in any
//! of them becomes the same Rust panic), and a function that cannot raise
//! an ERROR needs none. Only calls, no values with destructors, may be
//! inside a `guarded` closure: an ERROR jumps over its frame.

use pgrx::pg_sys;

/// Runs `f`, raw calls of PostgreSQL functions, under one guard.
///
/// # Safety
/// `f` only calls C functions (nothing with a destructor lives in its
/// frame); the backend's main thread.
#[inline(always)]
pub unsafe fn guarded<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: as the caller's.
    unsafe { pg_sys::ffi::pg_guard_ffi_boundary(f) }
}

#[allow(clashing_extern_declarations)]
unsafe extern "C-unwind" {
    pub fn RelationGetIndexScan(index: pg_sys::Relation, nkeys: i32, norderbys: i32) -> pg_sys::IndexScanDesc;
    pub fn palloc(size: usize) -> *mut std::ffi::c_void;
    /// Cannot raise an ERROR (it links `cb` into the context's list).
    pub fn MemoryContextRegisterResetCallback(context: pg_sys::MemoryContext, cb: *mut pg_sys::MemoryContextCallback);
    #[cfg(feature = "pg15")]
    pub fn ReadRecentBuffer(node: pg_sys::RelFileNode, fork: pg_sys::ForkNumber::Type, block: u32, buffer: pg_sys::Buffer) -> bool;
    #[cfg(not(feature = "pg15"))]
    pub fn ReadRecentBuffer(locator: pg_sys::RelFileLocator, fork: pg_sys::ForkNumber::Type, block: u32, buffer: pg_sys::Buffer) -> bool;
    pub fn ReadBufferExtended(
        rel: pg_sys::Relation,
        fork: pg_sys::ForkNumber::Type,
        block: u32,
        mode: pg_sys::ReadBufferMode::Type,
        strategy: pg_sys::BufferAccessStrategy,
    ) -> pg_sys::Buffer;
    pub fn LockBuffer(buffer: pg_sys::Buffer, mode: i32);
    pub fn ReleaseBuffer(buffer: pg_sys::Buffer);
    pub fn heap_page_prune_opt(relation: pg_sys::Relation, buffer: pg_sys::Buffer);
    pub fn heap_hot_search_buffer(
        tid: pg_sys::ItemPointer,
        relation: pg_sys::Relation,
        buffer: pg_sys::Buffer,
        snapshot: pg_sys::Snapshot,
        heap_tuple: pg_sys::HeapTuple,
        all_dead: *mut bool,
        first_call: bool,
    ) -> bool;
    pub fn HeapTupleSatisfiesVisibility(htup: pg_sys::HeapTuple, snapshot: pg_sys::Snapshot, buffer: pg_sys::Buffer) -> bool;
    pub fn UnlockReleaseBuffer(buffer: pg_sys::Buffer);
    pub fn visibilitymap_get_status(rel: pg_sys::Relation, heap_block: u32, vmbuf: *mut pg_sys::Buffer) -> u8;
}

//! ambuild and ambuildempty around `IndexAm::build`: one build path for
//! both forks. The access method writes its pages without WAL; then every
//! page is logged at once (log_newpage_range), as nbtree's sorted build
//! does.

use super::am::{HeapRows, IndexAm};
use crate::storage::{tid_from, Fork, Tid};
use pgrx::pg_sys;
use pgrx::prelude::*;

type RowFn<'a> = &'a mut dyn FnMut(Tid, Option<pg_sys::Datum>);

#[pg_guard]
unsafe extern "C-unwind" fn each_row(
    _index: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    _alive: bool,
    state: *mut std::ffi::c_void,
) {
    // SAFETY: `state` is the closure `scan` passed; one column.
    unsafe {
        let f = &mut *(state as *mut RowFn);
        f(tid_from(*tid), (!*isnull).then(|| *values));
    }
}

impl HeapRows {
    /// Calls `f` with each heap row's TID and value (None for NULL),
    /// counting the rows for the build result.
    pub fn scan(&self, index: pg_sys::Relation, mut f: impl FnMut(Tid, Option<pg_sys::Datum>)) {
        let mut counting = |t: Tid, v: Option<pg_sys::Datum>| {
            self.tuples.set(self.tuples.get() + 1.0);
            f(t, v)
        };
        let mut state: RowFn = &mut counting;
        // SAFETY: a heap scan of the relation being indexed; the callback
        // only runs during the call.
        unsafe {
            pg_sys::IndexBuildHeapScan(self.heap, index, self.info, Some(each_row), &mut state as *mut RowFn as *mut std::ffi::c_void)
        };
    }
}

/// Blocks of `fork` of the open relation `index`.
pub fn nblocks(index: pg_sys::Relation, fork: Fork) -> u32 {
    // SAFETY: an open relation.
    unsafe { pg_sys::RelationGetNumberOfBlocksInFork(index, fork.number()) }
}

/// Logs every page of `fork` (full images), where the relation needs it.
fn log_pages(index: pg_sys::Relation, fork: Fork) {
    // SAFETY: an open relation; its pages are written and unlocked.
    unsafe {
        let permanent = (*(*index).rd_rel).relpersistence == pg_sys::RELPERSISTENCE_PERMANENT as std::ffi::c_char;
        if permanent || fork == Fork::Init {
            pg_sys::log_newpage_range(index, fork.number(), 0, nblocks(index, fork), true);
        }
    }
}

pub fn ambuild<A: IndexAm>(heap: pg_sys::Relation, index: pg_sys::Relation, info: *mut pg_sys::IndexInfo) -> *mut pg_sys::IndexBuildResult {
    if nblocks(index, Fork::Main) != 0 {
        // SAFETY: rd_rel of an open relation.
        let name = unsafe { pgrx::name_data_to_str(&(*(*index).rd_rel).relname).to_string() };
        pgrx::error!("index \"{name}\" already contains data");
    }
    let rows = HeapRows { heap, info, tuples: Default::default() };
    let index_tuples = A::build(index, Fork::Main, Some(&rows));
    log_pages(index, Fork::Main);
    // SAFETY: palloc0 of a plain struct, returned to the caller.
    let mut r = unsafe { PgBox::<pg_sys::IndexBuildResult>::alloc0() };
    r.heap_tuples = rows.tuples.get();
    r.index_tuples = index_tuples;
    r.into_pg()
}

/// The init fork of an unlogged index: the same build, with no rows.
pub fn ambuildempty<A: IndexAm>(index: pg_sys::Relation) {
    A::build(index, Fork::Init, None);
    log_pages(index, Fork::Init);
}

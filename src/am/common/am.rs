//! What an access method is, beyond its own logic: the `IndexAm` trait
//! says what differs between access methods, and `index_am!` emits the
//! rest once for each: the `IndexAmRoutine` (every capability off unless
//! the access method turns it on) and the C callbacks, which do the
//! shared work (build results and WAL of a build, bulk-delete statistics,
//! the generic cost estimate, reloptions, the operator-class walk) around
//! the trait's plain Rust functions.
//!
//! Scans keep their own state type per access method (`IndexAm::Scan`,
//! an `IndexScan`); `common::scan` holds the scan callbacks around it.

use super::options::Reloptions;
use super::validate::OpClass;
use crate::storage::{Fork, Tid};
use pgrx::pg_sys;

/// The cost an access method adds to the generic estimate.
pub struct Estimate {
    pub startup: f64,
    pub total: f64,
    pub pages: f64,
}

/// The heap rows a build indexes.
pub struct HeapRows {
    pub heap: pg_sys::Relation,
    pub info: *mut pg_sys::IndexInfo,
    /// Heap tuples scanned so far.
    pub tuples: std::cell::Cell<f64>,
}

pub trait IndexAm {
    /// As in `CREATE INDEX ... USING name`.
    const NAME: &'static str;
    /// Its reloptions.
    const OPTIONS: &'static Reloptions;
    /// Its scans' state.
    type Scan: super::scan::IndexScan;

    /// Turns on what the access method can do (amcanorder, amstrategies...).
    fn capabilities(am: &mut pg_sys::IndexAmRoutine);

    /// Writes a whole index into `fork` of `index`: from `rows` (CREATE
    /// INDEX, REINDEX), or empty (`None`: the init fork of an unlogged
    /// index). Returns the number of index entries. Pages are written
    /// without WAL; the caller logs them all.
    fn build(index: pg_sys::Relation, fork: Fork, rows: Option<&HeapRows>) -> f64;

    /// Inserts one row's value (None for NULL).
    fn insert(index: pg_sys::Relation, value: Option<pg_sys::Datum>, tid: Tid);

    /// Removes the entries of rows `dead` says are gone; adds to `stats`.
    fn bulk_delete(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult, dead: &dyn Fn(Tid) -> bool);

    /// After a VACUUM (`bulk_deleted`: whether bulk_delete ran): fills
    /// `stats` (num_pages is set by the caller).
    fn vacuum_cleanup(info: &pg_sys::IndexVacuumInfo, stats: &mut pg_sys::IndexBulkDeleteResult, bulk_deleted: bool);

    /// The cost of a path, from the generic estimate.
    fn cost(path: &pg_sys::IndexPath, generic: &pg_sys::GenericCosts) -> Estimate;

    /// Whether an `= ANY(array)` scan walks the index once in key order,
    /// reading each leaf that holds elements once (not a descent per
    /// element): its leaf reads are then priced as ordered page reads
    /// (`cost::sorted_walk`).
    const WALKS_ARRAYS_IN_KEY_ORDER: bool = false;

    /// What is wrong with an operator class of this access method (empty:
    /// nothing).
    fn check_opclass(c: &OpClass) -> Vec<String>;
}

/// Emits, in an access method's module, the C callbacks, `routine()` and
/// the handler function `$handler` for the type implementing `IndexAm`.
/// The access method's SQL file creates the handler (C symbol
/// `<handler>_wrapper`) and the access method.
#[macro_export]
macro_rules! index_am {
    ($am:ty, $handler:ident) => {
        /// The access method's handler (declared in its SQL file).
        #[pgrx::pg_extern(sql = false)]
        fn $handler(_fcinfo: pgrx::pg_sys::FunctionCallInfo) -> pgrx::PgBox<pgrx::pg_sys::IndexAmRoutine> {
            // A backend asks for the routine when it first opens one of
            // the access method's indexes, before any of its code runs:
            // the place to start gpuindex's pool (threads that block
            // signals) before any rayon call would start rayon's own.
            $crate::batch::ensure_cpu_pool();
            routine()
        }

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn ambuild(
            heap: pgrx::pg_sys::Relation,
            index: pgrx::pg_sys::Relation,
            info: *mut pgrx::pg_sys::IndexInfo,
        ) -> *mut pgrx::pg_sys::IndexBuildResult {
            $crate::am::common::build::ambuild::<$am>(heap, index, info)
        }

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn ambuildempty(index: pgrx::pg_sys::Relation) {
            $crate::am::common::build::ambuildempty::<$am>(index)
        }

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn aminsert(
            index: pgrx::pg_sys::Relation,
            values: *mut pgrx::pg_sys::Datum,
            isnull: *mut bool,
            heap_tid: pgrx::pg_sys::ItemPointer,
            _heap: pgrx::pg_sys::Relation,
            _check_unique: pgrx::pg_sys::IndexUniqueCheck::Type,
            _index_unchanged: bool,
            _info: *mut pgrx::pg_sys::IndexInfo,
        ) -> bool {
            // SAFETY: one column: values[0], isnull[0], and the heap TID.
            let (value, tid) = unsafe { ((!*isnull).then(|| *values), $crate::storage::tid_from(*heap_tid)) };
            <$am as $crate::am::common::IndexAm>::insert(index, value, tid);
            false
        }

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn ambulkdelete(
            info: *mut pgrx::pg_sys::IndexVacuumInfo,
            stats: *mut pgrx::pg_sys::IndexBulkDeleteResult,
            callback: pgrx::pg_sys::IndexBulkDeleteCallback,
            callback_state: *mut std::ffi::c_void,
        ) -> *mut pgrx::pg_sys::IndexBulkDeleteResult {
            unsafe { $crate::am::common::vacuum::ambulkdelete::<$am>(info, stats, callback, callback_state) }
        }

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn amvacuumcleanup(
            info: *mut pgrx::pg_sys::IndexVacuumInfo,
            stats: *mut pgrx::pg_sys::IndexBulkDeleteResult,
        ) -> *mut pgrx::pg_sys::IndexBulkDeleteResult {
            unsafe { $crate::am::common::vacuum::amvacuumcleanup::<$am>(info, stats) }
        }

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn amcostestimate(
            root: *mut pgrx::pg_sys::PlannerInfo,
            path: *mut pgrx::pg_sys::IndexPath,
            loop_count: f64,
            startup: *mut pgrx::pg_sys::Cost,
            total: *mut pgrx::pg_sys::Cost,
            selectivity: *mut pgrx::pg_sys::Selectivity,
            correlation: *mut f64,
            pages: *mut f64,
        ) {
            // SAFETY: called by PostgreSQL with the arguments its API promises.
            unsafe {
                let out = $crate::am::common::cost::CostOut { startup, total, selectivity, correlation, pages };
                $crate::am::common::cost::amcostestimate::<$am>(root, path, loop_count, &out)
            }
        }

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn amoptions(reloptions: pgrx::pg_sys::Datum, validate: bool) -> *mut pgrx::pg_sys::bytea {
            // SAFETY: amoptions' own arguments.
            unsafe { <$am as $crate::am::common::IndexAm>::OPTIONS.parse(reloptions, validate) }
        }

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn amvalidate(opclass: pgrx::pg_sys::Oid) -> bool {
            $crate::am::common::validate::amvalidate::<$am>(opclass)
        }

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn ambeginscan(
            index: pgrx::pg_sys::Relation,
            nkeys: std::ffi::c_int,
            norderbys: std::ffi::c_int,
        ) -> pgrx::pg_sys::IndexScanDesc {
            // SAFETY: called by PostgreSQL with the arguments its API promises.
            unsafe { $crate::am::common::scan::ambeginscan::<<$am as $crate::am::common::IndexAm>::Scan>(index, nkeys, norderbys) }
        }

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn amrescan(
            scan: pgrx::pg_sys::IndexScanDesc,
            keys: pgrx::pg_sys::ScanKey,
            nkeys: std::ffi::c_int,
            orderbys: pgrx::pg_sys::ScanKey,
            norderbys: std::ffi::c_int,
        ) {
            // SAFETY: called by PostgreSQL with the arguments its API promises.
            unsafe {
                $crate::am::common::scan::amrescan::<<$am as $crate::am::common::IndexAm>::Scan>(scan, keys, nkeys, orderbys, norderbys)
            }
        }

        /// Unguarded: the buffered fast path calls no PostgreSQL function
        /// and catches its own panics; everything else goes through the
        /// guarded full path.
        unsafe extern "C-unwind" fn amgettuple(scan: pgrx::pg_sys::IndexScanDesc, direction: pgrx::pg_sys::ScanDirection::Type) -> bool {
            // SAFETY: called by PostgreSQL with the arguments its API promises.
            match unsafe { $crate::am::common::scan::amgettuple_buffered::<<$am as $crate::am::common::IndexAm>::Scan>(scan, direction) } {
                Some(found) => found,
                None => unsafe { amgettuple_full(scan, direction) },
            }
        }

        // Kept out of line: the fast path's frame stays small.
        #[inline(never)]
        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn amgettuple_full(
            scan: pgrx::pg_sys::IndexScanDesc,
            direction: pgrx::pg_sys::ScanDirection::Type,
        ) -> bool {
            // SAFETY: called by PostgreSQL with the arguments its API promises.
            unsafe { $crate::am::common::scan::amgettuple::<<$am as $crate::am::common::IndexAm>::Scan>(scan, direction) }
        }

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn amgetbitmap(scan: pgrx::pg_sys::IndexScanDesc, tbm: *mut pgrx::pg_sys::TIDBitmap) -> i64 {
            // SAFETY: called by PostgreSQL with the arguments its API promises.
            unsafe { $crate::am::common::scan::amgetbitmap::<<$am as $crate::am::common::IndexAm>::Scan>(scan, tbm) }
        }

        #[pgrx::pg_guard]
        unsafe extern "C-unwind" fn amendscan(scan: pgrx::pg_sys::IndexScanDesc) {
            // SAFETY: called by PostgreSQL with the arguments its API promises.
            unsafe { $crate::am::common::scan::amendscan::<<$am as $crate::am::common::IndexAm>::Scan>(scan) }
        }

        /// The access method's IndexAmRoutine.
        fn routine() -> pgrx::PgBox<pgrx::pg_sys::IndexAmRoutine> {
            let mut am = $crate::am::common::am::base_routine();
            am.amcanreturn = Some($crate::am::common::scan::amcanreturn);
            <$am as $crate::am::common::IndexAm>::capabilities(&mut am);
            am.ambuild = Some(ambuild);
            am.ambuildempty = Some(ambuildempty);
            am.aminsert = Some(aminsert);
            am.ambulkdelete = Some(ambulkdelete);
            am.amvacuumcleanup = Some(amvacuumcleanup);
            am.amcostestimate = Some(amcostestimate);
            am.amoptions = Some(amoptions);
            am.amvalidate = Some(amvalidate);
            am.ambeginscan = Some(ambeginscan);
            am.amrescan = Some(amrescan);
            am.amgettuple = Some(amgettuple);
            am.amgetbitmap = Some(amgetbitmap);
            am.amendscan = Some(amendscan);
            am.into_pg_boxed()
        }
    };
}

/// A routine with every capability off and no callbacks, except what all
/// gpuindex access methods share: one column, optional keys, parallel
/// bulk delete.
pub fn base_routine() -> pgrx::PgBox<pg_sys::IndexAmRoutine, pgrx::AllocatedByRust> {
    // SAFETY: a zeroed node of the right tag.
    let mut am = unsafe { pgrx::PgBox::<pg_sys::IndexAmRoutine>::alloc_node(pg_sys::NodeTag::T_IndexAmRoutine) };
    am.amoptionalkey = true;
    am.amparallelvacuumoptions = pg_sys::VACUUM_OPTION_PARALLEL_BULKDEL as u8;
    am.amkeytype = pg_sys::InvalidOid;
    am
}

//! Index scans of every access method: the access method's scan state
//! implements `IndexScan`; the callbacks here (which `index_am!` wires as
//! ambeginscan, amrescan, amgettuple, amgetbitmap and amendscan) keep it
//! in the scan descriptor's `opaque` (freed with the scan's memory
//! context), copy the keys, check the snapshot, fill in heap TIDs, ORDER BY
//! distances and index tuples (in a memory context of their own).

use pgrx::pg_sys;
use pgrx::prelude::*;

/// A match a scan returns.
pub struct Found {
    pub tid: pg_sys::ItemPointerData,
    /// Its ORDER BY distance (ordered scans; None: NULL).
    pub distance: Option<f64>,
}

/// What an access method's scan does; its state is `Self`.
pub trait IndexScan: Sized {
    /// For the MVCC error: this access method and the core one to use
    /// instead.
    const AM: &'static str;
    const INSTEAD: &'static str;
    /// A new scan's state (ambeginscan).
    fn begin(index: pg_sys::Relation, nkeys: usize, norderbys: usize) -> Self;
    /// The scan's keys changed (amrescan): they are in `scan.keyData` and
    /// `scan.orderByData`.
    fn rescan(&mut self, scan: &pg_sys::IndexScanDescData);
    /// The next match (amgettuple), in `forward` or backward direction.
    fn next(&mut self, scan: &pg_sys::IndexScanDescData, forward: bool) -> Option<Found>;
    /// The indexed value of the match `next` returned last (None: NULL),
    /// allocated in `ctx` if by reference, for index-only scans.
    fn value(&self, ctx: pg_sys::MemoryContext) -> Option<pg_sys::Datum>;
    /// The next match and its value if the scan already holds them in
    /// memory, found without calling PostgreSQL (no lock, no allocation,
    /// no ERROR): the fast path of amgettuple for scans without ORDER BY.
    /// Only a match whose value is not NULL (and, for index-only scans,
    /// by value, or by reference where `value_into` writes it); anything
    /// else is left for the full path (None), whose `next` then returns it.
    fn next_buffered(&mut self, _forward: bool) -> Option<(pg_sys::ItemPointerData, pg_sys::Datum)> {
        None
    }
    /// Whether the scan has no match left in direction `forward`, known
    /// without calling PostgreSQL (as `next_buffered`), where the fast
    /// path has no match to return; if so it is left where `next` leaves
    /// a scan at its end. False: the full path decides.
    fn exhausted(&mut self, _forward: bool) -> bool {
        false
    }
    /// The most bytes `value_into` writes; 0: it is not implemented, and
    /// index-only scans of by-reference values take the full path.
    const MAX_VALUE_BYTES: usize = 0;
    /// Writes the value of the match `next_buffered` returned last (never
    /// NULL) as an index tuple's data (a varlena with a 4-byte header, or
    /// the bytes of a fixed-length type) into `out`, calling no PostgreSQL
    /// function; returns its length.
    fn value_into(&self, _out: &mut [u8]) -> usize {
        unreachable!("MAX_VALUE_BYTES is 0")
    }
    /// Whether the ORDER BY distances `next` returns are lower bounds of
    /// the ordering operator's value, which the executor then recomputes
    /// and orders by (`xs_recheckorderby`).
    fn order_is_bound(&self) -> bool {
        false
    }
    /// Every match (amgetbitmap), given to `add` in pieces.
    fn all(&mut self, scan: &pg_sys::IndexScanDescData, add: &mut dyn FnMut(&mut [pg_sys::ItemPointerData]));
    /// Frees what the scan holds (amendscan).
    fn end(&mut self);
}

/// Gives `tids` to an amgetbitmap callback (`IndexScan::all`'s `add`) in
/// pieces of 4096.
pub fn add_in_pieces(tids: impl Iterator<Item = pg_sys::ItemPointerData>, add: &mut dyn FnMut(&mut [pg_sys::ItemPointerData])) {
    let mut piece: Vec<pg_sys::ItemPointerData> = Vec::with_capacity(4096);
    for tid in tids {
        piece.push(tid);
        if piece.len() == 4096 {
            add(&mut piece);
            piece.clear();
        }
    }
    add(&mut piece);
}

struct State<S> {
    am: S,
    /// The scan's memory context, where the two below are made when an
    /// index-only scan first needs them (a lookup by an index scan makes
    /// neither: `xs_want_itup` is set only after `ambeginscan`).
    scan_ctx: pg_sys::MemoryContext,
    /// Where index tuples of index-only scans live, reset at every tuple.
    tuple_ctx: pg_sys::MemoryContext,
    /// The last index tuple formed, when its one value is by value, fixed
    /// length and not NULL: the next such value is written over it (its
    /// data starts right after the 8-byte header) instead of forming one.
    reusable: Option<(*mut pg_sys::IndexTupleData, usize)>,
    /// An index tuple of MAX_VALUE_BYTES of data that `value_into` fills
    /// on the fast path of index-only scans of by-reference values.
    by_ref: *mut pg_sys::IndexTupleData,
}

/// Where an index tuple's data starts: past its header, MAXALIGNed (one
/// column, no NULL bitmap).
const ITUP_DATA: usize = std::mem::size_of::<pg_sys::IndexTupleData>().next_multiple_of(8);

/// The state `ambeginscan` stored.
///
/// # Safety
/// `scan` was started by `ambeginscan::<S>`.
unsafe fn state<'a, S>(scan: pg_sys::IndexScanDesc) -> &'a mut State<S> {
    // SAFETY: as the caller's; lives as long as the scan's memory context.
    unsafe { &mut *((*scan).opaque as *mut State<S>) }
}

/// A scan's state where `opaque` points, in the scan's memory context,
/// and the reset callback that drops it there (also after an ERROR,
/// when amendscan is not called).
#[repr(C)]
struct Held<S> {
    callback: pg_sys::MemoryContextCallback,
    state: State<S>,
}

#[pg_guard]
unsafe extern "C-unwind" fn drop_held<S>(arg: *mut std::ffi::c_void) {
    // SAFETY: `arg` is the `Held<S>` ambeginscan wrote, dropped once: the
    // context's memory goes after its callbacks.
    unsafe { std::ptr::drop_in_place(&mut (*(arg as *mut Held<S>)).state) }
}

/// # Safety
/// ambeginscan's arguments.
pub unsafe fn ambeginscan<S: IndexScan>(index: pg_sys::Relation, nkeys: i32, norderbys: i32) -> pg_sys::IndexScanDesc {
    const { assert!(std::mem::align_of::<Held<S>>() <= 8, "palloc's alignment") };
    // SAFETY: as the caller's. The scan descriptor and the state's memory
    // are allocated under one guard (their only calls that can raise an
    // ERROR), the state is written and its callback registered without.
    unsafe {
        use crate::unguarded as raw;
        let (scan, held) = raw::guarded(|| {
            (raw::RelationGetIndexScan(index, nkeys, norderbys), raw::palloc(std::mem::size_of::<Held<S>>()) as *mut Held<S>)
        });
        let state = State {
            am: S::begin(index, nkeys as usize, norderbys as usize),
            scan_ctx: pg_sys::CurrentMemoryContext,
            tuple_ctx: std::ptr::null_mut(),
            reusable: None,
            by_ref: std::ptr::null_mut(),
        };
        let callback = pg_sys::MemoryContextCallback { func: Some(drop_held::<S>), arg: held.cast(), next: std::ptr::null_mut() };
        held.write(Held { callback, state });
        raw::MemoryContextRegisterResetCallback(pg_sys::CurrentMemoryContext, &mut (*held).callback);
        (*scan).opaque = (&mut (*held).state as *mut State<S>).cast();
        if norderbys > 0 {
            let n = norderbys as usize;
            (*scan).xs_orderbyvals = pg_sys::palloc0(std::mem::size_of::<pg_sys::Datum>() * n) as *mut pg_sys::Datum;
            (*scan).xs_orderbynulls = pg_sys::palloc(n) as *mut bool;
            std::ptr::write_bytes((*scan).xs_orderbynulls, 1, n);
        }
        scan
    }
}

/// # Safety
/// amrescan's arguments, for a scan of `S`.
pub unsafe fn amrescan<S: IndexScan>(
    scan: pg_sys::IndexScanDesc,
    keys: pg_sys::ScanKey,
    nkeys: i32,
    orderbys: pg_sys::ScanKey,
    norderbys: i32,
) {
    // SAFETY: the scan has room for the counts it was begun with.
    unsafe {
        if !keys.is_null() && nkeys > 0 {
            std::ptr::copy(keys, (*scan).keyData, nkeys as usize);
        }
        if !orderbys.is_null() && norderbys > 0 {
            std::ptr::copy(orderbys, (*scan).orderByData, norderbys as usize);
        }
        state::<S>(scan).am.rescan(&*scan);
    }
}

/// Writes a by-value datum of `len` bytes over the value of an index
/// tuple of one such column without NULLs.
///
/// # Safety
/// `itup` was formed for a column of that length.
unsafe fn overwrite_value(itup: *mut pg_sys::IndexTupleData, len: usize, value: pg_sys::Datum) {
    // SAFETY: as the caller's; the data area is 8 bytes past the header
    // (MAXALIGN of IndexTupleData, no NULL bitmap) and aligned for `len`.
    unsafe {
        let data = (itup as *mut u8).add(ITUP_DATA);
        let v = value.value() as u64;
        match len {
            1 => *data = v as u8,
            2 => *(data as *mut u16) = v as u16,
            4 => *(data as *mut u32) = v as u32,
            _ => *(data as *mut u64) = v,
        }
    }
}

/// amgettuple's fast path: the next match already in memory, returned
/// without calling PostgreSQL (so without pgrx's guard, which costs as
/// much as the rest of a buffered tuple). None: take the full path.
///
/// # Safety
/// amgettuple's arguments, for a scan of `S`.
pub unsafe fn amgettuple_buffered<S: IndexScan>(scan: pg_sys::IndexScanDesc, direction: pg_sys::ScanDirection::Type) -> Option<bool> {
    let forward = direction != pg_sys::ScanDirection::BackwardScanDirection;
    // A panic here (none is expected) is caught and the full path, which
    // reports errors properly, runs instead.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: as the caller's.
        unsafe {
            if (*scan).numberOfOrderBys > 0 || (*scan).opaque.is_null() {
                return None;
            }
            let st = state::<S>(scan);
            let desc = (*(*scan).indexRelation).rd_att;
            // A by-reference column without a reusable tuple: the AM
            // writes its value into `by_ref` (one column, so attrs[0]).
            let by_ref = (*scan).xs_want_itup && st.reusable.is_none() && !st.by_ref.is_null() && {
                let att = &*(*desc).attrs.as_ptr();
                !att.attbyval
            };
            let itup = match ((*scan).xs_want_itup, st.reusable) {
                (false, _) => None,
                (true, Some(r)) => Some(r),
                (true, None) if by_ref => None,
                (true, None) => return st.am.exhausted(forward).then_some(false),
            };
            // The end of a lookup's matches is answered here too: the
            // full path's guard and code cost a lookup as much again.
            let Some((tid, value)) = st.am.next_buffered(forward) else { return st.am.exhausted(forward).then_some(false) };
            (*scan).xs_heaptid = tid;
            (*scan).xs_recheck = false;
            if let Some((itup, len)) = itup {
                overwrite_value(itup, len, value);
            }
            if by_ref {
                let data = std::slice::from_raw_parts_mut((st.by_ref as *mut u8).add(ITUP_DATA), S::MAX_VALUE_BYTES);
                let len = st.am.value_into(data);
                let varlena = (*(*desc).attrs.as_ptr()).attlen == -1;
                let info = (ITUP_DATA + len) as u32 | if varlena { pg_sys::INDEX_VAR_MASK } else { 0 };
                (*st.by_ref).t_info = info as u16;
                (*scan).xs_hitup = std::ptr::null_mut();
                (*scan).xs_itup = st.by_ref;
                (*scan).xs_itupdesc = desc;
            }
            Some(true)
        }
    }))
    .ok()
    .flatten()
}

/// Forms the index tuple of the match `next` returned last: in place over
/// the previous one where it can, else anew in the tuple context.
///
/// The longest varlena an index tuple of one column holds uncompressed
/// (INDEX_SIZE_MASK less headers, rounded down).
const MAX_INDEX_TUPLE_VALUE: usize = 8000;

/// # Safety
/// A scan of `S` that wants index tuples, after a match.
unsafe fn fill_itup<S: IndexScan>(scan: pg_sys::IndexScanDesc, st: &mut State<S>) {
    // SAFETY: as the caller's.
    unsafe {
        if st.tuple_ctx.is_null() {
            st.tuple_ctx = pg_sys::AllocSetContextCreateExtended(st.scan_ctx, c"gpuindex tuples".as_ptr(), 0, 1024, 8192);
        }
        if st.by_ref.is_null() && S::MAX_VALUE_BYTES > 0 {
            // For the fast path's next matches (it calls no PostgreSQL).
            st.by_ref = pg_sys::MemoryContextAllocZero(st.scan_ctx, ITUP_DATA + S::MAX_VALUE_BYTES) as *mut pg_sys::IndexTupleData;
        }
        // A reusable tuple means a by-value column: nothing is allocated.
        let value = if let Some((itup, len)) = st.reusable {
            let value = st.am.value(st.tuple_ctx);
            if let Some(v) = value {
                overwrite_value(itup, len, v);
                return;
            }
            pg_sys::MemoryContextReset(st.tuple_ctx);
            value
        } else {
            pg_sys::MemoryContextReset(st.tuple_ctx);
            st.am.value(st.tuple_ctx)
        };
        st.reusable = None;
        let desc = (*(*scan).indexRelation).rd_att;
        let (mut datum, mut null) = (value.unwrap_or(pg_sys::Datum::from(0)), value.is_none());
        let att = &(*desc).attrs.as_slice((*desc).natts as usize)[0];
        if !null && att.attlen == -1 && pgrx::varlena::varsize_any(datum.cast_mut_ptr()) > MAX_INDEX_TUPLE_VALUE {
            // Too long for an index tuple (gpu_art's long keys): a heap
            // tuple, which index-only scans take as well (SP-GiST's way).
            let old = pg_sys::MemoryContextSwitchTo(st.tuple_ctx);
            (*scan).xs_hitup = pg_sys::heap_form_tuple(desc, &mut datum, &mut null);
            pg_sys::MemoryContextSwitchTo(old);
            (*scan).xs_hitupdesc = desc;
            (*scan).xs_itup = std::ptr::null_mut();
            return;
        }
        (*scan).xs_hitup = std::ptr::null_mut();
        let itup = pg_sys::index_form_tuple_context(desc, &mut datum, &mut null, st.tuple_ctx);
        if !null && att.attbyval && matches!(att.attlen, 1 | 2 | 4 | 8) {
            st.reusable = Some((itup, att.attlen as usize));
        }
        (*scan).xs_itup = itup;
        (*scan).xs_itupdesc = desc;
    }
}

/// # Safety
/// amgettuple's arguments, for a scan of `S`.
pub unsafe fn amgettuple<S: IndexScan>(scan: pg_sys::IndexScanDesc, direction: pg_sys::ScanDirection::Type) -> bool {
    // SAFETY: as the caller's; the fields written are the scan's outputs.
    unsafe {
        check_snapshot(&*scan, S::AM, S::INSTEAD);
        let st = state::<S>(scan);
        let Some(found) = st.am.next(&*scan, direction != pg_sys::ScanDirection::BackwardScanDirection) else { return false };
        (*scan).xs_heaptid = found.tid;
        (*scan).xs_recheck = false;
        if (*scan).numberOfOrderBys > 0 {
            (*scan).xs_recheckorderby = st.am.order_is_bound();
            *(*scan).xs_orderbynulls = found.distance.is_none();
            *(*scan).xs_orderbyvals = found.distance.map_or(pg_sys::Datum::from(0), |d| d.into_datum().expect("float8 datum"));
        }
        if (*scan).xs_want_itup {
            fill_itup(scan, st);
        }
        true
    }
}

/// # Safety
/// amgetbitmap's arguments, for a scan of `S`.
pub unsafe fn amgetbitmap<S: IndexScan>(scan: pg_sys::IndexScanDesc, tbm: *mut pg_sys::TIDBitmap) -> i64 {
    // SAFETY: as the caller's.
    unsafe {
        check_snapshot(&*scan, S::AM, S::INSTEAD);
        let mut total = 0i64;
        state::<S>(scan).am.all(&*scan, &mut |tids| {
            total += tids.len() as i64;
            pg_sys::tbm_add_tuples(tbm, tids.as_mut_ptr(), tids.len() as i32, false);
        });
        total
    }
}

/// # Safety
/// amendscan's argument, for a scan of `S`.
pub unsafe fn amendscan<S: IndexScan>(scan: pg_sys::IndexScanDesc) {
    // SAFETY: as the caller's. The state itself is dropped with the scan's
    // memory context; its buffers are freed now.
    unsafe { state::<S>(scan).am.end() }
}

/// Scans that drop page locks between calls need an MVCC snapshot.
pub fn check_snapshot(scan: &pg_sys::IndexScanDescData, am: &str, instead: &str) {
    // SAFETY: xs_snapshot is set for every scan the executor runs.
    let t = unsafe { scan.xs_snapshot.as_ref().map(|s| s.snapshot_type) };
    if !matches!(t, Some(pg_sys::SnapshotType::SNAPSHOT_MVCC | pg_sys::SnapshotType::SNAPSHOT_HISTORIC_MVCC)) {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("{am} scans need an MVCC snapshot"),
            format!("{am} cannot serve exclusion constraints or CLUSTER; use {instead} for those."),
        );
    }
}

/// amcanreturn: every gpuindex index stores its one column's value
/// exactly, so index-only scans can return it, except on a hot standby.
/// An index-only scan trusts the visibility map, so a VACUUM must not
/// remove an entry's heap row between the scan reading the entry and
/// checking the map: on the primary VACUUM waits for the scan (cleanup
/// locks, or the lock gpu_spatial's removal of entries waits for), but
/// WAL replay takes plain exclusive locks and waits for no scan, and
/// replay of the map's bit cancels no query whose snapshot already sees
/// the row's deletion. nbtree's replay takes cleanup locks for this;
/// ours does not, so plans made during recovery read the heap (an index
/// scan), as the join does there (`visibility::line_pointers_answer`).
#[pg_guard]
pub unsafe extern "C-unwind" fn amcanreturn(_index: pg_sys::Relation, attno: std::ffi::c_int) -> bool {
    // SAFETY: a backend's shared-memory flag.
    attno == 1 && unsafe { !pg_sys::RecoveryInProgress() }
}

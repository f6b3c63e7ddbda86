//! Per-row executor work without pgrx's per-call FFI guard, which costs a
//! sigsetjmp and a thread check a call (about 9% of a 10^6-row join's
//! samples, most of them on its per-row calls): unguarded where the work
//! cannot raise an ERROR (`getsomeattrs` on PostgreSQL's own slot kinds,
//! `store_buffer_tuple`), and (`in_guard`) where it can, inside one guard
//! for a block of rows, so that no longjmp crosses Rust frames with
//! destructors.

use pgrx::pg_sys;

unsafe extern "C-unwind" {
    /// execTuples.c's; it raises only for an attribute number past the
    /// slot's descriptor (`getsomeattrs` never passes one) and for a virtual
    /// slot's columns (always all valid, so never asked for).
    #[link_name = "slot_getsomeattrs_int"]
    fn slot_getsomeattrs_int_unguarded(slot: *mut pg_sys::TupleTableSlot, attnum: std::ffi::c_int);
    #[link_name = "ExecStoreMinimalTuple"]
    fn exec_store_minimal_tuple_unguarded(
        mtup: pg_sys::MinimalTuple,
        slot: *mut pg_sys::TupleTableSlot,
        should_free: bool,
    ) -> *mut pg_sys::TupleTableSlot;
    #[link_name = "ExecReScan"]
    fn exec_rescan_unguarded(node: *mut pg_sys::PlanState);
    /// datum.c's (not in pgrx's bindings).
    #[link_name = "datumCopy"]
    fn datum_copy_unguarded(value: pg_sys::Datum, typbyval: bool, typlen: std::ffi::c_int) -> pg_sys::Datum;
}

/// A copy of a datum passed by reference of a type of length `typlen`, in
/// `cxt` (datumCopy: an expanded object flattened).
///
/// # Safety
/// `value` a non-NULL datum of such a type; `cxt` a live memory context.
pub unsafe fn datum_copy_in(cxt: pg_sys::MemoryContext, value: pg_sys::Datum, typlen: i16) -> pg_sys::Datum {
    // SAFETY: the caller's contract; an ERROR (out of memory) comes back
    // through the guard (and error recovery resets the current context).
    unsafe {
        let caller = pg_sys::CurrentMemoryContext;
        pg_sys::CurrentMemoryContext = cxt;
        let copy = pg_sys::ffi::pg_guard_ffi_boundary(|| datum_copy_unguarded(value, false, typlen.into()));
        pg_sys::CurrentMemoryContext = caller;
        copy
    }
}

/// PostgreSQL's calls (or their inline bodies) without the guard, for a
/// block of work that runs inside one `pg_guard_ffi_boundary`: an ERROR
/// in any of them jumps back to that guard as from one guarded call, so
/// nothing on the frames between may have a destructor, and nothing there
/// may call a guarded function (its ERROR would unwind as a panic through
/// the outer guard's sigsetjmp).
pub mod in_guard {
    use pgrx::pg_sys;

    /// ExecProcNode (executor.h's inline).
    ///
    /// # Safety
    /// Inside a guard; `node` initialised by ExecInitNode.
    pub unsafe fn exec_proc_node(node: *mut pg_sys::PlanState) -> *mut pg_sys::TupleTableSlot {
        // SAFETY: the caller's contract; ExecInitNode sets ExecProcNode.
        unsafe {
            if !(*node).chgParam.is_null() {
                super::exec_rescan_unguarded(node);
            }
            ((*node).ExecProcNode.unwrap_unchecked())(node)
        }
    }

    /// ExecCopySlotMinimalTuple (tuptable.h's inline), in the current
    /// memory context.
    ///
    /// # Safety
    /// Inside a guard; `slot` holds a row.
    pub unsafe fn copy_minimal_tuple(slot: *mut pg_sys::TupleTableSlot) -> pg_sys::MinimalTuple {
        // SAFETY: the caller's contract; every slot kind has this callback.
        unsafe { ((*(*slot).tts_ops).copy_minimal_tuple.unwrap_unchecked())(slot) }
    }

    /// ExecStoreMinimalTuple.
    ///
    /// # Safety
    /// Inside a guard; as ExecStoreMinimalTuple.
    pub unsafe fn store_minimal_tuple(mtup: pg_sys::MinimalTuple, slot: *mut pg_sys::TupleTableSlot) -> *mut pg_sys::TupleTableSlot {
        // SAFETY: the caller's contract.
        unsafe { super::exec_store_minimal_tuple_unguarded(mtup, slot, false) }
    }

    /// slot_getsomeattrs, any slot kind.
    ///
    /// # Safety
    /// Inside a guard; `slot` holds a row.
    pub unsafe fn getsomeattrs(slot: *mut pg_sys::TupleTableSlot, n: i32) {
        // SAFETY: the caller's contract.
        unsafe {
            if ((*slot).tts_nvalid as i32) < n {
                super::slot_getsomeattrs_int_unguarded(slot, n);
            }
        }
    }

    /// ExecEvalExpr (executor.h's inline).
    ///
    /// # Safety
    /// Inside a guard; `state` made by ExecInitExpr.
    pub unsafe fn eval_expr(state: *mut pg_sys::ExprState, econtext: *mut pg_sys::ExprContext, isnull: &mut bool) -> pg_sys::Datum {
        // SAFETY: the caller's contract; ExecInitExpr sets evalfunc.
        unsafe { ((*state).evalfunc.unwrap_unchecked())(state, econtext, isnull) }
    }
}

/// Whether `proj` (a node's projection of `targetlist`) only copies
/// columns of the scan tuple: every entry a plain column reference,
/// which ExecBuildProjectionInfo makes a copy step that cannot raise
/// (a system or whole-row column would be evaluated, so does not count).
///
/// # Safety
/// `targetlist` the plan's, `proj` null or built from it.
pub unsafe fn projects_columns(proj: *mut pg_sys::ProjectionInfo, targetlist: *mut pg_sys::List) -> bool {
    // SAFETY: the caller's plan nodes.
    unsafe {
        !proj.is_null()
            && crate::list::ptrs::<pg_sys::TargetEntry>(targetlist).into_iter().all(|tle| {
                let expr = (*tle).expr.cast::<pg_sys::Node>();
                crate::list::is_a(expr, pg_sys::NodeTag::T_Var) && (*expr.cast::<pg_sys::Var>()).varattno > 0
            })
    }
}

/// ExecProject (executor.h's inline) without the guard, for a projection
/// `projects_columns` accepted: a row a call, where the guard's sigsetjmp
/// and thread check were ~7% of a fused join's backend time (a local
/// profile of a 3.4M-row sum).
///
/// # Safety
/// `proj` accepted by `projects_columns`; its scan tuple in place, with
/// the columns it copies valid (a virtual slot filled whole, or one
/// deformed that far).
pub unsafe fn project_columns(proj: *mut pg_sys::ProjectionInfo) -> *mut pg_sys::TupleTableSlot {
    // SAFETY: the caller's contract: clearing a virtual slot and copying
    // columns into it raise nothing.
    unsafe {
        let state = &raw mut (*proj).pi_state;
        let slot = (*state).resultslot;
        ((*(*slot).tts_ops).clear.unwrap_unchecked())(slot);
        let econtext = (*proj).pi_exprContext;
        let old = pg_sys::CurrentMemoryContext;
        pg_sys::CurrentMemoryContext = (*econtext).ecxt_per_tuple_memory;
        let mut isnull = false;
        ((*state).evalfunc.unwrap_unchecked())(state, econtext, &mut isnull);
        pg_sys::CurrentMemoryContext = old;
        (*slot).tts_flags &= !(pg_sys::TTS_FLAG_EMPTY as u16);
        (*slot).tts_nvalid = (*(*slot).tts_tupleDescriptor).natts as i16;
        slot
    }
}

/// Whether `slot` is one of PostgreSQL's own slot kinds, whose
/// `getsomeattrs` takes a stored row apart without raising.
///
/// # Safety
/// `slot` a valid slot.
unsafe fn is_core(slot: *const pg_sys::TupleTableSlot) -> bool {
    // SAFETY: the caller's slot.
    let ops = unsafe { (*slot).tts_ops };
    std::ptr::eq(ops, &raw const pg_sys::TTSOpsBufferHeapTuple)
        || std::ptr::eq(ops, &raw const pg_sys::TTSOpsMinimalTuple)
        || std::ptr::eq(ops, &raw const pg_sys::TTSOpsHeapTuple)
        || std::ptr::eq(ops, &raw const pg_sys::TTSOpsVirtual)
}

/// slot_getsomeattrs: the first `n` columns of the stored row taken apart,
/// without the guard for PostgreSQL's own slot kinds (other kinds' code,
/// or a column past the descriptor, through the guarded call, which may
/// raise).
///
/// # Safety
/// `slot` a valid slot holding a row.
pub unsafe fn getsomeattrs(slot: *mut pg_sys::TupleTableSlot, n: i32) {
    // SAFETY: the caller's slot; what goes unguarded has nothing to raise.
    unsafe {
        if ((*slot).tts_nvalid as i32) >= n {
            return;
        }
        if is_core(slot) && n <= (*(*slot).tts_tupleDescriptor).natts {
            slot_getsomeattrs_int_unguarded(slot, n);
        } else {
            pg_sys::slot_getsomeattrs(slot, n);
        }
    }
}

/// ExecStoreBufferHeapTuple for a buffer heap slot. When the slot holds
/// `buf` already (a page's later rows), tts_buffer_heap_store_tuple changes
/// no pin and frees nothing: the store is these field writes, done here
/// without a call; otherwise the function does it.
///
/// # Safety
/// As ExecStoreBufferHeapTuple: `slot` a buffer heap slot, `tuple` on the
/// page of `buf`, pinned.
pub unsafe fn store_buffer_tuple(tuple: pg_sys::HeapTuple, slot: *mut pg_sys::TupleTableSlot, buf: pg_sys::Buffer) {
    // SAFETY: the caller's contract.
    unsafe {
        let bslot = slot.cast::<pg_sys::BufferHeapTupleTableSlot>();
        if (*bslot).buffer != buf || (*slot).tts_flags as u32 & pg_sys::TTS_FLAG_SHOULDFREE != 0 {
            pg_sys::ExecStoreBufferHeapTuple(tuple, slot, buf);
            return;
        }
        (*slot).tts_flags &= !(pg_sys::TTS_FLAG_EMPTY as u16);
        (*slot).tts_nvalid = 0;
        (*bslot).base.tuple = tuple;
        (*bslot).base.off = 0;
        (*slot).tts_tid = (*tuple).t_self;
        (*slot).tts_tableOid = (*tuple).t_tableOid;
    }
}

//! PostgreSQL `List`s, read and made from Rust.

use pgrx::pg_sys;

/// The cells of `list` (NIL: none).
///
/// # Safety
/// `list` is NIL or a valid List.
unsafe fn cells(list: *mut pg_sys::List) -> &'static [pg_sys::ListCell] {
    // SAFETY: the caller's contract; a List's cells are contiguous.
    unsafe {
        if list.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts((*list).elements, (*list).length as usize)
        }
    }
}

/// The pointers of a pointer list.
///
/// # Safety
/// As `cells`; a list of pointers.
pub unsafe fn ptrs<T>(list: *mut pg_sys::List) -> Vec<*mut T> {
    // SAFETY: the caller's contract.
    unsafe { cells(list).iter().map(|c| c.ptr_value.cast()).collect() }
}

/// The values of an integer list.
///
/// # Safety
/// As `cells`; an integer list.
pub unsafe fn ints(list: *mut pg_sys::List) -> Vec<i32> {
    // SAFETY: the caller's contract.
    unsafe { cells(list).iter().map(|c| c.int_value).collect() }
}

/// The values of an OID list.
///
/// # Safety
/// As `cells`; an OID list.
pub unsafe fn oids(list: *mut pg_sys::List) -> Vec<pg_sys::Oid> {
    // SAFETY: the caller's contract.
    unsafe { cells(list).iter().map(|c| c.oid_value).collect() }
}

/// A pointer list of `items`, in the current memory context.
pub fn of_ptrs<T>(items: &[*mut T]) -> *mut pg_sys::List {
    // SAFETY: lappend allocates in the current memory context.
    items.iter().fold(std::ptr::null_mut(), |l, &p| unsafe { pg_sys::lappend(l, p.cast()) })
}

/// An integer list of `items`.
pub fn of_ints(items: &[i32]) -> *mut pg_sys::List {
    // SAFETY: as of_ptrs.
    items.iter().fold(std::ptr::null_mut(), |l, &i| unsafe { pg_sys::lappend_int(l, i) })
}

/// An OID list of `items`.
pub fn of_oids(items: &[pg_sys::Oid]) -> *mut pg_sys::List {
    // SAFETY: as of_ptrs.
    items.iter().fold(std::ptr::null_mut(), |l, &o| unsafe { pg_sys::lappend_oid(l, o) })
}

/// Whether `node` is a node of type `tag`.
///
/// # Safety
/// `node` is null or a Node.
pub unsafe fn is_a<T>(node: *mut T, tag: pg_sys::NodeTag) -> bool {
    // SAFETY: the caller's contract.
    unsafe { !node.is_null() && (*node.cast::<pg_sys::Node>()).type_ == tag }
}

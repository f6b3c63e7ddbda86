//! SQL arrays as Rust values.

use pgrx::pg_sys;

/// The non-NULL elements of an array datum with their 1-based positions,
/// and the element type.
pub fn elements(d: pg_sys::Datum) -> (pg_sys::Oid, Vec<(i64, pg_sys::Datum)>) {
    // SAFETY: an SK_SEARCHARRAY argument is an array datum; deconstruct_array
    // returns palloc'd arrays of n elements.
    unsafe {
        let arr = pg_sys::pg_detoast_datum(d.cast_mut_ptr()) as *mut pg_sys::ArrayType;
        let elem_type = (*arr).elemtype;
        let (mut len, mut byval, mut align) = (0i16, false, 0 as std::ffi::c_char);
        pg_sys::get_typlenbyvalalign(elem_type, &mut len, &mut byval, &mut align);
        let (mut values, mut nulls, mut n) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
        pg_sys::deconstruct_array(arr, elem_type, len as i32, byval, align, &mut values, &mut nulls, &mut n);
        let out = (0..n as usize).filter(|&i| !*nulls.add(i)).map(|i| (i as i64 + 1, *values.add(i))).collect();
        (elem_type, out)
    }
}

//! Page layout: PostgreSQL's page header, contents from `CONTENT_START`, a
//! `Special` area at the end. Each page kind keeps fixed-width arrays
//! growing from the front (up to pd_lower) and from the back (down to
//! pd_upper); callers keep pd_lower and pd_upper exact, because GenericXLog
//! and full-page images treat the bytes between them as unused.

use pgrx::pg_sys;
use std::marker::PhantomData;

/// The special area of every gpuindex page: sibling links, fence keys, a
/// count, the page kind and level.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Special {
    pub right: u32,
    pub left: u32,
    /// Fence keys: every key on the page is in [low, high] (encoded keys);
    /// `low` is meaningless on a leftmost page, `high` on a rightmost one.
    pub low: u64,
    pub high: u64,
    pub count: u32,
    pub flags: u16,
    pub kind: u8,
    pub level: u8,
    /// Identifies gpuindex pages (and the access method) when checking.
    pub page_id: u16,
    pub _pad: [u8; 6],
}

const HEADER: usize = 24; // MAXALIGN(SizeOfPageHeaderData)
const SPECIAL: usize = std::mem::size_of::<Special>();
pub const CONTENT_START: usize = HEADER;
pub const CONTENT_BYTES: usize = pg_sys::BLCKSZ as usize - HEADER - SPECIAL;
const SPECIAL_START: usize = pg_sys::BLCKSZ as usize - SPECIAL;
const _: () = assert!(SPECIAL.is_multiple_of(8));

/// Types a page may be read as and written from: `repr(C)` (or
/// primitive) data for which every bit pattern is a valid value, with no
/// pointers or references, so a page's bytes can be viewed as them.
///
/// # Safety
/// Implement only for such types.
pub unsafe trait PageData: Copy {}

// SAFETY: primitives and PostgreSQL's plain TID struct (three u16).
unsafe impl PageData for u32 {}
unsafe impl PageData for u64 {}
unsafe impl PageData for pg_sys::ItemPointerData {}
// SAFETY: repr(C): 4 f64 and 8 u32, every bit pattern valid.
unsafe impl PageData for gpuindex_engine::gpics::tree::Node {}

/// A page read under a lock (shared or exclusive).
#[derive(Clone, Copy)]
pub struct PageRef<'a> {
    ptr: *const u8,
    _life: PhantomData<&'a [u8]>,
}

impl<'a> PageRef<'a> {
    /// # Safety
    /// `ptr` must be a locked page of BLCKSZ bytes, valid for 'a.
    pub unsafe fn new(ptr: *const u8) -> Self {
        PageRef { ptr, _life: PhantomData }
    }

    pub fn special(&self) -> Special {
        // SAFETY: the special area is at a fixed offset, 8-aligned.
        unsafe { *(self.ptr.add(SPECIAL_START) as *const Special) }
    }

    /// `n` values of T from content offset `at` (bytes from the front).
    pub fn front<T: PageData>(&self, at: usize, n: usize) -> &'a [T] {
        assert!(at + n * std::mem::size_of::<T>() <= CONTENT_BYTES);
        // SAFETY: in bounds (checked) and aligned by the layouts' design.
        unsafe { std::slice::from_raw_parts(self.ptr.add(CONTENT_START + at) as *const T, n) }
    }

    /// The i-th value of T stored from the back (element 0 ends at the
    /// special area).
    pub fn back<T: PageData>(&self, i: usize) -> T {
        let off = SPECIAL_START - (i + 1) * std::mem::size_of::<T>();
        assert!(off >= CONTENT_START);
        // SAFETY: in bounds; unaligned read for 6-byte items.
        unsafe { std::ptr::read_unaligned(self.ptr.add(off) as *const T) }
    }

    /// A struct at the start of the contents (the metapage).
    pub fn header<T: PageData>(&self) -> T {
        // SAFETY: T fits the contents (checked by callers' layouts).
        unsafe { std::ptr::read_unaligned(self.ptr.add(CONTENT_START) as *const T) }
    }
}

/// A page being changed (a GenericXLog copy, or a page being built).
pub struct PageMut<'a> {
    ptr: *mut u8,
    _life: PhantomData<&'a mut [u8]>,
}

impl<'a> PageMut<'a> {
    /// # Safety
    /// `ptr` must be an exclusively held page of BLCKSZ bytes, valid for 'a.
    pub unsafe fn new(ptr: *mut u8) -> Self {
        PageMut { ptr, _life: PhantomData }
    }

    pub fn as_ref(&self) -> PageRef<'_> {
        // SAFETY: same page.
        unsafe { PageRef::new(self.ptr) }
    }

    /// Formats an empty page with a special area.
    pub fn init(&mut self, special: Special) {
        // SAFETY: the page is ours to overwrite.
        unsafe { pg_sys::PageInit(self.ptr as pg_sys::Page, pg_sys::BLCKSZ as usize, SPECIAL) };
        self.set_special(special);
    }

    pub fn set_special(&mut self, special: Special) {
        // SAFETY: fixed, aligned offset within the page.
        unsafe { *(self.ptr.add(SPECIAL_START) as *mut Special) = special };
    }

    pub fn update_special(&mut self, f: impl FnOnce(&mut Special)) {
        let mut s = self.as_ref().special();
        f(&mut s);
        self.set_special(s);
    }

    /// Sets pd_lower/pd_upper for `front` bytes used at the front and
    /// `back` bytes at the back of the contents.
    pub fn set_used(&mut self, front: usize, back: usize) {
        assert!(front + back <= CONTENT_BYTES);
        // SAFETY: header fields within the page.
        unsafe {
            let h = self.ptr as *mut pg_sys::PageHeaderData;
            (*h).pd_lower = (CONTENT_START + front) as u16;
            (*h).pd_upper = (SPECIAL_START - back) as u16;
        }
    }

    pub fn front_mut<T: PageData>(&mut self, at: usize, n: usize) -> &mut [T] {
        assert!(at + n * std::mem::size_of::<T>() <= CONTENT_BYTES);
        // SAFETY: in bounds, aligned by design, exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(CONTENT_START + at) as *mut T, n) }
    }

    pub fn set_back<T: PageData>(&mut self, i: usize, v: T) {
        let off = SPECIAL_START - (i + 1) * std::mem::size_of::<T>();
        assert!(off >= CONTENT_START);
        // SAFETY: in bounds; unaligned write for 6-byte items.
        unsafe { std::ptr::write_unaligned(self.ptr.add(off) as *mut T, v) };
    }

    /// Moves back-stored elements [from, from + n) to start at `to`
    /// (overlap allowed), for inserts and removals in the back array.
    pub fn move_back<T: PageData>(&mut self, from: usize, to: usize, n: usize) {
        if n == 0 {
            return;
        }
        let size = std::mem::size_of::<T>();
        // Element i occupies [SPECIAL_START - (i+1)*size, SPECIAL_START - i*size):
        // elements [from, from+n) span one contiguous block ending at from.
        let src = SPECIAL_START - (from + n) * size;
        let dst = SPECIAL_START - (to + n) * size;
        assert!(src >= CONTENT_START && dst >= CONTENT_START);
        // SAFETY: both ranges lie in the page; copy handles overlap.
        unsafe { std::ptr::copy(self.ptr.add(src), self.ptr.add(dst), n * size) };
    }

    /// Stamps the page with the LSN of the WAL record that changed it.
    pub fn set_lsn(&mut self, lsn: pg_sys::XLogRecPtr) {
        // SAFETY: header field within the page.
        unsafe {
            (*(self.ptr as *mut pg_sys::PageHeaderData)).pd_lsn =
                pg_sys::PageXLogRecPtr { xlogid: (lsn >> 32) as u32, xrecoff: lsn as u32 };
        }
    }

    pub fn set_header<T: PageData>(&mut self, v: T) {
        assert!(std::mem::size_of::<T>() <= CONTENT_BYTES);
        // SAFETY: fits the contents.
        unsafe { std::ptr::write_unaligned(self.ptr.add(CONTENT_START) as *mut T, v) };
    }
}

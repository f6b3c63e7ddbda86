//! Page layout: PostgreSQL's page header, contents from `CONTENT_START`,
//! at the end a special area whose type each access method defines (its
//! links, counts, page kind and page id). Each page kind keeps fixed-width
//! arrays growing from the front (up to pd_lower) and from the back (down
//! to pd_upper); callers keep pd_lower and pd_upper exact, because
//! GenericXLog and full-page images treat the bytes between them as
//! unused. Pages are viewed as `PageRef<S>` / `PageMut<S>` of the access
//! method's special area `S`.

use gpuindex_engine::hbtree::line::prefetch;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::marker::PhantomData;

const HEADER: usize = 24; // MAXALIGN(SizeOfPageHeaderData)
pub const CONTENT_START: usize = HEADER;
const PAGE: usize = pg_sys::BLCKSZ as usize;

/// Types a page may be read as and written from: `repr(C)` (or
/// primitive) data for which every bit pattern is a valid value, with no
/// pointers or references, so a page's bytes can be viewed as them.
///
/// # Safety
/// Implement only for such types.
pub unsafe trait PageData: Copy {}

// SAFETY: primitives and PostgreSQL's plain TID struct (three u16).
unsafe impl PageData for u8 {}
unsafe impl PageData for u16 {}
unsafe impl PageData for u32 {}
unsafe impl PageData for u64 {}
unsafe impl PageData for f32 {}
unsafe impl PageData for pg_sys::ItemPointerData {}
// SAFETY: repr(C): 4 f64 and 8 u32, every bit pattern valid.
unsafe impl PageData for gpuindex_engine::gpics::tree::Node {}

/// An access method's special area: page data of a MAXALIGNed size.
pub trait SpecialArea: PageData {
    /// Its size, checked to keep the contents 8-aligned.
    const SIZE: usize = {
        assert!(std::mem::size_of::<Self>().is_multiple_of(8));
        std::mem::size_of::<Self>()
    };
}

/// Declares, in an access method's page module, `$special` (page data,
/// implemented by the caller) as its special area, and the page and buffer
/// types of its pages: `PageRef`, `PageMut`, `Shared`, `Exclusive`, and
/// `CONTENT_BYTES`.
#[macro_export]
macro_rules! page_types {
    ($special:ty) => {
        impl $crate::storage::SpecialArea for $special {}
        pub type PageRef<'a> = $crate::storage::PageRef<'a, $special>;
        pub type PageMut<'a> = $crate::storage::PageMut<'a, $special>;
        pub type Shared = $crate::storage::Shared<$special>;
        pub type Exclusive = $crate::storage::Exclusive<$special>;
        pub const CONTENT_BYTES: usize = $crate::storage::content_bytes::<$special>();
    };
}

/// The bytes between the header and a special area of type `S`.
pub const fn content_bytes<S: SpecialArea>() -> usize {
    PAGE - HEADER - S::SIZE
}

const fn special_start<S: SpecialArea>() -> usize {
    PAGE - S::SIZE
}

/// A page read under a lock (shared or exclusive).
pub struct PageRef<'a, S> {
    ptr: *const u8,
    _life: PhantomData<(&'a [u8], S)>,
}

impl<S> Clone for PageRef<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for PageRef<'_, S> {}

impl<'a, S: SpecialArea> PageRef<'a, S> {
    const SPECIAL_START: usize = special_start::<S>();
    const CONTENT_BYTES: usize = content_bytes::<S>();

    /// # Safety
    /// `ptr` must be a locked page of BLCKSZ bytes, valid for 'a.
    pub unsafe fn new(ptr: *const u8) -> Self {
        PageRef { ptr, _life: PhantomData }
    }

    /// Whether the page was never initialised (PageIsNew: all zeros, e.g.
    /// the relation was extended just before a crash).
    pub fn is_new(&self) -> bool {
        // SAFETY: the header is at the start of the page.
        unsafe { (*(self.ptr as *const pg_sys::PageHeaderData)).pd_upper == 0 }
    }

    /// The special area; an ERROR if the page's special area is not of
    /// type `S`'s size (a page of another access method or format).
    pub fn special(&self) -> S {
        // SAFETY: the header is at the start of the page.
        let pd_special = unsafe { (*(self.ptr as *const pg_sys::PageHeaderData)).pd_special } as usize;
        if pd_special != Self::SPECIAL_START {
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED,
                format!("page has a special area of {} bytes where {} are expected", PAGE.saturating_sub(pd_special), S::SIZE),
                "The index was written by another gpuindex version or is damaged: REINDEX it.",
            );
        }
        // SAFETY: the special area is at a fixed offset, 8-aligned.
        unsafe { *(self.ptr.add(Self::SPECIAL_START) as *const S) }
    }

    /// `n` values of T from content offset `at` (bytes from the front).
    pub fn front<T: PageData>(&self, at: usize, n: usize) -> &'a [T] {
        assert!(at + n * std::mem::size_of::<T>() <= Self::CONTENT_BYTES);
        // SAFETY: in bounds (checked) and aligned by the layouts' design.
        unsafe { std::slice::from_raw_parts(self.ptr.add(CONTENT_START + at) as *const T, n) }
    }

    /// The i-th value of T stored from the back (element 0 ends at the
    /// special area).
    pub fn back<T: PageData>(&self, i: usize) -> T {
        let off = Self::SPECIAL_START - (i + 1) * std::mem::size_of::<T>();
        assert!(off >= CONTENT_START);
        // SAFETY: in bounds; unaligned read for 6-byte items.
        unsafe { std::ptr::read_unaligned(self.ptr.add(off) as *const T) }
    }

    /// The bytes of the values `from..to` of `size` bytes each stored from
    /// the back (in memory value `to - 1` comes first).
    pub fn back_bytes(&self, size: usize, from: usize, to: usize) -> &'a [u8] {
        assert!(from <= to && to * size <= Self::SPECIAL_START - CONTENT_START);
        let (start, end) = (Self::SPECIAL_START - to * size, Self::SPECIAL_START - from * size);
        // SAFETY: in bounds (checked); bytes need no alignment.
        unsafe { std::slice::from_raw_parts(self.ptr.add(start), end - start) }
    }

    /// Starts loading the header's and the special area's lines (a hint:
    /// a cold page's reads are otherwise a chain of dependent misses).
    pub fn prefetch_ends(&self) {
        prefetch(self.ptr);
        prefetch(self.ptr.wrapping_add(Self::SPECIAL_START));
    }

    /// Starts loading the lines of content bytes `at..at + len` (a hint).
    pub fn prefetch_front(&self, at: usize, len: usize) {
        let (from, to) = (CONTENT_START + at, (CONTENT_START + at + len).min(Self::SPECIAL_START));
        for line in (from & !63..to).step_by(64) {
            prefetch(self.ptr.wrapping_add(line));
        }
    }

    /// Starts loading the line of back value `i` of `size` bytes (a hint).
    pub fn prefetch_back(&self, size: usize, i: usize) {
        prefetch(self.ptr.wrapping_add(Self::SPECIAL_START.saturating_sub((i + 1) * size)));
    }

    /// The page's first byte (BLCKSZ bytes follow), for a copy of it.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// pd_lower and pd_upper as content offsets: the front is used up to
    /// the first, the back from the second.
    pub fn used(&self) -> (usize, usize) {
        // SAFETY: the header is at the start of the page.
        let h = unsafe { &*(self.ptr as *const pg_sys::PageHeaderData) };
        (h.pd_lower as usize - CONTENT_START, h.pd_upper as usize - CONTENT_START)
    }

    /// A struct at the start of the contents (the metapage).
    pub fn header<T: PageData>(&self) -> T {
        // SAFETY: T fits the contents (checked by callers' layouts).
        unsafe { std::ptr::read_unaligned(self.ptr.add(CONTENT_START) as *const T) }
    }
}

/// A page being changed (a GenericXLog copy, or a page being built).
pub struct PageMut<'a, S> {
    ptr: *mut u8,
    _life: PhantomData<(&'a mut [u8], S)>,
}

impl<'a, S: SpecialArea> PageMut<'a, S> {
    const SPECIAL_START: usize = special_start::<S>();
    const CONTENT_BYTES: usize = content_bytes::<S>();

    /// # Safety
    /// `ptr` must be an exclusively held page of BLCKSZ bytes, valid for 'a.
    pub unsafe fn new(ptr: *mut u8) -> Self {
        PageMut { ptr, _life: PhantomData }
    }

    pub fn as_ref(&self) -> PageRef<'_, S> {
        // SAFETY: same page.
        unsafe { PageRef::new(self.ptr) }
    }

    /// Formats an empty page with a special area.
    pub fn init(&mut self, special: S) {
        // SAFETY: the page is ours to overwrite.
        unsafe { pg_sys::PageInit(self.ptr as pg_sys::Page, PAGE, S::SIZE) };
        self.set_special(special);
    }

    pub fn set_special(&mut self, special: S) {
        // SAFETY: fixed, aligned offset within the page.
        unsafe { *(self.ptr.add(Self::SPECIAL_START) as *mut S) = special };
    }

    pub fn update_special(&mut self, f: impl FnOnce(&mut S)) {
        let mut s = self.as_ref().special();
        f(&mut s);
        self.set_special(s);
    }

    /// Sets pd_lower/pd_upper for `front` bytes used at the front and
    /// `back` bytes at the back of the contents.
    pub fn set_used(&mut self, front: usize, back: usize) {
        assert!(front + back <= Self::CONTENT_BYTES);
        // SAFETY: header fields within the page.
        unsafe {
            let h = self.ptr as *mut pg_sys::PageHeaderData;
            (*h).pd_lower = (CONTENT_START + front) as u16;
            (*h).pd_upper = (Self::SPECIAL_START - back) as u16;
        }
    }

    pub fn front_mut<T: PageData>(&mut self, at: usize, n: usize) -> &mut [T] {
        assert!(at + n * std::mem::size_of::<T>() <= Self::CONTENT_BYTES);
        // SAFETY: in bounds, aligned by design, exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(CONTENT_START + at) as *mut T, n) }
    }

    pub fn set_back<T: PageData>(&mut self, i: usize, v: T) {
        let off = Self::SPECIAL_START - (i + 1) * std::mem::size_of::<T>();
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
        let src = Self::SPECIAL_START - (from + n) * size;
        let dst = Self::SPECIAL_START - (to + n) * size;
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
        assert!(std::mem::size_of::<T>() <= Self::CONTENT_BYTES);
        // SAFETY: fits the contents.
        unsafe { std::ptr::write_unaligned(self.ptr.add(CONTENT_START) as *mut T, v) };
    }
}

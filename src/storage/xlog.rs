//! One GenericXLog record over up to four exclusively locked pages. The
//! changes are made on copies returned by `register`; `finish` applies and
//! logs them atomically. A record dropped unfinished (an ERROR or panic
//! unwinding) is aborted: nothing is changed.

use super::buffer::Exclusive;
use super::page::{PageMut, SpecialArea};
use pgrx::pg_sys;

pub struct Xlog {
    state: *mut pg_sys::GenericXLogState,
    registered: std::cell::Cell<usize>,
}

impl Xlog {
    pub fn start(rel: pg_sys::Relation) -> Xlog {
        // SAFETY: plain call; the state is palloc'd in the current context.
        Xlog { state: unsafe { pg_sys::GenericXLogStart(rel) }, registered: std::cell::Cell::new(0) }
    }

    /// Registers a locked page; returns the copy to modify. `new_page`
    /// logs a full image (for pages initialised in this record).
    pub fn register<'a, S: SpecialArea>(&'a self, page: &'a Exclusive<S>, new_page: bool) -> PageMut<'a, S> {
        let n = self.registered.get();
        assert!(n < pg_sys::XLR_NORMAL_MAX_BLOCK_ID as usize, "GenericXLog takes at most 4 pages");
        self.registered.set(n + 1);
        let flags = if new_page { pg_sys::GENERIC_XLOG_FULL_IMAGE as i32 } else { 0 };
        // SAFETY: the buffer is exclusively locked for the record's life
        // (the borrow ties it to self).
        unsafe { PageMut::new(pg_sys::GenericXLogRegisterBuffer(self.state, page.buffer(), flags) as *mut u8) }
    }

    pub fn finish(mut self) {
        // SAFETY: state from GenericXLogStart, finished once.
        unsafe { pg_sys::GenericXLogFinish(self.state) };
        self.state = std::ptr::null_mut();
    }
}

impl Drop for Xlog {
    fn drop(&mut self) {
        if !self.state.is_null() {
            // SAFETY: unfinished state; abort frees it and changes nothing.
            unsafe { pg_sys::GenericXLogAbort(self.state) };
        }
    }
}

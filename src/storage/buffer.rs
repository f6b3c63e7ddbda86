//! Pinned, locked buffers as guards: dropping one unlocks and unpins it,
//! also when an ERROR unwinds.

use super::page::{PageMut, PageRef, SpecialArea};
use pgrx::pg_sys;
use std::marker::PhantomData;

/// The relation forks gpuindex writes: the main one, and the init fork
/// of an unlogged index (copied over the main fork at crash recovery).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fork {
    Main,
    Init,
}

impl Fork {
    pub fn number(self) -> pg_sys::ForkNumber::Type {
        match self {
            Fork::Main => pg_sys::ForkNumber::MAIN_FORKNUM,
            Fork::Init => pg_sys::ForkNumber::INIT_FORKNUM,
        }
    }
}

fn read_fork(rel: pg_sys::Relation, fork: Fork, block: u32) -> pg_sys::Buffer {
    // SAFETY: plain buffer-manager call; errors are raised as PostgreSQL ERRORs.
    unsafe { pg_sys::ReadBufferExtended(rel, fork.number(), block, pg_sys::ReadBufferMode::RBM_NORMAL, std::ptr::null_mut()) }
}

/// A pin on `block` of `rel`'s main fork, unlocked (callers release it).
pub fn read(rel: pg_sys::Relation, block: u32) -> pg_sys::Buffer {
    read_fork(rel, Fork::Main, block)
}

/// Starts loading the cache lines a search of the page reads first (the
/// header and first slots, the special area) together, while the lock is
/// taken, rather than one miss after another once it is.
///
/// # Safety
/// `buf` pinned.
pub(super) unsafe fn prefetch_head_and_tail(buf: pg_sys::Buffer) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a pinned buffer's page is BLCKSZ mapped bytes; prefetches
    // never fault.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let page = pg_sys::BufferGetPage(buf) as *const i8;
        for off in [0, 64, 128, 192, pg_sys::BLCKSZ as usize - 64] {
            _mm_prefetch::<_MM_HINT_T0>(page.add(off));
        }
    }
}

/// A pinned page under a share lock, of an access method whose pages
/// have special area `S`.
pub struct Shared<S> {
    buf: pg_sys::Buffer,
    /// Known when locked: asking BufferGetBlockNumber is a guarded call.
    block: u32,
    _special: PhantomData<S>,
}

impl<S: SpecialArea> Shared<S> {
    pub fn lock(rel: pg_sys::Relation, block: u32) -> Self {
        Self::lock_pinned(read(rel, block), block)
    }

    /// Share-locks `buf`, pinned by the caller and holding `block`; the
    /// guard releases both.
    fn lock_pinned(buf: pg_sys::Buffer, block: u32) -> Self {
        // SAFETY: buf is pinned.
        unsafe {
            prefetch_head_and_tail(buf);
            pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_SHARE as i32);
        }
        Shared { buf, block, _special: PhantomData }
    }

    /// The guard of `buf`, holding `block`, pinned and share-locked by
    /// the caller.
    pub(super) fn of_locked(buf: pg_sys::Buffer, block: u32) -> Self {
        Shared { buf, block, _special: PhantomData }
    }

    pub fn page(&self) -> PageRef<'_, S> {
        // SAFETY: the buffer is pinned and share-locked while self lives.
        unsafe { PageRef::new(pg_sys::BufferGetPage(self.buf) as *const u8) }
    }

    pub fn block(&self) -> u32 {
        self.block
    }
}

impl<S> Drop for Shared<S> {
    fn drop(&mut self) {
        // SAFETY: locked and pinned by this guard.
        unsafe { pg_sys::UnlockReleaseBuffer(self.buf) };
    }
}

/// Releases `pages` in their order, under one guard.
pub fn release_all<S>(pages: Vec<Shared<S>>) {
    let bufs = forget_guards(pages);
    // SAFETY: each locked and pinned by its guard, now forgotten; raw
    // calls only.
    unsafe { crate::unguarded::guarded(|| bufs.iter().for_each(|&b| crate::unguarded::UnlockReleaseBuffer(b))) }
}

/// The buffers of `pages`, their guards forgotten (still locked and
/// pinned): the caller releases them.
fn forget_guards<S>(pages: Vec<Shared<S>>) -> Vec<pg_sys::Buffer> {
    pages.into_iter().map(|p| std::mem::ManuallyDrop::new(p).buf).collect()
}

/// Buffer pins kept after their share locks were released: while a scan
/// holds the pin of the page its current items came from, VACUUM (which
/// takes a cleanup lock on each page it removes entries from) cannot
/// remove those entries, and so cannot mark their heap tuples unused and
/// the heap page all-visible before an index-only scan has returned them
/// (nbtree's interlock). A scan keeps the pin of one page at a time, as
/// nbtree does. Released explicitly; never in Drop, since at an abort the
/// resource owner has released them first.
///
/// The interlock matters only for entries whose heap tuples are dead to
/// the scan's snapshot. A heap page all-visible after its entries were
/// read (their pages' pins still held) holds only tuples visible to every
/// snapshot, which no VACUUM removes while the scan runs: such pages'
/// pins may go at once (`all_visible`, `release_if_all_visible`), which
/// matters to a scan reading many pages ahead, since with more than 8
/// pins held each pin and unpin in the backend is a hash-table lookup.
#[derive(Default)]
pub struct Pins {
    bufs: Vec<pg_sys::Buffer>,
    /// The scanned heap's map (none: no pin goes early).
    vm: super::VisibilityMap,
}

impl Pins {
    /// The pins of an index-only scan of `heap`.
    pub fn over(heap: pg_sys::Relation) -> Pins {
        Pins { bufs: Vec::new(), vm: super::VisibilityMap::of(heap) }
    }

    /// Keeps a pin on `page`'s buffer beyond its guard (taken while the
    /// guard still holds its lock, so no cleanup lock comes between).
    pub fn keep<S>(&mut self, page: &Shared<S>) {
        // SAFETY: the buffer is pinned by the guard; this adds a pin.
        unsafe { pg_sys::IncrBufferRefCount(page.buf) };
        self.bufs.push(page.buf);
    }

    /// Keeps the pins of `pages`, releasing only their locks (one pin
    /// fewer to take and drop than `keep`: with more than 8 pins held, each
    /// is a lookup in the backend's private refcount table), in their
    /// order, under one guard.
    pub fn keep_unlocked_all<S>(&mut self, pages: Vec<Shared<S>>) {
        let bufs = forget_guards(pages);
        // SAFETY: each locked and pinned by its guard, now forgotten: its pin
        // is this one's; raw calls only.
        unsafe {
            crate::unguarded::guarded(|| bufs.iter().for_each(|&b| crate::unguarded::LockBuffer(b, pg_sys::BUFFER_LOCK_UNLOCK as i32)))
        };
        self.bufs.extend(bufs);
    }

    /// Whether the heap page of every one of `tids` is all-visible now
    /// (false without a heap).
    pub fn all_visible<I: IntoIterator<Item = super::Tid>>(&mut self, tids: I) -> bool {
        self.vm.all_visible(tids)
    }

    /// Takes over `other`'s pins.
    pub fn append(&mut self, mut other: Pins) {
        self.bufs.append(&mut other.bufs);
        other.vm.release();
    }

    /// Releases them now if every one of `tids` (all entries read from the
    /// pinned pages) is on an all-visible heap page.
    pub fn release_if_all_visible<I: IntoIterator<Item = super::Tid>>(&mut self, tids: I) {
        if !self.bufs.is_empty() && self.vm.all_visible(tids) {
            self.release();
        }
    }

    /// Releases them (last kept first: the resource owner looks for a
    /// buffer from its newest on), and the map's.
    pub fn release(&mut self) {
        for buf in self.bufs.drain(..).rev() {
            // SAFETY: pinned by `keep` or `keep_unlocked` in this transaction.
            unsafe { pg_sys::ReleaseBuffer(buf) };
        }
        self.vm.release();
    }
}

/// A pinned page under an exclusive lock. Change it through an `Xlog`
/// record (or, during a build, directly followed by `mark_dirty`).
pub struct Exclusive<S> {
    pub(super) buf: pg_sys::Buffer,
    pub(super) _special: PhantomData<S>,
}

impl<S: SpecialArea> Exclusive<S> {
    pub fn lock(rel: pg_sys::Relation, block: u32) -> Self {
        let buf = read(rel, block);
        // SAFETY: buf is pinned.
        unsafe { pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32) };
        Exclusive { buf, _special: PhantomData }
    }

    /// An exclusive lock once no other backend holds a pin (VACUUM, before
    /// removing entries a scan may still be returning; see `Pins`).
    pub fn lock_for_cleanup(rel: pg_sys::Relation, block: u32) -> Self {
        let buf = read(rel, block);
        // SAFETY: buf is pinned.
        unsafe { pg_sys::LockBufferForCleanup(buf) };
        Exclusive { buf, _special: PhantomData }
    }

    pub fn page(&self) -> PageRef<'_, S> {
        // SAFETY: pinned and locked while self lives.
        unsafe { PageRef::new(pg_sys::BufferGetPage(self.buf) as *const u8) }
    }

    /// Direct write access, for bulk builds only (no WAL record; the build
    /// logs every page at its end with log_newpage_range).
    pub fn page_mut_unlogged(&mut self) -> PageMut<'_, S> {
        // SAFETY: exclusively locked while self lives.
        unsafe { PageMut::new(pg_sys::BufferGetPage(self.buf) as *mut u8) }
    }

    /// The page itself (not a copy), for a change made inside a critical
    /// section and logged with the caller's own WAL record.
    pub fn page_mut_in_place(&mut self) -> PageMut<'_, S> {
        // SAFETY: exclusively locked while self lives.
        unsafe { PageMut::new(pg_sys::BufferGetPage(self.buf) as *mut u8) }
    }

    pub fn mark_dirty(&self) {
        // SAFETY: exclusively locked buffer.
        unsafe { pg_sys::MarkBufferDirty(self.buf) };
    }

    pub fn block(&self) -> u32 {
        // SAFETY: valid pinned buffer.
        unsafe { pg_sys::BufferGetBlockNumber(self.buf) }
    }

    pub fn buffer(&self) -> pg_sys::Buffer {
        self.buf
    }
}

impl<S> Drop for Exclusive<S> {
    fn drop(&mut self) {
        // SAFETY: locked and pinned by this guard.
        unsafe { pg_sys::UnlockReleaseBuffer(self.buf) };
    }
}

/// Extends the relation by one page and returns it exclusively locked
/// (contents zeroed: the caller initialises it, in an Xlog record with
/// `new_page = true`, or directly during a build).
pub fn new_page<S: SpecialArea>(rel: pg_sys::Relation) -> Exclusive<S> {
    new_page_in(rel, Fork::Main)
}

/// The same, in `fork` (builds write the init fork too).
pub fn new_page_in<S: SpecialArea>(rel: pg_sys::Relation, fork: Fork) -> Exclusive<S> {
    // SAFETY: the extension lock serialises extenders, as nbtree does.
    unsafe {
        pg_sys::LockRelationForExtension(rel, pg_sys::ExclusiveLock as i32);
        let buf = read_fork(rel, fork, pg_sys::InvalidBlockNumber);
        pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
        pg_sys::UnlockRelationForExtension(rel, pg_sys::ExclusiveLock as i32);
        Exclusive { buf, _special: PhantomData }
    }
}

/// A page locked either way (a descent locks its target level
/// exclusively, the levels above shared).
pub enum Locked<S> {
    S(Shared<S>),
    X(Exclusive<S>),
}

impl<S: SpecialArea> Locked<S> {
    pub fn lock(rel: pg_sys::Relation, block: u32, exclusive: bool) -> Self {
        if exclusive {
            Locked::X(Exclusive::lock(rel, block))
        } else {
            Locked::S(Shared::lock(rel, block))
        }
    }
    pub fn page(&self) -> PageRef<'_, S> {
        match self {
            Locked::S(g) => g.page(),
            Locked::X(g) => g.page(),
        }
    }
    pub fn block(&self) -> u32 {
        match self {
            Locked::S(g) => g.block(),
            Locked::X(g) => g.block(),
        }
    }
}

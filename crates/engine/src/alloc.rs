//! A global allocator for the extension (Linux): the system allocator for
//! everything but large blocks (1 MiB and up: a batch's keys, orders,
//! matches), which are mapped directly and, when freed, kept for the
//! process's next batches, up to `set_retained` bytes (the extension's
//! `gpuindex.retained_memory`, 1 GB by default, as `gpuindex.batch_work_mem`).
//!
//! Why: every batch allocates its large vectors afresh, and glibc gives
//! blocks that large back to the kernel when they are freed, so each batch
//! touched them as new pages again: a 10^6-row GpuIndexJoin chunk took
//! ~22,000 page faults a run (~10% of its time on a 2-core machine); a
//! block kept here is reused without one. A block that `realloc`
//! outgrows moves into a kept block that fits, else grows by `mremap`
//! (its pages move, nothing is copied).
//!
//! Each large block starts with a page-sized header holding its mapped
//! length, so a block serves any request that fits it and the alignment
//! of what it returns is the page's. A kept block stays as it is while it
//! is reused; once it has lain unused for a second (`advise_idle`, which
//! the extension calls from a thread of its own) its pages past the header
//! are given to the kernel lazily (`MADV_FREE`): they stay mapped and are
//! reused unless memory runs short, when the kernel takes them back (and a
//! batch that reuses the block faults them in as before). So what an idle
//! backend keeps is not memory it holds from others.
//!
//! Why not advise each block as it is freed: a page written after
//! `MADV_FREE` takes a fault (~0.2 us, against ~0.015 us to rewrite a
//! kept page, on the development host), and the advice walks the block's
//! page table (~0.1-0.3 us a page). A batch of millions of matches frees
//! and reuses a few hundred MB of blocks in one statement (its vectors'
//! growth, its pieces, its chunks): advising each as it was freed took a
//! 2.3M-match count from 67 to 78 ms locally.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Requests from this size up are large blocks.
const LARGE: usize = 1 << 20;
/// The header: one page, which also bounds the alignment served.
const HEADER: usize = 4096;
/// Mappings are made in steps of this, so that nearby sizes share blocks.
const STEP: usize = 2 << 20;
/// Blocks kept at most.
const SLOTS: usize = 32;

/// Bytes of freed blocks kept.
static RETAIN: AtomicUsize = AtomicUsize::new(1 << 30);

pub struct Allocator;

/// A kept block's `freed` once it has been advised.
const ADVISED: u64 = u64::MAX;

/// A freed block: its mapping, and when it was freed (`now_ms`) or
/// `ADVISED`.
#[derive(Clone, Copy)]
struct Block {
    base: usize,
    len: usize,
    freed: u64,
}

/// Freed blocks, oldest first.
struct Kept {
    blocks: [Block; SLOTS],
    n: usize,
    bytes: usize,
}

/// A spin lock: the allocator may not allocate, block on the backend's
/// latches, or take a lock that allocates (rayon's threads free here too).
struct Cache {
    lock: AtomicBool,
    kept: UnsafeCell<Kept>,
}

// SAFETY: `kept` is only reached under `lock`.
unsafe impl Sync for Cache {}

static CACHE: Cache = Cache {
    lock: AtomicBool::new(false),
    kept: UnsafeCell::new(Kept { blocks: [Block { base: 0, len: 0, freed: 0 }; SLOTS], n: 0, bytes: 0 }),
};

impl Cache {
    fn with<R>(&self, f: impl FnOnce(&mut Kept) -> R) -> R {
        while self.lock.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::hint::spin_loop();
        }
        // SAFETY: the lock is held; `f` neither allocates nor panics.
        let r = f(unsafe { &mut *self.kept.get() });
        self.lock.store(false, Ordering::Release);
        r
    }
}

impl Kept {
    /// Takes the smallest kept block of at least `need` bytes (and at
    /// most twice that: a big block stays for a big request).
    fn take(&mut self, need: usize) -> Option<(usize, usize)> {
        let i = (0..self.n).filter(|&i| (need..=2 * need + STEP).contains(&self.blocks[i].len)).min_by_key(|&i| self.blocks[i].len)?;
        let block = self.remove(i);
        Some((block.base, block.len))
    }

    fn remove(&mut self, i: usize) -> Block {
        let block = self.blocks[i];
        self.blocks.copy_within(i + 1..self.n, i);
        self.n -= 1;
        self.bytes -= block.len;
        block
    }

    /// Keeps `block` within `limit`, the oldest blocks evicted into
    /// `evicted` (their count returned) to make room; false if it cannot
    /// be kept.
    fn keep(&mut self, block: (usize, usize), limit: usize, evicted: &mut [(usize, usize); SLOTS]) -> (bool, usize) {
        if block.1 > limit {
            return (false, 0);
        }
        let out = self.evict(|k| k.n == SLOTS || k.bytes + block.1 > limit, evicted);
        self.blocks[self.n] = Block { base: block.0, len: block.1, freed: now_ms() };
        self.n += 1;
        self.bytes += block.1;
        (true, out)
    }

    /// Takes out into `out` the blocks not advised that were freed
    /// `idle_ms` or more before `now`; their count, and the ms until the
    /// next block left is due (None: none left to advise).
    fn take_idle(&mut self, now: u64, idle_ms: u64, out: &mut [(usize, usize); SLOTS]) -> (usize, Option<u64>) {
        let (mut n, mut next) = (0, None::<u64>);
        let mut i = 0;
        while i < self.n {
            let b = self.blocks[i];
            if b.freed == ADVISED {
                i += 1;
            } else if now.saturating_sub(b.freed) >= idle_ms {
                self.remove(i);
                out[n] = (b.base, b.len);
                n += 1;
            } else {
                let due = b.freed + idle_ms - now;
                next = Some(next.map_or(due, |d| d.min(due)));
                i += 1;
            }
        }
        (n, next)
    }

    /// Puts advised blocks back as the oldest, within `limit`; those that
    /// no longer fit (blocks kept meanwhile) go into `evicted`, their count
    /// returned.
    fn put_back(&mut self, advised: &[(usize, usize)], limit: usize, evicted: &mut [(usize, usize); SLOTS]) -> usize {
        let mut out = 0;
        for &(base, len) in advised.iter().rev() {
            if self.n == SLOTS || self.bytes + len > limit {
                evicted[out] = (base, len);
                out += 1;
                continue;
            }
            self.blocks.copy_within(0..self.n, 1);
            self.blocks[0] = Block { base, len, freed: ADVISED };
            self.n += 1;
            self.bytes += len;
        }
        out
    }

    /// Evicts the oldest blocks into `evicted` while `full` says so; their
    /// count.
    fn evict(&mut self, full: impl Fn(&Kept) -> bool, evicted: &mut [(usize, usize); SLOTS]) -> usize {
        let mut out = 0;
        while self.n > 0 && full(self) {
            let b = self.remove(0);
            evicted[out] = (b.base, b.len);
            out += 1;
        }
        out
    }
}

fn is_large(layout: Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= HEADER
}

/// The base and mapped length of the large block at `ptr`.
///
/// # Safety
/// `ptr` returned by this allocator for a large layout.
unsafe fn block_of(ptr: *mut u8) -> (usize, usize) {
    // SAFETY: the header precedes the block and holds its length.
    unsafe {
        let base = ptr.sub(HEADER);
        (base as usize, *base.cast::<usize>())
    }
}

/// A new mapping for `need` bytes (header included), or null.
fn map(need: usize) -> *mut u8 {
    let len = need.div_ceil(STEP) * STEP;
    // SAFETY: an anonymous private mapping; its length written into its
    // first page.
    unsafe {
        let base =
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        if base == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        *base.cast::<usize>() = len;
        base.cast::<u8>().add(HEADER)
    }
}

fn unmap(blocks: &[(usize, usize)]) {
    for &(base, len) in blocks {
        // SAFETY: a mapping this allocator made and no longer hands out.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
    }
}

/// A kept block for `need` bytes (header included), or null.
fn reuse(need: usize) -> *mut u8 {
    match CACHE.with(|k| k.take(need)) {
        // SAFETY: a kept mapping of at least `need` bytes.
        Some((base, _)) => unsafe { (base as *mut u8).add(HEADER) },
        None => std::ptr::null_mut(),
    }
}

/// The system's page size (at least the header's).
fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    let mut p = PAGE.load(Ordering::Relaxed);
    if p == 0 {
        // SAFETY: a plain query.
        p = (unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize).max(HEADER);
        PAGE.store(p, Ordering::Relaxed);
    }
    p
}

/// A large block for `size` bytes: a kept one, or (true) a new mapping,
/// which reads as zeros; null if none can be mapped.
fn large_block(size: usize) -> (*mut u8, bool) {
    let need = size + HEADER;
    let p = reuse(need);
    if p.is_null() {
        (map(need), true)
    } else {
        (p, false)
    }
}

/// Keeps the large block at `ptr` for reuse, or unmaps it.
///
/// # Safety
/// As `block_of`; the block is no longer used.
unsafe fn release(ptr: *mut u8) {
    // SAFETY: the caller's contract.
    let block = unsafe { block_of(ptr) };
    let mut evicted = [(0, 0); SLOTS];
    let (kept, out) = CACHE.with(|k| k.keep(block, RETAIN.load(Ordering::Relaxed), &mut evicted));
    unmap(&evicted[..out]);
    if !kept {
        unmap(&[block]);
    }
}

/// A monotonic clock in ms (coarse: a few ms; no system call).
fn now_ms() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a clock read into a local.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// Gives the pages of the kept blocks that have lain unused `idle_ms` or
/// more to the kernel to take back when it needs them (`MADV_FREE`; an
/// error, on a kernel without it, leaves them as they are). Each block is
/// taken out of the cache while it is advised (other threads may allocate
/// meanwhile) and put back as the oldest. Returns the ms until the next
/// kept block is due, None if none is left to advise.
pub fn advise_idle(idle_ms: u64) -> Option<u64> {
    let mut out = [(0, 0); SLOTS];
    let (n, next) = CACHE.with(|k| k.take_idle(now_ms(), idle_ms, &mut out));
    if n > 0 {
        let page = page_size();
        for &(base, len) in &out[..n] {
            // SAFETY: kept mappings that nothing uses until reused; the
            // header's page stays.
            unsafe { libc::madvise((base + page) as *mut libc::c_void, len - page, libc::MADV_FREE) };
        }
        let mut evicted = [(0, 0); SLOTS];
        let dropped = CACHE.with(|k| k.put_back(&out[..n], RETAIN.load(Ordering::Relaxed), &mut evicted));
        unmap(&evicted[..dropped]);
    }
    next
}

/// Sets how many bytes of freed large blocks are kept, dropping the
/// oldest kept blocks beyond it.
pub fn set_retained(bytes: usize) {
    RETAIN.store(bytes, Ordering::Relaxed);
    let mut evicted = [(0, 0); SLOTS];
    let out = CACHE.with(|k| k.evict(|k| k.bytes > bytes, &mut evicted));
    unmap(&evicted[..out]);
}

/// (kept blocks, their bytes).
pub fn kept() -> (usize, usize) {
    CACHE.with(|k| (k.n, k.bytes))
}

// SAFETY: large blocks are mappings of at least their size plus the
// header, aligned to the page, never handed out twice; the rest is the
// system allocator's.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !is_large(layout) {
            // SAFETY: the caller's layout.
            return unsafe { System.alloc(layout) };
        }
        large_block(layout.size()).0
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !is_large(layout) {
            // SAFETY: the caller's layout.
            return unsafe { System.alloc_zeroed(layout) };
        }
        let (p, new) = large_block(layout.size());
        if !new {
            // SAFETY: a kept block of at least the layout's size.
            unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_large(layout) {
            // SAFETY: allocated as a large block for this layout.
            unsafe { release(ptr) }
        } else {
            // SAFETY: the system allocator's block.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's block, layout and size (GlobalAlloc::realloc).
        unsafe {
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            if !is_large(layout) && !is_large(new_layout) {
                return System.realloc(ptr, layout, new_size);
            }
            if is_large(layout) && is_large(new_layout) {
                let (base, len) = block_of(ptr);
                let need = new_size + HEADER;
                if need <= len {
                    return ptr;
                }
                // A kept block takes a copy; otherwise the mapping grows
                // where it is or moves (its pages, not their bytes).
                let kept = reuse(need);
                if !kept.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, kept, layout.size());
                    release(ptr);
                    return kept;
                }
                let grown = need.div_ceil(STEP) * STEP;
                let moved = libc::mremap(base as *mut libc::c_void, len, grown, libc::MREMAP_MAYMOVE);
                if moved == libc::MAP_FAILED {
                    return std::ptr::null_mut();
                }
                *moved.cast::<usize>() = grown;
                return moved.cast::<u8>().add(HEADER);
            }
            // Between a small and a large block: a new one and a copy.
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the cache is the process's, and tests run in parallel.
    #[test]
    fn large_blocks_are_kept_reused_grown_and_bounded() {
        let a = Allocator;
        set_retained(64 << 20);
        let mb = |n: usize| Layout::from_size_align(n << 20, 8).unwrap();
        // SAFETY: blocks of this allocator, used within their layouts.
        unsafe {
            let p = a.alloc(mb(3));
            p.write_bytes(7, 3 << 20);
            a.dealloc(p, mb(3));
            assert_eq!(kept(), (1, 4 << 20));
            // The kept block serves a request that fits it, zeroed if asked.
            let q = a.alloc_zeroed(mb(2));
            assert_eq!(q, p);
            assert!(std::slice::from_raw_parts(q, 2 << 20).iter().all(|&b| b == 0));
            assert_eq!(kept(), (0, 0));
            // Growth within the mapping stays in place; beyond it the
            // contents move with it.
            q.write_bytes(9, 2 << 20);
            let r = a.realloc(q, mb(2), (3 << 20) + 100);
            assert_eq!(r, q);
            let r = a.realloc(r, Layout::from_size_align((3 << 20) + 100, 8).unwrap(), 9 << 20);
            assert!(std::slice::from_raw_parts(r, 2 << 20).iter().all(|&b| b == 9));
            r.add((9 << 20) - 1).write(1);
            // Shrinking to a small block copies what is left.
            let s = a.realloc(r, mb(9), 1000);
            assert!(std::slice::from_raw_parts(s, 1000).iter().all(|&b| b == 9));
            a.dealloc(s, Layout::from_size_align(1000, 8).unwrap());
            assert_eq!(kept(), (1, 10 << 20));
            // A much larger kept block is not handed to a small request.
            let t = a.alloc(mb(1));
            assert_eq!(kept(), (1, 10 << 20));
            a.dealloc(t, mb(1));
            assert_eq!(kept(), (2, 12 << 20));
            // Alignments above a page are the system allocator's.
            let big_align = Layout::from_size_align(2 << 20, 1 << 16).unwrap();
            let u = a.alloc(big_align);
            assert_eq!(u as usize % (1 << 16), 0);
            a.dealloc(u, big_align);
            assert_eq!(kept(), (2, 12 << 20));
            // The limit: the oldest blocks go first; 0 keeps none.
            set_retained(0);
            set_retained(64 << 20);
            let blocks: Vec<*mut u8> = (0..8).map(|_| a.alloc(mb(7))).collect();
            for &b in &blocks {
                a.dealloc(b, mb(7));
            }
            assert_eq!(kept(), (8, 64 << 20));
            set_retained(20 << 20);
            assert_eq!(kept(), (2, 16 << 20));
            let w = a.alloc(mb(9));
            a.dealloc(w, mb(9));
            assert_eq!(kept(), (2, 18 << 20));
            // Blocks idle long enough are advised, stay kept (as the
            // oldest, in their order) and are handed out as before; advised
            // blocks are not advised again, and a block kept again waits
            // its time.
            set_retained(0);
            set_retained(32 << 20);
            let blocks: Vec<*mut u8> = (0..4).map(|_| a.alloc(mb(5))).collect();
            for &b in &blocks[..3] {
                b.write_bytes(5, 5 << 20);
                a.dealloc(b, mb(5));
            }
            let state = || CACHE.with(|k| k.blocks[..k.n].iter().map(|b| (b.base, b.freed == ADVISED)).collect::<Vec<_>>());
            let base = |p: *mut u8| p as usize - HEADER;
            assert!(advise_idle(60_000).is_some_and(|ms| ms > 50_000));
            assert!(state().iter().all(|b| !b.1));
            assert_eq!(advise_idle(0), None);
            assert_eq!(state(), blocks[..3].iter().map(|&p| (base(p), true)).collect::<Vec<_>>());
            blocks[3].write_bytes(5, 5 << 20);
            a.dealloc(blocks[3], mb(5));
            assert!(advise_idle(60_000).is_some());
            assert_eq!(state().iter().filter(|b| b.1).count(), 3);
            let x = a.alloc(mb(5));
            assert_eq!(x, blocks[0]);
            x.write_bytes(1, 5 << 20);
            a.dealloc(x, mb(5));
            assert_eq!(kept(), (4, 24 << 20));
            assert_eq!(advise_idle(0), None);
            assert!(state().iter().all(|b| b.1));
            set_retained(0);
            assert_eq!(kept(), (0, 0));
            let v = a.alloc(mb(5));
            a.dealloc(v, mb(5));
            assert_eq!(kept(), (0, 0));
            set_retained(1 << 30);
        }
    }
}

//! Pages pinned through the buffer each was last found in. A batch
//! reads a table's matched rows in TID order, and on random rows most of
//! a row's time is the buffer mapping's hash lookup and the cache misses
//! of the buffer header, page header and line pointer, one after another.
//! This backend remembers, per table block, the shared buffer it last
//! pinned it in: `ReadRecentBuffer` pins that buffer after checking its
//! tag (no hash lookup), and the buffer header, page header and line
//! pointer of a page a few pages ahead can be prefetched, overlapping
//! those misses. A remembered buffer is only a hint: one that holds
//! another page now fails the tag check and the block is read as usual.
//!
//! Kept for the last few relations read (keyed by their files, so a
//! rewrite starts afresh), 4 bytes a block, for the first `MAX_BLOCKS`
//! blocks of each; temporary relations (local buffers) are read as usual.
//! Readers of one table share its memory, nested ones too: a join back by
//! ctid holds the table's while the batch function under it (its outer
//! side) resolves the same rows' visibility, and each finds the pages the
//! other pinned.
//!
//! Used by every batch that reads matched rows (the join's heap fetches
//! and TID probes, the batch functions' visibility pass) and by
//! the leaf reads of gpu_btree's leaf step, gpu_art's hinted walks and
//! gpu_learned's run scans and batches.

use super::Tid;
use pgrx::pg_sys;
use rustc_hash::FxHashMap as HashMap;
use std::cell::RefCell;
use std::rc::Rc;

/// Blocks remembered per table: a 32 GiB table's, in a 16 MiB array.
const MAX_BLOCKS: usize = 1 << 22;
/// Tables, and blocks of all of them, remembered; past either, the memory
/// starts afresh (at most 32 MiB a backend).
const MAX_TABLES: usize = 16;
const MAX_TOTAL_BLOCKS: usize = 1 << 23;
/// Pages ahead of the one being read whose buffer header, page header and
/// line pointers are asked for (a miss each, overlapped).
const PAGES_AHEAD: usize = 8;
/// Pages ahead whose rows are asked for, from the line pointers asked for
/// `PAGES_AHEAD - ROWS_AHEAD` pages earlier: a row is the last miss of
/// the chain (its columns are read as soon as it is fetched).
const ROWS_AHEAD: usize = 4;

type FileKey = (pg_sys::Oid, pg_sys::Oid, pg_sys::Oid);
/// Buffer of each block (InvalidBuffer: not known).
type Buffers = Rc<RefCell<Vec<pg_sys::Buffer>>>;

thread_local! {
    static RECENT: RefCell<HashMap<FileKey, Buffers>> = RefCell::new(HashMap::default());
}

/// Asks the CPU to bring the line at `p` into its cache (nothing where
/// the target has no such hint). Never faults, whatever `p` is.
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it reads nothing the program sees.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Where line pointer `offset` (from 1; 0 read as 1) lies in a heap page.
fn line_pointer_at(offset: u16) -> usize {
    std::mem::size_of::<pg_sys::PageHeaderData>() + 4 * (offset as usize).saturating_sub(1)
}

/// The shared-buffer table of one relation, while a batch reads it.
pub struct RecentPages {
    rel: pg_sys::Relation,
    /// None for a table in local buffers.
    buffers: Option<Buffers>,
}

impl RecentPages {
    /// This backend's memory of `rel`'s pages.
    pub fn of(rel: pg_sys::Relation) -> RecentPages {
        // SAFETY: an open relation.
        let local = unsafe { (*(*rel).rd_rel).relpersistence == pg_sys::RELPERSISTENCE_TEMP as std::ffi::c_char };
        let buffers = (!local).then(|| {
            let file = crate::compat::file_key(rel);
            RECENT.with_borrow_mut(|m| {
                if !m.contains_key(&file) && m.len() >= MAX_TABLES {
                    m.clear();
                }
                m.entry(file).or_default().clone()
            })
        });
        RecentPages { rel, buffers }
    }

    /// The buffers remembered for the table's first blocks (InvalidBuffer:
    /// not known), for a parallel worker (`seed`): a worker starts with
    /// none, and without them each of its pages costs the buffer mapping's
    /// lookup, whose partition locks the participants share.
    pub fn with_known_buffers<R>(&self, f: impl FnOnce(&[pg_sys::Buffer]) -> R) -> R {
        match self.buffers.as_ref() {
            Some(b) => f(&b.borrow()),
            None => f(&[]),
        }
    }

    /// Remembers `buffers` for the table's first blocks where this backend
    /// knows none (a worker's first read of it): hints from the leader,
    /// which `ReadRecentBuffer` checks as any other.
    pub fn seed(&mut self, buffers: &[pg_sys::Buffer]) {
        let Some(b) = self.buffers.as_ref() else { return };
        let mut v = b.borrow_mut();
        let n = buffers.len().min(MAX_BLOCKS);
        if v.len() < n {
            v.resize(n, pg_sys::InvalidBuffer as pg_sys::Buffer);
        }
        for (mine, &theirs) in v.iter_mut().zip(&buffers[..n]) {
            if *mine == pg_sys::InvalidBuffer as pg_sys::Buffer {
                *mine = theirs;
            }
        }
    }

    fn known(&self, block: u32) -> Option<pg_sys::Buffer> {
        let b = *self.buffers.as_ref()?.borrow().get(block as usize)?;
        (b != pg_sys::InvalidBuffer as pg_sys::Buffer).then_some(b)
    }

    /// `block` pinned and share-locked (as `pin_then` and `Shared::lock`, under
    /// one guard: this is most of a single lookup's calls).
    pub fn lock_shared<S: super::SpecialArea>(&mut self, block: u32) -> super::Shared<S> {
        let buf = self.pin_then(block, |buf| {
            // SAFETY: pinned; a raw call under the caller's guard.
            unsafe {
                super::buffer::prefetch_head_and_tail(buf);
                crate::unguarded::LockBuffer(buf, pg_sys::BUFFER_LOCK_SHARE as i32);
            }
        });
        super::Shared::of_locked(buf, block)
    }

    /// Pins `block` through its remembered buffer (else reads it) and runs
    /// `then` on the pinned buffer, all under one guard; remembers a
    /// buffer read. `then` may only make raw calls (an ERROR jumps over it).
    pub fn pin_then(&mut self, block: u32, then: impl FnOnce(pg_sys::Buffer)) -> pg_sys::Buffer {
        use crate::unguarded as raw;
        let (rel, known) = (self.rel, self.known(block));
        // SAFETY: raw calls only under the guard; a known buffer is a
        // shared buffer number, which ReadRecentBuffer checks holds this
        // block before pinning it.
        let (buf, read) = unsafe {
            raw::guarded(|| {
                let (buf, read) = match known {
                    Some(b) if crate::compat::read_recent_buffer(rel, block, b) => (b, false),
                    _ => (
                        raw::ReadBufferExtended(
                            rel,
                            pg_sys::ForkNumber::MAIN_FORKNUM,
                            block,
                            pg_sys::ReadBufferMode::RBM_NORMAL,
                            std::ptr::null_mut(),
                        ),
                        true,
                    ),
                };
                then(buf);
                (buf, read)
            })
        };
        if read {
            self.remember(block, buf);
        }
        buf
    }

    /// That `block` was last pinned in `buf`.
    fn remember(&mut self, block: u32, buf: pg_sys::Buffer) {
        if let Some(v) = self.buffers.as_ref().filter(|_| (block as usize) < MAX_BLOCKS) {
            let grown = {
                let mut v = v.borrow_mut();
                let grown = v.len() <= block as usize;
                if grown {
                    v.resize(block as usize + 1, pg_sys::InvalidBuffer as pg_sys::Buffer);
                }
                v[block as usize] = buf;
                grown
            };
            if grown {
                // Past the limit the memory starts afresh (readers holding
                // a table's memory keep theirs; the next reader starts anew).
                RECENT.with_borrow_mut(|m| {
                    if m.values().map(|v| v.borrow().len()).sum::<usize>() > MAX_TOTAL_BLOCKS {
                        m.clear();
                    }
                });
            }
        }
    }

    /// While `block` is read, with `upcoming` the TIDs read after it in
    /// TID order: prefetches for the page `PAGES_AHEAD` pages on (its
    /// header and the line pointers of its TIDs), and the rows of the page
    /// `ROWS_AHEAD` pages on (every TID of it: an equi-join reads a few
    /// dozen rows of a page, and each row left out was a miss when its
    /// columns were read), looking a few hundred TIDs ahead at most.
    pub fn prefetch_ahead(&self, block: u32, upcoming: impl Iterator<Item = Tid>) {
        let (mut last, mut pages) = (block, 0);
        // The page `PAGES_AHEAD` on (where known), and its last line asked for.
        let (mut page, mut line) = (None, usize::MAX);
        for t in upcoming.take(256) {
            let b = (t >> 16) as u32;
            if b != last {
                (last, pages) = (b, pages + 1);
                if pages > PAGES_AHEAD {
                    return;
                }
                if pages == PAGES_AHEAD {
                    page = self.prefetch_header(b);
                    if let Some(p) = page {
                        prefetch(p);
                    }
                }
            }
            if pages == ROWS_AHEAD {
                self.prefetch_row(b, t as u16);
            } else if let Some(p) = page {
                let at = line_pointer_at(t as u16) / 64;
                if at != line && at < pg_sys::BLCKSZ as usize / 64 {
                    line = at;
                    prefetch(p.wrapping_add(at * 64));
                }
            }
        }
    }

    /// Asks the CPU for the buffer header of `tid`'s page, the page's
    /// header (read when the page is pinned and pruned) and its line
    /// pointer, if the buffer is known (the first step of `prefetch_row`'s,
    /// a few rows before it).
    pub fn prefetch_line_pointer(&self, tid: Tid) {
        if let Some(page) = self.prefetch_header((tid >> 16) as u32) {
            prefetch(page);
            let at = line_pointer_at(tid as u16);
            if at < pg_sys::BLCKSZ as usize {
                prefetch(page.wrapping_add(at));
            }
        }
    }

    /// Asks the CPU for the row at line pointer `offset` of `block`, if its
    /// buffer is known: the line pointer is read without a pin or lock (a
    /// hint: whatever it holds, only lines inside the buffer's page are
    /// prefetched).
    pub fn prefetch_row(&self, block: u32, offset: u16) {
        let Some(i) = self.known(block) else { return };
        let lp = line_pointer_at(offset);
        let size = pg_sys::BLCKSZ as usize;
        if offset == 0 || lp + 4 > size {
            return;
        }
        // SAFETY: a remembered buffer number is below NBuffers, and `lp` is
        // inside its page; a volatile read of shared memory other backends
        // may be writing, used only as a prefetch address.
        unsafe {
            let page = pg_sys::BufferBlocks.add((i - 1) as usize * size) as *const u8;
            let item = std::ptr::read_volatile(page.add(lp).cast::<u32>());
            // ItemIdData: lp_off in the low 15 bits, lp_len in the high 15.
            let (off, len) = ((item & 0x7fff) as usize, (item >> 17) as usize);
            if len > 0 && off + len <= size {
                prefetch(page.add(off));
                prefetch(page.add(off + len - 1));
            }
        }
    }

    /// Asks the CPU for the buffer header of `block`, if its buffer is
    /// known, and for what `lines` asks of the page in it (`lines` may
    /// only prefetch: the page is neither pinned nor locked, and may hold
    /// another block by the time it is read).
    pub fn prefetch_known<S: super::SpecialArea>(&self, block: u32, lines: impl FnOnce(super::PageRef<'_, S>)) {
        if let Some(page) = self.prefetch_header(block) {
            // SAFETY: a page of the pool; `lines` only prefetches.
            lines(unsafe { super::PageRef::new(page) });
        }
    }

    /// Asks the CPU for the buffer header of `block`, if its buffer is
    /// known, and for the page's lines `lines` (64 bytes each: all of
    /// them for a page read whole next; lines past the page are left
    /// out). Harmless as `prefetch`.
    pub fn prefetch_page(&self, block: u32, lines: impl Iterator<Item = usize>) {
        let Some(page) = self.prefetch_header(block) else { return };
        for l in lines.filter(|&l| l < pg_sys::BLCKSZ as usize / 64) {
            prefetch(page.wrapping_add(l * 64));
        }
    }

    /// Prefetches the buffer header of `block`, if its buffer is known,
    /// and returns the address of the buffer's page (not to be read).
    fn prefetch_header(&self, block: u32) -> Option<*const u8> {
        let i = (self.known(block)? - 1) as usize;
        // SAFETY: a remembered buffer number is below NBuffers: its header
        // and page are inside the pool's arrays; nothing is read.
        unsafe {
            prefetch(pg_sys::BufferDescriptors.add(i));
            Some(pg_sys::BufferBlocks.add(i * pg_sys::BLCKSZ as usize) as *const u8)
        }
    }
}

//! gpu_learned's pages. The relation holds two structures, both in
//! gpu_btree's page format (its special area and page id, with kinds of
//! its own here):
//!
//! - the delta, a gpu_btree B-link tree (block 0 is its metapage): the
//!   entries inserted since the run was written, and every NULL;
//! - the run (block 1 is its metapage, `RunMeta`): sorted entries packed
//!   into data pages, then the PGM model's segments in model pages, then
//!   the directory: the position (entry number) of each data page's first
//!   entry, so that position p is in the last data page whose first
//!   position is <= p. The run's pages (data, model, directory) lie in a
//!   few extents of consecutive blocks, listed in the metapage. A run
//!   never changes but for VACUUM's dead bits: positions, and so the
//!   model, stay valid. A merge (`merge.rs`) writes a new run and empties
//!   the delta, bumping the generation; the old run's extents are kept as
//!   `retired` for a later merge to write into once no snapshot can read
//!   them.
//!
//! Data pages: keys from the front, then a bitmap of dead entries at a
//! fixed offset, TIDs from the back; the special area's low and high are
//! the page's first and last keys. A data page whose entries all have
//! one key (flag `RUN`, gpu_btree's) stores it once, then the bitmap, and
//! holds about 2.3 times the entries (deduplication: duplicate-heavy keys
//! take about 6 bytes an entry, not 14).

use crate::am::gpu_btree::page::*;
use crate::storage::{tid_from, tid_to, Tid};
use pgrx::pg_sys;

pub const RUN_META_BLOCK: u32 = 1;
pub const KIND_RUN_META: u8 = 8;
pub const KIND_RUN: u8 = 9;
pub const KIND_MODEL: u8 = 10;
pub const KIND_DIRECTORY: u8 = 11;

const RUN_MAGIC: u32 = 0x474C_524E; // "GLRN"
/// 4: `delta_clear`; 3: run pages and the directory (read as 4 with the
/// delta never clear); 2 (extents and generations) is read as a run of
/// plain pages, RUN_CAPACITY entries each but the last; version 1 had one
/// contiguous run. (A build before 4 refuses a version 4 index: it would
/// insert into the delta without clearing `delta_clear`.)
const RUN_VERSION: u32 = 4;
const RUN_VERSION_DIRECTORY: u32 = 3;
const RUN_VERSION_PLAIN: u32 = 2;
pub const MAX_MODEL_LEVELS: usize = 24;

const TID_BYTES: usize = std::mem::size_of::<pg_sys::ItemPointerData>();
/// Entries of a data page: 8 key bytes, 6 TID bytes and a dead bit each.
pub const RUN_CAPACITY: usize = CONTENT_BYTES * 8 / (14 * 8 + 1);
const DEAD_AT: usize = RUN_CAPACITY * 8;
const DEAD_BYTES: usize = RUN_CAPACITY.div_ceil(8);
const _: () = assert!(DEAD_AT + DEAD_BYTES + RUN_CAPACITY * 6 <= CONTENT_BYTES);
/// Entries of a run page: 6 TID bytes and a dead bit each, after its key.
pub const RUN_PAGE_CAPACITY: usize = (CONTENT_BYTES - 8) * 8 / (6 * 8 + 1);
const RUN_DEAD_AT: usize = 8;
const _: () = assert!(RUN_DEAD_AT + RUN_PAGE_CAPACITY.div_ceil(8) + RUN_PAGE_CAPACITY * 6 <= CONTENT_BYTES);
/// First positions of data pages a directory page lists.
pub const DIRECTORY_PER_PAGE: usize = CONTENT_BYTES / 8;
/// Segments of a model page: first key, slope and intercept.
pub const SEGMENTS_PER_PAGE: usize = CONTENT_BYTES / 24;

/// Extents a run (or the retired list) may have: enough for a run written
/// into the retired extents of a few merges before it, with the rest of
/// the metapage to spare.
pub const MAX_EXTENTS: usize = 200;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RunMeta {
    pub magic: u32,
    pub version: u32,
    /// Entries of the run (dead ones included).
    pub n: u64,
    /// 1 at the build, bumped by every merge: a scan reads the run and the
    /// delta of one generation.
    pub generation: u64,
    /// Safe xid of the retired extents (0: none).
    pub retired_xid: u64,
    pub data_pages: u32,
    pub model_pages: u32,
    pub eps: u32,
    pub eps_inner: u32,
    pub segments: u32,
    pub nlevels: u32,
    pub nextents: u32,
    pub nretired: u32,
    /// (offset, length) of each model level, bottom first.
    pub levels: [[u32; 2]; MAX_MODEL_LEVELS],
    /// The run's pages, data then model, as (first block, blocks).
    pub extents: [[u32; 2]; MAX_EXTENTS],
    /// Pages of replaced runs, free for a merge once `retired_xid` is
    /// removable.
    pub retired: [[u32; 2]; MAX_EXTENTS],
    /// Directory pages (after the model pages); zero in version 2.
    pub directory_pages: u32,
    /// 1 while the delta's key tree holds no entry (a build and a merge
    /// write 1; the first key insert after them writes 0, WAL-logged,
    /// before its entry goes in): key scans then read the run alone. A
    /// row a snapshot sees was inserted, and this cleared, before the
    /// snapshot was taken. (NULLs are the delta's NULL chain, not its key
    /// tree.) Padding before version 4.
    pub delta_clear: u32,
}

const _: () = assert!(std::mem::size_of::<RunMeta>() <= CONTENT_BYTES);

impl Default for RunMeta {
    fn default() -> Self {
        // SAFETY: integers only; all zero is the empty run.
        unsafe { std::mem::zeroed() }
    }
}

impl RunMeta {
    pub fn extents(&self) -> &[[u32; 2]] {
        &self.extents[..self.nextents as usize]
    }
    pub fn retired(&self) -> &[[u32; 2]] {
        &self.retired[..self.nretired as usize]
    }
}

/// Extents built block by block (consecutive blocks join the last one).
pub fn push_block(extents: &mut Vec<[u32; 2]>, block: u32) {
    match extents.last_mut() {
        Some(e) if e[0] + e[1] == block => e[1] += 1,
        _ => extents.push([block, 1]),
    }
}

/// Copies `list` into a metapage array; false when it does not fit.
pub fn set_extents(to: &mut [[u32; 2]; MAX_EXTENTS], len: &mut u32, list: &[[u32; 2]]) -> bool {
    if list.len() > MAX_EXTENTS {
        return false;
    }
    to[..list.len()].copy_from_slice(list);
    *len = list.len() as u32;
    true
}

// SAFETY: repr(C) integers only, every bit pattern valid (checked on read
// by the magic and version).
unsafe impl crate::storage::PageData for RunMeta {}

pub fn run_meta(page: PageRef) -> RunMeta {
    let s = page.special();
    let m: RunMeta = page.header();
    let version_ok =
        m.version == RUN_VERSION || m.version == RUN_VERSION_DIRECTORY || (m.version == RUN_VERSION_PLAIN && m.directory_pages == 0);
    if s.page_id != PAGE_ID || s.kind != KIND_RUN_META || m.magic != RUN_MAGIC || !version_ok {
        learned_corrupted(format!("bad run metapage (kind {}, magic {:#x}, version {})", s.kind, m.magic, m.version));
    }
    m
}

impl RunMeta {
    /// Whether the run has a directory (else every data page but the last
    /// holds RUN_CAPACITY entries).
    pub fn has_directory(&self) -> bool {
        self.version >= RUN_VERSION_DIRECTORY
    }

    /// Whether the delta's key tree may hold entries (see `delta_clear`).
    pub fn delta_has_keys(&self) -> bool {
        self.version < RUN_VERSION || self.delta_clear == 0
    }
}

pub fn init_run_meta(page: &mut PageMut, mut m: RunMeta) {
    (m.magic, m.version) = (RUN_MAGIC, RUN_VERSION);
    page.init(special(KIND_RUN_META, 0, 0, 0, 0));
    page.set_header(m);
    page.set_used(std::mem::size_of::<RunMeta>(), 0);
}

pub fn learned_corrupted(what: String) -> ! {
    crate::error::raise(
        pgrx::prelude::PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED,
        format!("gpu_learned: {what}"),
        "REINDEX the index; gpu_learned_check(index) reports what is wrong.",
    )
}

/// A data page of the run, read (a run page: one key for all entries).
pub struct RunPage<'a> {
    keys: PageKeys<'a>,
    pub s: Special,
}

impl<'a> std::ops::Deref for RunPage<'a> {
    type Target = PageKeys<'a>;
    fn deref(&self) -> &PageKeys<'a> {
        &self.keys
    }
}

impl<'a> RunPage<'a> {
    pub fn new(page: PageRef<'a>) -> Self {
        let s = page.special();
        if s.page_id != PAGE_ID || s.kind != KIND_RUN {
            learned_corrupted(format!("expected a run data page, found kind {} (page id {:#x})", s.kind, s.page_id));
        }
        let n = s.count as usize;
        let run = s.flags & RUN != 0;
        if run && (n == 0 || n > RUN_PAGE_CAPACITY) {
            learned_corrupted(format!("a run page of {n} entries"));
        }
        if !run && n > RUN_CAPACITY {
            learned_corrupted(format!("a data page of {n} entries"));
        }
        RunPage { keys: PageKeys::new(page, n, run), s }
    }
    pub fn tid(&self, i: usize) -> Tid {
        tid_from(self.page.back::<pg_sys::ItemPointerData>(i))
    }
    /// Whether a slot of from..to is dead (a byte test per 8 slots).
    pub fn any_dead(&self, from: usize, to: usize) -> bool {
        from < to && self.page.front::<u8>(dead_at(self.s.flags) + from / 8, (to - 1) / 8 - from / 8 + 1).iter().any(|&b| b != 0)
    }
    /// The live entries of slots from..to into `out`: in bulk where none
    /// is dead (the usual page), else filtered by the dead bits.
    pub fn copy_live(&self, from: usize, to: usize, out: &mut Vec<(u64, Tid)>) {
        if !self.any_dead(from, to) {
            out.extend(self.entries(from, to));
        } else {
            out.extend((from..to).zip(self.entries(from, to)).filter(|&(s, _)| !self.dead(s)).map(|(_, e)| e));
        }
    }
    pub fn dead(&self, i: usize) -> bool {
        self.page.front::<u8>(dead_at(self.s.flags) + i / 8, 1)[0] & (1 << (i % 8)) != 0
    }
}

/// Starts loading at once what finding a key near slot `at` (±eps) of a
/// plain data page reads: the header and special area, the window's keys,
/// its dead bits and the TID at `at` (on a cold page these are otherwise
/// a chain of dependent misses; on a run page the guesses are wasted).
pub fn prefetch_near(page: PageRef<'_>, at: usize, eps: usize) {
    let (lo, hi) = gpuindex_engine::pgm::window(at, eps);
    let (lo, hi) = (lo.min(RUN_CAPACITY), hi.min(RUN_CAPACITY));
    page.prefetch_ends();
    page.prefetch_front(lo * 8, (hi - lo) * 8);
    page.prefetch_front(DEAD_AT + lo / 8, (hi - lo).div_ceil(8));
    page.prefetch_back(TID_BYTES, at.min(RUN_CAPACITY - 1));
}

fn dead_at(flags: u16) -> usize {
    if flags & RUN != 0 {
        RUN_DEAD_AT
    } else {
        DEAD_AT
    }
}

/// Writes a data page's entries (all alive): a run page where two or
/// more keys are all one.
pub fn run_page_set(page: &mut PageMut, keys: &[u64], tids: &[Tid]) {
    let (first, last) = (keys[0], *keys.last().expect("non-empty"));
    let run = keys.len() > 1 && first == last;
    assert!(keys.len() == tids.len() && keys.len() <= if run { RUN_PAGE_CAPACITY } else { RUN_CAPACITY });
    page.init(special(KIND_RUN, 0, if run { RUN } else { 0 }, first, last));
    let dead_at = if run {
        page.front_mut::<u64>(0, 1)[0] = first;
        RUN_DEAD_AT
    } else {
        page.front_mut::<u64>(0, keys.len()).copy_from_slice(keys);
        DEAD_AT
    };
    let dead_bytes = keys.len().div_ceil(8);
    page.front_mut::<u8>(dead_at, dead_bytes).fill(0);
    for (i, &t) in tids.iter().enumerate() {
        page.set_back(i, tid_to(t));
    }
    page.update_special(|s| s.count = keys.len() as u32);
    page.set_used(dead_at + dead_bytes, tids.len() * 6);
}

/// Marks entry `i` of a data page dead.
pub fn set_dead(page: &mut PageMut, i: usize) {
    let at = dead_at(page.as_ref().special().flags) + i / 8;
    page.front_mut::<u8>(at, 1)[0] |= 1 << (i % 8);
}

/// Writes first positions into a directory page.
pub fn directory_page_set(page: &mut PageMut, firsts: &[u64]) {
    assert!(firsts.len() <= DIRECTORY_PER_PAGE);
    page.init(special(KIND_DIRECTORY, 0, 0, 0, 0));
    page.front_mut::<u64>(0, firsts.len()).copy_from_slice(firsts);
    page.update_special(|s| s.count = firsts.len() as u32);
    page.set_used(firsts.len() * 8, 0);
}

/// The first positions a directory page lists.
pub fn directory_page_firsts(page: PageRef<'_>) -> &[u64] {
    let s = page.special();
    if s.page_id != PAGE_ID || s.kind != KIND_DIRECTORY || s.count as usize > DIRECTORY_PER_PAGE {
        learned_corrupted(format!("expected a directory page, found kind {} (page id {:#x})", s.kind, s.page_id));
    }
    page.front::<u64>(0, s.count as usize)
}

/// Writes segments (first, slope, intercept) into a model page.
pub fn model_page_set(page: &mut PageMut, segments: &[(u64, f64, f64)]) {
    assert!(segments.len() <= SEGMENTS_PER_PAGE);
    page.init(special(KIND_MODEL, 0, 0, 0, 0));
    let words = page.front_mut::<u64>(0, segments.len() * 3);
    for (w, &(f, s, i)) in words.chunks_mut(3).zip(segments) {
        w.copy_from_slice(&[f, s.to_bits(), i.to_bits()]);
    }
    page.update_special(|s| s.count = segments.len() as u32);
    page.set_used(segments.len() * 24, 0);
}

/// The segments of a model page.
pub fn model_page_segments(page: PageRef<'_>) -> impl Iterator<Item = (u64, f64, f64)> + '_ {
    let s = page.special();
    if s.page_id != PAGE_ID || s.kind != KIND_MODEL {
        learned_corrupted(format!("expected a model page, found kind {} (page id {:#x})", s.kind, s.page_id));
    }
    page.front::<u64>(0, s.count as usize * 3).chunks(3).map(|w| (w[0], f64::from_bits(w[1]), f64::from_bits(w[2])))
}

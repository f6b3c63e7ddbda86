//! gpu_learned's pages. The relation holds two structures, both in
//! gpu_btree's page format (its special area and page id, with kinds of
//! its own here):
//!
//! - the delta, a gpu_btree B-link tree (block 0 is its metapage): the
//!   entries inserted since the build, and every NULL;
//! - the run (block 1 is its metapage, `RunMeta`): the build's sorted
//!   entries packed into contiguous data pages of `RUN_CAPACITY` entries,
//!   so that position p is in data page p / RUN_CAPACITY, slot p %
//!   RUN_CAPACITY, and the PGM model's segments in model pages. The run
//!   never changes but for VACUUM's dead bits: positions, and so the
//!   model, stay valid until the next build.
//!
//! Data pages: keys from the front, then a bitmap of dead entries at a
//! fixed offset, TIDs from the back; the special area's low and high are
//! the page's first and last keys.

use crate::am::gpu_btree::page::*;
use crate::storage::{tid_from, tid_to, Tid};
use pgrx::pg_sys;

pub const RUN_META_BLOCK: u32 = 1;
pub const KIND_RUN_META: u8 = 8;
pub const KIND_RUN: u8 = 9;
pub const KIND_MODEL: u8 = 10;

const RUN_MAGIC: u32 = 0x474C_524E; // "GLRN"
const RUN_VERSION: u32 = 1;
pub const MAX_MODEL_LEVELS: usize = 24;

/// Entries of a data page: 8 key bytes, 6 TID bytes and a dead bit each.
pub const RUN_CAPACITY: usize = CONTENT_BYTES * 8 / (14 * 8 + 1);
const DEAD_AT: usize = RUN_CAPACITY * 8;
const DEAD_BYTES: usize = RUN_CAPACITY.div_ceil(8);
const _: () = assert!(DEAD_AT + DEAD_BYTES + RUN_CAPACITY * 6 <= CONTENT_BYTES);
/// Segments of a model page: first key, slope and intercept.
pub const SEGMENTS_PER_PAGE: usize = CONTENT_BYTES / 24;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RunMeta {
    pub magic: u32,
    pub version: u32,
    /// Entries of the run (dead ones included).
    pub n: u64,
    pub first_data: u32,
    pub data_pages: u32,
    pub first_model: u32,
    pub model_pages: u32,
    pub eps: u32,
    pub eps_inner: u32,
    pub segments: u32,
    pub nlevels: u32,
    /// (offset, length) of each model level, bottom first.
    pub levels: [[u32; 2]; MAX_MODEL_LEVELS],
}

// SAFETY: repr(C) integers only, every bit pattern valid (checked on read
// by the magic and version).
unsafe impl crate::storage::PageData for RunMeta {}

pub fn run_meta(page: PageRef) -> RunMeta {
    let s = page.special();
    let m: RunMeta = page.header();
    if s.page_id != PAGE_ID || s.kind != KIND_RUN_META || m.magic != RUN_MAGIC || m.version != RUN_VERSION {
        learned_corrupted(format!("bad run metapage (kind {}, magic {:#x}, version {})", s.kind, m.magic, m.version));
    }
    m
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

/// A data page of the run, read.
pub struct RunPage<'a> {
    page: PageRef<'a>,
    pub s: Special,
}

impl<'a> RunPage<'a> {
    pub fn new(page: PageRef<'a>) -> Self {
        let s = page.special();
        if s.page_id != PAGE_ID || s.kind != KIND_RUN {
            learned_corrupted(format!("expected a run data page, found kind {} (page id {:#x})", s.kind, s.page_id));
        }
        RunPage { page, s }
    }
    pub fn count(&self) -> usize {
        self.s.count as usize
    }
    pub fn keys(&self) -> &'a [u64] {
        self.page.front(0, self.count())
    }
    pub fn tid(&self, i: usize) -> Tid {
        tid_from(self.page.back::<pg_sys::ItemPointerData>(i))
    }
    pub fn dead(&self, i: usize) -> bool {
        self.page.front::<u8>(DEAD_AT + i / 8, 1)[0] & (1 << (i % 8)) != 0
    }
}

/// Writes a data page's entries (all alive).
pub fn run_page_set(page: &mut PageMut, keys: &[u64], tids: &[Tid]) {
    assert!(keys.len() == tids.len() && !keys.is_empty() && keys.len() <= RUN_CAPACITY);
    page.init(special(KIND_RUN, 0, 0, keys[0], *keys.last().expect("non-empty")));
    page.front_mut::<u64>(0, keys.len()).copy_from_slice(keys);
    page.front_mut::<u8>(DEAD_AT, DEAD_BYTES).fill(0);
    for (i, &t) in tids.iter().enumerate() {
        page.set_back(i, tid_to(t));
    }
    page.update_special(|s| s.count = keys.len() as u32);
    page.set_used(DEAD_AT + DEAD_BYTES, tids.len() * 6);
}

/// Marks entry `i` of a data page dead.
pub fn set_dead(page: &mut PageMut, i: usize) {
    page.front_mut::<u8>(DEAD_AT + i / 8, 1)[0] |= 1 << (i % 8);
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

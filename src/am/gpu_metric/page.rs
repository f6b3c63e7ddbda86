//! gpu_metric's page formats.
//!
//! - block 0, the metapage: the tree (its node and pivot runs, height,
//!   fanout, metric, dimension), the chains beside it, counts, and the
//!   generation (bumped by every rebuild: a cached shape is current while
//!   it matches);
//! - entry pages: entries of (heap TID, distance to the leaf's routing
//!   pivot, the vector; past 2,032 dimensions one entry a page, the rest
//!   of its vector on the continuation pages after it). Each leaf of the tree owns a run of entry pages
//!   linked by `right` (its node's `offset` is the run's first block), as
//!   does each chain: the delta (rows inserted since the last rebuild, the
//!   GTS cache list), the frozen delta of a rebuild in progress, and the
//!   NULL rows (never in the tree);
//! - node pages: the engine's nodes, level by level, a linked run;
//! - pivot pages: the internal nodes' pivots, as entries, a linked run;
//! - freed pages: pages a rebuild replaced, flagged FREED with a safe xid
//!   until VACUUM gives them to the free space map (`storage::recycle`).

use crate::storage::PageData;
use gpuindex_engine::gts::Node;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// The special area: the next page of a run, the number of entries or
/// nodes on the page, its kind, and a FREED page's safe xid.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Special {
    pub right: u32,
    pub count: u32,
    pub kind: u8,
    pub flags: u8,
    _pad: [u8; 4],
    pub page_id: u16,
    pub freed_at: u64,
}

// SAFETY: repr(C) integers, every bit pattern valid.
unsafe impl PageData for Special {}
crate::page_types!(Special);

// SAFETY: repr(C): two f64 and two u64, every bit pattern valid.
unsafe impl PageData for Node {}

pub const PAGE_ID: u16 = 0x6D74;
pub const META_BLOCK: u32 = 0;
pub const MAGIC: u32 = 0x474D_5453; // "GMTS"
pub const VERSION: u32 = 1;
pub const NONE: u32 = pg_sys::InvalidBlockNumber;

pub const KIND_META: u8 = 1;
pub const KIND_LEAF: u8 = 2;
pub const KIND_CHAIN: u8 = 3;
pub const KIND_NODES: u8 = 4;
pub const KIND_PIVOTS: u8 = 5;

/// A page no live structure reaches (see `freed_at`).
pub const FREED: u8 = 1;
/// A continuation page of a wide entry (see `continuation_pages`).
pub const CONTINUED: u8 = 2;

pub const NODE_CAPACITY: usize = CONTENT_BYTES / std::mem::size_of::<Node>();

/// The bytes of one entry of `dim` dimensions: TID, pivot distance,
/// vector, padded to 8.
pub const fn entry_bytes(dim: usize) -> usize {
    (16 + 4 * dim).next_multiple_of(8)
}

/// Entries of `dim` dimensions per page (a wide entry's first page holds
/// that one entry).
pub const fn entries_per_page(dim: usize) -> usize {
    CONTENT_BYTES / entry_bytes(head_floats(dim))
}

/// The most dimensions an index holds (pgvector's limit).
pub const MAX_DIM: usize = 16_000;

/// Floats of a wide entry on its own page, after its TID and distance,
/// and on each continuation page.
const HEAD_FLOATS: usize = (CONTENT_BYTES - 16) / 4;
const CONTINUED_FLOATS: usize = CONTENT_BYTES / 4;
const _: () = assert!(entry_bytes(HEAD_FLOATS) <= CONTENT_BYTES);

/// The floats of an entry of `dim` dimensions on its own page.
const fn head_floats(dim: usize) -> usize {
    if dim < HEAD_FLOATS {
        dim
    } else {
        HEAD_FLOATS
    }
}

/// The pages each entry of `dim` dimensions takes after its own: 0 where
/// entries fit a page. A wider (wide) entry is its own page, holding the
/// TID, the distance and the first floats, then as many continuation
/// pages (flagged CONTINUED, holding no entries) as the rest needs, next
/// in the run.
pub const fn continuation_pages(dim: usize) -> usize {
    if dim <= HEAD_FLOATS {
        0
    } else {
        (dim - HEAD_FLOATS).div_ceil(CONTINUED_FLOATS)
    }
}

/// A run of entry pages linked by `right`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain {
    pub head: u32,
    pub tail: u32,
    pub pages: u32,
    pub _pad: u32,
    pub entries: u64,
}

impl Chain {
    pub const EMPTY: Chain = Chain { head: NONE, tail: NONE, pages: 0, _pad: 0, entries: 0 };
    pub fn at(block: u32) -> Chain {
        Chain { head: block, tail: block, pages: 1, ..Chain::EMPTY }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    pub magic: u32,
    pub version: u32,
    pub generation: u64,
    /// Bumped by each VACUUM that removes entries (cached rows reload).
    pub vacuums: u64,
    pub dim: u32,
    pub metric: u32,
    pub fanout: u32,
    pub height: u32,
    /// First node page, first pivot page, number of nodes.
    pub node_start: u32,
    pub pivot_start: u32,
    pub node_count: u32,
    /// Set while a rebuild writes (a crash leaves pages to reclaim).
    pub rebuilding: u32,
    /// Entries in the tree's leaves.
    pub tree_entries: u64,
    /// Pages flagged FREED and not yet in the free space map.
    pub freed_pages: u64,
    /// Rows inserted since the last rebuild.
    pub delta: Chain,
    /// The delta a rebuild is folding into the tree (EMPTY otherwise).
    pub frozen: Chain,
    /// Rows whose vector is NULL.
    pub nulls: Chain,
}

// SAFETY: repr(C) integers, every bit pattern valid (checked on read by
// the magic and version).
unsafe impl PageData for Meta {}

impl Meta {
    /// The chains scans read beside the tree, with vectors.
    pub fn vector_chains(&self) -> [Chain; 2] {
        [self.delta, self.frozen]
    }
    pub fn entries(&self) -> u64 {
        self.tree_entries + self.delta.entries + self.frozen.entries + self.nulls.entries
    }
}

pub fn corrupted(what: String) -> ! {
    crate::error::raise(PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED, format!("gpu_metric: {what}"), "REINDEX the index.")
}

fn expect_kind(page: &PageRef, kinds: &[u8]) -> Special {
    let s = page.special();
    if s.page_id != PAGE_ID || !kinds.contains(&s.kind) {
        corrupted(format!("expected a page of kind {kinds:?}, found kind {} (page id {:#x})", s.kind, s.page_id));
    }
    s
}

pub fn read_meta(page: PageRef) -> Meta {
    expect_kind(&page, &[KIND_META]);
    let m: Meta = page.header();
    if m.magic != MAGIC || m.version != VERSION {
        corrupted(format!("bad metapage (magic {:#x}, version {})", m.magic, m.version));
    }
    m
}

pub fn write_meta(page: &mut PageMut, m: &Meta) {
    page.set_header(*m);
    page.set_used(std::mem::size_of::<Meta>(), 0);
}

pub fn special(kind: u8) -> Special {
    Special { kind, right: NONE, page_id: PAGE_ID, ..Default::default() }
}

/// One entry as stored.
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    pub tid: u64,
    pub pdist: f64,
    pub v: &'a [f32],
}

/// The entries of a leaf, chain or pivot page of `dim` dimensions. The
/// vector of a wide entry is only its first part (`chain::for_run` joins
/// the rest); a continuation page has none.
pub fn entries<'a>(page: PageRef<'a>, dim: usize) -> (impl Iterator<Item = Entry<'a>> + 'a, Special) {
    let s = expect_kind(&page, &[KIND_LEAF, KIND_CHAIN, KIND_PIVOTS]);
    let floats = head_floats(dim);
    let words = entry_bytes(floats) / 8;
    let raw: &'a [u64] = page.front(0, s.count as usize * words);
    let it = raw.chunks_exact(words).map(move |w| Entry {
        tid: w[0],
        pdist: f64::from_bits(w[1]),
        // SAFETY: the vector follows the two words, 4-aligned, `floats` floats.
        v: unsafe { std::slice::from_raw_parts(w[2..].as_ptr() as *const f32, floats) },
    });
    (it, s)
}

/// The floats a continuation page holds, of the `left` its entry still needs.
pub fn continued<'a>(page: PageRef<'a>, left: usize) -> (&'a [f32], Special) {
    let s = expect_kind(&page, &[KIND_LEAF, KIND_CHAIN, KIND_PIVOTS]);
    if s.flags & CONTINUED == 0 {
        corrupted(format!("a wide entry goes on to a page that does not continue it (kind {})", s.kind));
    }
    (page.front(0, left.min(CONTINUED_FLOATS)), s)
}

/// Whether a page continues a wide entry.
pub fn is_continued(page: &PageRef) -> bool {
    page.special().flags & CONTINUED != 0
}

/// Makes a new page the continuation page holding `part` (the next floats
/// of a wide entry).
pub fn put_continued(page: &mut PageMut, part: &[f32]) {
    assert!(part.len() <= CONTINUED_FLOATS);
    page.front_mut::<f32>(0, part.len()).copy_from_slice(part);
    page.update_special(|s| s.flags |= CONTINUED);
    page.set_used(std::mem::size_of_val(part), 0);
}

/// The parts of a wide entry's vector for its continuation pages.
pub fn continued_parts(v: &[f32]) -> std::slice::Chunks<'_, f32> {
    v[head_floats(v.len())..].chunks(CONTINUED_FLOATS)
}

/// The number of entries on a page (any entry kind).
pub fn entry_count(page: &PageRef) -> usize {
    expect_kind(page, &[KIND_LEAF, KIND_CHAIN, KIND_PIVOTS]).count as usize
}

/// Writes entry `i` of a page of `dim` dimensions (within its capacity),
/// and the page's count and bounds to cover it.
/// Of a wide entry, the first part (its continuation pages hold the rest).
pub fn put_entry(page: &mut PageMut, dim: usize, i: usize, e: &Entry) {
    let floats = head_floats(dim);
    assert!(i < entries_per_page(dim) && e.v.len() >= floats);
    let words = entry_bytes(floats) / 8;
    let w = &mut page.front_mut::<u64>(i * words * 8, words)[..];
    w[0] = e.tid;
    w[1] = e.pdist.to_bits();
    // SAFETY: `floats` floats fit the entry after its two words.
    unsafe { std::ptr::copy_nonoverlapping(e.v.as_ptr(), w[2..].as_mut_ptr() as *mut f32, floats) };
    let n = (i + 1).max(page.as_ref().special().count as usize);
    page.update_special(|s| s.count = n as u32);
    page.set_used(n * words * 8, 0);
}

/// Keeps the first `n` entries of a page.
pub fn truncate(page: &mut PageMut, dim: usize, n: usize) {
    page.update_special(|s| s.count = n as u32);
    page.set_used(n * entry_bytes(head_floats(dim)), 0);
}

/// The nodes of a node page.
pub fn nodes<'a>(page: PageRef<'a>) -> (&'a [Node], Special) {
    let s = expect_kind(&page, &[KIND_NODES]);
    (page.front(0, s.count as usize), s)
}

pub fn set_nodes(page: &mut PageMut, n: &[Node]) {
    assert!(n.len() <= NODE_CAPACITY);
    page.front_mut::<Node>(0, n.len()).copy_from_slice(n);
    page.update_special(|s| s.count = n.len() as u32);
    page.set_used(std::mem::size_of_val(n), 0);
}

/// The safe xid of a page freed for recycling (None: not freed).
pub fn freed_at(page: &PageRef) -> Option<u64> {
    let s = page.special();
    (s.page_id == PAGE_ID && s.flags & FREED != 0).then_some(s.freed_at)
}

/// A page for a writer: a recycled one from the free space map, else a new
/// one at the end (exclusively locked; the caller initialises it).
pub fn new_page(rel: pg_sys::Relation) -> Exclusive {
    crate::storage::recycle::reuse_page(rel, freed_at).unwrap_or_else(|| crate::storage::new_page(rel))
}

//! gpu_spatial's page formats.
//!
//! - block 0, the metapage: where the quadtree's node pages are, the delta
//!   chain, counts, the generation (bumped whenever the tree's shape
//!   changes: the cached node image is current while it matches) and the
//!   vacuum count (bumped whenever VACUUM removes entries from tree pages:
//!   a cached copy of the points is current while both match);
//! - entry pages: (x, y, heap TID) entries. A quadtree leaf owns a run of
//!   entry pages (linked by `right`, like every page sequence here: runs
//!   are allocated a page at a time, recycled pages included); chains of
//!   entry pages hold what is not in the tree: the delta (finite points
//!   inserted since the last merge), the frozen delta of a merge in
//!   progress, and the odd entries (NULLs, flagged in the TID, and
//!   non-finite points);
//! - node pages: the quadtree's nodes (the engine's 64-byte `Node`), root
//!   first, a linked run. A leaf node's `start` is the first block of its
//!   run and `count` the number of pages in it;
//! - freed pages: pages a merge replaced keep their contents (scans of the
//!   shape before it may still read them), flagged FREED with their safe
//!   xid until VACUUM gives them to the free space map (`storage::recycle`).

use crate::storage::{PageData, Tid};
use gpuindex_engine::gpics::tree::Node;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// gpu_spatial's special area: the next page of a chain, the number of
/// entries or nodes on the page, its kind.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Special {
    pub right: u32,
    pub count: u32,
    pub kind: u8,
    pub flags: u8,
    _pad: [u8; 4],
    /// Identifies gpu_spatial pages when checking.
    pub page_id: u16,
    /// For a FREED page: the next full xid when it was freed.
    pub freed_at: u64,
}

// SAFETY: repr(C) integers, every bit pattern valid.
unsafe impl PageData for Special {}
crate::page_types!(Special);
const _: () = assert!(std::mem::size_of::<Special>() == 24);

pub const PAGE_ID: u16 = 0x5A71;
pub const META_BLOCK: u32 = 0;
pub const MAGIC: u32 = 0x4753_5054; // "GSPT"
/// 2: the special area is gpu_spatial's own (16 bytes, was gpu_btree's 40).
/// 3: runs are linked by `right`, not consecutive; pages can be freed and
/// recycled (special area 24 bytes, with `flags` and `freed_at`).
pub const VERSION: u32 = 3;
pub const NONE: u32 = pg_sys::InvalidBlockNumber;

pub const KIND_META: u8 = 1;
pub const KIND_LEAF: u8 = 2;
pub const KIND_DELTA: u8 = 3;
pub const KIND_NODES: u8 = 4;

/// A page no live structure reaches (see `freed_at`).
pub const FREED: u8 = 1;

/// Set in an entry's TID for a row whose point is NULL.
pub const NULL_FLAG: u64 = 1 << 63;

/// One indexed row. NULL points have x = y = NaN and NULL_FLAG set.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry {
    pub x: f64,
    pub y: f64,
    pub tid: u64,
}

// SAFETY: repr(C) f64, f64, u64: every bit pattern valid.
unsafe impl PageData for Entry {}

impl Entry {
    pub fn is_null(&self) -> bool {
        self.tid & NULL_FLAG != 0
    }
    pub fn heap_tid(&self) -> Tid {
        self.tid & !NULL_FLAG
    }
}

pub const ENTRY_CAPACITY: usize = CONTENT_BYTES / std::mem::size_of::<Entry>();
pub const NODE_CAPACITY: usize = CONTENT_BYTES / std::mem::size_of::<Node>();

/// A chain of entry pages linked by `right`: the delta, the frozen delta
/// of a merge in progress, and the odd entries.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chain {
    pub head: u32,
    pub tail: u32,
    pub pages: u32,
    pub entries: u64,
}

impl Chain {
    pub const EMPTY: Chain = Chain { head: NONE, tail: NONE, pages: 0, entries: 0 };
    pub fn at(block: u32) -> Chain {
        Chain { head: block, tail: block, pages: 1, entries: 0 }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    pub magic: u32,
    pub version: u32,
    pub generation: u64,
    pub vacuums: u64,
    /// First node page and number of nodes (0: no tree yet).
    pub node_start: u32,
    pub node_count: u32,
    pub leaf_count: u32,
    /// Build parameters (the leaf capacity MC and maximum height MH).
    pub mc: u32,
    pub mh: u32,
    /// 1 once a VACUUM's pass over every page left no page waiting to be
    /// recycled, until a merge starts writing (0 in indexes from before
    /// the field, which then get one pass): lets VACUUM skip the pass.
    pub settled: u32,
    /// Entries in the tree's leaf pages (live or not yet vacuumed).
    pub tree_entries: u64,
    /// Finite points inserted since the tree was built or merged.
    pub delta: Chain,
    /// The delta a merge is folding into the tree (EMPTY otherwise).
    pub frozen: Chain,
    /// NULLs and points with a non-finite coordinate (never in the tree).
    pub odd: Chain,
}

// SAFETY: repr(C) integers and chains of integers, every bit pattern
// valid (checked on read by the magic and version).
unsafe impl PageData for Meta {}

impl Meta {
    pub fn new(delta: u32, odd: u32, mc: u32, mh: u32) -> Meta {
        Meta {
            magic: MAGIC,
            version: VERSION,
            generation: 1,
            vacuums: 0,
            node_start: NONE,
            node_count: 0,
            leaf_count: 0,
            mc,
            mh,
            settled: 1,
            tree_entries: 0,
            delta: Chain::at(delta),
            frozen: Chain::EMPTY,
            odd: Chain::at(odd),
        }
    }

    /// Every chain scans read beside the tree.
    pub fn chains(&self) -> [Chain; 3] {
        [self.delta, self.frozen, self.odd]
    }
}

pub fn corrupted(what: String) -> ! {
    crate::error::raise(PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED, format!("gpu_spatial: {what}"), "REINDEX the index.")
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

pub fn init_meta(page: &mut PageMut, m: &Meta) {
    page.init(special(KIND_META));
    write_meta(page, m);
}

/// The entries of a leaf or delta page.
pub fn entries<'a>(page: PageRef<'a>) -> (&'a [Entry], Special) {
    let s = expect_kind(&page, &[KIND_LEAF, KIND_DELTA]);
    (page.front(0, s.count as usize), s)
}

/// Writes a page's entries (the whole contents).
pub fn set_entries(page: &mut PageMut, e: &[Entry]) {
    assert!(e.len() <= ENTRY_CAPACITY);
    page.front_mut::<Entry>(0, e.len()).copy_from_slice(e);
    page.update_special(|s| s.count = e.len() as u32);
    page.set_used(std::mem::size_of_val(e), 0);
}

/// Appends one entry to a page with room.
pub fn push_entry(page: &mut PageMut, e: Entry) {
    let n = page.as_ref().special().count as usize;
    assert!(n < ENTRY_CAPACITY);
    page.set_used((n + 1) * std::mem::size_of::<Entry>(), 0);
    page.front_mut::<Entry>(0, n + 1)[n] = e;
    page.update_special(|s| s.count = n as u32 + 1);
}

/// The nodes of a node page.
pub fn nodes<'a>(page: PageRef<'a>) -> &'a [Node] {
    let s = expect_kind(&page, &[KIND_NODES]);
    page.front(0, s.count as usize)
}

pub fn set_nodes(page: &mut PageMut, n: &[Node]) {
    assert!(n.len() <= NODE_CAPACITY);
    page.front_mut::<Node>(0, n.len()).copy_from_slice(n);
    page.update_special(|s| s.count = n.len() as u32);
    page.set_used(std::mem::size_of_val(n), 0);
}

/// The number of pages of a leaf's run.
pub fn pages_for(entries: usize) -> usize {
    entries.div_ceil(ENTRY_CAPACITY).max(1)
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

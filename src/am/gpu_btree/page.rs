//! gpu_btree's page formats.
//!
//! - block 0, the metapage: root, levels, the leftmost page of each level,
//!   the generation (bumped at every leaf split: the device mirror of the
//!   inner levels is current while it matches), the chain of NULL pages;
//! - leaf pages: up to LEAF_CAPACITY (key, heap TID) entries sorted by key,
//!   keys from the front (searched with SIMD), TIDs from the back; fence
//!   keys and both sibling links in the special area. A run leaf (flag
//!   RUN: every entry has one key) stores the key once and up to
//!   RUN_LEAF_CAPACITY TIDs: duplicates take 6 bytes an entry, not 14;
//! - inner pages: (key, child) entries, child j holding keys in
//!   [key[j-1], key[j]] (upper-bound separators, as in the HB+-tree); the
//!   last key of a page is its high fence (MAX on the rightmost page);
//! - NULL pages: heap TIDs of NULL keys, a chain from the metapage.
//!
//! Keys are the order-preserving u64 encodings of `keys.rs`.

use crate::storage::PageData;
use gpuindex_engine::hbtree::line::{lower_bound, lower_bound_from, lower_bound_near, upper_bound};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// gpu_btree's special area: sibling links, fence keys, a count, the page
/// kind and level (40 bytes; the on-disk format of every gpu_btree page).
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
    /// Identifies gpu_btree pages when checking.
    pub page_id: u16,
    pub _pad: [u8; 6],
}

// SAFETY: repr(C) integers, every bit pattern valid.
unsafe impl PageData for Special {}
crate::page_types!(Special);
const _: () = assert!(std::mem::size_of::<Special>() == 40);

pub const PAGE_ID: u16 = 0xB7EE;
pub const META_BLOCK: u32 = 0;
pub const MAGIC: u32 = 0x4742_5452; // "GBTR"
pub const VERSION: u32 = 1;
pub const NONE: u32 = pg_sys::InvalidBlockNumber;
pub const MAX_LEVELS: usize = 16;

pub const KIND_META: u8 = 1;
pub const KIND_LEAF: u8 = 2;
pub const KIND_INNER: u8 = 3;
pub const KIND_NULLS: u8 = 4;

pub const LEFTMOST: u16 = 1;
pub const RIGHTMOST: u16 = 2;
/// An empty leaf whose downlink is gone (page deletion, stage 1): still
/// linked, its key range now belongs to its right sibling. Where its
/// parents go with it, the highest one still linked on its level is in
/// the spare bytes (`top_of`).
pub const HALF_DEAD: u16 = 4;
/// Unlinked from its siblings (stage 2); only scans that reached it
/// before read it, moving right. Its contents are its safe xid.
pub const DELETED: u16 = 8;
/// The left half of a split whose right half has no downlink yet: set by
/// the split's record, cleared by the record that adds the downlink. Seen
/// by a writer (a crash or an ERROR came between the two), the split is
/// finished first (nbtree's INCOMPLETE_SPLIT).
pub const INCOMPLETE_SPLIT: u16 = 16;
/// A page of a structure a gpu_learned merge replaced (set only there):
/// its contents stay intact for the scans that started on that structure,
/// its safe xid is in the special area's spare bytes (`set_retired`), and
/// VACUUM recycles it as a deleted page once no snapshot can reach it.
/// gpu_btree's own code never sets it and reads such pages as before.
pub const RETIRED: u16 = 32;
/// A leaf whose entries all have one key (deduplication): the key is
/// stored once at the front, the TIDs from the back as in a plain leaf.
/// `leaf_set` makes one wherever all of two or more keys are equal.
pub const RUN: u16 = 64;

/// Whether a page is half-dead or deleted: holds nothing, and a scan or
/// descent on it moves right whatever its fence keys say.
pub fn is_dead(s: &Special) -> bool {
    s.flags & (HALF_DEAD | DELETED) != 0
}

const TID_BYTES: usize = std::mem::size_of::<pg_sys::ItemPointerData>();
const _: () = assert!(TID_BYTES == 6);
pub const LEAF_CAPACITY: usize = CONTENT_BYTES / (8 + TID_BYTES);
/// A run leaf: one key, then the TIDs (about 2.3 times a plain leaf's).
pub const RUN_LEAF_CAPACITY: usize = (CONTENT_BYTES - 8) / TID_BYTES;
pub const INNER_CAPACITY: usize = CONTENT_BYTES / 12;
pub const NULLS_CAPACITY: usize = CONTENT_BYTES / TID_BYTES;

pub use crate::storage::{tid_from, tid_from_bytes, tid_to, Tid};

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    pub magic: u32,
    pub version: u32,
    pub root: u32,
    pub root_level: u32,
    pub generation: u64,
    /// Leftmost page of each level (level 0 = leaves).
    pub leftmost: [u32; MAX_LEVELS],
    pub null_head: u32,
    pub null_tail: u32,
    /// Pages deleted, or half-dead subtrees' pages to be deleted, not yet
    /// given to the free space map (VACUUM reads every page to recycle
    /// only while some are). Zero in metapages
    /// written before it existed: the bytes past the old struct were zero.
    pub deleted_pages: u32,
    pub _pad: u32,
}

// SAFETY: repr(C) integers only, every bit pattern valid (checked on read
// by the magic and version).
unsafe impl PageData for Meta {}

impl Meta {
    pub fn new(root: u32) -> Meta {
        let mut leftmost = [NONE; MAX_LEVELS];
        leftmost[0] = root;
        Meta {
            magic: MAGIC,
            version: VERSION,
            root,
            root_level: 0,
            generation: 1,
            leftmost,
            null_head: NONE,
            null_tail: NONE,
            deleted_pages: 0,
            _pad: 0,
        }
    }
}

pub fn corrupted(what: String) -> ! {
    crate::error::raise(
        PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED,
        format!("gpu_btree: {what}"),
        "REINDEX the index; gpuindex_check(index) reports what is wrong.",
    )
}

fn expect_kind(page: &PageRef, kind: u8) -> Special {
    let s = page.special();
    if s.page_id != PAGE_ID || s.kind != kind {
        corrupted(format!("expected a page of kind {kind}, found kind {} (page id {:#x})", s.kind, s.page_id));
    }
    s
}

pub fn read_meta(page: PageRef) -> Meta {
    expect_kind(&page, KIND_META);
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

pub fn init_meta(page: &mut PageMut, m: &Meta) {
    page.init(Special { kind: KIND_META, page_id: PAGE_ID, right: NONE, left: NONE, ..Default::default() });
    write_meta(page, m);
}

pub fn special(kind: u8, level: u8, flags: u16, low: u64, high: u64) -> Special {
    Special { kind, level, flags, low, high, right: NONE, left: NONE, page_id: PAGE_ID, ..Default::default() }
}

/// The entries of a page that holds sorted keys from the front and their
/// TIDs from the back (a gpu_btree leaf, a gpu_learned run page): the keys
/// are a slice of the page, or, on a run page, one key stored once that
/// stands for all `count` entries (deduplication).
#[derive(Clone, Copy)]
pub struct PageKeys<'a> {
    pub page: PageRef<'a>,
    keys: &'a [u64],
    run: Option<u64>,
    count: usize,
}

impl<'a> PageKeys<'a> {
    /// `count` entries; a run page's key first in the front, else the keys.
    pub fn new(page: PageRef<'a>, count: usize, run: bool) -> Self {
        if run {
            PageKeys { page, keys: &[], run: Some(page.front::<u64>(0, 1)[0]), count }
        } else {
            PageKeys { page, keys: page.front(0, count), run: None, count }
        }
    }
    pub fn count(&self) -> usize {
        self.count
    }
    /// The one key of a run page.
    pub fn run_key(&self) -> Option<u64> {
        self.run
    }
    pub fn key(&self, i: usize) -> u64 {
        match self.run {
            Some(k) if i < self.count => k,
            _ => self.keys[i],
        }
    }
    /// The first entry with key >= q (count if none).
    pub fn lower_bound(&self, q: u64) -> usize {
        match self.run {
            Some(k) if k >= q => 0,
            Some(_) => self.count,
            None => lower_bound(self.keys, q),
        }
    }
    /// The first entry with key > q (count if none).
    pub fn upper_bound(&self, q: u64) -> usize {
        match self.run {
            Some(k) if k > q => 0,
            Some(_) => self.count,
            None => upper_bound(self.keys, q),
        }
    }
    /// `lower_bound` searched from entry `from` (ascending probes of one
    /// page: each starts where the last one ended; any `from` is right).
    pub fn lower_bound_from(&self, from: usize, q: u64) -> usize {
        match self.run {
            Some(_) => self.lower_bound(q),
            None => lower_bound_from(self.keys, from, q),
        }
    }
    /// `upper_bound` searched from entry `from`.
    pub fn upper_bound_from(&self, from: usize, q: u64) -> usize {
        match (self.run, q.checked_add(1)) {
            (None, Some(next)) => lower_bound_from(self.keys, from, next),
            _ => self.upper_bound(q),
        }
    }
    /// `lower_bound` from entry `at`, predicted within ±eps (the window
    /// around it, or the whole page if the answer is outside it).
    pub fn lower_bound_near(&self, q: u64, at: usize, eps: usize) -> usize {
        match self.run {
            Some(_) => self.lower_bound(q),
            None => lower_bound_near(self.keys, q, at, eps),
        }
    }
    /// The end of the run of key `q` from entry `from` on.
    pub fn run_end(&self, from: usize, q: u64) -> usize {
        match self.run {
            Some(k) if k == q => self.count,
            Some(_) => from,
            None => self.keys[from..].iter().position(|&k| k != q).map_or(self.keys.len(), |n| from + n),
        }
    }
    /// The heap blocks of entries `from..to`'s TIDs, in order (what a
    /// tally asks of a key's run: not the keys, not the line pointers).
    pub fn blocks(&self, from: usize, to: usize) -> impl Iterator<Item = u32> + 'a {
        self.page.back_bytes(TID_BYTES, from, to).rchunks_exact(TID_BYTES).map(|t| (tid_from_bytes(t) >> 16) as u32)
    }
    /// Entries `from..to`, in key order, dead or not (one slice of each
    /// kind read, no check per entry: copied in bulk).
    pub fn entries(&self, from: usize, to: usize) -> impl Iterator<Item = (u64, Tid)> + 'a {
        let tids = self.page.back_bytes(TID_BYTES, from, to);
        // A run page's key repeats; a plain page's keys are as many as the
        // TIDs, so the repeat is never reached there.
        let keys = if self.run.is_some() { &[][..] } else { &self.keys[from..to] };
        let repeat = std::iter::repeat(self.run.unwrap_or(0));
        keys.iter().copied().chain(repeat).zip(tids.rchunks_exact(TID_BYTES)).map(|(k, t)| (k, tid_from_bytes(t)))
    }
}

/// A leaf page, read.
#[derive(Clone, Copy)]
pub struct Leaf<'a> {
    keys: PageKeys<'a>,
    pub s: Special,
}

impl<'a> std::ops::Deref for Leaf<'a> {
    type Target = PageKeys<'a>;
    fn deref(&self) -> &PageKeys<'a> {
        &self.keys
    }
}

impl<'a> Leaf<'a> {
    pub fn new(page: PageRef<'a>) -> Self {
        let s = expect_kind(&page, KIND_LEAF);
        let n = s.count as usize;
        let run = s.flags & RUN != 0 && n > 0;
        let capacity = if run { RUN_LEAF_CAPACITY } else { LEAF_CAPACITY };
        if n > capacity {
            corrupted(format!("{} of {n} entries, more than {capacity}", if run { "run leaf" } else { "leaf" }));
        }
        Leaf { keys: PageKeys::new(page, n, run), s }
    }
    pub fn first_key(&self) -> Option<u64> {
        (self.count() > 0).then(|| self.key(0))
    }
    pub fn last_key(&self) -> Option<u64> {
        (self.count() > 0).then(|| self.key(self.count() - 1))
    }
    pub fn rightmost(&self) -> bool {
        self.s.flags & RIGHTMOST != 0
    }
    /// Every entry, as (keys, TIDs).
    pub fn keys_and_tids(&self) -> (Vec<u64>, Vec<Tid>) {
        self.entries(0, self.count()).unzip()
    }
    /// Whether `key` goes in by `leaf_insert` (else the leaf is rewritten
    /// or split).
    pub fn has_room(&self, key: u64) -> bool {
        match self.run_key() {
            Some(k) => k == key && self.count() < RUN_LEAF_CAPACITY,
            None => self.count() < LEAF_CAPACITY,
        }
    }
}

/// Whether sorted `keys` fit one leaf: a plain one, or a run of one key.
pub fn fits_leaf(keys: &[u64]) -> bool {
    keys.len() <= LEAF_CAPACITY || (keys.len() <= RUN_LEAF_CAPACITY && keys.first() == keys.last())
}

/// Writes a leaf's entries (the whole contents, sorted): a run leaf where
/// there are two or more and all keys are equal, else a plain one.
pub fn leaf_set(page: &mut PageMut, keys: &[u64], tids: &[Tid]) {
    assert!(keys.len() == tids.len() && fits_leaf(keys));
    let run = keys.len() > 1 && keys.first() == keys.last();
    let front = if run { 1 } else { keys.len() };
    page.front_mut::<u64>(0, front).copy_from_slice(&keys[..front]);
    for (i, &t) in tids.iter().enumerate() {
        page.set_back(i, tid_to(t));
    }
    page.update_special(|s| {
        s.count = keys.len() as u32;
        s.flags = if run { s.flags | RUN } else { s.flags & !RUN };
    });
    page.set_used(front * 8, tids.len() * TID_BYTES);
}

/// Inserts an entry at position `pos` of a leaf that has room for its key
/// (`Leaf::has_room`): a plain leaf's key and TID, a run leaf's TID.
pub fn leaf_insert(page: &mut PageMut, pos: usize, key: u64, tid: Tid) {
    let s = page.as_ref().special();
    let n = s.count as usize;
    assert!(pos <= n);
    if s.flags & RUN != 0 && n > 0 {
        assert!(n < RUN_LEAF_CAPACITY && page.as_ref().front::<u64>(0, 1)[0] == key);
        page.set_used(8, (n + 1) * TID_BYTES);
    } else {
        assert!(n < LEAF_CAPACITY);
        page.set_used((n + 1) * 8, (n + 1) * TID_BYTES);
        let keys = page.front_mut::<u64>(0, n + 1);
        keys.copy_within(pos..n, pos + 1);
        keys[pos] = key;
    }
    page.move_back::<pg_sys::ItemPointerData>(pos, pos + 1, n - pos);
    page.set_back(pos, tid_to(tid));
    page.update_special(|s| s.count = n as u32 + 1);
}

/// The highest page of a half-dead leaf's subtree still linked on its
/// level (page deletion unlinks it next), or None when that is the leaf
/// itself. Kept in the spare bytes, where 0 (the metapage's block, never
/// a tree page) means none: leaves half-dead before the field read so.
pub fn top_of(s: &Special) -> Option<u32> {
    let b = u32::from_le_bytes(s._pad[..4].try_into().expect("4 bytes"));
    (b != META_BLOCK).then_some(b)
}

pub fn set_top(s: &mut Special, top: Option<u32>) {
    s._pad[..4].copy_from_slice(&top.unwrap_or(META_BLOCK).to_le_bytes());
}

/// Marks a page deleted (a half-dead leaf, an inner page of a deleted
/// subtree, or an empty NULL page taken off its chain), at safe xid `xid`.
pub fn set_deleted(page: &mut PageMut, xid: u64) {
    page.update_special(|s| {
        s.flags = (s.flags & !(HALF_DEAD | RUN)) | DELETED;
        s.count = 0;
    });
    page.front_mut::<u64>(0, 1)[0] = xid;
    page.set_used(8, 0);
}

/// Marks a page retired at safe xid `xid`, leaving its contents alone.
pub fn set_retired(page: &mut PageMut, xid: u64) {
    // A full xid is epoch << 32 | xid: 48 bits hold 65536 epochs.
    assert!(xid < 1 << 48, "safe xid {xid} beyond 48 bits");
    page.update_special(|s| {
        s.flags |= RETIRED;
        s._pad.copy_from_slice(&xid.to_le_bytes()[..6]);
    });
}

/// The safe xid of a deleted or retired page (None for any other page):
/// when no snapshot is older, VACUUM gives the page to the free space map.
pub fn deleted_xid(page: &PageRef) -> Option<u64> {
    let s = page.special();
    if s.page_id != PAGE_ID {
        return None;
    }
    if s.flags & RETIRED != 0 {
        let mut b = [0u8; 8];
        b[..6].copy_from_slice(&s._pad);
        return Some(u64::from_le_bytes(b));
    }
    (matches!(s.kind, KIND_LEAF | KIND_INNER | KIND_NULLS) && s.flags & DELETED != 0).then(|| page.front::<u64>(0, 1)[0])
}

/// A page for a writer: a recycled one from the free space map, else a new
/// one at the end (exclusively locked; the caller initialises it as new).
pub fn new_page(rel: pg_sys::Relation) -> Exclusive {
    crate::storage::recycle::reuse_page(rel, deleted_xid).unwrap_or_else(|| crate::storage::new_page(rel))
}

/// An inner page, read.
#[derive(Clone, Copy)]
pub struct Inner<'a> {
    page: PageRef<'a>,
    pub s: Special,
}

impl<'a> Inner<'a> {
    pub fn new(page: PageRef<'a>) -> Self {
        let s = expect_kind(&page, KIND_INNER);
        Inner { page, s }
    }
    pub fn count(&self) -> usize {
        self.s.count as usize
    }
    pub fn keys(&self) -> &'a [u64] {
        self.page.front(0, self.count())
    }
    pub fn child(&self, i: usize) -> u32 {
        self.page.back::<u32>(i)
    }
    pub fn rightmost(&self) -> bool {
        self.s.flags & RIGHTMOST != 0
    }
}

pub fn inner_set(page: &mut PageMut, keys: &[u64], children: &[u32]) {
    assert!(keys.len() == children.len() && keys.len() <= INNER_CAPACITY);
    page.front_mut::<u64>(0, keys.len()).copy_from_slice(keys);
    for (i, &c) in children.iter().enumerate() {
        page.set_back(i, c);
    }
    page.update_special(|s| s.count = keys.len() as u32);
    page.set_used(keys.len() * 8, children.len() * 4);
}

/// A NULL page, read.
pub struct Nulls<'a> {
    page: PageRef<'a>,
    pub s: Special,
}

impl<'a> Nulls<'a> {
    pub fn new(page: PageRef<'a>) -> Self {
        let s = expect_kind(&page, KIND_NULLS);
        Nulls { page, s }
    }
    pub fn count(&self) -> usize {
        self.s.count as usize
    }
    pub fn tid(&self, i: usize) -> Tid {
        tid_from(self.page.back::<pg_sys::ItemPointerData>(i))
    }
}

pub fn nulls_set(page: &mut PageMut, tids: &[Tid]) {
    assert!(tids.len() <= NULLS_CAPACITY);
    for (i, &t) in tids.iter().enumerate() {
        page.set_back(i, tid_to(t));
    }
    page.update_special(|s| s.count = tids.len() as u32);
    page.set_used(0, tids.len() * TID_BYTES);
}

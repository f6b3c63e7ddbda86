//! gpu_art's page formats: a B-link tree of variable-length keys.
//!
//! - block 0, the metapage: root, its level, the generation (bumped at
//!   every leaf split: the device mirror of the leaf level is current
//!   while it matches);
//! - leaf and inner pages: entries `(key, payload)` sorted by key, as a
//!   slot array of u16 offsets at the front (pd_lower) and the entries
//!   packed from the back (pd_upper), PostgreSQL's own line-pointer idea.
//!   An entry is a 10-byte header (stored length u16, rank u8, flags u8,
//!   payload 48 bits: a heap TID on a leaf, a child block on an inner page)
//!   and the key's bytes, padded to an even size. A key longer than
//!   `MAX_KEY` is stored long: its first `LONG_PREFIX` bytes, its length
//!   and the first page of an overflow chain holding the rest (`long.rs`).
//! - A leaf's high key is an entry outside the slots (`Special::high`);
//!   a rightmost leaf has none. Inner entries are (child's high key, child),
//!   so an inner page's last key is its high key; the last entry of a
//!   rightmost inner page has the rank `INF`.
//!
//! Keys are the byte-comparable encodings of `keys.rs` with a rank before
//! them: values, then NULL (btree's NULLS LAST), then +infinity.

use crate::storage::{PageData, CONTENT_START};
use pgrx::pg_sys;
use pgrx::prelude::*;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Special {
    pub right: u32,
    pub left: u32,
    /// Slots (entries) on the page.
    pub count: u16,
    pub flags: u16,
    /// Content offset of a leaf's high key entry; 0 on a rightmost leaf.
    pub high: u16,
    pub kind: u8,
    pub level: u8,
    /// Identifies gpu_art pages when checking.
    pub page_id: u16,
    pub _pad: [u8; 6],
}

// SAFETY: repr(C) integers, every bit pattern valid.
unsafe impl PageData for Special {}
crate::page_types!(Special);
const _: () = assert!(std::mem::size_of::<Special>() == 24);

pub const PAGE_ID: u16 = 0xA47E;
pub const META_BLOCK: u32 = 0;
pub const MAGIC: u32 = 0x4741_5254; // "GART"
pub const VERSION: u32 = 1;
pub const NONE: u32 = pg_sys::InvalidBlockNumber;
pub const MAX_LEVELS: u32 = 32;

pub const KIND_META: u8 = 1;
pub const KIND_LEAF: u8 = 2;
pub const KIND_INNER: u8 = 3;
/// A page of an overflow chain: `count` bytes of a long key's tail.
pub const KIND_OVERFLOW: u8 = 4;
/// An overflow page VACUUM freed (in the free space map, reusable).
pub const KIND_FREE: u8 = 5;

pub const LEFTMOST: u16 = 1;
pub const RIGHTMOST: u16 = 2;
/// The left half of a split whose right half has no downlink yet (as
/// gpu_btree's): a writer that meets it finishes the split first.
pub const INCOMPLETE_SPLIT: u16 = 16;
/// Some entry on the page is stored long (scans copy those keys whole
/// while the page is locked).
pub const HAS_LONG: u16 = 32;

pub const RANK_VALUE: u8 = 0;
pub const RANK_NULL: u8 = 1;
pub const RANK_INF: u8 = 2;

const ENTRY_HEADER: usize = 10;
/// The longest encoded key an entry holds whole: four entries and a high
/// key fit any page, so every split finds a point where both halves fit.
pub const MAX_KEY: usize = 2000;
/// The bytes of a long key kept in its entry: comparisons read the
/// overflow chain only for keys sharing all of them.
pub const LONG_PREFIX: usize = 512;
/// A long entry's reference to its chain: the key's length, the chain's
/// first block (u32 each).
const LONG_REF: usize = 8;
const FLAG_LONG: u8 = 1;

pub use crate::storage::{tid_to, Tid};

/// A key as entries order them: rank first, then the encoded bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key<'a> {
    pub rank: u8,
    pub bytes: &'a [u8],
}

impl<'a> Key<'a> {
    pub const MIN: Key<'static> = Key { rank: RANK_VALUE, bytes: &[] };
    pub const NULL: Key<'static> = Key { rank: RANK_NULL, bytes: &[] };
    pub const INF: Key<'static> = Key { rank: RANK_INF, bytes: &[] };

    pub fn value(bytes: &'a [u8]) -> Key<'a> {
        Key { rank: RANK_VALUE, bytes }
    }
    pub fn to_owned(self) -> OwnedKey {
        OwnedKey { rank: self.rank, bytes: self.bytes.to_vec() }
    }
}

/// A key kept beyond its page's lock.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct OwnedKey {
    pub rank: u8,
    pub bytes: Vec<u8>,
}

impl OwnedKey {
    pub fn key(&self) -> Key<'_> {
        Key { rank: self.rank, bytes: &self.bytes }
    }
}

/// An entry's key as its page holds it: the whole key, or a long key's
/// prefix and chain. Comparing one with a key may read the chain
/// (`long::compare`): it has no `Ord` of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored<'a> {
    pub rank: u8,
    pub long: bool,
    pub bytes: &'a [u8],
}

impl<'a> Stored<'a> {
    pub const INF: Stored<'static> = Stored { rank: RANK_INF, long: false, bytes: &[] };

    /// A key of at most MAX_KEY bytes, whole.
    pub fn whole(k: Key<'a>) -> Stored<'a> {
        debug_assert!(k.bytes.len() <= MAX_KEY);
        Stored { rank: k.rank, long: false, bytes: k.bytes }
    }
    /// The key, if the entry holds it whole.
    pub fn as_key(self) -> Option<Key<'a>> {
        (!self.long).then_some(Key { rank: self.rank, bytes: self.bytes })
    }
    /// A long key's prefix, length and chain.
    pub fn long_parts(self) -> (&'a [u8], usize, u32) {
        debug_assert!(self.long);
        let (p, r) = self.bytes.split_at(LONG_PREFIX);
        (p, u32::from_le_bytes(r[..4].try_into().unwrap()) as usize, u32::from_le_bytes(r[4..].try_into().unwrap()))
    }
    pub fn to_owned(self) -> OwnedStored {
        OwnedStored { rank: self.rank, long: self.long, bytes: self.bytes.to_vec() }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedStored {
    pub rank: u8,
    pub long: bool,
    pub bytes: Vec<u8>,
}

impl OwnedStored {
    pub fn stored(&self) -> Stored<'_> {
        Stored { rank: self.rank, long: self.long, bytes: &self.bytes }
    }
    /// A long key's entry bytes: its prefix, length and chain.
    pub fn long(key: &[u8], chain: u32) -> OwnedStored {
        let mut bytes = Vec::with_capacity(LONG_PREFIX + LONG_REF);
        bytes.extend_from_slice(&key[..LONG_PREFIX]);
        bytes.extend_from_slice(&(key.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&chain.to_le_bytes());
        OwnedStored { rank: RANK_VALUE, long: true, bytes }
    }
}

/// The bytes an entry of a key of `len` bytes takes, its slot included.
pub fn entry_size(len: usize) -> usize {
    (ENTRY_HEADER + len).next_multiple_of(2) + 2
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    pub magic: u32,
    pub version: u32,
    pub root: u32,
    pub root_level: u32,
    pub generation: u64,
}

// SAFETY: repr(C) integers only (checked on read by the magic and version).
unsafe impl PageData for Meta {}

pub fn corrupted(what: String) -> ! {
    crate::error::raise(
        PgSqlErrorCode::ERRCODE_INDEX_CORRUPTED,
        format!("gpu_art: {what}"),
        "REINDEX the index; gpu_art_check(index) reports what is wrong.",
    )
}

/// A page for a split or an overflow chain: a freed overflow page from
/// the free space map, else a new one.
pub fn new_page(rel: pg_sys::Relation) -> Exclusive {
    let free = |p: &PageRef| {
        let s = p.special();
        (s.page_id == PAGE_ID && s.kind == KIND_FREE).then_some(crate::storage::recycle::REUSABLE_NOW)
    };
    crate::storage::recycle::reuse_page(rel, free).unwrap_or_else(|| crate::storage::new_page(rel))
}

pub fn special(kind: u8, level: u8, flags: u16) -> Special {
    Special { kind, level, flags, right: NONE, left: NONE, page_id: PAGE_ID, ..Default::default() }
}

pub fn read_meta(page: PageRef) -> Meta {
    let s = page.special();
    let m: Meta = page.header();
    if s.page_id != PAGE_ID || s.kind != KIND_META || m.magic != MAGIC || m.version != VERSION {
        corrupted(format!("bad metapage (magic {:#x}, version {})", m.magic, m.version));
    }
    m
}

pub fn write_meta(page: &mut PageMut, m: &Meta) {
    page.set_header(*m);
    page.set_used(std::mem::size_of::<Meta>(), 0);
}

pub fn init_meta(page: &mut PageMut, m: &Meta) {
    page.init(special(KIND_META, 0, 0));
    write_meta(page, m);
}

/// A leaf or inner page, read.
#[derive(Clone, Copy)]
pub struct Node<'a> {
    page: PageRef<'a>,
    pub s: Special,
}

impl<'a> Node<'a> {
    pub fn new(page: PageRef<'a>) -> Self {
        let s = page.special();
        if s.page_id != PAGE_ID || (s.kind != KIND_LEAF && s.kind != KIND_INNER) {
            corrupted(format!("expected a leaf or inner page, found kind {} (page id {:#x})", s.kind, s.page_id));
        }
        Node { page, s }
    }
    /// A page already checked by `new`, with its special area (a copy of
    /// it, read again row by row).
    pub fn checked(page: PageRef<'a>, s: Special) -> Self {
        Node { page, s }
    }
    pub fn count(&self) -> usize {
        self.s.count as usize
    }
    pub fn is_leaf(&self) -> bool {
        self.s.kind == KIND_LEAF
    }
    pub fn rightmost(&self) -> bool {
        self.s.flags & RIGHTMOST != 0
    }
    pub fn leftmost(&self) -> bool {
        self.s.flags & LEFTMOST != 0
    }
    fn entry_at(&self, off: usize) -> (Stored<'a>, u64) {
        let h: &[u8] = self.page.front(off, ENTRY_HEADER);
        let len = u16::from_le_bytes([h[0], h[1]]) as usize;
        let mut p = [0u8; 8];
        p[..6].copy_from_slice(&h[4..10]);
        let long = h[3] & FLAG_LONG != 0;
        (Stored { rank: h[2], long, bytes: self.page.front(off + ENTRY_HEADER, len) }, u64::from_le_bytes(p))
    }
    fn slot(&self, i: usize) -> usize {
        self.page.front::<u16>(0, self.count())[i] as usize
    }
    /// Entry i: its key and payload (heap TID or child block).
    pub fn entry(&self, i: usize) -> (Stored<'a>, u64) {
        self.entry_at(self.slot(i))
    }
    pub fn stored(&self, i: usize) -> Stored<'a> {
        self.entry(i).0
    }
    /// The page's high key: every key on it is <= it, every key right of
    /// it >= it. INF on a rightmost page.
    pub fn high(&self) -> Stored<'a> {
        if self.rightmost() {
            Stored::INF
        } else if self.is_leaf() {
            self.entry_at(self.s.high as usize).0
        } else {
            self.stored(self.count() - 1)
        }
    }
    /// Copies into `image` (a page-sized buffer) what reading entries
    /// [w0, w1) needs, at the page's own offsets: their slots and their
    /// bytes. A node over the image reads those entries as the page's.
    pub fn copy_entries(&self, w0: usize, w1: usize, image: &mut [u8]) {
        let mut copy = |at: usize, len: usize| {
            image[CONTENT_START + at..][..len].copy_from_slice(self.page.front::<u8>(at, len));
        };
        copy(2 * w0, 2 * (w1 - w0));
        for i in w0..w1 {
            let off = self.slot(i);
            let len = u16::from_le_bytes(self.page.front::<u8>(off, 2).try_into().unwrap()) as usize;
            copy(off, ENTRY_HEADER + len);
        }
    }
    /// Bytes free between the slots and the entries.
    pub fn free(&self) -> usize {
        let (lower, upper) = self.page.used();
        upper - lower
    }
    /// How many of entries [from, to), none of them long, are below q.
    pub fn entries_below(&self, from: usize, to: usize, q: Key) -> usize {
        let (mut lo, mut hi) = (from, to);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.stored(mid).as_key().expect("a page without long keys") < q {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo - from
    }
    /// The first entry whose key is >= q (`strict`: > q); long keys'
    /// chains are read from `rel` (the page is locked).
    pub fn search(&self, rel: pg_sys::Relation, q: Key, strict: bool) -> usize {
        let (mut lo, mut hi) = (0, self.count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let c = super::long::compare(rel, self.stored(mid), q);
            if c.is_lt() || (strict && c.is_eq()) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// Writes one entry at content offset `off`.
fn put_entry(page: &mut PageMut, off: usize, key: Stored, payload: u64) {
    let b = page.front_mut::<u8>(off, ENTRY_HEADER + key.bytes.len());
    b[..2].copy_from_slice(&(key.bytes.len() as u16).to_le_bytes());
    b[2] = key.rank;
    b[3] = if key.long { FLAG_LONG } else { 0 };
    b[4..10].copy_from_slice(&payload.to_le_bytes()[..6]);
    b[ENTRY_HEADER..].copy_from_slice(key.bytes);
}

/// Inserts an entry as slot `pos` (the caller checked it fits: `free()`).
pub fn insert_entry(page: &mut PageMut, pos: usize, key: Stored, payload: u64) {
    let (lower, upper) = page.as_ref().used();
    let count = page.as_ref().special().count as usize;
    let size = entry_size(key.bytes.len());
    assert!(upper - lower >= size, "gpu_art: entry does not fit");
    let off = upper - (size - 2);
    put_entry(page, off, key, payload);
    let slots = page.front_mut::<u16>(0, count + 1);
    slots.copy_within(pos..count, pos + 1);
    slots[pos] = off as u16;
    page.set_used(lower + 2, CONTENT_BYTES - off);
    page.update_special(|s| {
        s.count += 1;
        if key.long {
            s.flags |= HAS_LONG;
        }
    });
}

/// Replaces a page's contents: `entries` in order and a leaf's high key
/// (None on a rightmost leaf and on inner pages). The caller checked they
/// fit (`fits`).
pub fn set_entries<'k>(page: &mut PageMut, entries: &[(Stored<'k>, u64)], high: Option<Stored<'k>>) {
    let mut upper = CONTENT_BYTES;
    let mut high_off = 0;
    if let Some(h) = high {
        upper -= entry_size(h.bytes.len()) - 2;
        put_entry(page, upper, h, 0);
        high_off = upper;
    }
    let mut slots = Vec::with_capacity(entries.len());
    for &(k, p) in entries {
        upper -= entry_size(k.bytes.len()) - 2;
        put_entry(page, upper, k, p);
        slots.push(upper as u16);
    }
    assert!(slots.len() * 2 <= upper, "gpu_art: entries do not fit a page");
    page.front_mut::<u16>(0, slots.len()).copy_from_slice(&slots);
    page.set_used(slots.len() * 2, CONTENT_BYTES - upper);
    let long = entries.iter().any(|(k, _)| k.long);
    page.update_special(|s| {
        s.count = slots.len() as u16;
        s.high = high_off as u16;
        s.flags = if long { s.flags | HAS_LONG } else { s.flags & !HAS_LONG };
    });
}

/// Where to split `sizes` (entry sizes, slots included) into a left page
/// that also holds a copy of its last key as high key (leaves; `leaf`)
/// and a right page that holds `right_extra` more bytes (its high key):
/// the feasible point nearest to `target` bytes on the left.
pub fn split_point(sizes: &[usize], leaf: bool, right_extra: usize, target: usize) -> usize {
    let total: usize = sizes.iter().sum();
    let mut left = 0;
    let mut best: Option<(usize, usize)> = None;
    for m in 1..sizes.len() {
        left += sizes[m - 1];
        let left_bytes = left + if leaf { sizes[m - 1] } else { 0 };
        if left_bytes <= CONTENT_BYTES && total - left + right_extra <= CONTENT_BYTES {
            let d = left.abs_diff(target);
            if best.is_none_or(|(_, bd)| d < bd) {
                best = Some((m, d));
            }
        }
    }
    match best {
        Some((m, _)) => m,
        None => corrupted(format!("no split point for {} entries of {total} bytes", sizes.len())),
    }
}

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
//!   a rightmost leaf has none. So is its low fence (`Special::low`), the
//!   first bytes of its left neighbour's high key. Every key a leaf can
//!   hold lies between the two, so it starts with their common prefix:
//!   that prefix (`Special::prefix` bytes of the high key) is stored once
//!   and the leaf's entries hold only what follows it (URLs: about half
//!   the bytes). Long entries are stored whole. Inner pages have no
//!   prefix. Inner entries are (child's high key, child),
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
    /// Content offset of a leaf's low fence (the first `PREFIX_MAX` bytes
    /// of its left neighbour's high key, kept to compute prefixes at
    /// splits); 0 when it has none (a leftmost leaf, older pages).
    pub low: u16,
    /// Bytes every key of the leaf starts with (`prefix()`), stored once:
    /// the high key's first `prefix` bytes; entries hold the rest.
    pub prefix: u16,
    pub _pad: [u8; 2],
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
/// The longest leaf prefix, and of a low fence.
pub const PREFIX_MAX: usize = 256;
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
#[derive(Clone, Copy, Debug)]
pub struct Stored<'a> {
    pub rank: u8,
    pub long: bool,
    /// The leaf's prefix, which `bytes` follow (empty but for the entries
    /// of a prefixed leaf).
    pub head: &'a [u8],
    pub bytes: &'a [u8],
}

impl<'a> Stored<'a> {
    pub const INF: Stored<'static> = Stored { rank: RANK_INF, long: false, head: &[], bytes: &[] };

    /// A key of at most MAX_KEY bytes, whole.
    pub fn whole(k: Key<'a>) -> Stored<'a> {
        debug_assert!(k.bytes.len() <= MAX_KEY);
        Stored { rank: k.rank, long: false, head: &[], bytes: k.bytes }
    }
    /// The key, if the entry holds it whole in one piece (not long, not
    /// under a leaf prefix).
    pub fn as_key(self) -> Option<Key<'a>> {
        (!self.long && self.head.is_empty()).then_some(Key { rank: self.rank, bytes: self.bytes })
    }
    /// The entry's key against q, for an entry that is not long.
    pub fn cmp_short(self, q: Key) -> std::cmp::Ordering {
        debug_assert!(!self.long);
        self.rank.cmp(&q.rank).then_with(|| cmp_split(self.head, self.bytes, q.bytes))
    }
    /// The key's first bytes as the entry holds them (a long key's
    /// prefix; a short key's head and bytes).
    fn leading(self) -> (&'a [u8], &'a [u8]) {
        if self.long {
            (self.long_parts().0, &[])
        } else {
            (self.head, self.bytes)
        }
    }
    /// A long key's prefix, length and chain.
    pub fn long_parts(self) -> (&'a [u8], usize, u32) {
        debug_assert!(self.long);
        let (p, r) = self.bytes.split_at(LONG_PREFIX);
        (p, u32::from_le_bytes(r[..4].try_into().unwrap()) as usize, u32::from_le_bytes(r[4..].try_into().unwrap()))
    }
    pub fn to_owned(self) -> OwnedStored {
        OwnedStored { rank: self.rank, long: self.long, bytes: [self.head, self.bytes].concat() }
    }
}

/// The key `head ++ tail` against `q` (bytes only).
pub fn cmp_split(head: &[u8], tail: &[u8], q: &[u8]) -> std::cmp::Ordering {
    if head.len() <= q.len() {
        head.cmp(&q[..head.len()]).then_with(|| tail.cmp(&q[head.len()..]))
    } else {
        // q ends inside the head: equal so far means q is the shorter.
        head[..q.len()].cmp(q).then(std::cmp::Ordering::Greater)
    }
}

/// How many leading bytes (at most PREFIX_MAX) a leaf's low fence (its
/// first bytes) and high key share: the prefix of every key between them.
pub fn fence_prefix(low: Option<&[u8]>, high: Option<Stored>) -> usize {
    let (Some(low), Some(high)) = (low, high) else { return 0 };
    if high.rank != RANK_VALUE {
        return 0;
    }
    let (a, b) = high.leading();
    a.iter().chain(b).zip(low).take(PREFIX_MAX).take_while(|(x, y)| x == y).count()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedStored {
    pub rank: u8,
    pub long: bool,
    pub bytes: Vec<u8>,
}

impl OwnedStored {
    pub fn stored(&self) -> Stored<'_> {
        Stored { rank: self.rank, long: self.long, head: &[], bytes: &self.bytes }
    }
    /// The first bytes (at most PREFIX_MAX) a leaf keeps of its left
    /// neighbour's high key, this: its low fence. None for NULL and +inf
    /// (no prefix follows from them).
    pub fn low_fence(&self) -> Option<&[u8]> {
        low_fence_of(self.rank, &self.bytes)
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

/// The bytes whole key `k` takes as an entry of a leaf of prefix `prefix`
/// (a long entry is stored whole).
pub fn entry_size_under(k: Stored, prefix: usize) -> usize {
    entry_size((k.head.len() + k.bytes.len()).saturating_sub(if k.long { 0 } else { prefix }))
}

/// A low fence's bytes: the first PREFIX_MAX of a value key (None for
/// NULL and +inf: no prefix follows from them).
pub fn low_fence_of(rank: u8, bytes: &[u8]) -> Option<&[u8]> {
    (rank == RANK_VALUE).then(|| &bytes[..bytes.len().min(PREFIX_MAX)])
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
    /// The leaf's prefix (the high key's first `s.prefix` bytes).
    head: &'a [u8],
}

impl<'a> Node<'a> {
    pub fn new(page: PageRef<'a>) -> Self {
        let s = page.special();
        if s.page_id != PAGE_ID || (s.kind != KIND_LEAF && s.kind != KIND_INNER) {
            corrupted(format!("expected a leaf or inner page, found kind {} (page id {:#x})", s.kind, s.page_id));
        }
        let n = Self::checked(page, s);
        if n.s.prefix as usize > PREFIX_MAX || (n.s.prefix > 0 && (n.s.high == 0 || n.head.len() != n.s.prefix as usize)) {
            corrupted(format!("leaf prefix of {} bytes without a high key that long", n.s.prefix));
        }
        n
    }
    /// A page already checked by `new`, with its special area (a copy of
    /// it, read again row by row).
    pub fn checked(page: PageRef<'a>, s: Special) -> Self {
        let mut n = Node { page, s, head: &[] };
        if s.prefix > 0 && s.high != 0 {
            let h = n.entry_at(s.high as usize).0.bytes;
            n.head = &h[..h.len().min(s.prefix as usize)];
        }
        n
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
    /// The bytes every key of the page starts with, stored once.
    pub fn prefix(&self) -> &'a [u8] {
        self.head
    }
    /// The entry at content offset `off` as stored (no head).
    fn entry_at(&self, off: usize) -> (Stored<'a>, u64) {
        let h: &[u8] = self.page.front(off, ENTRY_HEADER);
        let len = u16::from_le_bytes([h[0], h[1]]) as usize;
        let mut p = [0u8; 8];
        p[..6].copy_from_slice(&h[4..10]);
        let long = h[3] & FLAG_LONG != 0;
        (Stored { rank: h[2], long, head: &[], bytes: self.page.front(off + ENTRY_HEADER, len) }, u64::from_le_bytes(p))
    }
    fn slot(&self, i: usize) -> usize {
        self.page.front::<u16>(0, self.count())[i] as usize
    }
    /// Entry i: its key and payload (heap TID or child block).
    pub fn entry(&self, i: usize) -> (Stored<'a>, u64) {
        let (mut k, p) = self.entry_at(self.slot(i));
        if !k.long {
            k.head = self.head;
        }
        (k, p)
    }
    pub fn stored(&self, i: usize) -> Stored<'a> {
        self.entry(i).0
    }
    /// Entry i's rank and bytes after the page's prefix (None: long).
    pub fn tail(&self, i: usize) -> Option<Key<'a>> {
        let (k, _) = self.entry_at(self.slot(i));
        (!k.long).then_some(Key { rank: k.rank, bytes: k.bytes })
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
    /// A leaf's low fence (`OwnedStored::low_fence`), if it keeps one.
    pub fn low(&self) -> Option<&'a [u8]> {
        (self.s.low != 0).then(|| self.entry_at(self.s.low as usize).0.bytes)
    }
    /// Copies into `image` (a page-sized buffer) what reading entries
    /// [w0, w1) needs, at the page's own offsets: their slots, their bytes
    /// and the high key (which holds the prefix).
    pub fn copy_entries(&self, w0: usize, w1: usize, image: &mut [u8]) {
        let mut copy = |at: usize, len: usize| {
            image[CONTENT_START + at..][..len].copy_from_slice(self.page.front::<u8>(at, len));
        };
        let len_at = |off: usize| u16::from_le_bytes(self.page.front::<u8>(off, 2).try_into().unwrap()) as usize;
        copy(2 * w0, 2 * (w1 - w0));
        for i in w0..w1 {
            let off = self.slot(i);
            copy(off, ENTRY_HEADER + len_at(off));
        }
        if self.s.high != 0 {
            let off = self.s.high as usize;
            copy(off, ENTRY_HEADER + len_at(off));
        }
    }
    /// Bytes free between the slots and the entries.
    pub fn free(&self) -> usize {
        let (lower, upper) = self.page.used();
        upper - lower
    }
    /// The bytes key `k` (whole) takes as an entry of this page.
    pub fn entry_bytes(&self, k: Stored) -> usize {
        entry_size_under(k, self.head.len())
    }
    /// q without the page's prefix, or where q lies when it does not start
    /// with it: below (Less) or above (Greater) every key of the page.
    pub fn strip<'q>(&self, q: Key<'q>) -> Result<Key<'q>, std::cmp::Ordering> {
        if self.head.is_empty() {
            return Ok(q);
        }
        if q.rank != RANK_VALUE {
            return Err(q.rank.cmp(&RANK_VALUE));
        }
        match q.bytes.strip_prefix(self.head) {
            Some(t) => Ok(Key { rank: q.rank, bytes: t }),
            None => Err(cmp_split(self.head, &[], q.bytes).reverse()),
        }
    }
    /// How many of entries [from, to), none of them long, are below the
    /// stripped key t (`strip`).
    pub fn tails_below(&self, from: usize, to: usize, t: Key) -> usize {
        let (mut lo, mut hi) = (from, to);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.tail(mid).expect("a page without long keys") < t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo - from
    }
    /// How many of entries [from, to), none of them long, are below q.
    pub fn entries_below(&self, from: usize, to: usize, q: Key) -> usize {
        match self.strip(q) {
            Ok(t) => self.tails_below(from, to, t),
            Err(std::cmp::Ordering::Less) => 0,
            Err(_) => to - from,
        }
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

/// Writes one entry at content offset `off`: its key's bytes past the
/// first `skip` (the page's prefix).
fn put_entry(page: &mut PageMut, off: usize, key: Stored, skip: usize, payload: u64) {
    let (head, rest) = match skip.checked_sub(key.head.len()) {
        None => (&key.head[skip..], key.bytes),
        Some(more) => (&[][..], &key.bytes[more..]),
    };
    let e = page.front_mut::<u8>(off, ENTRY_HEADER + head.len() + rest.len());
    e[..2].copy_from_slice(&((head.len() + rest.len()) as u16).to_le_bytes());
    e[2] = key.rank;
    e[3] = if key.long { FLAG_LONG } else { 0 };
    e[4..10].copy_from_slice(&payload.to_le_bytes()[..6]);
    e[ENTRY_HEADER..][..head.len()].copy_from_slice(head);
    e[ENTRY_HEADER + head.len()..].copy_from_slice(rest);
}

/// Whether key `k` starts with `prefix`.
fn under(k: Stored, prefix: &[u8]) -> bool {
    if prefix.is_empty() {
        return true;
    }
    let (h, b) = k.leading();
    k.rank == RANK_VALUE
        && if prefix.len() <= h.len() { h.starts_with(prefix) } else { prefix.starts_with(h) && b.starts_with(&prefix[h.len()..]) }
}

/// Inserts an entry as slot `pos` (the caller checked it fits:
/// `free() >= entry_bytes(key)`); a key that does not start with a
/// prefixed leaf's prefix is a corrupted tree (it belongs elsewhere).
pub fn insert_entry(page: &mut PageMut, pos: usize, key: Stored, payload: u64) {
    let (lower, upper) = page.as_ref().used();
    let n = Node::checked(page.as_ref(), page.as_ref().special());
    let count = n.count();
    let prefix = n.prefix().len();
    if !under(key, n.prefix()) {
        corrupted(format!("a key outside its leaf's prefix of {prefix} bytes"));
    }
    let size = n.entry_bytes(key);
    assert!(upper - lower >= size, "gpu_art: entry does not fit");
    let off = upper - (size - 2);
    put_entry(page, off, key, if key.long { 0 } else { prefix }, payload);
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

/// Replaces a page's contents: `entries` in order, a leaf's high key
/// (None on a rightmost leaf and on inner pages) and low fence (its left
/// neighbour's high key, `OwnedStored::low_fence`; None on a leftmost
/// leaf and on inner pages). The leaf's prefix follows from the fences.
/// The caller checked they fit (`split_point`, `entry_bytes`).
pub fn set_entries<'k>(page: &mut PageMut, entries: &[(Stored<'k>, u64)], high: Option<Stored<'k>>, low: Option<&[u8]>) {
    let prefix = fence_prefix(low, high);
    let mut upper = CONTENT_BYTES;
    let (mut high_off, mut low_off) = (0, 0);
    if let Some(h) = high {
        upper -= entry_size(h.head.len() + h.bytes.len()) - 2;
        put_entry(page, upper, h, 0, 0);
        high_off = upper;
    }
    if let Some(l) = low {
        upper -= entry_size(l.len()) - 2;
        put_entry(page, upper, Stored { rank: RANK_VALUE, long: false, head: &[], bytes: l }, 0, 0);
        low_off = upper;
    }
    let mut slots = Vec::with_capacity(entries.len());
    let high_lead = high.map(|h| [h.head, h.bytes].concat());
    let shared = high_lead.as_deref().map_or(&[][..], |h| &h[..prefix]);
    for &(k, p) in entries {
        if !under(k, shared) {
            corrupted(format!("an entry outside its leaf's fences (prefix of {prefix} bytes)"));
        }
        upper -= entry_size_under(k, prefix) - 2;
        put_entry(page, upper, k, if k.long { 0 } else { prefix }, p);
        slots.push(upper as u16);
    }
    assert!(slots.len() * 2 <= upper, "gpu_art: entries do not fit a page");
    page.front_mut::<u16>(0, slots.len()).copy_from_slice(&slots);
    page.set_used(slots.len() * 2, CONTENT_BYTES - upper);
    let long = entries.iter().any(|(k, _)| k.long);
    page.update_special(|s| {
        s.count = slots.len() as u16;
        s.high = high_off as u16;
        s.low = low_off as u16;
        s.prefix = prefix as u16;
        s.flags = if long { s.flags | HAS_LONG } else { s.flags & !HAS_LONG };
    });
}

/// Where to split `sizes` (entry sizes, slots included) into a left page
/// of entries [..m] that also holds `left_extra(m)` bytes (a leaf's high
/// key and low fence) and a right page of the rest and `right_extra(m)`:
/// the feasible point nearest to `target` bytes on the left.
pub fn split_point(sizes: &[usize], left_extra: impl Fn(usize) -> usize, right_extra: impl Fn(usize) -> usize, target: usize) -> usize {
    let total: usize = sizes.iter().sum();
    let mut left = 0;
    let mut best: Option<(usize, usize)> = None;
    for m in 1..sizes.len() {
        left += sizes[m - 1];
        if left + left_extra(m) <= CONTENT_BYTES && total - left + right_extra(m) <= CONTENT_BYTES {
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

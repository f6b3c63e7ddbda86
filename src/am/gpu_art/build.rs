//! The build: every (key, TID) as one byte string (rank, encoded key,
//! TID big-endian: byte order is entry order, the encodings being
//! prefix-free) through PostgreSQL's tuplesort within
//! `maintenance_work_mem` (spilling to temporary files beyond it), then
//! the sorted entries streamed into leaves and the inner levels written
//! bottom up (no WAL per page; the common build logs every page).

use super::keys::{self, KeyKind};
use super::long;
use super::page::*;
use crate::am::common::HeapRows;
use crate::storage::{new_page_in, Fork};
use pgrx::pg_sys;

const TID_BYTES: usize = 6;

/// PostgreSQL's datum sort over bytea (after an ERROR, its memory and
/// temporary files go with the transaction's).
struct Sort {
    state: *mut pg_sys::Tuplesortstate,
    /// One varlena, reused for every row (the sort copies it), of `cap`
    /// data bytes.
    buf: *mut u8,
    cap: usize,
}

impl Sort {
    fn new() -> Sort {
        // SAFETY: plain calls; the memory lives in the current context.
        unsafe {
            let state = pg_sys::tuplesort_begin_datum(
                pg_sys::BYTEAOID,
                pg_sys::Oid::from(pg_sys::ByteaLessOperator),
                pg_sys::InvalidOid,
                false,
                pg_sys::maintenance_work_mem,
                std::ptr::null_mut(),
                pg_sys::TUPLESORT_NONE as i32,
            );
            let cap = 1 + MAX_KEY + TID_BYTES;
            Sort { state, buf: pg_sys::palloc(pg_sys::VARHDRSZ + cap) as *mut u8, cap }
        }
    }

    fn push(&mut self, rank: u8, key: &[u8], tid: Tid) {
        let len = 1 + key.len() + TID_BYTES;
        // SAFETY: buf holds VARHDRSZ + cap bytes, grown to len first.
        unsafe {
            if len > self.cap {
                self.cap = len;
                self.buf = pg_sys::repalloc(self.buf as *mut std::ffi::c_void, pg_sys::VARHDRSZ + len) as *mut u8;
            }
            pgrx::set_varsize_4b(self.buf as *mut pg_sys::varlena, (pg_sys::VARHDRSZ + len) as i32);
            let d = std::slice::from_raw_parts_mut(self.buf.add(pg_sys::VARHDRSZ), len);
            d[0] = rank;
            d[1..1 + key.len()].copy_from_slice(key);
            d[1 + key.len()..].copy_from_slice(&tid.to_be_bytes()[2..]);
            pg_sys::tuplesort_putdatum(self.state, pg_sys::Datum::from(self.buf), false);
        }
    }

    /// Sorts, then calls `f` with each entry in order.
    fn drain(&mut self, mut f: impl FnMut(Key, Tid)) {
        // SAFETY: the sort's own state; each datum it returns is a palloc'd
        // bytea copy, freed after use.
        unsafe {
            pg_sys::tuplesort_performsort(self.state);
            let (mut v, mut null) = (pg_sys::Datum::from(0usize), false);
            while pg_sys::tuplesort_getdatum(self.state, true, &mut v, &mut null, std::ptr::null_mut()) {
                let p = v.cast_mut_ptr::<pg_sys::varlena>();
                let d = std::slice::from_raw_parts(pgrx::varlena::vardata_any(p) as *const u8, pgrx::varlena::varsize_any_exhdr(p));
                let mut t = [0u8; 8];
                t[2..].copy_from_slice(&d[d.len() - TID_BYTES..]);
                f(Key { rank: d[0], bytes: &d[1..d.len() - TID_BYTES] }, u64::from_be_bytes(t));
                pg_sys::pfree(p as *mut std::ffi::c_void);
            }
        }
    }

    fn end(self) {
        // SAFETY: begun in new(), ended once.
        unsafe { pg_sys::tuplesort_end(self.state) };
    }
}

/// Builds into `fork` from the heap rows (none for an empty index).
pub fn build(index: pg_sys::Relation, fork: Fork, rows: Option<&HeapRows>) -> f64 {
    let kind: KeyKind = keys::index_kind(index);
    let mut sort = Sort::new();
    let mut n = 0.0;
    if let Some(rows) = rows {
        let mut enc = Vec::new();
        rows.scan(index, |tid, value| {
            match value {
                Some(v) => {
                    keys::encode(v, kind, &mut enc);
                    sort.push(RANK_VALUE, &enc, tid);
                }
                None => sort.push(RANK_NULL, &[], tid),
            }
            n += 1.0;
        });
    }
    let mut meta = new_page_in(index, fork);
    assert_eq!(meta.block(), META_BLOCK);
    let fill = CONTENT_BYTES * super::options::fillfactor(index) / 100;
    let mut leaves = LevelWriter::new(index, fork, 0);
    let mut page = PageBuf::default();
    // The left neighbour's high key's first bytes: the low fence of the
    // leaf being filled. With its high key (its last entry) it gives the
    // prefix its entries are stored without.
    let mut low: Option<Vec<u8>> = None;
    sort.drain(|key, tid| {
        let long = (key.bytes.len() > MAX_KEY).then(|| long::store(index, key.bytes, Some(fork)));
        let stored = long.as_ref().map_or(Stored::whole(key), |l| l.stored());
        // A leaf holds its entries (under the prefix its low fence shares
        // with this key, if this key ends it), a copy of its last key
        // (high key) and its low fence.
        let prefix = fence_prefix(low.as_deref(), Some(stored));
        let bytes = page.bytes_at(prefix) + entry_size_under(stored, prefix);
        let fences = entry_size(stored.bytes.len()) + low.as_ref().map_or(0, |l| entry_size(l.len()));
        if !page.is_empty() && (bytes > fill || bytes + fences > CONTENT_BYTES) {
            low = leaves.page(&page, low.as_deref(), false).low_fence().map(<[u8]>::to_vec);
            page.clear();
        }
        page.push(stored, tid);
        page.last_long = long.is_some().then(|| key.bytes.to_vec());
    });
    sort.end();
    if page.bytes_at(0) + low.as_ref().map_or(0, |l| entry_size(l.len())) > CONTENT_BYTES {
        // Whole, the last leaf's entries do not fit (a rightmost leaf has
        // no prefix: any key may follow): they stay a prefixed leaf, and
        // an empty rightmost leaf follows it.
        low = leaves.page(&page, low.as_deref(), false).low_fence().map(<[u8]>::to_vec);
        page.clear();
    }
    leaves.page(&page, low.as_deref(), true);
    let mut items = leaves.finish();
    let mut level = 0u8;
    while items.len() > 1 {
        level += 1;
        if level as u32 >= MAX_LEVELS {
            corrupted(format!("tree deeper than {MAX_LEVELS} levels"));
        }
        let mut w = LevelWriter::new(index, fork, level);
        page.clear();
        let n_items = items.len();
        for (i, (high, block)) in items.iter().enumerate() {
            let size = entry_size(high.bytes.len());
            if page.entries.len() >= 2 && page.bytes_at(0) + size > fill {
                w.page(&page, None, false);
                page.clear();
            }
            page.push(high.stored(), *block as u64);
            if i + 1 == n_items {
                w.page(&page, None, true);
            }
        }
        items = w.finish();
    }
    let root = items[0].1;
    let m = Meta { magic: MAGIC, version: VERSION, root, root_level: level as u32, generation: 1 };
    init_meta(&mut meta.page_mut_unlogged(), &m);
    meta.mark_dirty();
    n
}

/// One page's entries while a level is written.
#[derive(Default)]
struct PageBuf {
    arena: Vec<u8>,
    /// (start in arena, length, rank, long, payload)
    entries: Vec<(usize, usize, u8, bool, u64)>,
    /// The entries' sizes (at most one byte each over), and how much
    /// less a byte of prefix makes them: `bytes_at`.
    bytes: usize,
    short: usize,
    /// The last entry's whole key when it is stored long (a leaf's high
    /// key gets a chain of its own).
    last_long: Option<Vec<u8>>,
}

impl PageBuf {
    /// Appends a whole key's entry.
    fn push(&mut self, key: Stored, payload: u64) {
        debug_assert!(key.head.is_empty());
        self.entries.push((self.arena.len(), key.bytes.len(), key.rank, key.long, payload));
        self.arena.extend_from_slice(key.bytes);
        self.bytes += entry_size(key.bytes.len()) + 1;
        self.short += usize::from(!key.long);
    }
    /// An upper bound of the bytes the entries take on a page of prefix
    /// `prefix` (which they all start with).
    fn bytes_at(&self, prefix: usize) -> usize {
        self.bytes - self.short * prefix
    }
    fn clear(&mut self) {
        self.arena.clear();
        self.entries.clear();
        self.bytes = 0;
        self.short = 0;
        self.last_long = None;
    }
    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    fn keys(&self) -> Vec<(Stored<'_>, u64)> {
        self.entries.iter().map(|&(s, l, rank, long, p)| (Stored { rank, long, head: &[], bytes: &self.arena[s..s + l] }, p)).collect()
    }
}

/// Writes the pages of one level left to right, linked both ways, the
/// first LEFTMOST and the last RIGHTMOST, holding only the previous page.
struct LevelWriter {
    index: pg_sys::Relation,
    fork: Fork,
    level: u8,
    prev: Option<Exclusive>,
    /// (high key, block) of each page written; INF for the last.
    out: Vec<(OwnedStored, u32)>,
}

impl LevelWriter {
    fn new(index: pg_sys::Relation, fork: Fork, level: u8) -> Self {
        LevelWriter { index, fork, level, prev: None, out: Vec::new() }
    }

    /// Writes the page of `buf`'s entries (a leaf's low fence: `low`);
    /// returns its high key.
    fn page(&mut self, buf: &PageBuf, low: Option<&[u8]>, last: bool) -> &OwnedStored {
        let entries = buf.keys();
        let high = match (&buf.last_long, entries.last()) {
            _ if last => Stored::INF.to_owned(),
            (Some(k), _) => long::store(self.index, k, Some(self.fork)),
            (None, Some(e)) => e.0.to_owned(),
            (None, None) => Stored::INF.to_owned(),
        };
        let mut g = new_page_in(self.index, self.fork);
        let block = g.block();
        {
            let mut p = g.page_mut_unlogged();
            let kind = if self.level == 0 { KIND_LEAF } else { KIND_INNER };
            let mut flags = if last { RIGHTMOST } else { 0 };
            if self.out.is_empty() {
                flags |= LEFTMOST;
            }
            let mut s = special(kind, self.level, flags);
            s.left = self.prev.as_ref().map_or(NONE, |p| p.block());
            p.init(s);
            let leaf_high = (self.level == 0 && !last).then(|| high.stored());
            set_entries(&mut p, &entries, leaf_high, low);
        }
        if let Some(mut p) = self.prev.take() {
            p.page_mut_unlogged().update_special(|s| s.right = block);
            p.mark_dirty();
        }
        self.out.push((high, block));
        self.prev = Some(g);
        &self.out.last().expect("a page").0
    }

    fn finish(self) -> Vec<(OwnedStored, u32)> {
        if let Some(p) = &self.prev {
            p.mark_dirty();
        }
        self.out
    }
}

//! Copies of the inner pages that lookups passed (per backend and index):
//! a lookup searches them instead of pinning, locking and searching the
//! root and the inner levels in the buffers, and reads only its leaf
//! there. Each copy keeps its keys' next 8 bytes past the prefix all of
//! them share as ordered words, and its downlinks, in two arrays: a
//! search reads a few lines of those, and the page only where words tie.
//!
//! A stale copy is safe: tree pages are never freed or merged and a split
//! moves entries right only, so a copy's downlink for q leads to the page
//! a descent for q finds or to one left of it, which moving right
//! corrects; a lookup that had to move right below a copy drops it (read
//! again next time). Pages with long keys are not copied (their chains
//! are read from locked pages only).

use super::page::*;
use crate::am::common::cache;
use pgrx::pg_sys;
use rustc_hash::FxHashMap as HashMap;
use std::cmp::Ordering;
use std::sync::{Mutex, MutexGuard};

/// At most this many copied pages per index and backend (~11 MB; 10^7
/// uuids have ~150 inner pages). Pages past it are read from the buffers.
const MAX_PAGES: usize = 1024;

struct Copy {
    image: Box<[u8]>,
    level: u32,
    /// The bytes every value key of the page starts with.
    common: Box<[u8]>,
    /// Per value key (they come first: NULL and INF keys sort after
    /// them), its 8 bytes past `common`, big-endian, zero-padded.
    words: Box<[u64]>,
    /// Per entry, its child.
    children: Box<[u32]>,
}

fn word(bytes: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    let n = bytes.len().min(8);
    w[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(w)
}

impl Copy {
    fn node(&self) -> Node<'_> {
        // SAFETY: a page-sized copy of a checked page, alive as self.
        Node::new(unsafe { PageRef::new(self.image.as_ptr()) })
    }

    /// The first entry whose key is >= q (`Node::search`'s answer).
    fn lower_bound(&self, q: Key) -> usize {
        let n = self.node();
        let values = self.words.len();
        let whole = |from: usize, to: usize| from + n.entries_below(from, to, q);
        if q.rank != RANK_VALUE || values == 0 {
            return whole(0, n.count());
        }
        let c = self.common.len();
        let m = q.bytes.len().min(c);
        match q.bytes[..m].cmp(&self.common[..m]) {
            Ordering::Less => return 0,
            Ordering::Greater => return values,
            Ordering::Equal if m < c => return 0,
            Ordering::Equal => {}
        }
        // Keys whose words are below q's are below q, above are above;
        // equal words (longer keys, or a shorter one's padding) compared
        // whole.
        let w = word(&q.bytes[c..]);
        let lo = self.words.partition_point(|&x| x < w);
        let ties = self.words[lo..].partition_point(|&x| x == w);
        if ties == 0 {
            lo
        } else {
            whole(lo, lo + ties)
        }
    }
}

#[derive(Default)]
pub struct InnerCopies(Mutex<HashMap<u32, Copy>>);

impl cache::Image for InnerCopies {
    fn generation(&self) -> u64 {
        0
    }
    fn host_bytes(&self) -> usize {
        self.map().values().map(|c| c.image.len() + c.common.len() + 8 * c.words.len() + 4 * c.children.len()).sum()
    }
}

impl InnerCopies {
    /// This backend's copies of index `rel`.
    pub fn of(rel: pg_sys::Relation) -> std::sync::Arc<InnerCopies> {
        const KIND: &str = "art inner pages";
        cache::lookup::<InnerCopies>(rel, KIND).unwrap_or_else(|| cache::store(rel, KIND, InnerCopies::default()))
    }

    fn map(&self) -> MutexGuard<'_, HashMap<u32, Copy>> {
        // Only this backend's thread uses it; a panic under it left whole
        // entries.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The child the copy of inner page `block` at `level` gives for q,
    /// if there is a copy and q is not right of it.
    pub fn child(&self, block: u32, level: u32, q: Key) -> Option<u32> {
        let map = self.map();
        let copy = map.get(&block).filter(|c| c.level == level)?;
        copy.children.get(copy.lower_bound(q)).copied()
    }

    /// Keeps a copy of inner page `block`, locked (`page`).
    pub fn remember(&self, block: u32, page: PageRef) {
        let s = page.special();
        let mut map = self.map();
        if s.kind != KIND_INNER || s.flags & HAS_LONG != 0 || map.len() >= MAX_PAGES {
            return;
        }
        // SAFETY: the locked page is BLCKSZ bytes.
        let image: Box<[u8]> = unsafe { std::slice::from_raw_parts(page.as_ptr(), pg_sys::BLCKSZ as usize) }.into();
        let n = Node::new(page);
        let keys: Vec<Stored> = (0..n.count()).map(|i| n.stored(i)).collect();
        let values = keys.iter().take_while(|k| k.rank == RANK_VALUE).count();
        let common: Box<[u8]> = match (keys.first(), keys[..values].last()) {
            (Some(a), Some(b)) if values > 0 => {
                let l = a.bytes.iter().zip(b.bytes).take_while(|(x, y)| x == y).count();
                a.bytes[..l].into()
            }
            _ => Box::default(),
        };
        let words = keys[..values].iter().map(|k| word(&k.bytes[common.len()..])).collect();
        let children = (0..n.count()).map(|i| n.entry(i).1 as u32).collect();
        map.insert(block, Copy { image, level: s.level as u32, common, words, children });
    }

    pub fn forget(&self, block: u32) {
        self.map().remove(&block);
    }
}

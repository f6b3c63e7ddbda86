//! Long keys: a key over `MAX_KEY` bytes keeps its first `LONG_PREFIX`
//! bytes in its entry and the rest in a chain of overflow pages, so keys
//! of any length are indexed (text up to 1 GB) and compared exactly; most
//! comparisons end within the prefix and never read the chain.
//!
//! Who owns a chain: each leaf entry its own, freed by VACUUM with the
//! entry. A long separator (a split's high key, repeated by downlinks up
//! the tree) gets a copy of its own, never freed (gpu_art frees no leaf
//! or inner page), so no entry's removal can take a high key's bytes.
//!
//! Why a freed page is reusable at once: a chain is read only under the
//! lock of a page holding an entry that refers to it (scans copy long keys
//! whole while their leaf is locked), and VACUUM frees a chain after
//! removing its entry under the leaf's cleanup lock.
//!
//! A chain is written before its entry, back to front, one WAL record per
//! page; a crash before the entry's record leaves pages nothing refers to
//! (space, not rows).

use super::page::*;
use crate::storage::{new_page_in, recycle, Fork, Xlog};
use pgrx::pg_sys;
use std::cmp::Ordering;

/// Writes `tail` as a chain and returns its first block; `fork`: unlogged
/// (a build, whose pages are logged at its end).
fn write_chain(rel: pg_sys::Relation, tail: &[u8], fork: Option<Fork>) -> u32 {
    let mut next = NONE;
    for chunk in tail.chunks(CONTENT_BYTES).rev() {
        let mut s = special(KIND_OVERFLOW, 0, 0);
        s.right = next;
        s.count = chunk.len() as u16;
        let fill = |p: &mut PageMut| {
            p.init(s);
            p.front_mut::<u8>(0, chunk.len()).copy_from_slice(chunk);
            p.set_used(chunk.len(), 0);
        };
        let g = match fork {
            Some(f) => {
                let mut g = new_page_in(rel, f);
                fill(&mut g.page_mut_unlogged());
                g.mark_dirty();
                g
            }
            None => {
                let g = new_page(rel);
                let x = Xlog::start(rel);
                fill(&mut x.register(&g, true));
                x.finish();
                g
            }
        };
        next = g.block();
    }
    next
}

/// The entry of a key longer than `MAX_KEY`, its chain written.
pub fn store(rel: pg_sys::Relation, key: &[u8], fork: Option<Fork>) -> OwnedStored {
    debug_assert!(key.len() > MAX_KEY);
    OwnedStored::long(key, write_chain(rel, &key[LONG_PREFIX..], fork))
}

/// `s` as an entry with a chain of its own when long (a separator).
pub fn copy(rel: pg_sys::Relation, s: Stored) -> OwnedStored {
    if s.long {
        store(rel, &resolve(rel, s).bytes, None)
    } else {
        s.to_owned()
    }
}

/// Calls `f` with the block and bytes of each page of long entry `s`'s
/// chain while it returns true.
fn each_chunk(rel: pg_sys::Relation, s: Stored, mut f: impl FnMut(u32, &[u8]) -> bool) {
    let (_, len, mut block) = s.long_parts();
    let mut left = len - LONG_PREFIX;
    while left > 0 {
        let g = Shared::lock(rel, block);
        let p = g.page();
        let sp = p.special();
        let n = sp.count as usize;
        if sp.page_id != PAGE_ID || sp.kind != KIND_OVERFLOW || n == 0 || n > left || (n < left && sp.right == NONE) {
            corrupted(format!("overflow page {block} (kind {}, {n} bytes) does not continue a {len}-byte key", sp.kind));
        }
        if !f(block, p.front::<u8>(0, n)) {
            return;
        }
        left -= n;
        block = sp.right;
    }
}

/// The whole key of entry `s` (its page locked).
pub fn resolve(rel: pg_sys::Relation, s: Stored) -> OwnedKey {
    if !s.long {
        return OwnedKey { rank: s.rank, bytes: [s.head, s.bytes].concat() };
    }
    let (prefix, len, _) = s.long_parts();
    let mut bytes = Vec::with_capacity(len);
    bytes.extend_from_slice(prefix);
    each_chunk(rel, s, |_, c| {
        bytes.extend_from_slice(c);
        true
    });
    OwnedKey { rank: s.rank, bytes }
}

/// Entry `s`'s key against q (its page locked): the chain is read only
/// when q starts with the whole prefix, and only as far as they agree.
pub fn compare(rel: pg_sys::Relation, s: Stored, q: Key) -> Ordering {
    if !s.long {
        return s.cmp_short(q);
    }
    if s.rank != q.rank {
        return s.rank.cmp(&q.rank);
    }
    let (prefix, _, _) = s.long_parts();
    let n = q.bytes.len().min(LONG_PREFIX);
    let c = prefix[..n].cmp(&q.bytes[..n]);
    if c.is_ne() || q.bytes.len() <= LONG_PREFIX {
        // Equal so far: q ends within the prefix, so it is the shorter.
        return c.then(Ordering::Greater);
    }
    let mut rest = &q.bytes[LONG_PREFIX..];
    let mut out = Ordering::Equal;
    each_chunk(rel, s, |_, c| {
        let m = c.len().min(rest.len());
        out = c[..m].cmp(&rest[..m]).then(if c.len() > m { Ordering::Greater } else { Ordering::Equal });
        rest = &rest[m..];
        out.is_eq()
    });
    out.then(if rest.is_empty() { Ordering::Equal } else { Ordering::Less })
}

/// Frees long entry `s`'s chain (VACUUM, after its entry's removal): the
/// pages go to the free space map (`vacuum_fsm` publishes them).
pub fn free(rel: pg_sys::Relation, s: Stored) {
    let mut blocks = Vec::new();
    each_chunk(rel, s, |b, _| {
        blocks.push(b);
        true
    });
    // No reader can reach them any more: no safe xid to wait for.
    recycle::free_pages(rel, &blocks, |p: &mut PageMut, _| p.init(special(KIND_FREE, 0, 0)));
    blocks.iter().for_each(|&b| recycle::record_free(rel, b));
}

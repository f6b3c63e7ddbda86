//! The build: collect (key, TID) from the heap into an external sort
//! bounded by `maintenance_work_mem` (runs sorted on all cores, spilled to
//! temporary files, merged back), then stream the sorted entries into the
//! leaves and write the inner levels bottom up (no WAL per page; the
//! common build logs every page). An empty build (the init fork of an
//! unlogged index) is a metapage and one empty leaf.

use super::keys;
use super::page::*;
use super::page::{Exclusive, PageMut};
use crate::am::common::HeapRows;
use crate::storage::{new_page_in, Fork, TempFile};
use gpuindex_engine::external_sort::ExternalSorter;
use pgrx::pg_sys;

/// The indexed column's type.
pub fn key_type(index: pg_sys::Relation) -> pg_sys::Oid {
    crate::am::common::key_type(index, "gpu_btree")
}

/// `maintenance_work_mem` in bytes: 7/8 for the keys, 1/8 for the TIDs of
/// NULLs (each sort only grows as far as its rows need).
fn sort_memory() -> (usize, usize) {
    // SAFETY: a GUC variable read in the backend's thread.
    let bytes = unsafe { pg_sys::maintenance_work_mem } as usize * 1024;
    (bytes / 8 * 7, bytes / 8)
}

/// Builds into `fork`: (key, TID) from the heap rows (none for an empty
/// index), sorted within `maintenance_work_mem`, written bottom up.
pub fn build(index: pg_sys::Relation, fork: Fork, rows: Option<&HeapRows>) -> f64 {
    let typ = key_type(index);
    if keys::family_of(typ).is_none() {
        keys::unsupported(typ);
    }
    let (key_memory, null_memory) = sort_memory();
    let mut entries = ExternalSorter::<(u64, Tid), _>::new(TempFile::new(), key_memory);
    let mut nulls = ExternalSorter::<Tid, _>::new(TempFile::new(), null_memory);
    if let Some(rows) = rows {
        rows.scan(index, |tid, value| match value {
            Some(v) => entries.push((keys::encode(v, typ), tid)),
            None => nulls.push(tid),
        });
    }
    let ((entries, key_stats), (nulls, null_stats)) = (entries.finish(), nulls.finish());
    if key_stats.runs + null_stats.runs > 0 {
        pgrx::debug1!(
            "gpu_btree build: {} keys sorted in {} runs, {} merge passes; {} NULLs in {} runs",
            key_stats.records,
            key_stats.runs,
            key_stats.extra_passes + 1,
            null_stats.records,
            null_stats.runs
        );
    }
    write_tree(index, fork, entries, nulls, super::options::fillfactor(index));
    (key_stats.records + null_stats.records) as f64
}

/// Writes a whole tree from sorted entries: metapage (block 0), leaves
/// filled to `fill` percent as the entries stream in, inner levels, NULL
/// pages. Only the (high key, block) of each page of a level is kept.
fn write_tree(
    index: pg_sys::Relation,
    fork: Fork,
    entries: impl Iterator<Item = (u64, Tid)>,
    nulls: impl Iterator<Item = Tid>,
    fill: usize,
) {
    let mut meta = new_page_in(index, fork);
    assert_eq!(meta.block(), META_BLOCK);
    let per_leaf = (LEAF_CAPACITY * fill / 100).max(1);
    let per_run = (RUN_LEAF_CAPACITY * fill / 100).max(per_leaf);
    let mut leftmost = [NONE; MAX_LEVELS];
    let mut leaves = LevelWriter::new(index, fork, 0);
    let (mut keys, mut tids) = (Vec::with_capacity(per_run), Vec::with_capacity(per_run));
    let mut entries = entries.peekable();
    loop {
        keys.clear();
        tids.clear();
        // A leaf holds per_leaf entries, or per_run while all have one key
        // (a run leaf); a run leaf ends where its key does.
        while let Some(&(k, t)) = entries.peek() {
            let run = keys.first().is_some_and(|&first| first == k);
            if keys.len() >= if run { per_run } else { per_leaf } {
                break;
            }
            keys.push(k);
            tids.push(t);
            entries.next();
        }
        let last = entries.peek().is_none();
        leaves.page(last, |page, low| {
            let high = if last { u64::MAX } else { *keys.last().expect("a full leaf") };
            page.init(special(KIND_LEAF, 0, 0, low, high));
            leaf_set(page, &keys, &tids);
            high
        });
        if last {
            break;
        }
    }
    leftmost[0] = leaves.first();
    let mut level_items = leaves.finish();
    let mut level = 0u8;
    while level_items.len() > 1 {
        level += 1;
        if level as usize >= MAX_LEVELS {
            corrupted(format!("tree deeper than {MAX_LEVELS} levels"));
        }
        let per_page = (INNER_CAPACITY * fill / 100).max(2);
        let mut w = LevelWriter::new(index, fork, level);
        let groups = level_items.chunks(per_page);
        let n = groups.len();
        for (i, g) in groups.enumerate() {
            w.page(i + 1 == n, |page, low| {
                let keys: Vec<u64> = g.iter().map(|e| e.0).collect();
                let children: Vec<u32> = g.iter().map(|e| e.1).collect();
                let high = *keys.last().expect("non-empty page");
                page.init(special(KIND_INNER, level, 0, low, high));
                inner_set(page, &keys, &children);
                high
            });
        }
        leftmost[level as usize] = w.first();
        level_items = w.finish();
    }
    let (null_head, null_tail) = write_nulls(index, fork, nulls);
    let m = Meta { root: level_items[0].1, root_level: level as u32, leftmost, null_head, null_tail, ..Meta::new(level_items[0].1) };
    init_meta(&mut meta.page_mut_unlogged(), &m);
    meta.mark_dirty();
}

/// Writes the pages of one level left to right, linked both ways, the
/// first LEFTMOST and the last RIGHTMOST, holding only the previous page.
struct LevelWriter {
    index: pg_sys::Relation,
    fork: Fork,
    level: u8,
    prev: Option<Exclusive>,
    /// (high key, block) of each page written.
    out: Vec<(u64, u32)>,
}

impl LevelWriter {
    fn new(index: pg_sys::Relation, fork: Fork, level: u8) -> Self {
        LevelWriter { index, fork, level, prev: None, out: Vec::new() }
    }

    /// Adds a page: `fill(page, low)` formats it (low: the previous page's
    /// high key, 0 for the first) and returns its high key.
    fn page(&mut self, last: bool, fill: impl FnOnce(&mut PageMut, u64) -> u64) {
        let mut g = new_page_in(self.index, self.fork);
        let block = g.block();
        let first = self.out.is_empty();
        let high = {
            let mut p = g.page_mut_unlogged();
            let high = fill(&mut p, self.out.last().map_or(0, |e| e.0));
            p.update_special(|s| {
                s.level = self.level;
                if first {
                    s.flags |= LEFTMOST;
                }
                if last {
                    s.flags |= RIGHTMOST;
                }
                s.left = self.prev.as_ref().map_or(NONE, |p| p.block());
            });
            high
        };
        if let Some(mut p) = self.prev.take() {
            p.page_mut_unlogged().update_special(|s| s.right = block);
            p.mark_dirty();
        }
        self.out.push((high, block));
        self.prev = Some(g);
    }

    fn first(&self) -> u32 {
        self.out[0].1
    }

    fn finish(self) -> Vec<(u64, u32)> {
        if let Some(p) = &self.prev {
            p.mark_dirty();
        }
        self.out
    }
}

/// Writes the NULL pages in TID order; returns the chain's (head, tail).
pub(crate) fn write_nulls(index: pg_sys::Relation, fork: Fork, nulls: impl Iterator<Item = Tid>) -> (u32, u32) {
    let (mut head, mut tail) = (NONE, NONE);
    let mut prev: Option<Exclusive> = None;
    let mut chunk = Vec::with_capacity(NULLS_CAPACITY);
    let mut nulls = nulls.peekable();
    while nulls.peek().is_some() {
        chunk.clear();
        chunk.extend(nulls.by_ref().take(NULLS_CAPACITY));
        let mut g = new_page_in(index, fork);
        {
            let mut p = g.page_mut_unlogged();
            p.init(special(KIND_NULLS, 0, 0, 0, 0));
            nulls_set(&mut p, &chunk);
        }
        if let Some(mut p) = prev.take() {
            p.page_mut_unlogged().update_special(|s| s.right = g.block());
            p.mark_dirty();
        } else {
            head = g.block();
        }
        tail = g.block();
        prev = Some(g);
    }
    if let Some(p) = prev {
        p.mark_dirty();
    }
    (head, tail)
}

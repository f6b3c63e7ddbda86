//! The build: collect (key, TID) from the heap, sort on all cores, write
//! the leaves and inner levels bottom up (no WAL per page; the common
//! build logs every page). An empty build (the init fork of an unlogged
//! index) is a metapage and one empty leaf.

use super::keys;
use super::page::*;
use super::page::{Exclusive, PageMut};
use crate::am::common::HeapRows;
use crate::storage::{new_page_in, Fork};
use pgrx::pg_sys;
use rayon::prelude::*;

/// The indexed column's type.
pub fn key_type(index: pg_sys::Relation) -> pg_sys::Oid {
    crate::am::common::key_type(index, "gpu_btree")
}

/// Builds into `fork`: (key, TID) from the heap rows (none for an empty
/// index), sorted on all cores, written bottom up.
pub fn build(index: pg_sys::Relation, fork: Fork, rows: Option<&HeapRows>) -> f64 {
    let typ = key_type(index);
    if keys::family_of(typ).is_none() {
        keys::unsupported(typ);
    }
    let (mut entries, mut nulls): (Vec<(u64, Tid)>, Vec<Tid>) = (Vec::new(), Vec::new());
    if let Some(rows) = rows {
        rows.scan(index, |tid, value| match value {
            Some(v) => entries.push((keys::encode(v, typ), tid)),
            None => nulls.push(tid),
        });
    }
    crate::batch::ensure_cpu_pool();
    entries.par_sort_unstable();
    nulls.sort_unstable();
    write_tree(index, fork, &entries, &nulls, super::options::fillfactor(index));
    (entries.len() + nulls.len()) as f64
}

/// Writes a whole tree for sorted entries: metapage (block 0), leaves
/// filled to `fill` percent, inner levels, NULL pages.
fn write_tree(index: pg_sys::Relation, fork: Fork, entries: &[(u64, Tid)], nulls: &[Tid], fill: usize) {
    let mut meta = new_page_in(index, fork);
    assert_eq!(meta.block(), META_BLOCK);
    let per_leaf = (LEAF_CAPACITY * fill / 100).max(1);
    let leaves: Vec<&[(u64, Tid)]> = if entries.is_empty() { vec![&[][..]] } else { entries.chunks(per_leaf).collect() };
    // Level 0, then each level above from the (high, block) of the one below.
    let mut level_items: Vec<(u64, u32)> = Vec::with_capacity(leaves.len());
    let mut leftmost = [NONE; MAX_LEVELS];
    let blocks = write_level(index, fork, leaves.len(), 0, |i, page| {
        let chunk = leaves[i];
        let keys: Vec<u64> = chunk.iter().map(|e| e.0).collect();
        let tids: Vec<Tid> = chunk.iter().map(|e| e.1).collect();
        let high = if i + 1 == leaves.len() { u64::MAX } else { *keys.last().expect("non-empty leaf") };
        let low = if i == 0 { 0 } else { leaves[i - 1].last().expect("non-empty leaf").0 };
        page.init(special(KIND_LEAF, 0, 0, low, high));
        leaf_set(page, &keys, &tids);
        high
    });
    leftmost[0] = blocks[0].1;
    level_items.extend(blocks);
    let mut level = 0u8;
    while level_items.len() > 1 {
        level += 1;
        if level as usize >= MAX_LEVELS {
            corrupted(format!("tree deeper than {MAX_LEVELS} levels"));
        }
        let per_page = (INNER_CAPACITY * fill / 100).max(2);
        let groups: Vec<&[(u64, u32)]> = level_items.chunks(per_page).collect();
        let blocks = write_level(index, fork, groups.len(), level, |i, page| {
            let g = groups[i];
            let keys: Vec<u64> = g.iter().map(|e| e.0).collect();
            let children: Vec<u32> = g.iter().map(|e| e.1).collect();
            let high = *keys.last().expect("non-empty page");
            let low = if i == 0 { 0 } else { groups[i - 1].last().expect("non-empty page").0 };
            page.init(special(KIND_INNER, level, 0, low, high));
            inner_set(page, &keys, &children);
            high
        });
        leftmost[level as usize] = blocks[0].1;
        level_items = blocks;
    }
    let (null_head, null_tail) = write_nulls(index, fork, nulls);
    let m = Meta { root: level_items[0].1, root_level: level as u32, leftmost, null_head, null_tail, ..Meta::new(level_items[0].1) };
    init_meta(&mut meta.page_mut_unlogged(), &m);
    meta.mark_dirty();
}

/// Writes `n` pages of one level, linked both ways, the first LEFTMOST and
/// the last RIGHTMOST; `fill(i, page)` formats page i and returns its high
/// key. Returns (high, block) per page.
fn write_level(
    index: pg_sys::Relation,
    fork: Fork,
    n: usize,
    level: u8,
    mut fill: impl FnMut(usize, &mut PageMut) -> u64,
) -> Vec<(u64, u32)> {
    let mut out = Vec::with_capacity(n);
    let mut prev: Option<Exclusive> = None;
    for i in 0..n {
        let mut g = new_page_in(index, fork);
        let block = g.block();
        let high = {
            let mut p = g.page_mut_unlogged();
            let high = fill(i, &mut p);
            p.update_special(|s| {
                s.level = level;
                if i == 0 {
                    s.flags |= LEFTMOST;
                }
                if i + 1 == n {
                    s.flags |= RIGHTMOST;
                }
                s.left = prev.as_ref().map_or(NONE, |p| p.block());
            });
            high
        };
        if let Some(mut p) = prev.take() {
            p.page_mut_unlogged().update_special(|s| s.right = block);
            p.mark_dirty();
        }
        out.push((high, block));
        prev = Some(g);
    }
    if let Some(p) = prev {
        p.mark_dirty();
    }
    out
}

fn write_nulls(index: pg_sys::Relation, fork: Fork, nulls: &[Tid]) -> (u32, u32) {
    let (mut head, mut tail) = (NONE, NONE);
    let mut prev: Option<Exclusive> = None;
    for chunk in nulls.chunks(NULLS_CAPACITY) {
        let mut g = new_page_in(index, fork);
        {
            let mut p = g.page_mut_unlogged();
            p.init(special(KIND_NULLS, 0, 0, 0, 0));
            nulls_set(&mut p, chunk);
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

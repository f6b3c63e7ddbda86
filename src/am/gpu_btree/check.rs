//! `gpu_btree_check(index regclass)`: walks every level and verifies the
//! invariants (amcheck-style): page kinds and levels, sibling links both
//! ways on the leaf level, keys sorted and inside the fence keys, inner
//! high keys, that every inner entry points to a page one level down (the
//! top of a subtree being deleted excepted), and the NULL chain (NULL
//! pages, ending at its tail). Raises an ERROR at the
//! first violation; returns one row per level otherwise. Safe beside concurrent inserts (one page locked at
//! a time; a left link that names a page split off the left sibling since
//! it was read is followed); `missing_downlinks` then also counts splits
//! in progress.

use super::page::Shared;
use super::page::*;
use super::tree::Tree;
use crate::am::common::{Access, OpenIndex};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Whether `prev` split since it was read (concurrent inserts): walking
/// right from it reaches `block`, and the page just before `block` is
/// `left`. Locks one page at a time, left to right, as writers do.
fn split_since(rel: pg_sys::Relation, prev: u32, block: u32, left: u32) -> bool {
    if prev == NONE {
        return false;
    }
    let mut at = prev;
    for _ in 0..10_000 {
        let s = Shared::lock(rel, at).page().special();
        if s.right == block {
            return at == left;
        }
        if s.flags & RIGHTMOST != 0 || s.right == NONE {
            return false;
        }
        at = s.right;
    }
    false
}

fn fail(index: &str, what: String) -> ! {
    crate::am::common::corrupted("gpu_btree", index, what)
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_btree_check(index regclass)
    RETURNS TABLE (level int, pages bigint, entries bigint, missing_downlinks bigint)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';
-- As amcheck's: reads every page; a superuser grants it deliberately.
REVOKE ALL ON FUNCTION gpu_btree_check(regclass) FROM PUBLIC;"
)]
fn gpu_btree_check(
    index: pg_sys::Oid,
) -> TableIterator<'static, (name!(level, i32), name!(pages, i64), name!(entries, i64), name!(missing_downlinks, i64))> {
    let open = OpenIndex::open(index, "gpu_btree", Access::Verify, pg_sys::AccessShareLock as i32);
    TableIterator::new(check_tree(open.index))
}

/// Checks the B-link tree of `rel` (gpu_btree's, or gpu_learned's
/// delta): (level, pages, entries, missing downlinks) per level.
pub(crate) fn check_tree(rel: pg_sys::Relation) -> Vec<(i32, i64, i64, i64)> {
    let mut rows = Vec::new();
    // SAFETY: reads pages under share locks, one at a time.
    unsafe {
        let name = pgrx::name_data_to_str(&(*(*rel).rd_rel).relname).to_string();
        let tree = Tree::new(rel);
        let m = tree.meta();
        // (high, block) of the level below, to check downlinks against.
        let mut below: Vec<(u64, u32)> = Vec::new();
        // The tops of half-dead leaves' subtrees: their downlinks are gone.
        let mut tops = std::collections::HashSet::new();
        for level in 0..=m.root_level {
            let mut block = m.leftmost[level as usize];
            let (mut pages, mut entries, mut prev_block, mut prev_high) = (0i64, 0i64, NONE, None::<u64>);
            let mut this: Vec<(u64, u32)> = Vec::new();
            let mut downlinks: Vec<u32> = Vec::new();
            while block != NONE {
                let g = Shared::lock(rel, block);
                let s = g.page().special();
                if s.level as u32 != level {
                    fail(&name, format!("block {block} is at level {} on level {level}'s chain", s.level));
                }
                if is_dead(&s) && (s.flags & RIGHTMOST != 0 || s.flags & HALF_DEAD != 0 && (level != 0 || s.count != 0)) {
                    fail(&name, format!("block {block}: a dead page that is not an empty leaf or a deleted page, or is rightmost"));
                }
                if s.flags & DELETED != 0 {
                    // Unlinked since its left sibling was read (a
                    // concurrent VACUUM): its right link leads on.
                    drop(g);
                    block = s.right;
                    continue;
                }
                if s.flags & HALF_DEAD != 0 {
                    // Linked, without a downlink: its range is its right
                    // sibling's, whose low fence is this page's. Parents
                    // that go with it are still linked, the highest (its
                    // top) without a downlink.
                    tops.extend(top_of(&s));
                    drop(g);
                    pages += 1;
                    prev_block = block;
                    block = s.right;
                    continue;
                }
                if (s.flags & LEFTMOST != 0) != (prev_block == NONE) {
                    fail(&name, format!("block {block}: LEFTMOST flag wrong"));
                }
                let mut left_link = prev_block;
                let keys: Vec<u64> = if level == 0 {
                    let l = Leaf::new(g.page());
                    left_link = l.s.left;
                    (0..l.count()).map(|i| l.key(i)).collect()
                } else {
                    let p = Inner::new(g.page());
                    downlinks.extend((0..p.count()).map(|j| p.child(j)));
                    if p.count() == 0 || *p.keys().last().unwrap() != p.s.high {
                        fail(&name, format!("inner {block}: last key is not the high key"));
                    }
                    p.keys().to_vec()
                };
                if keys.windows(2).any(|w| w[0] > w[1]) {
                    fail(&name, format!("block {block}: keys out of order"));
                }
                let rightmost = s.flags & RIGHTMOST != 0;
                if let (Some(&first), Some(ph)) = (keys.first(), prev_high) {
                    if first < ph || s.low != ph {
                        fail(&name, format!("block {block}: first key or low fence below the left sibling's high key"));
                    }
                }
                if !rightmost && keys.last().is_some_and(|&k| k > s.high) {
                    fail(&name, format!("block {block}: key above the high key"));
                }
                drop(g);
                if left_link != prev_block && !split_since(rel, prev_block, block, left_link) {
                    fail(&name, format!("leaf {block}: left link {left_link} but left sibling {prev_block}"));
                }
                pages += 1;
                entries += keys.len() as i64;
                this.push((if rightmost { u64::MAX } else { s.high }, block));
                prev_high = Some(s.high);
                prev_block = block;
                block = if rightmost { NONE } else { s.right };
            }
            // Every downlink must name a page of the level below; a page of
            // the level below without one is a split interrupted by a crash.
            let mut missing = 0i64;
            if level > 0 {
                let mut known = std::collections::HashMap::new();
                for &(h, b) in &below {
                    known.insert(b, h);
                }
                for d in &downlinks {
                    if known.remove(d).is_none() {
                        // A page split off after the level below was walked
                        // (concurrent inserts): it must still be a page of
                        // that level.
                        let s = Shared::lock(rel, *d).page().special();
                        if s.page_id != PAGE_ID || s.level as u32 != level - 1 {
                            fail(&name, format!("downlink to block {d}, not a page of level {}", level - 1));
                        }
                    }
                }
                missing = known.keys().filter(|b| !tops.contains(*b)).count() as i64;
            }
            if level > 0 {
                let last = rows.len() - 1;
                let r: &mut (i32, i64, i64, i64) = &mut rows[last];
                r.3 = missing;
            }
            rows.push((level as i32, pages, entries, 0i64));
            below = this;
        }
        // The NULL chain: NULL pages only, ending at the metapage's tail; a
        // deleted one is met only where a concurrent VACUUM unlinked it
        // after the page before was read (its right link leads on).
        let (mut block, mut last) = (m.null_head, NONE);
        while block != NONE {
            let s = Shared::lock(rel, block).page().special();
            if s.page_id != PAGE_ID || s.kind != KIND_NULLS {
                fail(&name, format!("block {block} on the NULL chain is not a NULL page"));
            }
            if s.flags & DELETED == 0 {
                last = block;
            }
            block = s.right;
        }
        if last != m.null_tail && Tree::new(rel).meta().null_tail == m.null_tail {
            fail(&name, format!("the NULL chain ends at block {last}, the metapage says {}", m.null_tail));
        }
    }
    rows
}

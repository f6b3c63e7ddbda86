//! `gpu_art_check(index regclass)`: walks every level and verifies the
//! invariants (amcheck-style): page kinds and levels, LEFTMOST and
//! RIGHTMOST flags, left links, keys sorted within a page, at most the
//! page's high key and at least the left sibling's, a leaf's low fence
//! and prefix agreeing with its fences, and that every
//! downlink names a page one level down whose high key is at most the
//! downlink's key. Raises an ERROR at the first violation; returns one
//! row per level otherwise. Meant for a quiescent index (concurrent
//! splits may report missing downlinks that are only in progress).

use super::long;
use super::page::*;
use super::tree::Tree;
use crate::am::common::{Access, OpenIndex};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::HashMap;

fn fail(index: &str, what: String) -> ! {
    crate::am::common::corrupted("gpu_art", index, what)
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_art_check(index regclass)
    RETURNS TABLE (level int, pages bigint, entries bigint, missing_downlinks bigint)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';
-- As amcheck's: reads every page; a superuser grants it deliberately.
REVOKE ALL ON FUNCTION gpu_art_check(regclass) FROM PUBLIC;"
)]
fn gpu_art_check(
    index: pg_sys::Oid,
) -> TableIterator<'static, (name!(level, i32), name!(pages, i64), name!(entries, i64), name!(missing_downlinks, i64))> {
    let open = OpenIndex::open(index, "gpu_art", Access::Verify, pg_sys::AccessShareLock as i32);
    TableIterator::new(check_tree(open.index))
}

fn check_tree(rel: pg_sys::Relation) -> Vec<(i32, i64, i64, i64)> {
    // SAFETY: rd_rel is valid for an open relation.
    let name = unsafe { pgrx::name_data_to_str(&(*(*rel).rd_rel).relname).to_string() };
    let tree = Tree::new(rel);
    let m = tree.meta();
    let mut rows: Vec<(i32, i64, i64, i64)> = Vec::new();
    // block -> high key of the level below.
    let mut below: HashMap<u32, OwnedKey> = HashMap::new();
    for level in 0..=m.root_level {
        let mut block = tree.leftmost(level).block();
        let (mut pages, mut entries) = (0i64, 0i64);
        let (mut prev_block, mut prev_high) = (NONE, None::<OwnedKey>);
        let mut this = HashMap::new();
        let mut missing = below.clone();
        loop {
            let g = Shared::lock(rel, block);
            let n = Node::new(g.page());
            if n.s.level as u32 != level || n.is_leaf() != (level == 0) {
                fail(&name, format!("block {block} (level {}) is on level {level}'s chain", n.s.level));
            }
            if n.leftmost() != (prev_block == NONE) {
                fail(&name, format!("block {block}: LEFTMOST flag wrong"));
            }
            if level == 0 && n.s.left != prev_block {
                fail(&name, format!("leaf {block}: left link {} but left sibling {prev_block}", n.s.left));
            }
            if level == 0 {
                // The low fence is the left sibling's high key (its first
                // bytes), and the prefix what the fences share.
                let left_high = prev_high.as_ref().and_then(|h| low_fence_of(h.rank, &h.bytes));
                if n.low().is_some_and(|l| Some(l) != left_high) {
                    fail(&name, format!("leaf {block}: low fence differs from its left sibling's high key"));
                }
                if n.s.prefix as usize != fence_prefix(n.low(), (!n.rightmost()).then(|| n.high())) {
                    fail(&name, format!("leaf {block}: prefix of {} bytes, not what its fences share", n.s.prefix));
                }
            }
            // Whole keys (long ones read from their chains, which are checked).
            let high = long::resolve(rel, n.high());
            let keys: Vec<OwnedKey> = (0..n.count()).map(|i| long::resolve(rel, n.stored(i))).collect();
            if n.s.flags & HAS_LONG == 0 && (0..n.count()).any(|i| n.stored(i).long) {
                fail(&name, format!("block {block}: long keys without the page's HAS_LONG flag"));
            }
            for (i, k) in keys.iter().enumerate() {
                let child = n.entry(i).1;
                if i > 0 && keys[i - 1] > *k {
                    fail(&name, format!("block {block}: keys out of order at {i}"));
                }
                if *k > high || prev_high.as_ref().is_some_and(|p| k < p) {
                    fail(&name, format!("block {block}: key {i} outside the page's fences"));
                }
                if level > 0 {
                    match below.get(&(child as u32)) {
                        Some(h) if h <= k => {
                            missing.remove(&(child as u32));
                        }
                        Some(_) => fail(&name, format!("block {block}: downlink {i} below its child's high key")),
                        None => fail(&name, format!("block {block}: downlink {i} to block {child}, not a page of level {}", level - 1)),
                    }
                }
            }
            if level > 0 && (n.count() == 0 || (n.rightmost() && keys[n.count() - 1].key() != Key::INF)) {
                fail(&name, format!("inner {block}: no entries, or a rightmost page not ending at +infinity"));
            }
            pages += 1;
            entries += n.count() as i64;
            this.insert(block, high.clone());
            prev_high = Some(high);
            prev_block = block;
            if n.rightmost() {
                break;
            }
            block = n.s.right;
        }
        if level > 0 {
            let last = rows.len() - 1;
            rows[last].3 = missing.len() as i64;
        }
        rows.push((level as i32, pages, entries, 0));
        below = this;
    }
    rows
}

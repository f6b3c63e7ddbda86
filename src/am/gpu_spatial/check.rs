//! `gpu_spatial_check(index regclass)`: verifies the invariants
//! (amcheck-style): the node pages hold a quadtree (children inside their
//! parent's quadrant, leaves numbered once each, runs inside the
//! relation), every leaf entry lies in its leaf's box, the tree and chain
//! counts match the metapage's; counts the pages merges freed. On a primary the check holds the
//! structure lock, so no merge or VACUUM moves entries meanwhile (inserts
//! running beside it can only add to the delta). On a standby nothing
//! keeps replay of a merge from running beside it, and a half-replayed
//! merge has leaf counts ahead of or behind the metapage's, so there the
//! counts are reported, not compared. Raises an ERROR at the first
//! violation; returns the counts otherwise, and the largest leaf (its
//! pages, and how many distinct points it holds: a leaf of one repeated
//! point cannot split and grows with its duplicates, any other stays
//! near `leaf_capacity` however skewed the data).

use super::page::{freed_at, Shared, META_BLOCK};
use super::shape;
use crate::am::common::{Access, OpenIndex};
use gpuindex_engine::gpics::tree::{quadrant_box, NONE as NO_CHILD};
use pgrx::pg_sys;
use pgrx::prelude::*;

fn fail(index: &str, what: String) -> ! {
    crate::am::common::corrupted("gpu_spatial", index, what)
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_spatial_check(index regclass)
    RETURNS TABLE (nodes bigint, leaves bigint, tree_entries bigint, chain_pages bigint, chain_entries bigint,
                   largest_leaf_pages bigint, largest_leaf_distinct bigint, freed_pages bigint)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';
-- As amcheck's: reads every page; a superuser grants it deliberately.
REVOKE ALL ON FUNCTION gpu_spatial_check(regclass) FROM PUBLIC;"
)]
fn gpu_spatial_check(
    index: pg_sys::Oid,
) -> TableIterator<
    'static,
    (
        name!(nodes, i64),
        name!(leaves, i64),
        name!(tree_entries, i64),
        name!(chain_pages, i64),
        name!(chain_entries, i64),
        name!(largest_leaf_pages, i64),
        name!(largest_leaf_distinct, i64),
        name!(freed_pages, i64),
    ),
> {
    // SAFETY: reads pages under share locks, one at a time.
    let open = OpenIndex::open(index, "gpu_spatial", Access::Verify, pg_sys::AccessShareLock as i32);
    let rel = open.index;
    let row = unsafe {
        let name = pgrx::name_data_to_str(&(*(*rel).rd_rel).relname).to_string();
        let recovering = pg_sys::RecoveryInProgress();
        if !recovering {
            super::merge::lock_structure(rel, true);
        }
        let m = shape::meta(rel);
        let s = shape::shape(rel, &m);
        // After the shape: a merge (an insert's, or VACUUM's from
        // autovacuum) may have extended the relation for the runs it
        // names since this function began; runs are written before the
        // shape that names them.
        let nblocks = pg_sys::RelationGetNumberOfBlocksInFork(rel, pg_sys::ForkNumber::MAIN_FORKNUM);
        let nodes = &s.nodes;
        let mut leaf_seen = vec![false; m.leaf_count as usize];
        let mut tree_entries = 0u64;
        // (pages, distinct points) of the largest leaf.
        let mut largest = (0u32, 0usize);
        for (i, n) in nodes.iter().enumerate() {
            if n.is_leaf() {
                let no = n.leaf as usize - 1;
                if no >= leaf_seen.len() || std::mem::replace(&mut leaf_seen[no], true) {
                    fail(&name, format!("node {i}: leaf number {} repeated or out of range", n.leaf));
                }
                if n.start == 0 || n.start >= nblocks {
                    fail(&name, format!("leaf node {i}: run at block {} outside the relation", n.start));
                }
                let r = n.rect();
                let mut points = std::collections::HashSet::new();
                shape::for_run(rel, (n.start, n.count), |page| {
                    for e in page {
                        if e.is_null() || !r.contains(e.x, e.y) {
                            fail(&name, format!("leaf node {i}: entry ({}, {}) outside its box", e.x, e.y));
                        }
                        if n.count > largest.0 {
                            points.insert((e.x.to_bits(), e.y.to_bits()));
                        }
                    }
                    tree_entries += page.len() as u64;
                });
                if n.count > largest.0 {
                    largest = (n.count, points.len());
                }
                continue;
            }
            for (q, &c) in n.child.iter().enumerate() {
                if c == NO_CHILD {
                    continue;
                }
                if c as usize <= i || c as usize >= nodes.len() {
                    fail(&name, format!("node {i}: child {c} not after it"));
                }
                if nodes[c as usize].b != quadrant_box(&n.b, q) {
                    fail(&name, format!("node {i}: child {c} is not its quadrant {q}"));
                }
            }
        }
        if leaf_seen.iter().any(|s| !s) {
            fail(&name, "a leaf number has no node".into());
        }
        // A merge a crash cut short between its appends and its metapage
        // record left a frozen delta, some of whose entries are already in
        // their leaves: the next merge recognises them by TID.
        let appended = if m.frozen.head == super::page::NONE { 0 } else { m.frozen.entries };
        if !recovering && !(m.tree_entries..=m.tree_entries + appended).contains(&tree_entries) {
            fail(&name, format!("leaves hold {tree_entries} entries, the metapage says {}", m.tree_entries));
        }
        let (mut delta_pages, mut delta_entries) = (0u64, 0u64);
        for c in m.chains() {
            let (mut pages, mut entries) = (0u64, 0u64);
            super::chain::for_chain(rel, c, |page| {
                pages += 1;
                entries += page.len() as u64;
            });
            // Appends running beside the check can only add.
            if !recovering && (entries < c.entries || pages < c.pages as u64) {
                fail(&name, format!("a chain holds {entries} entries on {pages} pages, the metapage says {} on {}", c.entries, c.pages));
            }
            delta_pages += pages;
            delta_entries += entries;
        }
        // Pages merges freed, waiting for VACUUM or in the free space map
        // (not those never initialised: extended just before a crash).
        let freed = (META_BLOCK + 1..nblocks)
            .filter(|&b| {
                let g = Shared::lock(rel, b);
                !g.page().is_new() && freed_at(&g.page()).is_some()
            })
            .count();
        if !recovering {
            super::merge::unlock_structure(rel);
        }
        (
            nodes.len() as i64,
            m.leaf_count as i64,
            tree_entries as i64,
            delta_pages as i64,
            delta_entries as i64,
            largest.0 as i64,
            largest.1 as i64,
            freed as i64,
        )
    };
    TableIterator::new(std::iter::once(row))
}

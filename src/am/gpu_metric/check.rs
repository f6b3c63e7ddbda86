//! `gpu_metric_check(index regclass)`: verifies the invariants
//! (amcheck-style): the tree's shape (node and pivot counts), every leaf
//! entry's stored pivot distance (recomputed bit for bit) and its place in
//! the [min, max] ring of its leaf and of every ancestor, TIDs unique, the
//! tree count equal to the metapage's. It takes the lock VACUUM takes, so
//! no bulk delete or rebuild runs meanwhile (inserts beside it only add to
//! the delta). Raises an ERROR at the first violation; returns counts.

use super::{chain, shape};
use crate::am::common::{Access, OpenIndex};
use pgrx::pg_sys;
use pgrx::prelude::*;

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_metric_check(index regclass)
    RETURNS TABLE (nodes bigint, height int, tree_entries bigint, delta_entries bigint, null_entries bigint, freed_pages bigint)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';
-- As amcheck's: reads every page; a superuser grants it deliberately.
REVOKE ALL ON FUNCTION gpu_metric_check(regclass) FROM PUBLIC;"
)]
fn gpu_metric_check(
    index: pg_sys::Oid,
) -> TableIterator<
    'static,
    (
        name!(nodes, i64),
        name!(height, i32),
        name!(tree_entries, i64),
        name!(delta_entries, i64),
        name!(null_entries, i64),
        name!(freed_pages, i64),
    ),
> {
    // SAFETY: a plain flag read.
    let recovering = unsafe { pg_sys::RecoveryInProgress() };
    // On a standby that lock cannot be taken, and replay may change the
    // counts meanwhile: they are reported, not compared.
    let lock = if recovering { pg_sys::AccessShareLock } else { pg_sys::ShareUpdateExclusiveLock };
    let open = OpenIndex::open(index, "gpu_metric", Access::Verify, lock as i32);
    let rel = open.index;
    // SAFETY: the name of an open relation.
    let name = unsafe { pgrx::name_data_to_str(&(*(*rel).rd_rel).relname).to_string() };
    let fail = |what: String| -> ! { crate::am::common::corrupted("gpu_metric", &name, what) };
    let m = shape::meta(rel);
    let dim = m.dim as usize;
    let mut tids = std::collections::HashSet::new();
    let (mut nodes, mut height) = (0, 0);
    if m.node_start != super::page::NONE {
        let img = shape::shape(rel, &m);
        let s = &img.shape;
        (nodes, height) = (s.nodes.len(), s.height);
        let metric = s.metric;
        for leaf in s.leaves() {
            chain::for_run(rel, dim, s.nodes[leaf].offset as u32, |e| {
                if !tids.insert(e.tid) {
                    fail(format!("TID {:#x} is in the tree twice", e.tid));
                }
                let mut node = leaf;
                while node != 0 {
                    let parent = (node - 1) / s.fanout;
                    let d = metric.metric_distance(e.v, s.pivot(parent));
                    let n = &s.nodes[node];
                    if node == leaf && d.to_bits() != e.pdist.to_bits() {
                        fail(format!("leaf {leaf}: entry {:#x} stores pivot distance {} where it is {d}", e.tid, e.pdist));
                    }
                    if !(n.min <= d && d <= n.max) {
                        fail(format!("node {node}: entry {:#x} at distance {d} outside [{}, {}]", e.tid, n.min, n.max));
                    }
                    node = parent;
                }
            });
        }
    }
    if !recovering && tids.len() as u64 != m.tree_entries {
        fail(format!("leaves hold {} entries, the metapage says {}", tids.len(), m.tree_entries));
    }
    let count = |head: u32, dim: usize| {
        let mut n = 0i64;
        chain::for_run(rel, dim, head, |_| n += 1);
        n
    };
    let delta = count(m.delta.head, dim) + count(m.frozen.head, dim);
    let nulls = count(m.nulls.head, 0);
    TableIterator::once((nodes as i64, height as i32, m.tree_entries as i64, delta, nulls, m.freed_pages as i64))
}

//! The build: collect (point, TID) from the heap, build the G-PICS
//! quadtree (level by level, on the GPU or on all cores: the same tree
//! either way), write each leaf's points as a run of entry pages, the
//! nodes after them, the rest (non-finite points, NULLs) into the odd
//! chain; the common build logs every page. An empty build (the init fork
//! of an unlogged index) is a metapage and empty delta and odd pages.

use super::page::*;
use super::page::{Exclusive, PageMut};
use crate::am::common::HeapRows;
use crate::storage::{new_page_in, Fork};
use gpuindex_engine::gpics::tree::Node;
use gpuindex_engine::gpics::{Params, Points, QuadTree};
use pgrx::pg_sys;
use pgrx::prelude::*;

/// gpu_spatial indexes one `point` column.
pub fn check_column(index: pg_sys::Relation) {
    let t = crate::am::common::key_type(index, "gpu_spatial");
    if t != pg_sys::POINTOID {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("gpu_spatial does not support type {}", crate::error::type_name(t)),
            "gpu_spatial indexes point columns; use GiST for other geometric types.",
        );
    }
}

/// The quadtree of `pts`, built on the device the GUCs pick.
pub fn build_tree(pts: &Points, params: Params) -> QuadTree {
    crate::batch::run("gpu_spatial build", pts.len(), || QuadTree::build_cpu(pts, params), |g| QuadTree::build_gpu(g, pts, params))
}

/// Builds into `fork`: the heap rows' points (none for an empty index)
/// as a quadtree, written leaf run by leaf run.
pub fn build(index: pg_sys::Relation, fork: Fork, rows: Option<&HeapRows>) -> f64 {
    check_column(index);
    let params = super::options::params(index);
    let (mut pts, mut nulls) = (Points::default(), Vec::new());
    if let Some(rows) = rows {
        rows.scan(index, |tid, value| match value {
            Some(v) => {
                // SAFETY: a point datum (checked column type).
                let p = unsafe { &*v.cast_mut_ptr::<pg_sys::Point>() };
                pts.push(p.x, p.y, tid)
            }
            None => nulls.push(Entry { x: f64::NAN, y: f64::NAN, tid: tid | NULL_FLAG }),
        });
    }
    let indexed = pts.len() + nulls.len();
    let tree = if pts.is_empty() { QuadTree::build_cpu(&pts, params) } else { build_tree(&pts, params) };
    drop(pts);
    write_index(&Target { index, fork }, &tree, &nulls, params);
    indexed as f64
}

/// Where a build writes.
struct Target {
    index: pg_sys::Relation,
    fork: Fork,
}

/// Formats a freshly allocated page (no WAL: the build logs every page at
/// its end).
fn fresh(t: &Target, kind: u8, fill: impl FnOnce(&mut PageMut)) -> Exclusive {
    let mut g = new_page_in(t.index, t.fork);
    {
        let mut p = g.page_mut_unlogged();
        p.init(special(kind));
        fill(&mut p);
    }
    g.mark_dirty();
    g
}

fn as_entries(pts: &Points, from: usize, to: usize) -> Vec<Entry> {
    (from..to).map(|i| Entry { x: pts.x[i], y: pts.y[i], tid: pts.id[i] }).collect()
}

/// Writes a whole index: metapage (block 0), the first delta page
/// (block 1), the first odd page (block 2), each leaf's run of entry
/// pages, the node pages, and further odd pages for what the tree does
/// not hold (NULLs, non-finite points).
fn write_index(t: &Target, tree: &QuadTree, nulls: &[Entry], params: Params) {
    let mut meta_page = new_page_in(t.index, t.fork);
    assert_eq!(meta_page.block(), META_BLOCK);
    let mut odd: Vec<Entry> = as_entries(&tree.odd, 0, tree.odd.len());
    odd.extend_from_slice(nulls);
    let delta = fresh(t, KIND_DELTA, |p| set_entries(p, &[]));
    let mut tail = fresh(t, KIND_DELTA, |p| set_entries(p, &[]));
    let mut m = Meta::new(delta.block(), tail.block(), params.mc as u32, params.mh as u32);
    drop(delta);
    if !tree.pts.is_empty() {
        let (start, count, leaves) = write_tree(t, tree);
        (m.node_start, m.node_count, m.leaf_count) = (start, count, leaves);
        m.tree_entries = tree.pts.len() as u64;
    }
    for chunk in odd.chunks(ENTRY_CAPACITY) {
        if tail.page().special().count as usize > 0 {
            let next = fresh(t, KIND_DELTA, |p| set_entries(p, &[]));
            tail.page_mut_unlogged().update_special(|s| s.right = next.block());
            tail.mark_dirty();
            m.odd.pages += 1;
            tail = next;
        }
        set_entries(&mut tail.page_mut_unlogged(), chunk);
        tail.mark_dirty();
    }
    m.odd.tail = tail.block();
    m.odd.entries = odd.len() as u64;
    init_meta(&mut meta_page.page_mut_unlogged(), &m);
    meta_page.mark_dirty();
}

/// Writes the tree's leaves (a run of pages each) and nodes without WAL;
/// returns (first node page, nodes, leaves).
fn write_tree(t: &Target, tree: &QuadTree) -> (u32, u32, u32) {
    let mut nodes: Vec<Node> = tree.nodes.clone();
    for &li in &tree.leaves {
        let n = &mut nodes[li as usize];
        let (start, count) = (n.start as usize, n.count as usize);
        let pages = pages_for(count);
        let mut run = Run::default();
        for c in 0..pages {
            let from = start + c * ENTRY_CAPACITY;
            let to = (from + ENTRY_CAPACITY).min(start + count);
            run.push(fresh(t, KIND_LEAF, |p| set_entries(p, &as_entries(&tree.pts, from, to))));
        }
        n.start = run.first;
        n.count = pages as u32;
    }
    let mut run = Run::default();
    for chunk in nodes.chunks(NODE_CAPACITY) {
        run.push(fresh(t, KIND_NODES, |p| set_nodes(p, chunk)));
    }
    (run.first, nodes.len() as u32, tree.leaves.len() as u32)
}

/// Pages of a run as a build writes them: each linked from the one before.
struct Run {
    first: u32,
    last: Option<Exclusive>,
}

impl Default for Run {
    fn default() -> Self {
        Run { first: NONE, last: None }
    }
}

impl Run {
    fn push(&mut self, g: Exclusive) {
        match self.last.as_mut() {
            Some(prev) => {
                prev.page_mut_unlogged().update_special(|s| s.right = g.block());
                prev.mark_dirty();
            }
            None => self.first = g.block(),
        }
        self.last = Some(g);
    }
}

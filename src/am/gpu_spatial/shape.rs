//! Reading the index: the metapage, the quadtree's nodes (cached per
//! backend by index and generation: they change only when the tree is
//! rebuilt or merged), and the entries of leaf runs and of the delta chain,
//! filtered exactly by a set of queries.

use super::page::Shared;
use super::page::*;
use crate::am::common::cache;
use gpuindex_engine::gpics::tree::{Node, NONE as NO_CHILD};
use gpuindex_engine::gpics::Query;
use pgrx::pg_sys;
use std::sync::Arc;

pub fn meta(rel: pg_sys::Relation) -> Meta {
    read_meta(Shared::lock(rel, META_BLOCK).page())
}

pub struct Shape {
    pub generation: u64,
    pub nodes: Vec<Node>,
}

impl cache::Image for Shape {
    fn generation(&self) -> u64 {
        self.generation
    }
    fn host_bytes(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<Node>()
    }
}

/// The nodes of the tree `m` describes.
pub fn shape(rel: pg_sys::Relation, m: &Meta) -> Arc<Shape> {
    if let Some(s) = cache::lookup::<Shape>(rel, "nodes") {
        if s.generation == m.generation {
            return s;
        }
    }
    let mut nodes = Vec::with_capacity(m.node_count as usize);
    let mut block = m.node_start;
    while nodes.len() < m.node_count as usize {
        if block == NONE {
            corrupted(format!("the node run ends after {} of {} nodes", nodes.len(), m.node_count));
        }
        let g = Shared::lock(rel, block);
        nodes.extend_from_slice(super::page::nodes(g.page()));
        block = g.page().special().right;
    }
    cache::store(rel, "nodes", Shape { generation: m.generation, nodes })
}

/// Whether an entry answers every query (a NULL answers none).
pub fn matches_all(e: &Entry, quals: &[Query]) -> bool {
    !e.is_null() && quals.iter().all(|q| q.matches(e.x, e.y))
}

/// The leaf runs (first block, pages) whose boxes every query may touch;
/// all of them when there is no query.
pub fn leaf_runs(nodes: &[Node], quals: &[Query]) -> Vec<(u32, u32)> {
    let mut runs = Vec::new();
    if nodes.is_empty() {
        return runs;
    }
    let mut stack = vec![0u32];
    while let Some(i) = stack.pop() {
        let n = &nodes[i as usize];
        let r = n.rect();
        if !quals.iter().all(|q| q.may_touch(&r)) {
            continue;
        }
        if n.is_leaf() {
            runs.push((n.start, n.count));
        } else {
            stack.extend(n.child.iter().rev().filter(|&&c| c != NO_CHILD));
        }
    }
    runs
}

/// Calls `f` with the block and the entries of each page of a run.
pub fn for_run_pages(rel: pg_sys::Relation, (start, pages): (u32, u32), mut f: impl FnMut(u32, &[Entry])) {
    let mut block = start;
    for i in 0..pages {
        if block == NONE {
            corrupted(format!("the run at block {start} ends after {i} of {pages} pages"));
        }
        let g = Shared::lock(rel, block);
        let (e, s) = entries(g.page());
        f(block, e);
        block = s.right;
    }
}

/// Calls `f` with the entries of each page of a run.
pub fn for_run(rel: pg_sys::Relation, run: (u32, u32), mut f: impl FnMut(&[Entry])) {
    for_run_pages(rel, run, |_, e| f(e));
}

/// The blocks of a page sequence linked by `right` from `head`: `pages`
/// of them (a run: the last page's link is not read), or to the end (a
/// chain).
pub fn linked_blocks(rel: pg_sys::Relation, head: u32, pages: Option<u32>) -> Vec<u32> {
    let mut out = Vec::new();
    let mut block = head;
    while pages.is_none_or(|n| out.len() < n as usize) {
        if block == NONE {
            if let Some(n) = pages {
                corrupted(format!("the run at block {head} ends after {} of {n} pages", out.len()));
            }
            break;
        }
        out.push(block);
        if pages != Some(out.len() as u32) {
            block = Shared::lock(rel, block).page().special().right;
        }
    }
    out
}

/// The blocks of the node run `m` describes.
pub fn node_blocks(rel: pg_sys::Relation, m: &Meta) -> Vec<u32> {
    linked_blocks(rel, m.node_start, Some(m.node_count.div_ceil(NODE_CAPACITY as u32)))
}

/// Every entry answering all `quals` (every entry, NULLs included, when
/// there are none): the tree's candidate leaves, then the chains. An
/// entry a concurrent merge copied into a leaf may be read twice (from
/// the leaf and from the frozen delta): duplicates are dropped.
pub fn collect(rel: pg_sys::Relation, quals: &[Query]) -> Vec<Entry> {
    let m = meta(rel);
    let s = shape(rel, &m);
    let mut out = Vec::new();
    let mut keep = |page: &[Entry]| {
        if quals.is_empty() {
            out.extend_from_slice(page);
        } else {
            out.extend(page.iter().filter(|e| matches_all(e, quals)));
        }
    };
    for run in leaf_runs(&s.nodes, quals) {
        for_run(rel, run, &mut keep);
    }
    super::chain::for_chains(rel, &m, &mut keep);
    out.sort_unstable_by_key(|e| e.tid);
    out.dedup_by_key(|e| e.tid);
    out
}

//! The tree as a search reads it: the metapage, the nodes and pivots
//! (cached per backend while the metapage's generation matches), and the
//! leaves read from their page runs.

use super::chain;
use super::page::Shared;
use super::page::*;
use crate::am::common::cache;
use gpuindex_engine::gts::{Leaves, Metric, Shape};
use pgrx::pg_sys;
use std::sync::Arc;

pub fn meta(rel: pg_sys::Relation) -> Meta {
    read_meta(Shared::lock(rel, META_BLOCK).page())
}

pub fn metric(m: &Meta) -> Metric {
    Metric::from_code(m.metric as u8).unwrap_or_else(|| corrupted(format!("unknown metric {}", m.metric)))
}

pub struct Image {
    generation: u64,
    pub shape: Shape,
}

impl cache::Image for Image {
    fn generation(&self) -> u64 {
        self.generation
    }
    fn host_bytes(&self) -> usize {
        self.shape.host_bytes()
    }
}

/// The tree `m` describes.
pub fn shape(rel: pg_sys::Relation, m: &Meta) -> Arc<Image> {
    if let Some(i) = cache::lookup::<Image>(rel, "shape") {
        if i.generation == m.generation {
            return i;
        }
    }
    let dim = m.dim as usize;
    let mut nodes = Vec::with_capacity(m.node_count as usize);
    let mut block = m.node_start;
    while block != NONE {
        let g = Shared::lock(rel, block);
        let (n, s) = super::page::nodes(g.page());
        nodes.extend_from_slice(n);
        block = s.right;
    }
    let mut pivots = Vec::new();
    chain::for_run(rel, dim, m.pivot_start, |e| pivots.extend_from_slice(e.v));
    let shape = Shape { metric: metric(m), fanout: m.fanout as usize, height: m.height as usize, dim, nodes, pivots };
    if shape.nodes.len() != m.node_count as usize || shape.pivots.len() != shape.internal() * dim {
        corrupted(format!(
            "{} nodes and {} pivot values where the metapage says {} nodes",
            shape.nodes.len(),
            shape.pivots.len(),
            m.node_count
        ));
    }
    cache::store(rel, "shape", Image { generation: m.generation, shape })
}

/// A tree's leaves on their pages: a leaf node's `offset` is the first
/// block of its run.
pub struct PageLeaves {
    pub rel: pg_sys::Relation,
}

impl Leaves for PageLeaves {
    fn for_leaf(&self, shape: &Shape, node: usize, f: &mut dyn FnMut(&[f32], u64, f64)) {
        chain::for_run(self.rel, shape.dim, shape.nodes[node].offset as u32, |e| f(e.v, e.tid, e.pdist));
    }
}

//! The whole index in the engine's form, for batches: the tree's nodes and
//! every leaf's points read back from the pages into one engine QuadTree
//! (mirrored on the GPU at its first GPU batch), cached per backend while
//! the metapage's generation and vacuum count match; and the delta, read
//! fresh at every batch into a small tree of its own.

use super::page::*;
use super::shape;
use crate::am::common::cache;
use gpuindex_engine::gpics::{Params, Points, QuadTree};
use pgrx::pg_sys;
use std::sync::Arc;

pub struct Image {
    generation: u64,
    vacuums: u64,
    pub tree: QuadTree,
}

impl cache::Image for Image {
    fn generation(&self) -> u64 {
        self.generation
    }
    fn host_bytes(&self) -> usize {
        self.tree.host_bytes()
    }
    fn device_bytes(&self) -> usize {
        self.tree.device_bytes()
    }
}

fn params(m: &Meta) -> Params {
    Params { mc: m.mc as usize, mh: m.mh as usize }
}

/// The tree part of the index `m` describes.
pub fn tree(rel: pg_sys::Relation, m: &Meta) -> Arc<Image> {
    if let Some(i) = cache::lookup::<Image>(rel, "points") {
        if i.generation == m.generation && i.vacuums == m.vacuums {
            return i;
        }
    }
    // Drop the stale copy first: two full copies need not coexist.
    cache::remove(rel, "points");
    let s = shape::shape(rel, m);
    let mut pts = Points { x: Vec::new(), y: Vec::new(), id: Vec::new() };
    let tree = if s.nodes.is_empty() {
        QuadTree::build_cpu(&pts, params(m))
    } else {
        let n = m.tree_entries as usize;
        pts.x.reserve(n);
        pts.y.reserve(n);
        pts.id.reserve(n);
        let mut nodes = s.nodes.clone();
        // Leaves in leaf-number order, so that points are laid out leaf by
        // leaf as the build lays them.
        let mut leaves: Vec<usize> = (0..nodes.len()).filter(|&i| nodes[i].is_leaf()).collect();
        leaves.sort_by_key(|&i| nodes[i].leaf);
        for i in leaves {
            let start = pts.len();
            shape::for_run(rel, (nodes[i].start, nodes[i].count), |page| {
                for e in page {
                    pts.push(e.x, e.y, e.tid);
                }
            });
            nodes[i].start = start as u32;
            nodes[i].count = (pts.len() - start) as u32;
        }
        QuadTree::from_parts(params(m), nodes, pts, Points::default())
    };
    cache::store(rel, "points", Image { generation: m.generation, vacuums: m.vacuums, tree })
}

/// The chains' non-NULL points as a tree (non-finite ones in its `odd`).
pub fn delta(rel: pg_sys::Relation, m: &Meta) -> QuadTree {
    let mut pts = Points::default();
    super::chain::for_chains(rel, m, |page| {
        for e in page.iter().filter(|e| !e.is_null()) {
            pts.push(e.x, e.y, e.tid);
        }
    });
    QuadTree::build_cpu(&pts, params(m))
}

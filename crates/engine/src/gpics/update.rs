//! G-PICS bulk updates (Section V): apply many inserted and deleted points
//! to a built tree in time proportional to what changed, not a rebuild.
//!
//! - Movement-Check: the leaves that lost points (deleted, or moved out)
//!   are given as `touched`, or found by the in-memory tree;
//! - Leaf-Finding: each inserted point descends to its leaf, one task per
//!   point; a point landing in an empty quadrant creates that leaf on the
//!   fly;
//! - Node-Partitioning: a leaf now over MC (below MH) is split, looking
//!   only at its candidate points (those that stayed and those that moved
//!   in), level by level as the build does;
//! - Node-Merging: sibling leaves whose total is at most MC fold into their
//!   parent, which becomes a leaf (repeated upwards);
//! - Leaf-Lists-Update: only affected leaves get new point lists; every
//!   other leaf keeps its own (`LeafData::Keep`), so a caller that stores
//!   leaves elsewhere (pages) rewrites only those.
//!
//! The plan is computed against a `LeafSource`, so the same code updates
//! the in-memory tree and the access method's pages. A point outside the
//! root's box cannot be placed without re-rooting; the update then reports
//! `OutsideRoot` and the caller rebuilds.

use super::tree::{quadrant, quadrant_box, Node, Params, Points, QuadTree, NONE};
use rayon::prelude::*;
use std::collections::HashMap;

/// Where the updated tree's leaves get their points (by node index in the
/// old tree). Called from the planning thread only, so a source may read
/// pages through PostgreSQL.
pub trait LeafSource {
    /// The current points of each of these leaves.
    fn load(&self, nodes: &[u32]) -> Vec<Points>;
    /// How many points a leaf holds now.
    fn count(&self, node: u32) -> usize;
}

/// The points of one leaf of the updated tree.
#[derive(Debug, Clone, PartialEq)]
pub enum LeafData {
    /// Unchanged: the points of this leaf node of the old tree.
    Keep(u32),
    /// New contents; `origin` is the old leaf node it replaces when it is
    /// the same leaf with changed points (not a split or merge result).
    New { points: Points, origin: Option<u32> },
}

/// The updated tree: nodes in level order (leaf nodes' `start` unset:
/// the caller lays the leaves out), and each leaf's data by leaf number.
#[derive(Debug)]
pub struct UpdatePlan {
    pub nodes: Vec<Node>,
    pub leaves: Vec<LeafData>,
    /// Leaves that were split, merged away, created, or changed.
    pub rewritten: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutsideRoot;

/// A node under construction: the old tree's nodes plus new ones, with
/// each leaf's data.
struct Work {
    nodes: Vec<Node>,
    data: HashMap<u32, Points>,
    alive: Vec<bool>,
    root: u32,
}

/// Re-roots until the root's box holds every inserted point: each step
/// doubles the root towards them, the old root becoming exactly one
/// quadrant of the new (the build's power-of-two root spans make this
/// exact; when it is not, the caller rebuilds).
fn grow(w: &mut Work, inserts: &Points) -> Result<(), OutsideRoot> {
    if inserts.is_empty() {
        return Ok(());
    }
    let (lx, ly, hx, hy) = (0..inserts.len()).fold((f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY), |a, i| {
        (a.0.min(inserts.x[i]), a.1.min(inserts.y[i]), a.2.max(inserts.x[i]), a.3.max(inserts.y[i]))
    });
    for _ in 0..128 {
        let b = w.nodes[w.root as usize].b;
        if b[0] <= lx && b[1] <= ly && b[2] >= hx && b[3] >= hy {
            return Ok(());
        }
        let (sx, sy) = (b[2] - b[0], b[3] - b[1]);
        let (left, down) = (lx < b[0], ly < b[1]);
        let nb = [
            if left { b[0] - sx } else { b[0] },
            if down { b[1] - sy } else { b[1] },
            if left { b[2] } else { b[2] + sx },
            if down { b[3] } else { b[3] + sy },
        ];
        let q = (left as usize) | ((down as usize) << 1);
        if !(sx > 0.0 && sy > 0.0) || nb.iter().any(|v| !v.is_finite()) || quadrant_box(&nb, q) != b {
            return Err(OutsideRoot);
        }
        for n in w.nodes.iter_mut() {
            n.depth += 1;
        }
        let mut child = [NONE; 4];
        child[q] = w.root;
        w.root = w.nodes.len() as u32;
        w.nodes.push(Node { b: nb, child, depth: 1, ..Default::default() });
        w.alive.push(true);
    }
    Err(OutsideRoot)
}

/// Plans the update of the tree `nodes` by `inserts` and by the changes
/// already made to the leaves in `touched` (deletes applied at the source).
pub fn plan_update(
    nodes: &[Node],
    params: Params,
    inserts: &Points,
    touched: &[u32],
    src: &impl LeafSource,
) -> Result<UpdatePlan, OutsideRoot> {
    if nodes.is_empty() || (0..inserts.len()).any(|i| !(inserts.x[i].is_finite() && inserts.y[i].is_finite())) {
        return Err(OutsideRoot);
    }
    let mut w = Work { nodes: nodes.to_vec(), data: HashMap::new(), alive: vec![true; nodes.len()], root: 0 };
    grow(&mut w, inserts)?;
    // Leaf-Finding, one task per inserted point: its leaf, or the node
    // and empty quadrant it falls into.
    let found: Vec<(u32, u8)> = (0..inserts.len())
        .into_par_iter()
        .map(|i| {
            let (x, y) = (inserts.x[i], inserts.y[i]);
            let mut n = w.root;
            loop {
                let node = &w.nodes[n as usize];
                if node.is_leaf() {
                    return (n, 4);
                }
                let q = quadrant(&node.b, x, y);
                match node.child[q] {
                    NONE => return (n, q as u8),
                    c => n = c,
                }
            }
        })
        .collect();
    // Empty quadrants become leaves (on the fly, as the paper creates them).
    let mut target: Vec<u32> = Vec::with_capacity(found.len());
    let mut created: HashMap<(u32, u8), u32> = HashMap::new();
    for &(n, q) in &found {
        if q == 4 {
            target.push(n);
            continue;
        }
        let id = *created.entry((n, q)).or_insert_with(|| {
            let parent = w.nodes[n as usize];
            let id = w.nodes.len() as u32;
            w.nodes.push(Node { b: quadrant_box(&parent.b, q as usize), depth: parent.depth + 1, leaf: u32::MAX, ..Default::default() });
            w.alive.push(true);
            w.nodes[n as usize].child[q as usize] = id;
            w.data.insert(id, Points::default());
            id
        });
        target.push(id);
    }
    // Candidate points of every affected leaf: what it holds now plus
    // what moved in.
    let mut affected: Vec<u32> = target.iter().copied().chain(touched.iter().copied()).collect();
    affected.sort_unstable();
    affected.dedup();
    let old: Vec<u32> = affected.iter().copied().filter(|&n| (n as usize) < nodes.len()).collect();
    for (n, p) in old.iter().zip(src.load(&old)) {
        w.data.insert(*n, p);
    }
    for (i, &n) in target.iter().enumerate() {
        w.data.get_mut(&n).expect("affected leaf").push(inserts.x[i], inserts.y[i], inserts.id[i]);
    }
    // Node-Partitioning of the leaves now over MC.
    let over: Vec<u32> = affected
        .iter()
        .copied()
        .filter(|n| params.may_split(w.data[n].len(), w.nodes[*n as usize].depth as usize, &w.nodes[*n as usize].b))
        .collect();
    let subtrees: Vec<(u32, Vec<Node>, Vec<u32>, Points)> = over
        .par_iter()
        .map(|&n| {
            let (sub, leaves, pts) = QuadTree::build_below(&w.data[&n], w.nodes[n as usize], params);
            (n, sub, leaves, pts)
        })
        .collect();
    for (n, sub, leaves, pts) in subtrees {
        graft(&mut w, n, &sub, &leaves, &pts);
    }
    // Node-Merging, upwards from the affected leaves' parents.
    let parents = parent_map(&w.nodes);
    let mut check: Vec<u32> = affected.iter().filter_map(|&n| parents.get(&n).copied()).collect();
    while !check.is_empty() {
        check.sort_unstable();
        check.dedup();
        let mut next = Vec::new();
        for p in check {
            if !w.alive[p as usize] || w.nodes[p as usize].is_leaf() {
                continue;
            }
            let kids: Vec<u32> = w.nodes[p as usize].child.iter().copied().filter(|&c| c != NONE).collect();
            if !kids.iter().all(|&c| w.nodes[c as usize].is_leaf()) {
                continue;
            }
            let count = |c: u32| w.data.get(&c).map_or_else(|| src.count(c), |d| d.len());
            let total: usize = kids.iter().map(|&c| count(c)).sum();
            if total > params.mc {
                continue;
            }
            let mut merged = Points::default();
            for &c in &kids {
                let d = w.data.remove(&c).unwrap_or_else(|| src.load(&[c]).pop().expect("one leaf"));
                merged.x.extend_from_slice(&d.x);
                merged.y.extend_from_slice(&d.y);
                merged.id.extend_from_slice(&d.id);
                w.alive[c as usize] = false;
            }
            let node = &mut w.nodes[p as usize];
            node.child = [NONE; 4];
            node.leaf = u32::MAX;
            w.data.insert(p, merged);
            if let Some(&pp) = parents.get(&p) {
                next.push(pp);
            }
        }
        check = next;
    }
    let were_leaf: Vec<bool> = nodes.iter().map(|n| n.is_leaf()).collect();
    Ok(finish(w, nodes.len(), &were_leaf))
}

/// Replaces leaf `n` by the subtree `sub` built under it.
fn graft(w: &mut Work, n: u32, sub: &[Node], leaves: &[u32], pts: &Points) {
    w.data.remove(&n);
    // sub[0] is n itself; the others get indices after the current ones.
    let base = w.nodes.len() as u32 - 1;
    let index = |i: u32| if i == 0 { n } else { base + i };
    for (i, s) in sub.iter().enumerate() {
        let mut node = *s;
        for c in node.child.iter_mut().filter(|c| **c != NONE) {
            *c = index(*c);
        }
        if i == 0 {
            w.nodes[n as usize] = node;
        } else {
            w.nodes.push(node);
            w.alive.push(true);
        }
    }
    for &l in leaves {
        let s = &sub[l as usize];
        let (a, b) = (s.start as usize, (s.start + s.count) as usize);
        let p = Points { x: pts.x[a..b].to_vec(), y: pts.y[a..b].to_vec(), id: pts.id[a..b].to_vec() };
        w.nodes[index(l) as usize].leaf = u32::MAX;
        w.data.insert(index(l), p);
    }
}

fn parent_map(nodes: &[Node]) -> HashMap<u32, u32> {
    let mut m = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for &c in n.child.iter().filter(|&&c| c != NONE) {
            m.insert(c, i as u32);
        }
    }
    m
}

/// Renumbers the live nodes in level order (children after parents),
/// numbers the leaves, and says where each leaf's points come from.
fn finish(mut w: Work, old_len: usize, nodes_were_leaf: &[bool]) -> UpdatePlan {
    // Leaves left empty are dropped (only non-empty nodes exist).
    let empty = |w: &Work, c: u32| w.nodes[c as usize].is_leaf() && w.data.get(&c).is_some_and(|d| d.is_empty());
    let mut order = vec![w.root];
    let mut i = 0;
    while i < order.len() {
        let o = order[i] as usize;
        for q in 0..4 {
            let c = w.nodes[o].child[q];
            if c != NONE && empty(&w, c) {
                w.nodes[o].child[q] = NONE;
            }
        }
        order.extend(w.nodes[o].child.iter().copied().filter(|&c| c != NONE));
        i += 1;
    }
    let mut new_index = vec![NONE; w.nodes.len()];
    for (k, &o) in order.iter().enumerate() {
        new_index[o as usize] = k as u32;
    }
    let mut nodes = Vec::with_capacity(order.len());
    let mut leaves = Vec::new();
    let mut rewritten = 0;
    for &o in &order {
        let mut n = w.nodes[o as usize];
        for c in n.child.iter_mut().filter(|c| **c != NONE) {
            *c = new_index[*c as usize];
        }
        if n.is_leaf() {
            n.leaf = leaves.len() as u32 + 1;
            match w.data.remove(&o) {
                Some(p) => {
                    n.count = p.len() as u32;
                    let origin = ((o as usize) < old_len && nodes_were_leaf[o as usize]).then_some(o);
                    leaves.push(LeafData::New { points: p, origin });
                    rewritten += 1;
                }
                None => {
                    debug_assert!((o as usize) < old_len);
                    leaves.push(LeafData::Keep(o));
                }
            }
        } else {
            n.start = 0;
        }
        nodes.push(n);
    }
    UpdatePlan { nodes, leaves, rewritten }
}

/// The in-memory tree as a leaf source, minus the deleted ids.
struct Slices<'a> {
    tree: &'a QuadTree,
    deleted: &'a [u64],
}

impl Slices<'_> {
    fn points(&self, node: u32) -> Points {
        let n = &self.tree.nodes[node as usize];
        let mut p = Points::default();
        for i in n.start as usize..(n.start + n.count) as usize {
            if self.deleted.binary_search(&self.tree.pts.id[i]).is_err() {
                p.push(self.tree.pts.x[i], self.tree.pts.y[i], self.tree.pts.id[i]);
            }
        }
        p
    }
}

impl LeafSource for Slices<'_> {
    fn load(&self, nodes: &[u32]) -> Vec<Points> {
        nodes.par_iter().map(|&n| self.points(n)).collect()
    }
    fn count(&self, node: u32) -> usize {
        let n = &self.tree.nodes[node as usize];
        if self.deleted.is_empty() {
            return n.count as usize;
        }
        (n.start as usize..(n.start + n.count) as usize).filter(|&i| self.deleted.binary_search(&self.tree.pts.id[i]).is_err()).count()
    }
}

impl QuadTree {
    /// Applies a bulk update on all CPU cores: `deleted` ids leave (a
    /// moved point is a delete plus an insert with the same id),
    /// `inserts` join. Returns how many leaves were rewritten, or None
    /// when a point fell outside the root and the tree was rebuilt.
    pub fn update_cpu(&mut self, inserts: &Points, deleted: &[u64]) -> Option<usize> {
        let mut deleted = deleted.to_vec();
        deleted.par_sort_unstable();
        // Movement-Check, one task per leaf: which lost points.
        let touched: Vec<u32> = if deleted.is_empty() {
            Vec::new()
        } else {
            self.leaves
                .par_iter()
                .copied()
                .filter(|&l| {
                    let n = &self.nodes[l as usize];
                    self.pts.id[n.start as usize..(n.start + n.count) as usize].iter().any(|id| deleted.binary_search(id).is_ok())
                })
                .collect()
        };
        let (tree_in, odd_in) = QuadTree::separate(inserts);
        let mut odd = std::mem::take(&mut self.odd);
        odd = retain(&odd, &deleted);
        odd.x.extend_from_slice(&odd_in.x);
        odd.y.extend_from_slice(&odd_in.y);
        odd.id.extend_from_slice(&odd_in.id);
        let plan = plan_update(&self.nodes, self.params, &tree_in, &touched, &Slices { tree: self, deleted: &deleted });
        let Ok(plan) = plan else {
            let mut all = retain(&self.pts, &deleted);
            all.x.extend_from_slice(&tree_in.x);
            all.y.extend_from_slice(&tree_in.y);
            all.id.extend_from_slice(&tree_in.id);
            let mut t = QuadTree::build_cpu(&all, self.params);
            t.odd = odd;
            *self = t;
            return None;
        };
        let rewritten = plan.rewritten;
        *self = self.apply(plan, odd);
        Some(rewritten)
    }

    /// Lays out the updated leaves: kept leaves copy their old slice,
    /// others their new points (in parallel, at offsets from a prefix sum).
    fn apply(&self, plan: UpdatePlan, odd: Points) -> QuadTree {
        let UpdatePlan { mut nodes, leaves, .. } = plan;
        let len = |d: &LeafData| match d {
            LeafData::Keep(o) => self.nodes[*o as usize].count as usize,
            LeafData::New { points, .. } => points.len(),
        };
        let mut starts = Vec::with_capacity(leaves.len());
        let mut total = 0usize;
        for d in &leaves {
            starts.push(total);
            total += len(d);
        }
        let mut pts = Points { x: vec![0.0; total], y: vec![0.0; total], id: vec![0; total] };
        let (ox, oy, oid) = (
            super::tree::SharedMut(pts.x.as_mut_ptr()),
            super::tree::SharedMut(pts.y.as_mut_ptr()),
            super::tree::SharedMut(pts.id.as_mut_ptr()),
        );
        leaves.par_iter().zip(starts.par_iter()).for_each(|(d, &at)| {
            let (x, y, id): (&[f64], &[f64], &[u64]) = match d {
                LeafData::Keep(o) => {
                    let n = &self.nodes[*o as usize];
                    let r = n.start as usize..(n.start + n.count) as usize;
                    (&self.pts.x[r.clone()], &self.pts.y[r.clone()], &self.pts.id[r])
                }
                LeafData::New { points: p, .. } => (&p.x, &p.y, &p.id),
            };
            // SAFETY: leaf ranges [at, at + len) are disjoint and in bounds.
            unsafe {
                std::ptr::copy_nonoverlapping(x.as_ptr(), ox.at(at), x.len());
                std::ptr::copy_nonoverlapping(y.as_ptr(), oy.at(at), y.len());
                std::ptr::copy_nonoverlapping(id.as_ptr(), oid.at(at), id.len());
            }
        });
        for n in nodes.iter_mut().filter(|n| n.is_leaf()) {
            let l = n.leaf as usize - 1;
            n.start = starts[l] as u32;
            n.count = len(&leaves[l]) as u32;
        }
        QuadTree::from_parts(self.params, nodes, pts, odd)
    }
}

fn retain(p: &Points, deleted: &[u64]) -> Points {
    let mut out = Points::default();
    for i in 0..p.len() {
        if deleted.binary_search(&p.id[i]).is_err() {
            out.push(p.x[i], p.y[i], p.id[i]);
        }
    }
    out
}

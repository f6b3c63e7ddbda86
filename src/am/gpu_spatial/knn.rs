//! `ORDER BY p <-> q`: a best-first walk that returns entries in exact
//! distance order for as long as the executor asks (it never says k).
//! One priority queue holds nodes keyed by a lower bound of their points'
//! distances and entries keyed by their exact distance (`point <->
//! point`, pg_hypot); popping an entry means nothing left can be closer.
//! A leaf's entries enter it a few at a time: the nearest 16 (a linear
//! selection), the rest as one item keyed by the 16th distance, split the
//! same way when popped (twice as many each time). A query that wants the
//! k nearest of a 1,024-point leaf then queues ~16 entries, not 1,024.
//! Distances order as float8 sorts them: NaN after every number, NULLs
//! last (ORDER BY's default NULLS LAST).

use super::page::Entry;
use super::shape::{self, matches_all};
use gpuindex_engine::gpics::geom::distance;
use gpuindex_engine::gpics::tree::{Node, NONE as NO_CHILD};
use gpuindex_engine::gpics::Query;
use pgrx::pg_sys;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A distance's place in the order: numbers (with infinities), then NaN,
/// then NULL.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Key {
    rank: u8,
    d: f64,
}

impl Key {
    fn of(d: f64) -> Key {
        if d.is_nan() {
            Key { rank: 1, d: 0.0 }
        } else {
            Key { rank: 0, d }
        }
    }
    const NULL: Key = Key { rank: 2, d: 0.0 };
}

impl Eq for Key {}
impl Ord for Key {
    fn cmp(&self, o: &Self) -> Ordering {
        self.rank.cmp(&o.rank).then(self.d.total_cmp(&o.d))
    }
}
impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

#[derive(Debug)]
enum Item {
    /// A node (index into the shape's nodes).
    Node(u32),
    /// An entry and its exact distance (None for a NULL point).
    Entry(Entry, Option<f64>),
    /// Entries not queued yet, none nearer than the item's key, and how
    /// many to queue when it is popped.
    Rest(Vec<(Key, Entry, f64)>, usize),
}

/// Entries a leaf queues first.
const FIRST_CHUNK: usize = 16;

#[derive(Debug)]
struct Queued {
    key: Key,
    /// Nodes before entries at equal keys, so ties are all found first.
    is_entry: bool,
    item: Item,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Queued {}
impl Ord for Queued {
    // Reversed: BinaryHeap pops the greatest.
    fn cmp(&self, o: &Self) -> Ordering {
        o.key.cmp(&self.key).then(o.is_entry.cmp(&self.is_entry))
    }
}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// A lower bound of `point <-> (x, y)` over a node's box (the engine's
/// `Rect::min_dist`). A query with a NaN coordinate has NaN distances
/// everywhere: every node is opened first.
fn lower_bound(n: &Node, x: f64, y: f64) -> Key {
    let d = n.rect().min_dist(x, y);
    if d.is_nan() || x.is_nan() || y.is_nan() {
        Key { rank: 0, d: f64::NEG_INFINITY }
    } else {
        Key::of(d)
    }
}

pub struct Knn {
    x: f64,
    y: f64,
    quals: Vec<Query>,
    nodes: std::sync::Arc<shape::Shape>,
    heap: BinaryHeap<Queued>,
    /// TIDs returned so far: a concurrent merge may show an entry twice
    /// (in a leaf and in the frozen delta).
    seen: std::collections::HashSet<u64>,
}

impl Knn {
    /// Starts a walk from (x, y) over the entries answering `quals`.
    pub fn start(rel: pg_sys::Relation, x: f64, y: f64, quals: Vec<Query>) -> Knn {
        let m = shape::meta(rel);
        let nodes = shape::shape(rel, &m);
        let mut k = Knn { x, y, quals, nodes, heap: BinaryHeap::new(), seen: Default::default() };
        if !k.nodes.nodes.is_empty() {
            let key = lower_bound(&k.nodes.nodes[0], x, y);
            k.heap.push(Queued { key, is_entry: false, item: Item::Node(0) });
        }
        // The chains are searched by brute force: merges keep them small.
        let mut delta = Vec::new();
        super::chain::for_chains(rel, &m, |page| delta.extend_from_slice(page));
        k.push_entries(delta);
        k
    }

    /// Queues the entries that answer the quals (NULLs last, and only in
    /// a scan without quals).
    fn push_entries(&mut self, entries: Vec<Entry>) {
        let mut rest = Vec::with_capacity(entries.len());
        for e in entries {
            if e.is_null() {
                if self.quals.is_empty() {
                    self.heap.push(Queued { key: Key::NULL, is_entry: true, item: Item::Entry(e, None) });
                }
            } else if matches_all(&e, &self.quals) {
                let d = distance(e.x, e.y, self.x, self.y);
                rest.push((Key::of(d), e, d));
            }
        }
        self.push_rest(rest, FIRST_CHUNK);
    }

    /// Queues the nearest `chunk` of `rest` one by one and the others as
    /// one item keyed by the farthest of those queued.
    fn push_rest(&mut self, mut rest: Vec<(Key, Entry, f64)>, chunk: usize) {
        if rest.len() > chunk {
            rest.select_nth_unstable_by(chunk - 1, |a, b| a.0.cmp(&b.0));
            let later = rest.split_off(chunk);
            self.heap.push(Queued { key: rest[chunk - 1].0, is_entry: false, item: Item::Rest(later, chunk * 2) });
        }
        for (key, e, d) in rest {
            self.heap.push(Queued { key, is_entry: true, item: Item::Entry(e, Some(d)) });
        }
    }

    /// The next entry in distance order and its distance (None: NULL).
    pub fn next(&mut self, rel: pg_sys::Relation) -> Option<(Entry, Option<f64>)> {
        while let Some(q) = self.heap.pop() {
            match q.item {
                Item::Entry(e, d) => {
                    if self.seen.insert(e.tid) {
                        return Some((e, d));
                    }
                }
                Item::Rest(rest, chunk) => self.push_rest(rest, chunk),
                Item::Node(i) => {
                    let n = self.nodes.nodes[i as usize];
                    if n.is_leaf() {
                        let mut page_entries = Vec::new();
                        shape::for_run(rel, (n.start, n.count), |p| page_entries.extend_from_slice(p));
                        self.push_entries(page_entries);
                        continue;
                    }
                    for &c in n.child.iter().filter(|&&c| c != NO_CHILD) {
                        let child = &self.nodes.nodes[c as usize];
                        let r = child.rect();
                        if self.quals.iter().all(|q| q.may_touch(&r)) {
                            let key = lower_bound(child, self.x, self.y);
                            self.heap.push(Queued { key, is_entry: false, item: Item::Node(c) });
                        }
                    }
                }
            }
        }
        None
    }
}

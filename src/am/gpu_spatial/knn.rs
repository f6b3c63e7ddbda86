//! `ORDER BY p <-> q`: a best-first walk that returns entries in exact
//! distance order for as long as the executor asks (it never says k).
//! One priority queue holds nodes keyed by a lower bound of their points'
//! distances and entries keyed by their exact distance (`point <->
//! point`, pg_hypot); popping an entry means nothing left can be closer.
//! A leaf's entries enter it a few at a time: the nearest 16 by their
//! squared offsets (a linear selection; pg_hypot, with its division and
//! root, only for those), the rest as one item keyed by a lower bound from
//! the 16th square, split the same way when popped (twice as many each
//! time). A query that wants the k nearest of a 1,024-point leaf then
//! queues ~16 entries, not 1,024.
//! Distances order as float8 sorts them: NaN after every number, NULLs
//! last (ORDER BY's default NULLS LAST).

use super::page::Entry;
use super::shape::{self, matches_all};
use gpuindex_engine::gpics::geom::distance;
use gpuindex_engine::gpics::tree::{Node, NONE as NO_CHILD};
use gpuindex_engine::gpics::Query;
use gpuindex_engine::keys::{decode_f64, encode_f64};
use pgrx::pg_sys;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A distance's place in the order, as one integer: numbers (with the
/// infinities) by value, then NaN, then NULL (the engine's total order of
/// float8, `keys::encode_f64`, with NULL past every float).
type Key = u64;

fn key_of(d: f64) -> Key {
    encode_f64(d)
}

const NULL_KEY: Key = u64::MAX;

#[derive(Debug)]
enum Item {
    /// A node (index into the shape's nodes).
    Node(u32),
    /// An entry (its distance is its key's).
    Entry(Entry),
    /// Entries not queued yet with their squared offsets (`squares`),
    /// none nearer than the item's key, and how many to queue when it is
    /// popped.
    Rest(Vec<(f64, Entry)>, usize),
}

/// Entries a leaf queues first.
const FIRST_CHUNK: usize = 16;

/// A heap element: small, so that sifting moves 16 bytes; the item waits
/// in `Knn::items`.
#[derive(Debug)]
struct Queued {
    key: Key,
    /// Nodes before entries at equal keys, so ties are all found first.
    is_entry: bool,
    slot: u32,
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
        key_of(f64::NEG_INFINITY)
    } else {
        key_of(d)
    }
}

/// dx² + dy², with NaN (a NaN coordinate) as +Infinity so that it sorts
/// last.
fn squares(dx: f64, dy: f64) -> f64 {
    let s = dx * dx + dy * dy;
    if s.is_nan() {
        f64::INFINITY
    } else {
        s
    }
}

/// A lower bound of pg_hypot(dx, dy) for every offset whose squares are
/// at least `s`: the root, less a slack far above the roundings of both,
/// where `s` is a normal float; where the squares overflowed (infinity, or
/// a NaN coordinate) the larger offset is at least 9.4e153; below the
/// normal range (where underflow may round the squares up) 0.
fn below_squares(s: f64) -> f64 {
    if s.is_infinite() {
        9e153
    } else if s >= 1e-290 {
        s.sqrt() * (1.0 - 1e-12)
    } else {
        0.0
    }
}

pub struct Knn {
    x: f64,
    y: f64,
    quals: Vec<Query>,
    nodes: std::sync::Arc<shape::Shape>,
    heap: BinaryHeap<Queued>,
    /// The heap's items by slot, and the slots free for reuse.
    items: Vec<Item>,
    free: Vec<u32>,
    /// TIDs returned so far: a concurrent merge may show an entry twice
    /// (in a leaf and in the frozen delta).
    seen: std::collections::HashSet<u64>,
}

impl Knn {
    /// Starts a walk from (x, y) over the entries answering `quals`.
    pub fn start(rel: pg_sys::Relation, x: f64, y: f64, quals: Vec<Query>) -> Knn {
        let m = shape::meta(rel);
        let nodes = shape::shape(rel, &m);
        let mut k = Knn { x, y, quals, nodes, heap: BinaryHeap::new(), items: Vec::new(), free: Vec::new(), seen: Default::default() };
        if !k.nodes.nodes.is_empty() {
            let key = lower_bound(&k.nodes.nodes[0], x, y);
            k.push(key, false, Item::Node(0));
        }
        // The chains are searched by brute force: merges keep them small.
        let mut rest = Vec::new();
        super::chain::for_chains(rel, &m, |page| k.gather(page, &mut rest));
        k.push_rest(rest, FIRST_CHUNK);
        k
    }

    fn push(&mut self, key: Key, is_entry: bool, item: Item) {
        let slot = match self.free.pop() {
            Some(s) => {
                self.items[s as usize] = item;
                s
            }
            None => {
                self.items.push(item);
                (self.items.len() - 1) as u32
            }
        };
        self.heap.push(Queued { key, is_entry, slot });
    }

    /// Adds the entries of a page that answer the quals to `rest`, and
    /// queues NULLs (last, and only in a scan without quals).
    fn gather(&mut self, entries: &[Entry], rest: &mut Vec<(f64, Entry)>) {
        for e in entries {
            if e.is_null() {
                if self.quals.is_empty() {
                    self.push(NULL_KEY, true, Item::Entry(*e));
                }
            } else if matches_all(e, &self.quals) {
                rest.push((squares(self.x - e.x, self.y - e.y), *e));
            }
        }
    }

    /// Queues the nearest `chunk` of `rest` by their squares, each with its
    /// exact distance, and the others as one item keyed by a lower bound
    /// of theirs (only pg_hypot is exact; the squares are a cheap order
    /// that needs it for a few entries a leaf).
    fn push_rest(&mut self, mut rest: Vec<(f64, Entry)>, chunk: usize) {
        if rest.len() > chunk {
            rest.select_nth_unstable_by(chunk - 1, |a, b| a.0.total_cmp(&b.0));
            let later = rest.split_off(chunk);
            // The selection leaves every later square at least the chunk's last.
            let key = key_of(below_squares(rest[chunk - 1].0));
            self.push(key, false, Item::Rest(later, chunk * 2));
        }
        for (_, e) in rest {
            self.push(key_of(distance(e.x, e.y, self.x, self.y)), true, Item::Entry(e));
        }
    }

    /// The next entry in distance order and its distance (None: NULL).
    pub fn next(&mut self, rel: pg_sys::Relation) -> Option<(Entry, Option<f64>)> {
        while let Some(q) = self.heap.pop() {
            let item = std::mem::replace(&mut self.items[q.slot as usize], Item::Node(0));
            self.free.push(q.slot);
            match item {
                Item::Entry(e) => {
                    if self.seen.insert(e.tid) {
                        return Some((e, (q.key != NULL_KEY).then(|| decode_f64(q.key))));
                    }
                }
                Item::Rest(rest, chunk) => self.push_rest(rest, chunk),
                Item::Node(i) => {
                    let n = self.nodes.nodes[i as usize];
                    if n.is_leaf() {
                        let mut rest = Vec::with_capacity(n.count as usize * super::page::ENTRY_CAPACITY);
                        shape::for_run(rel, (n.start, n.count), |p| self.gather(p, &mut rest));
                        self.push_rest(rest, FIRST_CHUNK);
                        continue;
                    }
                    let nodes = self.nodes.clone();
                    for &c in n.child.iter().filter(|&&c| c != NO_CHILD) {
                        let child = &nodes.nodes[c as usize];
                        let r = child.rect();
                        if self.quals.iter().all(|q| q.may_touch(&r)) {
                            self.push(lower_bound(child, self.x, self.y), false, Item::Node(c));
                        }
                    }
                }
            }
        }
        None
    }
}

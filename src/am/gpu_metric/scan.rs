//! Index scans (`common::scan::IndexScan`): `WHERE v <@ ball` (any number
//! of balls, ANDed: the TIDs inside each, by the tree's range search over
//! the leaf pages and the delta by brute force, intersected), plain or as
//! a bitmap; and `ORDER BY v <op> q`, every row in exact distance order for
//! as long as the executor asks, then the NULL rows (ORDER BY's default
//! NULLS LAST), with balls only the rows inside them, ending when all of
//! those are out. Two walks give the same order, (distance, TID), with the
//! delta's rows merged in by brute force:
//!
//! - in memory (trees of `IN_MEMORY_ROWS` rows and up, whose copy fits
//!   `gpuindex.scan_memory` or is held already; L2 where the tree prunes
//!   little, high dimensions, and edit distance): the nearest `FIRST` rows
//!   of the tree's copy by the bounded brute force on all cores (L2) or
//!   the tree's search (or the GPU, as `gpuindex.device` says), then four
//!   times as many whenever the executor asks past them;
//! - over the pages: the engine's `Nearest`, best first, one leaf at a time.
//!
//! The distances are the operator's own, so no recheck is needed, except
//! for pgvector's operators (float4 sums): their proven lower bounds are
//! returned and the executor rechecks (`Bound`, `pgvector.rs`). Page
//! locks are dropped between pages: safe for the MVCC snapshots that are
//! all a gpu_metric scan accepts, and gpu_metric has no index-only scans.

use super::ball::{self, Ball};
use super::page::Meta;
use super::shape::{self, PageLeaves};
use super::vector::{self, Form};
use super::{chain, image};
use crate::am::common::scan::{Found, IndexScan};
use crate::storage::{tid_from, tid_to};
use gpuindex_engine::gts::gpu::{FILTER_MAX_K, MAX_GPU_K};
use gpuindex_engine::gts::{float4, search, Metric, Nearest, Shape};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::collections::HashSet;
use std::sync::Arc;

/// The tree a walk reads (a built tree may have no objects yet).
enum Tree {
    Built(Arc<shape::Image>),
    Empty(Shape),
}

impl Tree {
    fn shape(&self) -> &Shape {
        match self {
            Tree::Built(i) => &i.shape,
            Tree::Empty(s) => s,
        }
    }
}

/// Trees smaller than this are walked over their pages.
const IN_MEMORY_ROWS: u64 = 10_000;
/// Rows an in-memory walk finds first.
const FIRST: usize = 64;
/// Rows a walk through the GPU service finds first: as many as the GPU's
/// bounded brute force answers (`LIMIT 16` and below in one request).
const FIRST_BY_SERVICE: usize = FILTER_MAX_K;

/// Where an in-memory walk's rows are.
enum Copy {
    Here(Arc<image::Image>),
    /// In the GPU service, as of this metapage.
    Service(Meta),
}

enum Walk {
    /// Rows in distance order, then the NULL rows.
    Ordered { tree: Tree, nearest: Nearest, nulls: Vec<u64> },
    /// The same from the tree's copy in memory (this backend's or the GPU
    /// service's): its nearest `found` of the `asked` (all of them when
    /// fewer), `at` of them returned; the delta's rows, nearest last.
    InMemory { copy: Copy, query: Vec<f32>, asked: usize, found: Vec<(u64, f64)>, at: usize, delta: Vec<(f64, u64)>, nulls: Vec<u64> },
    /// No ORDER BY argument (NULL): every row, distance NULL.
    Unordered(Vec<u64>),
}

pub struct ScanState {
    /// The ORDER BY query (None: rows in no order); None before rescan.
    query: Option<Option<Vec<f32>>>,
    /// The balls of the WHERE clause.
    balls: Vec<Ball>,
    /// A NULL ball: nothing is inside it.
    empty: bool,
    /// The TIDs inside every ball not returned yet, found at the first row
    /// asked for (None: no balls).
    inside: Option<HashSet<u64>>,
    walk: Option<Walk>,
    /// For pgvector's ordering operators: their lower bounds are returned.
    bound: Option<Bound>,
}

/// The ORDER BY distances of a scan whose ordering operator is pgvector's
/// (float4 sums): `float4::lower_bound` of the index's exact distance,
/// which the executor rechecks (`pgvector.rs`).
struct Bound {
    metric: Metric,
    dim: usize,
    /// For cosine: whether the query's norm keeps the bound tight (rows
    /// are checked at insert); else the bound is 0.
    query_safe: bool,
}

impl Bound {
    fn of(rel: pg_sys::Relation, metric: Metric, q: &[f32]) -> Option<Bound> {
        let query_safe = metric != Metric::Cosine || float4::cosine_safe(q);
        (Form::of(rel) == Form::PgVector).then_some(Bound { metric, dim: q.len(), query_safe })
    }
}

/// The ORDER BY query of a scan (None: no ORDER BY, or a NULL query: rows
/// in no order), and its balls (None: a NULL ball, which nothing is
/// inside).
fn keys_of(scan: &pg_sys::IndexScanDescData, m: &Meta) -> (Option<Vec<f32>>, Option<Vec<Ball>>) {
    let metric = shape::metric(m);
    let mut balls = Vec::new();
    for i in 0..scan.numberOfKeys as usize {
        // SAFETY: keyData holds numberOfKeys keys of the operator class.
        let k = unsafe { &*scan.keyData.add(i) };
        if k.sk_strategy != ball::STRATEGY {
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("gpu_metric: search strategy {}", k.sk_strategy),
                "gpu_metric answers v <@ l2_ball(q, r) (or the ball of its distance) in WHERE.",
            );
        }
        if k.sk_flags as u32 & pg_sys::SK_ISNULL != 0 {
            return (None, None);
        }
        // SAFETY: a non-NULL ball of the operator class's ball type.
        let mut b = unsafe { Ball::read(k.sk_argument, metric) };
        b.center = scan_query(metric, b.center.into(), m.dim as usize);
        balls.push(b);
    }
    if scan.numberOfOrderBys == 0 {
        return (None, Some(balls));
    }
    if scan.numberOfOrderBys != 1 {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "gpu_metric scans order by one distance",
            "Use ORDER BY v <-> q (or <+>, <=>, as the operator class says) LIMIT k.",
        );
    }
    // SAFETY: orderByData holds one key, of the operator class's type.
    let k = unsafe { &*scan.orderByData };
    if k.sk_strategy as u32 != m.metric {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("gpu_metric: ordering strategy {} on an index of strategy {}", k.sk_strategy, m.metric),
            "Order by the operator of the index's operator class.",
        );
    }
    if k.sk_flags as u32 & pg_sys::SK_ISNULL != 0 {
        return (None, Some(balls));
    }
    // SAFETY: a non-NULL argument of the operator class's type.
    let q = unsafe { vector::value(k.sk_argument, Form::of(scan.indexRelation), metric) };
    (Some(scan_query(metric, q, m.dim as usize)), Some(balls))
}

/// A scan's query fitted to the index, except strings longer than its
/// width: the walk over the pages compares strings of any lengths, so they
/// stay whole (and skip the service and the GPU, which take the width).
fn scan_query(metric: Metric, q: std::borrow::Cow<[f32]>, dim: usize) -> Vec<f32> {
    if metric == Metric::Levenshtein && q.len() > dim {
        return q.into_owned();
    }
    vector::fit_query(metric, q, dim)
}

/// The TIDs of the rows inside every ball: the tree's range search over
/// the leaf pages for each, the delta by brute force, intersected.
fn inside(rel: pg_sys::Relation, balls: &[Ball]) -> HashSet<u64> {
    let m = shape::meta(rel);
    let metric = shape::metric(&m);
    let tree = (m.tree_entries > 0).then(|| shape::shape(rel, &m));
    let mut sets = balls.iter().map(|b| {
        let mut set = HashSet::new();
        if let Some(img) = &tree {
            set.extend(search::range_one(&img.shape, &PageLeaves { rel }, &b.center, b.radius).into_iter().map(|h| h.0));
        }
        for c in m.vector_chains() {
            chain::for_run(rel, m.dim as usize, c.head, |e| {
                if b.holds(metric, e.v) {
                    set.insert(e.tid);
                }
            });
        }
        set
    });
    let first = sets.next().unwrap_or_default();
    sets.fold(first, |acc, s| acc.intersection(&s).copied().collect())
}

fn start(rel: pg_sys::Relation, q: Option<&[f32]>) -> Walk {
    let m = shape::meta(rel);
    let mut nulls = Vec::with_capacity(m.nulls.entries as usize);
    chain::for_run(rel, 0, m.nulls.head, |e| nulls.push(e.tid));
    let Some(q) = q else {
        let mut all = Vec::with_capacity(m.entries() as usize);
        if m.tree_entries > 0 {
            let img = shape::shape(rel, &m);
            for leaf in img.shape.leaves() {
                chain::for_run(rel, m.dim as usize, img.shape.nodes[leaf].offset as u32, |e| all.push(e.tid));
            }
        }
        for c in m.vector_chains() {
            chain::for_run(rel, m.dim as usize, c.head, |e| all.push(e.tid));
        }
        all.extend(nulls);
        return Walk::Unordered(all);
    };
    let metric = shape::metric(&m);
    nulls.reverse();
    let mut delta = Vec::new();
    for c in m.vector_chains() {
        chain::for_run(rel, m.dim as usize, c.head, |e| delta.push((metric.distance(q, e.v), e.tid)));
    }
    // Delta rows nearest last, for pop().
    let by_distance_desc = |delta: &mut Vec<(f64, u64)>| delta.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    if m.tree_entries >= IN_MEMORY_ROWS && q.len() == m.dim as usize {
        if let Some(mut found) = image::knn_by_service(rel, &m, q, FIRST_BY_SERVICE, "gpu_metric index scan") {
            by_distance_desc(&mut delta);
            let found = found.pop().unwrap_or_default();
            return Walk::InMemory { copy: Copy::Service(m), query: q.to_vec(), asked: FIRST_BY_SERVICE, found, at: 0, delta, nulls };
        }
    }
    // L2 where the tree prunes little (the bounded brute force), and edit
    // distance (the tree's search stops each distance at its radius; the
    // page walk orders whole leaves by full distances).
    let in_memory = matches!(metric, Metric::L2 | Metric::Levenshtein) && m.tree_entries >= IN_MEMORY_ROWS && q.len() == m.dim as usize;
    let copy = in_memory
        .then(|| {
            image::cached(rel, &m).or_else(|| {
                (image::Image::bytes_for(&m) <= crate::guc::SCAN_MEMORY.get() as usize * (1 << 20)).then(|| image::tree(rel, &m))
            })
        })
        .flatten()
        .filter(|img| metric == Metric::Levenshtein || img.prunes_little());
    if let Some(img) = copy {
        by_distance_desc(&mut delta);
        // Edit distance asks for fewer first: each of k more widens the
        // radius every distance is computed within.
        let first = if metric == Metric::Levenshtein { FIRST_BY_SERVICE } else { FIRST };
        let found = nearest(&img, q, first);
        return Walk::InMemory { copy: Copy::Here(img), query: q.to_vec(), asked: first, found, at: 0, delta, nulls };
    }
    let tree = if m.tree_entries > 0 { Tree::Built(shape::shape(rel, &m)) } else { Tree::Empty(Shape::empty(metric)) };
    let mut nearest = Nearest::new(tree.shape(), q);
    nearest.add(delta.into_iter().map(|(d, tid)| (tid, d)));
    Walk::Ordered { tree, nearest, nulls }
}

/// The `k` rows of `img` nearest `q`, nearest first, ties by TID: on the
/// device `gpuindex.device` picks while k fits the GPU search.
fn nearest(img: &image::Image, q: &[f32], k: usize) -> Vec<(u64, f64)> {
    let cpu = || img.knn_cpu(q, k).pop().unwrap_or_default();
    if k > MAX_GPU_K {
        return cpu();
    }
    crate::batch::run("gpu_metric index scan", 1, cpu, |g| Ok(img.knn_gpu(g, q, k)?.pop().unwrap_or_default()))
}

/// The same from where `copy` is; a service that cannot answer (`auto`)
/// leaves it to this backend's copy.
fn nearest_in(rel: pg_sys::Relation, copy: &Copy, q: &[f32], k: usize) -> Vec<(u64, f64)> {
    match copy {
        Copy::Here(img) => nearest(img, q, k),
        Copy::Service(m) => image::knn_by_service(rel, m, q, k, "gpu_metric index scan")
            .map(|mut a| a.pop().unwrap_or_default())
            .unwrap_or_else(|| nearest(&image::tree(rel, m), q, k)),
    }
}

impl IndexScan for ScanState {
    const AM: &'static str = "gpu_metric";
    const INSTEAD: &'static str = "a sequential scan";

    fn begin(_index: pg_sys::Relation, _nkeys: usize, _norderbys: usize) -> Self {
        ScanState { query: None, balls: Vec::new(), empty: false, inside: None, walk: None, bound: None }
    }

    fn rescan(&mut self, scan: &pg_sys::IndexScanDescData) {
        let m = shape::meta(scan.indexRelation);
        let (query, balls) = keys_of(scan, &m);
        self.bound = query.as_deref().and_then(|q| Bound::of(scan.indexRelation, shape::metric(&m), q));
        self.query = Some(query);
        self.empty = balls.is_none();
        self.balls = balls.unwrap_or_default();
        self.inside = None;
        self.walk = None;
    }

    fn next(&mut self, scan: &pg_sys::IndexScanDescData, _forward: bool) -> Option<Found> {
        let found = self.next_exact(scan)?;
        let Some(b) = &self.bound else { return Some(found) };
        Some(Found { distance: found.distance.map(|d| float4::lower_bound(b.metric, b.dim, d, b.query_safe)), ..found })
    }

    fn order_is_bound(&self) -> bool {
        self.bound.is_some()
    }

    fn value(&self, _ctx: pg_sys::MemoryContext) -> Option<pg_sys::Datum> {
        unreachable!("gpu_metric has no index-only scans")
    }

    fn all(&mut self, scan: &pg_sys::IndexScanDescData, add: &mut dyn FnMut(&mut [pg_sys::ItemPointerData])) {
        if self.empty {
            return;
        }
        let mut tids: Vec<pg_sys::ItemPointerData> = if self.balls.is_empty() {
            let Walk::Unordered(all) = start(scan.indexRelation, None) else { unreachable!("no query") };
            all.into_iter().map(tid_to).collect()
        } else {
            inside(scan.indexRelation, &self.balls).into_iter().map(tid_to).collect()
        };
        add(&mut tids);
    }

    fn end(&mut self) {
        self.walk = None;
        self.inside = None;
    }
}

impl ScanState {
    /// The next row, its distance the index's own.
    fn next_exact(&mut self, scan: &pg_sys::IndexScanDescData) -> Option<Found> {
        let rel = scan.indexRelation;
        if self.empty {
            return None;
        }
        if !self.balls.is_empty() && self.inside.is_none() {
            self.inside = Some(inside(rel, &self.balls));
        }
        let order = self.query.clone().expect("rescan before next");
        let Some(set) = self.inside.as_mut() else {
            return self.walk(rel, order.as_deref());
        };
        let Some(q) = order else {
            // Unordered: any order, one TID at a time.
            let tid = *set.iter().next()?;
            set.remove(&tid);
            return Some(Found { tid: tid_to(tid), distance: None });
        };
        // Ordered: the walk's rows inside the balls, until none is left.
        while !self.inside.as_ref().is_some_and(|s| s.is_empty()) {
            let f = self.walk(rel, Some(&q))?;
            if self.inside.as_mut().expect("set above").remove(&tid_from(f.tid)) {
                return Some(f);
            }
        }
        None
    }

    /// The next row of the walk ordered by `order` (None: in no order),
    /// started at the first call.
    fn walk(&mut self, rel: pg_sys::Relation, order: Option<&[f32]>) -> Option<Found> {
        let walk = self.walk.get_or_insert_with(|| start(rel, order));
        let (tid, distance) = match walk {
            Walk::Unordered(all) => (all.pop()?, None),
            Walk::InMemory { copy, query, asked, found, at, delta, nulls } => {
                if *at == found.len() && found.len() == *asked {
                    // Past what was found: four times as many (the first `at` are the same rows).
                    *asked *= 4;
                    *found = nearest_in(rel, copy, query, *asked);
                }
                let from_tree = match (found.get(*at), delta.last()) {
                    (Some(&(tid, d)), Some(&(dd, dt))) => (d, tid) < (dd, dt),
                    (t, _) => t.is_some(),
                };
                if from_tree {
                    *at += 1;
                    (found[*at - 1].0, Some(found[*at - 1].1))
                } else if let Some((d, tid)) = delta.pop() {
                    (tid, Some(d))
                } else {
                    (nulls.pop()?, None)
                }
            }
            Walk::Ordered { tree, nearest, nulls } => match nearest.next(tree.shape(), &PageLeaves { rel }) {
                Some((tid, d)) => (tid, Some(d)),
                None => (nulls.pop()?, None),
            },
        };
        Some(Found { tid: tid_to(tid), distance })
    }
}

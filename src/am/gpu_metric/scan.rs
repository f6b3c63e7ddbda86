//! Index scans (`common::scan::IndexScan`): `ORDER BY v <op> q`, every
//! row in exact distance order for as long as the executor asks, then the
//! NULL rows (ORDER BY's default NULLS LAST). Two walks give the same
//! order, (distance, TID), with the delta's rows merged in by brute force:
//!
//! - in memory (L2, trees of `IN_MEMORY_ROWS` rows and up, whose copy fits
//!   `gpuindex.scan_memory` or is held already, where the tree prunes
//!   little: high dimensions): the nearest `FIRST` rows of the tree's copy
//!   by the bounded brute force on all cores (or the GPU, as
//!   `gpuindex.device` says), then four times as many whenever the
//!   executor asks past them; it reads each row once, in float4;
//! - over the pages: the engine's `Nearest`, best first, one leaf at a time.
//!
//! The distances are the operator's own, so no recheck is needed. Page
//! locks are dropped between pages: safe for the MVCC snapshots that are
//! all a gpu_metric scan accepts, and gpu_metric has no index-only scans.

use super::page::Meta;
use super::shape::{self, PageLeaves};
use super::{chain, image, vector};
use crate::am::common::scan::{Found, IndexScan};
use crate::storage::tid_to;
use gpuindex_engine::gts::gpu::MAX_GPU_K;
use gpuindex_engine::gts::{bounded, Metric, Nearest, Shape};
use pgrx::pg_sys;
use pgrx::prelude::*;
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

enum Walk {
    /// Rows in distance order, then the NULL rows.
    Ordered { tree: Tree, nearest: Nearest, nulls: Vec<u64> },
    /// The same from the tree's copy in memory: its nearest `found` of the
    /// `asked` (all of them when fewer), `at` of them returned; the delta's
    /// rows, nearest last.
    InMemory {
        img: Arc<image::Image>,
        query: Vec<f32>,
        asked: usize,
        found: Vec<(u64, f64)>,
        at: usize,
        delta: Vec<(f64, u64)>,
        nulls: Vec<u64>,
    },
    /// No ORDER BY argument (NULL): every row, distance NULL.
    Unordered(Vec<u64>),
}

pub struct ScanState {
    /// The ORDER BY query: None for NULL, Some(None) before rescan.
    query: Option<Option<Vec<f32>>>,
    walk: Option<Walk>,
}

/// The query of an ordered scan (None: NULL).
fn query_of(scan: &pg_sys::IndexScanDescData, m: &Meta) -> Option<Vec<f32>> {
    if scan.numberOfOrderBys != 1 || scan.numberOfKeys != 0 {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "gpu_metric scans order by one distance and take no conditions",
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
        return None;
    }
    // SAFETY: a non-NULL real[] argument.
    let q = unsafe { vector::elements(k.sk_argument) };
    let metric = shape::metric(m);
    vector::check_nonzero(metric, q);
    if m.dim != 0 && q.len() != m.dim as usize {
        // The operator's own ERROR for the same pair.
        vector::distance(metric, &vec![1.0; m.dim as usize], q);
    }
    Some(q.to_vec())
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
    let in_memory = metric == Metric::L2 && m.tree_entries >= IN_MEMORY_ROWS;
    let copy = in_memory
        .then(|| {
            image::cached(rel, &m).or_else(|| {
                (image::Image::bytes_for(&m) <= crate::guc::SCAN_MEMORY.get() as usize * (1 << 20)).then(|| image::tree(rel, &m))
            })
        })
        .flatten()
        .filter(|img| img.prunes_little());
    if let Some(img) = copy {
        // Nearest last, for pop().
        delta.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
        let found = nearest(&img, q, FIRST);
        return Walk::InMemory { img, query: q.to_vec(), asked: FIRST, found, at: 0, delta, nulls };
    }
    let tree = if m.tree_entries > 0 { Tree::Built(shape::shape(rel, &m)) } else { Tree::Empty(Shape::empty(metric)) };
    let mut nearest = Nearest::new(tree.shape(), q);
    nearest.add(delta.into_iter().map(|(d, tid)| (tid, d)));
    Walk::Ordered { tree, nearest, nulls }
}

/// The `k` rows of `img` nearest `q` (L2), nearest first, ties by TID: on
/// the device `gpuindex.device` picks while k fits the GPU search.
fn nearest(img: &image::Image, q: &[f32], k: usize) -> Vec<(u64, f64)> {
    let cpu = || bounded::knn_l2(&img.objects, img.norms(), q, k).pop().unwrap_or_default();
    if k > MAX_GPU_K {
        crate::batch::ensure_cpu_pool();
        return cpu();
    }
    crate::batch::run("gpu_metric index scan", 1, cpu, |g| Ok(img.device(g)?.knn(g, q, k)?.pop().unwrap_or_default()))
}

impl IndexScan for ScanState {
    const AM: &'static str = "gpu_metric";
    const INSTEAD: &'static str = "a sequential scan";

    fn begin(_index: pg_sys::Relation, _nkeys: usize, _norderbys: usize) -> Self {
        ScanState { query: None, walk: None }
    }

    fn rescan(&mut self, scan: &pg_sys::IndexScanDescData) {
        let m = shape::meta(scan.indexRelation);
        self.query = Some(query_of(scan, &m));
        self.walk = None;
    }

    fn next(&mut self, scan: &pg_sys::IndexScanDescData, _forward: bool) -> Option<Found> {
        let rel = scan.indexRelation;
        let q = self.query.as_ref().expect("rescan before next");
        let walk = self.walk.get_or_insert_with(|| start(rel, q.as_deref()));
        let (tid, distance) = match walk {
            Walk::Unordered(all) => (all.pop()?, None),
            Walk::InMemory { img, query, asked, found, at, delta, nulls } => {
                if *at == found.len() && found.len() == *asked {
                    // Past what was found: four times as many (the first `at` are the same rows).
                    *asked *= 4;
                    *found = nearest(img, query, *asked);
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

    fn value(&self, _ctx: pg_sys::MemoryContext) -> Option<pg_sys::Datum> {
        unreachable!("gpu_metric has no index-only scans")
    }

    fn all(&mut self, _scan: &pg_sys::IndexScanDescData, _add: &mut dyn FnMut(&mut [pg_sys::ItemPointerData])) {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "gpu_metric has no bitmap scans",
            "gpu_metric answers ORDER BY distance.",
        )
    }

    fn end(&mut self) {
        self.walk = None;
    }
}

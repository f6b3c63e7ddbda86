//! gpu_spatial's batch search (`common::search`): a batch of boxes,
//! circles or points as one G-PICS batch (two-step search on the GPU or on
//! all cores) over the index's points, plus the delta; and the k nearest
//! rows of a batch of centres.

use super::image;
use super::page::Meta;
use super::scan::{query_of, STRATEGY_DISTANCE, STRATEGY_IN_BOX, STRATEGY_IN_CIRCLE, STRATEGY_SAME};
use super::shape;
use crate::am::common::search::{self, Ask, Batch, BatchSearch, Hits};
use crate::am::common::OpenIndex;
use crate::storage::Tid;
use gpuindex_engine::gpics::Query;
use gpuindex_engine::keys::encode_f64;
use pgrx::pg_sys;
use pgrx::prelude::*;

const HINT: &str = "gpu_spatial batches answer point <@ box, <@ circle, ~= point and the k nearest to a point (<->).";

impl BatchSearch for super::GpuSpatial {
    const NAME: &'static str = "gpu_spatial";

    fn search(open: &OpenIndex, batch: &Batch) -> Result<Hits, search::TooMany> {
        let (strategy, k) = match batch.ask {
            Ask::Matches(s) => (s, None),
            Ask::Nearest { strategy, k } => (strategy, Some(k)),
        };
        let expect = match (strategy, k) {
            (STRATEGY_IN_BOX, None) => pg_sys::BOXOID,
            (STRATEGY_IN_CIRCLE, None) => pg_sys::CIRCLEOID,
            (STRATEGY_SAME, None) | (STRATEGY_DISTANCE, Some(_)) => pg_sys::POINTOID,
            _ => search::unsupported("gpu_spatial", batch.ask.to_string(), HINT),
        };
        if batch.query_type != expect {
            search::unsupported(
                "gpu_spatial",
                format!("strategy {strategy} with queries of type {}", crate::error::type_name(batch.query_type)),
                HINT,
            );
        }
        if batch.queries.is_empty() {
            return Ok(Hits { rows: Vec::new(), distances: k.map(|_| Vec::new()) });
        }
        match k {
            None => {
                // SAFETY: datums of the strategy's type (checked above).
                let qs: Vec<(i64, Query)> = batch.queries.iter().map(|&(i, d)| (i, unsafe { query_of(strategy, d) })).collect();
                Ok(Hits { rows: matches(open, &qs, batch.what, batch.heap_order)?, distances: None })
            }
            Some(k) => {
                let centers: Vec<(i64, (f64, f64))> = batch.queries.iter().map(|&(i, d)| (i, point_of(d))).collect();
                if let Some((i, (x, y))) = centers.iter().find(|p| !(p.1 .0.is_finite() && p.1 .1.is_finite())) {
                    crate::error::raise(
                        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                        format!("centre {i} ({x},{y}) has a non-finite coordinate"),
                        "Nearest neighbours need finite centres: every distance from a NaN or infinite point is the same.",
                    );
                }
                knn(open, &centers, k, batch.what)
            }
        }
    }

    /// `point <-> point` is pg_hypot of the coordinates' differences,
    /// and the engine's is PostgreSQL's on every path (CPU, GPU, the
    /// service): the same roundings, no fused multiply-add, and the
    /// differences' signs do not matter (pg_hypot takes their absolute
    /// values). Where PostgreSQL's differences overflow it raises an
    /// ERROR, and the engine's distance is infinite (not finite: the join
    /// evaluates the expression then).
    fn distance_is_value() -> bool {
        true
    }

    fn joins(strategy: u16) -> bool {
        matches!(strategy, STRATEGY_IN_BOX | STRATEGY_IN_CIRCLE | STRATEGY_SAME)
    }

    fn nearest(strategy: u16) -> bool {
        strategy == STRATEGY_DISTANCE
    }

    /// Every page of the index read once (the image's load: ~0.25 s for
    /// 10^7 points on one core, of the order the planner's page costs
    /// give 36K pages against its nested loop's), unless this backend
    /// holds an image or a GPU service would answer.
    fn load_cost(index: pg_sys::Relation, here: bool) -> f64 {
        if crate::service::client::may_answer() || (here && image::held(index)) {
            return 0.0;
        }
        // SAFETY: an open index's relcache entry; a cost GUC.
        unsafe { (*(*index).rd_rel).relpages as f64 * pg_sys::seq_page_cost }
    }

    /// kNN batches the GPU service answers (`image::posts_knn_ahead`).
    fn ahead(open: &OpenIndex, batch: &Batch) -> bool {
        match batch.ask {
            Ask::Nearest { strategy: STRATEGY_DISTANCE, k } if batch.query_type == pg_sys::POINTOID => {
                let m = shape::meta(open.index);
                image::posts_knn_ahead(open.index, &m, batch.queries.len(), first_want(&m, k))
            }
            _ => false,
        }
    }

    /// The request the first round of `knn` sends (a want that differs
    /// there, on an index of fewer than k rows, only wastes it). The
    /// metapage is read again: the request's key must be the image's now,
    /// after the chunk was read.
    fn post_ahead(open: &OpenIndex, batch: &Batch) {
        let Ask::Nearest { strategy: STRATEGY_DISTANCE, k } = batch.ask else { return };
        if batch.query_type != pg_sys::POINTOID {
            return;
        }
        let centres: Vec<(f64, f64)> = batch.queries.iter().map(|&(_, d)| point_of(d)).collect();
        if centres.iter().all(|c| c.0.is_finite() && c.1.is_finite()) {
            let m = shape::meta(open.index);
            image::knn_ahead(open.index, &m, &centres, first_want(&m, k));
        }
    }
}

/// The rows the index holds by its metapage's counts.
fn held(m: &Meta) -> u64 {
    m.tree_entries + [m.delta, m.frozen, m.odd].iter().map(|c| c.entries).sum::<u64>()
}

/// A kNN batch's first round: k candidates a centre, at most as many as
/// the index holds (at least one).
fn first_want(m: &Meta, k: usize) -> usize {
    k.min(held(m).max(1) as usize)
}

fn point_of(d: pg_sys::Datum) -> (f64, f64) {
    // SAFETY: a point datum (checked query type).
    let p = unsafe { &*d.cast_mut_ptr::<pg_sys::Point>() };
    (p.x, p.y)
}

/// Every (position, visible TID) answering the queries, grouped by
/// position, in heap order within each; or (`heap_order`) in heap order.
fn matches(
    open: &OpenIndex,
    qs: &[(i64, Query)],
    what: &'static str,
    heap_order: bool,
) -> Result<Vec<(i64, pg_sys::ItemPointerData)>, search::TooMany> {
    let rel = open.index;
    let m = shape::meta(rel);
    let queries: Vec<Query> = qs.iter().map(|q| q.1).collect();
    let limit = search::limit();
    let hits = match image::range_by_service(rel, &m, &queries, what, limit) {
        Some(hits) => hits.map_err(search::TooMany)?,
        None => {
            let tree = &image::tree(rel, &m).tree;
            let cpu = || tree.search_cpu_bounded(&queries, limit);
            crate::batch::run(what, queries.len(), cpu, |g| tree.search_gpu_bounded(g, &queries, limit)).map_err(search::TooMany)?
        }
    };
    let delta = image::delta(rel, &m);
    let delta_hits = delta.search_cpu_bounded(&queries, limit).map_err(search::TooMany)?;
    search::within_limit((hits.ids.len() + delta_hits.ids.len()) as u64)?;
    let mut matches: Vec<(Tid, i64)> = Vec::with_capacity(hits.ids.len() + delta_hits.ids.len());
    for (i, &(ord, _)) in qs.iter().enumerate() {
        matches.extend(hits.of(i).iter().chain(delta_hits.of(i)).map(|&t| (t, ord)));
    }
    // A merge running beside the call may show an entry twice.
    let rows = open.visible_sorted(crate::visibility::HeapOrdered::sort(matches).dedup());
    Ok(if heap_order { rows } else { crate::visibility::by_position(rows) })
}

/// A kNN candidate: distance key (NaN last), TID, distance.
type Cand = (u64, Tid, f64);

/// The k nearest visible rows of each centre. Candidates come from the
/// tree (one engine kNN batch) and the delta, merged in (distance, TID)
/// order; dead ones are skipped, and a centre left short is asked again
/// with twice as many candidates, until it has k or there are no more.
/// For a plan node every candidate counts (its fetch checks visibility,
/// and asks again itself). Candidates and answers are kept in flat
/// buffers: a batch of 10^4 centres made four small vectors a centre.
fn knn(open: &OpenIndex, centers: &[(i64, (f64, f64))], k: usize, what: &'static str) -> Result<Hits, search::TooMany> {
    let rel = open.index;
    let m = shape::meta(rel);
    // (At most k rows a centre, of those the index holds.)
    search::within_limit((centers.len() as u64).saturating_mul((k as u64).min(held(&m))))?;
    // The tree's copy in this backend, read when the GPU service does not
    // answer.
    let img = std::cell::OnceCell::new();
    let delta = image::delta(rel, &m);
    // At least the distinct rows (entries a merge cut short left in both
    // the tree and the frozen delta count twice).
    let total = m.tree_entries as usize + delta.len();
    let mut want = k.min(total.max(1));
    // The answers (at most `want` a centre: within the limit checked
    // above), each centre's a range of them.
    let mut rows: Vec<(pg_sys::ItemPointerData, f64)> = Vec::with_capacity(centers.len() * want);
    let mut done: Vec<std::ops::Range<usize>> = vec![0..0; centers.len()];
    let mut pending: Vec<usize> = (0..centers.len()).collect();
    let (mut cands, mut starts, mut one) = (Vec::<Cand>::new(), Vec::<usize>::new(), Vec::<Cand>::new());
    while !pending.is_empty() {
        let pts: Vec<(f64, f64)> = pending.iter().map(|&i| centers[i].1).collect();
        let a = image::knn_by_service(rel, &m, &pts, want, what).unwrap_or_else(|| {
            let tree = &img.get_or_init(|| image::tree(rel, &m)).tree;
            crate::batch::run(what, pts.len(), || tree.knn_cpu(&pts, want), |g| tree.knn_gpu(g, &pts, want))
        });
        let b = delta.knn_cpu(&pts, want);
        // Each pending centre's candidates, nearest first, from starts[j].
        cands.clear();
        starts.clear();
        cands.reserve(a.ids.len() + b.ids.len());
        for j in 0..pending.len() {
            let (ai, ad) = a.of(j);
            let (bi, bd) = b.of(j);
            one.clear();
            one.extend(ai.iter().zip(ad).chain(bi.iter().zip(bd)).map(|(&t, &d)| (encode_f64(d), t, d)));
            one.sort_unstable_by_key(|c| (c.0, c.1));
            one.dedup_by_key(|c| c.1);
            one.truncate(want);
            starts.push(cands.len());
            cands.extend_from_slice(&one);
        }
        starts.push(cands.len());
        // Each candidate's visible row (a plan node's: its own).
        let mut alive: Vec<Option<pg_sys::ItemPointerData>> = Vec::new();
        if open.checks_visibility() {
            alive.resize(cands.len(), None);
            for (pos, ctid) in open.visible(cands.iter().enumerate().map(|(i, c)| (c.1, i as i64)).collect()) {
                alive[pos as usize] = Some(ctid);
            }
        }
        let mut again = Vec::new();
        for (j, &i) in pending.iter().enumerate() {
            let at = rows.len();
            for pos in starts[j]..starts[j + 1] {
                if rows.len() - at == k {
                    break;
                }
                let ctid = if alive.is_empty() { Some(crate::storage::tid_to(cands[pos].1)) } else { alive[pos] };
                rows.extend(ctid.map(|t| (t, cands[pos].2)));
            }
            if rows.len() - at >= k || starts[j + 1] - starts[j] < want || want >= total {
                done[i] = at..rows.len();
            } else {
                rows.truncate(at);
                again.push(i);
            }
        }
        pending = again;
        want = want.saturating_mul(2).min(total.max(1));
    }
    let n: usize = done.iter().map(|r| r.len()).sum();
    let mut hits = Hits { rows: Vec::with_capacity(n), distances: Some(Vec::with_capacity(n)) };
    let distances = hits.distances.as_mut().expect("set above");
    for (&(ord, _), r) in centers.iter().zip(done) {
        for &(t, d) in &rows[r] {
            hits.rows.push((ord, t));
            distances.push(d);
        }
    }
    Ok(hits)
}

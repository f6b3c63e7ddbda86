//! Batch SQL functions over a gpu_metric index: many queries in one call,
//! over the tree's rows in memory, on the GPU (`gts::gpu`) or on all cores
//! (`gts::search`) as `gpuindex.device` decides: the tree's bounded kNN and
//! range searches, or for L2 kNN where the tree prunes little (high
//! dimensions) the bounded brute force (`gts::bounded`, or its GPU twin);
//! plus the delta by brute force. Each result
//! row carries its query's 1-based position (`ord`), a heap TID visible to
//! the caller's snapshot (and policies) and its distance. Join back with
//! `JOIN t ON t.ctid = r.ctid`.
//!
//! - `gpu_metric_knn(index, queries real[], k int)`: the k nearest
//!   visible rows of each query, nearest first;
//! - `gpu_metric_within(index, queries real[], radius float8)`: the
//!   visible rows within `radius` of each query, nearest first.
//!
//! `queries` is one vector, or a two-dimensional array of one per row. For
//! an index on text (edit distance), `gpu_metric_knn_text` and
//! `gpu_metric_within_text` take a `text[]`, and for pgvector's vector
//! `gpu_metric_knn_vector` and `gpu_metric_within_vector` (created by
//! gpuindex_pgvector) a `vector[]`: the same functions under their own
//! names (overloads would make an untyped literal such as `'{1,2,3}'`
//! ambiguous).

use super::page::Meta;
use super::vector::{self, Form};
use super::{image, shape};
use crate::am::common::search::{within_limit, Pieces, TooMany};
use crate::am::common::{Access, OpenIndex};
use crate::storage::Tid;
use gpuindex_engine::gpu::GpuError;
use gpuindex_engine::gts::{search, Metric, Vectors};
use pgrx::datum::AnyArray;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rayon::prelude::*;
use std::borrow::Cow;

/// A candidate: distance, TID.
type Cand = (f64, Tid);

/// A batch over an open index: its metapage and the queries, one per row
/// of `width` floats: the index's dimension, or for strings longer than
/// its `max_length` the longest query (all zero-padded to it; such a
/// batch is searched on this backend's CPU: the service and the GPU hold
/// the index's width).
pub struct Call<'a> {
    pub open: &'a OpenIndex,
    pub m: Meta,
    pub queries: Vec<f32>,
    pub width: usize,
}

impl<'a> Call<'a> {
    /// The batch of `queries` (`vector::value`s, fitted to the index: the
    /// operator's own ERRORs), or None when the index holds no vector yet.
    pub fn new<'q>(open: &'a OpenIndex, queries: impl IntoIterator<Item = Cow<'q, [f32]>>) -> Option<Call<'a>> {
        let m = shape::meta(open.index);
        if m.dim == 0 {
            return None; // no vectors indexed
        }
        let metric = shape::metric(&m);
        let queries: Vec<Cow<[f32]>> = queries.into_iter().collect();
        let longest = queries.iter().map(|q| q.len()).max().unwrap_or(0);
        let width = if metric == Metric::Levenshtein { longest.max(m.dim as usize) } else { m.dim as usize };
        let queries = queries.into_iter().flat_map(|q| vector::fit_query(metric, q, width)).collect();
        Some(Call { m, queries, open, width })
    }

    /// Whether the queries have the index's width (else: CPU only).
    fn fits(&self) -> bool {
        self.width == self.m.dim as usize
    }

    /// Why the GPU does not take queries wider than the index.
    fn too_wide(&self) -> GpuError {
        GpuError::Unavailable(format!("queries of {} characters, longer than the index's max_length ({})", self.width, self.m.dim))
    }
}

fn open(index: pg_sys::Oid) -> OpenIndex {
    OpenIndex::open(index, "gpu_metric", Access::Read, pg_sys::AccessShareLock as i32)
}

/// The candidates of each query in the delta: those within its radius
/// (`radii`, or any distance), the `k` nearest of them if k is given.
fn delta_candidates(m: &Meta, queries: &[f32], width: usize, delta: &Vectors, k: Option<usize>, radii: Option<&[f64]>) -> Vec<Vec<Cand>> {
    let metric = shape::metric(m);
    queries
        .par_chunks(width)
        .enumerate()
        .map(|(j, q)| {
            let radius = radii.map_or(f64::INFINITY, |r| r[j]);
            let mut c: Vec<Cand> =
                (0..delta.len()).map(|i| (metric.distance(q, delta.get(i)), delta.ids[i])).filter(|c| c.0 <= radius).collect();
            c.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            if let Some(k) = k {
                c.truncate(k);
            }
            c
        })
        .collect()
}

/// The visible candidates of each query, as (ord, ctid, distance) rows in
/// candidate order.
fn visible(open: &OpenIndex, cands: &[Vec<Cand>]) -> Vec<Vec<(pg_sys::ItemPointerData, f64)>> {
    let mut flat: Vec<(usize, usize)> = Vec::new();
    let mut matches = Vec::new();
    for (j, c) in cands.iter().enumerate() {
        for (r, &(_, tid)) in c.iter().enumerate() {
            matches.push((tid, flat.len() as i64));
            flat.push((j, r));
        }
    }
    let mut out: Vec<Vec<(usize, pg_sys::ItemPointerData, f64)>> = vec![Vec::new(); cands.len()];
    for (pos, ctid) in open.visible(matches) {
        let (j, r) = flat[pos as usize];
        out[j].push((r, ctid, cands[j][r].0));
    }
    out.into_iter()
        .map(|mut rows| {
            rows.sort_unstable_by_key(|x| x.0);
            rows.into_iter().map(|x| (x.1, x.2)).collect()
        })
        .collect()
}

/// Merges tree and delta candidates in (distance, TID) order.
fn merge(a: Vec<(u64, f64)>, b: &[Cand], k: Option<usize>) -> Vec<Cand> {
    let mut c: Vec<Cand> = a.into_iter().map(|(t, d)| (d, t)).chain(b.iter().copied()).collect();
    c.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    c.dedup_by_key(|c| c.1);
    if let Some(k) = k {
        c.truncate(k);
    }
    c
}

/// The k nearest visible rows of each query. A query whose candidates
/// include dead rows is asked again with twice as many, until it has k or
/// there are no more. `what` names the batch in `gpuindex_last_batch()`.
pub fn knn(call: &Call, k: usize, what: &'static str) -> Result<Vec<Vec<(pg_sys::ItemPointerData, f64)>>, TooMany> {
    let rel = call.open.index;
    // (At most k rows a query, of those the index holds.)
    let n = call.queries.len() / call.width;
    within_limit((n as u64).saturating_mul((k as u64).min(call.m.entries())))?;
    // The tree's copy in this backend, made when the GPU service does not
    // answer.
    let img = std::cell::OnceCell::new();
    let delta = image::delta(rel, &call.m);
    let width = call.width;
    let total = call.m.tree_entries as usize + delta.len();
    let n = call.queries.len() / width;
    let mut done = vec![Vec::new(); n];
    let mut pending: Vec<usize> = (0..n).collect();
    let mut want = k.min(total.max(1));
    while !pending.is_empty() {
        let qs: Vec<f32> = pending.iter().flat_map(|&i| call.queries[i * width..(i + 1) * width].iter().copied()).collect();
        let a = if call.fits() { image::knn_by_service(rel, &call.m, &qs, want, what) } else { None }.unwrap_or_else(|| {
            let img = img.get_or_init(|| image::tree(rel, &call.m));
            if !call.fits() {
                let cpu = || search::knn_rows(&img.shape, &img.objects, &qs, width, want);
                return crate::batch::run(what, pending.len(), cpu, |_| Err(call.too_wide()));
            }
            crate::batch::run(what, pending.len(), || img.knn_cpu(&qs, want), |g| img.knn_gpu(g, &qs, want))
        });
        let b = delta_candidates(&call.m, &qs, width, &delta, Some(want), None);
        let cands: Vec<Vec<Cand>> = a.into_iter().zip(&b).map(|(a, b)| merge(a, b, Some(want))).collect();
        let alive = visible(call.open, &cands);
        let mut again = Vec::new();
        for (j, (&i, mut rows)) in pending.iter().zip(alive).enumerate() {
            if rows.len() >= k || cands[j].len() < want || want >= total {
                rows.truncate(k);
                done[i] = rows;
            } else {
                again.push(i);
            }
        }
        pending = again;
        want = want.saturating_mul(2).min(total.max(1));
    }
    Ok(done)
}

/// The visible rows within `radii[i]` of query i.
pub fn within(call: &Call, radii: &[f64], what: &'static str) -> Result<Vec<Vec<(pg_sys::ItemPointerData, f64)>>, TooMany> {
    let rel = call.open.index;
    let img = image::tree(rel, &call.m);
    let delta = image::delta(rel, &call.m);
    // The engine stops soon past the limit (each answer is a match).
    let cap = crate::am::common::search::entry_limit();
    let cpu = || search::range_rows_capped(&img.shape, &img.objects, &call.queries, call.width, radii, cap);
    let a = crate::batch::run(what, radii.len(), cpu, |g| match call.fits() {
        true => img.device(g)?.range_each_capped(g, &call.queries, radii, cap),
        false => Err(call.too_wide()),
    })
    .map_err(|n| TooMany(n as u64))?;
    let b = delta_candidates(&call.m, &call.queries, call.width, &delta, None, Some(radii));
    within_limit(a.iter().map(Vec::len).chain(b.iter().map(Vec::len)).map(|n| n as u64).sum())?;
    let cands: Vec<Vec<Cand>> = a.into_iter().zip(&b).map(|(a, b)| merge(a, b, None)).collect();
    Ok(visible(call.open, &cands))
}

/// Returns each query's rows (ord, ctid, distance), `answer` finding those
/// of a range of the queries: in pieces within `gpuindex.batch_work_mem`.
fn return_rows(
    fcinfo: pg_sys::FunctionCallInfo,
    n: usize,
    mut answer: impl FnMut(std::ops::Range<usize>) -> Result<Vec<Vec<(pg_sys::ItemPointerData, f64)>>, TooMany>,
) {
    // SAFETY: the call's own fcinfo, declared (ord, ctid, distance).
    let mut out = unsafe { crate::srf::Rows::begin(fcinfo) };
    let mut pieces = Pieces::of(n);
    while let Some(rows) = pieces.next_by(&mut answer) {
        let first = pieces.last().start;
        let rows = rows.into_iter().enumerate().flat_map(|(i, rows)| rows.into_iter().map(move |(t, d)| ((first + i + 1) as i64, t, d)));
        // SAFETY: as above; `r` lives until the row is stored.
        unsafe {
            out.put(rows, |r, v: &mut [pg_sys::Datum; 3]| {
                v[0] = r.0.into();
                v[1] = crate::srf::tid_datum(&r.1);
                v[2] = pg_sys::Datum::from(r.2.to_bits());
            })
        };
    }
}

/// The queries of a batch function: the rows of a `real[]` (one vector,
/// or a two-dimensional array of one per row), or the elements of a
/// `text[]` (an index on text) or of a `vector[]` (on pgvector's vector).
fn queries_of<'a>(open: &OpenIndex, queries: &AnyArray) -> Vec<Cow<'a, [f32]>> {
    let metric = shape::metric(&shape::meta(open.index));
    let form = Form::of(open.index);
    // SAFETY: an open index has an input type per column.
    let want = unsafe { *(*open.index).rd_opcintype };
    let want_element = if form == Form::Real { pg_sys::FLOAT4OID } else { want };
    // SAFETY: a catalog lookup of the argument's array type.
    let got = unsafe { pg_sys::get_element_type(queries.oid()) };
    if got != want_element {
        let name = crate::error::type_name;
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
            format!("queries of type {}[] for a gpu_metric index on {} values", name(got), name(want)),
            format!("Pass the queries as {}[].", name(want_element)),
        );
    }
    if form == Form::Real {
        // SAFETY: a non-NULL real[] (element type checked).
        let (n, q) = unsafe { vector::matrix(queries.datum(), 2) };
        return q.chunks(q.len() / n.max(1)).map(Cow::Borrowed).collect();
    }
    // SAFETY: a non-NULL array datum, detoasted.
    if unsafe { pg_sys::array_contains_nulls(pg_sys::pg_detoast_datum(queries.datum().cast_mut_ptr()) as *mut pg_sys::ArrayType) } {
        crate::error::raise(PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED, "queries must not contain NULL", "Leave NULL queries out.");
    }
    let (_, values) = crate::arrays::elements(queries.datum());
    // SAFETY: non-NULL elements of the index's type.
    values.into_iter().map(|(_, d)| unsafe { vector::value(d, form, metric) }).collect()
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    requires = [functions::estimate::gpuindex_batch_rows],
    sql = "CREATE FUNCTION gpu_metric_knn(index regclass, queries real[], k int) RETURNS TABLE (ord bigint, ctid tid, distance float8)
    VOLATILE PARALLEL SAFE STRICT SUPPORT gpuindex_batch_rows LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';
CREATE FUNCTION gpu_metric_knn_text(index regclass, queries text[], k int) RETURNS TABLE (ord bigint, ctid tid, distance float8)
    VOLATILE PARALLEL SAFE STRICT SUPPORT gpuindex_batch_rows LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_metric_knn(index: pg_sys::Oid, queries: AnyArray, k: i32, fcinfo: pg_sys::FunctionCallInfo) {
    let k = crate::error::positive_k(k);
    let open = open(index);
    let queries = queries_of(&open, &queries);
    let n = queries.len();
    return_rows(fcinfo, n, |r| Call::new(&open, queries[r].iter().cloned()).map_or(Ok(Vec::new()), |call| knn(&call, k, "gpu_metric_knn")));
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_metric_within(index regclass, queries real[], radius float8) RETURNS TABLE (ord bigint, ctid tid, distance float8)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';
CREATE FUNCTION gpu_metric_within_text(index regclass, queries text[], radius float8) RETURNS TABLE (ord bigint, ctid tid, distance float8)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_metric_within(index: pg_sys::Oid, queries: AnyArray, radius: f64, fcinfo: pg_sys::FunctionCallInfo) {
    if radius.is_nan() || radius < 0.0 {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("radius {radius} is not a distance"),
            "Pass a radius >= 0.",
        );
    }
    let open = open(index);
    let queries = queries_of(&open, &queries);
    let n = queries.len();
    return_rows(fcinfo, n, |r| {
        let radii = vec![radius; r.len()];
        Call::new(&open, queries[r].iter().cloned()).map_or(Ok(Vec::new()), |call| within(&call, &radii, "gpu_metric_within"))
    });
}

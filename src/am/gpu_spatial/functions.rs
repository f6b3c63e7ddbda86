//! Batch SQL functions over a gpu_spatial index: many queries in one call,
//! run as one G-PICS batch (two-step search on the GPU or on all cores)
//! over the index's points, plus the delta; each result row carries its
//! query's 1-based position (`ord`) and a heap TID visible to the caller's
//! snapshot. Join back with `JOIN t ON t.ctid = r.ctid`.
//!
//! - `gpu_spatial_range(index, boxes box[])`: points inside each box;
//! - `gpu_spatial_within(index, circles circle[])` and
//!   `gpu_spatial_within(index, centers point[], radius float8)`: points
//!   within distance of each centre;
//! - `gpu_spatial_knn(index, centers point[], k int)`: the k nearest
//!   visible rows of each centre, nearest first, with their distance;
//! - `gpu_spatial_join(index, outer_table, outer_column, within, batch)`:
//!   every (outer row, inner row) pair where the inner point is inside the
//!   outer box or circle, or within `within` of the outer point; the outer
//!   table is read in batches of `batch` rows, each one index batch.
//!
//! NULL array elements (and outer rows with NULL) match nothing; their
//! positions still count.

use super::image;
use super::shape;
use crate::am::common::{Access, OpenIndex};
use crate::storage::{tid_from, Tid};
use gpuindex_engine::gpics::{Query, Rect};
use gpuindex_engine::keys::encode_f64;
use pgrx::datum::AnyArray;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::Spi;

fn fail(code: PgSqlErrorCode, msg: impl Into<String>, hint: &str) -> ! {
    crate::error::raise(code, msg, hint)
}

/// Opens a gpu_spatial index to read (the privilege guard).
fn open_index(oid: pg_sys::Oid) -> OpenIndex {
    OpenIndex::open(oid, c"gpu_spatial", Access::Read, pg_sys::AccessShareLock as i32)
}

/// The elements of a geometric array as queries, with their positions.
fn queries_of(arr: &AnyArray, expect: pg_sys::Oid, what: &str, f: impl Fn(pg_sys::Datum) -> Query) -> Vec<(i64, Query)> {
    let (elem, values) = crate::arrays::elements(arr.datum());
    if elem != expect {
        fail(PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH, format!("expected an array of {what}"), &format!("Cast it: ARRAY[...]::{what}[]."));
    }
    values.into_iter().map(|(i, d)| (i, f(d))).collect()
}

fn box_query(d: pg_sys::Datum) -> Query {
    // SAFETY: a box datum (checked element type).
    let b = unsafe { &*d.cast_mut_ptr::<pg_sys::BOX>() };
    Query::Range(Rect { lx: b.low.x, ly: b.low.y, hx: b.high.x, hy: b.high.y })
}

fn circle_query(d: pg_sys::Datum) -> Query {
    // SAFETY: a circle datum (checked element type).
    let c = unsafe { &*d.cast_mut_ptr::<pg_sys::CIRCLE>() };
    Query::Within { x: c.center.x, y: c.center.y, r: c.radius }
}

fn point_of(d: pg_sys::Datum) -> (f64, f64) {
    // SAFETY: a point datum (checked element type).
    let p = unsafe { &*d.cast_mut_ptr::<pg_sys::Point>() };
    (p.x, p.y)
}

fn check_radius(r: f64) {
    if r.is_nan() || r < 0.0 {
        fail(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("radius {r} is not a distance"), "Pass a radius >= 0.");
    }
}

/// Every (position, visible TID) answering the queries, grouped by
/// position, in heap order within each.
fn search(open: &OpenIndex, qs: &[(i64, Query)], what: &'static str) -> Vec<(i64, pg_sys::ItemPointerData)> {
    if qs.is_empty() {
        return Vec::new();
    }
    let rel = open.index;
    let m = shape::meta(rel);
    let img = image::tree(rel, &m);
    let queries: Vec<Query> = qs.iter().map(|q| q.1).collect();
    let tree = &img.tree;
    let hits = crate::batch::run(what, queries.len(), || tree.search_cpu(&queries), |g| tree.search_gpu(g, &queries));
    let delta = image::delta(rel, &m);
    let delta_hits = delta.search_cpu(&queries);
    let mut matches: Vec<(Tid, i64)> = Vec::with_capacity(hits.ids.len() + delta_hits.ids.len());
    for (i, &(ord, _)) in qs.iter().enumerate() {
        matches.extend(hits.of(i).iter().chain(delta_hits.of(i)).map(|&t| (t, ord)));
    }
    // A merge running beside the call may show an entry twice.
    crate::visibility::sort(&mut matches);
    matches.dedup();
    crate::visibility::by_position(open.visible(matches))
}

/// Runs a search over index `oid` and returns its (ord, ctid) rows.
fn search_rows(oid: pg_sys::Oid, qs: &[(i64, Query)], what: &'static str, fcinfo: pg_sys::FunctionCallInfo) {
    let rows = search(&open_index(oid), qs, what);
    // SAFETY: the call's own fcinfo, declared (ord bigint, ctid tid).
    unsafe { crate::srf::ord_tids(fcinfo, rows) }
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_spatial_range(index regclass, boxes box[]) RETURNS TABLE (ord bigint, ctid tid)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_spatial_range(index: pg_sys::Oid, boxes: AnyArray, fcinfo: pg_sys::FunctionCallInfo) {
    let qs = queries_of(&boxes, pg_sys::BOXOID, "box", box_query);
    search_rows(index, &qs, "gpu_spatial_range", fcinfo)
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_spatial_within(index regclass, circles circle[]) RETURNS TABLE (ord bigint, ctid tid)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_spatial_within_circles(index: pg_sys::Oid, circles: AnyArray, fcinfo: pg_sys::FunctionCallInfo) {
    let qs = queries_of(&circles, pg_sys::CIRCLEOID, "circle", circle_query);
    search_rows(index, &qs, "gpu_spatial_within", fcinfo)
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_spatial_within(index regclass, centers point[], radius float8) RETURNS TABLE (ord bigint, ctid tid)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_spatial_within_points(index: pg_sys::Oid, centers: AnyArray, radius: f64, fcinfo: pg_sys::FunctionCallInfo) {
    check_radius(radius);
    let qs = queries_of(&centers, pg_sys::POINTOID, "point", |d| {
        let (x, y) = point_of(d);
        Query::Within { x, y, r: radius }
    });
    search_rows(index, &qs, "gpu_spatial_within", fcinfo)
}

/// A kNN candidate: distance key (NaN last), TID, distance.
type Cand = (u64, Tid, f64);

/// The k nearest visible rows of each centre. Candidates come from the
/// tree (one engine kNN batch) and the delta, merged in (distance, TID)
/// order; dead ones are skipped, and a centre left short is asked again
/// with twice as many candidates, until it has k or there are no more.
fn knn(open: &OpenIndex, centers: &[(i64, (f64, f64))], k: usize) -> Vec<(i64, pg_sys::ItemPointerData, f64)> {
    let rel = open.index;
    let m = shape::meta(rel);
    let img = image::tree(rel, &m);
    let delta = image::delta(rel, &m);
    let total = img.tree.len() + delta.len();
    let mut done: Vec<Vec<(pg_sys::ItemPointerData, f64)>> = vec![Vec::new(); centers.len()];
    let mut pending: Vec<usize> = (0..centers.len()).collect();
    let mut want = k;
    while !pending.is_empty() {
        let pts: Vec<(f64, f64)> = pending.iter().map(|&i| centers[i].1).collect();
        let tree = &img.tree;
        let a = crate::batch::run("gpu_spatial_knn", pts.len(), || tree.knn_cpu(&pts, want), |g| tree.knn_gpu(g, &pts, want));
        let b = delta.knn_cpu(&pts, want);
        let mut cands: Vec<Vec<Cand>> = Vec::with_capacity(pending.len());
        let mut matches: Vec<(Tid, i64)> = Vec::new();
        for j in 0..pending.len() {
            let (ai, ad) = a.of(j);
            let (bi, bd) = b.of(j);
            let mut c: Vec<Cand> = ai.iter().zip(ad).chain(bi.iter().zip(bd)).map(|(&t, &d)| (encode_f64(d), t, d)).collect();
            c.sort_unstable_by_key(|c| (c.0, c.1));
            c.dedup_by_key(|c| c.1);
            c.truncate(want);
            matches.extend(c.iter().enumerate().map(|(r, c)| (c.1, (j * want + r) as i64)));
            cands.push(c);
        }
        let seen = open.visible(matches);
        let mut alive: Vec<Vec<(usize, pg_sys::ItemPointerData)>> = vec![Vec::new(); pending.len()];
        for (pos, ctid) in seen {
            let (j, r) = (pos as usize / want, pos as usize % want);
            alive[j].push((r, ctid));
        }
        let mut again = Vec::new();
        for (j, &i) in pending.iter().enumerate() {
            alive[j].sort_unstable_by_key(|a| a.0);
            if alive[j].len() >= k || cands[j].len() < want || want >= total {
                done[i] = alive[j].iter().take(k).map(|&(r, ctid)| (ctid, cands[j][r].2)).collect();
            } else {
                again.push(i);
            }
        }
        pending = again;
        want = want.saturating_mul(2).min(total.max(1));
    }
    centers.iter().zip(done).flat_map(|(&(ord, _), rows)| rows.into_iter().map(move |(t, d)| (ord, t, d))).collect()
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_spatial_knn(index regclass, centers point[], k int) RETURNS TABLE (ord bigint, ctid tid, distance float8)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_spatial_knn(index: pg_sys::Oid, centers: AnyArray, k: i32, fcinfo: pg_sys::FunctionCallInfo) {
    if k <= 0 {
        fail(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("k = {k}: k must be positive"), "Ask for k >= 1 neighbours.");
    }
    let (elem, values) = crate::arrays::elements(centers.datum());
    if elem != pg_sys::POINTOID {
        fail(PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH, "expected an array of point", "Cast it: ARRAY[...]::point[].");
    }
    let pts: Vec<(i64, (f64, f64))> = values.into_iter().map(|(i, d)| (i, point_of(d))).collect();
    if let Some((i, (x, y))) = pts.iter().find(|p| !(p.1 .0.is_finite() && p.1 .1.is_finite())) {
        fail(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("centre {i} ({x},{y}) has a non-finite coordinate"),
            "Nearest neighbours need finite centres: every distance from a NaN or infinite point is the same.",
        );
    }
    let rows = if pts.is_empty() { Vec::new() } else { knn(&open_index(index), &pts, k as usize) };
    // SAFETY: the call's own fcinfo, declared (ord, ctid, distance).
    unsafe {
        crate::srf::materialize(fcinfo, rows, |r, v| {
            v[0] = r.0.into();
            v[1] = crate::srf::tid_datum(&r.1);
            v[2] = r.2.into_datum().expect("float8");
        })
    }
}

/// The outer column's type: point, box or circle.
fn outer_type(table: pg_sys::Oid, column: &str) -> pg_sys::Oid {
    let t: Option<pg_sys::Oid> = Spi::get_one_with_args(
        "SELECT atttypid FROM pg_attribute WHERE attrelid = $1 AND attname = $2 AND attnum > 0 AND NOT attisdropped",
        &[table.into(), column.into()],
    )
    .unwrap_or(None);
    t.unwrap_or_else(|| {
        fail(
            PgSqlErrorCode::ERRCODE_UNDEFINED_COLUMN,
            format!("column \"{column}\" does not exist in the outer table"),
            "Name a point, box or circle column.",
        )
    })
}

#[pg_extern(
    volatile,
    parallel_unsafe,
    sql = "CREATE FUNCTION gpu_spatial_join(index regclass, outer_table regclass, outer_column text,
        within float8 DEFAULT NULL, batch int DEFAULT 65536) RETURNS TABLE (outer_ctid tid, inner_ctid tid)
    VOLATILE PARALLEL UNSAFE LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_spatial_join(
    index: Option<pg_sys::Oid>,
    outer_table: Option<pg_sys::Oid>,
    outer_column: Option<&str>,
    within: Option<f64>,
    batch: Option<i32>,
    fcinfo: pg_sys::FunctionCallInfo,
) {
    let (Some(index), Some(outer), Some(column)) = (index, outer_table, outer_column) else {
        fail(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            "index, outer_table and outer_column must not be NULL",
            "Name the index, the outer table and its column.",
        );
    };
    let batch = batch.unwrap_or(65536);
    if batch <= 0 {
        fail(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("batch = {batch} must be positive"),
            "Use batches of thousands of outer rows.",
        );
    }
    let kind = outer_type(outer, column);
    if kind == pg_sys::POINTOID {
        match within {
            Some(r) => check_radius(r),
            None => fail(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                "joining on a point column needs a distance",
                "Pass within => d: pairs of points at most d apart.",
            ),
        }
    } else if ![pg_sys::BOXOID, pg_sys::CIRCLEOID].contains(&kind) {
        fail(
            PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
            format!("column \"{column}\" is not a point, box or circle"),
            "Join on a point (with within), box or circle column.",
        );
    } else if within.is_some() {
        fail(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "within applies to point columns only",
            "Boxes and circles carry their own extent; drop within.",
        );
    }
    // The outer value of a row as a query.
    let to_query = |row: &pgrx::spi::SpiHeapTupleData| -> Result<Query, pgrx::spi::Error> {
        Ok(match kind {
            pg_sys::POINTOID => {
                let p: pg_sys::Point = row.get(2)?.expect("not null");
                Query::Within { x: p.x, y: p.y, r: within.unwrap_or(0.0) }
            }
            pg_sys::BOXOID => {
                let b: pg_sys::BOX = row.get(2)?.expect("not null");
                Query::Range(Rect { lx: b.low.x, ly: b.low.y, hx: b.high.x, hy: b.high.y })
            }
            _ => {
                let c: pg_sys::CIRCLE = row.get(2)?.expect("not null");
                Query::Within { x: c.center.x, y: c.center.y, r: c.radius }
            }
        })
    };
    // SAFETY: regclass and identifiers quoted by PostgreSQL.
    let sql = unsafe {
        let rel = std::ffi::CStr::from_ptr(pg_sys::quote_qualified_identifier(
            pg_sys::get_namespace_name(pg_sys::get_rel_namespace(outer)),
            pg_sys::get_rel_name(outer),
        ))
        .to_string_lossy()
        .into_owned();
        let col = std::ffi::CStr::from_ptr(pg_sys::quote_identifier(std::ffi::CString::new(column).unwrap().as_ptr()))
            .to_string_lossy()
            .into_owned();
        // ONLY: a child table's ctids would not identify rows of this one.
        // The query runs as the caller: SELECT privileges and row-level
        // security on the outer table are PostgreSQL's own checks.
        format!("SELECT ctid, {col} FROM ONLY {rel} WHERE {col} IS NOT NULL")
    };
    let mut out: Vec<(pg_sys::ItemPointerData, pg_sys::ItemPointerData)> = Vec::new();
    let inner = open_index(index);
    Spi::connect(|client| {
        let mut cursor = client.open_cursor(&sql, &[]);
        loop {
            let rows = cursor.fetch(batch as _)?;
            if rows.is_empty() {
                break;
            }
            let mut outer_tids = Vec::with_capacity(rows.len());
            let mut qs = Vec::with_capacity(rows.len());
            for row in rows {
                let tid: pg_sys::ItemPointerData = row.get(1)?.expect("ctid");
                qs.push((outer_tids.len() as i64, to_query(&row)?));
                outer_tids.push(tid_from(tid));
            }
            for (ord, tid) in search(&inner, &qs, "gpu_spatial_join") {
                out.push((crate::storage::tid_to(outer_tids[ord as usize]), tid));
            }
        }
        Ok::<_, pgrx::spi::Error>(())
    })
    .unwrap_or_else(|e| {
        fail(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("reading the outer table: {e}"), "Check the table and column names.")
    });
    drop(inner);
    // SAFETY: the call's own fcinfo; two tid columns.
    unsafe {
        crate::srf::materialize(fcinfo, out, |r, v| {
            v[0] = crate::srf::tid_datum(&r.0);
            v[1] = crate::srf::tid_datum(&r.1);
        })
    }
}

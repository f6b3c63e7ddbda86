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

use super::scan::{STRATEGY_DISTANCE, STRATEGY_IN_BOX, STRATEGY_IN_CIRCLE};
use crate::am::common::search::{self, Ask, Batch};
use crate::am::common::{Access, OpenIndex};
use crate::functions::call::Call;
use pgrx::datum::AnyArray;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::Spi;

fn fail(code: PgSqlErrorCode, msg: impl Into<String>, hint: &str) -> ! {
    crate::error::raise(code, msg, hint)
}

/// The non-NULL elements of a geometric array with their positions,
/// checked to be of type `expect` (named `what`).
fn elements(arr: pg_sys::Datum, expect: pg_sys::Oid, what: &str) -> Vec<(i64, pg_sys::Datum)> {
    let (elem, values) = crate::arrays::elements(arr);
    if elem != expect {
        fail(PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH, format!("expected an array of {what}"), &format!("Cast it: ARRAY[...]::{what}[]."));
    }
    values
}

fn check_radius(r: f64) {
    if r.is_nan() || r < 0.0 {
        fail(PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE, format!("radius {r} is not a distance"), "Pass a radius >= 0.");
    }
}

/// A circle of radius `r` around a point datum, as a query.
fn circle_around(d: pg_sys::Datum, r: f64) -> pg_sys::CIRCLE {
    // SAFETY: a point datum (checked element type).
    let center = unsafe { *d.cast_mut_ptr::<pg_sys::Point>() };
    pg_sys::CIRCLE { center, radius: r }
}

/// By-reference datums pointing at `values`, with `positions`.
fn datums<T>(positions: impl IntoIterator<Item = i64>, values: &[T]) -> Vec<(i64, pg_sys::Datum)> {
    positions.into_iter().zip(values).map(|(i, v)| (i, pg_sys::Datum::from(v as *const T))).collect()
}

/// A batch over gpu_spatial index `oid`, opened under the guard.
fn call(oid: pg_sys::Oid, ask: Ask, query_type: pg_sys::Oid, queries: Vec<(i64, pg_sys::Datum)>, what: &'static str) -> Call {
    let open = OpenIndex::open(oid, "gpu_spatial", Access::Read, pg_sys::AccessShareLock as i32);
    Call { open, ask, query_type, queries, what }
}

/// `gpu_spatial_range`'s batch: the points inside each box.
pub fn range(index: pg_sys::Oid, boxes: pg_sys::Datum) -> Call {
    let qs = elements(boxes, pg_sys::BOXOID, "box");
    call(index, Ask::Matches(STRATEGY_IN_BOX), pg_sys::BOXOID, qs, "gpu_spatial_range")
}

/// `gpu_spatial_within`'s batch of circles.
pub fn within(index: pg_sys::Oid, circles: pg_sys::Datum) -> Call {
    let qs = elements(circles, pg_sys::CIRCLEOID, "circle");
    call(index, Ask::Matches(STRATEGY_IN_CIRCLE), pg_sys::CIRCLEOID, qs, "gpu_spatial_within")
}

/// `gpu_spatial_within`'s batch of centres and one radius: a circle around
/// each, allocated in the current memory context (the caller's call).
pub fn within_distance(index: pg_sys::Oid, centers: pg_sys::Datum, radius: f64) -> Call {
    check_radius(radius);
    let points = elements(centers, pg_sys::POINTOID, "point");
    let qs = points
        .iter()
        .map(|&(i, d)| {
            // SAFETY: palloc'd room for one circle, written before use.
            let c = unsafe { pg_sys::palloc(std::mem::size_of::<pg_sys::CIRCLE>()).cast::<pg_sys::CIRCLE>() };
            // SAFETY: as above.
            unsafe { c.write(circle_around(d, radius)) };
            (i, pg_sys::Datum::from(c))
        })
        .collect();
    call(index, Ask::Matches(STRATEGY_IN_CIRCLE), pg_sys::CIRCLEOID, qs, "gpu_spatial_within")
}

/// Returns a call's (ord, ctid) rows.
fn return_rows(call: Call, fcinfo: pg_sys::FunctionCallInfo) {
    // SAFETY: the call's own fcinfo, declared (ord bigint, ctid tid).
    unsafe { call.return_rows(fcinfo) }
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_spatial_range(index regclass, boxes box[]) RETURNS TABLE (ord bigint, ctid tid)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_spatial_range(index: pg_sys::Oid, boxes: AnyArray, fcinfo: pg_sys::FunctionCallInfo) {
    return_rows(range(index, boxes.datum()), fcinfo)
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_spatial_within(index regclass, circles circle[]) RETURNS TABLE (ord bigint, ctid tid)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_spatial_within_circles(index: pg_sys::Oid, circles: AnyArray, fcinfo: pg_sys::FunctionCallInfo) {
    return_rows(within(index, circles.datum()), fcinfo)
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_spatial_within(index regclass, centers point[], radius float8) RETURNS TABLE (ord bigint, ctid tid)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_spatial_within_points(index: pg_sys::Oid, centers: AnyArray, radius: f64, fcinfo: pg_sys::FunctionCallInfo) {
    return_rows(within_distance(index, centers.datum(), radius), fcinfo)
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    requires = [functions::estimate::gpuindex_batch_rows],
    sql = "CREATE FUNCTION gpu_spatial_knn(index regclass, centers point[], k int) RETURNS TABLE (ord bigint, ctid tid, distance float8)
    VOLATILE PARALLEL SAFE STRICT SUPPORT gpuindex_batch_rows LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_spatial_knn(index: pg_sys::Oid, centers: AnyArray, k: i32, fcinfo: pg_sys::FunctionCallInfo) {
    let k = crate::error::positive_k(k);
    let qs = elements(centers.datum(), pg_sys::POINTOID, "point");
    let call = call(index, Ask::Nearest { strategy: STRATEGY_DISTANCE, k }, pg_sys::POINTOID, qs, "gpu_spatial_knn");
    // SAFETY: the call's own fcinfo, declared (ord, ctid, distance).
    unsafe { call.return_rows(fcinfo) }
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
    // The outer rows are named by their ctids: a table's or a materialized
    // view's own (the join reads the table itself, ONLY). A partitioned
    // table's rows are its partitions', each ctid a row of one of them.
    // SAFETY: a catalog lookup.
    match unsafe { pg_sys::get_rel_relkind(outer) } as u8 {
        pg_sys::RELKIND_RELATION | pg_sys::RELKIND_MATVIEW => {}
        pg_sys::RELKIND_PARTITIONED_TABLE => fail(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            "the outer table is partitioned",
            "Join each partition: outer_ctid names a row of the partition passed.",
        ),
        _ => fail(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            "the outer relation is not a table or materialized view",
            "Join other relations with SQL (JOIN t ON t.p <@ circle(o.c, d)), which the batched index join runs.",
        ),
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
    // Points join as circles of radius `within` around them.
    let (strategy, query_type) =
        if kind == pg_sys::BOXOID { (STRATEGY_IN_BOX, pg_sys::BOXOID) } else { (STRATEGY_IN_CIRCLE, pg_sys::CIRCLEOID) };
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
    // SAFETY: the call's own fcinfo; two tid columns.
    let mut out = unsafe { crate::srf::Rows::begin(fcinfo) };
    let inner = OpenIndex::open(index, "gpu_spatial", Access::Read, pg_sys::AccessShareLock as i32);
    Spi::connect(|client| {
        let mut cursor = client.open_cursor(&sql, &[]);
        loop {
            let rows = cursor.fetch(batch as _)?;
            if rows.is_empty() {
                break;
            }
            let mut outer_tids: Vec<pg_sys::ItemPointerData> = Vec::with_capacity(rows.len());
            let (mut boxes, mut circles) = (Vec::new(), Vec::new());
            for row in rows {
                outer_tids.push(row.get(1)?.expect("ctid"));
                match kind {
                    pg_sys::POINTOID => {
                        circles.push(pg_sys::CIRCLE { center: row.get(2)?.expect("not null"), radius: within.unwrap_or(0.0) })
                    }
                    pg_sys::BOXOID => boxes.push(row.get::<pg_sys::BOX>(2)?.expect("not null")),
                    _ => circles.push(row.get(2)?.expect("not null")),
                }
            }
            // Datums pointing at the values; positions index outer_tids.
            let qs = if kind == pg_sys::BOXOID { datums(0.., &boxes) } else { datums(0.., &circles) };
            let batch = Batch { ask: Ask::Matches(strategy), query_type, queries: &qs, what: "gpu_spatial_join", heap_order: false };
            let mut pieces = search::Pieces::new(&batch);
            while let Some(hits) = pieces.next(&inner, &batch) {
                // SAFETY: as `begin`'s.
                unsafe {
                    // (`r` lives until the row is stored; a copy of its TID
                    // would not.)
                    out.put(hits.rows, |r, v: &mut [pg_sys::Datum; 2]| {
                        v[0] = crate::srf::tid_datum(&outer_tids[r.0 as usize]);
                        v[1] = crate::srf::tid_datum(&r.1);
                    })
                };
            }
        }
        Ok::<_, pgrx::spi::Error>(())
    })
    .unwrap_or_else(|e| {
        fail(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("reading the outer table: {e}"), "Check the table and column names.")
    });
}

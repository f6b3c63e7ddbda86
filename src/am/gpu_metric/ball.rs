//! Balls: `v <@ l2_ball(q, r)` holds when the distance from v to q is at
//! most r (likewise `l1_ball`, `cosine_ball`, and `levenshtein_ball` for
//! text). A ball is a composite (center real[] or text, radius float8) of
//! its distance's own type, so that the
//! planner offers an index only the balls of its distance; the operator's
//! answer is the distance operator's, compared with `<=`.

use super::vector::{self, Form};
use gpuindex_engine::gts::Metric;
use pgrx::pg_sys;
use pgrx::prelude::*;

extension_sql!(
    r#"
CREATE TYPE l2_ball AS (center real[], radius float8);
CREATE TYPE l1_ball AS (center real[], radius float8);
CREATE TYPE cosine_ball AS (center real[], radius float8);
CREATE TYPE levenshtein_ball AS (center text, radius float8);
COMMENT ON TYPE l2_ball IS 'the vectors within radius of center by L2 distance (<->): v <@ l2_ball(q, r)';
COMMENT ON TYPE l1_ball IS 'the vectors within radius of center by L1 distance (<+>): v <@ l1_ball(q, r)';
COMMENT ON TYPE cosine_ball IS 'the vectors within radius of center by cosine distance (<=>): v <@ cosine_ball(q, r)';
COMMENT ON TYPE levenshtein_ball IS 'the strings within radius edits of center (<~>): s <@ levenshtein_ball(q, r)';
CREATE FUNCTION l2_ball(center real[], radius float8) RETURNS l2_ball
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE sql AS 'SELECT ROW(center, radius)::l2_ball';
CREATE FUNCTION l1_ball(center real[], radius float8) RETURNS l1_ball
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE sql AS 'SELECT ROW(center, radius)::l1_ball';
CREATE FUNCTION cosine_ball(center real[], radius float8) RETURNS cosine_ball
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE sql AS 'SELECT ROW(center, radius)::cosine_ball';
CREATE FUNCTION levenshtein_ball(center text, radius float8) RETURNS levenshtein_ball
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE sql AS 'SELECT ROW(center, radius)::levenshtein_ball';
"#,
    name = "metric_balls",
);

/// The ball operator's strategy number in every gpu_metric operator class.
pub const STRATEGY: u16 = 4;

/// A ball, read and checked.
#[derive(Clone, Debug)]
pub struct Ball {
    pub center: Vec<f32>,
    pub radius: f64,
}

fn bad(msg: &str, hint: &str) -> ! {
    crate::error::raise(PgSqlErrorCode::ERRCODE_DATA_EXCEPTION, msg.to_string(), hint)
}

impl Ball {
    /// Reads a non-NULL ball datum: a center without NULL, NaN or
    /// infinity (and not zero for cosine), or a text (not padded), and a
    /// radius that is a number >= 0.
    ///
    /// # Safety
    /// `d` is a non-NULL datum of one of the ball types.
    pub unsafe fn read(d: pg_sys::Datum, metric: Metric) -> Ball {
        // SAFETY: a composite datum (as the caller's), detoasted; fields
        // read through the row type's descriptor.
        unsafe {
            let tuple = pg_sys::pg_detoast_datum(d.cast_mut_ptr()) as pg_sys::HeapTupleHeader;
            let (mut center_null, mut radius_null) = (false, false);
            let center = pg_sys::GetAttributeByNum(tuple, 1, &mut center_null);
            let radius = pg_sys::GetAttributeByNum(tuple, 2, &mut radius_null);
            if center_null || radius_null {
                bad("a ball needs a center and a radius", "Make balls with l2_ball(center, radius) and its kin.");
            }
            let radius = f64::from_bits(radius.value() as u64);
            if radius.is_nan() || radius < 0.0 {
                crate::error::raise(
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("radius {radius} is not a distance"),
                    "Give a ball a radius >= 0.",
                );
            }
            Ball { center: vector::value(center, Form::native(metric), metric).into_owned(), radius }
        }
    }

    /// Whether `v` is inside (the distance operator's own distance).
    pub fn holds(&self, metric: Metric, v: &[f32]) -> bool {
        vector::distance(metric, v, &self.center) <= self.radius
    }
}

fn in_ball(metric: Metric, fcinfo: pg_sys::FunctionCallInfo) -> bool {
    // SAFETY: (value, ball) arguments of the metric's types, both non-NULL
    // (STRICT).
    unsafe {
        let v = vector::value(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0), Form::native(metric), metric);
        Ball::read(pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 1), metric).holds(metric, &v)
    }
}

/// `real[] <@ l2_ball`.
#[pg_extern(
    immutable,
    strict,
    parallel_safe,
    requires = ["metric_balls"],
    sql = "CREATE FUNCTION gpu_metric_in_l2_ball(real[], l2_ball) RETURNS bool
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_metric_in_l2_ball(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    in_ball(Metric::L2, fcinfo)
}

/// `real[] <@ l1_ball`.
#[pg_extern(
    immutable,
    strict,
    parallel_safe,
    requires = ["metric_balls"],
    sql = "CREATE FUNCTION gpu_metric_in_l1_ball(real[], l1_ball) RETURNS bool
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_metric_in_l1_ball(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    in_ball(Metric::L1, fcinfo)
}

/// `real[] <@ cosine_ball`.
#[pg_extern(
    immutable,
    strict,
    parallel_safe,
    requires = ["metric_balls"],
    sql = "CREATE FUNCTION gpu_metric_in_cosine_ball(real[], cosine_ball) RETURNS bool
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_metric_in_cosine_ball(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    in_ball(Metric::Cosine, fcinfo)
}

/// `text <@ levenshtein_ball`.
#[pg_extern(
    immutable,
    strict,
    parallel_safe,
    requires = ["metric_balls"],
    sql = "CREATE FUNCTION gpu_metric_in_levenshtein_ball(text, levenshtein_ball) RETURNS bool
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_metric_in_levenshtein_ball(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    in_ball(Metric::Levenshtein, fcinfo)
}

//! Key types: each supported type maps to an order-preserving u64 so that
//! the tree, the mirror and the GPU compare plain unsigned integers. Types
//! of one operator family share an encoding, which makes the cross-type
//! operators exact: int2/int4/int8 are all encoded as int8, float4/float8
//! as float8.
//!
//! Floats keep their exact bits (an index-only scan returns -0 as -0), so
//! equality is a range: -0 and +0 are adjacent codes that compare equal,
//! as PostgreSQL's float comparisons say. Every NaN is stored as the one
//! canonical NaN, above +Infinity, where PostgreSQL sorts NaN.

use gpuindex_engine::keys::{decode_f64, decode_i64, encode_f64, encode_i64};
use pgrx::pg_sys::{self, Datum, Oid};
use pgrx::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Integer,
    Float,
    Date,
    Timestamp,
    TimestampTz,
}

pub fn family_of(typ: Oid) -> Option<Family> {
    Some(match typ {
        pg_sys::INT2OID | pg_sys::INT4OID | pg_sys::INT8OID => Family::Integer,
        pg_sys::FLOAT4OID | pg_sys::FLOAT8OID => Family::Float,
        pg_sys::DATEOID => Family::Date,
        pg_sys::TIMESTAMPOID => Family::Timestamp,
        pg_sys::TIMESTAMPTZOID => Family::TimestampTz,
        _ => return None,
    })
}

pub fn unsupported(typ: Oid) -> ! {
    crate::error::raise(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!("gpu_btree does not support type {}", crate::error::type_name(typ)),
        "gpu_btree indexes int2, int4, int8, float4, float8, date, timestamp and timestamptz columns.",
    )
}

/// The code of a non-NULL value of type `typ`.
pub fn encode(value: Datum, typ: Oid) -> u64 {
    let v = value.value();
    match typ {
        pg_sys::INT2OID => encode_i64(v as i16 as i64),
        pg_sys::INT4OID | pg_sys::DATEOID => encode_i64(v as i32 as i64),
        pg_sys::INT8OID | pg_sys::TIMESTAMPOID | pg_sys::TIMESTAMPTZOID => encode_i64(v as i64),
        pg_sys::FLOAT4OID => encode_f64(f32::from_bits(v as u32) as f64),
        pg_sys::FLOAT8OID => encode_f64(f64::from_bits(v as u64)),
        _ => unsupported(typ),
    }
}

/// The codes that compare equal to a value: [lo, hi] (only float zero
/// spans two codes).
pub fn equal_range(value: Datum, typ: Oid) -> (u64, u64) {
    let k = encode(value, typ);
    if matches!(typ, pg_sys::FLOAT4OID | pg_sys::FLOAT8OID) && decode_f64(k) == 0.0 {
        (encode_f64(-0.0), encode_f64(0.0))
    } else {
        (k, k)
    }
}

/// The value of a code, as a Datum of the column's type (for index-only
/// scans).
pub fn decode(k: u64, typ: Oid) -> Datum {
    match typ {
        pg_sys::INT2OID => Datum::from(decode_i64(k) as i16),
        pg_sys::INT4OID | pg_sys::DATEOID => Datum::from(decode_i64(k) as i32),
        pg_sys::INT8OID | pg_sys::TIMESTAMPOID | pg_sys::TIMESTAMPTZOID => Datum::from(decode_i64(k)),
        pg_sys::FLOAT4OID => Datum::from((decode_f64(k) as f32).to_bits()),
        pg_sys::FLOAT8OID => Datum::from(decode_f64(k).to_bits()),
        _ => unsupported(typ),
    }
}

/// Inclusive bounds on codes, from the conjunction of comparison keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub lo: u64,
    pub hi: u64,
    /// Some key can never be true (e.g. `< minimum`): nothing matches.
    pub empty: bool,
}

impl Bounds {
    pub const ALL: Bounds = Bounds { lo: 0, hi: u64::MAX, empty: false };

    pub fn contains(&self, k: u64) -> bool {
        !self.empty && self.lo <= k && k <= self.hi
    }

    /// Narrows by `column <strategy> value` (btree strategies 1..=5).
    pub fn narrow(&mut self, strategy: u16, value: Datum, typ: Oid) {
        let (elo, ehi) = equal_range(value, typ);
        match strategy {
            1 => match elo.checked_sub(1) {
                Some(h) => self.hi = self.hi.min(h),
                None => self.empty = true,
            },
            2 => self.hi = self.hi.min(ehi),
            3 => {
                self.lo = self.lo.max(elo);
                self.hi = self.hi.min(ehi);
            }
            4 => self.lo = self.lo.max(elo),
            5 => match ehi.checked_add(1) {
                Some(l) => self.lo = self.lo.max(l),
                None => self.empty = true,
            },
            other => crate::error::raise(
                PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("gpu_btree: unexpected strategy {other}"),
                "The operator class is damaged; recreate the extension.",
            ),
        }
        if self.lo > self.hi {
            self.empty = true;
        }
    }
}

pub use crate::arrays::elements as array_elements;

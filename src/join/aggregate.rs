//! The aggregates a GpuIndexJoin computes over the rows it would emit
//! (`count`'s paths): `count(*)` and `sum` of a column of type int2, int4
//! or int8, whole (the query's one row) or partial (under a Gather, each
//! participant's transition value, as a Partial Aggregate emits it; the
//! Finalize Aggregate above combines them). Sums are kept in an int128, as
//! PostgreSQL keeps int8's, so they are exact whatever the order.

use crate::list::is_a;
use pgrx::pg_sys::{self, NodeTag};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Int {
    I2,
    I4,
    I8,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Count,
    /// The sum of scan-tuple column `col`.
    Sum {
        col: usize,
        arg: Int,
    },
}

/// One aggregate of the plan's target: its scan-tuple column and what it
/// computes there.
#[derive(Clone, Copy, Debug)]
pub struct Agg {
    pub col: usize,
    kind: Kind,
    partial: bool,
}

/// `sum`'s argument type, by its function.
fn sum_of(fnoid: pg_sys::Oid) -> Option<Int> {
    match fnoid.to_u32() {
        pg_sys::F_SUM_INT2 => Some(Int::I2),
        pg_sys::F_SUM_INT4 => Some(Int::I4),
        pg_sys::F_SUM_INT8 => Some(Int::I8),
        _ => None,
    }
}

/// What the node may compute of `node`: Some(false) for a plain
/// `count(*)`, Some(true) for a plain `sum` of an integer column (a Var of
/// this query level), both of this level, without FILTER, DISTINCT or
/// ORDER BY, split as `split` (whole, or a partial aggregate's first
/// stage); None for anything else.
///
/// # Safety
/// A planner node.
pub unsafe fn pushable(node: *mut pg_sys::Node, split: pg_sys::AggSplit::Type) -> Option<bool> {
    // SAFETY: the caller's contract.
    unsafe {
        if !is_a(node, NodeTag::T_Aggref) {
            return None;
        }
        let a = node.cast::<pg_sys::Aggref>();
        let plain = (*a).aggfilter.is_null()
            && (*a).aggdistinct.is_null()
            && (*a).aggorder.is_null()
            && (*a).agglevelsup == 0
            && (*a).aggkind as u8 == b'n'
            && (*a).aggsplit == split;
        if !plain {
            return None;
        }
        if (*a).aggfnoid == pg_sys::Oid::from(pg_sys::F_COUNT_) && (*a).aggstar {
            return Some(false);
        }
        sum_of((*a).aggfnoid)?;
        let args = crate::list::ptrs::<pg_sys::TargetEntry>((*a).args);
        let var = args.first().map(|&te| (*te).expr)?;
        (args.len() == 1 && is_a(var, NodeTag::T_Var) && (*var.cast::<pg_sys::Var>()).varlevelsup == 0).then_some(true)
    }
}

/// The plan's aggregates: the entries of its scan tuple (`custom_scan_tlist`)
/// from `first` on, each a `pushable` Aggref; a sum's argument is a column
/// before them.
///
/// # Safety
/// The scan tuple of a plan made by `plan_custom_path`.
pub unsafe fn of_plan(scan_tlist: *mut pg_sys::List, first: usize) -> Vec<Agg> {
    // SAFETY: the caller's contract.
    unsafe {
        let entries = crate::list::ptrs::<pg_sys::TargetEntry>(scan_tlist);
        let column_of = |e: *mut pg_sys::Expr| {
            entries[..first]
                .iter()
                .position(|&te| pg_sys::equal((*te).expr.cast(), e.cast()))
                .unwrap_or_else(|| pgrx::error!("gpuindex: GpuIndexJoin: an aggregate's argument is not in the scan tuple"))
        };
        entries[first..]
            .iter()
            .enumerate()
            .map(|(i, &te)| {
                let a = (*te).expr.cast::<pg_sys::Aggref>();
                let kind = match sum_of((*a).aggfnoid) {
                    Some(arg) => Kind::Sum { col: column_of((*crate::list::ptrs::<pg_sys::TargetEntry>((*a).args)[0]).expr), arg },
                    None => Kind::Count,
                };
                Agg { col: first + i, kind, partial: (*a).aggsplit != pg_sys::AggSplit::AGGSPLIT_SIMPLE }
            })
            .collect()
    }
}

/// Whether any of `aggs` reads a column of the joined rows.
pub fn reads_rows(aggs: &[Agg]) -> bool {
    aggs.iter().any(|a| matches!(a.kind, Kind::Sum { .. }))
}

/// EXPLAIN's account of the plan's aggregates.
pub fn describe(aggs: &[Agg]) -> &'static str {
    match (reads_rows(aggs), aggs.first().is_some_and(|a| a.partial)) {
        (false, _) => "count(*) of the joined rows, counted here",
        (true, false) => "sums of the joined rows, computed here",
        (true, true) => "partial sums of each participant's joined rows, computed here",
    }
}

/// An attribute's alignment in bytes (its `attalign`).
pub fn align_of(attalign: std::ffi::c_char) -> usize {
    match attalign as u8 {
        pg_sys::TYPALIGN_CHAR => 1,
        pg_sys::TYPALIGN_SHORT => 2,
        pg_sys::TYPALIGN_INT => 4,
        _ => 8,
    }
}

/// Where attribute `att` (from 1) of a row of descriptor `desc` lies in the
/// row's data, and its length, where it and every column before it have
/// fixed widths (a row with no NULLs holds it there); None otherwise.
///
/// # Safety
/// A tuple descriptor with at least `att` attributes.
pub unsafe fn fixed_offset(desc: pg_sys::TupleDesc, att: usize) -> Option<(usize, i16)> {
    let mut off = 0usize;
    for i in 0..att {
        // SAFETY: the caller's descriptor.
        let attr = unsafe { &*(*desc).attrs.as_ptr().add(i) };
        if attr.attlen <= 0 {
            return None;
        }
        // att_align_nominal: the data starts MAXALIGNed.
        off = off.next_multiple_of(align_of(attr.attalign));
        if i + 1 == att {
            return Some((off, attr.attlen));
        }
        off += attr.attlen as usize;
    }
    None
}

/// The datum of a column passed by value, `len` bytes at `p`, as
/// fetch_att reads it (sign-extended).
///
/// # Safety
/// `len` readable bytes at `p`.
pub unsafe fn by_value(p: *const u8, len: i16) -> pg_sys::Datum {
    // SAFETY: the caller's contract.
    let v = unsafe {
        match len {
            1 => p.cast::<i8>().read() as i64,
            2 => p.cast::<i16>().read_unaligned() as i64,
            4 => p.cast::<i32>().read_unaligned() as i64,
            _ => p.cast::<i64>().read_unaligned(),
        }
    };
    pg_sys::Datum::from(v as usize)
}

/// Where each sum's argument lies in a row of the inner table, where the
/// columns up to it have fixed widths: a row without NULLs holding them
/// all is read there, without taking it apart (`Totals::add_row`).
#[derive(Clone)]
pub struct RowOffsets {
    /// Per aggregate: (offset in the row's data, length) of a sum's
    /// argument.
    at: Vec<Option<(usize, i16)>>,
    /// The last attribute read.
    last_att: u32,
}

impl RowOffsets {
    /// The offsets for `aggs`, whose sums' arguments are the inner table's
    /// attributes `att_of(col)` (of descriptor `desc`); None where one is
    /// not, or follows a column of variable width.
    ///
    /// # Safety
    /// The inner table's tuple descriptor.
    pub unsafe fn of(aggs: &[Agg], desc: pg_sys::TupleDesc, att_of: impl Fn(usize) -> Option<usize>) -> Option<RowOffsets> {
        let (mut at, mut last_att) = (Vec::with_capacity(aggs.len()), 0);
        for a in aggs {
            let Kind::Sum { col, .. } = a.kind else {
                at.push(None);
                continue;
            };
            let att = att_of(col)?;
            // SAFETY: the caller's descriptor.
            at.push(Some(unsafe { fixed_offset(desc, att) }?));
            last_att = last_att.max(att as u32);
        }
        Some(RowOffsets { at, last_att })
    }
}

/// The running values: the rows, and each aggregate's sum and how many
/// values it took (NULLs are skipped).
#[derive(Default)]
pub struct Totals {
    pub rows: i64,
    sums: Vec<(i128, i64)>,
}

impl Totals {
    /// Adds the joined row in the scan tuple `values`/`nulls`.
    ///
    /// # Safety
    /// The node's filled scan tuple, a column for each of `aggs`' arguments.
    pub unsafe fn add(&mut self, aggs: &[Agg], values: *const pg_sys::Datum, nulls: *const bool) {
        self.rows += 1;
        self.sums.resize(aggs.len(), (0, 0));
        for (a, s) in aggs.iter().zip(&mut self.sums) {
            let Kind::Sum { col, arg } = a.kind else { continue };
            // SAFETY: the caller's scan tuple.
            let (v, null) = unsafe { (*values.add(col), *nulls.add(col)) };
            if null {
                continue;
            }
            let x = v.value();
            s.0 += match arg {
                Int::I2 => x as i16 as i128,
                Int::I4 => x as i32 as i128,
                Int::I8 => x as i64 as i128,
            };
            s.1 += 1;
        }
    }

    /// Adds what `other` holds (a share of the same rows' totals).
    pub fn merge(&mut self, other: Totals) {
        self.rows += other.rows;
        if self.sums.len() < other.sums.len() {
            self.sums.resize(other.sums.len(), (0, 0));
        }
        for (s, o) in self.sums.iter_mut().zip(other.sums) {
            s.0 += o.0;
            s.1 += o.1;
        }
    }

    /// Adds the heap row `row` (a visible row of the inner table) at
    /// `offsets`; false, adding nothing, where the row has NULLs or fewer
    /// attributes than are read (one stored before an ALTER TABLE ADD
    /// COLUMN): the caller takes it apart instead.
    ///
    /// # Safety
    /// A row of the table `offsets` were made for, on a pinned page.
    pub unsafe fn add_row(&mut self, offsets: &RowOffsets, row: *const pg_sys::HeapTupleHeaderData) -> bool {
        // SAFETY: the caller's row: its header, and data of the lengths
        // its descriptor gives at those offsets (no NULL before them).
        unsafe {
            let natts = u32::from((*row).t_infomask2) & pg_sys::HEAP_NATTS_MASK;
            if u32::from((*row).t_infomask) & pg_sys::HEAP_HASNULL != 0 || natts < offsets.last_att {
                return false;
            }
            let data = row.cast::<u8>().add((*row).t_hoff as usize);
            self.rows += 1;
            self.sums.resize(offsets.at.len(), (0, 0));
            for (&at, s) in offsets.at.iter().zip(&mut self.sums) {
                let Some((off, len)) = at else { continue };
                s.0 += by_value(data.add(off), len).value() as i64 as i128;
                s.1 += 1;
            }
            true
        }
    }

    /// `agg`'s value (datum, is null): the final one, or the partial
    /// aggregate's transition value, serialized as PostgreSQL's.
    ///
    /// # Safety
    /// In a memory context that lasts while the row is read.
    pub unsafe fn value(&self, i: usize, agg: &Agg) -> (pg_sys::Datum, bool) {
        let Kind::Sum { arg, .. } = agg.kind else { return (pg_sys::Datum::from(self.rows), false) };
        let (sum, n) = self.sums.get(i).copied().unwrap_or((0, 0));
        // No value: NULL (a partial aggregate's NULL transition value
        // combines to what the others' make).
        if n == 0 {
            return (pg_sys::Datum::from(0usize), true);
        }
        // SAFETY: the caller's contract.
        let d = unsafe {
            match (arg, agg.partial) {
                // int2 and int4 sum into an int8 (its transition value too).
                (Int::I2 | Int::I4, _) => match i64::try_from(sum) {
                    Ok(s) => pg_sys::Datum::from(s),
                    Err(_) => crate::error::raise(
                        pgrx::PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
                        "bigint out of range",
                        "The sum of these int2 or int4 values exceeds int8, as PostgreSQL's would; sum the column cast to int8.",
                    ),
                },
                (Int::I8, false) => numeric_of(sum),
                (Int::I8, true) => serialized_int8_sum(sum, n),
            }
        };
        (d, false)
    }
}

/// `sum` as a numeric.
unsafe fn numeric_of(sum: i128) -> pg_sys::Datum {
    // SAFETY: numeric.c's conversions, in the current memory context.
    unsafe {
        match i64::try_from(sum) {
            Ok(s) => pg_sys::Datum::from(pg_sys::int64_to_numeric(s)),
            Err(_) => {
                let text = std::ffi::CString::new(sum.to_string()).expect("digits");
                pgrx::direct_function_call_as_datum(
                    pg_sys::numeric_in,
                    &[
                        Some(pg_sys::Datum::from(text.as_ptr())),
                        Some(pg_sys::Datum::from(pg_sys::InvalidOid)),
                        Some(pg_sys::Datum::from(-1i32)),
                    ],
                )
                .expect("a numeric")
            }
        }
    }
}

/// numeric.c's `Int128AggState` (PolyNumAggState where the server has
/// int128, as every 64-bit build does): int128 is 8-byte aligned there.
#[repr(C)]
struct Int128AggState {
    calc_sum_x2: bool,
    n: i64,
    sum_x: [u64; 2],
    sum_x2: [u64; 2],
}

/// `sum(int8)`'s partial value: its transition state of `n` values adding
/// to `sum`, serialized by numeric.c's own `int8_avg_serialize` (which
/// only checks that it is called for an aggregate).
unsafe fn serialized_int8_sum(sum: i128, n: i64) -> pg_sys::Datum {
    #[repr(C)]
    struct Call {
        base: pg_sys::FunctionCallInfoBaseData,
        arg: pg_sys::NullableDatum,
    }
    // SAFETY: a call as fmgr makes it, with an AggState as its context
    // (AggCheckCallContext reads only its tag); the state outlives it.
    unsafe {
        let bits = sum as u128;
        let mut state = Int128AggState { calc_sum_x2: false, n, sum_x: [bits as u64, (bits >> 64) as u64], sum_x2: [0, 0] };
        let agg = pg_sys::palloc0(std::mem::size_of::<pg_sys::AggState>()).cast::<pg_sys::AggState>();
        (*agg).ss.ps.type_ = NodeTag::T_AggState;
        let mut call: Call = std::mem::zeroed();
        call.base.context = agg.cast();
        call.base.nargs = 1;
        call.base.fncollation = pg_sys::InvalidOid;
        call.arg = pg_sys::NullableDatum { value: pg_sys::Datum::from(&raw mut state), isnull: false };
        let d = pg_sys::ffi::pg_guard_ffi_boundary(|| pg_sys::int8_avg_serialize(&raw mut call.base));
        pg_sys::pfree(agg.cast());
        d
    }
}

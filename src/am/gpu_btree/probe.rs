//! `gpu_btree_probe(index regclass, keys anyarray)`: many keys through a
//! gpu_btree index in one batch (the mirror's inner search on the GPU or
//! the CPU, then the leaf pages), returning for each input position the
//! TIDs of the rows with that key that are visible to the caller's
//! snapshot (the visible member of each HOT chain), in heap order. Join
//! back with `JOIN t ON t.ctid = p.ctid` (GpuIndexJoin's TID probe: the rows
//! fetched in TID order, a heap page locked once for its TIDs).

use super::keys;
use super::leaf_step::Tally;
use super::page::Tid;
use super::tree::Tree;
use crate::am::common::search::{self, Ask, Batch, BatchSearch, Counted, Hits};
use crate::am::common::OpenIndex;
use pgrx::pg_sys;
use pgrx::prelude::*;
use rayon::prelude::*;

impl BatchSearch for super::GpuBtree {
    const NAME: &'static str = "gpu_btree";

    /// Equality only: the batch finds each key's run of entries through
    /// the mirror. Range strategies are index scans.
    fn search(open: &OpenIndex, batch: &Batch) -> Result<Hits, search::TooMany> {
        probe_batch(Self::NAME, open, batch, None, find(open, batch)).map(|(rest, _)| rest)
    }

    /// The leaf step counts a key's entries on all-visible pages where it
    /// walks them in place (`leaf_step::Tally`): a Zipf key's millions.
    fn count(open: &OpenIndex, batch: &Batch, visible: &mut dyn FnMut(u32) -> bool) -> Result<Counted, search::TooMany> {
        probe_batch(Self::NAME, open, batch, Some(visible), find(open, batch)).map(|(rest, counted)| Counted { counted, rest })
    }

    fn joins(strategy: u16) -> bool {
        strategy == pg_sys::BTEqualStrategyNumber as u16
    }

    fn nearest(_strategy: u16) -> bool {
        false
    }
}

/// gpu_btree's search of ascending distinct codes (`probe_batch`'s
/// `find`): the mirror's hints, then the leaf step.
fn find<'a>(
    open: &'a OpenIndex,
    batch: &'a Batch,
) -> impl FnOnce(&[u64], usize, Option<&mut Tally>) -> Result<Vec<(u64, Tid)>, usize> + 'a {
    |codes, cap, tally| super::mirror::probe(&Tree::new(open.index), codes, batch.what, cap, tally)
}

/// An equality batch of index `open` of access method `am` (gpu_btree,
/// gpu_learned): its rows, and how many matches a tally counted instead
/// where there is a `visible` to ask (`BatchSearch::count`).
/// `find(codes, cap, tally)` finds the entries of the ascending distinct
/// codes, as `probe_visible`'s `entries`, counting what it can in the
/// tally.
pub(crate) fn probe_batch(
    am: &str,
    open: &OpenIndex,
    batch: &Batch,
    visible: Option<&mut dyn FnMut(u32) -> bool>,
    find: impl FnOnce(&[u64], usize, Option<&mut Tally>) -> Result<Vec<(u64, Tid)>, usize>,
) -> Result<(Hits, u64), search::TooMany> {
    if batch.ask != Ask::Matches(pg_sys::BTEqualStrategyNumber as u16) {
        search::unsupported(am, batch.ask.to_string(), "Batch equality probes (=); ranges are index scans.");
    }
    check_key_type(open.index, batch.query_type);
    let mut counted = 0;
    let rows = probe_visible(open, wanted_codes(batch), |codes, asked, cap| {
        let mut tally = visible.map(|visible| Tally { visible, asked, counted: 0 });
        let entries = find(codes, cap, tally.as_mut());
        counted = tally.map_or(0, |t| t.counted);
        entries
    })?;
    Ok((Hits { rows, distances: None }, counted))
}

/// Sorts equality `queries` of `query_type` (checked against `index`'s
/// keys) by their codes, ties by position (`Call::in_key_order`).
pub(crate) fn in_key_order(index: pg_sys::Relation, query_type: pg_sys::Oid, queries: &mut [(i64, pg_sys::Datum)]) {
    check_key_type(index, query_type);
    let mut coded: Vec<(u64, i64, usize)> = queries.iter().map(|&(i, v)| (keys::equal_range(v, query_type).0, i, v.value())).collect();
    crate::batch::ensure_cpu_pool();
    coded.par_sort_unstable();
    for (q, (_, i, v)) in queries.iter_mut().zip(coded) {
        *q = (i, pg_sys::Datum::from(v));
    }
}

/// Checks that keys of `query_type` compare with the index's keys.
pub(crate) fn check_key_type(index: pg_sys::Relation, query_type: pg_sys::Oid) {
    let key_type = super::build::key_type(index);
    if keys::family_of(query_type) != keys::family_of(key_type) {
        let name = crate::error::type_name;
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
            format!("keys of type {}[] cannot probe an index on {}", name(query_type), name(key_type)),
            "Cast the array to the indexed column's type, e.g. $1::bigint[].",
        );
    }
}

/// The (code, input position) pairs of an equality batch, for its
/// `= ANY` array of values of `query_type`.
pub(crate) fn wanted_codes(batch: &Batch) -> Vec<(u64, i64)> {
    let mut wanted = Vec::with_capacity(batch.queries.len());
    for &(i, v) in batch.queries {
        let (lo, hi) = keys::equal_range(v, batch.query_type);
        wanted.push((lo, i));
        if hi != lo {
            wanted.push((hi, i));
        }
    }
    wanted
}

/// For (code, input position) pairs: the visible TIDs, (position, tid),
/// in heap order (the visibility checks read each heap page once, and a
/// join back by ctid reads the heap sequentially). `entries(codes, cap)`
/// finds the (code, TID) of the ascending distinct codes (each asked
/// `asked[i]` times), in code order, or stops past `cap` of them and says
/// how many it found. The matches are counted before they are gathered: a
/// code asked n times matches each of its entries n times.
pub(crate) fn probe_visible(
    open: &OpenIndex,
    mut wanted: Vec<(u64, i64)>,
    entries: impl FnOnce(&[u64], &[u32], usize) -> Result<Vec<(u64, Tid)>, usize>,
) -> Result<Vec<(i64, pg_sys::ItemPointerData)>, search::TooMany> {
    wanted.par_sort_unstable();
    let (mut codes, mut asked) = (Vec::with_capacity(wanted.len()), Vec::with_capacity(wanted.len()));
    for &(code, _) in &wanted {
        match (codes.last(), asked.last_mut()) {
            (Some(&c), Some(n)) if c == code => *n += 1,
            _ => {
                codes.push(code);
                asked.push(1u32);
            }
        }
    }
    let entries = if codes.is_empty() {
        Vec::new()
    } else {
        entries(&codes, &asked, search::entry_limit()).map_err(|n| search::TooMany(n as u64))?
    };
    let once = codes.len() == wanted.len();
    search::within_limit(if once { entries.len() as u64 } else { runs(&entries, &wanted).map(|(_, r)| r.len() as u64).sum() })?;
    if once && open.passes_as_found() {
        // Straight into the rows `visible` would pass as they are.
        return Ok(crate::batch::par_map(with_positions(entries, &wanted), |(tid, p)| (p as i64, crate::storage::tid_to(tid))));
    }
    // (tid, position) for every match, in heap order. (A TID comes from
    // one entry, once for each position that asked for its code, those
    // ascending: `sort_by_tid` need not compare positions.)
    let matches: Vec<(Tid, i64)> = if once {
        with_positions(entries, &wanted).into_iter().map(|(tid, p)| (tid, p as i64)).collect()
    } else {
        let mut matches = Vec::with_capacity(entries.len());
        for (tid, run) in runs(&entries, &wanted) {
            matches.extend(wanted[run].iter().map(|w| (tid, w.1)));
        }
        matches
    };
    Ok(open.visible_sorted(crate::visibility::HeapOrdered::sort_by_tid(matches)))
}

/// Entries (code, TID) in code order, each code asked once in `wanted`
/// (sorted), made (TID, position) in their own memory (no second buffer
/// of millions), on all cores: serially, with a count of the matches
/// that `entries.len()` now gives, a Zipf batch's 2.5M took 17 ms on the
/// H200 host (~1 ms so).
fn with_positions(mut entries: Vec<(u64, Tid)>, wanted: &[(u64, i64)]) -> Vec<(Tid, u64)> {
    crate::batch::ensure_cpu_pool();
    entries.par_chunks_mut(1 << 14).for_each(|chunk| {
        let mut at = wanted.partition_point(|w| w.0 < chunk[0].0);
        for e in chunk {
            while wanted[at].0 < e.0 {
                at += 1;
            }
            *e = (e.1, wanted[at].1 as u64);
        }
    });
    entries
}

/// Each entry (in code order) with the run of `wanted` (sorted) that asks
/// for its code.
fn runs<'a>(entries: &'a [(u64, Tid)], wanted: &'a [(u64, i64)]) -> impl Iterator<Item = (Tid, std::ops::Range<usize>)> + 'a {
    let (mut start, mut end, mut last) = (0, 0, None);
    entries.iter().map(move |&(code, tid)| {
        if last != Some(code) {
            last = Some(code);
            start = end;
            while start < wanted.len() && wanted[start].0 < code {
                start += 1;
            }
            end = start;
            while end < wanted.len() && wanted[end].0 == code {
                end += 1;
            }
        }
        (tid, start..end)
    })
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    requires = [functions::estimate::gpuindex_batch_rows],
    sql = "CREATE FUNCTION gpu_btree_probe(index regclass, keys anyarray) RETURNS TABLE (ord bigint, ctid tid)
    VOLATILE PARALLEL SAFE STRICT SUPPORT gpuindex_batch_rows LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_btree_probe(index: pg_sys::Oid, keys: pgrx::datum::AnyArray, fcinfo: pg_sys::FunctionCallInfo) {
    probe_function(index, keys, "gpu_btree", "gpu_btree_probe", fcinfo)
}

/// The body of an equality probe function (`gpu_btree_probe`,
/// `gpu_learned_probe`): every key through index `index` of access method
/// `am` in one batch, returned as (ord, ctid) rows.
pub(crate) fn probe_function(
    index: pg_sys::Oid,
    keys: pgrx::datum::AnyArray,
    am: &'static str,
    what: &'static str,
    fcinfo: pg_sys::FunctionCallInfo,
) {
    // SAFETY: the caller's own fcinfo, declared (ord bigint, ctid tid).
    unsafe { crate::functions::call::Call::probe(index, keys.datum(), am, what).return_rows(fcinfo) }
}

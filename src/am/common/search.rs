//! The batch search every access method answers, for callers that do not
//! know which access method an index has (the batch SQL functions, joins,
//! later the GPU service): a batch of query datums in, (query position,
//! visible TID[, distance]) out, with the CPU or the GPU behind it as the
//! GUCs and the batch's size decide.
//!
//! A query is `key OP query` for the operator of an operator-class strategy
//! (`Ask::Matches`), or the k nearest keys by an ordering operator
//! (`Ask::Nearest`). Rows are those visible to the caller's snapshot and
//! allowed by row-level security (`OpenIndex::visible`).
//!
//! Memory is bounded whatever the data: an access method counts a batch's
//! matches before it gathers them and answers `TooMany` past `limit()`
//! (`gpuindex.batch_work_mem`); callers take the batch in `Pieces` of
//! fewer queries, and one query that alone passes it is an ERROR.

use super::OpenIndex;
use pgrx::pg_sys;
use pgrx::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// The rows whose key satisfies the strategy's operator with the query.
    Matches(u16),
    /// The `k` rows nearest the query by the ordering strategy's operator,
    /// nearest first.
    Nearest { strategy: u16, k: usize },
}

impl std::fmt::Display for Ask {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Ask::Matches(s) => write!(f, "search strategy {s}"),
            Ask::Nearest { strategy, .. } => write!(f, "nearest by ordering strategy {strategy}"),
        }
    }
}

/// A batch's answer: `rows` are (query position, TID); `distances` (for
/// `Ask::Nearest`) are the rows' distances. Rows of one position are in
/// the access method's order: heap order for matches, nearest first for
/// neighbours; under `Batch::heap_order` matches are in heap order
/// whatever their positions.
#[derive(Default)]
pub struct Hits {
    pub rows: Vec<(i64, pg_sys::ItemPointerData)>,
    pub distances: Option<Vec<f64>>,
}

/// A counting batch's answer (`BatchSearch::count`): how many matches lie
/// on heap pages that `visible` said were all-visible, counted and not
/// returned, and the other matches as rows.
pub struct Counted {
    pub counted: u64,
    pub rest: Hits,
}

/// A batch: what is asked, the queries' type, and the queries with their
/// positions (NULL queries left out: they match nothing).
pub struct Batch<'a> {
    pub ask: Ask,
    pub query_type: pg_sys::Oid,
    pub queries: &'a [(i64, pg_sys::Datum)],
    /// Recorded as the batch's name in `gpuindex_last_batch()`.
    pub what: &'static str,
    /// The caller takes the rows in heap (TID) order: an access method
    /// that finds them so need not group them by position.
    pub heap_order: bool,
}

/// A batch whose matches would pass `limit()`: at least how many it has,
/// counted before they were gathered (a search that gathers entries
/// first stops once they pass the limit: each is at least one match).
#[derive(Debug, Clone, Copy)]
pub struct TooMany(pub u64);

/// About what a match costs while a batch is answered: its (TID, position)
/// as found, as checked for visibility and as sorted, 16 bytes each.
const MATCH_BYTES: u64 = 48;

/// The most matches one batch answers at once (`gpuindex.batch_work_mem`).
pub fn limit() -> u64 {
    crate::guc::BATCH_WORK_MEM.get().max(1) as u64 * 1024 / MATCH_BYTES
}

/// The most index entries a batch gathers before it counts their matches:
/// every entry is at least one match, so past this it has too many.
pub fn entry_limit() -> usize {
    limit() as usize
}

/// `Err(TooMany)` where `found` matches pass `limit()`.
pub fn within_limit(found: u64) -> Result<(), TooMany> {
    if found > limit() {
        Err(TooMany(found))
    } else {
        Ok(())
    }
}

/// What an access method implements to be searched in batches.
pub trait BatchSearch {
    const NAME: &'static str;
    /// Answers `batch` over the open index; raises an ERROR with a hint
    /// for a strategy or query type it does not answer (also when the
    /// batch is empty). Where its matches would pass `limit()` it returns
    /// `TooMany` before gathering them, so that memory stays bounded
    /// whatever the data (a key held by millions of rows, asked
    /// thousands of times).
    fn search(open: &OpenIndex, batch: &Batch) -> Result<Hits, TooMany>;
    /// Whether `Ask::Matches(strategy)` batches are answered for every
    /// query type the operator family pairs with that strategy: the
    /// batched join probes the index with such clauses.
    fn joins(strategy: u16) -> bool;
    /// Whether `Ask::Nearest` batches are answered for ordering
    /// `strategy`: the batched join runs LATERAL top-k subqueries with
    /// them.
    fn nearest(strategy: u16) -> bool;
    /// Where a nearest batch's distances are not the ordering operator's
    /// own values (they may order near ties otherwise): a lower bound of
    /// the operator's value for a row at batch distance `d` from `query`,
    /// monotone in `d`. None: they are its own.
    fn order_bound(_index: pg_sys::Relation, _query: pg_sys::Datum, _d: f64) -> Option<f64> {
        None
    }
    /// Whether a nearest batch's finite distances are, bit for bit, what
    /// the ordering operator returns for the row and query (either way
    /// round): the batched join then takes them for the ORDER BY
    /// expression where the select list repeats it, instead of evaluating
    /// it again for each row.
    fn distance_is_value() -> bool {
        false
    }
    /// What a process would spend, in the planner's units, reading the
    /// index into the copy its batches search, where it holds none and no
    /// GPU service answers for it (the planner's price of a first batch).
    /// `here`: this backend (which may hold one); else a parallel worker,
    /// which starts without.
    fn load_cost(_index: pg_sys::Relation, _here: bool) -> f64 {
        0.0
    }
    /// Whether a batch like `batch` (its ask, and about as many queries)
    /// is answered elsewhere (the GPU service) while the caller works, if
    /// posted ahead (`post_ahead`): a caller that reads its batches in
    /// chunks posts the next chunk's before it takes the rows of the one
    /// before.
    fn ahead(_open: &OpenIndex, _batch: &Batch) -> bool {
        false
    }
    /// Posts `batch`'s search ahead (see `ahead`): the next `search` of
    /// the same batch takes its answer. A batch posted ahead and never
    /// searched costs only the work done for it.
    fn post_ahead(_open: &OpenIndex, _batch: &Batch) {}
    /// Answers `batch` as `search` does, but counts the matches on heap
    /// pages for which `visible(block)` says all-visible instead of
    /// returning them (a caller that only counts rows, and trusts the
    /// visibility map, gets millions of a key's matches without a row
    /// each). `visible` is asked during the search, while entries are
    /// still being found: the caller confirms each page it said yes to
    /// once the search is over, before it trusts the count.
    fn count(open: &OpenIndex, batch: &Batch, _visible: &mut dyn FnMut(u32) -> bool) -> Result<Counted, TooMany> {
        Self::search(open, batch).map(|rest| Counted { counted: 0, rest })
    }
}

/// An access method that answers batches, as the registry lists it.
pub struct Searcher {
    pub name: &'static str,
    pub search: fn(&OpenIndex, &Batch) -> Result<Hits, TooMany>,
    pub joins: fn(u16) -> bool,
    pub nearest: fn(u16) -> bool,
    pub order_bound: fn(pg_sys::Relation, pg_sys::Datum, f64) -> Option<f64>,
    pub distance_is_value: fn() -> bool,
    pub load_cost: fn(pg_sys::Relation, bool) -> f64,
    pub ahead: fn(&OpenIndex, &Batch) -> bool,
    pub post_ahead: fn(&OpenIndex, &Batch),
    pub count: fn(&OpenIndex, &Batch, &mut dyn FnMut(u32) -> bool) -> Result<Counted, TooMany>,
}

/// The registry's entry of `A`.
pub const fn entry<A: BatchSearch>() -> Searcher {
    Searcher {
        name: A::NAME,
        search: A::search,
        joins: A::joins,
        nearest: A::nearest,
        order_bound: A::order_bound,
        distance_is_value: A::distance_is_value,
        load_cost: A::load_cost,
        ahead: A::ahead,
        post_ahead: A::post_ahead,
        count: A::count,
    }
}

/// The registry's entry of access method `name`.
pub fn searcher(name: &str) -> Option<&'static Searcher> {
    crate::am::SEARCHABLE.iter().find(|s| s.name == name)
}

/// Opens index `oid` to read, of any access method that answers batches.
pub fn open(oid: pg_sys::Oid) -> OpenIndex {
    let names: Vec<&'static str> = crate::am::SEARCHABLE.iter().map(|s| s.name).collect();
    OpenIndex::open_of(oid, &names, super::Access::Read, pg_sys::AccessShareLock as i32)
}

/// The ERROR for one query whose matches alone pass the limit.
fn too_many(matches: u64) -> ! {
    crate::error::raise(
        PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        format!(
            "gpuindex: one query would return at least {matches} matches, more than gpuindex.batch_work_mem holds ({} matches)",
            limit()
        ),
        "Raise gpuindex.batch_work_mem (about 48 bytes a match) for this query, or narrow it.",
    )
}

/// A batch answered in pieces: consecutive runs of its queries, each with
/// no more matches than `limit()`, in the batch's order (so rows grouped by
/// position stay grouped). A piece that finds too many is split into as
/// many parts as its count asks and searched again; a single query that
/// alone passes the limit raises an ERROR.
pub struct Pieces {
    /// Query ranges still to answer, the next last.
    todo: Vec<std::ops::Range<usize>>,
    answered: usize,
    /// The pieces asked for (`growing`); those answered beyond them were
    /// split off to stay within the limit.
    planned: usize,
    last: std::ops::Range<usize>,
}

impl Pieces {
    /// (An empty batch is one piece, searched so that its ERRORs are raised.)
    pub fn new(batch: &Batch) -> Pieces {
        Pieces::of(batch.queries.len())
    }

    /// Pieces of `n` queries.
    pub fn of(n: usize) -> Pieces {
        let all = 0..n;
        Pieces { todo: Vec::from([all]), answered: 0, planned: 1, last: 0..0 }
    }

    /// Pieces of `n` queries, the first of `first`, each next four times
    /// the last (one piece where `n` is at most twice `first`): the first
    /// piece's matches come after a small share of the search. Few
    /// pieces: each piece's matches span the whole table, whose pages are
    /// read again for each (H200 host, a parallel Zipf sum from a
    /// sixteenth of the keys: three pieces 112.3 ms, four (twice the last)
    /// 127.7).
    pub fn growing(n: usize, first: usize) -> Pieces {
        if n <= 2 * first {
            return Pieces::of(n);
        }
        let (mut ranges, mut start, mut size) = (Vec::new(), 0, first.max(1));
        while start < n {
            // (A last piece shorter than twice the one before joins it.)
            let end = if n - start < 2 * size { n } else { start + size };
            ranges.push(start..end);
            (start, size) = (end, 4 * size);
        }
        ranges.reverse();
        Pieces { planned: ranges.len(), todo: ranges, answered: 0, last: 0..0 }
    }

    /// Whether the piece answered last was split off to stay within the
    /// limit (beyond the pieces asked for).
    pub fn split_off(&self) -> bool {
        self.answered > self.planned
    }

    /// The queries (positions in the batch) of the piece answered last.
    pub fn last(&self) -> std::ops::Range<usize> {
        self.last.clone()
    }

    /// Whether every piece has been answered.
    pub fn done(&self) -> bool {
        self.todo.is_empty()
    }

    /// The next piece's answer, None when every query has been answered.
    pub fn next(&mut self, open: &OpenIndex, batch: &Batch) -> Option<Hits> {
        let search = searcher(open.am).expect("opened by search::open").search;
        self.next_by(|range| search(open, &Batch { queries: &batch.queries[range], ..*batch }))
    }

    /// The next piece's answer by `answer`, which answers a range of the
    /// queries or says how many matches it would have.
    pub fn next_by<T>(&mut self, mut answer: impl FnMut(std::ops::Range<usize>) -> Result<T, TooMany>) -> Option<T> {
        loop {
            let range = self.todo.pop()?;
            match answer(range.clone()) {
                Ok(found) => {
                    self.answered += 1;
                    self.last = range;
                    return Some(found);
                }
                Err(TooMany(n)) if range.len() == 1 => too_many(n),
                Err(TooMany(n)) => {
                    let parts = (n.div_ceil(limit()) as usize + 1).min(range.len());
                    let size = range.len().div_ceil(parts);
                    let starts: Vec<usize> = range.clone().step_by(size).collect();
                    self.todo.extend(starts.into_iter().rev().map(|s| s..(s + size).min(range.end)));
                }
            }
        }
    }
}

/// The ERROR for a strategy or query type an access method does not batch.
pub fn unsupported(am: &str, what: String, hint: &str) -> ! {
    crate::error::raise(PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED, format!("{am} batches do not answer {what}"), hint)
}

/// The strategy number of operator `op` in the index's operator family,
/// as a search operator (`nearest` false) or an ordering one.
pub fn strategy_of(index: pg_sys::Relation, op: pg_sys::Oid, nearest: bool) -> Option<u16> {
    let purpose = if nearest { pg_sys::AMOP_ORDER } else { pg_sys::AMOP_SEARCH };
    // SAFETY: an open index has one operator family per column; a
    // catalog-cache lookup, released before returning.
    unsafe {
        let family = *(*index).rd_opfamily;
        let tup = pg_sys::SearchSysCache3(
            pg_sys::SysCacheIdentifier::AMOPOPID as i32,
            pg_sys::Datum::from(op),
            pg_sys::Datum::from(purpose),
            pg_sys::Datum::from(family),
        );
        if tup.is_null() {
            return None;
        }
        let strategy = (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_amop>(tup)).amopstrategy as u16;
        pg_sys::ReleaseSysCache(tup);
        Some(strategy)
    }
}

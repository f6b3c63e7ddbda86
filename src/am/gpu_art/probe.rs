//! Batch equality probes (`common::search`, `gpu_art_probe(index,
//! keys)`): the keys encoded and sorted, their leaves searched on all
//! cores (`leaf_step`), returning each input position's visible rows in
//! heap order.

use super::keys::{self, KeyKind};
use super::leaf_step::point_entries;
use super::tree::Tree;
use crate::am::common::search::{self, Ask, Batch, BatchSearch, Hits};
use crate::am::common::OpenIndex;
use pgrx::pg_sys;
use pgrx::prelude::*;

impl BatchSearch for super::GpuArt {
    const NAME: &'static str = "gpu_art";

    fn search(open: &OpenIndex, batch: &Batch) -> Result<Hits, search::TooMany> {
        if batch.ask != Ask::Matches(pg_sys::BTEqualStrategyNumber as u16) {
            search::unsupported("gpu_art", batch.ask.to_string(), "Batch equality probes (=); ranges and prefixes are index scans.");
        }
        let kind = keys::index_kind(open.index);
        if keys::kind_of(batch.query_type) != Some(kind) {
            let name = crate::error::type_name;
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
                format!(
                    "keys of type {}[] cannot probe a gpu_art index on {}",
                    name(batch.query_type),
                    name(crate::am::common::key_type(open.index, "gpu_art"))
                ),
                "Cast the array to the indexed column's type, e.g. $1::text[].",
            );
        }
        Ok(Hits { rows: open.visible(matches(open.index, kind, batch.queries, batch.what)?), distances: None })
    }

    fn joins(strategy: u16) -> bool {
        strategy == pg_sys::BTEqualStrategyNumber as u16
    }

    fn nearest(_strategy: u16) -> bool {
        false
    }
}

/// (TID, input position) of every entry equal to a query (counted before
/// they are gathered: a key asked n times matches each entry n times).
fn matches(
    index: pg_sys::Relation,
    kind: KeyKind,
    queries: &[(i64, pg_sys::Datum)],
    what: &'static str,
) -> Result<Vec<(u64, i64)>, search::TooMany> {
    // The keys in one buffer (not a vector each), ordered by key, then
    // input position.
    let all = keys::encode_all(queries.iter().map(|q| q.1), kind);
    let pos: Vec<i64> = queries.iter().map(|q| q.0).collect();
    let wanted = all.order_by(|a, b| pos[a].cmp(&pos[b]));
    // Each distinct key once, with where its positions start in `wanted`
    // (on all cores: a random read of two keys each).
    let mut starts = all.run_starts(&wanted);
    let points = all.gather(&starts.iter().map(|&i| wanted[i]).collect::<Vec<_>>());
    starts.push(wanted.len());
    let tree = Tree::new(index);
    let entries = point_entries(&tree, kind, &points, what, search::entry_limit()).map_err(|n| search::TooMany(n as u64))?;
    search::within_limit(entries.iter().map(|&(point, _)| (starts[point + 1] - starts[point]) as u64).sum())?;
    let mut out = Vec::with_capacity(entries.len());
    for (point, tid) in entries {
        out.extend(wanted[starts[point]..starts[point + 1]].iter().map(|&q| (tid, pos[q])));
    }
    Ok(out)
}

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    requires = [functions::estimate::gpuindex_batch_rows],
    sql = "CREATE FUNCTION gpu_art_probe(index regclass, keys anyarray) RETURNS TABLE (ord bigint, ctid tid)
    VOLATILE PARALLEL SAFE STRICT SUPPORT gpuindex_batch_rows LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpu_art_probe(index: pg_sys::Oid, keys: pgrx::datum::AnyArray, fcinfo: pg_sys::FunctionCallInfo) {
    crate::am::gpu_btree::probe::probe_function(index, keys, "gpu_art", "gpu_art_probe", fcinfo)
}

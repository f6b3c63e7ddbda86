//! The per-backend cache of what access methods derive from an index's
//! pages (gpu_btree's root and HB+ mirror, gpu_spatial's nodes and engine
//! image), with their device copies.
//!
//! Entries are keyed by (index OID, kind) and remember the relation's file
//! number: a REINDEX, TRUNCATE or VACUUM FULL gives the index a new file,
//! and the old entry is not used again. A relcache invalidation callback
//! drops every entry of an index that is dropped, rewritten or altered
//! (and everything on a cache reset), freeing its host memory and device
//! copy at the next command of every backend that held one, when it
//! processes the invalidation. Entries still in use by a running scan stay
//! alive through their `Arc` until it ends. Each access method decides on
//! its own when an entry is stale beyond that (generations in metapages).
//!
//! `gpuindex_cached_images()` lists what this backend holds.

use pgrx::pg_sys;
use pgrx::prelude::*;
use rustc_hash::FxHashMap as HashMap;
use std::any::Any;
use std::cell::RefCell;
use std::sync::Arc;

/// What an access method keeps in the cache.
pub trait Image: Any + Send + Sync {
    /// The metapage generation it was built from (0 when not tracked).
    fn generation(&self) -> u64;
    fn host_bytes(&self) -> usize;
    fn device_bytes(&self) -> usize {
        0
    }
}

struct Entry {
    /// The relation's file number when the entry was made.
    file: pg_sys::Oid,
    image: Arc<dyn Image>,
    any: Arc<dyn Any + Send + Sync>,
}

thread_local! {
    static ENTRIES: RefCell<HashMap<(pg_sys::Oid, &'static str), Entry>> = RefCell::new(HashMap::default());
}

fn key(rel: pg_sys::Relation, kind: &'static str) -> (pg_sys::Oid, &'static str) {
    // SAFETY: a field of an open relation.
    (unsafe { (*rel).rd_id }, kind)
}

/// The entry of `kind` for the open index `rel`, if there is one for its
/// current file.
pub fn lookup<T: Image>(rel: pg_sys::Relation, kind: &'static str) -> Option<Arc<T>> {
    let file = crate::compat::relfilenode(rel);
    ENTRIES.with(|e| {
        let e = e.borrow();
        let entry = e.get(&key(rel, kind)).filter(|x| x.file == file)?;
        entry.any.clone().downcast::<T>().ok()
    })
}

/// Stores (or replaces) the entry of `kind` for `rel`.
pub fn store<T: Image>(rel: pg_sys::Relation, kind: &'static str, value: T) -> Arc<T> {
    let value = Arc::new(value);
    let entry = Entry { file: crate::compat::relfilenode(rel), image: value.clone(), any: value.clone() };
    ENTRIES.with(|e| e.borrow_mut().insert(key(rel, kind), entry));
    value
}

/// Drops the entry of `kind` for `rel` (before building a replacement,
/// so that two large copies need not coexist).
pub fn remove(rel: pg_sys::Relation, kind: &'static str) {
    let old = ENTRIES.with(|e| e.borrow_mut().remove(&key(rel, kind)));
    drop(old);
}

/// Relcache invalidation: InvalidOid means every relation.
#[pg_guard]
unsafe extern "C-unwind" fn invalidate(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    // Taken out of the map first, dropped after the borrow ends (a drop
    // frees device memory and must not run under the borrow).
    let doomed: Vec<Entry> = ENTRIES.with(|e| match e.try_borrow_mut() {
        Ok(mut map) => {
            let keys: Vec<_> = map.keys().filter(|k| relid == pg_sys::InvalidOid || k.0 == relid).copied().collect();
            keys.iter().filter_map(|k| map.remove(k)).collect()
        }
        // Never borrowed across a PostgreSQL call; if it ever were, the
        // file-number check still keeps rewritten indexes' entries unused.
        Err(_) => Vec::new(),
    });
    drop(doomed);
}

/// Registers the invalidation callback (from _PG_init, once per process).
pub fn init() {
    // SAFETY: a static function; called once per process.
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(invalidate), pg_sys::Datum::from(0)) };
}

#[pg_extern(
    volatile,
    parallel_safe,
    sql = "CREATE FUNCTION gpuindex_cached_images()
    RETURNS TABLE (index regclass, kind text, generation bigint, host_bytes bigint, device_bytes bigint)
    VOLATILE PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
fn gpuindex_cached_images() -> TableIterator<
    'static,
    (name!(index, pg_sys::Oid), name!(kind, String), name!(generation, i64), name!(host_bytes, i64), name!(device_bytes, i64)),
> {
    let mut rows: Vec<_> = ENTRIES.with(|e| {
        e.borrow()
            .iter()
            .map(|(k, v)| (k.0, k.1.to_string(), v.image.generation() as i64, v.image.host_bytes() as i64, v.image.device_bytes() as i64))
            .collect()
    });
    rows.sort_by(|a, b| (a.0.to_u32(), &a.1).cmp(&(b.0.to_u32(), &b.1)));
    TableIterator::new(rows)
}

//! `gpu_btree`: the hybrid CPU-GPU B+-tree (HB+-tree) as an index access
//! method. Pages hold every entry (a B-link tree, WAL-logged with
//! GenericXLog); the inner levels are mirrored into the engine's HB+
//! I-segment, on the GPU when one is used, for batches of probes
//! (`= ANY(array)`, `gpu_btree_probe`).

mod build;
mod cost;
mod keys;
mod mirror;
pub mod options;
mod page;
mod scan;
mod tree;
mod vacuum;
mod validate;
pub mod wal;

pub mod check;
pub mod probe;

use pgrx::pg_sys;
use pgrx::prelude::*;

#[pg_guard]
unsafe extern "C-unwind" fn aminsert(
    index: pg_sys::Relation,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    heap_tid: pg_sys::ItemPointer,
    _heap: pg_sys::Relation,
    _check_unique: pg_sys::IndexUniqueCheck::Type,
    _index_unchanged: bool,
    _info: *mut pg_sys::IndexInfo,
) -> bool {
    let tree = tree::Tree::new(index);
    let tid = page::tid_from(*heap_tid);
    if *isnull {
        tree.insert_null(tid);
    } else {
        tree.insert(keys::encode(*values, build::key_type(index)), tid);
    }
    false
}

fn routine() -> PgBox<pg_sys::IndexAmRoutine> {
    // SAFETY: a zeroed node of the right tag, filled below.
    let mut am = unsafe { PgBox::<pg_sys::IndexAmRoutine>::alloc_node(pg_sys::NodeTag::T_IndexAmRoutine) };
    am.amstrategies = 5;
    am.amsupport = 0;
    am.amoptsprocnum = 0;
    am.amcanorder = true;
    am.amcanorderbyop = false;
    am.amcanbackward = true;
    am.amcanunique = false;
    am.amcanmulticol = false;
    am.amoptionalkey = true;
    am.amsearcharray = true;
    am.amsearchnulls = true;
    am.amstorage = false;
    am.amclusterable = false;
    am.ampredlocks = false;
    am.amcanparallel = false;
    am.amcaninclude = false;
    am.amusemaintenanceworkmem = false;
    am.amparallelvacuumoptions = pg_sys::VACUUM_OPTION_PARALLEL_BULKDEL as u8;
    am.amkeytype = pg_sys::InvalidOid;
    am.ambuild = Some(build::ambuild);
    am.ambuildempty = Some(build::ambuildempty);
    am.aminsert = Some(aminsert);
    am.ambulkdelete = Some(vacuum::ambulkdelete);
    am.amvacuumcleanup = Some(vacuum::amvacuumcleanup);
    am.amcanreturn = Some(scan::amcanreturn);
    am.amcostestimate = Some(cost::amcostestimate);
    am.amoptions = Some(options::amoptions);
    am.amvalidate = Some(validate::amvalidate);
    am.ambeginscan = Some(scan::ambeginscan);
    am.amrescan = Some(scan::amrescan);
    am.amgettuple = Some(scan::amgettuple);
    am.amgetbitmap = Some(scan::amgetbitmap);
    am.amendscan = Some(scan::amendscan);
    am.into_pg_boxed()
}

#[pg_extern(sql = "
CREATE FUNCTION gpu_btree_handler(internal) RETURNS index_am_handler
    PARALLEL SAFE IMMUTABLE STRICT LANGUAGE c
    AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';
CREATE ACCESS METHOD gpu_btree TYPE INDEX HANDLER gpu_btree_handler;
COMMENT ON ACCESS METHOD gpu_btree IS 'hybrid CPU-GPU B+-tree (HB+-tree): B-link pages, inner levels mirrored on the GPU for batches';
")]
fn gpu_btree_handler(_fcinfo: pg_sys::FunctionCallInfo) -> PgBox<pg_sys::IndexAmRoutine> {
    routine()
}

extension_sql_file!("opclasses.sql", name = "gpu_btree_opclasses", requires = [gpu_btree_handler]);

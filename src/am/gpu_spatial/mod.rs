//! `gpu_spatial`: G-PICS's quadtree over `point` as an index access
//! method. Each quadtree leaf is a run of entry pages, the nodes are on
//! node pages (cached per backend, and on the GPU for batches), inserts go
//! to a WAL-logged delta chain that every scan also searches, folded into
//! the tree by G-PICS's bulk update once it passes `delta_limit` pages
//! (`merge.rs`). Answers are
//! PostgreSQL's own operators', exactly: `<@ box`, `<@ circle`, `~=`, and
//! `ORDER BY p <-> q` in exact distance order.

mod build;
mod chain;
pub mod check;
mod cost;
pub mod functions;
mod image;
mod knn;
pub mod merge;
pub mod options;
mod page;
mod scan;
mod shape;
mod vacuum;
mod validate;

use crate::storage::tid_from;
use page::*;
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
    let tid = tid_from(*heap_tid);
    let e = if *isnull {
        Entry { x: f64::NAN, y: f64::NAN, tid: tid | NULL_FLAG }
    } else {
        let p = &*(*values).cast_mut_ptr::<pg_sys::Point>();
        Entry { x: p.x, y: p.y, tid }
    };
    let m = chain::append(index, e);
    if m.delta.pages > options::delta_limit(index) {
        merge::merge(index, false);
    }
    false
}

fn routine() -> PgBox<pg_sys::IndexAmRoutine> {
    // SAFETY: a zeroed node of the right tag, filled below.
    let mut am = unsafe { PgBox::<pg_sys::IndexAmRoutine>::alloc_node(pg_sys::NodeTag::T_IndexAmRoutine) };
    am.amstrategies = 0;
    am.amsupport = 0;
    am.amoptsprocnum = 0;
    am.amcanorder = false;
    am.amcanorderbyop = true;
    am.amcanbackward = false;
    am.amcanunique = false;
    am.amcanmulticol = false;
    am.amoptionalkey = true;
    am.amsearcharray = false;
    am.amsearchnulls = false;
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
CREATE FUNCTION gpu_spatial_handler(internal) RETURNS index_am_handler
    PARALLEL SAFE IMMUTABLE STRICT LANGUAGE c
    AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';
CREATE ACCESS METHOD gpu_spatial TYPE INDEX HANDLER gpu_spatial_handler;
COMMENT ON ACCESS METHOD gpu_spatial IS 'G-PICS quadtree over points: leaves as page runs, nodes mirrored on the GPU for batches';
")]
fn gpu_spatial_handler(_fcinfo: pg_sys::FunctionCallInfo) -> PgBox<pg_sys::IndexAmRoutine> {
    routine()
}

extension_sql_file!("opclasses.sql", name = "gpu_spatial_opclasses", requires = [gpu_spatial_handler]);

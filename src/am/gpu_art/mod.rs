//! `gpu_art`: the access method for variable-length keys (text, varchar,
//! bytea, uuid) of the CuART slice. Its pages are a B-link tree of
//! byte-comparable keys (`page.rs`, `tree.rs`), built from a tuplesort
//! (`build.rs`), scanned as key intervals (`scan.rs`: =, ranges, `^@`
//! prefixes, `= ANY` as one sorted walk), vacuumed leaf by leaf. The
//! engine's CuART (crates/engine/src/art) over the leaves' high keys is
//! the device mirror (`mirror.rs`): batches of probes get their leaves
//! from it in one lower-bound batch, on the GPU or all cores.

mod build;
mod check;
mod handoff;
mod inner_copies;
mod keys;
mod leaf_step;
pub(crate) mod like_prefix;
mod long;
pub(crate) mod mirror;
mod page;
mod probe;
mod scan;
pub(crate) mod service;
mod tree;
mod vacuum;

pub(crate) use crate::am::gpu_btree::options;

use crate::am::common::options::Reloptions;
use crate::am::common::validate::OpClass;
use crate::am::common::{Estimate, HeapRows, IndexAm};
use crate::storage::{Fork, Tid};
use page::Key;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// The prefix operator's strategy (`^@`, text only).
const PREFIX_STRATEGY: u16 = 6;

pub struct GpuArt;

impl IndexAm for GpuArt {
    const NAME: &'static str = "gpu_art";
    /// gpu_btree's: `fillfactor` of the leaves.
    const OPTIONS: &'static Reloptions = &options::OPTIONS;
    type Scan = scan::ScanState;

    fn capabilities(am: &mut pg_sys::IndexAmRoutine) {
        am.amstrategies = PREFIX_STRATEGY;
        am.amcanorder = true;
        am.amcanbackward = true;
        am.amsearcharray = true;
        am.amsearchnulls = true;
        crate::am::common::parallel::enable(am);
    }

    fn build(index: pg_sys::Relation, fork: Fork, rows: Option<&HeapRows>) -> f64 {
        build::build(index, fork, rows)
    }

    fn insert(index: pg_sys::Relation, value: Option<pg_sys::Datum>, tid: Tid) {
        let tree = tree::Tree::new(index);
        match value {
            None => tree.insert(Key::NULL, tid),
            Some(v) => {
                let mut enc = Vec::new();
                keys::encode(v, keys::index_kind(index), &mut enc);
                tree.insert(Key::value(&enc), tid);
            }
        }
    }

    fn bulk_delete(index: pg_sys::Relation, stats: &mut pg_sys::IndexBulkDeleteResult, dead: &dyn Fn(Tid) -> bool) {
        vacuum::bulk_delete(index, stats, dead)
    }

    fn vacuum_cleanup(info: &pg_sys::IndexVacuumInfo, stats: &mut pg_sys::IndexBulkDeleteResult, bulk_deleted: bool) {
        if !bulk_deleted {
            stats.num_index_tuples = info.num_heap_tuples;
            stats.estimated_count = info.estimated_count;
        }
    }

    const WALKS_ARRAYS_IN_KEY_ORDER: bool = true;

    fn cost(path: &pg_sys::IndexPath, generic: &pg_sys::GenericCosts) -> Estimate {
        crate::am::gpu_btree::cost::estimate(path, generic)
    }

    fn check_opclass(c: &OpClass) -> Vec<String> {
        let name = &c.name;
        let Some(kind) = keys::kind_of(c.input_type) else {
            return vec![format!("{name}: type {} is not supported", c.input_type.to_u32())];
        };
        let mut problems = Vec::new();
        let mut own = [false; 7];
        for op in &c.operators {
            let s = op.strategy;
            let prefix_ok = s != PREFIX_STRATEGY || kind == keys::KeyKind::Text;
            if op.purpose != b's' || !(1..=PREFIX_STRATEGY).contains(&s) || !prefix_ok {
                problems.push(format!("{name}: operator of strategy {s} and purpose {} is not supported", op.purpose as char));
            }
            if keys::kind_of(op.left) != Some(kind) || keys::kind_of(op.right) != Some(kind) {
                problems.push(format!("{name}: operator between {} and {} crosses key kinds", op.left.to_u32(), op.right.to_u32()));
            }
            if op.left == c.input_type && op.right == c.input_type && (1..=PREFIX_STRATEGY).contains(&s) {
                own[s as usize] = true;
            }
        }
        if own[1..=5].iter().any(|x| !x) {
            problems.push(format!("{name}: strategies 1..5 are not all present for its own type"));
        }
        if c.procs != 0 {
            problems.push(format!("{name}: gpu_art uses no support functions, found {}", c.procs));
        }
        problems
    }
}

crate::index_am!(GpuArt, gpu_art_handler);

extension_sql_file!("access_method.sql", name = "gpu_art");

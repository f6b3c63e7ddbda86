//! `gpu_learned_check(index regclass)`: verifies the run (data pages of
//! the right kind, none empty, each where the directory says it starts,
//! keys sorted within and across pages, fences equal to the first and
//! last keys, the metapage's count) and that
//! the model predicts every distinct key's first position within its ε,
//! and the run's and retired extents (disjoint, inside the relation); then
//! the delta as `gpu_btree_check` does, and that its key tree is empty
//! where the run metapage says so (`delta_clear`). Raises an ERROR at the first
//! violation; returns one row per part and level otherwise.

use super::page::*;
use super::run;
use crate::am::common::{Access, OpenIndex};
use crate::am::gpu_btree::check::check_tree;
use crate::storage::RecentPages;
use pgrx::pg_sys;
use pgrx::prelude::*;

#[pg_extern(
    volatile,
    parallel_safe,
    strict,
    sql = "CREATE FUNCTION gpu_learned_check(index regclass)
    RETURNS TABLE (part text, level int, pages bigint, entries bigint, dead bigint)
    VOLATILE PARALLEL SAFE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';
-- As amcheck's: reads every page; a superuser grants it deliberately.
REVOKE ALL ON FUNCTION gpu_learned_check(regclass) FROM PUBLIC;"
)]
fn gpu_learned_check(
    index: pg_sys::Oid,
) -> TableIterator<'static, (name!(part, String), name!(level, i32), name!(pages, i64), name!(entries, i64), name!(dead, i64))> {
    let open = OpenIndex::open(index, "gpu_learned", Access::Verify, pg_sys::AccessShareLock as i32);
    let rel = open.index;
    // SAFETY: rd_rel of an open relation.
    let name = unsafe { pgrx::name_data_to_str(&(*(*rel).rd_rel).relname).to_string() };
    let fail = |what: String| -> ! { crate::am::common::corrupted("gpu_learned", &name, what) };
    let run = run::get(rel);
    let (mut entries, mut dead, mut prev) = (0usize, 0i64, None::<u64>);
    let eps = run.pgm.eps + 1;
    let recent = &mut RecentPages::of(rel);
    for i in 0..run.pages() {
        let g = run.page(recent, i);
        let p = RunPage::new(g.page());
        let n = p.count();
        if n == 0 || entries != run.first(i) {
            fail(format!("data page {i} holds {n} entries from position {entries}; the directory says {}", run.first(i)));
        }
        let keys: Vec<u64> = (0..n).map(|s| p.key(s)).collect();
        if keys.windows(2).any(|w| w[0] > w[1]) || prev.is_some_and(|k| k > keys[0]) {
            fail(format!("data page {i}: keys out of order"));
        }
        if (p.s.low, p.s.high) != (keys[0], keys[n - 1]) {
            fail(format!("data page {i}: fences are not its first and last keys"));
        }
        for (s, &k) in keys.iter().enumerate() {
            let first = if s == 0 { prev != Some(k) } else { keys[s - 1] != k };
            let pos = entries + s;
            if first && run.predict(k).abs_diff(pos) > eps {
                fail(format!("the model predicts {} for the key at {pos}, beyond its ε {}", run.predict(k), run.pgm.eps));
            }
            dead += p.dead(s) as i64;
        }
        entries += n;
        prev = keys.last().copied();
    }
    if entries != run.n() {
        fail(format!("the run holds {entries} entries, its metapage says {}", run.n()));
    }
    // Every extent inside the relation, none sharing a block.
    // SAFETY: an open relation.
    let nblocks = unsafe { pg_sys::RelationGetNumberOfBlocksInFork(rel, pg_sys::ForkNumber::MAIN_FORKNUM) };
    let mut all: Vec<[u32; 2]> = run.meta.extents().iter().chain(run.meta.retired()).copied().collect();
    all.sort_unstable();
    if all.iter().any(|e| e[0] <= RUN_META_BLOCK || e[0] as u64 + e[1] as u64 > nblocks as u64)
        || all.windows(2).any(|w| w[0][0] + w[0][1] > w[1][0])
    {
        fail(format!("run or retired extents overlap or leave the relation: {all:?}"));
    }
    let retired: i64 = run.meta.retired().iter().map(|e| e[1] as i64).sum();
    let mut rows = vec![("run".to_string(), 0, run.pages() as i64, entries as i64 - dead, dead), ("retired".to_string(), 0, retired, 0, 0)];
    let delta = check_tree(rel);
    // Read after the walk: a key insert clears `delta_clear` before its
    // entry goes in, so a flag still set saw no entry in the walk.
    let leaf_entries = delta.iter().find(|d| d.0 == 0).map_or(0, |d| d.2);
    if !run::current(rel).1 && leaf_entries > 0 {
        fail(format!("the run metapage says the delta holds no key, its leaves hold {leaf_entries}"));
    }
    rows.extend(delta.into_iter().map(|(level, pages, entries, _)| ("delta".to_string(), level, pages, entries, 0)));
    TableIterator::new(rows)
}

//! ambuild / ambuildempty: collect (key, TID) from the heap, sort on all
//! cores, write the leaves and inner levels bottom up (no WAL per page),
//! then log every page with log_newpage_range.

use super::keys;
use super::page::*;
use crate::storage::{new_page, Exclusive};
use pgrx::pg_sys;
use pgrx::prelude::*;
use rayon::prelude::*;

struct Collected {
    key_type: pg_sys::Oid,
    entries: Vec<(u64, Tid)>,
    nulls: Vec<Tid>,
    heap_tuples: f64,
}

#[pg_guard]
unsafe extern "C-unwind" fn build_callback(
    _index: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    _alive: bool,
    state: *mut std::ffi::c_void,
) {
    let c = &mut *(state as *mut Collected);
    c.heap_tuples += 1.0;
    let t = tid_from(*tid);
    if *isnull {
        c.nulls.push(t);
    } else {
        c.entries.push((keys::encode(*values, c.key_type), t));
    }
}

/// The indexed column's type (gpu_btree indexes one column).
pub fn key_type(index: pg_sys::Relation) -> pg_sys::Oid {
    // SAFETY: an open index relation has a tuple descriptor with >= 1 attribute.
    unsafe {
        let desc = (*index).rd_att;
        if (*desc).natts != 1 {
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                "gpu_btree indexes exactly one column",
                "Create one gpu_btree index per column.",
            );
        }
        (*(*desc).attrs.as_ptr()).atttypid
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambuild(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    info: *mut pg_sys::IndexInfo,
) -> *mut pg_sys::IndexBuildResult {
    let typ = key_type(index);
    if keys::family_of(typ).is_none() {
        keys::unsupported(typ);
    }
    if pg_sys::RelationGetNumberOfBlocksInFork(index, pg_sys::ForkNumber::MAIN_FORKNUM) != 0 {
        pgrx::error!("index \"{}\" already contains data", pgrx::name_data_to_str(&(*(*index).rd_rel).relname));
    }
    let mut c = Collected { key_type: typ, entries: Vec::new(), nulls: Vec::new(), heap_tuples: 0.0 };
    pg_sys::IndexBuildHeapScan(heap, index, info, Some(build_callback), &mut c);
    c.entries.par_sort_unstable();
    c.nulls.sort_unstable();
    let fill = super::options::fillfactor(index);
    write_tree(index, &c.entries, &c.nulls, fill);
    let nblocks = pg_sys::RelationGetNumberOfBlocksInFork(index, pg_sys::ForkNumber::MAIN_FORKNUM);
    if (*(*index).rd_rel).relpersistence == pg_sys::RELPERSISTENCE_PERMANENT as std::ffi::c_char {
        pg_sys::log_newpage_range(index, pg_sys::ForkNumber::MAIN_FORKNUM, 0, nblocks, true);
    }
    let mut r = PgBox::<pg_sys::IndexBuildResult>::alloc0();
    r.heap_tuples = c.heap_tuples;
    r.index_tuples = (c.entries.len() + c.nulls.len()) as f64;
    r.into_pg()
}

/// Writes a whole tree for sorted entries: metapage (block 0), leaves
/// filled to `fill` percent, inner levels, NULL pages.
fn write_tree(index: pg_sys::Relation, entries: &[(u64, Tid)], nulls: &[Tid], fill: usize) {
    let mut meta = new_page(index);
    assert_eq!(meta.block(), META_BLOCK);
    let per_leaf = (LEAF_CAPACITY * fill / 100).max(1);
    let leaves: Vec<&[(u64, Tid)]> = if entries.is_empty() { vec![&[][..]] } else { entries.chunks(per_leaf).collect() };
    // Level 0, then each level above from the (high, block) of the one below.
    let mut level_items: Vec<(u64, u32)> = Vec::with_capacity(leaves.len());
    let mut leftmost = [NONE; MAX_LEVELS];
    let blocks = write_level(index, leaves.len(), 0, |i, page| {
        let chunk = leaves[i];
        let keys: Vec<u64> = chunk.iter().map(|e| e.0).collect();
        let tids: Vec<Tid> = chunk.iter().map(|e| e.1).collect();
        let high = if i + 1 == leaves.len() { u64::MAX } else { *keys.last().expect("non-empty leaf") };
        let low = if i == 0 { 0 } else { leaves[i - 1].last().expect("non-empty leaf").0 };
        page.init(special(KIND_LEAF, 0, 0, low, high));
        leaf_set(page, &keys, &tids);
        high
    });
    leftmost[0] = blocks[0].1;
    level_items.extend(blocks);
    let mut level = 0u8;
    while level_items.len() > 1 {
        level += 1;
        if level as usize >= MAX_LEVELS {
            corrupted(format!("tree deeper than {MAX_LEVELS} levels"));
        }
        let per_page = (INNER_CAPACITY * fill / 100).max(2);
        let groups: Vec<&[(u64, u32)]> = level_items.chunks(per_page).collect();
        let blocks = write_level(index, groups.len(), level, |i, page| {
            let g = groups[i];
            let keys: Vec<u64> = g.iter().map(|e| e.0).collect();
            let children: Vec<u32> = g.iter().map(|e| e.1).collect();
            let high = *keys.last().expect("non-empty page");
            let low = if i == 0 { 0 } else { groups[i - 1].last().expect("non-empty page").0 };
            page.init(special(KIND_INNER, level, 0, low, high));
            inner_set(page, &keys, &children);
            high
        });
        leftmost[level as usize] = blocks[0].1;
        level_items = blocks;
    }
    let (null_head, null_tail) = write_nulls(index, nulls);
    let m = Meta { root: level_items[0].1, root_level: level as u32, leftmost, null_head, null_tail, ..Meta::new(level_items[0].1) };
    init_meta(&mut meta.page_mut_unlogged(), &m);
    meta.mark_dirty();
}

/// Writes `n` pages of one level, linked both ways, the first LEFTMOST and
/// the last RIGHTMOST; `fill(i, page)` formats page i and returns its high
/// key. Returns (high, block) per page.
fn write_level(
    index: pg_sys::Relation,
    n: usize,
    level: u8,
    mut fill: impl FnMut(usize, &mut crate::storage::PageMut) -> u64,
) -> Vec<(u64, u32)> {
    let mut out = Vec::with_capacity(n);
    let mut prev: Option<Exclusive> = None;
    for i in 0..n {
        let mut g = new_page(index);
        let block = g.block();
        let high = {
            let mut p = g.page_mut_unlogged();
            let high = fill(i, &mut p);
            p.update_special(|s| {
                s.level = level;
                if i == 0 {
                    s.flags |= LEFTMOST;
                }
                if i + 1 == n {
                    s.flags |= RIGHTMOST;
                }
                s.left = prev.as_ref().map_or(NONE, |p| p.block());
            });
            high
        };
        if let Some(mut p) = prev.take() {
            p.page_mut_unlogged().update_special(|s| s.right = block);
            p.mark_dirty();
        }
        out.push((high, block));
        prev = Some(g);
    }
    if let Some(p) = prev {
        p.mark_dirty();
    }
    out
}

fn write_nulls(index: pg_sys::Relation, nulls: &[Tid]) -> (u32, u32) {
    let (mut head, mut tail) = (NONE, NONE);
    let mut prev: Option<Exclusive> = None;
    for chunk in nulls.chunks(NULLS_CAPACITY) {
        let mut g = new_page(index);
        {
            let mut p = g.page_mut_unlogged();
            p.init(special(KIND_NULLS, 0, 0, 0, 0));
            nulls_set(&mut p, chunk);
        }
        if let Some(mut p) = prev.take() {
            p.page_mut_unlogged().update_special(|s| s.right = g.block());
            p.mark_dirty();
        } else {
            head = g.block();
        }
        tail = g.block();
        prev = Some(g);
    }
    if let Some(p) = prev {
        p.mark_dirty();
    }
    (head, tail)
}

/// The init fork of an unlogged index: a metapage and one empty leaf,
/// WAL-logged so that recovery recreates it.
#[pg_guard]
pub unsafe extern "C-unwind" fn ambuildempty(index: pg_sys::Relation) {
    let page = |init: &dyn Fn(&mut crate::storage::PageMut)| {
        let buf = pg_sys::ReadBufferExtended(
            index,
            pg_sys::ForkNumber::INIT_FORKNUM,
            pg_sys::InvalidBlockNumber,
            pg_sys::ReadBufferMode::RBM_NORMAL,
            std::ptr::null_mut(),
        );
        pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
        init(&mut crate::storage::PageMut::new(pg_sys::BufferGetPage(buf) as *mut u8));
        pg_sys::MarkBufferDirty(buf);
        pg_sys::UnlockReleaseBuffer(buf);
    };
    page(&|p| init_meta(p, &Meta::new(1)));
    page(&|p| {
        p.init(special(KIND_LEAF, 0, LEFTMOST | RIGHTMOST, 0, u64::MAX));
        leaf_set(p, &[], &[]);
    });
    pg_sys::log_newpage_range(index, pg_sys::ForkNumber::INIT_FORKNUM, 0, 2, true);
}

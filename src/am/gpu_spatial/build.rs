//! ambuild / ambuildempty: collect (point, TID) from the heap, build the
//! G-PICS quadtree (level by level, on the GPU or on all cores: the same
//! tree either way), write each leaf's points as a run of entry pages, the
//! nodes after them, the rest (non-finite points, NULLs) into the odd
//! chain; then log every page with log_newpage_range.

use super::page::*;
use crate::storage::{new_page, tid_from, Exclusive, PageMut};
use gpuindex_engine::gpics::tree::Node;
use gpuindex_engine::gpics::{Params, Points, QuadTree};
use pgrx::pg_sys;
use pgrx::prelude::*;

struct Collected {
    pts: Points,
    nulls: Vec<Entry>,
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
        c.nulls.push(Entry { x: f64::NAN, y: f64::NAN, tid: t | NULL_FLAG });
    } else {
        let p = &*((*values).cast_mut_ptr::<pg_sys::Point>());
        c.pts.push(p.x, p.y, t);
    }
}

/// gpu_spatial indexes one `point` column.
pub fn check_column(index: pg_sys::Relation) {
    // SAFETY: an open index relation has a tuple descriptor.
    unsafe {
        let desc = (*index).rd_att;
        if (*desc).natts != 1 {
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                "gpu_spatial indexes exactly one column",
                "Create one gpu_spatial index per point column.",
            );
        }
        let t = (*(*desc).attrs.as_ptr()).atttypid;
        if t != pg_sys::POINTOID {
            let name = std::ffi::CStr::from_ptr(pg_sys::format_type_be(t)).to_string_lossy().into_owned();
            crate::error::raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("gpu_spatial does not support type {name}"),
                "gpu_spatial indexes point columns; use GiST for other geometric types.",
            );
        }
    }
}

/// The quadtree of `pts`, built on the device the GUCs pick.
pub fn build_tree(pts: &Points, params: Params) -> QuadTree {
    crate::batch::run("gpu_spatial build", pts.len(), || QuadTree::build_cpu(pts, params), |g| QuadTree::build_gpu(g, pts, params))
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambuild(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    info: *mut pg_sys::IndexInfo,
) -> *mut pg_sys::IndexBuildResult {
    check_column(index);
    if pg_sys::RelationGetNumberOfBlocksInFork(index, pg_sys::ForkNumber::MAIN_FORKNUM) != 0 {
        pgrx::error!("index \"{}\" already contains data", pgrx::name_data_to_str(&(*(*index).rd_rel).relname));
    }
    let mut c = Collected { pts: Points::default(), nulls: Vec::new(), heap_tuples: 0.0 };
    pg_sys::IndexBuildHeapScan(heap, index, info, Some(build_callback), &mut c);
    let params = super::options::params(index);
    let indexed = c.pts.len() + c.nulls.len();
    let tree = build_tree(&c.pts, params);
    drop(c.pts);
    write_index(index, &tree, &c.nulls, params);
    let nblocks = pg_sys::RelationGetNumberOfBlocksInFork(index, pg_sys::ForkNumber::MAIN_FORKNUM);
    if (*(*index).rd_rel).relpersistence == pg_sys::RELPERSISTENCE_PERMANENT as std::ffi::c_char {
        pg_sys::log_newpage_range(index, pg_sys::ForkNumber::MAIN_FORKNUM, 0, nblocks, true);
    }
    let mut r = PgBox::<pg_sys::IndexBuildResult>::alloc0();
    r.heap_tuples = c.heap_tuples;
    r.index_tuples = indexed as f64;
    r.into_pg()
}

/// Formats a freshly allocated page (no WAL: the build logs every page at
/// its end).
fn fresh(index: pg_sys::Relation, kind: u8, fill: impl FnOnce(&mut PageMut)) -> Exclusive {
    let mut g = new_page(index);
    {
        let mut p = g.page_mut_unlogged();
        p.init(special(kind));
        fill(&mut p);
    }
    g.mark_dirty();
    g
}

fn as_entries(pts: &Points, from: usize, to: usize) -> Vec<Entry> {
    (from..to).map(|i| Entry { x: pts.x[i], y: pts.y[i], tid: pts.id[i] }).collect()
}

/// Writes a whole index: metapage (block 0), the first delta page
/// (block 1), the first odd page (block 2), each leaf's run of entry
/// pages, the node pages, and further odd pages for what the tree does
/// not hold (NULLs, non-finite points).
fn write_index(index: pg_sys::Relation, tree: &QuadTree, nulls: &[Entry], params: Params) {
    let mut meta_page = new_page(index);
    assert_eq!(meta_page.block(), META_BLOCK);
    let mut odd: Vec<Entry> = as_entries(&tree.odd, 0, tree.odd.len());
    odd.extend_from_slice(nulls);
    let delta = fresh(index, KIND_DELTA, |p| set_entries(p, &[]));
    let mut tail = fresh(index, KIND_DELTA, |p| set_entries(p, &[]));
    let mut m = Meta::new(delta.block(), tail.block(), params.mc as u32, params.mh as u32);
    drop(delta);
    if !tree.pts.is_empty() {
        let (start, count, leaves) = write_tree(index, tree);
        (m.node_start, m.node_count, m.leaf_count) = (start, count, leaves);
        m.tree_entries = tree.pts.len() as u64;
    }
    for chunk in odd.chunks(ENTRY_CAPACITY) {
        if tail.page().special().count as usize > 0 {
            let next = fresh(index, KIND_DELTA, |p| set_entries(p, &[]));
            tail.page_mut_unlogged().update_special(|s| s.right = next.block());
            tail.mark_dirty();
            m.odd.pages += 1;
            tail = next;
        }
        set_entries(&mut tail.page_mut_unlogged(), chunk);
        tail.mark_dirty();
    }
    m.odd.tail = tail.block();
    m.odd.entries = odd.len() as u64;
    init_meta(&mut meta_page.page_mut_unlogged(), &m);
    meta_page.mark_dirty();
}

/// Writes the tree's leaves (a run of pages each) and nodes without WAL;
/// returns (first node page, nodes, leaves).
fn write_tree(index: pg_sys::Relation, tree: &QuadTree) -> (u32, u32, u32) {
    let mut nodes: Vec<Node> = tree.nodes.clone();
    for &li in &tree.leaves {
        let n = &mut nodes[li as usize];
        let (start, count) = (n.start as usize, n.count as usize);
        let pages = pages_for(count);
        let mut first = NONE;
        for c in 0..pages {
            let from = start + c * ENTRY_CAPACITY;
            let to = (from + ENTRY_CAPACITY).min(start + count);
            let g = fresh(index, KIND_LEAF, |p| set_entries(p, &as_entries(&tree.pts, from, to)));
            if c == 0 {
                first = g.block();
            }
        }
        n.start = first;
        n.count = pages as u32;
    }
    let mut node_start = NONE;
    for (i, chunk) in nodes.chunks(NODE_CAPACITY).enumerate() {
        let g = fresh(index, KIND_NODES, |p| set_nodes(p, chunk));
        if i == 0 {
            node_start = g.block();
        }
    }
    (node_start, nodes.len() as u32, tree.leaves.len() as u32)
}

/// The init fork of an unlogged index: a metapage and empty delta and
/// odd pages, WAL-logged so that recovery recreates it.
#[pg_guard]
pub unsafe extern "C-unwind" fn ambuildempty(index: pg_sys::Relation) {
    let params = super::options::params(index);
    let page = |init: &dyn Fn(&mut PageMut)| {
        let buf = pg_sys::ReadBufferExtended(
            index,
            pg_sys::ForkNumber::INIT_FORKNUM,
            pg_sys::InvalidBlockNumber,
            pg_sys::ReadBufferMode::RBM_NORMAL,
            std::ptr::null_mut(),
        );
        pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
        init(&mut PageMut::new(pg_sys::BufferGetPage(buf) as *mut u8));
        pg_sys::MarkBufferDirty(buf);
        pg_sys::UnlockReleaseBuffer(buf);
    };
    page(&|p| init_meta(p, &Meta::new(1, 2, params.mc as u32, params.mh as u32)));
    for _ in 0..2 {
        page(&|p| {
            p.init(special(KIND_DELTA));
            set_entries(p, &[]);
        });
    }
    pg_sys::log_newpage_range(index, pg_sys::ForkNumber::INIT_FORKNUM, 0, 3, true);
}

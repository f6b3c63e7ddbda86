//! Building: the heap rows' vectors become a GTS tree (on the GPU or all
//! cores, as `gpuindex.device` says), each
//! leaf's entries a run of pages, then the nodes and pivots; NULL rows go
//! to the NULL chain. The same writer serves rebuilds (`rebuild.rs`), which
//! take pages from the free space map and WAL-log each one as it is done.

use super::page::*;
use super::page::{Exclusive, PageMut};
use super::vector::{self, Form};
use crate::am::common::HeapRows;
use crate::storage::{new_page_in, Fork};
use gpuindex_engine::gts::gpu_build::build_gpu;
use gpuindex_engine::gts::{Metric, Params, Tree, Vectors};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::borrow::Cow;

/// The tree of `v`, built on the device the GUCs pick (the same tree on
/// either: see gpu_build.rs). Only CREATE INDEX and REINDEX build here;
/// VACUUM's rebuilds stay on the CPU (`rebuild.rs`).
fn build_tree(metric: Metric, v: &Vectors, params: Params) -> Tree {
    crate::batch::run("gpu_metric build", v.len(), || Tree::build(metric, v, params), |g| build_gpu(g, metric, v, params))
}

/// The index's metric: its operator class's ordering strategy number
/// (the class's input type: text for edit distance, real[] or pgvector's
/// vector otherwise).
pub fn metric_of(index: pg_sys::Relation) -> Metric {
    crate::am::common::key_type(index, "gpu_metric");
    // SAFETY: an open index has one operator family and input type per column.
    let (family, t) = unsafe { (*(*index).rd_opfamily, *(*index).rd_opcintype) };
    let metric = Metric::ALL
        .into_iter()
        // SAFETY: a catalog lookup.
        .find(|m| unsafe { pg_sys::get_opfamily_member(family, t, t, *m as i16) } != pg_sys::InvalidOid);
    // (The catalog lookup of pgvector's type only for types not ours.)
    match metric {
        Some(Metric::Levenshtein) if t == pg_sys::TEXTOID => Metric::Levenshtein,
        Some(m) if m != Metric::Levenshtein && (t == pg_sys::FLOAT4ARRAYOID || super::pgvector::is_vector_type(t)) => m,
        _ => crate::error::raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("gpu_metric does not support type {} with this operator class", crate::error::type_name(t)),
            "gpu_metric indexes real[] (real_l2_ops, real_l1_ops, real_cosine_ops), text (text_levenshtein_ops) and, with the extension gpuindex_pgvector, pgvector's vector.",
        ),
    }
}

/// A row's value as an index of `metric` holds it: a vector (finite,
/// non-empty, not too long, non-zero for cosine; for pgvector's cosine,
/// of a norm its float4 arithmetic handles), or a string's characters
/// (padded to the index's width by `fit_row`).
///
/// # Safety
/// `d` is a non-NULL datum of the index's type (`form`).
pub unsafe fn indexable<'a>(d: pg_sys::Datum, form: Form, metric: Metric) -> Cow<'a, [f32]> {
    // SAFETY: as the caller's.
    let v = unsafe { vector::value(d, form, metric) };
    if metric != Metric::Levenshtein && v.len() > MAX_DIM {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("vector has {} dimensions, gpu_metric indexes at most {MAX_DIM}", v.len()),
            "Reduce the dimension, or search without an index.",
        );
    }
    if form == Form::PgVector && metric == Metric::Cosine {
        super::pgvector::check_cosine_row(&v);
    }
    v
}

/// A row fitted to an index whose vectors have `dim` elements: every
/// vector of an index has its dimension; a string is padded to the width.
pub fn fit_row(metric: Metric, v: Cow<[f32]>, dim: usize) -> Cow<[f32]> {
    if metric == Metric::Levenshtein {
        return Cow::Owned(super::text::pad(v.into_owned(), dim));
    }
    if v.len() != dim {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!("vector has {} dimensions, the gpu_metric index {dim}", v.len()),
            "Every vector of one gpu_metric index has the dimension of its first.",
        );
    }
    v
}

pub fn build(index: pg_sys::Relation, fork: Fork, rows: Option<&HeapRows>) -> f64 {
    let metric = metric_of(index);
    // Strings have the index's width; vectors the first one's dimension.
    let mut v = Vectors::new(if metric == Metric::Levenshtein { super::options::max_length(index) } else { 0 });
    let mut nulls = Vec::new();
    let form = Form::of(index);
    if let Some(rows) = rows {
        rows.scan(index, |tid, value| match value {
            // SAFETY: a datum of the metric's type (checked by metric_of).
            Some(d) => {
                let x = unsafe { indexable(d, form, metric) };
                if v.dim == 0 {
                    v.dim = x.len();
                }
                v.push(&fit_row(metric, x, v.dim), tid)
            }
            None => nulls.push(tid),
        });
    }
    let w = Writer { index, fork, logged: false };
    let params = Params { fanout: super::options::fanout(index) };
    let meta_page = new_page_in(index, fork);
    assert_eq!(meta_page.block(), META_BLOCK);
    let mut m = Meta {
        magic: MAGIC,
        version: VERSION,
        generation: 1,
        vacuums: 0,
        dim: v.dim as u32,
        metric: metric as u32,
        fanout: params.fanout as u32,
        height: 0,
        node_start: NONE,
        pivot_start: NONE,
        node_count: 0,
        rebuilding: 0,
        tree_entries: 0,
        freed_pages: 0,
        delta: Chain::EMPTY,
        frozen: Chain::EMPTY,
        nulls: Chain::EMPTY,
    };
    m.delta = Chain::at(w.page(KIND_CHAIN).block());
    let nulls_chain = w.entries(KIND_CHAIN, 0, nulls.iter().map(|&tid| (tid, 0.0, &[][..])));
    m.nulls = Chain { entries: nulls.len() as u64, ..nulls_chain };
    let indexed = v.len() + nulls.len();
    write_tree(&w, &mut m, &build_tree(metric, &v, params), &v);
    let mut g = meta_page;
    {
        let mut p = g.page_mut_unlogged();
        p.init(special(KIND_META));
        write_meta(&mut p, &m);
    }
    g.mark_dirty();
    indexed as f64
}

/// Writes a tree's leaf runs, nodes and pivots; sets them in `m`.
pub fn write_tree(w: &Writer, m: &mut Meta, tree: &Tree, v: &Vectors) {
    let s = &tree.shape;
    let mut nodes = s.nodes.clone();
    for leaf in s.leaves() {
        let n = &mut nodes[leaf];
        let range = n.offset as usize..(n.offset + n.size) as usize;
        n.offset = NONE as u64;
        if !range.is_empty() {
            let entries = range.map(|p| {
                let i = tree.order[p] as usize;
                (v.ids[i], tree.pdist[p], v.get(i))
            });
            n.offset = w.entries(KIND_LEAF, v.dim, entries).head as u64;
        }
    }
    let mut run = Run::new(w);
    for chunk in nodes.chunks(NODE_CAPACITY) {
        run.push(KIND_NODES, |p| set_nodes(p, chunk));
    }
    m.node_start = run.finish().head;
    m.pivot_start = w.entries(KIND_PIVOTS, v.dim, s.pivots.chunks(v.dim.max(1)).take(s.internal()).map(|p| (0, 0.0, p))).head;
    m.node_count = nodes.len() as u32;
    m.height = s.height as u32;
    m.fanout = s.fanout as u32;
    m.tree_entries = v.len() as u64;
}

/// Where a build or rebuild writes its pages.
pub struct Writer {
    pub index: pg_sys::Relation,
    pub fork: Fork,
    /// Each page WAL-logged when done (a rebuild; a build logs every page
    /// at its end instead).
    pub logged: bool,
}

impl Writer {
    /// A new empty page of `kind`, exclusively locked.
    fn page(&self, kind: u8) -> Exclusive {
        let mut g = if self.logged { new_page(self.index) } else { new_page_in(self.index, self.fork) };
        g.page_mut_unlogged().init(special(kind));
        g.mark_dirty();
        g
    }

    /// A page is done: logged (a rebuild) and released.
    fn done(&self, g: Exclusive) {
        if self.logged {
            // SAFETY: an exclusively locked, dirty, initialised page; a crash
            // before the rebuild's metapage record leaves it unreachable.
            unsafe { pg_sys::log_newpage_buffer(g.buffer(), true) };
        }
    }

    /// Writes entries (TID, pivot distance, vector) as a run of pages (a
    /// wide entry's continuation pages after its own); returns the run
    /// (with no entries, one empty page).
    fn entries<'a>(&self, kind: u8, dim: usize, entries: impl Iterator<Item = (u64, f64, &'a [f32])>) -> Chain {
        let per_page = entries_per_page(dim);
        let mut run = Run::new(self);
        let mut i = 0;
        for (tid, pdist, v) in entries {
            if i == 0 {
                run.push(kind, |_| {});
            }
            put_entry(&mut run.last_mut(), dim, i, &Entry { tid, pdist, v });
            i = (i + 1) % per_page;
            // A wide entry's rest (then a page per entry: i stays 0).
            for part in continued_parts(v) {
                run.push(kind, |p| put_continued(p, part));
            }
        }
        if run.pages == 0 {
            run.push(kind, |_| {});
        }
        run.finish()
    }
}

/// Pages written in a row, each linked from the one before; a page is
/// done once the next one is linked.
struct Run<'a> {
    w: &'a Writer,
    chain: Chain,
    pages: u32,
    last: Option<Exclusive>,
}

impl<'a> Run<'a> {
    fn new(w: &'a Writer) -> Self {
        Run { w, chain: Chain::EMPTY, pages: 0, last: None }
    }

    fn push(&mut self, kind: u8, fill: impl FnOnce(&mut PageMut)) {
        let mut g = self.w.page(kind);
        fill(&mut g.page_mut_unlogged());
        match self.last.take() {
            Some(mut prev) => {
                prev.page_mut_unlogged().update_special(|s| s.right = g.block());
                self.w.done(prev);
            }
            None => self.chain.head = g.block(),
        }
        self.chain.tail = g.block();
        self.pages += 1;
        self.last = Some(g);
    }

    fn last_mut(&mut self) -> PageMut<'_> {
        self.last.as_mut().expect("a page").page_mut_unlogged()
    }

    fn finish(mut self) -> Chain {
        if let Some(g) = self.last.take() {
            self.w.done(g);
        }
        Chain { pages: self.pages, ..self.chain }
    }
}

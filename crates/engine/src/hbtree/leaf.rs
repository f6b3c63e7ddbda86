//! The leaf step of a lookup: the inner search names a leaf, and the leaf
//! level answers from there. The trait lets the same batch code serve the
//! in-memory leaf segments of the engine and PostgreSQL's leaf pages.

use rayon::prelude::*;

/// A leaf level searched by leaf number (as the inner segment numbers its
/// leaves, left to right).
pub trait LeafLevel {
    /// What a search yields (a position, a value, a page and offset...).
    type Hit: Send + Copy;
    /// Searches for `q` starting at leaf `leaf`. The inner search may be
    /// stale (a mirror behind the pages): implementations check the leaf's
    /// bounds and move right as needed.
    fn search(&self, leaf: u32, q: u64) -> Self::Hit;
    /// Starts loading what `search(leaf, _)` will read (a hint; may do nothing).
    fn prefetch(&self, _leaf: u32) {}
}

/// Leaves prefetched ahead of the search in the leaf step: a leaf is one
/// random cache miss, so misses must overlap (the paper's CPU pipelining).
pub const AHEAD: usize = 16;

fn step<L: LeafLevel>(leaves: &L, refs: &[u32], queries: &[u64], out: &mut [L::Hit], ahead: usize) {
    for &r in refs.iter().take(ahead) {
        leaves.prefetch(r);
    }
    for i in 0..refs.len() {
        if let Some(&r) = refs.get(i + ahead) {
            leaves.prefetch(r);
        }
        out[i] = leaves.search(refs[i], queries[i]);
    }
}

/// The leaf step of a batch on all cores (leaf levels in process memory).
pub fn leaf_step_par<L: LeafLevel + Sync>(leaves: &L, refs: &[u32], queries: &[u64], out: &mut [L::Hit]) {
    leaf_step_par_tuned(leaves, refs, queries, out, AHEAD, 1024);
}

/// `leaf_step_par` with the prefetch distance and the queries per task set
/// (for the benchmark's sweep).
pub fn leaf_step_par_tuned<L: LeafLevel + Sync>(leaves: &L, refs: &[u32], queries: &[u64], out: &mut [L::Hit], ahead: usize, piece: usize) {
    out.par_chunks_mut(piece)
        .zip(refs.par_chunks(piece))
        .zip(queries.par_chunks(piece))
        .for_each(|((o, r), q)| step(leaves, r, q, o, ahead));
}

/// The leaf step of a batch on the calling thread (leaf levels that only
/// one thread may read, such as PostgreSQL's buffers).
pub fn leaf_step_seq<L: LeafLevel>(leaves: &L, refs: &[u32], queries: &[u64], out: &mut [L::Hit]) {
    step(leaves, refs, queries, out, AHEAD);
}

//! gpu_btree's batches through the GPU service: the service holds a copy
//! of the mirror (the lowest inner level's high keys and leaf blocks,
//! rebuilt there into the engine's implicit inner segment) and answers a
//! batch of probes with each one's leaf block; the leaf pages are read in
//! this backend as ever (`mirror::hinted_leaf` checks every hint). For
//! gpu_btree indexes only: gpu_learned's delta trees share the page format
//! but a merge rewrites them under the same counters.

use super::mirror::Mirror;
use super::tree::Tree;
use crate::am::common::cache;
use crate::service::{client, images};
use pgrx::pg_sys;
use std::sync::OnceLock;

/// Microseconds a probe costs this backend through its mirror on all
/// cores, and the service's GPU, transfers included: 3e8 and 2e9 lookups/s
/// (docs/bench/hbtree-h100.md, 2^23 keys: the CPU implicit tree, whose
/// inner part a mirror is, and the GPU inner search with transfers). The
/// trip (`client::TRIP_US_PER_ROW`) costs a probe more than either: under
/// `auto` a batch goes to the service only where this backend would first
/// read its copy of a mirror far larger than the batch.
const SESSION_US_PER_PROBE: f64 = 1.0 / 300.0;
const SERVICE_US_PER_PROBE: f64 = 1.0 / 2000.0;
/// Microseconds this backend spends per index block to read the lowest
/// inner level into its own mirror (one inner page per ~500 leaves, a
/// few microseconds each).
const COPY_US_PER_BLOCK: f64 = 0.01;
/// Leaf splits an image serves across, as this backend's own mirror does
/// (`mirror::get`): the image key counts generations in steps of this.
const SPLITS_PER_IMAGE: u64 = 16;

/// The leaf blocks of the ascending `probes` from the service, or None
/// where this backend asks its own mirror (`gpuindex.service`, the cost
/// rule of `client::worth_asking`, a one-leaf tree, another access
/// method's tree).
pub fn hints(tree: &Tree, probes: &[u64], what: &'static str) -> Option<Vec<u32>> {
    if !is_gpu_btree(tree.rel) {
        return None;
    }
    let m = tree.meta();
    if m.root_level == 0 {
        return None;
    }
    let copy = match cache::lookup::<Mirror>(tree.rel, "hb+ mirror") {
        Some(_) => 0.0,
        None => super::mirror::blocks(tree) as f64 * COPY_US_PER_BLOCK,
    };
    let n = probes.len() as f64;
    let key =
        client::worth_asking(tree.rel, m.generation / SPLITS_PER_IMAGE, 0, copy + n * SESSION_US_PER_PROBE, n * SERVICE_US_PER_PROBE, n)?;
    let words: Vec<f32> = probes.iter().flat_map(|p| code_words(*p)).collect();
    let ship = |path: &std::path::Path| {
        let m = tree.meta();
        let (highs, blocks) = tree.level_entries(&m, 1);
        images::write_btree(path, &highs, &blocks)
    };
    let rows = client::range(key, CODE_WORDS, &words, &ship, what)?;
    // One block a probe (anything else is not a hint: search here).
    (rows.ids.len() == probes.len() && rows.start.windows(2).all(|w| w[1] - w[0] == 1))
        .then(|| rows.ids.iter().map(|&b| b as u32).collect())
}

/// Words (4 bytes) of a probe: its u64 code's native bytes.
pub const CODE_WORDS: usize = 2;

/// A code as `CODE_WORDS` words.
pub fn code_words(code: u64) -> [f32; 2] {
    let b = code.to_ne_bytes();
    [f32::from_ne_bytes(b[..4].try_into().unwrap()), f32::from_ne_bytes(b[4..].try_into().unwrap())]
}

/// The codes of probes as words (`code_words`).
pub fn codes(words: &[f32]) -> Vec<u64> {
    words
        .chunks_exact(CODE_WORDS)
        .map(|w| {
            let (a, b) = (w[0].to_ne_bytes(), w[1].to_ne_bytes());
            u64::from_ne_bytes([a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]])
        })
        .collect()
}

fn is_gpu_btree(rel: pg_sys::Relation) -> bool {
    static AM: OnceLock<pg_sys::Oid> = OnceLock::new();
    // SAFETY: a catalog lookup (the extension's own access method); a
    // field of an open relation.
    let am = *AM.get_or_init(|| unsafe { pg_sys::get_index_am_oid(c"gpu_btree".as_ptr(), false) });
    unsafe { (*(*rel).rd_rel).relam == am }
}

#[cfg(test)]
mod tests {
    #[test]
    fn codes_survive_words() {
        let c = [0u64, 1, u64::MAX, 0x7ff8_0000_0000_0001, 0x8000_0000_0000_0000];
        let w: Vec<f32> = c.iter().flat_map(|&x| super::code_words(x)).collect();
        assert_eq!(super::codes(&w), c);
    }
}

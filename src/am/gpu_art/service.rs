//! gpu_art's batches through the GPU service, as gpu_btree's
//! (`gpu_btree::service`): the service holds a copy of the mirror (the
//! leaves' high keys and blocks, rebuilt there into the same CuART) and
//! answers each probe with the leaf its walk starts from; the leaves are
//! read in this backend. A probe travels as its length, then its bytes,
//! in 4-byte words, all of a request as wide as its longest (a request
//! with a probe past MAX_KEY_BYTES stays in the session).

use super::mirror::Mirror;
use super::tree::Tree;
use crate::am::common::cache;
use crate::service::{client, images};
use gpuindex_engine::art::ByteKeys;

/// Microseconds a probe costs this backend through its mirror on all
/// cores, and on the service's GPU with transfers: CuART over 10^7 URLs
/// answered 1.69e7 lookups/s on 16 cores and 2.09e8 on the GPU end to end
/// (docs/bench/art-h100.md; a mirror holds fewer, shorter keys: both
/// faster, the ratio much the same). With the trip
/// (`client::TRIP_US_PER_ROW`) a batch pays under `auto` only where this
/// backend would first read its copy of a mirror larger than the batch.
const SESSION_US_PER_PROBE: f64 = 1.0 / 17.0;
const SERVICE_US_PER_PROBE: f64 = 1.0 / 209.0;
/// Microseconds this backend spends per index block to read the lowest
/// inner level into its own mirror (one inner page per hundred leaves or
/// so, each read and its keys copied).
const COPY_US_PER_BLOCK: f64 = 0.05;
/// Leaf splits an image serves across (`mirror::get`'s drift).
const SPLITS_PER_IMAGE: u64 = 16;
/// The longest probe sent.
const MAX_KEY_BYTES: usize = 256;

/// The leaves to start the walks for `queries` from, from the service,
/// or None where this backend asks its own mirror (`gpuindex.service`,
/// the cost rule, a one-leaf tree, a probe past MAX_KEY_BYTES).
pub fn hints(tree: &Tree, queries: &ByteKeys, what: &'static str) -> Option<Vec<u32>> {
    let m = tree.meta();
    let longest = queries.iter().map(<[u8]>::len).max()?;
    if m.root_level == 0 || longest > MAX_KEY_BYTES {
        return None;
    }
    let copy = match cache::lookup::<Mirror>(tree.rel, "art mirror") {
        Some(_) => 0.0,
        None => crate::am::common::build::nblocks(tree.rel, crate::storage::Fork::Main) as f64 * COPY_US_PER_BLOCK,
    };
    let n = queries.len() as f64;
    let key =
        client::worth_asking(tree.rel, m.generation / SPLITS_PER_IMAGE, 0, copy + n * SESSION_US_PER_PROBE, n * SERVICE_US_PER_PROBE, n)?;
    let dim = 1 + longest.div_ceil(4);
    let ship = |path: &std::path::Path| {
        let (keys, blocks) = super::mirror::lowest_level(tree);
        images::write_art(path, &keys, &blocks)
    };
    let rows = client::range(key, dim, &words(queries, dim), &ship, what)?;
    (rows.ids.len() == queries.len() && rows.start.windows(2).all(|w| w[1] - w[0] == 1))
        .then(|| rows.ids.iter().map(|&b| b as u32).collect())
}

/// Probes as words, `dim` a probe: its length, then its bytes (zeros past
/// them).
fn words(queries: &ByteKeys, dim: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(queries.len() * dim);
    let mut bytes = vec![0u8; (dim - 1) * 4];
    for q in queries.iter() {
        out.push(f32::from_ne_bytes((q.len() as u32).to_ne_bytes()));
        bytes.fill(0);
        bytes[..q.len()].copy_from_slice(q);
        out.extend(bytes.chunks_exact(4).map(|b| f32::from_ne_bytes(b.try_into().unwrap())));
    }
    out
}

/// The probes of `words` (`dim` words each), None where a length does not
/// fit its record.
pub fn probes(words: &[f32], dim: usize) -> Option<ByteKeys> {
    let mut keys = ByteKeys::new();
    for w in words.chunks_exact(dim.max(1)) {
        let len = u32::from_ne_bytes(w[0].to_ne_bytes()) as usize;
        let bytes: Vec<u8> = w[1..].iter().flat_map(|f| f.to_ne_bytes()).collect();
        keys.push(bytes.get(..len)?);
    }
    Some(keys)
}

#[cfg(test)]
mod tests {
    #[test]
    fn probes_survive_words() {
        let mut keys = gpuindex_engine::art::ByteKeys::new();
        for k in [&b""[..], b"a", b"abcd", b"https://example.com/\x00\xff", &[0xffu8; 9][..]] {
            keys.push(k);
        }
        let dim = 1 + keys.iter().map(<[u8]>::len).max().unwrap().div_ceil(4);
        let back = super::probes(&super::words(&keys, dim), dim).expect("fits");
        assert_eq!(back.iter().collect::<Vec<_>>(), keys.iter().collect::<Vec<_>>());
    }
}

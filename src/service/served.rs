//! What the service holds of an index and how it answers a batch on it:
//! gpu_metric's tree rows (kNN; queries of `dim` floats), gpu_spatial's
//! G-PICS tree (kNN of centres: two float8s, four words; ranges: boxes,
//! circles and points, ten words) or gpu_btree's mirror (probes: a u64
//! code, two words, answered as a "range" of one row, its leaf block) or
//! gpu_art's (probes: length and bytes, as many words as the request's
//! longest, answered the same way) or gpu_learned's run model (keys as
//! gpu_btree's, answered with their predicted positions). A request's
//! queries travel as 4-byte words either way; the image decides how to
//! read them.

use crate::am::common::cache::Image as _;
use crate::am::{gpu_art, gpu_btree, gpu_learned, gpu_metric, gpu_spatial};
use gpuindex_engine::gpics::{Neighbors, Query, Rect};
use gpuindex_engine::gpu::{Gpu, GpuError};
use gpuindex_engine::gts::gpu::{FILTER_MAX_K, MAX_GPU_K};
use gpuindex_engine::gts::Metric;

pub enum Served {
    Metric(gpu_metric::image::Image),
    Spatial(gpu_spatial::image::Image),
    Btree(gpu_btree::mirror::Mirror),
    // (Boxed: CuART's mirror is large beside the others.)
    Art(Box<gpu_art::mirror::Mirror>),
    Learned(Box<gpu_learned::service::Model>),
}

/// Words (4 bytes) of a gpu_spatial centre.
pub const CENTRE_WORDS: usize = 4;

/// One batch's answers, flat (a vector per query cost the service a
/// third of a 2.5M-row range batch's time): query q's row ids are
/// `ids[start[q]..start[q + 1]]`, nearest first for kNN, with `dists`
/// beside them (empty for ranges, whose rows have no distance).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows {
    pub start: Vec<usize>,
    pub ids: Vec<u64>,
    pub dists: Vec<f64>,
}

impl Rows {
    /// No queries yet.
    pub fn new() -> Rows {
        Rows { start: vec![0], ids: Vec::new(), dists: Vec::new() }
    }

    pub fn queries(&self) -> usize {
        self.start.len().saturating_sub(1)
    }

    /// From a vector per query (with distances or not).
    pub fn from_nested(nested: &[Vec<(u64, f64)>], distances: bool) -> Rows {
        let mut r = Rows::new();
        for q in nested {
            r.ids.extend(q.iter().map(|p| p.0));
            if distances {
                r.dists.extend(q.iter().map(|p| p.1));
            }
            r.start.push(r.ids.len());
        }
        r
    }

    /// A vector per query (distance 0 for ranges).
    pub fn nested(&self) -> Vec<Vec<(u64, f64)>> {
        (0..self.queries())
            .map(|q| {
                let r = self.start[q]..self.start[q + 1];
                self.ids[r.clone()].iter().enumerate().map(|(i, &id)| (id, self.dists.get(r.start + i).copied().unwrap_or(0.0))).collect()
            })
            .collect()
    }

    /// Queries `qs` (each cut to its first `most` rows where given).
    pub fn part(&self, qs: std::ops::Range<usize>, most: Option<usize>) -> Rows {
        let mut r = Rows::new();
        let with = self.dists.len() == self.ids.len();
        for q in qs {
            let (a, b) = (self.start[q], self.start[q + 1]);
            let b = most.map_or(b, |k| b.min(a + k));
            r.ids.extend_from_slice(&self.ids[a..b]);
            if with {
                r.dists.extend_from_slice(&self.dists[a..b]);
            }
            r.start.push(r.ids.len());
        }
        r
    }

    /// `other`'s queries after these.
    pub fn append(&mut self, other: Rows) {
        let base = self.ids.len();
        self.start.extend(other.start[1..].iter().map(|s| s + base));
        self.ids.extend(other.ids);
        self.dists.extend(other.dists);
    }
}

/// A batch's answers, and whether the GPU gave them (else why not, when
/// it failed).
pub struct Found {
    pub rows: Rows,
    pub on_gpu: bool,
    pub gpu_failure: Option<String>,
    /// A range search that counted more rows than `ANSWER_ROWS` (none
    /// gathered): its requests fail, and their sessions search in pieces.
    pub too_many: Option<u64>,
}

/// The most rows the service gathers for one epoch's range search: a
/// request carries at most `segment::MAX_BYTES` (4M rows), and a batch of
/// points asked by many boxes could otherwise hold the worker's memory
/// without bound.
pub const ANSWER_ROWS: u64 = 16 * (super::segment::MAX_BYTES as u64 / 8);

impl Served {
    pub fn host_bytes(&self) -> usize {
        match self {
            Served::Metric(i) => i.host_bytes(),
            Served::Spatial(i) => i.host_bytes(),
            Served::Btree(m) => m.host_bytes(),
            Served::Art(m) => m.host_bytes(),
            Served::Learned(m) => m.host_bytes(),
        }
    }

    pub fn device_bytes(&self) -> usize {
        match self {
            Served::Metric(i) => i.device_bytes(),
            Served::Spatial(i) => i.device_bytes(),
            Served::Btree(m) => m.device_bytes(),
            Served::Art(m) => m.device_bytes(),
            Served::Learned(m) => m.device_bytes(),
        }
    }

    /// Puts the image on `gpu` (at load: the first epoch need not wait).
    pub fn upload(&self, gpu: &Gpu) -> Result<(), GpuError> {
        match self {
            Served::Metric(i) => i.device(gpu).map(drop),
            Served::Spatial(i) => i.tree.device_image(gpu).map(drop),
            Served::Btree(m) => m.inner.device_image(gpu).map(drop),
            Served::Art(m) if m.has_keys() => m.device(gpu).map(drop),
            Served::Art(_) => Ok(()),
            Served::Learned(m) => m.device(gpu).map(drop),
        }
    }

    /// The `k` nearest rows of each query (`words`), on `gpu` if given
    /// (the caller asked `gpu_pays`), else (or when it fails) on the CPU
    /// pool.
    /// Callers checked `answers_knn`.
    pub fn knn(&self, on: Option<&Gpu>, words: &[f32], k: usize) -> Found {
        match self {
            Served::Btree(_) | Served::Art(_) | Served::Learned(_) => {
                unreachable!("kNN requests go to gpu_metric and gpu_spatial images only (checked)")
            }
            Served::Metric(img) => {
                let flat = |n: Vec<Vec<(u64, f64)>>| Rows::from_nested(&n, true);
                found(on.map(|g| img.knn_gpu(g, words, k).map(flat)), || flat(img.knn_cpu(words, k)))
            }
            Served::Spatial(img) => {
                let (c, tree) = (centres(words), &img.tree);
                found(on.map(|g| tree.knn_gpu(g, &c, k).map(rows)), || rows(tree.knn_cpu(&c, k)))
            }
        }
    }

    /// Whether it answers `OP_RANGE` requests (`range`).
    pub fn answers_ranges(&self) -> bool {
        !matches!(self, Served::Metric(_))
    }

    /// Whether it answers `OP_KNN` requests (`knn`).
    pub fn answers_knn(&self) -> bool {
        matches!(self, Served::Metric(_) | Served::Spatial(_))
    }

    /// Every point matching each query (`QUERY_WORDS` words each: G-PICS
    /// boxes, circles, points), on `gpu` if given, else (or when it fails)
    /// on the CPU pool; ids only (distances 0). Callers checked
    /// `answers_ranges`.
    /// `dim`: words a query.
    pub fn range(&self, on: Option<&Gpu>, words: &[f32], dim: usize) -> Found {
        match self {
            Served::Btree(m) => return probe_hints(m, on, words),
            Served::Art(m) => return art_hints(m, on, words, dim),
            Served::Learned(m) => {
                let keys = gpu_btree::service::codes(words);
                let rows = |p: Vec<u64>| Rows { start: (0..=p.len()).collect(), ids: p, dists: Vec::new() };
                return found(on.map(|g| m.predict_gpu(g, &keys).map(rows)), || rows(m.predict_cpu(&keys)));
            }
            _ => {}
        }
        let Served::Spatial(img) = self else { unreachable!("range requests go to gpu_spatial and gpu_btree images (checked)") };
        let (qs, tree) = (queries(words), &img.tree);
        let (answer, on_gpu, gpu_failure) = match on.map(|g| tree.search_gpu_bounded(g, &qs, ANSWER_ROWS)) {
            Some(Ok(a)) => (a, true, None),
            Some(Err(e)) => (tree.search_cpu_bounded(&qs, ANSWER_ROWS), false, Some(e.to_string())),
            None => (tree.search_cpu_bounded(&qs, ANSWER_ROWS), false, None),
        };
        match answer {
            Ok(h) => Found { rows: Rows { start: h.offsets, ids: h.ids, dists: Vec::new() }, on_gpu, gpu_failure, too_many: None },
            Err(n) => Found { rows: Rows::new(), on_gpu, gpu_failure, too_many: Some(n) },
        }
    }

    /// Whether a batch of `n` queries (kNN: for `k`) runs on the GPU.
    ///
    /// gpu_metric: within the GPU's limit; for L2 on trees that prune
    /// little (high dimensions) only where the GPU's bounded brute force
    /// answers it (k up to `FILTER_MAX_K`): its tree search opens most
    /// leaves there and is slower than the CPU's bounded brute force on all
    /// cores; for edit distance from `EDIT_GPU_MIN` queries: the GPU's leaf
    /// search is a block per query, 6 ms for 1 to 32 queries over 104K
    /// words on the H100, where the worker's 16 cores on one query take
    /// 2.4 ms (docs/bench/gts-words-h100.md).
    ///
    /// gpu_spatial ranges, gpu_btree, gpu_art and gpu_learned probes: from
    /// `min_batch` queries (`gpuindex.gpu_min_batch`), as in a session.
    /// gpu_spatial kNN: from `min_batch / KNN_WORK` centres (256 by
    /// default), as a centre's walk is the work of many probes.
    pub fn gpu_pays(&self, k: usize, n: usize, min_batch: usize) -> bool {
        match self {
            Served::Metric(img) => {
                let m = img.shape.metric;
                k <= MAX_GPU_K
                    && (k <= FILTER_MAX_K || m != Metric::L2 || !img.prunes_little())
                    && (m != Metric::Levenshtein || n >= EDIT_GPU_MIN)
            }
            Served::Spatial(_) if k > 0 => n * KNN_WORK >= min_batch,
            Served::Spatial(_) | Served::Btree(_) | Served::Art(_) | Served::Learned(_) => n >= min_batch,
        }
    }
}

/// Queries of `gpuindex.gpu_min_batch` that a gpu_spatial kNN centre
/// (k = 10) counts for in the service, where its image is on the GPU
/// already. On the H100 host a warp per centre answered 1,000 centres
/// 1.5x-2.0x faster than the walk on all 16 idle cores
/// (docs/bench/gpics-knn-h100.md), and the service's CPU pool shares its
/// cores with the sessions that asked. A parallel kNN join's participants
/// ask ~500-1,000 centres each: on the service's GPU the join's index
/// time fell from 40 to 28 ms and the join from 46.7-53.3 to 43.7-50.7
/// ms (H200 host, docs/bench/knn-service-ahead-ab-h200.md).
const KNN_WORK: usize = 16;

/// The leaf block each probe's walk starts from (`dim` words a probe:
/// `gpu_art::service`'s records) through gpu_art's mirror `m`, on `on` if
/// given; none for records that do not decode (the session searches).
fn art_hints(m: &gpu_art::mirror::Mirror, on: Option<&Gpu>, words: &[f32], dim: usize) -> Found {
    let Some(probes) = gpu_art::service::probes(words, dim) else {
        return Found { rows: Rows::new(), on_gpu: false, gpu_failure: None, too_many: None };
    };
    let blocks = |ranks: Vec<u64>| Rows {
        start: (0..=ranks.len()).collect(),
        ids: m.blocks_of(&ranks).into_iter().map(u64::from).collect(),
        dists: Vec::new(),
    };
    found(on.map(|g| m.ranks_gpu(g, &probes).map(blocks)), || blocks(m.ranks_cpu(&probes)))
}

/// The leaf block of each probe (`gpu_btree::service::CODE_WORDS` words
/// each) through gpu_btree's mirror `m`, on `on` if given.
fn probe_hints(m: &gpu_btree::mirror::Mirror, on: Option<&Gpu>, words: &[f32]) -> Found {
    let codes = gpu_btree::service::codes(words);
    let blocks = |leaves: Vec<u32>| Rows {
        start: (0..=leaves.len()).collect(),
        ids: leaves.iter().map(|&l| m.blocks.get(l as usize).map_or(u64::from(u32::MAX), |&b| b as u64)).collect(),
        dists: Vec::new(),
    };
    let cpu = || {
        let mut out = vec![0u32; codes.len()];
        m.inner.descend_cpu(&codes, &mut out);
        blocks(out)
    };
    let gpu = |g: &Gpu| {
        let mut out = vec![0u32; codes.len()];
        m.inner.descend_gpu(g, &codes, gpuindex_engine::gpu::Schedule::default(), |off, r| out[off..off + r.len()].copy_from_slice(r))?;
        Ok(blocks(out))
    };
    found(on.map(gpu), cpu)
}

/// The smallest batch of edit-distance queries the GPU takes.
const EDIT_GPU_MIN: usize = 4;

/// Words (4 bytes) of a gpu_spatial range query: its kind, then four
/// float8s.
pub const QUERY_WORDS: usize = 10;

/// Range queries as words: kind (0 box, 1 circle, 2 point) and four
/// float8s (lx ly hx hy; x y r 0; x y 0 0), each a float8's native bytes.
pub fn query_words(qs: &[Query]) -> Vec<f32> {
    words(qs.iter().flat_map(|q| match *q {
        Query::Range(r) => [0.0, r.lx, r.ly, r.hx, r.hy],
        Query::Within { x, y, r } => [1.0, x, y, r, 0.0],
        Query::Point { x, y } => [2.0, x, y, 0.0, 0.0],
    }))
}

fn queries(w: &[f32]) -> Vec<Query> {
    float8s(w)
        .chunks_exact(5)
        .map(|f| match f[0] as u8 {
            0 => Query::Range(Rect { lx: f[1], ly: f[2], hx: f[3], hy: f[4] }),
            1 => Query::Within { x: f[1], y: f[2], r: f[3] },
            _ => Query::Point { x: f[1], y: f[2] },
        })
        .collect()
}

fn words(f: impl Iterator<Item = f64>) -> Vec<f32> {
    let bytes: Vec<u8> = f.flat_map(f64::to_ne_bytes).collect();
    bytes.chunks_exact(4).map(|b| f32::from_ne_bytes(b.try_into().unwrap())).collect()
}

fn float8s(words: &[f32]) -> Vec<f64> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    bytes.chunks_exact(8).map(|b| f64::from_ne_bytes(b.try_into().unwrap())).collect()
}

/// Centres as words: x then y, each a float8's native bytes.
pub fn centre_words(centres: &[(f64, f64)]) -> Vec<f32> {
    words(centres.iter().flat_map(|&(x, y)| [x, y]))
}

fn centres(w: &[f32]) -> Vec<(f64, f64)> {
    float8s(w).chunks_exact(2).map(|c| (c[0], c[1])).collect()
}

fn found(tried: Option<Result<Rows, GpuError>>, cpu: impl FnOnce() -> Rows) -> Found {
    match tried {
        Some(Ok(rows)) => Found { rows, on_gpu: true, gpu_failure: None, too_many: None },
        Some(Err(e)) => Found { rows: cpu(), on_gpu: false, gpu_failure: Some(e.to_string()), too_many: None },
        None => Found { rows: cpu(), on_gpu: false, gpu_failure: None, too_many: None },
    }
}

/// Neighbours as rows.
fn rows(n: Neighbors) -> Rows {
    Rows { start: n.offsets, ids: n.ids, dists: n.dists }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn centres_survive_words() {
        let c = vec![(1.5, -2.25), (f64::MAX, f64::MIN_POSITIVE), (-0.0, 1e300)];
        let w = centre_words(&c);
        assert_eq!(w.len(), c.len() * CENTRE_WORDS);
        let back = centres(&w);
        assert_eq!(
            back.iter().map(|p| (p.0.to_bits(), p.1.to_bits())).collect::<Vec<_>>(),
            c.iter().map(|p| (p.0.to_bits(), p.1.to_bits())).collect::<Vec<_>>()
        );
    }

    #[test]
    fn range_queries_survive_words() {
        let qs = vec![
            Query::Range(Rect { lx: -1.0, ly: 2.0, hx: 1e300, hy: f64::INFINITY }),
            Query::Within { x: 0.5, y: -0.25, r: 3.0 },
            Query::Point { x: f64::MIN_POSITIVE, y: -0.0 },
        ];
        let w = query_words(&qs);
        assert_eq!(w.len(), qs.len() * QUERY_WORDS);
        assert_eq!(format!("{:?}", queries(&w)), format!("{qs:?}"));
    }
}

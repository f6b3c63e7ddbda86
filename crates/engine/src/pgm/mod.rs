//! The G-Learned index (Liu et al., TPDS 2024; `notes/000_glearned.md`):
//! a PGM-index over sorted u64 keys whose segments live on the GPU, one
//! thread per query, while the keys may stay in host memory.
//!
//! - `pla`: the optimal ε-bounded piecewise-linear fit;
//! - here: the levels (bottom: keys to positions within ±ε; each level
//!   above: the first keys of the one below, within ±ε_inner, up to one
//!   root segment), built in chunks on all cores, and the exact CPU
//!   lookups;
//! - `gpu`: the same lookups on the GPU (predictions for a host last mile,
//!   or whole lower bounds with the keys on the device).
//!
//! Exactness never rests on the model: every window search checks that
//! the answer's neighbours bound the query and widens the window (doubling)
//! when they do not, so a prediction off by any amount costs time, never a
//! wrong position. A fresh model is within its ε (the tests count misses).
//!
//! Duplicates: the bottom level fits each distinct key at its first
//! occurrence, plus (PGM's adjustment) the key after a run of duplicates
//! at the run's end, so that a query between two keys is predicted near the
//! next key's first occurrence. A lower bound is the first occurrence.

pub mod gpu;
pub mod pla;

use pla::{Line, Pla};
use rayon::prelude::*;

/// PGM's default inner ε, the paper's ε2.
pub const DEFAULT_EPS_INNER: usize = 4;
/// The paper's default bottom ε (ε1).
pub const DEFAULT_EPS: usize = 128;
/// Points per chunk of the parallel bottom fit (each chunk may cost one
/// segment more than the sequential fit: Theorem 1).
const CHUNK: usize = 1 << 20;

/// One level: a range of the segment arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Level {
    pub offset: usize,
    pub len: usize,
}

/// The model: every level's segments as parallel arrays, bottom level
/// first; the top level has one segment.
#[derive(Clone, Debug, Default)]
pub struct Pgm {
    pub eps: usize,
    pub eps_inner: usize,
    /// Keys indexed.
    pub n: usize,
    /// Each segment's first key, slope, and predicted position at its
    /// first key.
    pub first: Vec<u64>,
    pub slope: Vec<f64>,
    pub intercept: Vec<f64>,
    pub levels: Vec<Level>,
}

/// The bottom level's points of sorted `keys[start..end]` (`start` at a
/// first occurrence): each distinct key at its first position, and after a
/// run of duplicates the next key value at the run's end.
fn bottom_points(keys: &[u64], start: usize, end: usize) -> impl Iterator<Item = (u64, u64)> + '_ {
    (start..end).filter_map(move |i| {
        let x = keys[i];
        if i > 0 && keys[i - 1] == x {
            return run_end_point(x, i as u64, keys.get(i + 1).copied());
        }
        Some((x, i as u64))
    })
}

/// The point of key `x` at position `i` repeating the key before it, given
/// the key after it (None: none): at the end of its run, with a gap after
/// it, the next key value at the run's end; else none.
fn run_end_point(x: u64, i: u64, next: Option<u64>) -> Option<(u64, u64)> {
    let last = next != Some(x);
    let gap = x < u64::MAX && next != Some(x + 1);
    (last && gap).then(|| (x + 1, i + 1))
}

/// The model fitted as sorted keys stream in, one at a time (one core,
/// memory for the segments only: an index build that sorts on disk): the
/// bottom level's points are those of `bottom_points`, each decided when
/// the key after it arrives.
pub struct StreamFit {
    pla: Pla,
    lines: Vec<Line>,
    eps: usize,
    eps_inner: usize,
    /// Keys pushed, the last of them, and whether it repeats the one before.
    n: u64,
    last: Option<u64>,
    last_repeats: bool,
}

impl StreamFit {
    pub fn new(eps: usize, eps_inner: usize) -> StreamFit {
        assert!(eps >= 1 && eps_inner >= 1);
        StreamFit { pla: Pla::new(eps), lines: Vec::new(), eps, eps_inner, n: 0, last: None, last_repeats: false }
    }

    /// Adds the next key (keys must not decrease).
    pub fn push(&mut self, k: u64) {
        if let Some(x) = self.last {
            debug_assert!(x <= k, "keys must be sorted");
            self.settle(x, Some(k));
        }
        self.last_repeats = self.last == Some(k);
        self.last = Some(k);
        self.n += 1;
    }

    /// The point (if any) of the last key, position n - 1, now that the key
    /// after it is known.
    fn settle(&mut self, x: u64, next: Option<u64>) {
        let i = self.n - 1;
        let point = if self.last_repeats { run_end_point(x, i, next) } else { Some((x, i)) };
        if let Some((x, y)) = point {
            if !self.pla.add(x, y) {
                self.lines.push(self.pla.line());
                self.pla.add(x, y);
            }
        }
    }

    pub fn finish(mut self) -> Pgm {
        let mut pgm = Pgm { eps: self.eps, eps_inner: self.eps_inner, n: self.n as usize, ..Pgm::default() };
        if let Some(x) = self.last {
            self.settle(x, None);
            self.lines.push(self.pla.line());
        }
        pgm.push_levels(&self.lines);
        pgm
    }
}

/// Where the chunks of a parallel bottom fit start: about every `chunk`
/// keys, each at a first occurrence; then n (empty keys: just 0).
pub fn chunk_starts(keys: &[u64], chunk: usize) -> Vec<usize> {
    let n = keys.len();
    let mut starts = vec![0];
    let mut at = 0;
    while at < n {
        at += chunk.max(1);
        while at < n && keys[at - 1] == keys[at] {
            at += 1;
        }
        starts.push(at.min(n));
    }
    starts
}

/// The bottom level's segments of chunk keys[start..end].
pub fn fit_range(keys: &[u64], start: usize, end: usize, eps: usize) -> Vec<Line> {
    fit(bottom_points(keys, start, end), eps)
}

/// Fits points with strictly increasing x.
fn fit(points: impl Iterator<Item = (u64, u64)>, eps: usize) -> Vec<Line> {
    let mut pla = Pla::new(eps);
    let mut lines = Vec::new();
    let mut any = false;
    for (x, y) in points {
        if !pla.add(x, y) {
            lines.push(pla.line());
            pla.add(x, y);
        }
        any = true;
    }
    if any {
        lines.push(pla.line());
    }
    lines
}

/// The first index i in [lo, hi) with a[i] > k (hi if none).
#[inline]
fn upper_bound(a: &[u64], k: u64, mut lo: usize, hi: usize) -> usize {
    let mut len = hi - lo;
    while len > 0 {
        let half = len / 2;
        if a[lo + half] <= k {
            lo += half + 1;
            len -= half + 1;
        } else {
            len = half;
        }
    }
    lo
}

/// The last i with a[i] <= k (a[0] <= k), searched in [lo, hi) widened
/// until it must hold it; and whether it had to widen.
#[inline]
pub fn rightmost_le(a: &[u64], k: u64, lo: usize, hi: usize) -> (usize, bool) {
    let n = a.len();
    let (mut lo, mut hi) = (lo.min(n - 1), hi.clamp(lo.min(n - 1) + 1, n));
    let mut widened = false;
    let mut w = 1;
    while lo > 0 && a[lo] > k {
        lo = lo.saturating_sub(w);
        w *= 2;
        widened = true;
    }
    while hi < n && a[hi] <= k {
        hi = (hi + w).min(n);
        w *= 2;
        widened = true;
    }
    (upper_bound(a, k, lo, hi) - 1, widened)
}

/// The first i with keys[i] >= q, searched in [lo, hi) widened until it
/// must hold it; and whether it had to widen.
#[inline]
pub fn lower_bound_in(keys: &[u64], q: u64, lo: usize, hi: usize) -> (usize, bool) {
    let n = keys.len();
    let (mut lo, mut hi) = (lo.min(n), hi.clamp(lo.min(n), n));
    let mut widened = false;
    let mut w = 1;
    while lo > 0 && keys[lo - 1] >= q {
        lo = lo.saturating_sub(w);
        w *= 2;
        widened = true;
    }
    while hi < n && keys[hi] < q {
        hi = (hi + w).min(n);
        w *= 2;
        widened = true;
    }
    // First in [lo, hi) with keys[i] >= q: binary search on "< q".
    let (mut b, mut len) = (lo, hi - lo);
    while len > 0 {
        let half = len / 2;
        if keys[b + half] < q {
            b += half + 1;
            len -= half + 1;
        } else {
            len = half;
        }
    }
    (b, widened)
}

/// Asks for the cache lines of `a` (the group's windows then load
/// together instead of one dependent miss after another).
#[inline(always)]
fn prefetch(a: &[u64]) {
    #[cfg(target_arch = "x86_64")]
    for line in a.chunks(8) {
        // SAFETY: a prefetch of an address inside `a`; it cannot fault.
        unsafe { std::arch::x86_64::_mm_prefetch(line.as_ptr() as *const i8, std::arch::x86_64::_MM_HINT_T0) };
    }
}

/// The window [p - eps - 1, p + eps + 2) a prediction p stands for.
#[inline]
pub fn window(p: usize, eps: usize) -> (usize, usize) {
    (p.saturating_sub(eps + 1), p + eps + 2)
}

impl Pgm {
    /// The model of sorted `keys` (on all cores).
    pub fn build(keys: &[u64], eps: usize, eps_inner: usize) -> Pgm {
        Pgm::build_chunked(keys, eps, eps_inner, CHUNK)
    }

    /// The model with the bottom level fitted in chunks of about `chunk`
    /// keys on all cores (what the GPU build does per thread: the same
    /// chunks give the same segments).
    pub fn build_chunked(keys: &[u64], eps: usize, eps_inner: usize, chunk: usize) -> Pgm {
        assert!(eps >= 1 && eps_inner >= 1);
        debug_assert!(keys.windows(2).all(|w| w[0] <= w[1]), "keys must be sorted");
        let starts = chunk_starts(keys, chunk);
        let bottom: Vec<Line> = starts.par_windows(2).flat_map_iter(|w| fit_range(keys, w[0], w[1], eps)).collect();
        Pgm::from_bottom(keys.len(), eps, eps_inner, &bottom)
    }

    /// The model over n keys whose bottom level is `bottom`.
    pub fn from_bottom(n: usize, eps: usize, eps_inner: usize, bottom: &[Line]) -> Pgm {
        let mut pgm = Pgm { eps, eps_inner, n, ..Pgm::default() };
        pgm.push_levels(bottom);
        pgm
    }

    /// The bottom level, then each level above up to one root segment.
    fn push_levels(&mut self, bottom: &[Line]) {
        if bottom.is_empty() {
            return;
        }
        self.push_level(bottom);
        while self.levels.last().expect("one level").len > 1 {
            let below = *self.levels.last().expect("one level");
            let points: Vec<(u64, u64)> = (0..below.len).map(|i| (self.first[below.offset + i], i as u64)).collect();
            let lines = fit(points.into_iter(), self.eps_inner);
            self.push_level(&lines);
        }
    }

    fn push_level(&mut self, lines: &[Line]) {
        self.levels.push(Level { offset: self.first.len(), len: lines.len() });
        for l in lines {
            self.first.push(l.first);
            self.slope.push(l.slope);
            self.intercept.push(l.intercept);
        }
    }

    /// Bytes of the model (what the GPU holds without the keys).
    pub fn bytes(&self) -> usize {
        self.first.len() * 24
    }

    /// Segment `s`'s prediction for `k` (>= its first key), clamped to
    /// [0, len) and, as PGM does, to at most the next segment's prediction
    /// at its own first key (where `k` is past the segment's last point,
    /// the line extrapolates), and at least its own at its first key.
    #[inline]
    fn predict(&self, s: usize, k: u64, level: Level, len: usize) -> usize {
        let mut p = self.intercept[s] + self.slope[s] * (k - self.first[s]) as f64;
        if s + 1 < level.offset + level.len {
            p = p.min(self.intercept[s + 1]);
        }
        (p.max(self.intercept[s]).max(0.0) as usize).min(len.saturating_sub(1))
    }

    /// The bottom segment for `k` (>= the first key), by descending every
    /// level (the paper's complete query); and how many windows widened.
    fn bottom_segment(&self, k: u64) -> (usize, u32) {
        let mut misses = 0;
        let top = self.levels.len() - 1;
        let mut s = self.levels[top].offset;
        for l in (1..=top).rev() {
            let below = self.levels[l - 1];
            let (lo, hi) = window(self.predict(s, k, self.levels[l], below.len), self.eps_inner);
            let (i, widened) = rightmost_le(&self.first[below.offset..below.offset + below.len], k, lo, hi);
            misses += widened as u32;
            s = below.offset + i;
        }
        (s, misses)
    }

    /// The first position of `keys` (the keys the model was built on)
    /// holding a key >= q, and how many windows widened on the way.
    pub fn lower_bound_traced(&self, keys: &[u64], q: u64) -> (usize, u32) {
        debug_assert_eq!(keys.len(), self.n);
        if self.n == 0 || q <= keys[0] {
            return (0, 0);
        }
        let (s, misses) = self.bottom_segment(q);
        let (lo, hi) = window(self.predict(s, q, self.levels[0], self.n), self.eps);
        let (p, widened) = lower_bound_in(keys, q, lo, hi);
        (p, misses + widened as u32)
    }

    pub fn lower_bound(&self, keys: &[u64], q: u64) -> usize {
        self.lower_bound_traced(keys, q).0
    }

    /// The bottom level's prediction for `q` (what the GPU's `pgm_predict`
    /// returns).
    pub fn predict_position(&self, q: u64) -> usize {
        if self.n == 0 {
            return 0;
        }
        let k = q.max(self.first[0]);
        let (s, _) = self.bottom_segment(k);
        self.predict(s, k, self.levels[0], self.n)
    }

    /// Lower bounds of every query, on all cores: predictions, then the
    /// last mile.
    pub fn lower_bound_cpu(&self, keys: &[u64], queries: &[u64], out: &mut [u64]) {
        assert_eq!(queries.len(), out.len());
        queries.par_chunks(4096).zip(out.par_chunks_mut(4096)).for_each(|(qs, os)| {
            let predicted: Vec<u64> = qs.iter().map(|&q| self.predict_position(q) as u64).collect();
            self.last_mile_chunk(keys, qs, &predicted, os);
        });
    }

    /// The host's last mile for the GPU's predictions (`gpu`): each
    /// query's lower bound from its bottom-level prediction, on all cores.
    pub fn last_mile(&self, keys: &[u64], queries: &[u64], predicted: &[u64], out: &mut [u64]) {
        assert!(queries.len() == predicted.len() && queries.len() == out.len());
        queries
            .par_chunks(4096)
            .zip(predicted.par_chunks(4096))
            .zip(out.par_chunks_mut(4096))
            .for_each(|((qs, ps), os)| self.last_mile_chunk(keys, qs, ps, os));
    }

    /// The last mile of a few queries at a time: a branchless search of
    /// each window, the group's loads in flight together (as
    /// `sorted_array`'s groups), then a check of the answer's neighbours
    /// (else the widening search).
    fn last_mile_chunk(&self, keys: &[u64], qs: &[u64], ps: &[u64], out: &mut [u64]) {
        const G: usize = 16;
        let n = keys.len();
        let span = 2 * self.eps + 3;
        for ((qg, pg), og) in qs.chunks(G).zip(ps.chunks(G)).zip(out.chunks_mut(G)) {
            let mut base = [0usize; G];
            for (b, &p) in base.iter_mut().zip(pg) {
                *b = window(p as usize, self.eps).0.min(n.saturating_sub(span));
                // Small windows whole; in large ones only the first probe's
                // line (all of theirs would crowd out the group's).
                let (from, to) = if span <= 64 { (*b, *b + span) } else { (*b + span / 2 - 1, *b + span / 2) };
                prefetch(&keys[from.min(n)..to.min(n)]);
            }
            let mut len = span.min(n);
            while len > 1 {
                let half = len / 2;
                for (b, &q) in base.iter_mut().zip(qg) {
                    *b = if keys[*b + half - 1] < q { *b + half } else { *b };
                }
                len -= half;
            }
            for ((o, &q), &b) in og.iter_mut().zip(qg).zip(&base) {
                if n == 0 || q <= keys[0] {
                    *o = 0;
                    continue;
                }
                // The answer is the one position whose neighbours bound q.
                let r = b + (keys[b] < q) as usize;
                let exact = (r == n || keys[r] >= q) && keys[r - 1] < q;
                *o = if exact { r } else { lower_bound_in(keys, q, b, b + span).0 } as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use crate::sorted_array::lower_bound;

    fn sets(n: usize) -> Vec<(&'static str, Vec<u64>)> {
        let mut r = SplitMix64::new(11);
        let mut random: Vec<u64> = (0..n).map(|_| r.next_u64()).collect();
        random.sort_unstable();
        let sequential: Vec<u64> = (0..n as u64).map(|i| 1_600_000_000_000 + i * 1000).collect();
        let mut dups: Vec<u64> = (0..n).map(|_| (r.next_u64() % 1000).pow(3)).collect();
        dups.sort_unstable();
        let mut extremes = vec![0, 0, 1, u64::MAX - 1, u64::MAX, u64::MAX];
        extremes.extend((0..n as u64).map(|i| i * i));
        extremes.sort_unstable();
        vec![("random", random), ("sequential", sequential), ("duplicates", dups), ("extremes", extremes)]
    }

    #[test]
    fn lower_bounds_equal_binary_search_and_fresh_models_never_widen() {
        let mut r = SplitMix64::new(5);
        for (name, keys) in sets(300_000) {
            for (eps, eps_inner) in [(1, 1), (16, 4), (128, 4)] {
                let pgm = Pgm::build(&keys, eps, eps_inner);
                assert_eq!(pgm.levels.last().unwrap().len, 1);
                let mut queries: Vec<u64> = (0..20_000).map(|i| keys[(r.next_u64() as usize + i) % keys.len()]).collect();
                queries.extend((0..20_000).map(|_| r.next_u64()));
                queries.extend((0..2_000).map(|_| keys[r.next_u64() as usize % keys.len()].wrapping_add(1)));
                queries.extend([0, 1, u64::MAX, u64::MAX - 1]);
                let mut misses = 0;
                for &q in &queries {
                    let (got, m) = pgm.lower_bound_traced(&keys, q);
                    assert_eq!(got, lower_bound(&keys, q), "{name} eps {eps}: q = {q}");
                    misses += m;
                }
                assert_eq!(misses, 0, "{name} eps {eps}: windows widened");
                let mut grouped = vec![0; queries.len()];
                pgm.lower_bound_cpu(&keys, &queries, &mut grouped);
                assert!(grouped.iter().zip(&queries).all(|(&g, &q)| g as usize == lower_bound(&keys, q)), "{name} eps {eps}: grouped");
            }
        }
    }

    #[test]
    fn a_wrong_model_costs_time_not_answers() {
        let (_, keys) = sets(50_000).swap_remove(0);
        let mut pgm = Pgm::build(&keys, 8, 4);
        for s in pgm.slope.iter_mut() {
            *s *= 1.7;
        }
        let queries: Vec<u64> = keys.iter().step_by(97).flat_map(|&k| [k, k.wrapping_add(1)]).chain([0, u64::MAX]).collect();
        let mut grouped = vec![0; queries.len()];
        pgm.lower_bound_cpu(&keys, &queries, &mut grouped);
        for (&q, &g) in queries.iter().zip(&grouped) {
            assert_eq!(pgm.lower_bound(&keys, q), lower_bound(&keys, q));
            assert_eq!(g as usize, lower_bound(&keys, q));
        }
    }

    #[test]
    fn a_streamed_fit_is_the_sequential_fit() {
        for (name, keys) in sets(200_000).into_iter().chain([("empty", vec![]), ("one", vec![7]), ("same", vec![5; 1000])]) {
            let mut s = StreamFit::new(16, 4);
            keys.iter().for_each(|&k| s.push(k));
            let (a, b) = (s.finish(), Pgm::build(&keys, 16, 4));
            assert_eq!((a.n, &a.levels, &a.first), (b.n, &b.levels, &b.first), "{name}");
            assert!(a.slope.iter().zip(&b.slope).all(|(x, y)| x.to_bits() == y.to_bits()), "{name}");
            assert!(a.intercept.iter().zip(&b.intercept).all(|(x, y)| x.to_bits() == y.to_bits()), "{name}");
        }
    }

    #[test]
    fn segments_are_few() {
        let (_, keys) = sets(1 << 20).swap_remove(1);
        let pgm = Pgm::build(&keys, 128, 4);
        assert_eq!(pgm.first.len(), 1, "sequential keys are one line");
        let (_, keys) = sets(1 << 20).swap_remove(0);
        let pgm = Pgm::build(&keys, 128, 4);
        assert!(pgm.bytes() < keys.len() * 8 / 100, "random keys: {} bytes of model", pgm.bytes());
        assert!(Pgm::build(&[], 128, 4).levels.is_empty());
    }
}

//! The 64-byte cache line every HB+-tree node is built from, and the SIMD
//! searches over it. Empty key slots hold `MAX`, so a search never needs a
//! node's size: it counts the keys below the query.

/// The padding key of empty slots (and the rightmost separators).
pub const MAX: u64 = u64::MAX;

/// Eight u64 in one 64-byte cache line.
#[repr(C, align(64))]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Line(pub [u64; 8]);

impl Line {
    pub const EMPTY: Line = Line([MAX; 8]);
}

impl Default for Line {
    fn default() -> Self {
        Line::EMPTY
    }
}

// SAFETY: 64 plain bytes, no padding.
unsafe impl crate::gpu::Plain for Line {}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Keys < q among 8 (AVX2: signed compares after flipping sign bits).
    #[target_feature(enable = "avx2")]
    pub unsafe fn rank8(keys: *const u64, q: u64) -> usize {
        let flip = _mm256_set1_epi64x(i64::MIN);
        let qv = _mm256_xor_si256(_mm256_set1_epi64x(q as i64), flip);
        // SAFETY: the caller passes 8 readable keys.
        let (a, b) = unsafe { (_mm256_loadu_si256(keys as *const __m256i), _mm256_loadu_si256(keys.add(4) as *const __m256i)) };
        let (a, b) = (_mm256_xor_si256(a, flip), _mm256_xor_si256(b, flip));
        let lt_a = _mm256_cmpgt_epi64(qv, a);
        let lt_b = _mm256_cmpgt_epi64(qv, b);
        let m = (_mm256_movemask_pd(_mm256_castsi256_pd(lt_a)) | (_mm256_movemask_pd(_mm256_castsi256_pd(lt_b)) << 4)) as u32;
        m.count_ones() as usize
    }

    /// Keys < q among 4.
    #[target_feature(enable = "avx2")]
    pub unsafe fn rank4(keys: *const u64, q: u64) -> usize {
        let flip = _mm256_set1_epi64x(i64::MIN);
        let qv = _mm256_xor_si256(_mm256_set1_epi64x(q as i64), flip);
        // SAFETY: the caller passes 4 readable keys.
        let a = _mm256_xor_si256(unsafe { _mm256_loadu_si256(keys as *const __m256i) }, flip);
        (_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(qv, a))) as u32).count_ones() as usize
    }
}

#[inline(always)]
fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Number of keys below `q` in a sorted 8-key line: the first slot with
/// `q <= key`.
#[inline(always)]
pub fn rank8(keys: &[u64; 8], q: u64) -> usize {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 is present; 8 readable u64.
        return unsafe { avx2::rank8(keys.as_ptr(), q) };
    }
    keys.iter().map(|&k| (k < q) as usize).sum()
}

/// Number of keys below `q` among 4 sorted keys.
#[inline(always)]
pub fn rank4(keys: &[u64; 4], q: u64) -> usize {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: AVX2 is present; 4 readable u64.
        return unsafe { avx2::rank4(keys.as_ptr(), q) };
    }
    keys.iter().map(|&k| (k < q) as usize).sum()
}

/// Lower bound in a sorted slice of any length: branchless binary search
/// down to a window of 8, then one SIMD rank (a leaf page's search).
#[inline]
pub fn lower_bound(keys: &[u64], q: u64) -> usize {
    let mut base = 0usize;
    let mut len = keys.len();
    while len > 8 {
        let half = len / 2;
        // SAFETY: base + half - 1 < base + len <= keys.len().
        base = if unsafe { *keys.get_unchecked(base + half - 1) } < q { base + half } else { base };
        len -= half;
    }
    if len == 8 {
        let w: &[u64; 8] = keys[base..base + 8].try_into().expect("8 keys");
        return base + rank8(w, q);
    }
    base + keys[base..base + len].iter().map(|&k| (k < q) as usize).sum::<usize>()
}

/// The first of `keys` above `q` (a page's upper bound).
#[inline]
pub fn upper_bound(keys: &[u64], q: u64) -> usize {
    match q.checked_add(1) {
        Some(next) => lower_bound(keys, next),
        None => keys.len(),
    }
}

/// The first of `keys` at or above `q`, searched from `from` (from the
/// start where a key before it is not below q): steps doubling from
/// there, then a binary search within the last step (ascending probes of
/// one page land a few entries apart, so this reads a line or two where a
/// search of the whole page reads nine).
pub fn lower_bound_from(keys: &[u64], from: usize, q: u64) -> usize {
    let from = from.min(keys.len());
    let (mut lo, mut step) = (if from > 0 && keys[from - 1] >= q { 0 } else { from }, 1);
    let hi = loop {
        let at = lo + step - 1;
        if at >= keys.len() {
            break keys.len();
        }
        if keys[at] >= q {
            break at;
        }
        lo = at + 1;
        step *= 2;
    };
    lo + lower_bound(&keys[lo..hi], q)
}

/// The first of `keys` at or above `q`, from a predicted slot `at` good
/// to ±eps: the window [at - eps - 1, at + eps + 2) is searched (a line or
/// two where the whole slice's search reads nine), and the whole slice
/// only when the window's neighbours show the answer lies outside it (a
/// wrong prediction costs time, never the answer).
pub fn lower_bound_near(keys: &[u64], q: u64, at: usize, eps: usize) -> usize {
    let n = keys.len();
    let (lo, hi) = crate::pgm::window(at, eps);
    let (lo, hi) = (lo.min(n), hi.min(n));
    let r = lo + lower_bound(&keys[lo..hi], q);
    if (r == 0 || keys[r - 1] < q) && (r == n || keys[r] >= q) {
        r
    } else {
        lower_bound(keys, q)
    }
}

/// Prefetches the cache line holding `p` into all cache levels.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch(p as *const i8, std::arch::x86_64::_MM_HINT_T0)
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    #[test]
    fn lower_bound_from_any_start() {
        let mut rng = SplitMix64::new(9);
        for _ in 0..20_000 {
            let mut k: Vec<u64> = (0..rng.below(40)).map(|_| rng.below(30)).collect();
            k.sort_unstable();
            let q = rng.below(32);
            let from = rng.below(k.len() as u64 + 2) as usize;
            assert_eq!(lower_bound_from(&k, from, q), k.partition_point(|&x| x < q), "{k:?} from {from} q {q}");
        }
    }

    #[test]
    fn lower_bound_near_any_prediction() {
        let mut rng = SplitMix64::new(10);
        for _ in 0..20_000 {
            let mut k: Vec<u64> = (0..rng.below(80)).map(|_| rng.below(60)).collect();
            k.sort_unstable();
            let q = rng.below(62);
            let (at, eps) = (rng.below(k.len() as u64 + 4) as usize, rng.below(6) as usize);
            assert_eq!(lower_bound_near(&k, q, at, eps), k.partition_point(|&x| x < q), "{k:?} at {at} ±{eps} q {q}");
        }
    }

    #[test]
    fn ranks_match_scalar() {
        let mut rng = SplitMix64::new(5);
        for _ in 0..20_000 {
            let mut k = [0u64; 8];
            for x in k.iter_mut() {
                *x = match rng.below(4) {
                    0 => MAX,
                    1 => 0,
                    2 => rng.below(10),
                    _ => rng.next_u64(),
                };
            }
            k.sort_unstable();
            let q = match rng.below(4) {
                0 => MAX,
                1 => 0,
                2 => rng.below(10),
                _ => rng.next_u64(),
            };
            assert_eq!(rank8(&k, q), k.iter().filter(|&&x| x < q).count());
            let k4: [u64; 4] = k[..4].try_into().unwrap();
            assert_eq!(rank4(&k4, q), k4.iter().filter(|&&x| x < q).count());
        }
    }

    #[test]
    fn lower_bound_matches_partition_point() {
        let mut rng = SplitMix64::new(6);
        for n in 0..200 {
            let mut keys: Vec<u64> = (0..n).map(|_| rng.below(50)).collect();
            keys.sort_unstable();
            for q in 0..52 {
                assert_eq!(lower_bound(&keys, q), keys.partition_point(|&k| k < q), "n={n} q={q}");
            }
            assert_eq!(lower_bound(&keys, MAX), keys.partition_point(|&k| k < MAX));
        }
    }
}

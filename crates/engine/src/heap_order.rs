//! Index matches in heap order: a TID (block << 16 | offset, as gpuindex
//! stores them) and up to two small numbers after it. Sorting them first
//! means each heap page is read once, in order.

/// A TID as a u64: block << 16 | offset.
pub type Tid = u64;

/// A match in heap order: its TID, then up to two small non-negative
/// numbers (a position, a rank), compared in that order.
pub trait HeapKey: Copy + Ord + Send + Sync {
    fn fields(&self) -> [u64; 3];
    fn from_fields(f: [u64; 3]) -> Self;
}

impl HeapKey for (Tid, u32) {
    fn fields(&self) -> [u64; 3] {
        [self.0, self.1 as u64, 0]
    }
    fn from_fields(f: [u64; 3]) -> Self {
        (f[0], f[1] as u32)
    }
}

/// (A negative position packs to no code: the comparison sort takes it.)
impl HeapKey for (Tid, i64) {
    fn fields(&self) -> [u64; 3] {
        [self.0, self.1 as u64, 0]
    }
    fn from_fields(f: [u64; 3]) -> Self {
        (f[0], f[1] as i64)
    }
}

impl HeapKey for (Tid, u32, u32) {
    fn fields(&self) -> [u64; 3] {
        [self.0, self.1 as u64, self.2 as u64]
    }
    fn from_fields(f: [u64; 3]) -> Self {
        (f[0], f[1] as u32, f[2] as u32)
    }
}

/// Bits that hold every value up to `max`.
fn width(max: u64) -> u32 {
    64 - max.leading_zeros()
}

/// Matches a thread below which the comparison sort is the faster
/// (`gpuindex-bench heap-order`: on 16 threads codes took 1.2x-1.4x its
/// time for 10^6 matches and 0.6x-0.8x for 4x10^6; on 2 threads 0.4x-0.6x
/// for 10^6).
const CODES_PER_THREAD: usize = 1 << 17;
/// The same for `sort_by_tid` (two radix passes where `sort` takes three):
/// on the H200 host's 16 threads its codes took 0.6x-0.9x the comparison
/// sort's time for 1-2x10^5 matches, 1.2x for 4x10^5, 1.7x-2.5x for
/// 0.7-1.5x10^6 (`gpuindex-bench heap-order`, "codes by TID at any
/// size"): a parallel fused call's searcher sorts pieces of those sizes.
const CODES_PER_THREAD_BY_TID: usize = 1 << 15;

/// Sorts matches into heap order on rayon's threads. Where block, offset
/// and the other fields, each cut to the bits its largest value needs,
/// fit in 64 bits (a 10^7-row table's TIDs and a 2^17-row chunk's rows
/// take 42), and each thread has `CODES_PER_THREAD` of them, they are
/// sorted as codes (`par_sort_codes`: a local profile of a 2.3M-match
/// join had the comparison sort at a fifth of the samples); otherwise by
/// comparison.
pub fn sort<T: HeapKey>(matches: &mut [T]) {
    sort_as(matches, CODES_PER_THREAD, false)
}

/// `sort`, for matches that come in ascending order wherever their TIDs
/// are equal (an index's matches: a TID once, or once for each position
/// that asked for its key, ascending): as codes only their TIDs are
/// sorted, two radix passes of a 10^7-row table's where `sort` takes
/// three with a 131,072-key batch's positions.
pub fn sort_by_tid<T: HeapKey>(matches: &mut [T]) {
    sort_as(matches, CODES_PER_THREAD_BY_TID, true)
}

/// `sort`, with codes where each thread has `per_thread` matches, their
/// TIDs alone sorted where `by_tid` (`sort_by_tid`). Public for the
/// benchmark that chooses `per_thread`.
pub fn sort_as<T: HeapKey>(matches: &mut [T], per_thread: usize, by_tid: bool) {
    use rayon::prelude::*;
    if matches.len() < 1 << 14 {
        matches.sort_unstable();
        return;
    }
    if matches.len() < per_thread * rayon::current_num_threads() {
        matches.par_sort_unstable();
        return;
    }
    let max = matches
        .par_iter()
        .fold(
            || [0u64; 4],
            |m, t| {
                let f = t.fields();
                [m[0].max(f[0] >> 16), m[1].max(f[0] & 0xffff), m[2].max(f[1]), m[3].max(f[2])]
            },
        )
        .reduce(|| [0u64; 4], |a, b| std::array::from_fn(|i| a[i].max(b[i])));
    let w = max.map(width);
    if w.iter().sum::<u32>() > 64 {
        matches.par_sort_unstable();
        return;
    }
    // Fields from the lowest: b, a, offset, block.
    let (sa, so, sb) = (w[3], w[3] + w[2], w[3] + w[2] + w[1]);
    let shl = |x: u64, s: u32| x.checked_shl(s).unwrap_or(0);
    let shr = |x: u64, s: u32| x.checked_shr(s).unwrap_or(0);
    let mask = |x: u64, bits: u32| x & shl(1, bits).wrapping_sub(1);
    let mut codes: Vec<u64> = matches
        .par_iter()
        .map(|t| {
            let f = t.fields();
            shl(f[0] >> 16, sb) | shl(f[0] & 0xffff, so) | shl(f[1], sa) | f[2]
        })
        .collect();
    crate::keys::par_sort_codes_above(&mut codes, if by_tid { so } else { 0 });
    matches.par_iter_mut().zip(codes.par_iter()).for_each(|(t, &c)| {
        let tid = (mask(shr(c, sb), w[0]) << 16) | mask(shr(c, so), w[1]);
        *t = T::from_fields([tid, mask(shr(c, sa), w[2]), mask(c, w[3])]);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    fn check<T: HeapKey + std::fmt::Debug>(mut v: Vec<T>) {
        let mut want = v.clone();
        want.sort_unstable();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let mut by_codes = v.clone();
        let (mut by_tid, mut by_tid_codes) = (v.clone(), v.clone());
        pool.install(|| sort(&mut v));
        pool.install(|| sort_as(&mut by_codes, 1 << 12, false));
        assert_eq!(v, want);
        assert_eq!(by_codes, want);
        // Shuffled, then each TID's matches put back in ascending order
        // in the places they took: what `sort_by_tid` is given.
        for w in [&mut by_tid, &mut by_tid_codes] {
            SplitMix64::new(w.len() as u64).shuffle(w);
            let mut ties: std::collections::HashMap<u64, Vec<T>> = std::collections::HashMap::new();
            for m in w.iter() {
                ties.entry(m.fields()[0]).or_default().push(*m);
            }
            for list in ties.values_mut() {
                list.sort_unstable();
                list.reverse();
            }
            for m in w.iter_mut() {
                *m = ties.get_mut(&m.fields()[0]).and_then(|l| l.pop()).unwrap();
            }
        }
        pool.install(|| sort_by_tid(&mut by_tid));
        pool.install(|| sort_as(&mut by_tid_codes, 1 << 12, true));
        assert_eq!(by_tid, want);
        assert_eq!(by_tid_codes, want);
    }

    fn tid(r: &mut SplitMix64, blocks: u64) -> Tid {
        (r.next_u64() % blocks) << 16 | (1 + r.next_u64() % 291)
    }

    #[test]
    fn sorts_as_a_comparison_sort() {
        let mut r = SplitMix64::new(11);
        // Packed: a 10^7-row table's TIDs with chunk rows, positions, ranks.
        check((0..300_000).map(|_| (tid(&mut r, 54_000), (r.next_u64() % 131_072) as u32)).collect());
        check((0..200_000).map(|_| (tid(&mut r, 54_000), (r.next_u64() % 10_000) as i64)).collect());
        check((0..200_000).map(|_| (tid(&mut r, 54_000), (r.next_u64() % 10_000) as u32, (r.next_u64() % 10) as u32)).collect());
        // Duplicates of one TID, one block, a single field of zeros.
        check((0..100_000).map(|i| (5u64 << 16 | 3, (i % 7) as u32)).collect());
        check((0..100_000).map(|_| (1 + r.next_u64() % 200, 0u32)).collect());
        // Too wide to pack: huge blocks and rows, negative positions.
        check((0..100_000).map(|_| (tid(&mut r, 1 << 40), r.next_u64() as u32)).collect());
        check((0..100_000).map(|_| (tid(&mut r, 1000), (r.next_u64() % 100) as i64 - 50)).collect());
        check((0..100_000).map(|_| (r.next_u64() >> 16 << 16 | 0xffff, u32::MAX, u32::MAX)).collect());
        // Few matches.
        check((0..100).map(|_| (tid(&mut r, 10), 1u32)).collect());
        check(Vec::<(Tid, u32)>::new());
    }
}

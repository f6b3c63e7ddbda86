//! Order-preserving encodings of fixed-width keys as u64, so that every
//! structure compares plain unsigned integers on the CPU and the GPU alike.

/// Signed 64-bit to u64 with the same order: flip the sign bit.
#[inline(always)]
pub fn encode_i64(x: i64) -> u64 {
    (x as u64) ^ (1 << 63)
}

#[inline(always)]
pub fn decode_i64(k: u64) -> i64 {
    (k ^ (1 << 63)) as i64
}

const CANONICAL_NAN: u64 = 0x7FF8_0000_0000_0000;

/// f64 to u64 in PostgreSQL's float order: -Infinity < ... < -0 < +0 < ...
/// < +Infinity < NaN. Exact bits are kept (-0 and +0 get adjacent codes;
/// callers treat them as equal), except that every NaN becomes one NaN.
#[inline(always)]
pub fn encode_f64(x: f64) -> u64 {
    let b = if x.is_nan() { CANONICAL_NAN } else { x.to_bits() };
    if b >> 63 == 1 {
        !b
    } else {
        b | (1 << 63)
    }
}

#[inline(always)]
pub fn decode_f64(k: u64) -> f64 {
    f64::from_bits(if k >> 63 == 1 { k & !(1 << 63) } else { !k })
}

/// Sorts codes ascending: many of them (an `= ANY` of 128K keys) by an
/// LSD radix sort of 16-bit digits, skipping the digits all of them share
/// (keys within 2^32 of each other take two passes), which takes about a
/// third of a comparison sort's time; few by a comparison sort.
pub fn sort_codes(v: &mut Vec<u64>) {
    if v.len() < 1 << 14 {
        v.sort_unstable();
        return;
    }
    let mut tmp = vec![0u64; v.len()];
    let mut counts = vec![0usize; 1 << 16];
    for shift in (0..64).step_by(16) {
        let digit = |k: u64| ((k >> shift) & 0xFFFF) as usize;
        counts.fill(0);
        for &k in v.iter() {
            counts[digit(k)] += 1;
        }
        if counts[digit(v[0])] == v.len() {
            continue;
        }
        let mut sum = 0;
        for c in counts.iter_mut() {
            (*c, sum) = (sum, sum + *c);
        }
        for &k in v.iter() {
            let d = digit(k);
            tmp[counts[d]] = k;
            counts[d] += 1;
        }
        std::mem::swap(v, &mut tmp);
    }
}

/// Sorts codes ascending on all of rayon's threads: an LSD radix sort of
/// their distance from the smallest, in as few passes of at most 14 bits
/// as its width allows (42 bits: three), each pass counted and then
/// scattered by every thread over its own slice (slices placed in order,
/// so each pass is stable). With millions of codes a thread it beats a
/// parallel comparison sort (`heap_order::sort`: 0.6x-0.8x its time for
/// 4x10^6 on 16 threads); few codes, or one thread, go to `sort_codes`.
pub fn par_sort_codes(v: &mut Vec<u64>) {
    par_sort_codes_above(v, 0)
}

/// `par_sort_codes` for codes that come in ascending order wherever they
/// are equal from bit `low` up: only those bits are sorted (fewer
/// passes), each pass stable, so the result is a full sort's.
pub fn par_sort_codes_above(v: &mut Vec<u64>, low: u32) {
    use rayon::prelude::*;
    let threads = rayon::current_num_threads();
    if v.len() < 1 << 16 || threads == 1 || low >= 64 {
        sort_codes(v);
        return;
    }
    let (lo, hi) = v
        .par_iter()
        .fold(|| (u64::MAX, 0), |(a, b), &k| (a.min(k >> low), b.max(k >> low)))
        .reduce(|| (u64::MAX, 0), |x, y| (x.0.min(y.0), x.1.max(y.1)));
    let bits = 64 - (hi - lo).leading_zeros();
    if bits == 0 {
        return;
    }
    let passes = bits.div_ceil(14);
    let digit_bits = bits.div_ceil(passes);
    let buckets = 1usize << digit_bits;
    let chunk = v.len().div_ceil(threads);
    // Not zeroed (a memset of the whole batch on the calling thread): the
    // first pass writes each position before anything reads it.
    let mut tmp: Vec<u64> = Vec::with_capacity(v.len());
    struct Out(*mut u64);
    // SAFETY: each slice writes only its own positions (disjoint by the
    // counts).
    unsafe impl Sync for Out {}
    for pass in 0..passes {
        let shift = pass * digit_bits;
        let digit = |k: u64| (((k >> low) - lo) >> shift) as usize & (buckets - 1);
        let counts: Vec<Vec<usize>> = v
            .par_chunks(chunk)
            .map(|c| {
                let mut h = vec![0usize; buckets];
                for &k in c {
                    h[digit(k)] += 1;
                }
                h
            })
            .collect();
        // Where each slice's codes of each digit go.
        let mut at: Vec<Vec<usize>> = vec![vec![0; buckets]; counts.len()];
        let mut sum = 0;
        for d in 0..buckets {
            for (c, h) in counts.iter().enumerate() {
                at[c][d] = sum;
                sum += h[d];
            }
        }
        let dst = Out(tmp.as_mut_ptr());
        v.par_chunks(chunk).zip(at.into_par_iter()).for_each(|(c, mut at)| {
            let dst = &dst;
            for &k in c {
                let d = digit(k);
                // SAFETY: below v.len(), each position written once.
                unsafe { dst.0.add(at[d]).write(k) };
                at[d] += 1;
            }
        });
        // SAFETY: the pass wrote each of the v.len() positions once (the
        // counts place every code), within tmp's capacity.
        unsafe { tmp.set_len(v.len()) };
        std::mem::swap(v, &mut tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i64_order_and_round_trip() {
        let xs = [i64::MIN, i64::MIN + 1, -2, -1, 0, 1, 2, i64::MAX - 1, i64::MAX];
        for w in xs.windows(2) {
            assert!(encode_i64(w[0]) < encode_i64(w[1]));
        }
        for x in xs {
            assert_eq!(decode_i64(encode_i64(x)), x);
        }
    }

    #[test]
    fn f64_order_and_round_trip() {
        let xs = [f64::NEG_INFINITY, -1e300, -1.0, -f64::MIN_POSITIVE, -0.0, 0.0, f64::MIN_POSITIVE, 1.0, 1e300, f64::INFINITY, f64::NAN];
        for w in xs.windows(2) {
            assert!(encode_f64(w[0]) < encode_f64(w[1]), "{} < {}", w[0], w[1]);
        }
        assert_eq!(encode_f64(f64::NAN), encode_f64(-f64::NAN));
        assert_eq!(encode_f64(-0.0) + 1, encode_f64(0.0));
        for x in xs {
            let back = decode_f64(encode_f64(x));
            assert!(back.to_bits() == x.to_bits() || (x.is_nan() && back.is_nan()));
        }
    }

    #[test]
    fn sort_codes_equals_a_comparison_sort() {
        let mut r = crate::rng::SplitMix64::new(3);
        let sets: Vec<Vec<u64>> = vec![
            (0..100_000).map(|_| r.next_u64()).collect(),
            (0..70_000).map(|_| encode_i64((r.next_u64() % 100_000_000) as i64)).collect(),
            (0..50_000).map(|_| encode_i64(-((r.next_u64() % 1000) as i64))).collect(),
            vec![42; 20_000],
            (0..3_000).map(|_| r.next_u64() % 10).collect(),
        ];
        for mut v in sets {
            let mut want = v.clone();
            want.sort_unstable();
            sort_codes(&mut v);
            assert_eq!(v, want);
        }
    }

    #[test]
    fn par_sort_codes_equals_a_comparison_sort() {
        let mut r = crate::rng::SplitMix64::new(5);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap();
        let sets: Vec<Vec<u64>> = vec![
            (0..300_000).map(|_| r.next_u64()).collect(),
            (0..200_000).map(|_| ((r.next_u64() % 54_000) << 25) | ((r.next_u64() % 200) << 17) | (r.next_u64() % 131_072)).collect(),
            // Skewed: one far outlier widens every code's digits.
            (0..150_000).map(|i| if i == 7 { u64::MAX } else { r.next_u64() % 1000 }).collect(),
            vec![42; 100_000],
            (0..70_000).map(|i| i as u64).rev().collect(),
            (0..1_000).map(|_| r.next_u64()).collect(),
        ];
        for mut v in sets {
            let mut want = v.clone();
            want.sort_unstable();
            pool.install(|| par_sort_codes(&mut v));
            assert_eq!(v, want);
        }
    }
}

//! Distances between float4 vectors. `Metric::distance` is what the SQL
//! operators return, and the only code that decides an answer, so an index
//! scan and a sequential scan agree to the last bit. It sums in float8, in
//! eight fixed lanes (vectorisable, and the same order wherever it runs).
//!
//! Strings are vectors too (`Metric::Levenshtein`): their characters as
//! code numbers (exact in float4 below 2^24), zero-padded to the index's
//! width (no character is zero: PostgreSQL text holds no NUL), so the
//! tree, its pages, its images and its GPU searches carry them unchanged.
//!
//! The tree prunes in a true metric: L2 and L1 as they are; for cosine
//! distance (1 - cos, not a metric) the angle acos(cos), which orders
//! alike. Rounding can break the triangle inequality by a few ulps, so
//! every bound the tree derives is loosened (`lower_bound`) before it
//! prunes anything.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Metric {
    L2 = 1,
    L1 = 2,
    Cosine = 3,
    /// Edit distance (insertions, deletions, substitutions of one
    /// character, each 1) between zero-padded strings. 5: the operator
    /// classes' strategy 4 is the ball.
    Levenshtein = 5,
}

/// The longest string an index of `Metric::Levenshtein` holds (as
/// fuzzystrmatch's `levenshtein`; the GPU keeps one row of the dynamic
/// program per thread).
pub const MAX_CHARS: usize = 255;

/// Character codes below this are exact in float4.
pub const CODE_LIMIT: u32 = 1 << 24;

/// A string as an index of `width` characters holds it: its character
/// codes (each below `CODE_LIMIT`), zero-padded. None when it is longer.
pub fn string_vector(codes: impl IntoIterator<Item = u32>, width: usize) -> Option<Vec<f32>> {
    let mut v: Vec<f32> = codes.into_iter().map(|c| c as f32).collect();
    (v.len() <= width).then(|| {
        v.resize(width, 0.0);
        v
    })
}

/// The characters of a zero-padded string (the padding is all at the
/// end, so a binary search finds it).
#[inline]
fn chars(a: &[f32]) -> &[f32] {
    &a[..a.partition_point(|&c| c != 0.0)]
}

/// The edit distance of two zero-padded strings: the common prefix and
/// suffix cost nothing, then one row of the dynamic program over the
/// shorter (kernels/gts.cu's `edit_distance` is the same).
pub fn edit_distance(a: &[f32], b: &[f32]) -> f64 {
    edit_distance_within(a, b, f64::INFINITY)
}

/// The edit distance where it is at most `bound`; otherwise some number
/// above `bound` (a lower bound of it). A search that keeps only what is
/// within its radius needs no more: the length difference alone, or a
/// row of the program whose every cell plus the edits still needed to
/// reach the end exceeds the bound, settles most pairs early. (Myers'
/// bit-vector algorithm was no faster here for dictionary words: the
/// scans for the lengths and the common prefix cost as much as the row.)
pub fn edit_distance_within(a: &[f32], b: &[f32], bound: f64) -> f64 {
    let (mut a, mut b) = (chars(a), chars(b));
    let p = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    (a, b) = (&a[p..], &b[p..]);
    let s = a.iter().rev().zip(b.iter().rev()).take_while(|(x, y)| x == y).count();
    (a, b) = (&a[..a.len() - s], &b[..b.len() - s]);
    if a.len() < b.len() {
        std::mem::swap(&mut a, &mut b);
    }
    let (m, n) = (a.len(), b.len());
    if (m - n) as f64 > bound {
        return (m - n) as f64;
    }
    let mut short = [0u32; 64];
    let mut long = Vec::new();
    let row: &mut [u32] = if n < short.len() {
        &mut short[..=n]
    } else {
        long.resize(n + 1, 0);
        &mut long
    };
    for (j, r) in row.iter_mut().enumerate() {
        *r = j as u32;
    }
    for (i, &ca) in a.iter().enumerate() {
        let mut diag = row[0];
        row[0] = i as u32 + 1;
        // Characters of a left after this row: a cell at column j still
        // needs |left - (n - j)| edits.
        let left = (m - i - 1) as i64;
        let mut lb = row[0] as i64 + (left - n as i64).abs();
        for (j, &cb) in b.iter().enumerate() {
            let up = row[j + 1];
            let v = (up + 1).min(row[j] + 1).min(diag + u32::from(ca != cb));
            row[j + 1] = v;
            diag = up;
            lb = lb.min(v as i64 + (left - (n - j - 1) as i64).abs());
        }
        if lb as f64 > bound {
            return lb as f64;
        }
    }
    row[n] as f64
}

const LANES: usize = 8;

/// Sums `f(a[i], b[i])` in float8 over eight lanes, then the lanes in a
/// fixed tree, then the tail in order.
#[inline]
fn lane_sum(a: &[f32], b: &[f32], f: impl Fn(f64, f64) -> f64) -> f64 {
    let mut acc = [0f64; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] += f(x[l] as f64, y[l] as f64);
        }
    }
    let mut s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += f(*x as f64, *y as f64);
    }
    s
}

/// The dot product in float8 lanes (what the cosine distance uses; a
/// vector's squared norm is `dot(v, v)`).
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    lane_sum(a, b, |x, y| x * y)
}

/// Relative slack of every bound: float8 sums of up to 16,000 products
/// are off by far less (about 2e-12 relative).
const RELATIVE_SLACK: f64 = 1e-9;
/// Absolute slack of angles: acos near 0 and pi turns a 1e-16 error in
/// the cosine into about 1e-8 radians.
const ANGLE_SLACK: f64 = 1e-6;

impl Metric {
    pub const ALL: [Metric; 4] = [Metric::L2, Metric::L1, Metric::Cosine, Metric::Levenshtein];

    pub fn from_code(c: u8) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| *m as u8 == c)
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::L2 => "L2",
            Metric::L1 => "L1",
            Metric::Cosine => "cosine",
            Metric::Levenshtein => "Levenshtein",
        }
    }

    /// The distance the SQL operator returns: Euclidean, Manhattan,
    /// 1 - cos (the cosine clamped to [-1, 1]), or the edit distance.
    /// Vectors of equal length; cosine needs non-zero vectors (NaN
    /// otherwise).
    pub fn distance(self, a: &[f32], b: &[f32]) -> f64 {
        debug_assert!(a.len() == b.len() || self == Metric::Levenshtein);
        match self {
            Metric::Levenshtein => edit_distance(a, b),
            Metric::L2 => lane_sum(a, b, |x, y| (x - y) * (x - y)).sqrt(),
            Metric::L1 => lane_sum(a, b, |x, y| (x - y).abs()),
            Metric::Cosine => {
                let dot = lane_sum(a, b, |x, y| x * y);
                let (na, nb) = (lane_sum(a, a, |x, y| x * y), lane_sum(b, b, |x, y| x * y));
                1.0 - (dot / (na.sqrt() * nb.sqrt())).clamp(-1.0, 1.0)
            }
        }
    }

    /// The distance where it is at most `bound` (exact: the same bits as
    /// `distance`); otherwise some number above `bound`. Edit distance
    /// stops early; the others compute it whole.
    #[inline]
    pub fn distance_within(self, a: &[f32], b: &[f32], bound: f64) -> f64 {
        match self {
            Metric::Levenshtein => edit_distance_within(a, b, bound),
            _ => self.distance(a, b),
        }
    }

    /// A distance in the tree's metric (the angle for cosine).
    pub fn to_metric(self, d: f64) -> f64 {
        match self {
            Metric::Cosine => (1.0 - d).clamp(-1.0, 1.0).acos(),
            _ => d,
        }
    }

    /// The tree-metric distance between two vectors.
    pub fn metric_distance(self, a: &[f32], b: &[f32]) -> f64 {
        self.to_metric(self.distance(a, b))
    }

    /// A lower bound, in the operator's units, of the distance of any
    /// object `o` to the query when the tree's metric says `d(o, q) >= lb`
    /// holds for values of magnitude up to `scale`, loosened for rounding.
    pub fn lower_bound(self, lb: f64, scale: f64) -> f64 {
        let lb = lb - RELATIVE_SLACK * scale;
        match self {
            Metric::Cosine => {
                let angle = lb - ANGLE_SLACK;
                if angle <= 0.0 {
                    0.0
                } else {
                    // 1 - cos is exact to about 1e-16; loosen by as much.
                    (1.0 - angle.min(std::f64::consts::PI).cos() - 1e-15).max(0.0)
                }
            }
            _ => lb.max(0.0),
        }
    }

    /// The ring lower bound of a node whose objects lie at tree-metric
    /// distances [min, max] from a pivot at distance `dq` from the query
    /// (the triangle inequality on both sides), in operator units.
    pub fn ring_bound(self, dq: f64, min: f64, max: f64) -> f64 {
        self.lower_bound((min - dq).max(dq - max).max(0.0), dq + max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_match_definitions() {
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        let b = [2.0f32, 2.0, 1.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 12.0];
        assert_eq!(Metric::L2.distance(&a, &b), 3.0);
        assert_eq!(Metric::L1.distance(&a, &b), 5.0);
        let c = [1.0f32, 0.0];
        let d = [0.0f32, 3.0];
        assert_eq!(Metric::Cosine.distance(&c, &d), 1.0);
        assert_eq!(Metric::Cosine.distance(&c, &c), 0.0);
        assert!((Metric::Cosine.to_metric(1.0) - std::f64::consts::FRAC_PI_2).abs() < 1e-15);
    }

    fn padded(s: &str, width: usize) -> Vec<f32> {
        string_vector(s.chars().map(|c| c as u32), width).expect("fits")
    }

    /// The textbook dynamic program over the whole matrix.
    fn textbook(a: &str, b: &str) -> f64 {
        let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
        for i in 0..=a.len() {
            for j in 0..=b.len() {
                d[i][j] = if i == 0 || j == 0 {
                    i + j
                } else {
                    (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + usize::from(a[i - 1] != b[j - 1]))
                };
            }
        }
        d[a.len()][b.len()] as f64
    }

    #[test]
    fn edit_distances_match_the_textbook() {
        let words = ["", "a", "kitten", "sitting", "saturday", "sunday", "flaw", "lawn", "ab", "ba", "aaaa", "été", "ete", "東京", "京都"];
        for a in words {
            for b in words {
                assert_eq!(Metric::Levenshtein.distance(&padded(a, 9), &padded(b, 9)), textbook(a, b), "{a:?} {b:?}");
            }
        }
        let mut rng = crate::rng::SplitMix64::new(5);
        for _ in 0..2000 {
            let mut word = |n: u64| -> String { (0..rng.below(n)).map(|_| (b'a' + rng.below(3) as u8) as char).collect() };
            let (a, b) = (word(14), word(14));
            assert_eq!(edit_distance(&padded(&a, 14), &padded(&b, 14)), textbook(&a, &b), "{a:?} {b:?}");
        }
        for _ in 0..2000 {
            // The bit-vector algorithm up to 64 characters, the row beyond.
            let mut word = |n: u64| -> String { (0..rng.below(n)).map(|_| (b'a' + rng.below(3) as u8) as char).collect() };
            let (a, b) = (word(90), word(90));
            assert_eq!(edit_distance(&padded(&a, 90), &padded(&b, 90)), textbook(&a, &b), "{a:?} {b:?}");
        }
        let long: String = "ab".repeat(200);
        assert_eq!(edit_distance(&padded(&long, 400), &padded(&long[1..], 400)), 1.0);
        // Within a bound: exact up to it, above it otherwise.
        for _ in 0..3000 {
            let mut word = |n: u64| -> String { (0..rng.below(n)).map(|_| (b'a' + rng.below(4) as u8) as char).collect() };
            let (a, b) = (word(12), word(12));
            let d = textbook(&a, &b);
            for bound in [0.0, 1.0, 2.0, 3.5, 6.0] {
                let got = edit_distance_within(&padded(&a, 12), &padded(&b, 12), bound);
                assert!(if d <= bound { got == d } else { got > bound && got <= d }, "{a:?} {b:?} bound {bound}: {got}, distance {d}");
            }
        }
    }
}

//! Distances between float4 vectors. `Metric::distance` is what the SQL
//! operators return, and the only code that decides an answer, so an index
//! scan and a sequential scan agree to the last bit. It sums in float8, in
//! eight fixed lanes (vectorisable, and the same order wherever it runs).
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
    pub fn from_code(c: u8) -> Option<Metric> {
        [Metric::L2, Metric::L1, Metric::Cosine].into_iter().find(|m| *m as u8 == c)
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::L2 => "L2",
            Metric::L1 => "L1",
            Metric::Cosine => "cosine",
        }
    }

    /// The distance the SQL operator returns: Euclidean, Manhattan, or
    /// 1 - cos (the cosine clamped to [-1, 1]). Vectors of equal length;
    /// cosine needs non-zero vectors (NaN otherwise).
    pub fn distance(self, a: &[f32], b: &[f32]) -> f64 {
        debug_assert_eq!(a.len(), b.len());
        match self {
            Metric::L2 => lane_sum(a, b, |x, y| (x - y) * (x - y)).sqrt(),
            Metric::L1 => lane_sum(a, b, |x, y| (x - y).abs()),
            Metric::Cosine => {
                let dot = lane_sum(a, b, |x, y| x * y);
                let (na, nb) = (lane_sum(a, a, |x, y| x * y), lane_sum(b, b, |x, y| x * y));
                1.0 - (dot / (na.sqrt() * nb.sqrt())).clamp(-1.0, 1.0)
            }
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
}

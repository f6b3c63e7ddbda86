//! Bounds on distances computed in single precision by code outside
//! gpuindex (pgvector's operators): they sum float4s in an order their
//! compiler picks (vectorized, with FMA), so their value can differ from
//! `Metric::distance` (float8 lanes) in the last bits. `lower_bound` is
//! proven to be at most any such value, and is monotone in the exact
//! distance, so an index can return rows ordered by it and let the
//! executor recheck (PostgreSQL's `xs_recheckorderby`).
//!
//! Why it holds: each float4 operation rounds once (relative error at most
//! u = 2^-24), and each term passes through at most `dim` of them whatever
//! the summation tree, so a sum of non-negative terms (L2's squares, L1's
//! absolute differences) is at least its exact value times
//! 1 - (dim + 2) u; a cosine similarity is within about 2 dim u of the
//! exact one (the dot product's error plus both norms'), given norms whose
//! products neither underflow (where relative precision is lost) nor
//! overflow (`cosine_safe`). The bound takes twice that slack, which also
//! covers `Metric::distance`'s own float8 error. L2's squares can
//! underflow: tiny distances are bounded by 0.

use super::Metric;

/// Twice float4's unit roundoff.
const ROUNDOFF2: f64 = f32::EPSILON as f64;

/// Whether a float4 cosine of `v` with another such vector stays within
/// `lower_bound`'s slack: its squared norm in [2^-60, 2^120].
pub fn cosine_safe(v: &[f32]) -> bool {
    let n2: f64 = v.iter().map(|&x| x as f64 * x as f64).sum();
    (2f64.powi(-60)..=2f64.powi(120)).contains(&n2)
}

/// A lower bound of any single-precision evaluation of `metric` between
/// two `dim`-element vectors whose exact distance is `d`. For cosine both
/// vectors must be `cosine_safe` (`both_safe`), else the bound is 0.
pub fn lower_bound(metric: Metric, dim: usize, d: f64, both_safe: bool) -> f64 {
    let slack = (dim as f64 + 8.0) * ROUNDOFF2;
    match metric {
        Metric::L2 if d * d < dim as f64 * 2f64.powi(-120) => 0.0,
        Metric::L2 | Metric::L1 => d * (1.0 - slack).max(0.0),
        Metric::Cosine if both_safe => (d - 2.0 * slack).max(0.0),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A float4 evaluation as pgvector's C code may do it: `lanes`
    /// accumulators, then their sum, with or without FMA.
    fn float4(metric: Metric, a: &[f32], b: &[f32], lanes: usize, fma: bool) -> f64 {
        let (mut s, mut na, mut nb) = (vec![0f32; lanes], vec![0f32; lanes], vec![0f32; lanes]);
        let add = |acc: &mut f32, x: f32, y: f32| *acc = if fma { x.mul_add(y, *acc) } else { *acc + x * y };
        for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
            let l = i % lanes;
            match metric {
                Metric::L2 => add(&mut s[l], x - y, x - y),
                Metric::L1 => s[l] += (x - y).abs(),
                _ => {
                    add(&mut s[l], x, y);
                    add(&mut na[l], x, x);
                    add(&mut nb[l], y, y);
                }
            }
        }
        let sum = |v: &[f32]| v.iter().rev().sum::<f32>() as f64;
        match metric {
            Metric::L2 => sum(&s).sqrt(),
            Metric::L1 => sum(&s),
            _ => 1.0 - (sum(&s) / (sum(&na) * sum(&nb)).sqrt()).clamp(-1.0, 1.0),
        }
    }

    #[test]
    fn lower_bound_is_below_every_float4_evaluation() {
        let mut seed = 7u64;
        let mut rnd = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        for metric in [Metric::L2, Metric::L1, Metric::Cosine] {
            for dim in [1, 3, 128, 1536, 16000] {
                for scale in [1e-22f32, 1e-3, 1.0, 1e15] {
                    for near in [0.0f32, 1e-6, 1e-3, 1.0] {
                        let a: Vec<f32> = (0..dim).map(|_| rnd() * scale).collect();
                        let b: Vec<f32> = a.iter().map(|x| x + rnd() * scale * near).collect();
                        let exact = metric.distance(&a, &b);
                        let lb = lower_bound(metric, dim, exact, cosine_safe(&a) && cosine_safe(&b));
                        assert!(lb <= exact && lb >= 0.0);
                        for (lanes, fma) in [(1, false), (8, true), (16, false)] {
                            let f = float4(metric, &a, &b, lanes, fma);
                            // (PostgreSQL orders NaN above every number.)
                            assert!(lb <= f || f.is_nan(), "{metric:?} dim {dim} scale {scale} near {near}: {lb} > {f}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn lower_bound_is_close_and_monotone() {
        for metric in [Metric::L2, Metric::L1, Metric::Cosine] {
            let lb = |d| lower_bound(metric, 128, d, true);
            assert!(lb(1.0) > 0.999 && lb(1.0) < 1.0);
            assert!(lb(0.5) <= lb(0.5000001) && lb(0.0) == 0.0);
        }
        assert_eq!(lower_bound(Metric::Cosine, 128, 1.0, false), 0.0);
    }
}

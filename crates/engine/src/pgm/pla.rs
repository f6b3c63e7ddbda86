//! The optimal ε-bounded piecewise-linear approximation (O'Rourke's
//! streaming algorithm, as the PGM-index uses it): points (x, y) with
//! strictly increasing x go into the current segment while some line stays
//! within ±ε of every point; the convex hulls of the upper (y + ε) and
//! lower (y - ε) points and the rectangle of the extreme slopes are kept
//! incrementally, so each point costs amortized O(1). The segment count is
//! the minimum for ε. Coordinates are exact integers (i128: keys are u64,
//! positions below 2^63), only the final line is floating point.

/// A point, or a difference of points (a slope dy/dx, dx > 0).
#[derive(Clone, Copy, Debug, Default)]
struct P {
    x: i128,
    y: i128,
}

impl std::ops::Sub for P {
    type Output = P;
    fn sub(self, o: P) -> P {
        P { x: self.x - o.x, y: self.y - o.y }
    }
}

/// a < b as slopes (both dx > 0).
fn less(a: P, b: P) -> bool {
    a.y * b.x < b.y * a.x
}

fn cross(o: P, a: P, b: P) -> i128 {
    let (oa, ob) = (a - o, b - o);
    oa.x * ob.y - oa.y * ob.x
}

/// One segment: the first x it covers and a line through it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Line {
    pub first: u64,
    pub slope: f64,
    /// The line's value at `first`.
    pub intercept: f64,
}

/// The streaming fit of one segment at a time.
pub struct Pla {
    eps: i128,
    upper: Vec<P>,
    lower: Vec<P>,
    upper_start: usize,
    lower_start: usize,
    points: usize,
    first: u64,
    last: u64,
    rect: [P; 4],
}

impl Pla {
    pub fn new(eps: usize) -> Pla {
        Pla {
            eps: eps as i128,
            upper: Vec::new(),
            lower: Vec::new(),
            upper_start: 0,
            lower_start: 0,
            points: 0,
            first: 0,
            last: 0,
            rect: [P::default(); 4],
        }
    }

    /// Adds (x, y) to the current segment if a line within ε still fits
    /// (true); else leaves the segment as it was (false: take it with
    /// `line`, then `add` the point again to start the next one).
    pub fn add(&mut self, x: u64, y: u64) -> bool {
        debug_assert!(self.points == 0 || x > self.last, "x must increase");
        let (p1, p2) = (P { x: x as i128, y: y as i128 + self.eps }, P { x: x as i128, y: y as i128 - self.eps });
        if self.points == 0 {
            self.first = x;
            self.rect[0] = p1;
            self.rect[1] = p2;
            self.upper.clear();
            self.lower.clear();
            self.upper.push(p1);
            self.lower.push(p2);
            self.upper_start = 0;
            self.lower_start = 0;
            self.points = 1;
            self.last = x;
            return true;
        }
        if self.points == 1 {
            self.rect[2] = p2;
            self.rect[3] = p1;
            self.upper.push(p1);
            self.lower.push(p2);
            self.points = 2;
            self.last = x;
            return true;
        }
        let slope1 = self.rect[2] - self.rect[0];
        let slope2 = self.rect[3] - self.rect[1];
        if less(p1 - self.rect[2], slope1) || less(slope2, p2 - self.rect[3]) {
            return false;
        }
        if less(p1 - self.rect[1], slope2) {
            // The new steepest line through the upper point: from the lower
            // hull's point of minimum slope to p1.
            let mut min = self.lower[self.lower_start] - p1;
            let mut at = self.lower_start;
            for i in self.lower_start + 1..self.lower.len() {
                let v = self.lower[i] - p1;
                if less(min, v) {
                    break;
                }
                (min, at) = (v, i);
            }
            self.rect[1] = self.lower[at];
            self.rect[3] = p1;
            self.lower_start = at;
            let mut end = self.upper.len();
            while end >= self.upper_start + 2 && cross(self.upper[end - 2], self.upper[end - 1], p1) <= 0 {
                end -= 1;
            }
            self.upper.truncate(end);
            self.upper.push(p1);
        }
        if less(slope1, p2 - self.rect[0]) {
            let mut max = self.upper[self.upper_start] - p2;
            let mut at = self.upper_start;
            for i in self.upper_start + 1..self.upper.len() {
                let v = self.upper[i] - p2;
                if less(v, max) {
                    break;
                }
                (max, at) = (v, i);
            }
            self.rect[0] = self.upper[at];
            self.rect[2] = p2;
            self.upper_start = at;
            let mut end = self.lower.len();
            while end >= self.lower_start + 2 && cross(self.lower[end - 2], self.lower[end - 1], p2) >= 0 {
                end -= 1;
            }
            self.lower.truncate(end);
            self.lower.push(p2);
        }
        self.points += 1;
        self.last = x;
        true
    }

    /// The current segment's line (a point of it: the two extreme lines'
    /// intersection; the slope: the middle of their slopes), and a fresh
    /// segment for the next `add`.
    pub fn line(&mut self) -> Line {
        let points = std::mem::take(&mut self.points);
        let [p0, p1, p2, p3] = self.rect;
        if points == 1 {
            return Line { first: self.first, slope: 0.0, intercept: ((p0.y + p1.y) / 2) as f64 };
        }
        let (s1, s2) = (p2 - p0, p3 - p1);
        let slope = (s1.y as f64 / s1.x as f64 + s2.y as f64 / s2.x as f64) / 2.0;
        // The intersection, relative to p0 (exact numerators, one division).
        let a = s1.x * s2.y - s1.y * s2.x;
        let (ix, iy) = if a == 0 {
            (0.0, 0.0)
        } else {
            let b = (p1.x - p0.x) * (p3.y - p1.y) - (p1.y - p0.y) * (p3.x - p1.x);
            (b as f64 * s1.x as f64 / a as f64, b as f64 * s1.y as f64 / a as f64)
        };
        // The line's value at `first`: p0.x + ix is the intersection's x
        // (p0.x - first exactly: both may be near 2^64, where an f64 is
        // off by thousands).
        let at_first = p0.y as f64 + iy - ((p0.x - self.first as i128) as f64 + ix) * slope;
        Line { first: self.first, slope, intercept: at_first }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Segments of the points, each with the points it covers.
    fn fit(points: &[(u64, u64)], eps: usize) -> Vec<(Line, Vec<(u64, u64)>)> {
        let mut pla = Pla::new(eps);
        let mut out: Vec<(Line, Vec<(u64, u64)>)> = Vec::new();
        let mut cur = Vec::new();
        for &(x, y) in points {
            if !pla.add(x, y) {
                out.push((pla.line(), std::mem::take(&mut cur)));
                assert!(pla.add(x, y));
            }
            cur.push((x, y));
        }
        out.push((pla.line(), cur));
        out
    }

    #[test]
    fn every_point_is_within_eps_and_segments_are_few() {
        let mut rng = crate::rng::SplitMix64::new(3);
        for eps in [1usize, 4, 16, 64] {
            for shape in 0..5 {
                // Shape 4: unit gaps near 2^63, where SQL's int8 keys near 0 are encoded.
                let mut x = if shape == 4 { 1 << 63 } else { 0 };
                let points: Vec<(u64, u64)> = (0..20_000u64)
                    .map(|i| {
                        x += match shape {
                            0 => 1,
                            1 => 1 + rng.next_u64() % 1000,
                            2 => 1 + (rng.next_u64() % 1000).pow(3),
                            3 => 1 + rng.next_u64() % (1 << 40),
                            _ => 1,
                        };
                        (x, i)
                    })
                    .collect();
                let segs = fit(&points, eps);
                for (line, covered) in &segs {
                    for &(x, y) in covered {
                        let p = line.intercept + line.slope * (x - line.first) as f64;
                        assert!((p - y as f64).abs() <= eps as f64 + 1e-6, "eps {eps} shape {shape}: {p} vs {y}");
                    }
                }
                if shape == 0 || shape == 4 {
                    assert_eq!(segs.len(), 1, "shape {shape}");
                }
                // Any two points fit a line: an optimal fit has at most
                // half as many segments; near-regular gaps far fewer.
                assert!(segs.len() <= points.len().div_ceil(2));
                if shape == 1 && eps >= 16 {
                    assert!(segs.len() < points.len() / eps, "eps {eps}: {} segments", segs.len());
                }
            }
        }
    }
}

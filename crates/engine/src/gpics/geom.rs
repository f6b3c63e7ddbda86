//! PostgreSQL's point predicates, reproduced bit for bit, so that the CPU
//! and the GPU answer exactly what `point <@ box`, `point <@ circle`,
//! `point ~= point` and `point <-> point` answer (PostgreSQL 15
//! geo_ops.c): boxes are exact and border-inclusive, circles compare
//! `pg_hypot(dx, dy) <= r` exactly, `~=` is fuzzy by EPSILON (NaNs compare
//! exactly), distances are pg_hypot.

/// PostgreSQL's EPSILON for fuzzy point equality.
pub const EPSILON: f64 = 1.0e-6;

/// A box with low <= high on both axes (PostgreSQL boxes are normalised so).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rect {
    pub lx: f64,
    pub ly: f64,
    pub hx: f64,
    pub hy: f64,
}

impl Rect {
    /// The box spanning two corners, in any order (as PostgreSQL builds one).
    pub fn from_corners(ax: f64, ay: f64, bx: f64, by: f64) -> Rect {
        Rect { lx: ax.min(bx), ly: ay.min(by), hx: ax.max(bx), hy: ay.max(by) }
    }

    /// `point <@ box`: exact and border-inclusive.
    #[inline(always)]
    pub fn contains(&self, x: f64, y: f64) -> bool {
        self.hx >= x && self.lx <= x && self.hy >= y && self.ly <= y
    }

    /// Whether two closed boxes share a point.
    #[inline(always)]
    pub fn overlaps(&self, o: &Rect) -> bool {
        self.lx <= o.hx && o.lx <= self.hx && self.ly <= o.hy && o.ly <= self.hy
    }

    /// A lower bound of `point <-> (x, y)` over the points in the box (0
    /// inside): used only to prune, never to answer. The gaps are lower
    /// bounds of each point's own coordinate differences (subtraction
    /// rounds monotonically), pg_hypot does not overflow where the squares
    /// would (coordinates of 1e160 and more), and the relative slack covers
    /// pg_hypot's rounding.
    #[inline(always)]
    pub fn min_dist(&self, x: f64, y: f64) -> f64 {
        let dx = (self.lx - x).max(0.0).max(x - self.hx);
        let dy = (self.ly - y).max(0.0).max(y - self.hy);
        pg_hypot(dx, dy) * (1.0 - 1e-12)
    }

    pub fn area(&self) -> f64 {
        (self.hx - self.lx) * (self.hy - self.ly)
    }
}

/// PostgreSQL's pg_hypot: sqrt(x² + y²) without overflow, with its exact
/// sequence of roundings (no fused multiply-add).
#[inline(always)]
pub fn pg_hypot(x: f64, y: f64) -> f64 {
    if x.is_infinite() || y.is_infinite() {
        return f64::INFINITY;
    }
    if x.is_nan() || y.is_nan() {
        return f64::NAN;
    }
    let (mut x, mut y) = (x.abs(), y.abs());
    if x < y {
        std::mem::swap(&mut x, &mut y);
    }
    if y == 0.0 {
        return x;
    }
    let yx = y / x;
    x * (1.0 + yx * yx).sqrt()
}

/// `point <-> point`.
#[inline(always)]
pub fn distance(ax: f64, ay: f64, bx: f64, by: f64) -> f64 {
    pg_hypot(ax - bx, ay - by)
}

/// `point <@ circle(center, r)`: `pg_hypot(center - point) <= r`.
#[inline(always)]
pub fn in_circle(cx: f64, cy: f64, r: f64, x: f64, y: f64) -> bool {
    pg_hypot(cx - x, cy - y) <= r
}

fn fp_eq(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= EPSILON
}

/// `point ~= point`: fuzzy by EPSILON, exact when a NaN is involved
/// (then NaN equals NaN, as float8 comparison says).
#[inline(always)]
pub fn point_eq(ax: f64, ay: f64, bx: f64, by: f64) -> bool {
    if ax.is_nan() || ay.is_nan() || bx.is_nan() || by.is_nan() {
        let eq = |a: f64, b: f64| (a.is_nan() && b.is_nan()) || a == b;
        return eq(ax, bx) && eq(ay, by);
    }
    fp_eq(ax, bx) && fp_eq(ay, by)
}

/// A query of a batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Query {
    /// Points inside the box (borders included).
    Range(Rect),
    /// Points within distance r of (x, y).
    Within { x: f64, y: f64, r: f64 },
    /// Points equal to (x, y) by `~=`.
    Point { x: f64, y: f64 },
}

impl Query {
    /// Whether the point answers the query (PostgreSQL's operator).
    #[inline(always)]
    pub fn matches(&self, x: f64, y: f64) -> bool {
        match *self {
            Query::Range(b) => b.contains(x, y),
            Query::Within { x: cx, y: cy, r } => in_circle(cx, cy, r, x, y),
            Query::Point { x: qx, y: qy } => point_eq(qx, qy, x, y),
        }
    }

    /// The positions of `xs` (finite, ascending) that may answer: every
    /// match lies inside. The bounds come from the very subtractions and
    /// comparisons the predicates make, so rounding cannot put a match
    /// outside: `pg_hypot(dx, dy) >= |dx|` and `~=` needs `|qx - x| <=
    /// EPSILON` (with a NaN bound nothing matches, whatever the window).
    #[inline(always)]
    pub fn x_window(&self, xs: &[f64]) -> std::ops::Range<usize> {
        let (a, b) = match *self {
            Query::Range(q) => (xs.partition_point(|&x| x < q.lx), xs.partition_point(|&x| x <= q.hx)),
            Query::Within { x: cx, r, .. } => (xs.partition_point(|&x| cx - x > r), xs.partition_point(|&x| cx - x >= -r)),
            Query::Point { x: qx, .. } => (xs.partition_point(|&x| qx - x > EPSILON), xs.partition_point(|&x| qx - x >= -EPSILON)),
        };
        a..b.max(a)
    }

    /// Whether a node whose points lie in `b` may hold an answer: a
    /// conservative test (slack for rounding), never used as the answer.
    #[inline(always)]
    pub fn may_touch(&self, b: &Rect) -> bool {
        match *self {
            Query::Range(q) => q.overlaps(b),
            Query::Within { x, y, r } => b.min_dist(x, y) <= r * (1.0 + 1e-12) + 1e-300,
            Query::Point { x, y } => {
                let e = EPSILON * (1.0 + 1e-9);
                Rect { lx: x - e, ly: y - e, hx: x + e, hy: y + e }.overlaps(b)
            }
        }
    }
}

//! Real-shaped data sets, deterministic and seeded, for every differential
//! test and benchmark (engine and SQL): points like a country's addresses
//! and keys like real tables' columns, beside uniform ones. Each draws one
//! value at a time from a seeded generator and the row's number, so a test
//! can stream any number of rows in any batch size and get the same table.

use crate::rng::SplitMix64;

/// A Zipf-distributed rank in `1..=n` with exponent `s` > 0, s != 1
/// (inverse transform of the continuous power law, floored: rank 1 gets
/// the largest share, the tail is long).
pub fn zipf(rng: &mut SplitMix64, n: u64, s: f64) -> u64 {
    let u = rng.unit();
    let a = 1.0 - s;
    let top = (n as f64 + 1.0).powf(a);
    let x = (u * (top - 1.0) + 1.0).powf(1.0 / a);
    (x.floor() as u64).clamp(1, n)
}

/// A standard normal deviate (Box-Muller).
pub fn normal(rng: &mut SplitMix64) -> f64 {
    let u1 = rng.unit().max(f64::MIN_POSITIVE);
    let u2 = rng.unit();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The point sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointSet {
    /// Uniform on [0, 1000)^2.
    Uniform,
    /// A country of [0, 1000)^2: 300 cities of Zipf sizes (Gaussian, from
    /// a few metres to tens of km across), roads between them (some
    /// exactly horizontal or vertical: points on a line), a sparse
    /// countryside, addresses repeated by the thousand (exact duplicates),
    /// a cluster of points 1e-9 apart, and a few far outliers (up to 1e15
    /// away).
    Cities,
}

impl PointSet {
    pub const ALL: [PointSet; 2] = [PointSet::Uniform, PointSet::Cities];

    pub fn name(self) -> &'static str {
        match self {
            PointSet::Uniform => "uniform",
            PointSet::Cities => "cities",
        }
    }

    pub fn parse(s: &str) -> Option<PointSet> {
        Self::ALL.into_iter().find(|p| p.name() == s)
    }

    /// Row `row`'s point.
    pub fn point(self, rng: &mut SplitMix64, row: u64) -> (f64, f64) {
        match self {
            PointSet::Uniform => (rng.unit() * 1000.0, rng.unit() * 1000.0),
            PointSet::Cities => city_point(rng, row),
        }
    }

    /// Where queries look: like `point`, but from the cities, roads and
    /// countryside only (a batch centred on the repeated addresses would
    /// return each of them thousands of times over).
    pub fn query_point(self, rng: &mut SplitMix64) -> (f64, f64) {
        match self {
            PointSet::Uniform => (rng.unit() * 1000.0, rng.unit() * 1000.0),
            PointSet::Cities => {
                let pick = rng.below(85);
                city_component(rng, pick)
            }
        }
    }

    /// `n` points from `seed`.
    pub fn points(self, n: usize, seed: u64) -> Vec<(f64, f64)> {
        let mut rng = SplitMix64::new(seed);
        (0..n as u64).map(|i| self.point(&mut rng, i)).collect()
    }
}

/// The fixed geography of `Cities` (the same for every seed: the seed
/// varies the rows, not the country).
struct Country {
    /// (x, y, sigma) per city, largest first.
    cities: Vec<(f64, f64, f64)>,
    /// Roads as pairs of city numbers.
    roads: Vec<(usize, usize)>,
    /// Repeated addresses.
    hot: Vec<(f64, f64)>,
}

const CITIES: u64 = 300;
const OUTLIERS: [(f64, f64); 6] = [(-1e15, 1e15), (1e15, 1e15), (-3.5e12, -2e9), (7e9, -1e13), (1e15, -1e15), (-2e14, 4.2e3)];

fn country() -> &'static Country {
    static C: std::sync::OnceLock<Country> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        let mut r = SplitMix64::new(0xC17E5);
        let cities: Vec<(f64, f64, f64)> = (0..CITIES)
            .map(|i| {
                // Sizes follow Zipf: sigma ~ sqrt(population).
                let sigma = 12.0 / ((i + 1) as f64).sqrt() + 0.005;
                (50.0 + r.unit() * 900.0, 50.0 + r.unit() * 900.0, sigma)
            })
            .collect();
        let roads = (0..120).map(|_| (r.below(40) as usize, r.below(CITIES) as usize)).collect();
        let hot = (0..64)
            .map(|_| {
                let (x, y, s) = cities[zipf(&mut r, CITIES, 1.2) as usize - 1];
                (x + normal(&mut r) * s, y + normal(&mut r) * s)
            })
            .collect();
        Country { cities, roads, hot }
    })
}

fn city_point(rng: &mut SplitMix64, row: u64) -> (f64, f64) {
    // The outliers come at fixed rows, so any table of over 1000 rows
    // has one and 10^7 rows have all of them many times over.
    if row % 1_000_003 == 997 {
        return OUTLIERS[(row / 1_000_003) as usize % OUTLIERS.len()];
    }
    let pick = rng.below(100);
    city_component(rng, pick)
}

/// One point of the component `pick` (0..100) of the country.
fn city_component(rng: &mut SplitMix64, pick: u64) -> (f64, f64) {
    let c = country();
    match pick {
        // Cities.
        0..=59 => {
            let (x, y, s) = c.cities[zipf(rng, CITIES, 1.1) as usize - 1];
            (x + normal(rng) * s, y + normal(rng) * s)
        }
        // Roads: on the segment between two cities; every fourth road is
        // axis-parallel (one coordinate exactly constant).
        60..=74 => {
            let k = rng.below(c.roads.len() as u64) as usize;
            let (a, b) = c.roads[k];
            let ((x0, y0, _), (x1, y1, _)) = (c.cities[a], c.cities[b]);
            let t = rng.unit();
            if k.is_multiple_of(4) {
                (x0 + (x1 - x0) * t, y0)
            } else {
                (x0 + (x1 - x0) * t, y0 + (y1 - y0) * t)
            }
        }
        // Countryside.
        75..=84 => (rng.unit() * 1000.0, rng.unit() * 1000.0),
        // Repeated addresses: exact duplicates, Zipf popular.
        85..=96 => c.hot[zipf(rng, c.hot.len() as u64, 1.3) as usize - 1],
        // A micro-cluster: points 1e-9 apart around one spot.
        _ => {
            let (x, y, _) = c.cities[7];
            (x + rng.below(1000) as f64 * 1e-9, y + rng.below(1000) as f64 * 1e-9)
        }
    }
}

/// The key sets (int8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeySet {
    /// Uniform in [0, 10^9).
    Uniform,
    /// Zipf ranks over 10^6 values (s = 1.2): the most common key is about
    /// a fifth of the table, most keys are rare.
    Zipf,
    /// Timestamps in microseconds, increasing with the row number (one
    /// row per ~1 ms), jittered so neighbours overlap and repeat.
    Timestamps,
    /// Uniform over all of int8, extremes included.
    Random,
}

impl KeySet {
    pub const ALL: [KeySet; 4] = [KeySet::Uniform, KeySet::Zipf, KeySet::Timestamps, KeySet::Random];

    pub fn name(self) -> &'static str {
        match self {
            KeySet::Uniform => "uniform",
            KeySet::Zipf => "zipf",
            KeySet::Timestamps => "timestamps",
            KeySet::Random => "random",
        }
    }

    pub fn parse(s: &str) -> Option<KeySet> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Row `row`'s key.
    pub fn key(self, rng: &mut SplitMix64, row: u64) -> i64 {
        match self {
            KeySet::Uniform => rng.below(1_000_000_000) as i64,
            KeySet::Zipf => zipf(rng, 1_000_000, 1.2) as i64,
            // 2026-01-01 in microseconds since 2000-01-01.
            KeySet::Timestamps => 820_540_800_000_000 + row as i64 * 1000 + rng.below(3000) as i64,
            KeySet::Random => match rng.below(1000) {
                0 => [i64::MIN, i64::MAX, 0, -1][rng.below(4) as usize],
                _ => rng.next_u64() as i64,
            },
        }
    }

    /// `n` keys from `seed`.
    pub fn keys(self, n: usize, seed: u64) -> Vec<i64> {
        let mut rng = SplitMix64::new(seed);
        (0..n as u64).map(|i| self.key(&mut rng, i)).collect()
    }
}

/// The vector sets (float4 vectors, the benchmark data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorSet {
    /// 1,000 Gaussian clusters (sigma 0.5) around centres uniform in
    /// [-10, 10]^dim, each vector from a centre picked at random.
    Clustered,
    /// Uniform in [-10, 10]^dim.
    Uniform,
}

impl VectorSet {
    pub const ALL: [VectorSet; 2] = [VectorSet::Clustered, VectorSet::Uniform];

    pub fn name(self) -> &'static str {
        match self {
            VectorSet::Clustered => "clustered",
            VectorSet::Uniform => "uniform",
        }
    }

    pub fn parse(s: &str) -> Option<VectorSet> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    /// `n` vectors of `dim` floats from `seed`, row after row. The cluster
    /// centres depend on `dim` only, so queries from another seed fall in
    /// the same clusters.
    pub fn vectors(self, n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut centres = SplitMix64::new(0x5eed ^ dim as u64);
        let centres: Vec<f32> = (0..1000 * dim).map(|_| (centres.unit() * 20.0 - 10.0) as f32).collect();
        let mut rng = SplitMix64::new(seed);
        let mut out = Vec::with_capacity(n * dim);
        for _ in 0..n {
            match self {
                VectorSet::Clustered => {
                    let c = rng.below(1000) as usize;
                    for x in &centres[c * dim..(c + 1) * dim] {
                        out.push(x + (normal(&mut rng) * 0.5) as f32);
                    }
                }
                VectorSet::Uniform => out.extend((0..dim).map(|_| (rng.unit() * 20.0 - 10.0) as f32)),
            }
        }
        out
    }
}

/// The string key sets of the radix tree, encoded prefix-free
/// (`art::keys`): what a gpu_art index holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringSet {
    /// Version-4 uuids: 16 random bytes (fixed width).
    Uuid,
    /// URLs as text: a few Zipf-popular hosts, long shared prefixes,
    /// paths of 1 to 6 segments and a numeric id (about 40-120 bytes).
    Urls,
    /// Word-like text (`word`): short, many shared prefixes, repeats.
    Words,
    /// 8 to 64 random bytes as bytea (zero bytes included).
    Random,
}

impl StringSet {
    pub const ALL: [StringSet; 4] = [StringSet::Uuid, StringSet::Urls, StringSet::Words, StringSet::Random];

    pub fn name(self) -> &'static str {
        match self {
            StringSet::Uuid => "uuid",
            StringSet::Urls => "urls",
            StringSet::Words => "words",
            StringSet::Random => "random",
        }
    }

    pub fn parse(s: &str) -> Option<StringSet> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    /// One raw key (before encoding).
    pub fn raw(self, rng: &mut SplitMix64) -> Vec<u8> {
        match self {
            StringSet::Uuid => {
                let mut b = [rng.next_u64().to_be_bytes(), rng.next_u64().to_be_bytes()].concat();
                b[6] = b[6] & 0x0f | 0x40;
                b[8] = b[8] & 0x3f | 0x80;
                b
            }
            StringSet::Urls => {
                const TLDS: [&str; 5] = ["com", "org", "net", "de", "io"];
                const SECTIONS: [&str; 8] = ["products", "blog", "news", "users", "static/img", "docs/api/v2", "search", "category"];
                let host = zipf(rng, 50_000, 1.1);
                let mut u = format!("https://www.site{host}.{}/", TLDS[(host % 5) as usize]);
                for _ in 0..1 + rng.below(6) {
                    u.push_str(SECTIONS[zipf(rng, SECTIONS.len() as u64, 1.0) as usize - 1]);
                    u.push('/');
                }
                u.push_str(&format!("item-{}?ref={}", rng.below(1_000_000), rng.below(100)));
                u.into_bytes()
            }
            StringSet::Words => word(rng).into_bytes(),
            StringSet::Random => (0..8 + rng.below(57)).map(|_| rng.next_u64() as u8).collect(),
        }
    }

    /// Encodes a raw key of this set (text: a terminator; bytea: escaped).
    pub fn encode(self, raw: &[u8], out: &mut Vec<u8>) {
        match self {
            StringSet::Uuid => out.extend_from_slice(raw),
            StringSet::Urls | StringSet::Words => crate::art::keys::encode_text(raw, out),
            StringSet::Random => crate::art::keys::encode_bytea(raw, out),
        }
    }

    /// `n` encoded keys from `seed` (repeats possible).
    pub fn keys(self, n: usize, seed: u64) -> crate::art::ByteKeys {
        let mut rng = SplitMix64::new(seed);
        let mut keys = crate::art::ByteKeys::new();
        let mut buf = Vec::new();
        for _ in 0..n {
            buf.clear();
            self.encode(&self.raw(&mut rng), &mut buf);
            keys.push(&buf);
        }
        keys
    }
}

/// Word-like strings for edit distance when no dictionary is at hand:
/// syllables drawn Zipf-skewed (common ones often), so words share
/// prefixes and differ by an edit or two as dictionary words do; one in
/// 50 is a repeat of one of 20 frequent words, one in 500 is long (up to
/// 200 characters), a few hold accented or CJK letters.
pub fn word(rng: &mut SplitMix64) -> String {
    const SYLLABLES: [&str; 40] = [
        "in", "er", "re", "an", "on", "at", "es", "st", "en", "ing", "ed", "ti", "al", "ar", "te", "co", "de", "ra", "ro", "li", "ri",
        "ne", "ma", "le", "ca", "ta", "la", "pe", "ni", "ve", "mo", "so", "tu", "pa", "bi", "ex", "un", "ly", "é", "東",
    ];
    if rng.below(50) == 0 {
        return [
            "the", "and", "of", "to", "in", "is", "was", "for", "on", "are", "as", "with", "his", "they", "at", "be", "this", "from", "or",
            "had",
        ][rng.below(20) as usize]
            .to_string();
    }
    let syllables = if rng.below(500) == 0 { 20 + rng.below(60) } else { 1 + rng.below(4) };
    let mut w = String::new();
    for _ in 0..syllables {
        w.push_str(SYLLABLES[zipf(rng, SYLLABLES.len() as u64, 1.1) as usize - 1]);
    }
    if rng.below(4) == 0 {
        w.push((b'a' + rng.below(26) as u8) as char);
    }
    w.chars().take(200).collect()
}

/// `word` with `edits` random substitutions, insertions or deletions of
/// letters a-z (a typo'd query for a dictionary).
pub fn typo(rng: &mut SplitMix64, word: &str, edits: u64) -> String {
    let mut w: Vec<char> = word.chars().collect();
    for _ in 0..edits {
        let at = rng.below(w.len() as u64 + 1) as usize;
        let c = (b'a' + rng.below(26) as u8) as char;
        match rng.below(3) {
            0 if at < w.len() => w[at] = c,
            1 if at < w.len() && w.len() > 1 => {
                w.remove(at);
            }
            _ => w.insert(at, c),
        }
    }
    w.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn deterministic() {
        assert_eq!(PointSet::Cities.points(5000, 3), PointSet::Cities.points(5000, 3));
        assert_eq!(KeySet::Zipf.keys(5000, 3), KeySet::Zipf.keys(5000, 3));
        assert_ne!(KeySet::Random.keys(100, 3), KeySet::Random.keys(100, 4));
    }

    #[test]
    fn zipf_is_skewed_with_a_long_tail() {
        let keys = KeySet::Zipf.keys(100_000, 1);
        let mut counts: HashMap<i64, usize> = HashMap::new();
        for k in &keys {
            *counts.entry(*k).or_default() += 1;
        }
        let top = counts[&1];
        assert!(top > 10_000 && top < 40_000, "rank 1 holds {top} of 100,000");
        assert!(counts.len() > 5_000, "{} distinct keys", counts.len());
        assert!(keys.iter().all(|&k| (1..=1_000_000).contains(&k)));
    }

    #[test]
    fn timestamps_ascend_with_jitter() {
        let keys = KeySet::Timestamps.keys(10_000, 1);
        let out_of_order = keys.windows(2).filter(|w| w[1] < w[0]).count();
        assert!(out_of_order > 100 && out_of_order < 5_000, "{out_of_order}");
        assert!(keys.last().unwrap() - keys[0] > 9_000_000);
    }

    #[test]
    fn cities_have_every_feature() {
        let pts = PointSet::Cities.points(200_000, 9);
        let far = pts.iter().filter(|p| p.0.abs() > 1e6 || p.1.abs() > 1e6).count();
        assert!(far >= 1, "an outlier");
        let mut dups: HashMap<(u64, u64), usize> = HashMap::new();
        for p in &pts {
            *dups.entry((p.0.to_bits(), p.1.to_bits())).or_default() += 1;
        }
        assert!(dups.values().max().unwrap() > &1_000, "an address repeated by the thousand");
        let tiny = pts.iter().filter(|p| (p.0 - country().cities[7].0).abs() < 1e-6).count();
        assert!(tiny > 1_000, "the micro-cluster");
        let inside = pts.iter().filter(|p| p.0 >= 0.0 && p.0 < 1000.0 && p.1 >= 0.0 && p.1 < 1000.0).count();
        assert!(inside > 199_000);
    }
}

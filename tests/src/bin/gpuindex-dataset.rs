//! gpuindex-dataset: writes a point set of the benches as files, for
//! loading with psql's `\copy` (ad-hoc measurements on a GPU host that has
//! no Rust):
//!
//!   gpuindex-dataset DIR [SET] [ROWS]
//!
//! `DIR/pts-SET.tsv`: ROWS lines `id<TAB>(x,y)` (default 10^7 of
//! `cities`), the points `gpuindex-sql-bench-spatial --set SET` loads;
//! `DIR/centres-SET.tsv`: `i<TAB>x<TAB>y`, the 10,000 kNN centres that
//! bench draws with its default `--queries` (after its boxes and circles).

use gpuindex_engine::datasets::PointSet;
use gpuindex_engine::rng::SplitMix64;
use std::io::Write;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("usage: gpuindex-dataset DIR [SET] [ROWS]");
    let set = PointSet::parse(&args.next().unwrap_or_else(|| "cities".into())).expect("SET: uniform or cities");
    let rows = args.next().map_or(10_000_000, |s| s.parse::<f64>().expect("ROWS: a number") as u64);
    // The bench's scale: the sets' [0, 1000)^2 to [0, 1e6)^2.
    let scale = 1e6 / 1000.0;
    let file = |name: &str| {
        let path = format!("{dir}/{name}-{}.tsv", set.name());
        std::io::BufWriter::new(std::fs::File::create(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
    };
    let mut w = file("pts");
    let mut rng = SplitMix64::new(42);
    for i in 0..rows {
        let (x, y) = set.point(&mut rng, i);
        writeln!(w, "{}\t({:?},{:?})", i + 1, x * scale, y * scale).unwrap();
    }
    let queries = 100_000;
    let mut rng = SplitMix64::new(7);
    for _ in 0..2 * queries {
        set.query_point(&mut rng);
    }
    let mut w = file("centres");
    for i in 0..queries / 10 {
        let (x, y) = set.query_point(&mut rng);
        writeln!(w, "{i}\t{:?}\t{:?}", x * scale, y * scale).unwrap();
    }
}

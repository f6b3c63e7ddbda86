//! gpuindex-sql-bench-metric: gpu_metric on a live server
//! (PGHOST/PGPORT/PGUSER): exact kNN and range search over float4 vectors
//! through SQL, against the sequential scan.
//!
//!   gpuindex-sql-bench-metric [--rows 1e6] [--dim 128] [--queries 1e4] [--set clustered|uniform] [--reps 3]
//!
//! Builds bench_vec(id int8, v real[]) from `--set` (datasets::VectorSet),
//! indexes it with gpu_metric (L2), then measures: CREATE INDEX and size;
//! one `ORDER BY v <-> q LIMIT 10` through the index and by (parallel)
//! sequential scan; `gpu_metric_knn` (k = 10) and `gpu_metric_within`
//! (radius: the median 10th-neighbour distance) over a batch of
//! `--queries` queries with gpuindex.device = auto (the GPU where there
//! is one) and = cpu (on a tenth of the batch: the CPU is slow), as
//! (ord, ctid, distance) rows and joined back to the table's rows. Every
//! answer (count and sum of distances) is checked against the others;
//! single queries against the sequential scan.

use gpuindex_engine::datasets::VectorSet;
use gpuindex_tests::bench::{connect, describe_server, load_vectors, plan_of, time, vector_text as array};
use postgres::Client;
use std::time::Instant;

struct Args {
    rows: usize,
    dim: usize,
    queries: usize,
    set: VectorSet,
    reps: usize,
}

fn args() -> Args {
    let mut a = Args { rows: 1_000_000, dim: 128, queries: 10_000, set: VectorSet::Clustered, reps: 3 };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{x} needs a value"));
        let num = || v.parse::<f64>().unwrap_or_else(|_| panic!("{x} takes a number")) as usize;
        match x.as_str() {
            "--rows" => a.rows = num(),
            "--dim" => a.dim = num(),
            "--queries" => a.queries = num(),
            "--reps" => a.reps = num(),
            "--set" => a.set = VectorSet::parse(&v).expect("--set clustered|uniform"),
            _ => panic!("usage: gpuindex-sql-bench-metric [--rows N] [--dim N] [--queries N] [--set NAME] [--reps N]"),
        }
    }
    a
}

/// Rows and the sum of their distances.
fn answer(c: &mut Client, sql: &str) -> (i64, f64) {
    let r = c.query_one(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}"));
    (r.get(0), r.get::<_, Option<f64>>(1).unwrap_or(0.0))
}

fn same(a: (i64, f64), b: (i64, f64)) -> bool {
    a.0 == b.0 && (a.1 - b.1).abs() <= 1e-9 * a.1.abs().max(1.0)
}

fn main() {
    let a = args();
    let (n, dim) = (a.rows, a.dim);
    let mut c = connect();
    println!("# gpuindex-sql-bench-metric: {n} vectors of {dim} floats ({}), L2, median of {} runs", a.set.name(), a.reps);
    println!("\n{}", describe_server(&mut c));

    c.batch_execute("DROP TABLE IF EXISTS bench_vec_q").unwrap();
    let load = load_vectors(&mut c, "bench_vec", a.set, n, dim);
    let _ = c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm; SELECT pg_prewarm('bench_vec')");
    let t = Instant::now();
    c.batch_execute("CREATE INDEX bench_vec_v ON bench_vec USING gpu_metric (v)").unwrap();
    let build = t.elapsed().as_secs_f64();
    let size: i64 = c.query_one("SELECT pg_relation_size('bench_vec_v')", &[]).unwrap().get(0);
    let table: i64 = c.query_one("SELECT pg_total_relation_size('bench_vec')", &[]).unwrap().get(0);
    println!("\n| measure | value |\n|---|---:|");
    println!("| table load (COPY, VACUUM ANALYZE) | {load:.1} s |");
    println!("| CREATE INDEX ... USING gpu_metric (v) | {build:.1} s |");
    println!("| index size / table size | {} MiB / {} MiB |", size >> 20, (table - size) >> 20);

    // The queries, as one 2-D array (and its first tenth for the CPU).
    let m = a.queries;
    let qs = VectorSet::vectors(a.set, m, dim, 1 << 40);
    let rows: Vec<String> = qs.chunks(dim).map(array).collect();
    c.batch_execute("CREATE TABLE bench_vec_q (qs real[], small real[])").unwrap();
    let small = (m / 10).max(1);
    c.execute(
        "INSERT INTO bench_vec_q VALUES ($1::text::real[], $2::text::real[])",
        &[&format!("{{{}}}", rows.join(",")), &format!("{{{}}}", rows[..small].join(","))],
    )
    .unwrap();

    // Single queries: through the index, and by sequential scan.
    let single = |i: usize| format!("SELECT count(*), sum(d) FROM (SELECT v <-> '{}' AS d FROM bench_vec ORDER BY 1 LIMIT 10) s", rows[i]);
    println!("\nplan of a single query: {}", plan_of(&mut c, &single(0), &[]));
    let singles = 20.min(m);
    let mut got = Vec::new();
    let index_s = time(a.reps, || got = (0..singles).map(|i| answer(&mut c, &single(i))).collect()) / singles as f64;
    c.batch_execute("SET enable_indexscan = off").unwrap();
    println!("plan with enable_indexscan = off: {}", plan_of(&mut c, &single(0), &[]));
    let seq_n = 5.min(m);
    let mut want = Vec::new();
    let seq_s = time(1, || want = (0..seq_n).map(|i| answer(&mut c, &single(i))).collect()) / seq_n as f64;
    c.batch_execute("RESET enable_indexscan").unwrap();
    for i in 0..seq_n {
        assert!(same(got[i], want[i]), "query {i}: index {:?}, sequential scan {:?}", got[i], want[i]);
    }
    println!("\n| single `ORDER BY v <-> q LIMIT 10` | ms | queries/s |\n|---|---:|---:|");
    println!("| through bench_vec_v | {:.2} | {:.0} |", index_s * 1e3, 1.0 / index_s);
    println!("| sequential scan | {:.2} | {:.1} |", seq_s * 1e3, 1.0 / seq_s);
    println!("| index / sequential scan | {:.1}x | |", seq_s / index_s);

    // Batches.
    let r: f64 = c
        .query_one(
            "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY d) FROM
               (SELECT max(distance) d FROM gpu_metric_knn('bench_vec_v', (SELECT small FROM bench_vec_q), 10) GROUP BY ord) s",
            &[],
        )
        .unwrap()
        .get(0);
    println!("\nbatches: {m} queries (device = cpu: the first {small}); range radius {r:.4} (the median 10th-neighbour distance)\n");
    println!("| batch of | device (ran on) | queries/s | rows | seconds |\n|---|---|---:|---:|---:|");
    // Batches of any size may take the GPU under auto.
    c.batch_execute("SET gpuindex.gpu_min_batch = 1").unwrap();
    let forms: [(&str, String); 4] = [
        ("kNN (k = 10) -> (ord, ctid, distance)", "SELECT count(*), sum(distance) FROM gpu_metric_knn('bench_vec_v', (SELECT {col} FROM bench_vec_q), 10)".into()),
        (
            "kNN (k = 10) -> rows",
            "SELECT count(*), sum(k.distance + t.id * 0) FROM gpu_metric_knn('bench_vec_v', (SELECT {col} FROM bench_vec_q), 10) k JOIN bench_vec t ON t.ctid = k.ctid".into(),
        ),
        ("within r -> (ord, ctid, distance)", format!("SELECT count(*), sum(distance) FROM gpu_metric_within('bench_vec_v', (SELECT {{col}} FROM bench_vec_q), {r:?})")),
        (
            "within r -> rows",
            format!("SELECT count(*), sum(w.distance + t.id * 0) FROM gpu_metric_within('bench_vec_v', (SELECT {{col}} FROM bench_vec_q), {r:?}) w JOIN bench_vec t ON t.ctid = w.ctid"),
        ),
    ];
    for (what, sql) in &forms {
        let mut answers = Vec::new();
        for (device, col, count) in [("auto", "small", small), ("cpu", "small", small), ("auto", "qs", m)] {
            c.batch_execute(&format!("SET gpuindex.device = {device}")).unwrap();
            let sql = sql.replace("{col}", col);
            let mut got = (0, 0.0);
            let s = time(if device == "cpu" { 1 } else { a.reps }, || got = answer(&mut c, &sql));
            let ran: String = c.query_one("SELECT device FROM gpuindex_last_batch()", &[]).unwrap().get(0);
            answers.push(got);
            println!("| {what} | {device} ({ran}), {count} queries | {:.0} | {} | {s:.3} |", count as f64 / s, got.0);
        }
        assert!(same(answers[0], answers[1]), "{what}: auto {:?} != cpu {:?}", answers[0], answers[1]);
    }
    c.batch_execute("RESET gpuindex.device; RESET gpuindex.gpu_min_batch").unwrap();
    println!("\nsequential scan: {:.1} queries/s (one query at a time, above)", 1.0 / seq_s);
}

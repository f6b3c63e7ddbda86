//! gpuindex-sql-bench-pgvector: gpu_metric on pgvector's `vector` against
//! pgvector's own HNSW index and the sequential scan, on a live server
//! (PGHOST/PGPORT/PGUSER) with pgvector and gpuindex_pgvector installed.
//!
//!   gpuindex-sql-bench-pgvector [--rows 1e6] [--dim 128] [--queries 1e4] [--set clustered|uniform] [--singles 200] [--reps 3]
//!
//! Builds bench_pv(id int8, e vector) from `--set` (datasets::VectorSet),
//! indexes it with gpu_metric (vector_l2_ops), then measures: the exact k
//! nearest (k = 10) of `--queries` queries by `gpu_metric_knn_vector`
//! (gpuindex.device = auto: the GPU where there is one), as (ord, ctid,
//! distance) rows and joined back to the rows, which is the ground truth;
//! `--singles` single `ORDER BY e <-> q LIMIT 10` queries through the
//! index, and a few by the (parallel) sequential scan, both checked
//! against the truth. Then builds HNSW (m = 16, ef_construction = 64, all
//! cores), drops the gpu_metric index, and measures the same single
//! queries and the whole batch as one LATERAL query at several
//! `hnsw.ef_search`, with their recall@10 against the truth.

use gpuindex_engine::datasets::VectorSet;
use gpuindex_tests::bench::{connect, describe_server, load_vectors, plan_of, time};
use postgres::Client;
use std::collections::{HashMap, HashSet};
use std::time::Instant;

struct Args {
    rows: usize,
    dim: usize,
    queries: usize,
    set: VectorSet,
    singles: usize,
    reps: usize,
}

fn args() -> Args {
    let mut a = Args { rows: 1_000_000, dim: 128, queries: 10_000, set: VectorSet::Clustered, singles: 200, reps: 3 };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{x} needs a value"));
        let num = || v.parse::<f64>().unwrap_or_else(|_| panic!("{x} takes a number")) as usize;
        match x.as_str() {
            "--rows" => a.rows = num(),
            "--dim" => a.dim = num(),
            "--queries" => a.queries = num(),
            "--singles" => a.singles = num(),
            "--reps" => a.reps = num(),
            "--set" => a.set = VectorSet::parse(&v).expect("--set clustered|uniform"),
            _ => panic!("usage: gpuindex-sql-bench-pgvector [--rows N] [--dim N] [--queries N] [--set NAME] [--singles N] [--reps N]"),
        }
    }
    a
}

/// A vector in pgvector's text form: the array literal's elements in brackets.
fn vector_text(v: &[f32]) -> String {
    let array = gpuindex_tests::bench::vector_text(v);
    format!("[{}]", &array[1..array.len() - 1])
}

/// The ids of each query's rows (`ord`, id), by query.
fn ids_by_query(c: &mut Client, sql: &str) -> HashMap<i64, Vec<i64>> {
    let mut by = HashMap::new();
    for r in c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}")) {
        by.entry(r.get::<_, i64>(0)).or_insert_with(Vec::new).push(r.get::<_, i64>(1));
    }
    by
}

/// The share of `truth`'s ids that `got` found.
fn recall(truth: &[i64], got: &[i64]) -> f64 {
    let t: HashSet<_> = truth.iter().collect();
    got.iter().filter(|i| t.contains(i)).count() as f64 / truth.len() as f64
}

/// One query's nearest ids.
fn nearest(c: &mut Client, q: &str) -> Vec<i64> {
    let sql = "SELECT id FROM bench_pv ORDER BY e <-> $1::text::vector LIMIT 10";
    c.query(sql, &[&q]).unwrap().iter().map(|r| r.get(0)).collect()
}

/// Seconds per single query over the first `n` queries (median of
/// `reps`), and their mean recall.
fn singles(c: &mut Client, qs: &[String], truth: &HashMap<i64, Vec<i64>>, n: usize, reps: usize) -> (f64, f64) {
    let mut got = Vec::new();
    let s = time(reps, || got = qs[..n].iter().map(|q| nearest(c, q)).collect()) / n as f64;
    let r = got.iter().enumerate().map(|(i, g)| recall(&truth[&(i as i64 + 1)], g)).sum::<f64>() / n as f64;
    (s, r)
}

fn main() {
    let a = args();
    let (n, dim, m) = (a.rows, a.dim, a.queries);
    let mut c = connect();
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS gpuindex_pgvector CASCADE")
        .expect("pgvector and gpuindex_pgvector must be installed on the server");
    let pgv: String = c.query_one("SELECT extversion FROM pg_extension WHERE extname = 'vector'", &[]).unwrap().get(0);
    println!("# gpuindex-sql-bench-pgvector: {n} vectors of {dim} floats ({}), L2, k = 10, pgvector {pgv}", a.set.name());
    println!("\n{}", describe_server(&mut c));

    let load = load_vectors(&mut c, "bench_vec", a.set, n, dim);
    let t = Instant::now();
    // (HNSW needs the column's dimension in its type.)
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS bench_pv, bench_pv_q;
         CREATE TABLE bench_pv AS SELECT id, v::vector({dim}) AS e FROM bench_vec; DROP TABLE bench_vec"
    ))
    .unwrap();
    c.batch_execute("VACUUM (ANALYZE) bench_pv").unwrap();
    let cast = t.elapsed().as_secs_f64();
    let _ = c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm; SELECT pg_prewarm('bench_pv')");
    let build = |c: &mut Client, sql: &str, name: &str| {
        let t = Instant::now();
        c.batch_execute(sql).unwrap();
        let s = t.elapsed().as_secs_f64();
        let size: i64 = c.query_one(&format!("SELECT pg_relation_size('{name}')"), &[]).unwrap().get(0);
        (s, size >> 20)
    };
    let (gm_build, gm_size) = build(&mut c, "CREATE INDEX bench_pv_gm ON bench_pv USING gpu_metric (e)", "bench_pv_gm");
    let table: i64 = c.query_one("SELECT pg_table_size('bench_pv')", &[]).unwrap().get(0);

    let qs: Vec<String> = VectorSet::vectors(a.set, m, dim, 1 << 40).chunks(dim).map(vector_text).collect();
    c.execute("CREATE TABLE bench_pv_q AS SELECT ord, q::vector AS q FROM unnest($1::text[]) WITH ORDINALITY u(q, ord)", &[&qs]).unwrap();

    // The exact answers: one batch call on the GPU (auto), then joined to rows.
    c.batch_execute("SET gpuindex.gpu_min_batch = 1").unwrap();
    let batch = "FROM gpu_metric_knn_vector('bench_pv_gm', (SELECT array_agg(q ORDER BY ord) FROM bench_pv_q), 10) k";
    let mut rows = 0i64;
    let pairs = time(a.reps, || rows = c.query_one(&format!("SELECT count(*) {batch}"), &[]).unwrap().get(0));
    let ran: String = c.query_one("SELECT device FROM gpuindex_last_batch()", &[]).unwrap().get(0);
    let mut truth = HashMap::new();
    let joined = time(a.reps, || truth = ids_by_query(&mut c, &format!("SELECT k.ord, t.id {batch} JOIN bench_pv t ON t.ctid = k.ctid")));
    assert_eq!(rows as usize, 10 * m);
    assert_eq!(truth.len(), m);

    // Single queries through gpu_metric, and by sequential scan.
    let singles_n = a.singles.min(m);
    println!("\nplan of a single query: {}", plan_of(&mut c, &format!("SELECT id FROM bench_pv ORDER BY e <-> '{}' LIMIT 10", qs[0]), &[]));
    let (gm_single, gm_recall) = singles(&mut c, &qs, &truth, singles_n, a.reps);
    c.batch_execute("SET enable_indexscan = off").unwrap();
    let seq_n = 5.min(m);
    let (seq_single, seq_recall) = singles(&mut c, &qs, &truth, seq_n, 1);
    c.batch_execute("RESET enable_indexscan").unwrap();

    // pgvector's HNSW, with every core for its build.
    c.batch_execute("SET maintenance_work_mem = '16GB'; SET max_parallel_maintenance_workers = 15").unwrap();
    let (hnsw_build, hnsw_size) = build(
        &mut c,
        "CREATE INDEX bench_pv_hnsw ON bench_pv USING hnsw (e vector_l2_ops) WITH (m = 16, ef_construction = 64)",
        "bench_pv_hnsw",
    );
    c.batch_execute("DROP INDEX bench_pv_gm").unwrap();
    println!("plan with HNSW only: {}", plan_of(&mut c, &format!("SELECT id FROM bench_pv ORDER BY e <-> '{}' LIMIT 10", qs[0]), &[]));

    println!("\n| measure | value |\n|---|---:|");
    println!("| table load (COPY real[], VACUUM ANALYZE) / cast to vector | {load:.1} s / {cast:.1} s |");
    println!("| table size | {} MiB |", table >> 20);
    println!("| CREATE INDEX ... USING gpu_metric (e) | {gm_build:.1} s, {gm_size} MiB |");
    println!("| CREATE INDEX ... USING hnsw (e) (m 16, ef_construction 64, 16 workers) | {hnsw_build:.1} s, {hnsw_size} MiB |");

    println!("\n| {m} queries, k = 10 | queries/s | seconds | recall@10 |\n|---|---:|---:|---:|");
    println!("| gpu_metric_knn_vector -> (ord, ctid, distance), exact ({ran}) | {:.0} | {pairs:.3} | 1 |", m as f64 / pairs);
    println!("| gpu_metric_knn_vector -> rows (JOIN ON ctid), exact ({ran}) | {:.0} | {joined:.3} | 1 |", m as f64 / joined);
    let mut hnsw_batch = Vec::new();
    for ef in [40, 100, 400] {
        c.batch_execute(&format!("SET hnsw.ef_search = {ef}")).unwrap();
        let mut got = HashMap::new();
        let sql = "SELECT q.ord, x.id FROM bench_pv_q q CROSS JOIN LATERAL (SELECT id FROM bench_pv ORDER BY e <-> q.q LIMIT 10) x";
        let s = time(1, || got = ids_by_query(&mut c, sql));
        let r = truth.iter().map(|(o, t)| recall(t, got.get(o).map_or(&[][..], |g| g))).sum::<f64>() / m as f64;
        println!("| HNSW, one LATERAL query, ef_search = {ef} | {:.0} | {s:.3} | {r:.4} |", m as f64 / s);
        hnsw_batch.push((ef, s));
    }

    println!("\n| single `ORDER BY e <-> q LIMIT 10` | ms | queries/s | recall@10 |\n|---|---:|---:|---:|");
    println!("| gpu_metric index scan (exact), {singles_n} queries | {:.2} | {:.0} | {gm_recall:.4} |", gm_single * 1e3, 1.0 / gm_single);
    println!("| sequential scan (exact), {seq_n} queries | {:.2} | {:.1} | {seq_recall:.4} |", seq_single * 1e3, 1.0 / seq_single);
    for ef in [40, 100, 400] {
        c.batch_execute(&format!("SET hnsw.ef_search = {ef}")).unwrap();
        let (s, r) = singles(&mut c, &qs, &truth, singles_n, a.reps);
        println!("| HNSW, ef_search = {ef}, {singles_n} queries | {:.2} | {:.0} | {r:.4} |", s * 1e3, 1.0 / s);
    }
    println!("\n| ratio | value |\n|---|---:|");
    for (ef, s) in hnsw_batch {
        println!("| exact batch (rows) / HNSW LATERAL at ef_search = {ef}, queries/s | {:.1}x |", s / joined);
    }
    println!("| single query: sequential scan time / gpu_metric index scan time | {:.1}x |", seq_single / gm_single);
    c.batch_execute("DROP TABLE bench_pv, bench_pv_q").unwrap();
}

//! gpuindex-sql-bench-join: the batched index join (GpuIndexJoin) against
//! PostgreSQL's own joins on the same tables, in one run, on a live server
//! (PGHOST/PGPORT/PGUSER).
//!
//!   gpuindex-sql-bench-join [--outer 1e6] [--inner 1e7] [--boxes 1e5] [--points 1e7]
//!                           [--centres 1e4] [--vectors 1e6] [--dim 128] [--queries 1e4]
//!                           [--reps 3] [--parts equi,spatial,metric]
//!
//! - equi: `--outer` rows of random int8 keys joined with `--inner` rows
//!   (unique keys in random heap order, every outer key matching one row),
//!   `count(*), sum(inner.v)` over the joined rows: the nested loop over
//!   btree, the hash join and the merge join (each forced), the planner's
//!   own choice with btree, all with one backend and again with
//!   PostgreSQL's default parallel settings; then GpuIndexJoin over
//!   gpu_btree (device auto and cpu), forced and as the planner chooses.
//! - spatial: `--points` uniform points; `--boxes` boxes of ~10 points
//!   each (`p <@ b`, written as a LATERAL subquery, which the planner
//!   flattens into a join) and `--centres` kNN centres
//!   (`LATERAL (... ORDER BY p <-> c LIMIT 10)`), both to rows: the LATERAL
//!   joins over GiST and SP-GiST (nested loops of index scans: what the
//!   planner picks) against GpuIndexJoin over gpu_spatial.
//! - metric: `--vectors` vectors of `--dim` floats (1,000 Gaussian
//!   clusters), `--queries` outer rows each asking for its 10 nearest by
//!   `LATERAL (... ORDER BY v <-> q LIMIT 10)`: GpuIndexJoin over
//!   gpu_metric, against the planner's nested loop of gpu_metric index
//!   scans and of sequential scans (each timed on the first 100 and 10
//!   outer rows: per outer row, then scaled).
//!
//! Every answer is checked against the first setup's. Prints one table per
//! part, the ratios the targets name, and the plans.

use gpuindex_tests::bench::{connect, describe_server, print_table, push, time, Row, SplitMix64};
use postgres::Client;
use std::io::Write;
use std::time::Instant;

struct Args {
    outer: u64,
    inner: u64,
    boxes: u64,
    points: u64,
    centres: u64,
    vectors: u64,
    dim: usize,
    queries: u64,
    reps: usize,
    parts: Vec<String>,
}

fn args() -> Args {
    let mut a = Args {
        outer: 1_000_000,
        inner: 10_000_000,
        boxes: 100_000,
        points: 10_000_000,
        centres: 10_000,
        vectors: 1_000_000,
        dim: 128,
        queries: 10_000,
        reps: 3,
        parts: vec!["equi".into(), "spatial".into(), "metric".into()],
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{x} needs a value"));
        let num = || v.parse::<f64>().unwrap_or_else(|_| panic!("{x} takes a number")) as u64;
        match x.as_str() {
            "--outer" => a.outer = num(),
            "--inner" => a.inner = num(),
            "--boxes" => a.boxes = num(),
            "--points" => a.points = num(),
            "--centres" => a.centres = num(),
            "--vectors" => a.vectors = num(),
            "--dim" => a.dim = num() as usize,
            "--queries" => a.queries = num(),
            "--reps" => a.reps = num() as usize,
            "--parts" => a.parts = v.split(',').map(str::to_string).collect(),
            _ => panic!("usage: gpuindex-sql-bench-join [--outer N] [--inner N] [--boxes N] [--points N] [--centres N] [--vectors N] [--dim N] [--queries N] [--reps N] [--parts equi,spatial,metric]"),
        }
    }
    a
}

/// Streams `rows` (tab-separated lines) into `table`.
fn copy_in(c: &mut Client, table: &str, rows: impl Iterator<Item = String>) {
    let mut w = c.copy_in(&format!("COPY {table} FROM STDIN")).unwrap();
    let mut buf = String::new();
    for r in rows {
        buf.push_str(&r);
        buf.push('\n');
        if buf.len() > 1 << 20 {
            w.write_all(buf.as_bytes()).unwrap();
            buf.clear();
        }
    }
    w.write_all(buf.as_bytes()).unwrap();
    w.finish().unwrap();
}

/// VACUUM ANALYZE, one statement each (VACUUM runs outside a transaction).
fn vacuum(c: &mut Client, tables: &[&str]) {
    for t in tables {
        c.batch_execute(&format!("VACUUM ANALYZE {t}")).unwrap();
    }
}

/// A setup: its label and the settings of its session.
#[derive(Clone, Copy)]
struct Setup {
    label: &'static str,
    settings: &'static str,
    /// What the plan must contain (the join forced, or the index used).
    plan_has: &'static str,
}

const SERIAL: &str = "SET max_parallel_workers_per_gather = 0;";

/// The plan's lines, for the report.
fn plan(c: &mut Client, sql: &str) -> Vec<String> {
    c.query(&format!("EXPLAIN {sql}"), &[]).unwrap().iter().map(|r| r.get(0)).collect()
}

/// Runs `sql` (count, sum) under each setup, each in a fresh session;
/// checks every answer against the first; records times in `rows`.
fn measure(setups: &[Setup], sql: &str, what: &str, reps: usize, rows: &mut Vec<Row>, plans: &mut Vec<String>) {
    let mut first: Option<(i64, f64)> = None;
    for (i, s) in setups.iter().enumerate() {
        let mut c = connect();
        c.batch_execute(s.settings).unwrap();
        let p = plan(&mut c, sql);
        let joined = p.join("\n");
        assert!(joined.contains(s.plan_has), "{}: the plan has no {}:\n{joined}", s.label, s.plan_has);
        let mut got = (0i64, 0f64);
        let secs = time(reps, || {
            let r = c.query_one(sql, &[]).unwrap();
            got = (r.get(0), r.get::<_, Option<f64>>(1).unwrap_or(0.0));
        });
        match first {
            None => first = Some(got),
            Some(f) => assert!(
                f.0 == got.0 && (f.1 - got.1).abs() <= 1e-9 * f.1.abs().max(1.0),
                "{}: {got:?} where the first setup had {f:?}",
                s.label
            ),
        }
        push(rows, setups.len(), i, what.to_string(), "ms", true, secs * 1e3);
        let top: Vec<&str> = p.iter().map(|l| l.trim().trim_start_matches("->").trim()).filter(|l| !l.contains(':')).collect();
        plans.push(format!("{}: {what} -> {}", s.label, top.join(" / ")));
        if s.plan_has == "GpuIndexJoin" {
            let stats: Vec<String> =
                c.query(&format!("EXPLAIN (ANALYZE, COSTS OFF) {sql}"), &[]).unwrap().iter().map(|r| r.get::<_, String>(0)).collect();
            let keep = [
                "Chunks",
                "GPU Batches",
                "Probes",
                "Nearest Rounds",
                "Rows by Heap Scan",
                "Index Matches",
                "Heap Fetches",
                "Index Time",
                "Heap Time",
                "Execution Time",
            ];
            let picked: Vec<String> =
                stats.iter().map(|l| l.trim().to_string()).filter(|l| keep.iter().any(|k| l.starts_with(&format!("{k}:")))).collect();
            plans.push(format!("{}: {what} (EXPLAIN ANALYZE) -> {}", s.label, picked.join("; ")));
        }
    }
}

fn ratio_lines(rows: &[Row], setups: &[Setup], ours: &str, against: &[&str]) {
    let col = |label: &str| setups.iter().position(|s| s.label == label).unwrap();
    for r in rows {
        let g = r.values[col(ours)];
        for b in against {
            let v = r.values[col(b)];
            println!("| {} | {b} | {v:.1} ms | {ours} | {g:.1} ms | {:.2}x |", r.what, v / g);
        }
    }
}

fn equi(a: &Args, c: &mut Client) {
    let (n_in, n_out) = (a.inner, a.outer);
    println!("\n## Equi-join: {n_out} outer rows x {n_in} inner rows (int8 keys)\n");
    let t = Instant::now();
    c.batch_execute(
        "DROP TABLE IF EXISTS bj_inner, bj_outer; CREATE TABLE bj_inner (k int8, v int8); CREATE TABLE bj_outer (id int8, k int8)",
    )
    .unwrap();
    // Unique keys 0..n_in in a random heap order (i * p mod n_in, p a
    // prime that divides no n_in below 2^31: a permutation); outer keys
    // drawn uniformly from them.
    let perm = move |i: u64| ((i as u128 * 2_147_483_647u128) % n_in as u128) as u64;
    copy_in(c, "bj_inner", (0..n_in).map(|i| format!("{}\t{}", perm(i), i)));
    let mut rng = SplitMix64::new(5);
    copy_in(c, "bj_outer", (0..n_out).map(|i| format!("{i}\t{}", rng.below(n_in))));
    c.batch_execute("CREATE INDEX bj_inner_b ON bj_inner USING btree (k)").unwrap();
    vacuum(c, &["bj_inner", "bj_outer"]);
    let _ = c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm; SELECT pg_prewarm('bj_inner'), pg_prewarm('bj_inner_b')");
    eprintln!("equi tables built in {:.1} s", t.elapsed().as_secs_f64());
    let sql = "SELECT count(*), sum(bj_inner.v)::float8 FROM bj_outer JOIN bj_inner ON bj_inner.k = bj_outer.k";
    let builtin = [
        Setup {
            label: "nested loop (btree)",
            settings: "SET max_parallel_workers_per_gather = 0; SET enable_hashjoin = off; SET enable_mergejoin = off;",
            plan_has: "Nested Loop",
        },
        Setup {
            label: "hash join",
            settings: "SET max_parallel_workers_per_gather = 0; SET enable_mergejoin = off; SET enable_nestloop = off;",
            plan_has: "Hash Join",
        },
        Setup {
            label: "merge join",
            settings: "SET max_parallel_workers_per_gather = 0; SET enable_hashjoin = off; SET enable_nestloop = off;",
            plan_has: "Merge Join",
        },
        Setup { label: "planner (parallel)", settings: "", plan_has: "" },
    ];
    let mut rows = Vec::new();
    let mut plans = Vec::new();
    measure(&builtin, sql, "join", a.reps, &mut rows, &mut plans);
    let t = Instant::now();
    c.batch_execute("CREATE INDEX bj_inner_g ON bj_inner USING gpu_btree (k); ANALYZE bj_inner").unwrap();
    let _ = c.batch_execute("SELECT pg_prewarm('bj_inner_g')");
    eprintln!("gpu_btree index built in {:.1} s", t.elapsed().as_secs_f64());
    let ours = [
        Setup { label: "GpuIndexJoin (auto)", settings: "SET max_parallel_workers_per_gather = 0; SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off;", plan_has: "GpuIndexJoin" },
        Setup { label: "GpuIndexJoin (cpu)", settings: "SET max_parallel_workers_per_gather = 0; SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off; SET gpuindex.device = cpu;", plan_has: "GpuIndexJoin" },
        Setup { label: "GpuIndexJoin (auto, chunk 256K)", settings: "SET max_parallel_workers_per_gather = 0; SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off; SET gpuindex.join_chunk = 262144;", plan_has: "GpuIndexJoin" },
        Setup { label: "planner (serial, gpuindex)", settings: SERIAL, plan_has: "" },
        Setup { label: "planner (parallel, gpuindex)", settings: "", plan_has: "" },
    ];
    let mut rows2 = Vec::new();
    measure(&ours, sql, "join", a.reps, &mut rows2, &mut plans);
    let all: Vec<Setup> = builtin.into_iter().chain(ours).collect();
    for (r, r2) in rows.iter_mut().zip(rows2) {
        r.values.extend(r2.values);
    }
    let labels: Vec<&str> = all.iter().map(|s| s.label).collect();
    print_table(&labels, &rows);
    println!("\n| measure | baseline | time | ours | time | ratio |\n|---|---|---:|---|---:|---:|");
    ratio_lines(&rows, &all, "GpuIndexJoin (auto)", &["nested loop (btree)", "hash join", "merge join", "planner (parallel)"]);
    println!("\nPlans:");
    for p in plans {
        println!("- {p}");
    }
    c.batch_execute("DROP TABLE bj_inner, bj_outer").unwrap();
}

fn spatial(a: &Args, c: &mut Client) {
    let (n, m, kc) = (a.points, a.boxes, a.centres);
    const SIDE: f64 = 1e6;
    println!("\n## Spatial: {m} boxes (~10 points each) and {kc} kNN centres (k = 10) x {n} uniform points in [0, 1e6)^2\n");
    let t = Instant::now();
    c.batch_execute(
        "DROP TABLE IF EXISTS bj_pts, bj_boxes, bj_centres; CREATE TABLE bj_pts (id int8, p point);
         CREATE TABLE bj_boxes (id int8, b box); CREATE TABLE bj_centres (id int8, c point)",
    )
    .unwrap();
    let mut rng = SplitMix64::new(11);
    copy_in(c, "bj_pts", (0..n).map(|i| format!("{}\t({:?},{:?})", i + 1, rng.unit() * SIDE, rng.unit() * SIDE)));
    let side = (SIDE * SIDE * 10.0 / n as f64).sqrt();
    let mut rng = SplitMix64::new(12);
    copy_in(
        c,
        "bj_boxes",
        (0..m).map(|i| {
            let (x, y) = (rng.unit() * SIDE, rng.unit() * SIDE);
            format!("{i}\t(({:?},{:?}),({:?},{:?}))", x + side, y + side, x, y)
        }),
    );
    copy_in(c, "bj_centres", (0..kc).map(|i| format!("{i}\t({:?},{:?})", rng.unit() * SIDE, rng.unit() * SIDE)));
    vacuum(c, &["bj_pts", "bj_boxes", "bj_centres"]);
    let _ = c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm; SELECT pg_prewarm('bj_pts')");
    eprintln!("spatial tables built in {:.1} s", t.elapsed().as_secs_f64());
    let queries = [
        (
            "boxes to rows",
            "SELECT count(*), sum(bj_pts.id)::float8 FROM bj_boxes CROSS JOIN LATERAL (SELECT id FROM bj_pts WHERE p <@ bj_boxes.b) bj_pts",
        ),
        (
            "kNN (k = 10) to rows",
            "SELECT count(s.id), sum(s.d) FROM bj_centres CROSS JOIN LATERAL (SELECT id, p <-> bj_centres.c AS d FROM bj_pts ORDER BY p <-> bj_centres.c LIMIT 10) s",
        ),
    ];
    let mut rows = Vec::new();
    let mut plans = Vec::new();
    let mut all: Vec<Setup> = Vec::new();
    let indexes: [(&str, &str, Vec<Setup>); 3] = [
        ("gist (p)", "bj_pts_i", vec![Setup { label: "LATERAL over GiST", settings: SERIAL, plan_has: "bj_pts_i" }]),
        ("spgist (p quad_point_ops)", "bj_pts_i", vec![Setup { label: "LATERAL over SP-GiST", settings: SERIAL, plan_has: "bj_pts_i" }]),
        (
            "gpu_spatial (p)",
            "GpuIndexJoin",
            vec![
                Setup {
                    label: "GpuIndexJoin (auto)",
                    settings: "SET max_parallel_workers_per_gather = 0; SET enable_nestloop = off;",
                    plan_has: "GpuIndexJoin",
                },
                Setup {
                    label: "GpuIndexJoin (cpu)",
                    settings: "SET max_parallel_workers_per_gather = 0; SET enable_nestloop = off; SET gpuindex.device = cpu;",
                    plan_has: "GpuIndexJoin",
                },
                Setup { label: "planner (parallel, gpuindex)", settings: "", plan_has: "" },
            ],
        ),
    ];
    for (using, _, setups) in indexes {
        let t = Instant::now();
        c.batch_execute(&format!("DROP INDEX IF EXISTS bj_pts_i; CREATE INDEX bj_pts_i ON bj_pts USING {using}")).unwrap();
        vacuum(c, &["bj_pts"]);
        let _ = c.batch_execute("SELECT pg_prewarm('bj_pts_i')");
        eprintln!("{using} built in {:.1} s", t.elapsed().as_secs_f64());
        let mut part = Vec::new();
        for (what, sql) in queries {
            // SP-GiST's quad opclass answers both; every setup must.
            measure(&setups, sql, what, a.reps, &mut part, &mut plans);
        }
        if rows.is_empty() {
            rows = part;
        } else {
            for (r, p) in rows.iter_mut().zip(part) {
                r.values.extend(p.values);
            }
        }
        all.extend(setups);
    }
    let labels: Vec<&str> = all.iter().map(|s| s.label).collect();
    print_table(&labels, &rows);
    println!("\n| measure | baseline | time | ours | time | ratio |\n|---|---|---:|---|---:|---:|");
    ratio_lines(&rows, &all, "GpuIndexJoin (auto)", &["LATERAL over GiST", "LATERAL over SP-GiST"]);
    println!("\nPlans:");
    for p in plans {
        println!("- {p}");
    }
    c.batch_execute("DROP TABLE bj_pts, bj_boxes, bj_centres").unwrap();
}

fn metric(a: &Args, c: &mut Client) {
    use gpuindex_engine::datasets::VectorSet;
    let (n, dim, m) = (a.vectors as usize, a.dim, a.queries as usize);
    println!("\n## Metric: {m} outer rows x {n} vectors of {dim} floats (clustered), 10 nearest each (L2)\n");
    let array = |v: &[f32]| format!("{{{}}}", v.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>().join(","));
    let t = Instant::now();
    c.batch_execute("DROP TABLE IF EXISTS bj_vec, bj_vq; CREATE TABLE bj_vec (id int8, v real[]); CREATE TABLE bj_vq (id int8, q real[])")
        .unwrap();
    for (table, rows, seed) in [("bj_vec", n, 1u64), ("bj_vq", m, 1 << 40)] {
        let mut w = c.copy_in(&format!("COPY {table} FROM STDIN")).unwrap();
        for start in (0..rows).step_by(50_000) {
            let count = 50_000.min(rows - start);
            let data = VectorSet::vectors(VectorSet::Clustered, count, dim, seed + start as u64);
            let mut buf = String::new();
            for (i, v) in data.chunks(dim).enumerate() {
                buf.push_str(&format!("{}\t{}\n", start + i + 1, array(v)));
            }
            w.write_all(buf.as_bytes()).unwrap();
        }
        w.finish().unwrap();
    }
    vacuum(c, &["bj_vec", "bj_vq"]);
    let _ = c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm; SELECT pg_prewarm('bj_vec')");
    c.batch_execute("CREATE INDEX bj_vec_v ON bj_vec USING gpu_metric (v)").unwrap();
    eprintln!("metric tables and index built in {:.1} s", t.elapsed().as_secs_f64());
    let join = |limit: &str| {
        format!(
            "SELECT count(s.id), sum(s.d) FROM (SELECT * FROM bj_vq ORDER BY id {limit}) o
             CROSS JOIN LATERAL (SELECT id, v <-> o.q AS d FROM bj_vec ORDER BY v <-> o.q LIMIT 10) s"
        )
    };
    let mut rows = Vec::new();
    let mut plans = Vec::new();
    let ours = [
        Setup {
            label: "GpuIndexJoin (auto)",
            settings: "SET max_parallel_workers_per_gather = 0; SET enable_nestloop = off;",
            plan_has: "GpuIndexJoin",
        },
        Setup {
            label: "GpuIndexJoin (cpu)",
            settings: "SET max_parallel_workers_per_gather = 0; SET enable_nestloop = off; SET gpuindex.device = cpu;",
            plan_has: "GpuIndexJoin",
        },
    ];
    measure(&ours[..1], &join(""), &format!("{m} outer rows"), a.reps, &mut rows, &mut plans);
    // The slow ones on a few outer rows, then per row.
    let few = [
        (100, Setup { label: "nested loop (gpu_metric index scans)", settings: "SET gpuindex.enable_join = off;", plan_has: "bj_vec_v" }),
        (
            10,
            Setup {
                label: "nested loop (sequential scans)",
                settings: "SET gpuindex.enable_join = off; SET enable_indexscan = off;",
                plan_has: "Seq Scan on bj_vec",
            },
        ),
    ];
    let mut per_row = Vec::new();
    for (count, s) in few.iter().chain([(100, ours[0]), (100, ours[1])].iter()) {
        let mut r = Vec::new();
        measure(
            std::slice::from_ref(s),
            &join(&format!("LIMIT {count}")),
            &format!("first {count} outer rows"),
            a.reps.min(2),
            &mut r,
            &mut plans,
        );
        per_row.push((s.label, r[0].values[0] / *count as f64));
    }
    println!("| measure | GpuIndexJoin (auto) |\n|---|---:|\n| {m} outer rows to rows | {:.1} ms |", rows[0].values[0]);
    println!("\n| per outer row | ms | {m} outer rows at that rate |\n|---|---:|---:|");
    for (label, ms) in &per_row {
        println!("| {label} | {ms:.3} | {:.1} s |", ms * m as f64 / 1e3);
    }
    println!("\nPlans:");
    for p in plans {
        println!("- {p}");
    }
    c.batch_execute("DROP TABLE bj_vec, bj_vq").unwrap();
}

fn main() {
    let a = args();
    let mut c = connect();
    println!("# gpuindex-sql-bench-join: median of {} runs", a.reps);
    println!("\n{}", describe_server(&mut c));
    for part in &a.parts {
        match part.as_str() {
            "equi" => equi(&a, &mut c),
            "spatial" => spatial(&a, &mut c),
            "metric" => metric(&a, &mut c),
            other => panic!("unknown part {other} (equi, spatial, metric)"),
        }
    }
}

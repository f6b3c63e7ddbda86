//! gpuindex-sql-bench-join: the batched index join (GpuIndexJoin) against
//! PostgreSQL's own joins on the same tables, in one run, on a live server
//! (PGHOST/PGPORT/PGUSER).
//!
//!   gpuindex-sql-bench-join [--outer 1e6] [--inner 1e7] [--boxes 1e5] [--points 1e7]
//!                           [--reps 3] [--parts equi,boxes]
//!
//! - equi: `--outer` rows of random int8 keys joined with `--inner` rows
//!   (unique keys in random heap order, every outer key matching one row),
//!   `count(*), sum(inner.v)` over the joined rows: the nested loop over
//!   btree, the hash join and the merge join (each forced), the planner's
//!   own choice with btree, all with one backend and again with
//!   PostgreSQL's default parallel settings; then GpuIndexJoin over
//!   gpu_btree (device auto and cpu), forced and as the planner chooses.
//! - boxes: `--boxes` boxes of ~10 points each joined with `--points`
//!   uniform points (`p <@ b`): the LATERAL join over GiST (a nested loop
//!   of index scans: what the planner picks) against GpuIndexJoin over
//!   gpu_spatial.
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
    reps: usize,
    parts: Vec<String>,
}

fn args() -> Args {
    let mut a = Args {
        outer: 1_000_000,
        inner: 10_000_000,
        boxes: 100_000,
        points: 10_000_000,
        reps: 3,
        parts: vec!["equi".into(), "boxes".into()],
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
            "--reps" => a.reps = num() as usize,
            "--parts" => a.parts = v.split(',').map(str::to_string).collect(),
            _ => panic!("usage: gpuindex-sql-bench-join [--outer N] [--inner N] [--boxes N] [--points N] [--reps N] [--parts equi,boxes]"),
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
            let keep = ["Chunks", "GPU Chunks", "Probes", "Index Matches", "Heap Fetches", "Index Time", "Heap Time", "Execution Time"];
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
        Setup { label: "GpuIndexJoin (auto, chunk 1M)", settings: "SET max_parallel_workers_per_gather = 0; SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off; SET gpuindex.join_chunk = 1048576;", plan_has: "GpuIndexJoin" },
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

fn boxes(a: &Args, c: &mut Client) {
    let (n, m) = (a.points, a.boxes);
    const SIDE: f64 = 1e6;
    println!("\n## Boxes: {m} boxes (~10 points each) x {n} uniform points in [0, 1e6)^2\n");
    let t = Instant::now();
    c.batch_execute(
        "DROP TABLE IF EXISTS bj_pts, bj_boxes; CREATE TABLE bj_pts (id int8, p point); CREATE TABLE bj_boxes (id int8, b box)",
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
    c.batch_execute("CREATE INDEX bj_pts_gist ON bj_pts USING gist (p)").unwrap();
    vacuum(c, &["bj_pts", "bj_boxes"]);
    let _ = c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm; SELECT pg_prewarm('bj_pts'), pg_prewarm('bj_pts_gist')");
    eprintln!("box tables built in {:.1} s", t.elapsed().as_secs_f64());
    let sql =
        "SELECT count(*), sum(bj_pts.id)::float8 FROM bj_boxes CROSS JOIN LATERAL (SELECT id FROM bj_pts WHERE p <@ bj_boxes.b) bj_pts";
    let builtin = [
        Setup { label: "LATERAL over GiST", settings: SERIAL, plan_has: "bj_pts_gist" },
        Setup { label: "planner (parallel)", settings: "", plan_has: "" },
    ];
    let mut rows = Vec::new();
    let mut plans = Vec::new();
    measure(&builtin, sql, "join to rows", a.reps, &mut rows, &mut plans);
    let t = Instant::now();
    c.batch_execute("DROP INDEX bj_pts_gist; CREATE INDEX bj_pts_g ON bj_pts USING gpu_spatial (p)").unwrap();
    vacuum(c, &["bj_pts"]);
    let _ = c.batch_execute("SELECT pg_prewarm('bj_pts_g')");
    eprintln!("gpu_spatial index built in {:.1} s", t.elapsed().as_secs_f64());
    let ours = [
        Setup { label: "GpuIndexJoin (auto)", settings: "SET max_parallel_workers_per_gather = 0; SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off;", plan_has: "GpuIndexJoin" },
        Setup { label: "GpuIndexJoin (cpu)", settings: "SET max_parallel_workers_per_gather = 0; SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off; SET gpuindex.device = cpu;", plan_has: "GpuIndexJoin" },
        Setup { label: "planner (parallel, gpuindex)", settings: "", plan_has: "" },
    ];
    let mut rows2 = Vec::new();
    measure(&ours, sql, "join to rows", a.reps, &mut rows2, &mut plans);
    let all: Vec<Setup> = builtin.into_iter().chain(ours).collect();
    for (r, r2) in rows.iter_mut().zip(rows2) {
        r.values.extend(r2.values);
    }
    let labels: Vec<&str> = all.iter().map(|s| s.label).collect();
    print_table(&labels, &rows);
    println!("\n| measure | baseline | time | ours | time | ratio |\n|---|---|---:|---|---:|---:|");
    ratio_lines(&rows, &all, "GpuIndexJoin (auto)", &["LATERAL over GiST", "planner (parallel)"]);
    println!("\nPlans:");
    for p in plans {
        println!("- {p}");
    }
    c.batch_execute("DROP TABLE bj_pts, bj_boxes").unwrap();
}

fn main() {
    let a = args();
    let mut c = connect();
    println!("# gpuindex-sql-bench-join: median of {} runs", a.reps);
    println!("\n{}", describe_server(&mut c));
    for part in &a.parts {
        match part.as_str() {
            "equi" => equi(&a, &mut c),
            "boxes" => boxes(&a, &mut c),
            other => panic!("unknown part {other} (equi, boxes)"),
        }
    }
}

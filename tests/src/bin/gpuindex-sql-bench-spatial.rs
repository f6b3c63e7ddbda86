//! gpuindex-sql-bench-spatial: gpu_spatial against GiST and SP-GiST (quad)
//! on the same table of points, in one run, on a live server
//! (PGHOST/PGPORT/PGUSER).
//!
//!   gpuindex-sql-bench-spatial [--rows 1e7] [--reps 3] [--queries 1e5] [--set uniform] [--rounds 0]
//!
//! Builds sp(id int8, p point) with points of `--set` (datasets::PointSet:
//! `uniform` in [0, 1e6)^2, or `cities`, the real-shaped set scaled to the
//! same square, outliers to 1e18), then for
//! each index in turn (GiST; SP-GiST quad_point_ops; gpu_spatial with
//! gpuindex.device = auto and = cpu) measures CREATE INDEX, size, single
//! box / circle / kNN (k = 10) queries, and batches of boxes and circles
//! (`--queries`, ~10 points each) and of kNN centres (a tenth as many):
//! through a LATERAL join over the index (what PostgreSQL users write
//! today), and for gpu_spatial through its batch functions joined back to
//! the table by ctid. Every answer (count and sum of ids; for kNN, count
//! and sum of distances) is checked against GiST's. Prints the table, the
//! ratios the targets name, and the plans.
//!
//! `--rounds R` measures only the single queries, interleaved: every index
//! exists at once, and in each of R rounds each contender (in an order
//! that rotates from round to round) gets a fresh session that drops the
//! other indexes inside a transaction it rolls back. Single queries take
//! tens of microseconds, and on a shared host the same binaries drift by
//! more than the gaps between indexes from one minute to the next: one
//! contender measured after another compares the minutes, not the indexes.

use gpuindex_engine::datasets::PointSet;
use gpuindex_tests::bench::{
    buffers_of, connect, contender_session, describe_server, plan_of, print_table, push, rounds_cell, time, Row, SplitMix64,
};
use postgres::{Client, ToStatement};
use std::io::Write;
use std::time::Instant;

const SIDE: f64 = 1e6;

struct Args {
    rows: u64,
    reps: usize,
    queries: usize,
    set: PointSet,
    rounds: usize,
}

fn args() -> Args {
    let mut a = Args { rows: 10_000_000, reps: 3, queries: 100_000, set: PointSet::Uniform, rounds: 0 };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{x} needs a value"));
        let num = || v.parse::<f64>().unwrap_or_else(|_| panic!("{x} takes a number")) as u64;
        match x.as_str() {
            "--rows" => a.rows = num(),
            "--reps" => a.reps = num() as usize,
            "--queries" => a.queries = num() as usize,
            "--set" => a.set = PointSet::parse(&v).expect("--set uniform|cities"),
            "--rounds" => a.rounds = num() as usize,
            _ => panic!("usage: gpuindex-sql-bench-spatial [--rows N] [--reps N] [--queries N] [--set NAME] [--rounds N]"),
        }
    }
    a
}

/// One answer: a count and a sum (of ids, or of kNN distances).
#[derive(Clone, Copy, Debug)]
struct Answer {
    count: i64,
    sum: f64,
}

impl Answer {
    fn same(&self, o: &Answer) -> bool {
        self.count == o.count && (self.sum - o.sum).abs() <= 1e-9 * self.sum.abs().max(1.0)
    }
}

/// Whether the plan of `sql` reads `index` at all (SP-GiST's quad
/// opclass has no `<@ circle`: PostgreSQL would scan the table per query).
fn uses_index(c: &mut Client, index: &str, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> bool {
    let plan = c.query(&format!("EXPLAIN {sql}"), params).unwrap();
    plan.iter().any(|r| r.get::<_, String>(0).contains(index))
}

fn answer<T: ?Sized + ToStatement>(c: &mut Client, sql: &T, params: &[&(dyn postgres::types::ToSql + Sync)]) -> Answer {
    let r = c.query_one(sql, params).unwrap();
    Answer { count: r.get(0), sum: r.get::<_, Option<f64>>(1).unwrap_or(0.0) }
}

/// A single-query measure: one statement, run once per parameter list
/// (x, y, and the size of a box or a circle); `kind` picks the same
/// statement in `bench_sp_loop`.
struct Single {
    what: &'static str,
    sql: &'static str,
    params: Vec<Vec<f64>>,
    kind: i32,
}

/// The single queries run in the server, one after another, by a PL/pgSQL
/// loop (its plans cached as a prepared statement's are): microseconds a
/// query without the client's round trip.
const SERVER_LOOP: &str = "CREATE OR REPLACE FUNCTION bench_sp_loop(kind int, xs float8[], ys float8[], size float8) RETURNS float8
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp(); c int8; s float8;
BEGIN
  FOR i IN 1 .. array_length(xs, 1) LOOP
    IF kind = 0 THEN
      SELECT count(*), sum(id)::float8 INTO c, s FROM bench_sp WHERE p <@ box(point(xs[i], ys[i]), point(xs[i] + size, ys[i] + size));
    ELSIF kind = 1 THEN
      SELECT count(*), sum(id)::float8 INTO c, s FROM bench_sp WHERE p <@ circle(point(xs[i], ys[i]), size);
    ELSE
      SELECT count(*), sum(d) INTO c, s FROM (SELECT p <-> point(xs[i], ys[i]) d FROM bench_sp ORDER BY p <-> point(xs[i], ys[i]) LIMIT 10) z;
    END IF;
  END LOOP;
  RETURN extract(epoch FROM clock_timestamp() - t0) * 1e6 / array_length(xs, 1);
END $$";

impl Single {
    /// Runs every query once; the answers summed.
    fn run(&self, c: &mut Client, st: &postgres::Statement) -> Answer {
        let mut total = Answer { count: 0, sum: 0.0 };
        for p in &self.params {
            let r = answer(c, st, &params(p));
            total.count += r.count;
            total.sum += r.sum;
        }
        total
    }
}

fn params(p: &[f64]) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
    p.iter().map(|x| x as &(dyn postgres::types::ToSql + Sync)).collect()
}

fn main() {
    let a = args();
    let n = a.rows;
    let mut c = connect();
    if a.rounds > 0 {
        println!("# gpuindex-sql-bench-spatial: {n} points ({}), single queries in {} interleaved rounds", a.set.name(), a.rounds);
    } else {
        println!("# gpuindex-sql-bench-spatial: {n} points ({}), median of {} runs", a.set.name(), a.reps);
    }
    println!("\n{}", describe_server(&mut c));

    let t = Instant::now();
    c.batch_execute("DROP TABLE IF EXISTS bench_sp, bench_sp_q; CREATE TABLE bench_sp (id int8, p point);").unwrap();
    // The sets' [0, 1000)^2 scaled to [0, SIDE)^2.
    let scale = SIDE / 1000.0;
    {
        let mut w = c.copy_in("COPY bench_sp (id, p) FROM STDIN").unwrap();
        let mut rng = SplitMix64::new(42);
        let mut buf = String::new();
        for i in 0..n {
            let (x, y) = a.set.point(&mut rng, i);
            buf.push_str(&format!("{}\t({:?},{:?})\n", i + 1, x * scale, y * scale));
            if buf.len() > 1 << 20 {
                w.write_all(buf.as_bytes()).unwrap();
                buf.clear();
            }
        }
        w.write_all(buf.as_bytes()).unwrap();
        w.finish().unwrap();
    }
    c.batch_execute("VACUUM (ANALYZE) bench_sp").unwrap();
    eprintln!("table built in {:.1} s", t.elapsed().as_secs_f64());
    let _ = c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm; SELECT pg_prewarm('bench_sp')");

    // Boxes and circles of area ~1e6 (10 points each on average at 1e7
    // points), kNN centres; stored once as arrays that every form reads.
    let m = a.queries;
    let mut rng = SplitMix64::new(7);
    let set = a.set;
    let mut coords = |k: usize| -> (Vec<f64>, Vec<f64>) {
        (0..k)
            .map(|_| {
                let (x, y) = set.query_point(&mut rng);
                (x * scale, y * scale)
            })
            .unzip()
    };
    let (bx, by) = coords(m);
    let (cx, cy) = coords(m);
    let (kx, ky) = coords((m / 10).max(1));
    // Cities are ~100x denser than uniform points where queries look.
    let box_side = (SIDE * SIDE * 10.0 / n as f64).sqrt() / if set == PointSet::Cities { 10.0 } else { 1.0 };
    let radius = box_side / std::f64::consts::PI.sqrt();
    c.batch_execute("CREATE TABLE bench_sp_q (boxes box[], circles circle[], centers point[])").unwrap();
    c.execute(
        "INSERT INTO bench_sp_q SELECT
           (SELECT array_agg(box(point(x, y), point(x + $7, y + $7)) ORDER BY i) FROM unnest($1::float8[], $2::float8[]) WITH ORDINALITY u(x, y, i)),
           (SELECT array_agg(circle(point(x, y), $8) ORDER BY i) FROM unnest($3::float8[], $4::float8[]) WITH ORDINALITY u(x, y, i)),
           (SELECT array_agg(point(x, y) ORDER BY i) FROM unnest($5::float8[], $6::float8[]) WITH ORDINALITY u(x, y, i))",
        &[&bx, &by, &cx, &cy, &kx, &ky, &box_side, &radius],
    )
    .unwrap();
    let count = 2000.min(m);
    let singles = [
        Single {
            what: "single box query",
            sql: "SELECT count(*), sum(id)::float8 FROM bench_sp WHERE p <@ box(point($1, $2), point($1 + $3, $2 + $3))",
            params: (0..count.min(bx.len())).map(|j| vec![bx[j], by[j], box_side]).collect(),
            kind: 0,
        },
        Single {
            what: "single circle query",
            sql: "SELECT count(*), sum(id)::float8 FROM bench_sp WHERE p <@ circle(point($1, $2), $3)",
            params: (0..count.min(cx.len())).map(|j| vec![cx[j], cy[j], radius]).collect(),
            kind: 1,
        },
        Single {
            what: "single kNN query (k = 10)",
            sql: "SELECT count(*), sum(d) FROM (SELECT p <-> point($1, $2) d FROM bench_sp ORDER BY p <-> point($1, $2) LIMIT 10) s",
            params: (0..count.min(kx.len())).map(|j| vec![kx[j], ky[j]]).collect(),
            kind: 2,
        },
    ];

    if a.rounds > 0 {
        interleaved(&mut c, &singles, a.rounds);
        c.batch_execute("DROP TABLE bench_sp, bench_sp_q").unwrap();
        return;
    }

    let setups: [(&str, &str, &str); 4] = [
        ("GiST", "gist (p)", "auto"),
        ("SP-GiST (quad)", "spgist (p quad_point_ops)", "auto"),
        ("gpu_spatial (auto)", "gpu_spatial (p)", "auto"),
        ("gpu_spatial (cpu)", "gpu_spatial (p)", "cpu"),
    ];
    let labels: Vec<&str> = setups.iter().map(|s| s.0).collect();
    let ns = setups.len();
    let mut rows: Vec<Row> = Vec::new();
    let mut reference: Vec<Option<Answer>> = Vec::new(); // GiST's
    let mut plans: Vec<String> = Vec::new();
    let (boxes, circles, centers) =
        ("(SELECT boxes FROM bench_sp_q)", "(SELECT circles FROM bench_sp_q)", "(SELECT centers FROM bench_sp_q)");
    for (i, (label, using, device)) in setups.iter().enumerate() {
        let setting = format!("SET gpuindex.device = {device}");
        if i == 0 || setups[i - 1].1 != *using {
            c.batch_execute("DROP INDEX IF EXISTS bench_sp_p").unwrap();
            let t = Instant::now();
            c.batch_execute(&format!("CREATE INDEX bench_sp_p ON bench_sp USING {using}")).unwrap();
            push(&mut rows, ns, i, "CREATE INDEX".into(), "s", true, t.elapsed().as_secs_f64());
            c.batch_execute("VACUUM (ANALYZE) bench_sp").unwrap();
            let _ = c.batch_execute("SELECT pg_prewarm('bench_sp_p')");
            let size: i64 = c.query_one("SELECT pg_relation_size('bench_sp_p')", &[]).unwrap().get(0);
            push(&mut rows, ns, i, "index size".into(), "MiB", true, size as f64 / 1048576.0);
        } else {
            for r in rows.iter_mut().filter(|r| r.what == "CREATE INDEX" || r.what == "index size") {
                r.values[i] = r.values[i - 1];
            }
        }
        // Each measure in a fresh session: no CUDA context, pool or image
        // carried over from the one before (the first run of `time` warms).
        let session = || {
            let mut s = connect();
            s.batch_execute(&setting).unwrap();
            s
        };
        let mut answers: Vec<Option<Answer>> = Vec::new();

        // Single queries, one client, prepared.
        for q in &singles {
            let mut c = session();
            let st = c.prepare(q.sql).unwrap();
            if !uses_index(&mut c, "bench_sp_p", q.sql, &params(&q.params[0])) {
                answers.push(None);
                plans.push(format!("{label}: {} -> not measured: the index cannot answer it", q.what));
                continue;
            }
            let mut total = Answer { count: 0, sum: 0.0 };
            let secs = time(a.reps, || total = q.run(&mut c, &st));
            answers.push(Some(total));
            push(&mut rows, ns, i, q.what.into(), "us", true, secs / q.params.len() as f64 * 1e6);
            let (plan, buffers) = (plan_of(&mut c, q.sql, &params(&q.params[0])), buffers_of(&mut c, q.sql, &params(&q.params[0])));
            plans.push(format!("{label}: {} -> {plan} ({buffers})", q.what));
        }

        // Batches, in two forms: the matching (query, ctid) pairs (what the
        // functions return), and the matching rows read from the table.
        // LATERAL over the index for every index; gpu_spatial's batch
        // functions (joined back by ctid for rows).
        let kinds = [
            (format!("{m} boxes"), boxes, "WHERE p <@ q.v", "gpu_spatial_range('bench_sp_p', {a})"),
            (format!("{m} circles"), circles, "WHERE p <@ q.v", "gpu_spatial_within('bench_sp_p', {a})"),
            (format!("{} kNN (k = 10)", kx.len()), centers, "ORDER BY p <-> q.v LIMIT 10", "gpu_spatial_knn('bench_sp_p', {a}, 10)"),
        ];
        let mut lateral: Vec<(String, String)> = Vec::new();
        let mut functions: Vec<(String, String)> = Vec::new();
        for (name, arr, cond, call) in &kinds {
            let call = call.replace("{a}", arr);
            let knn = cond.starts_with("ORDER");
            let (lat_pairs, fun_pairs) = if knn {
                (
                    format!(
                        "SELECT count(*), sum(t.d) FROM unnest({arr}) q(v) CROSS JOIN LATERAL (SELECT p <-> q.v d FROM bench_sp {cond}) t"
                    ),
                    format!("SELECT count(*), sum(distance) FROM {call}"),
                )
            } else {
                (
                    format!("SELECT count(*), 0::float8 FROM unnest({arr}) q(v) CROSS JOIN LATERAL (SELECT ctid FROM bench_sp {cond}) t"),
                    format!("SELECT count(*), 0::float8 FROM {call}"),
                )
            };
            let (lat_rows, fun_rows) = if knn {
                (format!("SELECT count(t.id), sum(t.d) FROM unnest({arr}) q(v) CROSS JOIN LATERAL (SELECT id, p <-> q.v d FROM bench_sp {cond}) t"), format!("SELECT count(t.id), sum(r.distance) FROM {call} r JOIN bench_sp t ON t.ctid = r.ctid"))
            } else {
                (
                    format!(
                        "SELECT count(*), sum(t.id)::float8 FROM unnest({arr}) q(v) CROSS JOIN LATERAL (SELECT id FROM bench_sp {cond}) t"
                    ),
                    format!("SELECT count(*), sum(t.id)::float8 FROM {call} r JOIN bench_sp t ON t.ctid = r.ctid"),
                )
            };
            let fname = call.split('(').next().unwrap().to_string();
            lateral.push((format!("{name} -> (ord, ctid), LATERAL join"), lat_pairs));
            functions.push((format!("{name} -> (ord, ctid), {fname}"), fun_pairs));
            lateral.push((format!("{name} -> rows, LATERAL join"), lat_rows));
            functions.push((format!("{name} -> rows, {fname} + ctid join"), fun_rows));
        }
        let is_gpu = using.starts_with("gpu_spatial");
        for (j, (what, sql)) in lateral.iter().enumerate() {
            let mut c = session();
            let mut got = Answer { count: 0, sum: 0.0 };
            if uses_index(&mut c, "bench_sp_p", sql, &[]) {
                let secs = time(a.reps, || got = answer(&mut c, sql, &[]));
                answers.push(Some(got));
                push(&mut rows, ns, i, what.clone(), "ms", true, secs * 1e3);
                plans.push(format!("{label}: {what} -> {}", plan_of(&mut c, sql, &[])));
            } else {
                answers.push(None);
                plans.push(format!("{label}: {what} -> not measured: the index cannot answer it"));
            }
            let (what, sql) = &functions[j];
            if is_gpu {
                let mut c = session();
                let secs = time(a.reps, || got = answer(&mut c, sql, &[]));
                answers.push(Some(got));
                push(&mut rows, ns, i, what.clone(), "ms", true, secs * 1e3);
                // The engine's share: the index batch itself (for kNN, its
                // last within-distance round), and where it ran.
                let r = c.query_one("SELECT device, millis FROM gpuindex_last_batch()", &[]).unwrap();
                let (dev, ms): (String, f64) = (r.get(0), r.get(1));
                push(&mut rows, ns, i, format!("{what}: engine batch (last call)"), "ms", true, ms);
                plans.push(format!("{label}: {what} -> {} (engine batch on {dev})", plan_of(&mut c, sql, &[])));
            } else {
                answers.push(None);
            }
        }
        if i == 0 {
            reference = answers;
        } else {
            for (k, (x, r)) in answers.iter().zip(&reference).enumerate() {
                if let (Some(x), Some(r)) = (x, r) {
                    assert!(x.same(r), "{label} answered {x:?} where GiST answered {r:?} (answer {k})");
                }
            }
        }
    }
    c.batch_execute("DROP TABLE bench_sp, bench_sp_q").unwrap();

    println!();
    print_table(&labels, &rows);
    println!("\nEvery answer was checked against GiST's (count and sum of ids; for kNN, count and sum of distances).");
    println!("\"-\": not measured (no such function, or an operator the index does not support).");
    let get = |what: &str, i: usize| rows.iter().find(|r| r.what.starts_with(what)).map(|r| r.values[i]).unwrap_or(f64::NAN);
    println!("\nRatios (> 1: gpu_spatial (auto) faster):\n");
    println!("| measure | best of GiST, SP-GiST (LATERAL) | gpu_spatial (auto) | ratio |");
    println!("|---|---:|---:|---:|");
    for (l, f) in rows.iter().filter(|r| r.what.contains("LATERAL")).map(|r| r.what.clone()).collect::<Vec<_>>().iter().zip(
        rows.iter().filter(|r| r.what.contains("gpu_spatial_") && !r.what.contains("engine")).map(|r| r.what.clone()).collect::<Vec<_>>(),
    ) {
        let best = get(l, 0).min(get(l, 1)); // f64::min skips NaN
        let g = get(&f, 2);
        println!("| {f} vs LATERAL | {best:.1} ms | {g:.1} ms | {:.2}x |", best / g);
    }
    for what in ["single box query", "single circle query", "single kNN query"] {
        let (gist, g) = (get(what, 0), get(what, 2));
        println!("| {what}: vs GiST | {gist:.1} us (GiST) | {g:.1} us | {:.2}x |", gist / g);
    }
    println!("\nPlans:");
    for p in plans {
        println!("- {p}");
    }
}

/// `--rounds`: the single queries alone, with every index built and the
/// contenders interleaved (see the header). Prints, per query and
/// contender, the median microseconds a query over the rounds, the
/// fastest and slowest round, and in how many rounds gpu_spatial (auto)
/// was at least as fast as both built-in indexes.
fn interleaved(c: &mut Client, singles: &[Single], rounds: usize) {
    let indexes = [("bench_sp_gist", "gist (p)"), ("bench_sp_spgist", "spgist (p quad_point_ops)"), ("bench_sp_gpu", "gpu_spatial (p)")];
    for (name, using) in indexes {
        let t = Instant::now();
        c.batch_execute(&format!("CREATE INDEX {name} ON bench_sp USING {using}")).unwrap();
        eprintln!("{name} built in {:.1} s", t.elapsed().as_secs_f64());
    }
    c.batch_execute("VACUUM (ANALYZE) bench_sp").unwrap();
    c.batch_execute(SERVER_LOOP).unwrap();
    for (name, _) in indexes {
        let _ = c.batch_execute(&format!("SELECT pg_prewarm('{name}')"));
    }
    // (label, the index kept, gpuindex.device)
    let contenders =
        [("GiST", 0, "auto"), ("SP-GiST (quad)", 1, "auto"), ("gpu_spatial (auto)", 2, "auto"), ("gpu_spatial (cpu)", 2, "cpu")];
    let n = contenders.len();
    let names: Vec<&str> = indexes.iter().map(|x| x.0).collect();
    // us[query][contender]: microseconds a query, one value per round;
    // server[..]: the same in the server's loop.
    let mut us = vec![vec![Vec::new(); n]; singles.len()];
    let mut server = us.clone();
    let mut reference: Vec<Option<Answer>> = vec![None; singles.len()];
    for r in 0..rounds {
        for k in 0..n {
            let j = (k + r) % n;
            let (label, keep, device) = contenders[j];
            let mut s = contender_session(&names, keep, &format!("SET LOCAL gpuindex.device = {device}"));
            for (m, q) in singles.iter().enumerate() {
                if !uses_index(&mut s, indexes[keep].0, q.sql, &params(&q.params[0])) {
                    us[m][j].push(f64::NAN);
                    server[m][j].push(f64::NAN);
                    continue;
                }
                let st = s.prepare(q.sql).unwrap();
                // A pass to warm: the plan cached, the pages and the index's
                // shape read; then the timed pass.
                let got = q.run(&mut s, &st);
                let t = Instant::now();
                q.run(&mut s, &st);
                let v = t.elapsed().as_secs_f64() / q.params.len() as f64 * 1e6;
                eprintln!("round {r}: {label}: {}: {v:.1} us", q.what);
                us[m][j].push(v);
                let (xs, ys): (Vec<f64>, Vec<f64>) = q.params.iter().map(|p| (p[0], p[1])).unzip();
                let size = q.params[0].get(2).copied().unwrap_or(0.0);
                let v: f64 = s.query_one("SELECT bench_sp_loop($1, $2, $3, $4)", &[&q.kind, &xs, &ys, &size]).unwrap().get(0);
                eprintln!("round {r}: {label}: {}, in the server: {v:.1} us", q.what);
                server[m][j].push(v);
                match &reference[m] {
                    Some(want) => assert!(got.same(want), "{label} answered {got:?} to {} where another index answered {want:?}", q.what),
                    None => reference[m] = Some(got),
                }
            }
            s.batch_execute("ROLLBACK").unwrap();
        }
    }
    println!("\nSingle queries, interleaved: {rounds} rounds, each contender in a fresh session per round, the order rotating;");
    println!(
        "a warm-up pass, then one timed pass of {} queries per measure from the client (prepared), then the same queries in a",
        singles[0].params.len()
    );
    println!("PL/pgSQL loop in the server. Median microseconds a query (fastest - slowest round).\n");
    let labels: Vec<&str> = contenders.iter().map(|c| c.0).collect();
    println!("| measure | {} | rounds gpu_spatial (auto) <= best built-in |", labels.join(" | "));
    println!("|---|{}---:|", "---:|".repeat(n));
    for (m, q) in singles.iter().enumerate() {
        for (where_, t) in [("client", &us[m]), ("in the server (PL/pgSQL loop)", &server[m])] {
            let cells: Vec<String> = t.iter().map(|v| rounds_cell(v)).collect();
            // f64::min skips NaN: the best built-in index that answered.
            let wins = (0..rounds).filter(|&r| t[2][r] <= t[0][r].min(t[1][r])).count();
            println!("| {}, {where_} | {} | {wins} of {rounds} |", q.what, cells.join(" | "));
        }
    }
    println!("\nEvery answer was checked against the first contender's (count and sum of ids; for kNN, count and sum of distances).");
}

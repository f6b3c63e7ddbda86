//! gpuindex-sql-bench: gpu_btree against PostgreSQL's btree on the same
//! table, in one run, on a live server (PGHOST/PGPORT/PGUSER).
//!
//!   gpuindex-sql-bench [--rows 1e7] [--reps 5]
//!
//! Builds t(k int8 unique in random physical order, payload int8), VACUUMs
//! it, then for each index in turn (btree; gpu_btree with
//! gpuindex.device = auto and = cpu) measures CREATE INDEX, size, single
//! lookups, `= ANY` of 1K/16K/128K keys (index-only count and heap-reading
//! sum), BETWEEN ranges of 1..10K rows, the batch function against the
//! equivalent join, and inserts. Prints one table; every answer is checked
//! against btree's.

use gpuindex_tests::bench::{connect, describe_server, plan_of, push, time, Row, SplitMix64};
use std::time::Instant;

struct Args {
    rows: u64,
    reps: usize,
}

fn args() -> Args {
    let mut a = Args { rows: 10_000_000, reps: 5 };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{x} needs a value"));
        match x.as_str() {
            "--rows" => a.rows = v.parse::<f64>().expect("--rows N") as u64,
            "--reps" => a.reps = v.parse().expect("--reps N"),
            _ => panic!("usage: gpuindex-sql-bench [--rows N] [--reps N]"),
        }
    }
    a
}

fn main() {
    let a = args();
    let mut c = connect();
    let n = a.rows;
    println!("# gpuindex-sql-bench: {n} rows, median of {} runs", a.reps);
    println!("\n{}", describe_server(&mut c));

    // k: a permutation of 0..n (a multiplicative hash with a prime
    // multiplier), so keys are unique and the heap order is scrambled.
    let t = Instant::now();
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS bench_t;
         CREATE TABLE bench_t (k int8, payload int8);
         INSERT INTO bench_t SELECT (i * 2654435761) % {n}, i FROM generate_series(0, {n} - 1) i;"
    ))
    .unwrap();
    c.batch_execute("VACUUM (ANALYZE) bench_t").unwrap();
    eprintln!("table built in {:.1} s", t.elapsed().as_secs_f64());
    let _ = c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm; SELECT pg_prewarm('bench_t')");

    let setups: [(&str, &str, &str); 3] = [
        ("btree", "btree", "SET gpuindex.device = auto"),
        ("gpu_btree (auto)", "gpu_btree", "SET gpuindex.device = auto"),
        ("gpu_btree (cpu)", "gpu_btree", "SET gpuindex.device = cpu"),
    ];
    let mut rows: Vec<Row> = Vec::new();
    let mut rng = SplitMix64::new(42);
    let probe_sets: Vec<Vec<i64>> = [1_000usize, 16_000, 128_000]
        .iter()
        .map(|&m| (0..m).map(|_| rng.below(n + n / 10) as i64).collect()) // ~9% misses
        .collect();
    let singles: Vec<i64> = (0..20_000).map(|_| rng.below(n) as i64).collect();
    let mut reference: Vec<i64> = Vec::new(); // btree's answers
    let mut plans: Vec<String> = Vec::new();
    for (i, (label, am, setting)) in setups.iter().enumerate() {
        c.batch_execute(setting).unwrap();
        let rebuilt = i == 0 || setups[i - 1].1 != *am;
        if rebuilt {
            c.batch_execute("DROP INDEX IF EXISTS bench_t_k").unwrap();
            let t = Instant::now();
            c.batch_execute(&format!("CREATE INDEX bench_t_k ON bench_t USING {am} (k)")).unwrap();
            let build = t.elapsed().as_secs_f64();
            c.batch_execute("ANALYZE bench_t").unwrap();
            let _ = c.batch_execute("SELECT pg_prewarm('bench_t_k')");
            push(&mut rows, setups.len(), i, "CREATE INDEX".into(), "s", true, build);
            let size: i64 = c.query_one("SELECT pg_relation_size('bench_t_k')", &[]).unwrap().get(0);
            push(&mut rows, setups.len(), i, "index size".into(), "MiB", true, size as f64 / 1048576.0);
        } else {
            for r in rows.iter_mut().filter(|r| r.what == "CREATE INDEX" || r.what == "index size") {
                r.values[i] = r.values[i - 1];
            }
        }
        let mut answers: Vec<i64> = Vec::new();
        // Each group of measures gets a fresh session (no state carried
        // from the one before: CUDA context, CPU pool, caches).
        let session = |extra: &str| {
            let mut s = connect();
            s.batch_execute(setting).unwrap();
            s.batch_execute(extra).unwrap();
            s
        };
        let mut c = session("");
        // Single lookups, one client, prepared.
        let st = c.prepare("SELECT payload FROM bench_t WHERE k = $1").unwrap();
        let secs = time(a.reps.min(3), || {
            for k in &singles {
                c.query(&st, &[k]).unwrap();
            }
        });
        push(&mut rows, setups.len(), i, "single lookup (k = $1)".into(), "us", true, secs / singles.len() as f64 * 1e6);
        plans.push(format!("{label}: k = $1 -> {}", plan_of(&mut c, "SELECT payload FROM bench_t WHERE k = 42", &[])));
        for p in &probe_sets {
            let m = p.len();
            for (what, sql, forced) in [
                (format!("= ANY({}K keys), count", m / 1000), "SELECT count(*) FROM bench_t WHERE k = ANY($1)", false),
                (
                    format!("= ANY({}K keys), sum(payload)", m / 1000),
                    "SELECT coalesce(sum(payload), 0)::int8 FROM bench_t WHERE k = ANY($1)",
                    false,
                ),
                (
                    format!("= ANY({}K keys), sum(payload), index scan forced", m / 1000),
                    "SELECT coalesce(sum(payload), 0)::int8 FROM bench_t WHERE k = ANY($1)",
                    true,
                ),
            ] {
                let mut c = session(if forced { "SET enable_seqscan = off; SET enable_bitmapscan = off" } else { "" });
                let mut got = 0i64;
                let secs = time(a.reps, || got = c.query_one(sql, &[p]).unwrap().get(0));
                answers.push(got);
                push(&mut rows, setups.len(), i, what.clone(), "ms", true, secs * 1e3);
                if m == 128_000 {
                    plans.push(format!("{label}: {what} -> {}", plan_of(&mut c, sql, &[p])));
                }
            }
        }
        for w in [1i64, 100, 10_000] {
            let mut c = session("");
            let st = c.prepare("SELECT coalesce(sum(payload), 0)::int8 FROM bench_t WHERE k BETWEEN $1 AND $1 + $2 - 1").unwrap();
            let starts: Vec<i64> = (0..200).map(|j| ((j as u64 * 7919) % (n - w as u64)) as i64).collect();
            let mut total = 0i64;
            let secs = time(a.reps.min(3), || {
                total = 0;
                for s in &starts {
                    total = total.wrapping_add(c.query_one(&st, &[s, &w]).unwrap().get::<_, i64>(0));
                }
            });
            answers.push(total);
            push(&mut rows, setups.len(), i, format!("BETWEEN, {w} rows"), "us", true, secs / starts.len() as f64 * 1e6);
            if w == 1 {
                plans.push(format!(
                    "{label}: BETWEEN, 1 row -> {}",
                    plan_of(&mut c, "SELECT sum(payload) FROM bench_t WHERE k BETWEEN 1000 AND 1000", &[])
                ));
            }
        }
        // The batch function against the join that btree users write.
        let p = &probe_sets[2];
        let join = "SELECT count(*) FROM unnest($1::int8[]) WITH ORDINALITY u(k, ord) JOIN bench_t t ON t.k = u.k";
        let probe = "SELECT count(*) FROM gpu_btree_probe('bench_t_k', $1::int8[]) p JOIN bench_t t ON t.ctid = p.ctid";
        let sql = if *am == "btree" { join } else { probe };
        let mut c = session("");
        let mut got = 0i64;
        let secs = time(a.reps, || got = c.query_one(sql, &[p]).unwrap().get(0));
        answers.push(got);
        push(&mut rows, setups.len(), i, "128K keys to rows (join / gpu_btree_probe)".into(), "ms", true, secs * 1e3);
        plans.push(format!("{label}: batch -> {}", plan_of(&mut c, sql, &[p])));
        // Inserts: 20K single-row inserts in one transaction, then 200K rows in
        // 1000-row statements; deleted afterwards (VACUUM keeps the table
        // as built for the next setup).
        let mut c = session("");
        let st = c.prepare("INSERT INTO bench_t VALUES ($1, -1)").unwrap();
        let base = n as i64 + 1_000_000 * (i as i64 + 1);
        let t = Instant::now();
        let mut tx = c.transaction().unwrap();
        for j in 0..20_000i64 {
            tx.execute(&st, &[&(base + (j * 7919) % 20_000)]).unwrap();
        }
        tx.commit().unwrap();
        push(&mut rows, setups.len(), i, "single-row INSERT".into(), "us", true, t.elapsed().as_secs_f64() / 20_000.0 * 1e6);
        let t = Instant::now();
        for b in 0..200i64 {
            c.batch_execute(&format!("INSERT INTO bench_t SELECT ({b} * 1000 + g) * 2654435761 % {n}, -1 FROM generate_series(0, 999) g"))
                .unwrap();
        }
        push(&mut rows, setups.len(), i, "INSERT, 1000-row statements".into(), "krows/s", false, 200.0 / t.elapsed().as_secs_f64());
        c.batch_execute("DELETE FROM bench_t WHERE payload = -1").unwrap();
        c.batch_execute("VACUUM (ANALYZE) bench_t").unwrap();
        if i == 0 {
            reference = answers;
        } else {
            assert_eq!(answers, reference, "{label} answered differently from btree");
        }
    }
    println!();
    let header: Vec<String> = std::iter::once("measure".to_string())
        .chain(setups.iter().map(|s| s.0.to_string()))
        .chain(["gpu_btree (auto) vs btree".to_string()])
        .collect();
    println!("| {} |", header.join(" | "));
    println!("|---|{}|", header[1..].iter().map(|_| "---:").collect::<Vec<_>>().join("|"));
    for r in &rows {
        let cells: Vec<String> = r.values.iter().map(|v| format!("{v:.2} {}", r.unit)).collect();
        let ratio = if r.lower_is_better { r.values[0] / r.values[1] } else { r.values[1] / r.values[0] };
        println!("| {} | {} | {:.2}x |", r.what, cells.join(" | "), ratio);
    }
    println!("\n(ratio > 1: gpu_btree better. Every answer of gpu_btree was checked against btree's.)");
    println!("\nPlans:");
    for p in plans {
        println!("- {p}");
    }
    c.batch_execute("DROP TABLE bench_t").unwrap();
}

//! gpuindex-sql-bench: gpu_btree (or gpu_learned, `--am`) against
//! PostgreSQL's btree on the same table, in one run, on a live server
//! (PGHOST/PGPORT/PGUSER).
//!
//!   gpuindex-sql-bench [--rows 1e7] [--reps 5] [--set permutation] [--skip-cpu 1] [--am gpu_btree] [--whole 1] [--rounds 0]
//!
//! Builds t(k int8, payload int8) with keys of `--set`: `permutation`
//! (unique, in random physical order) or one of the engine's real-shaped
//! sets (`uniform`, `zipf`, `timestamps`, `random`: datasets::KeySet),
//! VACUUMs it, then for each index in turn (btree; the access method with
//! gpuindex.device = auto and = cpu) measures CREATE INDEX, size, single
//! lookups, `= ANY` of 1K/16K/128K keys (index-only count and heap-reading
//! sum), BETWEEN ranges of 10, 1K, 100K rows (at most twice that where
//! keys repeat) and the whole table (index-only forward and backward,
//! index scan), the batch function against the equivalent join, the join
//! as written, and inserts. Lookups and probes pick distinct stored
//! keys uniformly (with ~9% misses). Prints one table; every answer is
//! checked against btree's. Plans forced onto an index run with jit = off
//! (`bench::FORCE_INDEX`).
//!
//! `--rounds R` measures only single lookups and the BETWEEN ranges below
//! the whole table, interleaved: both indexes built, and in each of R
//! rounds each contender (btree; the method under auto and cpu), in an
//! order that rotates, gets a fresh session that drops the other index in
//! a transaction it rolls back; from the client (prepared) and in a
//! PL/pgSQL loop in the server. On a shared host single statements drift
//! more from one minute to the next than the indexes differ.

use gpuindex_engine::datasets::KeySet;
use gpuindex_tests::bench::{
    buffers_of, connect, contender_session, describe_server, plan_of, push, rounds_cell, time, Row, SplitMix64, FORCE_INDEX,
};
use std::io::Write;
use std::time::Instant;

struct Args {
    rows: u64,
    reps: usize,
    /// None: the unique permutation.
    set: Option<KeySet>,
    /// Leave out the (cpu) setup (short runs).
    skip_cpu: bool,
    /// gpu_btree or gpu_learned.
    am: &'static str,
    /// Measure ranges over the whole table (minutes at 10^8 rows).
    whole: bool,
    /// Interleaved rounds of single queries only (0: the whole bench).
    rounds: usize,
}

fn args() -> Args {
    let mut a = Args { rows: 10_000_000, reps: 5, set: None, skip_cpu: false, am: "gpu_btree", whole: true, rounds: 0 };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{x} needs a value"));
        match x.as_str() {
            "--rows" => a.rows = v.parse::<f64>().expect("--rows N") as u64,
            "--reps" => a.reps = v.parse().expect("--reps N"),
            "--set" => {
                a.set = if v == "permutation" {
                    None
                } else {
                    Some(KeySet::parse(&v).expect("--set permutation|uniform|zipf|timestamps|random"))
                }
            }
            "--skip-cpu" => a.skip_cpu = v == "1",
            "--whole" => a.whole = v == "1",
            "--rounds" => a.rounds = v.parse().expect("--rounds N"),
            "--am" if v == "gpu_btree" || v == "gpu_learned" => a.am = if v == "gpu_btree" { "gpu_btree" } else { "gpu_learned" },
            _ => panic!(
                "usage: gpuindex-sql-bench [--rows N] [--reps N] [--set NAME] [--skip-cpu 1] [--am gpu_btree|gpu_learned] [--whole 0] [--rounds N]"
            ),
        }
    }
    a
}

fn main() {
    let a = args();
    let mut c = connect();
    let n = a.rows;
    let set_name = a.set.map_or("permutation", |s| s.name());
    let method = a.am;
    if a.rounds > 0 {
        println!("# gpuindex-sql-bench: {method}, {n} rows of {set_name} keys, single statements in {} interleaved rounds", a.rounds);
    } else {
        println!("# gpuindex-sql-bench: {method}, {n} rows of {set_name} keys, median of {} runs", a.reps);
    }
    println!("\n{}", describe_server(&mut c));

    let t = Instant::now();
    c.batch_execute("DROP TABLE IF EXISTS bench_t; CREATE TABLE bench_t (k int8, payload int8);").unwrap();
    // The keys, sorted (range bounds by rank, distinct keys for lookups).
    let sorted: Vec<i64> = match a.set {
        // k: a permutation of 0..n (a multiplicative hash with a prime
        // multiplier), so keys are unique and the heap order is scrambled.
        None => {
            c.batch_execute(&format!("INSERT INTO bench_t SELECT (i * 2654435761) % {n}, i FROM generate_series(0, {n} - 1) i;")).unwrap();
            (0..n as i64).collect()
        }
        Some(set) => {
            let keys = set.keys(n as usize, 1);
            let mut w = c.copy_in("COPY bench_t (k, payload) FROM STDIN").unwrap();
            let mut buf = String::new();
            for (i, k) in keys.iter().enumerate() {
                buf.push_str(&format!("{k}\t{i}\n"));
                if buf.len() > 1 << 20 {
                    w.write_all(buf.as_bytes()).unwrap();
                    buf.clear();
                }
            }
            w.write_all(buf.as_bytes()).unwrap();
            w.finish().unwrap();
            let mut keys = keys;
            keys.sort_unstable();
            keys
        }
    };
    c.batch_execute("VACUUM (ANALYZE) bench_t").unwrap();
    eprintln!("table built in {:.1} s", t.elapsed().as_secs_f64());
    let _ = c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm; SELECT pg_prewarm('bench_t')");
    let mut distinct = sorted.clone();
    distinct.dedup();

    let (auto, cpu) = (format!("{method} (auto)"), format!("{method} (cpu)"));
    let all_setups = [
        ("btree", "btree", "SET gpuindex.device = auto"),
        (auto.as_str(), method, "SET gpuindex.device = auto"),
        (cpu.as_str(), method, "SET gpuindex.device = cpu"),
    ];
    let setups = &all_setups[..if a.skip_cpu { 2 } else { 3 }];
    let mut rows: Vec<Row> = Vec::new();
    let mut rng = SplitMix64::new(42);
    // A distinct stored key, or (one time in 11) a key next to one.
    let pick = |rng: &mut SplitMix64| {
        let k = distinct[rng.below(distinct.len() as u64) as usize];
        if rng.below(11) == 0 {
            k.wrapping_add(1)
        } else {
            k
        }
    };
    let probe_sets: Vec<Vec<i64>> = [1_000usize, 16_000, 128_000].iter().map(|&m| (0..m).map(|_| pick(&mut rng)).collect()).collect();
    // BETWEEN bounds by rank: (rows wanted, [(lo, hi)]). With duplicate
    // keys the rows of [lo, hi] run from lo's first to hi's last, and ten
    // ranks inside a key of 10^5 rows would be 10^5 rows: a start whose
    // range holds over twice the rows wanted is drawn again (unique keys
    // never are: their ranges hold exactly w rows).
    let rows_between = |lo: i64, hi: i64| sorted.partition_point(|&k| k <= hi) - sorted.partition_point(|&k| k < lo);
    let widths: Vec<(usize, usize)> = [(10usize, 200usize), (1_000, 200), (100_000, 20), (n as usize, 1)]
        .into_iter()
        .filter(|&(w, _)| w < n as usize || (w == n as usize && a.whole))
        .collect();
    let ranges: Vec<(usize, Vec<(i64, i64)>)> = widths
        .iter()
        .map(|&(w, count)| {
            let bounds = (0..count)
                .map(|_| {
                    let mut draw = || {
                        let start = rng.below((sorted.len() - w + 1) as u64) as usize;
                        (sorted[start], sorted[start + w - 1])
                    };
                    let mut b = draw();
                    for _ in 0..10_000 {
                        if rows_between(b.0, b.1) <= 2 * w {
                            break;
                        }
                        b = draw();
                    }
                    b
                })
                .collect();
            (w, bounds)
        })
        .collect();
    let singles: Vec<i64> = (0..20_000).map(|_| pick(&mut rng)).collect();
    if a.rounds > 0 {
        interleaved(&mut c, method, &singles[..2_000], &ranges, n, a.rounds);
        c.batch_execute("DROP TABLE bench_t").unwrap();
        return;
    }
    let mut reference: Vec<i64> = Vec::new(); // btree's answers
    let mut folds: Vec<String> = Vec::new();
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
                let mut c = session(if forced { FORCE_INDEX } else { "" });
                let mut got = 0i64;
                let secs = time(a.reps, || got = c.query_one(sql, &[p]).unwrap().get(0));
                answers.push(got);
                push(&mut rows, setups.len(), i, what.clone(), "ms", true, secs * 1e3);
                if m == 128_000 {
                    plans.push(format!("{label}: {what} -> {}", plan_of(&mut c, sql, &[p])));
                }
            }
        }
        // Ranges, forced through the index: index-only count forward and
        // backward, and an index scan reading the heap.
        let mut c = session(&format!("{FORCE_INDEX}; SET enable_sort = off"));
        for (w, bounds) in &ranges {
            let span = if *w == n as usize { "the whole table".to_string() } else { format!("{w} rows") };
            for (what, sql) in [
                ("index-only, forward", "SELECT count(*) FROM (SELECT k FROM bench_t WHERE k BETWEEN $1 AND $2 ORDER BY k) s"),
                ("index-only, backward", "SELECT count(*) FROM (SELECT k FROM bench_t WHERE k BETWEEN $1 AND $2 ORDER BY k DESC) s"),
                ("index scan, sum(payload)", "SELECT coalesce(sum(payload), 0)::int8 FROM bench_t WHERE k BETWEEN $1 AND $2"),
            ] {
                let st = c.prepare(sql).unwrap();
                let mut total = 0i64;
                // The whole table once (after the warm-up run).
                let reps = if *w == n as usize { 1 } else { a.reps.min(3) };
                let secs = time(reps, || {
                    total = 0;
                    for (lo, hi) in bounds {
                        total = total.wrapping_add(c.query_one(&st, &[lo, hi]).unwrap().get::<_, i64>(0));
                    }
                });
                answers.push(total);
                push(&mut rows, setups.len(), i, format!("BETWEEN, {span}, {what}"), "ms", true, secs / bounds.len() as f64 * 1e3);
                if *w == 100_000 || *w == n as usize {
                    let (lo, hi) = bounds[0];
                    plans.push(format!("{label}: BETWEEN {span}, {what} -> {}", plan_of(&mut c, sql, &[&lo, &hi])));
                }
                // Where the time of an index scan reading the heap goes
                // (buffers read and hit, read time; one more run).
                if (*w == n as usize || *w == 100_000) && what.starts_with("index scan") {
                    let (lo, hi) = bounds[0];
                    plans.push(format!("{label}: BETWEEN {span}, {what} -> {}", buffers_of(&mut c, sql, &[&lo, &hi])));
                }
            }
        }
        // The batch function against the join that btree users write.
        let p = &probe_sets[2];
        let join = "SELECT count(*) FROM unnest($1::int8[]) WITH ORDINALITY u(k, ord) JOIN bench_t t ON t.k = u.k";
        let probe = format!("SELECT count(*) FROM {method}_probe('bench_t_k', $1::int8[]) p JOIN bench_t t ON t.ctid = p.ctid");
        let sql = if *am == "btree" { join } else { probe.as_str() };
        let mut c = session("");
        let mut got = 0i64;
        let secs = time(a.reps, || got = c.query_one(sql, &[p]).unwrap().get(0));
        answers.push(got);
        push(&mut rows, setups.len(), i, format!("128K keys to rows (join / {method}_probe)"), "ms", true, secs * 1e3);
        plans.push(format!("{label}: batch -> {}", plan_of(&mut c, sql, &[p])));
        // The same join for every contender, as the planner runs it (with
        // the method's index: GpuIndexJoin where its cost wins).
        let secs = time(a.reps, || got = c.query_one(join, &[p]).unwrap().get(0));
        answers.push(got);
        push(&mut rows, setups.len(), i, "128K keys joined (the join as written)".into(), "ms", true, secs * 1e3);
        plans.push(format!("{label}: join as written -> {}", plan_of(&mut c, join, &[p])));
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
        // gpu_learned: the inserts' delta merged into the run, against a
        // REINDEX of the same table (the other way to fold it); REINDEX
        // also leaves the next setup the index as built.
        let fold = method == "gpu_learned" && *am == "gpu_learned" && rebuilt;
        if fold {
            let t = Instant::now();
            let moved: i64 = c.query_one("SELECT gpu_learned_merge('bench_t_k')", &[]).unwrap().get(0);
            folds.push(format!("merge of a {moved}-entry delta into the {n}-entry run: {:.2} s", t.elapsed().as_secs_f64()));
            let got: i64 = c.query_one("SELECT count(*) FROM bench_t WHERE k = ANY($1)", &[&probe_sets[1]]).unwrap().get(0);
            let mut s = session("SET enable_indexscan = off; SET enable_bitmapscan = off");
            let want: i64 = s.query_one("SELECT count(*) FROM bench_t WHERE k = ANY($1)", &[&probe_sets[1]]).unwrap().get(0);
            assert_eq!(got, want, "after the merge, = ANY(16K) differs from the sequential scan");
        }
        c.batch_execute("DELETE FROM bench_t WHERE payload = -1").unwrap();
        c.batch_execute("VACUUM (ANALYZE) bench_t").unwrap();
        if fold {
            let t = Instant::now();
            c.batch_execute("REINDEX INDEX bench_t_k").unwrap();
            folds.push(format!("REINDEX of the same index: {:.2} s", t.elapsed().as_secs_f64()));
            let _ = c.batch_execute("SELECT pg_prewarm('bench_t_k')");
        }
        if i == 0 {
            reference = answers;
        } else {
            assert_eq!(answers, reference, "{label} answered differently from btree");
        }
    }
    println!();
    let header: Vec<String> = std::iter::once("measure".to_string())
        .chain(setups.iter().map(|s| s.0.to_string()))
        .chain([format!("{method} (auto) vs btree")])
        .collect();
    println!("| {} |", header.join(" | "));
    println!("|---|{}|", header[1..].iter().map(|_| "---:").collect::<Vec<_>>().join("|"));
    for r in &rows {
        let cells: Vec<String> = r.values.iter().map(|v| format!("{v:.2} {}", r.unit)).collect();
        let ratio = if r.lower_is_better { r.values[0] / r.values[1] } else { r.values[1] / r.values[0] };
        println!("| {} | {} | {:.2}x |", r.what, cells.join(" | "), ratio);
    }
    println!("\n(ratio > 1: {method} better. Every answer of {method} was checked against btree's. Keys: {set_name}.)");
    if !folds.is_empty() {
        println!("\nThe delta folded into the run ({method} (auto) session, after the INSERT measures):");
        for f in &folds {
            println!("- {f}");
        }
    }
    println!("\nPlans:");
    for p in plans {
        println!("- {p}");
    }
    c.batch_execute("DROP TABLE bench_t").unwrap();
}

/// `--rounds`' loop in the server: statement `kind` (0: a lookup of
/// `los[i]`, 1-3: the BETWEEN forms of the client's measures) for every
/// bound pair, its plans cached as a prepared statement's. Microseconds a
/// statement.
const SERVER_LOOP: &str = "CREATE OR REPLACE FUNCTION bench_t_loop(kind int, los int8[], his int8[]) RETURNS float8
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp(); c int8;
BEGIN
  FOR i IN 1 .. array_length(los, 1) LOOP
    IF kind = 0 THEN
      PERFORM payload FROM bench_t WHERE k = los[i];
    ELSIF kind = 1 THEN
      SELECT count(*) INTO c FROM (SELECT k FROM bench_t WHERE k BETWEEN los[i] AND his[i] ORDER BY k) s;
    ELSIF kind = 2 THEN
      SELECT count(*) INTO c FROM (SELECT k FROM bench_t WHERE k BETWEEN los[i] AND his[i] ORDER BY k DESC) s;
    ELSE
      SELECT coalesce(sum(payload), 0)::int8 INTO c FROM bench_t WHERE k BETWEEN los[i] AND his[i];
    END IF;
  END LOOP;
  RETURN extract(epoch FROM clock_timestamp() - t0) * 1e6 / array_length(los, 1);
END $$";

/// `--rounds`: single lookups and ranges (not the whole table), both
/// indexes built, the contenders interleaved (see the header). Prints per
/// measure and contender the median microseconds a statement over the
/// rounds (fastest - slowest), from the client and in the server, and in
/// how many rounds the method under auto was at least as fast as btree.
fn interleaved(c: &mut postgres::Client, method: &str, singles: &[i64], ranges: &[(usize, Vec<(i64, i64)>)], n: u64, rounds: usize) {
    let indexes = ["bench_t_b", "bench_t_g"];
    for (name, am) in indexes.iter().zip(["btree", method]) {
        let t = Instant::now();
        c.batch_execute(&format!("CREATE INDEX {name} ON bench_t USING {am} (k)")).unwrap();
        eprintln!("{name} built in {:.1} s", t.elapsed().as_secs_f64());
    }
    c.batch_execute("VACUUM (ANALYZE) bench_t").unwrap();
    let mib = |c: &mut postgres::Client, name: &str| -> f64 {
        c.query_one(&format!("SELECT pg_relation_size('{name}')::float8 / 1048576"), &[]).unwrap().get(0)
    };
    let sizes = (mib(c, indexes[0]), mib(c, indexes[1]));
    c.batch_execute(SERVER_LOOP).unwrap();
    for name in indexes {
        let _ = c.batch_execute(&format!("SELECT pg_prewarm('{name}')"));
    }
    // (what, loop kind, statement, bounds)
    let mut measures: Vec<(String, i32, &str, Vec<(i64, i64)>)> =
        vec![("single lookup (k = $1)".into(), 0, "SELECT payload FROM bench_t WHERE k = $1", singles.iter().map(|&k| (k, k)).collect())];
    for (w, bounds) in ranges.iter().filter(|r| r.0 < n as usize) {
        for (kind, what, sql) in [
            (1, "index-only, forward", "SELECT count(*) FROM (SELECT k FROM bench_t WHERE k BETWEEN $1 AND $2 ORDER BY k) s"),
            (2, "index-only, backward", "SELECT count(*) FROM (SELECT k FROM bench_t WHERE k BETWEEN $1 AND $2 ORDER BY k DESC) s"),
            (3, "index scan, sum(payload)", "SELECT coalesce(sum(payload), 0)::int8 FROM bench_t WHERE k BETWEEN $1 AND $2"),
        ] {
            measures.push((format!("BETWEEN, {w} rows, {what}"), kind, sql, bounds.clone()));
        }
    }
    let (auto, cpu) = (format!("{method} (auto)"), format!("{method} (cpu)"));
    let contenders = [("btree", 0, "auto"), (auto.as_str(), 1, "auto"), (cpu.as_str(), 1, "cpu")];
    let nc = contenders.len();
    let mut client = vec![vec![Vec::new(); nc]; measures.len()];
    let mut server = client.clone();
    let mut reference: Vec<Option<i64>> = vec![None; measures.len()];
    for r in 0..rounds {
        for k in 0..nc {
            let j = (k + r) % nc;
            let (label, keep, device) = contenders[j];
            let settings = format!(
                "SET LOCAL gpuindex.device = {device}; SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off; SET LOCAL jit = off"
            );
            let mut s = contender_session(&indexes, keep, &settings);
            for (m, (what, kind, sql, bounds)) in measures.iter().enumerate() {
                let st = s.prepare(sql).unwrap();
                let pass = |s: &mut postgres::Client| -> i64 {
                    let mut total = 0i64;
                    for (lo, hi) in bounds {
                        total = total.wrapping_add(if *kind == 0 {
                            s.query(&st, &[lo]).unwrap().len() as i64
                        } else {
                            s.query_one(&st, &[lo, hi]).unwrap().get::<_, i64>(0)
                        });
                    }
                    total
                };
                // A pass to warm (the plan cached, the pages read), then
                // the timed one.
                let got = pass(&mut s);
                let t = Instant::now();
                pass(&mut s);
                let v = t.elapsed().as_secs_f64() / bounds.len() as f64 * 1e6;
                client[m][j].push(v);
                let (los, his): (Vec<i64>, Vec<i64>) = bounds.iter().copied().unzip();
                let w: f64 = s.query_one("SELECT bench_t_loop($1, $2, $3)", &[kind, &los, &his]).unwrap().get(0);
                server[m][j].push(w);
                eprintln!("round {r}: {label}: {what}: {v:.1} us, in the server {w:.1} us");
                match reference[m] {
                    Some(want) => assert_eq!(got, want, "{label} answered {what} differently"),
                    None => reference[m] = Some(got),
                }
            }
            s.batch_execute("ROLLBACK").unwrap();
        }
    }
    println!("\nInterleaved: {rounds} rounds, each contender in a fresh session per round, the order rotating; a warm-up pass,");
    println!("then one timed pass per measure from the client (prepared; {} lookups, 200 or 20 ranges), then the same", singles.len());
    println!("statements in a PL/pgSQL loop in the server. Median microseconds a statement (fastest - slowest round).");
    println!("Index sizes: btree {:.1} MiB, {method} {:.1} MiB.\n", sizes.0, sizes.1);
    let labels: Vec<&str> = contenders.iter().map(|c| c.0).collect();
    println!("| measure | {} | rounds {auto} <= btree |", labels.join(" | "));
    println!("|---|{}---:|", "---:|".repeat(nc));
    for (m, (what, ..)) in measures.iter().enumerate() {
        for (where_, t) in [("client", &client[m]), ("in the server", &server[m])] {
            let cells: Vec<String> = t.iter().map(|v| rounds_cell(v)).collect();
            let wins = (0..rounds).filter(|&r| t[1][r] <= t[0][r]).count();
            println!("| {what}, {where_} | {} | {wins} of {rounds} |", cells.join(" | "));
        }
    }
    println!("\nEvery answer (rows found, counts, sums) was checked against the first contender's.");
}

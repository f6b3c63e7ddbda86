//! gpuindex-sql-bench-art: gpu_art against PostgreSQL's btree and hash on
//! the same table of uuids or URLs, in one run, on a live server
//! (PGHOST/PGPORT/PGUSER).
//!
//!   gpuindex-sql-bench-art [--rows 1e7] [--set uuid|urls] [--reps 3]
//!
//! Builds s(k, payload int8) with `--rows` keys of the engine's string set
//! (datasets::StringSet: random v4 uuids, or URLs with long shared
//! prefixes, text in the C collation), then for each index in turn (btree
//! (`text_pattern_ops` for URLs), hash, gpu_art) measures CREATE INDEX,
//! size, single lookups, `= ANY` of 1K/16K/128K keys, 128K keys to rows
//! (the join users write over btree and hash; `gpu_art_probe` joined back
//! by ctid; then that join for every contender) and, for URLs, prefix
//! queries (`LIKE 'prefix%'` of about 10 and 1000 rows); then the single
//! lookups, the planner's 128K-key `= ANY` count, the 128K keys to rows
//! and the prefixes again with the three indexes side by side, each alone
//! in turn (the others dropped in a transaction rolled back) in one
//! session, round by round. Lookups pick stored keys (one in 11 a miss).
//! Every answer is checked against btree's. Prints one table. Keys are
//! bound as uuid[] (uuids) or text[] (URLs), as a driver sends them.
//! Plans forced onto an index run with jit = off (`bench::FORCE_INDEX`).

use gpuindex_engine::datasets::StringSet;
use gpuindex_tests::bench::{connect, describe_server, plan_of, push, time, times_of, Row, SplitMix64, FORCE_INDEX};
use postgres::types::ToSql;
use std::io::Write;
use std::time::Instant;

struct Args {
    rows: u64,
    set: StringSet,
    reps: usize,
}

fn args() -> Args {
    let mut a = Args { rows: 10_000_000, set: StringSet::Uuid, reps: 3 };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{x} needs a value"));
        match x.as_str() {
            "--rows" => a.rows = v.parse::<f64>().expect("--rows N") as u64,
            "--reps" => a.reps = v.parse().expect("--reps N"),
            "--set" if v == "uuid" || v == "urls" => a.set = StringSet::parse(&v).expect("a set"),
            _ => panic!("usage: gpuindex-sql-bench-art [--rows N] [--set uuid|urls] [--reps N]"),
        }
    }
    a
}

/// A stored key's text form.
fn text_of(set: StringSet, raw: &[u8]) -> String {
    match set {
        StringSet::Uuid => {
            let h: String = raw.iter().map(|b| format!("{b:02x}")).collect();
            format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
        }
        _ => String::from_utf8(raw.to_vec()).expect("ASCII URLs"),
    }
}

/// Keys bound as a client sends them: uuids as uuid (drivers send them in
/// binary; a text[] cast to uuid[] would add ~0.5 us a key of parsing to
/// every contender), URLs as text.
type Param = Box<dyn ToSql + Sync>;

fn param(set: StringSet, keys: &[String]) -> Param {
    match set {
        StringSet::Uuid => Box::new(keys.iter().map(|k| uuid::Uuid::parse_str(k).expect("a uuid")).collect::<Vec<_>>()),
        _ => Box::new(keys.to_vec()),
    }
}

fn key_param(set: StringSet, key: &str) -> Param {
    match set {
        StringSet::Uuid => Box::new(uuid::Uuid::parse_str(key).expect("a uuid")),
        _ => Box::new(key.to_string()),
    }
}

/// 128K keys to rows: the join btree and hash users write, or (`probe`:
/// a gpu_art index's name) the probe function joined back by ctid.
fn to_rows_sql(ty: &str, probe: Option<&str>) -> String {
    match probe {
        Some(index) => format!("SELECT count(*) FROM gpu_art_probe('{index}', $1::{ty}[]) p JOIN bench_s t ON t.ctid = p.ctid"),
        None => format!("SELECT count(*) FROM unnest($1::{ty}[]) u(k) JOIN bench_s t ON t.k = u.k"),
    }
}

fn main() {
    let a = args();
    let mut c = connect();
    let (n, set) = (a.rows, a.set);
    let (ty, column) = match set {
        StringSet::Uuid => ("uuid", "uuid"),
        _ => ("text", "text COLLATE \"C\""),
    };
    println!("# gpuindex-sql-bench-art: gpu_art, {n} rows of {} keys, median of {} runs", set.name(), a.reps);
    println!("\n{}", describe_server(&mut c));

    let t = Instant::now();
    c.batch_execute(&format!("DROP TABLE IF EXISTS bench_s; CREATE TABLE bench_s (k {column}, payload int8);")).unwrap();
    let mut rng = SplitMix64::new(1);
    let mut keys: Vec<String> = Vec::with_capacity(n as usize);
    {
        let mut w = c.copy_in("COPY bench_s (k, payload) FROM STDIN").unwrap();
        let mut buf = String::new();
        for i in 0..n {
            let k = text_of(set, &set.raw(&mut rng));
            buf.push_str(&format!("{k}\t{i}\n"));
            keys.push(k);
            if buf.len() > 1 << 20 {
                w.write_all(buf.as_bytes()).unwrap();
                buf.clear();
            }
        }
        w.write_all(buf.as_bytes()).unwrap();
        w.finish().unwrap();
    }
    c.batch_execute("VACUUM (ANALYZE) bench_s").unwrap();
    eprintln!("table built in {:.1} s", t.elapsed().as_secs_f64());
    let _ = c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm; SELECT pg_prewarm('bench_s')");

    let mut rng = SplitMix64::new(42);
    // A stored key, or (one time in 11) a key that is not stored.
    let pick = |rng: &mut SplitMix64| {
        let k = keys[rng.below(keys.len() as u64) as usize].clone();
        if rng.below(11) != 0 {
            k
        } else if set == StringSet::Uuid {
            format!("{}0", &k[..35])
        } else {
            format!("{k}#")
        }
    };
    let singles: Vec<String> = (0..20_000).map(|_| pick(&mut rng)).collect();
    let probe_sets: Vec<Vec<String>> = [1_000usize, 16_000, 128_000].iter().map(|&m| (0..m).map(|_| pick(&mut rng)).collect()).collect();
    let single_params: Vec<Param> = singles.iter().map(|k| key_param(set, k)).collect();
    let small_params: Vec<Param> = singles.chunks(10).map(|ks| param(set, ks)).collect();
    let probe_params: Vec<Param> = probe_sets.iter().map(|ks| param(set, ks)).collect();
    // URL prefixes: a stored key cut after its host and first section
    // (hundreds to thousands of rows), or before its numeric id (a few).
    let prefixes: Vec<(String, Vec<String>)> = if set == StringSet::Uuid {
        Vec::new()
    } else {
        let cut = |k: &str, slashes: usize| -> String {
            let end = k.match_indices('/').nth(slashes).map_or(k.len(), |(i, _)| i + 1);
            k[..end].to_string()
        };
        let wide: Vec<String> = (0..100).map(|_| format!("{}%", cut(&pick(&mut rng), 3))).collect();
        let narrow: Vec<String> = (0..200)
            .map(|_| {
                let k = pick(&mut rng);
                let end = k.find("item-").map_or(k.len(), |i| (i + 8).min(k.len()));
                format!("{}%", &k[..end])
            })
            .collect();
        vec![("LIKE 'host/section/%'".into(), wide), ("LIKE '.../item-NNN%'".into(), narrow)]
    };

    let btree = if set == StringSet::Uuid { "btree (k)" } else { "btree (k text_pattern_ops)" };
    let setups = [("btree", btree), ("hash", "hash (k)"), ("gpu_art", "gpu_art (k)")];
    let mut rows: Vec<Row> = Vec::new();
    let mut plans: Vec<String> = Vec::new();
    let mut reference: Vec<i64> = Vec::new();
    for (i, (label, def)) in setups.iter().enumerate() {
        c.batch_execute("DROP INDEX IF EXISTS bench_s_k").unwrap();
        let t = Instant::now();
        c.batch_execute(&format!("CREATE INDEX bench_s_k ON bench_s USING {def}")).unwrap();
        push(&mut rows, setups.len(), i, "CREATE INDEX".into(), "s", true, t.elapsed().as_secs_f64());
        // (A VACUUM too: the one right after the load can leave pages it
        // could not yet mark all-visible, and index-only scans then read
        // the table.)
        c.batch_execute("VACUUM (ANALYZE) bench_s").unwrap();
        let _ = c.batch_execute("SELECT pg_prewarm('bench_s_k')");
        let size: i64 = c.query_one("SELECT pg_relation_size('bench_s_k')", &[]).unwrap().get(0);
        push(&mut rows, setups.len(), i, "index size".into(), "MiB", true, size as f64 / 1048576.0);
        let mut answers: Vec<i64> = Vec::new();
        let session = || connect();
        // Single lookups, one client, prepared.
        let mut s = session();
        let st = s.prepare(&format!("SELECT payload FROM bench_s WHERE k = $1::{ty}")).unwrap();
        let mut found = 0i64;
        let secs = time(a.reps, || {
            found = 0;
            for k in &single_params {
                found += s.query(&st, &[&**k]).unwrap().len() as i64;
            }
        });
        answers.push(found);
        push(&mut rows, setups.len(), i, "single lookup (k = $1)".into(), "us", true, secs / singles.len() as f64 * 1e6);
        plans.push(format!(
            "{label}: k = $1 -> {}",
            plan_of(&mut s, &format!("SELECT payload FROM bench_s WHERE k = '{}'", singles[0]), &[])
        ));
        // Small arrays (IN lists), one client, prepared.
        let st = s.prepare(&format!("SELECT count(*) FROM bench_s WHERE k = ANY($1::{ty}[])")).unwrap();
        let secs = time(a.reps, || {
            found = 0;
            for ks in &small_params {
                found += s.query_one(&st, &[&**ks]).unwrap().get::<_, i64>(0);
            }
        });
        answers.push(found);
        push(&mut rows, setups.len(), i, "= ANY(10 keys), count".into(), "us", true, secs / small_params.len() as f64 * 1e6);
        // Each array size, then the largest with the index forced.
        for (j, forced) in [(0, false), (1, false), (2, false), (2, true)] {
            let (p, m) = (&*probe_params[j], probe_sets[j].len());
            let sql = format!("SELECT count(*) FROM bench_s WHERE k = ANY($1::{ty}[])");
            let mut s = session();
            if forced {
                s.batch_execute(FORCE_INDEX).unwrap();
            }
            let mut got = 0i64;
            let secs = time(a.reps, || got = s.query_one(&sql, &[p]).unwrap().get(0));
            answers.push(got);
            let what = format!("= ANY({}K keys), count{}", m / 1000, if forced { ", index forced" } else { "" });
            push(&mut rows, setups.len(), i, what.clone(), "ms", true, secs * 1e3);
            if m == 128_000 {
                plans.push(format!("{label}: {what} -> {}", plan_of(&mut s, &sql, &[p])));
            }
            if *label == "gpu_art" {
                // Where the mirror's batch ran (an index plan's only).
                let last = s.query_opt("SELECT function, device, round(millis::numeric, 2)::text FROM gpuindex_last_batch()", &[]).unwrap();
                if let Some(r) = last {
                    let (f, d, ms): (String, String, String) = (r.get(0), r.get(1), r.get(2));
                    plans.push(format!("gpu_art: {what}: last batch {f} of this session on {d}, {ms} ms"));
                }
            }
        }
        // 128K keys to rows.
        let p = &*probe_params[2];
        let join = to_rows_sql(ty, None);
        let sql = to_rows_sql(ty, (*label == "gpu_art").then_some("bench_s_k"));
        let mut s = session();
        s.batch_execute("SET enable_hashjoin = off; SET enable_mergejoin = off").unwrap();
        let mut got = 0i64;
        let secs = time(a.reps, || got = s.query_one(&sql, &[p]).unwrap().get(0));
        answers.push(got);
        push(&mut rows, setups.len(), i, "128K keys to rows (join / gpu_art_probe)".into(), "ms", true, secs * 1e3);
        plans.push(format!("{label}: 128K keys to rows -> {}", plan_of(&mut s, &sql, &[p])));
        plans.push(format!("{label}: 128K keys to rows, one more run: {}", times_of(&mut s, &sql, &[p])));
        // That join for every contender as the planner runs it by default
        // (gpu_art's index: GpuIndexJoin where its cost wins).
        let mut s = session();
        let secs = time(a.reps, || got = s.query_one(&join, &[p]).unwrap().get(0));
        answers.push(got);
        push(&mut rows, setups.len(), i, "128K keys joined (the join as written)".into(), "ms", true, secs * 1e3);
        plans.push(format!("{label}: join as written -> {}", plan_of(&mut s, &join, &[p])));
        plans.push(format!("{label}: join as written, one more run: {}", times_of(&mut s, &join, &[p])));
        // Prefixes (URLs), index-only counts; hash cannot answer them.
        if *label != "hash" && !prefixes.is_empty() {
            let mut s = session();
            s.batch_execute(FORCE_INDEX).unwrap();
            let st = s.prepare("SELECT count(*) FROM bench_s WHERE k LIKE $1").unwrap();
            for (what, ps) in &prefixes {
                let mut total = 0i64;
                let secs = time(a.reps, || {
                    total = 0;
                    for p in ps {
                        total += s.query_one(&st, &[p]).unwrap().get::<_, i64>(0);
                    }
                });
                answers.push(total);
                push(
                    &mut rows,
                    setups.len(),
                    i,
                    format!("prefix {what} ({} rows avg)", total / ps.len() as i64),
                    "ms",
                    true,
                    secs / ps.len() as f64 * 1e3,
                );
                plans.push(format!("{label}: prefix -> {}", plan_of(&mut s, "SELECT count(*) FROM bench_s WHERE k LIKE $1", &[&ps[0]])));
            }
        }
        if i == 0 {
            reference = answers;
        } else {
            let m = answers.len();
            assert_eq!(answers[..m], reference[..m], "{label} answered differently from btree");
        }
    }
    // The single lookups, the planner's 128K-key `= ANY` count, the keys
    // to rows and the prefixes again with the three indexes side by side,
    // taken in turn round by round (each alone in a transaction that drops the others
    // and is rolled back): the setups above run minutes apart, and the
    // host drifts between them by more than the indexes differ.
    c.batch_execute("DROP INDEX IF EXISTS bench_s_k").unwrap();
    let names: Vec<String> = setups.iter().map(|(label, _)| format!("bench_s_{label}")).collect();
    for ((_, def), name) in setups.iter().zip(&names) {
        c.batch_execute(&format!("CREATE INDEX {name} ON bench_s USING {def}")).unwrap();
        let _ = c.batch_execute(&format!("SELECT pg_prewarm('{name}')"));
    }
    let mut s = connect();
    let single = s.prepare(&format!("SELECT payload FROM bench_s WHERE k = $1::{ty}")).unwrap();
    // Unprepared, as above: a generic plan cannot hash the array (a
    // sequential scan's filter then searches 128K keys a row).
    let any = format!("SELECT count(*) FROM bench_s WHERE k = ANY($1::{ty}[])");
    // (No LIKE on uuid.)
    let like = (!prefixes.is_empty()).then(|| s.prepare("SELECT count(*) FROM bench_s WHERE k LIKE $1").unwrap());
    // (The run gets the index's name: the probe differs for gpu_art.)
    type Run<'a> = Box<dyn Fn(&mut postgres::Transaction, &str) -> i64 + 'a>;
    // (what, unit per query, queries, hash answers it, settings, the run:
    // rows found).
    let mut measures: Vec<(String, &str, usize, bool, &str, Run)> = vec![
        (
            "single lookup (k = $1)".into(),
            "us",
            singles.len(),
            true,
            "",
            Box::new(|tx, _| single_params.iter().map(|k| tx.query(&single, &[&**k]).unwrap().len() as i64).sum()),
        ),
        (
            "= ANY(128K keys), count".into(),
            "ms",
            1,
            true,
            "",
            Box::new(|tx, _| tx.query_one(any.as_str(), &[&*probe_params[2]]).unwrap().get(0)),
        ),
        (
            "128K keys to rows (join / gpu_art_probe)".into(),
            "ms",
            1,
            true,
            "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off",
            Box::new(|tx, index| {
                let sql = to_rows_sql(ty, index.ends_with("gpu_art").then_some(index));
                tx.query_one(&sql, &[&*probe_params[2]]).unwrap().get(0)
            }),
        ),
    ];
    for (what, ps) in &prefixes {
        let like = like.as_ref().expect("prepared for prefixes");
        let run: Run = Box::new(move |tx, _| ps.iter().map(|p| tx.query_one(like, &[p]).unwrap().get::<_, i64>(0)).sum());
        measures.push((
            format!("prefix {what}"),
            "ms",
            ps.len(),
            false,
            "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL jit = off",
            run,
        ));
    }
    let mut secs: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); setups.len()]; measures.len()];
    // Round 0 warms every index's pages and this session's caches.
    for round in 0..=a.reps {
        for (mi, (what, _, _, hash_too, settings, run)) in measures.iter().enumerate() {
            let mut found: Vec<Option<i64>> = vec![None; setups.len()];
            for (i, per) in secs[mi].iter_mut().enumerate() {
                if setups[i].0 == "hash" && !hash_too {
                    continue;
                }
                let mut tx = s.transaction().unwrap();
                for other in names.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, n)| n) {
                    tx.batch_execute(&format!("DROP INDEX {other}")).unwrap();
                }
                tx.batch_execute(settings).unwrap();
                let t = Instant::now();
                found[i] = Some(run(&mut tx, &names[i]));
                let elapsed = t.elapsed().as_secs_f64();
                tx.rollback().unwrap();
                if round > 0 {
                    per.push(elapsed);
                }
            }
            let first = found[0];
            assert!(found.iter().flatten().all(|f| Some(*f) == first), "{what}: the indexes answered differently in turn: {found:?}");
        }
    }
    for ((what, unit, n, _, _, _), per_index) in measures.iter().zip(secs) {
        for (i, mut per) in per_index.into_iter().enumerate() {
            if per.is_empty() {
                continue;
            }
            per.sort_by(|a, b| a.total_cmp(b));
            let scale = if *unit == "us" { 1e6 } else { 1e3 };
            let row = format!("{what}, indexes in turn in one session");
            push(&mut rows, setups.len(), i, row, unit, true, per[per.len() / 2] / *n as f64 * scale);
        }
    }
    println!();
    println!("| measure | btree | hash | gpu_art | gpu_art vs btree | gpu_art vs hash |");
    println!("|---|---:|---:|---:|---:|---:|");
    for r in &rows {
        let cells: Vec<String> = r.values.iter().map(|v| if v.is_nan() { "-".into() } else { format!("{v:.2} {}", r.unit) }).collect();
        let ratio = |base: f64| if r.lower_is_better { base / r.values[2] } else { r.values[2] / base };
        let show = |x: f64| if x.is_nan() { "-".to_string() } else { format!("{x:.2}x") };
        println!("| {} | {} | {} | {} |", r.what, cells.join(" | "), show(ratio(r.values[0])), show(ratio(r.values[1])));
    }
    println!("\n(ratio > 1: gpu_art better. Every answer of hash and gpu_art was checked against btree's. Keys: {}.)", set.name());
    println!("\nPlans:");
    for p in plans {
        println!("- {p}");
    }
    c.batch_execute("DROP TABLE bench_s").unwrap();
}

//! gpuindex-sql-bench-words: gpu_metric on text on a live server
//! (PGHOST/PGPORT/PGUSER): exact nearest words by edit distance through
//! SQL, against fuzzystrmatch's `levenshtein` by sequential scan.
//!
//!   gpuindex-sql-bench-words [--words /usr/share/dict/words] [--queries 1000] [--reps 3]
//!
//! Builds bench_words(id int8, w text) from a dictionary (wamerican),
//! indexes it with gpu_metric (text_levenshtein_ops), and measures: CREATE
//! INDEX and size; one `ORDER BY w <~> q LIMIT 10` through the index
//! against `ORDER BY levenshtein(w, q) LIMIT 10` by (parallel) sequential
//! scan; `gpu_metric_knn_text` (k = 10) over `--queries` queries with
//! gpuindex.device = auto (the GPU where there is one) and = cpu, as
//! (ord, ctid, distance) rows and joined back to the rows. Queries are
//! dictionary words with 0 to 2 random edits. Answers (count and sum of
//! distances) are checked against each other and the sequential scan's.

use gpuindex_engine::datasets::typo;
use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::bench::{connect, describe_server, plan_of, time};
use postgres::Client;
use std::time::Instant;

/// Rows and the sum of their distances.
fn answer(c: &mut Client, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> (i64, f64) {
    let r = c.query_one(sql, params).unwrap_or_else(|e| panic!("{sql}: {e}"));
    (r.get(0), r.get::<_, Option<f64>>(1).unwrap_or(0.0))
}

fn main() {
    let (mut path, mut m, mut reps) = ("/usr/share/dict/words".to_string(), 1000usize, 3usize);
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{x} needs a value"));
        match x.as_str() {
            "--words" => path = v,
            "--queries" => m = v.parse::<f64>().expect("--queries N") as usize,
            "--reps" => reps = v.parse().expect("--reps N"),
            _ => panic!("usage: gpuindex-sql-bench-words [--words FILE] [--queries N] [--reps N]"),
        }
    }
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e} (install wamerican, or --words FILE)"));
    let words: Vec<&str> = text.lines().map(str::trim).filter(|w| !w.is_empty()).collect();
    let mut c = connect();
    println!("# gpuindex-sql-bench-words: {} words of {path}, edit distance, k = 10, median of {reps} runs", words.len());
    println!("\n{}", describe_server(&mut c));
    c.batch_execute(
        "CREATE EXTENSION IF NOT EXISTS fuzzystrmatch; DROP TABLE IF EXISTS bench_words;
         CREATE TABLE bench_words (id int8, w text)",
    )
    .unwrap();
    let t = Instant::now();
    c.execute("INSERT INTO bench_words SELECT i, w FROM unnest($1::text[]) WITH ORDINALITY u(w, i)", &[&words]).unwrap();
    c.batch_execute("VACUUM ANALYZE bench_words").unwrap();
    let load = t.elapsed().as_secs_f64();
    let t = Instant::now();
    c.batch_execute("CREATE INDEX bench_words_w ON bench_words USING gpu_metric (w)").unwrap();
    let build = t.elapsed().as_secs_f64();
    let size: i64 = c.query_one("SELECT pg_relation_size('bench_words_w')", &[]).unwrap().get(0);
    let table: i64 = c.query_one("SELECT pg_relation_size('bench_words')", &[]).unwrap().get(0);
    println!("\n| measure | value |\n|---|---:|");
    println!("| table load (INSERT, VACUUM ANALYZE) | {load:.1} s |");
    println!("| CREATE INDEX ... USING gpu_metric (w) | {build:.2} s |");
    println!("| index size / table size | {} KiB / {} KiB |", size >> 10, table >> 10);

    let mut rng = SplitMix64::new(2024);
    let queries: Vec<String> = (0..m)
        .map(|_| {
            let (w, edits) = (words[rng.below(words.len() as u64) as usize], rng.below(3));
            typo(&mut rng, w, edits)
        })
        .collect();

    // Single queries: through the index, and fuzzystrmatch by sequential scan.
    let index_sql = "SELECT count(*), sum(d) FROM (SELECT w <~> $1 AS d FROM bench_words ORDER BY w <~> $1 LIMIT 10) s";
    let seq_sql = "SELECT count(*), sum(d)::float8 FROM (SELECT levenshtein(w, $1) AS d FROM bench_words ORDER BY 1 LIMIT 10) s";
    println!("\nplan of a single query: {}", plan_of(&mut c, index_sql, &[&queries[0]]));
    println!("plan of levenshtein: {}", plan_of(&mut c, seq_sql, &[&queries[0]]));
    let singles = 50.min(m);
    let mut got = Vec::new();
    let index_s = time(reps, || got = queries[..singles].iter().map(|q| answer(&mut c, index_sql, &[q])).collect()) / singles as f64;
    let seq_n = 10.min(m);
    let mut want = Vec::new();
    let seq_s = time(1, || want = queries[..seq_n].iter().map(|q| answer(&mut c, seq_sql, &[q])).collect()) / seq_n as f64;
    for i in 0..seq_n {
        assert_eq!(got[i], want[i], "query {:?}: index {:?}, levenshtein by sequential scan {:?}", queries[i], got[i], want[i]);
    }
    println!("\n| single nearest 10 words | ms | queries/s |\n|---|---:|---:|");
    println!("| `ORDER BY w <~> q LIMIT 10` through bench_words_w | {:.2} | {:.0} |", index_s * 1e3, 1.0 / index_s);
    println!("| `ORDER BY levenshtein(w, q) LIMIT 10`, sequential scan | {:.2} | {:.1} |", seq_s * 1e3, 1.0 / seq_s);
    println!("| index / sequential scan | {:.1}x | |", seq_s / index_s);

    // Batches of every query, on the device auto picks and on the CPU.
    c.batch_execute("SET gpuindex.gpu_min_batch = 1").unwrap();
    println!(
        "\n| batch of {m} queries | device (ran on) | queries/s | rows | seconds | / sequential scan |\n|---|---|---:|---:|---:|---:|"
    );
    let forms = [
        ("kNN (k = 10) -> (ord, ctid, distance)", "SELECT count(*), sum(distance) FROM gpu_metric_knn_text('bench_words_w', $1, 10)"),
        (
            "kNN (k = 10) -> rows",
            "SELECT count(*), sum(k.distance + t.id * 0) FROM gpu_metric_knn_text('bench_words_w', $1, 10) k JOIN bench_words t ON t.ctid = k.ctid",
        ),
    ];
    let first: Vec<&String> = queries[..seq_n].iter().collect();
    let want_first = want.iter().fold((0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    for (what, sql) in forms {
        let mut answers = Vec::new();
        for device in ["auto", "cpu"] {
            c.batch_execute(&format!("SET gpuindex.device = {device}")).unwrap();
            let mut got = (0, 0.0);
            let s = time(if device == "cpu" { 1 } else { reps }, || got = answer(&mut c, sql, &[&queries]));
            let ran: String = c.query_one("SELECT device FROM gpuindex_last_batch()", &[]).unwrap().get(0);
            answers.push(got);
            let rate = m as f64 / s;
            println!("| {what} | {device} ({ran}) | {rate:.0} | {} | {s:.3} | {:.0}x |", got.0, rate * seq_s);
            assert_eq!(
                answer(&mut c, sql, &[&first]),
                want_first,
                "{what} on {device}: the first {seq_n} queries differ from the sequential scan"
            );
        }
        assert_eq!(answers[0], answers[1], "{what}: auto != cpu");
    }
    c.batch_execute("RESET gpuindex.device; RESET gpuindex.gpu_min_batch").unwrap();
    println!("\nsequential scan with levenshtein: {:.1} queries/s (one query at a time, above)", 1.0 / seq_s);
}

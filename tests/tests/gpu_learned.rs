//! gpu_learned beyond the shared runners (which run its key sets through
//! loads, changes, merges, VACUUM, small batches, joins and crashes): large
//! `= ANY` batches (one batch of model predictions, then the page walk)
//! over keys whose entries cross pages, dead entries and a delta beside
//! the run; and cursors moving both ways over them.

use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::{check_join, check_predicate, connect, explain, scroll_both_ways, sorted_pairs};

const DB: &str = "gpuindex_it_learned";

/// Keys whose entries run over pages (one key of 3,000 rows, then keys
/// of 1 to 40 rows), rows all over the heap, a quarter of one stretch
/// deleted and VACUUMed (dead entries), rows inserted after the build (a
/// delta) when `delta`.
fn load(c: &mut postgres::Client, table: &str, delta: bool) {
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {table};
         CREATE TABLE {table} AS SELECT i AS id, (floor(sqrt(i) * 37) + CASE WHEN i % 97 = 0 THEN 700000 ELSE 0 END)::int8 AS k
           FROM generate_series(1, 300000) i ORDER BY md5(i::text);
         INSERT INTO {table} SELECT 300000 + i, 7777 FROM generate_series(1, 3000) i;
         CREATE INDEX {table}_k ON {table} USING gpu_learned (k);
         DELETE FROM {table} WHERE id % 4 = 0 AND id BETWEEN 50000 AND 120000;"
    ))
    .unwrap();
    c.batch_execute(&format!("VACUUM {table}")).unwrap();
    if delta {
        c.batch_execute(&format!("INSERT INTO {table} SELECT 400000 + i, (i * 7 % 25000)::int8 FROM generate_series(1, 5000) i")).unwrap();
    }
    c.batch_execute(&format!("ANALYZE {table}")).unwrap();
}

/// `n` keys: present ones from everywhere in the key range, the long run's
/// key, misses between keys and beyond both ends, in random order with
/// repeats.
fn keys(rng: &mut SplitMix64, n: usize) -> String {
    let mut k: Vec<String> = (0..n)
        .map(|i| match i % 10 {
            0 => (rng.below(30_000) as i64 - 10_000).to_string(),
            1 => "7777".to_string(),
            _ => ((rng.below(300_000) as f64).sqrt() * 37.0).floor().to_string(),
        })
        .collect();
    k.extend((0..n / 20).map(|_| (700_000 + rng.below(21_000)).to_string()));
    format!("ARRAY[{}]::int8[]", k.join(","))
}

/// `= ANY` of thousands of keys through index, index-only and bitmap scans
/// equals the sequential scan, with and without a delta; the probe
/// function and the join over those keys equal the planner's joins.
#[test]
fn many_probes_equal_sequential_scans() {
    let mut c = connect(DB);
    let mut rng = SplitMix64::new(21);
    for delta in [false, true] {
        load(&mut c, "lp", delta);
        for n in [300, 5_000, 40_000] {
            let ks = keys(&mut rng, n);
            check_predicate(&mut c, "lp", "lp_k", &format!("k = ANY({ks})"));
            // Index-only: the keys themselves, in order.
            c.batch_execute(
                "SET enable_seqscan = off; SET enable_bitmapscan = off; SET enable_indexscan = on; SET enable_indexonlyscan = on",
            )
            .unwrap();
            let q = format!("SELECT k FROM lp WHERE k = ANY({ks}) ORDER BY k");
            let plan = explain(&mut c, &q);
            assert!(plan.contains("Index Only Scan using lp_k") && !plan.contains("Sort"), "{plan}");
            let via_index: Vec<i64> = c.query(&q, &[]).unwrap().iter().map(|r| r.get(0)).collect();
            c.batch_execute("SET enable_seqscan = on; SET enable_indexscan = off; SET enable_indexonlyscan = off").unwrap();
            let via_seq: Vec<i64> = c.query(&q, &[]).unwrap().iter().map(|r| r.get(0)).collect();
            c.batch_execute("RESET enable_indexscan; RESET enable_indexonlyscan; RESET enable_bitmapscan").unwrap();
            assert!(via_seq.len() > n / 2, "few rows: {}", via_seq.len());
            assert_eq!(via_index, via_seq, "{n} keys (delta: {delta}): index-only and sequential scans differ");
            // The probe function (ord, id) against the join by value.
            for setting in ["SET gpuindex.device = cpu", "SET gpuindex.device = auto; SET gpuindex.gpu_min_batch = 1"] {
                c.batch_execute(setting).unwrap();
                let probed: Vec<(i64, i32)> = sorted_pairs(
                    &mut c,
                    &format!("SELECT p.ord, t.id FROM gpu_learned_probe('lp_k', {ks}) p JOIN lp t ON t.ctid = p.ctid"),
                );
                let joined: Vec<(i64, i32)> =
                    sorted_pairs(&mut c, &format!("SELECT u.o, t.id FROM unnest({ks}) WITH ORDINALITY u(k, o) JOIN lp t ON t.k = u.k"));
                assert_eq!(probed, joined, "{n} keys (delta: {delta}, {setting}): the probe function and the join differ");
            }
            c.batch_execute("RESET gpuindex.device; RESET gpuindex.gpu_min_batch").unwrap();
            check_join(&mut c, &format!("SELECT u.o, t.id FROM unnest({ks}) WITH ORDINALITY u(k, o) JOIN lp t ON t.k = u.k"));
        }
    }
    c.batch_execute("DROP TABLE lp").unwrap();
}

/// A scrollable cursor over `= ANY` of 6,000 keys, index-only and not,
/// with and without a delta, fetched both ways at random, returns the
/// keys the same cursor over a sort returns.
#[test]
fn cursors_over_many_keys_move_both_ways() {
    let mut c = connect(DB);
    let mut rng = SplitMix64::new(5);
    for delta in [false, true] {
        load(&mut c, "lc", delta);
        let ks = keys(&mut rng, 6_000);
        for cols in ["k", "id, k"] {
            let q = format!("SELECT {cols} FROM lc WHERE k = ANY({ks}) ORDER BY k");
            let scan = if cols == "k" { "Index Only Scan using lc_k" } else { "Index Scan using lc_k" };
            let rows = scroll_both_ways::<i64>(&mut c, &q, scan, usize::from(cols != "k"), 80);
            assert!(rows > 10_000, "the cursor moved over {rows} rows (delta: {delta})");
        }
    }
    c.batch_execute("DROP TABLE lc").unwrap();
}

//! gpu_btree against a live server: every query through the index returns
//! exactly what a sequential scan returns (EXCEPT ALL both ways), on random
//! data with duplicates, NULLs and extremes, for every type, before and
//! after inserts, deletes and VACUUM; concurrent inserts and scans; crash
//! recovery.

use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::{
    check_index, check_predicate, connect, gpu_missing_but_required, set_index_only, set_seq_only, short, vacuum_until_free,
};
use postgres::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const DB: &str = "gpuindex_it_btree";

/// A column type and a generator of literals of it (and of comparable
/// types, to exercise the cross-type operators).
struct Kind {
    name: &'static str,
    sql_type: &'static str,
    literal: fn(&mut SplitMix64) -> String,
}

fn pick<T: Copy>(rng: &mut SplitMix64, xs: &[T]) -> T {
    xs[rng.below(xs.len() as u64) as usize]
}

fn int_lit(rng: &mut SplitMix64, max: i64, casts: &[&str]) -> String {
    let v = match rng.below(10) {
        0 => pick(rng, &[-max - 1, max, 0, -1, 1]),
        1..=5 => rng.below(200) as i64 - 100,
        _ => rng.next_u64() as i64 % max,
    };
    let fits = |c: &&str| match *c {
        "int2" => i16::try_from(v).is_ok(),
        "int4" => i32::try_from(v).is_ok(),
        _ => true,
    };
    let ok: Vec<&str> = casts.iter().copied().filter(fits).collect();
    format!("'{v}'::{}", if ok.is_empty() { "int8" } else { pick(rng, &ok) })
}

fn float_lit(rng: &mut SplitMix64, cast: &str) -> String {
    let v = match rng.below(8) {
        0 => pick(rng, &["'NaN'", "'Infinity'", "'-Infinity'", "'-0'", "0"]).to_string(),
        1..=4 => format!("{}", (rng.below(400) as f64 - 200.0) / 8.0),
        _ => format!("{:e}", (rng.next_u64() as f64 / u64::MAX as f64 - 0.5) * 1e30),
    };
    format!("{v}::{cast}")
}

fn kinds() -> Vec<Kind> {
    vec![
        Kind { name: "i8", sql_type: "int8", literal: |r| int_lit(r, i64::MAX, &["int8", "int4", "int2"]) },
        Kind { name: "i4", sql_type: "int4", literal: |r| int_lit(r, i32::MAX as i64, &["int4", "int8"]) },
        Kind { name: "i2", sql_type: "int2", literal: |r| int_lit(r, i16::MAX as i64, &["int2", "int4", "int8"]) },
        Kind {
            name: "f8",
            sql_type: "float8",
            literal: |r| {
                let c = pick(r, &["float8", "float4"]);
                float_lit(r, c)
            },
        },
        Kind {
            name: "f4",
            sql_type: "float4",
            literal: |r| {
                let c = pick(r, &["float4", "float8"]);
                float_lit(r, c)
            },
        },
        Kind {
            name: "d",
            sql_type: "date",
            literal: |r| match r.below(20) {
                0 => pick(r, &["'infinity'::date", "'-infinity'::date"]).to_string(),
                _ => format!("(date '2000-01-01' + {})", r.below(3000) as i64 - 1500),
            },
        },
        Kind {
            name: "ts",
            sql_type: "timestamp",
            literal: |r| match r.below(20) {
                0 => pick(r, &["'infinity'::timestamp", "'-infinity'::timestamp"]).to_string(),
                _ => format!("(timestamp '2020-01-01' + {} * interval '1 minute')", r.below(5000) as i64 - 2500),
            },
        },
        Kind {
            name: "tz",
            sql_type: "timestamptz",
            literal: |r| match r.below(20) {
                0 => pick(r, &["'infinity'::timestamptz", "'-infinity'::timestamptz"]).to_string(),
                _ => format!("(timestamptz '2020-01-01 00:00+00' + {} * interval '1 second')", r.below(5000) as i64 - 2500),
            },
        },
    ]
}

/// A random WHERE clause over column v.
fn predicate(rng: &mut SplitMix64, k: &Kind) -> String {
    let choice = rng.below(12);
    let mut lit = || (k.literal)(rng);
    match choice {
        0 => format!("v = {}", lit()),
        1 => format!("v < {}", lit()),
        2 => format!("v <= {}", lit()),
        3 => format!("v > {}", lit()),
        4 => format!("v >= {}", lit()),
        5 => format!("v BETWEEN {} AND {}", lit(), lit()),
        6 | 7 => {
            let n = pick(rng, &[1usize, 3, 40, 300, 5000]);
            let elems: Vec<String> = (0..n).map(|_| (k.literal)(rng)).collect();
            // Literals of mixed family types unify to the widest; the cast
            // makes the array that type.
            let ty = match k.sql_type {
                "int2" | "int4" | "int8" => "int8",
                "float4" | "float8" => "float8",
                t => t,
            };
            let extra = if rng.below(3) == 0 { format!(" AND v > {}", (k.literal)(rng)) } else { String::new() };
            format!("v = ANY (ARRAY[{}, NULL]::{ty}[]){extra}", elems.join(", "))
        }
        8 => format!("v < ANY (ARRAY[{}, {}])", lit(), lit()),
        9 => "v IS NULL".into(),
        10 => format!("v IS NOT NULL AND v >= {}", lit()),
        _ => format!("v > {} AND v < {}", lit(), lit()),
    }
}

/// Ordered scans: the values in index order equal the sorted values.
fn check_order(c: &mut Client, table: &str, pred: &str, desc: bool, limit: i64) {
    let dir = if desc { "DESC" } else { "ASC" };
    let q = format!("SELECT v::text FROM {table} WHERE {pred} ORDER BY v {dir} LIMIT {limit}");
    set_seq_only(c);
    let want: Vec<Option<String>> = c.query(&q, &[]).unwrap().iter().map(|r| r.get(0)).collect();
    set_index_only(c, false);
    let got: Vec<Option<String>> = c.query(&q, &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(got, want, "{q}");
}

fn populate(c: &mut Client, rng: &mut SplitMix64, k: &Kind, table: &str, n: usize, first_id: usize) {
    let mut values = Vec::with_capacity(n);
    for i in 0..n {
        let v = if rng.below(50) == 0 { "NULL".to_string() } else { (k.literal)(rng) };
        values.push(format!("({}, {v})", first_id + i));
    }
    for chunk in values.chunks(2000) {
        c.batch_execute(&format!("INSERT INTO {table} (id, v) VALUES {}", chunk.join(", "))).unwrap();
    }
}

#[test]
fn index_scans_equal_sequential_scans() {
    let mut c = connect(DB);
    assert!(!gpu_missing_but_required(&mut c), "GPUINDEX_REQUIRE_GPU=1 but the server has no GPU");
    // Batches of every size go to the GPU when there is one.
    c.batch_execute("SET gpuindex.gpu_min_batch = 1; SET client_min_messages = warning").unwrap();
    let mut rng = SplitMix64::new(2024);
    for k in kinds() {
        let (table, index) = (format!("diff_{}", k.name), format!("diff_{}_v", k.name));
        c.batch_execute(&format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int, v {})", k.sql_type)).unwrap();
        populate(&mut c, &mut rng, &k, &table, 20_000, 0);
        c.batch_execute(&format!("CREATE INDEX {index} ON {table} USING gpu_btree (v); ANALYZE {table}")).unwrap();
        check_index(&mut c, &index);
        for round in 0..3 {
            for _ in 0..25 {
                let p = predicate(&mut rng, &k);
                check_predicate(&mut c, &table, &index, &p);
            }
            for (pred, desc, limit) in [("true", false, 50), ("true", true, 50), ("v IS NOT NULL", true, 7)] {
                check_order(&mut c, &table, pred, desc, limit);
            }
            let p = format!("v > {}", (k.literal)(&mut rng));
            check_order(&mut c, &table, &p, rng.below(2) == 0, 30);
            // Change the data: inserts (splits), deletes, VACUUM.
            populate(&mut c, &mut rng, &k, &table, 15_000, 100_000 * (round + 1));
            c.batch_execute(&format!("DELETE FROM {table} WHERE id % 7 = {round}")).unwrap();
            if round == 1 {
                c.batch_execute(&format!("VACUUM {table}")).unwrap();
            }
            check_index(&mut c, &index);
        }
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }
}

/// Index-only scans pin one page at a time, however many leaves a probe
/// list or NULL pages the scan crosses (pinning every page a probe list
/// touched ran out of shared buffers at 128K probes over 10^7 rows); a
/// scroll cursor that turns round returns what the sequential scan does.
#[test]
fn index_only_scans_pin_one_page() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         CREATE EXTENSION IF NOT EXISTS pg_buffercache;
         DROP TABLE IF EXISTS pin_t;
         -- (No autovacuum: its VACUUM of the index would pin pages too.)
         CREATE TABLE pin_t (id int, v int8) WITH (autovacuum_enabled = off);
         INSERT INTO pin_t SELECT g, g::int8 * 7919 % 300000 FROM generate_series(1, 300000) g;
         INSERT INTO pin_t SELECT g, NULL FROM generate_series(300001, 400000) g;
         INSERT INTO pin_t SELECT g, 123456 FROM generate_series(400001, 402000) g;
         CREATE INDEX pin_t_v ON pin_t USING gpu_btree (v);",
    )
    .unwrap();
    c.batch_execute("VACUUM ANALYZE pin_t").unwrap();
    // Every 37th key, a miss between, and the key with 2000 duplicates.
    let probes: Vec<String> =
        (0..300_000).step_by(37).flat_map(|k| [k.to_string(), format!("{}", k * 2 + 1)]).chain(["123456".into()]).collect();
    let any = format!("v = ANY (ARRAY[{}]::int8[])", probes.join(","));
    for (pred, order) in [(any.as_str(), "v"), (any.as_str(), "v DESC"), ("v IS NULL", "v"), ("true", "v"), ("true", "v DESC NULLS FIRST")]
    {
        let q = format!("SELECT v FROM pin_t WHERE {pred} ORDER BY {order}");
        set_seq_only(&mut c);
        let want: Vec<Option<i64>> = c.query(&q, &[]).unwrap().iter().map(|r| r.get(0)).collect();
        set_index_only(&mut c, false);
        let plan: Vec<String> = c.query(&format!("EXPLAIN {q}"), &[]).unwrap().iter().map(|r| r.get(0)).collect();
        assert!(plan.iter().any(|l| l.contains("Index Only Scan")), "{}: {plan:?}", short(&q));
        let mut tx = c.transaction().unwrap();
        tx.batch_execute(&format!("DECLARE cur SCROLL CURSOR FOR {q}")).unwrap();
        let fetch = |tx: &mut postgres::Transaction, what: &str| -> Vec<Option<i64>> {
            tx.query(&format!("FETCH {what} FROM cur"), &[]).unwrap().iter().map(|r| r.get(0)).collect()
        };
        let mut got = fetch(&mut tx, "3000");
        let pinned: i64 = tx
            .query_one(
                "SELECT count(*) FROM pg_buffercache
                 WHERE relfilenode = pg_relation_filenode('pin_t_v') AND pinning_backends > 0
                   AND reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[],
            )
            .unwrap()
            .get(0);
        assert!(pinned <= 1, "{}: {pinned} index pages pinned mid-scan", short(&q));
        got.extend(fetch(&mut tx, "ALL"));
        assert_eq!(got, want, "{}", short(&q));
        let mut back = fetch(&mut tx, "BACKWARD ALL");
        back.reverse();
        assert_eq!(back, want, "{} (backward)", short(&q));
        tx.commit().unwrap();
    }
    c.batch_execute("DROP TABLE pin_t").unwrap();
}

/// Leaf splits interrupted before their downlink (as by a crash there:
/// gpuindex.debug_interrupt_splits) leave right halves reachable by right
/// links only; scans still equal the sequential scan, and the next insert
/// that reaches such a split adds the downlink first.
#[test]
fn interrupted_splits_are_finished_by_later_inserts() {
    let mut c = connect(DB);
    let mut rng = SplitMix64::new(5);
    // Full leaves; then, in descending key order, one insert per leaf or
    // so: each splits a leaf that no later insert of the batch reaches.
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS split_t;
         CREATE TABLE split_t (id int, v int8);
         INSERT INTO split_t SELECT g, g * 10 FROM generate_series(1, 220000) g;
         CREATE INDEX split_t_v ON split_t USING gpu_btree (v) WITH (fillfactor = 100);
         SET gpuindex.debug_interrupt_splits = on;
         INSERT INTO split_t SELECT -g, g * 10 + 5 FROM generate_series(220000, 1, -1000) g;
         RESET gpuindex.debug_interrupt_splits;",
    )
    .unwrap();
    let missing = |c: &mut Client| -> i64 {
        c.query_one("SELECT sum(missing_downlinks)::int8 FROM gpu_btree_check('split_t_v')", &[]).unwrap().get(0)
    };
    let before = missing(&mut c);
    assert!(before >= 100, "only {before} downlinks missing after the interrupted splits");
    check_ranges(&mut c, "split_t", "split_t_v", &mut rng);
    c.batch_execute("INSERT INTO split_t SELECT -g, g * 10 + 7 FROM generate_series(1, 220000, 500) g").unwrap();
    assert_eq!(missing(&mut c), 0, "the inserts left downlinks missing ({before} before)");
    check_index(&mut c, "split_t_v");
    check_ranges(&mut c, "split_t", "split_t_v", &mut rng);
    c.batch_execute("DROP TABLE split_t").unwrap();
}

#[test]
fn probe_function_equals_join() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning; SET gpuindex.gpu_min_batch = 1;
         DROP TABLE IF EXISTS probe_t;
         CREATE TABLE probe_t (id int, v int8);
         INSERT INTO probe_t SELECT g, (g * 7919) % 5000 FROM generate_series(1, 50000) g;
         INSERT INTO probe_t SELECT g, NULL FROM generate_series(50001, 50100) g;
         CREATE INDEX probe_t_v ON probe_t USING gpu_btree (v);
         UPDATE probe_t SET id = -id WHERE id % 10 = 0;  -- new row versions (HOT or not)
         DELETE FROM probe_t WHERE id % 13 = 0;",
    )
    .unwrap();
    let mut rng = SplitMix64::new(9);
    for n in [1usize, 10, 100, 1000, 20_000] {
        let keys: Vec<i64> = (0..n).map(|_| rng.below(6000) as i64 - 500).collect();
        let diff: (i64, i64) = {
            let r = c
                .query_one(
                    "WITH p AS (SELECT p.ord, t.id FROM gpu_btree_probe('probe_t_v', $1::int8[]) p JOIN probe_t t ON t.ctid = p.ctid),
                          j AS (SELECT k.ord, t.id FROM unnest($1::int8[]) WITH ORDINALITY k(v, ord) JOIN probe_t t ON t.v = k.v)
                     SELECT (SELECT count(*) FROM (SELECT * FROM p EXCEPT ALL SELECT * FROM j) a),
                            (SELECT count(*) FROM (SELECT * FROM j EXCEPT ALL SELECT * FROM p) b)",
                    &[&keys],
                )
                .unwrap();
            (r.get(0), r.get(1))
        };
        assert_eq!(diff, (0, 0), "probe of {n} keys");
    }
    c.batch_execute("DROP TABLE probe_t").unwrap();
}

/// Batches of tens of thousands of probes (the size of a join's chunks)
/// equal the join: on runs of one key over many leaves, after VACUUM has
/// deleted leaves (dead pages on the leaf step's walk) and after inserts
/// split leaves the backend's mirror does not know of (stale hints).
#[test]
fn large_probe_batches_equal_the_join() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS bigprobe_t;
         CREATE TABLE bigprobe_t (id int, v int8);
         INSERT INTO bigprobe_t SELECT g, (g * 7919) % 60000 FROM generate_series(1, 120000) g;
         INSERT INTO bigprobe_t SELECT g, 777 FROM generate_series(120001, 130000) g;
         INSERT INTO bigprobe_t SELECT g, 40000 + g % 3 FROM generate_series(130001, 136000) g;
         CREATE INDEX bigprobe_t_v ON bigprobe_t USING gpu_btree (v);
         -- The join to compare with reads the table, not the index.
         SET gpuindex.enable_join = off; SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;",
    )
    .unwrap();
    let diff = |c: &mut Client, keys: &[i64]| -> (i64, i64, i64) {
        let r = c
            .query_one(
                "WITH p AS (SELECT p.ord, t.id FROM gpu_btree_probe('bigprobe_t_v', $1::int8[]) p JOIN bigprobe_t t ON t.ctid = p.ctid),
                      j AS (SELECT k.ord, t.id FROM unnest($1::int8[]) WITH ORDINALITY k(v, ord) JOIN bigprobe_t t ON t.v = k.v)
                 SELECT (SELECT count(*) FROM p),
                        (SELECT count(*) FROM (SELECT * FROM p EXCEPT ALL SELECT * FROM j) a),
                        (SELECT count(*) FROM (SELECT * FROM j EXCEPT ALL SELECT * FROM p) b)",
                &[&keys],
            )
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    let mut rng = SplitMix64::new(21);
    let mut keys: Vec<i64> = (0..70_000).step_by(3).collect();
    keys.extend([777, 40_000, 40_001, 40_002, -5, 1 << 40]);
    keys.extend((0..5000).map(|_| rng.below(70_000) as i64));
    for step in ["built", "deleted and vacuumed", "split"] {
        match step {
            "deleted and vacuumed" => {
                c.batch_execute("DELETE FROM bigprobe_t WHERE v BETWEEN 10000 AND 30000").unwrap();
                c.batch_execute("VACUUM bigprobe_t").unwrap();
            }
            "split" => c.batch_execute("INSERT INTO bigprobe_t SELECT -g, g % 60000 FROM generate_series(1, 60000) g").unwrap(),
            _ => {}
        }
        let (rows, extra, missing) = diff(&mut c, &keys);
        assert!(rows > 20_000, "{step}: {rows} rows");
        assert_eq!((extra, missing), (0, 0), "{step}: {rows} rows");
    }
    c.batch_execute(
        "DROP TABLE bigprobe_t; RESET gpuindex.enable_join; RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan",
    )
    .unwrap();
}

/// Temporary files this database has written (flushed from this backend).
fn temp_files(c: &mut Client) -> i64 {
    c.batch_execute("SELECT pg_stat_force_next_flush()").unwrap();
    c.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
    c.query_one("SELECT temp_files FROM pg_stat_database WHERE datname = current_database()", &[]).unwrap().get(0)
}

/// CREATE INDEX sorts within maintenance_work_mem: with 1 MB, 400,000 keys
/// (heavy duplicates) and 100,000 NULLs go through temporary files in many
/// runs and more than one merge pass, and the index equals the sequential
/// scan in every order.
#[test]
fn build_sorts_within_maintenance_work_mem() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS spill_t;
         CREATE TABLE spill_t (id int, v int8);
         INSERT INTO spill_t SELECT g, ((g::int8 * 7919) % 40000) * (g % 3 - 1) FROM generate_series(1, 400000) g;
         INSERT INTO spill_t SELECT g, NULL FROM generate_series(400001, 500000) g;",
    )
    .unwrap();
    let before = temp_files(&mut c);
    c.batch_execute("SET maintenance_work_mem = '1MB'; CREATE INDEX spill_t_v ON spill_t USING gpu_btree (v); RESET maintenance_work_mem")
        .unwrap();
    let written = temp_files(&mut c) - before;
    assert!(written >= 2, "the build wrote {written} temporary files: it did not spill");
    check_index(&mut c, "spill_t_v");
    for pred in ["v IS NULL", "v = 0", "v BETWEEN -100 AND 2500", "v > 39000", "v IS NOT NULL"] {
        check_predicate(&mut c, "spill_t", "spill_t_v", pred);
    }
    for desc in [false, true] {
        check_order(&mut c, "spill_t", "true", desc, 1_000_000);
    }
    c.batch_execute("DROP TABLE spill_t").unwrap();
}

/// Leaf pages (level 0 of gpu_btree_check) and the relation's pages.
fn leaf_and_total_pages(c: &mut Client, index: &str) -> (i64, i64) {
    let leaves: i64 = c.query_one(&format!("SELECT pages FROM gpu_btree_check('{index}') WHERE level = 0"), &[]).unwrap().get(0);
    let total: i64 = c.query_one(&format!("SELECT pg_relation_size('{index}') / current_setting('block_size')::int"), &[]).unwrap().get(0);
    (leaves, total)
}

fn check_ranges(c: &mut Client, table: &str, index: &str, rng: &mut SplitMix64) {
    for _ in 0..6 {
        let (a, b) = (rng.below(220_000) as i64, rng.below(220_000) as i64);
        check_predicate(c, table, index, &format!("v BETWEEN {} AND {}", a.min(b), a.max(b)));
    }
    for desc in [false, true] {
        check_order(c, table, "true", desc, 1_000_000);
        check_order(c, table, "v < 150000", desc, 1_000_000);
    }
}

/// VACUUM after deleting 90% of the keys (a range, so leaves empty out)
/// deletes the empty leaves: scans touch a tenth of the leaves, and in
/// both directions return what the sequential scan does; once no
/// snapshot is older, the next VACUUM gives the pages to the free space
/// map and inserts reuse them instead of extending the index.
#[test]
fn vacuum_deletes_and_recycles_empty_leaves() {
    // Its own database: other tests' snapshots would hold back the xid
    // horizon that lets VACUUM remove rows and recycle pages.
    let mut c = connect("gpuindex_it_btree_vacuum");
    let mut rng = SplitMix64::new(77);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS del_t;
         CREATE TABLE del_t (id int, v int8) WITH (autovacuum_enabled = off);
         INSERT INTO del_t SELECT g, g FROM generate_series(1, 200000) g;
         INSERT INTO del_t SELECT g, NULL FROM generate_series(200001, 200100) g;
         CREATE INDEX del_t_v ON del_t USING gpu_btree (v);",
    )
    .unwrap();
    let (leaves, _) = leaf_and_total_pages(&mut c, "del_t_v");
    c.batch_execute("DELETE FROM del_t WHERE v <= 180000").unwrap();
    c.batch_execute("VACUUM del_t").unwrap();
    // (Autovacuum of another table may briefly hold the horizon back.)
    for _ in 0..50 {
        if leaf_and_total_pages(&mut c, "del_t_v").0 * 8 < leaves {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        c.batch_execute("VACUUM del_t").unwrap();
    }
    let (after, total) = leaf_and_total_pages(&mut c, "del_t_v");
    assert!(after * 8 < leaves, "VACUUM left {after} of {leaves} leaves");
    check_index(&mut c, "del_t_v");
    check_ranges(&mut c, "del_t", "del_t_v", &mut rng);
    // The deleting VACUUM's own xid horizon keeps the pages; a later
    // VACUUM, past a new xid, gives them to the free space map (once no
    // snapshot anywhere in the cluster is older: other tests' may be).
    vacuum_until_free(&mut c, "del_t", "del_t_v", |_| (leaves - after) * 9 / 10);
    c.batch_execute("INSERT INTO del_t SELECT g, g FROM generate_series(1, 180000) g").unwrap();
    let (leaves_now, total_now) = leaf_and_total_pages(&mut c, "del_t_v");
    let (new_leaves, grown) = (leaves_now - after, total_now - total);
    assert!(
        grown + (leaves - after) * 9 / 10 <= new_leaves,
        "{new_leaves} new leaves, the index grew by {grown} pages: freed pages not reused"
    );
    check_index(&mut c, "del_t_v");
    check_ranges(&mut c, "del_t", "del_t_v", &mut rng);
    c.batch_execute("DROP TABLE del_t").unwrap();
}

/// Entries per leaf: more than a plain leaf holds (580) only where run
/// leaves store a key once for its TIDs.
fn entries_per_leaf(c: &mut Client, index: &str) -> f64 {
    let row = c.query_one(&format!("SELECT entries, pages FROM gpu_btree_check('{index}') WHERE level = 0"), &[]).unwrap();
    row.get::<_, i64>(0) as f64 / row.get::<_, i64>(1) as f64
}

fn check_runs(c: &mut Client, rng: &mut SplitMix64) {
    check_index(c, "run_t_v");
    for _ in 0..6 {
        let (a, b) = (rng.below(12_000) as i64, rng.below(12_000) as i64);
        check_predicate(c, "run_t", "run_t_v", &format!("v BETWEEN {} AND {}", a.min(b), a.max(b)));
    }
    check_predicate(c, "run_t", "run_t_v", "v = ANY (ARRAY[0, 1, 2000, 2001, 4000, 7777, 9000])");
    check_predicate(c, "run_t", "run_t_v", "v = 3000");
    for desc in [false, true] {
        check_order(c, "run_t", "true", desc, 1_000_000);
        check_order(c, "run_t", "v BETWEEN 1000 AND 5000", desc, 1_000_000);
    }
}

/// Duplicates are stored as run leaves (one key, then its TIDs): built,
/// grown by inserts of the same keys and of keys between their runs,
/// thinned by deletes and VACUUM, every scan equal to the sequential
/// scan. Five keys of 40,000 rows take over 580 entries a leaf, which
/// plain leaves cannot hold; the same after 100,000 inserts.
#[test]
fn duplicates_are_stored_as_run_leaves() {
    let mut c = connect(DB);
    let mut rng = SplitMix64::new(79);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS run_t;
         CREATE TABLE run_t (id int, v int8) WITH (autovacuum_enabled = off);
         INSERT INTO run_t SELECT g, (g % 5) * 2000 FROM generate_series(1, 200000) g;
         INSERT INTO run_t SELECT g, g - 200000 + 1 FROM generate_series(200001, 200500) g;
         INSERT INTO run_t SELECT g, NULL FROM generate_series(200501, 200600) g;
         CREATE INDEX run_t_v ON run_t USING gpu_btree (v);",
    )
    .unwrap();
    let built = entries_per_leaf(&mut c, "run_t_v");
    assert!(built > 1000.0, "built: {built:.0} entries a leaf");
    check_runs(&mut c, &mut rng);
    // More copies (they land on the first page of their run), keys inside
    // the runs' fences (a run leaf takes another key: rewritten or split
    // at the run's boundary), new keys above everything.
    c.batch_execute(
        "INSERT INTO run_t SELECT 300000 + g, (g % 5) * 2000 FROM generate_series(1, 100000) g;
         INSERT INTO run_t SELECT 400000 + g, (g % 5) * 2000 + 1 + g % 3 FROM generate_series(1, 3000) g;
         INSERT INTO run_t SELECT 500000 + g, 10000 + g % 7 FROM generate_series(1, 5000) g;",
    )
    .unwrap();
    let grown = entries_per_leaf(&mut c, "run_t_v");
    assert!(grown > 700.0, "after inserts: {grown:.0} entries a leaf");
    check_runs(&mut c, &mut rng);
    c.batch_execute(
        "DELETE FROM run_t WHERE v = 2000 AND id % 10 <> 0;
         DELETE FROM run_t WHERE v = 4000;
         DELETE FROM run_t WHERE v BETWEEN 6001 AND 6003;",
    )
    .unwrap();
    c.batch_execute("VACUUM run_t").unwrap();
    c.batch_execute("INSERT INTO run_t SELECT 600000 + g, 4000 + g % 2 FROM generate_series(1, 2000) g").unwrap();
    check_runs(&mut c, &mut rng);
    c.batch_execute("DROP TABLE run_t").unwrap();
}

/// Pages per level (gpu_btree_check), and its missing downlinks.
fn level_pages(c: &mut Client, index: &str) -> (Vec<i64>, i64) {
    let rows = c.query(&format!("SELECT pages, missing_downlinks FROM gpu_btree_check('{index}') ORDER BY level"), &[]).unwrap();
    (rows.iter().map(|r| r.get(0)).collect(), rows.iter().map(|r| r.get::<_, i64>(1)).sum())
}

/// VACUUM deletes subtrees a deletion empties, not only leaves: a leaf
/// that is its parent's only child goes with the parents it is the only
/// descendant of. With fillfactor 10 (58 entries a leaf, 68 an inner
/// page), 300,000 keys make four levels; deleting all but the last 10,000
/// empties the first level-2 page's subtree and most of the second's.
/// First the deletions stop after marking leaves half-dead (as a crash
/// there would leave them: subtrees cut off, still linked on their
/// levels): the index checks clean and answers as the sequential scan;
/// the next VACUUM finishes them. Then the index holds only the pages
/// its remaining keys need, scans agree, and the freed pages are reused.
#[test]
fn vacuum_deletes_emptied_subtrees() {
    let mut c = connect("gpuindex_it_btree_vacuum");
    let mut rng = SplitMix64::new(78);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS sub_t;
         CREATE TABLE sub_t (id int, v int8) WITH (autovacuum_enabled = off);
         INSERT INTO sub_t SELECT g, g FROM generate_series(1, 300000) g;
         CREATE INDEX sub_t_v ON sub_t USING gpu_btree (v) WITH (fillfactor = 10);",
    )
    .unwrap();
    let (before, _) = level_pages(&mut c, "sub_t_v");
    assert_eq!(before.len(), 4, "levels {before:?}");
    c.batch_execute("DELETE FROM sub_t WHERE v <= 290000").unwrap();
    // Stage 1 only: every deletion stops half-dead.
    c.batch_execute("SET gpuindex.debug_interrupt_page_deletion = on").unwrap();
    c.batch_execute("VACUUM sub_t").unwrap();
    c.batch_execute("RESET gpuindex.debug_interrupt_page_deletion").unwrap();
    let (cut, missing) = level_pages(&mut c, "sub_t_v");
    assert_eq!(missing, 0, "cut subtrees counted as missing downlinks ({cut:?})");
    check_ranges(&mut c, "sub_t", "sub_t_v", &mut rng);
    check_predicate(&mut c, "sub_t", "sub_t_v", "v BETWEEN 289000 AND 291000");
    // (Autovacuum of another table may briefly hold the horizon back.)
    let remaining_leaves = 10_000 / 58 + 1;
    for _ in 0..50 {
        c.batch_execute("VACUUM sub_t").unwrap();
        if level_pages(&mut c, "sub_t_v").0[0] <= remaining_leaves + 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let (after, missing) = level_pages(&mut c, "sub_t_v");
    // Leaves with keys, and the pages above them only: with the parents'
    // last children kept, 67 level-1 pages and their leaves would stay.
    assert!(after[0] <= remaining_leaves + 2 && after[1] <= 4 && after[2] == 1, "levels {before:?} -> {after:?}");
    assert_eq!(missing, 0);
    check_index(&mut c, "sub_t_v");
    check_ranges(&mut c, "sub_t", "sub_t_v", &mut rng);
    let deleted = before.iter().sum::<i64>() - after.iter().sum::<i64>();
    let free = vacuum_until_free(&mut c, "sub_t", "sub_t_v", |_| deleted * 9 / 10);
    assert!(free >= deleted * 9 / 10, "{free} pages free after deleting {deleted}");
    let (_, total) = leaf_and_total_pages(&mut c, "sub_t_v");
    c.batch_execute("INSERT INTO sub_t SELECT g, g FROM generate_series(1, 100000) g").unwrap();
    let (grown_levels, _) = level_pages(&mut c, "sub_t_v");
    let (added, grown) = (grown_levels.iter().sum::<i64>() - after.iter().sum::<i64>(), leaf_and_total_pages(&mut c, "sub_t_v").1 - total);
    assert!(grown <= (added - free).max(0) + 2, "{added} pages added, {free} were free, the index grew by {grown}: freed pages not reused");
    check_index(&mut c, "sub_t_v");
    check_ranges(&mut c, "sub_t", "sub_t_v", &mut rng);
    c.batch_execute("DROP TABLE sub_t").unwrap();
}

/// Subtree deletion among runs of one key: 300 keys of 2,000 rows each
/// (each run spans ~15 run leaves at fillfactor 10, so separators and
/// fence keys repeat across pages and parents are found among equal
/// keys). Deleting all but scattered rows of the first 290 keys, first
/// interrupted after stage 1, then finished: the check passes with no
/// missing downlinks, pages go, and equality, ranges and ordered scans
/// both ways equal the sequential scan at each step.
#[test]
fn vacuum_deletes_subtrees_among_duplicate_keys() {
    let mut c = connect("gpuindex_it_btree_vacuum");
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS dup_t;
         CREATE TABLE dup_t (id int, v int8) WITH (autovacuum_enabled = off);
         INSERT INTO dup_t SELECT g, g / 2000 FROM generate_series(0, 599999) g;
         CREATE INDEX dup_t_v ON dup_t USING gpu_btree (v) WITH (fillfactor = 10);
         DELETE FROM dup_t WHERE v < 290 AND id % 50021 <> 0;",
    )
    .unwrap();
    let (before, _) = level_pages(&mut c, "dup_t_v");
    let check = |c: &mut Client| {
        let (_, missing) = level_pages(c, "dup_t_v");
        assert_eq!(missing, 0);
        for pred in ["v = 100", "v = 290", "v BETWEEN 280 AND 295", "v >= 289", "v < 12"] {
            check_predicate(c, "dup_t", "dup_t_v", pred);
        }
        for desc in [false, true] {
            check_order(c, "dup_t", "v BETWEEN 20 AND 291", desc, 1_000_000);
        }
    };
    c.batch_execute("SET gpuindex.debug_interrupt_page_deletion = on").unwrap();
    c.batch_execute("VACUUM dup_t").unwrap();
    c.batch_execute("RESET gpuindex.debug_interrupt_page_deletion").unwrap();
    check(&mut c);
    c.batch_execute("VACUUM dup_t").unwrap();
    let (after, _) = level_pages(&mut c, "dup_t_v");
    // 20,000 rows left (~150 run leaves) and 11 scattered ones, each
    // keeping its leaf and the level-1 page above it.
    assert!(after[0] * 10 < before[0] && after[1] * 3 < before[1], "levels {before:?} -> {after:?}");
    check_index(&mut c, "dup_t_v");
    check(&mut c);
    c.batch_execute("DROP TABLE dup_t").unwrap();
}

/// A backward scan standing on a leaf whose left neighbours VACUUM then
/// deletes, the leftmost among them: its copy of the page still links to
/// a deleted leaf, and nothing is left of the page any more. The scan must
/// end there (it read a left link of no page before), with the rows of
/// its snapshot.
#[test]
fn backward_scan_past_deleted_leftmost_leaves() {
    let mut c = connect("gpuindex_it_btree_vacuum");
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS left_t;
         CREATE TABLE left_t (id int, v int8) WITH (autovacuum_enabled = off);
         INSERT INTO left_t SELECT g, g FROM generate_series(1, 10000) g;
         CREATE INDEX left_t_v ON left_t USING gpu_btree (v) WITH (fillfactor = 10);
         DELETE FROM left_t WHERE v <= 174;",
    )
    .unwrap();
    // 58 keys a leaf: the first three leaves are empty now; the cursor
    // stands on the fourth (175..232), a plain index scan (no pin held).
    let mut tx = c.build_transaction().isolation_level(postgres::IsolationLevel::RepeatableRead).start().unwrap();
    tx.batch_execute(
        "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off;
         DECLARE back CURSOR FOR SELECT id FROM left_t WHERE v <= 300 ORDER BY v DESC",
    )
    .unwrap();
    let first: Vec<i32> = tx.query("FETCH 100 FROM back", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(first, (201..=300).rev().collect::<Vec<i32>>());
    let mut v = connect("gpuindex_it_btree_vacuum");
    v.batch_execute("VACUUM left_t").unwrap();
    let (levels, _) = level_pages(&mut v, "left_t_v");
    let rest: Vec<i32> = tx.query("FETCH ALL FROM back", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(rest, (175..=200).rev().collect::<Vec<i32>>(), "after VACUUM left {levels:?} pages per level");
    tx.commit().unwrap();
    check_index(&mut c, "left_t_v");
    c.batch_execute("DROP TABLE left_t").unwrap();
}

/// Empty NULL pages leave the NULL chain at VACUUM and are reused: IS NULL
/// scans then read only the pages left, and answer as the sequential scan
/// before, between and after.
#[test]
fn vacuum_deletes_and_recycles_empty_null_pages() {
    let mut c = connect("gpuindex_it_btree_vacuum");
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS del_n;
         CREATE TABLE del_n (id int, v int8) WITH (autovacuum_enabled = off);
         INSERT INTO del_n SELECT g, g FROM generate_series(1, 2000) g;
         INSERT INTO del_n SELECT g, NULL FROM generate_series(2001, 62000) g;
         CREATE INDEX del_n_v ON del_n USING gpu_btree (v);",
    )
    .unwrap();
    let size = |c: &mut Client| -> i64 {
        c.query_one("SELECT pg_relation_size('del_n_v') / current_setting('block_size')::int", &[]).unwrap().get(0)
    };
    let check = |c: &mut Client| {
        check_index(c, "del_n_v");
        for pred in ["v IS NULL", "v IS NULL AND id > 60000", "v IS NOT NULL", "v < 100"] {
            check_predicate(c, "del_n", "del_n_v", pred);
        }
        // An ordered scan returns the NULLs last, all of them.
        check_order(c, "del_n", "true", false, 100_000);
        check_order(c, "del_n", "true", true, 100_000);
    };
    // Whole NULL pages empty (the first and the last few keep rows).
    c.batch_execute("DELETE FROM del_n WHERE v IS NULL AND id BETWEEN 4000 AND 59000").unwrap();
    c.batch_execute("VACUUM del_n").unwrap();
    check(&mut c);
    let freed = vacuum_until_free(&mut c, "del_n", "del_n_v", |_| 30);
    assert!(freed >= 30, "{freed} pages free after deleting ~40 NULL pages' rows");
    check(&mut c);
    let before = size(&mut c);
    c.batch_execute("INSERT INTO del_n SELECT g, NULL FROM generate_series(100001, 140000) g").unwrap();
    let grown = size(&mut c) - before;
    assert!(grown <= 2, "40,000 NULLs grew the index by {grown} pages: freed NULL pages not reused");
    check(&mut c);
    c.batch_execute("DROP TABLE del_n").unwrap();
}

/// Page deletion and reuse beside concurrent inserts and scans: one
/// session deletes whole key ranges and VACUUMs in a loop (leaves, and
/// with fillfactor 10's four levels whole subtrees, are deleted,
/// recycled, reused by splits), one inserts everywhere, and two compare,
/// each in one snapshot, index range scans forward and backward and
/// `= ANY` probes with the sequential scan, one of them through parallel
/// scans.
#[test]
fn deletion_beside_concurrent_inserts_and_scans() {
    const T: &str = "del_conc";
    let mut c = connect(DB);
    c.batch_execute(&format!(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS {T};
         CREATE TABLE {T} (id int, v int8) WITH (autovacuum_enabled = off, parallel_workers = 2);
         INSERT INTO {T} SELECT g, g FROM generate_series(1, 200000) g;
         CREATE INDEX {T}_v ON {T} USING gpu_btree (v) WITH (fillfactor = 10);"
    ))
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let vacuumer = std::thread::spawn(move || {
        let mut c = connect(DB);
        for round in 0..12i64 {
            let lo = (round * 37_000) % 190_000;
            let hi = lo + 30_000;
            c.batch_execute(&format!("DELETE FROM {T} WHERE v BETWEEN {lo} AND {hi} AND id % 9973 <> 0")).unwrap();
            c.batch_execute("SELECT txid_current()").unwrap();
            c.batch_execute(&format!("VACUUM {T}")).unwrap();
            c.batch_execute(&format!("INSERT INTO {T} SELECT -g, g FROM generate_series({lo}, {hi}, 3) g")).unwrap();
        }
    });
    let inserter = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut c = connect(DB);
            let mut rng = SplitMix64::new(5);
            while !stop.load(Ordering::Relaxed) {
                let values: Vec<String> = (0..200).map(|i| format!("({}, {})", 1_000_000 + i, rng.below(200_000))).collect();
                c.batch_execute(&format!("INSERT INTO {T} VALUES {}", values.join(","))).unwrap();
            }
        })
    };
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = connect(DB);
                let mut rng = SplitMix64::new(50 + r);
                let mut checks = 0;
                while !stop.load(Ordering::Relaxed) || checks < 5 {
                    let (a, b) = (rng.below(200_000), rng.below(200_000));
                    let (lo, hi) = (a.min(b), a.max(b));
                    let probes: Vec<String> = (0..100).map(|_| rng.below(200_000).to_string()).collect();
                    let q = format!(
                        "SELECT (SELECT count(*) FROM {T} WHERE v BETWEEN {lo} AND {hi}),
                                ARRAY(SELECT v FROM {T} WHERE v BETWEEN {lo} AND {hi} ORDER BY v DESC LIMIT 500),
                                ARRAY(SELECT v FROM {T} WHERE v >= {lo} ORDER BY v LIMIT 500),
                                (SELECT count(*) FROM {T} WHERE v = ANY(ARRAY[{p}]::int8[])),
                                ARRAY(SELECT v FROM {T} WHERE v = ANY(ARRAY[{p}]::int8[]) ORDER BY v DESC)",
                        p = probes.join(",")
                    );
                    let mut tx = c.build_transaction().isolation_level(postgres::IsolationLevel::RepeatableRead).start().unwrap();
                    tx.batch_execute(
                        "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL gpuindex.gpu_min_batch = 1",
                    )
                    .unwrap();
                    if r == 1 {
                        // Parallel scans (pages shared among the workers'
                        // walks, both ways and for the probes) beside the
                        // splits and deletions.
                        tx.batch_execute(
                            "SET LOCAL parallel_setup_cost = 0; SET LOCAL parallel_tuple_cost = 0; SET LOCAL cpu_operator_cost = 0;
                             SET LOCAL min_parallel_index_scan_size = 0; SET LOCAL parallel_leader_participation = off",
                        )
                        .unwrap();
                        if checks == 0 {
                            let plan: Vec<String> = tx.query(&format!("EXPLAIN {q}"), &[]).unwrap().iter().map(|r| r.get(0)).collect();
                            assert!(plan.iter().any(|l| l.contains("Parallel Index")), "no parallel scan: {plan:#?}");
                        }
                    }
                    let row = tx.query_one(&q, &[]).unwrap();
                    let via_index: (i64, Vec<i64>, Vec<i64>, i64, Vec<i64>) = (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
                    tx.batch_execute(
                        "SET LOCAL enable_seqscan = on; SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off",
                    )
                    .unwrap();
                    let row = tx.query_one(&q, &[]).unwrap();
                    let via_seq: (i64, Vec<i64>, Vec<i64>, i64, Vec<i64>) = (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
                    tx.commit().unwrap();
                    assert_eq!(via_index, via_seq, "index and heap disagree beside page deletion: {lo}..{hi}");
                    checks += 1;
                }
                checks
            })
        })
        .collect();
    vacuumer.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    inserter.join().unwrap();
    for r in readers {
        assert!(r.join().unwrap() >= 5);
    }
    c.batch_execute("SELECT txid_current()").unwrap();
    c.batch_execute(&format!("VACUUM {T}")).unwrap();
    check_index(&mut c, &format!("{T}_v"));
    let mut rng = SplitMix64::new(6);
    for _ in 0..5 {
        let (a, b) = (rng.below(200_000), rng.below(200_000));
        check_predicate(&mut c, T, &format!("{T}_v"), &format!("v BETWEEN {} AND {}", a.min(b), a.max(b)));
    }
    c.batch_execute(&format!("DROP TABLE {T}")).unwrap();
}

/// Parallel index scans: ranges are split page by page among the
/// participants (each worker returns part of it), forward and backward,
/// the unqualified ordered scan too (a merge join's; the NULLs after it go
/// to whoever read the last page), and `= ANY` probe lists; the
/// unqualified backward scan (NULLs first) and `IS NULL` are taken whole
/// by one participant. Every answer equals the sequential
/// scan's, ordered ones (Gather Merge) in order.
#[test]
fn parallel_scans_equal_sequential_scans() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS bt_par;
         CREATE TABLE bt_par (id int, k int8, payload int8) WITH (autovacuum_enabled = off, parallel_workers = 2);
         INSERT INTO bt_par SELECT g, CASE WHEN g % 97 = 0 THEN NULL ELSE (g::int8 * 7919) % 400000 END, g
           FROM generate_series(1, 600000) g;
         CREATE INDEX bt_par_k ON bt_par USING gpu_btree (k);",
    )
    .unwrap();
    // All-visible, as a table at rest is (index-only scans priced so, the
    // planner takes the parallel probe scan below).
    let at_rest = gpuindex_tests::vacuum_until_all_visible(&mut c, "bt_par");
    let probe_keys: std::collections::HashSet<i64> = (0..20_000i64).map(|i| i * 37 % 410_000 - 5_000).collect();
    let any_rows = (1..=600_000i64).filter(|g| g % 97 != 0 && probe_keys.contains(&(g * 7919 % 400_000))).count() as i64;
    let probes: Vec<String> = (0..20_000).map(|i| (i * 37 % 410_000 - 5_000).to_string()).collect();
    let probes = probes.join(",");
    // (Two workers whatever the index's size, the table says; ordered, or
    // the planner keeps a count serial.)
    let any_split = format!("SELECT k FROM bt_par WHERE k = ANY('{{{probes}}}'::int8[]) ORDER BY k");
    let queries = [
        "SELECT count(*)::int8, coalesce(sum(k), 0)::int8 FROM bt_par WHERE k BETWEEN 1000 AND 350000".to_string(),
        "SELECT count(*)::int8, coalesce(sum(payload), 0)::int8 FROM bt_par WHERE k > 123456".to_string(),
        format!("SELECT count(*)::int8, coalesce(sum(payload), 0)::int8 FROM bt_par WHERE k = ANY('{{{probes}}}'::int8[])"),
        "SELECT count(*)::int8, coalesce(sum(payload), 0)::int8 FROM bt_par WHERE k IS NULL".to_string(),
    ];
    let any_ordered = format!("SELECT k::text FROM bt_par WHERE k = ANY('{{{probes}}}'::int8[]) ORDER BY k");
    let ordered = [
        "SELECT k::text FROM bt_par WHERE k BETWEEN 5000 AND 90000 ORDER BY k",
        "SELECT coalesce(k::text, 'null') FROM bt_par ORDER BY k",
        any_ordered.as_str(),
    ];
    let mut splits = vec![
        ("SELECT count(*) FROM bt_par WHERE k BETWEEN 0 AND 400000", 600_000 - 600_000 / 97),
        // Every row, the NULLs with them.
        ("SELECT count(*) FROM bt_par", 600_000),
        // Backward (Gather Merge over the workers' streams).
        ("SELECT k FROM bt_par WHERE k BETWEEN 0 AND 400000 ORDER BY k DESC", 600_000 - 600_000 / 97),
    ];
    // A probe list, both ways.
    let any_split_desc = format!("{any_split} DESC");
    if at_rest {
        splits.push((any_split.as_str(), any_rows));
        splits.push((any_split_desc.as_str(), any_rows));
    }
    gpuindex_tests::parallel_differential(&mut c, &queries, &ordered, &splits);
    c.batch_execute("DROP TABLE bt_par").unwrap();
}

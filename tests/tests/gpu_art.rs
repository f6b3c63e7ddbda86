//! gpu_art beyond the shared runners (which run its text mix and its
//! string sets through loads, changes, VACUUM, batches, joins, crashes
//! and replicas): the shared runners' scans on each of its data sets,
//! cursors moving both ways, index-only scans returning decoded values,
//! parallel scans, and the errors a user meets.

use gpuindex_engine::datasets::StringSet;
use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::runners::{self, Data};
use gpuindex_tests::{connect, error_of, scroll_both_ways};

const DB: &str = "gpuindex_it_art";

#[test]
fn scans_equal_sequential_scans_on_every_set() {
    let mut c = connect(DB);
    let mut rng = SplitMix64::new(15);
    for data in [Data::Texts, Data::Strings(StringSet::Urls), Data::Strings(StringSet::Uuid), Data::Strings(StringSet::Random)] {
        let case = runners::gpu_art_on(data);
        let table = format!("art_{}", data.name());
        runners::load(&mut c, &case, &table, &mut rng, 6_000);
        let preds = runners::predicates(&case, &mut rng, 40);
        runners::differential(&mut c, &table, &preds);
        runners::batch_differential(&mut c, &case, &table, &mut rng, 4, 200);
        // The mirror's batches on the GPU wherever there is one.
        c.batch_execute("SET gpuindex.gpu_min_batch = 1").unwrap();
        runners::batch_differential(&mut c, &case, &table, &mut rng, 4, 200);
        runners::differential(&mut c, &table, &preds);
        c.batch_execute("RESET gpuindex.gpu_min_batch").unwrap();
        runners::change(&mut c, &case, &table, &mut rng, 100_000, 3_000);
        runners::differential(&mut c, &table, &preds);
        runners::check(&mut c, &case, &table);
        // Ordered scans both ways, index-only: the decoded values equal
        // the column's, in the sequential scan's sort order.
        for dir in ["", " DESC"] {
            let q = format!("SELECT v::text FROM {table} ORDER BY v{dir}");
            gpuindex_tests::set_seq_only(&mut c);
            let want: Vec<Option<String>> = c.query(&q, &[]).unwrap().iter().map(|r| r.get(0)).collect();
            gpuindex_tests::set_index_only(&mut c, false);
            let plan = gpuindex_tests::explain(&mut c, &q);
            assert!(plan.contains("Index Only Scan"), "{table}: {plan}");
            let got: Vec<Option<String>> = c.query(&q, &[]).unwrap().iter().map(|r| r.get(0)).collect();
            assert!(got == want, "{table}: ORDER BY v{dir} through the index differs");
        }
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }
}

/// A scrollable cursor over an ordered scan, fetched forward and backward
/// at random, returns what the same cursor over a sort returns.
#[test]
fn cursors_move_both_ways() {
    let mut c = connect(DB);
    let mut rng = SplitMix64::new(16);
    let case = runners::gpu_art();
    runners::load(&mut c, &case, "art_cursor", &mut rng, 3_000);
    for (i, pred) in ["true", "v = ANY(ARRAY['dup-1','dup-3','', 'zzz'])", "v ^@ 'https://www.site1'", "v > 'm'"].iter().enumerate() {
        let mut outs = Vec::new();
        for index in [true, false] {
            let mut tx = c.transaction().unwrap();
            if index {
                tx.batch_execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off").unwrap();
            } else {
                tx.batch_execute(
                    "SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off; SET LOCAL enable_bitmapscan = off",
                )
                .unwrap();
            }
            tx.batch_execute(&format!("DECLARE cur SCROLL CURSOR FOR SELECT id, v FROM art_cursor WHERE {pred} ORDER BY v, id")).unwrap();
            let mut r = SplitMix64::new(100 + i as u64);
            let mut got = Vec::new();
            for _ in 0..60 {
                let n = r.below(40);
                let dir = if r.below(3) == 0 { "BACKWARD" } else { "FORWARD" };
                let rows = tx.query(&format!("FETCH {dir} {n} FROM cur"), &[]).unwrap();
                got.push(rows.iter().map(|row| (row.get::<_, i32>(0), row.get::<_, Option<String>>(1))).collect::<Vec<_>>());
            }
            tx.rollback().unwrap();
            outs.push(got);
        }
        // ORDER BY v, id: the index orders by v only; the executor sorts
        // ties by id above it (incremental sort) or the plan is a sort.
        assert!(outs[0] == outs[1], "cursor over {pred}: index and sort differ");
    }
    c.batch_execute("DROP TABLE art_cursor").unwrap();
}

/// A scrollable cursor over `= ANY` of 6,000 keys (the pool finds
/// their leaves' entries a few groups ahead; a fetch backward goes back to
/// the page walk at the row returned last), index-only and not, fetched
/// both ways at random, returns what the same cursor over a sort returns.
#[test]
fn cursors_over_many_keys_move_both_ways() {
    let mut c = connect(DB);
    c.batch_execute(
        "DROP TABLE IF EXISTS art_many; CREATE TABLE art_many AS SELECT i AS id, md5(i::text) COLLATE \"C\" AS v FROM generate_series(1, 200000) i;
         CREATE INDEX art_many_v ON art_many USING gpu_art (v)",
    )
    .unwrap();
    c.batch_execute("VACUUM ANALYZE art_many").unwrap();
    // Keys of rows all over the table, a few misses among them.
    let keys = "ARRAY(SELECT md5((i * 61 % 230000)::text) FROM generate_series(1, 6000) i)";
    for cols in ["v", "id, v"] {
        let q = format!("SELECT {cols} FROM art_many WHERE v = ANY({keys}) ORDER BY v");
        let scan = if cols == "v" { "Index Only Scan using art_many_v" } else { "Index Scan using art_many_v" };
        let rows = scroll_both_ways::<String>(&mut c, &q, scan, usize::from(cols != "v"), 60);
        assert!(rows > 10_000, "the cursor moved over {rows} rows");
    }
    c.batch_execute("DROP TABLE art_many").unwrap();
}

#[test]
fn errors_say_what_to_do() {
    let mut c = connect(DB);
    c.batch_execute("DROP TABLE IF EXISTS art_err; CREATE TABLE art_err (t text COLLATE \"en_US\", c text COLLATE \"C\", n int, b bytea);")
        .or_else(|_| {
            c.batch_execute(
                "DROP TABLE IF EXISTS art_err; CREATE TABLE art_err (t text COLLATE \"C.utf8\", c text COLLATE \"C\", n int, b bytea);",
            )
        })
        .unwrap();
    let e = c.batch_execute("CREATE INDEX ON art_err USING gpu_art (t)").unwrap_err();
    let (_, msg, hint) = error_of(&e);
    assert!(msg.contains("C collation") && hint.unwrap_or_default().contains("COLLATE \"C\""), "{msg}");
    let e = c.batch_execute("CREATE INDEX ON art_err USING gpu_art (n)").unwrap_err();
    assert!(error_of(&e).1.contains("operator class"), "{:?}", error_of(&e));
    c.batch_execute("CREATE INDEX art_err_c ON art_err USING gpu_art (c); CREATE INDEX art_err_b ON art_err USING gpu_art (b)").unwrap();
    // Keys past the 2000 bytes an entry holds whole go to overflow chains
    // (bytea zeros are escaped: 1500 zero bytes are a 3002-byte key).
    c.batch_execute(
        "INSERT INTO art_err (c, b) VALUES (repeat('x', 3000), decode(repeat('00', 1500), 'hex')), \
         (repeat('y', 1999), decode(repeat('00', 990), 'hex'))",
    )
    .unwrap();
    for (index, key) in [("art_err_c", "repeat('x', 3000)"), ("art_err_c", "repeat('y', 1999)")] {
        let n: i64 = c.query_one(&format!("SELECT count(*) FROM gpu_art_probe('{index}', ARRAY[{key}])"), &[]).unwrap().get(0);
        assert_eq!(n, 1, "{index} {key}");
    }
    let n: i64 =
        c.query_one("SELECT count(*) FROM gpu_art_probe('art_err_b', ARRAY[decode(repeat('00', 1500), 'hex')])", &[]).unwrap().get(0);
    assert_eq!(n, 1);
    let e = c.query_one("SELECT count(*) FROM gpu_art_probe('art_err_c', ARRAY[1,2])", &[]).unwrap_err();
    assert!(error_of(&e).1.contains("cannot probe"), "{:?}", error_of(&e));
    c.batch_execute("DROP TABLE art_err").unwrap();
}

/// Parallel index scans: a forward scan of one interval (a range, a
/// prefix, IS NULL) is split page by page among the participants;
/// backward scans and `= ANY` are taken whole by one of them. Every answer
/// equals the sequential scan's, ordered ones (Gather Merge) in order.
#[test]
fn parallel_scans_equal_sequential_scans() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS art_par;
         CREATE TABLE art_par (id int, k text COLLATE \"C\", payload int8) WITH (autovacuum_enabled = off);
         INSERT INTO art_par SELECT g, CASE WHEN g % 97 = 0 THEN NULL
             ELSE 'https://www.site' || (g % 613) || '.org/' || (g::int8 * 7919 % 100003) || CASE WHEN g % 501 = 0 THEN repeat('x', 3000) ELSE '' END END, g
           FROM generate_series(1, 300000) g;
         CREATE INDEX art_par_k ON art_par USING gpu_art (k);",
    )
    .unwrap();
    c.batch_execute("VACUUM ANALYZE art_par").unwrap();
    let probes: Vec<String> = (0..5_000).map(|i| format!("\"https://www.site{}.org/{}\"", i % 700, i * 13 % 100_003)).collect();
    let sums = "count(*)::int8, coalesce(sum(payload + length(k)), 0)::int8";
    let queries = [
        format!("SELECT {sums} FROM art_par WHERE k BETWEEN 'https://www.site1' AND 'https://www.site5'"),
        format!("SELECT {sums} FROM art_par WHERE k > 'https://www.site3'"),
        format!("SELECT {sums} FROM art_par WHERE k ^@ 'https://www.site2'"),
        format!("SELECT {sums} FROM art_par WHERE k = ANY('{{{}}}'::text[])", probes.join(",")),
        "SELECT count(*)::int8, coalesce(sum(payload), 0)::int8 FROM art_par WHERE k IS NULL".to_string(),
    ];
    let ordered = ["SELECT k FROM art_par WHERE k BETWEEN 'https://www.site4' AND 'https://www.site6' ORDER BY k"];
    let split = ("SELECT count(*) FROM art_par WHERE k >= ''", 300_000 - 300_000 / 97);
    gpuindex_tests::parallel_differential(&mut c, &queries, &ordered, &[split]);
    c.batch_execute("DROP TABLE art_par").unwrap();
}

/// Lookups search this backend's copies of inner pages; another session's
/// inserts then split leaves, inner pages and the root under them. Every
/// lookup through the stale copies still finds exactly its rows.
#[test]
fn lookups_through_stale_inner_copies_stay_exact() {
    let (mut reader, mut writer) = (connect(DB), connect(DB));
    // 300-byte keys: ~25 a page, so 15,000 rows make three levels and
    // 75,000 four.
    let key = |g: &str| format!("md5({g}::text) || repeat('p', 268)");
    writer
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS art_stale;
             CREATE TABLE art_stale (k text COLLATE \"C\");
             INSERT INTO art_stale SELECT {} FROM generate_series(1, 15000) g;
             CREATE INDEX art_stale_k ON art_stale USING gpu_art (k);",
            key("g")
        ))
        .unwrap();
    reader.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
    let q = format!("SELECT count(*) FROM art_stale WHERE k = {}", key("$1::int"));
    assert!(gpuindex_tests::explain(&mut reader, &q.replace("$1", "7")).contains("art_stale_k"));
    let lookup = reader.prepare(&q).unwrap();
    let check = |reader: &mut postgres::Client, upto: i32, want: &dyn Fn(i32) -> i64| {
        for g in (1..=upto).step_by(3) {
            let n: i64 = reader.query_one(&lookup, &[&g]).unwrap().get(0);
            assert_eq!(n, want(g), "key {g}");
        }
    };
    check(&mut reader, 20_000, &|g| (g <= 15_000) as i64);
    let copied: i64 = reader
        .query_one("SELECT coalesce(sum(host_bytes), 0)::int8 FROM gpuindex_cached_images() WHERE kind = 'art inner pages'", &[])
        .unwrap()
        .get(0);
    assert!(copied > 0, "no inner pages copied");
    // Duplicates of 10,001..15,000 and new keys, in an order that splits
    // pages all over the key space.
    writer
        .batch_execute(&format!(
            "INSERT INTO art_stale SELECT {} FROM generate_series(10001, 70000) g ORDER BY md5(g::text || 'x')",
            key("g")
        ))
        .unwrap();
    check(&mut reader, 75_000, &|g| (g <= 15_000) as i64 + (10_001..=70_000).contains(&g) as i64);
    writer.batch_execute("DROP TABLE art_stale").unwrap();
}

/// Batch probes search the hinted leaves in place on the CPU pool and
/// send the rest (points at or past a leaf's high key: runs of one key
/// over several leaves, hints made before a split) through the scan's
/// walk. A session's mirror, then another session's inserts splitting
/// leaves under it: every key's matches equal a hash join's, each time.
#[test]
fn probes_through_a_stale_mirror_stay_exact() {
    let (mut reader, mut writer) = (connect(DB), connect(DB));
    // 300-byte keys, ~25 a leaf; keys 1..40 have 120 rows each (runs over
    // five leaves).
    let key = |g: &str| format!("md5({g}::text) || repeat('p', 268)");
    writer
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS art_probe;
             CREATE TABLE art_probe (k text COLLATE \"C\");
             INSERT INTO art_probe SELECT {} FROM generate_series(1, 15000) g;
             INSERT INTO art_probe SELECT {} FROM generate_series(1, 40) g, generate_series(1, 119);
             CREATE INDEX art_probe_k ON art_probe USING gpu_art (k);",
            key("g"),
            key("g")
        ))
        .unwrap();
    // Every 3rd key of 1..16,000 (g = 2 mod 3: over 4,096 keys, so `= ANY`
    // scans take their entries from the pool) and the duplicated ones,
    // shuffled, some twice.
    let keys = format!(
        "ARRAY(SELECT {} FROM (SELECT g FROM generate_series(2, 16000, 3) g UNION ALL SELECT generate_series(1, 40) UNION ALL SELECT generate_series(3, 800, 70)) s ORDER BY md5(g::text || 'o'))",
        key("g")
    );
    let differ = format!(
        "WITH q AS (SELECT {keys} AS a),
         f AS (SELECT ord, count(*) AS n FROM gpu_art_probe('art_probe_k', (SELECT a FROM q)) GROUP BY ord),
         j AS (SELECT u.ord, count(*) AS n FROM unnest((SELECT a FROM q)) WITH ORDINALITY u(k, ord) JOIN art_probe t ON t.k = u.k GROUP BY u.ord)
         SELECT (SELECT count(*) FROM (SELECT * FROM f EXCEPT SELECT * FROM j) d) + (SELECT count(*) FROM (SELECT * FROM j EXCEPT SELECT * FROM f) d), (SELECT sum(n)::int8 FROM f)"
    );
    // The join as a hash join over the table (not GpuIndexJoin, whose
    // chunks probe the same way).
    reader
        .batch_execute("SET gpuindex.enable_join = off; SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_nestloop = off")
        .unwrap();
    // `= ANY` scans of the same keys (their leaves copied ahead on the
    // pool): index-only and plain, in key order, as many rows.
    let any = format!("SELECT k FROM art_probe WHERE k = ANY({keys})");
    let check = |reader: &mut postgres::Client, rows: i64| {
        let r = reader.query_one(&differ, &[]).unwrap();
        let (differ, found): (i64, Option<i64>) = (r.get(0), r.get(1));
        assert_eq!(differ, 0, "per-key matches differ from the hash join's");
        assert!(found.unwrap_or(0) >= rows, "{found:?} rows found");
        let rows = |reader: &mut postgres::Client, sql: &str| -> Vec<String> {
            reader.query(sql, &[]).unwrap().iter().map(|r| r.get(0)).collect()
        };
        let mut want = rows(reader, &any);
        want.sort();
        reader.batch_execute("SET enable_indexscan = on; SET enable_seqscan = off").unwrap();
        for (scan, sql) in [("Index Only Scan", any.clone()), ("Index Scan", any.replace("WHERE", "WHERE ctid IS NOT NULL AND"))] {
            assert!(gpuindex_tests::explain(reader, &sql).contains(scan), "{sql}");
            assert!(rows(reader, &sql) == want, "{scan}: not the sequential scan's rows in key order");
        }
        reader.batch_execute("SET enable_indexscan = off; SET enable_seqscan = on").unwrap();
    };
    // Index-only scans read the visibility map (no VACUUM after this: it
    // would drop the session's mirror with the index's relcache entry).
    writer.batch_execute("VACUUM art_probe").unwrap();
    check(&mut reader, 2_000);
    // Runs of five keys that are not probed (g = 1 mod 3, above 800)
    // split their leaves after the run: the keys right of it move to new
    // leaves, the mirror stays (a few splits) and hints them to the old
    // ones, whose high key is now the run's key.
    writer
        .batch_execute(&format!(
            "INSERT INTO art_probe SELECT {} FROM generate_series(1000, 15000, 3003) g, generate_series(1, 30)",
            key("g")
        ))
        .unwrap();
    check(&mut reader, 2_000);
    // Many: the mirror is rebuilt.
    writer.batch_execute(&format!("INSERT INTO art_probe SELECT {} FROM generate_series(1, 20000) g", key("g"))).unwrap();
    check(&mut reader, 4_000);
    writer.batch_execute("DROP TABLE art_probe").unwrap();
}

/// The threads a backend starts block every signal, so PostgreSQL's
/// handlers (cancel, terminate, latches) run on the backend's own thread,
/// whichever of gpuindex's paths runs first in a fresh backend: here a
/// large `= ANY`, whose keys are encoded on all cores while planning.
#[test]
fn a_fresh_backends_threads_block_signals() {
    let mut c = connect(DB);
    c.batch_execute(
        "DROP TABLE IF EXISTS art_sig; CREATE TABLE art_sig (k text COLLATE \"C\"); \
         INSERT INTO art_sig SELECT 'k' || g FROM generate_series(1, 20000) g; \
         CREATE INDEX art_sig_k ON art_sig USING gpu_art (k); ANALYZE art_sig",
    )
    .unwrap();
    let keys: Vec<String> = (0..10_000).map(|i| format!("'k{}'", i * 2)).collect();
    let sql = format!("SELECT count(*) FROM art_sig WHERE k = ANY(ARRAY[{}])", keys.join(","));
    let mut fresh = connect(DB);
    fresh.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
    let pid: i32 = fresh.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let n: i64 = fresh.query_one(&sql, &[]).unwrap().get(0);
    assert_eq!(n, 9_999);
    let threads = gpuindex_tests::threads_of(pid);
    assert!(threads.iter().any(|t| t.name.starts_with("gpuindex-cpu")), "no pool threads: {threads:?}");
    for t in threads.iter().filter(|t| t.tid != pid && !t.name.starts_with("cuda")) {
        assert!(t.name.starts_with("gpuindex"), "a thread gpuindex did not name: {t:?}");
        // SIGINT is signal 2: bit 1 of the mask.
        assert!(t.blocked & (1 << 1) != 0, "a thread that takes SIGINT: {t:?}");
    }
    c.batch_execute("DROP TABLE art_sig").unwrap();
}

/// Creates `table` (id int, k text) with 40,000 rows for each of `keys`
/// (expressions of g, inserted in turn), and its gpu_art index; vacuums
/// it (every heap page all-visible), then deletes the rows matching
/// `delete` in a transaction of their own, whose id it returns.
fn vacuumed_then_deleted(a: &mut postgres::Client, table: &str, keys: &[&str], delete: &str) -> i64 {
    let mut sql = format!(
        "SET client_min_messages = warning; DROP TABLE IF EXISTS {table};
         CREATE TABLE {table} (id int, k text COLLATE \"C\") WITH (autovacuum_enabled = off);"
    );
    for k in keys {
        sql += &format!("INSERT INTO {table} SELECT g, {k} FROM generate_series(0, 39999) g;");
    }
    a.batch_execute(&format!("{sql} CREATE INDEX {table}_k ON {table} USING gpu_art (k)")).unwrap();
    a.batch_execute(&format!("VACUUM ANALYZE {table}")).unwrap();
    a.batch_execute(&format!("BEGIN; DELETE FROM {table} WHERE {delete}")).unwrap();
    let xid: i64 = a.query_one("SELECT txid_current()", &[]).unwrap().get(0);
    a.batch_execute("COMMIT").unwrap();
    xid
}

/// 8192 keys: more than an `= ANY` scan walks point by point.
const MANY_KEYS: &str = "ARRAY(SELECT 'key-' || g FROM generate_series(0, 8191) g)";

/// An `= ANY` index-only scan of many keys (its entries read a thousand
/// leaves ahead) keeps the pins of the leaves whose rows' heap pages are
/// not all-visible until it has returned those rows: VACUUM, which takes
/// a cleanup lock on every leaf, waits for the open cursor instead of
/// freeing the deleted rows and marking their pages all-visible under it.
#[test]
fn vacuum_waits_for_index_only_any_scans() {
    // Its own database: other tests' snapshots would keep VACUUM from
    // removing anything (and so from waiting).
    const DB: &str = "gpuindex_it_art_interlock";
    let mut a = connect(DB);
    let deleted = vacuumed_then_deleted(&mut a, "ga_lock", &["'key-' || g"], "id % 2 = 0");
    let first = gpuindex_tests::open_cursor_after(&mut a, deleted, &format!("SELECT k FROM ga_lock WHERE k = ANY({MANY_KEYS})"));
    let vacuum = std::thread::spawn(|| connect(DB).batch_execute("VACUUM ga_lock"));
    let mut c = connect(DB);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let pinned: i64 = c
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE query = 'VACUUM ga_lock' AND wait_event = 'BufferPin'", &[])
            .unwrap()
            .get(0);
        if pinned > 0 {
            break;
        }
        if vacuum.is_finished() {
            panic!("VACUUM did not wait for the index-only cursor: {:?}", vacuum.join());
        }
        assert!(std::time::Instant::now() < deadline, "VACUUM neither waited nor finished");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let rest = a.query("FETCH ALL FROM cur", &[]).unwrap().len();
    assert_eq!(first + rest, 4096, "the cursor's rows (the odd keys of 0..8191)");
    a.batch_execute("COMMIT").unwrap();
    vacuum.join().unwrap().unwrap();
    // The VACUUM that waited removed the deleted rows' entries.
    let n: i64 = c.query_one("SELECT entries FROM gpu_art_check('ga_lock_k') WHERE level = 0", &[]).unwrap().get(0);
    assert_eq!(n, 20_000, "leaf entries after VACUUM");
    c.batch_execute("DROP TABLE ga_lock").unwrap();
}

/// Where every row an `= ANY` index-only scan has read is on an
/// all-visible heap page, it keeps no leaf pinned: a VACUUM removing rows
/// elsewhere finishes while the cursor is open.
#[test]
fn index_only_any_scans_over_all_visible_rows_hold_no_pins() {
    const DB: &str = "gpuindex_it_art_no_pins";
    let mut a = connect(DB);
    // The probed keys' rows fill the first heap pages, the deleted ones
    // the pages after them.
    let deleted = vacuumed_then_deleted(&mut a, "ga_free", &["'key-' || g", "'zzz-' || g"], "k >= 'zzz'");
    let first = gpuindex_tests::open_cursor_after(&mut a, deleted, &format!("SELECT k FROM ga_free WHERE k = ANY({MANY_KEYS})"));
    let mut c = connect(DB);
    c.batch_execute("SET statement_timeout = '30s'").unwrap();
    c.batch_execute("VACUUM ga_free").expect("VACUUM finishes beside the open cursor");
    let rest = a.query("FETCH ALL FROM cur", &[]).unwrap().len();
    assert_eq!(first + rest, 8192, "the cursor's rows");
    a.batch_execute("COMMIT").unwrap();
    let n: i64 = c.query_one("SELECT entries FROM gpu_art_check('ga_free_k') WHERE level = 0", &[]).unwrap().get(0);
    assert_eq!(n, 40_000, "leaf entries after VACUUM");
    c.batch_execute("DROP TABLE ga_free").unwrap();
}

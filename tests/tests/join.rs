//! The batched index join (GpuIndexJoin) against a live server: every
//! query returns through it exactly what the planner's own joins return
//! (`check_join`: on the CPU, on the GPU where the server has one, and in
//! chunks of 7 outer rows), for every access method's join operators on
//! the tests' mix and the real-shaped sets, through inserts, deletes and
//! VACUUM; for the query shapes a user writes (projections, extra join and
//! inner quals, outer filters, left, semi and anti joins, NULL and
//! duplicate keys, empty outer sides, three-way joins, subqueries, cross-type
//! keys, float zeros and NaN); the LATERAL top-k pattern (`ORDER BY t.v
//! <-> o.q LIMIT k`) on every access method with an ordering operator;
//! under rescans, cursors, generic plans and parallel workers; with
//! row-level security, whose policies run before any join qual; and
//! index-only, where no inner column is read.

use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::runners;
use gpuindex_tests::{
    check_join, connect, explain, explain_lines, gpu_missing_but_required, plan_value, server_has_gpu, vacuum_until_all_visible,
};
use postgres::Client;

const DB: &str = "gpuindex_it_join";

#[test]
fn every_access_method_joins_as_the_planner_does() {
    let mut c = connect(DB);
    for (i, case) in runners::cases().into_iter().enumerate() {
        let table = format!("jam_{}", case.name());
        let mut rng = SplitMix64::new(40 + i as u64);
        runners::load(&mut c, &case, &table, &mut rng, 4_000);
        let rows = runners::join_differential(&mut c, &case, &table, &mut rng, 300);
        assert!(rows > 0, "{}: the join matched nothing", case.am);
        runners::lateral_differential(&mut c, &case, &table, &mut rng, 200);
        runners::change(&mut c, &case, &table, &mut rng, 10_000, 1_500);
        runners::join_differential(&mut c, &case, &table, &mut rng, 300);
        runners::lateral_differential(&mut c, &case, &table, &mut rng, 200);
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }
}

#[test]
fn real_shaped_sets_join_as_the_planner_does() {
    let mut c = connect(DB);
    for (i, case) in runners::real_shaped_cases().into_iter().enumerate() {
        let table = format!("jrs_{}_{}", case.am, case.data.name());
        let mut rng = SplitMix64::new(70 + i as u64);
        runners::load(&mut c, &case, &table, &mut rng, 6_000);
        let rows = runners::join_differential(&mut c, &case, &table, &mut rng, 400);
        assert!(rows > 0, "{} on {}: the join matched nothing", case.am, case.data.name());
        runners::lateral_differential(&mut c, &case, &table, &mut rng, 300);
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }
}

/// o: outer rows with duplicate, NULL and unmatched keys; i: inner rows
/// with every key twice, a NULL key, extremes; float keys with both zeros
/// and NaN; a third table for three-way joins.
/// The shape tests' tables (o, i, x, e), made afresh once by whichever
/// test of this process comes first (tests run at once would drop and
/// create them under each other; none changes them).
fn shapes_tables(c: &mut Client) {
    static MADE: std::sync::Once = std::sync::Once::new();
    MADE.call_once(|| make_shapes_tables(c));
}

fn make_shapes_tables(c: &mut Client) {
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS o, i, x, e;
         CREATE TABLE o AS SELECT g AS id, CASE WHEN g % 997 = 0 THEN NULL ELSE (g * 7) % 6000 END::int8 AS k,
             ((g * 7) % 6000)::int4 AS k4, g % 10 AS grp,
             (ARRAY[0.0, -0.0, 'NaN', 1.5, 2.25, '-Infinity'])[1 + g % 6]::float8 AS f
           FROM generate_series(1, 3000) g;
         CREATE TABLE i AS SELECT g AS id, (g % 5000)::int8 AS k, g * 2 AS v, md5(g::text) AS payload,
             (ARRAY[0.0, -0.0, 'NaN', 1.5, 3.0, '-Infinity', 'Infinity'])[1 + g % 7]::float8 AS f
           FROM generate_series(1, 10000) g;
         INSERT INTO i VALUES (0, NULL, 0, 'null', NULL), (-1, 9223372036854775807, 1, 'max', 0.0),
             (-2, -9223372036854775808, 2, 'min', 0.0);
         CREATE INDEX i_k ON i USING gpu_btree (k);
         CREATE INDEX i_f ON i USING gpu_btree (f);
         CREATE TABLE x AS SELECT g AS id, g % 40 AS tag FROM generate_series(1, 10000) g;
         CREATE TABLE e (id int, k int8);
         ANALYZE o; ANALYZE i; ANALYZE x; ANALYZE e;",
    )
    .unwrap();
}

/// A counting join over a fused call on an all-visible table whose keys
/// repeat by the thousand counts each heap page's run of matches at once
/// (the visibility map trusted); after rows are deleted or updated since
/// VACUUM (pages no longer all-visible, dead and HOT rows) each is checked
/// with the page. The count equals the planner's in one piece and in many
/// (`gpuindex.batch_work_mem`), keys asked twice counted twice. Table cz's
/// heavy keys span many leaves (counted as the walk finds them); cy's
/// keys, 40 rows each, lie a dozen to a leaf, so a batch of all of them
/// copies the leaves for the pool (counted once the copies are searched).
/// gpu_learned's run pages count them as well (its delta is gpu_btree's),
/// and so does a join of an outer table's keys counted by the join.
#[test]
fn counts_of_fused_calls_over_duplicate_keys() {
    let mut c = connect(DB);
    let keys: Vec<String> = (0..1000).chain(0..100).map(|k| k.to_string()).collect();
    let cy_keys = keys.join(",");
    c.batch_execute(&format!(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS cz, cy, ck;
         CREATE TABLE cz WITH (autovacuum_enabled = off) AS
           SELECT g AS id, CASE WHEN g % 3 = 0 THEN g % 7 ELSE g END::int8 AS k FROM generate_series(1, 60000) g;
         CREATE INDEX cz_k ON cz USING gpu_btree (k);
         CREATE INDEX cz_l ON cz USING gpu_learned (k);
         CREATE TABLE cy WITH (autovacuum_enabled = off) AS
           SELECT g AS id, (g / 40)::int8 AS k FROM generate_series(1, 40000) g;
         CREATE INDEX cy_k ON cy USING gpu_btree (k);
         CREATE INDEX cy_l ON cy USING gpu_learned (k);
         CREATE TABLE ck AS SELECT unnest(ARRAY[{cy_keys}]::int8[]) AS k;
         ANALYZE ck;"
    ))
    .unwrap();
    // (Else nothing is counted by the index: a test beside this one may
    // hold back what VACUUM marks.)
    let all_visible = vacuum_until_all_visible(&mut c, "cz") & vacuum_until_all_visible(&mut c, "cy");
    let cz_keys = "0, 1, 1, 2, 3, 5, 6, 8, 10, 20, 40000, -4";
    // (query, a fused call, the fewest rows it matches)
    let mut queries: Vec<(String, bool, i64)> = Vec::new();
    for (am, suffix) in [("gpu_btree", "k"), ("gpu_learned", "l")] {
        for (t, keys, least) in [("cz", cz_keys, 15_000), ("cy", cy_keys.as_str(), 35_000)] {
            let sql = format!("SELECT count(*) FROM {am}_probe('{t}_{suffix}', ARRAY[{keys}]::int8[]) p JOIN {t} ON {t}.ctid = p.ctid");
            queries.push((sql, true, least));
        }
    }
    for (t, least) in [("cz", 15_000), ("cy", 35_000)] {
        queries.push((format!("SELECT count(*) FROM ck JOIN {t} ON {t}.k = ck.k"), false, least));
    }
    for change in ["", "DELETE FROM {t} WHERE id % 11 = 0 AND id < 30000", "UPDATE {t} SET id = -id WHERE id % 13 = 0 AND id > 20000"] {
        c.batch_execute(&format!("{};{}", change.replace("{t}", "cz"), change.replace("{t}", "cy"))).unwrap();
        for mem in ["256kB", "64MB"] {
            for (sql, fused, _) in &queries {
                let forced = "SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off";
                c.batch_execute(&format!("SET gpuindex.batch_work_mem = '{mem}'; {forced}")).unwrap();
                let plan = explain(&mut c, sql);
                c.batch_execute("RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop").unwrap();
                assert!(
                    plan.contains("counted here") && plan.contains("Outer Call") == *fused,
                    "{change} {mem}: not counted by the join\n{plan}"
                );
                assert!(check_join(&mut c, sql) == 1);
                if change.is_empty() && all_visible {
                    c.batch_execute(forced).unwrap();
                    let analyzed = explain_lines(&mut c, "ANALYZE, TIMING OFF", sql);
                    c.batch_execute("RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop").unwrap();
                    assert!(analyzed.iter().any(|l| l.contains("Matches Counted in Index")), "not counted by the index\n{analyzed:?}");
                }
            }
        }
    }
    for (sql, _, least) in &queries {
        let n: i64 = c.query_one(sql.as_str(), &[]).unwrap().get(0);
        assert!(n > *least, "{n}: the keys asked match thousands of rows");
    }
    c.batch_execute("RESET gpuindex.batch_work_mem; DROP TABLE cz, cy, ck").unwrap();
}

/// A count of a join over keys held by thousands of rows on an
/// all-visible table is planned as the counting join even where the same
/// join's rows lose to PostgreSQL's join: the join path add_path rejects
/// is kept for the count (`count::keep`), priced as the index counting
/// its matches, not as heap tuples (except in a SERIALIZABLE transaction);
/// so is a fused call's count, where its rows would be shared in parallel.
#[test]
fn counting_joins_are_planned_where_their_rows_would_lose() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS pz, pk;
         CREATE TABLE pz WITH (autovacuum_enabled = off) AS SELECT g AS id, (g % 40)::int8 AS k FROM generate_series(1, 400000) g;
         CREATE INDEX pz_k ON pz USING gpu_btree (k);
         CREATE TABLE pk AS SELECT (g % 40)::int8 AS k FROM generate_series(1, 200) g;
         ANALYZE pk;",
    )
    .unwrap();
    if !vacuum_until_all_visible(&mut c, "pz") {
        return;
    }
    let count = "SELECT count(*) FROM pk JOIN pz ON pz.k = pk.k";
    let plan = explain(&mut c, count);
    assert!(plan.contains("counted here"), "{plan}");
    let rows = explain(&mut c, "SELECT sum(pz.id) FROM pk JOIN pz ON pz.k = pk.k");
    assert!(!rows.contains("GpuIndexJoin"), "the join's rows would win too: {rows}");
    // A fused call's count too, where a parallel path shares its matches
    // (a key array sent to the workers as a value): its matches are index
    // entries, priced as such (`plan::matches_are_entries`).
    let keys: Vec<String> = (0..40).chain(100..1100).map(|k| k.to_string()).collect();
    let fused = format!("SELECT count(*) FROM gpu_btree_probe('pz_k', '{{{}}}'::int8[]) p JOIN pz ON pz.ctid = p.ctid", keys.join(","));
    let plan = explain(&mut c, &fused);
    assert!(plan.contains("counted here") && plan.contains("Outer Call"), "{plan}");
    c.batch_execute("SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off").unwrap();
    let shared = explain(&mut c, &fused.replace("count(*)", "sum(pz.id)"));
    c.batch_execute("RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop").unwrap();
    assert!(shared.contains("Parallel Custom Scan (GpuIndexJoin)"), "no parallel path to lose to: {shared}");
    assert_eq!(c.query_one(fused.as_str(), &[]).unwrap().get::<_, i64>(0), 400_000);
    // A SERIALIZABLE transaction's node trusts no map and fetches every
    // match: planned there, the count is priced as its rows.
    c.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE").unwrap();
    let serializable = explain(&mut c, count);
    c.batch_execute("COMMIT").unwrap();
    assert!(!serializable.contains("counted here"), "priced as counted where it fetches: {serializable}");
    let got: i64 = c.query_one(count, &[]).unwrap().get(0);
    c.batch_execute("SET gpuindex.enable_join = off").unwrap();
    let want: i64 = c.query_one(count, &[]).unwrap().get(0);
    c.batch_execute("RESET gpuindex.enable_join; DROP TABLE pz, pk").unwrap();
    assert_eq!((got, want), (2_000_000, 2_000_000));
}

/// A counting fused call counts a key's matches on all-visible pages
/// while its search still reads the visibility map (`next_fused_count`):
/// while another session gives rows new keys, new versions on the same
/// pages (clearing their bits), and vacuums, every count in a
/// repeatable-read transaction equals the function's own rows in the
/// same snapshot. Checked locally: confirming no page after the search
/// makes it fail.
#[test]
fn counts_of_fused_calls_hold_while_pages_change() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS cw;
         CREATE TABLE cw WITH (autovacuum_enabled = off, fillfactor = 50) AS
           SELECT g AS id, (g % 5)::int8 AS k FROM generate_series(1, 300000) g;
         CREATE INDEX cw_k ON cw USING gpu_btree (k);",
    )
    .unwrap();
    c.batch_execute("VACUUM ANALYZE cw").unwrap();
    // (The plan the test is about, whatever the table's statistics become.)
    c.batch_execute("SET enable_hashjoin = off; SET enable_mergejoin = off; SET max_parallel_workers_per_gather = 0").unwrap();
    let sql = "SELECT count(*) FROM gpu_btree_probe('cw_k', ARRAY[4, 0, 3, 3]::int8[]) p JOIN cw ON cw.ctid = p.ctid";
    let counting = |c: &mut Client| {
        let plan = explain(c, sql);
        assert!(plan.contains("counted here") && plan.contains("Outer Call"), "not a counting fused call\n{plan}");
    };
    counting(&mut c);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut w = connect(DB);
            let mut round = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                // A new version of each row, with the next key, on its
                // page (fillfactor 50): a new index entry on a page that
                // may have been all-visible.
                w.batch_execute(&format!("UPDATE cw SET k = (k + 1) % 5 WHERE id % 1009 = {}", round % 1009)).unwrap();
                if round % 5 == 0 {
                    w.batch_execute("VACUUM cw").unwrap();
                }
            }
        })
    };
    let rows = "SELECT count(*) FROM gpu_btree_probe('cw_k', ARRAY[4, 0, 3, 3]::int8[])";
    let started = std::time::Instant::now();
    let mut checked = 0;
    while started.elapsed() < std::time::Duration::from_secs(8) {
        let mut t = c.build_transaction().isolation_level(postgres::IsolationLevel::RepeatableRead).start().unwrap();
        for _ in 0..5 {
            let counted: i64 = t.query_one(sql, &[]).unwrap().get(0);
            let expected: i64 = t.query_one(rows, &[]).unwrap().get(0);
            assert_eq!(counted, expected, "a count in one snapshot");
            checked += 1;
        }
        t.commit().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    counting(&mut c);
    assert!(checked > 20, "{checked} counts checked");
    c.batch_execute("RESET enable_hashjoin; RESET enable_mergejoin; RESET max_parallel_workers_per_gather; DROP TABLE cw").unwrap();
}

#[test]
fn query_shapes_equal_the_planners() {
    let mut c = connect(DB);
    shapes_tables(&mut c);
    let shapes = [
        // Plain, both ways round, everything projected.
        "SELECT * FROM o JOIN i ON i.k = o.k",
        "SELECT o.id, i.id FROM i JOIN o ON o.k = i.k",
        // Projections, an extra join clause, inner and outer filters.
        "SELECT i.v + o.grp, upper(i.payload), o.k FROM o JOIN i ON i.k = o.k AND i.v > o.id WHERE i.v % 3 = 0 AND o.grp < 7",
        // Cross-type keys (int4 outer, int8 index) and float zeros, NaN, infinities.
        "SELECT o.id, i.id FROM o JOIN i ON i.k = o.k4",
        "SELECT o.id, i.id FROM o JOIN i ON i.f = o.f",
        // Outer joins, with join clauses and WHERE clauses on the nullable side.
        "SELECT o.id, i.id FROM o LEFT JOIN i ON i.k = o.k",
        "SELECT o.id, i.id, i.v FROM o LEFT JOIN i ON i.k = o.k AND i.v % 4 = 0 WHERE i.id IS NULL OR i.v < 5000",
        "SELECT o.id FROM o WHERE EXISTS (SELECT 1 FROM i WHERE i.k = o.k AND i.v > o.id * 3)",
        "SELECT o.id FROM o WHERE NOT EXISTS (SELECT 1 FROM i WHERE i.k = o.k AND i.v % 5 = 0)",
        // Aggregates over the join, an empty outer side.
        "SELECT count(*), sum(i.v), min(o.id) FROM o JOIN i ON i.k = o.k",
        "SELECT e.id, i.id FROM e JOIN i ON i.k = e.k",
        "SELECT e.id, i.id FROM e LEFT JOIN i ON i.k = e.k",
        // Three-way joins; subqueries and joins as the outer side.
        "SELECT o.id, i.id, x.tag FROM o JOIN x ON x.id = o.id JOIN i ON i.k = o.k + x.tag",
        "SELECT s.k, s.n, i.id FROM (SELECT k, count(*) AS n FROM o GROUP BY k) s JOIN i ON i.k = s.k",
        "SELECT a.id, b.id FROM i a JOIN i b ON b.k = a.k WHERE a.id < 2000",
        "SELECT g, i.id FROM generate_series(-5, 7000, 3) g JOIN i ON i.k = g::int8",
    ];
    for sql in shapes {
        check_join(&mut c, sql);
    }
}

/// `count(*)` over a join is counted by the join itself (one row out, no
/// Aggregate above it), for every join type, with join filters and WHERE
/// clauses, over an empty outer side, a fused batch call and a LATERAL
/// top-k subquery, rescanned in a SubPlan and in a generic plan: each
/// equal to the planner's count. Other aggregates keep the Aggregate.
#[test]
fn count_star_is_counted_by_the_join() {
    let mut c = connect(DB);
    shapes_tables(&mut c);
    c.batch_execute(
        "DROP TABLE IF EXISTS cp, cq;
         CREATE TABLE cp AS SELECT g AS id, point(g % 97, g % 89) AS p FROM generate_series(1, 5000) g;
         CREATE INDEX cp_p ON cp USING gpu_spatial (p);
         CREATE TABLE cq AS SELECT g AS id, point(g * 0.37, g * 0.11) AS q FROM generate_series(1, 200) g;
         ANALYZE cp; ANALYZE cq;",
    )
    .unwrap();
    let counted = [
        "SELECT count(*) FROM o JOIN i ON i.k = o.k",
        "SELECT count(*), count(*) * 2 + 1 FROM o JOIN i ON i.k = o.k AND i.v > o.id WHERE i.v % 3 = 0 AND o.grp < 7",
        "SELECT count(*) FROM o LEFT JOIN i ON i.k = o.k AND i.v % 4 = 0 WHERE i.id IS NULL OR i.v < 5000",
        "SELECT count(*) FROM o WHERE EXISTS (SELECT 1 FROM i WHERE i.k = o.k AND i.v > o.id * 3)",
        "SELECT count(*) FROM o WHERE NOT EXISTS (SELECT 1 FROM i WHERE i.k = o.k AND i.v % 5 = 0)",
        "SELECT count(*) FROM e JOIN i ON i.k = e.k",
        "SELECT count(*) FROM e LEFT JOIN i ON i.k = e.k",
        "SELECT count(*) FROM o JOIN x ON x.id = o.id JOIN i ON i.k = o.k + x.tag",
        "SELECT count(*) FROM gpu_btree_probe('i_k', ARRAY(SELECT k FROM o WHERE id % 3 = 0)) p JOIN i ON i.ctid = p.ctid",
        "SELECT count(*) FROM cq CROSS JOIN LATERAL (SELECT cp.id FROM cp ORDER BY cp.p <-> cq.q LIMIT 7) s",
        "SELECT count(*) FROM cq LEFT JOIN LATERAL (SELECT cp.id FROM cp WHERE cp.id % 2 = 0 ORDER BY cp.p <-> cq.q LIMIT 3) s ON true",
    ];
    // One backend: a parallel plan (each participant's rows aggregated
    // under a Gather) may cost less, as it did on the GPU host for the
    // left join; parallel counting has its own tests.
    let forced =
        "SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off; SET max_parallel_workers_per_gather = 0";
    let reset = "RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop; RESET max_parallel_workers_per_gather";
    for sql in counted {
        c.batch_execute(forced).unwrap();
        let plan = explain(&mut c, sql);
        c.batch_execute(reset).unwrap();
        assert!(plan.contains("count(*) of the joined rows, counted here"), "{sql}: not counted by the join\n{plan}");
        assert!(!plan.contains("Aggregate  ("), "{sql}: an Aggregate over the counting join\n{plan}");
        check_join(&mut c, sql);
    }
    // Other aggregates, grouping and HAVING aggregate the join's rows.
    for sql in [
        "SELECT count(i.v) FROM o JOIN i ON i.k = o.k",
        "SELECT count(DISTINCT o.id) FROM o JOIN i ON i.k = o.k",
        "SELECT count(*) FILTER (WHERE i.v > 10) FROM o JOIN i ON i.k = o.k",
        "SELECT o.grp, count(*) FROM o JOIN i ON i.k = o.k GROUP BY o.grp",
        "SELECT count(*) FROM o JOIN i ON i.k = o.k HAVING count(*) > 1",
    ] {
        c.batch_execute(forced).unwrap();
        let plan = explain(&mut c, sql);
        c.batch_execute(reset).unwrap();
        assert!(!plan.contains("counted here"), "{sql}: counted by the join\n{plan}");
        check_join(&mut c, sql);
    }
    // Rescanned: a SubPlan with a new parameter each time, and a generic
    // plan run with other parameters.
    let sql = "SELECT g, (SELECT count(*) FROM o JOIN i ON i.k = o.k AND i.v > g * 700 WHERE o.grp = g) FROM generate_series(0, 11) g";
    c.batch_execute(forced).unwrap();
    let plan = explain(&mut c, sql);
    c.batch_execute(reset).unwrap();
    assert!(plan.contains("counted here"), "{plan}");
    check_join(&mut c, sql);
    c.batch_execute(&format!(
        "{forced}; SET plan_cache_mode = force_generic_plan;
         PREPARE cj(int) AS SELECT count(*) FROM o JOIN i ON i.k = o.k WHERE o.grp = $1"
    ))
    .unwrap();
    let plan: Vec<String> = c.query("EXPLAIN EXECUTE cj(1)", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(plan.iter().any(|l| l.contains("counted here")), "generic plan: {plan:?}");
    for g in [1, 4, 9, 42] {
        let got: i64 = c.query_one(&format!("EXECUTE cj({g})"), &[]).unwrap().get(0);
        c.batch_execute("SET gpuindex.enable_join = off").unwrap();
        let want: i64 = c.query_one(&format!("SELECT count(*) FROM o JOIN i ON i.k = o.k WHERE o.grp = {g}"), &[]).unwrap().get(0);
        c.batch_execute("RESET gpuindex.enable_join").unwrap();
        assert_eq!(got, want, "generic plan with {g}");
    }
    c.batch_execute(
        "DEALLOCATE cj; RESET plan_cache_mode; RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop; RESET max_parallel_workers_per_gather; DROP TABLE cp, cq",
    )
    .unwrap();
}

#[test]
fn rescans_cursors_and_generic_plans() {
    let mut c = connect(DB);
    shapes_tables(&mut c);
    // A SubPlan rescanned with a new parameter, in the outer side and in a join clause.
    check_join(&mut c, "SELECT g, (SELECT count(*) FROM o JOIN i ON i.k = o.k WHERE o.grp = g) FROM generate_series(0, 11) g");
    check_join(
        &mut c,
        "SELECT g, (SELECT sum(i.v) FROM o JOIN i ON i.k = o.k AND i.v > g * 1000 WHERE o.grp = 3) FROM generate_series(0, 9) g",
    );
    // A scroll cursor: all rows forward, then all backward.
    let sql = "SELECT o.id, i.id AS iid FROM o JOIN i ON i.k = o.k";
    c.batch_execute("SET gpuindex.enable_join = off").unwrap();
    let mut want: Vec<(i32, i32)> = c.query(sql, &[]).unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
    want.sort_unstable();
    c.batch_execute("SET gpuindex.enable_join = on; SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off")
        .unwrap();
    let mut tx = c.transaction().unwrap();
    tx.batch_execute(&format!("SET LOCAL gpuindex.join_chunk = 100; DECLARE cur SCROLL CURSOR FOR {sql}")).unwrap();
    let forward: Vec<(i32, i32)> = tx.query("FETCH ALL FROM cur", &[]).unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
    let mut backward: Vec<(i32, i32)> =
        tx.query("FETCH BACKWARD ALL FROM cur", &[]).unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
    backward.reverse();
    assert_eq!(forward, backward, "a scroll cursor read backward");
    let mut got = forward;
    got.sort_unstable();
    assert_eq!(got, want, "a cursor over the join");
    tx.commit().unwrap();
    // A generic plan, cached and run with other parameters.
    c.batch_execute(
        "SET plan_cache_mode = force_generic_plan;
         PREPARE jq(int, int8) AS SELECT o.id, i.id FROM o JOIN i ON i.k = o.k WHERE o.grp = $1 AND i.v > $2",
    )
    .unwrap();
    let plan: Vec<String> = c.query("EXPLAIN EXECUTE jq(1, 0)", &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(plan.iter().any(|l| l.contains("GpuIndexJoin")), "generic plan: {plan:?}");
    for (g, v) in [(1, 0i64), (4, 5000), (9, 100_000)] {
        let mut got: Vec<(i32, i32)> =
            c.query(&format!("EXECUTE jq({g}, {v})"), &[]).unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
        got.sort_unstable();
        let mut want: Vec<(i32, i32)> = c
            .query(&format!("SELECT o.id, i.id FROM o JOIN i ON i.k = o.k WHERE o.grp = {g} AND i.v > {v}"), &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        want.sort_unstable();
        assert_eq!(got, want, "generic plan with ({g}, {v})");
    }
    c.batch_execute("DEALLOCATE jq; RESET plan_cache_mode").unwrap();
}

#[test]
fn row_level_security_applies_before_join_quals() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS ro, ri, seen;
         DROP FUNCTION IF EXISTS peek(int);
         DO $$ BEGIN
           IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'gpuindex_join_reader') THEN
             DROP OWNED BY gpuindex_join_reader; DROP ROLE gpuindex_join_reader;
           END IF;
         END $$;
         CREATE ROLE gpuindex_join_reader;
         CREATE TABLE ro AS SELECT g AS id, (g % 500)::int8 AS k FROM generate_series(1, 2000) g;
         CREATE TABLE ri AS SELECT g AS id, (g % 700)::int8 AS k, g % 3 AS secret FROM generate_series(1, 5000) g;
         CREATE INDEX ri_k ON ri USING gpu_btree (k);
         ALTER TABLE ri ENABLE ROW LEVEL SECURITY;
         CREATE POLICY visible ON ri FOR SELECT USING (secret = 0);
         CREATE TABLE seen (secret int);
         -- Not leakproof, and cheap: the planner would run it first if it could.
         CREATE FUNCTION peek(int) RETURNS bool LANGUAGE sql VOLATILE COST 0.0001
           AS 'INSERT INTO seen VALUES ($1) RETURNING true';
         GRANT SELECT ON ro, ri TO gpuindex_join_reader; GRANT INSERT, SELECT ON seen TO gpuindex_join_reader;
         ANALYZE ro; ANALYZE ri;",
    )
    .unwrap();
    c.batch_execute("SET ROLE gpuindex_join_reader").unwrap();
    let n = check_join(&mut c, "SELECT ro.id, ri.id, ri.secret FROM ro JOIN ri ON ri.k = ro.k");
    assert!(n > 0);
    c.batch_execute("SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off").unwrap();
    let hidden: i64 = c
        .query_one("SELECT count(*) FROM (SELECT ro.id, ri.secret FROM ro JOIN ri ON ri.k = ro.k) x WHERE secret <> 0", &[])
        .unwrap()
        .get(0);
    assert_eq!(hidden, 0, "rows the policy hides came out of the join");
    let sql = "SELECT ro.id, ri.id FROM ro JOIN ri ON ri.k = ro.k AND peek(ri.secret)";
    assert!(explain(&mut c, sql).contains("GpuIndexJoin"));
    c.batch_execute(&format!("SELECT count(*) FROM ({sql}) x")).unwrap();
    let r = c.query_one("SELECT count(*), count(*) FILTER (WHERE secret <> 0) FROM seen", &[]).unwrap();
    let (calls, leaked): (i64, i64) = (r.get(0), r.get(1));
    assert!(calls > 0, "the join filter never ran");
    assert_eq!(leaked, 0, "a join filter saw rows the policy hides");
    c.batch_execute("RESET ROLE; RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop").unwrap();
}

/// A join that reads no inner column (counts, EXISTS, NOT EXISTS, outer
/// columns only) takes rows on all-visible heap pages from the index, as
/// an index-only scan does: equal to the planner's joins while deleted,
/// updated (HOT and not) and inserted rows wait for VACUUM and after it,
/// and after VACUUM it reads no heap page.
#[test]
fn index_only_joins_read_the_heap_only_where_pages_are_not_all_visible() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS io_o, io_i;
         CREATE TABLE io_o AS SELECT g AS id, (g * 13) % 7000 AS k FROM generate_series(1, 4000) g;
         CREATE TABLE io_i (id int, k int8, v int) WITH (autovacuum_enabled = off, fillfactor = 80);
         INSERT INTO io_i SELECT g, g % 5000, g FROM generate_series(1, 20000) g;
         CREATE INDEX io_i_k ON io_i USING gpu_btree (k);
         ANALYZE io_o;",
    )
    .unwrap();
    let all_visible = vacuum_until_all_visible(&mut c, "io_i");
    let shapes = [
        "SELECT count(*) FROM io_o o JOIN io_i i ON i.k = o.k",
        "SELECT o.id, o.k FROM io_o o JOIN io_i i ON i.k = o.k",
        "SELECT o.id FROM io_o o WHERE EXISTS (SELECT 1 FROM io_i i WHERE i.k = o.k)",
        "SELECT o.id FROM io_o o WHERE NOT EXISTS (SELECT 1 FROM io_i i WHERE i.k = o.k)",
        "SELECT o.id, count(*) FROM io_o o LEFT JOIN io_i i ON i.k = o.k GROUP BY o.id",
    ];
    let plan_of = |c: &mut Client, sql: &str| -> Vec<String> {
        c.batch_execute("SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off").unwrap();
        let plan = explain_lines(c, "ANALYZE, TIMING OFF, COSTS OFF", sql);
        c.batch_execute("RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop").unwrap();
        plan
    };
    for sql in shapes {
        let plan = plan_of(&mut c, sql);
        assert!(plan.iter().any(|l| l.trim() == "Inner Rows: not read (index-only)"), "{sql}: not index-only\n{plan:#?}");
        assert!(!all_visible || plan_value(&plan, "Heap Fetches") == 0, "{sql}: all-visible pages were read\n{plan:#?}");
        check_join(&mut c, sql);
    }
    // A join that reads an inner column fetches every match.
    let plan = plan_of(&mut c, "SELECT sum(i.v) FROM io_o o JOIN io_i i ON i.k = o.k");
    assert!(!plan.iter().any(|l| l.contains("index-only")), "{plan:#?}");
    assert!(plan_value(&plan, "Heap Fetches") > 0, "{plan:#?}");
    // Dead, updated and new rows on pages no longer all-visible.
    c.batch_execute(
        "DELETE FROM io_i WHERE id % 7 = 0;
         UPDATE io_i SET v = -v WHERE id % 11 = 0;
         UPDATE io_i SET k = k + 1 WHERE id % 13 = 0;
         INSERT INTO io_i SELECT g, g % 6000, g FROM generate_series(20001, 21000) g;",
    )
    .unwrap();
    for sql in shapes {
        check_join(&mut c, sql);
    }
    let all_visible = vacuum_until_all_visible(&mut c, "io_i");
    for sql in shapes {
        check_join(&mut c, sql);
        assert!(!all_visible || plan_value(&plan_of(&mut c, sql), "Heap Fetches") == 0, "{sql}: all-visible pages were read after VACUUM");
    }
    c.batch_execute("DROP TABLE io_o, io_i").unwrap();
}

/// An index-only join does not count matches its chunk's search found
/// before a VACUUM removed them: rows deleted before the query began
/// (dead to it), whose pages the VACUUM then made all-visible while the
/// query ran. An index-only scan holds the pin of the leaf its entries
/// came from, so VACUUM cannot remove them meanwhile; the chunk's search
/// holds none, so an all-visible page is trusted only while no bulk
/// delete of the index has finished since the chunk's search began.
#[test]
fn index_only_joins_do_not_count_rows_a_vacuum_removed_while_they_ran() {
    let (mut c, mut v) = (connect(DB), connect(DB));
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS iv_o, iv_i;
         CREATE TABLE iv_o AS SELECT g AS k FROM generate_series(1, 5000) g;
         CREATE TABLE iv_i (k int8, v int) WITH (autovacuum_enabled = off);
         INSERT INTO iv_i SELECT g, g FROM generate_series(1, 20000) g;
         CREATE INDEX iv_i_k ON iv_i USING gpu_btree (k);
         ANALYZE iv_o;",
    )
    .unwrap();
    vacuum_until_all_visible(&mut c, "iv_i");
    c.batch_execute("DELETE FROM iv_i WHERE k % 2 = 0").unwrap();
    let sql = "SELECT o.k FROM iv_o o JOIN iv_i i ON i.k = o.k";
    let mut tx = c.transaction().unwrap();
    tx.batch_execute("SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; SET LOCAL enable_nestloop = off").unwrap();
    let plan = gpuindex_tests::explain(&mut tx, sql);
    assert!(plan.contains("index-only"), "{plan}");
    tx.batch_execute(&format!("DECLARE cur CURSOR FOR {sql}")).unwrap();
    // The first row: the chunk (every outer row) searched, the deleted
    // rows' entries among its matches.
    let first = tx.query("FETCH 1 FROM cur", &[]).unwrap().len();
    v.batch_execute("VACUUM iv_i").unwrap();
    let visible = v.query_one("SELECT count(*) FROM pg_visibility_map('iv_i') WHERE all_visible", &[]).map(|r| r.get::<_, i64>(0));
    let rest = tx.query("FETCH ALL FROM cur", &[]).unwrap().len();
    tx.rollback().unwrap();
    assert_eq!(first + rest, 2500, "rows the VACUUM removed were counted (all-visible pages after it: {visible:?})");
    c.batch_execute("DROP TABLE iv_o, iv_i").unwrap();
}

#[test]
fn explain_analyze_shows_chunks_probes_and_the_device() {
    let mut c = connect(DB);
    shapes_tables(&mut c);
    c.batch_execute("SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off; SET gpuindex.join_chunk = 1000")
        .unwrap();
    if gpu_missing_but_required(&mut c) {
        panic!("GPUINDEX_REQUIRE_GPU=1 but the server finds no GPU");
    }
    let gpu = server_has_gpu(&mut c);
    if gpu {
        c.batch_execute("SET gpuindex.gpu_min_batch = 1").unwrap();
    }
    let sql = "SELECT o.id, i.id FROM o JOIN i ON i.k = o.k";
    let plan = explain_lines(&mut c, "ANALYZE, TIMING OFF, COSTS OFF", sql);
    let value = |label: &str| plan_value(&plan, label);
    assert!(plan[0].contains("Custom Scan (GpuIndexJoin)"), "{plan:?}");
    for label in ["Join Type: Inner", "Index: i_k (gpu_btree)", "Probe: (o.k = i.k)", "Device: auto"] {
        assert!(plan.iter().any(|l| l.trim() == label), "no '{label}': {plan:?}");
    }
    assert_eq!(value("Chunks"), 3, "3,000 outer rows in chunks of 1,000");
    assert_eq!(value("Probes"), 2997, "every non-NULL key");
    let rows: i64 = c.query_one("SELECT count(*) FROM o JOIN i ON i.k = o.k", &[]).unwrap().get(0);
    assert_eq!(value("Index Matches"), rows);
    assert_eq!(value("GPU Batches"), if gpu { 3 } else { 0 }, "batches the GPU ran");
    // With timing: the index's, the heap's and the rest of the node's.
    assert_node_times(&explain_lines(&mut c, "ANALYZE, COSTS OFF", sql));
}

/// EXPLAIN ANALYZE (with timing) shows the node's time in the index, the
/// heap and the rest.
fn assert_node_times(plan: &[String]) {
    for label in ["Index Time: ", "Heap Time: ", "Other Time: "] {
        assert!(plan.iter().any(|l| l.trim_start().starts_with(label) && l.trim_end().ends_with(" ms")), "no '{label}': {plan:?}");
    }
}

#[test]
fn parallel_workers_join_their_share() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS po, pi;
         CREATE TABLE po AS SELECT g AS id, (g * 13 % 90000)::int8 AS k FROM generate_series(1, 200000) g;
         CREATE TABLE pi AS SELECT g AS id, (g % 60000)::int8 AS k, g % 7 AS v FROM generate_series(1, 120000) g;
         CREATE INDEX pi_k ON pi USING gpu_btree (k);
         ANALYZE po; ANALYZE pi;",
    )
    .unwrap();
    let sql = "SELECT po.id, pi.id FROM po JOIN pi ON pi.k = po.k WHERE pi.v <> 3";
    // Partial outer paths: each participant joins its share.
    c.batch_execute(
        "SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;
         SET max_parallel_workers_per_gather = 2",
    )
    .unwrap();
    c.batch_execute("SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off").unwrap();
    let plan = explain(&mut c, sql);
    assert!(plan.contains("Gather") && plan.contains("GpuIndexJoin") && plan.contains("Parallel Seq Scan on po"), "{plan}");
    // EXPLAIN ANALYZE counts every participant's share.
    let analyzed = explain_lines(&mut c, "ANALYZE, TIMING OFF, COSTS OFF", sql);
    let value = |label: &str| plan_value(&analyzed, label);
    assert!(analyzed.iter().any(|l| l.contains("Parallel Custom Scan (GpuIndexJoin)")), "{analyzed:?}");
    assert!(value("Workers Launched") >= 1, "{analyzed:?}");
    assert!(!analyzed.iter().any(|l| l.contains("leader's share only")), "{analyzed:?}");
    assert_eq!(value("Probes"), 200_000, "every outer row, whichever process read it: {analyzed:?}");
    let pairs: i64 = c.query_one("SELECT count(*) FROM po JOIN pi ON pi.k = po.k", &[]).unwrap().get(0);
    assert_eq!(value("Index Matches"), pairs, "{analyzed:?}");
    // With timing: the index's, the heap's and the rest, each summed over
    // the participants.
    assert_node_times(&explain_lines(&mut c, "ANALYZE, COSTS OFF", sql));
    check_join(&mut c, sql);
    // Rescanned under a nested loop: the Gather runs its workers again
    // (ReInitializeDSMCustomScan), every pass joins every outer row, and
    // EXPLAIN ANALYZE counts the passes' probes.
    c.batch_execute("SET enable_material = off; SET enable_hashjoin = off; SET enable_mergejoin = off").unwrap();
    let per_pass = "SELECT count(*), sum(pi.id) FROM po JOIN pi ON pi.k = po.k WHERE pi.v <> 3";
    let rescanned = format!("SELECT o.n, s.* FROM generate_series(1, 3) o(n) LEFT JOIN ({per_pass}) s ON o.n > 0");
    let plan = explain(&mut c, &rescanned);
    assert!(
        plan.contains("Nested Loop Left Join") && plan.contains("Gather") && plan.contains("Parallel Custom Scan (GpuIndexJoin)"),
        "{plan}"
    );
    let analyzed = explain_lines(&mut c, "ANALYZE, TIMING OFF, COSTS OFF", &rescanned);
    assert_eq!(plan_value(&analyzed, "Probes"), 3 * 200_000, "{analyzed:?}");
    let passes: Vec<(i64, i64)> = c.query(&rescanned, &[]).unwrap().iter().map(|r| (r.get(1), r.get(2))).collect();
    c.batch_execute("SET gpuindex.enable_join = off").unwrap();
    let once = c.query_one(per_pass, &[]).unwrap();
    assert_eq!(passes, vec![(once.get(0), once.get(1)); 3]);
    c.batch_execute("RESET gpuindex.enable_join; RESET enable_material; RESET enable_hashjoin; RESET enable_mergejoin").unwrap();
    // The whole join in a worker: the plan is serialized and read back there.
    c.batch_execute("SET max_parallel_workers_per_gather = 0; SET force_parallel_mode = on").unwrap();
    check_join(&mut c, sql);
    c.batch_execute(
        "RESET force_parallel_mode; RESET max_parallel_workers_per_gather; RESET parallel_setup_cost;
         RESET parallel_tuple_cost; RESET min_parallel_table_scan_size",
    )
    .unwrap();
}

/// A fused call under a Gather (`handout`): one participant searches the
/// call and every participant fetches ranges of its matches. Zipf-like
/// keys (one held by a third of the rows), keys asked twice and missing,
/// updated (HOT) and deleted rows, gpu_btree's call and gpu_learned's:
/// the rows equal the planner's own join
/// (`check_join`, chunks of 7 among them), EXPLAIN ANALYZE counts the
/// call's probes once and every match; with `gpuindex.batch_work_mem`
/// small the call is searched in pieces and those past it are joined by
/// the searcher alone; under a nested loop the Gather is rescanned, and
/// rescanned after a LIMIT stopped it, without a worker left waiting.
#[test]
fn parallel_participants_share_a_fused_calls_matches() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS fz;
         CREATE TABLE fz WITH (autovacuum_enabled = off) AS
           SELECT g AS id, (CASE WHEN g % 3 = 0 THEN 1 WHEN g % 6 = 1 THEN 2 ELSE g % 5000 END)::int8 AS k, g % 7 AS v
           FROM generate_series(1, 60000) g;
         CREATE INDEX fz_k ON fz USING gpu_btree (k);
         CREATE INDEX fz_l ON fz USING gpu_learned (k);
         UPDATE fz SET v = v + 10 WHERE id % 11 = 0;
         DELETE FROM fz WHERE id % 13 = 0;
         ANALYZE fz;
         SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0;
         SET max_parallel_workers_per_gather = 2; SET statement_timeout = '120s';
         SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off;",
    )
    .unwrap();
    let call = "gpu_btree_probe('fz_k', ARRAY[1, 2, 3, 17, 4999, 99999, 1, 2]::int8[])";
    let sql = format!("SELECT p.ord, t.id, t.v, t.ctid FROM {call} p JOIN fz t ON t.ctid = p.ctid");
    let plan = explain(&mut c, &sql);
    assert!(plan.contains("Gather") && plan.contains("Parallel Custom Scan (GpuIndexJoin)") && plan.contains("Outer Call"), "{plan}");
    let analyzed = explain_lines(&mut c, "ANALYZE, TIMING OFF, COSTS OFF", &sql);
    assert!(plan_value(&analyzed, "Workers Launched") >= 1, "{analyzed:?}");
    assert_eq!(plan_value(&analyzed, "Probes"), 8, "the call searched once: {analyzed:?}");
    let matches: i64 = c.query_one(&format!("SELECT count(*) FROM {call}"), &[]).unwrap().get(0);
    assert!(matches > 40_000, "{matches}");
    // (The index's entries of deleted rows among them.)
    assert!(plan_value(&analyzed, "Index Matches") >= matches, "{analyzed:?}");
    // (check_join plans the planner's own join with every join method.)
    c.batch_execute("RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop").unwrap();
    let rows = check_join(&mut c, &sql);
    assert_eq!(rows as i64, matches);
    // gpu_learned's call too.
    check_join(&mut c, &sql.replace("gpu_btree_probe('fz_k'", "gpu_learned_probe('fz_l'"));
    // A large constant (`sent`): sent to the workers as an initplan's value.
    // (5,000 keys: searched in growing pieces, `search::Pieces::growing`.)
    let keys: Vec<String> = (0..5000).map(|i| ((i * 7919) % 6000).to_string()).collect();
    let big = sql.replace("ARRAY[1, 2, 3, 17, 4999, 99999, 1, 2]", &format!("'{{{}}}'", keys.join(",")));
    c.batch_execute("SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off").unwrap();
    let analyzed = explain_lines(&mut c, "ANALYZE, VERBOSE, TIMING OFF, COSTS OFF", &big);
    let line = |what: &str| analyzed.iter().find(|l| l.contains(what)).cloned().unwrap_or_default();
    assert!(line("Params Evaluated").contains('$') && line("InitPlan").contains("returns"), "{analyzed:?}");
    assert!(line("Function Call").contains("gpu_btree_probe('fz_k'::regclass, $"), "{analyzed:?}");
    assert_eq!(plan_value(&analyzed, "Probes"), 5000, "{analyzed:?}");
    assert!(!analyzed.iter().any(|l| l.contains("Extra Batch Pieces")), "{analyzed:?}");
    assert!(plan_value(&analyzed, "Workers Launched") >= 1, "{analyzed:?}");
    c.batch_execute("RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop").unwrap();
    check_join(&mut c, &big);
    // In pieces (a 1MB budget holds ~22K matches a piece, and the pieces
    // handed out ~65K): the two keys held by 30K rows asked four times
    // over are more than the handout takes.
    let many = "SELECT p.ord, t.id FROM gpu_btree_probe('fz_k', ARRAY[1, 2, 1, 2, 1, 2, 1, 2, 3]::int8[]) p JOIN fz t ON t.ctid = p.ctid";
    c.batch_execute(
        "SET gpuindex.batch_work_mem = '1MB'; SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off",
    )
    .unwrap();
    let analyzed = explain_lines(&mut c, "ANALYZE, TIMING OFF, COSTS OFF", many);
    assert!(analyzed.iter().any(|l| l.contains("Parallel Custom Scan (GpuIndexJoin)")), "{analyzed:?}");
    assert!(plan_value(&analyzed, "Extra Batch Pieces") >= 3, "{analyzed:?}");
    c.batch_execute("RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop").unwrap();
    check_join(&mut c, many);
    c.batch_execute("RESET gpuindex.batch_work_mem; RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop").unwrap();
    // Rescanned: whole passes, and passes a LIMIT stopped.
    c.batch_execute("SET enable_material = off; SET enable_hashjoin = off; SET enable_mergejoin = off").unwrap();
    let per_pass = format!("SELECT count(*), sum(t.v) FROM {call} p JOIN fz t ON t.ctid = p.ctid");
    let rescanned = format!("SELECT o.n, s.* FROM generate_series(1, 3) o(n) LEFT JOIN ({per_pass}) s ON o.n > 0");
    let plan = explain(&mut c, &rescanned);
    assert!(plan.contains("Nested Loop") && plan.contains("Parallel Custom Scan (GpuIndexJoin)"), "{plan}");
    let passes: Vec<(i64, i64)> = c.query(&rescanned, &[]).unwrap().iter().map(|r| (r.get(1), r.get(2))).collect();
    // (A nested loop of the call and the table is cheaper to start.)
    c.batch_execute("SET enable_tidscan = off; SET enable_nestloop = off").unwrap();
    let stopped = format!(
        "SELECT o.n, s.id FROM generate_series(1, 3) o(n) LEFT JOIN (SELECT t.id FROM {call} p JOIN fz t ON t.ctid = p.ctid LIMIT 2) s ON o.n > 0"
    );
    let plan = explain(&mut c, &stopped);
    assert!(plan.contains("Limit") && plan.contains("Parallel Custom Scan (GpuIndexJoin)"), "{plan}");
    let found: i64 = c
        .query_one(&format!("SELECT count(*) FROM ({stopped}) x JOIN fz ON fz.id = x.id AND fz.k IN (1, 2, 3, 17, 4999)"), &[])
        .unwrap()
        .get(0);
    assert_eq!(found, 6);
    c.batch_execute(
        "RESET enable_material; RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_tidscan; RESET enable_nestloop;
         SET gpuindex.enable_join = off",
    )
    .unwrap();
    let once = c.query_one(&per_pass, &[]).unwrap();
    assert_eq!(passes, vec![(once.get(0), once.get(1)); 3]);
    c.batch_execute(
        "RESET gpuindex.enable_join; RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET min_parallel_table_scan_size;
         RESET max_parallel_workers_per_gather; RESET statement_timeout",
    )
    .unwrap();
}

/// A LATERAL top-k (never parallel to PostgreSQL: a LIMIT subquery) runs
/// in parallel, each participant taking its chunks of the outer side, the
/// leader's growing from 64 rows so that a small outer side is shared. An
/// outer table too small for PostgreSQL to scan in parallel gets a
/// partial scan under the node where the server's shared buffers are in
/// huge pages (checked where the server is local), else none.
#[test]
fn parallel_workers_share_a_small_outer_side() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS sp_pts, sp_ctr, sp_vec, sp_q, sp_keys, sp_rows;
         CREATE TABLE sp_pts AS SELECT g AS id, point(random() * 1000, random() * 1000) AS p, g % 3 AS tag
           FROM generate_series(1, 30000) g;
         -- Skew: 3,000 copies of one point, a far outlier.
         INSERT INTO sp_pts SELECT 30000 + g, point(500, 500), g % 3 FROM generate_series(1, 3000) g;
         INSERT INTO sp_pts VALUES (40000, point(-1e15, 1e15), 0);
         CREATE INDEX ON sp_pts USING gpu_spatial (p);
         CREATE TABLE sp_ctr AS SELECT g AS id, point(random() * 1000, random() * 1000) AS c, g % 3 AS tag
           FROM generate_series(1, 2000) g;
         -- (None near the copies: their k nearest would tie there, and
         -- which tied rows is the plan's choice. Within 50 of a centre
         -- lie ~235 random points: the copies are never among its 6 nearest.)
         DELETE FROM sp_ctr WHERE c <-> point(500, 500) < 50;
         -- Centres on the copies (their k nearest all tie), and far out.
         INSERT INTO sp_ctr SELECT -g, point(500, 500), g % 3 FROM generate_series(1, 200) g;
         INSERT INTO sp_ctr VALUES (-1000, point(-1e15, 1e15), 0);
         CREATE TABLE sp_vec AS SELECT g AS id, ARRAY[random(), random(), random(), random()]::real[] AS v
           FROM generate_series(1, 8000) g;
         CREATE INDEX ON sp_vec USING gpu_metric (v);
         CREATE TABLE sp_q AS SELECT g AS id, ARRAY[random(), random(), random(), random()]::real[] AS q
           FROM generate_series(1, 500) g;
         CREATE TABLE sp_rows AS SELECT g AS id, (g % 5000)::int8 AS k FROM generate_series(1, 100000) g;
         -- A key held by 20,000 more rows, asked ten times; NULL keys.
         INSERT INTO sp_rows SELECT 200000 + g, 7 FROM generate_series(1, 20000) g;
         CREATE INDEX ON sp_rows USING gpu_btree (k);
         CREATE TABLE sp_keys AS SELECT g AS id, (g * 7 % 6000)::int8 AS k FROM generate_series(1, 3000) g;
         INSERT INTO sp_keys SELECT -g, CASE WHEN g % 2 = 0 THEN 7 END FROM generate_series(1, 20) g;
         ANALYZE sp_pts; ANALYZE sp_ctr; ANALYZE sp_vec; ANALYZE sp_q; ANALYZE sp_rows; ANALYZE sp_keys;
         SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET max_parallel_workers_per_gather = 2;",
    )
    .unwrap();
    // (Rows where distances are distinct; for the centres on the copies
    // and far out, whose k nearest may tie, which rows is the plan's
    // choice: their distances.)
    let queries = [
        ("sp_ctr", "SELECT sp_ctr.id, s.* FROM sp_ctr CROSS JOIN LATERAL (SELECT id, p <-> sp_ctr.c AS d FROM sp_pts ORDER BY p <-> sp_ctr.c LIMIT 6) s WHERE sp_ctr.id > 0"),
        ("sp_ctr", "SELECT sp_ctr.id, s.d FROM sp_ctr CROSS JOIN LATERAL (SELECT p <-> sp_ctr.c AS d FROM sp_pts ORDER BY p <-> sp_ctr.c LIMIT 6) s"),
        ("sp_ctr", "SELECT sp_ctr.id, s.id FROM sp_ctr LEFT JOIN LATERAL (SELECT id FROM sp_pts WHERE sp_pts.tag = sp_ctr.tag ORDER BY p <-> sp_ctr.c LIMIT 3) s ON s.id % 4 <> 0 WHERE sp_ctr.id > 0"),
        ("sp_q", "SELECT sp_q.id, s.id, s.d FROM sp_q CROSS JOIN LATERAL (SELECT id, v <-> sp_q.q AS d FROM sp_vec ORDER BY v <-> sp_q.q LIMIT 5) s"),
        ("sp_keys", "SELECT sp_keys.id, sp_rows.id FROM sp_keys JOIN sp_rows ON sp_rows.k = sp_keys.k"),
    ];
    let parallel = |c: &mut Client, outer: &str, sql: &str| {
        c.batch_execute("SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off").unwrap();
        let plan = explain(c, sql);
        plan.contains("Parallel Custom Scan (GpuIndexJoin)") && plan.contains(&format!("Parallel Seq Scan on {outer}"))
    };
    // PostgreSQL's own partial scan of the outer side.
    c.batch_execute("SET min_parallel_table_scan_size = 0").unwrap();
    for (outer, sql) in queries {
        assert!(parallel(&mut c, outer, sql), "{sql}:\n{}", explain(&mut c, sql));
        let analyzed = explain_lines(&mut c, "ANALYZE, TIMING OFF, COSTS OFF", sql);
        assert!(plan_value(&analyzed, "Chunks") > 3, "the leader's chunks growing from 64 rows: {analyzed:?}");
        check_join(&mut c, sql);
    }
    // The node's own, for tables below min_parallel_table_scan_size.
    c.batch_execute("RESET min_parallel_table_scan_size").unwrap();
    let pid: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let local = std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmd| String::from_utf8_lossy(&cmd).contains("postgres"));
    if local {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let huge = status.lines().any(|l| l.starts_with("HugetlbPages:") && !l.ends_with(" 0 kB"));
        // (Not the gpu_metric join: each worker would read the index into
        // a copy of its own, which the cost counts, for 500 outer rows.)
        for (outer, sql) in queries.into_iter().filter(|q| q.0 != "sp_q") {
            assert_eq!(parallel(&mut c, outer, sql), huge, "huge pages {huge}: {sql}:\n{}", explain(&mut c, sql));
            check_join(&mut c, sql);
        }
    } else {
        eprintln!("skipped the small outer side: the server's backend is not a process of this machine");
    }
    c.batch_execute("RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET max_parallel_workers_per_gather").unwrap();
}

/// Distinct distances (random points and vectors, no ties): the rows
/// themselves, every column of the subquery (by value, by reference,
/// NULL), equal the planner's; NULL
/// and non-finite queries; the subquery's WHERE reading the outer row;
/// row-level security on the subquery's table, its policy before the
/// subquery's quals.
#[test]
fn lateral_top_k_returns_the_planners_rows() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS lp, lc, lv, lq;
         CREATE TABLE lp AS SELECT g AS id, point(random() * 1000, random() * 1000) AS p, g % 5 AS tag,
           CASE WHEN g % 11 = 0 THEN NULL WHEN g % 97 = 0 THEN repeat('x', 3000) || g ELSE 'n' || g END AS note
           FROM generate_series(1, 20000) g;
         INSERT INTO lp VALUES (0, NULL, 0), (-1, point('NaN', 1), 1);
         CREATE INDEX lp_p ON lp USING gpu_spatial (p);
         CREATE TABLE lc AS SELECT g AS id, point(random() * 1000, random() * 1000) AS c, g % 5 AS tag
           FROM generate_series(1, 700) g;
         INSERT INTO lc VALUES (-1, NULL, 1), (-2, point('Infinity', 3), 2), (-3, point(1, 'NaN'), 3);
         CREATE TABLE lv AS SELECT g AS id, ARRAY[random(), random(), random(), random(), random(), random()]::real[] AS v
           FROM generate_series(1, 5000) g;
         CREATE INDEX lv_v ON lv USING gpu_metric (v);
         CREATE TABLE lq AS SELECT g AS id, ARRAY[random(), random(), random(), random(), random(), random()]::real[] AS q
           FROM generate_series(1, 300) g;
         ANALYZE lp; ANALYZE lc; ANALYZE lv; ANALYZE lq;",
    )
    .unwrap();
    for sql in [
        "SELECT lc.id, s.* FROM lc CROSS JOIN LATERAL (SELECT id, tag, p, p <-> lc.c AS d FROM lp ORDER BY p <-> lc.c LIMIT 7) s WHERE lc.id > 0",
        // Values passed by reference: the table's (long ones compressed),
        // and computed in the subquery's per-row memory.
        "SELECT lc.id, s.* FROM lc CROSS JOIN LATERAL (SELECT note, upper(note) AS u, p FROM lp ORDER BY p <-> lc.c LIMIT 9) s WHERE lc.id > 0",
        "SELECT lc.id, s.id, s.tag FROM lc CROSS JOIN LATERAL (SELECT id, tag FROM lp WHERE lp.tag = lc.tag ORDER BY lc.c <-> p LIMIT 3) s WHERE lc.id > 0",
        "SELECT lc.id, s.id FROM lc LEFT JOIN LATERAL (SELECT id, p <-> lc.c AS d FROM lp ORDER BY p <-> lc.c LIMIT 4) s ON s.d < 12 WHERE lc.id > 0",
        "SELECT lq.id, s.id, s.d FROM lq CROSS JOIN LATERAL (SELECT id, v <-> lq.q AS d FROM lv ORDER BY v <-> lq.q LIMIT 10) s",
        "SELECT lq.id, s.id FROM lq CROSS JOIN LATERAL (SELECT id FROM lv WHERE id % 4 = lq.id % 4 ORDER BY v <-> lq.q LIMIT 5) s",
    ] {
        check_join(&mut c, sql);
    }
    // NULL and non-finite queries: every distance is NULL, infinite or
    // NaN, so which rows is the plan's choice; how many, and the distances.
    check_join(
        &mut c,
        "SELECT lc.id, s.d FROM lc CROSS JOIN LATERAL (SELECT p <-> lc.c AS d FROM lp WHERE lp.tag <> 4 ORDER BY p <-> lc.c LIMIT 6) s WHERE lc.id < 0",
    );
    // The policy hides rows; a function in the subquery's WHERE sees none of them.
    c.batch_execute(
        "DROP TABLE IF EXISTS lseen; DROP FUNCTION IF EXISTS lpeek(int);
         DO $$ BEGIN
           IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'gpuindex_lateral_reader') THEN
             DROP OWNED BY gpuindex_lateral_reader; DROP ROLE gpuindex_lateral_reader;
           END IF;
         END $$;
         CREATE ROLE gpuindex_lateral_reader;
         CREATE TABLE lseen (tag int);
         CREATE FUNCTION lpeek(int) RETURNS bool LANGUAGE sql VOLATILE COST 0.0001 AS 'INSERT INTO lseen VALUES ($1) RETURNING true';
         ALTER TABLE lp ENABLE ROW LEVEL SECURITY;
         CREATE POLICY visible ON lp FOR SELECT USING (tag <> 2);
         GRANT SELECT ON lp, lc TO gpuindex_lateral_reader; GRANT INSERT, SELECT ON lseen TO gpuindex_lateral_reader;",
    )
    .unwrap();
    c.batch_execute("SET ROLE gpuindex_lateral_reader").unwrap();
    check_join(
        &mut c,
        "SELECT lc.id, s.id, s.tag FROM lc CROSS JOIN LATERAL (SELECT id, tag FROM lp ORDER BY p <-> lc.c LIMIT 5) s WHERE lc.id > 0",
    );
    c.batch_execute("SET enable_nestloop = off").unwrap();
    let sql = "SELECT count(*) FROM lc CROSS JOIN LATERAL (SELECT id FROM lp WHERE lpeek(tag) ORDER BY p <-> lc.c LIMIT 5) s";
    assert!(explain(&mut c, sql).contains("GpuIndexJoin"));
    let n: i64 = c.query_one(sql, &[]).unwrap().get(0);
    assert!(n > 0);
    let leaked: i64 = c.query_one("SELECT count(*) FROM lseen WHERE tag = 2", &[]).unwrap().get(0);
    assert_eq!(leaked, 0, "the subquery's WHERE saw rows the policy hides");
    c.batch_execute("RESET ROLE; RESET enable_nestloop; ALTER TABLE lp DISABLE ROW LEVEL SECURITY").unwrap();
}

/// A select list of the table's columns of fixed width and the distance is
/// read off the fetched rows (`nearest::Direct`): every type passed by
/// value, with negative values (sign-extended as PostgreSQL's datums are),
/// after a column of fixed width passed by reference and after a dropped
/// one, and such columns (a point, a uuid: copied into the chunk's
/// memory); rows
/// with NULLs, rows written before a column was added (fewer columns than
/// it reads), a column after one of variable width, and non-finite
/// distances take the projection. Each equals the planner's rows.
#[test]
fn lateral_top_k_reads_columns_off_the_rows() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS ld, ldc;
         SELECT setseed(0.75);
         CREATE TABLE ld (a int2, gone int8, b int4, c int8, f4 real, f8 float8, ok bool, dt date, ts timestamptz, p point,
           u uuid, note text, tail int4);
         INSERT INTO ld SELECT (g % 200 - 100)::int2, g, -7 * g, -1000003::int8 * g, (g % 77 - 30) / 7.0, -g / 3.0, g % 3 = 0,
           date '2000-01-01' + (g % 1000 - 500), timestamptz '1960-01-01 UTC' + g * interval '1 hour',
           point(random() * 1000, random() * 1000), md5(g::text)::uuid, CASE WHEN g % 13 = 0 THEN NULL ELSE 'n' || g END, g
           FROM generate_series(1, 20000) g;
         INSERT INTO ld (a, b, p) VALUES (1, 1, point('NaN', 5)), (2, 2, NULL);
         ALTER TABLE ld DROP COLUMN gone;
         ALTER TABLE ld ADD COLUMN extra int4 DEFAULT -5;
         -- (A varlena after a bool: not aligned where its header is short.)
         ALTER TABLE ld ADD COLUMN flag bool, ADD COLUMN tag text;
         INSERT INTO ld SELECT -1, -g, g, 0.5, 0.25, true, date '1999-12-31', now(), point(random() * 1000, random() * 1000),
           md5((-g)::text)::uuid, 'm', g, -g, g % 2 = 0, 't' || repeat('x', g % 9)
           FROM generate_series(1, 2000) g;
         -- Users' shapes: 3,000 copies of one point (alike but for b and
         -- tail), a far outlier.
         INSERT INTO ld SELECT -2, g, -3, -1.5, -2.5, false, date '2020-02-29', timestamptz '2020-02-29 UTC', point(300, 300),
           md5('dup')::uuid, 'dup', g, 7, true, 'same'
           FROM generate_series(1, 3000) g;
         INSERT INTO ld VALUES (9, 9, 9, 9, 9, true, date '1900-01-01', timestamptz '1900-01-01 UTC', point(1e15, -1e15),
           md5('far')::uuid, 'far', 9, 9, false, 'far tag');
         -- (The index before the updates: built after them while tests
         -- running beside this one hold snapshots, it would wait for older
         -- transactions, pg_index.indcheckxmin, and the planner skip it.)
         CREATE INDEX ld_p ON ld USING gpu_spatial (p);
         -- Long text: compressed in the row, and stored out of line.
         UPDATE ld SET note = CASE WHEN tail % 2 = 0 THEN repeat('long ', 1000)
           ELSE (SELECT string_agg(md5(tail::text || i), '') FROM generate_series(1, 80) i) END
           WHERE tail % 37 = 0 AND note IS NOT NULL AND a <> -2;
         UPDATE ld SET tag = repeat('tag', 700 + tail % 3) WHERE tail % 41 = 0 AND tag IS NOT NULL AND a <> -2;
         CREATE TABLE ldc AS SELECT g AS id, point(random() * 1000, random() * 1000) AS c FROM generate_series(1, 300) g;
         -- (Random centres away from the copies: their nearest rows tie.)
         DELETE FROM ldc WHERE c <-> point(300, 300) < 40;
         INSERT INTO ldc VALUES (-1, point('Infinity', 1)), (-2, point(300, 300)), (-3, point(1e15, -1e15)), (-4, point(-1e15, 1e15));
         ANALYZE ld; ANALYZE ldc;
         -- Rows without NULLs whose varlenas lie at offsets found in each
         -- row (short headers not aligned after a bool, long values
         -- compressed or out of line), 3,000 copies among them.
         DROP TABLE IF EXISTS ldv;
         CREATE TABLE ldv (flag bool, tag text, n int4, note text, p point);
         INSERT INTO ldv SELECT g % 3 = 0, repeat('t', g % 11), g,
           CASE WHEN g % 29 = 0 THEN repeat('long ', 800 + g % 5)
             WHEN g % 31 = 0 THEN (SELECT string_agg(md5(g::text || i), '') FROM generate_series(1, 80) i) ELSE 'v' || g END,
           point(random() * 1000, random() * 1000) FROM generate_series(1, 20000) g;
         INSERT INTO ldv SELECT true, 'same', g, 'dup', point(300, 300) FROM generate_series(1, 3000) g;
         CREATE INDEX ldv_p ON ldv USING gpu_spatial (p);
         ANALYZE ldv;",
    )
    .unwrap();
    for list in [
        "a, b, c, f4, f8, ok, dt, ts, p, p <-> ldc.c AS d",
        "p <-> ldc.c AS d, extra, c",
        "tail, b",
        "b, p <-> ldc.c AS d, a, p, u",
        "u, ok",
        "note, b, p <-> ldc.c AS d",
        "extra, u, tail, note",
        "length(note) AS n, tail",
        "tag, flag, p <-> ldc.c AS d, note",
        "tail, tag, extra",
    ] {
        check_join(
            &mut c,
            &format!(
                "SELECT ldc.id, s.* FROM ldc CROSS JOIN LATERAL (SELECT {list} FROM ld ORDER BY p <-> ldc.c LIMIT 10) s WHERE ldc.id > 0"
            ),
        );
    }
    // Every distance infinite: which rows is the plan's choice; the count.
    check_join(&mut c, "SELECT count(s.b) FROM ldc CROSS JOIN LATERAL (SELECT b, p <-> ldc.c AS d FROM ld ORDER BY p <-> ldc.c LIMIT 10) s WHERE ldc.id = -1");
    // At the copies (which of them is the plan's choice: the columns read
    // are alike), at the outlier and far from every row.
    check_join(
        &mut c,
        "SELECT ldc.id, s.* FROM ldc CROSS JOIN LATERAL (SELECT a, c, f4, f8, ok, dt, ts, p, u, note, p <-> ldc.c AS d, extra, flag, tag FROM ld \
         ORDER BY p <-> ldc.c LIMIT 10) s WHERE ldc.id < -1",
    );
    for list in ["tag, n, p <-> ldc.c AS d", "note, n", "flag, tag, note, n, p", "n"] {
        check_join(
            &mut c,
            &format!(
                "SELECT ldc.id, s.* FROM ldc CROSS JOIN LATERAL (SELECT {list} FROM ldv ORDER BY p <-> ldc.c LIMIT 10) s WHERE ldc.id > 0"
            ),
        );
    }
    check_join(
        &mut c,
        "SELECT ldc.id, s.* FROM ldc CROSS JOIN LATERAL (SELECT flag, tag, note, p <-> ldc.c AS d FROM ldv ORDER BY p <-> ldc.c LIMIT 10) s \
         WHERE ldc.id = -2",
    );
    c.batch_execute("DROP TABLE ld, ldc, ldv").unwrap();
}

/// The LATERAL top-k join's select lists read off the rows on tables of
/// random shapes: columns of random types (by value of each width, fixed
/// width by reference with each alignment, varlenas short, compressed and
/// out of line) in random order around the indexed point, some with
/// NULLs, a column dropped and one added after rows were written; random
/// select lists of them. Each equals the planner's rows (`check_join`).
#[test]
fn lateral_top_k_reads_random_rows_as_the_planner_does() {
    // (type, a value of row g)
    const TYPES: &[(&str, &str)] = &[
        ("int2", "(g % 300 - 150)::int2"),
        ("int4", "g * 7919 % 100003 - 50000"),
        ("int8", "g * -1000003::int8"),
        ("\"char\"", "chr(65 + g % 26)::\"char\""),
        ("bool", "g % 3 = 0"),
        ("real", "(g % 97 - 40) / 7.0"),
        ("float8", "-g / 3.0"),
        ("date", "date '2000-01-01' + (g % 1000 - 500)"),
        ("timestamptz", "timestamptz '1960-01-01 UTC' + g * interval '1 hour'"),
        ("interval", "g * interval '1 minute 3 seconds'"),
        ("uuid", "md5(g::text)::uuid"),
        ("name", "('nm' || g)::name"),
        ("macaddr", "('08:00:2b:01:' || lpad(to_hex(g / 256 % 256), 2, '0') || ':' || lpad(to_hex(g % 256), 2, '0'))::macaddr"),
        ("tid", "('(' || g || ',' || g % 7 || ')')::tid"),
        ("point", "point(g, -g)"),
        ("text", "repeat('s', g % 5)"),
        (
            "text",
            "CASE WHEN g % 23 = 0 THEN repeat('long ', 900 + g % 3) WHEN g % 29 = 0 THEN \
                  (SELECT string_agg(md5(g::text || i), '') FROM generate_series(1, 80) i) ELSE 'v' || g END",
        ),
        ("numeric", "(g / 7.0)::numeric"),
        ("int4[]", "ARRAY[g, -g]"),
        ("char(3)", "(g % 1000)::text::char(3)"),
        ("inet", "('10.' || g % 256 || '.' || g / 256 % 256 || '.1')::inet"),
    ];
    let mut c = connect(DB);
    let mut rng = SplitMix64::new(977);
    c.batch_execute(
        "SET client_min_messages = warning; SELECT setseed(0.5);
         DROP TABLE IF EXISTS lr_c;
         CREATE TABLE lr_c AS SELECT g AS id, point(random() * 1000, random() * 1000) AS c FROM generate_series(1, 60) g;
         ANALYZE lr_c;",
    )
    .unwrap();
    for shape in 0..12 {
        // Columns c0.. of random types, the point at a random place.
        let n = 2 + rng.below(6) as usize;
        let mut cols: Vec<(String, &str, &str, bool)> = (0..n)
            .map(|i| {
                let (ty, value) = TYPES[rng.below(TYPES.len() as u64) as usize];
                (format!("c{i}"), ty, value, rng.below(3) == 0)
            })
            .collect();
        let at = rng.below(n as u64 + 1) as usize;
        cols.insert(at, ("p".into(), "point", "point(random() * 1000, random() * 1000)", false));
        let columns: Vec<String> = cols.iter().map(|(name, ty, ..)| format!("{name} {ty}")).collect();
        let values: Vec<String> = cols
            .iter()
            .map(|(_, _, value, nulls)| if *nulls { format!("CASE WHEN g % 17 = 0 THEN NULL ELSE {value} END") } else { value.to_string() })
            .collect();
        c.batch_execute(&format!(
            "DROP TABLE IF EXISTS lr;
             CREATE TABLE lr ({});
             INSERT INTO lr SELECT {} FROM generate_series(1, 3000) g;
             CREATE INDEX lr_p ON lr USING gpu_spatial (p);",
            columns.join(", "),
            values.join(", ")
        ))
        .unwrap();
        let mut names: Vec<String> = cols.iter().map(|c| c.0.clone()).collect();
        // A column dropped, and one added that older rows lack (the index
        // made before: built after the updates, it could wait for older
        // transactions of concurrent tests, pg_index.indcheckxmin, and the
        // planner skip it).
        if shape % 3 == 1 {
            let gone = names.iter().position(|n| n != "p").unwrap();
            c.batch_execute(&format!("ALTER TABLE lr DROP COLUMN {}", names.remove(gone))).unwrap();
        }
        if shape % 3 == 2 {
            c.batch_execute(
                "ALTER TABLE lr ADD COLUMN late int8 DEFAULT 7, ADD COLUMN late_t text;
                 UPDATE lr SET late = -1, late_t = 'x' || ctid::text WHERE random() < 0.3;",
            )
            .unwrap();
            names.extend(["late".to_string(), "late_t".to_string()]);
        }
        c.batch_execute("ANALYZE lr").unwrap();
        for _ in 0..3 {
            let mut list = names.clone();
            list.push("p <-> lr_c.c AS d".into());
            rng.shuffle(&mut list);
            list.truncate(1 + rng.below(list.len() as u64) as usize);
            check_join(
                &mut c,
                &format!(
                    "SELECT lr_c.id, s.* FROM lr_c CROSS JOIN LATERAL (SELECT {} FROM lr ORDER BY p <-> lr_c.c LIMIT 10) s",
                    list.join(", ")
                ),
            );
        }
    }
    c.batch_execute("DROP TABLE lr, lr_c").unwrap();
}

/// A join that wins only with the backend's copy of its index held is
/// planned once the session's earlier statements forwent what loading the
/// copy costs (`join::load`, a ski rental): the copy is then loaded and the
/// join runs from then on. Statements whose join would save little (ten
/// outer rows) do not make the session load it. (A fresh session with the
/// GPU service off, so that the copy's load is priced.)
#[test]
fn a_session_loads_the_copy_once_its_joins_would_have_paid_for_it() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS skp, skc;
         SELECT setseed(0.25);
         CREATE TABLE skp AS SELECT g AS id, point(random() * 1000, random() * 1000) AS p FROM generate_series(1, 1000000) g;
         -- Users' shapes: one point held by 20,000 rows, far outliers.
         INSERT INTO skp SELECT -g, point(500, 500) FROM generate_series(1, 20000) g;
         INSERT INTO skp VALUES (-20001, point(-1e15, 1e15)), (-20002, point(1e15, -1e-9));
         CREATE INDEX skp_p ON skp USING gpu_spatial (p);
         CREATE TABLE skc AS SELECT g AS id, point(random() * 1000, random() * 1000) AS c FROM generate_series(1, 1000) g;
         ANALYZE skp; ANALYZE skc;",
    )
    .unwrap();
    let mut s = connect(DB);
    s.batch_execute("SET max_parallel_workers_per_gather = 0; SET gpuindex.service = off").unwrap();
    let knn =
        "SELECT count(s.id), sum(s.d) FROM skc CROSS JOIN LATERAL (SELECT id, p <-> skc.c AS d FROM skp ORDER BY p <-> skc.c LIMIT 10) s";
    let few = format!("{knn} WHERE skc.id <= 10");
    let joins = |s: &mut Client, sql: &str| explain(s, sql).contains("GpuIndexJoin");
    for _ in 0..10 {
        assert!(!joins(&mut s, &few), "ten outer rows' joins made the session load the copy");
    }
    assert!(!joins(&mut s, knn), "the first plan of the join over the index did not price the copy's load");
    assert!((2..=4).any(|_| joins(&mut s, knn)), "the join was not planned after three statements that would have paid for the load");
    s.batch_execute("SET gpuindex.enable_join = off").unwrap();
    let want = s.query_one(knn, &[]).unwrap();
    s.batch_execute("RESET gpuindex.enable_join").unwrap();
    let got = s.query_one(knn, &[]).unwrap();
    assert_eq!(got.get::<_, i64>(0), want.get::<_, i64>(0));
    assert_eq!(got.get::<_, f64>(1).to_bits(), want.get::<_, f64>(1).to_bits(), "the sums of distances differ");
    assert!(joins(&mut s, knn), "the join was not planned with the copy held");
    c.batch_execute("DROP TABLE skp, skc").unwrap();
}

/// The minor page faults of process `pid` so far (field 10 of its stat).
fn minor_faults(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // (The command name, in parentheses, may hold spaces.)
    stat[stat.rfind(')').unwrap() + 2..].split(' ').nth(7).unwrap().parse().unwrap()
}

/// The backend's pages given to the kernel to take back (`MADV_FREE`)
/// and not taken yet, in kB; None where the kernel does not say.
fn lazy_free_kb(pid: i32) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let line = rollup.lines().find(|l| l.starts_with("LazyFree:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A batch's large buffers, freed, stay mapped for the backend's next
/// batches (`gpuindex.retained_memory`): a join run again takes few page
/// faults, where with nothing kept every run takes as many as the first.
/// Kept buffers left unused for a second are given to the kernel to take
/// back (`src/retained.rs`).
#[test]
fn later_batches_reuse_the_buffers_of_earlier_ones() {
    let mut c = connect(DB);
    let pid: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let local = std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmd| String::from_utf8_lossy(&cmd).contains("postgres"));
    if !local {
        eprintln!("skipped: the server's backend is not a process of this machine");
        return;
    }
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS rm_i, rm_o;
         CREATE TABLE rm_i AS SELECT g::int8 AS k, g AS v FROM generate_series(1, 400000) g;
         CREATE TABLE rm_o AS SELECT (g::int8 * 7919) % 400000 AS k FROM generate_series(1, 200000) g;
         CREATE INDEX ON rm_i USING gpu_btree (k);
         ANALYZE rm_i; ANALYZE rm_o;
         SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off;
         SET max_parallel_workers_per_gather = 0; SET gpuindex.device = cpu;",
    )
    .unwrap();
    let sql = "SELECT count(*), sum(v) FROM rm_o JOIN rm_i USING (k)";
    assert!(explain(&mut c, sql).contains("GpuIndexJoin"));
    let run = |c: &mut Client| {
        let before = minor_faults(pid);
        let n: i64 = c.query_one(sql, &[]).unwrap().get(0);
        assert_eq!(n, 200_000, "every outer key has its row");
        minor_faults(pid) - before
    };
    run(&mut c);
    // (The fewer of two runs: blocks that lay idle through the set-up are
    // given back at a run's end, and a busy host may have a run fault some
    // of them in again.)
    let kept = run(&mut c).min(run(&mut c));
    if let Some(before) = lazy_free_kb(pid) {
        std::thread::sleep(std::time::Duration::from_millis(2500));
        let idle = lazy_free_kb(pid).unwrap();
        assert!(idle >= before + 1024, "kept buffers unused for 2.5 s: {idle} kB lazily freed, {before} kB before");
    }
    c.batch_execute("SET gpuindex.retained_memory = 0").unwrap();
    run(&mut c);
    let none = run(&mut c);
    c.batch_execute("RESET gpuindex.retained_memory; DROP TABLE rm_i, rm_o").unwrap();
    if none < 1000 {
        // (Transparent huge pages everywhere: large blocks take few faults either way.)
        eprintln!("skipped: a join run again took only {none} page faults with nothing kept");
        return;
    }
    assert!(kept * 3 < none, "page faults of a join run again: {kept} with buffers kept, {none} without");
}

/// The join pins heap pages through the buffers this backend last found
/// them in (`storage::RecentPages`). After VACUUM truncates the table's
/// tail and new rows extend it again, the remembered buffers of those
/// blocks are free or hold other pages: each fails its tag check and the
/// page is read as usual, and the answers stay the planner's.
#[test]
fn remembered_heap_buffers_that_now_hold_other_pages_are_read_again() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS rb_i, rb_o;
         CREATE TABLE rb_i AS SELECT (g::int8 * 7919) % 200000 AS k, g AS v FROM generate_series(0, 199999) g;
         CREATE TABLE rb_o AS SELECT (g::int8 * 104729) % 250000 AS k FROM generate_series(1, 30000) g;
         CREATE INDEX rb_i_k ON rb_i USING gpu_btree (k);",
    )
    .unwrap();
    c.batch_execute("VACUUM ANALYZE rb_i").unwrap();
    c.batch_execute("ANALYZE rb_o").unwrap();
    let join = "SELECT count(*), sum(v) FROM rb_o JOIN rb_i USING (k)";
    let probe = "SELECT count(*), sum(t.v) FROM gpu_btree_probe('rb_i_k', ARRAY(SELECT k FROM rb_o)) p JOIN rb_i t ON t.ctid = p.ctid";
    let run = |c: &mut Client, sql: &str| -> (i64, i64) {
        let r = c.query_one(sql, &[]).unwrap();
        (r.get(0), r.get(1))
    };
    let check = |c: &mut Client, when: &str| {
        c.batch_execute("SET gpuindex.enable_join = off").unwrap();
        let want = run(c, join);
        c.batch_execute("RESET gpuindex.enable_join; SET enable_hashjoin = off; SET enable_mergejoin = off; SET gpuindex.device = cpu")
            .unwrap();
        assert!(explain(c, join).contains("GpuIndexJoin"));
        for _ in 0..2 {
            assert_eq!(run(c, join), want, "{when}: the join");
            assert_eq!(run(c, probe), want, "{when}: the probe function joined back");
        }
        c.batch_execute("RESET enable_hashjoin; RESET enable_mergejoin; RESET gpuindex.device").unwrap();
    };
    let size = |c: &mut Client| -> i64 { c.query_one("SELECT pg_relation_size('rb_i')", &[]).unwrap().get(0) };
    check(&mut c, "first");
    let before = size(&mut c);
    c.batch_execute("DELETE FROM rb_i WHERE v >= 100000").unwrap();
    // (A transaction of a test running beside this one can keep the rows
    // from being removed for a while.)
    let truncated = (0..120).find_map(|_| {
        c.batch_execute("VACUUM rb_i").unwrap();
        let now = size(&mut c);
        (now * 3 < before * 2).then_some(now).or_else(|| {
            std::thread::sleep(std::time::Duration::from_millis(500));
            None
        })
    });
    if truncated.is_none() {
        eprintln!("skipped: VACUUM never truncated rb_i (older transactions beside this test)");
        c.batch_execute("DROP TABLE rb_i, rb_o").unwrap();
        return;
    }
    c.batch_execute("INSERT INTO rb_i SELECT (g::int8 * 7919) % 200000, g + 1000000 FROM generate_series(100000, 199999) g").unwrap();
    assert!(size(&mut c) * 10 > before * 9, "the table grows back over its truncated blocks");
    check(&mut c, "after truncation and new rows");
    c.batch_execute("RESET client_min_messages; DROP TABLE rb_i, rb_o").unwrap();
}

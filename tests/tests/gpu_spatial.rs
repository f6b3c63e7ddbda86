//! gpu_spatial against a live server, on random data (uniform and
//! clustered, with duplicate points and points on the query borders):
//! every query through gpu_spatial returns exactly GiST's rows (and the
//! sequential scan's), kNN returns GiST's distances in order, the batch
//! functions return what LATERAL joins over GiST return; before and after
//! inserts, deletes, updates and VACUUM. NaN, infinities and NULLs (which
//! GiST mishandles: it loses rows and fails kNN with "inconsistent point
//! values") are checked against the sequential scan, and so are skewed
//! tables (a far outlier, 100,000 duplicates: a leaf run of ~300 pages, more
//! than PostgreSQL lets a backend lock at once; a city 1e-12
//! wide) through bulk inserts. On a server with a GPU, batches of every
//! size run there. (Concurrency: tests/access_methods.rs.)

use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::{check_predicate, connect, gpu_missing_but_required, set_index_only, set_seq_only, vacuum_until_free};
use postgres::Client;

const DB: &str = "gpuindex_it_spatial";

fn unit(rng: &mut SplitMix64) -> f64 {
    rng.next_u64() as f64 / u64::MAX as f64
}

/// A coordinate on a 0.25 grid in [0, 100] (duplicates and exact border
/// hits are common), or anywhere near one of a few cluster centres.
fn coord(rng: &mut SplitMix64, clustered: bool, centre: f64) -> f64 {
    if clustered {
        centre + (unit(rng) - 0.5) * 2.0
    } else {
        (rng.below(401) as f64) * 0.25
    }
}

fn points(rng: &mut SplitMix64, clustered: bool, n: usize) -> Vec<(f64, f64)> {
    let centres = [(20.0, 20.0), (20.5, 21.0), (70.0, 40.0), (50.0, 90.0)];
    (0..n)
        .map(|_| {
            let (cx, cy) = centres[rng.below(4) as usize];
            (coord(rng, clustered, cx), coord(rng, clustered, cy))
        })
        .collect()
}

/// Inserts the points into every table, the same id in each.
fn insert(c: &mut Client, tables: &[&str], pts: &[(f64, f64)], first_id: usize) {
    let values: Vec<String> = pts.iter().enumerate().map(|(i, (x, y))| format!("({}, point({x:?}, {y:?}))", first_id + i)).collect();
    for t in tables {
        for chunk in values.chunks(2000) {
            c.batch_execute(&format!("INSERT INTO {t} (id, p) VALUES {}", chunk.join(", "))).unwrap();
        }
    }
}

/// A random predicate whose borders often fall on stored points.
fn predicate(rng: &mut SplitMix64, clustered: bool) -> String {
    let (x, y) = points(rng, clustered, 1)[0];
    let w = match rng.below(3) {
        0 => 0.0,
        1 => rng.below(8) as f64 * 0.25,
        _ => unit(rng) * 10.0,
    };
    let h = rng.below(8) as f64 * 0.25;
    match rng.below(5) {
        0 | 1 => format!("p <@ box '({x:?},{y:?}),({:?},{:?})'", x + w, y + h),
        2 | 3 => format!("p <@ circle '(({x:?},{y:?}),{w:?})'"),
        _ => format!("p ~= point '({x:?},{y:?})'"),
    }
}

fn ids(c: &mut Client, sql: &str) -> Vec<i32> {
    let mut v: Vec<i32> = c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).iter().map(|r| r.get(0)).collect();
    v.sort_unstable();
    v
}

fn distances(c: &mut Client, sql: &str) -> Vec<Option<f64>> {
    c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).iter().map(|r| r.get(0)).collect()
}

/// The same predicate on the gpu_spatial table and on the GiST one.
fn check_against_gist(c: &mut Client, pred: &str) {
    set_index_only(c, false);
    let got = ids(c, &format!("SELECT id FROM sp_gpu WHERE {pred}"));
    let want = ids(c, &format!("SELECT id FROM sp_gist WHERE {pred}"));
    assert_eq!(got, want, "gpu_spatial and GiST differ on {pred}");
    // Index-only: the points themselves.
    let q = |t: &str| format!("SELECT p[0], p[1] FROM {t} WHERE {pred}");
    let plan: Vec<String> = c.query(&format!("EXPLAIN {}", q("sp_gpu")), &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(plan.iter().any(|l| l.contains("Index Only Scan")), "not index-only: {plan:?}");
    let points = |c: &mut Client, t: &str| {
        let mut v: Vec<(u64, u64)> =
            c.query(&q(t), &[]).unwrap().iter().map(|r| (r.get::<_, f64>(0).to_bits(), r.get::<_, f64>(1).to_bits())).collect();
        v.sort_unstable();
        v
    };
    assert_eq!(points(c, "sp_gpu"), points(c, "sp_gist"), "index-only gpu_spatial and GiST differ on {pred}");
}

fn check_knn_against_gist(c: &mut Client, x: f64, y: f64, filter: &str, limit: usize) {
    set_index_only(c, false);
    let q = |t: &str| format!("SELECT p <-> point({x:?}, {y:?}) FROM {t} {filter} ORDER BY p <-> point({x:?}, {y:?}) LIMIT {limit}");
    let plan: Vec<String> = c.query(&format!("EXPLAIN {}", q("sp_gpu")), &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(plan.iter().any(|l| l.contains("sp_gpu_p")), "kNN not through gpu_spatial: {plan:?}");
    assert_eq!(distances(c, &q("sp_gpu")), distances(c, &q("sp_gist")), "kNN from ({x}, {y}) {filter}");
}

#[test]
fn index_scans_equal_gist() {
    let mut c = connect(DB);
    assert!(!gpu_missing_but_required(&mut c), "GPUINDEX_REQUIRE_GPU=1 but the server has no GPU");
    c.batch_execute("SET client_min_messages = warning; SET gpuindex.gpu_min_batch = 1").unwrap();
    let mut rng = SplitMix64::new(4242);
    for clustered in [false, true] {
        c.batch_execute(
            "DROP TABLE IF EXISTS sp_gpu, sp_gist;
             CREATE TABLE sp_gpu (id int, p point); CREATE TABLE sp_gist (id int, p point);",
        )
        .unwrap();
        let pts = points(&mut rng, clustered, 20_000);
        insert(&mut c, &["sp_gpu", "sp_gist"], &pts, 0);
        c.batch_execute(
            "CREATE INDEX sp_gpu_p ON sp_gpu USING gpu_spatial (p) WITH (leaf_capacity = 128, delta_limit = 2);
             CREATE INDEX sp_gist_p ON sp_gist USING gist (p); ANALYZE sp_gpu; ANALYZE sp_gist;",
        )
        .unwrap();
        for round in 0..3 {
            for _ in 0..30 {
                let p = predicate(&mut rng, clustered);
                check_against_gist(&mut c, &p);
                check_predicate(&mut c, "sp_gpu", "sp_gpu_p", &p);
            }
            for _ in 0..6 {
                let (x, y) = points(&mut rng, clustered, 1)[0];
                check_knn_against_gist(&mut c, x, y, "", 1 + rng.below(200) as usize);
                let f = predicate(&mut rng, clustered);
                check_knn_against_gist(&mut c, x, y, &format!("WHERE {f}"), 50);
            }
            // Change the data alike in both: inserts (the delta), deletes,
            // updates, VACUUM.
            let more = points(&mut rng, clustered, 3_000);
            insert(&mut c, &["sp_gpu", "sp_gist"], &more, 100_000 * (round + 1));
            for t in ["sp_gpu", "sp_gist"] {
                c.batch_execute(&format!(
                    "DELETE FROM {t} WHERE id % 11 = {round}; UPDATE {t} SET p = point(p[1], p[0]) WHERE id % 13 = {round};"
                ))
                .unwrap();
                if round == 1 {
                    c.batch_execute(&format!("VACUUM {t}")).unwrap();
                }
            }
            c.query("SELECT * FROM gpu_spatial_check('sp_gpu_p')", &[]).unwrap();
        }
    }
    c.batch_execute("DROP TABLE sp_gpu, sp_gist").unwrap();
}

/// (position, id) pairs of a function call or a LATERAL join, sorted.
fn pairs(c: &mut Client, sql: &str) -> Vec<(i64, i32)> {
    gpuindex_tests::sorted_pairs(c, sql)
}

use gpuindex_tests::sql_array as array;

#[test]
fn batch_functions_equal_gist_laterals() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning; SET gpuindex.gpu_min_batch = 1;
         DROP TABLE IF EXISTS bf_gpu, bf_gist, bf_outer;
         CREATE TABLE bf_gpu (id int, p point) WITH (fillfactor = 70);
         CREATE TABLE bf_gist (id int, p point) WITH (fillfactor = 70);",
    )
    .unwrap();
    let mut rng = SplitMix64::new(77);
    let mut pts = points(&mut rng, false, 15_000);
    pts.extend(points(&mut rng, true, 15_000));
    insert(&mut c, &["bf_gpu", "bf_gist"], &pts, 0);
    c.batch_execute(
        "CREATE INDEX bf_gpu_p ON bf_gpu USING gpu_spatial (p);
         CREATE INDEX bf_gist_p ON bf_gist USING gist (p);",
    )
    .unwrap();
    let more = points(&mut rng, true, 2_000);
    insert(&mut c, &["bf_gpu", "bf_gist"], &more, 50_000);
    for t in ["bf_gpu", "bf_gist"] {
        // Dead rows, HOT and non-HOT updates: the functions return only
        // what the snapshot sees.
        c.batch_execute(&format!("DELETE FROM {t} WHERE id % 9 = 0; UPDATE {t} SET id = -id WHERE id % 10 = 1; UPDATE {t} SET p = point(p[0] + 0.25, p[1]) WHERE id % 17 = 2"))
            .unwrap();
    }
    set_index_only(&mut c, false);
    // Before VACUUM (chains searched tuple by tuple), then after it (pages
    // all-visible, pruned HOT chains behind redirect line pointers), and
    // then in pieces (gpuindex.batch_work_mem: ~10K matches; a query's
    // fewer).
    for n in [1usize, 10, 300, 5000, 0, 300, 5000] {
        if n == 0 {
            c.batch_execute("VACUUM bf_gpu, bf_gist").unwrap();
            c.batch_execute("SET gpuindex.batch_work_mem = '512kB'").unwrap();
            // Where pageinspect is installed: both cases really occur.
            let _ = c.batch_execute("CREATE EXTENSION IF NOT EXISTS pageinspect");
            let sql = "SELECT count(*) FILTER (WHERE (SELECT flags & 4 <> 0 FROM page_header(get_raw_page('bf_gpu', b::int)))),
                              sum((SELECT count(*) FROM heap_page_items(get_raw_page('bf_gpu', b::int)) WHERE lp_flags = 2))::int8
                       FROM generate_series(0, pg_relation_size('bf_gpu') / 8192 - 1) b";
            if let Ok(r) = c.query_one(sql, &[]) {
                let (pages, redirects): (i64, i64) = (r.get(0), r.get(1));
                assert!(pages > 0 && redirects > 0, "after VACUUM: {pages} all-visible pages, {redirects} redirects");
            }
            continue;
        }
        let qs: Vec<(f64, f64)> = (0..n)
            .map(|_| {
                let clustered = rng.below(2) == 0;
                points(&mut rng, clustered, 1)[0]
            })
            .collect();
        let boxes: Vec<String> =
            qs.iter().map(|(x, y)| format!("box(point({x:?},{y:?}), point({:?},{:?}))", x + rng.below(6) as f64 * 0.25, y + 0.5)).collect();
        let got = pairs(
            &mut c,
            &format!("SELECT r.ord, t.id FROM gpu_spatial_range('bf_gpu_p', {}) r JOIN bf_gpu t ON t.ctid = r.ctid", array(&boxes, "box")),
        );
        let want = pairs(
            &mut c,
            &format!(
                "SELECT q.ord, t.id FROM unnest({}) WITH ORDINALITY q(b, ord), LATERAL (SELECT id FROM bf_gist WHERE p <@ q.b) t",
                array(&boxes, "box")
            ),
        );
        assert_eq!(got, want, "gpu_spatial_range of {n} boxes");
        let circles: Vec<String> =
            qs.iter().map(|(x, y)| format!("circle(point({x:?},{y:?}), {:?})", rng.below(5) as f64 * 0.25)).collect();
        let got = pairs(
            &mut c,
            &format!(
                "SELECT r.ord, t.id FROM gpu_spatial_within('bf_gpu_p', {}) r JOIN bf_gpu t ON t.ctid = r.ctid",
                array(&circles, "circle")
            ),
        );
        let want = pairs(
            &mut c,
            &format!(
                "SELECT q.ord, t.id FROM unnest({}) WITH ORDINALITY q(c, ord), LATERAL (SELECT id FROM bf_gist WHERE p <@ q.c) t",
                array(&circles, "circle")
            ),
        );
        assert_eq!(got, want, "gpu_spatial_within of {n} circles");
        let centres: Vec<String> = qs.iter().map(|(x, y)| format!("point({x:?},{y:?})")).collect();
        let got = pairs(
            &mut c,
            &format!(
                "SELECT r.ord, t.id FROM gpu_spatial_within('bf_gpu_p', {}, 0.75) r JOIN bf_gpu t ON t.ctid = r.ctid",
                array(&centres, "point")
            ),
        );
        let want = pairs(&mut c, &format!("SELECT q.ord, t.id FROM unnest({}) WITH ORDINALITY q(c, ord), LATERAL (SELECT id FROM bf_gist WHERE p <@ circle(q.c, 0.75)) t", array(&centres, "point")));
        assert_eq!(got, want, "gpu_spatial_within of {n} points");
        // kNN: the same distances per query, in order (ties may pick other rows).
        let k = 1 + rng.below(12) as i32;
        let dist = |c: &mut Client, sql: String| -> Vec<(i64, f64)> {
            c.query(&sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).iter().map(|r| (r.get(0), r.get(1))).collect()
        };
        let got = dist(
            &mut c,
            format!("SELECT ord, distance FROM gpu_spatial_knn('bf_gpu_p', {}, {k}) ORDER BY ord, distance", array(&centres, "point")),
        );
        let want = dist(&mut c, format!(
            "SELECT q.ord, t.d FROM unnest({}) WITH ORDINALITY q(c, ord), LATERAL (SELECT p <-> q.c AS d FROM bf_gist ORDER BY p <-> q.c LIMIT {k}) t ORDER BY 1, 2",
            array(&centres, "point")
        ));
        assert_eq!(got, want, "gpu_spatial_knn of {n} points, k = {k}");
        if n == 5000 {
            // The last pass ran in pieces.
            let sql = format!(
                "EXPLAIN ANALYZE SELECT r.ord, t.id FROM gpu_spatial_within('bf_gpu_p', {}, 0.75) r JOIN bf_gpu t ON t.ctid = r.ctid",
                array(&centres, "point")
            );
            let plan: Vec<String> = c.query(&sql, &[]).unwrap().iter().map(|r| r.get(0)).collect();
            let pieces = plan.iter().any(|l| l.contains("Extra Batch Pieces"));
            let small = c.query_one("SHOW gpuindex.batch_work_mem", &[]).unwrap().get::<_, String>(0) == "512kB";
            assert_eq!(pieces, small, "{plan:#?}");
        }
    }
    // The join, the outer side in several batches.
    c.batch_execute("CREATE TABLE bf_outer AS SELECT id, p, box(p, point(p[0] + 0.5, p[1] + 0.25)) AS b FROM bf_gist WHERE id % 23 = 0")
        .unwrap();
    let got = pairs(&mut c, "SELECT o.id::int8, t.id FROM gpu_spatial_join('bf_gpu_p', 'bf_outer', 'p', within => 0.5, batch => 100) j JOIN bf_outer o ON o.ctid = j.outer_ctid JOIN bf_gpu t ON t.ctid = j.inner_ctid");
    let want = pairs(&mut c, "SELECT o.id::int8, t.id FROM bf_outer o JOIN bf_gist t ON t.p <@ circle(o.p, 0.5)");
    assert_eq!(got, want, "gpu_spatial_join within");
    let got = pairs(&mut c, "SELECT o.id::int8, t.id FROM gpu_spatial_join('bf_gpu_p', 'bf_outer', 'b') j JOIN bf_outer o ON o.ctid = j.outer_ctid JOIN bf_gpu t ON t.ctid = j.inner_ctid");
    let want = pairs(&mut c, "SELECT o.id::int8, t.id FROM bf_outer o JOIN bf_gist t ON t.p <@ o.b");
    assert_eq!(got, want, "gpu_spatial_join boxes");
    c.batch_execute("DROP TABLE bf_gpu, bf_gist, bf_outer").unwrap();
}

#[test]
fn odd_points_equal_sequential_scans() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS sp_odd;
         CREATE TABLE sp_odd (id int, p point);
         INSERT INTO sp_odd SELECT g, point((g % 41) * 0.5, (g % 37) * 0.5) FROM generate_series(1, 5000) g;
         INSERT INTO sp_odd VALUES (-1, NULL), (-2, point('NaN', 3)), (-3, point(3, 'NaN')), (-4, point('Infinity', 1)),
           (-5, point('-Infinity', '-Infinity')), (-6, point('NaN', 'NaN')), (-7, point(1, 'Infinity'));
         CREATE INDEX sp_odd_p ON sp_odd USING gpu_spatial (p) WITH (leaf_capacity = 32);
         INSERT INTO sp_odd VALUES (-11, NULL), (-12, point('NaN', 2)), (-14, point('Infinity', 2));",
    )
    .unwrap();
    let preds = [
        "p <@ box '(0,0),(Infinity,2)'",
        "p <@ box '(-Infinity,-Infinity),(Infinity,Infinity)'",
        "p <@ box '(NaN,0),(1,1)'",
        "p <@ circle '((1,1),Infinity)'",
        "p <@ circle '((1,1),1.5)'",
        "p <@ circle '((NaN,1),1)'",
        "p ~= point '(NaN,3)'",
        "p ~= point '(Infinity,1)'",
        "p ~= point '(2.5,2)'",
    ];
    for p in preds {
        check_predicate(&mut c, "sp_odd", "sp_odd_p", p);
    }
    for (x, y) in [(3.0, 4.0), (-100.0, 7.0), (1e300, -1e300)] {
        let q = format!("SELECT p <-> point({x:?},{y:?}) FROM sp_odd ORDER BY p <-> point({x:?},{y:?})");
        set_index_only(&mut c, false);
        let got = distances(&mut c, &q);
        set_seq_only(&mut c);
        let want = distances(&mut c, &q);
        let same = |a: &Option<f64>, b: &Option<f64>| a == b || matches!((a, b), (Some(x), Some(y)) if x.is_nan() && y.is_nan());
        assert!(got.len() == want.len() && got.iter().zip(&want).all(|(a, b)| same(a, b)), "kNN order from ({x}, {y})");
    }
    c.batch_execute("DROP TABLE sp_odd").unwrap();
}

/// One far outlier among 100,000 uniform points: a bulk insert of 20,000
/// more merges into the tree (no leaf takes everything, no run is locked
/// whole), and every answer still equals the sequential scan's. Then the
/// same with a city 1e-12 wide (leaves stay bounded) and a point repeated
/// 100,000 times (the one leaf that grows).
#[test]
fn outliers_duplicates_and_cities_take_bulk_inserts() {
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS sp_skew;
         CREATE TABLE sp_skew (id int, p point);
         INSERT INTO sp_skew SELECT g, point((g::int8 * 7919 % 100003) / 100.003, (g::int8 * 104729 % 99991) / 99.991) FROM generate_series(1, 100000) g;
         INSERT INTO sp_skew VALUES (0, point(-1e15, 1e15));
         CREATE INDEX sp_skew_p ON sp_skew USING gpu_spatial (p);
         INSERT INTO sp_skew SELECT 200000 + g, point((g * 31 % 1009) * 0.99, (g * 17 % 997) * 1.003) FROM generate_series(1, 20000) g;
         INSERT INTO sp_skew SELECT 400000 + g, point(333 + (g % 1000) * 1e-12, 777 + (g / 1000) * 1e-12) FROM generate_series(1, 30000) g;",
    )
    .unwrap();
    // The 30,000 points 1e-12 apart split down to leaf_capacity (1024).
    let largest = |c: &mut postgres::Client| -> (i64, i64) {
        let r = c.query_one("SELECT largest_leaf_pages, largest_leaf_distinct FROM gpu_spatial_check('sp_skew_p')", &[]).unwrap();
        (r.get(0), r.get(1))
    };
    let (pages, _) = largest(&mut c);
    assert!(pages <= 4, "no leaf of distinct points is over 4 pages: {pages}");
    // A point repeated 100,000 times: the one leaf that grows (~300 pages).
    c.batch_execute("INSERT INTO sp_skew SELECT 300000 + g, point(0, 0) FROM generate_series(1, 100000) g").unwrap();
    let (pages, distinct) = largest(&mut c);
    assert_eq!(distinct, 1, "the largest leaf ({pages} pages) holds one repeated point");
    for p in [
        "p <@ box '(10,10),(20,30)'",
        "p <@ box '(-2e15,0),(0,2e15)'",
        "p <@ circle '((0,0),0)'",
        "p <@ box '(333,777),(333.0000000001,777.00000000001)'",
        "p ~= point '(333.000000000005,777.000000000002)'",
        "p <@ circle '((500,500),3)'",
    ] {
        check_predicate(&mut c, "sp_skew", "sp_skew_p", p);
    }
    c.batch_execute("DROP TABLE sp_skew").unwrap();
}

/// Merges free the pages of the runs they replace (and the old node run
/// and merged delta); VACUUM gives them to the free space map once no
/// snapshot can read them, and later merges and inserts reuse them: under
/// a steady churn of inserts and deletes the index stops growing.
#[test]
fn merges_recycle_the_pages_they_free() {
    // Its own database: snapshots of other tests would hold back the
    // horizon that lets VACUUM recycle.
    let mut c = connect("gpuindex_it_spatial_recycle");
    let mut rng = SplitMix64::new(99);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS sp_churn;
         CREATE TABLE sp_churn (id int, p point) WITH (autovacuum_enabled = off);",
    )
    .unwrap();
    let batch = 12_000;
    insert(&mut c, &["sp_churn"], &points(&mut rng, true, 5 * batch), 0);
    c.batch_execute("CREATE INDEX sp_churn_p ON sp_churn USING gpu_spatial (p)").unwrap();
    let size = |c: &mut Client| -> i64 { c.query_one("SELECT pg_relation_size('sp_churn_p') / 8192", &[]).unwrap().get(0) };
    let mut sizes = Vec::new();
    for round in 0..8 {
        insert(&mut c, &["sp_churn"], &points(&mut rng, true, batch), (5 + round) * batch);
        c.batch_execute(&format!("DELETE FROM sp_churn WHERE id < {}", (round + 1) * batch)).unwrap();
        // The VACUUM that merges frees pages; one past a new xid, once no
        // snapshot is older, recycles them: wait until all are.
        c.batch_execute("VACUUM sp_churn").unwrap();
        let freed = |c: &mut Client| -> i64 { c.query_one("SELECT freed_pages FROM gpu_spatial_check('sp_churn_p')", &[]).unwrap().get(0) };
        let free = vacuum_until_free(&mut c, "sp_churn", "sp_churn_p", freed);
        assert!(free > 0, "round {round}: nothing recycled");
        sizes.push(size(&mut c));
    }
    eprintln!("index pages after each round: {sizes:?}");
    assert!(sizes[7] * 2 <= sizes[1] * 3, "the index grew from {} to {} pages over six rounds: {sizes:?}", sizes[1], sizes[7]);
    c.query("SELECT * FROM gpu_spatial_check('sp_churn_p')", &[]).unwrap();
    for _ in 0..10 {
        check_predicate(&mut c, "sp_churn", "sp_churn_p", &predicate(&mut rng, true));
    }
    c.batch_execute("DROP TABLE sp_churn").unwrap();
}

/// Once no freed page waits, VACUUM skips its pass over every page (the
/// metapage's `settled`), and a merge that frees pages makes it read them
/// again: the index's buffer accesses of a VACUUM with nothing to do stay
/// a few pages.
#[test]
fn settled_indexes_skip_the_recycling_pass() {
    let mut c = connect("gpuindex_it_spatial_recycle");
    let mut rng = SplitMix64::new(98);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS sp_settle;
         CREATE TABLE sp_settle (id int, p point) WITH (autovacuum_enabled = off);",
    )
    .unwrap();
    insert(&mut c, &["sp_settle"], &points(&mut rng, true, 60_000), 0);
    c.batch_execute("CREATE INDEX sp_settle_p ON sp_settle USING gpu_spatial (p)").unwrap();
    // Buffer accesses of the index by one VACUUM (statistics flushed).
    let accesses = |c: &mut Client| -> i64 {
        let read = |c: &mut Client| -> i64 {
            c.batch_execute("SELECT pg_stat_force_next_flush()").unwrap();
            c.batch_execute("SELECT pg_stat_clear_snapshot()").unwrap();
            c.query_one("SELECT idx_blks_read + idx_blks_hit FROM pg_statio_user_indexes WHERE indexrelname = 'sp_settle_p'", &[])
                .unwrap()
                .get(0)
        };
        let before = read(c);
        c.batch_execute("VACUUM sp_settle").unwrap();
        read(c) - before
    };
    let pages: i64 = c.query_one("SELECT pg_relation_size('sp_settle_p') / 8192", &[]).unwrap().get(0);
    // A fresh build has nothing waiting.
    let idle = accesses(&mut c);
    assert!(idle * 4 < pages, "a VACUUM with nothing to do read {idle} of {pages} pages");
    // A merge frees pages: VACUUMs read every page until they are recycled.
    insert(&mut c, &["sp_settle"], &points(&mut rng, true, 12_000), 60_000);
    c.batch_execute("DELETE FROM sp_settle WHERE id < 12000").unwrap();
    c.batch_execute("VACUUM sp_settle").unwrap();
    let freed = |c: &mut Client| -> i64 { c.query_one("SELECT freed_pages FROM gpu_spatial_check('sp_settle_p')", &[]).unwrap().get(0) };
    assert!(freed(&mut c) > 0, "the merge freed nothing");
    let waiting = accesses(&mut c);
    assert!(waiting >= pages / 2, "a VACUUM with freed pages waiting read only {waiting} of {pages} pages");
    let free = vacuum_until_free(&mut c, "sp_settle", "sp_settle_p", freed);
    assert!(free > 0, "nothing recycled");
    // The pass that found nothing waiting settled it again.
    c.batch_execute("SELECT txid_current()").unwrap();
    c.batch_execute("VACUUM sp_settle").unwrap();
    let settled = accesses(&mut c);
    assert!(settled * 4 < pages, "a settled index's VACUUM read {settled} of {pages} pages");
    c.query("SELECT * FROM gpu_spatial_check('sp_settle_p')", &[]).unwrap();
    for _ in 0..5 {
        check_predicate(&mut c, "sp_settle", "sp_settle_p", &predicate(&mut rng, true));
    }
    c.batch_execute("DROP TABLE sp_settle").unwrap();
}

/// A merge cut short before its metapage record (as by a crash there:
/// gpuindex.debug_interrupt_merges) leaves the frozen delta, and leaves
/// that already hold some of its entries; the next merge finishes it
/// without adding them twice or miscounting them (the crash test found
/// the metapage short by what the cut merge had appended).
#[test]
fn interrupted_merges_are_finished_by_the_next_one() {
    let mut c = connect(DB);
    let mut rng = SplitMix64::new(7);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS sp_cut;
         CREATE TABLE sp_cut (id int, p point) WITH (autovacuum_enabled = off);",
    )
    .unwrap();
    insert(&mut c, &["sp_cut"], &points(&mut rng, true, 20_000), 0);
    c.batch_execute("CREATE INDEX sp_cut_p ON sp_cut USING gpu_spatial (p) WITH (leaf_capacity = 64, delta_limit = 1000)").unwrap();
    let counts = |c: &mut Client| -> (i64, i64, i64) {
        let r = c
            .query_one("SELECT tree_entries, chain_entries, (SELECT count(*) FROM sp_cut) FROM gpu_spatial_check('sp_cut_p')", &[])
            .unwrap();
        (r.get(0), r.get(1), r.get(2))
    };
    for round in 0..3 {
        // Committed rows whose entries wait in the delta: some leaves take
        // them in place, some split.
        insert(&mut c, &["sp_cut"], &points(&mut rng, true, 3_000), 20_000 + round * 3_000);
        let err = c
            .batch_execute("SET gpuindex.debug_interrupt_merges = on; SELECT gpu_spatial_merge('sp_cut_p')")
            .expect_err("the merge was to be interrupted");
        assert!(err.to_string().contains("interrupted") || format!("{err:?}").contains("interrupted"), "{err:?}");
        c.batch_execute("RESET gpuindex.debug_interrupt_merges").unwrap();
        // The leaves hold what the frozen delta also holds (the check
        // allows that), and scans return each row once.
        let (tree, _, rows) = counts(&mut c);
        assert!(tree > 20_000 + round as i64 * 3_000, "round {round}: the cut merge wrote nothing into the leaves ({tree} of {rows})");
        for _ in 0..5 {
            check_predicate(&mut c, "sp_cut", "sp_cut_p", &predicate(&mut rng, true));
        }
        let merged: i64 = c.query_one("SELECT gpu_spatial_merge('sp_cut_p')", &[]).unwrap().get(0);
        assert_eq!(merged, 3_000, "round {round}: the next merge took the frozen delta");
        assert_eq!(counts(&mut c), (rows, 0, rows), "round {round}: tree, delta and table counts after the merge");
        for _ in 0..5 {
            check_predicate(&mut c, "sp_cut", "sp_cut_p", &predicate(&mut rng, true));
        }
    }
    c.batch_execute("DROP TABLE sp_cut").unwrap();
}

/// An index-only scan that has read entries holds VACUUM back from
/// finishing their removal (interlock.rs): the heap's tuples are not
/// freed, nor their pages marked all-visible, under the open cursor; and
/// scans that start meanwhile are not held behind that VACUUM.
#[test]
fn vacuum_waits_for_index_only_scans() {
    // Its own database: other tests' snapshots would keep VACUUM from
    // removing anything (and so from waiting).
    const DB: &str = "gpuindex_it_spatial_interlock";
    let mut a = connect(DB);
    a.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS sp_lock;
         CREATE TABLE sp_lock (id int, p point) WITH (autovacuum_enabled = off);
         INSERT INTO sp_lock SELECT g, point(g % 100, g / 100) FROM generate_series(0, 19999) g;
         CREATE INDEX sp_lock_p ON sp_lock USING gpu_spatial (p);
         ANALYZE sp_lock;
         BEGIN;",
    )
    .unwrap();
    a.batch_execute("DELETE FROM sp_lock WHERE id % 2 = 0").unwrap();
    let deleted: i64 = a.query_one("SELECT txid_current()", &[]).unwrap().get(0);
    a.batch_execute("COMMIT").unwrap();
    let q = "SELECT p[0] FROM sp_lock WHERE p <@ box '(0,0),(49,199)'";
    let first = gpuindex_tests::open_cursor_after(&mut a, deleted, q);
    let vacuum = std::thread::spawn(|| connect(DB).batch_execute("VACUUM sp_lock"));
    let mut c = connect(DB);
    let waiting = |c: &mut Client| -> i64 {
        c.query_one("SELECT count(*) FROM pg_locks WHERE locktype = 'page' AND relation = 'sp_lock_p'::regclass AND NOT granted", &[])
            .unwrap()
            .get(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while waiting(&mut c) == 0 {
        if vacuum.is_finished() {
            panic!("VACUUM did not wait for the index-only cursor: {:?}", vacuum.join());
        }
        assert!(std::time::Instant::now() < deadline, "VACUUM neither waited nor finished");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A new index-only scan runs beside the waiting VACUUM.
    set_index_only(&mut c, false);
    c.batch_execute("SET statement_timeout = '10s'").unwrap();
    let n: i64 = c.query_one("SELECT count(*) FROM sp_lock WHERE p <@ box '(0,0),(49,199)'", &[]).unwrap().get(0);
    assert_eq!(n, 5_000, "live rows in the box");
    assert!(!vacuum.is_finished(), "VACUUM finished under the open cursor");
    let rest = a.query("FETCH ALL FROM cur", &[]).unwrap().len();
    assert_eq!(first + rest, 5_000, "the cursor's rows");
    a.batch_execute("COMMIT").unwrap();
    vacuum.join().unwrap().unwrap();
    c.query("SELECT * FROM gpu_spatial_check('sp_lock_p')", &[]).unwrap();
    c.batch_execute("DROP TABLE sp_lock").unwrap();
}

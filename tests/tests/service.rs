//! The GPU service against a live server (gpuindex preloaded, so the
//! service runs: on the CPU here, on the GPU where there is one):
//! gpu_metric kNN scans and batch functions through it equal sequential
//! scans, through inserts, deletes and the VACUUM that rebuilds (a new
//! image shipped, the old one released); concurrent backends share
//! epochs; cancel, statement and service timeouts, a terminated backend
//! and a restarted service leave no request slot behind and no wrong row;
//! without the preload, `gpuindex.service = on` is a clear ERROR.

use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::{check_join, connect, error_of, server_has_gpu, set_index_only, set_seq_only};
use postgres::Client;
use std::time::{Duration, Instant};

const DB: &str = "gpuindex_it_service";

/// The tests here change the service's settings for the whole server:
/// one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn literal(v: &[f32]) -> String {
    let parts: Vec<String> = v.iter().map(|x| format!("{x:?}")).collect();
    format!("'{{{}}}'::real[]", parts.join(","))
}

fn vectors(rng: &mut SplitMix64, dim: usize, n: usize, clustered: bool) -> Vec<Vec<f32>> {
    (0..n)
        .map(|i| {
            let centre = if clustered { (i % 7) as f64 * 3.0 } else { 0.0 };
            (0..dim).map(|_| (centre + rng.unit() * 2.0 - 1.0) as f32).collect()
        })
        .collect()
}

fn load(c: &mut Client, table: &str, vs: &[Vec<f32>], first_id: usize) {
    let rows: Vec<String> = vs.iter().enumerate().map(|(i, v)| format!("({}, {})", first_id + i, literal(v))).collect();
    for chunk in rows.chunks(1000) {
        c.batch_execute(&format!("INSERT INTO {table} (id, v) VALUES {}", chunk.join(","))).unwrap();
    }
}

fn rows(c: &mut Client, sql: &str) -> Vec<(i32, f64)> {
    c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// Distances at every rank, and the rows but for ties at the last one.
fn same(got: &[(i32, f64)], want: &[(i32, f64)], what: &str) {
    let dist = |r: &[(i32, f64)]| r.iter().map(|x| x.1).collect::<Vec<_>>();
    assert_eq!(dist(got), dist(want), "{what}: distances by rank");
    let last = want.last().map(|x| x.1);
    let ids = |r: &[(i32, f64)]| {
        let mut v: Vec<i32> = r.iter().filter(|x| Some(x.1) != last).map(|x| x.0).collect();
        v.sort();
        v
    };
    assert_eq!(ids(got), ids(want), "{what}: rows");
}

fn service_epoch(c: &mut Client) -> Option<String> {
    c.query_one("SELECT service FROM gpuindex_last_batch()", &[]).unwrap().get(0)
}

/// `ORDER BY v op q LIMIT k` through the service equals the sequential
/// scan, and the service ran it.
fn check_scan(c: &mut Client, table: &str, op: &str, q: &str, filter: &str, limit: usize) {
    let sql = format!("SELECT id, v {op} {q} FROM {table} {filter} ORDER BY v {op} {q} LIMIT {limit}");
    set_seq_only(c);
    let want = rows(c, &sql);
    set_index_only(c, false);
    c.batch_execute("SET gpuindex.service = on").unwrap();
    let got = rows(c, &sql);
    assert!(service_epoch(c).is_some(), "{sql}: not through the service");
    c.batch_execute("RESET gpuindex.service").unwrap();
    same(&got, &want, &format!("{table} {op} {filter} LIMIT {limit}"));
}

fn check_batch(c: &mut Client, table: &str, index: &str, op: &str, queries: &[String]) {
    set_seq_only(c);
    let mut want = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        want.extend(rows(c, &format!("SELECT {}, v {op} {q} FROM {table} WHERE v IS NOT NULL ORDER BY 2 LIMIT 10", i + 1)));
    }
    let matrix = format!("ARRAY[{}]::real[]", queries.iter().map(|q| format!("ARRAY(SELECT unnest({q}))")).collect::<Vec<_>>().join(","));
    c.batch_execute("SET gpuindex.service = on").unwrap();
    let got = rows(c, &format!("SELECT ord::int, distance FROM gpu_metric_knn('{index}', {matrix}, 10) ORDER BY ord, distance"));
    assert!(service_epoch(c).is_some(), "{index}: gpu_metric_knn not through the service");
    c.batch_execute("RESET gpuindex.service").unwrap();
    let dist = |r: &[(i32, f64)]| r.iter().map(|x| (x.0, x.1)).collect::<Vec<_>>();
    assert_eq!(dist(&got), dist(&want), "{index}: batch (query, distance) by rank");
}

fn images_of(c: &mut Client, index: &str) -> Vec<i64> {
    c.query(&format!("SELECT generation FROM gpuindex_service_images() WHERE index = '{index}'::regclass"), &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[test]
fn scans_through_the_service_equal_sequential_scans() {
    let _serial = serial();
    let mut c = connect(DB);
    let table = "sv_scan";
    c.batch_execute(&format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int, v real[])")).unwrap();
    let mut rng = SplitMix64::new(5);
    let first = vectors(&mut rng, 16, 12_000, true);
    load(&mut c, table, &first, 0);
    c.batch_execute(&format!("INSERT INTO {table} SELECT -g, NULL FROM generate_series(1, 3) g")).unwrap();
    let ops = [("<->", "real_l2_ops"), ("<+>", "real_l1_ops"), ("<=>", "real_cosine_ops")];
    for (_, class) in ops {
        c.batch_execute(&format!("CREATE INDEX {table}_{class} ON {table} USING gpu_metric (v {class}) WITH (delta_limit = 1)")).unwrap();
    }
    let round = |c: &mut Client, rng: &mut SplitMix64, existing: &[f32]| {
        let queries: Vec<String> = vectors(rng, 16, 3, true).iter().chain([&existing.to_vec()]).map(|v| literal(v)).collect();
        for (op, class) in ops {
            for q in &queries {
                check_scan(c, table, op, q, "", 10);
                // Past the first answers: the walk asks the service again.
                check_scan(c, table, op, q, "WHERE id % 3 <> 0", 700);
            }
            check_batch(c, table, &format!("{table}_{class}"), op, &queries);
        }
    };
    round(&mut c, &mut rng, &first[3]);
    let before = images_of(&mut c, &format!("{table}_real_l2_ops"));
    assert_eq!(before.len(), 1, "one image of the index in the service: {before:?}");
    // Inserts (the delta, searched in the backend), deletes, then the
    // VACUUM that rebuilds: a new generation, shipped again.
    load(&mut c, table, &vectors(&mut rng, 16, 2_000, true), 20_000);
    c.batch_execute(&format!("DELETE FROM {table} WHERE id % 5 = 1")).unwrap();
    round(&mut c, &mut rng, &first[4]);
    c.batch_execute(&format!("VACUUM {table}")).unwrap();
    round(&mut c, &mut rng, &first[5]);
    let after = images_of(&mut c, &format!("{table}_real_l2_ops"));
    assert_eq!(after.len(), 1, "the old image is released: {after:?}");
    assert!(after[0] > before[0], "VACUUM rebuilt the tree: generation {before:?} -> {after:?}");
}

/// `gpu_spatial_knn`, `gpu_spatial_range` and `gpu_spatial_within`
/// through the service equal the session's own search and the sequential
/// scan: skewed points (a dense cluster, duplicates, a far outlier),
/// through inserts, deletes and VACUUM; `auto` keeps a kNN batch in the
/// session that holds its copy of the tree.
/// A probe function's rows and `= ANY`'s through the service equal the
/// session's and the sequential scan's, and the service answered them
/// (its count of queries grows: a gpu_learned probe's last batch is its
/// delta's, in the session).
fn check_probes(c: &mut Client, function: &str, index: &str, table: &str, column: &str, keys: &str, when: &str) {
    let probe = |c: &mut Client| -> Vec<(i64, String)> {
        let sql = format!("SELECT ord, ctid::text FROM {function}('{index}', {keys}) ORDER BY 1, 2");
        c.query(&sql, &[]).unwrap().iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    let any = |c: &mut Client| -> Vec<i32> {
        let sql = format!("SELECT id FROM {table} WHERE {column} = ANY({keys}) ORDER BY id");
        c.query(&sql, &[]).unwrap().iter().map(|r| r.get(0)).collect()
    };
    set_seq_only(c);
    let want = any(c);
    set_index_only(c, false);
    c.batch_execute("SET gpuindex.service = off").unwrap();
    let own = probe(c);
    assert!(!own.is_empty(), "{when}");
    c.batch_execute("SET gpuindex.service = on").unwrap();
    let before = stats(c, "queries");
    assert_eq!(probe(c), own, "{when}: {function}");
    let probed = stats(c, "queries");
    assert!(probed > before, "{when}: {function} not through the service");
    assert_eq!(any(c), want, "{when}: = ANY");
    assert!(stats(c, "queries") > probed, "{when}: = ANY not through the service");
    c.batch_execute("RESET gpuindex.service").unwrap();
}

/// gpu_btree probes (`gpu_btree_probe`, `= ANY`) through the service's
/// copy of the mirror equal the session's and the sequential scan's:
/// duplicates, a long run of one key, the extremes, misses; after inserts
/// (splits: a new image) and after deletes and VACUUM (pages deleted and
/// recycled under hints of the image the service holds). Then gpu_learned's
/// run predictions, through a delta and the merge that replaces the run.
#[test]
fn btree_probes_through_the_service_equal_the_sessions() {
    let _serial = serial();
    let mut c = connect(DB);
    c.batch_execute(
        "DROP TABLE IF EXISTS sv_keys; CREATE TABLE sv_keys (id int, k int8);
         SELECT setseed(0.5);
         INSERT INTO sv_keys SELECT g, (random() * 20000)::int8 FROM generate_series(1, 60000) g;
         INSERT INTO sv_keys SELECT 100000 + g, 777 FROM generate_series(1, 3000) g;
         INSERT INTO sv_keys VALUES (200000, NULL), (200001, -9223372036854775808), (200002, 9223372036854775807);
         CREATE INDEX sv_keys_k ON sv_keys USING gpu_btree (k);",
    )
    .unwrap();
    let keys = "(SELECT array_agg((g * 7 % 25000)::int8 - 100) FROM generate_series(1, 5000) g)
                || ARRAY[777, -9223372036854775808, 9223372036854775807]::int8[]";
    let check = |c: &mut Client, when: &str| check_probes(c, "gpu_btree_probe", "sv_keys_k", "sv_keys", "k", keys, when);
    check(&mut c, "at first");
    assert!(!images_of(&mut c, "sv_keys_k").is_empty(), "the service holds the mirror");
    c.batch_execute("INSERT INTO sv_keys SELECT 300000 + g, (random() * 25000)::int8 FROM generate_series(1, 40000) g").unwrap();
    check(&mut c, "after inserts");
    c.batch_execute("DELETE FROM sv_keys WHERE id % 3 = 0 OR k BETWEEN 1000 AND 9000").unwrap();
    c.batch_execute("VACUUM sv_keys").unwrap();
    check(&mut c, "after deletes and VACUUM");
    c.batch_execute("INSERT INTO sv_keys SELECT 400000 + g, (random() * 10000)::int8 FROM generate_series(1, 20000) g").unwrap();
    check(&mut c, "after pages were reused");
    // gpu_learned: the run's predictions through the service (its delta,
    // a gpu_btree tree, in the session), through inserts into the delta
    // and the VACUUM that merges it (a new run: a new image).
    c.batch_execute("DROP INDEX sv_keys_k; CREATE INDEX sv_keys_l ON sv_keys USING gpu_learned (k)").unwrap();
    let learned = |c: &mut Client, when: &str| check_probes(c, "gpu_learned_probe", "sv_keys_l", "sv_keys", "k", keys, when);
    learned(&mut c, "gpu_learned");
    c.batch_execute("INSERT INTO sv_keys SELECT 500000 + g, (random() * 30000)::int8 FROM generate_series(1, 30000) g").unwrap();
    learned(&mut c, "gpu_learned, a delta");
    let before = images_of(&mut c, "sv_keys_l");
    c.batch_execute("VACUUM sv_keys").unwrap();
    learned(&mut c, "gpu_learned, merged");
    assert_ne!(images_of(&mut c, "sv_keys_l"), before, "a merge makes a new image");
    c.batch_execute("DROP TABLE sv_keys").unwrap();
}

/// gpu_art probes (`gpu_art_probe`, `= ANY`) through the service's copy
/// of the mirror equal the session's and the sequential scan's: keys
/// sharing long prefixes, duplicates, the empty string, misses; a probe
/// past the longest the service takes keeps the batch in the session;
/// after inserts (splits: a new image) and after deletes and VACUUM.
#[test]
fn art_probes_through_the_service_equal_the_sessions() {
    let _serial = serial();
    let mut c = connect(DB);
    c.batch_execute(
        "DROP TABLE IF EXISTS sv_urls; CREATE TABLE sv_urls (id int, u text COLLATE \"C\");
         SELECT setseed(0.25);
         INSERT INTO sv_urls SELECT g, 'https://example.com/' || (random() * 20000)::int || '/page' FROM generate_series(1, 40000) g;
         INSERT INTO sv_urls SELECT 100000 + g, 'https://example.com/hot' FROM generate_series(1, 2000) g;
         INSERT INTO sv_urls VALUES (200000, ''), (200001, NULL);
         CREATE INDEX sv_urls_u ON sv_urls USING gpu_art (u);",
    )
    .unwrap();
    let keys = "(SELECT array_agg('https://example.com/' || (g * 7 % 25000) || '/page') FROM generate_series(1, 3000) g)
                || ARRAY['https://example.com/hot', '', 'nope']";
    let check = |c: &mut Client, when: &str| {
        check_probes(c, "gpu_art_probe", "sv_urls_u", "sv_urls", "u", keys, when);
        // A probe longer than the service takes: the session's own walk.
        let long = format!("SELECT ord, ctid::text FROM gpu_art_probe('sv_urls_u', {keys} || ARRAY[repeat('x', 300)]) ORDER BY 1, 2");
        let rows = |c: &mut Client| -> Vec<(i64, String)> { c.query(&long, &[]).unwrap().iter().map(|r| (r.get(0), r.get(1))).collect() };
        c.batch_execute("SET gpuindex.service = off").unwrap();
        let own = rows(c);
        c.batch_execute("SET gpuindex.service = on").unwrap();
        let queries = stats(c, "queries");
        assert_eq!(rows(c), own, "{when}: with a long probe");
        assert_eq!(stats(c, "queries"), queries, "{when}: a long probe went to the service");
        c.batch_execute("RESET gpuindex.service").unwrap();
    };
    check(&mut c, "at first");
    assert!(!images_of(&mut c, "sv_urls_u").is_empty(), "the service holds the mirror");
    c.batch_execute("INSERT INTO sv_urls SELECT 300000 + g, 'https://example.com/' || (random() * 25000)::int || '/page' FROM generate_series(1, 30000) g")
        .unwrap();
    check(&mut c, "after inserts");
    c.batch_execute("DELETE FROM sv_urls WHERE id % 3 = 0").unwrap();
    c.batch_execute("VACUUM sv_urls").unwrap();
    check(&mut c, "after deletes and VACUUM");
    c.batch_execute("DROP TABLE sv_urls").unwrap();
}

#[test]
fn spatial_batches_through_the_service_equal_the_sessions() {
    let _serial = serial();
    let mut c = connect(DB);
    c.batch_execute(
        "DROP TABLE IF EXISTS sv_pts; CREATE TABLE sv_pts (id int, p point);
         SELECT setseed(0.75);
         INSERT INTO sv_pts SELECT g, point(random() * 1000, random() * 1000) FROM generate_series(1, 15000) g;
         INSERT INTO sv_pts SELECT 20000 + g, point(500 + random(), 500 + random()) FROM generate_series(1, 3000) g;
         INSERT INTO sv_pts SELECT 30000 + g, point(250, 750) FROM generate_series(1, 500) g;
         INSERT INTO sv_pts VALUES (40000, point(-1e15, 1e15)), (40001, NULL);
         CREATE INDEX sv_pts_p ON sv_pts USING gpu_spatial (p);",
    )
    .unwrap();
    let centres = "ARRAY[point(500.5, 500.5), point(250, 750), point(0, 0), point(999, 1), point(-1e15, 1e15), point(1e300, -1e300), point(250.001, 750)]";
    let batch = |c: &mut Client, k: i32| -> Vec<(i64, String, f64)> {
        c.query(
            &format!("SELECT ord, ctid::text, distance FROM gpu_spatial_knn('sv_pts_p', {centres}, {k}) ORDER BY ord, distance, ctid"),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
    };
    let seq = |c: &mut Client, k: i32| -> Vec<(i64, String, f64)> {
        c.query(
            &format!(
                "SELECT q.ord, n.ctid::text, n.d FROM unnest({centres}) WITH ORDINALITY q(c, ord)
                 CROSS JOIN LATERAL (SELECT ctid, p <-> q.c AS d FROM sv_pts WHERE p IS NOT NULL ORDER BY p <-> q.c, ctid LIMIT {k}) n
                 ORDER BY 1, 3, 2"
            ),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
    };
    let check = |c: &mut Client, when: &str| {
        for k in [1, 10, 700] {
            set_seq_only(c);
            let want = seq(c, k);
            set_index_only(c, false);
            c.batch_execute("SET gpuindex.service = off").unwrap();
            let own = batch(c, k);
            c.batch_execute("SET gpuindex.service = on").unwrap();
            let served = batch(c, k);
            assert!(service_epoch(c).is_some(), "{when}, k = {k}: gpu_spatial_knn not through the service");
            c.batch_execute("RESET gpuindex.service").unwrap();
            // Ties at the k-th distance may pick different rows: compare
            // distances by rank, and rows where no tie crosses the cut.
            let ranks = |r: &[(i64, String, f64)]| r.iter().map(|x| (x.0, x.2.to_bits())).collect::<Vec<_>>();
            assert_eq!(ranks(&served), ranks(&want), "{when}, k = {k}: service against the sequential scan");
            assert_eq!(served, own, "{when}, k = {k}: service against the session");
        }
    };
    // Ranges: a box holding every point answers more rows than the
    // request has room for at first (asked again with room for them).
    let ranges = |c: &mut Client, when: &str| {
        for (f, arg) in [
            (
                "gpu_spatial_range",
                "ARRAY[box(point(400, 400), point(600, 600)), box(point(-1e16, -1e16), point(1e16, 1e16)), box(point(250, 750), point(250, 750)), box(point(2000, 2000), point(3000, 3000))]",
            ),
            ("gpu_spatial_within", "ARRAY[circle(point(500.5, 500.5), 0.3), circle(point(0, 0), 40), circle(point(-1e15, 1e15), 1)]"),
        ] {
            let q = |c: &mut Client, sql: &str| -> Vec<(i64, String)> {
                c.query(sql, &[]).unwrap().iter().map(|r| (r.get(0), r.get(1))).collect()
            };
            set_seq_only(c);
            let want = q(c, &format!("SELECT q.ord, t.ctid::text FROM unnest({arg}) WITH ORDINALITY q(s, ord) JOIN sv_pts t ON t.p <@ q.s ORDER BY 1, 2"));
            set_index_only(c, false);
            let sql = format!("SELECT ord, ctid::text FROM {f}('sv_pts_p', {arg}) ORDER BY 1, 2");
            c.batch_execute("SET gpuindex.service = off").unwrap();
            let own = q(c, &sql);
            c.batch_execute("SET gpuindex.service = on").unwrap();
            let kept = stats(c, "answers_kept");
            let served = q(c, &sql);
            assert!(service_epoch(c).is_some(), "{when}: {f} not through the service");
            if f == "gpu_spatial_range" {
                assert!(stats(c, "answers_kept") > kept, "{when}: the answer past its room was searched again");
            }
            // In pieces (gpuindex.batch_work_mem: 21,845 rows, fewer than
            // the batch's, more than any one query's), each through the
            // service.
            c.batch_execute("SET gpuindex.batch_work_mem = '1MB'").unwrap();
            let pieces = q(c, &sql);
            assert!(service_epoch(c).is_some(), "{when}: {f} in pieces not through the service");
            // (The last piece asked fewer queries than the batch has; the
            // bound counts index entries, dead ones too: checked while the
            // index holds none.)
            let last: i64 = c.query_one("SELECT queries FROM gpuindex_last_batch()", &[]).unwrap().get(0);
            let asked = arg.matches("point(").count() / if f == "gpu_spatial_range" { 2 } else { 1 };
            if when == "built" {
                assert_eq!((last as usize) < asked, want.len() > 21_845, "{when}: {f}: {} rows, last batch of {last}", want.len());
            }
            c.batch_execute("RESET gpuindex.batch_work_mem; RESET gpuindex.service").unwrap();
            assert_eq!(pieces, want, "{when}: {f} in pieces through the service against the sequential scan");
            assert!(f != "gpu_spatial_range" || want.len() > 8_192, "{when}: {f}: {} rows, within the first room", want.len());
            assert_eq!(served, want, "{when}: {f} through the service against the sequential scan");
            assert_eq!(own, want, "{when}: {f} in the session against the sequential scan");
        }
    };
    // Single `ORDER BY p <-> q` scans through the service (rounds of
    // doubling k, the delta merged in, ties at a round's end held back,
    // the page walk past every point for the NULL).
    let scans = |c: &mut Client, when: &str| {
        for q in ["point(500.5, 500.5)", "point(250, 750)", "point(-1e15, 1e15)", "point(999, 1)"] {
            for limit in [5, 40, 700, 30_000] {
                let sql = format!("SELECT id, coalesce(p <-> {q}, -1) FROM sv_pts ORDER BY p <-> {q} LIMIT {limit}");
                set_seq_only(c);
                let want = rows(c, &sql);
                set_index_only(c, false);
                c.batch_execute("SET gpuindex.service = on").unwrap();
                let got = rows(c, &sql);
                assert!(service_epoch(c).is_some(), "{when}: {sql}: not through the service");
                c.batch_execute("RESET gpuindex.service").unwrap();
                same(&got, &want, &format!("{when}: {sql}"));
            }
        }
    };
    check(&mut c, "built");
    ranges(&mut c, "built");
    scans(&mut c, "built");
    c.batch_execute(
        "INSERT INTO sv_pts SELECT 50000 + g, point(random() * 1000, random() * 1000) FROM generate_series(1, 800) g;
         DELETE FROM sv_pts WHERE id % 4 = 1 OR id BETWEEN 30000 AND 30400;",
    )
    .unwrap();
    check(&mut c, "after inserts and deletes");
    ranges(&mut c, "after inserts and deletes");
    scans(&mut c, "after inserts and deletes");
    c.batch_execute("VACUUM sv_pts").unwrap();
    check(&mut c, "after VACUUM");
    ranges(&mut c, "after VACUUM");
    scans(&mut c, "after VACUUM");
    // A session holding its copy searches it under auto (the service's
    // round trip buys nothing there), counted as declined.
    let on_gpu = service_on_gpu(&mut c);
    if on_gpu {
        c.batch_execute("SET gpuindex.service = off").unwrap();
        batch(&mut c, 10);
        c.batch_execute("SET gpuindex.service = auto").unwrap();
        let declined = stats(&mut c, "declined");
        batch(&mut c, 10);
        assert!(service_epoch(&mut c).is_none(), "auto sent a batch the session could answer as soon");
        assert!(stats(&mut c, "declined") > declined);
        c.batch_execute("RESET gpuindex.service").unwrap();
    }
    // kNN batches of 255 and 256 random centres (a sixteenth of
    // gpuindex.gpu_min_batch, the service's GPU threshold for kNN): the
    // session's answers either way; a service with a GPU searches 256 there.
    c.batch_execute(
        "DROP TABLE IF EXISTS sv_centres; CREATE TABLE sv_centres AS
         SELECT n, (SELECT array_agg(point(random() * 1000, random() * 1000)) FROM generate_series(1, n)) AS cs
         FROM (VALUES (255), (256)) v(n)",
    )
    .unwrap();
    for n in [255, 256] {
        let sql = format!(
            "SELECT ord, ctid::text, distance FROM gpu_spatial_knn('sv_pts_p', (SELECT cs FROM sv_centres WHERE n = {n}), 10) ORDER BY ord, distance, ctid"
        );
        let q = |c: &mut Client| -> Vec<(i64, String, f64)> {
            c.query(&sql, &[]).unwrap().iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
        };
        c.batch_execute("SET gpuindex.service = off").unwrap();
        let own = q(&mut c);
        c.batch_execute("SET gpuindex.service = on").unwrap();
        let served = q(&mut c);
        let device: String = c.query_one("SELECT device FROM gpuindex_last_batch()", &[]).unwrap().get(0);
        c.batch_execute("RESET gpuindex.service").unwrap();
        assert_eq!(served.len(), n * 10, "{n} centres");
        assert_eq!(served, own, "{n} centres: service ({device}) against the session");
        if on_gpu {
            assert_eq!(device, if n == 256 { "gpu" } else { "cpu" }, "{n} centres on the service");
        }
    }
    no_busy_slots(&mut c);
}

/// Whether the service runs on a GPU.
fn service_on_gpu(c: &mut Client) -> bool {
    stats(c, "(device = 'gpu')::int") == 1
}

fn stats(c: &mut Client, column: &str) -> i64 {
    c.query_one(&format!("SELECT ({column})::bigint FROM gpuindex_service_stats()"), &[]).unwrap().get::<_, Option<i64>>(0).unwrap_or(0)
}

/// Waits until no request slot is in use (the service frees withdrawn
/// requests when the epoch holding them ends).
fn no_busy_slots(c: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while stats(c, "busy_slots") != 0 {
        assert!(Instant::now() < deadline, "request slots left busy");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn set_system(c: &mut Client, setting: &str, value: Option<&str>) {
    match value {
        Some(v) => c.batch_execute(&format!("ALTER SYSTEM SET {setting} = '{v}'")).unwrap(),
        None => c.batch_execute(&format!("ALTER SYSTEM RESET {setting}")).unwrap(),
    }
    c.batch_execute("SELECT pg_reload_conf()").unwrap();
    // The worker reads the file at its next wake (at most a second).
    std::thread::sleep(Duration::from_millis(1500));
}

/// A session that sends its searches to the service.
fn service_session() -> Client {
    let mut c = connect(DB);
    set_index_only(&mut c, false);
    c.batch_execute("SET gpuindex.service = on").unwrap();
    c
}

/// The faults' table and query, with the sequential scan's answer, in
/// `c` set to search through the service (the image shipped).
fn faults_setup(c: &mut Client) -> (String, Vec<(i32, f64)>) {
    let (_table, sql) = table_for_faults(c);
    set_seq_only(c);
    let want = rows(c, &sql);
    set_index_only(c, false);
    c.batch_execute("SET gpuindex.service = on").unwrap();
    same(&rows(c, &sql), &want, "through the service");
    (sql, want)
}

fn table_for_faults(c: &mut Client) -> (String, String) {
    let table = "sv_faults";
    c.batch_execute(&format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int, v real[])")).unwrap();
    let mut rng = SplitMix64::new(9);
    load(c, table, &vectors(&mut rng, 8, 11_000, false), 0);
    c.batch_execute(&format!("CREATE INDEX ON {table} USING gpu_metric (v)")).unwrap();
    let q = literal(&vectors(&mut rng, 8, 1, false)[0]);
    (table.to_string(), format!("SELECT id, v <-> {q} FROM {table} ORDER BY v <-> {q} LIMIT 10"))
}

/// Queries of concurrent backends share epochs and get their own answers.
#[test]
fn concurrent_backends_share_epochs() {
    let _serial = serial();
    let mut c = connect(DB);
    let table = "sv_concurrent";
    c.batch_execute(&format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int, v real[])")).unwrap();
    let mut rng = SplitMix64::new(13);
    load(&mut c, table, &vectors(&mut rng, 12, 15_000, true), 0);
    c.batch_execute(&format!("CREATE INDEX ON {table} USING gpu_metric (v)")).unwrap();
    let queries: Vec<String> = vectors(&mut rng, 12, 64, true).iter().map(|v| literal(v)).collect();
    set_seq_only(&mut c);
    let sql = |q: &String| format!("SELECT id, v <-> {q} FROM sv_concurrent ORDER BY v <-> {q} LIMIT 10");
    let want: Vec<Vec<(i32, f64)>> = queries.iter().map(|q| rows(&mut c, &sql(q))).collect();
    // Ship the image first, then let epochs wait for company.
    set_index_only(&mut c, false);
    c.batch_execute("SET gpuindex.service = on").unwrap();
    rows(&mut c, &sql(&queries[0]));
    set_system(&mut c, "gpuindex.epoch_us", Some("20000"));
    let before = stats(&mut c, "epochs");
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (queries, want) = (queries.clone(), want.clone());
            std::thread::spawn(move || {
                let mut c = connect(DB);
                set_index_only(&mut c, false);
                c.batch_execute("SET gpuindex.service = on").unwrap();
                for i in (t..queries.len()).step_by(8) {
                    let got = rows(&mut c, &sql(&queries[i]));
                    same(&got, &want[i], &format!("backend {t}, query {i}"));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let epochs = stats(&mut c, "epochs") - before;
    set_system(&mut c, "gpuindex.epoch_us", None);
    assert!(epochs < 64, "64 queries of 8 backends took {epochs} epochs: none shared");
    assert!(stats(&mut c, "queries_per_epoch_max") > 1);
    no_busy_slots(&mut c);
}

/// Cancel, statement timeout, the service's timeout, a terminated backend
/// and a restarted service: each request is withdrawn or answered, no
/// slot stays busy, and the next query is right.
#[test]
fn faults_leave_no_request_behind() {
    let _serial = serial();
    let mut c = connect(DB);
    let (sql, want) = faults_setup(&mut c);
    set_system(&mut c, "gpuindex.debug_service_delay", Some("400"));

    // statement_timeout while the service holds the request.
    c.batch_execute("SET statement_timeout = 100").unwrap();
    let e = c.query(&sql, &[]).expect_err("statement timeout");
    assert_eq!(error_of(&e).0, "57014", "{e:?}");
    c.batch_execute("RESET statement_timeout").unwrap();

    // The service's own timeout.
    c.batch_execute("SET gpuindex.service_timeout = 50").unwrap();
    let e = c.query(&sql, &[]).expect_err("service timeout");
    let (_, msg, hint) = error_of(&e);
    assert!(msg.contains("no answer within gpuindex.service_timeout"), "{msg}");
    assert!(hint.unwrap_or_default().contains("gpuindex.service = auto"));
    c.batch_execute("RESET gpuindex.service_timeout").unwrap();

    // A backend terminated while it waits.
    let mut victim = service_session();
    let pid: i32 = victim.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let sql2 = sql.clone();
    let waiting = std::thread::spawn(move || victim.query(&sql2, &[]).is_err());
    std::thread::sleep(Duration::from_millis(150));
    c.batch_execute(&format!("SELECT pg_terminate_backend({pid})")).unwrap();
    assert!(waiting.join().unwrap(), "the terminated backend's query failed");

    // A cancel from another session.
    let mut victim = service_session();
    let pid: i32 = victim.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let sql2 = sql.clone();
    let waiting = std::thread::spawn(move || {
        let e = victim.query(&sql2, &[]).expect_err("cancelled");
        let ok = error_of(&e).0 == "57014";
        // The session goes on.
        victim.batch_execute("SET gpuindex.service = off").unwrap();
        ok && victim.query(&sql2, &[]).unwrap().len() == 10
    });
    std::thread::sleep(Duration::from_millis(150));
    c.batch_execute(&format!("SELECT pg_cancel_backend({pid})")).unwrap();
    assert!(waiting.join().unwrap(), "the cancelled query failed with 57014 and the session went on");
    no_busy_slots(&mut c);

    // The service restarted while it holds a request: the request is
    // answered (the worker finishes its epoch) or fails with a clear
    // ERROR, and the new incarnation serves the next one.
    let incarnation = stats(&mut c, "incarnation");
    let mut asker = service_session();
    let (sql2, want2) = (sql.clone(), want.clone());
    let waiting = std::thread::spawn(move || match asker.query(&sql2, &[]) {
        Ok(r) => {
            let got: Vec<(i32, f64)> = r.iter().map(|r| (r.get(0), r.get(1))).collect();
            same(&got, &want2, "answered across a restart");
        }
        Err(e) => {
            let msg = error_of(&e).1;
            assert!(msg.contains("gpuindex"), "{msg}");
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    let signalled: Option<i32> = c.query_one("SELECT gpuindex_service_restart()", &[]).unwrap().get(0);
    assert!(signalled.is_some());
    waiting.join().unwrap();
    set_system(&mut c, "gpuindex.debug_service_delay", None);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(stats(&mut c, "incarnation") > incarnation && stats(&mut c, "running::int") == 1) {
        assert!(Instant::now() < deadline, "the service did not come back");
        std::thread::sleep(Duration::from_millis(100));
    }
    same(&rows(&mut c, &sql), &want, "after the restart (image shipped again)");
    assert!(service_epoch(&mut c).is_some());
    no_busy_slots(&mut c);
}

/// `auto` sends a search to the service only where the trip pays (a tiny
/// index stays in the session, counted as declined), and searches in the
/// session when the service is slow; only on a GPU service (auto does not
/// send searches to a CPU service).
#[test]
fn auto_sends_what_pays_and_falls_back_when_the_service_does_not_answer() {
    let _serial = serial();
    let mut c = connect(DB);
    if !service_on_gpu(&mut c) {
        eprintln!("auto test skipped: the service has no GPU");
        return;
    }
    assert!(server_has_gpu(&mut c));
    // A round trip measured by earlier tests' delayed epochs says nothing
    // after a second.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (_small, small_sql) = table_for_faults(&mut c);
    set_seq_only(&mut c);
    let small_want = rows(&mut c, &small_sql);
    // 40,000 rows of 1,024 floats: ~2 ms of a backend's CPU a query,
    // above an idle service's round trip (~1 ms).
    c.batch_execute(
        "DROP TABLE IF EXISTS sv_wide; CREATE TABLE sv_wide (id int, v real[]);
         SELECT setseed(0.25);
         INSERT INTO sv_wide SELECT g, array(SELECT random()::real FROM generate_series(1, 1024) WHERE g > 0) FROM generate_series(1, 40000) g;
         CREATE INDEX ON sv_wide USING gpu_metric (v);",
    )
    .unwrap();
    let q: String = c.query_one("SELECT v::text FROM sv_wide WHERE id = 7", &[]).unwrap().get(0);
    let sql = format!("SELECT id, v <-> '{q}'::real[] FROM sv_wide ORDER BY v <-> '{q}'::real[] LIMIT 10");
    let want = rows(&mut c, &sql);
    set_index_only(&mut c, false);
    c.batch_execute("SET gpuindex.service = auto").unwrap();
    let declined = stats(&mut c, "declined");
    same(&rows(&mut c, &small_sql), &small_want, "auto on a tiny index");
    assert!(service_epoch(&mut c).is_none(), "auto sent a tiny index's scan to the service");
    assert!(stats(&mut c, "declined") > declined, "the tiny index's scan was not counted as declined");
    same(&rows(&mut c, &sql), &want, "auto through the service");
    assert!(service_epoch(&mut c).is_some(), "auto on a GPU service sends scans that pay to it");
    // (The first trip, the image's upload and kernels' compilation in it,
    // must not decline the next: it is forgotten after a second.)
    std::thread::sleep(std::time::Duration::from_millis(1100));
    set_system(&mut c, "gpuindex.debug_service_delay", Some("400"));
    let fallbacks = stats(&mut c, "fallbacks");
    c.batch_execute("SET gpuindex.service_timeout = 50").unwrap();
    same(&rows(&mut c, &sql), &want, "auto after a timeout");
    assert!(stats(&mut c, "fallbacks") > fallbacks);
    set_system(&mut c, "gpuindex.debug_service_delay", None);
    no_busy_slots(&mut c);
}

/// Without shared_preload_libraries there is no service: `on` is an
/// ERROR with a hint, `auto` searches in the session.
#[test]
fn without_the_preload_service_on_is_an_error() {
    let _serial = serial();
    let Ok(host) = std::env::var("PGHOST_NOPRELOAD") else {
        assert!(std::env::var("GPUINDEX_REQUIRE_NOPRELOAD").is_err(), "GPUINDEX_REQUIRE_NOPRELOAD=1 but PGHOST_NOPRELOAD is not set");
        eprintln!("no-preload service test skipped: PGHOST_NOPRELOAD unset");
        return;
    };
    let mut c = gpuindex_tests::connect_creating(&host, DB);
    let (_table, sql) = table_for_faults(&mut c);
    set_index_only(&mut c, false);
    c.batch_execute("SET gpuindex.service = on").unwrap();
    let e = c.query(&sql, &[]).expect_err("no service");
    let (_, msg, hint) = error_of(&e);
    assert!(msg.contains("service is not loaded"), "{msg}");
    assert!(hint.unwrap_or_default().contains("shared_preload_libraries"));
    c.batch_execute("SET gpuindex.service = auto").unwrap();
    assert_eq!(rows(&mut c, &sql).len(), 10);
    let e = c.query("SELECT * FROM gpuindex_service_stats()", &[]).expect_err("no stats");
    assert!(error_of(&e).1.contains("not loaded"));
}

/// An image above `gpuindex.service_memory` is refused with the reason,
/// once: asked again, the service answers at once without a new image.
#[test]
fn an_image_above_service_memory_is_refused_once() {
    let _serial = serial();
    let mut c = connect(DB);
    let table = "sv_large";
    c.batch_execute(&format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int, v real[])")).unwrap();
    let mut rng = SplitMix64::new(17);
    load(&mut c, table, &vectors(&mut rng, 16, 20_000, false), 0);
    c.batch_execute(&format!("CREATE INDEX ON {table} USING gpu_metric (v)")).unwrap();
    let q = literal(&vectors(&mut rng, 16, 1, false)[0]);
    let sql = format!("SELECT id, v <-> {q} FROM {table} ORDER BY v <-> {q} LIMIT 10");
    set_system(&mut c, "gpuindex.service_memory", Some("1MB"));
    set_index_only(&mut c, false);
    c.batch_execute("SET gpuindex.service = on").unwrap();
    let loads = stats(&mut c, "loads");
    for _ in 0..2 {
        let e = c.query(&sql, &[]).expect_err("image too large");
        let msg = error_of(&e).1;
        assert!(msg.contains("more than gpuindex.service_memory"), "{msg}");
    }
    assert_eq!(stats(&mut c, "loads") - loads, 1, "shipped once");
    c.batch_execute("SET gpuindex.service = off").unwrap();
    assert_eq!(rows(&mut c, &sql).len(), 10);
    set_system(&mut c, "gpuindex.service_memory", None);
    no_busy_slots(&mut c);
}

/// A batch larger than a request slot travels in a dynamic shared memory
/// segment (in parts past its limit): the same rows as the session's own
/// search, through the service; a statement timeout while the service
/// holds such a request leaves no slot (or segment) behind.
#[test]
fn batches_larger_than_a_slot_go_in_a_segment() {
    let _serial = serial();
    let mut c = connect(DB);
    let table = "sv_large";
    c.batch_execute(&format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int, v real[])")).unwrap();
    let mut rng = SplitMix64::new(21);
    load(&mut c, table, &vectors(&mut rng, 16, 12_000, true), 0);
    c.batch_execute(&format!("CREATE INDEX {table}_v ON {table} USING gpu_metric (v)")).unwrap();
    // 1,500 queries of 16 floats: 96 KB of queries, 246 KB of answers
    // (a slot holds 64 KB).
    let queries: Vec<String> = vectors(&mut rng, 16, 1_500, true).iter().map(|v| literal(v)).collect();
    let matrix = format!("ARRAY[{}]::real[]", queries.iter().map(|q| format!("ARRAY(SELECT unnest({q}))")).collect::<Vec<_>>().join(","));
    let sql = format!("SELECT ord::int, distance, ctid::text FROM gpu_metric_knn('{table}_v', {matrix}, 10) ORDER BY ord, distance, ctid");
    let run = |c: &mut Client| -> Vec<(i32, f64, String)> {
        c.query(&sql, &[]).unwrap().iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
    };
    c.batch_execute("SET gpuindex.service = off").unwrap();
    let want = run(&mut c);
    assert_eq!(want.len(), 15_000);
    c.batch_execute("SET gpuindex.service = on").unwrap();
    let queries_before = stats(&mut c, "queries");
    let got = run(&mut c);
    assert!(service_epoch(&mut c).is_some(), "the batch did not go through the service");
    assert!(stats(&mut c, "queries") - queries_before >= 1_500, "the service did not see the batch's queries");
    assert_eq!(got, want, "a batch in a segment");
    // Withdrawn while the service holds it.
    set_system(&mut c, "gpuindex.debug_service_delay", Some("400"));
    c.batch_execute("SET statement_timeout = 100").unwrap();
    let e = c.query(&sql, &[]).expect_err("statement timeout");
    assert_eq!(error_of(&e).0, "57014", "{e:?}");
    c.batch_execute("RESET statement_timeout").unwrap();
    set_system(&mut c, "gpuindex.debug_service_delay", None);
    no_busy_slots(&mut c);
    assert_eq!(run(&mut c), want, "after a withdrawn batch");
}

/// DROP INDEX, and DROP TABLE of an indexed table, release the service's
/// images of those indexes.
#[test]
fn dropped_indexes_release_their_images() {
    let _serial = serial();
    let mut c = connect(DB);
    let mut rng = SplitMix64::new(23);
    let held = |c: &mut Client, oid: u32| -> i64 {
        c.query_one("SELECT count(*) FROM gpuindex_service_images() WHERE index = $1", &[&postgres::types::Oid::from(oid)]).unwrap().get(0)
    };
    let released = |c: &mut Client, oid: u32, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while held(c, oid) != 0 {
            assert!(Instant::now() < deadline, "{what}: the image stayed in the service");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    for drop in ["DROP INDEX sv_drop_v", "DROP TABLE sv_drop"] {
        c.batch_execute("DROP TABLE IF EXISTS sv_drop; CREATE TABLE sv_drop (id int, v real[])").unwrap();
        load(&mut c, "sv_drop", &vectors(&mut rng, 8, 11_000, true), 0);
        c.batch_execute("CREATE INDEX sv_drop_v ON sv_drop USING gpu_metric (v)").unwrap();
        let oid: u32 = c.query_one("SELECT 'sv_drop_v'::regclass::oid", &[]).unwrap().get::<_, postgres::types::Oid>(0);
        set_index_only(&mut c, false);
        c.batch_execute("SET gpuindex.service = on").unwrap();
        let q = literal(&vectors(&mut rng, 8, 1, true)[0]);
        rows(&mut c, &format!("SELECT id, v <-> {q} FROM sv_drop ORDER BY v <-> {q} LIMIT 10"));
        assert_eq!(held(&mut c, oid), 1, "{drop}: the image was loaded");
        c.batch_execute(drop).unwrap();
        released(&mut c, oid, drop);
        c.batch_execute("RESET gpuindex.service").unwrap();
    }
    c.batch_execute("DROP TABLE IF EXISTS sv_drop").unwrap();
}

/// SIGKILL of the worker mid-epoch: PostgreSQL treats a child killed so
/// as a crash and restarts every backend, so the waiting session loses
/// its connection (no hung backend); once the server is back, the service
/// comes back, no request slot is busy, and answers are right.
#[test]
fn a_killed_service_is_a_crash_restart_and_serves_again() {
    let _serial = serial();
    let mut c = connect(DB);
    let (sql, want) = faults_setup(&mut c);
    let worker = stats(&mut c, "pid") as i32;
    set_system(&mut c, "gpuindex.debug_service_delay", Some("2000"));
    let mut asker = service_session();
    let sql2 = sql.clone();
    let waiting = std::thread::spawn(move || asker.query(&sql2, &[]).is_err());
    // The worker holds the request in its (delayed) epoch.
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats(&mut c, "busy_slots") == 0 {
        assert!(Instant::now() < deadline, "the request did not reach the service");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(gpuindex_tests::kill_9(worker), "kill -9 {worker}");
    assert!(waiting.join().unwrap(), "the waiting session's query ended with the crash");
    // Back after recovery: ALTER SYSTEM survives it, so reset the delay.
    let mut c = (0..300)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(200));
            std::panic::catch_unwind(|| connect(DB)).ok()
        })
        .expect("the server came back");
    set_system(&mut c, "gpuindex.debug_service_delay", None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while stats(&mut c, "running::int") != 1 {
        assert!(Instant::now() < deadline, "the service did not come back");
        std::thread::sleep(Duration::from_millis(100));
    }
    let again = stats(&mut c, "pid") as i32;
    assert_ne!(again, worker);
    no_busy_slots(&mut c);
    set_index_only(&mut c, false);
    c.batch_execute("SET gpuindex.service = on").unwrap();
    same(&rows(&mut c, &sql), &want, "after the crash restart (image shipped again)");
    assert!(service_epoch(&mut c).is_some());
    no_busy_slots(&mut c);
}

/// EXPLAIN ANALYZE names the service, the epoch and the device after the
/// plan (text format); the other formats stay well-formed.
#[test]
fn explain_analyze_names_the_service() {
    let _serial = serial();
    let mut c = connect(DB);
    let (sql, _) = faults_setup(&mut c);
    let text = gpuindex_tests::explain(&mut c, &format!("(ANALYZE, COSTS OFF) {sql}"));
    let line = text.lines().find(|l| l.starts_with("GPU Service: ")).unwrap_or_else(|| panic!("no service line in:\n{text}"));
    assert!(line.contains("1 request of 1 query, answered in epoch "), "{line}");
    let device = if service_on_gpu(&mut c) { "on the GPU" } else { "on the service's CPU" };
    assert!(line.contains(device), "{line}");
    // Without ANALYZE nothing runs, and nothing is said.
    let plain = gpuindex_tests::explain(&mut c, &format!("(COSTS OFF) {sql}"));
    assert!(!plain.contains("GPU Service"), "{plain}");
    let yaml = gpuindex_tests::explain(&mut c, &format!("(ANALYZE, COSTS OFF, FORMAT YAML) {sql}"));
    assert!(yaml.trim_end().lines().last().unwrap_or_default().contains("Execution Time") && !yaml.contains("GPU Service"), "{yaml}");
    // Searched in the session (service off): no line.
    c.batch_execute("SET gpuindex.service = off").unwrap();
    let off = gpuindex_tests::explain(&mut c, &format!("(ANALYZE, COSTS OFF) {sql}"));
    assert!(!off.contains("GPU Service"), "{off}");
}

/// A LATERAL kNN join through the service reads each next chunk while the
/// rows of the one before are fetched, its first search posted ahead (in
/// a slot, or a segment for chunks of 400 centres; chunks grow from 64):
/// the planner's rows (also where
/// the nearest rows tie, and where quals send rows to a second round), EXPLAIN ANALYZE says so, a rescan (a subquery
/// run per outer row) and a LIMIT that stops early leave nothing behind,
/// and an ERROR while a chunk is posted ahead leaves no request slot busy
/// (the transaction's end withdraws it).
#[test]
fn lateral_knn_chunks_are_posted_ahead() {
    let _serial = serial();
    let mut c = connect(DB);
    c.batch_execute(
        "DROP TABLE IF EXISTS sa_pts, sa_ctr;
         SELECT setseed(0.5);
         CREATE TABLE sa_pts AS SELECT g AS id, point(random() * 1000, random() * 1000) AS p FROM generate_series(1, 40000) g;
         -- 2,000 copies of one point; a far outlier.
         INSERT INTO sa_pts SELECT 50000 + g, point(300, 300) FROM generate_series(1, 2000) g;
         INSERT INTO sa_pts VALUES (60000, point(1e15, -1e15));
         CREATE INDEX sa_pts_p ON sa_pts USING gpu_spatial (p);
         CREATE TABLE sa_ctr AS SELECT g AS id, point(random() * 1000, random() * 1000) AS c FROM generate_series(1, 1500) g;
         -- (Random centres away from the copies: their nearest rows tie.)
         DELETE FROM sa_ctr WHERE c <-> point(300, 300) < 40;
         INSERT INTO sa_ctr VALUES (-1, point(300, 300)), (-2, point(1e15, -1e15));
         ANALYZE sa_pts; ANALYZE sa_ctr;",
    )
    .unwrap();
    c.batch_execute("SET gpuindex.service = on; SET gpuindex.join_chunk = 400").unwrap();
    let sql = "SELECT sa_ctr.id, s.id, s.d FROM sa_ctr CROSS JOIN LATERAL (SELECT id, p <-> sa_ctr.c AS d FROM sa_pts ORDER BY p <-> sa_ctr.c LIMIT 10) s WHERE sa_ctr.id > 0";
    check_join(&mut c, sql);
    check_join(
        &mut c,
        "SELECT sa_ctr.id, s.d FROM sa_ctr CROSS JOIN LATERAL (SELECT p <-> sa_ctr.c AS d FROM sa_pts ORDER BY p <-> sa_ctr.c LIMIT 10) s",
    );
    check_join(
        &mut c,
        "SELECT g, (SELECT sum(s.d) FROM sa_ctr CROSS JOIN LATERAL (SELECT p <-> sa_ctr.c AS d FROM sa_pts ORDER BY p <-> sa_ctr.c LIMIT 3) s \
         WHERE sa_ctr.id % 3 = g) FROM generate_series(0, 2) g",
    );
    // A quals that rejects candidates: rows asked again (a second round)
    // while the next chunk is posted ahead.
    let quals = "SELECT sa_ctr.id, s.id FROM sa_ctr CROSS JOIN LATERAL (SELECT id FROM sa_pts WHERE sa_pts.id % 4 <> sa_ctr.id % 4 \
         ORDER BY p <-> sa_ctr.c LIMIT 10) s WHERE sa_ctr.id > 0";
    check_join(&mut c, quals);
    // (One backend: the service line counts this backend's requests.)
    c.batch_execute(
        "SET gpuindex.join_chunk = 400; SET max_parallel_workers_per_gather = 0; \
         SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off",
    )
    .unwrap();
    // Five chunks (64, then 400 each: ~1,490 rows; a top-k join's chunks
    // grow eightfold): each after the first takes the answer posted
    // ahead, also where a second round asked for other queries in between.
    for q in [sql, quals] {
        let text = gpuindex_tests::explain(&mut c, &format!("(ANALYZE, COSTS OFF) {q}"));
        let line = text.lines().find(|l| l.starts_with("GPU Service: ")).unwrap_or_else(|| panic!("no service line in:\n{text}"));
        assert!(line.contains("(4 posted ahead)"), "{line}");
        assert!(text.contains("Chunks: 5"), "{text}");
    }
    let first = c.query(&format!("{sql} LIMIT 5"), &[]).unwrap();
    assert_eq!(first.len(), 5);
    no_busy_slots(&mut c);
    // Centre 1000 is in the fourth chunk: its row's ERROR comes while the
    // fifth is posted ahead.
    let e = c
        .query("SELECT s.x FROM sa_ctr CROSS JOIN LATERAL (SELECT id / (sa_ctr.id - 1000) AS x FROM sa_pts ORDER BY p <-> sa_ctr.c LIMIT 10) s", &[])
        .expect_err("division by zero");
    assert_eq!(error_of(&e).0, "22012", "{e:?}");
    no_busy_slots(&mut c);
    check_join(&mut c, sql);
    // In parallel: each participant reads its own chunks ahead.
    c.batch_execute(
        "SET max_parallel_workers_per_gather = 2; SET min_parallel_table_scan_size = 0; \
         SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET gpuindex.join_chunk = 100",
    )
    .unwrap();
    let plan = gpuindex_tests::explain(&mut c, sql);
    assert!(plan.contains("Parallel Custom Scan (GpuIndexJoin)"), "{plan}");
    c.batch_execute("SET gpuindex.join_chunk = 100").unwrap();
    check_join(&mut c, sql);
    no_busy_slots(&mut c);
    c.batch_execute(
        "RESET gpuindex.service; RESET gpuindex.join_chunk; RESET max_parallel_workers_per_gather; \
         RESET min_parallel_table_scan_size; RESET parallel_setup_cost; RESET parallel_tuple_cost; \
         RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop",
    )
    .unwrap();
}

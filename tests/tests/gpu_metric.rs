//! gpu_metric against a live server: `ORDER BY v <op> q [LIMIT k]`
//! through each operator class returns the sequential scan's distances at
//! every rank and its rows (up to ties at the last distance), on uniform,
//! clustered and duplicate-heavy vectors, with NULL rows and filters that
//! drop rows; before and after inserts (the delta), deletes, and the
//! VACUUM that rebuilds the tree.

use gpuindex_engine::datasets::normal;
use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::{connect, gpu_missing_but_required, server_has_gpu, set_index_only, set_seq_only};
use postgres::Client;

const DB: &str = "gpuindex_it_metric";
const OPS: [(&str, &str); 3] = [("<->", "real_l2_ops"), ("<+>", "real_l1_ops"), ("<=>", "real_cosine_ops")];

#[derive(Clone, Copy, Debug)]
enum Data {
    Uniform,
    Clustered,
    Duplicates,
}

fn vectors(rng: &mut SplitMix64, data: Data, dim: usize, n: usize) -> Vec<Vec<f32>> {
    let mut centres = SplitMix64::new(7);
    let centres: Vec<Vec<f32>> = (0..12).map(|_| (0..dim).map(|_| (centres.unit() * 20.0 - 10.0) as f32).collect()).collect();
    (0..n)
        .map(|_| match data {
            Data::Uniform => (0..dim).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect(),
            Data::Clustered => {
                let c = &centres[(rng.unit() * rng.unit() * 12.0) as usize];
                c.iter().map(|&x| x + (normal(rng) * 0.2) as f32).collect()
            }
            Data::Duplicates => centres[rng.below(5) as usize].clone(),
        })
        .collect()
}

fn literal(v: &[f32]) -> String {
    let parts: Vec<String> = v.iter().map(|x| format!("{x:?}")).collect();
    format!("'{{{}}}'::real[]", parts.join(","))
}

fn insert(c: &mut Client, table: &str, vs: &[Vec<f32>], first_id: usize) {
    let rows: Vec<String> = vs.iter().enumerate().map(|(i, v)| format!("({}, {})", first_id + i, literal(v))).collect();
    for chunk in rows.chunks(1000) {
        c.batch_execute(&format!("INSERT INTO {table} (id, v) VALUES {}", chunk.join(","))).unwrap();
    }
}

fn rows(c: &mut Client, sql: &str) -> Vec<(i32, Option<f64>)> {
    c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// The index and the sequential scan agree on `ORDER BY v op q`.
fn check(c: &mut Client, table: &str, op: &str, index: &str, q: &str, filter: &str, limit: &str) {
    let sql = format!("SELECT id, v {op} {q} FROM {table} {filter} ORDER BY v {op} {q} {limit}");
    set_index_only(c, false);
    let plan: Vec<String> = c.query(&format!("EXPLAIN {sql}"), &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(plan.iter().any(|l| l.contains(index)), "not through {index}: {plan:?}");
    let got = rows(c, &sql);
    set_seq_only(c);
    let want = rows(c, &sql);
    let what = format!("{table} {op} {filter} {limit}");
    let dist = |r: &[(i32, Option<f64>)]| r.iter().map(|x| x.1).collect::<Vec<_>>();
    assert_eq!(dist(&got), dist(&want), "{what}: distances by rank");
    // Rows are the same but for ties at the last distance.
    let last = want.last().map(|x| x.1);
    let before = |r: &[(i32, Option<f64>)]| {
        let mut ids: Vec<i32> = r.iter().filter(|x| Some(x.1) != last).map(|x| x.0).collect();
        ids.sort();
        ids
    };
    assert_eq!(before(&got), before(&want), "{what}: rows");
}

/// The batch functions equal the same queries one by one (sequential
/// scans): kNN distances at every rank of every query, and the rows
/// within a radius; on the CPU, and on the GPU where the server has one
/// (required there under GPUINDEX_REQUIRE_GPU=1).
fn check_batches(c: &mut Client, table: &str, index: &str, op: &str, queries: &[String]) {
    set_seq_only(c);
    let rows: Vec<String> = queries.iter().map(|q| format!("ARRAY(SELECT unnest({q}))")).collect();
    let matrix = format!("ARRAY[{}]::real[]", rows.join(","));
    let knn = |c: &mut Client, sql: &str| -> Vec<(i64, f64)> {
        c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    let within = |c: &mut Client, sql: &str| -> Vec<(i64, i32)> {
        let mut v: Vec<(i64, i32)> =
            c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).iter().map(|r| (r.get(0), r.get(1))).collect();
        v.sort();
        v
    };
    let mut want_knn = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        want_knn.extend(knn(c, &format!("SELECT {}::bigint, v {op} {q} FROM {table} WHERE v IS NOT NULL ORDER BY 2 LIMIT 10", i + 1)));
    }
    let r = want_knn[5].1;
    let mut want_within = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        want_within.extend(within(c, &format!("SELECT {}::bigint, id FROM {table} WHERE v {op} {q} <= {r:?}", i + 1)));
    }
    want_within.sort();
    let gpu = server_has_gpu(c);
    for device in ["cpu", "auto"] {
        c.batch_execute(&format!("SET gpuindex.device = {device}; SET gpuindex.gpu_min_batch = 1")).unwrap();
        let got = knn(c, &format!("SELECT ord, distance FROM gpu_metric_knn('{index}', {matrix}, 10) ORDER BY ord, distance"));
        assert_eq!(got, want_knn, "{index}: gpu_metric_knn, device {device}");
        let last = c.query_one("SELECT device, coalesce(cpu_reason, '') FROM gpuindex_last_batch()", &[]).unwrap();
        let (ran, why): (String, String) = (last.get(0), last.get(1));
        // The GPU service keeps a batch asked again for more rows (dead
        // rows among the first) on its CPU where that is faster, and says so.
        let by_choice = why.contains("k is above the GPU's bounded brute force");
        assert_eq!(ran, if device == "auto" && gpu && !by_choice { "gpu" } else { "cpu" }, "{index}: device {device}");
        let got = within(
            c,
            &format!("SELECT w.ord, t.id FROM gpu_metric_within('{index}', {matrix}, {r:?}) w JOIN {table} t ON t.ctid = w.ctid"),
        );
        assert_eq!(got, want_within, "{index}: gpu_metric_within radius {r}, device {device}");
    }
    assert!(!gpu_missing_but_required(c), "GPUINDEX_REQUIRE_GPU=1 but the server has no GPU");
    c.batch_execute("SET gpuindex.device = cpu; RESET gpuindex.gpu_min_batch").unwrap();
}

fn check_all(c: &mut Client, table: &str, rng: &mut SplitMix64, data: Data, dim: usize, existing: &[f32]) {
    let mut queries: Vec<String> = vectors(rng, data, dim, 3).iter().map(|v| literal(v)).collect();
    queries.push(literal(existing));
    for (op, class) in OPS {
        let index = format!("{table}_{class}");
        for q in &queries {
            check(c, table, op, &index, q, "", "LIMIT 10");
            check(c, table, op, &index, q, "WHERE id % 3 <> 0", "LIMIT 37");
        }
        check(c, table, op, &index, &queries[0], "", "");
        check_batches(c, table, &index, op, &queries);
        c.query(&format!("SELECT * FROM gpu_metric_check('{index}')"), &[]).unwrap_or_else(|e| panic!("{index}: {e}"));
    }
}

fn run(data: Data, dim: usize, seed: u64) {
    let mut c = connect(DB);
    let table = format!("gm_{}", format!("{data:?}").to_lowercase());
    c.batch_execute(&format!("SET gpuindex.device = cpu; DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int, v real[])")).unwrap();
    let mut rng = SplitMix64::new(seed);
    let first = vectors(&mut rng, data, dim, 3000);
    insert(&mut c, &table, &first, 0);
    c.batch_execute(&format!("INSERT INTO {table} SELECT -g, NULL FROM generate_series(1, 5) g")).unwrap();
    for (_, class) in OPS {
        c.batch_execute(&format!(
            "CREATE INDEX {table}_{class} ON {table} USING gpu_metric (v {class}) WITH (node_capacity = 4, delta_limit = 1)"
        ))
        .unwrap();
    }
    check_all(&mut c, &table, &mut rng, data, dim, &first[17]);
    // Inserts (into the delta), deletes, then the VACUUM that rebuilds.
    insert(&mut c, &table, &vectors(&mut rng, data, dim, 700), 3000);
    c.batch_execute(&format!("DELETE FROM {table} WHERE id % 5 = 1; INSERT INTO {table} VALUES (-10, NULL)")).unwrap();
    check_all(&mut c, &table, &mut rng, data, dim, &first[18]);
    c.batch_execute(&format!("VACUUM {table}")).unwrap();
    check_all(&mut c, &table, &mut rng, data, dim, &first[19]);
    let generation: i64 = c
        .query_one("SELECT max(generation) FROM gpuindex_cached_images() WHERE kind = 'shape'", &[])
        .unwrap()
        .get::<_, Option<i64>>(0)
        .unwrap_or(0);
    assert!(generation > 1, "VACUUM did not rebuild the tree (generation {generation})");
    insert(&mut c, &table, &vectors(&mut rng, data, dim, 300), 4000);
    check_all(&mut c, &table, &mut rng, data, dim, &first[20]);
}

#[test]
fn uniform_vectors_equal_sequential_scans() {
    run(Data::Uniform, 8, 1);
}

#[test]
fn clustered_vectors_equal_sequential_scans() {
    run(Data::Clustered, 32, 2);
}

#[test]
fn duplicate_vectors_equal_sequential_scans() {
    run(Data::Duplicates, 3, 3);
}

/// Bad input: clear ERRORs, and nothing indexed.
#[test]
fn bad_vectors_are_errors() {
    let mut c = connect(DB);
    c.batch_execute(
        "DROP TABLE IF EXISTS gm_bad; CREATE TABLE gm_bad (id int, v real[]);
         INSERT INTO gm_bad VALUES (1, '{1,2,3}'), (2, '{0,0,1}');
         CREATE INDEX gm_bad_l2 ON gm_bad USING gpu_metric (v);
         CREATE INDEX gm_bad_cos ON gm_bad USING gpu_metric (v real_cosine_ops);",
    )
    .unwrap();
    for (sql, expect) in [
        ("INSERT INTO gm_bad VALUES (3, '{1,2}')", "vector has 2 dimensions, the gpu_metric index 3"),
        ("INSERT INTO gm_bad VALUES (3, '{1,NaN,2}')", "vector element 2 is NaN"),
        ("INSERT INTO gm_bad VALUES (3, '{1,Infinity,2}')", "vector element 2 is inf"),
        ("INSERT INTO gm_bad VALUES (3, '{}')", "a vector must not be empty"),
        ("INSERT INTO gm_bad VALUES (3, '{1,NULL,2}')", "a vector must not contain NULL"),
        ("INSERT INTO gm_bad VALUES (3, '{{1,2,3},{4,5,6}}')", "a vector must be one-dimensional"),
        ("INSERT INTO gm_bad VALUES (3, '{0,0,0}')", "cosine distance is undefined for a zero vector"),
        ("SELECT id FROM gm_bad ORDER BY v <-> '{1,2}' LIMIT 1", "vectors of different dimensions: 3 and 2"),
        ("SET enable_seqscan = off; SELECT id FROM gm_bad ORDER BY v <-> '{1,2}' LIMIT 1", "vectors of different dimensions: 3 and 2"),
        ("CREATE INDEX ON gm_bad USING gpu_metric (id)", "has no default operator class for access method \"gpu_metric\""),
    ] {
        let e = c.batch_execute(sql).expect_err(sql);
        let msg = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert!(msg.contains(expect), "{sql}: got {msg:?}, expected {expect:?}");
    }
    let n: i64 = c.query_one("SELECT count(*) FROM gm_bad", &[]).unwrap().get(0);
    assert_eq!(n, 2);
}

/// L2 scans of trees of 10,000 rows and more search a copy of the rows in
/// memory (nearest 64, then 4x as many each time the executor asks past
/// them): the same distances at every rank as the sequential scan, and as
/// the page walk (gpuindex.scan_memory = 0), through inserts and deletes.
#[test]
fn in_memory_scans_equal_sequential_scans() {
    let mut c = connect(DB);
    let table = "gm_in_memory";
    c.batch_execute(&format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int, v real[])")).unwrap();
    let mut rng = SplitMix64::new(41);
    // Uniform in 32 dimensions: the tree prunes little, so L2 scans take
    // the bounded brute force in memory.
    let first = vectors(&mut rng, Data::Uniform, 32, 12_000);
    insert(&mut c, table, &first, 0);
    c.batch_execute(&format!("CREATE INDEX {table}_v ON {table} USING gpu_metric (v)")).unwrap();
    let queries: Vec<String> = vectors(&mut rng, Data::Uniform, 32, 2).iter().chain([&first[5]]).map(|v| literal(v)).collect();
    let index = format!("{table}_v");
    // gpu: the in-memory walk's searches on the GPU (auto keeps one query on the CPU).
    let devices: &[&str] = if server_has_gpu(&mut c) { &["cpu", "auto", "gpu"] } else { &["cpu", "auto"] };
    let all = |c: &mut Client| {
        for memory in ["1GB", "0"] {
            for &device in devices {
                c.batch_execute(&format!("SET gpuindex.scan_memory = '{memory}'; SET gpuindex.device = {device}")).unwrap();
                for q in &queries {
                    check(c, table, "<->", &index, q, "", "LIMIT 10");
                    check(c, table, "<->", &index, q, "WHERE id % 3 <> 0", "LIMIT 300");
                }
                check(c, table, "<->", &index, &queries[0], "", "");
            }
        }
        c.batch_execute("RESET gpuindex.scan_memory; RESET gpuindex.device").unwrap();
    };
    all(&mut c);
    c.batch_execute(&format!("SET enable_seqscan = off; SELECT id FROM {table} ORDER BY v <-> {} LIMIT 3", queries[0])).unwrap();
    let last: String = c.query_one("SELECT function FROM gpuindex_last_batch()", &[]).unwrap().get(0);
    assert_eq!(last, "gpu_metric index scan", "the scan did not search the copy in memory");
    insert(&mut c, table, &vectors(&mut rng, Data::Uniform, 32, 500), 20_000);
    c.batch_execute(&format!("DELETE FROM {table} WHERE id % 7 = 2")).unwrap();
    all(&mut c);
}

/// CREATE INDEX under `gpuindex.device = gpu` builds the tree on the GPU:
/// for every operator class the index passes `gpu_metric_check` (which
/// recomputes every stored distance as the CPU does, bit for bit), has the
/// CPU-built tree's shape, and answers as the sequential scan.
#[test]
fn trees_built_on_the_gpu_check_and_answer_exactly() {
    let mut c = connect(DB);
    if !server_has_gpu(&mut c) {
        assert!(!gpu_missing_but_required(&mut c), "GPUINDEX_REQUIRE_GPU=1 but the server has no GPU");
        eprintln!("no GPU on the server: skipping the GPU build");
        return;
    }
    let table = "gm_gpu_build";
    c.batch_execute(&format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int, v real[])")).unwrap();
    let mut rng = SplitMix64::new(44);
    let first = vectors(&mut rng, Data::Clustered, 24, 20_000);
    insert(&mut c, table, &first, 0);
    insert(&mut c, table, &vectors(&mut rng, Data::Duplicates, 24, 2000), 20_000);
    for (op, class) in OPS {
        let mut shapes = Vec::new();
        for device in ["cpu", "gpu"] {
            let index = format!("{table}_{device}");
            c.batch_execute(&format!("SET gpuindex.device = {device}; CREATE INDEX {index} ON {table} USING gpu_metric (v {class})"))
                .unwrap();
            let last = c.query_one("SELECT function, device FROM gpuindex_last_batch()", &[]).unwrap();
            let (what, ran): (String, String) = (last.get(0), last.get(1));
            assert_eq!((what.as_str(), ran.as_str()), ("gpu_metric build", device), "{class}: CREATE INDEX");
            let row = c
                .query_one(&format!("SELECT nodes, height, tree_entries FROM gpu_metric_check('{index}')"), &[])
                .unwrap_or_else(|e| panic!("{class}, built on the {device}: {e}"));
            shapes.push((row.get::<_, i64>(0), row.get::<_, i32>(1), row.get::<_, i64>(2)));
        }
        assert_eq!(shapes[0], shapes[1], "{class}: the trees built on the CPU and the GPU differ in shape");
        c.batch_execute(&format!("DROP INDEX {table}_cpu; SET gpuindex.device = cpu")).unwrap();
        for q in [literal(&first[7]), literal(&vectors(&mut rng, Data::Clustered, 24, 1)[0])] {
            check(&mut c, table, op, &format!("{table}_gpu"), &q, "", "LIMIT 10");
            check(&mut c, table, op, &format!("{table}_gpu"), &q, "WHERE id % 3 <> 0", "LIMIT 200");
        }
        c.batch_execute(&format!("DROP INDEX {table}_gpu")).unwrap();
    }
}

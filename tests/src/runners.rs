//! Test runners shared by every access method: an access method plugs in
//! with a `Case` (its table, index, rows and random predicates); a runner
//! loads it, changes it (inserts that split or fill the delta, deletes,
//! HOT and non-HOT updates, VACUUM, the AM's maintenance), and compares the
//! answers through the index, by EXCEPT ALL against a sequential scan or
//! against another server (a streaming replica).

use gpuindex_engine::rng::SplitMix64;
use postgres::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A batch of queries for `gpuindex_search`: the operator (its symbol),
/// the queries' SQL type and their literals.
pub struct Queries {
    pub op: &'static str,
    pub query_type: &'static str,
    pub literals: Vec<String>,
}

#[derive(Clone, Copy)]
pub struct Case {
    pub am: &'static str,
    /// The column's SQL type.
    pub column_type: &'static str,
    /// A value literal of that type (NULL now and then).
    pub value: fn(&mut SplitMix64) -> String,
    /// A random WHERE clause on column `v` that the index answers.
    pub predicate: fn(&mut SplitMix64) -> String,
    /// The AM's own maintenance after changes (a merge), or "".
    pub maintenance: &'static str,
    /// Its check function.
    pub check: &'static str,
    /// A query returning (index entries, rows that must have one) of
    /// table `{t}` when only inserts ran.
    pub entries: &'static str,
    /// A random ORDER BY expression on `v` that the index answers in order.
    pub ordering: fn(&mut SplitMix64) -> String,
    /// A random batch of `n` queries the AM answers in batches.
    pub batch: fn(&mut SplitMix64, usize) -> Queries,
    /// The ordering operator of `gpuindex_nearest` (its queries are of the
    /// column's type), if the AM has one.
    pub nearest: Option<&'static str>,
}

fn key(rng: &mut SplitMix64) -> i64 {
    // Heavy duplicates of small keys, a long tail, extremes.
    match rng.below(20) {
        0 => [i64::MIN, i64::MAX, 0][rng.below(3) as usize],
        1..=12 => (rng.below(60) * rng.below(60)) as i64,
        _ => rng.next_u64() as i64 >> rng.below(60),
    }
}

fn coord(rng: &mut SplitMix64) -> f64 {
    // A 0.25 grid (duplicates, border hits) around three clusters.
    let c = [10.0, 40.0, 75.0][rng.below(3) as usize];
    c + (rng.below(81) as f64 - 40.0) * 0.25
}

pub fn gpu_btree() -> Case {
    Case {
        am: "gpu_btree",
        column_type: "int8",
        value: |r| if r.below(50) == 0 { "NULL".into() } else { key(r).to_string() },
        predicate: |r| match r.below(5) {
            0 => format!("v = {}", key(r)),
            1 => format!("v BETWEEN {} AND {}", key(r) - 50, key(r) + 200),
            2 => format!("v = ANY(ARRAY[{}]::int8[])", (0..40).map(|_| key(r).to_string()).collect::<Vec<_>>().join(",")),
            3 => format!("v < {}", key(r)),
            _ => "v IS NULL".into(),
        },
        maintenance: "",
        check: "gpu_btree_check",
        entries: "SELECT (SELECT sum(entries)::int8 FROM gpu_btree_check('{t}_v') WHERE level = 0), (SELECT count(*) FROM {t} WHERE v IS NOT NULL)",
        ordering: |r| if r.below(2) == 0 { "v".into() } else { "v DESC".into() },
        batch: |r, n| Queries { op: "=", query_type: "int8", literals: (0..n).map(|_| key(r).to_string()).collect() },
        nearest: None,
    }
}

pub fn gpu_spatial() -> Case {
    Case {
        am: "gpu_spatial",
        column_type: "point",
        value: |r| if r.below(50) == 0 { "NULL".into() } else { format!("point({:?}, {:?})", coord(r), coord(r)) },
        predicate: |r| {
            let (x, y) = (coord(r), coord(r));
            match r.below(3) {
                0 => {
                    format!("v <@ box(point({x:?},{y:?}), point({:?},{:?}))", x + r.below(12) as f64 * 0.25, y + r.below(12) as f64 * 0.25)
                }
                1 => format!("v <@ circle(point({x:?},{y:?}), {:?})", r.below(8) as f64 * 0.25),
                _ => format!("v ~= point({x:?},{y:?})"),
            }
        },
        maintenance: "SELECT gpu_spatial_merge('{t}_v')",
        check: "gpu_spatial_check",
        entries: "SELECT (SELECT tree_entries + chain_entries FROM gpu_spatial_check('{t}_v')), (SELECT count(*) FROM {t})",
        ordering: |r| format!("v <-> point({:?},{:?})", coord(r), coord(r)),
        batch: |r, n| {
            let point = |r: &mut SplitMix64| format!("({:?},{:?})", coord(r), coord(r));
            match r.below(3) {
                0 => Queries { op: "<@", query_type: "box", literals: (0..n).map(|_| format!("({},{})", point(r), point(r))).collect() },
                1 => Queries {
                    op: "<@",
                    query_type: "circle",
                    literals: (0..n).map(|_| format!("<{},{:?}>", point(r), r.below(12) as f64 * 0.25)).collect(),
                },
                _ => Queries { op: "~=", query_type: "point", literals: (0..n).map(|_| point(r)).collect() },
            }
        },
        nearest: Some("<->"),
    }
}

pub fn cases() -> Vec<Case> {
    vec![gpu_btree(), gpu_spatial()]
}

/// The INSERTs of `n` random rows with ids from `first`.
pub fn inserts(case: &Case, table: &str, rng: &mut SplitMix64, first: usize, n: usize) -> Vec<String> {
    let rows: Vec<String> = (0..n).map(|i| format!("({}, {})", first + i, (case.value)(rng))).collect();
    rows.chunks(2000).map(|chunk| format!("INSERT INTO {table} (id, v) VALUES {}", chunk.join(","))).collect()
}

/// Inserts `n` random rows with ids from `first`.
pub fn insert(c: &mut Client, case: &Case, table: &str, rng: &mut SplitMix64, first: usize, n: usize) {
    for sql in inserts(case, table, rng, first, n) {
        c.batch_execute(&sql).unwrap();
    }
}

/// (Re)creates `table` with the case's index (small leaves and delta, so
/// that splits and merges happen at test sizes) and loads `n` rows.
pub fn load(c: &mut Client, case: &Case, table: &str, rng: &mut SplitMix64, n: usize) {
    let with = if case.am == "gpu_spatial" { " WITH (leaf_capacity = 64, delta_limit = 2)" } else { "" };
    c.batch_execute(&format!(
        "SET client_min_messages = warning; DROP TABLE IF EXISTS {table};
         CREATE TABLE {table} (id int, v {}) WITH (fillfactor = 80);",
        case.column_type
    ))
    .unwrap();
    insert(c, case, table, rng, 0, n / 2);
    c.batch_execute(&format!("CREATE INDEX {table}_v ON {table} USING {} (v){with}", case.am)).unwrap();
    insert(c, case, table, rng, n / 2, n - n / 2);
}

/// Deletes, HOT and non-HOT updates, inserts, VACUUM, the AM's maintenance.
pub fn change(c: &mut Client, case: &Case, table: &str, rng: &mut SplitMix64, first: usize, n: usize) {
    c.batch_execute(&format!("DELETE FROM {table} WHERE id % 7 = {}", rng.below(7))).unwrap();
    c.batch_execute(&format!("UPDATE {table} SET id = -id WHERE id % 11 = 3")).unwrap();
    let v = (case.value)(rng);
    c.batch_execute(&format!("UPDATE {table} SET v = {v} WHERE id % 13 = 5")).unwrap();
    insert(c, case, table, rng, first, n);
    c.batch_execute(&format!("VACUUM {table}")).unwrap();
    insert(c, case, table, rng, first + n, n / 4);
    if !case.maintenance.is_empty() {
        c.batch_execute(&case.maintenance.replace("{t}", table)).unwrap();
    }
}

/// The sorted ids matching each predicate, through the index.
pub fn answers(c: &mut Client, table: &str, predicates: &[String]) -> Vec<Vec<i32>> {
    crate::set_index_only(c, false);
    predicates
        .iter()
        .map(|p| {
            let sql = format!("SELECT id FROM {table} WHERE {p}");
            let plan: Vec<String> = c.query(&format!("EXPLAIN {sql}"), &[]).unwrap().iter().map(|r| r.get(0)).collect();
            assert!(plan.iter().any(|l| l.contains(&format!("{table}_v"))), "not through the index: {sql}\n{plan:?}");
            let mut ids: Vec<i32> = c.query(&sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).iter().map(|r| r.get(0)).collect();
            ids.sort_unstable();
            ids
        })
        .collect()
}

/// Every predicate through the index (plain and bitmap) equals the
/// sequential scan, EXCEPT ALL both ways.
pub fn differential(c: &mut Client, table: &str, predicates: &[String]) {
    for p in predicates {
        crate::check_predicate(c, table, &format!("{table}_v"), p);
    }
}

/// Runs the case's check function on the index.
pub fn check(c: &mut Client, case: &Case, table: &str) {
    c.query(&format!("SELECT * FROM {}('{table}_v')", case.check), &[]).unwrap_or_else(|e| panic!("{} on {table}_v: {e:?}", case.check));
}

pub fn predicates(case: &Case, rng: &mut SplitMix64, n: usize) -> Vec<String> {
    (0..n).map(|_| (case.predicate)(rng)).collect()
}

/// A batch through `gpuindex_search` equals the join of the queries with
/// the table by sequential scan, and `gpuindex_nearest` (where the AM has
/// an ordering operator) the distances of ORDER BY ... LIMIT k, for
/// `rounds` random batches of up to `n` queries.
pub fn batch_differential(c: &mut Client, case: &Case, table: &str, rng: &mut SplitMix64, rounds: usize, n: usize) {
    let mut found = 0;
    for round in 0..rounds {
        let size = 1 + rng.below(n as u64) as usize;
        let q = (case.batch)(rng, size);
        let quoted: Vec<String> = q.literals.iter().map(|l| format!("'{l}'")).collect();
        let arr = format!("ARRAY[{}]::{}[]", quoted.join(","), q.query_type);
        let op = format!("{}({},{})", q.op, case.column_type, q.query_type);
        crate::set_seq_only(c);
        let sql = format!(
            "WITH got AS (SELECT ord, ctid FROM gpuindex_search('{table}_v', '{op}', {arr})),
                  want AS (SELECT u.ord, t.ctid FROM unnest({arr}) WITH ORDINALITY u(q, ord) JOIN {table} t ON t.v {} u.q)
             SELECT (SELECT count(*) FROM got),
                    (SELECT count(*) FROM (SELECT * FROM got EXCEPT ALL SELECT * FROM want) x),
                    (SELECT count(*) FROM (SELECT * FROM want EXCEPT ALL SELECT * FROM got) x)",
            q.op
        );
        let r = c.query_one(&sql, &[]).unwrap_or_else(|e| panic!("{} batch {op}: {e:?}", case.am));
        let (n_got, extra, missing): (i64, i64, i64) = (r.get(0), r.get(1), r.get(2));
        assert_eq!((extra, missing), (0, 0), "{} round {round}: gpuindex_search '{op}' differs from the join ({n_got} rows)", case.am);
        found += n_got;
        if let Some(near) = case.nearest {
            let k = 1 + rng.below(30);
            let centres: Vec<String> = (0..1 + rng.below(n as u64))
                .map(|_| std::iter::repeat_with(|| (case.value)(rng)).find(|v| v != "NULL").expect("a value"))
                .collect();
            let arr = format!("ARRAY[{}]::{}[]", centres.join(","), case.column_type);
            let op = format!("{near}({0},{0})", case.column_type);
            let sql = format!(
                "WITH got AS (SELECT ord, distance FROM gpuindex_nearest('{table}_v', '{op}', {arr}, {k})),
                      want AS (SELECT u.ord, d.distance FROM unnest({arr}) WITH ORDINALITY u(q, ord),
                               LATERAL (SELECT t.v {near} u.q AS distance FROM {table} t WHERE t.v IS NOT NULL ORDER BY 1 LIMIT {k}) d)
                 SELECT (SELECT count(*) FROM (SELECT * FROM got EXCEPT ALL SELECT * FROM want) x),
                        (SELECT count(*) FROM (SELECT * FROM want EXCEPT ALL SELECT * FROM got) x)"
            );
            let r = c.query_one(&sql, &[]).unwrap_or_else(|e| panic!("{} nearest: {e:?}", case.am));
            let (extra, missing): (i64, i64) = (r.get(0), r.get(1));
            assert_eq!((extra, missing), (0, 0), "{} round {round}: gpuindex_nearest differs from ORDER BY {near} LIMIT {k}", case.am);
        }
    }
    assert!(found > 0, "{}: every batch matched nothing", case.am);
}

/// Four writers insert while two readers compare, in one snapshot each,
/// the index's answers (counts of random predicates, an ordered prefix)
/// with the sequential scan's; then the index holds exactly one entry per
/// row and passes its check.
pub fn concurrent(db: &'static str, case: Case, table: &'static str, seed: u64) {
    let mut c = crate::connect(db);
    let mut rng = SplitMix64::new(seed);
    load(&mut c, &case, table, &mut rng, 4_000);
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = crate::connect(db);
                let mut rng = SplitMix64::new(seed + 1 + w);
                for round in 0..40 {
                    insert(&mut c, &case, table, &mut rng, 1_000_000 * (w as usize + 1) + round * 300, 300);
                }
            })
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2u64)
        .map(|r| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = crate::connect(db);
                let mut rng = SplitMix64::new(seed + 100 + r);
                let mut checks = 0;
                while !stop.load(Ordering::Relaxed) || checks < 5 {
                    let preds = predicates(&case, &mut rng, 3);
                    let order = (case.ordering)(&mut rng);
                    let counts: Vec<String> = preds.iter().map(|p| format!("(SELECT count(*) FROM {table} WHERE {p})")).collect();
                    let q = format!(
                        "SELECT ARRAY[{}], ARRAY(SELECT ({})::text FROM {table} ORDER BY {order} LIMIT 20)",
                        counts.join(","),
                        order.trim_end_matches(" DESC")
                    );
                    let mut tx = c.build_transaction().isolation_level(postgres::IsolationLevel::RepeatableRead).start().unwrap();
                    tx.batch_execute(
                        "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL gpuindex.gpu_min_batch = 1",
                    )
                    .unwrap();
                    let r = tx.query_one(&q, &[]).unwrap_or_else(|e| panic!("{q}: {e:?}"));
                    let via_index: (Vec<i64>, Vec<Option<String>>) = (r.get(0), r.get(1));
                    tx.batch_execute(
                        "SET LOCAL enable_seqscan = on; SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off",
                    )
                    .unwrap();
                    let r = tx.query_one(&q, &[]).unwrap();
                    let via_seq: (Vec<i64>, Vec<Option<String>>) = (r.get(0), r.get(1));
                    tx.commit().unwrap();
                    assert_eq!(via_index, via_seq, "{}: index and heap disagree under concurrent inserts: {q}", case.am);
                    checks += 1;
                }
                checks
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() >= 5);
    }
    check(&mut c, &case, table);
    let r = c.query_one(&case.entries.replace("{t}", table), &[]).unwrap();
    let (entries, rows): (i64, i64) = (r.get(0), r.get(1));
    assert_eq!(entries, rows, "{}: every row has exactly one index entry", case.am);
    differential(&mut c, table, &predicates(&case, &mut rng, 10));
    c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
}

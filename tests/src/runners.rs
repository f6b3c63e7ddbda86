//! Test runners shared by every access method: an access method plugs in
//! with a `Case` (its table, index, rows and random predicates); a runner
//! loads it, changes it (inserts that split or fill the delta, deletes,
//! HOT and non-HOT updates, VACUUM, the AM's maintenance), and compares the
//! answers through the index, by EXCEPT ALL against a sequential scan or
//! against another server (a streaming replica).

use gpuindex_engine::rng::SplitMix64;
use postgres::Client;

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
    }
}

pub fn cases() -> Vec<Case> {
    vec![gpu_btree(), gpu_spatial()]
}

/// Inserts `n` random rows with ids from `first`.
pub fn insert(c: &mut Client, case: &Case, table: &str, rng: &mut SplitMix64, first: usize, n: usize) {
    let rows: Vec<String> = (0..n).map(|i| format!("({}, {})", first + i, (case.value)(rng))).collect();
    for chunk in rows.chunks(2000) {
        c.batch_execute(&format!("INSERT INTO {table} (id, v) VALUES {}", chunk.join(","))).unwrap();
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

/// Forces index scans (plain, or bitmap).
pub fn force_index(c: &mut Client, bitmap: bool) {
    c.batch_execute(if bitmap {
        "SET enable_seqscan = off; SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = on"
    } else {
        "SET enable_seqscan = off; SET enable_indexscan = on; SET enable_indexonlyscan = on; SET enable_bitmapscan = off"
    })
    .unwrap();
}

/// The sorted ids matching each predicate, through the index.
pub fn answers(c: &mut Client, table: &str, predicates: &[String]) -> Vec<Vec<i32>> {
    force_index(c, false);
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

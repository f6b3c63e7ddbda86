//! Test runners shared by every access method: an access method plugs in
//! with a `Case` (its table, index, rows and random predicates); a runner
//! loads it, changes it (inserts that split or fill the delta, deletes,
//! HOT and non-HOT updates, VACUUM, the AM's maintenance), and compares the
//! answers through the index, by EXCEPT ALL against a sequential scan or
//! against another server (a streaming replica).

use gpuindex_engine::datasets::{KeySet, PointSet, StringSet};
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

/// The data a case's table holds: the tests' own mix (duplicates,
/// extremes, grid borders), or one of the engine's real-shaped sets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Data {
    Mix,
    Keys(KeySet),
    Points(PointSet),
    /// The engine's generated words (edit distance).
    Words,
    /// One of the engine's string sets (gpu_art).
    Strings(StringSet),
    /// gpu_art's text mix: URLs, words, empty strings, keys of 1200 to
    /// 11200 bytes, heavy duplicates.
    Texts,
}

impl Data {
    pub fn name(self) -> &'static str {
        match self {
            Data::Mix => "mix",
            Data::Keys(k) => k.name(),
            Data::Points(p) => p.name(),
            Data::Words => "words",
            Data::Strings(s) => s.name(),
            Data::Texts => "texts",
        }
    }
}

/// Rows of a table queries pick their values from (about a test table's
/// size: sequential sets then ask about stored values).
const QUERY_ROWS: u64 = 20_000;

#[derive(Clone, Copy)]
pub struct Case {
    pub am: &'static str,
    pub data: Data,
    /// The column's SQL type.
    pub column_type: &'static str,
    /// Row `row`'s value literal of that type (NULL now and then).
    pub value: fn(Data, &mut SplitMix64, u64) -> String,
    /// A random WHERE clause on column `v` that the index answers.
    pub predicate: fn(Data, &mut SplitMix64) -> String,
    /// The AM's own maintenance after changes (a merge), or "".
    pub maintenance: &'static str,
    /// Its check function.
    pub check: &'static str,
    /// A query returning (index entries, rows that must have one) of
    /// table `{t}` when only inserts ran.
    pub entries: &'static str,
    /// A random ORDER BY expression on `v` that the index answers in order.
    pub ordering: fn(Data, &mut SplitMix64) -> String,
    /// A random batch of `n` queries the AM answers in batches.
    pub batch: fn(Data, &mut SplitMix64, usize) -> Queries,
    /// The ordering operator of `gpuindex_nearest` (its queries are of the
    /// column's type), if the AM has one.
    pub nearest: Option<&'static str>,
}

impl Case {
    /// A name for the case's tables: its access method and data.
    pub fn name(&self) -> String {
        format!("{}_{}", self.am, self.data.name())
    }
}

fn mix_key(rng: &mut SplitMix64) -> i64 {
    // Heavy duplicates of small keys, a long tail, extremes.
    match rng.below(20) {
        0 => [i64::MIN, i64::MAX, 0][rng.below(3) as usize],
        1..=12 => (rng.below(60) * rng.below(60)) as i64,
        _ => rng.next_u64() as i64 >> rng.below(60),
    }
}

/// The generator of a real-shaped set's row `row`: its value is a
/// function of the row number alone, so queries can ask for stored values
/// (of rows `0..QUERY_ROWS`) by drawing them again.
fn row_rng(row: u64) -> SplitMix64 {
    SplitMix64::new(row.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5EED)
}

/// Row `row`'s key.
fn key(d: Data, rng: &mut SplitMix64, row: u64) -> i64 {
    match d {
        Data::Keys(k) => k.key(&mut row_rng(row), row),
        _ => mix_key(rng),
    }
}

/// A key like the stored ones.
fn query_key(d: Data, rng: &mut SplitMix64) -> i64 {
    let row = rng.below(QUERY_ROWS);
    key(d, rng, row)
}

fn mix_coord(rng: &mut SplitMix64) -> f64 {
    // A 0.25 grid (duplicates, border hits) around three clusters.
    let c = [10.0, 40.0, 75.0][rng.below(3) as usize];
    c + (rng.below(81) as f64 - 40.0) * 0.25
}

/// Row `row`'s point.
fn point(d: Data, rng: &mut SplitMix64, row: u64) -> (f64, f64) {
    match d {
        Data::Points(p) => p.point(&mut row_rng(row), row),
        _ => (mix_coord(rng), mix_coord(rng)),
    }
}

/// A point like the stored ones, and a query extent around it: the mix's
/// grid steps, or scales from 1e-9 to 50 for the real-shaped sets.
fn query_point(d: Data, rng: &mut SplitMix64) -> ((f64, f64), f64) {
    let row = rng.below(QUERY_ROWS);
    let p = point(d, rng, row);
    let step = match d {
        Data::Points(_) => [1e-9, 1e-4, 0.05, 2.0, 50.0][rng.below(5) as usize],
        _ => 0.25,
    };
    (p, step)
}

pub fn gpu_btree_on(data: Data) -> Case {
    Case { am: "gpu_btree", ..key_case(data) }
}

/// gpu_learned: gpu_btree's keys and queries; entries of the run and the
/// delta's leaves.
pub fn gpu_learned_on(data: Data) -> Case {
    Case {
        am: "gpu_learned",
        check: "gpu_learned_check",
        entries: "SELECT (SELECT sum(entries)::int8 FROM gpu_learned_check('{t}_v') WHERE level = 0), (SELECT count(*) FROM {t} WHERE v IS NOT NULL)",
        ..key_case(data)
    }
}

/// The int8 keys' case (of gpu_btree and gpu_learned).
fn key_case(data: Data) -> Case {
    Case {
        am: "gpu_btree",
        data,
        column_type: "int8",
        value: |d, r, row| if r.below(50) == 0 { "NULL".into() } else { key(d, r, row).to_string() },
        predicate: |d, r| match r.below(5) {
            0 => format!("v = {}", query_key(d, r)),
            1 => match d {
                Data::Mix => format!("v BETWEEN {} AND {}", mix_key(r) - 50, mix_key(r) + 200),
                _ => {
                    let (a, b) = (query_key(d, r), query_key(d, r));
                    format!("v BETWEEN {} AND {}", a.min(b), a.max(b))
                }
            },
            2 => format!("v = ANY(ARRAY[{}]::int8[])", (0..40).map(|_| query_key(d, r).to_string()).collect::<Vec<_>>().join(",")),
            3 => format!("v < {}", query_key(d, r)),
            _ => "v IS NULL".into(),
        },
        maintenance: "",
        check: "gpu_btree_check",
        entries: "SELECT (SELECT sum(entries)::int8 FROM gpu_btree_check('{t}_v') WHERE level = 0), (SELECT count(*) FROM {t} WHERE v IS NOT NULL)",
        ordering: |_, r| if r.below(2) == 0 { "v".into() } else { "v DESC".into() },
        batch: |d, r, n| Queries { op: "=", query_type: "int8", literals: (0..n).map(|_| query_key(d, r).to_string()).collect() },
        nearest: None,
    }
}

pub fn gpu_spatial_on(data: Data) -> Case {
    Case {
        am: "gpu_spatial",
        data,
        column_type: "point",
        value: |d, r, row| {
            if r.below(50) == 0 {
                "NULL".into()
            } else {
                let (x, y) = point(d, r, row);
                format!("point({x:?}, {y:?})")
            }
        },
        predicate: |d, r| {
            let ((x, y), step) = query_point(d, r);
            match r.below(3) {
                0 => {
                    format!("v <@ box(point({x:?},{y:?}), point({:?},{:?}))", x + r.below(12) as f64 * step, y + r.below(12) as f64 * step)
                }
                1 => format!("v <@ circle(point({x:?},{y:?}), {:?})", r.below(8) as f64 * step),
                _ => format!("v ~= point({x:?},{y:?})"),
            }
        },
        maintenance: "SELECT gpu_spatial_merge('{t}_v')",
        check: "gpu_spatial_check",
        entries: "SELECT (SELECT tree_entries + chain_entries FROM gpu_spatial_check('{t}_v')), (SELECT count(*) FROM {t})",
        ordering: |d, r| {
            let ((x, y), _) = query_point(d, r);
            format!("v <-> point({x:?},{y:?})")
        },
        batch: |d, r, n| {
            let one = |r: &mut SplitMix64| {
                let ((x, y), step) = query_point(d, r);
                let far = (x + r.below(12) as f64 * step, y + r.below(12) as f64 * step);
                ((x, y), far, r.below(12) as f64 * step)
            };
            let kind = r.below(3);
            let literals = (0..n)
                .map(|_| {
                    let ((x, y), (fx, fy), radius) = one(r);
                    match kind {
                        0 => format!("(({x:?},{y:?}),({fx:?},{fy:?}))"),
                        1 => format!("<({x:?},{y:?}),{radius:?}>"),
                        _ => format!("({x:?},{y:?})"),
                    }
                })
                .collect();
            let (op, query_type) = [("<@", "box"), ("<@", "circle"), ("~=", "point")][kind as usize];
            Queries { op, query_type, literals }
        },
        nearest: Some("<->"),
    }
}

/// Row `row`'s vector (4 floats): the mix's grid around three clusters
/// (duplicates, equal distances), or a real-shaped set's point and its
/// square and sum.
fn vector(d: Data, rng: &mut SplitMix64, row: u64) -> [f32; 4] {
    match d {
        Data::Points(_) => {
            let (x, y) = point(d, rng, row);
            [x as f32, y as f32, (x * 1e-3) as f32, (y * 1e-3) as f32]
        }
        _ => std::array::from_fn(|_| mix_coord(rng) as f32),
    }
}

fn vector_literal(v: [f32; 4]) -> String {
    format!("'{{{:?},{:?},{:?},{:?}}}'", v[0], v[1], v[2], v[3])
}

/// A stored vector and a radius around it (grid steps).
fn query_vector(d: Data, rng: &mut SplitMix64) -> (String, f64) {
    let row = rng.below(QUERY_ROWS);
    let v = vector(d, rng, row);
    (vector_literal(v), [0.0, 0.25, 1.0, 3.5][rng.below(4) as usize])
}

pub fn gpu_metric_on(data: Data) -> Case {
    Case {
        am: "gpu_metric",
        data,
        column_type: "real[]",
        value: |d, r, row| if r.below(50) == 0 { "NULL".into() } else { format!("{}::real[]", vector_literal(vector(d, r, row))) },
        predicate: |d, r| {
            let (q, radius) = query_vector(d, r);
            format!("v <@ l2_ball({q}, {radius:?})")
        },
        maintenance: "",
        check: "gpu_metric_check",
        entries: "SELECT (SELECT tree_entries + delta_entries + null_entries FROM gpu_metric_check('{t}_v')), (SELECT count(*) FROM {t})",
        ordering: |d, r| format!("v <-> {}", query_vector(d, r).0),
        batch: |d, r, n| {
            let literals = (0..n)
                .map(|_| {
                    let (q, radius) = query_vector(d, r);
                    format!("(\"{}\",{radius:?})", q.trim_matches('\''))
                })
                .collect();
            Queries { op: "<@", query_type: "l2_ball", literals }
        },
        nearest: Some("<->"),
    }
}

/// The longest word the words case stores (its index's `max_length`).
const MAX_WORD: usize = 40;

/// Row `row`'s word (a function of the row number, as the real-shaped
/// sets: queries ask about stored words).
fn word(row: u64) -> String {
    gpuindex_engine::datasets::word(&mut row_rng(row)).chars().take(MAX_WORD).collect()
}

/// gpu_metric on text: edit distance between generated words (shared
/// prefixes, duplicates, a few long words and non-ASCII letters).
pub fn gpu_metric_words() -> Case {
    Case {
        am: "gpu_metric",
        data: Data::Words,
        column_type: "text",
        value: |_, r, row| if r.below(50) == 0 { "NULL".into() } else { format!("'{}'", word(row)) },
        predicate: |_, r| format!("v <@ levenshtein_ball('{}', {})", word(r.below(QUERY_ROWS)), r.below(4)),
        maintenance: "",
        check: "gpu_metric_check",
        entries: "SELECT (SELECT tree_entries + delta_entries + null_entries FROM gpu_metric_check('{t}_v')), (SELECT count(*) FROM {t})",
        ordering: |_, r| format!("v <~> '{}'", word(r.below(QUERY_ROWS))),
        batch: |_, r, n| {
            let literals = (0..n).map(|_| format!("(\"{}\",{})", word(r.below(QUERY_ROWS)), r.below(4))).collect();
            Queries { op: "<@", query_type: "levenshtein_ball", literals }
        },
        nearest: Some("<~>"),
    }
}

/// Row `row`'s gpu_art value as the inside of a SQL string literal
/// (None: NULL): text with quotes doubled, uuids hyphenated, bytea in hex.
fn art_content(d: Data, row: u64) -> Option<String> {
    let r = &mut row_rng(row);
    let text = |s: String| Some(s.replace('\'', "''"));
    match d {
        Data::Strings(StringSet::Uuid) => {
            let h: String = StringSet::Uuid.raw(r).iter().map(|b| format!("{b:02x}")).collect();
            Some(format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..]))
        }
        Data::Strings(StringSet::Random) => {
            Some(format!("\\x{}", StringSet::Random.raw(r).iter().map(|b| format!("{b:02x}")).collect::<String>()))
        }
        _ => match r.below(100) {
            0 | 1 => None,
            2 | 3 if d == Data::Texts => Some(String::new()),
            // Long keys, kept whole up to 2000 encoded bytes and beyond in
            // overflow chains (index-only values over 8000 bytes too); a
            // word repeated, so that many share prefixes past the 512
            // bytes an entry keeps and comparisons read chains.
            4 if d == Data::Texts => {
                let mut long = gpuindex_engine::datasets::word(r).repeat(3000);
                let mut cut = 1200 + r.below(10_000) as usize;
                while !long.is_char_boundary(cut) {
                    cut -= 1;
                }
                long.truncate(cut);
                text(long)
            }
            5..=14 if d == Data::Texts => text(format!("dup-{}", r.below(5))),
            15..=29 if d == Data::Texts => text(gpuindex_engine::datasets::word(r)),
            _ => text(String::from_utf8(StringSet::Urls.raw(r)).expect("ASCII")),
        },
    }
}

/// A stored gpu_art value's content (not NULL).
fn art_query(d: Data, rng: &mut SplitMix64) -> String {
    loop {
        if let Some(v) = art_content(d, rng.below(QUERY_ROWS)) {
            return v;
        }
    }
}

/// The SQL type of gpu_art's data set.
fn art_type(d: Data) -> &'static str {
    match d {
        Data::Strings(StringSet::Uuid) => "uuid",
        Data::Strings(StringSet::Random) => "bytea",
        _ => "text",
    }
}

/// gpu_art on one of the string sets (its SQL type) or the text mix.
pub fn gpu_art_on(data: Data) -> Case {
    Case {
        am: "gpu_art",
        data,
        column_type: art_type(data),
        value: |d, _, row| art_content(d, row).map_or("NULL".into(), |v| format!("'{v}'")),
        predicate: |d, r| {
            let is_text = !matches!(d, Data::Strings(StringSet::Uuid | StringSet::Random));
            match r.below(if is_text { 8 } else { 6 }) {
                0 => format!("v = '{}'", art_query(d, r)),
                1 => {
                    let (a, b) = (art_query(d, r), art_query(d, r));
                    format!("v BETWEEN '{}' AND '{}'", a.clone().min(b.clone()), a.max(b))
                }
                2 => format!(
                    "v = ANY(ARRAY[{}]::{}[])",
                    (0..40).map(|_| format!("'{}'", art_query(d, r))).collect::<Vec<_>>().join(","),
                    art_type(d)
                ),
                3 => format!("v < '{}'", art_query(d, r)),
                4 => format!("v > '{}'", art_query(d, r)),
                5 => "v IS NULL".into(),
                // A prefix of a stored text, cut at a character boundary.
                p => {
                    let v = art_query(d, r);
                    let cut =
                        (0..=v.len()).filter(|&i| v.is_char_boundary(i)).nth(r.below(v.chars().count() as u64 + 1) as usize).unwrap_or(0);
                    let prefix = v[..cut].trim_end_matches('\'');
                    // LIKE needs a fixed prefix to use an index; a
                    // literal prefix then % is answered exactly by the
                    // index (^@), other patterns keep the LIKE as filter.
                    if p == 6 || prefix.is_empty() || prefix.contains(['%', '_', '\\']) {
                        format!("v ^@ '{prefix}'")
                    } else {
                        let tail = ["%", "%%", "_%", "%_"][r.below(4) as usize];
                        format!("v LIKE '{prefix}{tail}'")
                    }
                }
            }
        },
        maintenance: "",
        check: "gpu_art_check",
        entries: "SELECT (SELECT sum(entries)::int8 FROM gpu_art_check('{t}_v') WHERE level = 0), (SELECT count(*) FROM {t})",
        ordering: |_, r| if r.below(2) == 0 { "v".into() } else { "v DESC".into() },
        batch: |d, r, n| Queries { op: "=", query_type: art_type(d), literals: (0..n).map(|_| art_query(d, r)).collect() },
        nearest: None,
    }
}

pub fn gpu_art() -> Case {
    gpu_art_on(Data::Texts)
}

pub fn gpu_btree() -> Case {
    gpu_btree_on(Data::Mix)
}

pub fn gpu_learned() -> Case {
    gpu_learned_on(Data::Mix)
}

pub fn gpu_spatial() -> Case {
    gpu_spatial_on(Data::Mix)
}

pub fn gpu_metric() -> Case {
    gpu_metric_on(Data::Mix)
}

/// Every access method on the real-shaped sets and on uniform data.
pub fn real_shaped_cases() -> Vec<Case> {
    let keys = KeySet::ALL.into_iter().flat_map(|k| [gpu_btree_on(Data::Keys(k)), gpu_learned_on(Data::Keys(k))]);
    let points = PointSet::ALL.into_iter().map(|p| gpu_spatial_on(Data::Points(p)));
    // Cities as vectors: clusters, far outliers, repeated points.
    let vectors = [gpu_metric_on(Data::Points(PointSet::Cities))];
    let strings = [StringSet::Urls, StringSet::Uuid, StringSet::Random].map(|s| gpu_art_on(Data::Strings(s)));
    keys.chain(points).chain(vectors).chain(strings).collect()
}

pub fn cases() -> Vec<Case> {
    vec![gpu_btree(), gpu_learned(), gpu_spatial(), gpu_metric(), gpu_metric_words(), gpu_art()]
}

/// The INSERTs of `n` random rows with ids from `first`.
pub fn inserts(case: &Case, table: &str, rng: &mut SplitMix64, first: usize, n: usize) -> Vec<String> {
    let rows: Vec<String> = (0..n).map(|i| format!("({}, {})", first + i, (case.value)(case.data, rng, (first + i) as u64))).collect();
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
    let with = match (case.am, case.data) {
        ("gpu_spatial", _) => " WITH (leaf_capacity = 64, delta_limit = 2)",
        ("gpu_metric", Data::Words) => " WITH (node_capacity = 4, delta_limit = 2, max_length = 40)",
        // Several levels, and rebuilds at VACUUM.
        ("gpu_metric", _) => " WITH (node_capacity = 4, delta_limit = 2)",
        _ => "",
    };
    // gpu_art indexes text in the C collation only: its columns say so.
    let collate = if case.am == "gpu_art" && case.column_type == "text" { " COLLATE \"C\"" } else { "" };
    c.batch_execute(&format!(
        "SET client_min_messages = warning; DROP TABLE IF EXISTS {table};
         CREATE TABLE {table} (id int, v {}{collate}) WITH (fillfactor = 80);",
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
    let v = (case.value)(case.data, rng, first as u64);
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
    (0..n).map(|_| (case.predicate)(case.data, rng)).collect()
}

/// A batch through `gpuindex_search` equals the join of the queries with
/// the table by sequential scan, and `gpuindex_nearest` (where the AM has
/// an ordering operator) the distances of ORDER BY ... LIMIT k, for
/// `rounds` random batches of up to `n` queries.
pub fn batch_differential(c: &mut Client, case: &Case, table: &str, rng: &mut SplitMix64, rounds: usize, n: usize) {
    let mut found = 0;
    for round in 0..rounds {
        let size = 1 + rng.below(n as u64) as usize;
        let q = (case.batch)(case.data, rng, size);
        let quoted: Vec<String> = q.literals.iter().map(|l| format!("'{l}'")).collect();
        let arr = format!("ARRAY[{}]::{}[]", quoted.join(","), q.query_type);
        let op = format!("{}({},{})", q.op, case.column_type, q.query_type);
        crate::set_seq_only(c);
        // generate_subscripts, not unnest: unnest spreads composite queries
        // (balls) into their columns.
        let sql = format!(
            "WITH got AS (SELECT ord, ctid FROM gpuindex_search('{table}_v', '{op}', {arr})),
                  want AS (SELECT i::int8 AS ord, t.ctid FROM generate_subscripts({arr}, 1) i JOIN {table} t ON t.v {} ({arr})[i])
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
                .map(|_| {
                    std::iter::repeat_with(|| {
                        let row = rng.below(QUERY_ROWS);
                        (case.value)(case.data, rng, row)
                    })
                    .find(|v| v != "NULL")
                    .expect("a value")
                })
                .collect();
            let arr = format!("ARRAY[{}]::{}[]", centres.join(","), case.column_type);
            // VALUES, not unnest: an array of real[] is one 2-D real[].
            let rows: Vec<String> =
                centres.iter().enumerate().map(|(i, v)| format!("({}::int8, {v}::{})", i + 1, case.column_type)).collect();
            let op = format!("{near}({0},{0})", case.column_type);
            let sql = format!(
                "WITH got AS (SELECT ord, distance FROM gpuindex_nearest('{table}_v', '{op}', {arr}, {k})),
                      want AS (SELECT u.ord, d.distance FROM (VALUES {}) u(ord, q),
                               LATERAL (SELECT t.v {near} u.q AS distance FROM {table} t WHERE t.v IS NOT NULL ORDER BY 1 LIMIT {k}) d)
                 SELECT (SELECT count(*) FROM (SELECT * FROM got EXCEPT ALL SELECT * FROM want) x),
                        (SELECT count(*) FROM (SELECT * FROM want EXCEPT ALL SELECT * FROM got) x)",
                rows.join(",")
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
    concurrent_with(db, case, table, seed, "")
}

/// `concurrent`, with a session running `maintenance` ({t}: the table) in a
/// loop while the writers write.
pub fn concurrent_with(db: &'static str, case: Case, table: &'static str, seed: u64, maintenance: &'static str) {
    let mut c = crate::connect(db);
    let mut rng = SplitMix64::new(seed);
    load(&mut c, &case, table, &mut rng, 4_000);
    let writing = Arc::new(AtomicBool::new(true));
    let maintainer = (!maintenance.is_empty()).then(|| {
        let writing = writing.clone();
        std::thread::spawn(move || {
            let mut c = crate::connect(db);
            let mut rounds = 0;
            while writing.load(Ordering::Relaxed) {
                c.batch_execute(&maintenance.replace("{t}", table)).unwrap_or_else(|e| panic!("{maintenance}: {e:?}"));
                rounds += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            rounds
        })
    });
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
                    let order = (case.ordering)(case.data, &mut rng);
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
                    let r = match tx.query_one(&q, &[]) {
                        Ok(r) => r,
                        // A serialization failure (gpu_learned: a merge as
                        // a parallel scan started) asks for a retry, as an
                        // application retries one.
                        Err(e) if e.code() == Some(&postgres::error::SqlState::T_R_SERIALIZATION_FAILURE) => continue,
                        Err(e) => panic!("{q}: {e:?}"),
                    };
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
    writing.store(false, Ordering::Relaxed);
    if let Some(m) = maintainer {
        assert!(m.join().unwrap() > 0);
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

/// The batched index join equals the planner's own joins (`check_join`):
/// an outer table holds `n` of the case's batch queries (duplicates and a
/// NULL among them), joined with the case's table by the batch's operator
/// as inner, left (with an extra join clause), semi and anti joins, and
/// with an outer filter and a projection; and the same queries through
/// `gpuindex_search`, joined back by ctid. Returns the inner join's rows.
pub fn join_differential(c: &mut Client, case: &Case, table: &str, rng: &mut SplitMix64, n: usize) -> usize {
    let q = (case.batch)(case.data, rng, n);
    let outer = format!("{table}_q");
    let mut rows: Vec<String> = q.literals.iter().enumerate().map(|(i, l)| format!("({i}, '{l}')")).collect();
    rows.extend(q.literals.iter().take(3).enumerate().map(|(i, l)| format!("({}, '{l}')", n + i)));
    rows.push(format!("({}, NULL)", n + 3));
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {outer}; CREATE TABLE {outer} (ord int, q {});
         INSERT INTO {outer} VALUES {}; ANALYZE {outer}; ANALYZE {table}",
        q.query_type,
        rows.join(",")
    ))
    .unwrap();
    let op = q.op;
    let inner = crate::check_join(c, &format!("SELECT o.ord, t.id FROM {outer} o JOIN {table} t ON t.v {op} o.q"));
    for sql in [
        format!("SELECT o.ord, t.id, t.v FROM {outer} o LEFT JOIN {table} t ON t.v {op} o.q AND t.id % 3 <> 0"),
        format!("SELECT o.ord FROM {outer} o WHERE EXISTS (SELECT 1 FROM {table} t WHERE t.v {op} o.q AND t.id % 2 = 0)"),
        format!("SELECT o.ord FROM {outer} o WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE t.v {op} o.q)"),
        format!("SELECT o.ord * 2, t.id + o.ord FROM {outer} o JOIN {table} t ON t.v {op} o.q WHERE o.ord % 4 <> 1 AND t.id > 10"),
    ] {
        crate::check_join(c, &sql);
    }
    // The batch's rows joined back to the table by ctid (a TID probe).
    let quoted: Vec<String> = q.literals.iter().map(|l| format!("'{l}'")).collect();
    let arr = format!("ARRAY[{}]::{}[]", quoted.join(","), q.query_type);
    let search = format!("gpuindex_search('{table}_v', '{op}({},{})', {arr})", case.column_type, q.query_type);
    crate::check_join(c, &format!("SELECT p.ord, t.id, t.v FROM {search} p JOIN {table} t ON t.ctid = p.ctid"));
    c.batch_execute(&format!("DROP TABLE {outer}")).unwrap();
    inner
}

/// The LATERAL top-k pattern through the batched index join equals the
/// planner's own plan (`check_join`), for a case with an ordering
/// operator: an outer table of `n` stored values (duplicates and a NULL
/// among them), the k nearest rows of each by `(SELECT ... ORDER BY t.v
/// <op> o.q LIMIT k)`, plain, with WHERE clauses (one reading the outer
/// row, one so selective the index runs out and NULL rows fill in), as a
/// LEFT JOIN with a join clause on the subquery's output. Rows are
/// compared as (outer row, distance): which of several rows at the k-th
/// distance comes out is the plan's choice.
pub fn lateral_differential(c: &mut Client, case: &Case, table: &str, rng: &mut SplitMix64, n: usize) {
    let Some(op) = case.nearest else { return };
    let outer = format!("{table}_c");
    let values: Vec<String> = (0..n)
        .map(|_| {
            let row = rng.below(QUERY_ROWS);
            (case.value)(case.data, rng, row)
        })
        .collect();
    let mut rows: Vec<String> = values.iter().enumerate().map(|(i, v)| format!("({i}, {v})")).collect();
    rows.push(format!("({n}, {})", values[0]));
    rows.push(format!("({}, NULL)", n + 1));
    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {outer}; CREATE TABLE {outer} (ord int, q {});
         INSERT INTO {outer} VALUES {}; ANALYZE {outer}; ANALYZE {table}",
        case.column_type,
        rows.join(",")
    ))
    .unwrap();
    let k = 1 + rng.below(12);
    let sub = |cols: &str, wher: &str, k: u64| {
        format!("(SELECT {cols}, t.v {op} o.q AS d FROM {table} t {wher} ORDER BY t.v {op} o.q LIMIT {k})")
    };
    for sql in [
        format!("SELECT o.ord, s.d FROM {outer} o CROSS JOIN LATERAL {} s", sub("t.id", "", k)),
        format!("SELECT o.ord, s.d FROM {outer} o CROSS JOIN LATERAL {} s", sub("t.id % 3 AS x", "WHERE t.id % 3 <> 1", k)),
        format!("SELECT o.ord, s.d FROM {outer} o CROSS JOIN LATERAL {} s", sub("t.id", "WHERE t.id > o.ord * 3", k)),
        format!("SELECT o.ord, s.d FROM {outer} o CROSS JOIN LATERAL {} s", sub("t.id", "WHERE t.id % 997 = 5", 20)),
        format!("SELECT o.ord, s.d FROM {outer} o LEFT JOIN LATERAL {} s ON s.d < 1.0 WHERE o.ord % 2 = 0", sub("t.id", "", k)),
    ] {
        crate::check_join(c, &sql);
    }
    c.batch_execute(&format!("DROP TABLE {outer}")).unwrap();
}

//! Helpers of the SQL benchmark programs: a connection from the
//! environment, the table printer (medians and the generator are the
//! engine's).

use postgres::{Client, NoTls};

/// A connection to PGDATABASE (default postgres) at PGHOST/PGPORT/PGUSER.
pub fn connect() -> Client {
    let mut c = postgres::Config::new();
    c.host(&std::env::var("PGHOST").unwrap_or_else(|_| "/tmp".into()));
    c.port(std::env::var("PGPORT").ok().and_then(|p| p.parse().ok()).unwrap_or(5432));
    c.user(&std::env::var("PGUSER").unwrap_or_else(|_| "postgres".into()));
    c.dbname(&std::env::var("PGDATABASE").unwrap_or_else(|_| "postgres".into()));
    c.connect(NoTls).expect("connect (PGHOST/PGPORT/PGUSER)")
}

pub use gpuindex_engine::rng::SplitMix64;
/// Median seconds of `reps` runs after one warm-up.
pub use gpuindex_engine::timing::median_secs as time;

/// One measured quantity for each setup.
pub struct Row {
    pub what: String,
    pub unit: &'static str,
    pub values: Vec<f64>,
    pub lower_is_better: bool,
}

/// Records `v` for setup `i` of `setups` in the row named `what`.
pub fn push(rows: &mut Vec<Row>, setups: usize, i: usize, what: String, unit: &'static str, lower: bool, v: f64) {
    // As it is measured too, so that a run cut short still reports.
    eprintln!("setup {i}: {what}: {v:.3} {unit}");
    if let Some(r) = rows.iter_mut().find(|r| r.what == what) {
        r.values[i] = v;
    } else {
        let mut values = vec![f64::NAN; setups];
        values[i] = v;
        rows.push(Row { what, unit, values, lower_is_better: lower });
    }
}

/// The scan (and function) nodes of a statement's plan, outermost first,
/// with the index each uses: "Function Scan, Index Scan (sp_p)".
pub fn plan_of(c: &mut Client, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> String {
    let rows = c.query(&format!("EXPLAIN {sql}"), params).unwrap();
    let nodes: Vec<String> = rows
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|l| l.contains("Scan") && !l.trim_start().starts_with("Index Cond") && !l.contains("Filter"))
        .map(|l| {
            let node = l.trim().trim_start_matches("->").trim().split("  ").next().unwrap_or("").to_string();
            let kind = node.split(" on ").next().unwrap_or("").split(" using").next().unwrap_or("").to_string();
            match node.split(" using ").nth(1) {
                Some(rest) => format!("{kind} ({})", rest.split(' ').next().unwrap_or("")),
                None => kind,
            }
        })
        .collect();
    nodes.join(", ")
}

/// What one run of a statement did, from EXPLAIN (ANALYZE, BUFFERS): the
/// top node's buffer counts and the execution time.
pub fn buffers_of(c: &mut Client, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> String {
    // The time reads took (a superuser setting; the bench connects as one).
    c.batch_execute("SET track_io_timing = on").unwrap();
    let lines: Vec<String> =
        c.query(&format!("EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) {sql}"), params).unwrap().iter().map(|r| r.get(0)).collect();
    c.batch_execute("RESET track_io_timing").unwrap();
    let pick = |key: &str| lines.iter().find(|l| l.trim_start().starts_with(key)).map_or("", |l| l.trim()).to_string();
    format!("{}; {}; {}", pick("Buffers:"), pick("I/O Timings:"), pick("Execution Time:"))
}

/// Where one run of a statement spent its time, from EXPLAIN (ANALYZE,
/// SUMMARY): planning, execution, and the time lines gpuindex's nodes
/// print (index, heap).
pub fn times_of(c: &mut Client, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> String {
    let lines: Vec<String> = c.query(&format!("EXPLAIN (ANALYZE, SUMMARY) {sql}"), params).unwrap().iter().map(|r| r.get(0)).collect();
    let keys = ["Planning Time:", "Execution Time:", "Index Time:", "Heap Time:"];
    let picked: Vec<&str> = lines.iter().map(|l| l.trim()).filter(|l| keys.iter().any(|k| l.starts_with(k))).collect();
    picked.join("; ")
}

/// Prints rows as a markdown table, one column per setup; NaN is "-".
pub fn print_table(setups: &[&str], rows: &[Row]) {
    println!("| measure | {} |", setups.join(" | "));
    println!("|---|{}|", setups.iter().map(|_| "---:").collect::<Vec<_>>().join("|"));
    for r in rows {
        let cells: Vec<String> = r.values.iter().map(|v| if v.is_nan() { "-".to_string() } else { format!("{v:.2} {}", r.unit) }).collect();
        println!("| {} | {} |", r.what, cells.join(" | "));
    }
}

/// The server, shared_buffers and GPU, as a heading line.
pub fn describe_server(c: &mut Client) -> String {
    let v: String = c.query_one("SELECT version()", &[]).unwrap().get(0);
    let sb: String = c.query_one("SHOW shared_buffers", &[]).unwrap().get(0);
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS gpuindex").unwrap();
    let r = c.query_one("SELECT gpu_found, coalesce(name, reason) FROM gpuindex_device_info()", &[]).unwrap();
    let (found, what): (bool, Option<String>) = (r.get(0), r.get(1));
    let cpus = std::thread::available_parallelism().map(|x| x.get()).unwrap_or(0);
    format!(
        "{v}; shared_buffers = {sb}; GPU: {}; client machine: {cpus} hardware threads",
        if found { what.unwrap_or_default() } else { format!("none ({})", what.unwrap_or_default()) }
    )
}

/// A float4 vector as a PostgreSQL array literal's text.
pub fn vector_text(v: &[f32]) -> String {
    let parts: Vec<String> = v.iter().map(|x| format!("{x:?}")).collect();
    format!("{{{}}}", parts.join(","))
}

/// Creates `table (id int8, v real[])` with `n` vectors of `dim` floats
/// of `set` (ids from 1), by COPY, then VACUUM ANALYZE; returns seconds.
pub fn load_vectors(c: &mut Client, table: &str, set: gpuindex_engine::datasets::VectorSet, n: usize, dim: usize) -> f64 {
    use std::io::Write;
    let t = std::time::Instant::now();
    c.batch_execute(&format!("DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id int8, v real[])")).unwrap();
    let mut w = c.copy_in(&format!("COPY {table} (id, v) FROM STDIN")).unwrap();
    let chunk = 50_000;
    for start in (0..n).step_by(chunk) {
        let rows = chunk.min(n - start);
        let data = gpuindex_engine::datasets::VectorSet::vectors(set, rows, dim, 1 + start as u64);
        let mut buf = String::new();
        for (i, v) in data.chunks(dim).enumerate() {
            buf.push_str(&format!("{}\t{}\n", start + i + 1, vector_text(v)));
        }
        w.write_all(buf.as_bytes()).unwrap();
    }
    w.finish().unwrap();
    c.batch_execute(&format!("VACUUM (ANALYZE) {table}")).unwrap();
    t.elapsed().as_secs_f64()
}

/// Settings that force index scans where indexes are compared with each
/// other. jit = off: the disable_cost that forces them (1e10 a disabled
/// node) trips jit_above_cost, and every contender would pay for compiling
/// the query's expressions (12-50 ms a statement here) where neither plan,
/// at its real cost, is compiled.
pub const FORCE_INDEX: &str = "SET enable_seqscan = off; SET enable_bitmapscan = off; SET jit = off";

/// A session of one contender in an interleaved run (`--rounds`): every
/// index of `indexes` but `keep` dropped inside a transaction the caller
/// rolls back, then `settings` (SET LOCAL ...). Each contender sees only
/// its own index while all of them stay built.
pub fn contender_session(indexes: &[&str], keep: usize, settings: &str) -> Client {
    let mut s = connect();
    let drops: String = (0..indexes.len()).filter(|&x| x != keep).map(|x| format!("DROP INDEX {}; ", indexes[x])).collect();
    s.batch_execute(&format!("BEGIN; {drops}{settings}")).unwrap();
    s
}

/// Per-round values as "median (fastest - slowest)"; "-" where a round
/// has none (NaN: the contender cannot answer).
pub fn rounds_cell(v: &[f64]) -> String {
    if v.is_empty() || v.iter().any(|x| x.is_nan()) {
        return "-".to_string();
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    format!("{:.1} ({:.1} - {:.1})", s[s.len() / 2], s[0], s[s.len() - 1])
}

//! Helpers for the integration tests: they run against a live server
//! (PGHOST, PGPORT, PGUSER from the environment; scripts/test.sh starts a
//! throwaway cluster and sets them), each test file in its own database.

pub mod bench;
pub mod runners;

use postgres::{Client, Config, NoTls};

fn config_at(host: &str, db: &str) -> Config {
    let mut c = Config::new();
    c.host(host);
    c.port(std::env::var("PGPORT").ok().and_then(|p| p.parse().ok()).unwrap_or(5432));
    c.user(&std::env::var("PGUSER").unwrap_or_else(|_| "postgres".into()));
    c.dbname(db);
    c
}

/// A connection to database `db`, created (with the extension) on first use.
pub fn connect(db: &str) -> Client {
    connect_creating(&std::env::var("PGHOST").unwrap_or_else(|_| "/var/run/postgresql".into()), db)
}

/// A connection to database `db` of the server at `host` (a socket
/// directory), which must exist there (a standby's, say).
pub fn connect_at(host: &str, db: &str) -> Result<Client, postgres::Error> {
    config_at(host, db).connect(NoTls)
}

/// As `connect`, for the server at `host`.
pub fn connect_creating(host: &str, db: &str) -> Client {
    let mut admin = config_at(host, "postgres").connect(NoTls).expect("connect to the test server (PGHOST/PGPORT)");
    let exists = admin.query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&db]).unwrap().is_some();
    if !exists {
        // Concurrent tests may race to create it; a duplicate is fine.
        let _ = admin.batch_execute(&format!("CREATE DATABASE {db}"));
    }
    let mut c = config_at(host, db).connect(NoTls).expect("connect to the test database");
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS gpuindex").ok();
    c
}

/// Whether the server's backends find a usable GPU.
pub fn server_has_gpu(c: &mut Client) -> bool {
    c.query_one("SELECT gpu_found FROM gpuindex_device_info()", &[]).unwrap().get(0)
}

/// The GPU is required (GPUINDEX_REQUIRE_GPU=1) but the server has none.
pub fn gpu_missing_but_required(c: &mut Client) -> bool {
    gpuindex_engine::gpu_required() && !server_has_gpu(c)
}

/// SQLSTATE, message and hint of a failed statement.
pub fn error_of(e: &postgres::Error) -> (String, String, Option<String>) {
    let db = e.as_db_error().unwrap_or_else(|| panic!("not a server error: {e}"));
    (db.code().code().to_string(), db.message().to_string(), db.hint().map(str::to_string))
}

/// Forces index scans (plain, or bitmap when `bitmap`).
pub fn set_index_only(c: &mut Client, bitmap: bool) {
    c.batch_execute("SET enable_seqscan = off; SET enable_indexscan = on; SET enable_indexonlyscan = on").unwrap();
    c.batch_execute(if bitmap {
        "SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = on"
    } else {
        "SET enable_bitmapscan = off"
    })
    .unwrap();
}

pub fn set_seq_only(c: &mut Client) {
    c.batch_execute("SET enable_seqscan = on; SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = off")
        .unwrap();
}

/// Asserts that `SELECT id FROM table WHERE pred` gives the same multiset
/// through the index (plain and bitmap) as by sequential scan.
pub fn check_predicate(c: &mut Client, table: &str, index: &str, pred: &str) {
    set_seq_only(c);
    c.batch_execute(&format!("DROP TABLE IF EXISTS seq_ids; CREATE TEMP TABLE seq_ids AS SELECT id FROM {table} WHERE {pred}"))
        .unwrap_or_else(|e| panic!("{}: {e:?}", short(pred)));
    for bitmap in [false, true] {
        set_index_only(c, bitmap);
        let plan: String = c
            .query(&format!("EXPLAIN SELECT id FROM {table} WHERE {pred}"), &[])
            .unwrap()
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(plan.contains(index), "{}: the index was not used:\n{plan}", short(pred));
        let q = format!(
            "SELECT (SELECT count(*) FROM ((SELECT id FROM {table} WHERE {pred}) EXCEPT ALL (SELECT id FROM seq_ids)) a),
                    (SELECT count(*) FROM ((SELECT id FROM seq_ids) EXCEPT ALL (SELECT id FROM {table} WHERE {pred})) b)"
        );
        let row = c.query_one(&q, &[]).unwrap_or_else(|e| panic!("{}: {e:?}", short(pred)));
        let (extra, missing): (i64, i64) = (row.get(0), row.get(1));
        assert_eq!((extra, missing), (0, 0), "{table} WHERE {} (bitmap: {bitmap}): extra/missing rows via the index", short(pred));
    }
}

/// Runs gpu_btree_check on an index (an ERROR fails the test).
pub fn check_index(c: &mut Client, index: &str) {
    c.query(&format!("SELECT * FROM gpu_btree_check('{index}')"), &[]).unwrap_or_else(|e| panic!("{index}: {e}"));
}

/// The (position, value) rows of `sql`, sorted.
pub fn sorted_pairs<T: for<'a> postgres::types::FromSql<'a> + Ord>(c: &mut Client, sql: &str) -> Vec<(i64, T)> {
    let mut v: Vec<(i64, T)> = c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).iter().map(|r| (r.get(0), r.get(1))).collect();
    v.sort_unstable();
    v
}

/// `ARRAY[items]::ty[]`.
pub fn sql_array(items: &[String], ty: &str) -> String {
    format!("ARRAY[{}]::{ty}[]", items.join(","))
}

/// A long SQL predicate cut for messages.
pub fn short(s: &str) -> String {
    if s.len() > 400 {
        format!("{}...", &s[..400])
    } else {
        s.to_string()
    }
}

/// VACUUMs `table` (past a new xid each time) until the free space map of
/// `index` shows at least `pages(c)` free pages, or twenty seconds pass:
/// pages freed at some xid are recycled only once no snapshot anywhere in
/// the cluster is older (other tests' may be). Returns the free pages seen.
pub fn vacuum_until_free(c: &mut Client, table: &str, index: &str, pages: impl Fn(&mut Client) -> i64) -> i64 {
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_freespacemap").unwrap();
    let mut free = 0;
    for _ in 0..100 {
        c.batch_execute("SELECT txid_current()").unwrap();
        c.batch_execute(&format!("VACUUM {table}")).unwrap();
        free = c.query_one(&format!("SELECT count(*) FROM pg_freespace('{index}') WHERE avail > 0"), &[]).unwrap().get(0);
        if free >= pages(c) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    free
}

/// VACUUM (ANALYZE) `table` until the visibility map has every page
/// all-visible: a transaction of a test running beside this one holds
/// back what VACUUM may mark. False if that never came (within a minute).
pub fn vacuum_until_all_visible(c: &mut Client, table: &str) -> bool {
    for _ in 0..120 {
        c.batch_execute(&format!("VACUUM ANALYZE {table}")).unwrap();
        let r = c.query_one(&format!("SELECT relallvisible >= relpages FROM pg_class WHERE oid = '{table}'::regclass"), &[]).unwrap();
        if r.get::<_, bool>(0) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    eprintln!("{table}: never all-visible (older transactions beside this test)");
    false
}

/// Parallel index scans against serial sequential scans (the index forced
/// and parallelism made free): each of `queries` (two int8 columns; range
/// queries, those with BETWEEN or '>', must plan a parallel index scan),
/// each of `ordered` (one text column, ascending; run both ways through
/// Gather Merge) in order, and each of `splits` (a count, and the rows
/// it must find) with the leader out: both workers return rows.
pub fn parallel_differential(c: &mut Client, queries: &[String], ordered: &[&str], splits: &[(&str, i64)]) {
    let parallel = "SET enable_seqscan = off; SET enable_bitmapscan = off; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
                    SET min_parallel_index_scan_size = 0; SET min_parallel_table_scan_size = 0; SET max_parallel_workers_per_gather = 3";
    let serial = "RESET enable_seqscan; RESET enable_bitmapscan; SET enable_indexscan = off; SET enable_indexonlyscan = off;
                  SET max_parallel_workers_per_gather = 0";
    let lines = |c: &mut Client, q: &str| -> Vec<String> { c.query(q, &[]).unwrap().iter().map(|r| r.get(0)).collect() };
    for q in queries {
        c.batch_execute(serial).unwrap();
        let r = c.query_one(q.as_str(), &[]).unwrap();
        let want: (i64, i64) = (r.get(0), r.get(1));
        c.batch_execute("RESET enable_indexscan; RESET enable_indexonlyscan").unwrap();
        c.batch_execute(parallel).unwrap();
        let plan = lines(c, &format!("EXPLAIN {q}"));
        // Ranges are planned parallel here; `= ANY` and IS NULL may be or
        // not (by the sampled statistics): equal either way.
        let range = q.contains("BETWEEN") || q.contains('>');
        assert!(!range || plan.iter().any(|l| l.contains("Parallel Index")), "not a parallel index scan: {q}\n{plan:#?}");
        let r = c.query_one(q.as_str(), &[]).unwrap();
        assert_eq!((r.get::<_, i64>(0), r.get::<_, i64>(1)), want, "{q}");
    }
    // Ordered both ways through Gather Merge (its comparisons made free,
    // or the planner keeps one serial index scan).
    for q in ordered.iter().flat_map(|q| [q.to_string(), format!("{q} DESC")]) {
        c.batch_execute(serial).unwrap();
        let want = lines(c, &q);
        c.batch_execute("RESET enable_indexscan; RESET enable_indexonlyscan").unwrap();
        c.batch_execute(parallel).unwrap();
        c.batch_execute("SET cpu_operator_cost = 0").unwrap();
        let plan = lines(c, &format!("EXPLAIN {q}"));
        assert!(plan.iter().any(|l| l.contains("Gather Merge")) && plan.iter().any(|l| l.contains("Parallel Index")), "{q}\n{plan:#?}");
        let got = lines(c, &q);
        assert!(got == want, "{q}: {} rows, {} by the sequential scan", got.len(), want.len());
        c.batch_execute("RESET cpu_operator_cost").unwrap();
    }
    // Ranges are split: with the leader out, each worker returns rows
    // (they take pages in turn; Gather Merge's comparisons made free).
    c.batch_execute("SET parallel_leader_participation = off; SET max_parallel_workers_per_gather = 2; SET cpu_operator_cost = 0").unwrap();
    for &(q, rows) in splits {
        let plan = lines(c, &format!("EXPLAIN (ANALYZE, VERBOSE, TIMING OFF, COSTS OFF) {q}"));
        let scan = plan.iter().position(|l| l.contains("Parallel Index")).unwrap_or_else(|| panic!("{plan:#?}"));
        let worker_rows: Vec<i64> = plan[scan..]
            .iter()
            .filter(|l| l.trim_start().starts_with("Worker "))
            .filter_map(|l| l.split("rows=").nth(1)?.split_whitespace().next()?.parse().ok())
            .collect();
        if worker_rows.len() == 2 {
            assert!(worker_rows.iter().all(|&r| r > 0), "a worker returned nothing: {plan:#?}");
            assert_eq!(worker_rows.iter().sum::<i64>(), rows, "{plan:#?}");
        } else {
            // Fewer workers than asked (the server's pool was busy): nothing to split.
            eprintln!("workers launched: {worker_rows:?}");
        }
    }
    c.batch_execute(
        "RESET parallel_leader_participation; RESET max_parallel_workers_per_gather; RESET cpu_operator_cost; RESET enable_seqscan; RESET enable_bitmapscan;
         RESET parallel_setup_cost; RESET parallel_tuple_cost; RESET min_parallel_index_scan_size; RESET min_parallel_table_scan_size;
         RESET enable_indexscan; RESET enable_indexonlyscan",
    )
    .unwrap();
}

/// The plan of `sql`, one string.
pub fn explain(c: &mut impl postgres::GenericClient, sql: &str) -> String {
    plan_lines(c, sql).join("\n")
}

/// The lines of `EXPLAIN (options) sql`.
pub fn explain_lines(c: &mut impl postgres::GenericClient, options: &str, sql: &str) -> Vec<String> {
    plan_lines(c, &format!("({options}) {sql}"))
}

/// The lines of `EXPLAIN rest`.
fn plan_lines(c: &mut impl postgres::GenericClient, rest: &str) -> Vec<String> {
    c.query(&format!("EXPLAIN {rest}"), &[])
        .unwrap_or_else(|e| panic!("EXPLAIN {}: {e:?}", short(rest)))
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
}

/// The integer after `label: ` on a line of `plan`.
pub fn plan_value(plan: &[String], label: &str) -> i64 {
    let prefix = format!("{label}: ");
    plan.iter()
        .find_map(|l| l.trim_start().strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {label}: {plan:#?}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{label}: {e}: {plan:#?}"))
}

/// The rows of `sql` as text, sorted.
fn rows_as_text(c: &mut Client, sql: &str) -> Vec<String> {
    let mut v: Vec<String> = c
        .query(&format!("SELECT x::text FROM ({sql}) x"), &[])
        .unwrap_or_else(|e| panic!("{}: {e:?}", short(sql)))
        .iter()
        .map(|r| r.get(0))
        .collect();
    v.sort_unstable();
    v
}

/// Column `col` of what a scrollable cursor over `sql` returns, fetched
/// `fetches` times forward or (a third of the time) backward, up to 900
/// rows at a time, in one random order: through the index scan `scan`
/// names (forced; its plan must have no Sort or Materialize above it), and
/// through a sequential scan and a sort. Asserts both equal and returns
/// how many rows were fetched.
pub fn scroll_both_ways<T>(c: &mut Client, sql: &str, scan: &str, col: usize, fetches: usize) -> usize
where
    T: for<'a> postgres::types::FromSql<'a> + PartialEq,
{
    let mut outs = Vec::new();
    for index in [true, false] {
        let mut tx = c.transaction().unwrap();
        if index {
            tx.batch_execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off").unwrap();
            let plan = explain(&mut tx, sql);
            assert!(plan.contains(scan) && !plan.contains("Sort") && !plan.contains("Materialize"), "{plan}");
        } else {
            tx.batch_execute("SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off; SET LOCAL enable_bitmapscan = off")
                .unwrap();
        }
        tx.batch_execute(&format!("DECLARE cur SCROLL CURSOR FOR {sql}")).unwrap();
        let mut r = gpuindex_engine::rng::SplitMix64::new(7);
        let mut got = Vec::new();
        for _ in 0..fetches {
            let n = r.below(900);
            let dir = if r.below(3) == 0 { "BACKWARD" } else { "FORWARD" };
            let rows = tx.query(&format!("FETCH {dir} {n} FROM cur"), &[]).unwrap();
            got.push(rows.iter().map(|row| row.get::<_, T>(col)).collect::<Vec<_>>());
        }
        tx.rollback().unwrap();
        outs.push(got);
    }
    assert!(outs[0] == outs[1], "{}: the cursor through {scan} and through a sort differ", short(sql));
    outs[0].iter().map(Vec::len).sum()
}

/// Asserts that `sql` returns through the batched index join (which its
/// plan must use) the rows the planner's own joins return: on the CPU, on
/// the GPU where the server has one (every chunk a GPU batch), and in
/// chunks of 7 outer rows. Returns how many rows.
pub fn check_join(c: &mut Client, sql: &str) -> usize {
    c.batch_execute("SET gpuindex.enable_join = off").unwrap();
    let want = rows_as_text(c, sql);
    c.batch_execute("SET gpuindex.enable_join = on; SET enable_hashjoin = off; SET enable_mergejoin = off; SET enable_nestloop = off")
        .unwrap();
    let plan = explain(c, sql);
    assert!(plan.contains("GpuIndexJoin"), "{}: the batched join was not used:\n{plan}", short(sql));
    for setting in [
        "SET gpuindex.device = cpu",
        "SET gpuindex.device = auto; SET gpuindex.gpu_min_batch = 1",
        "SET gpuindex.device = cpu; SET gpuindex.join_chunk = 7",
    ] {
        c.batch_execute(setting).unwrap();
        let got = rows_as_text(c, sql);
        if got != want {
            let extra: Vec<&String> = got.iter().filter(|r| want.binary_search(r).is_err()).take(5).collect();
            let missing: Vec<&String> = want.iter().filter(|r| got.binary_search(r).is_err()).take(5).collect();
            panic!(
                "{} ({setting}): {} rows through the join, {} by the planner's; extra {extra:?}, missing {missing:?}\n{plan}",
                short(sql),
                got.len(),
                want.len()
            );
        }
    }
    c.batch_execute(
        "RESET gpuindex.enable_join; RESET enable_hashjoin; RESET enable_mergejoin; RESET enable_nestloop;
         RESET gpuindex.device; RESET gpuindex.gpu_min_batch; RESET gpuindex.join_chunk",
    )
    .unwrap();
    want.len()
}

/// kill -9 of a server process (this machine's): whether it was sent.
pub fn kill_9(pid: i32) -> bool {
    extern "C" {
        #[link_name = "kill"]
        fn libc_kill(pid: i32, sig: i32) -> i32;
    }
    // SAFETY: plain kill(2); the callers pass server processes they test.
    unsafe { libc_kill(pid, 9) == 0 }
}

/// One thread of a local server's process, from /proc.
#[derive(Debug)]
pub struct ThreadInfo {
    pub tid: i32,
    pub name: String,
    /// The signals it blocks (SigBlk).
    pub blocked: u64,
}

/// The threads of process `pid` of the server, which runs on this machine.
pub fn threads_of(pid: i32) -> Vec<ThreadInfo> {
    let dir = format!("/proc/{pid}/task");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e} (the server must run on this machine)")) {
        let path = entry.unwrap().path();
        let tid = path.file_name().unwrap().to_str().unwrap().parse().unwrap();
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        let field = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).map(|v| v.trim().to_string()).unwrap_or_default();
        out.push(ThreadInfo { tid, name: field("Name:"), blocked: u64::from_str_radix(&field("SigBlk:"), 16).unwrap_or(0) });
    }
    out
}

/// Opens `cur` over `q` (an index-only scan) in a repeatable-read
/// transaction whose snapshot lets VACUUM remove what transaction
/// `deleted` deleted (a transaction running elsewhere in the cluster would
/// hold it back), and fetches its first row.
pub fn open_cursor_after(a: &mut Client, deleted: i64, q: &str) -> usize {
    set_index_only(a, false);
    let plan: Vec<String> = a.query(&format!("EXPLAIN {q}"), &[]).unwrap().iter().map(|r| r.get(0)).collect();
    assert!(plan.iter().any(|l| l.contains("Index Only Scan")), "{plan:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        a.batch_execute(&format!("BEGIN ISOLATION LEVEL REPEATABLE READ; DECLARE cur CURSOR FOR {q}")).unwrap();
        let xmin: i64 = a.query_one("SELECT txid_snapshot_xmin(txid_current_snapshot())", &[]).unwrap().get(0);
        if xmin > deleted {
            break;
        }
        a.batch_execute("ROLLBACK").unwrap();
        assert!(std::time::Instant::now() < deadline, "a transaction older than the DELETE ran for a minute");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    a.query("FETCH 1 FROM cur", &[]).unwrap().len()
}

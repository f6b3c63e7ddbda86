//! gpuindex-sql-bench-service: the GPU service on a live server
//! (PGHOST/PGPORT/PGUSER; gpuindex preloaded, max_connections above the
//! largest client count): pgbench clients each running single exact kNN
//! queries (`ORDER BY v <-> q LIMIT 10` on gpu_metric), through the
//! service (`gpuindex.service = on`) and in the backends on the CPU
//! (`gpuindex.device = cpu`), against the same queries sent as one batch
//! function call.
//!
//!   gpuindex-sql-bench-service [--rows 1e6] [--dim 128] [--queries 1e4] [--set clustered|uniform]
//!                              [--clients 1,8,32,64] [--secs 15] [--warmup 5] [--protocol simple|prepared]
//!   gpuindex-sql-bench-service --kind others [--rows 1e6] [--clients ..] [--secs ..] [--protocol ..]
//!
//! `--kind others` runs single gpu_spatial kNN and box queries and
//! gpu_btree lookups with the service running and the defaults, against
//! `gpuindex.device = cpu` (the service must decline what does not pay).
//!
//! Throughput counts the transactions that end after `--warmup` seconds
//! (each new backend first builds what it searches: its own copy of the
//! rows on the CPU; the service ships the image once), latency
//! percentiles come from pgbench's per-transaction log. pgbench is found
//! on PATH (or $PGBENCH). Answers of the two paths are compared first.

use gpuindex_engine::datasets::VectorSet;
use gpuindex_tests::bench::{connect, describe_server, load_vectors, time, vector_text};
use postgres::Client;
use std::process::Command;
use std::time::{Duration, Instant};

struct Args {
    rows: usize,
    dim: usize,
    queries: usize,
    set: VectorSet,
    clients: Vec<usize>,
    secs: u64,
    warmup: u64,
    /// pgbench's -M: simple (parsed and planned each time) or prepared.
    protocol: String,
    kind: Kind,
}

/// What the clients run.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Single exact kNN on gpu_metric, service (`on`) against CPU and one
    /// batch call.
    Metric,
    /// Single kNN (k = 10), single boxes and single key lookups on
    /// gpu_spatial and gpu_btree with the service running and every
    /// setting at its default, against `gpuindex.device = cpu`: the
    /// service must decline what does not pay.
    Others,
}

fn args() -> Args {
    let mut a = Args {
        rows: 1_000_000,
        dim: 128,
        queries: 10_000,
        set: VectorSet::Clustered,
        clients: vec![1, 8, 32, 64],
        secs: 15,
        warmup: 5,
        protocol: "simple".into(),
        kind: Kind::Metric,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{x} needs a value"));
        let num = || v.parse::<f64>().unwrap_or_else(|_| panic!("{x} takes a number")) as usize;
        match x.as_str() {
            "--rows" => a.rows = num(),
            "--dim" => a.dim = num(),
            "--queries" => a.queries = num(),
            "--secs" => a.secs = num() as u64,
            "--warmup" => a.warmup = num() as u64,
            "--clients" => a.clients = v.split(',').map(|c| c.parse().expect("--clients 1,8,32")).collect(),
            "--set" => a.set = VectorSet::parse(&v).expect("--set clustered|uniform"),
            "--protocol" => a.protocol = v,
            "--kind" => {
                a.kind = match v.as_str() {
                    "metric" => Kind::Metric,
                    "others" => Kind::Others,
                    _ => panic!("--kind metric|others"),
                }
            }
            _ => panic!(
                "usage: gpuindex-sql-bench-service [--kind metric|others] [--rows N] [--dim N] [--queries N] [--set NAME] [--clients A,B] [--secs S] [--warmup S] [--protocol simple|prepared]"
            ),
        }
    }
    a
}

const QUERY: &str = "SELECT id FROM bench_svc ORDER BY v <-> (SELECT v FROM bench_svc_q WHERE id = :i) LIMIT 10;";

struct Run {
    tps: f64,
    p50_ms: f64,
    p99_ms: f64,
    transactions: usize,
}

/// Runs pgbench with `clients` clients under `options`; throughput over
/// the transactions ending after the warm-up.
fn pgbench(a: &Args, script_text: &str, clients: usize, options: &str, mut during: impl FnMut()) -> Run {
    let dir = std::env::temp_dir().join(format!("gpuindex-bench-service-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("knn.sql");
    std::fs::write(&script, script_text).unwrap();
    let bin = std::env::var("PGBENCH").unwrap_or_else(|_| "pgbench".into());
    let db = std::env::var("PGDATABASE").unwrap_or_else(|_| "postgres".into());
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let mut child = Command::new(bin)
        .args(["-n", "-M", &a.protocol, "-c", &clients.to_string(), "-j", &clients.min(16).to_string(), "-T"])
        .arg((a.warmup + a.secs).to_string())
        .arg("-f")
        .arg(&script)
        .arg("-l")
        .arg(format!("--log-prefix={}", dir.join("log").display()))
        .arg(&db)
        .env("PGOPTIONS", options)
        .env("PGUSER", std::env::var("PGUSER").unwrap_or_else(|_| "postgres".into()))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("pgbench (on PATH or $PGBENCH)");
    std::thread::sleep(Duration::from_secs(a.warmup + a.secs / 2));
    during();
    let status = child.wait().unwrap();
    assert!(status.success(), "pgbench failed ({status}) with {clients} clients, PGOPTIONS {options}");
    // Log lines: client transaction latency_us script epoch_s epoch_us.
    let mut ends = Vec::new();
    let mut latencies = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        if !e.file_name().to_string_lossy().starts_with("log") {
            continue;
        }
        for line in std::fs::read_to_string(e.path()).unwrap().lines() {
            let f: Vec<f64> = line.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            if f.len() >= 6 {
                ends.push(f[4] + f[5] * 1e-6);
                latencies.push(f[2] * 1e-3);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!ends.is_empty(), "pgbench logged no transaction");
    let from = started + a.warmup as f64;
    let last = ends.iter().cloned().fold(0.0, f64::max);
    let mut measured: Vec<f64> = ends.iter().zip(&latencies).filter(|(&e, _)| e >= from).map(|(_, &l)| l).collect();
    measured.sort_by(|x, y| x.total_cmp(y));
    let pct =
        |p: f64| measured.get(((p * measured.len() as f64) as usize).min(measured.len().saturating_sub(1))).copied().unwrap_or(f64::NAN);
    Run { tps: measured.len() as f64 / (last - from).max(1e-3), p50_ms: pct(0.5), p99_ms: pct(0.99), transactions: measured.len() }
}

fn answer(c: &mut Client, i: usize) -> Vec<i64> {
    let sql = QUERY.replace(":i", &i.to_string());
    c.query(sql.trim_end_matches(';'), &[]).unwrap().iter().map(|r| r.get(0)).collect()
}

fn stat(c: &mut Client, col: &str) -> String {
    c.query_one(&format!("SELECT coalesce(({col})::text, '-') FROM gpuindex_service_stats()"), &[]).unwrap().get(0)
}

fn gpu_memory() -> String {
    Command::new("nvidia-smi")
        .args(["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().replace('\n', "; "))
        .unwrap_or_else(|e| format!("nvidia-smi: {e}"))
}

fn main() {
    let a = args();
    match a.kind {
        Kind::Metric => metric(&a),
        Kind::Others => others(&a),
    }
}

fn metric(a: &Args) {
    let (n, dim) = (a.rows, a.dim);
    let mut c = connect();
    println!(
        "# gpuindex-sql-bench-service: {n} vectors of {dim} floats ({}), single kNN (k = 10) per transaction, {} s after {} s warm-up, pgbench -M {}",
        a.set.name(),
        a.secs,
        a.warmup,
        a.protocol
    );
    println!("\n{}", describe_server(&mut c));
    let load = load_vectors(&mut c, "bench_svc", a.set, n, dim);
    let t = Instant::now();
    c.batch_execute("CREATE INDEX bench_svc_v ON bench_svc USING gpu_metric (v)").unwrap();
    println!("\ntable load {load:.1} s; CREATE INDEX {:.1} s", t.elapsed().as_secs_f64());
    let qs = VectorSet::vectors(a.set, a.queries, dim, 1 << 40);
    c.batch_execute("DROP TABLE IF EXISTS bench_svc_q; CREATE TABLE bench_svc_q (id int PRIMARY KEY, v real[])").unwrap();
    let rows: Vec<String> = qs.chunks(dim).enumerate().map(|(i, v)| format!("({}, '{}')", i + 1, vector_text(v))).collect();
    for chunk in rows.chunks(1000) {
        c.batch_execute(&format!("INSERT INTO bench_svc_q VALUES {}", chunk.join(","))).unwrap();
    }
    c.batch_execute("VACUUM ANALYZE bench_svc_q").unwrap();

    // The two paths agree (and the service holds the image after this).
    c.batch_execute("SET gpuindex.service = on").unwrap();
    let via_service: Vec<Vec<i64>> = (1..=20).map(|i| answer(&mut c, i)).collect();
    let epoch: Option<String> = c.query_one("SELECT service FROM gpuindex_last_batch()", &[]).unwrap().get(0);
    assert!(epoch.is_some(), "the single query did not go through the service");
    c.batch_execute("SET gpuindex.service = off; SET gpuindex.device = cpu").unwrap();
    let in_backend: Vec<Vec<i64>> = (1..=20).map(|i| answer(&mut c, i)).collect();
    assert_eq!(via_service, in_backend, "service and CPU answers differ");
    c.batch_execute("RESET gpuindex.service; RESET gpuindex.device").unwrap();
    println!("service device: {}; answers of 20 queries equal on both paths", stat(&mut c, "device"));

    // The same queries as one batch function call (this backend's GPU
    // where there is one, else its CPU).
    c.batch_execute("SET gpuindex.gpu_min_batch = 1").unwrap();
    let batch_sql = "SELECT count(*) FROM gpu_metric_knn('bench_svc_v', (SELECT array_agg(v ORDER BY id) FROM bench_svc_q), 10)";
    let s = time(5, || {
        c.query_one(batch_sql, &[]).unwrap();
    });
    let ran: String = c.query_one("SELECT device FROM gpuindex_last_batch()", &[]).unwrap().get(0);
    let batch_qps = a.queries as f64 / s;
    println!("one gpu_metric_knn call of {} queries ({ran}): {s:.3} s, {batch_qps:.0} queries/s", a.queries);

    println!("\n| clients | path | queries/s | p50 ms | p99 ms | transactions | vs CPU | vs one batch call (timed after the row) |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    let mut memory = String::new();
    let script = format!("\\set i random(1, {})\n{QUERY}\n", a.queries);
    for &clients in &a.clients {
        let cpu = pgbench(a, &script, clients, "-c gpuindex.device=cpu -c gpuindex.service=off", || {});
        let epochs_before: f64 = stat(&mut c, "epochs").parse().unwrap_or(0.0);
        let queries_before: f64 = stat(&mut c, "queries").parse().unwrap_or(0.0);
        let run_before: f64 = stat(&mut c, "run_ms_total").parse().unwrap_or(0.0);
        let search_before: f64 = stat(&mut c, "search_ms_total").parse().unwrap_or(0.0);
        let wall = Instant::now();
        let svc = pgbench(a, &script, clients, "-c gpuindex.service=on", || {
            if clients == *a.clients.iter().max().unwrap() {
                memory = gpu_memory();
            }
        });
        let wall_ms = wall.elapsed().as_secs_f64() * 1e3;
        // The batch call again, right after (the host drifts by a third
        // between minutes): the ratio pairs runs a few seconds apart.
        let batch_now = a.queries as f64
            / time(3, || {
                c.query_one(batch_sql, &[]).unwrap();
            });
        let run_ms = stat(&mut c, "run_ms_total").parse::<f64>().unwrap_or(0.0) - run_before;
        let search_ms = stat(&mut c, "search_ms_total").parse::<f64>().unwrap_or(0.0) - search_before;
        let epochs = stat(&mut c, "epochs").parse::<f64>().unwrap_or(0.0) - epochs_before;
        let queries = stat(&mut c, "queries").parse::<f64>().unwrap_or(0.0) - queries_before;
        for (path, r) in [("CPU in each backend", &cpu), ("GPU service", &svc)] {
            println!(
                "| {clients} | {path} | {:.0} | {:.2} | {:.2} | {} | {:.2}x | {:.0}% |",
                r.tps,
                r.p50_ms,
                r.p99_ms,
                r.transactions,
                r.tps / cpu.tps,
                100.0 * r.tps / batch_now
            );
        }
        println!(
            "|  | (service: {:.1} queries per epoch; an epoch ran {:.0} us from close to answers, {:.0} us of it searching; searches {:.0}% of the time; the batch call after it {batch_now:.0} queries/s) | | | | | | |",
            queries / epochs.max(1.0),
            1e3 * run_ms / epochs.max(1.0),
            1e3 * search_ms / epochs.max(1.0),
            100.0 * search_ms / wall_ms
        );
    }
    println!(
        "\nservice: epochs {}, queries per epoch p50 {}, wait p50 {} us, p99 {} us, run p50 {} us; images {} ({} MiB on the device)",
        stat(&mut c, "epochs"),
        stat(&mut c, "queries_per_epoch_p50::int"),
        stat(&mut c, "wait_us_p50::int"),
        stat(&mut c, "wait_us_p99::int"),
        stat(&mut c, "run_us_p50::int"),
        stat(&mut c, "images"),
        stat(&mut c, "image_device_bytes >> 20"),
    );
    println!("GPU processes during the largest service run (nvidia-smi): {memory}");
}

/// gpu_spatial and gpu_btree single queries with the service running and
/// the defaults (`gpuindex.device = auto`, `gpuindex.service = auto`)
/// against `gpuindex.device = cpu`, on `--rows` uniform points in
/// [0, 1000)^2 and keys 1..rows.
fn others(a: &Args) {
    let n = a.rows;
    let mut c = connect();
    println!(
        "# gpuindex-sql-bench-service --kind others: {n} rows, single queries per transaction, {} s after {} s warm-up, pgbench -M {}",
        a.secs, a.warmup, a.protocol
    );
    println!("\n{}", describe_server(&mut c));
    let t = Instant::now();
    c.batch_execute(&format!(
        "SELECT setseed(0.5);
         DROP TABLE IF EXISTS bench_svc_pt; CREATE TABLE bench_svc_pt (id int, p point);
         INSERT INTO bench_svc_pt SELECT g, point(random() * 1000, random() * 1000) FROM generate_series(1, {n}) g;
         CREATE INDEX bench_svc_pt_p ON bench_svc_pt USING gpu_spatial (p);
         DROP TABLE IF EXISTS bench_svc_k; CREATE TABLE bench_svc_k (k int8, v int);
         INSERT INTO bench_svc_k SELECT g, g % 1000 FROM generate_series(1, {n}) g;
         CREATE INDEX bench_svc_k_k ON bench_svc_k USING gpu_btree (k);"
    ))
    .unwrap();
    c.batch_execute("VACUUM ANALYZE bench_svc_pt").unwrap();
    c.batch_execute("VACUUM ANALYZE bench_svc_k").unwrap();
    println!("\ntables and indexes {:.1} s", t.elapsed().as_secs_f64());
    let point = "\\set x random(0, 994)\n\\set y random(0, 994)\n";
    let kinds = [
        ("gpu_spatial kNN (k = 10)", format!("{point}SELECT id FROM bench_svc_pt ORDER BY p <-> point(:x, :y) LIMIT 10;\n")),
        (
            "gpu_spatial box (5 x 5, ~25 rows)",
            format!("{point}\\set x2 :x + 5\n\\set y2 :y + 5\nSELECT count(*) FROM bench_svc_pt WHERE p <@ box(point(:x, :y), point(:x2, :y2));\n"),
        ),
        ("gpu_btree lookup", format!("\\set k random(1, {n})\nSELECT v FROM bench_svc_k WHERE k = :k;\n")),
    ];
    println!("\n| queries | clients | path | queries/s | p50 ms | p99 ms | vs CPU | sent to the service |");
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    // Each pair runs CPU, defaults, defaults, CPU (the host drifts by
    // tens of percent between runs of seconds); throughput is the mean of
    // the two, latency from the first.
    let mean = |x: &Run, y: &Run| Run {
        tps: (x.tps + y.tps) / 2.0,
        p50_ms: x.p50_ms,
        p99_ms: x.p99_ms,
        transactions: x.transactions + y.transactions,
    };
    for (what, script) in &kinds {
        for &clients in &a.clients {
            let cpu_options = "-c gpuindex.device=cpu -c gpuindex.service=off";
            let cpu1 = pgbench(a, script, clients, cpu_options, || {});
            let (requests, declined) = (stat(&mut c, "requests"), stat(&mut c, "declined"));
            let svc1 = pgbench(a, script, clients, "", || {});
            let svc2 = pgbench(a, script, clients, "", || {});
            let sent = stat(&mut c, "requests").parse::<f64>().unwrap_or(0.0) - requests.parse::<f64>().unwrap_or(0.0);
            let declined = stat(&mut c, "declined").parse::<f64>().unwrap_or(0.0) - declined.parse::<f64>().unwrap_or(0.0);
            let cpu2 = pgbench(a, script, clients, cpu_options, || {});
            let (cpu, svc) = (mean(&cpu1, &cpu2), mean(&svc1, &svc2));
            for (path, r, sent) in [
                ("CPU (gpuindex.device = cpu)", &cpu, "-".to_string()),
                ("defaults, service running", &svc, format!("{sent:.0} (declined {declined:.0})")),
            ] {
                println!(
                    "| {what} | {clients} | {path} | {:.0} | {:.3} | {:.3} | {:.2}x | {sent} |",
                    r.tps,
                    r.p50_ms,
                    r.p99_ms,
                    r.tps / cpu.tps
                );
            }
        }
    }

    // Batches: in this session (its own copy, its own GPU context under
    // auto) and through the service.
    let n = 100_000;
    let centres = format!("(SELECT array_agg(point(((g::int8 * 7919) % 1000)::float8 + 0.5, ((g::int8 * 104729) % 1000)::float8 + 0.25)) FROM generate_series(1, {n}) g)");
    let boxes = format!(
        "(SELECT array_agg(box(point((g::int8 * 7919) % 995, (g::int8 * 104729) % 995), point((g::int8 * 7919) % 995 + 5, (g::int8 * 104729) % 995 + 5))) FROM generate_series(1, {n}) g)"
    );
    let batches = [
        (format!("gpu_spatial_knn, {n} centres, k = 10"), format!("SELECT count(*) FROM gpu_spatial_knn('bench_svc_pt_p', {centres}, 10)")),
        (format!("gpu_spatial_range, {n} boxes of 5 x 5"), format!("SELECT count(*) FROM gpu_spatial_range('bench_svc_pt_p', {boxes})")),
    ];
    println!("\none batch function call (median of 5):\n");
    println!("| call | path | ms | rows | device | service epoch |");
    println!("|---|---|---:|---:|---|---|");
    for (what, sql) in &batches {
        let mut answers = Vec::new();
        for (path, setting) in [("this session", "off"), ("GPU service", "on")] {
            c.batch_execute(&format!("SET gpuindex.service = {setting}")).unwrap();
            let mut rows = 0i64;
            let s = time(5, || rows = c.query_one(sql.as_str(), &[]).unwrap().get(0));
            answers.push(rows);
            let row = c.query_one("SELECT device, coalesce(service, '-') FROM gpuindex_last_batch()", &[]).unwrap();
            let (device, epoch): (String, String) = (row.get(0), row.get(1));
            println!("| {what} | {path} | {:.1} | {rows} | {device} | {epoch} |", s * 1e3);
        }
        assert_eq!(answers[0], answers[1], "{what}: the session and the service found different numbers of rows");
    }
    c.batch_execute("RESET gpuindex.service").unwrap();
}

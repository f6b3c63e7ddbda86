//! gpuindex-sql-bench-build: CREATE INDEX time and backend memory of
//! gpu_btree against btree on the same table, in one run, on a live server
//! on this machine (PGHOST/PGPORT/PGUSER; the backend's /proc is read).
//!
//!   gpuindex-sql-bench-build [--rows 1e8] [--set permutation] [--mwm 64MB]
//!
//! Builds t(k int8) with keys of `--set` (as gpuindex-sql-bench), then
//! builds each index in a fresh backend with `maintenance_work_mem = --mwm`:
//! btree serial (max_parallel_maintenance_workers = 0), btree with the
//! server's parallel setting, gpu_btree. Memory is the backend's peak
//! anonymous RSS (sampled every 10 ms: private memory, without the shared
//! buffers it touches) and its VmHWM (peak RSS, shared buffers included);
//! parallel workers' memory is not the leader's and is not counted.
//! Every index is checked to hold one entry per row.

use gpuindex_engine::datasets::KeySet;
use gpuindex_tests::bench::{connect, describe_server, print_table, push, Row};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Args {
    rows: u64,
    set: Option<KeySet>,
    mwm: String,
}

fn args() -> Args {
    let mut a = Args { rows: 100_000_000, set: None, mwm: "64MB".into() };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{x} needs a value"));
        match x.as_str() {
            "--rows" => a.rows = v.parse::<f64>().expect("--rows N") as u64,
            "--set" => a.set = if v == "permutation" { None } else { Some(KeySet::parse(&v).expect("--set NAME")) },
            "--mwm" => a.mwm = v,
            _ => panic!("usage: gpuindex-sql-bench-build [--rows N] [--set NAME] [--mwm SIZE]"),
        }
    }
    a
}

/// A kB field of /proc/PID/status, in MB.
fn status_mb(pid: i32, field: &str) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn load(c: &mut postgres::Client, n: u64, set: Option<KeySet>) {
    c.batch_execute("DROP TABLE IF EXISTS bench_build_t; CREATE TABLE bench_build_t (k int8)").unwrap();
    match set {
        None => {
            c.batch_execute(&format!("INSERT INTO bench_build_t SELECT (i * 2654435761) % {n} FROM generate_series(0, {n} - 1) i")).unwrap()
        }
        Some(set) => {
            let mut w = c.copy_in("COPY bench_build_t (k) FROM STDIN").unwrap();
            let mut buf = String::new();
            // In pieces of 10^7 keys: the client holds one piece at a time.
            let piece = 10_000_000usize;
            for p in 0..(n as usize).div_ceil(piece) {
                let m = piece.min(n as usize - p * piece);
                for k in set.keys(m, 1 + p as u64) {
                    buf.push_str(&k.to_string());
                    buf.push('\n');
                    if buf.len() > 1 << 20 {
                        w.write_all(buf.as_bytes()).unwrap();
                        buf.clear();
                    }
                }
            }
            w.write_all(buf.as_bytes()).unwrap();
            w.finish().unwrap();
        }
    }
    c.batch_execute("VACUUM (ANALYZE) bench_build_t").unwrap();
}

fn main() {
    let a = args();
    let mut c = connect();
    let n = a.rows;
    let set_name = a.set.map_or("permutation", |s| s.name());
    println!("# gpuindex-sql-bench-build: {n} rows of {set_name} keys, maintenance_work_mem = {}", a.mwm);
    println!("\n{}", describe_server(&mut c));
    let t = Instant::now();
    load(&mut c, n, a.set);
    eprintln!("table built in {:.1} s", t.elapsed().as_secs_f64());
    let workers: String = c.query_one("SHOW max_parallel_maintenance_workers", &[]).unwrap().get(0);
    let btree_parallel = format!("btree ({workers} workers)");
    let setups: [(&str, &str, &str); 3] =
        [("btree (serial)", "btree", "0"), (&btree_parallel, "btree", &workers), ("gpu_btree", "gpu_btree", "0")];
    let labels: Vec<&str> = setups.iter().map(|s| s.0).collect();
    let mut rows: Vec<Row> = Vec::new();
    for (i, (_, am, workers)) in setups.iter().enumerate() {
        let mut b = connect();
        b.batch_execute(&format!(
            "DROP INDEX IF EXISTS bench_build_t_k; SET maintenance_work_mem = '{}'; SET max_parallel_maintenance_workers = {workers}",
            a.mwm
        ))
        .unwrap();
        let pid: i32 = b.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
        let start_anon = status_mb(pid, "RssAnon:");
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut peak = 0f64;
                while !stop.load(Ordering::Relaxed) {
                    peak = peak.max(status_mb(pid, "RssAnon:"));
                    std::thread::sleep(Duration::from_millis(10));
                }
                peak
            })
        };
        let t = Instant::now();
        b.batch_execute(&format!("CREATE INDEX bench_build_t_k ON bench_build_t USING {am} (k)")).unwrap();
        let secs = t.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        let peak_anon = sampler.join().unwrap();
        let hwm = status_mb(pid, "VmHWM:");
        let size: i64 = b.query_one("SELECT pg_relation_size('bench_build_t_k')", &[]).unwrap().get(0);
        // One entry per row: an index-only count of every key.
        b.batch_execute("SET enable_seqscan = off; SET enable_bitmapscan = off").unwrap();
        let count: i64 = b.query_one("SELECT count(*) FROM bench_build_t WHERE k >= -9223372036854775808", &[]).unwrap().get(0);
        assert_eq!(count as u64, n, "{am}: the index holds {count} of {n} rows");
        push(&mut rows, setups.len(), i, "CREATE INDEX".into(), "s", true, secs);
        push(&mut rows, setups.len(), i, "backend peak anonymous RSS (sampled)".into(), "MB", true, peak_anon);
        push(&mut rows, setups.len(), i, "backend anonymous RSS before".into(), "MB", true, start_anon);
        push(&mut rows, setups.len(), i, "backend VmHWM (shared buffers included)".into(), "MB", true, hwm);
        push(&mut rows, setups.len(), i, "index size".into(), "MB", true, size as f64 / 1048576.0);
    }
    println!();
    print_table(&labels, &rows);
}

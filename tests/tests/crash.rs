//! Crash recovery of every access method (`runners::cases()`): kill -9
//! the postmaster (or, without a restart command, one backend) while
//! inserts split pages and fill and merge deltas, restart, and check each
//! index against the heap. Its own test binary: it takes the whole server
//! down, so nothing else may run beside it.

use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::{connect, runners};
use postgres::Client;
use std::time::{Duration, Instant};

const DB: &str = "gpuindex_it_crash";

/// The postmaster's pid: the parent of this session's backend.
fn postmaster_pid(c: &mut Client) -> i32 {
    let backend: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    parent(backend).expect("the server runs on this machine")
}

fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split_whitespace().nth(1)?.parse().ok()
}

fn children(pid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| parent(p) == Some(pid))
        .collect()
}

fn count(c: &mut Client, table: &str) -> i64 {
    c.query_one(&format!("SELECT count(*) FROM {table}"), &[]).unwrap().get(0)
}

#[test]
fn crash_recovery() {
    // GPUINDEX_TEST_START: a shell command that starts the (stopped) test
    // server; scripts/test.sh sets it. Without it the crash is a backend's
    // (the postmaster then recovers by itself).
    let start = std::env::var("GPUINDEX_TEST_START").ok();
    let mut c = connect(DB);
    let mut rng = SplitMix64::new(300);
    let tables: Vec<String> = runners::cases().iter().map(|case| format!("crash_{}", case.name())).collect();
    for (case, table) in runners::cases().iter().zip(&tables) {
        runners::load(&mut c, case, table, &mut rng, 10_000);
    }
    // A gpu_btree whose VACUUM deletes pages at the crash: 90% of its keys
    // deleted in ranges, vacuumed slowly (cost delay) beside the inserters.
    // Fillfactor 10 makes four levels of 300,000 keys, so whole subtrees
    // (inner pages with their leaves) go.
    c.batch_execute(
        "DROP TABLE IF EXISTS crash_del;
         CREATE TABLE crash_del (id int, v int8) WITH (autovacuum_enabled = off);
         INSERT INTO crash_del SELECT g, g FROM generate_series(1, 300000) g;
         CREATE INDEX crash_del_v ON crash_del USING gpu_btree (v) WITH (fillfactor = 10);
         DELETE FROM crash_del WHERE v % 10000 < 9000;",
    )
    .unwrap();
    c.batch_execute("CHECKPOINT").unwrap();
    let vacuum = std::thread::spawn(|| {
        let mut c = connect(DB);
        let _ = c.batch_execute("SET vacuum_cost_delay = 1; SET vacuum_cost_limit = 10");
        // Ends with the crash (or finishes first: then nothing is deleted
        // at the crash, and the checks below still hold).
        let _ = c.batch_execute("VACUUM crash_del");
    });
    let inserters: Vec<_> = (0..3u64)
        .map(|w| {
            let tables = tables.clone();
            std::thread::spawn(move || {
                let mut c = connect(DB);
                let mut rng = SplitMix64::new(310 + w);
                // Runs until the crash breaks the connection.
                for round in 0..100_000 {
                    for (case, table) in runners::cases().iter().zip(&tables) {
                        let first = 1_000_000 * (w as usize + 1) + round * 50;
                        for sql in runners::inserts(case, table, &mut rng, first, 50) {
                            if c.batch_execute(&sql).is_err() {
                                return;
                            }
                        }
                    }
                }
            })
        })
        .collect();
    // Let the inserters split pages and merge deltas past the checkpoint,
    // so that recovery replays them, then crash.
    let deadline = Instant::now() + Duration::from_secs(60);
    while tables.iter().any(|t| count(&mut c, t) < 25_000) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let before: Vec<i64> = tables.iter().map(|t| count(&mut c, t)).collect();
    assert!(before.iter().all(|&n| n > 15_000), "the inserters wrote too little before the crash: {before:?}");
    // Crash while that VACUUM is in the index: deleting pages.
    let deadline = Instant::now() + Duration::from_secs(60);
    let in_index = |c: &mut Client| {
        c.query_one("SELECT count(*) FROM pg_stat_progress_vacuum WHERE relid = 'crash_del'::regclass AND phase = 'vacuuming indexes'", &[])
            .unwrap()
            .get::<_, i64>(0)
            == 1
    };
    while !in_index(&mut c) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let vacuuming = in_index(&mut c);
    let pm = postmaster_pid(&mut c);
    let victim = if start.is_some() { pm } else { *children(pm).iter().max().unwrap() };
    assert!(gpuindex_tests::kill_9(victim), "kill -9 {victim}");
    if let Some(start) = &start {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !children(pm).is_empty() || std::path::Path::new(&format!("/proc/{pm}")).exists() {
            assert!(Instant::now() < deadline, "server processes outlived the postmaster");
            std::thread::sleep(Duration::from_millis(100));
        }
        let status = std::process::Command::new("sh").arg("-c").arg(start).status().unwrap();
        assert!(status.success(), "restart command failed");
    }
    for t in inserters {
        t.join().unwrap();
    }
    vacuum.join().unwrap();
    // Reconnect once recovery is done.
    let mut c = (0..300)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(200));
            std::panic::catch_unwind(|| connect(DB)).ok()
        })
        .expect("the server came back");
    c.batch_execute("SET client_min_messages = warning").unwrap();
    check_deleting_vacuum(&mut c, vacuuming);
    for ((case, table), before) in runners::cases().iter().zip(&tables).zip(before) {
        let after = count(&mut c, table);
        assert!(after >= before, "{}: committed rows lost: {before} before the crash, {after} after", case.am);
        runners::check(&mut c, case, table);
        let preds = runners::predicates(case, &mut rng, 20);
        runners::differential(&mut c, table, &preds);
        runners::batch_differential(&mut c, case, table, &mut rng, 4, 200);
        // And it still takes changes (splits, merges, VACUUM after recovery).
        runners::change(&mut c, case, table, &mut rng, 10_000_000, 8_000);
        runners::check(&mut c, case, table);
        runners::differential(&mut c, table, &preds);
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }
}

/// crash_del after the crash: index scans (plain, index-only, both
/// directions) equal the sequential scan before and after a VACUUM
/// finishes the deletion (half-dead leaves included), and after inserts
/// that reuse the freed pages.
fn check_deleting_vacuum(c: &mut Client, vacuuming: bool) {
    eprintln!("crash_del: the crash came {} the deleting VACUUM's index phase", if vacuuming { "during" } else { "outside" });
    let queries = [
        "SELECT count(*), coalesce(sum(v), 0)::int8 FROM crash_del WHERE v BETWEEN 1000 AND 250000",
        "SELECT count(*), coalesce(sum(id), 0)::int8 FROM crash_del WHERE v > 123456",
        "SELECT count(*), coalesce(sum(x), 0)::int8 FROM (SELECT v x FROM crash_del ORDER BY v DESC LIMIT 20000) a",
        "SELECT count(*), coalesce(sum(x), 0)::int8 FROM (SELECT v x FROM crash_del WHERE v < 200000 ORDER BY v LIMIT 30000) a",
    ];
    let compare = |c: &mut Client, when: &str| {
        gpuindex_tests::check_index(c, "crash_del_v");
        for q in queries {
            gpuindex_tests::set_seq_only(c);
            let want: (i64, i64) = {
                let r = c.query_one(q, &[]).unwrap();
                (r.get(0), r.get(1))
            };
            for bitmap in [false, true] {
                gpuindex_tests::set_index_only(c, bitmap);
                let got: (i64, i64) = {
                    let r = c.query_one(q, &[]).unwrap();
                    (r.get(0), r.get(1))
                };
                assert_eq!(got, want, "crash_del {when} (bitmap: {bitmap}): {q}");
            }
        }
        c.batch_execute("RESET enable_seqscan; RESET enable_indexscan; RESET enable_indexonlyscan; RESET enable_bitmapscan").unwrap();
    };
    compare(c, "after recovery");
    c.batch_execute("SELECT txid_current()").unwrap();
    c.batch_execute("VACUUM crash_del").unwrap();
    compare(c, "after VACUUM");
    c.batch_execute("SELECT txid_current()").unwrap();
    c.batch_execute("VACUUM crash_del").unwrap();
    c.batch_execute("INSERT INTO crash_del SELECT -g, g FROM generate_series(1, 300000, 7) g").unwrap();
    compare(c, "after inserts into recycled pages");
    c.batch_execute("DROP TABLE crash_del").unwrap();
}

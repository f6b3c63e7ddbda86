//! Crash recovery of gpu_btree and gpu_spatial: kill -9 the postmaster (or, without a
//! restart command, one backend) while inserts split pages, restart, and
//! check the index against the heap. Its own test binary: it takes the
//! whole server down, so nothing else may run beside it.

use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::{check_index, check_predicate, connect};
use postgres::Client;

const DB: &str = "gpuindex_it_crash";

/// The postmaster's pid: the parent of this session's backend.
fn postmaster_pid(c: &mut Client) -> i32 {
    let backend: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let stat = std::fs::read_to_string(format!("/proc/{backend}/stat")).expect("the server runs on this machine");
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn children(pid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| s[s.rfind(')')? + 2..].split_whitespace().nth(1)?.parse::<i32>().ok())
                == Some(pid)
        })
        .collect()
}

#[test]
fn crash_recovery() {
    // GPUINDEX_TEST_START: a shell command that starts the (stopped) test
    // server; scripts/test.sh sets it. Without it the crash is a backend's
    // (the postmaster then recovers by itself).
    let start = std::env::var("GPUINDEX_TEST_START").ok();
    let mut c = connect(DB);
    c.batch_execute(
        "SET client_min_messages = warning;
         DROP TABLE IF EXISTS crash;
         CREATE TABLE crash (id bigserial, v int8);
         INSERT INTO crash (v) SELECT g % 1000 FROM generate_series(1, 20000) g;
         CREATE INDEX crash_v ON crash USING gpu_btree (v);
         DROP TABLE IF EXISTS crash_sp;
         CREATE TABLE crash_sp (id bigserial, p point);
         INSERT INTO crash_sp (p) SELECT point(g % 100, g / 100) FROM generate_series(1, 20000) g;
         CREATE INDEX crash_sp_p ON crash_sp USING gpu_spatial (p) WITH (delta_limit = 1);
         CHECKPOINT;",
    )
    .unwrap();
    let inserters: Vec<_> = (0..3u64)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = connect(DB);
                let mut rng = SplitMix64::new(300 + w);
                // Runs until the crash breaks the connection.
                for _ in 0..100_000 {
                    let v = rng.below(2000) as i64;
                    if c.execute("INSERT INTO crash (v) SELECT $1::int8 + g FROM generate_series(1, 50) g", &[&v]).is_err() {
                        return;
                    }
                    let x = v as f64 / 20.0;
                    if v % 4 == 0
                        && c.execute(
                            "INSERT INTO crash_sp (p) SELECT point($1::float8 + g * 0.01, $1::float8) FROM generate_series(1, 20) g",
                            &[&x],
                        )
                        .is_err()
                    {
                        return;
                    }
                }
            })
        })
        .collect();
    // Let the inserters split pages (past the checkpoint, so that recovery
    // replays the splits), then crash.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let leaves: i64 = c.query_one("SELECT pages FROM gpu_btree_check('crash_v') WHERE level = 0", &[]).unwrap().get(0);
        if leaves > 120 || std::time::Instant::now() > deadline {
            assert!(leaves > 60, "the inserters made too few splits before the crash: {leaves} leaves");
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let rows_before: i64 = c.query_one("SELECT count(*) FROM crash", &[]).unwrap().get(0);
    let pm = postmaster_pid(&mut c);
    let victim = if start.is_some() { pm } else { *children(pm).iter().max().unwrap() };
    // SAFETY: plain kill(2) of a server process of this test.
    assert_eq!(unsafe { libc_kill(victim, 9) }, 0, "kill -9 {victim}");
    if let Some(start) = &start {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !children(pm).is_empty() || std::path::Path::new(&format!("/proc/{pm}")).exists() {
            assert!(std::time::Instant::now() < deadline, "server processes outlived the postmaster");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let status = std::process::Command::new("sh").arg("-c").arg(start).status().unwrap();
        assert!(status.success(), "restart command failed");
    }
    for t in inserters {
        t.join().unwrap();
    }
    // Reconnect once recovery is done.
    let mut c = (0..300)
        .find_map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(200));
            std::panic::catch_unwind(|| connect(DB)).ok()
        })
        .expect("the server came back");
    c.batch_execute("SET client_min_messages = warning").unwrap();
    let rows_after: i64 = c.query_one("SELECT count(*) FROM crash", &[]).unwrap().get(0);
    assert!(rows_after >= rows_before, "committed rows lost: {rows_before} before the crash, {rows_after} after");
    check_index(&mut c, "crash_v");
    for p in ["v >= 0", "v BETWEEN 100 AND 200", "v = ANY (ARRAY(SELECT g FROM generate_series(0, 3000, 7) g)::int8[])"] {
        check_predicate(&mut c, "crash", "crash_v", p);
    }
    c.query("SELECT * FROM gpu_spatial_check('crash_sp_p')", &[]).unwrap();
    for p in ["p <@ box '(0,0),(100,200)'", "p <@ circle '((50,50),20)'"] {
        check_predicate(&mut c, "crash_sp", "crash_sp_p", p);
    }
    // And it still takes inserts (splits after recovery).
    c.batch_execute("INSERT INTO crash (v) SELECT g % 3000 FROM generate_series(1, 30000) g").unwrap();
    check_index(&mut c, "crash_v");
    check_predicate(&mut c, "crash", "crash_v", "v >= 0");
    c.batch_execute("INSERT INTO crash_sp (p) SELECT point(g % 7, g % 11) FROM generate_series(1, 5000) g").unwrap();
    check_predicate(&mut c, "crash_sp", "crash_sp_p", "p <@ box '(0,0),(5,5)'");
    c.batch_execute("DROP TABLE crash, crash_sp").unwrap();
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

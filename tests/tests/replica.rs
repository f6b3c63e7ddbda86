//! WAL replay on a streaming replica, for every access method: a primary
//! takes bulk loads, inserts that split pages and fill deltas, deletes,
//! HOT and non-HOT updates, VACUUM and merges; once the standby has
//! replayed the primary's WAL, every query through the index answers the
//! same on both, and the check functions pass on the standby.
//!
//! scripts/test.sh starts the standby (pg_basebackup -R) and names its
//! socket directory in PGHOST_STANDBY; without it the test says so and
//! passes (GPUINDEX_REQUIRE_STANDBY=1 makes that a failure).

use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::runners::{self, Case};
use gpuindex_tests::{connect, connect_at};
use postgres::Client;

const DB: &str = "gpuindex_it_replica";

fn wait_for_replay(primary: &mut Client, standby_host: &str) -> Client {
    let lsn: String = primary.query_one("SELECT pg_current_wal_lsn()::text", &[]).unwrap().get(0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    loop {
        // The database itself arrives by replay.
        if let Ok(mut s) = connect_at(standby_host, DB) {
            let done: bool = s.query_one("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", &[&lsn]).unwrap().get(0);
            if done {
                return s;
            }
        }
        assert!(std::time::Instant::now() < deadline, "the standby did not replay up to {lsn} in 600 s");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

fn compare(primary: &mut Client, standby: &mut Client, case: &Case, table: &str, rng: &mut SplitMix64, round: usize) {
    let preds = runners::predicates(case, rng, 40);
    let (p, s) = (runners::answers(primary, table, &preds), runners::answers(standby, table, &preds));
    for (i, pred) in preds.iter().enumerate() {
        assert_eq!(p[i], s[i], "{} round {round}: primary and standby differ on {pred}", case.am);
    }
    assert!(p.iter().any(|ids| !ids.is_empty()), "{}: every predicate matched nothing", case.am);
    runners::check(standby, case, table);
    // Index-only scans trust the visibility map, which replay sets without
    // waiting for scans (amcanreturn): only the primary plans them.
    if case.am != "gpu_metric" {
        let sql = format!("EXPLAIN (COSTS OFF) SELECT v FROM {table} WHERE {}", preds[0]);
        for (c, where_, expected) in [(primary, "primary", true), (standby, "standby", false)] {
            gpuindex_tests::set_index_only(c, false);
            let plan: Vec<String> = c.query(&sql, &[]).unwrap().iter().map(|r| r.get(0)).collect();
            let index_only = plan.iter().any(|l| l.contains("Index Only Scan"));
            assert_eq!(index_only, expected, "{} on the {where_}: {sql}\n{plan:?}", case.am);
        }
    }
}

#[test]
fn standby_answers_equal_the_primary() {
    let Ok(standby_host) = std::env::var("PGHOST_STANDBY") else {
        assert!(std::env::var("GPUINDEX_REQUIRE_STANDBY").is_err(), "GPUINDEX_REQUIRE_STANDBY=1 but PGHOST_STANDBY is not set");
        eprintln!("replica test skipped: no standby (PGHOST_STANDBY unset)");
        return;
    };
    let mut primary = connect(DB);
    let mut rng = SplitMix64::new(2024);
    for case in runners::cases() {
        let table = format!("rep_{}", case.name());
        runners::load(&mut primary, &case, &table, &mut rng, 20_000);
        let mut standby = wait_for_replay(&mut primary, &standby_host);
        compare(&mut primary, &mut standby, &case, &table, &mut rng, 0);
        for round in 1..3 {
            runners::change(&mut primary, &case, &table, &mut rng, 100_000 * round, 6_000);
            let mut standby = wait_for_replay(&mut primary, &standby_host);
            compare(&mut primary, &mut standby, &case, &table, &mut rng, round);
        }
    }
}

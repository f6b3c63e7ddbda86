//! A cluster without shared_preload_libraries, for every access method:
//! gpuindex's own WAL records are unavailable there, so every change goes
//! through GenericXLog. Index answers equal the sequential scan's through
//! loads, splits, merges, deletes and VACUUM, and again after an immediate
//! shutdown and crash recovery.
//!
//! scripts/test.sh starts that cluster and names its socket directory in
//! PGHOST_NOPRELOAD and its restart command in GPUINDEX_NOPRELOAD_RESTART;
//! without them the test says so and passes (GPUINDEX_REQUIRE_NOPRELOAD=1
//! makes that a failure).

use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::connect_creating;
use gpuindex_tests::runners;

const DB: &str = "gpuindex_it_nopreload";

#[test]
fn generic_wal_only_cluster_answers_and_recovers() {
    let (Ok(host), Ok(restart)) = (std::env::var("PGHOST_NOPRELOAD"), std::env::var("GPUINDEX_NOPRELOAD_RESTART")) else {
        assert!(std::env::var("GPUINDEX_REQUIRE_NOPRELOAD").is_err(), "GPUINDEX_REQUIRE_NOPRELOAD=1 but PGHOST_NOPRELOAD is not set");
        eprintln!("no-preload test skipped: PGHOST_NOPRELOAD unset");
        return;
    };
    let mut c = connect_creating(&host, DB);
    let preload: String = c.query_one("SHOW shared_preload_libraries", &[]).unwrap().get(0);
    assert_eq!(preload, "", "the no-preload cluster preloads {preload}");
    let mut rng = SplitMix64::new(99);
    let mut kept = Vec::new();
    for case in runners::cases() {
        let table = format!("np_{}", case.name());
        runners::load(&mut c, &case, &table, &mut rng, 15_000);
        let preds = runners::predicates(&case, &mut rng, 25);
        runners::differential(&mut c, &table, &preds);
        runners::change(&mut c, &case, &table, &mut rng, 100_000, 5_000);
        runners::differential(&mut c, &table, &preds);
        // Unflushed changes for recovery to replay.
        runners::insert(&mut c, &case, &table, &mut rng, 200_000, 3_000);
        let want = runners::answers(&mut c, &table, &preds);
        kept.push((table, preds, want));
    }
    drop(c);
    let status = std::process::Command::new("sh").arg("-c").arg(&restart).status().unwrap();
    assert!(status.success(), "immediate shutdown and restart failed");
    let mut c = connect_creating(&host, DB);
    for ((table, preds, want), case) in kept.iter().zip(runners::cases()) {
        assert_eq!(&runners::answers(&mut c, table, preds), want, "{}: answers changed across crash recovery", case.am);
        runners::differential(&mut c, table, preds);
        runners::check(&mut c, &case, table);
    }
}

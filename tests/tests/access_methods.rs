//! The shared runners, for every access method (`runners::cases()`):
//! index scans and batch searches equal sequential scans through loads,
//! splits, merges, deletes, updates and VACUUM; concurrent readers agree
//! with the heap while writers insert.

use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::{connect, runners};

const DB: &str = "gpuindex_it_am";

/// Loads `rows` rows, compares index scans and batches (`rounds` of them,
/// CPU and GPU path) with sequential scans before and after `changed`
/// rows of inserts with deletes, updates and VACUUM; checks the index.
/// Leaves the table in place.
fn scans_and_batches(
    c: &mut postgres::Client,
    case: &runners::Case,
    table: &str,
    rng: &mut SplitMix64,
    rows: usize,
    changed: usize,
    rounds: usize,
) {
    runners::load(c, case, table, rng, rows);
    let preds = runners::predicates(case, rng, 25);
    runners::differential(c, table, &preds);
    runners::batch_differential(c, case, table, rng, rounds, 300);
    runners::change(c, case, table, rng, 100_000, changed);
    runners::differential(c, table, &preds);
    // The batches on the GPU path wherever there is one.
    c.batch_execute("SET gpuindex.gpu_min_batch = 1").unwrap();
    runners::batch_differential(c, case, table, rng, rounds, 300);
    c.batch_execute("RESET gpuindex.gpu_min_batch").unwrap();
    runners::check(c, case, table);
}

#[test]
fn scans_and_batches_equal_sequential_scans() {
    let mut c = connect(DB);
    let mut rng = SplitMix64::new(7);
    for case in runners::cases() {
        let table = format!("am_{}", case.name());
        scans_and_batches(&mut c, &case, &table, &mut rng, 12_000, 4_000, 8);
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }
}

/// The same on the real-shaped data sets (and uniform data): skewed and
/// sequential keys, random int8, cities with outliers and duplicates;
/// bulk inserts of 20% of the table.
#[test]
fn real_shaped_data_equals_sequential_scans() {
    let mut c = connect(DB);
    let mut rng = SplitMix64::new(11);
    for case in runners::real_shaped_cases() {
        let table = format!("rs_{}_{}", case.am, case.data.name());
        scans_and_batches(&mut c, &case, &table, &mut rng, 10_000, 2_000, 6);
        if case.am == "gpu_spatial" {
            // No leaf grows with the table but one of a single repeated
            // point (leaf_capacity 64: one page).
            let r =
                c.query_one(&format!("SELECT largest_leaf_pages, largest_leaf_distinct FROM gpu_spatial_check('{table}_v')"), &[]).unwrap();
            let (pages, distinct): (i64, i64) = (r.get(0), r.get(1));
            assert!(pages <= 2 || distinct == 1, "{table}: a leaf of {pages} pages with {distinct} distinct points");
        }
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }
}

#[test]
fn concurrent_gpu_btree() {
    runners::concurrent(DB, runners::gpu_btree(), "conc_gpu_btree", 100);
}

#[test]
fn concurrent_gpu_learned() {
    runners::concurrent(DB, runners::gpu_learned(), "conc_gpu_learned", 200);
}

/// Merges of the delta into the run while writers insert and readers
/// compare the index with the heap in one snapshot.
#[test]
fn concurrent_gpu_learned_merges() {
    runners::concurrent_with(DB, runners::gpu_learned(), "conc_gpu_learned_m", 210, "SELECT gpu_learned_merge('{t}_v')");
}

#[test]
fn concurrent_gpu_spatial() {
    runners::concurrent(DB, runners::gpu_spatial(), "conc_gpu_spatial", 500);
}

#[test]
fn concurrent_gpu_metric() {
    runners::concurrent(DB, runners::gpu_metric(), "conc_gpu_metric", 300);
}

#[test]
fn concurrent_gpu_metric_words() {
    runners::concurrent(DB, runners::gpu_metric_words(), "conc_gpu_metric_words", 700);
}

#[test]
fn concurrent_gpu_art() {
    runners::concurrent(DB, runners::gpu_art(), "conc_gpu_art", 800);
}

/// A crash can leave an index with pages past its last WAL-logged one,
/// all zeros (the relation was extended, the page's record not yet
/// flushed). Every access method takes them in its stride: scans, VACUUM
/// (which gives them to the free space map), inserts and the check
/// function. The zero pages are appended to the index's file here, as the
/// crash would leave them (the server runs on this machine).
#[test]
fn zero_pages_at_the_end_survive_vacuum_and_inserts() {
    let mut c = connect(DB);
    let mut rng = SplitMix64::new(23);
    let dir: String = c.query_one("SELECT current_setting('data_directory')", &[]).unwrap().get(0);
    for case in runners::cases() {
        let table = format!("zero_{}", case.name());
        runners::load(&mut c, &case, &table, &mut rng, 6_000);
        let file: String = c.query_one(&format!("SELECT pg_relation_filepath('{table}_v')"), &[]).unwrap().get(0);
        let path = format!("{dir}/{file}");
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        std::io::Write::write_all(&mut f, &[0u8; 2 * 8192]).unwrap();
        drop(f);
        let preds = runners::predicates(&case, &mut rng, 15);
        runners::differential(&mut c, &table, &preds);
        runners::change(&mut c, &case, &table, &mut rng, 100_000, 3_000);
        runners::check(&mut c, &case, &table);
        runners::differential(&mut c, &table, &preds);
        runners::batch_differential(&mut c, &case, &table, &mut rng, 3, 200);
        c.batch_execute(&format!("DROP TABLE {table}")).unwrap();
    }
}

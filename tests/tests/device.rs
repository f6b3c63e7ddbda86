//! gpuindex.device and the batch executor through SQL: `gpu` without a GPU
//! is a clear ERROR, `auto` quietly uses the CPU and says why, and every
//! setting returns the same answers.

use gpuindex_engine::rng::SplitMix64;
use gpuindex_tests::{connect, error_of, gpu_missing_but_required, server_has_gpu};

const DB: &str = "gpuindex_it_device";

fn oracle(keys: &[i64], p: i64) -> i64 {
    keys.partition_point(|&k| k < p) as i64
}

fn random_case(rng: &mut SplitMix64, n: usize, m: usize) -> (Vec<i64>, Vec<i64>) {
    let span = rng.below(4) as u32;
    let draw = |rng: &mut SplitMix64| match span {
        0 => rng.below(100) as i64 - 50,
        1 => rng.below(1 << 20) as i64 - (1 << 19),
        2 => [i64::MIN, i64::MAX, 0, -1, 1][rng.below(5) as usize],
        _ => rng.next_u64() as i64,
    };
    let mut keys: Vec<i64> = (0..n).map(|_| draw(rng)).collect();
    keys.sort_unstable();
    let probes = (0..m).map(|_| draw(rng)).collect();
    (keys, probes)
}

#[test]
fn lower_bound_matches_oracle_on_every_setting() {
    let mut c = connect(DB);
    assert!(!gpu_missing_but_required(&mut c), "GPUINDEX_REQUIRE_GPU=1 but the server has no GPU");
    let gpu = server_has_gpu(&mut c);
    let mut rng = SplitMix64::new(99);
    for (n, m) in [(0, 10), (1, 1), (10, 1000), (1000, 10), (100_000, 50_000), (300_000, 200_000)] {
        let (keys, probes) = random_case(&mut rng, n, m);
        let want: Vec<i64> = probes.iter().map(|&p| oracle(&keys, p)).collect();
        for (setting, min_batch) in [("cpu", 4096), ("auto", 1), ("auto", 4096)] {
            c.batch_execute(&format!("SET gpuindex.device = {setting}; SET gpuindex.gpu_min_batch = {min_batch}")).unwrap();
            let got: Vec<i64> = c.query_one("SELECT gpuindex_lower_bound($1, $2)", &[&keys, &probes]).unwrap().get(0);
            assert_eq!(got, want, "n={n} m={m} device={setting} min_batch={min_batch}");
            let device: String = c.query_one("SELECT device FROM gpuindex_last_batch()", &[]).unwrap().get(0);
            let expect = if setting == "auto" && gpu && m >= min_batch { "gpu" } else { "cpu" };
            assert_eq!(device, expect, "n={n} m={m} device={setting} min_batch={min_batch}");
        }
    }
}

#[test]
fn forcing_the_gpu() {
    let mut c = connect(DB);
    let pid: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    let set = c.batch_execute("SET gpuindex.device = gpu");
    if server_has_gpu(&mut c) {
        set.unwrap();
        let got: Vec<i64> = c.query_one("SELECT gpuindex_lower_bound(ARRAY[1,2,3]::bigint[], ARRAY[0,2,9]::bigint[])", &[]).unwrap().get(0);
        assert_eq!(got, vec![0, 1, 3]);
        let device: String = c.query_one("SELECT device FROM gpuindex_last_batch()", &[]).unwrap().get(0);
        assert_eq!(device, "gpu", "device = gpu must use the GPU even for tiny batches");
    } else {
        let (code, message, hint) = error_of(&set.unwrap_err());
        assert_eq!(code, "22023", "{message}");
        assert!(message.contains("gpuindex.device"), "{message}");
        assert!(hint.unwrap().contains("auto"));
        // auto stays in force and quietly runs on the CPU, saying why.
        let setting: String = c.query_one("SHOW gpuindex.device", &[]).unwrap().get(0);
        assert_eq!(setting, "auto");
        let reason: Option<String> = c.query_one("SELECT reason FROM gpuindex_device_info()", &[]).unwrap().get(0);
        assert!(reason.unwrap().starts_with("no usable GPU"));
        c.batch_execute("SET gpuindex.gpu_min_batch = 1").unwrap();
        c.query_one("SELECT gpuindex_lower_bound(ARRAY[1]::bigint[], ARRAY[1]::bigint[])", &[]).unwrap();
        let row = c.query_one("SELECT device, cpu_reason FROM gpuindex_last_batch()", &[]).unwrap();
        assert_eq!(row.get::<_, String>(0), "cpu");
        assert!(row.get::<_, String>(1).starts_with("no usable GPU"));
    }
    // Errors never cost the session its backend.
    let again: i32 = c.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    assert_eq!(pid, again);
}

#[test]
fn bad_input_is_an_error_with_a_hint() {
    let mut c = connect(DB);
    for (sql, code, needle) in [
        ("SELECT gpuindex_lower_bound(ARRAY[2,1]::bigint[], ARRAY[1]::bigint[])", "22023", "ascending"),
        ("SELECT gpuindex_lower_bound(ARRAY[1,NULL]::bigint[], ARRAY[1]::bigint[])", "22004", "NULL"),
        ("SELECT gpuindex_lower_bound(ARRAY[1]::bigint[], ARRAY[NULL]::bigint[])", "22004", "NULL"),
    ] {
        let (got_code, message, hint) = error_of(&c.query_one(sql, &[]).unwrap_err());
        assert_eq!(got_code, code, "{sql}: {message}");
        assert!(message.contains(needle), "{sql}: {message}");
        assert!(hint.is_some(), "{sql}: no hint");
    }
}

#[test]
fn concurrent_sessions_agree() {
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            std::thread::spawn(move || {
                let mut c = connect(DB);
                let mut rng = SplitMix64::new(1000 + t);
                for _ in 0..5 {
                    let (keys, probes) = random_case(&mut rng, 20_000, 20_000);
                    let want: Vec<i64> = probes.iter().map(|&p| oracle(&keys, p)).collect();
                    let got: Vec<i64> = c.query_one("SELECT gpuindex_lower_bound($1, $2)", &[&keys, &probes]).unwrap().get(0);
                    assert_eq!(got, want);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

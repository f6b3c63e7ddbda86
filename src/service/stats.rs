//! The service's counters, in shared memory since the cluster started
//! (a restarted worker keeps counting), and the SQL functions that read
//! them: `gpuindex_service_stats()` and `gpuindex_service_images()`.
//!
//! Times and epoch sizes go into histograms of four buckets per power of
//! two, so a percentile is known to within 19%.

use super::shmem::{self, DEVICE_CPU, DEVICE_GPU};
use pgrx::prelude::*;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

const BUCKETS: usize = 160;

#[repr(C)]
pub struct Histogram([AtomicU64; BUCKETS]);

impl Histogram {
    pub fn add(&self, value: f64) {
        let b = if value <= 1.0 { 0 } else { ((value.log2() * 4.0) as usize + 1).min(BUCKETS - 1) };
        self.0[b].fetch_add(1, Relaxed);
    }

    /// The value below which `p` of the samples fall (None without
    /// samples): the upper end of the bucket holding that rank.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        let counts: Vec<u64> = self.0.iter().map(|c| c.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((p * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(if b == 0 { 1.0 } else { 2f64.powf(b as f64 / 4.0) });
            }
        }
        None
    }
}

#[repr(C)]
pub struct Stats {
    pub epochs: AtomicU64,
    pub gpu_epochs: AtomicU64,
    pub requests: AtomicU64,
    pub queries: AtomicU64,
    pub loads: AtomicU64,
    pub failed: AtomicU64,
    /// Requests withdrawn by their backend (cancel, timeout, exit) after
    /// the worker took them.
    pub abandoned: AtomicU64,
    /// Requests answered by a restarted worker as lost.
    pub restarted: AtomicU64,
    /// Searches that backends ran themselves under `auto` after asking
    /// (the service failed, timed out, or another backend was loading the
    /// image).
    pub fallbacks: AtomicU64,
    /// Microseconds from post to answer, as the backends saw them.
    pub wait_us: Histogram,
    /// Microseconds an epoch took to run (after it closed).
    pub run_us: Histogram,
    /// Queries per epoch.
    pub epoch_queries: Histogram,
    /// Microseconds of all epochs' runs, and of their searches (GPU or
    /// CPU) within them: against the wall clock, how busy the worker was
    /// and with what.
    pub run_us_total: AtomicU64,
    pub search_us_total: AtomicU64,
    /// Searches that backends kept under `auto` because their own CPU
    /// would answer sooner than the service (`client::worth_asking`).
    pub declined: AtomicU64,
    /// Range answers that outgrew their room and were given from the
    /// worker's keeping when asked again (no second search).
    pub answers_kept: AtomicU64,
    /// The recent round trip of small requests (microseconds, an
    /// exponential average, as f64 bits) and when it was last measured
    /// (a TimestampTz).
    pub recent_wait: AtomicU64,
    pub recent_at: AtomicI64,
}

/// What an idle service's round trip for one query costs beyond its
/// window: the 1-client run of gpuindex-sql-bench-service on the H100
/// host answered in 1.06 ms (p50) with a 200 us window, the query's
/// executor included.
const IDLE_ROUND_TRIP_US: f64 = 800.0;

/// A measured round trip older than this says nothing of the service now.
const RECENT_US: i64 = 1_000_000;

impl Stats {
    /// Notes the round trip of a small request.
    pub fn note_wait(&self, us: f64) {
        let old = f64::from_bits(self.recent_wait.load(Relaxed));
        // (Racing backends may lose each other's samples: an estimate.)
        let new = if old > 0.0 { 0.9 * old + 0.1 * us } else { us };
        self.recent_wait.store(new.to_bits(), Relaxed);
        // SAFETY: reads the clock.
        self.recent_at.store(unsafe { pgrx::pg_sys::GetCurrentTimestamp() }, Relaxed);
    }

    /// The round trip a small request can expect now: the recent one,
    /// or with none in the last second an idle service's.
    pub fn expected_wait_us(&self) -> f64 {
        // SAFETY: reads the clock.
        let now = unsafe { pgrx::pg_sys::GetCurrentTimestamp() };
        let recent = f64::from_bits(self.recent_wait.load(Relaxed));
        if recent > 0.0 && now - self.recent_at.load(Relaxed) < RECENT_US {
            recent
        } else {
            crate::guc::EPOCH_US.get().max(0) as f64 + IDLE_ROUND_TRIP_US
        }
    }
}

fn device_name(d: u32) -> Option<String> {
    match d {
        DEVICE_CPU => Some("cpu".into()),
        DEVICE_GPU => Some("gpu".into()),
        _ => None,
    }
}

#[pg_extern(
    volatile,
    parallel_safe,
    sql = "CREATE FUNCTION gpuindex_service_stats()
    RETURNS TABLE (running boolean, pid int, device text, incarnation int, epochs bigint, gpu_epochs bigint,
                   requests bigint, queries bigint, queries_per_epoch_p50 float8, queries_per_epoch_max float8,
                   wait_us_p50 float8, wait_us_p99 float8, run_us_p50 float8, run_us_p99 float8,
                   loads bigint, failed bigint, abandoned bigint, restarted bigint, fallbacks bigint,
                   images int, image_host_bytes bigint, image_device_bytes bigint, busy_slots int,
                   run_ms_total float8, search_ms_total float8, declined bigint, expected_wait_us float8, answers_kept bigint)
    VOLATILE PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
#[allow(clippy::type_complexity)]
fn gpuindex_service_stats() -> TableIterator<
    'static,
    (
        name!(running, bool),
        name!(pid, Option<i32>),
        name!(device, Option<String>),
        name!(incarnation, i32),
        name!(epochs, i64),
        name!(gpu_epochs, i64),
        name!(requests, i64),
        name!(queries, i64),
        name!(queries_per_epoch_p50, Option<f64>),
        name!(queries_per_epoch_max, Option<f64>),
        name!(wait_us_p50, Option<f64>),
        name!(wait_us_p99, Option<f64>),
        name!(run_us_p50, Option<f64>),
        name!(run_us_p99, Option<f64>),
        name!(loads, i64),
        name!(failed, i64),
        name!(abandoned, i64),
        name!(restarted, i64),
        name!(fallbacks, i64),
        name!(images, i32),
        name!(image_host_bytes, i64),
        name!(image_device_bytes, i64),
        name!(busy_slots, i32),
        name!(run_ms_total, f64),
        name!(search_ms_total, f64),
        name!(declined, i64),
        name!(expected_wait_us, f64),
        name!(answers_kept, i64),
    ),
> {
    let Some(sh) = shmem::shared() else {
        crate::error::raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "the gpuindex GPU service is not loaded",
            "Add gpuindex to shared_preload_libraries and restart the server.",
        );
    };
    let s = &sh.stats;
    let n = |c: &AtomicU64| c.load(Relaxed) as i64;
    let pid = sh.worker_pid.load(Relaxed);
    let images = sh.image_list();
    TableIterator::once((
        sh.running(),
        (pid != 0).then_some(pid),
        device_name(sh.device.load(Relaxed)),
        sh.incarnation.load(Relaxed) as i32,
        n(&s.epochs),
        n(&s.gpu_epochs),
        n(&s.requests),
        n(&s.queries),
        s.epoch_queries.percentile(0.5),
        s.epoch_queries.percentile(1.0),
        s.wait_us.percentile(0.5),
        s.wait_us.percentile(0.99),
        s.run_us.percentile(0.5),
        s.run_us.percentile(0.99),
        n(&s.loads),
        n(&s.failed),
        n(&s.abandoned),
        n(&s.restarted),
        n(&s.fallbacks),
        images.len() as i32,
        images.iter().map(|i| i.host_bytes as i64).sum(),
        images.iter().map(|i| i.device_bytes as i64).sum(),
        sh.slots().iter().filter(|s| s.state.load(Relaxed) != shmem::FREE).count() as i32,
        s.run_us_total.load(Relaxed) as f64 / 1e3,
        s.search_us_total.load(Relaxed) as f64 / 1e3,
        n(&s.declined),
        s.expected_wait_us(),
        n(&s.answers_kept),
    ))
}

#[pg_extern(
    volatile,
    parallel_safe,
    sql = "CREATE FUNCTION gpuindex_service_images()
    RETURNS TABLE (database oid, index oid, generation bigint, host_bytes bigint, device_bytes bigint, queries bigint)
    VOLATILE PARALLEL SAFE LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';"
)]
#[allow(clippy::type_complexity)]
fn gpuindex_service_images() -> TableIterator<
    'static,
    (
        name!(database, pgrx::pg_sys::Oid),
        name!(index, pgrx::pg_sys::Oid),
        name!(generation, i64),
        name!(host_bytes, i64),
        name!(device_bytes, i64),
        name!(queries, i64),
    ),
> {
    let rows = shmem::shared().map(|sh| sh.image_list()).unwrap_or_default();
    TableIterator::new(rows.into_iter().map(|r| {
        (
            pgrx::pg_sys::Oid::from(r.key.database),
            pgrx::pg_sys::Oid::from(r.key.index),
            r.key.generation as i64,
            r.host_bytes as i64,
            r.device_bytes as i64,
            r.queries as i64,
        )
    }))
}

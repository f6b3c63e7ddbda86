//! EXPLAIN ANALYZE names the GPU service: what the statement's searches in
//! this backend asked of it (requests, the epochs that answered them and
//! their sizes, the device, the time from post to answer, fallbacks to
//! the session). An index access method has no hook into EXPLAIN's
//! per-node output, so the line follows the plan's: an
//! `ExplainOneQuery_hook` wraps PostgreSQL's own planning and
//! `ExplainOnePlan`. Text format only: the other formats have closed their
//! Query group by then, and a property after it would break them.

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::ffi::CString;
use std::time::Instant;

/// The service's part in one EXPLAIN ANALYZE.
#[derive(Default)]
struct Tally {
    requests: u64,
    queries: u64,
    /// Sum of the answering epochs' sizes (for their mean).
    epoch_queries: u64,
    epochs: Option<(u64, u64)>,
    on_cpu: u64,
    millis: f64,
    fallbacks: u64,
    /// Requests posted before their answer was wanted (their millis are
    /// the time waited for them after).
    ahead: u64,
}

impl Tally {
    fn describe(&self) -> String {
        let count = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut s = String::new();
        if let Some((first, last)) = self.epochs {
            let epochs = if first == last { format!("epoch {first}") } else { format!("epochs {first}-{last}") };
            s = format!(
                "{}{} of {}, answered in {epochs} ({:.1} queries per epoch) on the {}, {:.3} ms",
                count(self.requests, "request", "requests"),
                if self.ahead > 0 { format!(" ({} posted ahead)", self.ahead) } else { String::new() },
                count(self.queries, "query", "queries"),
                self.epoch_queries as f64 / self.requests as f64,
                match self.on_cpu {
                    0 => "GPU".to_string(),
                    n if n == self.requests => "service's CPU".to_string(),
                    n => format!("GPU ({n} on the service's CPU)"),
                },
                self.millis
            );
        }
        if self.fallbacks > 0 {
            let f = format!("{} searched in the session", count(self.fallbacks, "request", "requests"));
            s = if s.is_empty() { f } else { format!("{s}; {f}") };
        }
        s
    }
}

thread_local! {
    /// Some while an EXPLAIN ANALYZE runs in this backend.
    static TALLY: RefCell<Option<Tally>> = const { RefCell::new(None) };
}

/// Notes a request the service answered (from `batch::record_service`).
pub fn note_answer(queries: usize, epoch: u64, epoch_queries: u32, on_cpu: bool, started: Instant) {
    TALLY.with(|t| {
        if let Some(t) = t.borrow_mut().as_mut() {
            t.requests += 1;
            t.queries += queries as u64;
            t.epoch_queries += epoch_queries as u64;
            t.epochs = Some(t.epochs.map_or((epoch, epoch), |(a, b)| (a.min(epoch), b.max(epoch))));
            t.on_cpu += on_cpu as u64;
            t.millis += started.elapsed().as_secs_f64() * 1e3;
        }
    });
}

/// Notes that the request answered last was posted ahead.
pub fn note_ahead() {
    TALLY.with(|t| {
        if let Some(t) = t.borrow_mut().as_mut() {
            t.ahead += 1;
        }
    });
}

/// Notes a request the session searched itself (`auto`).
pub fn note_fallback() {
    TALLY.with(|t| {
        if let Some(t) = t.borrow_mut().as_mut() {
            t.fallbacks += 1;
        }
    });
}

static mut PREV: pg_sys::ExplainOneQuery_hook_type = None;

/// From `service::register` (preloaded only: the service exists only then).
pub fn install() {
    // SAFETY: _PG_init, once, in the postmaster (backends inherit it).
    unsafe {
        PREV = pg_sys::ExplainOneQuery_hook;
        pg_sys::ExplainOneQuery_hook = Some(explain_one_query);
    }
}

/// Puts back the tally of an enclosing EXPLAIN, also when the statement
/// fails.
struct Restore(Option<Tally>);

impl Drop for Restore {
    fn drop(&mut self) {
        TALLY.with(|t| *t.borrow_mut() = self.0.take());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn explain_one_query(
    query: *mut pg_sys::Query,
    cursor_options: std::ffi::c_int,
    into: *mut pg_sys::IntoClause,
    es: *mut pg_sys::ExplainState,
    query_string: *const std::ffi::c_char,
    params: pg_sys::ParamListInfo,
    query_env: *mut pg_sys::QueryEnvironment,
) {
    // SAFETY: the hook's contract: valid arguments from ExplainOneQuery;
    // the body is PostgreSQL's own ExplainOneQuery (PG 15).
    unsafe {
        let analyze = (*es).analyze;
        let restore = Restore(TALLY.with(|t| t.replace(analyze.then(Tally::default))));
        match PREV {
            Some(prev) => prev(query, cursor_options, into, es, query_string, params, query_env),
            None => {
                let buffers_before = pg_sys::pgBufferUsage;
                let started = Instant::now();
                let plan = pg_sys::pg_plan_query(query, query_string, cursor_options, params);
                let took = started.elapsed();
                let planning = pg_sys::instr_time { tv_sec: took.as_secs() as _, tv_nsec: took.subsec_nanos() as _ };
                let mut buffers = pg_sys::BufferUsage::default();
                if (*es).buffers {
                    pg_sys::BufferUsageAccumDiff(&mut buffers, &raw const pg_sys::pgBufferUsage, &buffers_before);
                }
                let buffers = if (*es).buffers { &raw const buffers } else { std::ptr::null() };
                pg_sys::ExplainOnePlan(plan, into, es, query_string, params, query_env, &planning, buffers);
            }
        }
        let tally = TALLY.with(|t| t.take());
        drop(restore);
        if let Some(t) = tally.filter(|t| t.requests + t.fallbacks > 0) {
            if (*es).format == pg_sys::ExplainFormat::EXPLAIN_FORMAT_TEXT {
                let line = CString::new(t.describe()).unwrap_or_default();
                pg_sys::ExplainPropertyText(c"GPU Service".as_ptr(), line.as_ptr(), es);
            }
        }
    }
}

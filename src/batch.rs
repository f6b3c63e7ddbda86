//! Runs engine batches from a backend: the policy from the GUCs, errors as
//! PostgreSQL ERRORs with hints, the CPU pool with signals blocked, and a
//! record of the last batch for `gpuindex_last_batch()`.

use crate::guc;
use gpuindex_engine::executor::{self, BatchJob, Device, ExecOptions, Policy};
use gpuindex_engine::gpu::{Gpu, GpuError};
use pgrx::prelude::*;
use std::cell::RefCell;
use std::sync::Once;
use std::time::Instant;

/// What the last batch of this session did.
#[derive(Debug, Clone)]
pub struct LastBatch {
    pub what: &'static str,
    pub queries: usize,
    pub device: Device,
    pub cpu_reason: Option<String>,
    pub millis: f64,
    /// The GPU service's epoch that ran it, when it did.
    pub service: Option<String>,
}

thread_local! {
    static LAST: RefCell<Option<LastBatch>> = const { RefCell::new(None) };
}

pub fn last_batch() -> Option<LastBatch> {
    LAST.with(|l| l.borrow().clone())
}

/// False in the postmaster: CUDA state does not survive fork(), so the
/// process that forks every backend must never create any.
pub fn cuda_allowed_here() -> bool {
    // SAFETY: reading process-global flags set at startup.
    unsafe { pg_sys::IsUnderPostmaster || !pg_sys::IsPostmasterEnvironment }
}

/// The rayon pool's threads block every signal, so PostgreSQL's handlers
/// always run on the backend's own thread. Rayon threads never call into
/// PostgreSQL. Each access method's handler calls it (a backend's first
/// step with any gpuindex index), and so do the entry points that may
/// come without one (batches, the service's worker).
pub fn ensure_cpu_pool() {
    static POOL: Once = Once::new();
    POOL.call_once(|| {
        let _ =
            rayon::ThreadPoolBuilder::new().thread_name(|i| format!("gpuindex-cpu-{i}")).start_handler(|_| block_signals()).build_global();
    });
}

/// `v` mapped by `f`, in order: millions on all cores.
pub fn par_map<T: Send, U: Send>(v: Vec<T>, f: impl Fn(T) -> U + Sync + Send) -> Vec<U> {
    use rayon::prelude::*;
    if v.len() < 1 << 16 {
        return v.into_iter().map(f).collect();
    }
    ensure_cpu_pool();
    v.into_par_iter().map(f).collect()
}

/// Blocks every signal on the calling thread (one of gpuindex's own), so
/// that PostgreSQL's handlers run on the backend's or worker's thread.
pub fn block_signals() {
    // SAFETY: plain libc calls on a thread-local signal mask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

/// Records a batch the GPU service ran in epoch `epoch` of
/// `epoch_queries` queries, on its GPU or (`cpu_reason`) its CPU.
pub fn record_service(what: &'static str, queries: usize, cpu_reason: Option<&str>, epoch: u64, epoch_queries: u32, started: Instant) {
    crate::service::explain::note_answer(queries, epoch, epoch_queries, cpu_reason.is_some(), started);
    let batch = LastBatch {
        what,
        queries,
        device: if cpu_reason.is_none() { Device::Gpu } else { Device::Cpu },
        cpu_reason: cpu_reason.map(str::to_string),
        millis: started.elapsed().as_secs_f64() * 1e3,
        service: Some(format!("epoch {epoch} of {epoch_queries} queries")),
    };
    LAST.with(|l| *l.borrow_mut() = Some(batch));
}

/// Raises a GPU failure as an ERROR with its hint.
pub fn raise(e: &GpuError) -> ! {
    let code = match e {
        GpuError::OutOfMemory { .. } => PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY,
        GpuError::Unavailable(_) => PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        _ => PgSqlErrorCode::ERRCODE_EXTERNAL_ROUTINE_EXCEPTION,
    };
    crate::error::raise(code, format!("gpuindex: {e}"), e.hint())
}

/// Runs `job` over `queries` on the device the GUCs pick.
pub fn submit<J: BatchJob>(what: &'static str, job: &J, queries: &[J::Query]) -> Vec<J::Output> {
    run(what, queries.len(), || job.run_cpu(queries), |g| job.run_gpu(g, queries))
}

/// Runs a computation over `size` items on the device the GUCs pick (see
/// `executor::run`), recording it for `gpuindex_last_batch()`.
pub fn run<T>(what: &'static str, size: usize, on_cpu: impl FnOnce() -> T, on_gpu: impl FnOnce(&Gpu) -> Result<T, GpuError>) -> T {
    ensure_cpu_pool();
    let policy = match guc::policy() {
        _ if !cuda_allowed_here() => Policy::Cpu,
        // A parallel worker lives for one query: a CUDA context, the
        // kernels' compilation and the image's upload would cost it more
        // than its share of a batch saves. `gpu` still means the GPU.
        // SAFETY: a process-global set when a parallel worker starts.
        Policy::Auto if unsafe { pg_sys::ParallelWorkerNumber } >= 0 => Policy::Cpu,
        p => p,
    };
    let opts = ExecOptions { policy, min_gpu_batch: guc::GPU_MIN_BATCH.get() as usize };
    let started = Instant::now();
    match executor::run(&opts, size, on_cpu, on_gpu) {
        Ok(ran) => {
            LAST.with(|l| {
                *l.borrow_mut() = Some(LastBatch {
                    what,
                    queries: size,
                    device: ran.device,
                    cpu_reason: ran.cpu_reason,
                    millis: started.elapsed().as_secs_f64() * 1e3,
                    service: None,
                })
            });
            ran.output
        }
        Err(e) => raise(&e),
    }
}

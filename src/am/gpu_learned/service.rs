//! gpu_learned's batches through the GPU service: the service holds a
//! copy of the run's model (the PGM segments; `Served::Learned`) and
//! answers a batch of keys with their predicted positions, which this
//! backend checks against the run's pages as it checks its own (a
//! prediction is a hint: `Run::lower_bound` moves as far as it must). The
//! image is keyed by the run's generation, which every merge changes.
//! The delta (a gpu_btree tree that merges rewrite under the same
//! counters) is searched here.

use super::run::Run;
use crate::am::gpu_btree::service::{code_words, CODE_WORDS};
use crate::service::{client, images};
use gpuindex_engine::gpu::{Gpu, GpuError, Schedule};
use gpuindex_engine::pgm::gpu::{predict_gpu, DevicePgm};
use gpuindex_engine::pgm::Pgm;
use pgrx::pg_sys;
use std::sync::OnceLock;

/// Microseconds a prediction costs this backend on all cores, and on the
/// service's GPU with transfers: 2e8 and 2.4e9 lookups/s over 10^7 keys
/// (docs/bench/pgm-h100.md: PGM lower bounds on all cores, the GPU end to
/// end; a prediction alone costs the CPU less). The session holds the
/// model already (it reads the run's pages): no copy to count, and the
/// trip (`client::TRIP_US_PER_ROW`) costs a key more than either search,
/// so `auto` keeps predictions in the session; `on` sends them.
const SESSION_US_PER_KEY: f64 = 1.0 / 200.0;
const SERVICE_US_PER_KEY: f64 = 1.0 / 2400.0;

/// The predicted positions of the ascending `keys` in `run` from the
/// service, or None where this backend predicts them itself.
pub fn predictions(rel: pg_sys::Relation, run: &Run, keys: &[u64], what: &'static str) -> Option<Vec<u64>> {
    let n = keys.len() as f64;
    let key = client::worth_asking(rel, run.meta.generation, 0, n * SESSION_US_PER_KEY, n * SERVICE_US_PER_KEY, n)?;
    let words: Vec<f32> = keys.iter().flat_map(|&k| code_words(k)).collect();
    let rows = client::range(key, CODE_WORDS, &words, &|path| images::write_learned(path, &run.pgm), what)?;
    (rows.ids.len() == keys.len() && rows.start.windows(2).all(|w| w[1] - w[0] == 1)).then_some(rows.ids)
}

/// The service's copy of a run's model, and its device copy.
pub struct Model {
    pub pgm: Pgm,
    device: OnceLock<DevicePgm>,
}

impl Model {
    pub fn new(pgm: Pgm) -> Model {
        Model { pgm, device: OnceLock::new() }
    }

    pub fn host_bytes(&self) -> usize {
        self.pgm.bytes()
    }

    pub fn device_bytes(&self) -> usize {
        self.device.get().map_or(0, |d| d.bytes())
    }

    /// The model on `gpu`, uploaded at the first call.
    pub fn device(&self, gpu: &Gpu) -> Result<&DevicePgm, GpuError> {
        if let Some(d) = self.device.get() {
            return Ok(d);
        }
        let d = DevicePgm::upload(gpu, &self.pgm, None)?;
        Ok(self.device.get_or_init(|| d))
    }

    /// Each key's predicted position on all cores.
    pub fn predict_cpu(&self, keys: &[u64]) -> Vec<u64> {
        use rayon::prelude::*;
        keys.par_iter().with_min_len(4096).map(|&q| self.pgm.predict_position(q) as u64).collect()
    }

    /// The same on `gpu`.
    pub fn predict_gpu(&self, gpu: &Gpu, keys: &[u64]) -> Result<Vec<u64>, GpuError> {
        let mut out = vec![0; keys.len()];
        predict_gpu(gpu, &self.pgm, self.device(gpu)?, keys, &mut out, Schedule::default())?;
        Ok(out)
    }
}

//! gpu_metric's batch search (`common::search`, for `gpuindex_search` and
//! `gpuindex_nearest`): balls of the index's distance (`<@`), each with its
//! own radius, and the k nearest rows of `real[]` queries by the index's
//! distance operator; the same searches as `gpu_metric_within` and
//! `gpu_metric_knn`.

use super::ball::{self, Ball};
use super::functions::{knn, within, Call};
use super::{shape, vector};
use crate::am::common::search::{self, Ask, Batch, BatchSearch, Hits};
use crate::am::common::OpenIndex;
use gpuindex_engine::gts::{float4, Metric};
use pgrx::pg_sys;

const HINT: &str = "gpu_metric batches answer v <@ the ball of the index's distance, and the k nearest by its distance operator.";

impl BatchSearch for super::GpuMetric {
    const NAME: &'static str = "gpu_metric";

    fn search(open: &OpenIndex, batch: &Batch) -> Result<Hits, search::TooMany> {
        let m = shape::meta(open.index);
        let metric = shape::metric(&m);
        let form = vector::Form::of(open.index);
        let (strategy, k) = match batch.ask {
            Ask::Matches(s) => (s, None),
            Ask::Nearest { strategy, k } => (strategy, Some(k)),
        };
        if !(strategy == ball::STRATEGY && k.is_none() || strategy as u32 == m.metric && k.is_some()) {
            search::unsupported("gpu_metric", batch.ask.to_string(), HINT);
        }
        // (The query type is the operator's right type: checked by the caller.)
        let mut queries = Vec::new();
        let mut radii = Vec::new();
        for &(_, d) in batch.queries {
            queries.push(if k.is_some() {
                // SAFETY: a non-NULL value of the ordering operator's type.
                unsafe { vector::value(d, form, metric) }
            } else {
                // SAFETY: a non-NULL ball of the operator class's ball type.
                let b = unsafe { Ball::read(d, metric) };
                radii.push(b.radius);
                b.center.into()
            });
        }
        let mut hits = Hits { rows: Vec::new(), distances: k.map(|_| Vec::new()) };
        let Some(call) = Call::new(open, queries) else { return Ok(hits) };
        let rows = match k {
            Some(k) => knn(&call, k, batch.what)?,
            None => within(&call, &radii, batch.what)?,
        };
        for (&(ord, _), rows) in batch.queries.iter().zip(rows) {
            for (ctid, d) in rows {
                hits.rows.push((ord, ctid));
                if let Some(ds) = hits.distances.as_mut() {
                    ds.push(d);
                }
            }
        }
        Ok(hits)
    }

    fn joins(strategy: u16) -> bool {
        strategy == ball::STRATEGY
    }

    /// Each operator class's ordering operator has its metric's strategy
    /// (the batch checks it against the index's).
    fn nearest(strategy: u16) -> bool {
        gpuindex_engine::gts::Metric::from_code(strategy as u8).is_some()
    }

    /// Every page of the index read once (the tree's rows into this
    /// backend's copy), unless it holds a copy or a GPU service would
    /// answer: gpu_spatial's rule.
    fn load_cost(index: pg_sys::Relation, here: bool) -> f64 {
        if crate::service::client::may_answer() || (here && super::image::held(index)) {
            return 0.0;
        }
        // SAFETY: an open index's relcache entry; a cost GUC.
        unsafe { (*(*index).rd_rel).relpages as f64 * pg_sys::seq_page_cost }
    }

    /// pgvector's operators sum in float4: `float4::lower_bound` of the
    /// batch's distance (index scans return the same bound).
    fn order_bound(index: pg_sys::Relation, query: pg_sys::Datum, d: f64) -> Option<f64> {
        if vector::Form::of(index) != vector::Form::PgVector {
            return None;
        }
        let metric = shape::metric(&shape::meta(index));
        // SAFETY: a non-NULL query of the index's type (the join's key).
        let q = unsafe { super::pgvector::elements(query) };
        let safe = metric != Metric::Cosine || float4::cosine_safe(q);
        Some(float4::lower_bound(metric, q.len(), d, safe))
    }
}

//! The index access methods, one folder each.

pub mod common;
pub mod gpu_btree;
pub mod gpu_metric;
pub mod gpu_spatial;

use common::search::{entry, SearchFn};

/// The access methods that answer batch searches (`common::search`).
pub const SEARCHABLE: &[(&str, SearchFn)] =
    &[entry::<gpu_btree::GpuBtree>(), entry::<gpu_spatial::GpuSpatial>(), entry::<gpu_metric::GpuMetric>()];

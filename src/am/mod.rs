//! The index access methods, one folder each.

pub mod common;
pub mod gpu_art;
pub mod gpu_btree;
pub mod gpu_learned;
pub mod gpu_metric;
pub mod gpu_spatial;

use common::search::{entry, Searcher};

/// The access methods that answer batch searches (`common::search`).
pub const SEARCHABLE: &[Searcher] = &[
    entry::<gpu_btree::GpuBtree>(),
    entry::<gpu_learned::GpuLearned>(),
    entry::<gpu_spatial::GpuSpatial>(),
    entry::<gpu_metric::GpuMetric>(),
    entry::<gpu_art::GpuArt>(),
];

//! The index access methods, one folder each.

pub mod gpu_btree;
pub mod gpu_spatial;
